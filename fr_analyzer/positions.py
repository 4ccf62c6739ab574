"""Where every rank stands, for people: per group, the last op each rank completed and its
first op that did not complete (ranks in the same position share one row), and the stacks of the
ops ranks are blocked in (ranks with the same innermost frames share one entry).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .dumps import EntryTable, rank_starts
from .groups import GroupTable
from .model import STATE_NAMES, Group, Stack, State, UnitKind


@dataclass(frozen=True)
class OpRef:
    """One op of one rank, as shown to a person."""

    rank: int
    row: int
    group: Group
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op: str
    state: str
    retired: bool
    sizes: str
    age_s: float | None  # how long before the rank's newest timestamp it was enqueued

    def describe(self) -> str:
        seq = f"#{self.collective_seq_id}" if self.p2p_seq_id is None else f"p#{self.p2p_seq_id}"
        flags = self.state + (", retired" if self.retired else "")
        return f"{self.op} {seq} ({flags})"


@dataclass(frozen=True)
class Position:
    """Where ranks stand in one group: those whose last completed op and first op not
    completed read the same share one position (the ops shown are the lowest rank's)."""

    group: Group
    ranks: tuple[int, ...]
    last_completed: OpRef | None
    first_incomplete: OpRef | None
    oldest_age_s: float | None  # the longest any of them has waited in its first op not done


@dataclass(frozen=True)
class StackGroup:
    """Ranks whose blocking (or, when idle, newest) op has the same innermost frames."""

    stack: Stack | None  # None: the dump has no frames for that op
    ranks: tuple[int, ...]
    odd: bool  # the odd one out: a minority stack


class Refs:
    """Makes OpRefs for rows; sizes and op names are formatted once per distinct code."""

    def __init__(self, table: EntryTable, groups: GroupTable, newest_ns: dict[int, int]) -> None:
        self.t = table
        self.groups = groups
        self.newest_ns = newest_ns
        self._sizes: dict[int, str] = {}
        self._ops: dict[int, str] = {}

    def refs(self, rows: Sequence[int]) -> list[OpRef]:
        """OpRefs of many rows, their columns read in one step each."""
        t = self.t
        at = np.asarray(rows, dtype=np.int64)
        unit = t.unit[at]
        p2p = (unit == UnitKind.P2P) | (unit == UnitKind.BATCH_MEMBER)
        p2p |= unit == UnitKind.BATCH_MARKER
        out = []
        for row, rank, p2p_, created, shape, pname, uid, coll, p2p_seq, state, retired in zip(
            at.tolist(),
            t.rank[at].tolist(),
            p2p.tolist(),
            t.t_created[at].tolist(),
            t.in_shape[at].tolist(),
            t.pname[at].tolist(),
            self.groups.entry_group[at].tolist(),
            t.coll_seq[at].tolist(),
            t.p2p_seq[at].tolist(),
            t.state[at].tolist(),
            t.retired[at].tolist(),
            strict=True,
        ):
            newest = self.newest_ns.get(rank, -1)
            age = (newest - created) / 1e9 if created >= 0 and newest >= created else None
            sizes = self._sizes.get(shape)
            if sizes is None:  # a few distinct shapes and names, asked about once per rank
                sizes = self._sizes[shape] = str([list(s) for s in t.shapes[shape]]).replace(
                    " ", ""
                )
            op = self._ops.get(pname)
            if op is None:
                name = t.profiling_names[pname]
                op = self._ops[pname] = name.partition(":")[2] or name
            out.append(
                OpRef(
                    rank=rank,
                    row=row,
                    group=self.groups.groups[uid],
                    collective_seq_id=None if p2p_ else coll,
                    p2p_seq_id=p2p_seq if p2p_ else None,
                    op=op,
                    state=STATE_NAMES[State(state)],
                    retired=retired,
                    sizes=sizes,
                    age_s=age,
                )
            )
        return out


def newest_per_rank(t: EntryTable) -> dict[int, int]:
    """Each rank's newest timestamp (enqueue, start or completion)."""
    if not t.n:
        return {}
    stamp = np.maximum(np.maximum(t.t_created, t.t_started), t.t_completed)
    starts = rank_starts(t.rank)
    newest = np.maximum.reduceat(stamp, starts)
    return dict(zip(t.rank[starts].tolist(), newest.tolist(), strict=True))


def last_per_rank(t: EntryTable) -> dict[int, int]:
    """Each rank's last row."""
    if not t.n:
        return {}
    starts = rank_starts(t.rank)
    last = np.append(starts[1:], t.n) - 1
    return dict(zip(t.rank[starts].tolist(), last.tolist(), strict=True))


def positions(refs: Refs, incomplete: npt.NDArray[np.bool_]) -> tuple[Position, ...]:
    """One position per group and pair of ops as shown. Each (rank, group) gets its last
    completed row and first row not completed; (rank, group) pairs whose two rows read alike
    (same op, sequence id, state, flags and sizes) are collapsed on their codes first, so
    OpRefs are made only for the few distinct positions, not for every rank."""
    t, groups = refs.t, refs.groups
    if not t.n:
        return ()
    n_uids = len(groups.groups) + 1
    # One position per (rank, group uid); a rank's pairs of one uid (same name, two
    # descriptions) share it.
    pair_key = t.pair_rank.astype(np.int64) * n_uids + groups.pair_uid
    keys, key_of_pair = np.unique(pair_key, return_inverse=True)
    key = key_of_pair[t.pair]
    done_rows = np.flatnonzero(
        ~incomplete & (t.unit != UnitKind.BLOCK_MEMBER) & (t.unit != UnitKind.BATCH_MEMBER)
    )
    last_done = np.full(len(keys), -1, dtype=np.int64)
    last_done[key[done_rows]] = done_rows  # ascending rows: the last assignment is the last row
    inc_rows = np.flatnonzero(incomplete)[::-1]
    first_inc = np.full(len(keys), -1, dtype=np.int64)
    first_inc[key[inc_rows]] = inc_rows  # descending rows: the last assignment is the first
    rank, uid = np.divmod(keys, n_uids)

    p2p = np.isin(t.unit, (UnitKind.P2P, UnitKind.BATCH_MEMBER, UnitKind.BATCH_MARKER))

    def shown(rows: npt.NDArray[np.int64], sizes: bool) -> list[npt.NDArray[np.int64]]:
        """What `OpRef.describe` (and the sizes) read from each row, as codes; -1 if none."""
        has = rows >= 0
        at = np.where(has, rows, 0)
        seq = np.where(p2p[at], t.p2p_seq[at], t.coll_seq[at])
        fields = [t.pname[at], p2p[at], seq, t.state[at], t.retired[at]]
        if sizes:
            fields.append(t.in_shape[at])
        return [np.where(has, f.astype(np.int64), -1) for f in [has, *fields]]

    columns = [uid, *shown(last_done, False), *shown(first_inc, True)]
    _, position_of = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    position_of = position_of.reshape(-1)
    # Age in the first op not completed, as `OpRef.age_s` has it.
    newest_ns = refs.newest_ns
    newest = np.array([newest_ns.get(r, -1) for r in rank.tolist()], dtype=np.int64)
    created = np.where(first_inc >= 0, t.t_created[np.maximum(first_inc, 0)], -1)
    aged = (first_inc >= 0) & (created >= 0) & (newest >= created)
    age = np.where(aged, (newest - created) / 1e9, -np.inf)
    oldest = np.full(position_of.max() + 1, -np.inf)
    np.maximum.at(oldest, position_of, age)
    # The lowest rank of each position shows its ops; keys are in rank order.
    example = np.full(len(oldest), -1, dtype=np.int64)
    example[position_of[::-1]] = np.arange(len(keys) - 1, -1, -1)
    members: dict[int, list[int]] = defaultdict(list)
    for p, r in zip(position_of.tolist(), rank.tolist(), strict=True):
        members[p].append(r)

    # Codes that differ can still read the same (two profiling names of one op): merge those.
    merged: dict[tuple[object, ...], tuple[Position, list[int], float]] = {}
    lc_rows, fi_rows = last_done[example], first_inc[example]
    lc_refs = iter(refs.refs(lc_rows[lc_rows >= 0].tolist()))
    fi_refs = iter(refs.refs(fi_rows[fi_rows >= 0].tolist()))
    for p, (k, lc, fi) in enumerate(
        zip(example.tolist(), lc_rows.tolist(), fi_rows.tolist(), strict=True)
    ):
        shown_pos = Position(
            groups.groups[int(uid[k])],
            (),
            next(lc_refs) if lc >= 0 else None,
            next(fi_refs) if fi >= 0 else None,
            None,
        )
        text = (
            shown_pos.group.uid,
            _shown(shown_pos.last_completed, False),
            _shown(shown_pos.first_incomplete, True),
        )
        found = merged.get(text)
        if found is None:
            merged[text] = (shown_pos, members[p], float(oldest[p]))
        else:
            first, ranks, age_max = found
            if min(members[p]) < min(ranks):
                first = shown_pos
            merged[text] = (first, ranks + members[p], max(age_max, float(oldest[p])))
    out = [
        Position(
            pos.group,
            tuple(sorted(ranks)),
            pos.last_completed,
            pos.first_incomplete,
            None if age == -np.inf else age,
        )
        for pos, ranks, age in merged.values()
    ]
    return tuple(sorted(out, key=lambda p: (p.group.uid, p.ranks[0])))


def _shown(ref: OpRef | None, sizes: bool) -> tuple[object, ...] | None:
    """What a person reads of an op in a position."""
    if ref is None:
        return None
    return (ref.describe(), ref.sizes if sizes else None)


def stacks(t: EntryTable, shown: dict[int, OpRef], depth: int) -> tuple[StackGroup, ...]:
    """Ranks grouped by the innermost `depth` frames of the op `shown` for each rank (the op it
    is blocked in, else its newest); a minority stack is marked as the odd one out."""
    by_stack: dict[Stack | None, list[int]] = defaultdict(list)
    for rank, ref in shown.items():
        code = int(t.stack[ref.row])
        stack = t.stacks[code][:depth] if code >= 0 else None
        by_stack[stack].append(rank)
    if not by_stack:
        return ()
    ordered = sorted(by_stack.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    biggest = len(ordered[0][1])
    return tuple(
        StackGroup(stack, tuple(sorted(ranks)), len(ordered) > 1 and len(ranks) < biggest)
        for stack, ranks in ordered
    )
