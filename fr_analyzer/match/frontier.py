"""Where each rank stands in each of its groups, as rows: its first op not completed, what
follows it, and a window of ops before it (`window_rows`), with every row those are matched
with (`Closure`: the other ranks' rows of their collectives, the other half of their
send/recv, their blocks' markers and members). What the diagnosis reads of a job starts
there (`diagnosis.frontier`). Every (rank, group) pair lies in one group, and every unit,
pair and block in the groups of one part (`match.cutting` joins the groups a block spans),
so a part of the job finds and closes its own groups' frontier (`partitions.match_part`)
and the parts' rows together are the job's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..model.groups import GroupTable
from ..model.records import Finding, UnitKind
from ..model.table import TABLE_COLUMNS, EntryTable, rank_starts
from .records import P2P_UNITS, MatchResult, of_kinds

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

WINDOW = 16
"""Ops of each (rank, group) kept before its first op not completed (or before its end): what
the diagnosis reads of the history near the frontier. On every sample set and drawn case 2
already gives the diagnosis of the whole table (tests/diagnosis/test_frontier.py)."""
CHUNK_ROWS = 1 << 22
"""Rows (whole ranks) taken at once: the working arrays are a few of this size, not of the
table's."""


def incomplete_rows(t: EntryTable, m: MatchResult) -> B:
    """Rows that did not complete: not done, or in a collective some member never issued."""
    out = ~m.done.copy()
    if m.collectives.not_joined:
        unjoined = np.zeros(len(m.collectives.seq) + 1, dtype=bool)  # the last: no unit (-1)
        unjoined[list(m.collectives.not_joined)] = True
        out |= unjoined[m.collectives.entry_unit]
    if t.n:
        out &= t.unit != UnitKind.ORPHAN_MARKER
    return out


def window_rows(t: EntryTable, m: MatchResult, window: int = WINDOW) -> I64:
    """Per (rank, group) pair: its rows from `window` before its first incomplete one (or
    before its end) on, ascending."""
    if not t.n:
        return np.zeros(0, np.int64)
    incomplete = incomplete_rows(t, m)
    # chunks of whole ranks: those whose rows start in one stretch of CHUNK_ROWS rows
    starts = rank_starts(t.rank)
    stretch = starts // CHUNK_ROWS
    cuts = starts[np.flatnonzero(stretch[1:] != stretch[:-1]) + 1].tolist()
    out: list[I64] = []
    for begin, end in zip([0, *cuts], [*cuts, t.n], strict=True):
        keep = _pair_windows(t.pair[begin:end], incomplete[begin:end], window)
        out.append(np.flatnonzero(keep).astype(np.int64) + begin)
    return np.concatenate(out)


def joined(parts: Sequence[tuple[I64, I64 | None]]) -> I64 | None:
    """The job's frontier rows from its parts' ((the part's rows, its frontier in them)):
    None unless every part found its own."""
    if any(found is None for _, found in parts):
        return None
    return np.sort(np.concatenate([np.zeros(0, np.int64), *(rows[f] for rows, f in parts)]))


def _pair_windows(pair: npt.NDArray[np.int32], incomplete: B, window: int) -> B:
    """`window_rows` over some whole ranks' rows (`pair`: each row's pair code)."""
    n = len(pair)
    low = int(pair.min())
    local = (pair - low).astype(np.int64)
    n_pairs = int(local.max()) + 1
    order = np.argsort(local, kind="stable")  # each pair's rows one run, in row order
    sorted_pair = local[order]
    count = np.bincount(local, minlength=n_pairs)
    begin = np.concatenate([[0], np.cumsum(count)[:-1]])
    position = np.empty(n, dtype=np.int64)  # each row's place among its pair's rows
    position[order] = np.arange(n) - begin[sorted_pair]
    first = count.copy()  # a pair with no incomplete row: its end
    late = np.flatnonzero(incomplete)[::-1]
    first[local[late]] = position[late]  # descending rows: the last write is the first
    keep: B = position >= first[local] - window
    return keep


class Closure:
    """The rows of one table matched with given rows (`closed`). Each step reads only the
    rows the last one added; the lookups it builds (each unit's end, the block members by
    marker) are made once."""

    def __init__(self, t: EntryTable, m: MatchResult) -> None:
        self.t, self.m = t, m
        units = m.collectives
        self._unit_ends = np.append(units.starts[1:], len(units.rows)).astype(np.int64)
        self._members: tuple[I64, I64] | None = None  # block members by marker (`_block_members`)

    def closed(self, rows: I64, more: I64 | None = None) -> I64:
        """`rows` (and `more`) and every row they are matched with, transitively, ascending."""
        t, m = self.t, self.m
        held = np.zeros(t.n, dtype=bool)
        held[rows] = True
        fresh = np.zeros(t.n, dtype=bool)  # the rows one step adds, for their order
        new = rows if more is None else self._added(held, fresh, more)
        in_units = np.zeros(len(m.collectives.starts), dtype=bool)
        while len(new):
            unit = m.collectives.entry_unit[new]
            in_units[unit[unit >= 0]] = True
            units = np.flatnonzero(in_units)
            in_units[units] = False
            pair = m.p2p.entry_pair[new]
            pair = pair[pair >= 0]
            marker = t.marker[new]
            found = np.concatenate(
                [
                    self.unit_rows(units.astype(np.int64)),
                    m.p2p.send_row[pair],
                    m.p2p.recv_row[pair],
                    marker[marker >= 0].astype(np.int64),
                    self._block_members(new),
                ]
            )
            new = self._added(held, fresh, found)
        return np.flatnonzero(held).astype(np.int64)

    @staticmethod
    def _added(held: B, fresh: B, found: I64) -> I64:
        """The rows of `found` not yet `held` (distinct, ascending), now held."""
        found = found[~held[found]]
        fresh[found] = True
        new = np.flatnonzero(fresh).astype(np.int64) if len(found) else found
        fresh[new] = False
        held[new] = True
        return new

    def unit_rows(self, units: I64) -> I64:
        """Every row of these collective units."""
        starts = self.m.collectives.starts[units]
        lengths = self._unit_ends[units] - starts
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        at = offsets + np.arange(int(lengths.sum()), dtype=np.int64)
        return self.m.collectives.rows[at].astype(np.int64)

    def _block_members(self, rows: I64) -> I64:
        """The members of the blocks whose end markers are among `rows`."""
        kind = self.t.unit[rows]
        rows = rows[(kind == UnitKind.BLOCK_MARKER) | (kind == UnitKind.BATCH_MARKER)]
        if self._members is None:  # plain ops are their own markers: members only
            unit = self.t.unit
            member = np.flatnonzero(
                (unit == UnitKind.BLOCK_MEMBER) | (unit == UnitKind.BATCH_MEMBER)
            ).astype(np.int64)
            of = self.t.marker[member].astype(np.int64)
            order = np.argsort(of, kind="stable")
            self._members = (of[order], member[order])
        of, member = self._members
        low = np.searchsorted(of, rows, side="left")
        high = np.searchsorted(of, rows, side="right")
        lengths = high - low
        if not int(lengths.sum()):
            return np.zeros(0, np.int64)
        offsets = np.repeat(low - np.cumsum(lengths) + lengths, lengths)
        return member[offsets + np.arange(int(lengths.sum()), dtype=np.int64)]


@dataclass(frozen=True)
class Wanted:
    """Rows a diagnosis asks for beyond each rank's frontier: the rows of some collectives
    ((group uid, collective seq id): a disagreement may lie far behind every frontier) and
    whole programs (ranks)."""

    units: frozenset[tuple[int, int]] = frozenset()
    ranks: frozenset[int] = frozenset()
    # the send/recv rows of some groups at a p2p sequence id ((group uid, p2p seq id))
    p2p: frozenset[tuple[int, int]] = frozenset()

    def rows(
        self,
        t: EntryTable,
        m: MatchResult,
        closure: Closure,
        entry_group: npt.NDArray[np.int32] | None = None,
    ) -> I64:
        """The rows of `t` these are: the wanted collectives' that `m` holds, every row of
        the wanted ranks, and (with each row's group, `entry_group`) the wanted send/recv
        rows."""
        found = [m.collectives.find(uid, seq) for uid, seq in sorted(self.units)]
        units = np.array([u for u in found if u is not None], dtype=np.int64)
        ranks = np.array(sorted(self.ranks), dtype=t.rank.dtype)
        mine = np.flatnonzero(np.isin(t.rank, ranks)) if len(ranks) else np.zeros(0, np.int64)
        sent = [np.zeros(0, np.int64)]
        if self.p2p and entry_group is not None:
            for uid, seq in sorted(self.p2p):
                hit = (t.p2p_seq == seq) & (entry_group == uid)
                sent.append(np.flatnonzero(hit & of_kinds(t.unit, P2P_UNITS)).astype(np.int64))
        return np.concatenate([closure.unit_rows(units), mine.astype(np.int64), *sent])


def about(findings: Iterable[Finding]) -> frozenset[tuple[int, int]]:
    """The collectives findings are about ((group uid, collective seq id))."""
    return frozenset(
        (f.group.uid, f.collective_seq_id)
        for f in findings
        if f.group is not None and f.collective_seq_id is not None
    )


def closed_window(t: EntryTable, m: MatchResult, window: int = WINDOW) -> I64:
    """Each (rank, group)'s frontier (`window_rows`), closed (`Closure`)."""
    return Closure(t, m).closed(window_rows(t, m, window))


def held_matches(m: MatchResult, rows: I64) -> MatchResult:
    """`m` over the table's `rows` only (ascending, closed), renumbered to them: each row's
    unit, pair and completion; every unit (its rows those held, in table order: by rank,
    then as recorded) and the pairs of the rows held (each held whole, in order)."""
    units = m.collectives
    unit = units.entry_unit[rows].astype(np.int64)
    in_unit = np.flatnonzero(unit >= 0)
    by_unit = in_unit[np.argsort(unit[in_unit], kind="stable")]
    per_unit = np.bincount(unit[in_unit], minlength=len(units.starts))
    starts = np.concatenate([[0], np.cumsum(per_unit)[:-1]]).astype(np.int64)
    collectives = replace(
        units,
        entry_unit=units.entry_unit[rows],
        rows=by_unit.astype(np.int64),
        starts=starts[: len(units.starts)],
    )
    pairs = m.p2p
    entry_pair = pairs.entry_pair[rows].astype(np.int64)
    kept = np.unique(entry_pair[entry_pair >= 0])
    entry_pair[entry_pair >= 0] = np.searchsorted(kept, entry_pair[entry_pair >= 0])
    p2p = replace(
        pairs,
        send_row=np.searchsorted(rows, pairs.send_row[kept]).astype(np.int64),
        recv_row=np.searchsorted(rows, pairs.recv_row[kept]).astype(np.int64),
        entry_pair=entry_pair.astype(pairs.entry_pair.dtype),
    )
    return replace(
        m, collectives=collectives, p2p=p2p, done=m.done[rows], pairs_in_job=m.pairs_matched
    )


@dataclass(frozen=True)
class Held:
    """Part of a job's rows as a table of their own, with their groups and matches renumbered
    to it, so every rule runs on it unchanged: `rows` are its rows in the job (ascending;
    None: every row, the table itself)."""

    rows: I64 | None
    table: EntryTable
    groups: GroupTable
    matches: MatchResult
    whole_ranks: frozenset[int]  # ranks whose every row is held


def rows_of(t: EntryTable, rows: I64) -> EntryTable:
    """The table's `rows` (ascending) as a table of their own, block markers renumbered."""
    columns: dict[str, Any] = {name: getattr(t, name)[rows] for name, _ in TABLE_COLUMNS}
    for name in ("rank", "row_in_rank"):
        columns[name] = getattr(t, name)[rows]
    marker = columns["marker"]
    inside = marker >= 0
    marker[inside] = np.searchsorted(rows, marker[inside])
    return replace(t, **columns)
