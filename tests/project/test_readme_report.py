"""The README's claims about the text report are what the report does (issue 48, item 1): the
example under "Reading the report" is the real output of the command it names, at 80 columns;
the line counts it promises are the renderer's own limits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fr_analyzer import cli
from fr_analyzer.render import report

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def reading_the_report() -> str:
    """The README's section "Reading the report"."""
    return README.read_text().split("## Reading the report", 1)[1].split("\n## ", 1)[0]


def test_the_readme_example_is_the_real_report(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN the README's example report WHEN the command it names runs in a pipe (80 columns)
    THEN it prints that example, character for character."""
    section = reading_the_report()
    sample = re.search(r"On `(sample_dumps/\w+)`:", section)
    example = re.search(r"```\n(.*?)\n```", section, re.S)
    assert sample is not None and example is not None
    monkeypatch.chdir(ROOT)
    for name in ("COLUMNS", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    code = cli.run(["-d", sample[1], "--ignore-file-times", "--workers", "1"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.rstrip("\n") == example[1], "update the README's example from this output"


def test_the_readme_promises_the_renderers_limits() -> None:
    section = " ".join(reading_the_report().split())
    assert f"At most {report.REPORT_LINES} lines at any job size" in section
    assert "an 80x24 terminal keeps all of it" in section
    assert (
        report.QUIET_LINES == 3 and "**`-q`** prints the answer alone, in one to three" in section
    )


def test_the_readme_example_ends_with_the_answer_and_the_next_command() -> None:
    example = re.search(r"```\n(.*?)\n```", reading_the_report(), re.S)
    assert example is not None
    lines = example[1].splitlines()
    assert len(lines) <= report.REPORT_LINES
    assert lines[0].startswith("HUNG. rank 5 ")
    assert lines[-3] == "HUNG: rank 5 at all_reduce #15 in group '2' (tp)"
    assert lines[-1].split() == [
        "fr-analyze",
        "-d",
        "sample_dumps/nccl3d_cascade_started",
        "-j",
        "--around-root",
    ]
