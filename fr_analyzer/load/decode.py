"""Decode a dump written the way torch's pickler writes it straight into entry columns.

The general path (`reading`) walks every opcode to refuse bombs, then lets the unpickler build
some 100k small objects that normalization reads once and frees. A torch-written dump is far
more regular than a pickle can be: protocol 2; each string written once and memoized, later
referred to by its memo slot; each shared frame dict memoized once complete; slots numbered in
order; and every entry a dict with the same keys in the same order. So:

- a small exact decoder (`_Decoder`) reads the header and the first entry, and any entry
  outside the layout;
- the layout of the first entry (its keys' memo slots, in order) becomes one compiled regular
  expression that reads each later entry of that layout in one step. It captures runs of
  adjacent keys: a run of keys whose values differ from entry to entry (record and sequence
  ids, timestamps: integers), or a run of keys whose values repeat (group, op, shapes, dtypes,
  stack, state, flags). A repeating run may hold first definitions (a new string or frame
  dict, with its memo put);
- integer runs are read with numpy, a run's n-th integers of every entry at once; equal bytes
  mean equal values (memo slots are written once, in order, and only before the entries that
  refer to them), so each distinct capture of a repeating run is decoded once, in file order
  (`_in_order`: the memo is filled as the unpickler fills it), and its columns share one code
  per entry.

The grammar has no global, no memo put out of order, no tuple holding a container, and dict
keys are only strings or ints: none of the bombs the opcode scan guards against can be written
in it, so a file it accepts needs no scan. Anything outside it (other protocols, Python's own
pickler, odd values) gives None, and the file takes the general path.
"""

from __future__ import annotations

import itertools
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .schema import ENTRY_KEYS, REQUIRED_KEYS, VARYING_KEYS, Kind, keys_of

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


class _Outside(Exception):
    """The bytes leave the grammar: the general path reads the file."""


class Undecodable(Exception):
    """Decoded entries hold something only the careful per-entry path reads, and it needs them
    as dicts: the file is read again the general way."""


@dataclass
class EntryColumns:
    """A rank's entries as columns, one value per entry and column.

    `ints` hold the integer columns (-1 where an optional one is None). `coded` holds each
    other column as a code per entry and the value each code stands for. Every coded column
    shares one code array, dense and in order of first appearance: an entry's combination of
    repeating captures (or its own code, for an entry read exactly), so two codes may stand
    for equal values. `items` counts the shapes, dimensions, dtypes and frames of the entries,
    for the expansion check."""

    n: int
    ints: dict[str, npt.NDArray[np.int64]]
    coded: dict[str, tuple[npt.NDArray[np.int32], list[Any]]]
    items: int = 0

    def __len__(self) -> int:
        return self.n


# How the entry expression reads the value of each key.
_INT_BODY = (
    rb"K.|M..|J....|\x8a(?:\x00|\x01.|\x02..|\x03...|\x04....|\x05.{5}|\x06.{6}|\x07.{7}|\x08.{8})"
)
_REF_BODY = rb"h.|j...."
# A string first written inside an entry (a new op name or frame): BINUNICODE of up to 255
# bytes, then its memo put. And a frame dict first written inside an entry's frames: its keys
# and values references, new strings or integers, then its memo put.
_PUT = rb"(?:q.|r....)"
_TEXT = (
    b"X(?:"
    + b"|".join(re.escape(bytes([n])) + b"\x00\x00\x00.{%d}" % n for n in range(256))
    + b")"
    + _PUT
)
_REF_OR_TEXT = _REF_BODY + b"|" + _TEXT
_FRAME = _REF_BODY + rb"|\}\((?:" + _REF_OR_TEXT + b"|N|" + _INT_BODY + rb")*+u" + _PUT
_BODY = {
    "int": _INT_BODY,
    "optional int": b"N|" + _INT_BODY,
    "flag": rb"[\x88\x89N]",
    "ref": _REF_OR_TEXT,
    "refs": rb"\]\((?:" + _REF_OR_TEXT + rb")*+e",
    "frames": rb"\]\((?:" + _FRAME + rb")*+e",
    "shapes": rb"\]\((?:\]\((?:" + _INT_BODY + rb")*+e)*+e",  # a dimension past 2**31: LONG1
    "pair": rb"(?:" + _REF_OR_TEXT + rb")(?:" + _REF_OR_TEXT + rb")\x86",
    "float": rb"N|G.{8}",
    "scalar": b"N|[\\x88\\x89]|G.{8}|" + _REF_BODY + b"|" + _INT_BODY,
}
_INT_KEYS = keys_of(Kind.INT)
_OPTIONAL_INT_KEYS = keys_of(Kind.OPTIONAL_INT)
# Keys whose values differ from entry to entry (`Key.varying`): their runs are read as integers
# with numpy. The values of the other keys repeat, and a run of them is decoded once per
# distinct bytes.
_VARYING = VARYING_KEYS
_BODY_OF_KIND = {
    Kind.INT: "int",
    Kind.OPTIONAL_INT: "optional int",
    Kind.FLAG: "flag",
    Kind.TEXT: "ref",
    Kind.SCALAR: "ref",  # thread name and id: strings, as torch writes them
    Kind.TEXTS: "refs",
    Kind.FRAMES: "frames",
    Kind.SHAPES: "shapes",
    Kind.PAIR: "pair",
    Kind.FLOAT: "float",
}
_KIND = {key.name: _BODY_OF_KIND[key.kind] for key in ENTRY_KEYS}


@dataclass(frozen=True)
class _Run:
    """Adjacent keys of a layout read by one capture: the bytes of the first value, then the
    key reference and value of each next key (`refs`: each such reference's length)."""

    names: tuple[str, ...]
    varying: bool
    refs: tuple[int, ...]


@dataclass(frozen=True)
class _Layout:
    runs: tuple[_Run, ...]
    regex: re.Pattern[bytes]


# How Python's pickler (protocols 4 and 5) writes the same values: every list, dict and tuple
# is memoized (MEMOIZE, no slot number: equal values stay equal bytes), a list of one item is
# appended alone (APPEND), and a list, tuple or frames list met before is a memo reference.
_PY_INTS = b"(?:" + _INT_BODY + b")"
_PY_SHAPE = rb"(?:\]\x94(?:\(" + _PY_INTS + rb"++e|" + _PY_INTS + rb"a)?|" + _REF_BODY + rb")"
# A string written again (another object of the same value: some writers build one per
# entry), or first written inside an entry, instead of referred to: SHORT_BINUNICODE (up to
# 255 bytes), then MEMOIZE.
_PY_TEXT = (
    b"\x8c(?:" + b"|".join(re.escape(bytes([n])) + b".{%d}" % n for n in range(256)) + b")\x94"
)
_PY_REF_OR_TEXT = _REF_BODY + b"|" + _PY_TEXT
# A frame dict first written inside an entry's frames (Python's pickler writes each distinct
# frame once, where it is first met): its keys and values references, new strings or integers.
_PY_FRAME = _REF_BODY + rb"|\}\x94\((?:" + _PY_REF_OR_TEXT + b"|N|" + _INT_BODY + rb")*+u"
_PY_BODY = _BODY | {
    "ref": _PY_REF_OR_TEXT,
    "scalar": _BODY["scalar"] + b"|" + _PY_TEXT,
    "refs": rb"\]\x94(?:\((?:"
    + _PY_REF_OR_TEXT
    + rb")++e|(?:"
    + _PY_REF_OR_TEXT
    + rb")a)?|"
    + _REF_BODY,
    "frames": rb"\]\x94(?:\((?:" + _PY_FRAME + rb")++e|(?:" + _PY_FRAME + rb")a)?|" + _REF_BODY,
    "shapes": rb"\]\x94(?:\(" + _PY_SHAPE + rb"++e|" + _PY_SHAPE + rb"a)?|" + _REF_BODY,
    # The reference first: it is what every entry but the first holds, and tried second it
    # would cost a failed tuple on each.
    "pair": _REF_BODY + rb"|(?:" + _PY_REF_OR_TEXT + rb")(?:" + _PY_REF_OR_TEXT + rb")\x86\x94",
}
# An entry of Python's: its dict memoized. The entry list's batch boundaries (Python's pickler
# appends a thousand items at a time) are left between two matches, where the exact reader
# takes them: an expression that began with an optional boundary would be tried at every byte,
# where one that begins with a fixed string is only tried where that string is (10% of a split).
_START = {False: rb"\}\(", True: rb"\}\x94\("}

_LAYOUTS: dict[tuple[bool, tuple[tuple[str, int], ...]], _Layout] = {}  # compiled, per process
_LAYOUTS_MOST = 64


def _layout(keys: Sequence[tuple[str, int]], python: bool = False) -> _Layout:
    """The expression reading one entry whose keys are these (name, memo slot) in order: one
    capture per run of varying keys or of repeating ones; as torch's pickler writes it, or
    (`python`) as Python's does."""
    ident = (python, tuple(keys))
    bodies = _PY_BODY if python else _BODY
    found = _LAYOUTS.get(ident)
    if found is None:
        parts = [_START[python]]
        runs: list[_Run] = []
        for varying, group in itertools.groupby(keys, lambda key: key[0] in _VARYING):
            names: list[str] = []
            refs: list[int] = []
            for name, slot in group:
                ref = b"h" + bytes([slot]) if slot < 256 else b"j" + slot.to_bytes(4, "little")
                body = b"(?:" + bodies[_KIND.get(name, "scalar")] + b")"
                if names:
                    parts.append(re.escape(ref) + body)
                    refs.append(len(ref))
                else:
                    parts.append(re.escape(ref) + b"(" + body)
                names.append(name)
            parts.append(b")")
            runs.append(_Run(tuple(names), varying, tuple(refs)))
        parts.append(b"u")
        if len(_LAYOUTS) >= _LAYOUTS_MOST:
            _LAYOUTS.clear()
        found = _LAYOUTS[ident] = _Layout(tuple(runs), re.compile(b"".join(parts), re.DOTALL))
    return found


class _Decoder:
    """Exact reader of the grammar, recursive over values. `memo` is shared with fragments."""

    def __init__(self, data: bytes, memo: list[Any]) -> None:
        self.data = data
        self.memo = memo
        self.slots: dict[str, int] = {}  # the memo slot of each memoized string

    def fragment(self, data: bytes) -> _Decoder:
        """A decoder over other bytes (a capture, a gap) with this one's memo and slots."""
        reader = _Decoder(data, self.memo)
        reader.slots = self.slots
        return reader

    def value(self, pos: int, depth: int = 0) -> tuple[Any, int]:
        data = self.data
        op = data[pos]
        pos += 1
        value: Any
        if op == _BINGET:  # the most frequent opcode first
            slot, pos = data[pos], pos + 1
            return self.memo[slot], pos  # IndexError past the memo; never put again
        if op == _LONG_BINGET:
            slot, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
            return self.memo[slot], pos  # IndexError past the memo; never put again
        if op in (_BINUNICODE, _SHORT_BINUNICODE):
            width = 4 if op == _BINUNICODE else 1
            size = int.from_bytes(data[pos : pos + width], "little")
            end = pos + width + size
            if end > len(data):
                raise _Outside("a string runs past the end")
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
                raise _Outside("an integer wider than 8 bytes")
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
                raise _Outside("containers nested too deeply")
            end = _APPENDS if op == _EMPTY_LIST else _SETITEMS
            items, pos = self.items(pos + 1, end, depth + 1)
            if op == _EMPTY_LIST:
                value = items
            else:
                if len(items) % 2:
                    raise _Outside("a dict with an odd number of items")
                keys = items[::2]
                if not all(type(k) is str or type(k) is int for k in keys):
                    raise _Outside(
                        "a dict key that is not a string or an integer"
                    )  # no key whose hash could explode
                value = dict(zip(keys, items[1::2], strict=True))
            if data[pos] == _MARK:
                raise _Outside(
                    "a second batch of items (Python's pickler writes those)"
                )  # a second batch of items: Python's pickler, not torch's
        elif op == _EMPTY_TUPLE:
            value = ()
        else:
            raise _Outside("an opcode torch's pickler does not write")
        if data[pos] in _PUTS:
            pos = self.put(value, pos)
        return value, pos

    def entry(self, pos: int) -> tuple[Any, int]:
        return self.value(pos)

    def put(self, value: Any, pos: int) -> int:
        data = self.data
        width = 1 if data[pos] == _BINPUT else 4
        slot = int.from_bytes(data[pos + 1 : pos + 1 + width], "little")
        if slot != len(self.memo) or len(data) < pos + 1 + width:
            raise _Outside(
                "a memo slot written out of order (not torch's pickler)"
            )  # written out of order (or twice): not torch's pickler
        self.memo.append(value)
        if type(value) is str:
            self.slots.setdefault(value, slot)
        return pos + 1 + width

    def items(self, pos: int, end: int, depth: int) -> tuple[list[Any], int]:
        """Values up to the `end` opcode, with tuples built from the ones before them."""
        data, memo = self.data, self.memo
        items: list[Any] = []
        while True:
            op = data[pos]
            if op == _BINGET:  # as in `value`, inline: most items are memo references
                items.append(memo[data[pos + 1]])
                pos += 2
            elif op == _LONG_BINGET:
                items.append(memo[int.from_bytes(data[pos + 1 : pos + 5], "little")])
                pos += 5
            elif op == end:
                return items, pos + 1
            elif op in (_TUPLE1, _TUPLE2, _TUPLE3):
                size = op - _TUPLE1 + 1
                if len(items) < size:
                    raise _Outside("a tuple with too few items")
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
            raise _Outside(
                "a tuple holding a container"
            )  # a tuple of containers could be a hash bomb
        return tuple(items)

    def run(self, data: bytes, size: int) -> list[Any]:
        """The values of a run of `size` keys captured from an entry (value, key reference,
        value, ...), decoded with this decoder's memo (it may write the next memo slots)."""
        found, pos = self.fragment(data + b".").items(0, _STOP, 0)
        if len(found) != 2 * size - 1 or pos != len(data) + 1:
            raise _Outside("a run of keys that is not whole")
        return found[::2]


@dataclass
class Decoded:
    """A decoded dump: the top-level dict, with the entries as columns."""

    header: dict[str, Any]
    entries: EntryColumns


def decode(data: bytes) -> Decoded | None:
    """The dump, or None when the bytes are not in the form torch writes (the general path
    reads them then, and reports what is wrong with them)."""
    found = decode_or_why(data)
    return found if isinstance(found, Decoded) else None


def decode_or_why(data: bytes) -> Decoded | str:
    """The dump, or why the bytes are not in the form torch writes."""
    if data[:2] != b"\x80\x02":
        if data[:1] == b"\x80" and len(data) > 1:
            return f"pickle protocol {data[1]}: not torch's pickle layout (protocol 2)"
        return "not torch's pickle layout"
    if data[2:4] != b"}(":
        return "not torch's pickle layout (the top level is not a dict)"
    try:
        found = _decode(data)
    except _Outside as exc:
        return f"torch's pickle layout, but {exc.args[0] if exc.args else 'not read'}"
    except (IndexError, UnicodeDecodeError, struct.error, RecursionError) as exc:
        return f"torch's pickle layout, but malformed ({type(exc).__name__})"
    return found if found is not None else "torch's pickle layout, but not ending where it should"


def _decode(data: bytes) -> Decoded | None:
    reader = _Decoder(data, [])
    pos = 4
    header: dict[str, Any] = {}
    entries: EntryColumns | None = None
    while data[pos] != _SETITEMS:
        key, pos = reader.value(pos)
        if type(key) is not str:
            raise _Outside("a top-level key that is not a string")
        if key != "entries":
            header[key], pos = reader.value(pos)
        elif data[pos : pos + 2] == b"](" and entries is None:
            entries, pos = _entries(reader, pos + 2)
            if data[pos] in _PUTS or data[pos] == _MARK:
                raise _Outside("a second entry list")
        else:
            raise _Outside("entries that are not a list")
    pos += 1
    if data[pos] in _PUTS:  # torch memoizes the top-level dict too; nothing refers to it
        pos = reader.put(None, pos)
    if pos + 1 != len(data) or data[pos] != _STOP or entries is None:
        return None
    return Decoded(header, entries)


@dataclass
class _Slow:
    """An entry the decoder read, and its row."""

    row: int
    entry: dict[str, Any]


def _entries(reader: _Decoder, pos: int) -> tuple[EntryColumns, int]:
    """Read the entry list from just after its `](` to just after its `e`.

    The decoder reads entries until one gives a layout; the layout's expression then splits
    the rest of the file in one call. What lies between two of its matches must be whole
    entries (of another layout), which the decoder reads; after the last match come the last
    such entries and the list's end."""
    data = reader.data
    slow: list[_Slow] = []
    layout: _Layout | None = None
    while layout is None and data[pos] != _APPENDS:
        pos = _slow_entry(reader, pos, slow, 0)
        slots = [(key, reader.slots.get(key, -1)) for key in slow[-1].entry]
        if all(slot >= 0 for _, slot in slots):
            layout = _layout(slots)
    captured: list[list[bytes]] = []
    fast = 0
    combos = None
    if layout is not None and data[pos] != _APPENDS:
        parts = layout.regex.split(data[pos:])
        stride = len(layout.runs) + 1
        fast = (len(parts) - 1) // stride
        gaps = parts[::stride]
        captured = [parts[i + 1 :: stride] for i in range(len(layout.runs))]
        if fast:
            combos = _in_order(reader, layout.runs, gaps, captured, slow)
        pos = len(data) - len(gaps[-1])
    while data[pos] != _APPENDS:
        pos = _slow_entry(reader, pos, slow, fast)
    runs = layout.runs if layout is not None and fast else ()
    columns = _Columns(reader, fast, slow).build(zip(runs, captured, strict=False), combos)
    return columns, pos + 1


def _in_order(
    reader: _Decoder,
    runs: Sequence[_Run],
    gaps: list[bytes],
    captured: list[list[bytes]],
    slow: list[_Slow],
) -> Combos:
    """The repeating runs' combinations, decoded in the order of the file: the entries between
    matches (`gaps`, read exactly), and each capture where it is first met (in the first entry
    with its combination). Torch numbers its memo slots in order, and an entry may write some
    (a new string or frame inside it), so the memo is filled in that order, and a slot is
    referred to only once written. A capture that writes slots is met once: met again, it
    would write them twice, which torch never does."""
    order = file_order(runs, gaps, captured)
    repeating, firsts, code_list = order.repeating, order.firsts, order.codes.tolist()
    entries = np.bincount(order.codes, minlength=len(firsts)).tolist()
    values: list[list[list[Any]]] = [[] for _ in firsts]
    known: dict[tuple[int, bytes], list[Any]] = {}
    writes: set[tuple[int, bytes]] = set()  # captures that wrote memo slots
    memo = reader.memo
    for k in order.visits:
        if gaps[k]:  # entries between matches
            gap = reader.fragment(gaps[k] + b"e")  # the byte after it: a lookahead
            at = 0
            while at < len(gaps[k]):
                at = _slow_entry(gap, at, slow, k)
            if at != len(gaps[k]):
                raise _Outside("an entry read outside its layout")
        code = code_list[k]
        if firsts[code] != k:
            continue
        for i in repeating:
            key = (i, captured[i][k])
            hit = known.get(key)
            if hit is None:
                size = len(memo)
                hit = known[key] = reader.run(key[1], len(runs[i].names))
                if len(memo) > size:
                    writes.add(key)
                    if entries[code] > 1:
                        raise _Outside("a memo slot written twice")
            elif key in writes:
                raise _Outside("a memo slot written twice")
            values[code].append(hit)
    return Combos(order.distinct, order.codes, values)


@dataclass(frozen=True)
class FileOrder:
    """Where the pickle decoders stop, in file order, among the expression-read entries: at
    the first entry with each combination of repeating captures (which decodes them), and at
    each entry with entries of another layout just before it (`gaps`)."""

    repeating: list[int]  # the repeating runs, by index
    distinct: list[tuple[bytes, ...]]  # the combinations, in order of first appearance
    codes: npt.NDArray[np.int32]  # each entry's combination
    firsts: list[int]  # each combination's first entry
    visits: list[int]  # the entries to stop at, in order


def file_order(runs: Sequence[_Run], gaps: list[bytes], captured: list[list[bytes]]) -> FileOrder:
    """`FileOrder` for the expression's entries: their runs, the gaps before them (one more:
    the tail), and their captures per run."""
    fast = len(gaps) - 1
    repeating = [i for i, run in enumerate(runs) if not run.varying]
    distinct, codes = combination_codes([captured[i] for i in repeating], fast)
    first = np.full(len(distinct), fast, dtype=np.int64)
    first[codes[::-1]] = np.arange(fast - 1, -1, -1)  # the last write is the first
    firsts = first.tolist()
    visits = sorted({*firsts, *itertools.compress(range(fast), gaps)})
    return FileOrder(repeating, distinct, codes, firsts, visits)


class ExactReader(Protocol):
    """What reads the bytes exactly, with the dump's memo: `_Decoder` for torch's layout,
    `decode_python._Machine` for Python's."""

    memo: list[Any]

    def entry(self, pos: int) -> tuple[Any, int]:
        """The entry dict that starts at `pos`, and the position after it."""
        ...

    def run(self, data: bytes, size: int) -> list[Any]:
        """The values of a captured run of `size` keys."""
        ...


def _slow_entry(reader: ExactReader, pos: int, slow: list[_Slow], fast_before: int) -> int:
    """Read one entry exactly; `fast_before` entries read by the expression come before it."""
    if len(slow) >= _MAX_SLOW_ENTRIES:
        raise _Outside("too many entries outside the layout (over 256)")
    entry, pos = reader.entry(pos)
    keep_slow(entry, slow, fast_before)
    return pos


def keep_slow(entry: Any, slow: list[_Slow], fast_before: int) -> None:
    """Keep an entry read exactly (not by the expression), in its row; at most 256 of them."""
    if len(slow) >= _MAX_SLOW_ENTRIES:
        raise _Outside("too many entries outside the layout (over 256)")
    if type(entry) is not dict or not entry.keys() >= REQUIRED_KEYS:
        raise _Outside("an entry that lacks a required key")
    slow.append(_Slow(fast_before + len(slow), entry))


# The varying runs' captures with the lengths of the key references between their integers,
# and their integers read: per run, a column per key.
_VaryingRuns = Sequence[tuple[Sequence[bytes], Sequence[int]]]
_IntRuns = list[list[npt.NDArray[np.int64]]]

_INT_COLUMNS = tuple(sorted(_INT_KEYS | _OPTIONAL_INT_KEYS))
_CODED = tuple(
    key.name for key in ENTRY_KEYS if key.kind not in (Kind.INT, Kind.OPTIONAL_INT, Kind.SCALAR)
)
_LISTS = keys_of(Kind.SHAPES, Kind.TEXTS, Kind.FRAMES)


class _Columns:
    """Builds a rank's `EntryColumns` from the captures of the expression-read entries (in
    order, with gaps where the decoder-read entries go) and the decoder-read entries.

    Every column the repeating runs give is a function of an entry's combination of repeating
    captures (a few dozen distinct ones a rank), so those columns share one code array: each
    entry's combination, and the decoder-read entries one code each. Their values are built
    per combination, and nothing per entry but that one code array."""

    def __init__(self, reader: ExactReader, nfast: int, slow: list[_Slow]) -> None:
        self.reader = reader
        self.n = nfast + len(slow)
        self.slow = slow
        self.slow_rows = [s.row for s in slow]
        self.is_fast = np.ones(self.n, dtype=bool)
        self.is_fast[self.slow_rows] = False
        self.ints: dict[str, npt.NDArray[np.int64]] = {}
        self.coded: dict[str, tuple[npt.NDArray[np.int32], list[Any]]] = {}
        self.items = 0

    def build(
        self,
        runs: Iterable[tuple[_Run, list[bytes]]],
        combos: Combos | None = None,
        ints: Callable[[_VaryingRuns], _IntRuns] | None = None,
    ) -> EntryColumns:
        """`combos`: the repeating runs' captures already coded together, and decoded (by
        the caller, which needs them in order: Python's pickler memoizes inside entries).
        `ints`: what reads the varying runs' integers (pickled ones, by default)."""
        varying: list[tuple[_Run, list[bytes]]] = []
        repeating: list[tuple[_Run, list[bytes]]] = []
        for run, caps in runs:
            (varying if run.varying else repeating).append((run, caps))
        nfast = self.n - len(self.slow)
        if combos is None:
            combos = self.decoded_combos(repeating, nfast)
        self.combination_columns([run for run, _ in repeating], combos)
        if varying:
            read = (ints or _run_ints)([(caps, run.refs) for run, caps in varying])
            for (run, _), columns in zip(varying, read, strict=True):
                for name, values in zip(run.names, columns, strict=True):
                    self.int_column(name, values)
        for name in _INT_COLUMNS:
            if name not in self.ints:  # in every entry's layout: only when no entry has one
                if nfast:
                    raise _Outside("an entry without an integer key the others have")
                self.int_column(name, np.empty(0, dtype=np.int64))
        return EntryColumns(self.n, self.ints, self.coded, self.items)

    def decoded_combos(self, repeating: list[tuple[_Run, list[bytes]]], nfast: int) -> Combos:
        """The distinct combinations of the repeating runs' captures, each entry's, and each
        combination's values: each distinct capture of a run is decoded once. For readers
        without a memo (JSON): the pickle decoders decode their captures in file order
        (`_in_order`, `decode_python._replay`)."""
        distinct, codes = combination_codes([caps for _, caps in repeating], nfast)
        values: list[list[list[Any]]] = [[] for _ in distinct]
        for i, (run, _) in enumerate(repeating):
            parts, part_of = distinct_codes([combo[i] for combo in distinct])
            decoded = [self.reader.run(raw, len(run.names)) for raw in parts]
            for combo, part in enumerate(part_of.tolist()):
                values[combo].append(decoded[part])
        return Combos(distinct, codes, values)

    def int_column(self, name: str, fast: npt.NDArray[np.int64]) -> None:
        column = np.empty(self.n, dtype=np.int64)
        column[self.is_fast] = fast
        for s in self.slow:
            value = s.entry.get(name)
            if value is None and name in _OPTIONAL_INT_KEYS:
                value = -1
            if type(value) is not int or not -(1 << 63) < value < (1 << 63):
                raise _Outside(
                    "an integer key holding something else"
                )  # an odd value: the careful path names it
            column[s.row] = value
        self.ints[name] = column

    def combination_columns(self, runs: Sequence[_Run], combos: Combos) -> None:
        """The columns of the repeating runs' keys (and None for a coded key no layout has):
        one code per entry, shared by every such column (its combination, or a code of its
        own for a decoder-read entry, numbered in order of first appearance), and each code's
        value per column."""
        ncombo, nslow = len(combos.values), len(self.slow)
        codes = np.empty(self.n, dtype=np.int32)
        codes[self.is_fast] = combos.codes
        codes[self.slow_rows] = np.arange(ncombo, ncombo + nslow, dtype=np.int32)
        order = None
        if nslow and ncombo:  # codes in order of first appearance, as the entries have them
            first = np.empty(ncombo + nslow, dtype=np.int64)
            first[codes[::-1]] = np.arange(self.n - 1, -1, -1)  # the last write is the first
            order = np.argsort(first).tolist()
            renumber = np.empty(len(order), dtype=np.int32)
            renumber[order] = np.arange(len(order), dtype=np.int32)
            codes = renumber[codes]
        columns: dict[str, list[Any]] = {}
        for i, run in enumerate(runs):
            for j, name in enumerate(run.names):
                columns[name] = [combo[i][j] for combo in combos.values]
        for name in _CODED:
            columns.setdefault(name, [None] * ncombo)  # not in the layout (duration_ms, say)
        counts: npt.NDArray[np.int64] | None = None
        for name, fast_values in columns.items():
            values = fast_values + [s.entry.get(name) for s in self.slow]
            if order is not None:
                values = [values[k] for k in order]
            if name in _INT_KEYS:  # pg_id, timeout_ms: repeating integers
                if not all(type(v) is int and -(1 << 63) < v < (1 << 63) for v in values):
                    raise _Outside(
                        "an integer key holding something else"
                    )  # an odd value: the careful path names it
                self.ints[name] = np.array(values, dtype=np.int64)[codes]
            else:
                self.coded[name] = (codes, values)
            if name in _LISTS:
                if counts is None:
                    counts = np.bincount(codes, minlength=len(values))
                self.items += int(np.dot(counts, list(map(_items, values))))


def _items(value: Any) -> int:
    """Shapes and dimensions (or dtypes, or frames) that a value holds."""
    if type(value) is not list:
        return 0
    if value and type(value[0]) is list and all(type(v) is list for v in value):  # shapes
        return len(value) + sum(map(len, value))
    return len(value) + sum(len(v) for v in value if type(v) is list)


@dataclass(frozen=True)
class Combos:
    """The repeating runs' captures of the expression-read entries coded together: the
    distinct combinations (a capture per run), each entry's combination, and each
    combination's decoded values (per run, the values of its keys)."""

    distinct: list[tuple[bytes, ...]]
    codes: npt.NDArray[np.int32]
    values: list[list[list[Any]]]


def combination_codes(
    captures: Sequence[list[bytes]], n: int
) -> tuple[list[tuple[bytes, ...]], npt.NDArray[np.int32]]:
    """The distinct combinations of the runs' captures (one per entry, `n` entries) in order
    of first appearance, and each entry's."""
    if not n:
        return [], np.zeros(0, dtype=np.int32)
    if not captures:
        return [()], np.zeros(n, dtype=np.int32)
    if len(captures) == 1:  # no tuple per entry
        parts, codes = distinct_codes(captures[0])
        return [(part,) for part in parts], codes
    return distinct_codes(list(zip(*captures, strict=True)))


def distinct_codes(keys: Sequence[Any]) -> tuple[list[Any], npt.NDArray[np.int32]]:
    """The distinct keys in order of first appearance, and each key's index among them.

    One hash of each key: each key's first position comes from `setdefault` in one C-level
    pass, and positions become dense codes with numpy (a second pass of lookups would hash
    every key again: tuples do not keep their hash)."""
    first: dict[Any, int] = {}
    at = np.fromiter(map(first.setdefault, keys, itertools.count()), np.intp, len(keys))
    dense = np.cumsum(at == np.arange(len(keys)), dtype=np.int32) - 1
    return list(first), dense[at]


def _run_ints(runs: _VaryingRuns) -> _IntRuns:
    """The integers of runs' captures (BININT1/2, BININT, LONG1 of up to 8 bytes; NONE gives
    -1): per run, a column per key. Each run is its captures and the lengths of the key
    references between its integers. The n-th integers of all runs are read at once."""
    caps = list(itertools.chain.from_iterable(c for c, _ in runs))
    sizes = np.fromiter(map(len, caps), np.int64, len(caps))
    data = b"".join(caps) + bytes(16)
    buf = np.frombuffer(data, np.uint8)
    words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))  # unaligned
    starts = np.cumsum(sizes) - sizes
    bounds = np.cumsum([0] + [len(c) for c, _ in runs]).tolist()
    at = [starts[lo:hi] for lo, hi in itertools.pairwise(bounds)]
    columns: list[list[npt.NDArray[np.int64]]] = [[] for _ in runs]
    for step in range(1 + max((len(refs) for _, refs in runs), default=-1)):
        active = [i for i, (_, refs) in enumerate(runs) if len(refs) >= step]
        ats = [at[i] + (runs[i][1][step - 1] if step else 0) for i in active]
        values, ends = _ints_at(words, buf, np.concatenate(ats))
        offset = 0
        for i, part in zip(active, ats, strict=True):
            columns[i].append(values[offset : offset + len(part)])
            at[i] = ends[offset : offset + len(part)]
            offset += len(part)
    return columns


def _ints_at(
    words: npt.NDArray[np.uint64], buf: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The pickled integers (or NONE) starting at each offset, and the offset after each.
    `words[i]` is the little-endian 8 bytes at `buf[i]`."""
    ops = buf[at]
    long1 = ops == _LONG1
    width = np.where(long1, buf[at + 1], _WIDTH[ops])
    first = at + 1 + long1
    raw = words[first] & _MASK[width]
    values: npt.NDArray[np.int64] = raw.view(np.int64)
    negative = _SIGN[ops] & ((raw & _SIGN_BIT[width]) != 0)
    if negative.any():
        values[negative] -= _SPAN[width[negative]]
    values[ops == _NONE] = -1
    return values, first + width


_WIDTH = np.zeros(256, dtype=np.int64)
_WIDTH[[_BININT1, _BININT2, _BININT]] = (1, 2, 4)
_SIGN = np.zeros(256, dtype=bool)  # two's complement: BININT, LONG1
_SIGN[[_BININT, _LONG1]] = True
_MASK = np.array([(1 << 8 * w) - 1 for w in range(9)], dtype=np.uint64)  # by width in bytes
_SIGN_BIT = np.array([1 << 8 * w - 1 if 0 < w < 8 else 0 for w in range(9)], dtype=np.uint64)
_SPAN = np.array([1 << 8 * w if w < 8 else 0 for w in range(9)], dtype=np.int64)
