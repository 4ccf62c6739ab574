"""Match every collective and every send/recv across ranks, and say where they disagree.

Collectives are joined on (group, collective sequence id): a coalesced block (members plus end
marker) is one unit, with the marker's state. Units that are complete and uniform are passed by
vectorized checks over the columns; only the rest (the few that desynced, and ops whose sizes
legitimately differ per rank such as gather, scatter and all_to_all) get a per-unit look.
Point-to-point ops are matched per channel (group, sender, receiver): the n-th send a→b with
the n-th recv on b from a; `recv x<-?` takes any sender. The collective and p2p sequence-id
namespaces are never mixed. A rank whose buffer no longer holds an op (ring-buffer wrap) is
"not in the window", never "did not join".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from . import progress
from .arrays import distinct
from .dumps import EntryTable, RankDump
from .groups import GroupTable
from .model import (
    ALL_GATHER_OPS,
    ALL_TO_ALL_OPS,
    ANY_SOURCE,
    EXACT_LAYOUT_BACKENDS,
    GATHER_OPS,
    MISMATCH_KINDS,
    REDUCE_SCATTER_OPS,
    SAME_IN_OUT_OPS,
    SCATTER_OPS,
    STATE_NAMES,
    UNCHECKED_SIZE_OPS,
    UNEVEN_INPUT_OPS,
    UNEVEN_OUTPUT_OPS,
    UNKNOWN_PEER,
    Finding,
    FindingKind,
    Group,
    P2PKind,
    State,
    UnitKind,
)
from .ranks import agree, by_count, counted, label

I64 = npt.NDArray[np.int64]

NO_STATE_BACKENDS = frozenset({"gloo"})
"""Backends whose recorder never leaves `scheduled`: `retired` is their only completion signal,
and it is also set when the op failed (timed out)."""


def stateless(t: EntryTable, rows: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.bool_]:
    """Whether each row (every row, or `rows`) comes from a backend that records no states."""
    codes = t.backend if rows is None else t.backend[rows]
    by_code = np.array([b in NO_STATE_BACKENDS for b in t.backends], dtype=bool)
    return by_code[codes] if len(by_code) else np.zeros(len(codes), dtype=bool)


COLLECTIVE_UNITS = (UnitKind.COLLECTIVE, UnitKind.BLOCK_MEMBER, UnitKind.BLOCK_MARKER)
P2P_UNITS = (UnitKind.P2P, UnitKind.BATCH_MEMBER)


class _Adder(Protocol):
    """Records one finding for the unit being checked."""

    def __call__(
        self,
        kind: FindingKind,
        culprits: set[int],
        detail: str,
        name: str = ...,
        ranks: tuple[int, ...] = ...,
    ) -> None: ...


@dataclass(frozen=True)
class CollectiveUnits:
    """One row per (group, collective sequence id) seen on any rank."""

    group: npt.NDArray[np.int32]
    seq: I64
    op: list[str]
    ranks_present: npt.NDArray[np.int32]
    ranks_expected: npt.NDArray[np.int32]
    passed: npt.NDArray[np.bool_]
    entry_unit: I64  # unit id of every EntryTable row, -1 for rows that are not collectives
    not_joined: dict[int, tuple[int, ...]]  # unit id → members that never issued it
    rows: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # rows sorted by unit
    starts: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # unit u: rows[starts[u]:]

    def find(self, uid: int, seq: int) -> int | None:
        """The unit id of (group uid, collective seq id), if any rank issued it."""
        low = int(np.searchsorted(self.group, uid, side="left"))
        high = int(np.searchsorted(self.group, uid, side="right"))
        at = low + int(np.searchsorted(self.seq[low:high], seq))
        return at if at < high and int(self.seq[at]) == seq else None

    def unit_rows(self, unit: int) -> I64:
        """The EntryTable rows of one unit, by rank then record order."""
        end = int(self.starts[unit + 1]) if unit + 1 < len(self.starts) else len(self.rows)
        return self.rows[int(self.starts[unit]) : end]


@dataclass(frozen=True)
class P2PPairs:
    send_row: I64
    recv_row: I64
    entry_pair: I64  # pair id of every EntryTable row, -1 when unmatched or not p2p


@dataclass(frozen=True)
class MatchResult:
    collectives: CollectiveUnits
    p2p: P2PPairs
    done: npt.NDArray[np.bool_]  # effective completion of every row (marker state, gloo retired)
    findings: tuple[Finding, ...]
    # group uid → highest collective seq id every member issued (see `_proof`)
    proven: dict[int, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # how progress was judged where completion is not recorded
    # findings of ranks that skipped a collective and went on: not_joined ones whose culprits
    # issued an op inside sequence ids every other member leaves unrecorded (`_unrecorded_gap`),
    # and mismatches whose culprits are their group's program one op ahead (`_explain_skip`)
    skipped: tuple[Finding, ...] = ()


# ---------------------------------------------------------------------------------------------


def completion(t: EntryTable) -> npt.NDArray[np.bool_]:
    """Whether each row finished: the end marker's state for block members; gloo records no
    states (always `scheduled`), so there `retired` is the only completion signal."""
    if not t.n:
        return np.zeros(0, dtype=bool)
    head = t.marker.copy()  # plain ops are their own marker; -1 only for orphans
    orphans = np.flatnonzero(head < 0)
    head[orphans] = orphans
    state = t.state[head]
    retired = t.retired[head]
    done: npt.NDArray[np.bool_] = np.where(stateless(t), retired, state == State.COMPLETED)
    return done


def intrinsic_size_errors(t: EntryTable, groups: GroupTable) -> npt.NDArray[np.bool_]:
    """Rows whose own input/output sizes contradict their op for the group's size. Element
    counts are looked up only for the rows that can be wrong: all_reduce rows whose shapes
    differ, and all_gather and reduce_scatter rows."""
    bad = np.zeros(t.n, dtype=bool)
    if not t.n:
        return bad
    kind = np.zeros(len(t.ops), dtype=np.int8)
    for code, op in enumerate(t.ops):
        if op in SAME_IN_OUT_OPS:
            kind[code] = 1
        elif op in ALL_GATHER_OPS:
            kind[code] = 2
        elif op in REDUCE_SCATTER_OPS:
            kind[code] = 3
    k = kind[t.op]
    rows = np.flatnonzero(((k == 1) & (t.in_shape != t.out_shape)) | (k >= 2))
    if not len(rows):
        return bad
    k = k[rows]
    sizes = np.array([g.size for g in groups.groups], dtype=np.int64)
    gsize = sizes[groups.entry_group[rows]]
    in_n = t.shape_numel[t.in_shape[rows]]
    out_n = t.shape_numel[t.out_shape[rows]]
    # gloo records reduce_scatter_tensor as all_reduce: accept the reduce-scatter shape there.
    gloo = np.array([b == "gloo" for b in t.backends], dtype=bool)[t.backend[rows]]
    bad[rows] = (
        ((k == 1) & ~(gloo & (in_n == out_n * gsize)))
        | ((k == 2) & (out_n != in_n * gsize))
        | ((k == 3) & (in_n != out_n * gsize))
    )
    return bad


def recorder_conventions(
    t: EntryTable, groups: GroupTable, bad: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.bool_], tuple[str, ...]]:
    """Size rules that the recorder itself breaks: `bad` without them, and a note for each.

    A layout that every member of a collective records alike is how the recorder writes that
    op, not a disagreement (gloo writes two `all_gather_into_tensor` of a coalescing block as
    one all_gather whose output is `[[2] + shard]`); never on NCCL and its kin, whose layouts
    are exact (`EXACT_LAYOUT_BACKENDS`). Learned from the evidence: an (op, input,
    output, group size) signature that breaks the rule on every member that holds one
    collective, at least two of them, is accepted wherever it appears. A member whose sizes
    differ from its peers' is still caught by comparing the members."""
    exact = np.array([b in EXACT_LAYOUT_BACKENDS for b in t.backends], dtype=bool)
    rows = np.flatnonzero(bad & ~exact[t.backend]) if t.n else np.zeros(0, np.int64)
    if not len(rows):
        return bad, ()
    uid = groups.entry_group[rows].astype(np.int64)
    sizes = np.array([g.size for g in groups.groups], dtype=np.int64)
    keys = np.stack(
        [t.backend[rows], t.op[rows], t.in_shape[rows], t.out_shape[rows], sizes[uid]], axis=1
    ).astype(np.int64)
    units = np.stack([uid, t.coll_seq[rows]], axis=1)
    # Per (unit, signature): how many distinct ranks hold it; per unit: how many signatures.
    unit_key = np.concatenate([units, keys], axis=1)
    holding = np.unique(
        np.concatenate([unit_key, t.rank[rows, None].astype(np.int64)], axis=1), axis=0
    )
    per_sig, holders = np.unique(holding[:, :-1], axis=0, return_counts=True)
    unit_of_sig, sig_count = np.unique(per_sig[:, :2], axis=0, return_inverse=True)
    n_sigs = np.bincount(sig_count.reshape(-1), minlength=len(unit_of_sig))
    # Every rank that holds the collective at all must hold that layout: members with no
    # dump, or that never issued it (a rank that stopped before it), are no evidence.
    span = int(t.coll_seq.max()) + 1
    wanted = unit_of_sig[:, 0] * span + unit_of_sig[:, 1]
    all_rows = np.flatnonzero(np.isin(t.unit, COLLECTIVE_UNITS))
    all_keys = groups.entry_group[all_rows].astype(np.int64) * span + t.coll_seq[all_rows]
    keep = np.isin(all_keys, wanted)
    pairs = np.unique(
        np.stack([all_keys[keep], t.rank[all_rows[keep]].astype(np.int64)], axis=1), axis=0
    )
    unit_keys, holding = np.unique(pairs[:, 0], return_counts=True)
    present = dict(zip(unit_keys.tolist(), holding.tolist(), strict=True))
    members = np.array([present.get(k, 0) for k in wanted.tolist()])[sig_count.reshape(-1)]
    learned = (n_sigs[sig_count.reshape(-1)] == 1) & (holders == members) & (holders >= 2)
    if not learned.any():
        return bad, ()
    accepted = {tuple(k) for k in per_sig[learned, 2:].tolist()}
    keep = np.array([tuple(k) not in accepted for k in keys.tolist()], dtype=bool)
    out = bad.copy()
    out[rows[~keep]] = False
    notes = []
    for backend, op, in_code, out_code, size in sorted(accepted):
        notes.append(
            f"{t.backends[backend]} records {t.ops[op]} on {size} ranks as input "
            f"{[list(x) for x in t.shapes[in_code]]}, output "
            f"{[list(x) for x in t.shapes[out_code]]} on every member alike: taken as the "
            "recorder's layout, not a size mismatch"
        )
    return out, tuple(notes)


@dataclass
class _Context:
    t: EntryTable
    groups: GroupTable
    done: npt.NDArray[np.bool_]
    size_bad: npt.NDArray[np.bool_]
    last_enqueued: dict[tuple[int, int], int]  # (rank, uid) → from pg_status
    wrapped: dict[int, bool]
    unavailable: frozenset[int]  # member ranks with no usable dump
    # collective rows, by (group uid, seq)
    coll_rows: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    # (rank, uid) → newest collective seq in the rank's buffer, for all pairs on first demand
    newest: dict[tuple[int, int], int] | None = None
    # group uid → highest collective seq id every member is known to have issued: a collective
    # that some member completed (or, on gloo, got past) was issued by all of its members, so a
    # member whose dump lacks it was dumped before it got there (or its buffer wrapped).
    proof: dict[int, int] = field(default_factory=dict)
    # (group uid, seq) → (start, end) into coll_rows, built on first demand (no-majority ties)
    unit_at: dict[tuple[int, int], tuple[int, int]] | None = None
    unit_bounds: tuple[I64, I64, I64, I64] | None = None  # uid, seq, start, end of every unit
    skipped: set[int] = field(default_factory=set)  # ids of the gap rule's findings
    unit_now: int = -1  # the unit `_check_unit` is looking at
    # distinct ranks holding each unit (aligned with `unit_bounds`)
    unit_ranks: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    # units of groups that lost a member, their members left agreeing: (unit, group, seq,
    # members present, rows), compared with groups alike once every unit is checked
    alike_later: list[tuple[int, Group, int, tuple[int, ...], I64]] = field(default_factory=list)
    busy: frozenset[int] | None = None  # ranks with an unretired op, on first demand
    in_flight: dict[int, bool] = field(default_factory=dict)  # group uid → a member is busy
    # rank → its (desc, size, local rank) in each group carrying send/recv, on first demand
    stages: dict[int, set[tuple[str, int, int]]] | None = None
    # (desc, size) → the groups of that description and size, built on first demand
    alike: dict[tuple[str, int], list[Group]] | None = None


def match(dumps: Sequence[RankDump], t: EntryTable, groups: GroupTable) -> MatchResult:
    done = completion(t)
    quiet = progress.silent(t, dumps, stateless(t))
    if quiet.rows.any():
        done = progress.judged_by_issue(t, groups, done, quiet.rows, progress.collective_rows(t))
    size_bad, conventions = recorder_conventions(t, groups, intrinsic_size_errors(t, groups))
    ctx = _Context(
        t=t,
        groups=groups,
        done=done,
        size_bad=size_bad,
        last_enqueued=_last_enqueued(dumps, t, groups),
        wrapped={d.rank: d.wrapped for d in dumps},
        unavailable=frozenset(
            set(groups.missing_ranks) | (set(range(groups.world_size)) - set(groups.loaded_ranks))
        ),
    )
    findings: list[Finding] = []
    units = _match_collectives(ctx, findings)
    pairs = _match_p2p(ctx, findings)
    notes = quiet.notes + conventions
    skipped = tuple(f for f in findings if id(f) in ctx.skipped)
    return MatchResult(units, pairs, done, tuple(findings), dict(ctx.proof), notes, skipped)


def _last_enqueued(
    dumps: Sequence[RankDump], t: EntryTable, groups: GroupTable
) -> dict[tuple[int, int], int]:
    """pg_status's last enqueued collective per (rank, group uid)."""
    out: dict[tuple[int, int], int] = {}
    if not t.n:
        return out
    code_to_uid = dict(
        zip(
            zip(t.pair_rank.tolist(), t.pair_group.tolist(), strict=True),
            groups.pair_uid.tolist(),
            strict=True,
        )
    )
    global_codes = {name: code for code, name in enumerate(t.group_names)}
    for dump in dumps:
        for code, (enqueued, _, _) in dump.pg_status.items():
            name = dump.groups[code] if code < len(dump.groups) else None
            if name is None:
                continue
            uid = code_to_uid.get((dump.rank, global_codes.get(name, -1)))
            if uid is not None and enqueued >= 0:
                out[(dump.rank, uid)] = enqueued
    return out


# ---------------------------------------------------------------------------------------------
# Collectives


def _changes(*keys: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
    """Where a run of equal key tuples starts, in sorted arrays."""
    n = len(keys[0])
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    for key in keys:
        change[1:] |= key[1:] != key[:-1]
    return change


def _segments(*keys: I64) -> tuple[I64, I64]:
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


def _match_collectives(ctx: _Context, findings: list[Finding]) -> CollectiveUnits:
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
    ctx.proof = _proof(t, rows, starts, unit_group, unit_seq, done)
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
        ok, op, missing = _check_unit(
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


def _proof(
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

Value = tuple[Any, ...]
"""What ranks are compared on at one unit: op names, or (op, sizes), or (op, dtypes)."""
ValueOf = Callable[[I64], dict[int, Value]]
"""Reads one value per rank from a unit's rows."""

_HISTORY_UNITS = 32  # earlier units of a group searched for a rank's own history
_NEWEST_UNITS = 8  # a group's newest units compared with groups alike when a member is lost
_MOST_VOTES = 16  # groups alike asked at most (at 16,384 ranks a group has thousands)
_ALIKE_UNITS = 6  # earlier units another group must agree on to count as alike


def _deviants(
    ctx: _Context, group: Group, seq: int, values: dict[int, Value], value_of: ValueOf
) -> tuple[set[int], str]:
    """Ranks whose value deviates, and, when that is not a plain majority, what the judgement
    rests on. With no majority (a pair that disagrees), the groups of the same description and
    size at the same seq id vote, then each rank's own history in this group; the lower rank is
    never taken as the reference by default."""
    counts = Counter(values.values())
    ranked = counts.most_common()
    leaders = [v for v, c in ranked if c == ranked[0][1]]
    if len(leaders) == 1:
        return {r for r, v in values.items() if v != leaders[0]}, ""
    reference, basis = _sibling_reference(ctx, group, seq, value_of, leaders)
    if reference is None:
        reference, basis = _history_reference(ctx, group, seq, values, value_of)
    if reference is None:
        return set(values), (
            " (no majority, and neither groups alike nor the ranks' own history tell which "
            "side deviates: all are named)"
        )
    return {r for r, v in values.items() if v != reference}, f" (no majority; {basis})"


def _unit_span(ctx: _Context, uid: int, seq: int) -> tuple[int, int] | None:
    """Where unit (group uid, seq) lies in `coll_rows`."""
    if ctx.unit_at is None:
        ctx.unit_at = {}
        if ctx.unit_bounds is not None:
            uids, seqs, starts, ends = ctx.unit_bounds
            ctx.unit_at = {
                (u, q): (a, b)
                for u, q, a, b in zip(
                    uids.tolist(), seqs.tolist(), starts.tolist(), ends.tolist(), strict=True
                )
            }
    return ctx.unit_at.get((uid, seq))


def _uniform_value(ctx: _Context, uid: int, seq: int, value_of: ValueOf) -> Value | None:
    """The one value every rank of unit (uid, seq) has, or None."""
    span = _unit_span(ctx, uid, seq)
    if span is None:
        return None
    found = set(value_of(ctx.coll_rows[span[0] : span[1]]).values())
    return found.pop() if len(found) == 1 else None


def _sibling_votes(
    ctx: _Context, group: Group, seq: int, value_of: ValueOf, same_stage: bool = False
) -> Counter[Value]:
    """What the groups like this one (same description and size, the same ops before this
    seq id) each hold at this seq id, when all their members agree: one vote per group.
    Groups of other pipeline stages vote only when none of this one does, and never with
    `same_stage`."""
    votes: Counter[Value] = Counter()
    ops = _ops_value(ctx.t)
    mine = [
        (k, v)
        for k in range(seq - 1, max(seq - 1 - _HISTORY_UNITS, -1), -1)
        if (v := _uniform_value(ctx, group.uid, k, ops)) is not None
    ][:_ALIKE_UNITS]
    if ctx.alike is None:
        ctx.alike = {}
        for other in ctx.groups.groups:
            ctx.alike.setdefault((other.desc, other.size), []).append(other)
    # Groups of this pipeline stage vote; those of other stages only when none of this one
    # does (they share the first step's short history, not the program).
    stage = _stage_of(ctx, group)
    elsewhere: Counter[Value] = Counter()
    for other in ctx.alike.get((group.desc, group.size), []):
        if other.uid == group.uid:
            continue
        # Alike only if it issued the same ops before this seq id: groups of different pipeline
        # stages share a description but not a program.
        if any(_uniform_value(ctx, other.uid, k, ops) != v for k, v in mine):
            continue
        value = _uniform_value(ctx, other.uid, seq, value_of)
        if value is not None:
            (votes if _stage_of(ctx, other) == stage else elsewhere)[value] += 1
            if votes.total() >= _MOST_VOTES:
                break
    return votes if same_stage else votes or elsewhere


def _stage_of(ctx: _Context, group: Group) -> frozenset[tuple[str, int, int]]:
    """The pipeline position of a group's members: (desc, size, local rank) in each group
    that carries send/recv. Groups of different stages share a description and often a short
    history (the first step's), but not a program."""
    if ctx.stages is None:
        t = ctx.t
        p2p_rows = (t.unit == UnitKind.P2P) | (t.unit == UnitKind.BATCH_MEMBER)
        p2p_uids = distinct(ctx.groups.entry_group[p2p_rows]).tolist()
        ctx.stages = {}
        for uid in p2p_uids:
            pipe = ctx.groups.groups[int(uid)]
            for local, rank in enumerate(pipe.ranks):
                ctx.stages.setdefault(rank, set()).add((pipe.desc, pipe.size, local))
    return frozenset(p for r in group.ranks for p in ctx.stages.get(r, ()))


def _sibling_reference(
    ctx: _Context, group: Group, seq: int, value_of: ValueOf, leaders: list[Value]
) -> tuple[Value | None, str]:
    """The value that groups like this one (same description and size) agree on at this seq
    id, if it is one of the tied values."""
    votes = _sibling_votes(ctx, group, seq, value_of)
    ranked = [(v, c) for v, c in votes.most_common() if v in leaders]
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None, ""
    value, count = ranked[0]
    return value, (
        f"{counted(count, 'other group')} {group.desc!r} of {group.size} "
        f"{by_count(count, 'agrees', 'agree')} at #{seq}"
    )


def _history_reference(
    ctx: _Context, group: Group, seq: int, values: dict[int, Value], value_of: ValueOf
) -> tuple[Value | None, str]:
    """The tied value that equals what this group agreed on the last time it issued the same
    op before this seq id (values carry the op name, so sizes of an all_reduce are compared
    with an earlier all_reduce's): a rank that changed what it sends deviates."""
    for earlier in range(seq - 1, max(seq - 1 - _HISTORY_UNITS, -1), -1):
        span = _unit_span(ctx, group.uid, earlier)
        if span is None:
            continue
        before = value_of(ctx.coll_rows[span[0] : span[1]])
        if set(before) != set(values) or len(set(before.values())) != 1:
            continue
        value = next(iter(before.values()))
        if value in values.values():
            return value, f"this group used it at #{earlier}, the same op"
    return None, ""


def _rank_rows(t: EntryTable, rows: I64) -> dict[int, list[int]]:
    """A unit's rows per rank (rows come by rank, then record order)."""
    out: dict[int, list[int]] = {}
    for rank, row in zip(t.rank[rows].tolist(), rows.tolist(), strict=True):
        out.setdefault(rank, []).append(row)
    return out


def _ops_value(t: EntryTable) -> ValueOf:
    def value_of(rows: I64) -> dict[int, Value]:
        return {
            rank: tuple(t.ops[int(t.op[r])] for r in rs) for rank, rs in _rank_rows(t, rows).items()
        }

    return value_of


def _at_position(t: EntryTable, pos: int, read: Callable[[int], Value]) -> ValueOf:
    """Each rank's value of its row at block position `pos`, with the op's name."""

    def value_of(rows: I64) -> dict[int, Value]:
        return {
            rank: (t.ops[int(t.op[rs[pos]])], read(rs[pos]))
            for rank, rs in _rank_rows(t, rows).items()
            if pos < len(rs)
        }

    return value_of


def _per_rank(t: EntryTable, unit_rows: I64) -> tuple[npt.NDArray[np.int32], I64, I64]:
    """A unit's rows come grouped by rank (ascending), each rank's in record order: their
    ranks, where each rank's rows start, and how many it has."""
    ranks = t.rank[unit_rows]
    starts = np.flatnonzero(_changes(ranks))
    return ranks, starts, np.diff(starts, append=len(unit_rows))


def _check_unit(
    ctx: _Context, group: Group, seq: int, unit_rows: I64, findings: list[Finding]
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
    gap = _unrecorded_gap(ctx, group, seq, present, not_joined)
    if gap is not None:
        first, after, width = gap
        barrier = width == 2 and any(
            ctx.t.backends[int(b)] == "gloo" for b in ctx.t.backend[unit_rows].tolist()
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
        culprits, note = _deviants(ctx, group, seq, dict(ops_of.items()), _ops_value(t))
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
            _explain_skip(ctx, findings, first_finding, shift, op, seq)
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
        _explain_skip(ctx, findings, first_finding, shift, op, seq)
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
            for rank, rs in _rank_rows(t, rows).items()
        }

    return value_of


def _check_against_alike(
    ctx: _Context,
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
    if not lost or _newest_unit_seq(ctx, group.uid) - seq >= _NEWEST_UNITS:
        return False
    value_of = _signature_value(t, free_outputs=True)
    mine = set(value_of(grid.reshape(-1)).values())
    if len(mine) != 1:
        return False
    value = mine.pop()
    # Only groups of the same pipeline stage: another stage runs another program.
    votes = _sibling_votes(ctx, group, seq, value_of, same_stage=True)
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

    gloo = any(t.backends[int(b)] == "gloo" for b in t.backend[grid.reshape(-1)].tolist())
    why = (
        " (gloo aborts, with no dump, a rank that receives more bytes than it posted)"
        if gloo
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


def _explain_skip(
    ctx: _Context,
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
    ctx: _Context, group: Group, seq: int, unit_rows: I64
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
    for before in range(seq - 1, max(seq - 1 - _HISTORY_UNITS, -1), -1):
        if _uniform_value(ctx, group.uid, before, value_of) != reference:
            continue
        matched = 0
        for step in range(seq - before - 1):
            expected = _uniform_value(ctx, group.uid, before + 1 + step, value_of)
            span = _unit_span(ctx, group.uid, seq + step)
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


def _unrecorded_gap(
    ctx: _Context, group: Group, seq: int, present: tuple[int, ...], not_joined: list[int]
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
    before = _uniform_value(ctx, group.uid, seq - 1, value_of)
    if before is None:
        return None
    for a, b in zip(full[-2::-1], full[:0:-1], strict=True):
        if b - a > 1 and _uniform_value(ctx, group.uid, a, value_of) == before:
            return a, b, b - a - 1
    return None


def _without_cut_blocks(ctx: _Context, unit_rows: I64, starts: I64, lengths: I64) -> I64:
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


def _alike(ctx: _Context, op: str, rows: I64) -> bool:
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
    ctx: _Context,
    group: Group,
    seq: int,
    at: tuple[int, str],
    what: str,
    rows_at: dict[int, int],
    add: _Adder,
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
            culprits, note = _deviants(ctx, group, seq, sizes, _at_position(t, pos, sizes_of))
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
        culprits, note = _deviants(ctx, group, seq, comparable, _at_position(t, pos, dtypes_of))
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
    ctx: _Context,
    group: Group,
    seq: int,
    at: tuple[int, str],
    what: str,
    rows_at: dict[int, int],
    add: _Adder,
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
    in_value = _at_position(t, pos, lambda r: (int(t.in_shape[r]),))
    out_value = _at_position(t, pos, lambda r: (int(t.out_shape[r]),))
    votes = _sibling_votes(ctx, group, seq, in_value)
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
    for earlier in range(seq - 1, max(seq - 1 - _HISTORY_UNITS, -1), -1):
        span = _unit_span(ctx, group.uid, earlier)
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


def _newest_seq(ctx: _Context, rank: int, uid: int) -> int | None:
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


def _issued(ctx: _Context, rank: int, uid: int, seq: int) -> bool:
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


def _newest_unit_seq(ctx: _Context, uid: int) -> int:
    """The highest collective seq id any member of group `uid` holds (-1: none)."""
    if ctx.unit_bounds is None:
        return -1
    uids, seqs, _, _ = ctx.unit_bounds
    mine = seqs[uids == uid]
    return int(mine.max()) if len(mine) else -1


def _group_in_flight(ctx: _Context, uid: int) -> bool:
    """Whether a member of the group has an op it has not retired (gloo: still running at
    its dump), asked once per group."""
    found = ctx.in_flight.get(uid)
    if found is None:
        if ctx.busy is None:
            t = ctx.t
            ctx.busy = frozenset(distinct(t.rank[~t.retired]).tolist()) if t.n else frozenset()
        found = ctx.in_flight[uid] = not ctx.busy.isdisjoint(ctx.groups.groups[uid].ranks)
    return found


def _stateless_group(ctx: _Context, uid: int) -> bool:
    """Whether the group's collectives record no states (gloo): its proof is `went on`."""
    span = None
    if ctx.unit_bounds is not None:
        uids, _, starts, _ = ctx.unit_bounds
        at = np.flatnonzero(uids == uid)
        span = int(starts[at[0]]) if len(at) else None
    if span is None:
        return False
    return bool(stateless(ctx.t, ctx.coll_rows[span : span + 1])[0])


def _last_seq(ctx: _Context, rank: int, uid: int) -> int | None:
    newest = _newest_seq(ctx, rank, uid)
    enqueued = ctx.last_enqueued.get((rank, uid))
    values = [v for v in (newest, enqueued) if v is not None and v >= 0]
    return max(values) if values else None


# ---------------------------------------------------------------------------------------------
# Point to point


def _match_p2p(ctx: _Context, findings: list[Finding]) -> P2PPairs:
    t, groups = ctx.t, ctx.groups
    entry_pair = np.full(t.n, -1, dtype=np.int64)
    if not t.n:
        empty = np.zeros(0, np.int64)
        return P2PPairs(empty, empty, entry_pair)
    rows = np.flatnonzero(np.isin(t.unit, P2P_UNITS))
    uid = groups.entry_group[rows].astype(np.int64)
    offsets = np.zeros(len(groups.groups) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([g.size for g in groups.groups])
    flat = np.array([r for g in groups.groups for r in g.ranks], dtype=np.int64)
    size = offsets[uid + 1] - offsets[uid]

    def to_global(local: I64) -> I64:
        valid = (local >= 0) & (local < size)
        out = np.where(valid, flat[offsets[uid] + np.where(valid, local, 0)], -3)
        return np.where((local == ANY_SOURCE) | (local == UNKNOWN_PEER), local, out)

    kind = t.p2p_kind[rows]
    me = t.rank[rows].astype(np.int64)
    src = to_global(t.peer_src[rows].astype(np.int64))
    dst = to_global(t.peer_dst[rows].astype(np.int64))
    send = kind == P2PKind.SEND
    # The op's own end must be the rank that recorded it; the peer must be a group member.
    src = np.where(send, me, src)
    dst = np.where(send, dst, me)
    unknown = (src == UNKNOWN_PEER) | (dst == UNKNOWN_PEER)  # the recorder keeps no peer
    bad_peer = ~unknown & ((send & (dst < 0)) | (~send & (src == -3)))
    for r in rows[bad_peer].tolist():
        g = groups.groups[int(groups.entry_group[r])]
        findings.append(
            Finding(
                FindingKind.MALFORMED_ENTRY,
                g,
                None,
                int(t.p2p_seq[r]),
                t.ops[int(t.op[r])],
                (int(t.rank[r]),),
                (int(t.rank[r]),),
                f"{t.profiling_names[int(t.pname[r])]} names a peer outside group "
                f"{g.name} of size {g.size}",
            )
        )
    world = max(groups.world_size, 1) + 1
    channel = (uid * world + np.where(src >= 0, src, world - 1)) * world + np.where(
        dst >= 0, dst, world - 1
    )
    wild = ~send & (src == ANY_SOURCE)
    usable = ~bad_peer & ~unknown
    is_wrapped = np.zeros(world, dtype=bool)
    is_wrapped[[r for r, w in ctx.wrapped.items() if w and 0 <= r < world]] = True
    sides = {}
    for name, mask in (("send", send & usable), ("recv", ~send & usable & ~wild)):
        side_rows = rows[mask]  # ascending
        side_chan = channel[mask]
        order = np.argsort(side_chan, kind="stable")  # by channel, then row
        side_rows, side_chan = side_rows[order], side_chan[order]
        starts, run = _segments(side_chan)
        ordinal = np.arange(len(side_rows)) - starts[run] if len(side_rows) else run
        sides[name] = (side_rows, side_chan[starts], ordinal, starts, run)
    # Dense channel ids (over the channels, not the rows) keep the join keys below 2**63
    # whatever the world size.
    channels = distinct(np.concatenate([side[1] for side in sides.values()]))

    # Align: from the start when neither end's buffer wrapped, else by the completed ops
    # (every completed send has a completed recv; ops that fell off one buffer are not in the
    # window).
    keys = {}
    for name, (side_rows, chans, ordinal, starts, run) in sides.items():
        wrapped = is_wrapped[(chans // world) % world] | is_wrapped[chans % world]
        done = ctx.done[side_rows]
        n_done = (
            np.bincount(run, weights=done, minlength=len(starts)).astype(np.int64)
            if len(run)
            else np.zeros(0, np.int64)
        )
        shift = np.where(wrapped, n_done, 0)[run] if len(run) else run
        dense = np.searchsorted(channels, chans)[run] if len(run) else run
        # Ascending: by channel, then (within a channel) by ordinal.
        keys[name] = dense * (1 << 32) + (ordinal - shift + (1 << 31))
    s_rows, r_rows = sides["send"][0], sides["recv"][0]
    s_idx, r_idx = _sorted_intersection(keys["send"], keys["recv"])
    send_row = s_rows[s_idx]
    recv_row = r_rows[r_idx]
    _later_pairs_prove_earlier(ctx, keys["send"], s_rows, keys["recv"], r_rows)
    matched = np.zeros(t.n, dtype=bool)
    matched[send_row] = True
    matched[recv_row] = True

    # Receives from any source take the leftover sends to that rank, oldest first.
    extra_s: list[int] = []
    extra_r: list[int] = []
    wild_rows = rows[wild & usable]
    if len(wild_rows):
        leftover = [r for r in s_rows.tolist() if not matched[r]]
        for r in wild_rows.tolist():
            target, gid = int(t.rank[r]), int(groups.entry_group[r])
            candidates = [
                s
                for s in leftover
                if int(groups.entry_group[s]) == gid and _dst_of(t, groups, s) == target
            ]
            if candidates:
                s = min(candidates, key=lambda x: int(t.t_created[x]))
                leftover.remove(s)
                extra_s.append(s)
                extra_r.append(r)
                matched[s] = matched[r] = True
    send_row = np.concatenate([send_row, np.array(extra_s, np.int64)]).astype(np.int64)
    recv_row = np.concatenate([recv_row, np.array(extra_r, np.int64)]).astype(np.int64)
    entry_pair[send_row] = np.arange(len(send_row))
    entry_pair[recv_row] = np.arange(len(recv_row))

    _p2p_mismatches(ctx, send_row, recv_row, findings)
    left = usable & ~matched[rows]
    _p2p_unmatched(ctx, rows[left], src[left], dst[left], findings)
    return P2PPairs(send_row, recv_row, entry_pair)


def _later_pairs_prove_earlier(
    ctx: _Context, send_keys: I64, send_rows: I64, recv_keys: I64, recv_rows: I64
) -> None:
    """A channel carries its transfers in order: once a later send or recv of a channel
    completed, every earlier one on it completed too, on both sides; a side that is not done
    was dumped before it finished, a moment before its peer's dump."""
    # Per channel, the highest key with a completed op on either side.
    done_keys = np.sort(
        np.concatenate([send_keys[ctx.done[send_rows]], recv_keys[ctx.done[recv_rows]]])
    )
    if not len(done_keys):
        return
    last = np.append(np.flatnonzero(np.diff(done_keys >> 32)), len(done_keys) - 1)
    chans, highest = done_keys[last] >> 32, done_keys[last]
    for keys, rows in ((send_keys, send_rows), (recv_keys, recv_rows)):
        if not len(keys):
            continue
        channel = keys >> 32
        at = np.searchsorted(chans, channel)
        found = at < len(chans)
        found[found] = chans[at[found]] == channel[found]
        behind = found & (keys < np.where(found, highest[np.minimum(at, len(chans) - 1)], 0))
        ctx.done[rows[behind]] = True
    # A batched block is done when its sends and receives are: its end marker too.
    t = ctx.t
    members = np.flatnonzero((t.unit == UnitKind.BATCH_MEMBER) & (t.marker >= 0))
    if len(members):
        all_done = np.ones(t.n, dtype=bool)
        np.logical_and.at(all_done, t.marker[members], ctx.done[members])
        markers = distinct(t.marker[members])
        ctx.done[markers] |= all_done[markers]


def _sorted_intersection(a: I64, b: I64) -> tuple[I64, I64]:
    """Indices of the values two ascending arrays of distinct values share, in `a` and `b`."""
    at = np.searchsorted(b, a)
    hit = at < len(b)
    hit[hit] = b[at[hit]] == a[hit]
    return np.flatnonzero(hit), at[hit]


def _dst_of(t: EntryTable, groups: GroupTable, row: int) -> int:
    g = groups.groups[int(groups.entry_group[row])]
    local = int(t.peer_dst[row])
    return g.ranks[local] if 0 <= local < g.size else -1


def _p2p_mismatches(ctx: _Context, send_row: I64, recv_row: I64, findings: list[Finding]) -> None:
    """A matched send/recv that disagrees on shape or dtype. The side that deviates from what
    the channel carried before (earlier micro-batches), else from what channels of groups like
    this one carry, is the culprit; the detail names both ends."""
    t, groups = ctx.t, ctx.groups
    if not len(send_row):
        return
    recv_shape = np.where(
        t.shape_numel[t.in_shape[recv_row]] > 0, t.in_shape[recv_row], t.out_shape[recv_row]
    )
    bad_size = t.in_shape[send_row] != recv_shape
    recv_dtype = np.where(
        np.array([bool(d) for d in t.dtypes])[t.in_dtype[recv_row]],
        t.in_dtype[recv_row],
        t.out_dtype[recv_row],
    )
    bad_dtype = t.in_dtype[send_row] != recv_dtype
    bad = np.flatnonzero(bad_size | bad_dtype)
    if not len(bad):
        return
    uid = groups.entry_group[send_row].astype(np.int64)
    src, dst = t.rank[send_row].astype(np.int64), t.rank[recv_row].astype(np.int64)
    send_value = np.stack([t.in_shape[send_row], t.in_dtype[send_row]], axis=1).astype(np.int64)
    recv_value = np.stack([recv_shape, recv_dtype], axis=1).astype(np.int64)
    agree = ~(bad_size | bad_dtype)
    for i in bad.tolist():
        s, r = int(send_row[i]), int(recv_row[i])
        g = groups.groups[int(uid[i])]
        a, b = int(src[i]), int(dst[i])
        sent = (int(send_value[i, 0]), int(send_value[i, 1]))
        received = (int(recv_value[i, 0]), int(recv_value[i, 1]))
        reference, basis = _p2p_reference(ctx, i, uid, src, dst, send_row, send_value, agree)
        culprits: tuple[int, ...] = (a, b)
        if reference is not None and reference == sent:
            culprits = (b,)
        elif reference is not None and reference == received:
            culprits = (a,)
        kind = FindingKind.P2P_SIZE_MISMATCH if bad_size[i] else FindingKind.P2P_DTYPE_MISMATCH
        seq_on = {a: int(t.p2p_seq[s]), b: int(t.p2p_seq[r])}
        judged = (
            f"; {basis}: rank {culprits[0]} deviates"
            if len(culprits) == 1
            else "; nothing earlier tells which side deviates: both are named"
        )
        findings.append(
            Finding(
                kind,
                g,
                None,
                seq_on[culprits[0]] if len(culprits) == 1 else seq_on[a],
                "send/recv",
                (a, b),
                culprits,
                f"send {a}->{b} (p2p seq {seq_on[a]} on rank {a}, {seq_on[b]} on rank {b}): "
                f"rank {a} sends {_p2p_text(t, sent)}, rank {b} receives "
                f"{_p2p_text(t, received)}{judged}",
            )
        )


def _p2p_text(t: EntryTable, value: tuple[int, int]) -> str:
    shape, dtype = value
    return f"{[list(d) for d in t.shapes[shape]]} {','.join(t.dtypes[dtype]) or '-'}"


def _p2p_reference(
    ctx: _Context,
    i: int,
    uid: I64,
    src: I64,
    dst: I64,
    send_row: I64,
    value: I64,
    agree: npt.NDArray[np.bool_],
) -> tuple[tuple[int, int] | None, str]:
    """What pair `i`'s channel carried in earlier transfers that agreed; failing that, the most
    common agreed transfer on groups with the same description."""
    same_channel = agree & (uid == uid[i]) & (src == src[i]) & (dst == dst[i])
    earlier = np.flatnonzero(same_channel & (send_row < send_row[i]))
    if len(earlier):
        last = int(earlier[np.argmax(send_row[earlier])])
        n = len(earlier)
        found = (int(value[last, 0]), int(value[last, 1]))
        return found, (
            f"the channel carried {_p2p_text(ctx.t, found)} in its {counted(n, 'earlier transfer')}"
        )
    desc = ctx.groups.groups[int(uid[i])].desc
    alike = np.array([g.desc == desc for g in ctx.groups.groups], dtype=bool)[uid] & agree
    if not alike.any():
        return None, ""
    keys, counts = np.unique(value[alike], axis=0, return_counts=True)
    if len(counts) > 1 and np.sort(counts)[-1] == np.sort(counts)[-2]:
        return None, ""
    top = keys[int(np.argmax(counts))]
    found = (int(top[0]), int(top[1]))
    return found, (
        f"{counted(int(counts.max()), 'other transfer')} on {desc!r} groups carried "
        f"{_p2p_text(ctx.t, found)}"
    )


def _p2p_unmatched(
    ctx: _Context,
    rows: I64,
    src: I64,
    dst: I64,
    findings: list[Finding],
) -> None:
    """Findings for the usable p2p rows that found no partner."""
    t, groups = ctx.t, ctx.groups
    is_send = t.p2p_kind[rows] == P2PKind.SEND
    peer = np.where(is_send, dst, src)
    # A peer with no dump is reported as missing or unreadable, not here.
    keep = ~np.isin(peer, np.array(sorted(ctx.unavailable), dtype=np.int64))
    wrapped = np.array(sorted(r for r, w in ctx.wrapped.items() if w), dtype=np.int64)
    # Completed: its partner ran too, and is absent only because the peer's buffer no longer
    # (wrapped) or not yet (dumped a moment earlier) holds it.
    keep &= ~ctx.done[rows]
    del wrapped
    pending: dict[tuple[int, int, int, int], list[int]] = {}
    for row, a, b, sending in zip(
        rows[keep].tolist(),
        src[keep].tolist(),
        dst[keep].tolist(),
        is_send[keep].tolist(),
        strict=True,
    ):
        uid = int(groups.entry_group[row])
        pending.setdefault((uid, a, b, int(sending)), []).append(row)
    for (uid, a, b, sending), rows_ in sorted(pending.items()):
        g = groups.groups[uid]
        first = rows_[0]
        many = len(rows_) > 1
        sends = f"{len(rows_)} sends" if many else "a send"
        recvs = f"{len(rows_)} recvs" if many else "a recv"
        culprit: tuple[int, ...]
        ranks: tuple[int, ...]
        if sending:
            culprit = (b,)
            detail = (
                f"rank {a} posted {sends} to rank {b} ({'first ' if many else ''}at p2p seq "
                f"{int(t.p2p_seq[first])}) that rank {b} never received"
            )
            ranks = (a,)
        else:
            culprit = (a,) if a >= 0 else tuple(r for r in g.ranks if r != b)
            source = f"rank {a}" if a >= 0 else "any rank"
            detail = (
                f"rank {b} posted {recvs} from {source} ({'first ' if many else ''}at p2p seq "
                f"{int(t.p2p_seq[first])}) that no send matches"
            )
            ranks = (b,)
        findings.append(
            Finding(
                FindingKind.P2P_UNMATCHED,
                g,
                None,
                int(t.p2p_seq[first]),
                "send" if sending else "recv",
                ranks,
                culprit,
                detail,
            )
        )
