"""Coalesced collective blocks and batched p2p blocks on one rank: which rows are members,
which is each block's end marker."""

from __future__ import annotations

import numpy as np

from ...model.dump import I8, I32
from ...model.ops import MARKER_OPS
from ...model.records import P2PKind, UnitKind


def find_blocks(cols: dict[str, np.ndarray], ops: list[str], wrapped: bool) -> tuple[I8, I32]:
    """Recognise coalesced collective blocks and batched p2p blocks on one rank.

    A block's members come right before its end marker in the group's own order. An end marker
    belongs to a batched p2p block when the group's previous entry is a p2p op with the
    marker's p2p sequence id (its `is_p2p` is False, so that flag cannot tell); otherwise to a
    collective block whose members share the marker's collective sequence id. A marker with
    no members at the start of a wrapped buffer lost them to the wrap: it is left out.

    Vectorized: rows are put in group order, and a block's members are the run of rows just
    before its marker that share the previous row's kind and sequence id.
    """
    n = len(cols["group"])
    unit = np.full(n, UnitKind.COLLECTIVE, dtype=np.int8)
    marker = np.arange(n, dtype=np.int32)
    p2p_rows = cols["p2p_kind"] != P2PKind.NONE
    unit[p2p_rows] = UnitKind.P2P
    is_marker_op = np.array([op in MARKER_OPS for op in ops], dtype=bool)
    if not n or not is_marker_op.any() or not is_marker_op[cols["op"]].any():
        return unit, marker
    order = np.argsort(cols["group"], kind="stable")  # each group's rows together, in order
    group = cols["group"][order]
    is_m = is_marker_op[cols["op"][order]]
    p2p = p2p_rows[order]
    coll, p2p_seq = cols["coll_seq"][order], cols["p2p_seq"][order]
    pos = np.arange(n)
    first = np.ones(n, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    # floor: the group's last marker before each row, or the row before the group's first
    before = np.full(n, -1)
    before[1:] = np.where(is_m[:-1], pos[:-1], -1)
    floor = np.maximum.accumulate(np.maximum(before, np.where(first, pos - 1, -1)))
    # a run: consecutive rows of one group, neither a marker, of one kind and sequence id
    seq = np.where(p2p, p2p_seq, coll)
    brk = first | is_m
    brk[1:] |= is_m[:-1] | (p2p[1:] != p2p[:-1]) | (seq[1:] != seq[:-1])
    run_start = np.maximum.accumulate(np.where(brk, pos, 0))

    at = np.flatnonzero(is_m)
    prev = np.maximum(at - 1, 0)
    has_prev = (at - 1) > floor[at]  # the group's previous row is not a marker
    batch = has_prev & p2p[prev] & (p2p_seq[prev] == p2p_seq[at])
    block = has_prev & ~p2p[prev] & (coll[prev] == coll[at])
    later = coll[at] > coll[prev]  # meaningful where the group has a previous row
    bare = has_prev & ~batch & ~block & later  # a block whose members were not recorded
    lone = ~has_prev & (~first[at] & later if wrapped else True)
    kinds = np.full(len(at), UnitKind.ORPHAN_MARKER, dtype=np.int8)
    kinds[block | bare | lone] = UnitKind.BLOCK_MARKER
    kinds[batch] = UnitKind.BATCH_MARKER
    rows = order[at]
    unit[rows] = kinds
    marker[rows[kinds == UnitKind.ORPHAN_MARKER]] = -1
    for chosen, member_kind in ((batch, UnitKind.BATCH_MEMBER), (block, UnitKind.BLOCK_MEMBER)):
        ends = prev[chosen]
        starts = run_start[ends]
        sizes = ends - starts + 1
        members = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())
        unit[order[members]] = member_kind
        marker[order[members]] = np.repeat(rows[chosen], sizes)
    return unit, marker
