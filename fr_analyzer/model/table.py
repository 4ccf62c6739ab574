"""The entry table: every usable entry of every loaded rank in one set of columns, the one
structure the matcher, the diagnosis and the renderers read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .dump import COLUMNS, I32, I64, RankColumns
from .records import Stack


@dataclass(frozen=True)
class EntryTable(RankColumns):
    """Every usable entry of every loaded rank: the columns of `RankColumns` with global codes
    (into the tables below), in rank order, and a few more."""

    rank: I32
    row_in_rank: I32
    pair: I32  # the row's (rank, group) pair: an index into pair_rank and pair_group
    group_names: list[tuple[str, str]]
    ops: list[str]
    backends: list[str]
    profiling_names: list[str]
    shapes: list[tuple[tuple[int, ...], ...]]
    shape_numel: I64
    dtypes: list[tuple[str, ...]]
    stacks: list[Stack]
    # (rank, group) pairs: every distinct group code each rank's rows carry. `pair` (a column)
    # numbers them densely, so per-(rank, group) questions are bincounts, not sorts.
    pair_rank: I32
    pair_group: I32

    def arrays(self) -> dict[str, np.ndarray]:
        """Every column of the table by name (those of `RankColumns`, then `pair`)."""
        return {name: getattr(self, name) for name, _ in TABLE_COLUMNS}


def rank_starts(rank: npt.NDArray[np.int32]) -> npt.NDArray[np.intp]:
    """Where each rank's rows begin, for rows in rank order (as the table's are)."""
    change = np.ones(len(rank), dtype=bool)
    change[1:] = rank[1:] != rank[:-1]
    return np.flatnonzero(change)


TABLE_COLUMNS: tuple[tuple[str, np.dtype[Any]], ...] = (
    *COLUMNS.items(),
    ("pair", np.dtype(np.int32)),
)
