"""Who is missing from a collective unit, and why: a member that never issued it, against one
whose buffer no longer holds it (a ring-buffer wrap, or a dump taken a moment early), and the
sequence ids that every member leaves unrecorded (gloo's `monitored_barrier`), inside which the
fewer ranks that issued this unit skipped an op."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..model.records import Group
from .context import MatchContext
from .records import stateless
from .reference import newest_seqs, uniform_value
from .values import signature_value

I64 = npt.NDArray[np.int64]


def not_joined(ctx: MatchContext, group: Group, seq: int, issued: set[int]) -> list[int]:
    """The members of `group` that never issued collective `seq`: not among `issued` (the
    ranks holding it), with a dump, and not proven to have issued it out of their window."""
    return [
        member
        for member in group.ranks
        if member not in issued
        and member not in ctx.unavailable
        and not _issued(ctx, member, group.uid, seq)
    ]


def unrecorded_gap(
    ctx: MatchContext, group: Group, seq: int, present: tuple[int, ...], absent: list[int]
) -> tuple[int, int, int] | None:
    """Sequence ids that every member leaves unrecorded, again. gloo records no
    `monitored_barrier`, yet it takes two collective sequence ids on every caller; so do ops a
    recorder leaves out. When every member went from #a to #b (b > a + 1) before, the ranks
    (`absent`) that stopped right after an op like #a's are in such an op now, and the fewer
    ranks holding #seq, inside the gap, skipped it. Returns (a, b, width) of the earlier gap."""
    if not absent or len(present) >= len(absent) or ctx.unit_bounds is None:
        return None
    if any(last_seq(ctx, m, group.uid) != seq - 1 for m in absent):
        return None
    uids, seqs, _, _ = ctx.unit_bounds
    mine = np.flatnonzero(uids == group.uid)
    whole = (ctx.unit_ranks[mine] == len(set(group.ranks))) & (seqs[mine] < seq)
    full = seqs[mine][whole].tolist()  # units every member holds, by seq id
    value_of = signature_value(ctx.table)
    before = uniform_value(ctx, group.uid, seq - 1, value_of)
    if before is None:
        return None
    for a, b in zip(full[-2::-1], full[:0:-1], strict=True):
        if b - a > 1 and uniform_value(ctx, group.uid, a, value_of) == before:
            return a, b, b - a - 1
    return None


def last_seq(ctx: MatchContext, rank: int, uid: int) -> int | None:
    """The last collective sequence id of group `uid` that `rank` is known to have issued:
    its buffer's newest, or pg_status's last enqueued (None: neither)."""
    newest = _newest_seq(ctx, rank, uid)
    enqueued = ctx.last_enqueued.get((rank, uid))
    values = [v for v in (newest, enqueued) if v is not None and v >= 0]
    return max(values) if values else None


def newest_unit_seq(ctx: MatchContext, uid: int) -> int:
    """The highest collective seq id any member of group `uid` holds (-1: none)."""
    if ctx.unit_bounds is None:
        return -1
    uids, seqs, _, _ = ctx.unit_bounds
    mine = seqs[uids == uid]
    return int(mine.max()) if len(mine) else -1


def _newest_seq(ctx: MatchContext, rank: int, uid: int) -> int | None:
    """The newest collective sequence id of group `uid` in `rank`'s buffer (None: none left).
    Asked only for members absent from units that fail the vectorized checks, but then for
    every such member (16,384 in a world-wide hang), so all are found in one pass."""
    if ctx.newest is None:
        ctx.newest = newest_seqs(ctx.table, ctx.groups, ctx.coll_rows)
    return ctx.newest.get((rank, uid))


def _issued(ctx: MatchContext, rank: int, uid: int, seq: int) -> bool:
    """Did `rank` issue collective `seq` of group `uid`, even if it fell out of its buffer?"""
    newest = _newest_seq(ctx, rank, uid)
    enqueued = ctx.last_enqueued.get((rank, uid))
    last = max(-1 if newest is None else newest, -1 if enqueued is None else enqueued)
    if seq <= last:
        return True  # issued; absent here only because it is outside this rank's window
    proven = ctx.proof.get(uid, -1)
    if seq <= proven:
        # The group got past it, so every member issued it after its dump ended; unless the
        # member's own buffer ends before it (a wrap drops old entries, never new ones) and
        # no member of the group has anything in flight (the group stopped): then the peers'
        # copies retired by timing out (gloo retires an op that fails as one that completes)
        # after they went on with async ops (gloo's async_op returns at once): no proof.
        if newest is None or not _stateless_group(ctx, uid):
            return True
        return _group_in_flight(ctx, uid)
    # Nothing of this group left in a wrapped buffer and no pg_status for it: cannot tell.
    return newest is None and enqueued is None and ctx.wrapped.get(rank, False)


def _group_in_flight(ctx: MatchContext, uid: int) -> bool:
    """Whether a member of the group has an op it has not retired (gloo: still running at
    its dump), asked once per group."""
    found = ctx.in_flight.get(uid)
    if found is None:
        found = ctx.in_flight[uid] = not ctx.busy.isdisjoint(ctx.groups.groups[uid].ranks)
    return found


def _stateless_group(ctx: MatchContext, uid: int) -> bool:
    """Whether the group's collectives record no states (gloo): its proof is `went on`."""
    span = None
    if ctx.unit_bounds is not None:
        uids, _, starts, _ = ctx.unit_bounds
        at = np.flatnonzero(uids == uid)
        span = int(starts[at[0]]) if len(at) else None
    if span is None:
        return False
    return bool(stateless(ctx.table, ctx.coll_rows[span : span + 1])[0])
