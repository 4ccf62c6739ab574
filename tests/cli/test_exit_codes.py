"""Exit codes (issue 48, item 7): `timeline` follows the analysis' status as the main command
does, and docs/cli.md holds every command's exit codes in one table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from fr_analyzer import cli
from fr_analyzer.cli import EXIT_FINDINGS, EXIT_OK, app

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"


@pytest.mark.parametrize(
    ("name", "code"), [("nccl_healthy", EXIT_OK), ("nccl_not_joined", EXIT_FINDINGS)]
)
def test_timeline_exits_with_the_analysis_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, code: int
) -> None:
    """GIVEN a healthy and a hung dump set WHEN drawn as a timeline THEN the trace is written
    and the exit code is the main command's: 0 for ok, 1 for the hang."""
    out = tmp_path / "tl.json"
    assert cli.run(["timeline", "-d", str(SAMPLES / name), "--workers", "1", "-o", str(out)]) == (
        code
    )
    assert out.stat().st_size > 0
    assert cli.run(["-d", str(SAMPLES / name), "--workers", "1", "-q"]) == code


def test_a_timeline_that_cannot_be_written_keeps_the_hangs_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a hung job WHEN the trace fails to write after the analysis THEN an error line,
    and the code stays 1: a hang is never hidden behind a 2."""
    from fr_analyzer.errors import OutputError
    from fr_analyzer.render import timeline

    def full_disk(*_: object) -> None:
        raise OutputError("tl.json: cannot write: No space left on device")

    monkeypatch.setattr(timeline, "write_atomic", full_disk)
    out = str(tmp_path / "tl.json")
    code = cli.run(["timeline", "-d", str(SAMPLES / "nccl_not_joined"), "-o", out])
    assert code == EXIT_FINDINGS
    assert "fr-analyze: error: tl.json: cannot write" in capsys.readouterr().err


def test_docs_cli_holds_every_commands_exit_codes_in_one_table() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## Exit codes", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| `fr-analyze")]
    named = {re.match(r"\| `fr-analyze ([^\s`]+)", row)[1] for row in rows}  # type: ignore[index]
    commands = set(typer.main.get_group(app).commands)
    assert commands <= named, commands - named
    assert "-d" in named  # the main command
    assert section.count("| command | 0 | 1 | 2 | 3 |") == 1
