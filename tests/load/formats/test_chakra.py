"""PyTorch Execution Traces (Chakra ET) read as dumps: the real GPU trace's NCCL layout, real
gloo jobs' traces (healthy, a rank with an extra collective, a rank killed mid-trace), a cut
trace, PARAM's file names, and a trace read with its rank's Flight Recorder dump."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import analyze
from fr_analyzer.load.formats import traces as chakra
from fr_analyzer.load.sources.discovery import discover
from fr_analyzer.pipeline import Analysis, Options
from tools.torch_job import reap

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT / "tests" / "data" / "real_nccl"
REAL_ET = REAL / "et" / "rank-0.et.json"
MANY_OPS = REAL / "et_many_ops"


def run(where: Path) -> Analysis:
    return analyze(where, Options(workers=1))


def status(analysis: Analysis) -> str:
    return analysis.conclusion.status.value


def culprits(analysis: Analysis) -> tuple[int, ...]:
    root = analysis.conclusion.root
    return root.ranks if root is not None else ()


def real_trace() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(REAL_ET.read_text())
    return loaded


def test_the_real_gpu_trace_gives_the_recorders_ops_groups_and_sequence_ids() -> None:
    converted = chakra.to_dump(real_trace(), 0)
    config = converted.dump["pg_config"]
    assert {n: g["desc"] for n, g in config.items()} == {
        "0": "default_pg",
        "1": "mesh_tp",
        "2": "mesh_dp",
    }
    ops = [
        (e["process_group"][0], e["collective_seq_id"], e["profiling_name"])
        for e in converted.dump["entries"]
    ]
    # the names Flight Recorder gives the same ops (healthy_timing's dump), one seq per block
    assert ops == [
        ("1", 4, "nccl:all_reduce"),
        ("1", 5, "nccl:_all_gather_base"),
        ("2", 5, "nccl:_reduce_scatter_base"),
        ("2", 6, "nccl:broadcast"),
        ("2", 7, "nccl:all_to_all"),
        ("1", 6, "nccl:allreduce_coalesced"),
        ("1", 6, "nccl:coalesced"),
        ("2", 8, "nccl:all_gather_into_tensor_coalesced"),
        ("2", 8, "nccl:coalesced"),
        ("0", 3, "nccl:all_reduce"),
        ("0", 4, "nccl:all_reduce_barrier"),
    ]
    broadcast = converted.dump["entries"][3]
    assert broadcast["input_sizes"] == [[2048]] and broadcast["input_dtypes"] == ["BFloat16"]
    coalesced = converted.dump["entries"][7]
    assert coalesced["input_sizes"] == [[4096], [2048]]
    barrier = converted.dump["entries"][10]
    assert barrier["input_sizes"] == [[1]] and barrier["input_dtypes"] == ["Float"]


def test_the_real_gpu_trace_is_analyzed_as_a_healthy_rank_and_says_what_a_trace_cannot_tell(
    tmp_path: Path,
) -> None:
    shutil.copy(REAL_ET, tmp_path / "rank-0.et.json")
    analysis = run(tmp_path)
    assert status(analysis) == "ok", analysis.conclusion.answer
    assert analysis.summary.versions == {"ET 1.1.1-chakra.0.0.4": (0,)}
    warnings = "\n".join(analysis.summary.warnings)
    assert "Execution Traces (Chakra)" in warnings and "nothing of states or times" in warnings
    assert "read entry by entry" not in warnings


def test_a_trace_cut_in_the_middle_is_read_to_its_last_complete_node(tmp_path: Path) -> None:
    text = REAL_ET.read_text()
    cut = text[: text.index('"record_param_comms"', len(text) // 2) + 40]
    (tmp_path / "rank-0.et.json").write_text(cut)
    analysis = run(tmp_path)
    assert analysis.summary.ranks_loaded == (0,)
    (warning,) = [w for w in analysis.summary.warnings if "ends in the middle" in w]
    assert warning.startswith("rank 0: its Execution Trace ends in the middle")
    full = len(json.loads(text)["nodes"])
    kept = int(warning.rsplit("(", 1)[1].split()[0])
    assert 0 < kept < full


def test_a_trace_cut_before_its_nodes_is_unreadable_with_the_file_and_rank(tmp_path: Path) -> None:
    (tmp_path / "rank-0.et.json").write_text('{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "ti')
    (tmp_path / "rank-1.et.json").write_text(
        json.dumps({"schema": "1.1.1-chakra.0.0.4", "pid": 2, "nodes": [], "finish_ts": 1})
    )
    analysis = run(tmp_path)
    (bad,) = analysis.summary.unreadable
    assert bad.rank == 0 and "rank-0.et.json" in bad.file
    assert "malformed Execution Trace: cut before its nodes" in bad.reason


@pytest.mark.parametrize("name", ["rank-0.et.json.gz", "rank-0.json", "rank-0.json.gz"])
def test_traces_are_found_under_the_names_pytorch_and_param_give_them(
    name: str, tmp_path: Path
) -> None:
    data = REAL_ET.read_bytes()
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (found,) = discover(tmp_path).files
    assert found.rank == 0 and found.path.name == name
    assert status(run(tmp_path)) == "ok"


def _ops(where: Path) -> list[tuple[str, int, str]]:
    """(group, sequence id, op) of every entry, as -j lists them."""
    analysis = run(where)
    t = analysis.table
    names = [analysis.groups.groups[int(g)].name for g in analysis.groups.entry_group]
    return sorted((names[i], int(t.coll_seq[i]), t.ops[int(t.op[i])]) for i in range(t.n))


def test_a_real_nccl_trace_holds_the_ops_its_flight_recorder_holds(tmp_path: Path) -> None:
    # the same job's trace and dump, written on a GPU (tests/data/real_nccl/README.md)
    (tmp_path / "et").mkdir()
    (tmp_path / "fr").mkdir()
    shutil.copy(MANY_OPS / "rank-0.et.json", tmp_path / "et")
    shutil.copy(MANY_OPS / "nccl_trace_rank_0", tmp_path / "fr")
    from_trace, from_dump = _ops(tmp_path / "et"), _ops(tmp_path / "fr")
    assert len(from_dump) == 12
    assert from_trace == from_dump  # NCCL's init records are no ops
    assert status(run(tmp_path / "et")) == "ok"


def test_a_trace_beside_its_ranks_dump_adds_the_ops_the_ring_buffer_lost(tmp_path: Path) -> None:
    from fr_analyzer.load.safety.reading import read_raw

    dump = read_raw(MANY_OPS / "nccl_trace_rank_0", 0)
    dump["entries"] = dump["entries"][5:]  # as if the ring buffer had wrapped
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump))
    shutil.copy(MANY_OPS / "rank-0.et.json", tmp_path / "rank-0.et.json")
    (found,) = discover(tmp_path).files
    assert found.path.name == "nccl_trace_rank_0"
    assert found.trace is not None and found.trace.path.name == "rank-0.et.json"
    analysis = run(tmp_path)
    assert status(analysis) == "ok", analysis.conclusion.answer
    assert analysis.summary.versions == {"2.10": (0,)}  # the dump leads
    (note,) = [w for w in analysis.summary.warnings if "Execution Trace" in w]
    assert note.startswith("rank 0: 5 older ops read from its Execution Trace")
    assert len(_ops(tmp_path)) == 12
    states = analysis.table.state[analysis.table.rank == 0]
    assert (states == states[0]).all()  # the added ones finished, as the dump's did


def test_a_send_and_recv_of_a_record_param_comms_trace_name_their_peers() -> None:
    def record(node_id: int, seq: int, peer: int, name: str) -> dict[str, Any]:
        return {
            "id": node_id,
            "name": "record_param_comms",
            "ctrl_deps": 2,
            "inputs": {
                "values": [
                    [[9, 9, 0, 8, 4, "cuda:0"]],
                    [seq, True],
                    ["0", "default_pg"],
                    peer,
                    name,
                    [],
                    [],
                    0,
                    1,
                    2,
                ],
                "shapes": [[[8]], [[], []], [[], []], [], [], [], [], [], [], []],
                "types": [
                    "GenericList[Tensor(float)]",
                    "Tuple[Int,Bool]",
                    "Tuple[String,String]",
                    "Int",
                    "String",
                    "GenericList[]",
                    "GenericList[]",
                    "Int",
                    "Int",
                    "Int",
                ],
            },
            "outputs": {"values": [], "shapes": [], "types": []},
            "attrs": [],
        }

    init = json.dumps(
        [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "ranks": [],
                "group_size": 2,
                "group_count": 1,
            }
        ]
    )
    trace = {
        "schema": "1.1.1-chakra.0.0.4",
        "nodes": [
            {
                "id": 3,
                "name": chakra.INIT_NODE,
                "ctrl_deps": 2,
                "inputs": {"values": [init], "shapes": [[]], "types": ["String"]},
            },
            record(5, 1, 1, "send"),
            record(7, 2, 1, "recv"),
        ],
    }
    entries = chakra.to_dump(trace, 0).dump["entries"]
    assert [(e["profiling_name"], e["p2p_seq_id"], e["is_p2p"]) for e in entries] == [
        ("nccl:send 0->1", 1, True),
        ("nccl:recv 0<-1", 2, True),
    ]


# ---------------------------------------------------------------------------------------------
# Real gloo jobs (torch 2.13 CPU): the traces have c10d dispatcher nodes, no record_param_comms

JOB = ROOT / "tests" / "et_job.py"
WORLD = 4
JOB_DEADLINE_S = 90.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run_job(out: Path, mode: str, world: int = WORLD) -> Path:
    """Run the job's ranks, each in its own process group; kill every one left at the
    deadline, by pid."""
    out.mkdir()
    port = str(_free_port())
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, str(JOB), str(rank), str(world), port, str(out), mode],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        for rank in range(world)
    ]
    reap(procs, time.monotonic() + JOB_DEADLINE_S)
    return out


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("et_jobs")
    return {mode: _run_job(base / mode, mode) for mode in ("healthy", "extra", "kill")}


@pytest.mark.slow
def test_a_healthy_gloo_jobs_traces_are_healthy(jobs: dict[str, Path]) -> None:
    analysis = run(jobs["healthy"])
    assert analysis.summary.ranks_loaded == (0, 1, 2, 3)
    assert status(analysis) == "ok", analysis.conclusion.answer
    assert any(
        "names no group: each op's group is inferred" in w for w in analysis.summary.warnings
    )


@pytest.mark.slow
def test_a_healthy_two_rank_gloo_job_whose_halves_are_one_rank_groups_is_healthy(
    tmp_path: Path,
) -> None:
    # each rank's half is a group of its own: every all_reduce fits it as well as the world
    pytest.importorskip("torch")
    analysis = run(_run_job(tmp_path / "two", "healthy", world=2))
    assert analysis.summary.ranks_loaded == (0, 1)
    assert status(analysis) == "ok", analysis.conclusion.answer


@pytest.mark.slow
def test_a_rank_that_issues_an_extra_collective_is_named(jobs: dict[str, Path]) -> None:
    analysis = run(jobs["extra"])
    assert status(analysis) == "desync", analysis.conclusion.answer
    assert culprits(analysis) == (1,), analysis.conclusion.answer


@pytest.mark.slow
def test_a_rank_killed_mid_trace_is_read_to_its_cut_and_named(jobs: dict[str, Path]) -> None:
    analysis = run(jobs["kill"])
    assert analysis.summary.ranks_loaded == (0, 1, 2, 3)
    assert any(
        w.startswith("rank 2: its Execution Trace ends in the middle")
        for w in analysis.summary.warnings
    )
    assert status(analysis) == "hung", analysis.conclusion.answer
    assert culprits(analysis) == (2,), analysis.conclusion.answer
    timing = analysis.diagnosis.timing
    assert timing is not None and "Execution Traces keep no times" in timing.note


def _node(
    node_id: int, parent: int, name: str, values: list[Any], types: list[str]
) -> dict[str, Any]:
    shapes = [[16] if t.startswith("Tensor") else [] for t in types]
    return {
        "id": node_id,
        "name": name,
        "ctrl_deps": parent,
        "inputs": {"values": values, "shapes": shapes, "types": types},
        "outputs": {"values": [], "shapes": [], "types": []},
        "attrs": [],
    }


def test_a_gloo_functional_collective_is_counted_on_the_group_it_names() -> None:
    # torch 2.13's layout: _c10d_functional::all_reduce(t, "sum", "1") → c10d::allreduce_ →
    # gloo:all_reduce; a plain all_reduce on the world is c10d::allreduce_ → gloo:all_reduce
    groups = [
        {
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cpu:gloo",
            "ranks": [],
            "group_size": 4,
            "group_count": 2,
        },
        {
            "pg_name": "1",
            "pg_desc": "pair",
            "backend_config": "cpu:gloo",
            "ranks": [0, 1],
            "group_size": 2,
            "group_count": 2,
        },
    ]
    tensor = [6, 7, 0, 16, 4, "cpu"]
    nodes = [
        _node(3, 2, chakra.INIT_NODE, [json.dumps(groups)], ["String"]),
        _node(
            9,
            2,
            "_c10d_functional::all_reduce",
            [tensor, "sum", "1"],
            ["Tensor(float)", "String", "String"],
        ),
        _node(
            16,
            9,
            "c10d::allreduce_",
            [[tensor], "<Object>"],
            ["GenericList[Tensor(float)]", "Object"],
        ),
        _node(17, 16, "gloo:all_reduce", [tensor], ["Tensor(float)"]),
        _node(
            20,
            2,
            "c10d::allreduce_",
            [[tensor], "<Object>"],
            ["GenericList[Tensor(float)]", "Object"],
        ),
        _node(21, 2, "gloo:all_reduce", [tensor], ["Tensor(float)"]),
    ]
    converted = chakra.to_dump({"schema": "1.1.1-chakra.0.0.4", "nodes": nodes}, 0)
    placed = [(e["process_group"][0], e["collective_seq_id"]) for e in converted.dump["entries"]]
    assert placed == [("1", 1), ("0", 1)]
    assert converted.notes  # the plain all_reduce could be on either group: said so


def test_a_gloo_traces_ops_are_placed_on_their_groups_by_running_every_ranks_trace() -> None:
    from fr_analyzer.load.formats.traces.dispatcher import Op, assign
    from fr_analyzer.load.formats.traces.nodes import Group

    groups = {
        "0": Group("0", "default_pg", "gloo", (0, 1, 2, 3)),
        "1": Group("1", "half", "gloo", (0, 1)),
        "2": Group("2", "half", "gloo", (2, 3)),
    }
    half = {0: "1", 1: "1", 2: "2", 3: "2"}

    def all_reduce(n: int, rank: int) -> Op:  # both groups of the rank fit an all_reduce
        sizes = ([[n]], ["Float"], [[n]], ["Float"])
        return Op("gloo", "all_reduce", sizes, -1, ("0", half[rank]))

    # GIVEN each rank's trace: an all_reduce of 8 on its half, one of 1 on the world, one of 8
    # on its half; the low half ran one more step; rank 3 stopped after its first op
    ops = {r: [all_reduce(n, r) for n in (8, 1, 8)] for r in range(3)}
    ops[0] += [all_reduce(8, 0)]
    ops[1] += [all_reduce(8, 1)]
    ops[3] = [all_reduce(8, 3)]
    # WHEN the traces are run together
    placed = assign(ops, groups)
    # THEN an op passes on the smallest group whose members all have it next: the world's
    # all_reduce, alike to the low half's members, passes there (the labels cannot tell), and
    # each group's members hold the same ops, so a healthy job stays healthy
    assert placed[0] == placed[1] == ["1", "1", "1", "1"]
    assert placed[3] == ["2"]
    # AND rank 2, stopped where rank 3's trace ended, waits on a group holding rank 3
    assert placed[2][0] == "2" and placed[2][1] in ("0", "2") and placed[2][2] is None
