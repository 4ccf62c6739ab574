"""Rewrite the documentation's generated blocks: the usage block from the real
`fr-analyze --help` (80 columns), and the table of limits from `fr_analyzer/load/safety/limits.py`
(each field of `Limits`, its default as written there, and its docstring).

Each block sits between its markers (`<!-- usage:start -->` ... `<!-- usage:end -->`,
`<!-- limits:start -->` ... `<!-- limits:end -->`) in exactly one of README.md and docs/*.md
(today docs/cli.md and docs/limits.md); the block is found wherever its markers are, so a page
can move without this tool changing.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
BLOCK = re.compile(r"<!-- usage:start -->\n```\n(.*?)\n```\n<!-- usage:end -->", re.S)
LIMITS_SOURCE = ROOT / "fr_analyzer" / "load" / "safety" / "limits.py"
LIMITS_BLOCK = re.compile(r"<!-- limits:start -->\n(.*?)\n<!-- limits:end -->", re.S)


def pages() -> list[Path]:
    """The documentation pages a generated block may live in: the README, then docs/*.md."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_with(block: re.Pattern[str]) -> Path:
    """The one page that holds `block`; an error when none or several do."""
    found = [page for page in pages() if block.search(page.read_text())]
    if len(found) != 1:
        where = ", ".join(str(p.relative_to(ROOT)) for p in found) or "no page"
        raise LookupError(f"{block.pattern[:24]}... must be in exactly one page, found in {where}")
    return found[0]


def help_text() -> str:
    """`fr-analyze --help` as an 80-column terminal shows it."""
    env = dict(os.environ, COLUMNS="80")
    return subprocess.run(
        [sys.executable, "-m", "fr_analyzer", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.rstrip()


def _current(block: re.Pattern[str]) -> str | None:
    try:
        page = page_with(block)
    except LookupError:
        return None
    found = block.search(page.read_text())
    return found.group(1).rstrip() if found else None


def readme_usage() -> str | None:
    """The usage block currently in the documentation (docs/cli.md)."""
    return _current(BLOCK)


def limits_table() -> str:
    """The table of limits: one row per field of `Limits`, in order."""
    source = LIMITS_SOURCE.read_text()
    table = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "Limits"
    )
    rows = ["| limit | default | what it bounds |", "|---|---|---|"]
    body = table.body
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        after = body[i + 1] if i + 1 < len(body) else None
        text = ""
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            text = " ".join(str(after.value.value).split())
        default = ast.get_source_segment(source, node.value) if node.value else ""
        rows.append(f"| `{node.target.id}` | `{default}` | {text} |")
    return "\n".join(rows)


def readme_limits() -> str | None:
    """The table of limits currently in the documentation (docs/limits.md)."""
    return _current(LIMITS_BLOCK)


def _rewrite(block: re.Pattern[str], render: Callable[[], str]) -> Path:
    page = page_with(block)
    page.write_text(block.sub(lambda _: render(), page.read_text()))
    return page


def main() -> int:
    """Rewrite the docs' usage block from `fr-analyze --help` and limits block from `Limits`;
    returns 1 when a block is missing."""
    usage = help_text()
    limits = limits_table()
    try:
        for page in (
            _rewrite(BLOCK, lambda: f"<!-- usage:start -->\n```\n{usage}\n```\n<!-- usage:end -->"),
            _rewrite(LIMITS_BLOCK, lambda: f"<!-- limits:start -->\n{limits}\n<!-- limits:end -->"),
        ):
            print(f"rewrote {page.relative_to(ROOT)}")
    except LookupError as error:
        print(f"sync_readme_usage: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
