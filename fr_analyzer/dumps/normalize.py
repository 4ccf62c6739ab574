"""Normalize one loaded dump into numpy columns with small per-rank tables.

Well-formed ranks take a column-wise fast path; anything unusual goes through the careful
per-entry path that names every problem. Coalesced and batched blocks are recognised here.
"""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, count, repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import DumpError
from ..model import ANY_SOURCE, Frame, P2PKind, Stack, State, UnitKind
from ..ranks import MAX_RANK
from .common import (
    _INT64_MAX,
    _STATES,
    DENSE_FLOOR,
    EXPANSION_FACTOR,
    EXPANSION_FLOOR,
    F64,
    I8,
    I32,
    I64,
    KNOWN_BACKENDS,
    KNOWN_OPS,
    MARKER_OPS,
    MAX_DIMS,
    MAX_DURATION_MS,
    MAX_NUMEL,
    MAX_SEQ_ID,
    MIN_ENTRY_BYTES,
    NO_TIME,
    P2P_OPS,
    B,
    _scalar_text,
    _short,
    printable,
)
from .decode import Decoded, EntryColumns, Undecodable

# ---------------------------------------------------------------------------------------------
# Per-rank columns


@dataclass(frozen=True)
class GroupClaim:
    """What one rank's usable pg_config says about a group."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass
class RankDump:
    """One rank's dump as columns. Codes index the per-rank tables (re-coded by `TableBuilder`)."""

    rank: int
    file: str
    version: str
    comm_lib_version: str
    claims: dict[str, GroupClaim]
    pg_config_usable: bool
    # pg_status by group code (mapped through the entries' pg_id): (enqueued, started, completed)
    pg_status: dict[int, tuple[int, int, int]]
    wrapped: bool
    entry_errors: list[tuple[int, str]]
    warnings: list[str]
    # tables
    groups: list[tuple[str, str]]
    ops: list[str]
    backends: list[str]
    profiling_names: list[str]
    shapes: list[tuple[tuple[int, ...], ...]]
    dtypes: list[tuple[str, ...]]
    stacks: list[Stack]
    # columns, one row per usable entry, in record order
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
    unit: I8
    marker: I32  # row of this entry's block end marker (itself for plain ops), -1 if none
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

    @property
    def n(self) -> int:
        return len(self.record_id)


class _EntryError(Exception):
    pass


class _Bomb(Exception):
    """The dump expands far beyond its size: it repeats references to big lists."""


_INT_RE = re.compile(r"\s*[+-]?[0-9]{1,19}\s*", re.ASCII)


def _as_int(value: Any, what: str) -> int:
    """An int, a whole float, or a short decimal string ("12": JSON dumps and old tests write
    sequence ids so), within int64."""
    if type(value) is int:
        result = value
    elif isinstance(value, bool):
        raise _EntryError(f"{what} is a boolean")
    elif (isinstance(value, float) and math.isfinite(value) and value.is_integer()) or (
        isinstance(value, str) and _INT_RE.fullmatch(value)
    ):
        result = int(value)
    else:
        raise _EntryError(f"{what} is not an integer: {_short(value)}")
    if not -_INT64_MAX <= result <= _INT64_MAX:
        raise _EntryError(f"{what} out of range: {_short(result)}")
    return result


def _seq(value: Any, what: str) -> int:
    result = value if type(value) is int else _as_int(value, what)
    if result < -1:
        raise _EntryError("negative sequence id")
    if result > MAX_SEQ_ID:
        raise _EntryError(f"{what} out of range: {_short(result)}")
    return result


def _time(value: Any) -> int:
    if value is None or value == 0 or isinstance(value, bool):
        return NO_TIME
    try:
        result = _as_int(value, "timestamp")
    except _EntryError:
        return NO_TIME
    return result if result > 0 else NO_TIME


def _maybe_int(value: Any) -> int:
    if type(value) is int and -_INT64_MAX <= value <= _INT64_MAX:
        return value
    try:
        return _as_int(value, "value")
    except _EntryError:
        return -1


def _duration(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return math.nan
    try:
        result = float(value)
    except (ValueError, OverflowError):
        return math.nan
    return result if 0 <= result <= MAX_DURATION_MS else math.nan  # NaN fails both


_PARSED_RANKS: dict[str, tuple[int, ...] | None] = {}
"""Member lists already parsed by this process, by their text: every rank of a job lists the
world group (16,384 members at 16,384 ranks), and a worker process reads many ranks. The same
text gives the same tuple object, which later stages recognize by identity."""
_PARSED_RANKS_MOST = 4096


def _parse_ranks(value: Any) -> tuple[int, ...] | None:
    """pg_config ranks: a string like "[0, 1]" (or a list); None when empty or unparsable."""
    if type(value) is str:
        if value in _PARSED_RANKS:
            return _PARSED_RANKS[value]
        if len(_PARSED_RANKS) >= _PARSED_RANKS_MOST:
            _PARSED_RANKS.clear()
        parsed = _PARSED_RANKS[value] = _parse_ranks_uncached(value)
        return parsed
    return _parse_ranks_uncached(value)


def _parse_ranks_uncached(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("[") and text.endswith("]")):
            return None
        items = [part.strip() for part in text[1:-1].split(",") if part.strip()]
        if not all(item.isascii() and item.isdigit() and len(item) <= 7 for item in items):
            return None
        ranks = [int(item) for item in items]
    elif isinstance(value, list | tuple):
        if not all(type(v) is int for v in value):
            return None
        ranks = list(value)
    else:
        return None
    if not ranks or len(set(ranks)) != len(ranks) or not 0 <= min(ranks) <= max(ranks) <= MAX_RANK:
        return None
    return tuple(sorted(ranks))


class _Interner:
    """Maps hashable values to dense codes, keeping the values in a list."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Any) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code


def _parse_name(pname: str) -> tuple[str, str, int, int, int]:
    """`"nccl:send 0->1"` → (backend, op, p2p kind, local src, local dst)."""
    backend, sep, rest = pname.partition(":")
    if not sep:
        raise _EntryError(f"profiling_name {_short(pname, 60)} has no '<backend>:' prefix")
    op, _, peer = rest.strip().partition(" ")
    if not op:
        raise _EntryError(f"profiling_name {_short(pname, 60)} names no op")
    backend, op = printable(backend), printable(op)
    if op == "send" and "->" in peer:
        src, _, dst = peer.partition("->")
        return backend, op, P2PKind.SEND, _peer(src), _peer(dst)
    if op == "recv" and "<-" in peer:
        dst, _, src = peer.partition("<-")
        return backend, op, P2PKind.RECV, _peer(src), _peer(dst)
    if op in P2P_OPS:
        raise _EntryError(f"profiling_name {_short(pname, 60)} has no peer")
    return backend, op, P2PKind.NONE, -1, -1


def _peer(text: str) -> int:
    text = text.strip()
    if text == "?":
        return ANY_SOURCE
    if not (text.isascii() and text.isdigit()) or len(text) > 7 or int(text) > MAX_RANK:
        raise _EntryError(f"bad peer rank {_short(text, 20)}")
    return int(text)


_Cached = tuple[int, int] | _EntryError  # (code, items it stands for) or why it is unusable
_SMALL = 8  # shape lists this short are read where they are met; longer ones once per object


class _Reader:
    """Normalization state of one rank. Lists are read once per object, however often a pickle
    refers to them (memo references), and the items they stand for are counted: a file whose
    entries would expand far beyond its size is a bomb, not a dump. Caches are keyed by id(),
    which is safe because the loaded dump keeps every object alive while it is read."""

    def __init__(self, nbytes: int | None) -> None:
        self.limit = None if nbytes is None else EXPANSION_FACTOR * nbytes + EXPANSION_FLOOR
        self.nbytes = nbytes
        self.items = 0
        self.texts: dict[Any, str] = {}
        self.groups, self.ops, self.backends = _Interner(), _Interner(), _Interner()
        self.pnames, self.shapes, self.dtypes, self.stacks = (
            _Interner(),
            _Interner(),
            _Interner(),
            _Interner(),
        )
        self.frames: dict[tuple[str, str, int], Frame] = {}  # by the values as found
        self.clean_frames: dict[tuple[str, str, int], Frame] = {}
        self.names: dict[str, tuple[str, str, int, int, int] | _EntryError] = {}
        self.shape_lists: dict[int, _Cached] = {}
        self.dtype_lists: dict[int, _Cached] = {}
        self.stack_lists: dict[int, _Cached] = {}

    def bomb(self) -> _Bomb:
        return _Bomb(
            f"refused: its entries expand to over {self.limit} items (shape dimensions, dtypes,"
            f" frames) from {self.nbytes} bytes: a pickle that repeats references to big lists"
            " (a memo bomb)"
        )

    def text(self, value: Any) -> str | None:
        """Printable text for a str or scalar; None for containers."""
        if type(value) is str:
            if len(value) <= 64 and value.isprintable():
                return value
        elif type(value) is not bytes:
            return None if isinstance(value, bytearray) else _scalar_text(value)
        cached = self.texts.get(value)  # long or odd text is cleaned once, however often used
        if cached is None:
            text = value if type(value) is str else value.decode("utf-8", "replace")
            cached = self.texts[value] = printable(text)
        return cached

    def name(self, pname: str) -> tuple[str, str, int, int, int] | _EntryError:
        try:
            parsed: tuple[str, str, int, int, int] | _EntryError = _parse_name(pname)
        except _EntryError as exc:
            parsed = exc
        self.names[pname] = parsed
        return parsed

    # The *_of methods read one list the first time it is met and remember (code, items) by
    # the list's id; the caller looks the id up first.

    def shapes_of(self, value: Any, what: str) -> _Cached:
        try:
            if value is None:
                found: _Cached = (self.shapes(()), 0)
            elif not isinstance(value, list | tuple):
                raise _EntryError(f"{what} is not a list")
            else:
                shapes = tuple(_dims(shape, what) for shape in value)
                found = (self.shapes(shapes), 1 + len(shapes) + sum(map(len, shapes)))
        except _EntryError as exc:
            found = exc
        self.shape_lists[id(value)] = found
        return found

    def dtypes_of(self, value: Any) -> _Cached:
        try:
            if value is None:
                found: _Cached = (self.dtypes(()), 0)
            elif isinstance(value, str | bytes):
                found = (self.dtypes((self.text(value) or "",)), 1)
            elif not isinstance(value, list | tuple):
                raise _EntryError(f"dtypes are not a list: {_short(value)}")
            else:
                text = self.text
                names = tuple(
                    v
                    if type(v) is str and len(v) <= 64 and v.isprintable()
                    else (text(v) if isinstance(v, str | bytes) else None)
                    for v in value
                )
                if None in names:
                    raise _EntryError(f"dtypes hold a {type(value[names.index(None)]).__name__}")
                found = (self.dtypes(names), 1 + len(names))
        except _EntryError as exc:
            found = exc
        self.dtype_lists[id(value)] = found
        return found

    def stack_of(self, value: Any) -> _Cached:
        if not isinstance(value, list | tuple) or not value:
            found: _Cached = (-1, 0)
        else:
            frames, out = self.frames, []
            for raw in value:
                if type(raw) is not dict:
                    continue
                name, filename = raw.get("name", "?"), raw.get("filename", "?")
                line = raw.get("line", 0)
                if type(name) is str and type(filename) is str and type(line) is int:
                    key = (name, filename, line)  # as found; cleaned once, below
                    frame = frames.get(key)
                    if frame is None:
                        plain = (
                            len(name) <= 256
                            and len(filename) <= 256
                            and name.isprintable()
                            and filename.isprintable()
                            and -_INT64_MAX <= line <= _INT64_MAX
                        )
                        frame = Frame(*key) if plain else self._frame(name, filename, line)
                        frames[key] = frame
                else:
                    frame = self._frame(name, filename, line)
                out.append(frame)
            found = (self.stacks(tuple(out)), 1 + len(value))
        self.stack_lists[id(value)] = found
        return found

    def shape_code(self, value: Any, what: str) -> tuple[int, int]:
        """(shape-table code, items it stands for) of one input/output sizes value."""
        if type(value) is list and len(value) <= _SMALL:
            shapes = tuple([_dims(shape, what) for shape in value])
            return self.shapes(shapes), 1 + len(shapes) + sum(map(len, shapes))
        hit = self.shape_lists.get(id(value)) or self.shapes_of(value, what)
        if isinstance(hit, _EntryError):
            raise hit
        return hit

    def dtype_code(self, value: Any) -> tuple[int, int]:
        """(dtype-table code, items it stands for); one plain name is the common case and is
        cleaned at the end."""
        if type(value) is list and len(value) == 1 and type(value[0]) is str:
            return self.dtypes((value[0],)), 2
        hit = self.dtype_lists.get(id(value)) or self.dtypes_of(value)
        if isinstance(hit, _EntryError):
            raise hit
        return hit

    def _frame(self, name: Any, filename: Any, line: Any) -> Frame:
        if type(line) is not int or not -_INT64_MAX <= line <= _INT64_MAX:
            line = _maybe_int(line)
        key = (self.text(name) or "?", self.text(filename) or "?", line)
        frame = self.clean_frames.get(key)
        if frame is None:
            frame = self.clean_frames[key] = Frame(*key)
        return frame


def _dims(shape: Any, what: str) -> tuple[int, ...]:
    if not isinstance(shape, list | tuple):
        raise _EntryError(f"{what} holds a non-list shape")
    if len(shape) > MAX_DIMS:
        raise _EntryError(f"{what} has a shape of {len(shape)} dimensions")
    dims = tuple(d if type(d) is int else _as_int(d, what) for d in shape)
    if any(d < 0 for d in dims):
        raise _EntryError(f"{what} has a negative dimension")
    if math.prod(dims) > MAX_NUMEL:
        shown = ", ".join(_short(d) for d in dims[:8]) + (", ..." if len(dims) > 8 else "")
        raise _EntryError(f"{what} has an absurd shape [{shown}]")
    return dims


_Fast = tuple[dict[str, Any], dict[int, int], set[str], set[str]]

# The keys a modern dump's entries all have, fetched together in one C-level pass.
_FAST_KEYS = (
    "input_sizes",
    "output_sizes",
    "frames",
    "input_dtypes",
    "output_dtypes",
    "process_group",
    "profiling_name",
    "state",
    "is_p2p",
    "retired",
    "pg_id",
    "collective_seq_id",
    "p2p_seq_id",
    "record_id",
    "op_id",
    "timeout_ms",
    "time_created_ns",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
)
_FAST_GET = operator.itemgetter(*_FAST_KEYS)
# What one distinct entry signature (op, group, shapes, dtypes, stack) gives its rows.
_SIGNATURE_COLUMNS = (
    "pname",
    "op",
    "backend",
    "p2p_kind",
    "peer_src",
    "peer_dst",
    "is_marker",
    "group",
    "in_shape",
    "out_shape",
    "in_dtype",
    "out_dtype",
    "stack",
)


def _column(entries: Sequence[dict[str, Any]], key: str) -> list[Any]:
    return [e.get(key) for e in entries]


def _fetch(entries: list[dict[str, Any]]) -> dict[str, Sequence[Any]]:
    """Every fast-path key as one column (a tuple or list of the entries' values)."""
    try:
        columns: dict[str, Sequence[Any]] = dict(
            zip(_FAST_KEYS, zip(*map(_FAST_GET, entries), strict=True), strict=True)
        )
    except KeyError:  # an older format lacks some keys: None stands in, as `.get` gives
        columns = {key: _column(entries, key) for key in _FAST_KEYS}
    # Only some versions (and only with timing enabled) record durations.
    columns["duration_ms"] = (
        _column(entries, "duration_ms")
        if any(map(operator.contains, entries, repeat("duration_ms")))
        else (None,) * len(entries)
    )
    return columns


def _ints(values: Any, low: int, high: int) -> npt.NDArray[np.int64] | None:
    """An int64 column when every value is a plain int in [low, high]; else None. An int64
    array (from `decode`) is only range-checked."""
    if isinstance(values, np.ndarray):
        if len(values) and (int(values.min()) < low or int(values.max()) > high):
            return None
        return values
    if not set(map(type, values)) <= {int}:
        return None
    try:
        out = np.array(values, dtype=np.int64)
    except OverflowError:
        return None
    if len(out) and (int(out.min()) < low or int(out.max()) > high):
        return None
    return out


def _stamps(values: Any) -> npt.NDArray[np.int64] | None:
    """Timestamps: None or 0 (JSON) mean unset (-1); anything but ints and None: not fast.
    An int64 array (from `decode`) has -1 for None already."""
    if isinstance(values, np.ndarray):
        out = values.copy()
        out[out <= 0] = NO_TIME
        return out
    kinds = set(map(type, values))
    if not kinds <= {int, type(None)}:
        return None
    try:
        out = np.array(
            values if type(None) not in kinds else [-1 if v is None else v for v in values],
            dtype=np.int64,
        )
    except OverflowError:
        return None
    out[out <= 0] = NO_TIME
    return out


@dataclass(frozen=True)
class _CodedColumn:
    """A column as a code per entry and the distinct values the codes stand for."""

    codes: npt.NDArray[np.int32]
    values: Sequence[Any]


def _distinct(column: Sequence[Any] | _CodedColumn) -> Iterable[Any]:
    return column.values if isinstance(column, _CodedColumn) else column


def _flags(values: Sequence[Any] | _CodedColumn) -> npt.NDArray[np.bool_]:
    """True exactly where a value is True (not merely truthy)."""
    if isinstance(values, _CodedColumn):
        return _flags(values.values)[values.codes]
    if set(map(type, values)) <= {bool}:
        return np.array(values, dtype=np.bool_)
    return np.array([v is True for v in values], dtype=np.bool_)


def _state_codes(states: Sequence[Any] | _CodedColumn) -> npt.NDArray[np.int8] | None:
    """The state code of each entry; None when a state is not a known one."""
    if (
        not set(map(type, _distinct(states))) <= {str}
        or not set(_distinct(states)) <= _STATES.keys()
    ):
        return None
    if isinstance(states, _CodedColumn):
        return _codes(states.values, _STATES).astype(np.int8)[states.codes]
    return _codes(states, _STATES).astype(np.int8)


def _durations(values: Sequence[Any] | _CodedColumn) -> npt.NDArray[np.float64]:
    """Durations in ms (NaN where unset or odd)."""
    if isinstance(values, _CodedColumn):
        return _durations(values.values)[values.codes]
    if set(map(type, values)) <= {type(None)}:
        return np.full(len(values), math.nan)
    return np.array([_duration(v) for v in values], dtype=np.float64)


def _codes(keys: Sequence[Any], code: Mapping[Any, int]) -> npt.NDArray[np.int32]:
    return np.fromiter(map(code.__getitem__, keys), np.int32, len(keys))


def _plain(text: Any, most: int) -> bool:
    return type(text) is str and len(text) <= most and text.isprintable()


@dataclass
class _Keyed:
    """A rank's entries as columns, ready to be coded. Each signature column is a code per
    entry and the distinct values the codes stand for (the frames column's values are lists of
    frame dicts); columns may share a code array."""

    n: int
    signature: dict[str, tuple[npt.NDArray[np.int32], Sequence[Any]]]  # `_SIGNATURE_KEYS`
    scalars: dict[str, Any]  # the other columns: sequences, or int64 arrays from `decode`
    items: int  # entries, shapes, dimensions, dtypes and frames: the expansion check


_SIGNATURE_KEYS = (
    "profiling_name",
    "process_group",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "frames",
)


def _fast_columns(entries: Any, read: _Reader, limit: int) -> _Fast | None:
    """Columns of a rank whose entries are all well formed, one pass per key in C-level loops,
    each distinct value validated once. None sends the rank through the careful per-entry
    path, which names every problem; so anything unusual here just returns None."""
    keyed = _keyed_columns(entries) if isinstance(entries, EntryColumns) else _keyed(entries, read)
    if keyed is None:
        return None
    if keyed.items > limit:
        raise read.bomb()
    return _coded_columns(keyed, read)


def _keyed_columns(entries: EntryColumns) -> _Keyed:
    """`_Keyed` from columns decoded straight from a pickle's bytes (`decode`)."""
    scalars: dict[str, Any] = dict(entries.ints)
    for name in ("state", "is_p2p", "retired", "duration_ms"):
        scalars[name] = _CodedColumn(*entries.coded[name])
    scalars["pg_id"] = entries.ints["pg_id"].tolist()
    signature: dict[str, tuple[npt.NDArray[np.int32], Sequence[Any]]] = {}
    for name in _SIGNATURE_KEYS:
        codes, values = entries.coded[name]
        if name in ("input_sizes", "output_sizes"):
            values = list(map(_shape_key, values))
        elif name in ("input_dtypes", "output_dtypes", "process_group"):
            values = [tuple(v) if isinstance(v, list | tuple) else _ODD for v in values]
        signature[name] = (codes, values)
    return _Keyed(entries.n, signature, scalars, 5 * entries.n + entries.items)


_ODD = object()  # a value the fast path does not take: the careful path reads the rank


def _shape_key(value: Any) -> Any:
    if type(value) is not list or not all(type(v) is list for v in value):
        return _ODD
    return tuple(map(tuple, value))


def _coded(keys: Sequence[Any]) -> tuple[npt.NDArray[np.int32], list[Any]]:
    """A code per entry (in order of first appearance) and the distinct keys."""
    distinct = dict(zip(dict.fromkeys(keys), count()))
    return _codes(keys, distinct), list(distinct)


def _keyed(entries: Any, read: _Reader) -> _Keyed | None:
    """`_Keyed` from a list of entry dicts."""
    n = len(entries)
    if not n or not isinstance(entries, list) or set(map(type, entries)) != {dict}:
        return None
    try:
        cols = _fetch(entries)
        ins, outs, frames = cols["input_sizes"], cols["output_sizes"], cols["frames"]
        if not set(map(type, ins)) | set(map(type, outs)) <= {list}:
            return None
        if not set(map(type, frames)) <= {list, type(None)}:
            return None
        # The expansion bound first: len() of a list repeated by memo references is O(1), so a
        # memo bomb is caught here before anything is copied.
        shapes = sum(map(len, ins)) + sum(map(len, outs))
        dims = sum(map(len, chain.from_iterable(ins))) + sum(map(len, chain.from_iterable(outs)))
        items = 5 * n + shapes + dims + sum(map(len, filter(None, frames)))
        if items > (read.limit if read.limit is not None else _INT64_MAX):
            raise read.bomb()
        if shapes > 16 * n:
            return None
        in_keys = [tuple(map(tuple, v)) for v in ins]
        out_keys = [tuple(map(tuple, v)) for v in outs]
        in_dt, out_dt = cols["input_dtypes"], cols["output_dtypes"]
        if not set(map(type, in_dt)) | set(map(type, out_dt)) <= {list}:
            return None
        pgs = cols["process_group"]
        pg_keys = pgs if set(map(type, pgs)) == {tuple} else list(map(tuple, pgs))
    except (TypeError, KeyError):
        return None
    # An entry's stack key is the identities of its frame objects: torch's pickler writes each
    # distinct frame once and refers to it after, so a pickle's entries share frame dicts and a
    # stack is recognized without reading its frames again. The dump keeps every frame alive
    # while it is read, so identities are not reused.
    stack_keys: list[Any] = [tuple(map(id, f)) if f else None for f in frames]
    try:
        signature: dict[str, tuple[npt.NDArray[np.int32], Sequence[Any]]] = {
            name: _coded(keys)
            for name, keys in (
                ("profiling_name", cols["profiling_name"]),
                ("process_group", pg_keys),
                ("input_sizes", in_keys),
                ("output_sizes", out_keys),
                ("input_dtypes", list(map(tuple, in_dt))),
                ("output_dtypes", list(map(tuple, out_dt))),
            )
        }
    except TypeError:  # an unhashable value (a list for a name, say): named per entry
        return None
    stack_codes, distinct = _coded(stack_keys)
    by_key = dict(zip(stack_keys, frames, strict=True))
    signature["frames"] = (stack_codes, [by_key[key] for key in distinct])
    scalars: dict[str, Any] = {k: v for k, v in cols.items() if k not in signature}
    return _Keyed(n, signature, scalars, items)


def _combine(
    columns: Sequence[tuple[npt.NDArray[np.int32], Sequence[Any]]], n: int
) -> tuple[npt.NDArray[np.intp], list[list[int]]]:
    """Each entry's code among the distinct combinations of these coded columns (in order of
    first appearance), and each combination's code in every column."""
    if not n:
        return np.zeros(0, dtype=np.intp), []
    combined = np.zeros(n, dtype=np.int64)
    bound = 1
    seen: set[int] = set()
    for codes, values in columns:
        if id(codes) in seen:
            continue  # columns decoded together share their codes
        seen.add(id(codes))
        if bound * max(len(values), 1) >= 1 << 62:
            _, combined = np.unique(combined, return_inverse=True)
            bound = n
        combined = combined * len(values) + codes
        bound *= max(len(values), 1)
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(order), dtype=np.intp)
    rank[order] = np.arange(len(order))
    rows = np.stack([codes[first[order]] for codes, _ in columns], axis=1)
    return rank[inverse.ravel()], rows.tolist()


def _coded_columns(keyed: _Keyed, read: _Reader) -> _Fast | None:
    """The rank's columns from `_Keyed`: each distinct signature validated and coded once."""
    n, cols = keyed.n, keyed.scalars
    stack_code = _fast_stacks(keyed.signature["frames"][1], read)
    if stack_code is None:
        return None
    # Entries repeat a few signatures (op, group, shapes, dtypes, stack): each distinct one is
    # validated and coded once, and the rows take their codes from it.
    coded = [keyed.signature[name] for name in _SIGNATURE_KEYS]
    inverse, signatures = _combine(coded, n)
    shape_code: dict[Any, int] = {}
    dtype_code: dict[Any, int] = {}
    group_code: dict[Any, int] = {}
    parsed: dict[Any, tuple[int, int, int, int, int, int, int]] = {}
    unknown_backends: set[str] = set()
    unknown_ops: set[str] = set()
    rows: list[tuple[int, ...]] = []
    for signature in signatures:
        pname, pg, in_key, out_key, in_dt, out_dt = (
            values[code] for code, (_, values) in zip(signature, coded[:-1], strict=False)
        )
        stack = signature[-1]
        if _ODD in (pg, in_key, out_key, in_dt, out_dt):
            return None
        for key in (in_key, out_key):
            if key not in shape_code:
                if not all(_fast_shape(shape) for shape in key):
                    return None
                shape_code[key] = read.shapes(key)
        for key in (in_dt, out_dt):
            if key not in dtype_code:
                if not all(_plain(d, 64) for d in key):
                    return None
                dtype_code[key] = read.dtypes(key)
        if pg not in group_code:
            if len(pg) != 2 or not (_plain(pg[0], 64) and _plain(pg[1], 64)):
                return None
            group_code[pg] = read.groups(pg)
        fields = parsed.get(pname)
        if fields is None:
            if not _plain(pname, 64):
                return None
            found = read.names.get(pname) or read.name(pname)
            if isinstance(found, _EntryError):
                return None
            backend, op, kind, src, dst = found
            if backend not in KNOWN_BACKENDS:
                unknown_backends.add(backend)
            if op not in KNOWN_OPS:
                unknown_ops.add(op)
            fields = parsed[pname] = (
                read.pnames(pname),
                read.ops(op),
                read.backends(backend),
                kind,
                src,
                dst,
                int(op in MARKER_OPS),
            )
        rows.append(
            (
                *fields,
                group_code[pg],
                shape_code[in_key],
                shape_code[out_key],
                dtype_code[in_dt],
                dtype_code[out_dt],
                stack_code[stack],
            )
        )
    states = _state_codes(cols["state"])
    if states is None:
        return None
    table = np.array(rows, dtype=np.int64).reshape(-1, len(_SIGNATURE_COLUMNS))[inverse]
    is_p2p = _flags(cols["is_p2p"])
    sig = {name: table[:, i] for i, name in enumerate(_SIGNATURE_COLUMNS)}
    if bool((is_p2p & (sig["p2p_kind"] == P2PKind.NONE) & (sig["is_marker"] == 0)).any()):
        return None  # an is_p2p entry that is neither send nor recv: reported per entry
    coll = _ints(cols["collective_seq_id"], -1, MAX_SEQ_ID)
    p2p = _ints(cols["p2p_seq_id"], -1, MAX_SEQ_ID)
    record = _ints(cols["record_id"], -_INT64_MAX, _INT64_MAX)
    op_id = _ints(cols["op_id"], -_INT64_MAX, _INT64_MAX)
    timeout = _ints(cols["timeout_ms"], -_INT64_MAX, _INT64_MAX)
    created = _stamps(cols["time_created_ns"])
    started = _stamps(cols["time_discovered_started_ns"])
    completed = _stamps(cols["time_discovered_completed_ns"])
    columns = (coll, p2p, record, op_id, timeout, created, started, completed)
    if any(c is None for c in columns):
        return None
    assert coll is not None and p2p is not None and record is not None  # for the type checker
    assert op_id is not None and timeout is not None and created is not None
    assert started is not None and completed is not None
    groups = sig["group"].astype(np.int32)
    pg_ids: dict[int, int] = {}
    ids = cols["pg_id"]
    if set(map(type, ids)) == {int}:  # the first row of each pg_id names its group
        pg_ids = dict(zip(reversed(ids), reversed(groups.tolist()), strict=True))
    else:
        for pg_id, code in zip(ids, groups.tolist(), strict=True):
            if type(pg_id) is int and pg_id not in pg_ids:
                pg_ids[pg_id] = code
    arrays: dict[str, Any] = {
        "index": np.arange(n, dtype=np.int32),
        "record_id": record,
        "group": groups,
        "coll_seq": coll,
        "p2p_seq": p2p,
        "op_id": op_id,
        "state": states,
        "retired": _flags(cols["retired"]),
        "t_created": created,
        "t_started": started,
        "t_completed": completed,
        "duration_ms": _durations(cols["duration_ms"]),
        "timeout_ms": timeout,
    }
    for name, column in sig.items():
        if name in _COLUMNS and name != "group":
            arrays[name] = column.astype(_COLUMNS[name])
    return arrays, pg_ids, unknown_backends, unknown_ops


def _fast_stacks(frames: Sequence[Any], read: _Reader) -> list[int] | None:
    """The stack-table code of each distinct frames value (a list of frame dicts; -1 for none
    or an empty one); None when a frame is odd (the careful path reads it)."""
    codes: list[int] = []
    made: dict[int, Frame] = {}  # by frame object identity
    by_value: dict[tuple[Any, Any, Any], Frame] = {}
    for found in frames:
        if not found:
            codes.append(-1)
            continue
        if type(found) is not list:
            return None
        stack = []
        for raw in found:
            frame = made.get(id(raw))
            if frame is None:
                if type(raw) is not dict:
                    return None
                value: tuple[Any, Any, Any] = (
                    raw.get("name"),
                    raw.get("filename"),
                    raw.get("line"),
                )
                frame = by_value.get(value)
                if frame is None:
                    name, filename, line = value
                    if not (
                        _plain(name, 256)
                        and _plain(filename, 256)
                        and type(line) is int
                        and -_INT64_MAX <= line <= _INT64_MAX
                    ):
                        return None
                    frame = by_value[value] = Frame(name, filename, line)
                made[id(raw)] = frame
            stack.append(frame)
        codes.append(read.stacks(tuple(stack)))
    return codes


def _fast_shape(shape: tuple[Any, ...]) -> bool:
    return (
        len(shape) <= MAX_DIMS
        and all(type(d) is int and d >= 0 for d in shape)
        and math.prod(shape) <= MAX_NUMEL
    )


def build_rank(
    raw: Any,
    rank: int,
    file: str,
    *,
    nbytes: int | None = None,
    notes: Sequence[str] = (),
) -> RankDump:
    """Normalize one loaded dump into columns. Whole-dump problems raise DumpError.

    `nbytes` (the size the dump was parsed from) enables the checks against dumps that expand
    far beyond their size; `notes` become warnings."""
    try:
        return _build_rank(raw, rank, file, nbytes, notes)
    except _Bomb as exc:
        raise DumpError(file, rank, str(exc)) from None


def _build_rank(
    raw: Any, rank: int, file: str, nbytes: int | None, notes: Sequence[str]
) -> RankDump:
    if isinstance(raw, Decoded):
        raw, entries = raw.header, raw.entries
    elif not isinstance(raw, dict):
        raise DumpError(
            file,
            rank,
            f"not a Flight Recorder dump (top level is {type(raw).__name__})",
        )
    else:
        entries = raw.get("entries", [])
    if entries is None:
        entries = []
    if not isinstance(entries, list | tuple | EntryColumns):
        raise DumpError(file, rank, "'entries' is not a list")
    if "version" not in raw and "pg_config" not in raw and not entries:
        raise DumpError(file, rank, "not a Flight Recorder dump (no version, pg_config or entries)")
    if nbytes is not None and len(entries) > max(DENSE_FLOOR, nbytes // MIN_ENTRY_BYTES):
        raise DumpError(
            file,
            rank,
            f"refused: {len(entries)} entries in {nbytes} bytes are too many to be real"
            f" (at most one per {MIN_ENTRY_BYTES} bytes; a pickle repeating one entry?)",
        )
    read = _Reader(nbytes)
    version = read.text(raw.get("version", "unknown")) or "unknown"
    comm = raw.get("comm_lib_version", raw.get("nccl_version", ""))
    warnings = [f"rank {rank}: {note}" for note in notes]

    claims: dict[str, GroupClaim] = {}
    pg_config = raw.get("pg_config")
    usable = isinstance(pg_config, dict) and bool(pg_config)
    if isinstance(pg_config, dict):
        parsed_ranks: dict[Any, tuple[int, ...] | None] = {}
        for key, conf in pg_config.items():
            if not isinstance(conf, dict):
                usable = False
                continue
            name = read.text(conf.get("name", key))
            raw_ranks = conf.get("ranks")
            cache_key = raw_ranks if isinstance(raw_ranks, str) else id(raw_ranks)
            if cache_key not in parsed_ranks:
                parsed_ranks[cache_key] = _parse_ranks(raw_ranks)
            ranks = parsed_ranks[cache_key]
            if key == "" or not name or ranks is None or rank not in ranks:
                usable = False  # gloo keys every group by '' with ranks '[]'
                continue
            claims[name] = GroupClaim(name, read.text(conf.get("desc", "")) or "", ranks)
    if not usable:
        claims = {}

    errors: list[tuple[int, str]] = []
    odd_states: Counter[str] = Counter()
    limit = read.limit if read.limit is not None else _INT64_MAX
    arrays: dict[str, Any]
    pg_ids: dict[int, int]
    unknown_backends: set[str]
    unknown_ops: set[str]
    fast = _fast_columns(entries, read, limit)
    if fast is not None:
        arrays, pg_ids, unknown_backends, unknown_ops = fast
    elif isinstance(entries, EntryColumns):
        raise Undecodable  # the careful path needs the entries as dicts
    else:
        cols: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
        pg_ids, unknown_backends, unknown_ops = {}, set(), set()
        append = {k: v.append for k, v in cols.items()}
        names, stack_lists = read.names, read.stack_lists
        text, group_code_of = read.text, read.groups
        items = 0

        for i, entry in enumerate(entries):
            items += 1
            if items > limit:
                raise read.bomb()
            try:
                if type(entry) is not dict:
                    raise _EntryError("entry is not a mapping")
                pg = entry.get("process_group")
                if not isinstance(pg, list | tuple) or len(pg) != 2:
                    raise _EntryError(f"bad process_group {_short(pg)}")
                pg_name, pg_desc = pg
                if type(pg_name) is not str or len(pg_name) > 64 or not pg_name.isprintable():
                    pg_name = text(pg_name)
                if type(pg_desc) is not str or len(pg_desc) > 64 or not pg_desc.isprintable():
                    pg_desc = text(pg_desc)
                if pg_name is None or pg_desc is None:
                    raise _EntryError(f"bad process_group {_short(pg[0])}, {_short(pg[1])}")
                pname = entry.get("profiling_name")
                if type(pname) is not str:
                    raise _EntryError(f"bad profiling_name {_short(pname, 60)}")
                parsed = names.get(pname) or read.name(pname)
                if isinstance(parsed, _EntryError):
                    raise parsed
                backend, op, p2p_kind, src, dst = parsed
                coll_seq = entry.get("collective_seq_id", -1)
                if type(coll_seq) is not int or not -1 <= coll_seq <= MAX_SEQ_ID:
                    coll_seq = _seq(coll_seq, "collective_seq_id")
                p2p_seq = entry.get("p2p_seq_id", -1)
                if type(p2p_seq) is not int or not -1 <= p2p_seq <= MAX_SEQ_ID:
                    p2p_seq = _seq(p2p_seq, "p2p_seq_id")
                record_id = entry.get("record_id", i)
                if type(record_id) is not int or not -_INT64_MAX <= record_id <= _INT64_MAX:
                    record_id = _as_int(record_id, "record_id")
                state_text = entry.get("state")
                state = _STATES.get(state_text) if type(state_text) is str else None
                in_shape, counted = read.shape_code(entry.get("input_sizes"), "input_sizes")
                items += counted
                out_shape, counted = read.shape_code(entry.get("output_sizes"), "output_sizes")
                items += counted
                in_dtype, counted = read.dtype_code(entry.get("input_dtypes"))
                items += counted
                out_dtype, counted = read.dtype_code(entry.get("output_dtypes"))
                items += counted
                value = entry.get("frames")
                hit = stack_lists.get(id(value)) or read.stack_of(value)
                if isinstance(hit, _EntryError):  # never: any list of frames is usable
                    raise hit
                stack_code = hit[0]
                items += hit[1]
                if (
                    p2p_kind == P2PKind.NONE
                    and entry.get("is_p2p") is True
                    and op not in MARKER_OPS
                ):
                    raise _EntryError(f"is_p2p entry {_short(pname, 60)} is neither send nor recv")
                group_code = group_code_of((pg_name, pg_desc))
                pg_id = entry.get("pg_id")
                if type(pg_id) is int:
                    pg_ids.setdefault(pg_id, group_code)
            except _EntryError as exc:
                errors.append((i, str(exc)))
                continue
            if state is None:
                state = State.UNKNOWN
                odd_states[_short(state_text, 20)] += 1
            if backend not in KNOWN_BACKENDS:
                unknown_backends.add(backend)
            if op not in KNOWN_OPS:
                unknown_ops.add(op)
            append["index"](i)
            append["record_id"](record_id)
            append["group"](group_code)
            append["coll_seq"](coll_seq)
            append["p2p_seq"](p2p_seq)
            append["op_id"](_maybe_int(entry.get("op_id")))
            append["op"](read.ops(op))
            append["backend"](read.backends(backend))
            append["pname"](
                read.pnames(pname if len(pname) <= 64 and pname.isprintable() else text(pname))
            )
            append["p2p_kind"](p2p_kind)
            append["peer_src"](src)
            append["peer_dst"](dst)
            append["state"](state)
            append["retired"](entry.get("retired") is True)
            append["t_created"](_time(entry.get("time_created_ns")))
            append["t_started"](_time(entry.get("time_discovered_started_ns")))
            append["t_completed"](_time(entry.get("time_discovered_completed_ns")))
            append["duration_ms"](_duration(entry.get("duration_ms")))
            append["in_shape"](in_shape)
            append["out_shape"](out_shape)
            append["in_dtype"](in_dtype)
            append["out_dtype"](out_dtype)
            append["stack"](stack_code)
            append["timeout_ms"](_maybe_int(entry.get("timeout_ms")))

        if items > limit:
            raise read.bomb()
        arrays = {k: np.asarray(v, dtype=_COLUMNS[k]) for k, v in cols.items()}
    if unknown_backends:
        warnings.append(f"rank {rank}: unknown backend(s) {_listed(unknown_backends)}")
    if unknown_ops:
        warnings.append(f"rank {rank}: unknown op(s) {_listed(unknown_ops)}")
    if odd_states:
        count = sum(odd_states.values())
        warnings.append(
            f"rank {rank}: {count} entr{'y' if count == 1 else 'ies'} with an unknown state"
            f" ({_listed(odd_states)})"
        )
    record = arrays["record_id"]
    wrapped = bool(len(record) and int(record.min()) > 0)
    unit, marker = _blocks(arrays, read.ops.values, wrapped)
    status = _pg_status(raw.get("pg_status"), pg_ids)
    return RankDump(
        rank=rank,
        file=file,
        version=version,
        comm_lib_version=(read.text(comm) or "") if comm is not None else "",
        claims=claims,
        pg_config_usable=usable,
        pg_status=status,
        wrapped=wrapped,
        entry_errors=errors,
        warnings=warnings,
        groups=read.groups.values,
        ops=read.ops.values,
        backends=read.backends.values,
        profiling_names=read.pnames.values,
        shapes=read.shapes.values,
        dtypes=[tuple(read.text(name) or "" for name in found) for found in read.dtypes.values],
        stacks=read.stacks.values,
        unit=unit,
        marker=marker,
        **arrays,
    )


def _listed(names: Iterable[str], most: int = 8) -> str:
    values = sorted(names)
    shown = ", ".join(values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


_COLUMNS: dict[str, type] = {
    "index": np.int32,
    "record_id": np.int64,
    "group": np.int32,
    "coll_seq": np.int64,
    "p2p_seq": np.int64,
    "op_id": np.int64,
    "op": np.int32,
    "backend": np.int32,
    "pname": np.int32,
    "p2p_kind": np.int8,
    "peer_src": np.int32,
    "peer_dst": np.int32,
    "state": np.int8,
    "retired": np.bool_,
    "t_created": np.int64,
    "t_started": np.int64,
    "t_completed": np.int64,
    "duration_ms": np.float64,
    "in_shape": np.int32,
    "out_shape": np.int32,
    "in_dtype": np.int32,
    "out_dtype": np.int32,
    "stack": np.int32,
    "timeout_ms": np.int64,
}


def _pg_status(raw: Any, pg_ids: dict[int, int]) -> dict[int, tuple[int, int, int]]:
    """pg_status keyed by the rank's group code; keys are per-process ids, mapped via pg_id."""
    out: dict[int, tuple[int, int, int]] = {}
    if not isinstance(raw, dict):
        return out
    for key, status in raw.items():
        try:
            pg_id = _as_int(key, "pg_status key")
        except _EntryError:
            continue
        if pg_id not in pg_ids or not isinstance(status, dict):
            continue
        values = []
        for name in (
            "last_enqueued_collective",
            "last_started_collective",
            "last_completed_collective",
        ):
            values.append(_maybe_int(status.get(name, -1)))
        out[pg_ids[pg_id]] = (values[0], values[1], values[2])
    return out


def _blocks(cols: dict[str, np.ndarray], ops: list[str], wrapped: bool) -> tuple[I8, I32]:
    """Recognise coalesced collective blocks and batched p2p blocks on one rank.

    A block's members come right before its end marker in the group's own order. An end marker
    belongs to a batched p2p block when the group's previous entry is a p2p op with the
    marker's p2p sequence id (its `is_p2p` is False, so that flag cannot tell); otherwise to a
    collective block whose members share the marker's collective sequence id. A marker with
    no members at the start of a wrapped buffer lost them to the wrap: it is left out.

    Vectorized: rows are put in group order, and a block's members are the run of rows just
    before its marker that share the previous row's kind and sequence id.
    """
    n = len(cols["group"])
    unit = np.full(n, UnitKind.COLLECTIVE, dtype=np.int8)
    marker = np.arange(n, dtype=np.int32)
    p2p_rows = cols["p2p_kind"] != P2PKind.NONE
    unit[p2p_rows] = UnitKind.P2P
    is_marker_op = np.array([op in MARKER_OPS for op in ops], dtype=bool)
    if not n or not is_marker_op.any() or not is_marker_op[cols["op"]].any():
        return unit, marker
    order = np.argsort(cols["group"], kind="stable")  # each group's rows together, in order
    group = cols["group"][order]
    is_m = is_marker_op[cols["op"][order]]
    p2p = p2p_rows[order]
    coll, p2p_seq = cols["coll_seq"][order], cols["p2p_seq"][order]
    pos = np.arange(n)
    first = np.ones(n, dtype=bool)
    first[1:] = group[1:] != group[:-1]
    # floor: the group's last marker before each row, or the row before the group's first
    before = np.full(n, -1)
    before[1:] = np.where(is_m[:-1], pos[:-1], -1)
    floor = np.maximum.accumulate(np.maximum(before, np.where(first, pos - 1, -1)))
    # a run: consecutive rows of one group, neither a marker, of one kind and sequence id
    seq = np.where(p2p, p2p_seq, coll)
    brk = first | is_m
    brk[1:] |= is_m[:-1] | (p2p[1:] != p2p[:-1]) | (seq[1:] != seq[:-1])
    run_start = np.maximum.accumulate(np.where(brk, pos, 0))

    at = np.flatnonzero(is_m)
    prev = np.maximum(at - 1, 0)
    has_prev = (at - 1) > floor[at]  # the group's previous row is not a marker
    batch = has_prev & p2p[prev] & (p2p_seq[prev] == p2p_seq[at])
    block = has_prev & ~p2p[prev] & (coll[prev] == coll[at])
    later = coll[at] > coll[prev]  # meaningful where the group has a previous row
    bare = has_prev & ~batch & ~block & later  # a block whose members were not recorded
    lone = ~has_prev & (~first[at] & later if wrapped else True)
    kinds = np.full(len(at), UnitKind.ORPHAN_MARKER, dtype=np.int8)
    kinds[block | bare | lone] = UnitKind.BLOCK_MARKER
    kinds[batch] = UnitKind.BATCH_MARKER
    rows = order[at]
    unit[rows] = kinds
    marker[rows[kinds == UnitKind.ORPHAN_MARKER]] = -1
    for chosen, member_kind in ((batch, UnitKind.BATCH_MEMBER), (block, UnitKind.BLOCK_MEMBER)):
        ends = prev[chosen]
        starts = run_start[ends]
        sizes = ends - starts + 1
        members = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())
        unit[order[members]] = member_kind
        marker[order[members]] = np.repeat(rows[chosen], sizes)
    return unit, marker
