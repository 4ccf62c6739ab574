"""The README's generated blocks: the usage block is the real `--help` output, and the table
of limits is `fr_analyzer/dumps/limits.py`."""

from __future__ import annotations

from pathlib import Path

import typer

from fr_analyzer.cli import app
from fr_analyzer.dumps.limits import limit_names
from tools.sync_readme_usage import help_text, limits_table, readme_limits, readme_usage

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_usage_block_matches_help() -> None:
    assert readme_usage() == help_text(), "run: .venv/bin/python tools/sync_readme_usage.py"


def test_readme_limits_table_is_the_limits_module() -> None:
    assert readme_limits() == limits_table(), "run: .venv/bin/python tools/sync_readme_usage.py"
    assert [row.split("`")[1] for row in limits_table().splitlines()[2:]] == list(limit_names())


def test_readme_gives_exactly_the_two_setup_commands() -> None:
    text = README.read_text()
    assert "make run" in text and "make test" in text


def test_every_command_and_option_has_help_text() -> None:
    command = typer.main.get_command(app)
    assert command.help
    for param in command.params:
        assert getattr(param, "help", None), f"{param.name} has no help text"
