"""Collectives joined on (group, collective sequence id), checked by vectorized rules, and
the few that desynced looked at one by one (sizes, ops, skips, the peer vote on who deviated).

The peer vote on who deviated lives in `reference`, shared with the diagnosis. It is over 600
lines because the per-unit checks (ops, sizes, dtypes, all-to-all inputs, skips, lost members)
share one context and many helpers; each is one function.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..model.arrays import distinct
from ..model.backends import ABORTS_ON_OVERSIZED_RECEIVE_BACKENDS, NO_MONITORED_BARRIER_BACKENDS
from ..model.ops import (
    ALL_TO_ALL_OPS,
    GATHER_OPS,
    SCATTER_OPS,
    UNCHECKED_SIZE_OPS,
    UNEVEN_INPUT_OPS,
    UNEVEN_OUTPUT_OPS,
)
from ..model.ranks import agree, counted, label
from ..model.records import (
    MISMATCH_KINDS,
    STATE_NAMES,
    Finding,
    FindingKind,
    Group,
    State,
)
from ..model.table import EntryTable
from .context import MatchContext
from .records import COLLECTIVE_UNITS, Adder, CollectiveUnits, stateless
from .reference import (
    HISTORY_UNITS,
    NEWEST_UNITS,
    Value,
    ValueOf,
    at_position,
    deviants,
    ops_value,
    rank_rows,
    sibling_votes,
    uniform_value,
    unit_span,
)

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
    that order. When both fit 16 bits (a ring buffer spans far fewer sequence ids), two
    stable sorts of 16-bit keys, the sequence ids first: numpy sorts those by radix, in
    linear time. Else one sort of one combined key when the values allow it (they always do
    in real dumps), which also gives both sorted columns back without gathering them, else a
    lexsort."""
    if not len(uid):
        return np.zeros(0, dtype=np.int64), uid, seq
    low, high = int(seq.min()), int(seq.max())
    span = high - low + 1
    if span <= 1 << 16 and int(uid.max()) < 1 << 16:
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
    t, groups = ctx.t, ctx.groups
    unit_kind = t.unit if t.n else np.zeros(0, dtype=np.int8)
    wanted = np.isin(unit_kind, COLLECTIVE_UNITS)
    rows = np.flatnonzero(wanted)
    uid = groups.entry_group[wanted].astype(np.int64)
    seq = t.coll_seq[wanted] if t.n else np.zeros(0, np.int64)
    order, uid, seq = _by_group_and_seq(uid, seq)  # ties keep row order: by rank, then record
    rows = rows[order]
    ctx.coll_rows = rows
    rank = t.rank[rows]

    new_unit = _changes(uid, seq)
    starts = np.flatnonzero(new_unit)
    run = np.cumsum(new_unit) - 1
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
    differs = np.zeros(len(rows), dtype=bool)
    for values in _signatures(t, rows):
        differs |= has_prev & (values != values[safe_prev])
    done = ctx.done[rows]
    # A collective before one that some member completed has completed on every member (each
    # took part in the later one after this one, in stream order): a rank whose copy is not
    # done was dumped before it finished, a moment before its peers' dumps.
    unit_seq = seq[starts] if n_units else seq
    ctx.proof = proof(t, rows, starts, unit_group, unit_seq, done)
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
    differs |= ctx.size_bad[rows]
    special = np.array([op in _UNEVEN_OPS for op in t.ops], bool)
    if len(rows):
        differs |= special[t.op[rows]]
    unit_bad = np.logical_or.reduceat(differs, starts) if n_units else np.zeros(0, bool)
    passed = uniform & ~unit_bad

    ctx.unit_bounds = (unit_group.astype(np.int64), unit_seq, starts, ends)
    ctx.unit_ranks = present
    op_names = np.array(t.ops, dtype=object)
    unit_op: list[str] = op_names[t.op[rows[starts]]].tolist() if n_units else []
    not_joined: dict[int, tuple[int, ...]] = {}
    for u in np.flatnonzero(~passed).tolist():
        unit_rows = rows[starts[u] : ends[u]]
        ctx.unit_now = u
        ok, op, missing = check_unit(
            ctx, groups.groups[int(unit_group[u])], int(seq[starts[u]]), unit_rows, findings
        )
        passed[u] = ok
        unit_op[u] = op or unit_op[u]
        if missing:
            not_joined[u] = missing
    # Groups that lost a member and whose members left agree: compared with groups alike,
    # once every unit is checked, and only where no disagreement among them was found.
    disagreeing = {f.group.uid for f in findings if f.group and f.kind in MISMATCH_KINDS}
    for u, lossy, at_seq, members_left, grid in ctx.alike_later:
        if lossy.uid not in disagreeing and _check_against_alike(
            ctx, lossy, at_seq, members_left, grid, findings
        ):
            passed[u] = False
            disagreeing.add(lossy.uid)
    entry_unit = np.full(t.n, -1, dtype=np.int64)
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
) -> dict[int, int]:
    """Per group uid, the highest collective seq id that every member must have issued.

    A collective that some member completed was issued by every member. On gloo, `retired`
    also marks a collective that failed (timed out), so completion proves nothing there; but
    gloo collectives are synchronous: a member that issued anything after seq k (seq k + 1, or
    an op of another group) got through k, which every member therefore issued; the proven
    seq id is then k itself, and it completed."""
    if not len(starts):
        return {}
    any_done = np.logical_or.reduceat(done, starts)
    unit_stateless = stateless(t, rows[starts])
    # A row followed by another row of its rank: on gloo, that op returned.
    last_of_rank = np.zeros(t.n, dtype=bool)
    rank_change = np.flatnonzero(np.diff(t.rank) != 0)
    last_of_rank[np.append(rank_change, t.n - 1)] = True
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


def _per_rank(t: EntryTable, unit_rows: I64) -> tuple[npt.NDArray[np.int32], I64, I64]:
    """A unit's rows come grouped by rank (ascending), each rank's in record order: their
    ranks, where each rank's rows start, and how many it has."""
    ranks = t.rank[unit_rows]
    starts = np.flatnonzero(_changes(ranks))
    return ranks, starts, np.diff(starts, append=len(unit_rows))


def check_unit(
    ctx: MatchContext, group: Group, seq: int, unit_rows: I64, findings: list[Finding]
) -> tuple[bool, str, tuple[int, ...]]:
    """The per-unit look for units that failed the vectorized checks."""
    t = ctx.t
    ranks, starts, lengths = _per_rank(t, unit_rows)
    issued = tuple(ranks[starts].tolist())
    unit_rows = _without_cut_blocks(ctx, unit_rows, starts, lengths)
    ranks, starts, lengths = _per_rank(t, unit_rows)
    present = tuple(ranks[starts].tolist())
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
    op = _block_name(main_ops)
    ok = True

    def add(
        kind: FindingKind,
        culprits: set[int],
        detail: str,
        name: str = op,
        ranks: tuple[int, ...] = present,
    ) -> None:
        nonlocal ok
        ok = False
        findings.append(
            Finding(kind, group, seq, None, name, ranks, tuple(sorted(culprits)), detail)
        )

    # Who is missing, and why.
    not_joined: list[int] = []
    issued_here = set(issued)
    for member in group.ranks:
        if member in issued_here or member in ctx.unavailable:
            continue
        if _issued(ctx, member, group.uid, seq):
            continue
        not_joined.append(member)
    gap = unrecorded_gap(ctx, group, seq, present, not_joined)
    if gap is not None:
        first, after, width = gap
        barrier = width == 2 and any(
            ctx.t.backends[int(b)] in NO_MONITORED_BARRIER_BACKENDS
            for b in ctx.t.backend[unit_rows].tolist()
        )
        unrecorded = "monitored_barrier" if barrier else f"unrecorded collective ({width} ids)"
        why = (
            "gloo records no monitored_barrier, which takes two sequence ids"
            if barrier
            else "it leaves no entry but takes sequence ids"
        )
        add(
            FindingKind.NOT_JOINED,
            set(present),
            f"{label(not_joined)} stopped after #{seq - 1}, where every member went from "
            f"#{first} to #{after} before, after the same op: an unrecorded collective ({why}) "
            f"they are in now; {label(present)} issued {op} #{seq} instead, inside that gap: "
            f"{agree(present, 'it', 'they')} skipped the {unrecorded}",
            unrecorded,
            tuple(sorted(set(present) | set(not_joined))),
        )
        ctx.skipped.add(id(findings[-1]))
        return False, unrecorded, ()
    shift = None if not_joined else _skipped_in_place(ctx, group, seq, unit_rows)
    first_finding = len(findings)
    if not_joined:
        last = {m: _last_seq(ctx, m, group.uid) for m in not_joined}
        lasts = ", ".join(
            f"rank {m}: {'none' if s is None else f'seq {s}'}" for m, s in sorted(last.items())[:8]
        )
        add(
            FindingKind.NOT_JOINED,
            set(not_joined),
            f"{label(present)} issued {op} #{seq}; {label(not_joined)} never "
            f"did (last collective on this group: {lasts})",
        )

    # Op types, member by member for blocks.
    if kinds > 1:
        culprits, note = deviants(ctx, group, seq, dict(ops_of.items()), ops_value(t))
        agreed = [v for r, v in ops_of.items() if r not in culprits]
        if agreed:
            main_ops = agreed[0]
            op = _block_name(main_ops)
        where, theirs = _first_difference(ops_of, culprits, main_ops)
        others = f"the others issued {_block_name(main_ops)}" if agreed else "they disagree"
        add(
            FindingKind.OP_TYPE_MISMATCH,
            culprits,
            f"{label(culprits)} issued {theirs} where {others}{where}{note}",
            op,
        )
        if shift is not None:
            explain_skip(ctx, findings, first_finding, shift, op, seq)
        return ok, op, tuple(not_joined)

    # Sizes and dtypes, position by position. Every rank issued the same ops here, so the
    # same number of them (blocks of different lengths differ in ops, reported above).
    assert grid is not None
    for pos, pos_op in enumerate(main_ops):
        if _alike(ctx, pos_op, grid[:, pos]):
            continue
        rows_at = dict(zip(present, grid[:, pos].tolist(), strict=True))
        what = pos_op if len(main_ops) == 1 else f"{pos_op} (member {pos + 1} of {op})"
        _check_sizes(ctx, group, seq, (pos, pos_op), what, rows_at, add)

    if shift is not None:
        explain_skip(ctx, findings, first_finding, shift, op, seq)
    if ok and grid is not None and set(group.ranks) & ctx.unavailable:
        ctx.alike_later.append((ctx.unit_now, group, seq, present, grid))

    # Completion: the lagging ranks are the culprits, never the completed ones.
    head_rows = unit_rows[starts + lengths - 1]
    head_done = ctx.done[head_rows]
    if not not_joined and ok and not (head_done == head_done[0]).all():
        heads = dict(zip(present, head_rows.tolist(), strict=True))
        done = dict(zip(present, head_done.tolist(), strict=True))
        if len(set(done.values())) > 1:
            lagging = {rank for rank, d in done.items() if not d}
            by_state: dict[str, list[int]] = {}
            for r in sorted(lagging):
                by_state.setdefault(_state_name(t, heads[r]), []).append(r)
            detail = (
                f"{label(set(done) - lagging)} completed {op} #{seq}; {label(lagging)} did not ("
                + "; ".join(f"{label(rs)}: {state}" for state, rs in by_state.items())
                + ")"
            )
            add(FindingKind.STATE_MISMATCH, lagging, detail)
    return ok, op, tuple(not_joined)


def _signature_value(t: EntryTable, free_outputs: bool = False) -> ValueOf:
    """Every rank's ops with their sizes and dtypes (codes into the table's lists); with
    `free_outputs`, an all_to_all's output (its rank's own total) left out as -1."""
    free = np.array([free_outputs and op in ALL_TO_ALL_OPS for op in t.ops], dtype=bool)

    def value_of(rows: I64) -> dict[int, Value]:
        return {
            rank: tuple(
                (
                    int(t.op[r]),
                    int(t.in_shape[r]),
                    -1 if free[t.op[r]] else int(t.out_shape[r]),
                    int(t.in_dtype[r]),
                    int(t.out_dtype[r]),
                )
                for r in rs
            )
            for rank, rs in rank_rows(t, rows).items()
        }

    return value_of


def _check_against_alike(
    ctx: MatchContext,
    group: Group,
    seq: int,
    present: tuple[int, ...],
    grid: I64,
    findings: list[Finding],
) -> bool:
    """A collective whose members with a dump agree, while a member left none, compared with
    the groups alike at the same seq id. With no dump from the other side, agreement among
    those left proves nothing: gloo aborts, with no dump, a rank that receives more bytes than
    it posted, so the partner of a rank that sent another size or dtype disappears: the same
    op with other sizes or dtypes than every group alike holds deviates. Asked at
    a group's newest collectives only (where its members stopped; async ops may follow the
    one that failed), when no group alike agrees with the members left and one disagrees."""
    t = ctx.t
    lost = sorted(set(group.ranks) & ctx.unavailable)
    if not lost or _newest_unit_seq(ctx, group.uid) - seq >= NEWEST_UNITS:
        return False
    value_of = _signature_value(t, free_outputs=True)
    mine = set(value_of(grid.reshape(-1)).values())
    if len(mine) != 1:
        return False
    value = mine.pop()
    # Only groups of the same pipeline stage: another stage runs another program.
    votes = sibling_votes(ctx, group, seq, value_of, same_stage=True)
    if not votes or value in votes:
        return False
    reference, count = votes.most_common(1)[0]
    if len(reference) != len(value) or any(
        a[0] != b[0] for a, b in zip(value, reference, strict=True)
    ):
        # Another op altogether (a skip brings the next op forward) counts only when several
        # groups alike agree on theirs: a single other group may run another program.
        if count < 2 or len(votes) > 1:
            return False
        kind, what = FindingKind.OP_TYPE_MISMATCH, "ops"
    elif any(a[1:3] != b[1:3] for a, b in zip(value, reference, strict=True)):
        kind, what = FindingKind.SIZE_MISMATCH, "sizes"
    else:
        kind, what = FindingKind.DTYPE_MISMATCH, "dtypes"

    def text(v: Value) -> str:
        return "; ".join(
            f"{t.ops[op]} in {_shape_text(t, i)} out {_shape_text(t, o) if o >= 0 else '-'} "
            f"{','.join(d for d in t.dtypes[di] if d) or '-'}"
            for op, i, o, di, _ in v
        )

    aborts = any(
        t.backends[int(b)] in ABORTS_ON_OVERSIZED_RECEIVE_BACKENDS
        for b in t.backend[grid.reshape(-1)].tolist()
    )
    why = (
        " (gloo aborts, with no dump, a rank that receives more bytes than it posted)"
        if aborts
        else ""
    )
    findings.append(
        Finding(
            kind,
            group,
            seq,
            None,
            _block_name(tuple(t.ops[v[0]] for v in value)),
            present,
            present,
            f"{label(present)} issued {text(value)} where {counted(count, 'group')} "
            f"{group.desc!r} of {group.size} alike issued {text(reference)} at #{seq}; "
            f"{label(lost)} left no dump{why}: the {what} differ",
        )
    )
    return True


def _shape_text(t: EntryTable, code: int) -> str:
    return str([list(s) for s in t.shapes[code]])


def explain_skip(
    ctx: MatchContext,
    findings: list[Finding],
    first: int,
    shift: tuple[set[int], int, int],
    op: str,
    seq: int,
) -> None:
    """The first disagreement found at this unit that names exactly the ranks that skipped
    it, told as a skip: they went on, so their next ops sit one sequence id early."""
    culprits, before, count = shift
    for at in range(first, len(findings)):
        f = findings[at]
        if f.kind in MISMATCH_KINDS and set(f.culprit_ranks) == culprits:
            findings[at] = replace(
                f,
                detail=f"{f.detail}; {label(culprits)} skipped {op} #{seq} and went on: "
                f"{agree(culprits, 'its', 'their')} ops from #{seq} on are the group's program "
                f"one op ahead ({count} match what every member issued after the same op at "
                f"#{before}, from #{before + 1})",
            )
            ctx.skipped.add(id(findings[at]))
            return


def _skipped_in_place(
    ctx: MatchContext, group: Group, seq: int, unit_rows: I64
) -> tuple[set[int], int, int] | None:
    """A minority whose ops from this seq id on are the group's program one op ahead: it
    skipped this collective (a rank-dependent branch) and went on in the same group, so its
    next op sits at this seq id and differs from what the rest issued. Told from a size or op
    mismatch by the group's own history: after an earlier collective like this one (#j), the
    group issued at #j+1, #j+2, ... exactly what the minority holds at #seq, #seq+1, ...
    Returns (the minority, j, how many of its ops match)."""
    t = ctx.t
    value_of = _signature_value(t)
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


def unrecorded_gap(
    ctx: MatchContext, group: Group, seq: int, present: tuple[int, ...], not_joined: list[int]
) -> tuple[int, int, int] | None:
    """Sequence ids that every member leaves unrecorded, again. gloo records no
    `monitored_barrier`, yet it takes two collective sequence ids on every caller; so do ops a
    recorder leaves out. When every member went from #a to #b (b > a + 1) before, the ranks
    that stopped right after an op like #a's are in such an op now, and the fewer ranks
    holding #seq, inside the gap, skipped it. Returns (a, b, width) of the earlier gap."""
    if not not_joined or len(present) >= len(not_joined) or ctx.unit_bounds is None:
        return None
    if any(_last_seq(ctx, m, group.uid) != seq - 1 for m in not_joined):
        return None
    uids, seqs, _, _ = ctx.unit_bounds
    mine = np.flatnonzero(uids == group.uid)
    whole = (ctx.unit_ranks[mine] == len(set(group.ranks))) & (seqs[mine] < seq)
    full = seqs[mine][whole].tolist()  # units every member holds, by seq id
    value_of = _signature_value(ctx.t)
    before = uniform_value(ctx, group.uid, seq - 1, value_of)
    if before is None:
        return None
    for a, b in zip(full[-2::-1], full[:0:-1], strict=True):
        if b - a > 1 and uniform_value(ctx, group.uid, a, value_of) == before:
            return a, b, b - a - 1
    return None


def _without_cut_blocks(ctx: MatchContext, unit_rows: I64, starts: I64, lengths: I64) -> I64:
    """The unit's rows without the coalesced blocks that a ring buffer cut: a rank whose
    buffer wrapped and begins inside the block holds only its last members. They match the
    tail of the others' block and are left out of the comparison (not in the window)."""
    if bool((lengths == lengths[0]).all()):
        return unit_rows
    t = ctx.t
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


def _state_name(t: EntryTable, row: int) -> str:
    name = STATE_NAMES[State(int(t.state[row]))]
    if bool(t.retired[row]):
        return f"{name}, retired without completing (timed out or failed)"
    return name


def _block_name(ops: tuple[str, ...]) -> str:
    if len(ops) == 1:
        return ops[0]
    members = Counter(ops[:-1])
    inner = "+".join(f"{op}×{n}" if n > 1 else op for op, n in members.items())
    return f"{ops[-1]}[{inner}]"


def _first_difference(
    ops_of: dict[int, tuple[str, ...]], culprits: set[int], reference: tuple[str, ...]
) -> tuple[str, str]:
    culprit = min(culprits)
    theirs = ops_of[culprit]
    if len(theirs) == 1 and len(reference) == 1:
        return "", theirs[0]
    for pos, (a, b) in enumerate(zip(theirs, reference, strict=False)):
        if a != b:
            return f" (member {pos + 1} of the block)", a
    return " (block lengths differ)", _block_name(theirs)


def _alike(ctx: MatchContext, op: str, rows: I64) -> bool:
    """Rows (one per rank) that `_check_sizes` would pass at a glance: no intrinsic size
    error, and one input shape, output shape, input dtype and output dtype among them."""
    t = ctx.t
    if op in ALL_TO_ALL_OPS or ctx.size_bad[rows].any():
        return False
    return all(
        bool((values == values[0]).all())
        for values in (t.in_shape[rows], t.out_shape[rows], t.in_dtype[rows], t.out_dtype[rows])
    )


def _check_sizes(
    ctx: MatchContext,
    group: Group,
    seq: int,
    at: tuple[int, str],
    what: str,
    rows_at: dict[int, int],
    add: Adder,
) -> None:
    """Sizes and dtypes of the rows at one block position (`at` = position, op name)."""
    t = ctx.t
    pos, op = at
    if op in UNCHECKED_SIZE_OPS:
        return
    present = tuple(sorted(rows_at))

    def shape(code: int) -> str:
        return str([list(s) for s in t.shapes[code]])

    intrinsic = {rank for rank, r in rows_at.items() if ctx.size_bad[r]}
    if intrinsic:
        r0 = rows_at[min(intrinsic)]
        add(
            FindingKind.SIZE_MISMATCH,
            intrinsic,
            f"{what} on {label(intrinsic)}: input {shape(int(t.in_shape[r0]))} and "
            f"output {shape(int(t.out_shape[r0]))}, inconsistent for {op} on {group.size} ranks",
            what,
        )
    if op in ALL_TO_ALL_OPS:
        flagged = _check_all_to_all_inputs(ctx, group, seq, (pos, op), what, rows_at, add)
        if len(present) == group.size and not flagged:
            total_in = sum(int(t.shape_numel[t.in_shape[r]]) for r in rows_at.values())
            total_out = sum(int(t.shape_numel[t.out_shape[r]]) for r in rows_at.values())
            if total_in != total_out:
                odd, which = _odd_one_out(t, rows_at)
                add(
                    FindingKind.SIZE_MISMATCH,
                    odd or set(present),
                    f"{what}: the group sends {total_in} elements in all but receives {total_out}"
                    + (f" ({label(odd)}: the only {which} unlike the others')" if odd else ""),
                    what,
                )
    else:
        # non-root scatter inputs and gather outputs are not used; `*_v` sizes are per rank
        check_in = op not in SCATTER_OPS and op not in UNEVEN_INPUT_OPS
        check_out = op not in GATHER_OPS and op not in UNEVEN_OUTPUT_OPS

        def sizes_of(row: int) -> Value:
            return (
                int(t.in_shape[row]) if check_in else -1,
                int(t.out_shape[row]) if check_out else -1,
            )

        sizes = {rank: (op, sizes_of(r)) for rank, r in rows_at.items()}
        if len(set(sizes.values())) > 1:
            culprits, note = deviants(ctx, group, seq, sizes, at_position(t, pos, sizes_of))
            add(
                FindingKind.SIZE_MISMATCH,
                culprits,
                f"{what}: " + _contrast(sizes, culprits, lambda v: _sizes_text(t, v)) + note,
                what,
            )

    def dtypes_of(row: int) -> Value:
        in_d = () if op in SCATTER_OPS else t.dtypes[int(t.in_dtype[row])]
        out_d = () if op in GATHER_OPS else t.dtypes[int(t.out_dtype[row])]
        return (tuple(d for d in in_d if d), tuple(d for d in out_d if d))

    comparable: dict[int, Value] = {}
    for rank, r in rows_at.items():
        d = dtypes_of(r)
        if d[0] or d[1]:
            comparable[rank] = (op, d)
    if len(set(comparable.values())) > 1:
        culprits, note = deviants(ctx, group, seq, comparable, at_position(t, pos, dtypes_of))
        add(
            FindingKind.DTYPE_MISMATCH,
            culprits,
            f"{what}: " + _contrast(comparable, culprits, lambda v: f"dtypes {_dt(v)}") + note,
            what,
        )


def _odd_one_out(t: EntryTable, rows_at: dict[int, int]) -> tuple[set[int], str]:
    """Of an all_to_all whose totals do not add up, the minority whose input, else output,
    differs from the one every other member holds (at least two of them); none if no such."""
    for which, column in (("input", t.in_shape), ("output", t.out_shape)):
        values = {rank: int(column[r]) for rank, r in rows_at.items()}
        counts = Counter(values.values()).most_common()
        if len(counts) == 2 and counts[0][1] >= 2 and counts[0][1] > counts[1][1]:
            return {r for r, v in values.items() if v != counts[0][0]}, which
    return set(), ""


def _check_all_to_all_inputs(
    ctx: MatchContext,
    group: Group,
    seq: int,
    at: tuple[int, str],
    what: str,
    rows_at: dict[int, int],
    add: Adder,
) -> bool:
    """An all_to_all's input sizes, compared across its members. The recorder keeps only
    each rank's totals, and output totals legitimately differ from rank to rank (uneven
    splits), so only inputs are compared, and only where this exchange has uniform inputs:
    every member of the groups alike holds one input at this seq id, or, with no group alike,
    this group's last exchange of the same kind (outputs uneven or not alike) had one input
    on every member. A minority that passes another input deviates (in a pair, the one the
    groups alike do not hold). Returns whether it named one."""
    t = ctx.t
    pos, op = at

    values = {rank: (op, int(t.in_shape[r])) for rank, r in rows_at.items()}
    counts = Counter(values.values()).most_common()
    if len(counts) < 2:
        return False
    in_value = at_position(t, pos, lambda r: (int(t.in_shape[r]),))
    out_value = at_position(t, pos, lambda r: (int(t.out_shape[r]),))
    votes = sibling_votes(ctx, group, seq, in_value)
    majority = counts[0][1] * 2 > len(values) and counts[0][1] >= 2
    if majority:
        reference = counts[0][0]
    elif len(votes) == 1 and (op, next(iter(votes))[1][0]) in values.values():
        reference = (op, next(iter(votes))[1][0])  # a tie that the groups alike settle
    else:
        return False
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
    alike = f"every member of {counted(votes.total(), 'group')} {group.desc!r} alike holds it"
    if votes and set(votes) != {held}:
        return False
    if majority and votes:
        basis = alike
    elif majority and history:
        basis = f"every member passed it at #{earlier}, the same exchange"
    elif not majority and votes.total() >= 2 and history is not False:
        basis = alike  # a pair: the groups alike and the pair's own history agree
    else:
        return False
    culprits = {rank for rank, v in values.items() if v != reference}

    def shape(code: int) -> str:
        return str([list(x) for x in t.shapes[code]])

    theirs = "; ".join(
        f"{label([r for r in sorted(culprits) if values[r] == v])}: input {shape(v[1])}"
        for v in dict.fromkeys(values[r] for r in sorted(culprits))
    )
    add(
        FindingKind.SIZE_MISMATCH,
        culprits,
        f"{what}: {theirs}; the others: input {shape(reference[1])} ({basis}; output totals "
        "may differ, input totals may not)",
        what,
    )
    return True


def _contrast(values: dict[int, Value], culprits: set[int], text: Callable[[Any], str]) -> str:
    """`ranks 1,5: <theirs>; rank 0: <reference>`, both sides named; values are (op, value)."""
    by_value: dict[Value, list[int]] = {}
    for rank, value in sorted(values.items()):
        by_value.setdefault(value, []).append(rank)
    deviating = [v for v, rs in by_value.items() if set(rs) <= culprits]
    reference = [v for v, rs in by_value.items() if not set(rs) & culprits]
    parts = [f"{label(by_value[v])}: {text(v[1])}" for v in deviating + reference]
    return "; ".join(parts)


def _sizes_text(t: EntryTable, value: Any) -> str:
    in_code, out_code = value

    def shape(code: int) -> str:
        return "-" if code < 0 else str([list(s) for s in t.shapes[code]])

    return f"in {shape(in_code)} out {shape(out_code)}"


def _dt(d: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    return f"in {','.join(d[0]) or '-'} out {','.join(d[1]) or '-'}"


def _newest_seq(ctx: MatchContext, rank: int, uid: int) -> int | None:
    """The newest collective sequence id of group `uid` in `rank`'s buffer (None: none left).
    Asked only for members absent from units that fail the vectorized checks, but then for
    every such member (16,384 in a world-wide hang), so all are found in one pass."""
    if ctx.newest is None:
        t, rows = ctx.t, ctx.coll_rows
        # Rows are sorted by (group, seq), and a (rank, group) pair is of one group: its last
        # row has its newest seq (of equal indices, the last assignment stays).
        last = np.full(len(t.pair_rank), -1, dtype=np.int64)
        last[t.pair[rows]] = np.arange(len(rows))
        has = np.flatnonzero(last >= 0)
        ctx.newest = {}
        for key, value in zip(
            zip(t.pair_rank[has].tolist(), ctx.groups.pair_uid[has].tolist(), strict=True),
            t.coll_seq[rows[last[has]]].tolist(),
            strict=True,
        ):
            if value > ctx.newest.get(key, value - 1):  # a rank's pairs of one uid: the max
                ctx.newest[key] = value
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


def _newest_unit_seq(ctx: MatchContext, uid: int) -> int:
    """The highest collective seq id any member of group `uid` holds (-1: none)."""
    if ctx.unit_bounds is None:
        return -1
    uids, seqs, _, _ = ctx.unit_bounds
    mine = seqs[uids == uid]
    return int(mine.max()) if len(mine) else -1


def _group_in_flight(ctx: MatchContext, uid: int) -> bool:
    """Whether a member of the group has an op it has not retired (gloo: still running at
    its dump), asked once per group."""
    found = ctx.in_flight.get(uid)
    if found is None:
        if ctx.busy is None:
            t = ctx.t
            ctx.busy = frozenset(distinct(t.rank[~t.retired]).tolist()) if t.n else frozenset()
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
    return bool(stateless(ctx.t, ctx.coll_rows[span : span + 1])[0])


def _last_seq(ctx: MatchContext, rank: int, uid: int) -> int | None:
    newest = _newest_seq(ctx, rank, uid)
    enqueued = ctx.last_enqueued.get((rank, uid))
    values = [v for v in (newest, enqueued) if v is not None and v >= 0]
    return max(values) if values else None
