"""The README and docs/: the generated blocks (the usage block in docs/cli.md is the real
`--help` output, the table of limits in docs/limits.md is `fr_analyzer/load/safety/limits.py`), the
README kept short and for users, and every link between the pages leading somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from fr_analyzer.cli import app
from fr_analyzer.load.safety.limits import limit_names
from tools.sync_readme_usage import (
    BLOCK,
    LIMITS_BLOCK,
    help_text,
    limits_table,
    page_with,
    pages,
    readme_limits,
    readme_usage,
)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SYNC = "run: .venv/bin/python tools/sync_readme_usage.py"
_LINK = re.compile(r"\]\(([^)\s]+)\)")
# Pictures another change produces (the HTML report's screenshots); a link to one is checked
# once it exists.
NOT_YET = {"docs/img/report-16.png", "docs/img/report-1024.png"}


def test_usage_block_matches_help() -> None:
    assert page_with(BLOCK) == DOCS / "cli.md"
    assert readme_usage() == help_text(), SYNC


def test_limits_table_is_the_limits_module() -> None:
    assert page_with(LIMITS_BLOCK) == DOCS / "limits.md"
    assert readme_limits() == limits_table(), SYNC
    assert [row.split("`")[1] for row in limits_table().splitlines()[2:]] == list(limit_names())


def test_readme_gives_exactly_the_two_setup_commands() -> None:
    text = README.read_text()
    quick_start = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make \w+)", quick_start, re.M)
    assert commands == ["make run", "make test"]


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_readme_shows_the_html_report_at_16_and_1024_ranks() -> None:
    links = _LINK.findall(README.read_text())
    assert "docs/img/report-16.png" in links
    assert "docs/img/report-1024.png" in links


def test_readme_links_every_docs_page() -> None:
    linked = {link for link in _LINK.findall(README.read_text()) if link.startswith("docs/")}
    assert {f"docs/{page.name}" for page in DOCS.glob("*.md")} <= linked


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    for link in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", link):
            continue  # a URL, not this repository's
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if str(target.relative_to(ROOT)) in NOT_YET:
            continue
        assert target.exists(), f"{page.name}: {link} leads nowhere"
        if anchor:
            assert anchor in _anchors(target), f"{page.name}: {link}: no such heading"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to -."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_command_and_option_has_help_text() -> None:
    command = typer.main.get_command(app)
    assert command.help
    for param in command.params:
        assert getattr(param, "help", None), f"{param.name} has no help text"
