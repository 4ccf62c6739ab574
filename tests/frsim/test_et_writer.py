"""frsim's Execution Trace writer (tools/frsim/et.py) against the real file
(`tests/data/real_nccl/et/rank-0.et.json`, copied from `/work/shared/real_nccl/extras/`:
torch 2.11, NCCL, one rank, groups "0", "1" mesh_tp and "2" mesh_dp, one step).

The simulated job issues the real program's collectives; every node the writer emits for them
has the real node's name, input and output types, attrs (names, order and types), parent chain
and place in the file (a parent after its children), and, with every number blanked, the same
text. Then: what a hung, crashed or healthy job leaves on disk, and `.gz` targets.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.frsim import faults
from tools.frsim.campaign import ET_INVISIBLE, ET_OUTPUT, draw_case, et_truth
from tools.frsim.custom import WORLD, CustomJob
from tools.frsim.et import PROCESS_NODE, rank_trace
from tools.frsim.layout import Layout
from tools.frsim.program import BF16, ProgramSpec
from tools.frsim.sim import SimSpec, Simulation, simulate
from tools.frsim.truth import Truth
from tools.frsim.writers import ET_NAMINGS, Output, write_files

REAL = Path(__file__).parents[1] / "data" / "real_nccl" / "et" / "rank-0.et.json"
Node = dict[str, Any]

USER_CODE = ("aten::ones",)
"""The real program's own tensor creation (not part of any collective): left out."""


def real_program() -> Simulation:
    """One rank issuing what the real file's step issued, in its order."""
    job = CustomJob(world_size=1)
    tp = job.new_group("mesh_tp", [0])
    dp = job.new_group("mesh_dp", [0])
    p = job.on(0)
    p.step(0)
    p.coll(tp, "all_reduce", [(4096,)])
    p.coll(tp, "_all_gather_base", [(4096,)])
    p.coll(dp, "_reduce_scatter_base", [(4096,)])
    p.coll(dp, "broadcast", [(2048,)], dtype=BF16)
    p.coll(dp, "all_to_all", [(4096,)])
    p.fused(tp, "all_reduce", [(4096,), (4096,)], nowait=True)
    p.fused(dp, "all_gather_into_tensor", [(4096,), (2048,)], nowait=True)
    p.coll(WORLD, "all_reduce", [(1,)], sync=True)
    p.coll(WORLD, "all_reduce_barrier", [(1,)], sync=True)
    return simulate(SimSpec(layout=job))


def _nodes(text: str) -> list[Node]:
    nodes: list[Node] = json.loads(text)["nodes"]
    return nodes


def _chain(node: Node, by_id: dict[int, Node]) -> tuple[str, ...]:
    """Names from the node up to the thread node."""
    names = []
    while node["id"] not in (1, 2):
        names.append(node["name"])
        node = by_id[node["ctrl_deps"]]
    return (*names, node["name"])


def _without_user_code(nodes: list[Node]) -> list[Node]:
    by_id = {n["id"]: n for n in nodes}
    return [n for n in nodes if not set(_chain(n, by_id)) & set(USER_CODE)]


def _node_texts(text: str) -> Iterator[tuple[int, str]]:
    """(id, the node's own text with every number blanked) per node, in file order."""
    for chunk in re.split(r"\n      \},?", text.split('"nodes": [', 1)[1]):
        found = re.search(r'"id": (\d+)', chunk)
        if found:
            yield int(found.group(1)), re.sub(r"\d+", "N", chunk.strip(", \n"))


def _structure(node: Node, by_id: dict[int, Node]) -> tuple[object, ...]:
    return (
        node["name"],
        node["inputs"]["types"],
        node["outputs"]["types"],
        [(a["name"], a["type"]) for a in node["attrs"]],
        _chain(node, by_id),
    )


@pytest.fixture(scope="module")
def real() -> str:
    return REAL.read_text()


@pytest.fixture(scope="module")
def simulated() -> str:
    # the real file traced one step of a running job: its communicators existed
    return rank_trace(real_program(), 0, comms_created=True).text


def test_every_node_has_the_real_nodes_structure_in_the_real_order(
    real: str, simulated: str
) -> None:
    # GIVEN the real file's nodes (but the program's own aten::ones) and the simulated ones
    want = _without_user_code(_nodes(real))
    got = _nodes(simulated)
    want_ids = {n["id"]: n for n in _nodes(real)}
    got_ids = {n["id"]: n for n in got}
    # THEN node by node, in file order: names, types, attrs and parent chains are equal
    assert [_structure(n, want_ids) for n in want] == [_structure(n, got_ids) for n in got]


def test_each_op_kind_of_the_real_file_is_written(real: str, simulated: str) -> None:
    kinds = {n["name"] for n in _without_user_code(_nodes(real))}
    assert kinds == {n["name"] for n in _nodes(simulated)}
    comms = {n["inputs"]["values"][-6] for n in _nodes(real) if n["name"] == "record_param_comms"}
    assert comms == {
        "allreduce", "_allgather_base", "_reduce_scatter_base", "broadcast", "all_to_allv",
        "allreduce_coalesced", "allgather_into_tensor_coalesced", "wait", "barrier",
    }  # fmt: skip
    assert comms == {
        n["inputs"]["values"][-6] for n in _nodes(simulated) if n["name"] == "record_param_comms"
    }


def test_node_text_equals_the_real_text_with_numbers_blanked(real: str, simulated: str) -> None:
    keep = {n["id"] for n in _without_user_code(_nodes(real))}
    want = [t for i, t in _node_texts(real) if i in keep]
    got = [t for _, t in _node_texts(simulated)]
    assert want == got


def test_file_header_and_ending_are_the_real_ones(real: str, simulated: str) -> None:
    def blank(text: str) -> str:
        return re.sub(r"\d+", "N", text)

    assert blank(simulated.split("\n      {")[0]) == blank(real.split("\n      {")[0])
    assert blank(simulated)[-40:] == blank(real)[-40:]
    assert set(json.loads(simulated)) == set(json.loads(real))


def test_ids_are_taken_at_start_and_nodes_written_at_end(simulated: str) -> None:
    nodes = _nodes(simulated)
    order = {n["id"]: i for i, n in enumerate(nodes)}
    for n in nodes:
        if n["ctrl_deps"] not in (1, 2) and n["id"] != 1:
            parent = n["ctrl_deps"]
            assert parent < n["id"]  # id taken when the parent started
            assert order[parent] > order[n["id"]]  # written when it ended
    # tensors take ids from the same counter: the op ids have gaps
    ops = sorted(order)
    assert ops[-1] > len(ops)


def test_seq_is_the_flight_recorders_collective_seq_id(simulated: str) -> None:
    sim = real_program()
    dump = sim.dump(0)
    assert dump is not None
    recorded = [(e.process_group[0], e.collective_seq_id) for e in dump.entries]
    traced = [
        (n["inputs"]["values"][-8][0], n["inputs"]["values"][-9][0])
        for n in _nodes(simulated)
        if n["name"] == "record_param_comms" and n["inputs"]["values"][-6] != "wait"
    ]
    assert traced == list(dict.fromkeys(recorded))


def _pp_job(fault: faults.Fault | None) -> Simulation:
    return simulate(
        SimSpec(layout=Layout(tp=2, pp=2, dp=2), fault=fault, timeout_ms=5_000, skew_s=0.1)
    )


def test_p2p_ops_carry_their_p2p_seq_and_peer() -> None:
    # GIVEN a pipeline job's rank 0 (stage 0: sends forward, receives backward)
    text = rank_trace(_pp_job(None), 0).text
    nodes = _nodes(text)
    by_id = {n["id"]: n for n in nodes}
    comms = [n for n in nodes if n["name"] == "record_param_comms"]
    p2p = [n for n in comms if n["inputs"]["values"][-6] in ("send", "recv")]
    # THEN each is (p2p seq, True), the group-local peer, under c10d::send / c10d::recv_
    assert p2p
    for n in p2p:
        values = n["inputs"]["values"]
        assert values[1][1] is True
        assert values[3] == 1
        assert by_id[n["ctrl_deps"]]["name"] in ("c10d::send", "c10d::recv_")
    seqs = [n["inputs"]["values"][1][0] for n in p2p]
    assert seqs == sorted(seqs) and seqs[0] == 1
    # batched members have no work of their own; the batch's nccl:coalesced and wait follow
    waits = [n for n in comms if n["inputs"]["values"][3] == "wait"]
    waits = [n for n in waits if n["inputs"]["values"][1][1] == "pp"]
    assert waits and all(w["inputs"]["values"][0][1] for w in waits)
    ends = [n for n in nodes if n["name"] == "nccl:coalesced"]
    assert len(ends) > len(waits)  # the DP buckets' blocks too
    works = {
        by_id[n["ctrl_deps"]]["ctrl_deps"] for n in nodes if n["name"][5:9] in ("send", "recv")
    }
    calls = {n["id"] for n in nodes if n["name"] in ("c10d::send", "c10d::recv_")}
    assert works < calls  # unbatched sends/recvs have a work; batched members have none


def test_a_hung_job_leaves_every_rank_truncated_after_its_last_issued_op(tmp_path: Path) -> None:
    # GIVEN rank 5 stops issuing at its 40th op: the job hangs, the watchdogs kill every rank
    sim = _pp_job(faults.stop_host(5, 40))
    assert sim.hung
    written = write_files(sim, tmp_path, Output(fmt="et", pattern=ET_NAMINGS["et"]))
    for w in written:
        assert w.path is not None
        text = w.path.read_text()
        # THEN no closing bracket, no process node; the text up to the last node is valid
        assert text.endswith("\n      }")
        assert PROCESS_NODE not in text
        nodes = json.loads(text + "\n  ]\n}")["nodes"]
        assert nodes[0]["id"] == 2
    issued = {w.rank: w.entries for w in written}
    assert issued[5] == 40
    assert min(issued.values()) == issued[5]


def test_a_healthy_job_and_a_crashed_rank(tmp_path: Path) -> None:
    healthy = write_files(_pp_job(None), tmp_path / "ok", Output(fmt="et", pattern="{rank}.json"))
    for w in healthy:
        assert w.path is not None
        doc = json.loads(w.path.read_text())
        assert doc["nodes"][-1]["id"] == 1 and doc["finish_ts"] >= doc["start_ts"]
    crashed = rank_trace(_pp_job(faults.crash(3, 30)), 3)
    assert not crashed.complete and crashed.units == 30


def test_gzip_only_at_a_clean_stop(tmp_path: Path) -> None:
    out = Output(fmt="et", gzip=True, pattern=ET_NAMINGS["param"])
    healthy = write_files(_pp_job(None), tmp_path / "ok", out)
    assert all(w.path is not None and w.path.name.endswith(".json.gz") for w in healthy)
    first = healthy[0].path
    assert first is not None
    json.loads(gzip.decompress(first.read_bytes()))
    hung = write_files(_pp_job(faults.stop_host(5, 40)), tmp_path / "hung", out)
    assert all(w.path is None for w in hung)
    assert not list((tmp_path / "hung").iterdir())


def test_the_same_seed_gives_the_same_bytes() -> None:
    assert rank_trace(_pp_job(None), 6).text == rank_trace(_pp_job(None), 6).text


def test_et_truth_keeps_what_a_trace_shows_and_expects_ok_for_the_rest() -> None:
    # GIVEN the dumps' truths of a stuck kernel, a crash and a skipped collective
    stuck = Truth("hung", "stuck_collective", (1,), "1", "tp", "collective", 7)
    crash = Truth("hung", "dead_rank", (3,), "0", "default_pg", "collective", 9)
    skip = Truth("desync", "not_joined", (2,), "2", "dp", "collective", 4)
    # THEN a trace shows no disagreement for the stuck kernel, a rank that stopped for the crash
    assert et_truth("gpu_stuck_in", stuck) == Truth("ok")
    # (where the peers of a rank that stopped wait is not judged: they issue ahead)
    assert et_truth("crash", crash) == Truth("hung", "not_joined", (3,))
    assert et_truth("skip", skip) == skip
    # AND a gloo trace names no group and no seq: only status, root and culprits are judged
    assert et_truth("skip", skip, "gloo") == Truth("desync", "not_joined", (2,))
    assert {"gpu_stuck_before", "network_hang", "stall", "healthy_mid"} <= ET_INVISIBLE


def test_a_drawn_case_is_written_as_traces(tmp_path: Path) -> None:
    case = draw_case(4)
    paths = case.write(tmp_path, ET_OUTPUT)
    assert len(paths) == case.spec.layout.world_size
    assert all(p.name.endswith(".et.json") for p in paths)


REAL_GLOO = Path(__file__).parents[1] / "data" / "gloo_et" / "rank-0.et.json"


def gloo_program() -> Simulation:
    """Rank 0 of tests/et_job.py's two-rank gloo job."""
    job = CustomJob(world_size=2)
    halves = [job.new_group("undefined", [0]), job.new_group("undefined", [1])]
    for rank in job.ranks():
        p = job.on(rank)
        for step in range(3):
            p.step(step)
            p.coll(halves[rank], "all_reduce", [(16,)])
            p.coll(halves[rank], "_all_gather_base", [(16,)])
            p.coll(WORLD, "all_reduce", [(4,)])
            p.coll(WORLD, "broadcast", [(16,)])
        p.coll(WORLD, "all_reduce_barrier", [(1,)], sync=True)
    return simulate(SimSpec(layout=job, program=ProgramSpec(backend="gloo")))


def _collective_nodes(nodes: list[Node]) -> list[tuple[object, ...]]:
    """(name, input types, output types, attr names, parent is the thread) of the dispatcher
    ops and the works, in file order."""
    return [
        (
            n["name"],
            n["inputs"]["types"],
            n["outputs"]["types"],
            [a["name"] for a in n["attrs"]],
            n["ctrl_deps"] == 2,
        )
        for n in nodes
        if n["name"].startswith(("c10d::", "gloo:"))
    ]


def test_gloo_traces_have_the_real_gloo_layout() -> None:
    # GIVEN the real gloo trace and frsim's of the same program
    real = _nodes(REAL_GLOO.read_text())
    got = _nodes(rank_trace(gloo_program(), 0).text)
    # THEN no record_param_comms; each dispatcher op is followed by its gloo work, at the top
    assert not [n for n in got if n["name"] == "record_param_comms"]
    want = _collective_nodes(real)
    # the real job's first work started before its dispatcher op returned: written as its child
    assert want[0][0] == "gloo:all_reduce" and want[0][4] is False
    want[:2] = [want[1], (*want[0][:4], True)]
    assert _collective_nodes(got) == want
    init = next(n for n in got if n["name"] == "## process_group:init ##")
    real_init = next(n for n in real if n["name"] == "## process_group:init ##")
    assert (
        json.loads(init["inputs"]["values"][0])[0]
        == json.loads(real_init["inputs"]["values"][0])[0]
    )


def test_the_accuracy_campaign_runs_a_case_written_as_traces() -> None:
    from benchmarks.accuracy import run_case

    # GIVEN seed 4: an 8-rank pipeline job whose rank 0 stops before a send
    outcome = run_case(4, writer="et")
    # THEN its traces were analyzed (8 ranks) and judged against the traces' truth
    assert outcome.writer == "et" and outcome.ranks == 8
    assert outcome.truth["status"] == "hung" and outcome.truth["root"] == "not_joined"
    assert outcome.got["status"] != "error"


MANY_OPS = Path(__file__).parents[1] / "data" / "real_nccl" / "et_many_ops" / "rank-0.et.json"


def test_a_groups_first_collective_creates_its_communicator_as_the_real_trace_shows() -> None:
    # GIVEN the real trace of a fresh job (all_reduce on group "1", then reduce on "0") and
    # frsim's of a job whose first ops are an all_reduce on a group, then one on the world
    def inits(nodes: list[Node]) -> list[tuple[str, ...]]:
        by_id = {n["id"]: n for n in nodes}
        return [
            _chain(n, by_id)
            for n in nodes
            if n["name"] == "record_param_comms" and n["inputs"]["values"][3] in
            ("init", "broadcastUniqueNCCLID")
        ]  # fmt: skip

    job = CustomJob(world_size=1)
    tp = job.new_group("undefined", [0])
    p = job.on(0)
    p.coll(tp, "all_reduce", [(1024,)])
    p.coll(WORLD, "all_reduce", [(1024,)])
    p.coll(tp, "all_reduce", [(1024,)])
    got = _nodes(rank_trace(simulate(SimSpec(layout=job)), 0).text)
    real = _nodes(MANY_OPS.read_text())

    # THEN each group's first collective holds init -> broadcastUniqueNCCLID, once per group,
    # in the real file's order and nesting (the dispatcher ops aside)
    def blank(chains: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
        return [tuple("c10d" if x.startswith("c10d::") else x for x in c) for c in chains]

    want, found = blank(inits(real)), blank(inits(got))
    assert len(want) == 4
    assert found == want
    assert [n["name"] for n in got].count("c10d::allreduce_") == 3
