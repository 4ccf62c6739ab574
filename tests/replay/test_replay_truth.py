"""Replays that tell the truth (issue 47, item 5): a rank whose record is cut (its Execution
Trace ends where it was killed) stops where it was cut and the answer says so, not "a shorter
program"; a gloo abort after a size disagreement the records hold is a program bug with the
disagreement named, not "check the host"; `replay --json` on a stop carries the `verdict` the
text prints. Without torch: `told.tell` on sample dumps; with torch (slow): real 4-rank
gloo jobs' records (`tests/et_truth_job.py`) replayed on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import signal as signals
from pathlib import Path

import pytest

from fr_analyzer import analyze, cli
from fr_analyzer.pipeline import Analysis, Options
from fr_analyzer.replay.plan import ReplayPlan, from_json, to_json
from fr_analyzer.replay.results import to_json as results_json
from fr_analyzer.replay.runner import RankExit, RunOutcome
from fr_analyzer.replay.told import tell
from fr_analyzer.replay.worker import RankResult
from tests.et_truth_job import run_job

ROOT = Path(__file__).resolve().parents[2]
SIZE_MISMATCH = ROOT / "sample_dumps" / "gloo_size_mismatch"
HEALTHY = ROOT / "sample_dumps" / "gloo_healthy"
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed (the replay extra)"
)


def plan(cut: tuple[int, ...] = ()) -> ReplayPlan:
    return ReplayPlan("job", 4, "gloo", 1.0, (), (), (), cut)  # type: ignore[arg-type]


def outcome(*codes: int | None) -> RunOutcome:
    """Ranks that ended with these return codes (-SIGABRT: gloo aborted them)."""
    exits = tuple(
        RankExit(
            r, code, False, None if code else RankResult(r, False, (), "RuntimeError: x", 0, 0)
        )
        for r, code in enumerate(codes)
    )
    return RunOutcome(exits, Path("/nonexistent"), 1.0)


def run(where: Path) -> Analysis:
    return analyze(where, Options(workers=1))


def test_a_gloo_abort_on_a_size_disagreement_the_records_hold_is_a_program_bug() -> None:
    # GIVEN records where rank 1's all_reduce is smaller, and a replay where gloo aborted rank 1
    recorded = run(SIZE_MISMATCH)
    replayed = run(HEALTHY)  # whatever the replay's own dumps say
    # WHEN the answer is told
    lines, answer = tell(plan(), outcome(1, -signals.SIGABRT, 1, 1), recorded, replayed)
    # THEN it is the records' answer, and the disagreement is named
    assert answer is recorded
    (line,) = lines
    assert line.startswith("gloo aborted rank 1 on the size mismatch the records hold at ")
    assert "a program bug, not the host" in line


def test_a_replay_that_stops_without_an_abort_or_a_cut_keeps_its_own_answer() -> None:
    recorded, replayed = run(SIZE_MISMATCH), run(HEALTHY)
    lines, answer = tell(plan(), outcome(1, 1, 1, 1), recorded, replayed)
    assert lines == [] and answer is replayed


def test_a_replay_of_cut_records_answers_with_the_records_and_says_they_are_cut() -> None:
    recorded, replayed = run(HEALTHY), run(SIZE_MISMATCH)
    lines, answer = tell(plan(cut=(2,)), outcome(1, 1, 1, 1), recorded, replayed)
    assert answer is recorded
    (line,) = lines
    assert line.startswith("the record of rank 2 is cut (its Execution Trace ends where the")
    assert "not a shorter program" in line


def test_a_plan_keeps_its_cut_ranks_through_its_json() -> None:
    assert from_json(to_json(plan(cut=(1, 3)))).cut == (1, 3)


def test_the_replay_json_carries_the_verdict_it_is_given_and_none_on_a_clean_run() -> None:
    stopped = json.loads(results_json(plan(), outcome(1, 1), {"status": "hung"}))
    clean = json.loads(results_json(plan(), outcome()))
    assert stopped["verdict"] == {"status": "hung"} and stopped["cut_ranks"] == []
    assert "verdict" not in clean


# --- real replays of real records -------------------------------------------------------------


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("replay_jobs")
    return {mode: run_job(base / mode, mode) for mode in ("healthy", "abort", "term")}


def replay(
    where: Path, out: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, dict[str, object]]:
    """`fr-analyze replay` of `where` with `--json`; no worker left (killed by pid if any)."""
    timings = out.with_suffix(".json")
    try:
        code = cli.run(
            [
                "replay",
                str(where),
                "--out",
                str(out),
                "--json",
                str(timings),
                "--timeout",
                "3",
                "--warmup",
                "0",
                "--iterations",
                "1",
                "--deadline",
                "90",
            ]
        )
    finally:
        for pid in _workers_of(out):
            os.kill(pid, signal.SIGKILL)
    captured = capsys.readouterr()
    return code, captured.out + captured.err, json.loads(timings.read_text())


def _workers_of(out: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"fr_analyzer.replay.worker" in a for a in cmdline) and str(out).encode() in cmdline:
            found.append(int(proc.name))
    return found


@needs_torch
@pytest.mark.slow
def test_a_replay_of_records_cut_by_a_sigterm_stops_where_they_were_cut(
    jobs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a job killed by SIGTERM while rank 2 slept: every trace cut
    code, printed, data = replay(jobs["term"], tmp_path / "term", capsys)
    # THEN every rank stops where its record was cut, the answer says so and is the records'
    assert code == cli.EXIT_FINDINGS, printed
    assert printed.count("RecordCut: its record is cut") >= 3
    assert "is cut (their Execution Traces end where the rank was killed)" in printed
    assert "not a shorter program" in printed
    assert "HUNG. rank 2 never joined" in printed
    # AND the JSON carries the verdict the text printed, and the cut ranks
    verdict = data["verdict"]
    assert isinstance(verdict, dict) and verdict["culprit_ranks"] == [2]
    assert str(verdict["summary"]).split(":")[0] in printed.replace("\n  ", " ")
    assert data["cut_ranks"] == [0, 1, 2, 3]


@needs_torch
@pytest.mark.slow
def test_a_replay_gloo_aborts_on_a_recorded_size_disagreement_names_it_as_a_program_bug(
    jobs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN rank 0 broadcast 8 elements where ranks 1-3 took 4 (ranks 1-2 aborted in the job)
    code, printed, data = replay(jobs["abort"], tmp_path / "abort", capsys)
    # THEN the replay reproduces the abort, and answers with the disagreement, not the host
    assert code == cli.EXIT_FINDINGS, printed
    assert "aborted (SIGABRT" in printed
    assert "on the size mismatch the records hold at broadcast #5 of group '0'" in printed
    assert "(rank 0 deviates): a program bug, not the host" in printed
    assert "hardware" not in printed
    verdict = data["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["status"] == "desync" and verdict["culprit_ranks"] == [0]


@needs_torch
@pytest.mark.slow
def test_a_replay_of_a_healthy_jobs_records_stays_clean(
    jobs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, data = replay(jobs["healthy"], tmp_path / "healthy", capsys)
    assert code == cli.EXIT_OK, printed
    assert "every op of every rank completed" in printed
    assert "verdict" not in data and data["cut_ranks"] == []
