"""Rewrite the README's usage block from the real `fr-analyze --help` (80 columns)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"<!-- usage:start -->\n```\n(.*?)\n```\n<!-- usage:end -->", re.S)


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


def main() -> None:
    block = f"<!-- usage:start -->\n```\n{help_text()}\n```\n<!-- usage:end -->"
    README.write_text(BLOCK.sub(lambda _: block, README.read_text()))


if __name__ == "__main__":
    main()
