"""Cut Execution Traces (issue 47, item 2): a rank killed inside its last call (a launcher's
SIGTERM on a timeout, gloo's SIGABRT on a size disagreement) leaves the call's `c10d::` node
and not its backend node; that call is the rank's last, unfinished op and its sizes count. A
rank with a trace and no Flight Recorder dump is read from its trace. Real 4-rank gloo jobs
(torch, 127.0.0.1, `tests/et_truth_job.py`) and tiny built traces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import analyze
from fr_analyzer.load.formats import traces as chakra
from fr_analyzer.load.formats.traces.assign import settle
from fr_analyzer.load.formats.traces.dispatcher import Op
from fr_analyzer.load.formats.traces.nodes import Group
from fr_analyzer.load.sources.discovery import discover
from fr_analyzer.pipeline import Analysis, Options
from tests.et_truth_job import run_job

SCHEMA = "1.1.1-chakra.0.0.4"
GROUPS = [
    {
        "pg_name": "0",
        "pg_desc": "default_pg",
        "backend_config": "cpu:gloo",
        "ranks": [],
        "group_size": 4,
    },
    {
        "pg_name": "1",
        "pg_desc": "pair",
        "backend_config": "cpu:gloo",
        "ranks": [0, 1],
        "group_size": 2,
    },
]
TENSOR = [6, 7, 0, 4, 4, "cpu"]


def node(
    node_id: int, name: str, values: list[Any], types: list[str], n: int = 4
) -> dict[str, Any]:
    """One ET node under the process's root (`ctrl_deps` 1), its tensors of `n` elements."""
    shapes = [
        [[n]] if t.startswith("GenericList[Tensor") else [n] if "Tensor" in t else [] for t in types
    ]
    return {
        "id": node_id,
        "name": name,
        "ctrl_deps": 1,
        "inputs": {"values": values, "shapes": shapes, "types": types},
        "outputs": {"values": [], "shapes": [], "types": []},
        "attrs": [{"name": "rf_id", "type": "uint64", "value": node_id}],
    }


def all_reduce(first_id: int, n: int = 4, backend_node: bool = True) -> list[dict[str, Any]]:
    """`c10d::allreduce_` and, unless the rank was killed inside it, its `gloo:all_reduce`."""
    call = node(
        first_id,
        "c10d::allreduce_",
        [[TENSOR], "<Object>"],
        ["GenericList[Tensor(float)]", "Object"],
        n,
    )
    work = node(first_id + 1, "gloo:all_reduce", [TENSOR], ["Tensor(float)"], n)
    return [call, work] if backend_node else [call]


def trace(*ops: list[dict[str, Any]], finished: bool = False) -> dict[str, Any]:
    init = node(2, chakra.INIT_NODE, [json.dumps(GROUPS)], ["String"])
    nodes = [init] + [n for op in ops for n in op]
    found: dict[str, Any] = {"schema": SCHEMA, "pid": 1, "time": "", "start_ts": 1, "nodes": nodes}
    if finished:
        found["finish_ts"] = 2
    return found


def ops_of(converted: chakra.Converted) -> list[tuple[str, int, list[Any]]]:
    return [
        (e["profiling_name"], e["collective_seq_id"], e["input_sizes"])
        for e in converted.dump["entries"]
    ]


# --- the last call, cut -----------------------------------------------------------------------


def test_a_call_left_without_its_backend_node_is_the_ranks_last_op_with_its_sizes() -> None:
    # GIVEN a rank killed inside its second all_reduce, of 8 elements: the call's node was
    # written, its gloo node never was
    cut = trace(all_reduce(10), all_reduce(20, n=8, backend_node=False))
    # WHEN it is read
    converted = chakra.to_dump(cut, 0, shown=4)
    # THEN the call is its last op, named as gloo names it, with the call's sizes
    assert ops_of(converted) == [("gloo:all_reduce", 1, [[4]]), ("gloo:all_reduce", 2, [[8]])]


def test_a_trace_whose_every_call_has_its_backend_node_gains_no_op() -> None:
    whole = trace(all_reduce(10), all_reduce(20), finished=True)
    assert ops_of(chakra.to_dump(whole, 0, shown=4)) == [
        ("gloo:all_reduce", 1, [[4]]),
        ("gloo:all_reduce", 2, [[4]]),
    ]


def test_a_cut_op_marks_itself_and_no_other() -> None:
    cut = trace(all_reduce(10), all_reduce(20, backend_node=False))
    found = chakra.gloo_ops(cut, 0, 4)
    assert found is not None
    assert [op.cut for op in found.ops] == [False, True]


def test_ops_that_no_member_finished_do_not_pass_in_the_group_search() -> None:
    # GIVEN ranks 0 and 1 killed inside an all_reduce that fits their pair and the world, and
    # rank 2 (on the world only) whose trace ended before it
    groups = {
        "0": Group("0", "default_pg", "gloo", (0, 1, 2)),
        "1": Group("1", "pair", "gloo", (0, 1)),
    }
    sizes = ([[4]], ["Float"], [[4]], ["Float"])
    done = Op("gloo", "all_reduce", sizes, -1, ("0", "1"))
    cut = Op("gloo", "all_reduce", sizes, -1, ("0", "1"), cut=True)
    ops = {0: [done, cut], 1: [done, cut], 2: [done]}
    # WHEN the groups are searched
    settled = settle(ops, groups, frozenset({0, 1, 2}))
    # THEN the op neither finished is not taken to have passed on the pair: both wait on the
    # world, for rank 2
    assert settled.chosen[0][1] == settled.chosen[1][1] == "0"


# --- real jobs --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("cut_jobs")
    return {mode: run_job(base / mode, mode) for mode in ("healthy", "abort", "term")}


def only(where: Path, pattern: str, into: Path) -> Path:
    into.mkdir()
    for path in where.glob(pattern):
        shutil.copy(path, into / path.name)
    return into


def run(where: Path) -> Analysis:
    return analyze(where, Options(workers=1))


def culprits(analysis: Analysis) -> tuple[int, ...]:
    root = analysis.conclusion.root
    return root.ranks if root is not None else ()


@pytest.mark.slow
def test_a_healthy_jobs_traces_and_dumps_stay_healthy(
    jobs: dict[str, Path], tmp_path: Path
) -> None:
    traces = run(only(jobs["healthy"], "rank-*.et.json", tmp_path / "et"))
    both = run(jobs["healthy"])
    assert traces.conclusion.status.value == "ok", traces.conclusion.answer
    assert both.conclusion.status.value == "ok", both.conclusion.answer


@pytest.mark.slow
def test_a_size_disagreement_gloo_aborted_names_the_sender_from_the_traces_alone(
    jobs: dict[str, Path], tmp_path: Path
) -> None:
    # GIVEN rank 0 broadcast 8 elements where ranks 1-3 took 4; gloo aborted ranks 1 and 2
    # inside the broadcast: their traces end with its c10d node
    analysis = run(only(jobs["abort"], "rank-*.et.json", tmp_path / "et"))
    # THEN the cut calls' sizes count: rank 0 is the one that disagrees
    assert analysis.conclusion.status.value == "desync", analysis.conclusion.answer
    assert culprits(analysis) == (0,), analysis.conclusion.answer
    assert "size mismatch" in analysis.conclusion.answer


@pytest.mark.slow
def test_aborted_ranks_with_no_dump_are_read_from_their_traces_beside_the_others_dumps(
    jobs: dict[str, Path],
) -> None:
    # GIVEN the survivors' (0, 3) Flight Recorder dumps and every rank's trace
    found = {f.rank: f.path.name for f in discover(jobs["abort"]).files}
    assert found[1] == "rank-1.et.json" and found[2] == "rank-2.et.json"
    analysis = run(jobs["abort"])
    # THEN ranks 1-2 are read from their traces, not called missing, and rank 0 is named
    assert analysis.summary.ranks_loaded == (0, 1, 2, 3)
    assert not analysis.summary.ranks_missing and not analysis.summary.unreadable
    assert analysis.summary.versions["ET 1.1.1-chakra.0.0.4"] == (1, 2)
    assert analysis.conclusion.status.value == "desync", analysis.conclusion.answer
    assert culprits(analysis) == (0,), analysis.conclusion.answer
    assert "no usable dump" not in analysis.conclusion.answer


@pytest.mark.slow
def test_a_job_killed_by_sigterm_on_a_timeout_names_the_rank_that_never_came(
    jobs: dict[str, Path],
) -> None:
    # GIVEN rank 2 asleep while ranks 0, 1, 3 wait in a world all_reduce; every rank killed
    # by SIGTERM (no dump, every trace cut inside its last call)
    analysis = run(jobs["term"])
    assert any("its Execution Trace ends in the middle" in w for w in analysis.summary.warnings)
    # THEN the one that never came is named
    assert analysis.conclusion.status.value == "hung", analysis.conclusion.answer
    assert culprits(analysis) == (2,), analysis.conclusion.answer
