"""The one schema of a dump entry: every key torch writes, how it is read, which column it fills.

Three readers turn entries into columns: the decoders of dumps laid out as their writers lay
them out (`decode`, `decode_python`, `decode_json`), the column-wise path over unpickled or
JSON entries (`columnar`) and the careful per-entry path (`careful`). All three take the keys,
their kinds and their columns from `ENTRY_KEYS`; the columns and their types are the fields
of `RankColumns` (`records`), listed in `COLUMNS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    """How a key's value is written, and so how each reader reads and validates it."""

    INT = "int"  # an integer (int64); record ids may be any int64, sequence ids -1..2**62
    OPTIONAL_INT = "optional int"  # an integer or None (unset): the started/completed times
    FLAG = "flag"  # True/False (anything else counts as False)
    TEXT = "text"  # one string (made printable); profiling names are parsed into op and peers
    TEXTS = "texts"  # a list of strings: dtypes
    SHAPES = "shapes"  # a list of shapes, each a list of at most 64 non-negative dimensions
    PAIR = "pair"  # (group name, group desc)
    FLOAT = "float"  # a float or None: durations (NaN when unset, negative or absurd)
    FRAMES = "frames"  # a list of {name, filename, line} dicts: the stack
    SCALAR = "scalar"  # read but not kept (thread name and id)


@dataclass(frozen=True)
class Key:
    """One key of a dump entry."""

    name: str
    kind: Kind
    column: str | None  # the column it fills (None: not kept, or parsed into several)
    required: bool  # every entry of a modern (2.x) dump has it; older dumps may lack it
    varying: bool  # differs from entry to entry (ids, times) rather than repeating


ENTRY_KEYS: tuple[Key, ...] = (
    Key("record_id", Kind.INT, "record_id", True, True),
    Key("pg_id", Kind.INT, None, True, False),  # maps pg_status keys to groups
    Key("collective_seq_id", Kind.INT, "coll_seq", True, True),
    Key("p2p_seq_id", Kind.INT, "p2p_seq", True, True),
    Key("op_id", Kind.INT, "op_id", True, True),
    Key("profiling_name", Kind.TEXT, None, True, False),  # pname, op, backend, peers
    Key("time_created_ns", Kind.INT, "t_created", True, True),
    Key("duration_ms", Kind.FLOAT, "duration_ms", False, False),
    Key("input_sizes", Kind.SHAPES, "in_shape", True, False),
    Key("input_dtypes", Kind.TEXTS, "in_dtype", True, False),
    Key("output_sizes", Kind.SHAPES, "out_shape", True, False),
    Key("output_dtypes", Kind.TEXTS, "out_dtype", True, False),
    Key("state", Kind.TEXT, "state", True, False),
    Key("time_discovered_started_ns", Kind.OPTIONAL_INT, "t_started", True, True),
    Key("time_discovered_completed_ns", Kind.OPTIONAL_INT, "t_completed", True, True),
    Key("retired", Kind.FLAG, "retired", True, False),
    Key("timeout_ms", Kind.INT, "timeout_ms", True, False),
    Key("is_p2p", Kind.FLAG, None, True, False),  # checked against the op's name
    Key("process_group", Kind.PAIR, "group", True, False),
    Key("frames", Kind.FRAMES, "stack", False, False),  # absent when dumped without stacks
    Key("thread_name", Kind.SCALAR, None, False, False),
    Key("thread_id", Kind.SCALAR, None, False, False),
)
KEYS: dict[str, Key] = {key.name: key for key in ENTRY_KEYS}
REQUIRED_KEYS = frozenset(key.name for key in ENTRY_KEYS if key.required)
VARYING_KEYS = frozenset(key.name for key in ENTRY_KEYS if key.varying)
KEPT_KEYS = tuple(key.name for key in ENTRY_KEYS if key.kind is not Kind.SCALAR)
"""The keys the column-wise readers fetch (everything but thread name and id)."""


def keys_of(*kinds: Kind) -> frozenset[str]:
    """The names of the keys of these kinds."""
    return frozenset(key.name for key in ENTRY_KEYS if key.kind in kinds)
