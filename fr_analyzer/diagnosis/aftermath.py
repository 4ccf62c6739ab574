"""What a root cause explains once it is chosen: the ranks that stand where they do because
of it (`behind`), and when its op happened on one rank's clock (`root_time`), to find that
moment in the logs.
"""

from __future__ import annotations

from ..model.ranks import label
from .context import Context, finding_rows, p2p_rows_in, same_op
from .records import RootCause, RootKind, RootTime
from .sentences import where
from .waits import WaitGraph


def behind(ctx: Context, root: RootCause, graph: WaitGraph) -> set[int]:
    """Ranks whose standing the root explains: those that wait for its ranks, directly or
    not, on `graph` (the wait graph the root was read on); for a disagreement, also every
    rank blocked in the op it disagrees in (they wait in it together, for nobody), or whose
    recording ends with it (gloo fails the op and the process stops there), and the ranks
    that wait for them."""
    anchor = set(root.ranks)
    rows: list[int] = []
    if root.finding is not None:
        blocked = ctx.graph.frontier
        unit = (
            ctx.matches.collectives.find(root.group.uid, root.collective_seq_id)
            if root.group is not None and root.collective_seq_id is not None
            else None
        )
        rows = finding_rows(ctx, root.finding)
        if unit is not None:
            rows += ctx.matches.collectives.unit_rows(unit).tolist()
        for row in rows:
            rank = int(ctx.table.rank[row])
            at = blocked.get(rank, ctx.last_row.get(rank))
            if at is not None and same_op(ctx, at, row):
                anchor.add(rank)
    if root.kind == RootKind.MISMATCH and root.group is not None and root.finding is not None:
        # After a disagreement its group is broken (gloo fails the op, or aborts a member
        # that received more than it posted): the members that took part in it, those
        # blocked in a later op of the group, and those lost with no dump stand where they
        # do because of it.
        group, seq = root.group, root.collective_seq_id
        took_part = {int(ctx.table.rank[r]) for r in rows}
        for rank in group.ranks:
            # gloo: an op that failed is retired like one that completed, so a rank whose
            # ops all failed has no frontier; its newest op says where it stopped.
            at = ctx.graph.frontier.get(rank, ctx.last_row.get(rank))
            if (
                rank in ctx.graph.unavailable
                or rank in took_part
                or (
                    at is not None
                    and seq is not None
                    and int(ctx.groups.entry_group[at]) == group.uid
                    and int(ctx.table.coll_seq[at]) >= seq
                )
            ):
                anchor.add(rank)
    if root.finding is not None and ctx.no_p2p_recorded():
        # No send/recv recorded: a rank with a dump that others wait for and that blocks
        # in no recorded op is in a send/recv, a pipeline stage starved of its input by
        # the ranks the disagreement stopped (see `idle.implicit_edges`).
        idle = [
            r
            for r in graph.waited_on()
            if r not in graph.node_of and r not in anchor and r not in graph.unavailable
        ]
        graph = graph.with_edges({r: tuple(sorted(anchor)) for r in idle})
    return (anchor - set(root.ranks)) | graph.waiting_for(anchor)


def root_time(ctx: Context, root: RootCause) -> RootTime | None:
    """When the root op happened, on the clock of the culprit (else of a rank waiting for
    it): the culprit's entry of that op, else (it never issued the op) its newest op,
    else (no dump) the first waiter's entry of the op."""
    t = ctx.table
    rows = _root_rows(ctx, root)
    stamped = [r for r in rows if int(t.t_created[r]) >= 0]
    for rank in root.ranks:
        mine = [r for r in stamped if int(t.rank[r]) == rank]
        if mine:
            row = min(mine)
            return RootTime(
                at_ns=int(t.t_created[row]),
                rank=rank,
                what=f"rank {rank} enqueued {where(ctx.ref(row))}",
            )
    for rank in root.ranks:
        last = ctx.last_row.get(rank)
        if last is not None and int(t.t_created[last]) >= 0:
            return RootTime(
                at_ns=int(t.t_created[last]),
                rank=rank,
                what=f"rank {rank} enqueued its newest op, {where(ctx.ref(last))} (it never "
                "issued the root op)",
            )
    if stamped:
        row = min(stamped, key=lambda r: (int(t.t_created[r]), r))
        rank = int(t.rank[row])
        return RootTime(
            at_ns=int(t.t_created[row]),
            rank=rank,
            what=f"rank {rank}, waiting for {label(root.ranks)}, enqueued {where(ctx.ref(row))}",
        )
    return None


def _root_rows(ctx: Context, root: RootCause) -> list[int]:
    """The rows of the root's op: its collective's, or its send/recv's."""
    if root.finding is not None:
        found = finding_rows(ctx, root.finding)
        if found:
            return found
    group = root.group
    if group is None:
        return []
    if root.collective_seq_id is not None and root.p2p_seq_id is None:
        unit = ctx.matches.collectives.find(group.uid, root.collective_seq_id)
        return [] if unit is None else ctx.matches.collectives.unit_rows(unit).tolist()
    if root.p2p_seq_id is None:
        return []
    out: list[int] = []
    for rank in root.ranks:
        mine = p2p_rows_in(ctx, rank, group.uid)
        out += mine[ctx.table.p2p_seq[mine] == root.p2p_seq_id].tolist()
    return out
