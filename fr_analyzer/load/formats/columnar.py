"""The column-wise reader: a rank's entries turned into columns one key at a time, in C-level
loops, each distinct value (op, group, shapes, dtypes, stack) validated once.

It takes entries unpickled or parsed from JSON (lists of dicts), and the columns that `decode`
reads from torch-layout pickles. Anything unusual raises `NotDecoded` (`outcomes.slower`) with
the reason, and the careful per-entry reader (`careful`) reads the rank instead, naming every
problem.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from ...model.backends import KNOWN_BACKENDS
from ...model.dump import COLUMNS
from ...model.ops import KNOWN_OPS, MARKER_OPS
from ...model.records import Frame, P2PKind
from ..common import INT64_MAX, MAX_SEQ_ID, NO_TIME, STATES, printable
from ..safety.decoders.columns import EntryColumns, distinct_codes
from .outcomes import slower
from .schema import KEPT_KEYS
from .values import EntryError, ValueReader, as_int, duration, plain, plain_shape

_Fast = tuple[dict[str, Any], dict[int, int], set[str], set[str]]

# The keys fetched together in one C-level pass (duration_ms is optional: fetched apart).
_FAST_KEYS = tuple(name for name in KEPT_KEYS if name != "duration_ms")
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
    """Every fast-path key as one column (a tuple or list of the entries' values). The keys
    the first entry has are fetched together in one C-level pass; a key it lacks (frames, in
    a dump written without stacks) is None in every entry, or fetched on its own."""
    present = tuple(key for key in _FAST_KEYS if key in entries[0])
    columns: dict[str, Sequence[Any]]
    try:
        get = _FAST_GET if len(present) == len(_FAST_KEYS) else operator.itemgetter(*present)
        if len(present) == 1:
            columns = {present[0]: list(map(get, entries))}
        else:
            columns = dict(zip(present, zip(*map(get, entries), strict=True), strict=True))
    except KeyError:  # entries differ in their keys: None stands in, as `.get` gives
        columns = {key: _column(entries, key) for key in _FAST_KEYS}
    for key in _FAST_KEYS:
        if key not in columns:
            has = any(map(operator.contains, entries, repeat(key)))
            columns[key] = _column(entries, key) if has else (None,) * len(entries)
    # Only some versions (and only with timing enabled) record durations.
    columns["duration_ms"] = (
        _column(entries, "duration_ms")
        if any(map(operator.contains, entries, repeat("duration_ms")))
        else (None,) * len(entries)
    )
    return columns


def _ints(values: Any, low: int, high: int) -> npt.NDArray[np.int64] | None:
    """An int64 column when every value is a plain int in [low, high] (or a short decimal
    string: some writers put sequence ids so); else None. An int64 array (from `decode`) is
    only range-checked."""
    if isinstance(values, np.ndarray):
        if len(values) and (int(values.min()) < low or int(values.max()) > high):
            return None
        return values
    kinds = set(map(type, values))
    if str in kinds and kinds <= {int, str}:
        try:
            values = [v if type(v) is int else as_int(v, "") for v in values]
        except EntryError:
            return None
    elif not kinds <= {int}:
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
        or not set(_distinct(states)) <= STATES.keys()
    ):
        return None
    if isinstance(states, _CodedColumn):
        return _codes(states.values, STATES).astype(np.int8)[states.codes]
    return _codes(states, STATES).astype(np.int8)


def _durations(values: Sequence[Any] | _CodedColumn) -> npt.NDArray[np.float64]:
    """Durations in ms (NaN where unset or odd)."""
    if isinstance(values, _CodedColumn):
        return _durations(values.values)[values.codes]
    if set(map(type, values)) <= {type(None)}:
        return np.full(len(values), math.nan)
    return np.array([duration(v) for v in values], dtype=np.float64)


def _codes(keys: Sequence[Any], code: Mapping[Any, int]) -> npt.NDArray[np.int32]:
    return np.fromiter(map(code.__getitem__, keys), np.int32, len(keys))


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


def fast_columns(entries: Any, read: ValueReader, limit: int) -> _Fast:
    """Columns of a rank whose entries are all well formed, one pass per key in C-level loops,
    each distinct value validated once. Anything unusual raises `NotDecoded`: the careful
    per-entry path reads the rank then, and names every problem."""
    if not isinstance(entries, EntryColumns):
        keyed = _keyed(entries, read)
        if keyed.items > limit:
            raise read.bomb()
        return _coded_columns(keyed, read)
    try:
        keyed = _keyed_columns(entries)
        if keyed.items > limit:
            raise read.bomb()
        return _coded_columns(keyed, read)
    except (TypeError, ValueError) as exc:
        # `_keyed_columns` hands on only the plain values `_keyed` checks for, so this is a
        # decoded value nobody foresaw, or a bug of ours. Either way the rank is read again
        # from dicts (`NotDecoded`), and the reason stays in its `fallback`: an odd value is
        # then named per entry, a bug in the code both paths share fails there as before
        # (not hidden), and one in the decoded path alone costs speed, not the rank.
        reason = printable(f"{type(exc).__name__}: {exc}")[:200]
        raise slower(f"a decoded value the column-wise reader does not take ({reason})") from exc


def _keyed_columns(entries: EntryColumns) -> _Keyed:
    """`_Keyed` from columns decoded straight from a pickle's bytes (`decode`). The decoders
    take what the grammar holds, so a value may be anything a memo reference reaches (a dict
    for a profiling_name, a list among dtypes): each distinct one is checked here for the
    plain types that `_keyed` checks in entry dicts, and one of another type is `_ODD` (the
    rank is then read again from dicts), before anything hashes it."""
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
            values = list(map(_texts_key, values))
        elif name == "profiling_name":
            values = [v if type(v) is str else _ODD for v in values]
        signature[name] = (codes, values)
    return _Keyed(entries.n, signature, scalars, 5 * entries.n + entries.items)


_ODD = object()  # a value the fast path does not take: the careful path reads the rank


def _shape_key(value: Any) -> Any:
    """Shapes as a tuple of tuples of ints, or `_ODD`."""
    if type(value) is not list or not all(type(v) is list for v in value):
        return _ODD
    if not all(type(d) is int for shape in value for d in shape):
        return _ODD
    return tuple(map(tuple, value))


def _texts_key(value: Any) -> Any:
    """Dtypes or a (name, desc) pair as a tuple of strings, or `_ODD`."""
    if type(value) is not list and type(value) is not tuple:
        return _ODD
    return tuple(value) if all(type(v) is str for v in value) else _ODD


def _coded(keys: Sequence[Any]) -> tuple[npt.NDArray[np.int32], list[Any]]:
    """A code per entry (in order of first appearance) and the distinct keys."""
    distinct, codes = distinct_codes(keys)
    return codes, distinct


def _keyed(entries: Any, read: ValueReader) -> _Keyed:
    """`_Keyed` from a list of entry dicts. Nothing is hashed before its type is known to be
    a plain one (a tuple from a pickle could take forever to hash)."""
    n = len(entries)
    if not n:
        raise slower("no entries")
    if not isinstance(entries, list) or set(map(type, entries)) != {dict}:
        raise slower("an entry is not a mapping")
    try:
        cols = _fetch(entries)
        ins, outs, frames = cols["input_sizes"], cols["output_sizes"], cols["frames"]
        if not set(map(type, ins)) | set(map(type, outs)) <= {list}:
            raise slower("input or output sizes that are not lists")
        if not set(map(type, frames)) <= {list, type(None)}:
            raise slower("frames that are not lists")
        # The expansion bound first: len() of a list repeated by memo references is O(1), so a
        # memo bomb is caught here before anything is copied.
        shapes = sum(map(len, ins)) + sum(map(len, outs))
        dims = sum(map(len, chain.from_iterable(ins))) + sum(map(len, chain.from_iterable(outs)))
        items = 5 * n + shapes + dims + sum(map(len, filter(None, frames)))
        if items > (read.limit if read.limit is not None else INT64_MAX):
            raise read.bomb()
        if shapes > 16 * n:
            raise slower("more than 16 shapes per entry")
        every_shape = chain(chain.from_iterable(ins), chain.from_iterable(outs))
        if not set(map(type, every_shape)) <= {list}:
            raise slower("a shape that is not a list")
        every_dim = chain.from_iterable(chain(chain.from_iterable(ins), chain.from_iterable(outs)))
        if not set(map(type, every_dim)) <= {int}:
            raise slower("a dimension that is not an integer")
        in_keys = [tuple(map(tuple, v)) for v in ins]
        out_keys = [tuple(map(tuple, v)) for v in outs]
        in_dt, out_dt = _dtype_lists(cols["input_dtypes"]), _dtype_lists(cols["output_dtypes"])
        every_dtype = chain(chain.from_iterable(in_dt), chain.from_iterable(out_dt))
        if not set(map(type, every_dtype)) <= {str}:
            raise slower("a dtype that is not a string")
        pgs = cols["process_group"]
        if not set(map(type, pgs)) <= {tuple, list} or set(map(len, pgs)) != {2}:
            raise slower("a process_group that is not a (name, desc) pair")
        if not set(map(type, chain.from_iterable(pgs))) <= {str}:
            raise slower("a process_group name or desc that is not a string")
        pg_keys = pgs if set(map(type, pgs)) == {tuple} else list(map(tuple, pgs))
        if not set(map(type, cols["profiling_name"])) <= {str}:
            raise slower("a profiling_name that is not a string")
        stack_keys = _stack_keys(frames)
    except (TypeError, KeyError):
        raise slower("an entry lacks a key, or holds a value of an odd type") from None
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
    except TypeError:  # never: every key above is made of plain values
        raise slower("an unhashable value") from None
    stack_codes, distinct = _coded(stack_keys)
    by_key = dict(zip(stack_keys, frames, strict=True))
    signature["frames"] = (stack_codes, [by_key[key] for key in distinct])
    scalars: dict[str, Any] = {k: v for k, v in cols.items() if k not in signature}
    return _Keyed(n, signature, scalars, items)


_SHARING_SAMPLE = 64  # entries whose frames tell whether a dump shares its frame dicts


def _dtype_lists(values: Sequence[Any]) -> Sequence[Any]:
    """Dtypes as lists: some writers put one bare name instead of a list of one."""
    kinds = set(map(type, values))
    if kinds <= {list}:
        return values
    if not kinds <= {list, str}:
        raise slower("dtypes that are not lists")
    return [[v] if type(v) is str else v for v in values]


def _stack_keys(frames: Sequence[Any]) -> list[Any]:
    """A key per entry that is equal for equal stacks. Torch's pickler (and Python's) writes
    each distinct frame dict once and refers to it after, so a pickle's entries share frame
    dicts and the identities of an entry's frames are its key: a stack is recognized without
    reading its frames again (the dump keeps every frame alive while it is read, so
    identities are not reused). JSON shares nothing: there the frames' values are the key."""
    sample = list(chain.from_iterable(filter(None, frames[:_SHARING_SAMPLE])))
    if 2 * len(set(map(id, sample))) <= len(sample):  # shared: a pickle
        return [tuple(map(id, f)) if f else None for f in frames]
    listed = list(chain.from_iterable(filter(None, frames)))
    if not set(map(type, listed)) <= {dict}:
        raise slower("a frame that is not a mapping")
    get = operator.itemgetter("name", "filename", "line")
    names, files, lines = zip(*map(get, listed), strict=True) if listed else ((), (), ())
    if not set(map(type, names)) | set(map(type, files)) <= {str}:
        raise slower("a frame name or file name that is not a string")
    if not set(map(type, lines)) <= {int}:
        raise slower("a frame line that is not an integer")
    return [tuple(map(get, f)) if f else None for f in frames]


def _combine(
    columns: Sequence[tuple[npt.NDArray[np.int32], Sequence[Any]]], n: int
) -> tuple[npt.NDArray[np.intp], list[list[int]]]:
    """Each entry's code among the distinct combinations of these coded columns (in order of
    first appearance), and each combination's code in every column. Columns that share one
    code array (the decoder's) are taken as they are: their combinations may repeat."""
    if not n:
        return np.zeros(0, dtype=np.intp), []
    shared = columns[0][0]
    if all(codes is shared for codes, _ in columns):
        # One code array (the decoder's combinations: dense, in order of first appearance):
        # each code is a combination already, if not always a distinct one.
        return shared.astype(np.intp), [[code] * len(columns) for code in range(len(columns[0][1]))]
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


def _coded_columns(keyed: _Keyed, read: ValueReader) -> _Fast:
    """The rank's columns from `_Keyed`: each distinct signature validated and coded once."""
    n, cols = keyed.n, keyed.scalars
    stack_code = _fast_stacks(keyed.signature["frames"][1], read)
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
        if _ODD in (pname, pg, in_key, out_key, in_dt, out_dt):
            raise slower("a profiling_name, shape, dtype or process_group of an odd type")
        for key in (in_key, out_key):
            if key not in shape_code:
                if not all(plain_shape(shape) for shape in key):
                    raise slower("a shape out of bounds")
                shape_code[key] = read.shapes(key)
        for key in (in_dt, out_dt):
            if key not in dtype_code:
                if not all(plain(d, 64) for d in key):
                    raise slower("a long or unprintable dtype")
                dtype_code[key] = read.dtypes(key)
        if pg not in group_code:
            if len(pg) != 2 or not (plain(pg[0], 64) and plain(pg[1], 64)):
                raise slower("a long or unprintable process group name")
            group_code[pg] = read.groups(pg)
        fields = parsed.get(pname)
        if fields is None:
            if not plain(pname, 64):
                raise slower("a long or unprintable profiling_name")
            found = read.names.get(pname) or read.name(pname)
            if isinstance(found, EntryError):
                raise slower(f"a malformed entry ({found})")
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
        raise slower("an unknown state")
    table = np.array(rows, dtype=np.int64).reshape(-1, len(_SIGNATURE_COLUMNS))[inverse]
    is_p2p = _flags(cols["is_p2p"])
    sig = {name: table[:, i] for i, name in enumerate(_SIGNATURE_COLUMNS)}
    if bool((is_p2p & (sig["p2p_kind"] == P2PKind.NONE) & (sig["is_marker"] == 0)).any()):
        raise slower("an is_p2p entry that is neither send nor recv")
    coll = _ints(cols["collective_seq_id"], -1, MAX_SEQ_ID)
    p2p = _ints(cols["p2p_seq_id"], -1, MAX_SEQ_ID)
    record = _ints(cols["record_id"], -INT64_MAX, INT64_MAX)
    op_id = _ints(cols["op_id"], -INT64_MAX, INT64_MAX)
    timeout = _ints(cols["timeout_ms"], -INT64_MAX, INT64_MAX)
    created = _stamps(cols["time_created_ns"])
    started = _stamps(cols["time_discovered_started_ns"])
    completed = _stamps(cols["time_discovered_completed_ns"])
    columns = (coll, p2p, record, op_id, timeout, created, started, completed)
    if any(c is None for c in columns):
        names = (
            *("collective_seq_id", "p2p_seq_id", "record_id", "op_id", "timeout_ms"),
            *("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns"),
        )
        odd = [name for name, c in zip(names, columns, strict=True) if c is None]
        raise slower(f"{odd[0]} values that are not plain integers in range")
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
        if name in COLUMNS and name != "group":
            arrays[name] = column.astype(COLUMNS[name])
    return arrays, pg_ids, unknown_backends, unknown_ops


def _fast_stacks(frames: Sequence[Any], read: ValueReader) -> list[int]:
    """The stack-table code of each distinct frames value (a list of frame dicts; -1 for none
    or an empty one). A frame's values are checked before they are hashed."""
    codes: list[int] = []
    made: dict[int, Frame] = {}  # by frame object identity
    by_value: dict[tuple[Any, Any, Any], Frame] = {}
    for found in frames:
        if not found:
            codes.append(-1)
            continue
        if type(found) is not list:
            raise slower("frames that are not lists")
        stack = []
        for raw in found:
            frame = made.get(id(raw))
            if frame is None:
                if type(raw) is not dict:
                    raise slower("a frame that is not a mapping")
                value: tuple[Any, Any, Any] = (
                    raw.get("name"),
                    raw.get("filename"),
                    raw.get("line"),
                )
                name, filename, line = value
                if not (
                    plain(name, 256)
                    and plain(filename, 256)
                    and type(line) is int
                    and -INT64_MAX <= line <= INT64_MAX
                ):
                    raise slower("a long or unprintable frame")
                frame = by_value.get(value)
                if frame is None:
                    frame = by_value[value] = Frame(name, filename, line)
                made[id(raw)] = frame
            stack.append(frame)
        codes.append(read.stacks(tuple(stack)))
    return codes
