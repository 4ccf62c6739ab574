"""The recorder simulator (tools/frsim): execution, faults, dumps, writers, truth, campaign."""

from __future__ import annotations

import gzip
import json
import pickle
import re
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.gen import WRITERS, generate
from benchmarks.gen import Spec as BenchSpec
from benchmarks.run import verdict_matches
from tools.frsim import faults
from tools.frsim.campaign import CASE_KINDS, LAYOUTS, draw_case
from tools.frsim.custom import WORLD, CustomJob
from tools.frsim.engine import NEVER
from tools.frsim.layout import Layout, Role
from tools.frsim.program import COLL_KINDS, Kind, Program, ProgramSpec
from tools.frsim.recorder import RankDump
from tools.frsim.sim import SimSpec, Simulation, simulate
from tools.frsim.writers import (
    Output,
    dump_object,
    json_bytes,
    python_pickle,
    torch_pickle,
    write_dumps,
    write_files,
)
from tools.nccl_scenarios import SCENARIOS, write_scenario

Dump = dict[str, Any]
BASE = SimSpec(
    layout=Layout(tp=2, pp=2, dp=2),
    program=ProgramSpec(steps=2, micro_batches=3, barrier_every=2),
    timeout_ms=5_000,
    seed=3,
)


def _load(sim: Simulation, rank: int) -> Dump | None:
    dump = sim.dump(rank)
    return None if dump is None else pickle.loads(torch_pickle(dump))


def _dumps(sim: Simulation) -> dict[int, Dump]:
    out = {}
    for rank in range(sim.world_size):
        loaded = _load(sim, rank)
        if loaded is not None:
            out[rank] = loaded
    return out


def _unit(program: Program, **where: Any) -> int:
    """The first unit of `program` whose attributes match `where` (role, kind, site, step)."""
    for u in range(len(program)):
        if all(getattr(program, name)[u] == value for name, value in where.items()):
            return u
    raise LookupError(where)


def _by_seq(dump: Dump, group: str) -> dict[int, list[Dump]]:
    out: dict[int, list[Dump]] = defaultdict(list)
    for e in dump["entries"]:
        if e["process_group"][0] != group or e["is_p2p"]:
            continue
        if e["profiling_name"] != "nccl:coalesced" or not _is_batch_marker(dump, e):
            out[e["collective_seq_id"]].append(e)
    return out


def _is_batch_marker(dump: Dump, marker: Dump) -> bool:
    """A batched p2p block's end marker: the entry before it is a p2p member of the block."""
    i = dump["entries"].index(marker)
    return i > 0 and bool(dump["entries"][i - 1]["is_p2p"])


@pytest.fixture(scope="module")
def healthy() -> Simulation:
    return simulate(BASE)


@pytest.fixture(scope="module")
def healthy_dumps(healthy: Simulation) -> dict[int, Dump]:
    return _dumps(healthy)


# --- healthy execution -------------------------------------------------------------------------


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("backend", ["nccl", "gloo"])
@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 4, 2), (4, 1, 2), (2, 4, 1)])
def test_healthy_job_completes_every_op(
    shape: tuple[int, int, int], backend: str, batched: bool
) -> None:
    program = ProgramSpec(steps=2, micro_batches=4, backend=backend, batched_p2p=batched)  # type: ignore[arg-type]
    sim = simulate(replace(BASE, layout=Layout(*shape), program=program))
    assert not sim.hung
    for times in sim.times:
        assert all(c != NEVER for c in times.comp)
        assert list(times.enq) == sorted(times.enq)
        assert all(r >= e for r, e in zip(times.ready, times.enq, strict=True))
        assert list(times.comp) == sorted(times.comp)


def test_healthy_seq_ids_are_consecutive(healthy_dumps: dict[int, Dump]) -> None:
    for dump in healthy_dumps.values():
        entries = dump["entries"]
        assert [e["record_id"] for e in entries] == list(range(len(entries)))
        groups = {e["process_group"][0] for e in entries}
        for group in groups:
            mine = [e for e in entries if e["process_group"][0] == group]
            assert [e["op_id"] for e in mine] == list(range(1, len(mine) + 1))
            coll = sorted({e["collective_seq_id"] for e in mine if not e["is_p2p"]} - {0})
            assert coll == list(range(1, len(coll) + 1))
            p2p = sorted({e["p2p_seq_id"] for e in mine if e["is_p2p"]})
            assert p2p == list(range(1, len(p2p) + 1))


def test_healthy_sends_match_recvs(healthy: Simulation, healthy_dumps: dict[int, Dump]) -> None:
    layout = healthy.spec.layout
    channels: Counter[tuple[str, int, int, str]] = Counter()
    pattern = re.compile(r"nccl:(send|recv) (\d+)(->|<-)(\d+)")
    for rank, dump in healthy_dumps.items():
        for e in dump["entries"]:
            if not e["is_p2p"]:
                continue
            found = pattern.fullmatch(e["profiling_name"])
            assert found is not None
            op, me, _, peer = found.groups()
            members = layout.group(int(e["process_group"][0])).ranks
            assert members[int(me)] == rank
            src, dst = (rank, members[int(peer)])[:: 1 if op == "send" else -1]
            channels[(e["process_group"][0], src, dst, op)] += 1
            assert e["input_sizes"] == e["output_sizes"]
    assert channels
    for (name, src, dst, op), count in channels.items():
        other = "recv" if op == "send" else "send"
        assert channels[(name, src, dst, other)] == count


def test_healthy_end_dumps_have_every_op_completed(
    healthy: Simulation, healthy_dumps: dict[int, Dump]
) -> None:
    for rank, dump in healthy_dumps.items():
        program = healthy.programs[rank]
        assert len(dump["entries"]) == program.ecum[-1]
        for e in dump["entries"]:
            member = e["state"] == "scheduled" and not e["retired"]
            assert e["state"] == "completed" or member
        markers = [e for e in dump["entries"] if e["state"] == "completed"]
        assert markers
        for status in dump["pg_status"].values():
            assert status["last_enqueued_collective"] >= status["last_completed_collective"]
    assert healthy.truth.status == "ok"


def test_healthy_mid_dumps_are_inside_the_run() -> None:
    sim = simulate(replace(BASE, dump="mid", timing=True, skew_s=0.001))
    assert not sim.hung
    states: Counter[str] = Counter()
    for rank, dump in _dumps(sim).items():
        assert len(dump["entries"]) < sim.programs[rank].ecum[-1]
        states.update(e["state"] for e in dump["entries"])
    assert states["completed"] and (states["started"] or states["scheduled"])


def test_ring_buffer_keeps_the_newest(healthy: Simulation) -> None:
    sim = simulate(replace(BASE, capacity=25))
    for rank, dump in _dumps(sim).items():
        entries = dump["entries"]
        total = sim.programs[rank].ecum[-1]
        assert len(entries) == 25
        assert [e["record_id"] for e in entries] == list(range(total - 25, total))
        full = _load(healthy, rank)
        assert full is not None
        tail = full["entries"][-25:]
        keys = ("profiling_name", "collective_seq_id", "p2p_seq_id", "op_id", "input_sizes")
        assert [[e[k] for k in keys] for e in entries] == [[e[k] for k in keys] for e in tail]


# --- writers ---------------------------------------------------------------------------------


def test_same_seed_gives_identical_files(tmp_path: Path) -> None:
    spec = replace(BASE, fault=faults.stop_host(5, 30), timing=True)
    for fmt, compress in (("torch", False), ("pickle", True), ("json", False)):
        output = Output(fmt=fmt, gzip=compress, pattern="rank_{rank}.x")  # type: ignore[arg-type]
        first = write_dumps(simulate(spec), tmp_path / f"a-{fmt}", output)
        second = write_dumps(simulate(spec), tmp_path / f"b-{fmt}", output)
        assert [p.name for p in first] == [p.name for p in second]
        for a, b in zip(first, second, strict=True):
            assert a.read_bytes() == b.read_bytes()


def test_torch_layout_loads_to_what_python_pickle_wrote(healthy: Simulation) -> None:
    spec = replace(BASE, fault=faults.gpu_stuck_in(3, 20), timing=True, capacity=60)
    for sim in (healthy, simulate(spec)):
        for rank in range(sim.world_size):
            dump = sim.dump(rank)
            assert dump is not None
            torch_bytes = torch_pickle(dump)
            assert torch_bytes[:2] == b"\x80\x02" and b"\x95" not in torch_bytes[:3]
            assert pickle.loads(torch_bytes) == pickle.loads(python_pickle(dump))
            assert pickle.loads(torch_bytes) == dump_object(dump)


def test_json_carries_the_pickle_data(healthy: Simulation) -> None:
    sim = simulate(replace(BASE, fault=faults.gpu_stuck_before(2, 20), timing=True))
    for rank in (0, 2, 7):
        dump = sim.dump(rank)
        assert dump is not None
        from_pickle = pickle.loads(python_pickle(dump))
        from_json = json.loads(json_bytes(dump))
        # the documented differences of _dump_fr_trace_json
        assert from_json.pop("nccl_comm_state") == {}
        for status in from_pickle["pg_status"].values():
            for key, value in status.items():
                status[key] = str(value)
        for e in from_pickle["entries"]:
            e.pop("frames")
            e["process_group"] = list(e["process_group"])
            for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
                e[key] = e[key] or 0
        assert from_json == from_pickle
    raw = json_bytes(sim.dump(0))  # type: ignore[arg-type]
    assert raw.startswith(b'{"comm_lib_version":"2.21.5","entries":[{"collective_seq_id":1')


def test_file_names_and_gzip(tmp_path: Path) -> None:
    output = Output(
        fmt="json", gzip=True, pattern="nccl_trace_rank_container-node{host:02d}_{rank}"
    )
    spec = replace(BASE, layout=Layout(tp=4, pp=2, dp=2))
    paths = write_dumps(simulate(spec), tmp_path, output, workers=2)
    assert [p.name for p in paths][8:10] == [
        "nccl_trace_rank_container-node01_8.gz",
        "nccl_trace_rank_container-node01_9.gz",
    ]
    loaded = json.loads(gzip.decompress(paths[9].read_bytes()))
    assert loaded["version"] == "2.10" and "entries" in loaded


def test_empty_json_dump_has_no_entries_key() -> None:
    dump = RankDump(0, "2.10", [], "", [], [])
    assert "entries" not in json.loads(json_bytes(dump))
    assert pickle.loads(torch_pickle(dump)) == dump_object(dump)


# --- hangs and faults --------------------------------------------------------------------------


def test_hang_dump_waits_for_the_timeout() -> None:
    sim = simulate(replace(BASE, fault=faults.stop_host(6, 25), skew_s=0.5))
    assert sim.hung
    timeout = BASE.timeout_ms * 1_000_000
    first = sim.first_dumper
    times = sim.times[first]
    oldest = times.completed()
    first_dump = sim.dump_times[first]
    assert first_dump is not None
    assert first_dump >= times.enq[oldest] + timeout
    assert first_dump < times.enq[oldest] + timeout + BASE.poll_ms * 1_000_000
    for rank, when in enumerate(sim.dump_times):
        stuck = sim.times[rank].completed()
        if when is None or stuck >= len(sim.times[rank].enq):
            continue
        assert first_dump <= when <= first_dump + 500_000_000
        if sim.times[rank].enq[stuck] != NEVER:
            assert first_dump <= sim.times[rank].enq[stuck] + timeout + 100_000_000


def test_crash_writes_no_dump(tmp_path: Path) -> None:
    program = simulate(BASE).job.clean_program(5)
    unit = _unit(program, role=Role.WORLD, site="loss", step=1)
    sim = simulate(replace(BASE, fault=faults.crash(5, unit)))
    assert sim.dump(5) is None
    names = {p.name for p in write_dumps(sim, tmp_path, Output())}
    assert "nccl_trace_rank_5" not in names and len(names) == 7
    assert sim.hung
    assert sim.times[5].enqueued() == unit
    assert sim.truth.root == "dead_rank" and sim.truth.culprits == (5,)


def test_stop_host_rank_lacks_the_op_its_peers_recorded() -> None:
    program = simulate(BASE).job.clean_program(5)
    unit = _unit(program, role=Role.TP, site="mlp_fwd", step=1)
    sim = simulate(replace(BASE, fault=faults.stop_host(5, unit)))
    truth = sim.truth
    assert (truth.status, truth.root, truth.culprits) == ("hung", "not_joined", (5,))
    assert truth.ambiguous is None and truth.group is not None and truth.seq is not None
    dumps = _dumps(sim)
    peer = 4  # rank 5's tp peer
    assert truth.seq in _by_seq(dumps[peer], truth.group)
    assert truth.seq not in _by_seq(dumps[5], truth.group)
    assert max(_by_seq(dumps[5], truth.group)) == truth.seq - 1
    entry = _by_seq(dumps[peer], truth.group)[truth.seq][0]
    assert entry["profiling_name"] == truth.op == "nccl:all_reduce"
    assert entry["state"] == "scheduled" and not entry["retired"]


def test_stop_host_at_a_recv_names_the_waiting_sender() -> None:
    program = simulate(BASE).job.clean_program(5)
    unit = _unit(program, kind=Kind.RECV, step=1)
    sim = simulate(replace(BASE, fault=faults.stop_host(5, unit)))
    truth = sim.truth
    assert truth.seq_kind == "p2p" and truth.seq_rank == 1 and truth.culprits == (5,)
    dump = _load(sim, 1)
    assert dump is not None
    waiting = [e for e in dump["entries"] if e["is_p2p"] and e["p2p_seq_id"] == truth.seq]
    assert waiting and waiting[0]["profiling_name"] == truth.op == "nccl:send 0->1"
    assert waiting[-1]["state"] != "completed"


@pytest.mark.parametrize("timing", [True, False])
def test_gpu_stuck_in(timing: bool) -> None:
    program = simulate(BASE).job.clean_program(3)
    unit = _unit(program, role=Role.WORLD, site="grad_norm", step=1)
    sim = simulate(replace(BASE, fault=faults.gpu_stuck_in(3, unit), timing=timing))
    truth = sim.truth
    assert (truth.root, truth.culprits, truth.group, truth.ambiguous) == (
        "stuck_collective",
        (3,),
        "0",
        None,
    )
    assert sim.times[3].comp[unit] == NEVER
    for rank, dump in _dumps(sim).items():
        entry = _by_seq(dump, "0")[truth.seq or 0][0]
        if rank == 3:
            assert entry["state"] == ("started" if timing else "scheduled")
            assert not entry["retired"] and entry["time_discovered_completed_ns"] is None
            assert (entry["time_discovered_started_ns"] is not None) == timing
        else:
            assert entry["state"] == "completed"
            assert entry["retired"] or entry["time_discovered_completed_ns"] is not None


def test_gpu_stuck_before_leaves_the_op_scheduled_and_peers_started() -> None:
    program = simulate(BASE).job.clean_program(3)
    unit = _unit(program, role=Role.DP, kind=Kind.COALESCED, step=0)
    sim = simulate(replace(BASE, fault=faults.gpu_stuck_before(3, unit), timing=True))
    truth = sim.truth
    assert truth.root == "stuck_collective" and truth.ambiguous is None
    assert truth.culprits == (3,)
    dumps = _dumps(sim)
    dp_peer = 1
    mine = _by_seq(dumps[3], truth.group or "")[truth.seq or 0]
    theirs = _by_seq(dumps[dp_peer], truth.group or "")[truth.seq or 0]
    assert mine[-1]["profiling_name"] == "nccl:coalesced" and mine[-1]["state"] == "scheduled"
    assert theirs[-1]["state"] == "started"
    off = simulate(replace(sim.spec, timing=False))
    assert off.truth.ambiguous is not None and "timing" in off.truth.ambiguous


def test_skip_world_collective_blocks_in_a_subgroup() -> None:
    """r skips the world grad-norm all_reduce, goes on to a DP collective and blocks there
    while its DP peers block in the world collective waiting for it."""
    spec = replace(
        BASE, layout=Layout(tp=1, pp=1, dp=4), program=replace(BASE.program, backend="gloo")
    )
    program = simulate(spec).job.clean_program(2)
    unit = _unit(program, role=Role.WORLD, site="grad_norm", step=0)
    sim = simulate(replace(spec, fault=faults.skip(2, unit)))
    truth = sim.truth
    assert (truth.status, truth.root, truth.culprits, truth.group) == (
        "desync",
        "not_joined",
        (2,),
        "0",
    )
    assert truth.seq == program.cseq[unit] and truth.ambiguous is None
    dumps = _dumps(sim)
    assert truth.seq not in _by_seq(dumps[2], "0")
    assert dumps[2]["entries"][-1]["process_group"] == ("1", "dp")  # blocked there
    for peer in (0, 1, 3):
        entry = _by_seq(dumps[peer], "0")[truth.seq][0]
        assert entry["retired"]  # gloo: failed at its timeout, retired anyway
        assert entry["state"] == "scheduled"


def test_mismatch_and_p2p_mismatch_truth() -> None:
    program = simulate(BASE).job.clean_program(6)
    unit = _unit(program, kind=Kind.COALESCED, role=Role.TP, step=-1)
    sim = simulate(replace(BASE, fault=faults.mismatch(6, unit, "size", member=1)))
    truth = sim.truth
    assert (truth.root, truth.culprits, truth.op) == ("mismatch", (6,), "nccl:_broadcast_oop")
    dumps = _dumps(sim)
    mine = _by_seq(dumps[6], truth.group or "")[truth.seq or 0]
    theirs = _by_seq(dumps[7], truth.group or "")[truth.seq or 0]
    assert mine[1]["input_sizes"] != theirs[1]["input_sizes"]
    assert mine[-1]["state"] == theirs[-1]["state"] == "scheduled"
    batch = _unit(program, kind=Kind.BATCH, step=1)
    sim = simulate(replace(BASE, fault=faults.p2p_mismatch(6, batch, "dtype")))
    truth = sim.truth
    assert (truth.seq_kind, truth.seq_rank, truth.culprits) == ("p2p", 6, (6,))
    assert sim.hung


def test_mismatch_that_completes_lets_the_job_finish() -> None:
    program = simulate(BASE).job.clean_program(1)
    unit = _unit(program, role=Role.WORLD, site="grad_norm", step=0)
    sim = simulate(replace(BASE, fault=faults.mismatch(1, unit, "op", completes=True)))
    assert not sim.hung and sim.truth.status == "desync" and sim.truth.culprits == (1,)
    assert all(c != NEVER for t in sim.times for c in t.comp)


def test_stall_is_a_straggler_that_finishes() -> None:
    program = simulate(BASE).job.clean_program(2)
    unit = _unit(program, role=Role.TP, site="attn_fwd", step=1)
    sim = simulate(replace(BASE, fault=faults.stall(2, unit, 0.4)))
    assert not sim.hung
    truth = sim.truth
    assert (truth.status, truth.root, truth.lateness_s) == ("slow", "straggler", 0.4)
    assert truth.culprits == (2,)
    late = sim.times[2].enq[unit] - sim.times[3].enq[unit]
    assert 0.35e9 < late < 0.45e9


def test_gloo_records_no_p2p_and_breaks_pg_config() -> None:
    spec = replace(BASE, program=replace(BASE.program, backend="gloo"), timing=True)
    sim = simulate(spec)
    for rank, dump in _dumps(sim).items():
        assert dump["pg_config"] == {"": {"name": "", "desc": "", "ranks": "[]"}}
        assert dump["comm_lib_version"] == ""
        for e in dump["entries"]:
            assert e["profiling_name"].startswith("gloo:")
            assert not e["is_p2p"] and "send" not in e["profiling_name"]
            assert e["state"] == "scheduled" and e["retired"]
            assert e["time_discovered_started_ns"] is None and "duration_ms" not in e
        assert not any(e["process_group"][1] == "pp" for e in dump["entries"])
        for e in dump["entries"]:  # no p2p on these groups: op ids follow collective seq ids
            assert e["op_id"] == e["collective_seq_id"] and e["p2p_seq_id"] == 0
        assert all(s["last_started_collective"] == -1 for s in dump["pg_status"].values())
        # send/recv still take op ids (one per op of a batch, no marker), seen in the program
        program = sim.programs[rank]
        pp_units = program.units_on(Role.PP, collective=False)
        assert pp_units and all(program.nent[u] == 0 for u in pp_units)
        ops = [program.opid[u] for u in pp_units]
        sizes = [program.mstart[u + 1] - program.mstart[u] for u in pp_units]
        assert ops == [1 + sum(sizes[:i]) for i in range(len(ops))]
        assert any(program.kind[u] not in COLL_KINDS for u in range(len(program)))


# --- campaign --------------------------------------------------------------------------------


@pytest.mark.slow
def test_draw_case_over_300_seeds() -> None:
    cases = [draw_case(seed) for seed in range(300)]
    assert {c.kind for c in cases} == set(CASE_KINDS)
    assert {c.family for c in cases} == set(LAYOUTS)
    assert {c.spec.backend for c in cases} == {"nccl", "gloo"}
    assert {c.variant for c in cases} >= {"timing", "no-timing", "started", "scheduled"}
    assert min(c.spec.layout.world_size for c in cases) == 8
    assert max(c.spec.layout.world_size for c in cases) == 256
    assert any(c.spec.capacity < 200 for c in cases)
    assert draw_case(11).describe() == draw_case(11).describe()
    # every small case simulates and yields a truth (the large ones: the campaign itself)
    for case in cases:
        if case.spec.layout.world_size <= 16:
            truth = case.truth
            assert (truth.status == "ok") == (case.spec.fault is None)
            if case.spec.fault is not None:
                assert truth.culprits == (case.spec.fault.rank,)


def test_case_write(tmp_path: Path) -> None:
    case = next(c for c in map(draw_case, range(100)) if c.kind == "crash")
    paths = case.write(tmp_path)
    assert len(paths) == case.spec.layout.world_size - 1
    assert "truth:" in case.describe()


# --- free-form jobs and the newer fault kinds --------------------------------------------------


def _two_group_job(steps: int = 3) -> tuple[CustomJob, int, int]:
    job = CustomJob(world_size=2, gpus_per_host=2)
    grads = job.new_group("grads", [0, 1])
    metrics = job.new_group("metrics", [0, 1])
    for rank in job.ranks():
        p = job.on(rank)
        for step in range(steps):
            p.step(step)
            p.compute(30_000, 800)
            p.coll(grads, "all_reduce", [(4096,)], site="grad_sync")
            p.coll(metrics, "all_reduce", [(16,)], site="log_metrics")
            p.coll(WORLD, "all_reduce", [(2,)], site="loss", sync=True)
    return job, grads, metrics


def test_custom_job_has_its_own_groups_and_runs_to_the_end() -> None:
    job, grads, metrics = _two_group_job()
    sim = simulate(SimSpec(layout=job, seed=1))
    assert not sim.hung and sim.truth.status == "ok"
    dump = _load(sim, 1)
    assert dump is not None
    assert {k: v["desc"] for k, v in dump["pg_config"].items()} == {
        "0": "default_pg",
        "1": "grads",
        "2": "metrics",
    }
    assert [e["pg_id"] for e in dump["entries"][:3]] == [1, 2, 0]
    assert [e["collective_seq_id"] for e in dump["entries"] if e["pg_id"] == 1] == [1, 2, 3]
    assert job.binding(0) == (0, grads, metrics)


def test_custom_ring_of_batched_p2p_with_recv_first_completes() -> None:
    job = CustomJob(world_size=4)
    cp = job.new_group("cp", range(4))
    for rank in job.ranks():
        p = job.on(rank)
        p.step(0)
        for _ in range(3):
            p.compute(400, 50)
            with p.batch(cp, "cp_ring_fwd"):
                if rank % 2:
                    p.recv(cp, (rank - 1) % 4, (8, 128))
                    p.send(cp, (rank + 1) % 4, (8, 128))
                else:
                    p.send(cp, (rank + 1) % 4, (8, 128))
                    p.recv(cp, (rank - 1) % 4, (8, 128))
    sim = simulate(SimSpec(layout=job))
    assert not sim.hung
    dump = _load(sim, 1)
    assert dump is not None
    assert [e["profiling_name"] for e in dump["entries"][:3]] == [
        "nccl:recv 1<-0",
        "nccl:send 1->2",
        "nccl:coalesced",
    ]
    with pytest.raises(ValueError):
        job.on(0).send(cp, 0, (1,))


def test_swap_on_two_groups_is_a_deadlock_of_both_ranks() -> None:
    job, grads, metrics = _two_group_job()
    program = simulate(SimSpec(layout=job)).job.clean_program(1)
    unit = _unit(program, role=grads, step=2)
    sim = simulate(SimSpec(layout=job, fault=faults.swap(1, unit)))
    truth = sim.truth
    assert (truth.status, truth.root, truth.culprits) == ("desync", "deadlock", (0, 1))
    assert (truth.group, truth.seq, truth.ambiguous) == (str(grads), 3, None)
    for rank, first in ((0, grads), (1, metrics)):
        dump = _load(sim, rank)
        assert dump is not None
        waiting = [e for e in dump["entries"] if e["state"] != "completed"]
        assert waiting[0]["process_group"][0] == str(first)


def test_swap_on_one_group_is_the_first_divergence() -> None:
    program = simulate(BASE).job.clean_program(2)
    gather = _unit(program, role=Role.TP, site="sp_gather", step=0)
    assert program.site[gather + 1] == "attn_fwd"
    sim = simulate(replace(BASE, fault=faults.swap(2, gather)))
    truth = sim.truth
    assert (truth.status, truth.root, truth.culprits) == ("desync", "mismatch", (2,))
    assert truth.seq == program.cseq[gather] and truth.op == "nccl:all_reduce"


@pytest.mark.parametrize("timing", [True, False])
def test_network_hang_leaves_every_member_waiting(timing: bool) -> None:
    program = simulate(BASE).job.clean_program(3)
    unit = _unit(program, role=Role.WORLD, site="grad_norm", step=1)
    sim = simulate(replace(BASE, fault=faults.network_hang(3, unit), timing=timing))
    truth = sim.truth
    assert (truth.status, truth.root, truth.culprits) == (
        "hung",
        "stuck_collective",
        tuple(range(8)),
    )
    assert (truth.ambiguous is None) == timing
    for dump in _dumps(sim).values():
        entry = _by_seq(dump, "0")[truth.seq or 0][0]
        assert entry["state"] == ("started" if timing else "scheduled")


def test_mismatch_with_an_explicit_shape() -> None:
    program = simulate(BASE).job.clean_program(6)
    unit = _unit(program, kind=Kind.COALESCED, role=Role.TP, step=-1)
    fault = faults.mismatch(6, unit, "size", member=1, shape=(9, 64))
    sim = simulate(replace(BASE, fault=fault))
    block = _by_seq(_dumps(sim)[6], sim.truth.group or "")[sim.truth.seq or 0]
    assert block[1]["input_sizes"] == [[9, 64]] and sim.truth.culprits == (6,)


def test_evaluation_pass_and_synchronized_exchanges() -> None:
    spec = replace(BASE, program=replace(BASE.program, eval_micro_batches=2, batch_p2p_sync=True))
    sim = simulate(spec)
    assert not sim.hung
    program = sim.programs[0]
    last_world = max(u for u in range(len(program)) if program.role[u] == Role.WORLD)
    assert program.site[last_world] == "eval_loss" and program.sync[last_world]
    assert all(program.sync[u] for u in range(len(program)) if program.kind[u] == Kind.BATCH)
    dump = _load(sim, 0)
    assert dump is not None
    eval_entries = [e for e in dump["entries"] if e["frames"][-2]["name"] == "pretrain"]
    assert any(e["frames"][-4]["name"] == "evaluate" for e in eval_entries)


def test_distinct_frames_load_to_the_same_objects_without_sharing(healthy: Simulation) -> None:
    dump = healthy.dump(0)
    assert dump is not None
    shared = pickle.loads(torch_pickle(dump))
    distinct = pickle.loads(torch_pickle(dump, shared_frames=False))
    assert distinct == shared == pickle.loads(python_pickle(dump, shared_frames=False))
    first, second = distinct["entries"][0]["frames"], distinct["entries"][1]["frames"]
    assert first[-1] == second[-1] and first[-1] is not second[-1]  # pretrain_gpt's <module>
    assert shared["entries"][0]["frames"][-1] is shared["entries"][1]["frames"][-1]
    assert len(torch_pickle(dump, shared_frames=False)) > len(torch_pickle(dump))


def test_write_files_reports_sizes_and_entries(tmp_path: Path) -> None:
    sim = simulate(replace(BASE, fault=faults.crash(5, 30)))
    seen: list[int] = []
    written = write_files(sim, tmp_path, Output(), workers=2, progress=lambda d, t: seen.append(d))
    assert [w.rank for w in written] == list(range(8)) and seen[-1] == 8
    assert written[5].path is None and written[5].size == 0
    for w in written:
        if w.path is not None:
            assert w.path.stat().st_size == w.size
            assert len(pickle.loads(w.path.read_bytes())["entries"]) == w.entries


# --- the sample sets and the benchmark generator built on frsim ---------------------------------


EXPECTED_LINE = re.compile(
    r"EXPECTED: status=(ok|desync|hung|slow) root=(\S+) culprits=([\d,]+|-) group=(\S+) "
    r"desc=(\S+) seq=(\d+|p\d+@\d+|-) op=(\S+)"
)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_sample_scenario_has_the_truth_it_intends(name: str) -> None:
    scenario = SCENARIOS[name]()
    truth = scenario.truth  # raises unless unambiguous with the intended status and root
    note = scenario.note()
    last = note.rstrip("\n").splitlines()[-1]
    found = EXPECTED_LINE.fullmatch(last)
    assert found is not None, last
    assert found.group(1) == truth.status
    assert found.group(3) == (",".join(map(str, truth.culprits)) or "-")
    assert "Files: `" in note


def test_write_scenario_is_deterministic(tmp_path: Path) -> None:
    write_scenario("nccl_deadlock", tmp_path / "a")
    write_scenario("nccl_deadlock", tmp_path / "b")
    a = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    b = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert a == b and set(a) == {"NOTE.md", "nccl_trace_rank_0", "nccl_trace_rank_1"}


def test_scenario_with_the_wrong_intent_fails_loudly() -> None:
    scenario = replace(SCENARIOS["nccl_not_joined"](), root="dead_rank")
    with pytest.raises(RuntimeError, match="wanted hung/dead_rank"):
        scenario.note()


def test_benchmark_generator_writes_a_set_whose_manifest_holds_the_truth(tmp_path: Path) -> None:
    spec = BenchSpec(64, fault="size_mismatch", steps=2, eval_micro_batches=2, capacity=120)
    manifest, reused = generate(spec, tmp_path, workers=2)
    assert not reused and manifest.files == 64 and manifest.entries == 64 * 120
    truth = manifest.expected
    assert (truth["status"], truth["root"], truth["culprits"]) == ("desync", "mismatch", [37])
    assert truth["group_desc"] == "tp" and truth["ambiguous"] is None
    again, reused = generate(spec, tmp_path, workers=1)
    assert reused and again == manifest
    verdict = {
        "status": "desync",
        "root_cause": "mismatch",
        "culprit_ranks": [37],
        "group": truth["group"],
        "collective_seq_id": truth["seq"],
        "p2p_seq_id": None,
    }
    assert verdict_matches(truth, verdict, 1)
    assert not verdict_matches(truth, {**verdict, "collective_seq_id": 1}, 1)
    assert not verdict_matches(truth, {**verdict, "status": "hung"}, 1)
    assert not verdict_matches(truth, {**verdict, "root_cause": "not_joined"}, 1)
    assert verdict_matches({"status": "ok"}, {"status": "ok"}, 0)


def test_benchmark_writers_give_the_same_job_in_every_format(tmp_path: Path) -> None:
    """One set per writer: torch (no suffix), pickle (protocols 4 and 2), json (no frames),
    pyjson (`json.dump` of the same objects) and gz (".gz"), each loading to the same dump; a
    manifest written before `writer` (with `pickler`) is reused."""

    def small(writer: str) -> BenchSpec:
        return BenchSpec(32, writer=writer, steps=2, eval_micro_batches=2, capacity=40)

    loaded = {}
    for writer in WRITERS:
        manifest, reused = generate(small(writer), tmp_path, workers=1)
        assert not reused and manifest.files == 32 and manifest.entries == 32 * 40
        folder = tmp_path / ("32" if writer == "torch" else f"32-{writer}")
        suffix = ".gz" if writer == "gz" else ""
        data = (folder / "dumps" / f"nccl_trace_rank_5{suffix}").read_bytes()
        if writer == "gz":
            data = gzip.decompress(data)
        loaded[writer] = json.loads(data) if "json" in writer else pickle.loads(data)
    assert loaded["torch"] == loaded["pickle"] == loaded["pickle2"] == loaded["gz"]
    assert loaded["pyjson"] == json.loads(json.dumps(loaded["torch"]))
    entries = loaded["json"]["entries"]
    assert (
        len(entries) == 40
        and "frames" not in entries[0]
        and "frames" in loaded["torch"]["entries"][0]
    )
    with pytest.raises(ValueError, match="frames"):
        BenchSpec(32, writer="json", frames="distinct")
    legacy = tmp_path / "32" / "manifest.json"
    raw = json.loads(legacy.read_text())
    raw["spec"]["pickler"] = raw["spec"].pop("writer")
    legacy.write_text(json.dumps(raw))
    assert generate(small("torch"), tmp_path, workers=1)[1]
