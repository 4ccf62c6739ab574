"""The causal rules of the diagnosis (README, "Hang diagnosis"), each a named test over a dump
set that exercises it: committed sample sets (real 16-rank gloo jobs, simulated 3D NCCL jobs)
and jobs the recorder simulator builds on the spot. The right answers come from how each set
was made (its NOTE.md, or the simulator's truth), never from fr-analyze."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.accuracy import answer, judge
from fr_analyzer import Analysis, analyze
from fr_analyzer.conclusion import Role
from fr_analyzer.model.records import FindingKind
from fr_analyzer.pipeline import Options
from tests.builders import make_dump, make_entry, renumber
from tests.conftest import Run
from tools.frsim import Layout, Output, ProgramSpec, SimSpec, faults, simulate, write_dumps
from tools.frsim.program import Backend, Kind

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def sample(name: str) -> Analysis:
    return analyze(SAMPLES / name, Options(workers=1))


def simulated(spec: SimSpec, tmp_path: Path, lost: tuple[int, ...] = ()) -> tuple[Analysis, Any]:
    """Simulate a job, write its dumps (but those of the `lost` ranks), analyze them; also
    return the simulator's truth."""
    sim = simulate(spec)
    write_dumps(sim, tmp_path, Output(fmt="torch", pattern="nccl_trace_rank_{rank}"))
    for rank in lost:
        (tmp_path / f"nccl_trace_rank_{rank}").unlink()
    return analyze(tmp_path, Options(workers=1)), sim.truth


def agrees(analysis: Analysis, truth: Any, culprits: tuple[int, ...]) -> None:
    """The simulator's truth names `culprits` (the rank the test is about), and fr-analyze
    gives that answer, judged as the fault campaign judges it (every finding explained)."""
    assert truth.ambiguous is None, truth.ambiguous
    assert truth.culprits == culprits, truth.describe()
    c = analysis.conclusion
    assert not judge(truth, answer(c)), c.answer


def unit_of(program: Any, kind: int, role: int, step: int, nth: int = 0) -> int:
    """The nth op of a kind and role (world 0, tp 1, dp 2, pp 3) in a step of a program."""
    found = [
        u
        for u in range(len(program.kind))
        if program.kind[u] == kind and program.role[u] == role and program.step[u] == step
    ]
    return found[nth]


THREE_D = Layout(tp=4, pp=2, dp=2)
PROGRAM = ProgramSpec(steps=2, micro_batches=2, batch_p2p_sync=True)


def clean_program(rank: int, layout: Layout = THREE_D, program: ProgramSpec = PROGRAM) -> Any:
    from tools.frsim.sim import Job

    return Job(SimSpec(layout=layout, program=program)).clean_program(rank)


# ---------------------------------------------------------------------------------------------
# 1. Cascades end at the stuck rank


@pytest.mark.parametrize(
    "name", ["nccl3d_cascade_started", "nccl3d_cascade_scheduled", "nccl3d_cascade_timing_off"]
)
def test_cascade_names_the_rank_stuck_in_its_tp_collective(name: str) -> None:
    c = sample(name).conclusion
    assert c.status.value == "hung"
    assert c.root is not None and c.root.kind.value == "stuck_collective"
    assert c.root.ranks == (5,)
    assert c.root.group is not None and (c.root.group.name, c.root.group.desc) == ("2", "tp")
    assert c.root.collective_seq_id == 15


def test_cascade_world_collective_not_joined_by_half_the_job_is_a_symptom() -> None:
    c = sample("nccl3d_cascade_started").conclusion
    world = [
        j
        for j in c.findings
        if j.finding.kind == FindingKind.NOT_JOINED
        and j.finding.group is not None
        and j.finding.group.name == "0"
    ]
    assert world and all(j.role == Role.SYMPTOM for j in world)
    # World #5: the stuck rank and the rank behind it in send/recv never issued it.
    assert [j.finding.culprit_ranks for j in world if j.finding.collective_seq_id == 5] == [(5, 13)]


def test_a_rank_blocked_in_an_earlier_op_is_never_the_culprit_of_a_later_collective() -> None:
    c = sample("nccl3d_cascade_started").conclusion
    assert c.root is not None
    later = [j for j in c.findings if j.finding.kind == FindingKind.NOT_JOINED]
    # Rank 13 never issued later collectives because it waits behind rank 5: it is named by
    # those findings, which the root explains, and is never the root itself.
    assert any(13 in j.finding.culprit_ranks for j in later)
    assert 13 not in c.root.ranks and all(j.explained for j in later)


def test_cascade_stuck_started_simulated(tmp_path: Path) -> None:
    site = unit_of(clean_program(6), Kind.COLL, 1, step=1, nth=2)
    spec = SimSpec(layout=THREE_D, program=PROGRAM, timing=True, fault=faults.gpu_stuck_in(6, site))
    agrees(*simulated(spec, tmp_path), culprits=(6,))


# ---------------------------------------------------------------------------------------------
# 2. In flight is not hung


@pytest.mark.parametrize(
    ("name", "findings"),
    [("nccl3d_mid_step", False), ("gloo3d_mid_step", True), ("gloo3d_unretired_barrier", True)],
)
def test_a_dump_taken_while_ops_were_in_flight_is_ok(name: str, findings: bool) -> None:
    c = sample(name).conclusion
    assert c.status.value == "ok", c.answer
    assert c.root is None and not c.timing.hung
    # gloo's unretired ops look like not_joined / state mismatches: all are in flight.
    assert bool(c.findings) == findings
    assert all(j.role == Role.IN_FLIGHT for j in c.findings)


@pytest.mark.parametrize("timing", [True, False])
def test_a_healthy_job_dumped_mid_step_is_ok_simulated(tmp_path: Path, timing: bool) -> None:
    spec = SimSpec(layout=THREE_D, program=PROGRAM, timing=timing, dump="mid", skew_s=0.5)
    analysis, truth = simulated(spec, tmp_path)
    assert truth.status == "ok" and analysis.conclusion.status.value == "ok"


def _waiting_job(age_s: float) -> dict[int, dict[str, Any]]:
    """Rank 1 never issues all_reduce #1; rank 0 waits in it, enqueued `age_s` before the
    dump, which rank 0's own running op dates (discovered as started during the dump)."""
    two = {"0": ("default_pg", [0, 1])}
    dump_ns = 10_000_000_000_000
    waiting = make_entry(
        "all_reduce",
        1,
        state="started",
        retired=False,
        time_created_ns=dump_ns - int(age_s * 1e9),
        time_discovered_started_ns=dump_ns,
        timeout_ms=600_000,
    )
    first = make_entry("all_reduce", 0, time_created_ns=dump_ns - int(age_s * 1e9) - 1_000)
    return {
        0: make_dump(renumber([first, waiting]), two),
        1: make_dump([dict(first)], two),
    }


def test_an_unfinished_op_younger_than_its_timeout_is_in_flight(run: Run) -> None:
    c = run(_waiting_job(age_s=3.0)).conclusion
    assert c.status.value == "ok" and c.timing.age.value == "young"


def test_an_unfinished_op_older_than_its_timeout_is_a_hang(run: Run) -> None:
    c = run(_waiting_job(age_s=601.0)).conclusion
    assert c.status.value == "hung" and c.timing.age.value == "old"
    assert c.root is not None and c.root.kind.value == "not_joined" and c.root.ranks == (1,)


# ---------------------------------------------------------------------------------------------
# 3. Unknown membership


def test_gloo_rank_with_no_dump_is_found_by_the_size_rules_not_blamed_as_a_size_mismatch() -> None:
    analysis = sample("gloo3d_crash")
    c = analysis.conclusion
    assert c.status.value == "hung"
    assert c.root is not None and c.root.kind.value == "dead_rank" and c.root.ranks == (15,)
    assert not [f for f in analysis.findings if f.kind == FindingKind.SIZE_MISMATCH]
    tp = next(g for g in analysis.groups.groups if g.name == "4")
    assert tp.ranks == (12, 13, 14, 15) and tp.source.value == "inferred"
    assert analysis.groups.world_size == 16


def test_gloo_groups_whose_ranks_stopped_before_their_first_op_are_completed(
    tmp_path: Path,
) -> None:
    # TP=4 x DP=4 on gloo; rank 14 disagrees in its first tp collective, so ranks 12-15 stop
    # before their first dp op: each dp group's entries show 3 ranks ({0, 4, 8}, ...). Grown
    # along their stride, the dp groups take exactly ranks 12-15, one each: {0, 4, 8, 12}.
    layout = Layout(tp=4, pp=1, dp=4)
    program = ProgramSpec(steps=1, micro_batches=1, backend="gloo")
    first_tp = unit_of(clean_program(14, layout, program), Kind.COLL, role=1, step=0)
    spec = SimSpec(layout=layout, program=program, fault=faults.mismatch(14, first_tp, "size"))
    analysis, truth = simulated(spec, tmp_path)
    agrees(analysis, truth, culprits=(14,))
    dp = sorted(g.ranks for g in analysis.groups.groups if g.desc == "dp")
    assert dp == [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)]
    # Ranks 12-15 never joining their dp all_reduce is a symptom, not a state mismatch.
    assert not analysis.conclusion.having(Role.INDEPENDENT)
    assert not [f for f in analysis.findings if f.kind == FindingKind.STATE_MISMATCH]


def test_gloo_rank_that_stopped_where_its_peers_went_on_is_named_not_a_starved_stage(
    tmp_path: Path,
) -> None:
    # TP=2 x PP=2 x DP=4 on gloo: rank 7 (stage 0, replica 3) stops before its first tp op.
    # Stage 1 of replica 3 (ranks 14, 15) then never gets its input: gloo records no
    # send/recv, so they stop at the same setup op as rank 7, and their dp peers wait for
    # them. Rank 7's tp peer went from that op straight to the one it waits for rank 7 in;
    # nobody did so for ranks 14 and 15. Their hosts' clocks (50 ms apart here) say rank 15
    # stopped first: they do not decide.
    layout = Layout(tp=2, pp=2, dp=4)
    program = ProgramSpec(steps=1, micro_batches=2, backend="gloo")
    first_tp = unit_of(clean_program(7, layout, program), Kind.COLL, role=1, step=0)
    fault = faults.stop_host(7, first_tp)
    spec = SimSpec(layout=layout, program=program, fault=fault, seed=5, max_clock_offset_ms=50)
    analysis, truth = simulated(spec, tmp_path)
    agrees(analysis, truth, culprits=(7,))
    assert not analysis.conclusion.having(Role.INDEPENDENT)


def test_gloo_rank_that_never_posted_its_pipeline_recv_is_named() -> None:
    # gloo records no send/recv: rank 4, blocked in its send to rank 12, looks idle too; rank
    # 12 stopped first.
    c = sample("gloo3d_pp_recv_missing").conclusion
    assert c.root is not None and c.root.ranks == (12,) and c.root.kind.value == "not_joined"


# ---------------------------------------------------------------------------------------------
# 4. Skipped collective, cycle across groups


@pytest.mark.parametrize(
    ("name", "culprit", "seq"), [("nccl3d_skip_world", 5, 4), ("gloo3d_skip_collective", 6, 3)]
)
def test_rank_that_skipped_a_world_collective_and_blocks_in_a_subgroup_is_the_culprit(
    name: str, culprit: int, seq: int
) -> None:
    c = sample(name).conclusion
    assert c.status.value == "desync", c.answer
    assert c.root is not None and c.root.kind.value == "not_joined" and c.root.deviates
    assert c.root.ranks == (culprit,)
    assert c.root.group is not None and c.root.group.name == "0"
    assert c.root.collective_seq_id == seq


def test_two_ranks_that_issue_two_groups_in_opposite_orders_are_a_deadlock() -> None:
    c = sample("nccl_deadlock").conclusion
    assert c.status.value == "desync"
    assert c.root is not None and c.root.kind.value == "deadlock" and c.root.ranks == (0, 1)
    # Rank 0 waits in grads #3 for rank 1, which waits in metrics #3 for rank 0 (its NOTE).
    assert c.root.wait_chain[:2] == ((0, "1", 3), (1, "2", 3))


# ---------------------------------------------------------------------------------------------
# 5. p2p mismatch


def test_p2p_mismatch_blames_the_side_that_deviates_from_the_channel_history() -> None:
    analysis = sample("nccl3d_p2p_mismatch")
    c = analysis.conclusion
    assert c.root is not None and c.root.ranks == (2,) and c.root.p2p_seq_id == 4
    (finding,) = [f for f in analysis.findings if f.kind == FindingKind.P2P_SIZE_MISMATCH]
    assert finding.ranks == (2, 10) and finding.culprit_ranks == (2,)
    assert "rank 2 sends" in finding.detail and "rank 10 receives" in finding.detail


def test_the_p2p_mismatch_explains_every_rank_that_waits_behind_either_end() -> None:
    # Rank 10, blocked in its recv from rank 2, holds up its tp peers and their dp peers:
    # their not_joined findings are symptoms of the mismatch, none is independent.
    c = sample("nccl3d_p2p_mismatch").conclusion
    assert not c.having(Role.INDEPENDENT)
    symptoms = c.having(Role.SYMPTOM)
    assert {r for j in symptoms for r in j.finding.culprit_ranks} >= {8, 9, 10, 11}


def test_p2p_mismatch_on_the_receiving_side_blames_the_receiver(tmp_path: Path) -> None:
    program = clean_program(12)
    recv = next(
        u for u in range(len(program.kind)) if program.kind[u] == Kind.RECV and program.step[u] == 1
    )
    spec = SimSpec(layout=THREE_D, program=PROGRAM, fault=faults.p2p_mismatch(12, recv, "size"))
    agrees(*simulated(spec, tmp_path), culprits=(12,))


# ---------------------------------------------------------------------------------------------
# 6. Straggler that finishes


@pytest.mark.parametrize(
    ("name", "rank", "group", "seq"),
    [("nccl3d_stall", 10, "3", 16), ("gloo3d_straggler", 9, "3", 10)],
)
def test_a_stall_in_a_job_that_finished_is_slow_with_rank_group_seq_and_lateness(
    name: str, rank: int, group: str, seq: int
) -> None:
    c = sample(name).conclusion
    assert c.status.value == "slow", c.answer
    assert c.root is not None and c.root.kind.value == "straggler"
    assert c.root.ranks == (rank,)
    assert c.root.group is not None and c.root.group.name == group
    assert c.root.collective_seq_id == seq
    assert c.root.lateness_s is not None and c.root.lateness_s > 3


def test_ranks_that_waited_for_the_straggler_are_not_blamed() -> None:
    # Ranks 0-3 reach their dp collective 5 s late after waiting for rank 10 in send/recv.
    c = sample("nccl3d_stall").conclusion
    assert c.root is not None and c.root.ranks == (10,) and c.root.kind.value == "straggler"
    assert c.root.group is not None and c.root.group.name == "3"
    assert any("explained" in e for e in c.root.evidence)


def test_a_rank_late_at_one_op_every_step_is_a_straggler() -> None:
    c = sample("nccl_straggler").conclusion
    assert c.status.value == "slow"
    assert c.root is not None and c.root.ranks == (6,) and c.root.collective_seq_id == 3


# ---------------------------------------------------------------------------------------------
# 7. No majority


@pytest.mark.parametrize(
    ("name", "culprit", "other"),
    [("nccl3d_dp_pair_mismatch", 13, 9), ("gloo3d_dp_dtype_mismatch", 5, 1)],
)
def test_a_pair_that_disagrees_blames_the_rank_that_deviates_from_groups_alike(
    name: str, culprit: int, other: int
) -> None:
    analysis = sample(name)
    c = analysis.conclusion
    assert c.root is not None and c.root.ranks == (culprit,)  # the higher rank: not the lower
    finding = c.root_finding
    assert finding is not None and "no majority" in finding.detail
    assert "agree" in finding.detail  # says what the judgement rests on
    assert finding.culprit_ranks == (culprit,) and other in finding.ranks


def _pair(sizes: tuple[list[int], list[int]], history: bool) -> dict[int, dict[str, Any]]:
    two = {"0": ("default_pg", [0, 1])}
    dumps = {}
    for rank, size in enumerate(sizes):
        earlier = [make_entry("all_reduce", 0, in_sizes=[[8]], out_sizes=[[8]])] if history else []
        now = make_entry(
            "all_reduce", 1, in_sizes=[size], out_sizes=[size], state="scheduled", retired=False
        )
        dumps[rank] = make_dump(renumber([*earlier, now]), two)
    return dumps


def test_a_pair_with_no_groups_alike_is_judged_on_its_own_history(run: Run) -> None:
    (finding,) = [
        f
        for f in run(_pair(([8], [4]), history=True)).findings
        if f.kind == FindingKind.SIZE_MISMATCH
    ]
    assert finding.culprit_ranks == (1,) and "this group used it at #0" in finding.detail


def test_two_ranks_left_at_odds_after_the_others_died_are_judged_on_the_groups_history(
    run: Run,
) -> None:
    # four ranks agreed on 8 elements at #0; at #1 ranks 0 and 1 died inside the op (gloo
    # aborted them, their traces never closed it), and ranks 2 and 3 hold 4 and 8
    four = {"0": ("default_pg", [0, 1, 2, 3])}
    dumps = {}
    for rank, size in enumerate([None, None, [4], [8]]):
        entries = [make_entry("all_reduce", 0, in_sizes=[[8]], out_sizes=[[8]])]
        if size is not None:
            entries.append(
                make_entry(
                    "all_reduce",
                    1,
                    in_sizes=[size],
                    out_sizes=[size],
                    state="scheduled",
                    retired=False,
                )
            )
        dumps[rank] = make_dump(renumber(entries), four)
    (finding,) = [f for f in run(dumps).findings if f.kind == FindingKind.SIZE_MISMATCH]
    assert finding.culprit_ranks == (2,) and "this group used it at #0" in finding.detail


def test_a_pair_with_nothing_to_tell_names_both_and_says_so(run: Run) -> None:
    (finding,) = [
        f
        for f in run(_pair(([4], [8]), history=False)).findings
        if f.kind == FindingKind.SIZE_MISMATCH
    ]
    assert finding.culprit_ranks == (0, 1) and "all are named" in finding.detail


# ---------------------------------------------------------------------------------------------
# Extra op


def test_a_rank_that_issued_an_extra_collective_is_the_culprit(run: Run) -> None:
    four = {"0": ("default_pg", [0, 1, 2, 3])}
    dumps = {}
    for rank in range(4):
        entries = [make_entry("all_reduce", s, group=("0", "default_pg")) for s in range(3)]
        if rank == 2:
            entries.append(
                make_entry(
                    "all_reduce_barrier",
                    3,
                    group=("0", "default_pg"),
                    state="scheduled",
                    retired=False,
                )
            )
        dumps[rank] = make_dump(renumber(entries), four)
    c = run(dumps).conclusion
    assert c.status.value == "desync"
    assert c.root is not None and c.root.kind.value == "mismatch" and c.root.ranks == (2,)
    assert "extra" in c.root.sentence


def test_a_collective_issued_by_every_rank_with_a_dump_is_not_extra_when_most_dumps_are_lost(
    tmp_path: Path,
) -> None:
    """Rank 9 stops before a world collective that every other rank issued, and the dumps of
    ranks 0-7 and 9 are lost: the seven ranks left all wait in it. Ranks with no dump are no
    evidence of having gone past it, so it is not "an extra op" of the seven that have a dump
    (a minority of 16): the hang waits for the ranks with no dump."""
    program = clean_program(9)
    world = unit_of(program, Kind.COLL, 0, step=1)
    spec = SimSpec(layout=THREE_D, program=PROGRAM, fault=faults.stop_host(9, world))
    analysis, _ = simulated(spec, tmp_path, lost=(0, 1, 2, 3, 4, 5, 6, 7, 9))
    c = analysis.conclusion
    assert c.status.value == "hung", c.answer
    assert "extra" not in c.answer
    assert c.root is not None and 9 in c.root.ranks, c.answer


# ---------------------------------------------------------------------------------------------
# Three rules a campaign of 550 independently simulated 3D jobs found wrong (7 misses), each
# over drawn cases aimed at its slice


def _startup_skew_job(delays_s: tuple[float, ...]) -> Any:
    from tools.frsim import CustomJob
    from tools.frsim.custom import WORLD

    job = CustomJob(world_size=len(delays_s))
    half = len(delays_s) // 2
    tp = [job.new_group("tp", list(range(k * half, (k + 1) * half))) for k in range(2)]
    for rank in job.ranks():
        p = job.on(rank)
        p.compute(host_us=round(delays_s[rank] * 1e6))  # the rank's start-up
        p.coll(WORLD, "all_reduce_barrier", [(1,)], site="init_barrier", sync=True)
        for step in range(3):
            p.step(step)
            p.compute(dev_us=30_000, host_us=500)
            p.coll(tp[rank // half], "all_reduce", [(16,)], site="attn_fwd")
            p.coll(WORLD, "all_reduce", [(2,)], site="loss", sync=True)
    return job


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
@pytest.mark.parametrize(
    "delays_s",
    [(0, 0.3, 4.5, 1.0, 0, 2.0, 0.2, 3.0), (6.0, 0, 0, 0), (0, 0, 0, 0, 0, 0, 0, 2.5)],
)
def test_ranks_that_reach_the_startup_barrier_seconds_apart_are_not_a_stall(
    tmp_path: Path, backend: Backend, delays_s: tuple[float, ...]
) -> None:
    """(a) A rank's first op has no previous op: arriving late there is start-up, not a
    stall of its own."""
    spec = SimSpec(layout=_startup_skew_job(delays_s), program=ProgramSpec(backend=backend))
    analysis, truth = simulated(spec, tmp_path)
    assert truth.status == "ok"
    assert analysis.conclusion.status.value == "ok", analysis.conclusion.answer


def _pipeline_with_collectives() -> tuple[Any, list[int]]:
    """Two stages of two ranks; each pipeline group carries a send/recv and then an
    all_reduce (tied embeddings) every step, then a world all_reduce."""
    from tools.frsim import CustomJob
    from tools.frsim.custom import WORLD

    job = CustomJob(world_size=4)
    pps = [job.new_group("pp", [0, 2]), job.new_group("pp", [1, 3])]
    for rank in job.ranks():
        pp, p = pps[rank % 2], job.on(rank)
        for step in range(3):
            p.step(step)
            p.compute(dev_us=30_000, host_us=500)
            if rank < 2:
                p.send(pp, rank + 2, (4, 8), site="send_forward")
            else:
                p.recv(pp, rank - 2, (4, 8), site="recv_forward")
            p.coll(pp, "all_reduce", [(16,)], site="layernorm_grads")
            p.coll(WORLD, "all_reduce", [(2,)], site="loss", sync=True)
    return job, pps


@pytest.mark.parametrize("timing", [True, False])
@pytest.mark.parametrize(("culprit", "step"), [(3, 1), (2, 1), (0, 2), (1, 1)])
def test_pg_status_after_a_send_recv_counts_p2p_ops_not_collectives(
    tmp_path: Path, culprit: int, step: int, timing: bool
) -> None:
    """(b) ProcessGroupNCCL's pg_status holds the last work's own counter: the p2p sequence id
    after a send/recv. A rank that skipped a collective in its pipeline group and then sent or
    received does not look as if it issued it."""
    from tools.frsim.program import COLL_KINDS
    from tools.frsim.sim import Job

    job, pps = _pipeline_with_collectives()
    program = Job(SimSpec(layout=job)).clean_program(culprit)
    group = pps[culprit % 2]
    (unit,) = [
        u
        for u in range(len(program.kind))
        if program.kind[u] in COLL_KINDS and program.role[u] == group and program.step[u] == step
    ]
    spec = SimSpec(layout=job, fault=faults.skip(culprit, unit), timing=timing)
    analysis, truth = simulated(spec, tmp_path)
    agrees(analysis, truth, (culprit,))


def _two_stage_job() -> tuple[Any, list[int]]:
    """Eight ranks, TP=2 x DP=2 x PP=2; from step 2 on, each stage's data-parallel pairs reduce
    a second bucket whose size differs by stage (64 on stage 0, 32 on stage 1)."""
    from tools.frsim import CustomJob
    from tools.frsim.custom import WORLD

    job = CustomJob(world_size=8)
    tp = [job.new_group("tp", [2 * k, 2 * k + 1]) for k in range(4)]
    dp = [job.new_group("dp", g) for g in ([0, 2], [1, 3], [4, 6], [5, 7])]
    pp = [job.new_group("pp", [r, r + 4]) for r in range(4)]
    for rank in job.ranks():
        stage, p = rank // 4, job.on(rank)
        pair = dp[rank % 2 + 2 * stage]
        for step in range(3):
            p.step(step)
            p.compute(dev_us=20_000, host_us=500)
            if stage == 0:
                p.coll(tp[rank // 2], "all_reduce", [(4, 8)], site="attn_fwd")
                p.send(pp[rank % 4], rank + 4, (4, 8), site="send_forward")
            else:
                p.recv(pp[rank % 4], rank - 4, (4, 8), site="recv_forward")
                p.coll(tp[rank // 2], "all_reduce", [(4, 8)], site="attn_fwd")
            p.coll(pair, "all_reduce", [(16,)], site="grad_sync")
            if step > 0:
                p.coll(pair, "all_reduce", [(64,) if stage == 0 else (32,)], site="grad_sync")
            p.coll(WORLD, "all_reduce", [(2,)], site="loss", sync=True)
    return job, dp


@pytest.mark.parametrize("culprit", [0, 1, 2, 3])
def test_groups_of_another_pipeline_stage_do_not_outvote_a_pair(
    tmp_path: Path, culprit: int
) -> None:
    """(c) A data-parallel pair disagrees at the first step boundary: rank `culprit` (stage 0)
    passes the size stage 1 uses. The other stage's pairs share the short history but not the
    program: only the pair of its own stage votes."""
    from tools.frsim.program import COLL_KINDS
    from tools.frsim.sim import Job

    job, dp = _two_stage_job()
    program = Job(SimSpec(layout=job)).clean_program(culprit)
    units = [
        u
        for u in range(len(program.kind))
        if program.kind[u] in COLL_KINDS and program.role[u] == dp[culprit % 2]
        if program.step[u] == 1
    ]
    spec = SimSpec(layout=job, fault=faults.mismatch(culprit, units[1], shape=(32,)))
    analysis, truth = simulated(spec, tmp_path)
    agrees(analysis, truth, (culprit,))
