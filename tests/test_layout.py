"""The layout: renderers side by side. Each output (text, JSON, HTML, entries, timeline,
profiler traces, the pickle, SQLite and Parquet databases) renders the one `Conclusion` and
imports none of the others; what they share lives in `presentation` (sentences, records, next
steps) and `tables` (the database's one schema). The core never imports a renderer."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fr_analyzer"
RENDERERS = {
    "report",
    "report_json",
    "report_html",
    "entries_view",
    "timeline",
    "traces",
    "database",
    "database_sqlite",
    "database_parquet",
}
SHARED = {"presentation", "tables", "chrome"}
FRONT = {"cli", "cli_compat", "__main__", "__init__", "live"}


def imported(path: Path) -> set[str]:
    """The package's top-level modules and subpackages the file at `path` imports, at any
    depth of its code (`from .x import` in a top-level module, `from ..x import` in a
    subpackage's)."""
    depth = len(path.relative_to(PACKAGE).parts)  # 1: a top-level module, 2: in a subpackage
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == depth:
            if node.module is None:
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
    return found


def top_level(name: str) -> str:
    """The top-level module or subpackage a file of the package belongs to."""
    return Path(name).parts[0].removesuffix(".py")


def test_no_renderer_imports_another() -> None:
    for module in sorted(RENDERERS):
        others = imported(PACKAGE / f"{module}.py") & (RENDERERS - {module})
        assert not others, f"{module} imports {sorted(others)}"


def test_the_core_imports_no_renderer_and_no_shared_presentation() -> None:
    core = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if top_level(str(path.relative_to(PACKAGE))) not in RENDERERS | SHARED | FRONT
    ]
    assert any(p.parent.name == "diagnosis" for p in core), "the diagnosis package is core"
    for path in core:
        wrong = imported(path) & (RENDERERS | SHARED)
        assert not wrong, f"{path.relative_to(PACKAGE)} (core) imports {sorted(wrong)}"
