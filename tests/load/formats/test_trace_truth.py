"""Traces beside dumps never make a verdict worse (issue 47, item 3): where a rank's Flight
Recorder dump and its Execution Trace disagree, the dump's recorder facts win (states,
completion); the trace adds only what the dump lacks (ops older than the ring buffer, the
send/recv gloo never records). Checked on job sets that hold both, built by the simulator
(`tools.frsim`: the same case written as dumps and as traces) and by real gloo jobs
(`tests/et_truth_job.py`), and on the merge itself with tiny builders."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmarks.accuracy import answer, judge
from fr_analyzer import analyze
from fr_analyzer.load.formats import traces as chakra
from fr_analyzer.load.sources.discovery import discover
from fr_analyzer.pipeline import Analysis, Options
from tests.et_truth_job import run_job
from tools.frsim.campaign import ET_OUTPUT, draw_case

SAMPLES = Path(__file__).resolve().parents[3] / "sample_dumps"


def run(where: Path) -> Analysis:
    return analyze(where, Options(workers=1))


def verdict(analysis: Analysis) -> dict[str, Any]:
    """The answer as the accuracy campaign judges it, less its wording."""
    got = answer(analysis.conclusion)
    got.pop("answer")
    return got


def judged(analysis: Analysis) -> dict[str, Any]:
    """The verdict's status, kind and culprits. The op it names may differ where the traces
    add what the dumps lack: gloo's send/recv reveal pipeline stages, and a rank dead with a
    trace is due a later op by its stage's peers than by every rank's."""
    got = verdict(analysis)
    return {key: got[key] for key in ("status", "root", "culprits")}


# --- every set that holds both ----------------------------------------------------------------

# small cases of every kind the simulator draws, NCCL and gloo, whose dumps alone are right
SEEDS = [2, 8, 17, 20, 23, 33, 45, 77]


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_a_simulated_jobs_traces_beside_its_dumps_keep_the_dumps_verdict(
    seed: int, tmp_path: Path
) -> None:
    # GIVEN a job's dumps, right on their own, and the same job's traces beside them
    case = draw_case(seed, ())
    alone, both = tmp_path / "dumps", tmp_path / "both"
    alone.mkdir()
    both.mkdir()
    case.write(alone, None)
    case.write(both, None)
    case.write(both, ET_OUTPUT)
    dumps = run(alone)
    assert not case.truth.ambiguous and not judge(case.truth, answer(dumps.conclusion))
    # WHEN they are read together
    together = run(both)
    # THEN the verdict is the dumps'
    assert all(f.trace is not None or f.path.name.startswith("rank-") for f in discover(both).files)
    assert judged(together) == judged(dumps), together.conclusion.answer


def sets_with_both() -> list[Path]:
    """The sample sets that hold Flight Recorder dumps and Execution Traces."""
    found = []
    for folder in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
        names = [p.name for p in folder.rglob("*") if p.is_file()]
        traces = [n for n in names if n.endswith((".et.json", ".et.json.gz"))]
        if traces and len(traces) < len([n for n in names if n != "NOTE.md"]):
            found.append(folder)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("folder", sets_with_both(), ids=lambda p: p.name)
def test_a_sample_sets_traces_beside_its_dumps_keep_the_dumps_verdict(
    folder: Path, tmp_path: Path
) -> None:
    dumps = tmp_path / "dumps"
    shutil.copytree(folder, dumps, ignore=shutil.ignore_patterns("*.et.json", "*.et.json.gz"))
    assert verdict(run(folder)) == verdict(run(dumps))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("truth_jobs")
    return {mode: run_job(base / mode, mode) for mode in ("healthy", "stuck")}


def dumps_only(where: Path, into: Path) -> Path:
    into.mkdir()
    for path in where.glob("comm_lib_trace_rank_*"):
        shutil.copy(path, into / path.name)
    return into


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["healthy", "stuck"])
def test_a_real_gloo_jobs_traces_beside_its_dumps_keep_the_dumps_verdict(
    mode: str, jobs: dict[str, Path], tmp_path: Path
) -> None:
    dumps = run(dumps_only(jobs[mode], tmp_path / "dumps"))
    together = run(jobs[mode])
    expected = {"healthy": ("ok", ()), "stuck": ("hung", (2,))}[mode]
    root = dumps.conclusion.root
    assert (dumps.conclusion.status.value, root.ranks if root else ()) == expected
    assert verdict(together) == verdict(dumps), together.conclusion.answer


@pytest.mark.slow
def test_a_real_gloo_jobs_send_recv_are_read_from_its_traces_as_finished_where_the_dump_went_on(
    jobs: dict[str, Path],
) -> None:
    analysis = run(jobs["healthy"])
    assert "2 send/recv pairs matched" in analysis.conclusion.answer
    notes = [w for w in analysis.summary.warnings if "send/recv read from its Execution" in w]
    assert len(notes) == 2  # ranks 0 and 1, the pair that sent


# --- the merge --------------------------------------------------------------------------------


def entry(
    group: str, seq: int, name: str, *, p2p: int = 0, state: str = "scheduled"
) -> dict[str, Any]:
    return {
        "record_id": 0,
        "process_group": (group, ""),
        "collective_seq_id": seq,
        "p2p_seq_id": p2p,
        "is_p2p": p2p > 0,
        "profiling_name": name,
        "state": state,
        "retired": state == "completed",
    }


def numbered(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, e in enumerate(entries):
        e["record_id"] = 10 + i
    return entries


def test_a_trace_that_disagrees_with_its_dump_adds_nothing() -> None:
    # GIVEN a dump that holds all_reduce #2 and a trace that holds a broadcast there (a gloo
    # op put on the wrong group, or counted otherwise)
    dump = {"entries": numbered([entry("0", 2, "gloo:all_reduce", state="completed")])}
    trace = {"entries": [entry("0", 1, "gloo:all_reduce"), entry("0", 2, "gloo:broadcast")]}
    # WHEN they are merged
    notes = chakra.merge(dump, trace, "rank-0.et.json")
    # THEN the dump is read as it is, and the report says why
    assert len(dump["entries"]) == 1
    assert notes == [
        "its Execution Trace rank-0.et.json disagrees with its dump (broadcast where the dump "
        "holds all_reduce at #2 of group '0'): the dump is read as it is"
    ]


def test_gloo_send_recv_a_trace_holds_are_placed_after_the_collective_before_them() -> None:
    # GIVEN a gloo dump (no send/recv) whose all_reduce #1 completed and #2 did not, and a
    # trace with a send after each
    dump = {
        "entries": numbered(
            [
                entry("0", 1, "gloo:all_reduce", state="completed"),
                entry("0", 2, "gloo:all_reduce"),
            ]
        )
    }
    trace = {
        "entries": [
            entry("0", 1, "gloo:all_reduce"),
            entry("0", 1, "gloo:send 0->1", p2p=1),
            entry("0", 2, "gloo:all_reduce"),
            entry("0", 2, "gloo:send 0->1", p2p=2),
        ]
    }
    chakra.merge(dump, trace, "t")
    merged = [(e["profiling_name"], e["state"], e["retired"]) for e in dump["entries"]]
    # THEN the first send finished (the rank went on: the dump holds a later op), the second
    # is as the trace has it: issued, not known to have finished
    assert merged == [
        ("gloo:all_reduce", "completed", True),
        ("gloo:send 0->1", "completed", True),
        ("gloo:all_reduce", "scheduled", False),
        ("gloo:send 0->1", "scheduled", False),
    ]


def test_nccl_send_recv_a_dump_records_are_never_added_from_the_trace() -> None:
    dump = {"entries": numbered([entry("0", 1, "nccl:send 0->1", p2p=4, state="completed")])}
    trace = {
        "entries": [entry("0", 1, "nccl:send 0->1", p2p=4), entry("0", 1, "nccl:send 0->1", p2p=5)]
    }
    notes = chakra.merge(dump, trace, "t")
    assert len(dump["entries"]) == 1
    assert notes == [
        "1 ops of its Execution Trace t are newer than its dump's newest: the trace was taken "
        "later; the dump is read as it is"
    ]


def test_a_trace_lines_up_with_its_dump_where_they_share_the_most_and_end_together() -> None:
    from fr_analyzer.load.formats.traces.pin import offset

    # a dump that kept the newest four ops of a program that repeats itself
    trace = ["all_reduce", "broadcast"] * 4
    assert offset(trace, trace[-4:]) == -4
    assert offset(trace, ["all_gather"]) is None
