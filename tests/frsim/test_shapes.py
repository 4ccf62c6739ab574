"""frsim's training shapes beyond the 3D grid (tools/frsim/shapes.py) and the recorders'
conventions they meet: FSDP2, HSDP, MoE all_to_all, DDP buckets, `new_subgroups` and monitored
barriers, each on NCCL and gloo. Every shape simulates and writes its dumps, its truth names the
injected culprit, and the entries follow what ProcessGroupNCCL and ProcessGroupGloo record
(`/work/shared/real_nccl/`, torch 2.13 gloo runs)."""

from __future__ import annotations

import itertools
import pickle
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tools.frsim import faults
from tools.frsim.campaign import SHAPE_KINDS, draw_case
from tools.frsim.custom import WORLD, CustomJob
from tools.frsim.program import BF16, COLL_KINDS, F32, Backend, Program, ProgramSpec
from tools.frsim.shapes import SHAPES, ShapeName, ShapeSpec, build, fsdp_step, moe_splits
from tools.frsim.sim import SimSpec, Simulation, simulate
from tools.frsim.writers import Output, torch_pickle, write_dumps

Dump = dict[str, Any]
BACKENDS: tuple[Backend, ...] = ("nccl", "gloo")


def _spec(shape: ShapeName, backend: Backend, **kw: Any) -> ShapeSpec:
    group = {"moe": 2}.get(shape, 4)
    return ShapeSpec(shape, **{"world": 8, "backend": backend, "steps": 2, "group": group, **kw})


def _sim(job: CustomJob, backend: Backend, fault: faults.Fault | None = None) -> Simulation:
    spec = SimSpec(
        layout=job,
        program=ProgramSpec(backend=backend),
        fault=fault,
        timeout_ms=5_000,
        gloo_abort=True,
    )
    return simulate(spec)


def _dump(sim: Simulation, rank: int) -> Dump:
    dump = sim.dump(rank)
    assert dump is not None
    loaded: Dump = pickle.loads(torch_pickle(dump))
    return loaded


def _entries(sim: Simulation, rank: int, group: str | None = None) -> list[Dump]:
    entries: list[Dump] = _dump(sim, rank)["entries"]
    return [e for e in entries if group is None or e["process_group"][0] == group]


def _unit(program: Program, site: str, nth: int = 0) -> int:
    found = [u for u in range(len(program)) if program.site[u] == site]
    return found[nth]


# --- every shape runs --------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_runs_healthy_on_both_backends_and_writes_its_dumps(
    shape: ShapeName, backend: Backend, tmp_path: Path
) -> None:
    sim = _sim(build(_spec(shape, backend)), backend)
    assert sim.truth.describe() == "ok"
    assert not sim.hung
    files = write_dumps(sim, tmp_path, Output(fmt="torch", pattern="rank_{rank}.pkl"))
    assert len(files) == 8
    for path in files:
        dump = pickle.loads(path.read_bytes())
        assert dump["entries"], path
        assert all(e["profiling_name"].startswith(f"{backend}:") for e in dump["entries"])
        if backend == "nccl":
            assert all(e["state"] == "completed" for e in dump["entries"])
        else:
            assert {e["state"] for e in dump["entries"]} == {"scheduled"}
            assert all(e["retired"] for e in dump["entries"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_rank_that_stops_before_a_collective_is_the_truth_s_culprit(
    shape: ShapeName, backend: Backend
) -> None:
    job = build(_spec(shape, backend))
    probe = _sim(job, backend)
    program = probe.job.clean_program(3)
    op = [u for u in range(len(program)) if program.kind[u] in COLL_KINDS][len(program) // 2]
    truth = _sim(job, backend, faults.stop_host(3, op)).truth
    assert truth.status == "hung" and truth.root == "not_joined" and truth.culprits == (3,)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES)
def test_a_skipped_collective_and_a_crash_name_the_injected_rank(
    shape: ShapeName, backend: Backend
) -> None:
    job = build(_spec(shape, backend, steps=3))
    program = _sim(job, backend).job.clean_program(5)
    colls = [u for u in range(len(program)) if program.kind[u] in COLL_KINDS]
    skipped = _sim(job, backend, faults.skip(5, colls[len(colls) // 2])).truth
    assert skipped.status == "desync" and skipped.culprits == (5,), skipped.describe()
    crashed = _sim(job, backend, faults.crash(5, colls[len(colls) // 3]))
    assert crashed.dump(5) is None
    assert crashed.truth.root == "dead_rank" and crashed.truth.culprits == (5,)


@pytest.mark.slow
def test_the_campaign_draws_every_shape_on_both_backends_with_the_injected_culprit() -> None:
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for seed in range(48):
        case = draw_case(seed, SHAPES)
        assert case.shape in SHAPES and case.kind in SHAPE_KINDS[case.shape]
        seen[(case.shape, case.backend)] += 1
        fault = case.spec.fault
        if fault is None:
            assert case.truth.status == "ok"
        elif case.truth.root is not None:
            assert fault.rank in case.truth.culprits, case.describe()
    assert set(seen) == {(s, b) for s in SHAPES for b in BACKENDS}


def test_without_shapes_the_campaign_draws_the_same_3d_cases_as_before() -> None:
    for seed in (0, 7, 31):
        plain, mixed = draw_case(seed), draw_case(seed, ("3d",))
        assert plain.shape == mixed.shape == "3d"
        assert plain.describe() == mixed.describe()


# --- NCCL's conventions (ProcessGroupNCCL, confirmed on /work/shared/real_nccl) -----------


def _fsdp_job(backend: Backend) -> CustomJob:
    """One step of FSDP-style ops on the world of 4: a gather, a coalesced pair of gathers, a
    reduce-scatter, a coalesced block of three reduce-scatters, a coalesced pair of
    all_reduces, a barrier."""
    job = CustomJob(world_size=4)
    for rank in job.ranks():
        p = job.on(rank)
        p.step(0)
        p.coll(WORLD, "_all_gather_base", [(16,)], BF16, "fsdp_unshard")
        p.fused(WORLD, "all_gather_into_tensor", [(16,), (2,)], BF16, "fsdp_prefetch")
        p.coll(WORLD, "_reduce_scatter_base", [(16,)], F32, "fsdp_reduce")
        p.fused(WORLD, "reduce_scatter_tensor", [(16,), (8,), (2,)], F32, "fsdp_reduce")
        p.fused(WORLD, "all_reduce", [(3,), (4, 2)], F32, "train_loss")
        if backend == "gloo":
            p.monitored_barrier(WORLD, "sync_barrier")
        else:
            p.coll(WORLD, "all_reduce_barrier", [(1,)], F32, "sync_barrier", sync=True)
        p.coll(WORLD, "all_reduce", [(1,)], F32, "train_loss", sync=True)
    return job


def _rows(entries: list[Dump]) -> list[tuple[Any, ...]]:
    return [
        (
            e["collective_seq_id"],
            e["op_id"],
            e["profiling_name"],
            e["input_sizes"],
            e["output_sizes"],
        )
        for e in entries
    ]


def test_nccl_records_tensor_gathers_scatters_and_coalescing_blocks_as_processgroupnccl() -> None:
    sim = _sim(_fsdp_job("nccl"), "nccl")
    entries = _entries(sim, 0)
    assert _rows(entries) == [
        (1, 1, "nccl:_all_gather_base", [[16]], [[64]]),
        (2, 2, "nccl:all_gather_into_tensor_coalesced", [[16], [2]], [[64], [8]]),
        (2, 2, "nccl:coalesced", [], []),
        (3, 3, "nccl:_reduce_scatter_base", [[64]], [[16]]),
        (4, 4, "nccl:reduce_scatter_tensor_coalesced", [[64], [32], [8]], [[16], [8], [2]]),
        (4, 4, "nccl:coalesced", [], []),
        (5, 5, "nccl:allreduce_coalesced", [[3], [4, 2]], [[3], [4, 2]]),
        (5, 5, "nccl:coalesced", [], []),
        (6, 6, "nccl:all_reduce_barrier", [[1]], [[1]]),
        (7, 7, "nccl:all_reduce", [[1]], [[1]]),
    ]
    # a fused block's entry and its marker are one op: both carry its state (real dumps)
    assert all(e["state"] == "completed" and e["retired"] for e in entries)
    assert entries[1]["frames"][0]["name"] == "_coalescing_manager"


def test_nccl_all_to_all_single_keeps_only_the_totals_of_uneven_splits() -> None:
    spec = _spec("moe", "nccl", world=8, group=2, steps=1, layers=2)
    sim = _sim(build(spec), "nccl")
    splits = moe_splits(spec, 512)
    ep_ranks = range(0, 8, 2)  # EP group of TP index 0: ranks 0, 2, 4, 6
    dispatch, combine = {}, {}
    for rank in ep_ranks:
        a2a = [e for e in _entries(sim, rank) if e["input_dtypes"] == ["BFloat16"]]
        a2a = [e for e in a2a if e["profiling_name"] == "nccl:all_to_all"]
        dispatch[rank], combine[rank] = a2a[0], a2a[1]
    for me, rank in enumerate(ep_ranks):
        total_out = sum(row[me] for row in splits[(0, 0, 0)])
        assert dispatch[rank]["input_sizes"] == [[512, 1024]]  # input totals equal
        assert dispatch[rank]["output_sizes"] == [[total_out, 1024]]
        assert combine[rank]["input_sizes"] == dispatch[rank]["output_sizes"]
        assert combine[rank]["output_sizes"] == [[512, 1024]]
    totals = [dispatch[r]["output_sizes"][0][0] for r in ep_ranks]
    assert len(set(totals)) > 1 and sum(totals) == 4 * 512


# --- gloo's conventions (ProcessGroupGloo, torch 2.13) -------------------------------------


def test_gloo_records_gathers_scatters_and_coalescing_blocks_as_processgroupgloo() -> None:
    sim = _sim(_fsdp_job("gloo"), "gloo")
    entries = _entries(sim, 1)
    assert _rows(entries) == [
        (1, 1, "gloo:all_gather", [[16]], [[4, 16]]),
        # two all_gather_into_tensor in one block: ONE entry, output [n_tensors, *first shard]
        (2, 2, "gloo:all_gather", [[16], [2]], [[2, 16]]),
        (3, 3, "gloo:all_reduce", [[64]], [[64]]),
        # three reduce_scatter_tensor in one block: three all_reduce entries, own seq ids
        (4, 4, "gloo:all_reduce", [[64]], [[64]]),
        (5, 5, "gloo:all_reduce", [[32]], [[32]]),
        (6, 6, "gloo:all_reduce", [[8]], [[8]]),
        # two all_reduce in one block: one entry listing both
        (7, 7, "gloo:all_reduce", [[3], [4, 2]], [[3], [4, 2]]),
        # the monitored_barrier took seq ids 8 and 9 (and op_ids 8, 9) unrecorded
        (10, 10, "gloo:all_reduce", [[1]], [[1]]),
    ]
    assert {e["state"] for e in entries} == {"scheduled"} and all(e["retired"] for e in entries)


def test_a_monitored_barrier_takes_two_seq_ids_everywhere_and_its_root_s_sends_take_op_ids() -> (
    None
):
    sim = _sim(_fsdp_job("gloo"), "gloo")
    for rank in range(4):
        last = _entries(sim, rank)[-1]
        assert last["collective_seq_id"] == 10
        # rank 0 receives from and answers each of the 3 others: 6 op_ids; the others 2
        assert last["op_id"] == (7 + 6 + 1 if rank == 0 else 10)
        status = _dump(sim, rank)["pg_status"]["0"]
        assert status["last_enqueued_collective"] == last["op_id"]  # gloo counts op_ids


# --- faults of the shapes -------------------------------------------------------------------


def test_a_rank_that_skips_the_monitored_barrier_did_not_join_it_where_the_others_have_a_gap() -> (
    None
):
    job = build(_spec("barrier", "gloo", steps=3))
    program = _sim(job, "gloo").job.clean_program(5)
    barrier = _unit(program, "sync_barrier", 1)
    sim = _sim(job, "gloo", faults.skip(5, barrier))
    truth = sim.truth
    assert (truth.status, truth.root, truth.culprits) == ("desync", "not_joined", (5,))
    assert truth.seq == program.cseq[barrier] and truth.ambiguous is None
    # rank 5 recorded its next op at the barrier's first seq id; the others stop before it
    assert _entries(sim, 5)[-1]["collective_seq_id"] == truth.seq
    assert _entries(sim, 4)[-1]["collective_seq_id"] == truth.seq - 1


def test_an_nccl_barrier_is_a_recorded_all_reduce_barrier_a_skip_is_a_visible_mismatch() -> None:
    job = build(_spec("barrier", "nccl", steps=3))
    program = _sim(job, "nccl").job.clean_program(2)
    barrier = _unit(program, "sync_barrier", 1)
    truth = _sim(job, "nccl", faults.skip(2, barrier)).truth
    assert (truth.root, truth.culprits, truth.seq) == ("mismatch", (2,), program.cseq[barrier])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dispatch_whose_input_total_differs_is_a_mismatch_of_its_rank(backend: Backend) -> None:
    job = build(_spec("moe", backend, steps=2, layers=2))
    program = _sim(job, backend).job.clean_program(4)
    dispatch = next(
        u
        for u in range(len(program))
        if (program.templates_of(u)[0].match or "").endswith("l1dispatch")
    )
    sim = _sim(job, backend, faults.mismatch(4, dispatch, field="split", grow=True))
    assert sim.hung
    truth = sim.truth
    assert (truth.status, truth.root, truth.culprits) == ("desync", "mismatch", (4,))
    assert truth.seq == program.cseq[dispatch] and truth.ambiguous is None
    mine = next(e for e in _entries(sim, 4, truth.group) if e["collective_seq_id"] == truth.seq)
    assert mine["input_sizes"] == [[513, 1024]]  # one row more than its 512 tokens
    # gloo aborts the receiver of the extra row (rank 4's successor in its EP group: rank 6)
    assert (sim.dump_times[6] is None) == (backend == "gloo")


def test_gloo_aborts_the_partner_of_a_wider_replicate_all_reduce_the_culprit_stays_named() -> None:
    spec = _spec("hsdp", "gloo", world=8, group=4, steps=2)
    job = build(spec)
    program = _sim(job, "gloo").job.clean_program(2)
    op = _unit(program, "hsdp_replicate", 5)
    sim = _sim(job, "gloo", faults.mismatch(2, op, field="dtype", grow=True))  # bf16 -> float
    replicate = sim.truth.group
    assert replicate is not None and job.group(int(replicate)).ranks == (2, 6)
    assert sim.dump_times[6] is None  # received more bytes than it posted: SIGABRT, no dump
    truth = sim.truth
    assert (truth.status, truth.root, truth.culprits) == ("desync", "mismatch", (2,))
    assert truth.group_desc == "replicate" and truth.ambiguous is None  # sibling groups show it
    mine = next(e for e in _entries(sim, 2, replicate) if e["collective_seq_id"] == truth.seq)
    assert mine["input_dtypes"] == ["Float"]


def test_a_dtype_of_the_same_width_completes_on_gloo_and_aborts_nobody() -> None:
    job = build(_spec("fsdp", "gloo"))
    program = _sim(job, "gloo").job.clean_program(1)
    op = _unit(program, "fsdp_prefetch", 1)
    sim = _sim(job, "gloo", faults.mismatch(1, op, field="dtype", completes=True))
    assert not sim.hung and all(t is not None for t in sim.dump_times)


def test_ddp_buckets_issued_in_another_order_show_at_the_first_reordered_bucket() -> None:
    job = build(_spec("ddp", "nccl", steps=3, buckets=4))
    program = _sim(job, "nccl").job.clean_program(3)
    bucket = _unit(program, "ddp_bucket", 2)  # the rebuilt buckets' first, step 1
    truth = _sim(job, "nccl", faults.swap(3, bucket)).truth
    assert (truth.status, truth.root, truth.culprits) == ("desync", "mismatch", (3,))
    assert truth.seq == program.cseq[bucket]


def test_ddp_buckets_are_async_on_gloo_and_waited_at_the_end_of_the_backward() -> None:
    job = build(_spec("ddp", "gloo", steps=2))
    sim = _sim(job, "gloo")
    program, times = sim.programs[0], sim.times[0]
    buckets = [u for u in range(len(program)) if program.site[u] == "ddp_bucket"]
    rebuilt = [u for u in buckets if program.step[u] == 1]
    # the host enqueued the next bucket before the previous one completed
    assert any(times.enq[b] < times.comp[a] for a, b in itertools.pairwise(rebuilt))
    after = rebuilt[-1] + 1
    assert times.enq[after] > times.comp[rebuilt[-1]]


def test_an_independent_hang_in_one_subgroup_leaves_the_other_subgroups_finishing() -> None:
    job = build(_spec("subgroups", "nccl", steps=3, group=4, world_sync=False))
    program = _sim(job, "nccl").job.clean_program(1)
    op = _unit(program, "subgroup_metrics", 4)
    sim = _sim(job, "nccl", faults.stop_host(1, op))
    assert sim.truth.culprits == (1,) and sim.truth.group == "1"
    other = sim.programs[6]
    assert sim.times[6].completed() == len(other)  # subgroup [4-7] ran to its end


# --- gloo's aborts and async waits, as real 8-rank gloo jobs show them ---------------------


def _ring_job(op: str) -> CustomJob:
    """Eight ranks: three world collectives of [64] floats (`op`), then the loss."""
    job = CustomJob(world_size=8)
    for rank in job.ranks():
        p = job.on(rank)
        for _ in range(3):
            p.coll(WORLD, op, [(64,)], F32, "grad_sync")
        p.coll(WORLD, "all_reduce", [(1,)], F32, "train_loss", sync=True)
    return job


def test_gloo_all_reduce_receives_from_the_successor_so_a_larger_tensor_kills_the_predecessor() -> (
    None
):
    sim = _sim(_ring_job("all_reduce"), "gloo", faults.mismatch(5, 1, grow=True))
    assert [r for r in range(8) if sim.dump_times[r] is None] == [4]
    assert all(sim.times[r].completed() == 1 for r in range(8) if r != 4)  # nobody completes
    assert sim.truth.culprits == (5,) and sim.truth.ambiguous is None


def test_gloo_all_gather_receives_from_the_predecessor_and_the_culprit_completes_its_op() -> None:
    sim = _sim(_ring_job("_all_gather_base"), "gloo", faults.mismatch(2, 1, grow=True))
    assert [r for r in range(8) if sim.dump_times[r] is None] == [3]
    assert sim.times[2].completed() == 2  # it got every chunk before rank 3 died
    assert all(sim.times[r].completed() == 1 for r in range(8) if r not in (2, 3))


def test_a_rank_posting_fewer_bytes_is_itself_aborted_and_its_mismatch_is_lost() -> None:
    sim = _sim(_ring_job("all_reduce"), "gloo", faults.mismatch(5, 1))  # halved
    assert sim.dump_times[5] is None
    assert sim.truth.culprits == (5,) and sim.truth.ambiguous is not None


def test_gloo_buckets_swapped_kill_the_culprit_too_so_nothing_shows_who_swapped() -> None:
    job = build(_spec("ddp", "gloo", steps=3, buckets=4))
    program = _sim(job, "gloo").job.clean_program(5)
    rebuilt = [u for u in range(len(program)) if program.site[u] == "ddp_bucket"][1:]
    bigger = next(u for u in rebuilt if u + 1 in rebuilt and program.item[u] != program.item[u + 1])
    sim = _sim(job, "gloo", faults.swap(5, bigger))
    assert sim.dump_times[5] is None
    assert sim.truth.ambiguous is not None and "aborted" in sim.truth.ambiguous


def _real_fsdp_job() -> CustomJob:
    """tools/make_shape_samples.py's FSDP job: 8 ranks, embed (one shard), block (two, a
    coalescing block), head (one), two steps, the loss."""
    job = CustomJob(world_size=8)
    layers: list[tuple[tuple[int, ...], ...]] = [((64,),), ((64,), (4,)), ((32,),)]
    for rank in job.ranks():
        p = job.on(rank)
        for step in range(2):
            p.step(step)
            fsdp_step(p, WORLD, layers, frozenset(), F32)
            p.coll(WORLD, "all_reduce", [(1,)], F32, "train_loss", sync=True)
    return job


def _last_seqs(sim: Simulation) -> dict[int, int | None]:
    out: dict[int, int | None] = {}
    for rank in range(sim.world_size):
        dump = sim.dump(rank)
        out[rank] = None if dump is None else dump.entries[-1].collective_seq_id
    return out


def test_fsdp_on_gloo_records_the_seq_ids_of_the_real_job() -> None:
    sim = _sim(_real_fsdp_job(), "gloo")
    rows = [
        (e["collective_seq_id"], e["profiling_name"], len(e["input_sizes"]))
        for e in _entries(sim, 0)
    ]
    # sample_dumps/fsdp_healthy, rank 0, step 1: gathers (the block's two in one entry),
    # reduce-scatters as all_reduce (the block's two as two seq ids), the loss
    assert rows[:10] == [
        (1, "gloo:all_gather", 1),
        (2, "gloo:all_gather", 2),
        (3, "gloo:all_gather", 1),
        (4, "gloo:all_gather", 2),
        (5, "gloo:all_reduce", 1),
        (6, "gloo:all_gather", 1),
        (7, "gloo:all_reduce", 1),
        (8, "gloo:all_reduce", 1),
        (9, "gloo:all_reduce", 1),
        (10, "gloo:all_reduce", 1),
    ]


def test_fsdp_on_gloo_runs_ahead_of_a_missing_reduce_scatter_as_far_as_the_real_job() -> None:
    """sample_dumps/fsdp_hang_before_reduce_scatter: rank 6 stops before seq 15 (the head's
    reduce-scatter); the others' async reduce-scatters and prefetch take them to seq 18, where
    they wait for a gather; rank 6's last entry is seq 14. And fsdp_crash: rank 3 dies before
    seq 12; the others end at seq 12, the prefetch they issued before waiting."""
    job = _real_fsdp_job()
    program = _sim(job, "gloo").job.clean_program(6)
    seq15 = next(u for u in range(len(program)) if program.cseq[u] == 15)
    hang = _sim(job, "gloo", faults.stop_host(6, seq15))
    assert _last_seqs(hang) == {0: 18, 1: 18, 2: 18, 3: 18, 4: 18, 5: 18, 6: 14, 7: 18}
    assert (hang.truth.root, hang.truth.culprits, hang.truth.seq) == ("not_joined", (6,), 15)
    seq12 = next(u for u in range(len(program)) if program.cseq[u] == 12)
    crash = _sim(job, "gloo", faults.crash(3, seq12))
    assert _last_seqs(crash) == {0: 12, 1: 12, 2: 12, 3: None, 4: 12, 5: 12, 6: 12, 7: 12}
    assert (crash.truth.root, crash.truth.seq) == ("dead_rank", 12)


def test_a_skipped_gather_meets_a_larger_one_and_gloo_kills_the_skipper_s_successor() -> None:
    """sample_dumps/fsdp_skip_all_gather: rank 5 skips the head's gather (seq 13) and its
    backward's coalesced gather lands there; rank 6 aborts, the others wait at seq 13."""
    job = _real_fsdp_job()
    program = _sim(job, "gloo").job.clean_program(5)
    seq13 = next(u for u in range(len(program)) if program.cseq[u] == 13)
    sim = _sim(job, "gloo", faults.skip(5, seq13))
    last = _last_seqs(sim)
    assert last[6] is None and all(last[r] == 13 for r in (0, 1, 2, 3, 4, 7))
    assert sim.truth.culprits == (5,) and sim.truth.seq == 13


# --- frsim against the real gloo jobs of the same programs (tools/make_shape_samples.py) ----

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def _recorded(entries: list[Dump]) -> list[tuple[Any, ...]]:
    """What a conformance check compares: every field the recorder derives from the program
    (names, sizes, dtypes, groups, both counters), not times, states or record ids."""
    return [
        (
            e["process_group"][0],
            e["process_group"][1],
            e["collective_seq_id"],
            e["op_id"],
            e["profiling_name"],
            e["input_sizes"],
            e["output_sizes"],
            e["input_dtypes"],
            e["output_dtypes"],
        )
        for e in entries
    ]


def _real(name: str, rank: int) -> Dump:
    with (SAMPLES / name / f"rank_{rank}.pkl").open("rb") as f:
        dump: Dump = pickle.load(f)
    return dump


@pytest.mark.parametrize("rank", [0, 5])
def test_frsim_writes_the_real_fsdp_jobs_entries_on_gloo(rank: int) -> None:
    """sample_dumps/fsdp_healthy: three layers (embed shard [4, 16]; block [4, 16] and [4],
    gathered and reduce-scattered as coalescing blocks; head [2, 16]), two steps, the loss.
    frsim's FSDP2 program records the same entries, names, sizes, dtypes and ids."""
    job = CustomJob(world_size=8)
    layers: list[tuple[tuple[int, ...], ...]] = [((4, 16),), ((4, 16), (4,)), ((2, 16),)]
    for r in job.ranks():
        p = job.on(r)
        for step in range(2):
            p.step(step)
            fsdp_step(p, WORLD, layers, frozenset(), F32, gather_dtype=F32)
            p.coll(WORLD, "all_reduce", [(1,)], F32, "train_loss", sync=True)
    assert _recorded(_entries(_sim(job, "gloo"), rank)) == _recorded(
        _real("fsdp_healthy", rank)["entries"]
    )


@pytest.mark.parametrize("rank", [0, 3])
def test_frsim_leaves_the_real_monitored_barriers_gaps_and_op_ids_on_gloo(rank: int) -> None:
    """sample_dumps/barrier_healthy: per step an all_reduce [64], a monitored_barrier (no
    entry; two seq ids everywhere, and rank 0's exchange with the seven others in op ids), an
    all_gather [2] and the loss. Same entries, seq ids, gaps, op ids and pg_status."""
    job = CustomJob(world_size=8)
    for r in job.ranks():
        p = job.on(r)
        for step in range(2):
            p.step(step)
            p.coll(WORLD, "all_reduce", [(64,)], F32, "grad_sync", sync=True)
            p.monitored_barrier(WORLD, "sync_barrier")
            p.coll(WORLD, "all_gather", [(2,)], F32, "log_metrics", sync=True)
            p.coll(WORLD, "all_reduce", [(1,)], F32, "train_loss", sync=True)
    sim = _sim(job, "gloo")
    real = _real("barrier_healthy", rank)
    assert _recorded(_entries(sim, rank)) == _recorded(real["entries"])
    mine = _dump(sim, rank)["pg_status"]["0"]["last_enqueued_collective"]
    assert mine == real["pg_status"]["0"]["last_enqueued_collective"]
