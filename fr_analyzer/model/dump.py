"""What loading one rank gives: its header facts, its entries as typed columns, which reader
read it. Built once by normalization, never changed after."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt

from .records import Stack

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
B = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]


class Reader(Enum):
    """Which reader turned a rank's file into columns."""

    DECODER = "decoder"  # a pickle or JSON, decoded from its bytes straight into columns
    COLUMNS = "columns"  # unpickled (or parsed JSON) entries, read column-wise
    PER_ENTRY = "per_entry"  # the careful path: something unusual, each entry read and checked


class Fallback(Enum):
    """Why a faster reader did not read a rank's file (or its entries): every decision is made
    on this; the words beside it (`RankDump.fallback`) are for people."""

    NOT_THIS_LAYOUT = "not this layout"  # not laid out the way the reader's writer lays it out
    OUTSIDE_GRAMMAR = "outside the grammar"  # that layout, but a value or form the reader lacks
    OUTSIDE_LIMITS = "outside the limits"  # that layout, but past one of the reader's limits
    MALFORMED = "malformed"  # that layout, but bytes that do not parse
    SLOWER_READER_NEEDED = "slower reader needed"  # entries only a slower reader takes
    ENTRIES_NEEDED = "entries needed"  # another recorder's dump, rewritten from its entries


class Writer(Enum):
    """Whose layout a decoder found a file in (torch's or Python's pickler or JSON writer)."""

    TORCH_PICKLE = "torch's pickle"
    PYTHON_PICKLE = "Python's pickle"
    TORCH_JSON = "torch's JSON"
    PYTHON_JSON = "Python's JSON"


@dataclass(frozen=True)
class GroupClaim:
    """What one rank's usable pg_config says about a group."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class RankColumns:
    """One row per usable entry, in record order. Codes index the rank's `RankTables`."""

    index: I32  # position of the entry in the file's entry list
    record_id: I64
    group: I32
    coll_seq: I64
    p2p_seq: I64
    op_id: I64
    op: I32
    backend: I32
    pname: I32
    p2p_kind: I8
    peer_src: I32  # group-local rank for p2p, ANY_SOURCE for `?`, -1 otherwise
    peer_dst: I32
    state: I8
    retired: B
    t_created: I64
    t_started: I64
    t_completed: I64
    duration_ms: F64
    in_shape: I32
    out_shape: I32
    in_dtype: I32
    out_dtype: I32
    stack: I32
    timeout_ms: I64
    unit: I8  # UnitKind: plain op, block or batch member, or end marker
    marker: I32  # row of this entry's block end marker (itself for plain ops), -1 if none

    @property
    def n(self) -> int:
        """How many entries (rows) the columns hold."""
        return len(self.record_id)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every column by name, in `COLUMNS` order."""
        return {name: getattr(self, name) for name in COLUMNS}


_DTYPES = {"I8": np.int8, "I32": np.int32, "I64": np.int64, "F64": np.float64, "B": np.bool_}
COLUMNS: dict[str, np.dtype[Any]] = {
    f.name: np.dtype(_DTYPES[str(f.type)]) for f in dataclasses.fields(RankColumns)
}
"""Every column's name and type: the one list the readers, the loader and the table use."""


@dataclass(frozen=True)
class RankTables:
    """The distinct values a rank's columns code."""

    ops: list[str]
    backends: list[str]
    profiling_names: list[str]
    shapes: list[tuple[tuple[int, ...], ...]]
    dtypes: list[tuple[str, ...]]
    stacks: list[Stack]


@dataclass(frozen=True)
class RankDump:
    """One rank's dump: its header facts, and (until the table takes them) its entries."""

    rank: int
    file: str
    version: str
    comm_lib_version: str
    claims: Mapping[str, GroupClaim]
    pg_config_usable: bool
    # pg_status by group code (mapped through the entries' pg_id): (enqueued, started, completed)
    pg_status: Mapping[int, tuple[int, int, int]]
    wrapped: bool
    entry_errors: tuple[tuple[int, str], ...]
    warnings: tuple[str, ...]
    groups: list[tuple[str, str]]  # (name, desc) by group code
    reader: Reader
    fallback: str  # why a faster reader did not read it ("" when the fastest one did)
    entries: int
    tables: RankTables | None
    columns: RankColumns | None
    dialect: str = "pytorch"  # the recorder that wrote it (`model.recorders.Dialect`)
    # Groups its pg_config listed with members beyond every rank the job shows otherwise,
    # set aside (`loading`): no view of those groups to compare with the other ranks'.
    claims_set_aside: frozenset[str] = frozenset()
    # When its file was last modified (ns since the epoch; None: unknown): the recorder writes
    # the file at the dump, so this is the dump time or later (a copy that kept no times).
    file_time_ns: int | None = None
    # A time written in its file's or folder's name (`load.stamps`): when the copy was made.
    name_time_ns: int | None = None
    # The host it ran on: the dump's own `host_name` (the debug server's JSON writes one),
    # else the host its file's name carries (`nccl_trace_rank_<host>_<rank>`); None: unknown.
    # Printable and at most `HOST_CHARS` characters (`load.hosts`).
    host: str | None = None
    # Why the decoder did not read it (None: it did, or was not asked to), and the writer whose
    # layout it found the file in (None: no writer's): `load.outcomes.NotDecoded`.
    fallback_reason: Fallback | None = None
    fallback_writer: Writer | None = None

    def header(self) -> RankDump:
        """The same dump without its entries' tables and columns."""
        return dataclasses.replace(self, tables=None, columns=None)


READ_COLUMNS = {name: dtype for name, dtype in COLUMNS.items() if name not in ("unit", "marker")}
"""The columns read from the entries' keys (`unit` and `marker` come from `blocks`)."""
