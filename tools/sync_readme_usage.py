"""Rewrite the README's generated blocks: the usage block from the real `fr-analyze --help`
(80 columns), and the table of limits from `fr_analyzer/dumps/limits.py` (each field of
`Limits`, its default as written there, and its docstring)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"<!-- usage:start -->\n```\n(.*?)\n```\n<!-- usage:end -->", re.S)
LIMITS_SOURCE = README.parent / "fr_analyzer" / "dumps" / "limits.py"
LIMITS_BLOCK = re.compile(r"<!-- limits:start -->\n(.*?)\n<!-- limits:end -->", re.S)


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


def readme_usage() -> str | None:
    """The usage block currently in the README."""
    found = BLOCK.search(README.read_text())
    return found.group(1).rstrip() if found else None


def limits_table() -> str:
    """The README's table of limits: one row per field of `Limits`, in order."""
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
    """The table of limits currently in the README."""
    found = LIMITS_BLOCK.search(README.read_text())
    return found.group(1).rstrip() if found else None


def main() -> None:
    block = f"<!-- usage:start -->\n```\n{help_text()}\n```\n<!-- usage:end -->"
    text = BLOCK.sub(lambda _: block, README.read_text())
    limits = f"<!-- limits:start -->\n{limits_table()}\n<!-- limits:end -->"
    README.write_text(LIMITS_BLOCK.sub(lambda _: limits, text))


if __name__ == "__main__":
    main()
