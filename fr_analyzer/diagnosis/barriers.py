"""A skipped `monitored_barrier` that no group's sequence ids show yet. gloo records no
monitored_barrier, yet it takes two collective sequence ids on every caller. When the ranks
in it issued nothing in the barrier's group since, the gap is not visible at the hang (the
matcher finds it only when a later op of that group lands inside it); but the program shows
it: earlier, between the op the idle ranks stopped after and the op a lone rank now waits in,
every rank left two ids of one group unrecorded. The rank whose next call sits alone in that
gap skipped the barrier, and the idle ranks are in it, waiting for that rank.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from ..model.backends import NO_MONITORED_BARRIER_BACKENDS
from ..model.ranks import agree, label
from ..model.records import Group
from . import sentences
from .context import Context, chain, code, last_seq
from .records import RootCause, RootKind
from .sentences import where
from .waits import WaitGraph

BARRIER_WIDTH = 2  # the sequence ids a gloo monitored_barrier takes on every caller


@dataclass(frozen=True)
class BarrierSkip:
    """A rank that went past a monitored_barrier its peers are in."""

    rank: int
    row: int  # the op it issued instead, where it waits alone
    group: Group  # the barrier's group
    seq: int  # the first of the two sequence ids the barrier takes on that group
    inside: tuple[int, ...]  # ranks taken to be in the barrier (idle right before it)
    waited: tuple[int, ...]  # the ranks it waits for in its op (in the barrier)
    earlier: tuple[int, int]  # the same gap before: the group's ids around it, on the rank


def skipped_barrier(ctx: Context, g: WaitGraph) -> BarrierSkip | None:
    """The rank waiting, alone with its op, for idle ranks that stopped right before a gap
    that the program left in a group's sequence ids earlier (see the module's docstring)."""
    t = ctx.table
    if not t.n or not set(t.backends) <= NO_MONITORED_BARRIER_BACKENDS:
        return None
    units = ctx.matches.collectives
    asked: set[int] = set()  # wait nodes: the ranks blocked at one ask the same question
    for rank, row in sorted(g.frontier.items()):
        unit = int(units.entry_unit[row])
        node = g.node_of.get(rank)
        if unit < 0 or node is None or node in asked:
            continue
        asked.add(node)
        targets = g.waits[node].waits_for
        if not targets or any(r in g.unavailable or r in g.node_of for r in targets):
            continue
        prev = _previous_collective(ctx, rank, row)
        if prev is None:
            continue
        prev_unit = int(units.entry_unit[prev])
        if any(_unit_of(ctx, ctx.last_row.get(r)) != prev_unit for r in targets):
            continue  # the ranks waited for did not stop right where this one went on
        found = _earlier_gap(ctx, rank, prev, row)
        if found is None:
            continue
        uid, a, b = found
        last = last_seq(ctx, rank, uid)
        if last is None or any(last_seq(ctx, r, uid) != last for r in targets):
            continue
        group = ctx.groups.groups[uid]
        inside = sorted(
            r
            for r in group.ranks
            if r != rank
            and r not in g.unavailable
            and r not in g.node_of
            and last_seq(ctx, r, uid) == last
        )
        if not set(targets) <= set(inside):
            continue
        return BarrierSkip(
            rank=rank,
            row=row,
            group=group,
            seq=last + 1,
            inside=tuple(inside),
            waited=tuple(sorted(targets)),
            earlier=(a, b),
        )
    return None


def edges(skip: BarrierSkip) -> dict[int, tuple[int, ...]]:
    """The ranks in the barrier wait for the rank that skipped it."""
    return {r: (skip.rank,) for r in skip.inside}


def barrier_root(ctx: Context, skip: BarrierSkip, g: WaitGraph) -> RootCause:
    """The root cause: the rank skipped the group's monitored_barrier (a program bug)."""
    ref = ctx.ref(skip.row)
    group = skip.group
    at = f"monitored_barrier #{skip.seq}-#{skip.seq + 1} of group {group.name!r} ({group.desc})"
    a, b = skip.earlier
    inside = list(skip.inside)
    waited = list(skip.waited)
    evidence = (
        f"{label(waited)} stopped right after the op rank {skip.rank} issued before "
        f"{where(ref)}; earlier, between the same two ops, rank {skip.rank} went from #{a} to "
        f"#{b} of group {group.name!r}: an unrecorded collective (gloo records no "
        f"monitored_barrier, which takes two sequence ids) that {label(inside)} "
        f"{agree(inside, 'is', 'are')} in now, all past #{skip.seq - 1} of that group",
        f"rank {skip.rank} issued {where(ref)} instead, which the program issues after that "
        "barrier: it skipped it",
    )
    return RootCause(
        kind=RootKind.NOT_JOINED,
        ranks=(skip.rank,),
        group=group,
        collective_seq_id=skip.seq,
        p2p_seq_id=None,
        op="monitored_barrier",
        sentence=sentences.skipped_barrier(rank=skip.rank, inside=inside, at=at, ref=ref),
        evidence=evidence,
        wait_chain=chain(ctx, {skip.rank}, g),
        deviates=True,
        code=code(ctx, skip.row, []),
    )


def _unit_of(ctx: Context, row: int | None) -> int:
    return -1 if row is None else int(ctx.matches.collectives.entry_unit[row])


def _previous_collective(ctx: Context, rank: int, row: int) -> int | None:
    """The rank's collective row before `row` (another unit)."""
    units = ctx.matches.collectives
    mine = int(units.entry_unit[row])
    for r in range(row - 1, ctx.rows_of(rank).start - 1, -1):
        unit = int(units.entry_unit[r])
        if unit >= 0 and unit != mine:
            return r
    return None


def _signature(ctx: Context, row: int) -> tuple[int, ...]:
    t = ctx.table
    return (
        int(ctx.groups.entry_group[row]),
        int(t.op[row]),
        int(t.in_shape[row]),
        int(t.out_shape[row]),
    )


def _earlier_gap(ctx: Context, rank: int, prev: int, row: int) -> tuple[int, int, int] | None:
    """An earlier pair of the rank's consecutive collectives like (`prev`, `row`) across
    which one group's sequence ids jumped by exactly a barrier's width: (group uid, the
    group's id before the gap, the id after it). One pass over the rank's rows, then a
    binary search per group at each such pair."""
    units = ctx.matches.collectives
    want = (_signature(ctx, prev), _signature(ctx, row))
    span = ctx.rows_of(rank)
    rows = [r for r in range(span.start, prev) if int(units.entry_unit[r]) >= 0]
    at: dict[int, list[int]] = {}  # group uid → positions (in `rows`) of its ops
    seqs: dict[int, list[int]] = {}  # group uid → their seq ids
    for i, r in enumerate(rows):
        unit = int(units.entry_unit[r])
        uid = int(units.group[unit])
        at.setdefault(uid, []).append(i)
        seqs.setdefault(uid, []).append(int(units.seq[unit]))
    for i in range(len(rows) - 1, 0, -1):
        before, after = rows[i - 1], rows[i]
        if int(units.entry_unit[before]) == int(units.entry_unit[after]):
            continue
        if (_signature(ctx, before), _signature(ctx, after)) != want:
            continue
        for uid in sorted(at):
            k = bisect_left(at[uid], i)  # its first op at or after `after`
            if 0 < k < len(at[uid]) and seqs[uid][k] - seqs[uid][k - 1] - 1 == BARRIER_WIDTH:
                return uid, seqs[uid][k - 1], seqs[uid][k]
    return None
