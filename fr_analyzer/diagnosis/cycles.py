"""Rule 3, ranks that wait for each other in a cycle: they issued ops in different orders.
The order the other ranks follow (`match.reference.PeerOrder`) names the rank that deviated:
it skipped the op the others wait for it in. With no such reference it is a deadlock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..match.reference import CYCLE_EDGES, CYCLE_RANKS
from ..model.ranks import label
from ..model.records import FindingKind
from . import p2p, sentences
from .context import Context, chain, code
from .records import RootCause, RootKind, WaitStep
from .waits import WaitGraph


@dataclass(frozen=True)
class Deviant:
    """A rank of a cycle that left the others' order, and the op it left it at."""

    rank: int
    waited_row: int  # the row of the op the others wait for it in


def culprit(ctx: Context, cycle: list[int]) -> Deviant | None:
    """The rank of a cycle that deviates from the order the other ranks follow, and the
    row of the op the others wait for it in; None for a genuine deadlock."""
    graph, members, peers = ctx.graph, set(cycle), ctx.peers
    votes: Counter[int] = Counter()
    shares: Counter[int] = Counter()
    p2p_votes: Counter[int] = Counter()
    skipped: dict[int, list[int]] = {}  # rank → rows of the ops it went past
    for x in cycle[:CYCLE_RANKS]:
        row_x = graph.frontier[x]
        key_x = peers.op_key(row_x)
        inside = [y for y in graph.waits_for(x) if y in members][:CYCLE_EDGES]
        for y in inside:
            # References: every other rank in y's role, in the cycle or not (the ranks
            # waiting with x issued both ops, in their program's order, when their host
            # ran ahead of their device).
            pair = {x, y}
            key_y = peers.op_key(graph.frontier[y])
            o = peers.before(row_x, graph.frontier[y], y, pair)
            if o == 0 and key_x is not None and key_y is not None:
                o = peers.order(key_x, key_y, pair, y)
            if o < 0:  # x's op comes first: y skipped it
                votes[y] += 1
                skipped.setdefault(y, []).append(row_x)
            elif o > 0:  # y's op comes first: x skipped y's op to issue its own
                votes[x] += 1
                skipped.setdefault(x, []).append(graph.frontier[y])
            elif key_x is not None and key_y is not None:
                # No rank in y's position shows the order: the op most of its group issued
                # is the one on the program's path; blocking in a minority's op deviates.
                share_x, share_y = peers.share(key_x), peers.share(key_y)
                if share_x > share_y and share_x > 0.5:
                    shares[y] += 1
                    skipped.setdefault(y, []).append(row_x)
                elif share_y > share_x and share_y > 0.5:
                    shares[x] += 1
                    skipped.setdefault(x, []).append(graph.frontier[y])
    for x in cycle[:CYCLE_RANKS]:
        # Sends/recvs are compared with what ranks in the same pipeline position issued at
        # the same p2p seq ids: a rank whose ops there differ went off the schedule.
        divergence = p2p.divergence_any(ctx, x)
        if divergence is not None:
            p2p_votes[x] += 1
            skipped[x] = [divergence]
    votes = p2p_votes or votes or shares
    if not votes:
        return None
    ranked = votes.most_common()
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        return None
    rank = ranked[0][0]
    rows = sorted(set(skipped.get(rank, [graph.frontier[rank]])))
    first = peers.first_in_program(rank, rows) if len(rows) > 1 else 0
    return Deviant(rank=rank, waited_row=rows[first or 0])


def deviant_root(ctx: Context, deviant: Deviant, graph: WaitGraph) -> RootCause:
    """The root cause of a rank that left the others' order: it skipped the op they wait
    for it in (or, for a send/recv of its own, left the pipeline schedule)."""
    rank, waited_row = deviant.rank, deviant.waited_row
    if int(ctx.table.rank[waited_row]) == rank and int(ctx.table.p2p_kind[waited_row]) != 0:
        return p2p.deviant_root(ctx, rank, waited_row, graph)
    waited_row = _first_skipped(ctx, rank, waited_row)
    ref = ctx.ref(waited_row)
    mine = ctx.graph.frontier.get(rank)
    evidence = []
    if mine is not None:
        own = ctx.ref(mine)
        evidence.append(
            f"rank {rank} is blocked in {sentences.where(own)} instead, which the other ranks "
            f"issue after {sentences.where(ref)}"
        )
    waiters = sorted(graph.waiting_for({rank}))
    evidence.append(
        f"{label(waiters)} wait (directly or not) for rank {rank}: a cycle of waits that "
        "the order of the other ranks resolves"
    )
    peers = [ctx.graph.frontier[w] for w in waiters if w in ctx.graph.frontier]
    return RootCause(
        kind=RootKind.NOT_JOINED,
        ranks=(rank,),
        group=ref.group,
        collective_seq_id=ref.collective_seq_id,
        p2p_seq_id=ref.p2p_seq_id,
        op=ref.op,
        sentence=sentences.deviant(rank=rank, skipped=ref),
        evidence=tuple(evidence),
        wait_chain=chain(ctx, {rank}, graph),
        deviates=True,
        code=code(ctx, mine, peers),
    )


def _first_skipped(ctx: Context, rank: int, waited_row: int) -> int:
    """Of the op the cycle says `rank` went past and the collectives its group issued
    and it alone never did, the one first in the program: skipping one op can leave the
    rank blocked where the cycle shows only a later consequence."""
    # The cycle's op may be of a group the rank is not in (its peers wait in it for
    # ranks that wait for the rank): it did not skip that one.
    waited_group = ctx.groups.groups[int(ctx.groups.entry_group[waited_row])]
    rows = [waited_row] if rank in waited_group.ranks else []
    for f in ctx.matches.findings:
        if f.kind != FindingKind.NOT_JOINED or f.culprit_ranks != (rank,):
            continue
        if f.group is None or f.collective_seq_id is None:
            continue
        unit = ctx.matches.collectives.find(f.group.uid, f.collective_seq_id)
        if unit is not None:
            rows.append(int(ctx.matches.collectives.unit_rows(unit)[0]))
    if not rows:
        return waited_row
    if len(rows) == 1:
        return rows[0]
    first = ctx.peers.first_in_program(rank, rows)
    return rows[first] if first is not None else rows[0]


def deadlock_root(ctx: Context, cycle: list[int], graph: WaitGraph) -> RootCause:
    """Ranks waiting for each other in a cycle that no other rank's order resolves."""
    evidence = []
    for r in cycle:
        row = graph.frontier.get(r)
        if row is not None:
            evidence.append(
                f"rank {r} is blocked in {sentences.where(ctx.ref(row))} waiting for "
                f"{label(graph.waits_for(r))}"
            )
    steps = []
    node = cycle[0]
    for _ in range(len(cycle) + 1):
        row = graph.frontier.get(node)
        ref = ctx.ref(row) if row is not None else None
        seq = None
        if ref is not None:
            seq = ref.collective_seq_id if ref.p2p_seq_id is None else ref.p2p_seq_id
        steps.append(WaitStep(rank=node, group=ref.group.name if ref else None, seq=seq))
        nxt = [w for w in graph.waits_for(node) if w in cycle]
        if not nxt:
            break
        node = min(nxt)
    first_row = graph.frontier.get(cycle[0])
    first = ctx.ref(first_row) if first_row is not None else None
    return RootCause(
        kind=RootKind.DEADLOCK,
        ranks=tuple(cycle),
        group=first.group if first else None,
        collective_seq_id=first.collective_seq_id if first else None,
        p2p_seq_id=first.p2p_seq_id if first else None,
        op=first.op if first else "",
        sentence=sentences.deadlock(cycle=cycle),
        evidence=tuple(evidence),
        wait_chain=tuple(steps),
        deviates=True,
    )
