"""The entry table's lists without its rows: what a driver that holds no table keeps of the
ranks it read, and how it recodes any of their rows it fetches later.

`TableBuilder` recodes each rank's columns into the job's lists of distinct values as the rank
arrives and writes them into the table. `Lists` takes the same ranks in the same order and
keeps the lists and each rank's maps into them, but no row: `build` gives the table of no
rows (every list, every (rank, group) pair that holds rows), and `rows` the table's rows of
given numbers, made from their ranks' own columns (wherever those are kept: a cluster's
shards) as `TableBuilder` made them, row for row (tests/load/formats/test_lists.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ...model.dump import RankTables
from ...model.table import TABLE_COLUMNS, EntryTable
from .table import RECODED, rank_maps, recode, with_lists
from .values import Interner

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

Columns = Callable[[int, I64], Mapping[str, np.ndarray]]
"""`columns(rank, rows)`: the rank's own columns at its `rows` (numbered in the rank, ascending),
as it was read (codes into its own tables)."""


@dataclass(frozen=True)
class _Rank:
    maps: dict[str, I32]  # each of its tables' codes in the job's lists
    pair: I32  # each of its group codes' (rank, group) pair, in the order pairs were met
    carried: I32  # the pairs its rows carry
    rows: int


class Lists:
    """The lists of the ranks added (`add`, in the order `TableBuilder.add` takes them), and
    their rows on demand once the ranks kept are known (`build`, then `rows`)."""

    def __init__(self) -> None:
        self._interners = {name: Interner() for name in set(RECODED.values())}
        self._ranks: dict[int, _Rank] = {}
        self._pairs = 0
        self._pair_rank: list[int] = []
        self._pair_group: list[int] = []
        self._starts: dict[int, int] = {}  # each kept rank's first row (`build`)
        self._number: I32 | None = None  # each pair's number among those kept (-1: none)

    def add(
        self,
        rank: int,
        groups: Sequence[tuple[str, str]],
        tables: RankTables,
        carried: npt.NDArray[np.integer],
        rows: int,
    ) -> None:
        """A rank's header: its groups and tables, the group codes its rows carry (each
        once), and how many rows it has."""
        maps = rank_maps(self._interners, groups, tables)
        pair = np.arange(self._pairs, self._pairs + len(groups), dtype=np.int32)
        self._pairs += len(groups)
        self._pair_rank += [rank] * len(groups)
        self._pair_group += maps["groups"].tolist()
        self._ranks[rank] = _Rank(maps, pair, pair[carried.astype(np.int64)], rows)

    def build(self, ranks: Sequence[int]) -> EntryTable:
        """The table of no rows of the ranks kept, its pairs numbered as `TableBuilder.build`
        numbers them: those that carry rows of these ranks, in the order they were met."""
        kept = set(ranks) & set(self._ranks)
        held = np.zeros(self._pairs, dtype=bool)
        for rank in kept:
            held[self._ranks[rank].carried] = True
        self._number = np.where(held, np.cumsum(held) - 1, -1).astype(np.int32)
        at = 0
        self._starts = {}
        for rank in sorted(kept):
            self._starts[rank] = at
            at += self._ranks[rank].rows
        empty = {col: np.zeros(0, dtype) for col, dtype in TABLE_COLUMNS}
        pair_rank = np.array(self._pair_rank, dtype=np.int32)[held]
        pair_group = np.array(self._pair_group, dtype=np.int32)[held]
        none = np.zeros(0, np.int32)
        return with_lists(self._interners, pair_rank, pair_group, none, none, empty)

    def starts(self) -> dict[int, int]:
        """Each kept rank's first row in the job (after `build`), by rank."""
        if self._number is None:
            raise ValueError("Lists.starts before Lists.build")
        return dict(self._starts)

    def rows_of(self, rank: int) -> int:
        """How many rows the rank has."""
        return self._ranks[rank].rows

    def pairs(self, rank: int) -> I32:
        """The job's (rank, group) pair of each of the rank's own group codes (-1: a pair no
        row carries), after `build`."""
        if self._number is None:
            raise ValueError("Lists.pairs before Lists.build")
        return self._number[self._ranks[rank].pair]

    def asked(self, rows: I64) -> dict[int, I64]:
        """The job's `rows` (ascending) by rank, numbered in the rank (after `build`)."""
        if self._number is None:
            raise ValueError("Lists.rows before Lists.build")
        ranks = sorted(self._starts)
        starts = np.array([self._starts[r] for r in ranks], dtype=np.int64)
        which = np.searchsorted(starts, rows, side="right") - 1
        cut = np.flatnonzero(np.diff(which)) + 1
        bounds = zip(np.r_[0, cut].tolist(), np.r_[cut, len(rows)].tolist(), strict=True)
        return {ranks[int(which[a])]: rows[a:b] - starts[int(which[a])] for a, b in bounds if b > a}

    def rows(self, lists: EntryTable, rows: I64, columns: Columns) -> EntryTable:
        """The job's `rows` (ascending) as a table of their own, as `TableBuilder` made them
        (block markers renumbered to these rows), from each of their ranks' own columns at
        those rows (`columns`); `lists`: the table `build` gave."""
        number = self._number
        if number is None:
            raise ValueError("Lists.rows before Lists.build")
        pieces: dict[str, list[np.ndarray]] = {col: [] for col, _ in TABLE_COLUMNS}
        rank_col: list[I32] = []
        in_rank: list[I32] = []
        for rank, local in self.asked(rows).items():
            start = self._starts[rank]
            own = columns(rank, local)
            info = self._ranks[rank]
            for col, dtype in TABLE_COLUMNS:
                if col == "pair":
                    values = number[info.pair[own["group"].astype(np.int64)]]
                else:
                    values = recode(col, own[col], info.maps)
                values = np.asarray(values).astype(dtype)  # widened, as the builder does
                if col == "marker":
                    values[values >= 0] += start
                pieces[col].append(values)
            rank_col.append(np.full(len(local), rank, dtype=np.int32))
            in_rank.append(local.astype(np.int32))
        named = {
            col: np.concatenate([np.zeros(0, dtype), *pieces[col]]) for col, dtype in TABLE_COLUMNS
        }
        marker = named["marker"]
        inside = marker >= 0
        marker[inside] = np.searchsorted(rows, marker[inside])
        return with_lists(
            self._interners,
            lists.pair_rank,
            lists.pair_group,
            np.concatenate([np.zeros(0, np.int32), *rank_col]),
            np.concatenate([np.zeros(0, np.int32), *in_rank]),
            named,
        )


def taken(own: Mapping[int, Mapping[str, np.ndarray]]) -> Columns:
    """`Columns` of the ranks' whole columns in memory, by rank (for `Lists.rows`)."""

    def at(rank: int, rows: I64) -> Mapping[str, np.ndarray]:
        return {name: values[rows] for name, values in own[rank].items()}

    return at
