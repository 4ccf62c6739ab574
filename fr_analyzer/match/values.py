"""What ranks are compared on at one unit (op names, sizes, dtypes, whole signatures), named
by a `ValueKind` so that a value can be asked of a group another process holds
(`match.elsewhere`), and read from a unit's rows by `reader`."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..model.ops import (
    ALL_TO_ALL_OPS,
    GATHER_OPS,
    SCATTER_OPS,
    UNEVEN_INPUT_OPS,
    UNEVEN_OUTPUT_OPS,
)
from ..model.table import EntryTable

I64 = npt.NDArray[np.int64]
_V = TypeVar("_V")

Value = tuple[Any, ...]
"""What ranks are compared on at one unit: op names, or (op, sizes), or (op, dtypes)."""
ValueOf = Callable[[I64], dict[int, Value]]
"""Reads one value per rank from a unit's rows."""


class Read(enum.Enum):
    """What a value holds."""

    OPS = "ops"  # each rank's op names at the unit (a block's, in order)
    SIGNATURE = "signature"  # each rank's ops with sizes and dtypes (codes)
    FREE_SIGNATURE = "free signature"  # the same, an all_to_all's output total left out
    SIZES = "sizes"  # (op, (input, output)) at a block position, the sizes the op compares
    DTYPES = "dtypes"  # (op, (input dtypes, output dtypes)) at a block position
    INPUTS = "inputs"  # (op, (input,)) at a block position
    TRANSFERS = "transfers"  # a group's send/recv pairs that agree: ((shape, dtype), count)s


@dataclass(frozen=True)
class ValueKind:
    """A value by name: what it reads, at which block position, for which op (the sizes and
    dtypes an op compares depend on it)."""

    read: Read
    pos: int = 0
    op: str = ""


OPS = ValueKind(Read.OPS)
SIGNATURE = ValueKind(Read.SIGNATURE)
FREE_SIGNATURE = ValueKind(Read.FREE_SIGNATURE)
TRANSFERS = ValueKind(Read.TRANSFERS)


def reader(t: EntryTable, kind: ValueKind) -> ValueOf:
    """The reader of the values `kind` names, over the rows of `t`."""
    if kind.read is Read.OPS:
        return ops_value(t)
    if kind.read is Read.SIGNATURE:
        return signature_value(t)
    if kind.read is Read.FREE_SIGNATURE:
        return signature_value(t, free_outputs=True)
    if kind.read is Read.SIZES:
        return at_position(t, kind.pos, sizes_of(t, kind.op))
    if kind.read is Read.DTYPES:
        return at_position(t, kind.pos, dtypes_of(t, kind.op))
    if kind.read is Read.INPUTS:
        return at_position(t, kind.pos, lambda r: (int(t.in_shape[r]),))
    raise ValueError(f"{kind} is not read from a unit's rows")


def sizes_of(t: EntryTable, op: str) -> Callable[[int], Value]:
    """A row's (input, output) size codes as `op` compares them across ranks: non-root scatter
    inputs and gather outputs are not used, and `*_v` sizes are per rank (-1: not compared)."""
    check_in = op not in SCATTER_OPS and op not in UNEVEN_INPUT_OPS
    check_out = op not in GATHER_OPS and op not in UNEVEN_OUTPUT_OPS

    def read(row: int) -> Value:
        return (
            int(t.in_shape[row]) if check_in else -1,
            int(t.out_shape[row]) if check_out else -1,
        )

    return read


def dtypes_of(t: EntryTable, op: str) -> Callable[[int], Value]:
    """A row's (input dtypes, output dtypes) as `op` compares them (empty: not used)."""

    def read(row: int) -> Value:
        in_d = () if op in SCATTER_OPS else t.dtypes[int(t.in_dtype[row])]
        out_d = () if op in GATHER_OPS else t.dtypes[int(t.out_dtype[row])]
        return (tuple(d for d in in_d if d), tuple(d for d in out_d if d))

    return read


def rank_rows(t: EntryTable, rows: I64) -> dict[int, list[int]]:
    """A unit's rows per rank (rows come by rank, then record order)."""
    return _per_rank(t, rows, rows.tolist())


def _per_rank(t: EntryTable, rows: I64, values: Sequence[_V]) -> dict[int, list[_V]]:
    """`values` (one per row of `rows`) gathered per rank, ranks in the order they come."""
    out: dict[int, list[_V]] = {}
    for rank, value in zip(t.rank[rows].tolist(), values, strict=True):
        out.setdefault(rank, []).append(value)
    return out


def ops_value(t: EntryTable) -> ValueOf:
    """Each rank's op names at a unit."""

    def value_of(rows: I64) -> dict[int, Value]:
        names = [t.ops[c] for c in t.op[rows].tolist()]
        return {rank: tuple(ops) for rank, ops in _per_rank(t, rows, names).items()}

    return value_of


def at_position(t: EntryTable, pos: int, read: Callable[[int], Value]) -> ValueOf:
    """Each rank's value of its row at block position `pos`, with the op's name."""

    def value_of(rows: I64) -> dict[int, Value]:
        return {
            rank: (t.ops[int(t.op[rs[pos]])], read(rs[pos]))
            for rank, rs in rank_rows(t, rows).items()
            if pos < len(rs)
        }

    return value_of


def signature_value(t: EntryTable, free_outputs: bool = False) -> ValueOf:
    """Every rank's ops with their sizes and dtypes (codes into the table's lists); with
    `free_outputs`, an all_to_all's output (its rank's own total) left out as -1."""
    free = np.array([free_outputs and op in ALL_TO_ALL_OPS for op in t.ops], dtype=bool)

    def value_of(rows: I64) -> dict[int, Value]:
        # Columns gathered once for all the unit's rows (a unit of a world group has a row per
        # rank: thousands), then cut per rank.
        op = t.op[rows]
        out_shape = np.where(free[op], -1, t.out_shape[rows])
        signatures = list(
            zip(
                op.tolist(),
                t.in_shape[rows].tolist(),
                out_shape.tolist(),
                t.in_dtype[rows].tolist(),
                t.out_dtype[rows].tolist(),
                strict=True,
            )
        )
        return {rank: tuple(sig) for rank, sig in _per_rank(t, rows, signatures).items()}

    return value_of
