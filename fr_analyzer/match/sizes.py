"""The size and dtype rules of one collective unit: at each block position, the sizes that
contradict the op itself, the sizes and dtypes that differ between members (all_to_all's
inputs and totals apart: its outputs may differ), and, where a member left no dump, the
members left compared with the groups alike. Each rule returns the findings it makes; the
words are `words`'."""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

from ..model.backends import ABORTS_ON_OVERSIZED_RECEIVE_BACKENDS
from ..model.ops import ALL_TO_ALL_OPS, UNCHECKED_SIZE_OPS
from ..model.records import Finding, FindingKind
from ..model.table import EntryTable
from . import words
from .context import MatchContext
from .missing import newest_unit_seq
from .records import UnitRef
from .reference import HISTORY_UNITS, NEWEST_UNITS, deviants, sibling_votes, unit_span
from .values import (
    FREE_SIGNATURE,
    Read,
    Value,
    ValueKind,
    at_position,
    dtypes_of,
    reader,
    sizes_of,
)

I64 = npt.NDArray[np.int64]


def alike(ctx: MatchContext, op: str, rows: I64) -> bool:
    """Rows (one per rank) that `check_sizes` would pass at a glance: no intrinsic size
    error, and one input shape, output shape, input dtype and output dtype among them."""
    t = ctx.table
    if op in ALL_TO_ALL_OPS or ctx.size_bad[rows].any():
        return False
    return all(
        bool((values == values[0]).all())
        for values in (t.in_shape[rows], t.out_shape[rows], t.in_dtype[rows], t.out_dtype[rows])
    )


def check_sizes(
    ctx: MatchContext, unit: UnitRef, at: tuple[int, str], what: str, rows_at: dict[int, int]
) -> list[Finding]:
    """Sizes and dtypes of the rows at one block position (`at` = position, op name; `what`:
    the op as the findings name it; `rows_at`: each rank's row there)."""
    t, group, seq = ctx.table, unit.group, unit.seq
    pos, op = at
    if op in UNCHECKED_SIZE_OPS:
        return []
    found: list[Finding] = []
    present = tuple(sorted(rows_at))

    intrinsic = {rank for rank, r in rows_at.items() if ctx.size_bad[r]}
    if intrinsic:
        r0 = rows_at[min(intrinsic)]
        inputs, outputs = t.shapes[int(t.in_shape[r0])], t.shapes[int(t.out_shape[r0])]
        detail = words.inconsistent_sizes(what, intrinsic, inputs, outputs, op, group.size)
        found.append(unit.finding(FindingKind.SIZE_MISMATCH, intrinsic, detail, what))
    if op in ALL_TO_ALL_OPS:
        flagged = _all_to_all_inputs(ctx, unit, (pos, op), what, rows_at)
        found += flagged
        if len(present) == group.size and not flagged:
            total_in = sum(int(t.shape_numel[t.in_shape[r]]) for r in rows_at.values())
            total_out = sum(int(t.shape_numel[t.out_shape[r]]) for r in rows_at.values())
            if total_in != total_out:
                odd, which = _odd_one_out(t, rows_at)
                detail = words.totals_differ(what, total_in, total_out, odd, which)
                found.append(
                    unit.finding(FindingKind.SIZE_MISMATCH, odd or set(present), detail, what)
                )
    else:
        sizes_at = sizes_of(t, op)

        def sizes_text(value: Value) -> str:
            in_code, out_code = value
            return words.sizes(
                None if in_code < 0 else t.shapes[in_code],
                None if out_code < 0 else t.shapes[out_code],
            )

        sizes = {rank: (op, sizes_at(r)) for rank, r in rows_at.items()}
        if len(set(sizes.values())) > 1:
            kind = ValueKind(Read.SIZES, pos, op)
            culprits, note = deviants(ctx, group, seq, sizes, kind)
            detail = f"{what}: " + words.contrast(sizes, culprits, sizes_text) + note
            found.append(unit.finding(FindingKind.SIZE_MISMATCH, culprits, detail, what))

    dtypes_at = dtypes_of(t, op)
    comparable: dict[int, Value] = {}
    for rank, r in rows_at.items():
        d = dtypes_at(r)
        if d[0] or d[1]:
            comparable[rank] = (op, d)
    if len(set(comparable.values())) > 1:
        kind = ValueKind(Read.DTYPES, pos, op)
        culprits, note = deviants(ctx, group, seq, comparable, kind)
        detail = f"{what}: " + words.contrast(comparable, culprits, words.dtypes) + note
        found.append(unit.finding(FindingKind.DTYPE_MISMATCH, culprits, detail, what))
    return found


def _odd_one_out(t: EntryTable, rows_at: dict[int, int]) -> tuple[set[int], str]:
    """Of an all_to_all whose totals do not add up, the minority whose input, else output,
    differs from the one every other member holds (at least two of them); none if no such."""
    for which, column in (("input", t.in_shape), ("output", t.out_shape)):
        values = {rank: int(column[r]) for rank, r in rows_at.items()}
        counts = Counter(values.values()).most_common()
        if len(counts) == 2 and counts[0][1] >= 2 and counts[0][1] > counts[1][1]:
            return {r for r, v in values.items() if v != counts[0][0]}, which
    return set(), ""


def _all_to_all_inputs(
    ctx: MatchContext, unit: UnitRef, at: tuple[int, str], what: str, rows_at: dict[int, int]
) -> list[Finding]:
    """An all_to_all's input sizes, compared across its members. The recorder keeps only
    each rank's totals, and output totals legitimately differ from rank to rank (uneven
    splits), so only inputs are compared, and only where this exchange has uniform inputs:
    every member of the groups alike holds one input at this seq id, or, with no group alike,
    this group's last exchange of the same kind (outputs uneven or not alike) had one input
    on every member. A minority that passes another input deviates (in a pair, the one the
    groups alike do not hold). Returns its finding, if it named one."""
    t, group, seq = ctx.table, unit.group, unit.seq
    pos, op = at

    values = {rank: (op, int(t.in_shape[r])) for rank, r in rows_at.items()}
    counts = Counter(values.values()).most_common()
    if len(counts) < 2:
        return []
    inputs = ValueKind(Read.INPUTS, pos)
    in_value = reader(t, inputs)
    out_value = at_position(t, pos, lambda r: (int(t.out_shape[r]),))
    votes = sibling_votes(ctx, group, seq, inputs)
    majority = counts[0][1] * 2 > len(values) and counts[0][1] >= 2
    if majority:
        reference = counts[0][0]
    elif len(votes) == 1 and (op, next(iter(votes))[1][0]) in values.values():
        reference = (op, next(iter(votes))[1][0])  # a tie that the groups alike settle
    else:
        return []
    held = (op, (reference[1],))  # as `in_value` gives it
    uneven_out = len({int(t.out_shape[r]) for r in rows_at.values()}) > 1
    history: bool | None = None  # this group's last exchange of the same kind agrees
    earlier = -1
    for earlier in range(seq - 1, max(seq - 1 - HISTORY_UNITS, -1), -1):
        span = unit_span(ctx, group.uid, earlier)
        if span is None:
            continue
        rows = ctx.coll_rows[span[0] : span[1]]
        before = in_value(rows)
        if not before or any(v[0] != op for v in before.values()):
            continue
        if (len(set(out_value(rows).values())) > 1) != uneven_out:
            continue  # another kind of exchange (dispatch against combine)
        history = set(before.values()) == {held}
        break
    alike = words.alike_hold_it(votes.total(), group.desc)
    if votes and set(votes) != {held}:
        return []
    if majority and votes:
        basis = alike
    elif majority and history:
        basis = words.passed_before(earlier)
    elif not majority and votes.total() >= 2 and history is not False:
        basis = alike  # a pair: the groups alike and the pair's own history agree
    else:
        return []
    culprits = {rank for rank, v in values.items() if v != reference}
    theirs = [
        ([r for r in sorted(culprits) if values[r] == v], t.shapes[v[1]])
        for v in dict.fromkeys(values[r] for r in sorted(culprits))
    ]
    detail = words.unlike_inputs(what, theirs, t.shapes[reference[1]], basis)
    return [unit.finding(FindingKind.SIZE_MISMATCH, culprits, detail, what)]


def unlike_alike(ctx: MatchContext, unit: UnitRef, grid: I64) -> Finding | None:
    """A collective whose members with a dump agree, while a member left none, compared with
    the groups alike at the same seq id. With no dump from the other side, agreement among
    those left proves nothing: gloo aborts, with no dump, a rank that receives more bytes than
    it posted, so the partner of a rank that sent another size or dtype disappears: the same
    op with other sizes or dtypes than every group alike holds deviates. Asked at
    a group's newest collectives only (where its members stopped; async ops may follow the
    one that failed), when no group alike agrees with the members left and one disagrees.
    `grid`: the unit's rows, a row of block positions per member present."""
    t, group, seq, present = ctx.table, unit.group, unit.seq, unit.present
    lost = sorted(set(group.ranks) & ctx.unavailable)
    if not lost or newest_unit_seq(ctx, group.uid) - seq >= NEWEST_UNITS:
        return None
    mine = set(reader(t, FREE_SIGNATURE)(grid.reshape(-1)).values())
    if len(mine) != 1:
        return None
    value = mine.pop()
    # Only groups of the same pipeline stage: another stage runs another program.
    votes = sibling_votes(ctx, group, seq, FREE_SIGNATURE, same_stage=True)
    if not votes or value in votes:
        return None
    reference, count = votes.most_common(1)[0]
    if len(reference) != len(value) or any(
        a[0] != b[0] for a, b in zip(value, reference, strict=True)
    ):
        # Another op altogether (a skip brings the next op forward) counts only when several
        # groups alike agree on theirs: a single other group may run another program.
        if count < 2 or len(votes) > 1:
            return None
        kind, what = FindingKind.OP_TYPE_MISMATCH, "ops"
    elif any(a[1:3] != b[1:3] for a, b in zip(value, reference, strict=True)):
        kind, what = FindingKind.SIZE_MISMATCH, "sizes"
    else:
        kind, what = FindingKind.DTYPE_MISMATCH, "dtypes"

    def signature(v: Value) -> words.Signature:
        return tuple(
            (t.ops[op], t.shapes[i], t.shapes[o] if o >= 0 else None, t.dtypes[di])
            for op, i, o, di, _ in v
        )

    aborts = any(
        t.backends[int(b)] in ABORTS_ON_OVERSIZED_RECEIVE_BACKENDS
        for b in t.backend[grid.reshape(-1)].tolist()
    )
    detail = words.unlike_alike(
        present,
        signature(value),
        signature(reference),
        (count, group.desc, group.size),
        seq,
        lost,
        what,
        aborts,
    )
    name = words.block_name(tuple(t.ops[v[0]] for v in value))
    return unit.finding(kind, set(present), detail, name)
