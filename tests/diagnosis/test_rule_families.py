"""Each root-cause rule family of `fr_analyzer.diagnosis`, called on its own: a few ranks'
entries built by hand, loaded, grouped and matched, their wait graph built by `waits` (or by
hand), then one rule asked directly, never the whole pipeline. Each family has a case that
triggers it (the culprit ranks and the kind asserted) and a clean case where it stays silent.
The same rules over whole dump sets are in test_causal_rules.py and end_to_end/test_scenarios.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fr_analyzer.diagnosis import (
    RootKind,
    barriers,
    cycles,
    idle,
    p2p,
    stragglers,
    stuck,
    waits,
)
from fr_analyzer.diagnosis.context import Context, Resolved
from fr_analyzer.diagnosis.hang import hang_root
from fr_analyzer.diagnosis.mismatch import first_mismatch, mismatch_root
from fr_analyzer.diagnosis.positions import Refs, last_per_rank
from fr_analyzer.diagnosis.records import Thresholds
from fr_analyzer.diagnosis.waits import Wait, WaitGraph
from fr_analyzer.match import match
from fr_analyzer.model.groups import build_groups
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.pipeline import Options, load
from tests.builders import make_dump, make_entry, renumber, write_dumps

PENDING: dict[str, Any] = {"state": "scheduled", "retired": False}


def situation(tmp_path: Path, dumps: dict[int, dict[str, Any]]) -> Context:
    """What every rule reads, for these rank dumps: the entries, groups and matches, the
    wait graph `waits` builds, each rank's newest op."""
    got = load(write_dumps(tmp_path / "dumps", dumps), Options(workers=1))
    t = got.table
    groups = build_groups(got.dumps, t, got.unreadable)
    matches = match(got.dumps, t, groups)
    graph = waits.build(t, groups, matches)
    newest_ns = profiles_of(t).newest()
    incomplete = graph.incomplete.copy()
    incomplete[list(graph.frontier.values())] = True
    return Context(
        table=t,
        groups=groups,
        matches=matches,
        graph=graph,
        newest_ns=newest_ns,
        last_row=last_per_rank(t),
        refs=Refs(t, groups, newest_ns, incomplete),
        thresholds=Thresholds(),
        wrapped=frozenset(d.rank for d in got.dumps if d.wrapped),
    )


def world(n: int, **more: tuple[str, list[int]]) -> dict[str, tuple[str, list[int]]]:
    """Group configs: the world of `n` ranks as group "0", plus the named ones."""
    return {"0": ("default_pg", list(range(n))), **more}


# ---------------------------------------------------------------------------------------------
# mismatch: the first disagreement


def test_a_rank_that_sends_other_sizes_than_the_majority_is_the_mismatch_root(
    tmp_path: Path,
) -> None:
    """GIVEN three ranks whose all_reduce #1 has shape [4, 4] on ranks 0 and 1, [8, 8] on 2
    WHEN the mismatch rule looks at the matcher's findings
    THEN rank 2 is the root, a mismatch that deviates."""
    dumps = {
        r: make_dump(
            renumber(
                [
                    make_entry("all_reduce", 0),
                    make_entry("all_reduce", 1, in_sizes=[[8, 8]] if r == 2 else None),
                ]
            ),
            world(3),
        )
        for r in range(3)
    }
    ctx = situation(tmp_path, dumps)

    first = first_mismatch(ctx, ctx.matches.findings)

    assert first is not None
    root = mismatch_root(ctx, first)
    assert root.kind is RootKind.MISMATCH
    assert root.ranks == (2,)
    assert root.deviates


def test_ranks_that_agree_have_no_mismatch(tmp_path: Path) -> None:
    """GIVEN three ranks that issued the same all_reduces with the same sizes
    WHEN the mismatch rule looks at the matcher's findings
    THEN there is no first disagreement."""
    dumps = {
        r: make_dump(renumber([make_entry("all_reduce", 0), make_entry("all_reduce", 1)]), world(3))
        for r in range(3)
    }
    ctx = situation(tmp_path, dumps)

    assert first_mismatch(ctx, ctx.matches.findings) is None


# ---------------------------------------------------------------------------------------------
# stuck: a rank stuck on its own in a collective its peers completed


def stuck_job(tmp_path: Path) -> Context:
    """Three ranks: ranks 0 and 1 completed all_reduce #0 and wait in #1; rank 2 is still in
    #0 (started, not completed)."""
    dumps = {}
    for r in range(3):
        if r == 2:
            entries = [make_entry("all_reduce", 0, state="started", retired=False)]
        else:
            entries = [make_entry("all_reduce", 0), make_entry("all_reduce", 1, **PENDING)]
        dumps[r] = make_dump(renumber(entries), world(3))
    return situation(tmp_path, dumps)


def test_a_rank_left_in_a_collective_its_peers_completed_is_stuck(tmp_path: Path) -> None:
    """GIVEN ranks 0 and 1 completed all_reduce #0 and wait in #1, while rank 2 is still in #0
    WHEN the stuck rule is asked about rank 2's wait node
    THEN rank 2 is the root, a stuck collective (its device, not a program bug)."""
    ctx = stuck_job(tmp_path)
    node = ctx.graph.node_of[2]
    assert ctx.graph.waits[node].waits_for == ()  # it waits for nobody

    root = stuck.stuck_root(
        ctx, ranks=(2,), node=node, behind={0, 1}, graph=Resolved(graph=ctx.graph)
    )

    assert root.kind is RootKind.STUCK_COLLECTIVE
    assert root.ranks == (2,)
    assert not root.deviates
    assert "completed" in root.sentence


def test_the_hang_rules_pick_the_stuck_rank_everybody_waits_for(tmp_path: Path) -> None:
    """GIVEN the same job
    WHEN the hang rules weigh the candidates
    THEN the stuck rank 2 wins: both others wait for it."""
    ctx = stuck_job(tmp_path)

    hang = hang_root(ctx)

    assert hang.root is not None
    assert hang.root.kind is RootKind.STUCK_COLLECTIVE
    assert hang.root.ranks == (2,)


def test_a_job_whose_ops_all_completed_has_no_hang_root(tmp_path: Path) -> None:
    """GIVEN three ranks whose every all_reduce completed
    WHEN the hang rules run
    THEN nobody is blocked and there is no root."""
    dumps = {r: make_dump([make_entry("all_reduce", 0)], world(3)) for r in range(3)}
    ctx = situation(tmp_path, dumps)

    assert ctx.graph.frontier == {}
    assert hang_root(ctx).root is None


# ---------------------------------------------------------------------------------------------
# cycles: a deviant from the order the others follow, or a deadlock


def crossed(tmp_path: Path, *, reference: bool) -> Context:
    """Ranks 0 and 1 share groups "a" and "b": rank 0 waits in a #1, rank 1 in b #1 (each
    waits for the other). With `reference`, ranks 2 and 3 share groups alike ("a" and "b" of
    2 ranks) and issued a #1 before b #1."""
    n = 4 if reference else 2
    groups = world(n, A=("a", [0, 1]), B=("b", [0, 1]))
    if reference:
        groups |= {"A2": ("a", [2, 3]), "B2": ("b", [2, 3])}
    dumps = {}
    for r in range(n):
        a = ("A", "a") if r < 2 else ("A2", "a")
        b = ("B", "b") if r < 2 else ("B2", "b")
        entries = [make_entry("all_reduce", 0, group=a), make_entry("all_reduce", 0, group=b)]
        if r == 0:
            entries.append(make_entry("all_reduce", 1, group=a, **PENDING))
        elif r == 1:
            entries.append(make_entry("all_reduce", 1, group=b, **PENDING))
        else:
            entries += [make_entry("all_reduce", 1, group=a), make_entry("all_reduce", 1, group=b)]
        dumps[r] = make_dump(renumber(entries), groups)
    return situation(tmp_path, dumps)


def test_the_rank_of_a_cycle_that_left_the_others_order_is_the_deviant(tmp_path: Path) -> None:
    """GIVEN ranks 0 and 1 waiting for each other in a #1 and b #1, and ranks 2 and 3 that
    issued a #1 before b #1 in groups alike
    WHEN the cycle rule asks who deviated
    THEN rank 1 did: it skipped a #1, which rank 0 waits for it in; it never joined it."""
    ctx = crossed(tmp_path, reference=True)
    (cycle,) = ctx.graph.cycles()
    assert sorted(cycle) == [0, 1]

    deviant = cycles.culprit(ctx, cycle)

    assert deviant is not None and deviant.rank == 1
    assert ctx.ref(deviant.waited_row).group.desc == "a"
    root = cycles.deviant_root(ctx, deviant, ctx.graph.without_edges_from({1}))
    assert root.kind is RootKind.NOT_JOINED
    assert root.ranks == (1,)
    assert root.deviates


def test_a_cycle_no_other_rank_orders_is_a_deadlock(tmp_path: Path) -> None:
    """GIVEN the same crossed waits in a two-rank job, with nobody else to show the order
    WHEN the cycle rule asks who deviated, then the hang rules run
    THEN nobody is named a deviant, and the root is a deadlock of ranks 0 and 1."""
    ctx = crossed(tmp_path, reference=False)
    (cycle,) = ctx.graph.cycles()

    assert cycles.culprit(ctx, cycle) is None
    hang = hang_root(ctx)
    assert hang.root is not None
    assert hang.root.kind is RootKind.DEADLOCK
    assert sorted(hang.root.ranks) == [0, 1]


def test_a_deadlock_root_follows_a_hand_built_cycle(tmp_path: Path) -> None:
    """GIVEN a hand-built wait graph over the two-rank job: rank 0 waits for 1, 1 for 0
    WHEN the deadlock root is built from it
    THEN it names both ranks and its wait chain goes round the cycle."""
    ctx = crossed(tmp_path, reference=False)
    row0, row1 = ctx.graph.frontier[0], ctx.graph.frontier[1]
    graph = WaitGraph(
        frontier={0: row0, 1: row1},
        incomplete=np.zeros(ctx.table.n, dtype=bool),
        node_of={0: 0, 1: 1},
        waits=(Wait(row0, -1, (0,), (1,)), Wait(row1, -1, (1,), (0,))),
        unavailable=frozenset(),
    )

    root = cycles.deadlock_root(ctx, [0, 1], graph)

    assert root.kind is RootKind.DEADLOCK
    assert root.ranks == (0, 1)
    assert [step.rank for step in root.wait_chain] == [0, 1, 0]


def test_a_graph_without_cycles_has_no_deviant(tmp_path: Path) -> None:
    """GIVEN the stuck job (ranks 0 and 1 wait for rank 2, which waits for nobody)
    WHEN the cycles are looked for
    THEN there are none, and the cycle rule has nothing to resolve."""
    assert stuck_job(tmp_path).graph.cycles() == []


# ---------------------------------------------------------------------------------------------
# idle: ranks in no op, and gloo's blindness to send/recv


def gloo_stopped(tmp_path: Path) -> Context:
    """A gloo job of three ranks: rank 0 waits in all_reduce #1; ranks 1 and 2 stopped after
    #0, in no recorded op."""
    dumps = {}
    for r in range(3):
        entries = [make_entry("all_reduce", 0, backend="gloo")]
        if r == 0:
            entries.append(make_entry("all_reduce", 1, backend="gloo", **PENDING))
        dumps[r] = make_dump(renumber(entries), world(3))
    return situation(tmp_path, dumps)


def test_gloo_idle_ranks_are_taken_to_wait_for_the_one_that_stopped_first(
    tmp_path: Path,
) -> None:
    """GIVEN a gloo job where ranks 1 and 2 both stopped right where rank 0 went on to #1
    WHEN the idle rule adds the edges gloo does not record
    THEN rank 2 is taken to wait for rank 1 (the tie goes to the lower rank), and the hang's
    root is rank 1, which never joined #1."""
    ctx = gloo_stopped(tmp_path)

    assert idle.implicit_edges(ctx, ctx.graph) == {2: (1,)}
    hang = hang_root(ctx)
    assert hang.root is not None
    assert hang.root.kind is RootKind.NOT_JOINED
    assert hang.root.ranks == (1,)
    assert hang.view.implicit == {2: (1,)}


def test_gloo_idle_ranks_beside_a_rank_with_no_dump_are_taken_to_wait_for_it(
    tmp_path: Path,
) -> None:
    """GIVEN a gloo job of four ranks where rank 3 left no dump, ranks 1 and 2 stopped after
    all_reduce #0 (past their last recorded collective: a send/recv gloo does not record) and
    rank 0 waits in #1
    WHEN the idle rule adds the edges gloo does not record
    THEN ranks 1 and 2 are taken to wait for rank 3, and the hang's root is rank 3 (dead),
    its evidence saying what ranks 1 and 2 were doing."""
    dumps = {}
    for r in range(3):
        entries = [make_entry("all_reduce", 0, backend="gloo")]
        if r == 0:
            entries.append(make_entry("all_reduce", 1, backend="gloo", **PENDING))
        dumps[r] = make_dump(renumber(entries), world(4))
    ctx = situation(tmp_path, dumps)

    assert idle.implicit_edges(ctx, ctx.graph) == {1: (3,), 2: (3,)}
    hang = hang_root(ctx)
    assert hang.root is not None
    assert hang.root.kind is RootKind.DEAD_RANK
    assert hang.root.ranks == (3,)
    assert any("ranks 1-2 completed all_reduce #0" in e for e in hang.root.evidence)
    assert "ranks 1-2 stopped past their last recorded collective" in hang.root.sentence


def test_a_dead_rank_of_a_subgroup_is_named_where_its_subgroup_peers_wait(
    tmp_path: Path,
) -> None:
    """GIVEN a gloo job of two subgroups of four ranks, each running a program of its own (A
    three all_reduces per world all_reduce, B five), where rank 7 of B left no dump: ranks 4-6
    wait for it in B's #7, ranks 0-3 in the world's #1 (most of the waiters)
    WHEN the hang rules name the root
    THEN rank 7 is dead at B's #7: its subgroup peers, members of both groups, have not
    reached the world's #1, so B's op came first in its program; A, the group alike, numbers
    its ops its own way and does not tell."""
    groups = world(8, A=("undefined", [0, 1, 2, 3]), B=("undefined", [4, 5, 6, 7]))

    def program(r: int) -> list[dict[str, Any]]:
        mine, count = (("A", "undefined"), 3) if r < 4 else (("B", "undefined"), 5)
        ops = [make_entry("all_reduce", s, backend="gloo", group=mine) for s in range(1, count + 1)]
        ops.append(make_entry("all_reduce", 0, backend="gloo", group=("0", "default_pg")))
        if r < 4:  # three more of A, then the world's #1, where they wait
            ops += [make_entry("all_reduce", s, backend="gloo", group=mine) for s in (4, 5, 6)]
            ops.append(make_entry("all_reduce", 1, backend="gloo", **PENDING))
        else:  # B's #6, then #7, where they wait
            ops.append(make_entry("all_reduce", 6, backend="gloo", group=mine))
            ops.append(make_entry("all_reduce", 7, backend="gloo", group=mine, **PENDING))
        return renumber(ops)

    ctx = situation(tmp_path, {r: make_dump(program(r), groups) for r in range(7)})

    hang = hang_root(ctx)
    assert hang.root is not None
    assert hang.root.kind is RootKind.DEAD_RANK
    assert hang.root.ranks == (7,)
    assert hang.root.group is not None and hang.root.group.name == "B"
    assert hang.root.collective_seq_id == 7
    assert "ranks 4-6 wait for it in all_reduce #7 of group 'B'" in hang.root.sentence


def test_a_gloo_rank_that_stopped_is_named_at_the_first_op_it_never_issued(
    tmp_path: Path,
) -> None:
    """GIVEN a gloo job where rank 2 stopped after all_reduce #0 while ranks 0 and 1 went on
    with async ops: #1 and #2 retired (gloo retires a copy that timed out as one that
    completed), and they wait in #3
    WHEN the hang rules name the root
    THEN rank 2 never joined #1, the first op it never issued, not #3 where the others wait
    (while the `gloo_stopped` job, where the others wait in the op right after rank 2's
    newest, keeps that op)."""
    dumps = {}
    for r in range(3):
        entries = [make_entry("all_reduce", 0, backend="gloo")]
        if r < 2:
            entries += [make_entry("all_reduce", s, backend="gloo") for s in (1, 2)]
            entries.append(make_entry("all_reduce", 3, backend="gloo", **PENDING))
        dumps[r] = make_dump(renumber(entries), world(3))
    ctx = situation(tmp_path, dumps)

    hang = hang_root(ctx)
    assert hang.root is not None
    assert hang.root.kind is RootKind.NOT_JOINED
    assert hang.root.ranks == (2,)
    assert hang.root.collective_seq_id == 1
    assert "ranks 0-1 issued it and wait in all_reduce #3" in hang.root.sentence


def test_nccl_records_send_recv_so_no_edge_is_implied(tmp_path: Path) -> None:
    """GIVEN the same job on NCCL (which records send/recv)
    WHEN the idle rule looks for unrecorded waits
    THEN it adds none, and no idle rank is taken to be in a send/recv."""
    dumps = {}
    for r in range(3):
        entries = [make_entry("all_reduce", 0)]
        if r == 0:
            entries.append(make_entry("all_reduce", 1, **PENDING))
        dumps[r] = make_dump(renumber(entries), world(3))
    ctx = situation(tmp_path, dumps)

    assert idle.implicit_edges(ctx, ctx.graph) == {}
    assert not idle.in_unrecorded_p2p(ctx, 1, {})


# ---------------------------------------------------------------------------------------------
# barriers: a monitored_barrier skipped where no group's sequence ids show it yet


def barrier_job(tmp_path: Path, *, barrier: bool) -> Context:
    """A gloo job of four ranks, subgroups {0, 1} ("1") and {2, 3} ("2"). Step 1: a world
    all_reduce, a subgroup all_reduce, (with `barrier`) a world monitored_barrier (no entry,
    world #2 and #3), a subgroup all_gather, a world all_reduce. Step 2: a subgroup
    all_reduce, then rank 3 issues the subgroup all_gather and waits in it while the others
    stopped right before it (in step 2's barrier, when there is one)."""
    after = 4 if barrier else 2  # the world's seq id after step 1's barrier
    subgroups = {"1": ("sub", [0, 1]), "2": ("sub", [2, 3])}
    dumps = {}
    for r in range(4):
        sub = ("1", "sub") if r < 2 else ("2", "sub")
        entries = [
            make_entry("all_reduce", 1, backend="gloo", group=("0", "default_pg")),
            make_entry("all_reduce", 1, backend="gloo", group=sub),
            make_entry("all_gather", 2, backend="gloo", group=sub, out_sizes=[[2, 4, 4]]),
            make_entry("all_reduce", after, backend="gloo", group=("0", "default_pg")),
            make_entry("all_reduce", 3, backend="gloo", group=sub),
        ]
        if r == 3:
            entries.append(
                make_entry("all_gather", 4, backend="gloo", group=sub, out_sizes=[[2, 4, 4]])
                | PENDING
            )
        dumps[r] = make_dump(renumber(entries), world(4, **subgroups))
    return situation(tmp_path, dumps)


def test_a_rank_alone_in_the_gap_a_monitored_barrier_leaves_skipped_it(tmp_path: Path) -> None:
    """GIVEN a gloo job whose ranks left world #2-#3 unrecorded (a monitored_barrier) between
    the subgroup all_reduce and all_gather of step 1, and in step 2 rank 3 issued the
    all_gather while the others stopped after the all_reduce
    WHEN the hang rules look for the root
    THEN rank 3 skipped the world's monitored_barrier #5-#6, which the others are in: a
    desync (it deviates), not rank 2 never joining the all_gather."""
    ctx = barrier_job(tmp_path, barrier=True)

    skip = barriers.skipped_barrier(ctx, ctx.graph)
    assert skip is not None
    assert (skip.rank, skip.group.name, skip.seq, skip.inside) == (3, "0", 5, (0, 1, 2))
    hang = hang_root(ctx)
    assert hang.root is not None
    assert hang.root.kind is RootKind.NOT_JOINED and hang.root.deviates
    assert hang.root.ranks == (3,)
    assert hang.root.op == "monitored_barrier"
    assert hang.root.group is not None and hang.root.group.name == "0"
    assert hang.root.collective_seq_id == 5


def test_with_no_gap_before_the_op_no_barrier_is_taken_to_be_skipped(tmp_path: Path) -> None:
    """GIVEN the same job with no monitored_barrier (the world's seq ids have no gap)
    WHEN the hang rules look for the root
    THEN no barrier skip is read, and the rank waited for in the all_gather is the root."""
    ctx = barrier_job(tmp_path, barrier=False)

    assert barriers.skipped_barrier(ctx, ctx.graph) is None
    hang = hang_root(ctx)
    assert hang.root is not None
    assert hang.root.kind is RootKind.NOT_JOINED and not hang.root.deviates
    assert hang.root.ranks == (2,)


# ---------------------------------------------------------------------------------------------
# p2p: a rank whose send/recv left its pipeline position's schedule


def pipelines(tmp_path: Path, *, off_schedule: bool) -> Context:
    """Three pipelines of two stages ({0, 1}, {2, 3}, {4, 5}); each first stage sends twice to
    its second stage, which receives twice. With `off_schedule`, rank 1 sends back at its
    second p2p op instead of receiving."""
    pipes = {"P0": ("pp", [0, 1]), "P1": ("pp", [2, 3]), "P2": ("pp", [4, 5])}
    dumps = {}
    for r in range(6):
        name = f"P{r // 2}"
        # peers in a send/recv's name are group-local: stage 0 sends to 1, 1 receives from 0
        if r % 2 == 0:
            ops = [("send", "0->1"), ("send", "0->1")]
        elif r == 1 and off_schedule:
            ops = [("recv", "1<-0"), ("send", "1->0")]
        else:
            ops = [("recv", "1<-0"), ("recv", "1<-0")]
        entries = [
            make_entry(op, 0, p2p_seq=i + 1, peer=peer, group=(name, "pp"))
            for i, (op, peer) in enumerate(ops)
        ]
        dumps[r] = make_dump(renumber(entries), world(6, **pipes))
    return situation(tmp_path, dumps)


def test_a_rank_whose_send_recv_differs_from_its_mirrors_left_the_schedule(
    tmp_path: Path,
) -> None:
    """GIVEN three pipelines where rank 1 sends at p2p #2 while ranks 3 and 5, in the same
    position, receive there
    WHEN the p2p rule compares rank 1's send/recv with its mirrors'
    THEN it diverges at its p2p #2, and the root built there is a mismatch on rank 1."""
    ctx = pipelines(tmp_path, off_schedule=True)

    row = p2p.divergence_any(ctx, 1)

    assert row is not None
    assert ctx.ref(row).p2p_seq_id == 2
    root = p2p.deviant_root(ctx, 1, row, ctx.graph)
    assert root.kind is RootKind.MISMATCH
    assert root.ranks == (1,)
    assert root.deviates


def test_ranks_on_the_schedule_do_not_diverge(tmp_path: Path) -> None:
    """GIVEN the same pipelines
    WHEN the p2p rule asks about ranks 3 and 5 (one of their three mirrors is off), and about
    every rank of the pipelines that all follow the schedule
    THEN none of them diverges."""
    off = pipelines(tmp_path / "off", off_schedule=True)
    on = pipelines(tmp_path / "on", off_schedule=False)

    assert p2p.divergence_any(off, 3) is None
    assert p2p.divergence_any(off, 5) is None
    assert all(p2p.divergence_any(on, r) is None for r in range(6))


# ---------------------------------------------------------------------------------------------
# stragglers: a rank that made the others wait, in a job that completed


def test_a_stall_names_the_rank_that_arrived_seconds_late(tmp_path: Path) -> None:
    """GIVEN three ranks where rank 2 enqueued all_reduce #1 three seconds after the others,
    who then waited in it until it arrived
    WHEN the straggler rule measures lateness
    THEN rank 2 is the root, a straggler that stalled."""
    second = 1_000_000_000
    dumps = {}
    for r in range(3):
        late = 3 * second if r == 2 else 0
        entries = [
            make_entry("all_reduce", 0),
            make_entry(
                "all_reduce",
                1,
                time_created_ns=10 * second + late,
                time_discovered_completed_ns=13 * second + 1000,
            ),
        ]
        dumps[r] = make_dump(renumber(entries), world(3))
    ctx = situation(tmp_path, dumps)

    slow = stragglers.find(
        ctx.table, ctx.groups, ctx.matches, ctx.thresholds.straggler_ms, ctx.thresholds.stall_ms
    )

    assert slow is not None and slow.rank == 2 and slow.stall
    root = stragglers.straggler_root(slow)
    assert root.kind is RootKind.STRAGGLER
    assert root.ranks == (2,)


def test_ranks_that_arrive_together_have_no_straggler(tmp_path: Path) -> None:
    """GIVEN three ranks that enqueued and completed every all_reduce at the same times
    WHEN the straggler rule measures lateness
    THEN nobody held the others up."""
    dumps = {
        r: make_dump(renumber([make_entry("all_reduce", 0), make_entry("all_reduce", 1)]), world(3))
        for r in range(3)
    }
    ctx = situation(tmp_path, dumps)

    assert (
        stragglers.find(
            ctx.table, ctx.groups, ctx.matches, ctx.thresholds.straggler_ms, ctx.thresholds.stall_ms
        )
        is None
    )
