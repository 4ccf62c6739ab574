"""Each row's outcome of matching (its collective unit or send/recv pair, whether it
completed, its group), taken of parts matched elsewhere a chunk of the job's rows at a time
and numbered as the whole result numbers them (`merging`): what the database's
`collectives` and `nccl_calls` tables read (`render.tables`) where no process holds the
whole result (a cluster that keeps the rows, `cluster.calls`).

- Each part gives its units and pairs (`PartUnits`: a few numbers each) and, for each chunk
  of the job's rows, the outcome of its rows there (`Outcome`), in the part's own numbers
  (`outcomes`).
- The job's units and pairs are numbered from the parts' (`numbered`): the order `merging`
  puts them in, one source of it (`merging.unit_ids`, `merging.pair_orders`).
- A chunk's outcome is its parts' outcomes put together, renumbered (`chunk_outcome`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..model.table import EntryTable
from .merging import first_unit_group, in_merge_order, pair_orders, unit_ids
from .partitions import Part, PartMatch

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class PartUnits:
    """One part's units (in its order: by group, then sequence id) and its pairs (in its
    order: the last `wild` took a recv from any source), as the `collectives` table shows
    them: a pair by its send's group and p2p sequence id, its rows in the job's table."""

    index: int
    group: I32
    seq: I64
    op: list[str]
    ranks_present: I32
    ranks_expected: I32
    passed: Bools
    send_row: I64
    recv_row: I64
    pair_group: I32
    pair_seq: I64
    wild: int


@dataclass(frozen=True)
class Outcome:
    """One part's rows within one chunk of the job's rows (ascending, the job's numbers):
    each row's unit and pair in the part's numbers (-1: none), whether it completed, and
    its group's uid."""

    rows: I64
    unit: I64
    pair: I64
    done: Bools
    group: I32


def outcomes(part: Part, done: PartMatch, bounds: I64) -> tuple[PartUnits, list[Outcome]]:
    """A part's units and pairs, and its rows' outcome in each chunk of the job's rows
    (`bounds`: the chunks' first rows, then the job's end): `part` is the part matched,
    `done` its final result."""
    rows = np.arange(part.table.n, dtype=np.int64) if part.rows is None else part.rows
    r, group = done.result, part.groups.entry_group
    units, pairs = r.collectives, r.p2p
    made = PartUnits(
        done.index,
        units.group.astype(np.int32),
        units.seq.astype(np.int64),
        list(units.op),
        units.ranks_present.astype(np.int32),
        units.ranks_expected.astype(np.int32),
        units.passed.astype(bool),
        rows[pairs.send_row],
        rows[pairs.recv_row],
        group[pairs.send_row].astype(np.int32),
        part.table.p2p_seq[pairs.send_row].astype(np.int64),
        done.wild_pairs,
    )
    cut = np.searchsorted(rows, bounds).tolist()
    got = []
    for low, high in itertools.pairwise(cut):
        got.append(
            Outcome(
                rows[low:high],
                units.entry_unit[low:high].astype(np.int64),
                pairs.entry_pair[low:high].astype(np.int64),
                r.done[low:high].astype(bool),
                group[low:high].astype(np.int32),
            )
        )
    return made, got


@dataclass(frozen=True)
class JobUnits:
    """The job's units, then its pairs, as the whole result numbers them (the
    `collectives` table's rows), and each part's numbers in it: `unit_of[part][u]` is the
    job's id of the part's unit `u`, `pair_of[part][p]` the job's pair id of its pair `p`
    (a pair's row in the table is the units' count past it)."""

    group: I32
    seq: I64
    op: list[str]
    ranks_present: I32
    ranks_expected: I32
    passed: Bools
    pair_group: I32
    pair_seq: I64
    unit_of: dict[int, I64]
    pair_of: dict[int, I64]

    @property
    def units(self) -> int:
        """The job's collective units."""
        return len(self.group)

    @property
    def pairs(self) -> int:
        """The job's matched send/recv pairs."""
        return len(self.pair_group)


def numbered(parts: Sequence[PartUnits]) -> JobUnits:
    """The job's units and pairs from its parts', in the whole result's order (`merging`)."""
    got = in_merge_order(parts, lambda p: first_unit_group(p.group))
    group = np.concatenate([np.zeros(0, np.int32), *(p.group for p in got)])
    order, new_id = unit_ids(group)
    ops = [op for p in got for op in p.op]
    unit_of: dict[int, I64] = {}
    at = 0
    for p in got:
        unit_of[p.index] = new_id[at : at + len(p.group)]
        at += len(p.group)

    def joined(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate([np.zeros(0, dtype), *arrays]).astype(dtype)

    cuts = [len(p.send_row) - p.wild for p in got]
    in_group = joined([p.pair_group[:c] for p, c in zip(got, cuts, strict=True)], np.int32)
    in_seq = joined([p.pair_seq[:c] for p, c in zip(got, cuts, strict=True)], np.int64)
    wild_recv = joined([p.recv_row[c:] for p, c in zip(got, cuts, strict=True)], np.int64)
    wild_group = joined([p.pair_group[c:] for p, c in zip(got, cuts, strict=True)], np.int32)
    wild_seq = joined([p.pair_seq[c:] for p, c in zip(got, cuts, strict=True)], np.int64)
    by, wild_by = pair_orders(in_group, wild_recv)
    in_id = np.empty(len(by), np.int64)
    in_id[by] = np.arange(len(by))
    wild_id = np.empty(len(wild_by), np.int64)
    wild_id[wild_by] = len(by) + np.arange(len(wild_by))
    pair_of: dict[int, I64] = {}
    at = wild_at = 0
    for p, c in zip(got, cuts, strict=True):
        pair_of[p.index] = np.concatenate([in_id[at : at + c], wild_id[wild_at : wild_at + p.wild]])
        at, wild_at = at + c, wild_at + p.wild
    return JobUnits(
        group[order],
        joined([p.seq for p in got], np.int64)[order],
        [ops[i] for i in order.tolist()],
        joined([p.ranks_present for p in got], np.int32)[order],
        joined([p.ranks_expected for p in got], np.int32)[order],
        joined([p.passed for p in got], np.bool_)[order],
        np.concatenate([in_group[by], wild_group[wild_by]]),
        np.concatenate([in_seq[by], wild_seq[wild_by]]),
        unit_of,
        pair_of,
    )


@dataclass(frozen=True)
class ChunkOutcome:
    """The outcome of each row of one chunk of the job's rows: its group's uid, its
    collective's id in the `collectives` table (-1: none) and whether it completed."""

    group: I32
    collective: I64
    done: Bools


def chunk_outcome(
    start: int, stop: int, got: Sequence[tuple[int, Outcome]], job: JobUnits
) -> ChunkOutcome:
    """Rows `start:stop`'s outcome from each part's (`got`: the part's index and its
    outcome there), renumbered as the job's (`job`). Every row lies in one part: a row
    none gives is a bug, never bad input."""
    n = stop - start
    group = np.full(n, -1, dtype=np.int32)
    collective = np.full(n, -1, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    covered = np.zeros(n, dtype=bool)
    for index, o in got:
        at = o.rows - start
        unit = _renumbered(o.unit, job.unit_of.get(index))
        pair = _renumbered(o.pair, job.pair_of.get(index))
        collective[at] = np.where(unit >= 0, unit, np.where(pair >= 0, job.units + pair, -1))
        done[at], group[at], covered[at] = o.done, o.group, True
    if not covered.all():
        raise ValueError(f"rows {start}:{stop}: {int((~covered).sum())} rows in no part")
    return ChunkOutcome(group, collective, done)


def _renumbered(local: I64, ids: I64 | None) -> I64:
    """The part's numbers `local` (-1: none) as the job's, by `ids`."""
    if ids is None or not len(ids):
        return np.full(len(local), -1, dtype=np.int64)
    found: I64 = np.where(local >= 0, ids[np.maximum(local, 0)], -1)
    return found


class Outcomes:
    """The job's outcomes, a chunk of rows at a time: its units and pairs (`units`), and the
    outcome of chunk `c` (rows `bounds[c]:bounds[c + 1]`), of each part's there (`take(c)`:
    each part's index and its outcome in the chunk), each chunk asked for once."""

    def __init__(
        self,
        bounds: I64,
        units: JobUnits,
        take: Callable[[int], Sequence[tuple[int, Outcome]]],
    ) -> None:
        self.bounds, self.units, self._take = bounds, units, take

    @property
    def chunks(self) -> int:
        """How many chunks the job's rows are cut into."""
        return len(self.bounds) - 1

    def chunk(self, c: int) -> ChunkOutcome:
        """The outcome of chunk `c`'s rows."""
        start, stop = int(self.bounds[c]), int(self.bounds[c + 1])
        return chunk_outcome(start, stop, self._take(c), self.units)


def chunk_bounds(rows: int, size: int) -> I64:
    """The first row of each chunk of at most `size` of the job's `rows`, then its end: one
    chunk at least, empty where the job has no row."""
    found: I64 = np.append(np.arange(0, rows, size, dtype=np.int64), rows).astype(np.int64)
    return found if len(found) > 1 else np.zeros(2, np.int64)


@dataclass(frozen=True)
class CallChunk:
    """One chunk of the job's rows (from `start`): their columns, coded by the job's lists
    (`table`), and their outcome of matching."""

    start: int
    table: EntryTable
    outcome: ChunkOutcome
