"""Build one EntryTable with global codes from every rank's columns, as the ranks arrive."""

from __future__ import annotations

import math
import mmap
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...errors import OutputError
from ...memory import small_pages
from ...model.dump import RankDump, RankTables
from ...model.table import TABLE_COLUMNS, EntryTable
from ..common import INT64_MAX
from .values import Interner

# ---------------------------------------------------------------------------------------------
# Global table


RECODED = {
    "group": "groups",
    "op": "ops",
    "backend": "backends",
    "pname": "profiling_names",
    "in_shape": "shapes",
    "out_shape": "shapes",
    "in_dtype": "dtypes",
    "out_dtype": "dtypes",
    "stack": "stacks",
}
"""The columns that hold codes, and the table each indexes (`groups` is the rank's
(name, desc) list, the others `RankTables`' lists)."""


def recode(
    col: str, values: npt.NDArray[Any], maps: Mapping[str, npt.NDArray[np.int32]]
) -> npt.NDArray[Any]:
    """A rank's column with its codes (`RECODED`) in the table's: `maps` gives each of the
    rank's tables' codes in the table's (other columns come back as they are)."""
    if col not in RECODED or not len(values):
        return values
    table_map = maps[RECODED[col]]
    if col == "stack":
        safe = table_map[np.maximum(values, 0)] if len(table_map) else -1
        out: npt.NDArray[Any] = np.where(values >= 0, safe, -1)
        return out
    recoded: npt.NDArray[Any] = table_map[values]
    return recoded


def rank_maps(
    codes: Mapping[str, Callable[[Any], int]],
    groups: Sequence[tuple[str, str]],
    tables: RankTables,
) -> dict[str, npt.NDArray[np.int32]]:
    """Each of a rank's tables (`RECODED`'s) as the table's codes: `codes[table](value)`."""
    maps: dict[str, npt.NDArray[np.int32]] = {}
    for table, code in codes.items():
        values = groups if table == "groups" else getattr(tables, table)
        maps[table] = np.fromiter(map(code, values), np.int32, len(values))
    return maps


class TableBuilder:
    """Builds the EntryTable one rank at a time, as ranks arrive from the loader.

    `add` re-codes a rank's per-rank tables into global ones and writes its columns straight
    into the table's columns; the loader keeps only the rank's header after that, so the
    rank's own columns are freed. The columns are allocated for
    the expected size (`ranks_hint` ranks like the average so far): pages never written cost
    no memory, and trimming a large array moves no data, so memory stays at one table however
    many ranks arrive. Small per-rank pieces kept until the end would cost a second table, as
    freed small blocks stay with the process.

    With `on_disk` (a folder), the columns are files there, mapped: the table is out of
    core, its pages written back to disk and read again as the kernel needs, so that a job
    larger than memory is analyzed where only the stages' working arrays must fit. Each file
    is removed as soon as it is mapped: nothing is left behind, however the process ends.
    With `in_memory_up_to` too, the table stays in memory until the rows expected (the ranks
    still to come as large as the average so far) would take more bytes than that, and moves
    to the folder then."""

    def __init__(
        self,
        ranks_hint: int = 1,
        on_disk: Path | None = None,
        in_memory_up_to: int | None = None,
    ) -> None:
        self._folder = on_disk
        self._in_memory_up_to = in_memory_up_to
        self._on_disk: Path | None = on_disk if in_memory_up_to is None else None
        self._interners = {name: Interner() for name in set(RECODED.values())}
        self._columns: dict[str, np.ndarray] = {
            col: np.empty(0, dtype=dtype) for col, dtype in TABLE_COLUMNS
        }
        self._ranks_hint = max(ranks_hint, 1)
        self._spans: list[tuple[int, int, int]] = []  # (rank, first row, rows) as added
        self._n = 0
        self._pair_rank: list[int] = []
        self._pair_group: list[int] = []

    def add(self, dump: RankDump, columns: Mapping[str, np.ndarray] | None = None) -> None:
        """Take a rank's columns: `columns` by name, each in any integer type that holds its
        values (as they travel from a worker), or else the dump's own."""
        assert dump.tables is not None  # a rank with its entries
        if columns is None:
            assert dump.columns is not None
            columns = dump.columns.arrays()
        self.add_rows(dump.rank, dump.groups, dump.tables, columns)

    def add_rows(
        self,
        rank: int,
        groups: Sequence[tuple[str, str]],
        tables: RankTables,
        columns: Mapping[str, np.ndarray],
    ) -> None:
        """Take rows of one rank: `columns` (codes into `groups` and `tables`, block markers
        counted from the first of these rows), as `add` takes a whole rank's."""
        maps = rank_maps(self._interners, groups, tables)
        start, n = self._n, len(columns["record_id"])
        self._reserve(start + n)
        pairs = len(self._pair_rank)
        self._pair_rank += [rank] * len(groups)
        self._pair_group += maps["groups"].tolist()
        for col, _ in TABLE_COLUMNS:
            target = self._columns[col][start : start + n]  # widens what it is given
            if col == "pair":
                target[:] = columns["group"]
                target += pairs
                continue
            target[:] = recode(col, columns[col], maps)
            if col == "marker":
                target[target >= 0] += start
        self._spans.append((rank, start, n))
        self._n = start + n

    def _reserve(self, rows: int) -> None:
        capacity = len(self._columns["index"])
        if rows <= capacity:
            return
        # Room for the ranks still expected, each as big as the average so far: one allocation
        # when ranks are alike, a few when the first ones are small.
        added = len(self._spans) + 1
        expected = rows + rows * max(self._ranks_hint - added, 0) // added
        if (
            self._on_disk is None
            and self._folder is not None
            and self._in_memory_up_to is not None
            and expected * ROW_BYTES > self._in_memory_up_to
        ):
            self._on_disk = self._folder  # from now on: every column moved there
        if self._on_disk is None:
            new = max(int(expected * 1.25) + 1024, capacity + capacity // 4)
        else:  # each row's blocks taken on disk up front: room for the expected rows alone
            new = max(expected + 1024, capacity + capacity // 4)
        for col, column in self._columns.items():
            grown = _untouched(new, column.dtype, self._on_disk)
            grown[: self._n] = column[: self._n]
            self._columns[col] = grown

    @property
    def out_of_core(self) -> Path | None:
        """The folder the table's columns are kept in, if they are (None: in memory)."""
        return self._on_disk

    def build(self, ranks: Sequence[int] | None = None) -> EntryTable:
        """The table of the given ranks (default: every rank added), in rank order."""
        added = self._spans
        wanted = {r for r, _, _ in added} if ranks is None else set(ranks)
        spans = sorted((s for s in added if s[0] in wanted), key=lambda s: s[0])
        columns, n = self._columns, self._n
        self._columns, self._spans, self._n = {}, [], 0
        if spans == added:  # every rank kept, added in rank order: the columns are the table
            for col, column in columns.items():
                if self._on_disk is None:
                    column.resize(n, refcheck=False)
                else:  # a mapped file: its first n rows (the pages past them never written)
                    columns[col] = column[:n]
        else:  # ranks left out, or added out of rank order: gather the rows
            take = np.concatenate(
                [np.arange(s, s + k, dtype=np.int64) for _, s, k in spans]
                or [np.empty(0, np.int64)]
            )
            position = np.full(max(n, 1), -1, dtype=np.int64)
            position[take] = np.arange(len(take))
            for col in list(columns):
                gathered = _untouched(len(take), columns[col].dtype, self._on_disk)
                np.take(columns[col], take, out=gathered)
                columns[col] = gathered
            marker = columns["marker"]
            marker[:] = np.where(marker >= 0, position[np.maximum(marker, 0)], -1)
        # Number only the pairs that kept rows (ranks may have been left out).
        pair_rank = np.array(self._pair_rank, dtype=np.int32)
        pair_group = np.array(self._pair_group, dtype=np.int32)
        used = np.bincount(columns["pair"], minlength=len(pair_rank)) > 0
        if not used.all():
            renumber = (np.cumsum(used) - 1).astype(np.int32)
            columns["pair"][:] = renumber[columns["pair"]]
            pair_rank, pair_group = pair_rank[used], pair_group[used]
        self._pair_rank, self._pair_group = [], []
        rows = sum(k for _, _, k in spans)
        rank = _untouched(rows, np.dtype(np.int32), self._on_disk)
        row_in_rank = _untouched(rows, np.dtype(np.int32), self._on_disk)
        longest = max((k for _, _, k in spans), default=0)
        counting = np.arange(longest, dtype=np.int32)
        at = 0
        for r, _, k in spans:  # in rank order, as the rows now are
            rank[at : at + k] = r
            row_in_rank[at : at + k] = counting[:k]
            at += k
        return with_lists(self._interners, pair_rank, pair_group, rank, row_in_rank, columns)


def with_lists(
    interners: Mapping[str, Interner],
    pair_rank: npt.NDArray[np.int32],
    pair_group: npt.NDArray[np.int32],
    rank: npt.NDArray[np.int32],
    row_in_rank: npt.NDArray[np.int32],
    columns: Mapping[str, np.ndarray],
    numel: npt.NDArray[np.int64] | None = None,
) -> EntryTable:
    """The table of these rows (`columns`, `rank`, `row_in_rank`) with the job's lists of
    distinct values (`interners`, by `RECODED`'s table names) and its (rank, group) pairs;
    `numel`: each shape's elements, where an earlier table of the same lists has them."""
    shapes = interners["shapes"].values
    if numel is None or len(numel) != len(shapes):
        numel = np.array([_numel(s) for s in shapes], dtype=np.int64)
    return EntryTable(
        rank=rank,
        row_in_rank=row_in_rank,
        group_names=interners["groups"].values,
        ops=interners["ops"].values,
        backends=interners["backends"].values,
        profiling_names=interners["profiling_names"].values,
        shapes=shapes,
        shape_numel=numel,
        dtypes=interners["dtypes"].values,
        stacks=interners["stacks"].values,
        pair_rank=pair_rank,
        pair_group=pair_group,
        **columns,
    )


ROW_BYTES = sum(dtype.itemsize for _, dtype in TABLE_COLUMNS) + 8
"""The table's bytes per row: its columns, and the rank and row-in-rank columns `build` adds."""


def _untouched(n: int, dtype: np.dtype[Any], on_disk: Path | None = None) -> np.ndarray:
    """An empty column whose pages cost nothing until written: in memory, written without a
    stall (see `small_pages`), or a file in `on_disk`, mapped (see `TableBuilder`)."""
    if on_disk is None:
        with small_pages():
            return np.empty(n, dtype=dtype)
    size = max(n * dtype.itemsize, 1)  # a mapping is never empty
    try:
        fd, name = tempfile.mkstemp(prefix="fr-analyze-table-", suffix=".col", dir=on_disk)
        try:
            os.unlink(name)  # the mapping keeps the file's blocks until it is unmapped
            # Its blocks taken now: a disk without room is this error, not a signal that
            # kills the process at the first write past the room left.
            os.posix_fallocate(fd, 0, size)
            mapped = mmap.mmap(fd, size)
        finally:
            os.close(fd)
    except OSError as exc:
        raise OutputError(
            f"the entry table kept out of core in {on_disk}: {exc.strerror or exc}",
            hint=f"--table-dir DIR: a folder on a local disk with room for {ROW_BYTES} bytes"
            " per entry",
        ) from None
    return np.frombuffer(mapped, dtype=dtype, count=n)


def _numel(shapes: tuple[tuple[int, ...], ...]) -> int:
    total = 0
    for shape in shapes:
        total += math.prod(shape)
    return min(total, INT64_MAX)
