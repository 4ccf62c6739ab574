"""The per-unit look at a collective unit that failed the vectorized checks (`collectives`):
who never joined it (`missing`), the ops each member issued, member by member in a block,
their sizes and dtypes position by position (`sizes`), who did not complete it, and a
disagreement that is a skip (the culprits' ops are the group's program one op ahead). One
`UnitCheck` per unit, its findings in it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
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
from .reference import HISTORY_UNITS, deviants, uniform_value, unit_span
from .sizes import alike, check_sizes
from .values import OPS, signature_value

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

    # a skip, asked only where a disagreement is found (every all_to_all gets this look)
    def shift() -> _Shift | None:
        return None if absent else _skipped_in_place(ctx, group, seq, unit_rows)

    if absent:
        last = {m: last_seq(ctx, m, group.uid) for m in absent}
        detail = words.never_joined(present, absent, op, seq, last)
        found.append(unit.finding(FindingKind.NOT_JOINED, set(absent), detail, op))

    # Op types, member by member for blocks.
    if kinds > 1:
        culprits, note = deviants(ctx, group, seq, dict(ops_of.items()), OPS)
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


@dataclass(frozen=True)
class _Shift:
    """Ranks that skipped a collective and went on in the same group (`_skipped_in_place`):
    who, and what shows it: the earlier seq id after which every member issued what they hold
    now (`before`, with `count` ops matching), or, for two members with no majority, the
    other member whose ops from the next seq id on they hold (`other`)."""

    culprits: set[int]
    count: int
    before: int = -1
    other: int | None = None

    def told(self, detail: str, op: str, seq: int) -> str:
        """`detail` (a disagreement at #seq naming the skippers) told as this skip."""
        if self.other is not None:
            return words.skipped_beside(detail, self.culprits, self.other, op, seq, self.count)
        return words.skipped_and_went_on(detail, self.culprits, op, seq, self.before, self.count)


def _as_skip(
    found: list[Finding], skip: Callable[[], _Shift | None], op: str, seq: int
) -> tuple[Finding, ...]:
    """The first disagreement found at this unit that names the ranks that skipped it
    (`skip`, asked once one is found), told as a skip in `found`: they went on, so their next
    ops sit one sequence id early. One that could not tell a side (two members, each named)
    is narrowed to the skipper. Returns it."""
    if not any(f.kind in MISMATCH_KINDS for f in found):
        return ()
    shift = skip()
    if shift is None:
        return ()
    culprits = shift.culprits
    for at, f in enumerate(found):
        named = set(f.culprit_ranks)
        fits = named == culprits or (shift.other is not None and named == set(f.ranks))
        if f.kind in MISMATCH_KINDS and fits:
            detail = shift.told(f.detail, op, seq)
            found[at] = replace(f, culprit_ranks=tuple(sorted(culprits)), detail=detail)
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


def _skipped_in_place(ctx: MatchContext, group: Group, seq: int, unit_rows: I64) -> _Shift | None:
    """A minority whose ops from this seq id on are the group's program one op ahead: it
    skipped this collective (a rank-dependent branch) and went on in the same group, so its
    next op sits at this seq id and differs from what the rest issued. Told from a size or op
    mismatch by the group's own history: after an earlier collective like this one (#j), the
    group issued at #j+1, #j+2, ... exactly what the minority holds at #seq, #seq+1, ...
    Two members that disagree have no minority: `_ahead_of_the_other` tells them apart."""
    value_of = signature_value(ctx.table)
    values = value_of(unit_rows)
    counts = Counter(values.values()).most_common()
    if len(counts) < 2:
        return None
    if len(values) == 2:
        return _ahead_of_the_other(ctx, group, seq, sorted(values))
    if counts[0][1] * 2 <= len(values):
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
        return _Shift(minority, matched, before=before) if matched else None
    return None


PAIR_SHIFT_OPS = 4
"""Ops of each member, from the seq id where two disagree, that must line up one op apart
before one is taken to have skipped: enough that a program repeating one op (all_to_all after
all_to_all) does not line up both ways."""


def _ahead_of_the_other(
    ctx: MatchContext, group: Group, seq: int, pair: list[int]
) -> _Shift | None:
    """Of two members that disagree at `seq`, the one whose ops (their names) from `seq` on
    are the other's from `seq + 1` on, where the other's are not its own one op later: it
    skipped `seq` and went on. Names alone, since the sizes of the same op may differ per rank
    (all_to_all). None where both or neither line up, or the ops all have one name."""
    t = ctx.table
    names: dict[int, list[tuple[str, ...]]] = {r: [] for r in pair}
    going = set(pair)  # each member's ops, up to the first seq id it does not hold
    for at in range(seq, seq + HISTORY_UNITS):
        span = unit_span(ctx, group.uid, at)
        if span is None:
            break
        rows = ctx.coll_rows[span[0] : span[1]]
        held: dict[int, list[str]] = {}
        for rank, op in zip(t.rank[rows].tolist(), t.op[rows].tolist(), strict=True):
            held.setdefault(rank, []).append(t.ops[op])
        going &= set(held)
        if not going:
            break
        for r in going:
            names[r].append(tuple(held[r]))
    a, b = pair

    def ahead(x: int, y: int) -> int:
        """How many of x's ops are y's one op later (0: they do not line up)."""
        n = min(len(names[x]), len(names[y]) - 1)
        if n < PAIR_SHIFT_OPS or len(set(names[y][: n + 1])) < 2:
            return 0
        return n if names[x][:n] == names[y][1 : n + 1] else 0

    a_ahead, b_ahead = ahead(a, b), ahead(b, a)
    if bool(a_ahead) == bool(b_ahead):
        return None
    skipper, other = (a, b) if a_ahead else (b, a)
    return _Shift({skipper}, a_ahead or b_ahead, other=other)


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
