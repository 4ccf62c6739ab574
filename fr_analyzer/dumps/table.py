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


def merge(ranks: Sequence[RankDump]) -> EntryTable:
    """Concatenate ranks (sorted by rank) into one table, re-coding per-rank tables globally.

    Column by column, each rank's copy is released as soon as it is in the table (the ranks
    keep only their metadata), so memory peaks at one table plus one column, not two tables.
    """
    interners = {name: _Interner() for name in set(_RECODED.values())}
    maps: list[dict[str, npt.NDArray[np.int32]]] = []
    for dump in ranks:
        per_rank = {}
        for table, intern in interners.items():
            values = getattr(dump, table)
            per_rank[table] = np.fromiter((intern(v) for v in values), np.int32, len(values))
        maps.append(per_rank)
    sizes = np.array([d.n for d in ranks], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(ranks) else sizes
    columns: dict[str, np.ndarray] = {}
    for col, dtype in (*_COLUMNS.items(), ("unit", np.int8), ("marker", np.int64)):
        pieces: list[np.ndarray] = []
        for dump, per_rank, offset in zip(ranks, maps, offsets.tolist(), strict=True):
            values = getattr(dump, col)
            if col in _RECODED and len(values):
                table_map = per_rank[_RECODED[col]]
                if col == "stack":
                    safe = table_map[np.maximum(values, 0)] if len(table_map) else -1
                    values = np.where(values >= 0, safe, -1)
                else:
                    values = table_map[values]
            elif col == "marker":
                values = np.where(values >= 0, values + offset, -1)
            pieces.append(np.asarray(values, dtype=dtype))
            setattr(dump, col, _EMPTY)
        columns[col] = np.concatenate(pieces) if pieces else np.empty(0, dtype=dtype)
        del pieces
    rank = np.repeat(np.array([d.rank for d in ranks], dtype=np.int32), sizes)
    starts = np.repeat(offsets, sizes)
    row_in_rank = (np.arange(int(sizes.sum()), dtype=np.int64) - starts).astype(np.int32)
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


_EMPTY = np.empty(0, dtype=np.int8)


def _numel(shapes: tuple[tuple[int, ...], ...]) -> int:
    total = 0
    for shape in shapes:
        total += math.prod(shape)
    return min(total, _INT64_MAX)
