"""Send/recv divergence: a rank whose send/recv ops, at some p2p seq id of a group, differ
from what most ranks in its pipeline position (its mirrors, `match.reference`) issued at that
seq id of their group alike left the pipeline schedule (a skipped or extra send/recv), and is
the root of the ranks that wait for it.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from ..match.reference import MIRRORS
from ..model.records import UnitKind
from . import sentences
from .context import Context, P2PSequence, chain, code
from .records import RootCause, RootKind
from .waits import WaitGraph


def divergence_any(ctx: Context, rank: int) -> int | None:
    """The first row where `rank`'s send/recv ops, in any of its groups, leave the
    schedule of the ranks in its pipeline position."""
    rows = ctx.rows_of(rank)
    p2p = _p2p_rows(ctx, rows)
    uids = ctx.groups.entry_group[p2p]
    seen: set[int] = set()
    for r, uid in zip(p2p.tolist(), uids.tolist(), strict=True):
        if uid in seen:
            continue
        seen.add(uid)
        found = divergence(ctx, rank, r)
        if found is not None:
            return found
    return None


def divergence(ctx: Context, rank: int, row: int, only: int | None = None) -> int | None:
    """The first send/recv row of `rank` in `row`'s group (at p2p seq id `only`, if given)
    whose op differs from what most ranks in its pipeline position issued at that p2p seq
    id of their group alike."""
    uid = int(ctx.groups.entry_group[row])
    group = ctx.groups.groups[uid]
    sequences = []
    for mirror in itertools.islice(ctx.peers.mirrors(rank, {group.desc}), MIRRORS * 4):
        alike = ctx.peers.mirror_group(group, mirror)
        if alike is not None:
            sequences.append(sequence(ctx, mirror, alike.uid))
    if not sequences:
        return None
    for seq, (first, signature) in sorted(sequence(ctx, rank, uid).items()):
        if only is not None and seq != only:
            continue
        theirs = [found[seq][1] for found in sequences if seq in found]
        if theirs and sum(x != signature for x in theirs) > len(theirs) / 2:
            return first
    return None


def sequence(ctx: Context, rank: int, uid: int) -> P2PSequence:
    """A rank's send/recv ops in one group: p2p seq id → (first row, signature)."""
    key = (rank, uid)
    found = ctx.p2p_sequences.get(key)
    if found is None:
        t = ctx.table
        found = {}
        rows = ctx.rows_of(rank)
        p2p = _p2p_rows(ctx, rows)
        p2p = p2p[ctx.groups.entry_group[p2p] == uid]
        if rank in ctx.wrapped and int(t.unit[rows.start]) == UnitKind.BATCH_MEMBER:
            # a batched block the ring buffer cut holds only its last ops
            p2p = p2p[t.marker[p2p] != t.marker[rows.start]]
        seqs, first = np.unique(t.p2p_seq[p2p], return_index=True)  # each seq's first row
        heads = p2p[first].tolist()
        for seq, r, signature in zip(seqs.tolist(), heads, _signatures(ctx, heads), strict=True):
            found[seq] = (r, signature)
        ctx.p2p_sequences[key] = found
    return found


def _p2p_rows(ctx: Context, rows: range) -> npt.NDArray[np.intp]:
    """The send/recv rows among a rank's rows, in order."""
    return np.flatnonzero(ctx.table.p2p_kind[rows.start : rows.stop] != 0) + rows.start


def _signature(ctx: Context, row: int) -> tuple[object, ...]:
    """What a send/recv (or a batched block of them) is: kinds and group-local peers."""
    return _signatures(ctx, [row])[0]


def _signatures(ctx: Context, heads: list[int]) -> list[tuple[object, ...]]:
    """`_signature` of each row of `heads`, the table's columns read once for all of them (a
    rank's sequence has thousands)."""
    t = ctx.table
    at = np.array(heads, dtype=np.int64)
    blocks: list[list[int]] = []
    for row, marker, unit in zip(heads, t.marker[at].tolist(), t.unit[at].tolist(), strict=True):
        if unit == UnitKind.BATCH_MEMBER and marker >= 0:
            blocks.append((np.flatnonzero(t.marker[row:marker] == marker) + row).tolist())
        else:
            blocks.append([row])
    rows = np.array([r for block in blocks for r in block], dtype=np.int64)
    kind = t.p2p_kind[rows]
    peer = np.where(kind == 1, t.peer_dst[rows], t.peer_src[rows])  # a send's dst, a recv's src
    ops = list(zip(kind.tolist(), peer.tolist(), strict=True))
    out: list[tuple[object, ...]] = []
    start = 0
    for block in blocks:
        out.append(tuple(sorted(ops[start : start + len(block)])))
        start += len(block)
    return out


def deviant_root(ctx: Context, rank: int, first: int, graph: WaitGraph) -> RootCause:
    """A rank whose send/recv sequence left the pipeline schedule its position follows,
    from row `first` on; `graph` tells who waits for it."""
    at = ctx.ref(first)
    row = ctx.graph.frontier.get(rank, first)
    mine = ctx.ref(row)
    waiters = sorted(graph.waiting_for({rank}))
    evidence = (
        f"rank {rank} is blocked in {sentences.where(mine)}",
        "from there on its send/recv ops differ from those the other ranks of its "
        "pipeline stage issue at the same p2p seq ids",
    )
    return RootCause(
        kind=RootKind.MISMATCH,
        ranks=(rank,),
        group=at.group,
        collective_seq_id=None,
        p2p_seq_id=at.p2p_seq_id,
        op=at.op,
        sentence=sentences.p2p_deviant(rank=rank, at=at, waiters=waiters),
        evidence=evidence,
        wait_chain=chain(ctx, {rank}, graph),
        deviates=True,
        code=code(ctx, row, []),
    )
