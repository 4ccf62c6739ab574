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
from .table import RECODED, rank_maps, with_lists
from .values import Interner

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

Columns = Callable[[Mapping[int, I64]], Mapping[str, np.ndarray]]
"""`columns(asked)`: the ranks' own columns (codes into their own tables, as each was read) at
the rows `asked` (rank -> its rows, numbered in the rank, ascending), one array per column,
the ranks one after the other in the order of `asked`."""


@dataclass(frozen=True)
class _Rank:
    maps: dict[str, I32]  # each of its tables' codes in the job's lists
    pair: I32  # each of its group codes' (rank, group) pair, in the order pairs were met
    carried: I32  # the pairs its rows carry
    rows: int


_MAPS = ("groups", *sorted(set(RECODED.values()) - {"groups"}))
"""The tables each rank's codes index (`RECODED`'s), whose maps `Lists.rows` joins."""


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
        self._sorted: tuple[list[int], I64] | None = None  # the kept ranks, and their starts
        self._number: I32 | None = None  # each pair's number among those kept (-1: none)
        # each kept rank's maps, one after the other (`build`), and where each rank's begin
        self._joined: dict[str, I32] = {}
        self._at: dict[str, dict[int, int]] = {}

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
        self._sorted = None
        for rank in sorted(kept):
            self._starts[rank] = at
            at += self._ranks[rank].rows
        self._joined, self._at = {}, {}
        named = {name: [self._ranks[r].maps[name] for r in sorted(kept)] for name in _MAPS}
        named["pair"] = [self._ranks[r].pair for r in sorted(kept)]
        for name, maps in named.items():
            ends = np.cumsum([0, *(len(m) for m in maps)]).tolist()
            self._joined[name] = np.concatenate([np.zeros(0, np.int32), *maps]).astype(np.int32)
            self._at[name] = dict(zip(sorted(kept), ends[:-1], strict=True))
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
        if self._sorted is None:  # made once: a cluster's database asks chunk after chunk
            ordered = sorted(self._starts)
            self._sorted = (ordered, np.array([self._starts[r] for r in ordered], dtype=np.int64))
        ranks, starts = self._sorted
        which = np.searchsorted(starts, rows, side="right") - 1
        cut = np.flatnonzero(np.diff(which)) + 1
        bounds = zip(np.r_[0, cut].tolist(), np.r_[cut, len(rows)].tolist(), strict=True)
        return {ranks[int(which[a])]: rows[a:b] - starts[int(which[a])] for a, b in bounds if b > a}

    def rows(self, lists: EntryTable, rows: I64, columns: Columns) -> EntryTable:
        """The job's `rows` (ascending) as a table of their own, as `TableBuilder` made them
        (block markers renumbered to these rows), from their ranks' own columns at those rows
        (`columns`), recoded for every rank at once; `lists`: the table `build` gave."""
        number = self._number
        if number is None:
            raise ValueError("Lists.rows before Lists.build")
        asked = self.asked(rows)
        ranks = list(asked)
        counts = np.array([len(v) for v in asked.values()], dtype=np.int64)
        own = columns(asked) if asked else {c: np.zeros(0, dtype) for c, dtype in TABLE_COLUMNS}

        def each(values: list[int]) -> I64:  # a value per rank, as a value per row
            return np.repeat(np.asarray(values, dtype=np.int64), counts)

        named: dict[str, np.ndarray] = {}
        for col, dtype in TABLE_COLUMNS:
            values = np.asarray(own["group" if col == "pair" else col])
            if col == "pair":
                at = each([self._at["pair"][r] for r in ranks])
                values = number[self._joined["pair"][at + values.astype(np.int64)]]
            elif col in RECODED:
                table = RECODED[col]
                joined = self._joined[table]
                at = each([self._at[table][r] for r in ranks]) + values.astype(np.int64)
                if col == "stack":  # -1: no stack
                    inside = values >= 0
                    out = np.full(len(values), -1, dtype=np.int32)
                    out[inside] = joined[at[inside]]
                    values = out
                else:
                    values = joined[at]
            values = np.asarray(values).astype(dtype)  # widened, as the builder does
            if col == "marker":
                inside = values >= 0
                values[inside] += each([self._starts[r] for r in ranks])[inside].astype(dtype)
            named[col] = values
        marker = named["marker"]
        inside = marker >= 0
        marker[inside] = np.searchsorted(rows, marker[inside])
        return with_lists(
            self._interners,
            lists.pair_rank,
            lists.pair_group,
            np.repeat(np.asarray(ranks, dtype=np.int32), counts),
            np.concatenate([np.zeros(0, np.int32), *(v.astype(np.int32) for v in asked.values())]),
            named,
            lists.shape_numel,
        )


def taken(own: Mapping[int, Mapping[str, np.ndarray]]) -> Columns:
    """`Columns` of the ranks' whole columns in memory, by rank (for `Lists.rows`)."""

    def at(asked: Mapping[int, I64]) -> dict[str, np.ndarray]:
        if not asked:
            return {name: values[:0] for name, values in next(iter(own.values()), {}).items()}
        names = own[next(iter(asked))].keys()
        return {
            name: np.concatenate([own[r][name][rows] for r, rows in asked.items()])
            for name in names
        }

    return at
