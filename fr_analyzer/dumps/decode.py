"""Decode a dump written the way torch's pickler writes it straight into entry columns.

The general path (`reading`) walks every opcode to refuse bombs, then lets the unpickler build
some 100k small objects that normalization reads once and frees. A torch-written dump is far
more regular than a pickle can be: protocol 2; each string written once and memoized, later
referred to by its memo slot; each shared frame dict memoized once complete; slots numbered in
order; and every entry a dict with the same keys in the same order. So:

- a small exact decoder (`_Decoder`) reads the header, and any entry holding a first definition
  (a new string or frame);
- the layout of such an entry (its keys' memo slots, in order) becomes one compiled regular
  expression that reads each later entry of that layout in one step, capturing the bytes of each
  value;
- equal bytes mean equal values (memo slots are written once, in order, and only before the
  entries that refer to them), so each distinct value is decoded once; integers are decoded a
  column at a time with numpy.

The grammar has no global, no memo put out of order, no tuple holding a container, and dict
keys are only strings or ints: none of the bombs the opcode scan guards against can be written
in it, so a file it accepts needs no scan. Anything outside it (other protocols, Python's own
pickler, odd values) gives None, and the file takes the general path.
"""

from __future__ import annotations

import bisect
import itertools
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

# Opcodes (see pickletools)
_MARK, _STOP, _NONE, _TRUE, _FALSE = 0x28, 0x2E, 0x4E, 0x88, 0x89
_BININT1, _BININT2, _BININT, _LONG1, _BINFLOAT = 0x4B, 0x4D, 0x4A, 0x8A, 0x47
_BINUNICODE, _SHORT_BINUNICODE = 0x58, 0x8C
_EMPTY_LIST, _APPENDS, _EMPTY_DICT, _SETITEMS = 0x5D, 0x65, 0x7D, 0x75
_EMPTY_TUPLE, _TUPLE1, _TUPLE2, _TUPLE3, _TUPLE = 0x29, 0x85, 0x86, 0x87, 0x74
_BINGET, _LONG_BINGET, _BINPUT, _LONG_BINPUT = 0x68, 0x6A, 0x71, 0x72
_PUTS = (_BINPUT, _LONG_BINPUT)
_SCALARS = (type(None), bool, int, float, str)
_MAX_DEPTH = 64  # containers nested deeper than this are left to the general path
_MAX_SLOW_ENTRIES = 256  # entries read by the exact decoder before the unpickler is cheaper
_FEW_LATE = 32  # up to this many captures' first uses are found by list.index, else in one pass


class _Outside(Exception):
    """The bytes leave the grammar: the general path reads the file."""


class Undecodable(Exception):
    """Decoded entries hold something only the careful per-entry path reads, and it needs them
    as dicts: the file is read again the general way."""


@dataclass
class EntryColumns:
    """A rank's entries as columns, one value per entry and column.

    `ints` hold integer columns (-1 where an optional one is None); `keys` hold a hashable key
    per entry for the values decoded once per distinct key (`values`); `frames` maps each
    `frames` key to the list of frame dicts it stands for. `items` counts the shape
    dimensions, dtypes and frames of the entries, for the expansion check."""

    n: int
    ints: dict[str, npt.NDArray[np.int64]]
    keys: dict[str, list[Any]]
    values: dict[str, dict[Any, Any]]
    items: int = 0
    pg_ids: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return self.n

    def column(self, name: str) -> list[Any]:
        """Per-entry values of a keyed column."""
        values = self.values[name]
        return list(map(values.__getitem__, self.keys[name]))


# Keys of an entry and how their values are read by the entry expression.
_INT_BODY = (
    rb"K.|M..|J....|\x8a(?:\x00|\x01.|\x02..|\x03...|\x04....|\x05.{5}|\x06.{6}|\x07.{7}|\x08.{8})"
)
_REF_BODY = rb"h.|j...."
_VALUE = {
    "int": b"(" + _INT_BODY + b")",
    "optional int": b"(N|" + _INT_BODY + b")",
    "flag": rb"([\x88\x89N])",
    "ref": b"(" + _REF_BODY + b")",
    "refs": rb"(\]\((?:h.|j....)*+e)",
    "shapes": rb"(\]\((?:\]\((?:K.|M..|J....)*+e)*+e)",
    "pair": rb"((?:h.|j....)(?:h.|j....)\x86)",
    "float": rb"(N|G.{8})",
    "scalar": b"(N|[\\x88\\x89]|G.{8}|" + _REF_BODY + b"|" + _INT_BODY + b")",
}
_INT_KEYS = frozenset(
    {"record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "timeout_ms"}
    | {"time_created_ns"}
)
_OPTIONAL_INT_KEYS = frozenset({"time_discovered_started_ns", "time_discovered_completed_ns"})
_KIND = {
    **dict.fromkeys(_INT_KEYS, "int"),
    **dict.fromkeys(_OPTIONAL_INT_KEYS, "optional int"),
    "retired": "flag",
    "is_p2p": "flag",
    "profiling_name": "ref",
    "state": "ref",
    "thread_name": "ref",
    "thread_id": "ref",
    "frames": "refs",
    "input_dtypes": "refs",
    "output_dtypes": "refs",
    "input_sizes": "shapes",
    "output_sizes": "shapes",
    "process_group": "pair",
    "duration_ms": "float",
}
REQUIRED_KEYS = frozenset(_KIND) - {"duration_ms", "thread_name", "thread_id"}


@dataclass(frozen=True)
class _Layout:
    keys: tuple[str, ...]
    regex: re.Pattern[bytes]


_LAYOUTS: dict[tuple[tuple[str, int], ...], _Layout] = {}  # compiled, per process
_LAYOUTS_MOST = 64


def _layout(keys: Sequence[tuple[str, int]]) -> _Layout:
    """The expression reading one entry whose keys are these (name, memo slot) in order."""
    ident = tuple(keys)
    found = _LAYOUTS.get(ident)
    if found is None:
        parts = [rb"\}\("]
        for name, slot in keys:
            ref = b"h" + bytes([slot]) if slot < 256 else b"j" + slot.to_bytes(4, "little")
            parts.append(re.escape(ref) + _VALUE[_KIND.get(name, "scalar")])
        parts.append(b"u")
        if len(_LAYOUTS) >= _LAYOUTS_MOST:
            _LAYOUTS.clear()
        found = _LAYOUTS[ident] = _Layout(
            tuple(name for name, _ in keys), re.compile(b"".join(parts), re.DOTALL)
        )
    return found


class _Decoder:
    """Exact reader of the grammar, recursive over values. `memo` is shared with fragments."""

    def __init__(self, data: bytes, memo: list[Any], puts: bool = True) -> None:
        self.data = data
        self.memo = memo
        self.puts = puts  # fragments captured from entries hold no memo puts
        self.top_ref = -1  # highest memo slot referred to (fragments)
        self.slots: dict[str, int] = {}  # the memo slot of each memoized string

    def value(self, pos: int, depth: int = 0) -> tuple[Any, int]:
        data = self.data
        op = data[pos]
        pos += 1
        value: Any
        if op == _BINGET:  # the most frequent opcode first
            slot, pos = data[pos], pos + 1
            if slot > self.top_ref:
                self.top_ref = slot
            return self.memo[slot], pos  # IndexError past the memo; never put again
        if op == _LONG_BINGET:
            slot, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
            if slot > self.top_ref:
                self.top_ref = slot
            return self.memo[slot], pos  # IndexError past the memo; never put again
        if op in (_BINUNICODE, _SHORT_BINUNICODE):
            width = 4 if op == _BINUNICODE else 1
            size = int.from_bytes(data[pos : pos + width], "little")
            end = pos + width + size
            if end > len(data):
                raise _Outside
            value = data[pos + width : end].decode("utf-8", "surrogatepass")
            pos = end
        elif op == _BININT1:
            value, pos = data[pos], pos + 1
        elif op == _BININT2:
            value, pos = int.from_bytes(data[pos : pos + 2], "little"), pos + 2
        elif op == _BININT:
            value, pos = int.from_bytes(data[pos : pos + 4], "little", signed=True), pos + 4
        elif op == _LONG1:
            size = data[pos]
            if size > 8:
                raise _Outside
            value = int.from_bytes(data[pos + 1 : pos + 1 + size], "little", signed=True)
            pos += 1 + size
        elif op == _NONE:
            value = None
        elif op in (_TRUE, _FALSE):
            value = op == _TRUE
        elif op == _BINFLOAT:
            value, pos = struct.unpack(">d", data[pos : pos + 8])[0], pos + 8
        elif op in (_EMPTY_LIST, _EMPTY_DICT):
            if depth >= _MAX_DEPTH or data[pos] != _MARK:
                raise _Outside
            end = _APPENDS if op == _EMPTY_LIST else _SETITEMS
            items, pos = self.items(pos + 1, end, depth + 1)
            if op == _EMPTY_LIST:
                value = items
            else:
                if len(items) % 2:
                    raise _Outside
                keys = items[::2]
                if not all(type(k) is str or type(k) is int for k in keys):
                    raise _Outside  # no key whose hash could explode
                value = dict(zip(keys, items[1::2], strict=True))
            if data[pos] == _MARK:
                raise _Outside  # a second batch of items: Python's pickler, not torch's
        elif op == _EMPTY_TUPLE:
            value = ()
        else:
            raise _Outside
        if data[pos] in _PUTS:
            pos = self.put(value, pos)
        return value, pos

    def put(self, value: Any, pos: int) -> int:
        data = self.data
        width = 1 if data[pos] == _BINPUT else 4
        slot = int.from_bytes(data[pos + 1 : pos + 1 + width], "little")
        if not self.puts or slot != len(self.memo) or len(data) < pos + 1 + width:
            raise _Outside  # written out of order (or twice): not torch's pickler
        self.memo.append(value)
        if type(value) is str:
            self.slots.setdefault(value, slot)
        return pos + 1 + width

    def items(self, pos: int, end: int, depth: int) -> tuple[list[Any], int]:
        """Values up to the `end` opcode, with tuples built from the ones before them."""
        data = self.data
        items: list[Any] = []
        while True:
            op = data[pos]
            if op == end:
                return items, pos + 1
            if op in (_TUPLE1, _TUPLE2, _TUPLE3):
                size = op - _TUPLE1 + 1
                if len(items) < size:
                    raise _Outside
                items[-size:] = [self.scalars(items[-size:])]
                pos += 1
                if data[pos] in _PUTS:
                    pos = self.put(items[-1], pos)
            elif op == _MARK:
                inner, pos = self.items(pos + 1, _TUPLE, depth + 1)
                items.append(self.scalars(inner))
                if data[pos] in _PUTS:
                    pos = self.put(items[-1], pos)
            else:
                value, pos = self.value(pos, depth)
                items.append(value)

    @staticmethod
    def scalars(items: list[Any]) -> tuple[Any, ...]:
        if not all(type(v) in _SCALARS for v in items):
            raise _Outside  # a tuple of containers could be a hash bomb
        return tuple(items)

    def fragment(self, data: bytes) -> tuple[Any, int]:
        """One captured value decoded with this decoder's memo, and the highest memo slot it
        refers to (-1 if none)."""
        reader = _Decoder(data + b".", self.memo, puts=False)
        found, pos = reader.items(0, _STOP, 0)
        if len(found) != 1 or pos != len(data) + 1:
            raise _Outside
        return found[0], reader.top_ref


@dataclass
class Decoded:
    """A decoded dump: the top-level dict, with the entries as columns."""

    header: dict[str, Any]
    entries: EntryColumns


def decode(data: bytes) -> Decoded | None:
    """The dump, or None when the bytes are not in the form torch writes (the general path
    reads them then, and reports what is wrong with them)."""
    if data[:4] != b"\x80\x02}(":
        return None
    try:
        return _decode(data)
    except (_Outside, IndexError, UnicodeDecodeError, struct.error, RecursionError):
        return None


def _decode(data: bytes) -> Decoded | None:
    reader = _Decoder(data, [])
    pos = 4
    header: dict[str, Any] = {}
    entries: EntryColumns | None = None
    while data[pos] != _SETITEMS:
        key, pos = reader.value(pos)
        if type(key) is not str:
            raise _Outside
        if key != "entries":
            header[key], pos = reader.value(pos)
        elif data[pos : pos + 2] == b"](" and entries is None:
            entries, pos = _entries(reader, pos + 2)
            if data[pos] in _PUTS or data[pos] == _MARK:
                raise _Outside
        else:
            raise _Outside
    pos += 1
    if data[pos] in _PUTS:  # torch memoizes the top-level dict too; nothing refers to it
        pos = reader.put(None, pos)
    if pos + 1 != len(data) or data[pos] != _STOP or entries is None:
        return None
    return Decoded(header, entries)


@dataclass
class _Slow:
    """An entry the decoder read: its row, and the memo size after it."""

    row: int
    entry: dict[str, Any]
    memo_size: int


def _entries(reader: _Decoder, pos: int) -> tuple[EntryColumns, int]:
    """Read the entry list from just after its `](` to just after its `e`.

    The decoder reads entries until one gives a layout; the layout's expression then splits
    the rest of the file in one call. What lies between two of its matches must be whole
    entries (ones holding a first definition), which the decoder reads; after the last match
    come the last such entries and the list's end."""
    data = reader.data
    slow: list[_Slow] = []
    first_memo = len(reader.memo)
    layout: _Layout | None = None
    while layout is None and data[pos] != _APPENDS:
        pos = _slow_entry(reader, pos, slow, 0)
        slots = [(key, reader.slots.get(key, -1)) for key in slow[-1].entry]
        if all(slot >= 0 for _, slot in slots):
            layout = _layout(slots)
    captured: dict[str, list[bytes]] = {}
    fast = 0
    if layout is not None and data[pos] != _APPENDS:
        parts = layout.regex.split(data[pos:])
        stride = layout.regex.groups + 1
        fast = (len(parts) - 1) // stride
        gaps = parts[::stride]
        for k in itertools.compress(range(fast), gaps):  # entries between matches
            gap = _Decoder(gaps[k] + b"e", reader.memo)  # the byte after it: a lookahead
            gap.slots = reader.slots
            at = 0
            while at < len(gaps[k]):
                at = _slow_entry(gap, at, slow, k)
            if at != len(gaps[k]):
                raise _Outside
        pos = len(data) - len(gaps[-1])
        captured = {name: parts[i + 1 :: stride] for i, name in enumerate(layout.keys)}
    while data[pos] != _APPENDS:
        pos = _slow_entry(reader, pos, slow, fast)
    columns = _columns(reader, captured, fast, slow, first_memo)
    return columns, pos + 1


def _slow_entry(reader: _Decoder, pos: int, slow: list[_Slow], fast_before: int) -> int:
    """Read one entry with the decoder; `fast_before` entries read by the expression come
    before it."""
    if len(slow) >= _MAX_SLOW_ENTRIES:
        raise _Outside
    entry, pos = reader.value(pos)
    if type(entry) is not dict or not entry.keys() >= REQUIRED_KEYS:
        raise _Outside
    slow.append(_Slow(fast_before + len(slow), entry, len(reader.memo)))
    return pos


_INT_COLUMNS = tuple(sorted(_INT_KEYS | _OPTIONAL_INT_KEYS))
_KEYED = (
    "process_group",
    "profiling_name",
    "state",
    "retired",
    "is_p2p",
    "duration_ms",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "frames",
)
_LISTS = frozenset({"input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "frames"})


def _columns(
    reader: _Decoder,
    captured: dict[str, list[bytes]],
    nfast: int,
    slow: list[_Slow],
    first_memo: int,
) -> EntryColumns:
    ints = _int_columns(captured, nfast, slow)
    keys, values, items = _value_columns(reader, captured, nfast, slow, first_memo)
    return EntryColumns(nfast + len(slow), ints, keys, values, items, ints["pg_id"].tolist())


def _int_columns(
    captured: dict[str, list[bytes]], nfast: int, slow: list[_Slow]
) -> dict[str, npt.NDArray[np.int64]]:
    """The integer columns: the expression-read entries' decoded at once, the others set."""
    n = nfast + len(slow)
    is_fast = np.ones(n, dtype=bool)
    is_fast[[s.row for s in slow]] = False
    ints: dict[str, npt.NDArray[np.int64]] = {}
    decoded_ints = _decode_ints([captured[name] for name in _INT_COLUMNS]) if nfast else None
    for i, name in enumerate(_INT_COLUMNS):
        column = np.empty(n, dtype=np.int64)
        if decoded_ints is not None:
            column[is_fast] = decoded_ints[i]
        for s in slow:
            value = s.entry.get(name)
            if value is None and name in _OPTIONAL_INT_KEYS:
                value = -1
            if type(value) is not int or not -(1 << 63) < value < (1 << 63):
                raise _Outside  # an odd value: the careful path names it
            column[s.row] = value
        ints[name] = column
    return ints


def _value_columns(
    reader: _Decoder,
    captured: dict[str, list[bytes]],
    nfast: int,
    slow: list[_Slow],
    first_memo: int,
) -> tuple[dict[str, list[Any]], dict[str, dict[Any, Any]], int]:
    """Per column: a key per entry, each distinct key's value, and the items they hold."""
    slow_rows = [s.row for s in slow]
    # Memo slots written after the first expression-read entry: an entry may refer to one
    # only if the entry comes after the one that wrote it.
    written = [(s.memo_size, s.row) for s in slow if s.memo_size > first_memo]
    keys: dict[str, list[Any]] = {}
    values: dict[str, dict[Any, Any]] = {}
    items = 0
    others = [k for k in captured if k not in _KEYED and k not in _INT_COLUMNS]  # thread names
    for name in _KEYED + tuple(others):
        caps = captured.get(name)
        decoded: dict[Any, Any] = {}
        if caps is not None:
            late: dict[bytes, int] = {}  # captures referring to slots written among the entries
            for raw in dict.fromkeys(caps):
                value, top = reader.fragment(raw)
                decoded[raw] = value
                if top >= first_memo:
                    late[raw] = top
            if late:
                _check_first_uses(caps, late, written, slow_rows)
            column: list[Any] = list(caps)
        else:
            decoded[None] = None  # not in the layout (duration_ms, say)
            column = [None] * nfast
        for s in slow:
            value = s.entry.get(name)
            decoded[("decoded", s.row)] = value
            column.insert(s.row, ("decoded", s.row))
            if name in _LISTS:
                items += _items(value)
        keys[name] = column
        values[name] = decoded
        if caps is not None and name in _LISTS:
            items += sum(map(len, caps))  # linear in their bytes: at most one item per byte
    return keys, values, items


def _items(value: Any) -> int:
    """Shapes and dimensions (or dtypes, or frames) that a value read by the decoder holds."""
    if not isinstance(value, list):
        return 0
    return len(value) + sum(len(v) for v in value if isinstance(v, list))


def _check_first_uses(
    caps: list[bytes],
    late: dict[bytes, int],
    written: list[tuple[int, int]],
    slow_rows: list[int],
) -> None:
    """Captures of expression-read entries that refer to memo slots written among the entries
    (`late`: capture -> highest slot): the first entry with each must come after the entry that
    wrote the slot (memo sizes only grow, so the first use is the one to check). Linear in the
    entries whatever the number of such captures."""
    if len(late) <= _FEW_LATE:
        first = {raw: caps.index(raw) for raw in late}
    else:
        first = {}
        for i, raw in enumerate(caps):
            if raw in late:
                first.setdefault(raw, i)
    before = [row - i for i, row in enumerate(slow_rows)]  # expression-read entries before each
    sizes = [size for size, _ in written]  # memo size after each writing entry, growing
    for raw, top in late.items():
        row = first[raw] + bisect.bisect_right(before, first[raw])
        at = bisect.bisect_right(sizes, top)  # the entry that wrote slot `top`
        if at == len(written) or written[at][1] > row:
            raise _Outside


def _decode_ints(columns: Sequence[Sequence[bytes]]) -> npt.NDArray[np.int64]:
    """Integer columns from their pickled bytes (BININT1/2, BININT, LONG1 of up to 8 bytes;
    NONE gives -1), all at once: one row per column."""
    n = sum(map(len, columns))
    sizes = np.fromiter(map(len, itertools.chain.from_iterable(columns)), np.int64, n)
    buf = np.frombuffer(b"".join(itertools.chain.from_iterable(columns)) + bytes(10), np.uint8)
    starts = np.cumsum(sizes) - sizes
    ops = buf[starts]
    long1 = ops == _LONG1
    width = np.where(long1, buf[starts + 1], _WIDTH[ops])
    first = starts + 1 + long1
    grid = buf[first[:, None] + np.arange(8)]
    grid[np.arange(8) >= width[:, None]] = 0
    raw = grid.view("<u8").ravel()
    values: npt.NDArray[np.int64] = raw.view(np.int64).copy()
    signed = _SIGN[ops] & (width > 0) & (width < 8)
    if signed.any():
        bits = np.uint64(8) * width[signed].astype(np.uint64)
        top = np.uint64(1) << (bits - np.uint64(1))
        negative = (raw[signed] & top) != 0
        full = (np.uint64(1) << bits).view(np.int64)
        values[signed] = np.where(negative, values[signed] - full, values[signed])
    values[ops == _NONE] = -1
    return values.reshape(len(columns), -1)


_WIDTH = np.zeros(256, dtype=np.int64)
_WIDTH[[_BININT1, _BININT2, _BININT]] = (1, 2, 4)
_SIGN = np.zeros(256, dtype=bool)
_SIGN[[_BININT, _LONG1]] = True
