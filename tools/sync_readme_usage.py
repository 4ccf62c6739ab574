"""Rewrite the README's usage block from the real `fr-analyze --help` (80 columns)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def main() -> None:
    env = dict(os.environ, COLUMNS="80")
    help_text = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.rstrip()
    text = README.read_text()
    block = f"<!-- usage:start -->\n```\n{help_text}\n```\n<!-- usage:end -->"
    README.write_text(
        re.sub(r"<!-- usage:start -->.*?<!-- usage:end -->", lambda _: block, text, flags=re.S)
    )


if __name__ == "__main__":
    main()
