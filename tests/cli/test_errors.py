"""The command line a person expects (issue 48, item 4): one error format everywhere
(`fr-analyze: error: ...` then `hint: ...`, exit 2), a mistyped option answered with the one
meant, contradicting flags refused, ranks out of the job named with the job's ranks, `--help`
in sections with the common options first, and commands that point to the one meant."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fr_analyzer import cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
HUNG = SAMPLES / "nccl3d_cascade_started"  # 16 ranks


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    """Run `fr-analyze *args`: exit 2, nothing on stdout, and on stderr exactly the error
    line and the hint line. Returns both, without their prefixes."""
    capsys.readouterr()
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("fr-analyze: error: "), err
    assert lines[1].startswith("hint: "), err
    return lines[0].removeprefix("fr-analyze: error: "), lines[1].removeprefix("hint: ")


# --- one format ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["-d", "/no/such/dir"],  # the package's errors
        [],
        ["-d", str(HUNG), "-o", "x.json"],
        ["--mismatch-cap", "0", "-d", str(HUNG)],  # click's usage errors
        ["timeline", "-d", str(HUNG)],
        ["live"],
        ["timline", "-d", str(HUNG)],  # a word that is no command
    ],
)
def test_every_error_is_one_line_then_a_hint(
    capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    refused(capsys, *args)


# --- a mistyped option ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "typo", "meant"),
    [
        (["-d", "DUMPS", "--jsn", "x.json"], "--jsn", "--json"),  # value-taking, main command
        (["-d", "DUMPS", "-j", "--selected-rank", "3"], "--selected-rank", "--selected-ranks"),
        (["-d", "DUMPS", "--verbos"], "--verbos", "--verbose"),
        (
            ["timeline", "-d", "DUMPS", "--selectd-ranks", "3", "-o", "tl.json"],
            "--selectd-ranks",
            "--selected-ranks",
        ),
    ],
)
def test_a_mistyped_option_names_the_option_meant(
    capsys: pytest.CaptureFixture[str], args: list[str], typo: str, meant: str
) -> None:
    """GIVEN `--jsn x.json` WHEN run THEN the error names the flag (not `x.json` as a dump
    directory) and the hint the option meant."""
    message, hint = refused(capsys, *[str(HUNG) if a == "DUMPS" else a for a in args])
    assert message == f"no such option: {typo}"
    assert hint.startswith("did you mean ")
    assert meant in hint.split("?")[0].removeprefix("did you mean ").split(" or ")


# --- flags that contradict each other ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-j", "--last", "3", "--all-entries"], "--last 3 and --all-entries contradict"),
        (["-q", "-v"], "-q and -v contradict"),
        (["-q", "--ranks"], "-q and --ranks contradict"),
        (["-q", "-j"], "-q and -j contradict"),
    ],
)
def test_contradicting_flags_are_refused(
    capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    message, _ = refused(capsys, "-d", str(HUNG), *args)
    assert words in message


# --- ranks out of the job ------------------------------------------------------------------


@pytest.mark.parametrize("command", [["-j"], ["timeline", "-o", "TL"]])
def test_selected_ranks_out_of_the_job_name_the_jobs_ranks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    """GIVEN a 16-rank job WHEN --selected-ranks 99 THEN the error says the job's ranks are
    0-15, rather than that no entries match."""
    args = [str(tmp_path / "tl.json") if a == "TL" else a for a in command]
    if args[0] == "timeline":
        args = ["timeline", "-d", str(HUNG), *args[1:]]
    else:
        args = ["-d", str(HUNG), *args]
    message, hint = refused(capsys, *args, "--selected-ranks", "99", "--workers", "1")
    assert message == "--selected-ranks 99: no such rank in this job (this job's ranks are 0-15)"
    assert "0 to 15" in hint


def test_selected_ranks_partly_out_of_the_job_are_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capsys.readouterr()
    code = cli.run(["-d", str(HUNG), "-j", "--selected-ranks", "14-20", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 1
    assert "warning: --selected-ranks: 16-20 not in this job (this job's ranks are 0-15)" in err


# --- commands that point to each other -----------------------------------------------------


def test_live_on_a_folder_points_to_d(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN `live s16` where s16 is a folder of dumps WHEN run THEN no request to
    http://s16: the hint says to run fr-analyze -d s16."""
    monkeypatch.chdir(SAMPLES)
    message, hint = refused(capsys, "live", "nccl3d_cascade_started")
    assert message == "nccl3d_cascade_started: a folder or file, not a running job's URL"
    assert hint == "to analyze dumps already taken, run: fr-analyze -d nccl3d_cascade_started"


@pytest.mark.parametrize("name", ["nccl3d_cascade_started", "nccl_op_mismatch_json"])
def test_merge_traces_on_a_dump_folder_points_to_timeline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    """GIVEN a folder of Flight Recorder dumps (pickles, or JSON that is no Chrome trace)
    WHEN given to merge-traces THEN the hint is the timeline command that draws them."""
    out = tmp_path / "m.json"
    message, hint = refused(capsys, "merge-traces", "-o", str(out), str(SAMPLES / name))
    assert "holds Flight Recorder dumps, not profiler traces" in message
    assert f"fr-analyze timeline -d {SAMPLES / name} -o {out}" in hint
    assert not out.exists()


# --- --help --------------------------------------------------------------------------------


def test_help_lists_the_common_options_and_the_commands_first() -> None:
    env = dict(os.environ, COLUMNS="80")
    text = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=ROOT,
    ).stdout
    titles = [line for line in text.splitlines() if line and line[0].isupper()]
    assert titles[1:4] == ["Options:", "Commands:", "Entries side by side (-j):"], titles
    common = text.split("Options:", 1)[1].split("Commands:", 1)[0]
    for flag in ("--dump-dir", "--json", "--html", "--out-dir", "--quiet", "--verbose", "-j,"):
        assert flag in common, flag
    for flag in ("--stall-ms", "--workers", "--around-root", "--mismatch-cap"):
        listed = re.compile(rf"^  (-\w, )?{flag}\b", re.M)
        assert not listed.search(common), flag
        assert listed.search(text), flag
