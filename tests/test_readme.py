"""The README's usage block is the real `--help` output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import typer

from fr_analyzer.cli import app

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_usage_block_matches_help() -> None:
    env = dict(os.environ, COLUMNS="80")
    result = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    block = re.search(
        r"<!-- usage:start -->\n```\n(.*?)\n```\n<!-- usage:end -->", README.read_text(), re.S
    )
    assert block is not None
    assert block.group(1).rstrip() == result.stdout.rstrip()


def test_readme_gives_exactly_the_two_setup_commands() -> None:
    text = README.read_text()
    assert "make run" in text and "make test" in text


def test_every_command_and_option_has_help_text() -> None:
    command = typer.main.get_command(app)
    assert command.help
    for param in command.params:
        assert getattr(param, "help", None), f"{param.name} has no help text"
