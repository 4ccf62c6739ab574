"""The commands the report prints under "Next steps" run as printed: each one, for a hung job,
a desync and a straggler, exits with the verdict's code or 0 and writes what it says."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"


def printed_steps(name: str, cwd: Path) -> list[list[str]]:
    """The runnable next steps of sample set `name`, as argv lists, from the JSON report; the
    text report prints the same commands with `-v` (by default, the first one only: the last
    lines on the screen)."""
    report = cwd / "report.json"
    command = [sys.executable, "-m", "fr_analyzer", "-d", str(SAMPLES / name)]
    short = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)
    done = subprocess.run(
        [*command, "-v", "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert done.returncode in (0, 1), done.stderr
    steps = json.loads(report.read_text())["next_steps"]
    for step in steps:
        assert step["command"] in done.stdout.replace(" \\\n      ", " "), step["command"]
    assert steps[0]["command"] in short.stdout.replace(" \\\n      ", " ")
    return [shlex.split(s["command"]) for s in steps if s["runnable"]]


@pytest.mark.parametrize(
    ("name", "verdict_code"),
    [("nccl3d_cascade_scheduled", 1), ("gloo3d_dp_dtype_mismatch", 1), ("gloo3d_straggler", 1)],
)
def test_every_printed_next_step_runs(name: str, verdict_code: int, tmp_path: Path) -> None:
    steps = printed_steps(name, tmp_path)
    assert 2 <= len(steps) <= 4
    for argv in steps:
        assert argv[0] == "fr-analyze"
        done = subprocess.run(
            [sys.executable, "-m", "fr_analyzer", *argv[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode in (0, verdict_code), (argv, done.stderr)
        if "-o" in argv:
            assert (tmp_path / argv[argv.index("-o") + 1]).stat().st_size > 0
        if "--html" in argv:
            assert (tmp_path / argv[argv.index("--html") + 1]).read_text().startswith("<!")
        if "-j" in argv:
            assert "rank" in done.stdout
