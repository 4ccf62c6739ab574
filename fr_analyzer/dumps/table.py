"""Merge every rank's columns into one EntryTable with global codes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..model import Stack
from .common import _INT64_MAX, I32, I64
from .normalize import _COLUMNS, RankDump, _Interner

# ---------------------------------------------------------------------------------------------
# Global table


@dataclass
class EntryTable:
    """Every usable entry of every loaded rank, as columns with global codes."""

    rank: I32
    row_in_rank: I32
    group_names: list[tuple[str, str]]
    ops: list[str]
    backends: list[str]
    profiling_names: list[str]
    shapes: list[tuple[tuple[int, ...], ...]]
    shape_numel: I64
    dtypes: list[tuple[str, ...]]
    stacks: list[Stack]
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def n(self) -> int:
        return len(self.rank)


_RECODED = {
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


_TABLE_COLUMNS: tuple[tuple[str, type], ...] = (
    *_COLUMNS.items(),
    ("unit", np.int8),
    ("marker", np.int32),
)


class TableBuilder:
    """Builds the EntryTable one rank at a time, as ranks arrive from the loader.

    `add` re-codes a rank's per-rank tables into global ones and keeps its columns as pieces,
    taking them off the RankDump (which keeps only its metadata); `build` concatenates the
    pieces in rank order, column by column, freeing each column's pieces as it goes, so memory
    peaks at one table plus one column."""

    def __init__(self) -> None:
        self._interners = {name: _Interner() for name in set(_RECODED.values())}
        self._pieces: dict[int, dict[str, np.ndarray]] = {}

    def add(self, dump: RankDump) -> None:
        maps: dict[str, npt.NDArray[np.int32]] = {}
        for table, intern in self._interners.items():
            values = getattr(dump, table)
            maps[table] = np.fromiter(map(intern, values), np.int32, len(values))
        pieces: dict[str, np.ndarray] = {}
        for col, dtype in _TABLE_COLUMNS:
            values = getattr(dump, col)
            if col in _RECODED and len(values):
                table_map = maps[_RECODED[col]]
                if col == "stack":
                    safe = table_map[np.maximum(values, 0)] if len(table_map) else -1
                    values = np.where(values >= 0, safe, -1)
                else:
                    values = table_map[values]
            pieces[col] = np.asarray(values, dtype=dtype)
            setattr(dump, col, _EMPTY)
        self._pieces[dump.rank] = pieces

    def build(self, ranks: Sequence[int] | None = None) -> EntryTable:
        """The table of the given ranks (default: every rank added), in rank order."""
        order = sorted(self._pieces if ranks is None else ranks)
        sizes = np.array([len(self._pieces[r]["index"]) for r in order], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(order) else sizes
        columns: dict[str, np.ndarray] = {}
        for col, dtype in _TABLE_COLUMNS:
            pieces = []
            for r, offset in zip(order, offsets.tolist(), strict=True):
                values = self._pieces[r].pop(col)
                if col == "marker":
                    values = np.where(values >= 0, values + offset, -1).astype(dtype)
                pieces.append(values)
            columns[col] = np.concatenate(pieces) if pieces else np.empty(0, dtype=dtype)
            del pieces
        self._pieces.clear()
        rank = np.repeat(np.array(order, dtype=np.int32), sizes)
        starts = np.repeat(offsets, sizes)
        row_in_rank = (np.arange(int(sizes.sum()), dtype=np.int64) - starts).astype(np.int32)
        interners = self._interners
        shapes = interners["shapes"].values
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
            columns=columns,
        )


def merge(ranks: Sequence[RankDump]) -> EntryTable:
    """Concatenate ranks into one table (in rank order), re-coding per-rank tables globally.
    Each rank's columns move into the table: the RankDumps keep only their metadata."""
    builder = TableBuilder()
    for dump in ranks:
        builder.add(dump)
    return builder.build()


_EMPTY = np.empty(0, dtype=np.int8)


def _numel(shapes: tuple[tuple[int, ...], ...]) -> int:
    total = 0
    for shape in shapes:
        total += math.prod(shape)
    return min(total, _INT64_MAX)
