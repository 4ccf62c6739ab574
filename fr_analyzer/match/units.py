"""The per-unit look at a collective unit that failed the vectorized checks (`collectives`):
who never joined it (`missing`), the ops each member issued, member by member in a block,
their sizes and dtypes position by position (`sizes`), who did not complete it, and a
disagreement that is a skip (the culprits' ops are the group's program one op ahead). One
`UnitCheck` per unit, its findings in it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ..model.backends import NO_MONITORED_BARRIER_BACKENDS
from ..model.records import MISMATCH_KINDS, Finding, FindingKind, Group, State
from ..model.table import EntryTable
from . import words
from .context import MatchContext
from .missing import last_seq, not_joined, unrecorded_gap
from .records import UnitRef
from .reference import (
    HISTORY_UNITS,
    deviants,
    ops_value,
    signature_value,
    uniform_value,
    unit_span,
)
from .sizes import alike, check_sizes

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class UnitCheck:
    """What the per-unit look found at one collective unit."""

    passed: bool  # no finding at this unit
    op: str  # the unit's op as the findings name it (a block: `coalesced[all_reduce×2]`)
    not_joined: tuple[int, ...]  # members that never issued it
    findings: tuple[Finding, ...]  # in the order found
    # those of `findings` that tell a skip: ranks in an unrecorded collective, or a
    # disagreement whose culprits are their group's program one op ahead
    skipped: tuple[Finding, ...] = ()
    # the unit's rows (a row of block positions per member present) when its members left
    # agree while a member left no dump: compared with the groups alike once every unit is
    # checked (`sizes.unlike_alike`)
    left_agreeing: I64 | None = None


def check_unit(ctx: MatchContext, group: Group, seq: int, unit_rows: I64) -> UnitCheck:
    """The per-unit look at collective `seq` of `group`, whose rows are `unit_rows` (by rank,
    then record order)."""
    t = ctx.table
    ranks, starts, lengths = _per_rank(t, unit_rows)
    issued = set(ranks[starts].tolist())
    unit_rows = _without_cut_blocks(ctx, unit_rows, starts, lengths)
    ranks, starts, lengths = _per_rank(t, unit_rows)
    present = tuple(ranks[starts].tolist())
    unit = UnitRef(group, seq, present)
    grid = unit_rows.reshape(len(starts), -1) if (lengths == lengths[0]).all() else None
    op_grid = t.op[grid] if grid is not None else None
    ops_of: dict[int, tuple[str, ...]] = {}
    if op_grid is not None and bool((op_grid == op_grid[0]).all()):
        main_ops = tuple(t.ops[c] for c in op_grid[0].tolist())  # every rank's ops
        kinds = 1
    else:
        names = [t.ops[c] for c in t.op[unit_rows].tolist()]
        ops_of = {
            rank: tuple(names[a:b])
            for rank, a, b in zip(
                present, starts.tolist(), (starts + lengths).tolist(), strict=True
            )
        }
        counts = Counter(ops_of.values())
        main_ops = counts.most_common(1)[0][0]
        kinds = len(counts)
    op = words.block_name(main_ops)
    found: list[Finding] = []

    # Who is missing, and why.
    absent = not_joined(ctx, group, seq, issued)
    gap = unrecorded_gap(ctx, group, seq, present, absent)
    if gap is not None:
        first, after, width = gap
        barrier = width == 2 and any(
            t.backends[int(b)] in NO_MONITORED_BARRIER_BACKENDS
            for b in t.backend[unit_rows].tolist()
        )
        what = words.unrecorded(width, barrier)
        detail = words.skipped_unrecorded(absent, present, op, seq, (first, after), what)
        everyone = tuple(sorted(set(present) | set(absent)))
        skip = unit.finding(FindingKind.NOT_JOINED, set(present), detail, what[0], everyone)
        return UnitCheck(False, what[0], (), (skip,), (skip,))
    shift = None if absent else _skipped_in_place(ctx, group, seq, unit_rows)
    if absent:
        last = {m: last_seq(ctx, m, group.uid) for m in absent}
        detail = words.never_joined(present, absent, op, seq, last)
        found.append(unit.finding(FindingKind.NOT_JOINED, set(absent), detail, op))

    # Op types, member by member for blocks.
    if kinds > 1:
        culprits, note = deviants(ctx, group, seq, dict(ops_of.items()), ops_value(t))
        agreed = [v for r, v in ops_of.items() if r not in culprits]
        if agreed:
            main_ops = agreed[0]
            op = words.block_name(main_ops)
        where, theirs = words.first_difference(ops_of, culprits, main_ops)
        detail = words.other_op(culprits, theirs, where, main_ops if agreed else None, note)
        found.append(unit.finding(FindingKind.OP_TYPE_MISMATCH, culprits, detail, op))
        skipped = _as_skip(found, shift, op, seq)
        return UnitCheck(False, op, tuple(absent), tuple(found), skipped)

    # Sizes and dtypes, position by position. Every rank issued the same ops here, so the
    # same number of them (blocks of different lengths differ in ops, reported above).
    assert grid is not None
    for pos, pos_op in enumerate(main_ops):
        if alike(ctx, pos_op, grid[:, pos]):
            continue
        rows_at = dict(zip(present, grid[:, pos].tolist(), strict=True))
        named = pos_op if len(main_ops) == 1 else words.member(pos_op, pos, op)
        found += check_sizes(ctx, unit, (pos, pos_op), named, rows_at)

    skipped = _as_skip(found, shift, op, seq)
    left_agreeing = grid if not found and set(group.ranks) & ctx.unavailable else None

    # Completion: the lagging ranks are the culprits, never the completed ones.
    head_rows = unit_rows[starts + lengths - 1]
    head_done = ctx.done[head_rows]
    if not absent and not found and not (head_done == head_done[0]).all():
        heads = dict(zip(present, head_rows.tolist(), strict=True))
        done = dict(zip(present, head_done.tolist(), strict=True))
        if len(set(done.values())) > 1:
            lagging = {rank for rank, d in done.items() if not d}
            by_state: dict[str, list[int]] = {}
            for r in sorted(lagging):
                state = words.state_name(State(int(t.state[heads[r]])), bool(t.retired[heads[r]]))
                by_state.setdefault(state, []).append(r)
            detail = words.not_completed(set(done) - lagging, lagging, op, seq, by_state)
            found.append(unit.finding(FindingKind.STATE_MISMATCH, lagging, detail, op))
    return UnitCheck(not found, op, tuple(absent), tuple(found), skipped, left_agreeing)


def _as_skip(
    found: list[Finding], shift: tuple[set[int], int, int] | None, op: str, seq: int
) -> tuple[Finding, ...]:
    """The first disagreement found at this unit that names exactly the ranks that skipped
    it (`shift`: the skippers, the earlier seq id, how many of their ops match), told as a
    skip in `found`: they went on, so their next ops sit one sequence id early. Returns it."""
    if shift is None:
        return ()
    culprits, before, count = shift
    for at, f in enumerate(found):
        if f.kind in MISMATCH_KINDS and set(f.culprit_ranks) == culprits:
            detail = words.skipped_and_went_on(f.detail, culprits, op, seq, before, count)
            found[at] = replace(f, detail=detail)
            return (found[at],)
    return ()


def _per_rank(t: EntryTable, unit_rows: I64) -> tuple[npt.NDArray[np.int32], I64, I64]:
    """A unit's rows come grouped by rank (ascending), each rank's in record order: their
    ranks, where each rank's rows start, and how many it has."""
    ranks = t.rank[unit_rows]
    change = np.ones(len(ranks), dtype=bool)
    change[1:] = ranks[1:] != ranks[:-1]
    starts = np.flatnonzero(change)
    return ranks, starts, np.diff(starts, append=len(unit_rows))


def _skipped_in_place(
    ctx: MatchContext, group: Group, seq: int, unit_rows: I64
) -> tuple[set[int], int, int] | None:
    """A minority whose ops from this seq id on are the group's program one op ahead: it
    skipped this collective (a rank-dependent branch) and went on in the same group, so its
    next op sits at this seq id and differs from what the rest issued. Told from a size or op
    mismatch by the group's own history: after an earlier collective like this one (#j), the
    group issued at #j+1, #j+2, ... exactly what the minority holds at #seq, #seq+1, ...
    Returns (the minority, j, how many of its ops match)."""
    value_of = signature_value(ctx.table)
    values = value_of(unit_rows)
    counts = Counter(values.values()).most_common()
    if len(counts) < 2 or counts[0][1] * 2 <= len(values):
        return None
    reference = counts[0][0]
    minority = {rank for rank, v in values.items() if v != reference}
    for before in range(seq - 1, max(seq - 1 - HISTORY_UNITS, -1), -1):
        if uniform_value(ctx, group.uid, before, value_of) != reference:
            continue
        matched = 0
        for step in range(seq - before - 1):
            expected = uniform_value(ctx, group.uid, before + 1 + step, value_of)
            span = unit_span(ctx, group.uid, seq + step)
            if expected is None or span is None:
                break
            held = value_of(ctx.coll_rows[span[0] : span[1]])
            if any(r not in held for r in minority):
                break
            if any(held[r] != expected for r in minority):
                return None
            matched += 1
        return (minority, before, matched) if matched else None
    return None


def _without_cut_blocks(ctx: MatchContext, unit_rows: I64, starts: I64, lengths: I64) -> I64:
    """The unit's rows without the coalesced blocks that a ring buffer cut: a rank whose
    buffer wrapped and begins inside the block holds only its last members. They match the
    tail of the others' block and are left out of the comparison (not in the window)."""
    if bool((lengths == lengths[0]).all()):
        return unit_rows
    t = ctx.table
    full = int(lengths.max())
    reference = next(
        unit_rows[a : a + n]
        for a, n in zip(starts.tolist(), lengths.tolist(), strict=True)
        if n == full
    )
    tail_ops = t.op[reference].tolist()
    keep = np.ones(len(unit_rows), dtype=bool)
    for a, n in zip(starts.tolist(), lengths.tolist(), strict=True):
        first = int(unit_rows[a])
        if (
            n < full
            and int(t.row_in_rank[first]) == 0
            and ctx.wrapped.get(int(t.rank[first]), False)
            and t.op[unit_rows[a : a + n]].tolist() == tail_ops[full - n :]
        ):
            keep[a : a + n] = False
    return unit_rows[keep]
