"""The join: which rows form which collective unit. Every collective row is joined on (group,
collective sequence id), vectorized; a unit whose members all hold the same ops, sizes, dtypes
and completion passes at a glance, and the few that do not get the per-unit look (`units`).
It also proves, per group, the newest sequence id every member must have issued (`proof`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from ..model.ops import (
    ALL_TO_ALL_OPS,
    GATHER_OPS,
    SCATTER_OPS,
    UNEVEN_INPUT_OPS,
    UNEVEN_OUTPUT_OPS,
)
from ..model.records import MISMATCH_KINDS, Finding
from ..model.table import EntryTable
from .context import MatchContext
from .records import COLLECTIVE_UNITS, CollectiveUnits, UnitRef, id_type, of_kinds, stateless
from .sizes import unlike_alike
from .units import check_unit

I64 = npt.NDArray[np.int64]


def _changes(*keys: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
    """Where a run of equal key tuples starts, in sorted arrays."""
    n = len(keys[0])
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    for key in keys:
        change[1:] |= key[1:] != key[:-1]
    return change


def segments(*keys: I64) -> tuple[I64, I64]:
    """Start indices of runs of equal key tuples in sorted arrays, and run id per element."""
    change = _changes(*keys)
    return np.flatnonzero(change), np.cumsum(change) - 1


def _by_group_and_seq(uid: I64, seq: I64) -> tuple[I64, I64, I64]:
    """A stable order of rows by (group uid, sequence id), and the uids and sequence ids in
    that order. When the pair fits one 32-bit key (a ring buffer spans far fewer sequence
    ids), one stable sort of it: rows come by rank and each rank's rows of a group by seq id,
    runs that numpy's stable sort of 32-bit keys merges (a third faster at 1,024 ranks than
    two radix sorts of 16-bit keys with a gather between), and both sorted columns come back
    from the key. Else two 16-bit sorts when both fit 16 bits; else one sort of a 64-bit
    combined key when the values allow it (they always do in real dumps), else a lexsort."""
    if not len(uid):
        return np.zeros(0, dtype=np.int64), uid, seq
    low, high = int(seq.min()), int(seq.max())
    span = high - low + 1
    groups = int(uid.max()) + 1
    if span * groups <= 1 << 32 and int(uid.min()) >= 0:
        packed = uid.astype(np.uint32) * np.uint32(span)
        packed += (seq - low).astype(np.uint32)
        order = np.argsort(packed, kind="stable").astype(np.int64, copy=False)
        high_part, low_part = np.divmod(packed[order], np.uint32(span))
        return order, high_part.astype(np.int64), low_part.astype(np.int64) + low
    if span <= 1 << 16 and groups <= 1 << 16:
        order = np.argsort((seq - low).astype(np.uint16), kind="stable")
        order = order[np.argsort(uid.astype(np.uint16)[order], kind="stable")]
        order = order.astype(np.int64, copy=False)
        return order, uid[order].astype(np.int64, copy=False), seq[order].astype(np.int64)
    if span * (int(uid.max()) + 1) < 1 << 62:
        key = uid * span + (seq - low)
        order = np.argsort(key, kind="stable").astype(np.int64, copy=False)
        key = key[order]
        return order, key // span, key % span + low
    order = np.lexsort((seq, uid)).astype(np.int64, copy=False)
    return order, uid[order], seq[order]


def match_collectives(ctx: MatchContext, findings: list[Finding]) -> CollectiveUnits:
    """Every collective joined on (group, seq id), its findings appended to `findings`."""
    t, groups = ctx.table, ctx.groups
    unit_kind = t.unit if t.n else np.zeros(0, dtype=np.int8)
    wanted = of_kinds(unit_kind, COLLECTIVE_UNITS)
    rows = np.flatnonzero(wanted)
    uid = groups.entry_group[wanted].astype(np.int64)
    seq = t.coll_seq[wanted] if t.n else np.zeros(0, np.int64)
    order, uid, seq = _by_group_and_seq(uid, seq)  # ties keep row order: by rank, then record
    rows = rows[order]
    del order  # the arrays here run over every collective row of the job: each goes once used
    ctx.coll_rows = rows
    rank = t.rank[rows]

    new_unit = _changes(uid, seq)
    starts = np.flatnonzero(new_unit)
    run = np.cumsum(new_unit, dtype=id_type(len(rows))) - 1
    n_units = len(starts)
    ends = np.append(starts[1:], len(rows))
    sizes = np.array([g.size for g in groups.groups], dtype=np.int32)
    unit_group = uid[starts].astype(np.int32) if n_units else np.zeros(0, np.int32)
    expected = sizes[unit_group] if n_units else np.zeros(0, np.int32)

    # Rows per (unit, rank): equal on every rank for a uniform unit. A rank's rows of a unit
    # are adjacent (ties keep row order), so each unit is a run of (unit, rank) segments.
    new_segment = new_unit | _changes(rank)
    rr_starts = np.flatnonzero(new_segment)
    rr_len = np.diff(rr_starts, append=len(rows))
    unit_first = np.flatnonzero(new_unit[rr_starts])  # each unit's first segment
    present = np.diff(unit_first, append=len(rr_starts)).astype(np.int32)
    per_rank_min = np.minimum.reduceat(rr_len, unit_first) if n_units else rr_len
    per_rank_max = np.maximum.reduceat(rr_len, unit_first) if n_units else rr_len
    uniform = (present == expected) & (per_rank_min == per_rank_max)

    # Same signature at the same position on every rank: compare each row with the row one
    # rank-block earlier (blocks have equal length in a uniform unit).
    block = np.where(uniform, per_rank_min, 0)[run] if len(rows) else np.zeros(0, np.int64)
    prev = np.arange(len(rows)) - block
    has_prev = (prev >= starts[run]) & (block > 0) if len(rows) else np.zeros(0, bool)
    safe_prev = np.where(has_prev, prev, 0)
    del block, prev
    differs = np.zeros(len(rows), dtype=bool)
    for values in _signatures(t, rows):
        differs |= has_prev & (values != values[safe_prev])
    done = ctx.done[rows]
    # A collective before one that some member completed has completed on every member (each
    # took part in the later one after this one, in stream order): a rank whose copy is not
    # done was dumped before it finished, a moment before its peers' dumps.
    unit_seq = seq[starts] if n_units else seq
    ctx.proof = proof(t, rows, starts, unit_group, unit_seq, done, ctx.rank_ends)
    if ctx.proof:
        # Stateful backends: the proven seq was issued by all, so every earlier one completed.
        # gloo: the proven seq is the one before an issued one, which completed itself.
        proven = np.full(len(groups.groups) + 1, -1, dtype=np.int64)
        for uid_, value in ctx.proof.items():
            proven[uid_] = value
        row_stateless = stateless(t, rows)
        behind = ~done & ((seq < proven[uid]) | (row_stateless & (seq == proven[uid])))
        if bool(behind.any()):
            ctx.done[rows[behind]] = True
            done = ctx.done[rows]
    differs |= has_prev & (done != done[safe_prev])
    if bool(ctx.size_bad.any()):  # a gather over every collective row, where there is any
        differs |= ctx.size_bad[rows]
    special = np.array([op in _UNEVEN_OPS for op in t.ops], bool)
    if len(rows) and bool(special.any()):
        differs |= special[t.op[rows]]
    unit_bad = np.logical_or.reduceat(differs, starts) if n_units else np.zeros(0, bool)
    passed = uniform & ~unit_bad

    ctx.unit_bounds = (unit_group.astype(np.int64), unit_seq, starts, ends)
    ctx.unit_ranks = present
    op_names = np.array(t.ops, dtype=object)
    unit_op: list[str] = op_names[t.op[rows[starts]]].tolist() if n_units else []
    not_joined: dict[int, tuple[int, ...]] = {}
    left_agreeing: list[tuple[int, UnitRef, I64]] = []
    for u in np.flatnonzero(~passed).tolist():
        group, at_seq = groups.groups[int(unit_group[u])], int(seq[starts[u]])
        check = check_unit(ctx, group, at_seq, rows[starts[u] : ends[u]])
        findings += check.findings
        ctx.skipped.update(id(f) for f in check.skipped)
        passed[u] = check.passed
        unit_op[u] = check.op or unit_op[u]
        if check.not_joined:
            not_joined[u] = check.not_joined
        if check.left_agreeing is not None:
            members = tuple(t.rank[check.left_agreeing[:, 0]].tolist())
            left_agreeing.append((u, UnitRef(group, at_seq, members), check.left_agreeing))
    # Groups that lost a member and whose members left agree: compared with groups alike,
    # once every unit is checked, and only where no disagreement among them was found.
    disagreeing = {f.group.uid for f in findings if f.group and f.kind in MISMATCH_KINDS}
    for u, unit, grid in left_agreeing:
        if unit.group.uid in disagreeing:
            continue
        found = unlike_alike(ctx, unit, grid)
        if found is not None:
            findings.append(found)
            passed[u] = False
            disagreeing.add(unit.group.uid)
    entry_unit = np.full(t.n, -1, dtype=id_type(t.n))
    entry_unit[rows] = run
    return CollectiveUnits(
        unit_group,
        unit_seq,
        unit_op,
        present,
        expected,
        passed,
        entry_unit,
        not_joined,
        rows,
        starts.astype(np.int64),
    )


def _signatures(t: EntryTable, rows: I64) -> Iterator[npt.NDArray[np.integer]]:
    """The rows' signatures (op, input and output sizes, input and output dtypes), for
    comparing rows: one integer per row standing for all five when their codes fit one (they
    index the table's lists, or are -1), so one gather of scattered rows instead of five, else
    each column in turn."""
    columns = (t.op, t.in_shape, t.out_shape, t.in_dtype, t.out_dtype)
    spans = [len(t.ops), len(t.shapes), len(t.shapes), len(t.dtypes), len(t.dtypes)]
    if math.prod(span + 1 for span in spans) >= 1 << 31:
        for column in columns:
            yield column[rows]
        return
    combined = np.zeros(t.n, dtype=np.int32)
    for column, span in zip(columns, spans, strict=True):
        combined *= span + 1
        combined += column
        combined += 1
    yield combined[rows]


def proof(
    t: EntryTable,
    rows: I64,
    starts: I64,
    unit_group: npt.NDArray[np.int32],
    unit_seq: I64,
    done: npt.NDArray[np.bool_],
    rank_ends: I64,
) -> dict[int, int]:
    """Per group uid, the highest collective seq id that every member must have issued.

    A collective that some member completed was issued by every member. On gloo, `retired`
    also marks a collective that failed (timed out), so completion proves nothing there; but
    gloo collectives are synchronous: a member that issued anything after seq k (seq k + 1, or
    an op of another group) got through k, which every member therefore issued; the proven
    seq id is then k itself, and it completed. `rank_ends`: each rank's last row (of the whole
    job, where the table holds a part of it: `match.partitions`)."""
    if not len(starts):
        return {}
    any_done = np.logical_or.reduceat(done, starts)
    unit_stateless = stateless(t, rows[starts])
    went_on = np.zeros(len(starts), dtype=bool)
    if bool(unit_stateless.any()):  # asked of gloo's units only: none in an NCCL job
        # A row followed by another row of its rank: on gloo, that op returned.
        last_of_rank = np.zeros(t.n, dtype=bool)
        last_of_rank[rank_ends] = True
        # gloo's async ops return at once: a rank that went on past an op it has not retired
        # proves nothing about it (it is in flight, or never completes).
        went_on = np.logical_or.reduceat(~last_of_rank[rows] & t.retired[rows], starts)
    proven = np.where(
        unit_stateless,
        np.where(went_on, unit_seq, unit_seq - 1),
        np.where(any_done, unit_seq, -1),
    )
    best = np.full(int(unit_group.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(best, unit_group, proven)
    return {uid: int(v) for uid, v in enumerate(best.tolist()) if v >= 0}


_UNEVEN_OPS = GATHER_OPS | SCATTER_OPS | ALL_TO_ALL_OPS | UNEVEN_INPUT_OPS | UNEVEN_OUTPUT_OPS
"""Ops whose sizes may differ from rank to rank: each unit gets the per-unit look."""
