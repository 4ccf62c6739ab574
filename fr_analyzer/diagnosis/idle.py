"""Idle ranks: ranks the others wait for that are blocked in no recorded op. Which op they
were due to issue next (`first_waited`), whether they went past it (`went_past`), and, on a
backend that records no send/recv (gloo), the blindness that makes a rank blocked in a
send/recv look idle: of the idle ranks, the root is a rank with no dump (its peers stopped past
their last recorded collective), else the one that stopped where its peers went straight on to
the op they wait for it in (else the one whose activity stopped first), and the others (stages
starved of their input, ring peers of a dead rank) are taken to wait for it (`implicit_edges`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..match.reference import CYCLE_RANKS, DUE_CANDIDATES
from ..model.arrays import distinct
from ..model.records import P2PKind
from .context import Context, last_seq
from .waits import Wait, WaitGraph

P2P_CALLS = frozenset(
    {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}
)
"""Functions whose frame in a stack shows a send/recv."""
_PIPELINE_WORDS = frozenset({"pp", "pipe", "pipeline", "pipeline_parallel", "stage"})


def implicit_edges(ctx: Context, g: WaitGraph) -> dict[int, tuple[int, ...]]:
    """On backends that record no send/recv, a rank blocked in one looks idle. Idle ranks
    that others wait for are taken to wait for a rank with no dump among them, else for the
    one that stopped first; but a rank
    whose whole group stopped with it (a pipeline stage starved of its input) waits for
    the ranks that stopped alone while their groups went on, whenever there are some."""
    if not ctx.no_p2p_recorded():
        return {}
    idle = [r for r in g.waited_on() if r not in g.node_of]
    if len(idle) < 2:
        return {}
    starved = {r for r in idle if r not in g.unavailable and stopped_with_group(ctx, r, g)}
    alone = [r for r in idle if r not in starved] or idle
    # Ranks that stopped at one op are told apart not by their hosts' clocks but by who
    # was due next: peers that went from that very op straight to one they wait for it in.
    # A rank with no dump among them is the prime suspect: the others stopped past their
    # last recorded collective, where the recorder keeps nothing (a send/recv with it).
    alone = [r for r in alone if r in g.unavailable or _stopped_before_next(ctx, r, g)] or alone
    first = min(alone, key=lambda r: (r not in g.unavailable, ctx.newest_ns.get(r, -1), r))
    stop = ctx.newest_ns.get(first, -1)
    units = ctx.matches.collectives
    last = ctx.last_row.get(first)
    stop_unit = int(units.entry_unit[last]) if last is not None else -1

    def stopped_with_first(r: int) -> bool:
        row = ctx.last_row.get(r)
        return stop_unit >= 0 and row is not None and int(units.entry_unit[row]) == stop_unit

    return {
        r: (first,)
        for r in idle
        if r != first
        and (r in starved or ctx.newest_ns.get(r, -1) > stop >= -1 or stopped_with_first(r))
    }


def _stopped_before_next(ctx: Context, rank: int, g: WaitGraph) -> bool:
    """Whether some rank waits for `rank` in the collective it issued right after the
    collective `rank` recorded last: `rank` stopped where it was due to issue that op."""
    units = ctx.matches.collectives
    last = ctx.last_row.get(rank)
    if last is None or int(units.entry_unit[last]) < 0:
        return False
    for node in g.nodes_waiting_for(rank):
        for waiter in g.waits[node].waiters[:CYCLE_RANKS]:
            row = g.frontier.get(waiter)
            if row is None or g.node_of.get(waiter) != node:
                continue
            rows = ctx.rows_of(waiter)
            prev = next(
                (r for r in range(row - 1, rows.start - 1, -1) if units.entry_unit[r] >= 0),
                None,
            )
            if prev is not None and int(units.entry_unit[prev]) == int(units.entry_unit[last]):
                return True
    return False


def stopped_with_group(ctx: Context, rank: int, g: WaitGraph) -> bool:
    """Whether every member of one of the rank's groups (not the world) is idle too and
    stopped at the same collective of that group."""
    t, units = ctx.table, ctx.matches.collectives
    last: dict[int, int] = {}
    for r in ctx.rows_of(rank):
        unit = int(units.entry_unit[r])
        if unit >= 0:
            last[int(units.group[unit])] = int(units.seq[unit])
    for uid, seq in last.items():
        group = ctx.groups.groups[uid]
        if group.size < 2 or group.size >= ctx.groups.world_size:
            continue
        found = units.find(uid, seq)
        if found is None:
            continue
        rows = units.unit_rows(found)
        members = set(t.rank[rows].tolist())
        if members != set(group.ranks) or any(m in g.node_of for m in members):
            continue
        if units.find(uid, seq + 1) is None:
            return True
    return False


def in_unrecorded_p2p(ctx: Context, rank: int, implicit: Mapping[int, tuple[int, ...]]) -> bool:
    """Whether `rank`, on a backend that records no send/recv (gloo), is likely blocked in
    one: it is in a pipeline group (one that carries send/recv, or is named for a
    pipeline), its newest op or that op's stack is a send/recv, or the diagnosis already
    took an idle rank to wait for it, or it for one, in an unrecorded send/recv."""
    if not ctx.no_p2p_recorded():
        return False
    if rank in implicit or any(rank in to for to in implicit.values()):
        return True
    t = ctx.table
    carry_p2p = set(distinct(ctx.groups.entry_group[t.p2p_kind != P2PKind.NONE]).tolist())
    for group in ctx.groups.groups:
        if rank in group.ranks and (group.uid in carry_p2p or _pipeline_desc(group.desc)):
            return True
    last = ctx.last_row.get(rank)
    if last is None:
        return False
    if int(t.p2p_kind[last]) != P2PKind.NONE:
        return True
    stack = int(t.stack[last])
    return stack >= 0 and any(f.name in P2P_CALLS for f in t.stacks[stack])


def _pipeline_desc(desc: str) -> bool:
    """Whether a group's description names a pipeline (`pp`, `mesh_pp`, `pipeline`)."""
    words = {w for w in re.split(r"[^a-z]+", desc.lower()) if w}
    return bool(words & _PIPELINE_WORDS)


def direct_waits(ranks: set[int], g: WaitGraph) -> list[Wait]:
    """Wait nodes whose ranks wait directly for one of `ranks`, most waiters first."""
    nodes = {n for r in ranks for n in g.nodes_waiting_for(r)}
    found = [g.waits[n] for n in nodes if g.waits[n].row >= 0]
    return sorted(found, key=lambda w: (-len(w.waiters), w.row))


def first_waited(ctx: Context, ranks: set[int], g: WaitGraph) -> tuple[Wait | None, list[Wait]]:
    """The op the ranks were due to issue next, among the ops others wait for them in: the
    first of them in the order that ranks in the same role follow (mirror ranks), else the
    one whose waiters started waiting first; and every op others wait for them in."""
    direct = direct_waits(ranks, g)
    if len(direct) < 2:
        return (direct[0] if direct else None), direct
    t = ctx.table

    def since(w: Wait) -> int:
        created = [int(t.t_created[g.frontier[r]]) for r in w.waiters if r in g.frontier]
        valid = [c for c in created if c >= 0]
        return min(valid) if valid else 1 << 62

    ranked = sorted(direct, key=lambda w: (since(w), -len(w.waiters), w.row))
    candidates = ranked[:DUE_CANDIDATES]
    # Of the ops others wait in, the one ranks with the same role issued first is the op
    # the rank was due to issue next; else its own history says which comes next.
    index = ctx.peers.first_in_program(min(ranks), [w.row for w in candidates])
    first = None if index is None else candidates[index]
    if first is None:
        mine = ctx.peers.own_next(min(ranks), [w.row for w in candidates])
        first = None if mine is None else candidates[mine]
    return (first if first is not None else ranked[0]), direct


def first_missing(ctx: Context, roots: set[int], row: int) -> int:
    """The first op of the group of the collective at `row` that `roots` never issued, as
    the row of one of its issuers: the op right after the newest one the roots recorded in
    that group, when every other member with a dump issued it (gloo runs async ops ahead, and
    its recorder retires the copies that timed out as it retires those that completed, so the
    peers may wait in a later op); else `row`."""
    units = ctx.matches.collectives
    unit = int(units.entry_unit[row])
    if unit < 0:
        return row
    uid, seq = int(units.group[unit]), int(units.seq[unit])
    lasts = [last_seq(ctx, r, uid) for r in roots]
    if not lasts or any(s is None for s in lasts):
        return row
    first = max(s for s in lasts if s is not None) + 1
    found = units.find(uid, first) if first < seq else None
    if found is None:
        return row
    rows = units.unit_rows(found)
    issuers = set(ctx.table.rank[rows].tolist())
    members = set(ctx.groups.groups[uid].ranks) - set(ctx.graph.unavailable)
    if issuers & roots or issuers != members - roots:
        return row
    candidates: list[int] = rows.tolist()
    return min(candidates, key=lambda r: (int(ctx.table.rank[r]), r))


def went_past(ctx: Context, missing_row: int, newest_row: int, roots: set[int]) -> bool:
    """Whether a rank whose newest op is `newest_row` went past the op at `missing_row`:
    the other ranks issue the missing op before that one."""
    owner = int(ctx.table.rank[newest_row])
    a, b = ctx.peers.op_key(missing_row), ctx.peers.op_key(newest_row)
    if a is not None and b is not None and a[0] == b[0]:
        return False  # same group: seq ids already say it stopped before the missing op
    o = ctx.peers.before(missing_row, newest_row, owner, roots)
    if o == 0 and a is not None and b is not None:
        o = ctx.peers.order(a, b, roots, owner)
    return o < 0
