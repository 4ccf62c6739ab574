"""Real gloo jobs dumped with stack traces (`tests/data/dating/`): a file is written seconds
after its snapshot, so its time bounds the snapshot from above only. A healthy job whose op
was in flight reads OK with its real file times and when copied without them; the same job
hung reads HUNG with its culprit both ways."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "dating"


def restored(name: str, target: Path, copied: bool) -> Path:
    """A copy of a real set: its files' times as the job wrote them, or (`copied`) as a copy
    without `-p` leaves them (now: days, or minutes, after every entry)."""
    src = DATA / name
    target.mkdir(parents=True)
    times = json.loads((src / "timing.json").read_text())
    for rank, when in times.items():
        path = target / f"rank_{rank}"
        path.write_bytes((src / f"rank_{rank}").read_bytes())
        if not copied:
            os.utime(path, ns=(when["written_ns"], when["written_ns"]))
    return target


def verdict(folder: Path) -> tuple[int, str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "r.json"
        done = subprocess.run(
            [sys.executable, "-m", "fr_analyzer", "-d", str(folder), "--json", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout, json.loads(out.read_text())["verdict"]


def test_the_dumps_were_written_well_after_their_snapshots() -> None:
    """What the sets are about: symbolizing stacks took longer than the 5 s timeout."""
    times = json.loads((DATA / "healthy_inflight_stacks" / "timing.json").read_text())
    latencies = [(t["written_ns"] - t["snapshot_ns"]) / 1e9 for t in times.values()]
    assert min(latencies) > 5.0


@pytest.mark.parametrize("copied", [False, True], ids=["file_times", "copied_without_p"])
def test_a_healthy_job_dumped_with_stack_traces_reads_ok(tmp_path: Path, copied: bool) -> None:
    folder = restored("healthy_inflight_stacks", tmp_path / "dumps", copied)
    code, text, found = verdict(folder)
    assert code == 0, text
    assert found["status"] == "ok" and found["timing"]["age"] == "young"
    assert found["confidence"] == "high"
    assert "below their timeout (gloo retires an op that times out" in " ".join(text.split())


@pytest.mark.parametrize("copied", [False, True], ids=["file_times", "copied_without_p"])
def test_the_same_job_hung_reads_hung_with_its_culprit(tmp_path: Path, copied: bool) -> None:
    folder = restored("hung_not_joined_stacks", tmp_path / "dumps", copied)
    code, text, found = verdict(folder)
    assert code == 1, text
    assert (found["status"], found["kind"], found["culprit_ranks"]) == ("hung", "not_joined", [3])
    assert (found["group"], found["op"], found["collective_seq_id"]) == ("0", "all_reduce", 4)
    assert found["timing"]["age"] == "old"  # gloo retired the op with its timeout's error
    assert found["confidence"] == "high"
