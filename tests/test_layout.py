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


def imported(module: str) -> set[str]:
    """The package modules `fr_analyzer/<module>.py` imports, at any depth of its code."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
    return found


def test_no_renderer_imports_another() -> None:
    for module in sorted(RENDERERS):
        others = imported(module) & (RENDERERS - {module})
        assert not others, f"{module} imports {sorted(others)}"


def test_the_core_imports_no_renderer_and_no_shared_presentation() -> None:
    core = {p.stem for p in PACKAGE.glob("*.py")} - RENDERERS - SHARED - FRONT
    assert core, "no core modules found"
    for module in sorted(core):
        wrong = imported(module) & (RENDERERS | SHARED)
        assert not wrong, f"{module} (core) imports {sorted(wrong)}"
