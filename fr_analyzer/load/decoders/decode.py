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
pickler, odd values) raises `outcomes.NotDecoded`, and the file takes the general path.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...model.dump import Fallback, Writer
from ..outcomes import NotDecoded, outside, past_limit, reading_layout
from .columns import Columns, Combos, Decoded, EntryColumns, Slow, file_order, slow_entry
from .grammar import MAX_DEPTH, Layout, Run, layout_of
from .opcodes import (
    APPENDS,
    BINFLOAT,
    BINGET,
    BININT,
    BININT1,
    BININT2,
    BINPUT,
    BINUNICODE,
    EMPTY_DICT,
    EMPTY_LIST,
    EMPTY_TUPLE,
    FALSE,
    LONG1,
    LONG_BINGET,
    MARK,
    NONE,
    PROTO,
    PUTS,
    SETITEMS,
    SHORT_BINUNICODE,
    STOP,
    TRUE,
    TUPLE,
    TUPLE1,
    TUPLE2,
    TUPLE3,
)

_SCALARS = (type(None), bool, int, float, str)


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
        """The value that starts at `pos` (memoized if a put follows), and the position after."""
        data = self.data
        op = data[pos]
        pos += 1
        value: Any
        if op == BINGET:  # the most frequent opcode first
            slot, pos = data[pos], pos + 1
            return self.memo[slot], pos  # IndexError past the memo; never put again
        if op == LONG_BINGET:
            slot, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
            return self.memo[slot], pos  # IndexError past the memo; never put again
        if op in (BINUNICODE, SHORT_BINUNICODE):
            width = 4 if op == BINUNICODE else 1
            size = int.from_bytes(data[pos : pos + width], "little")
            end = pos + width + size
            if end > len(data):
                raise outside("a string runs past the end")
            value = data[pos + width : end].decode("utf-8", "surrogatepass")
            pos = end
        elif op == BININT1:
            value, pos = data[pos], pos + 1
        elif op == BININT2:
            value, pos = int.from_bytes(data[pos : pos + 2], "little"), pos + 2
        elif op == BININT:
            value, pos = int.from_bytes(data[pos : pos + 4], "little", signed=True), pos + 4
        elif op == LONG1:
            size = data[pos]
            if size > 8:
                raise outside("an integer wider than 8 bytes")
            value = int.from_bytes(data[pos + 1 : pos + 1 + size], "little", signed=True)
            pos += 1 + size
        elif op == NONE:
            value = None
        elif op in (TRUE, FALSE):
            value = op == TRUE
        elif op == BINFLOAT:
            value, pos = struct.unpack(">d", data[pos : pos + 8])[0], pos + 8
        elif op in (EMPTY_LIST, EMPTY_DICT):
            if depth >= MAX_DEPTH or data[pos] != MARK:
                raise past_limit("containers nested too deeply")
            end = APPENDS if op == EMPTY_LIST else SETITEMS
            items, pos = self.items(pos + 1, end, depth + 1)
            if op == EMPTY_LIST:
                value = items
            else:
                if len(items) % 2:
                    raise outside("a dict with an odd number of items")
                keys = items[::2]
                if not all(type(k) is str or type(k) is int for k in keys):
                    raise outside(
                        "a dict key that is not a string or an integer"
                    )  # no key whose hash could explode
                value = dict(zip(keys, items[1::2], strict=True))
            if data[pos] == MARK:
                raise outside(
                    "a second batch of items (Python's pickler writes those)"
                )  # a second batch of items: Python's pickler, not torch's
        elif op == EMPTY_TUPLE:
            value = ()
        else:
            raise outside("an opcode torch's pickler does not write")
        if data[pos] in PUTS:
            pos = self.put(value, pos)
        return value, pos

    def entry(self, pos: int) -> tuple[Any, int]:
        """The entry dict that starts at `pos`, and the position after it."""
        return self.value(pos)

    def put(self, value: Any, pos: int) -> int:
        """Memoize `value` by the put at `pos` (the next slot, or outside); the position after."""
        data = self.data
        width = 1 if data[pos] == BINPUT else 4
        slot = int.from_bytes(data[pos + 1 : pos + 1 + width], "little")
        if slot != len(self.memo) or len(data) < pos + 1 + width:
            raise outside(
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
            if op == BINGET:  # as in `value`, inline: most items are memo references
                items.append(memo[data[pos + 1]])
                pos += 2
            elif op == LONG_BINGET:
                items.append(memo[int.from_bytes(data[pos + 1 : pos + 5], "little")])
                pos += 5
            elif op == end:
                return items, pos + 1
            elif op in (TUPLE1, TUPLE2, TUPLE3):
                size = op - TUPLE1 + 1
                if len(items) < size:
                    raise outside("a tuple with too few items")
                items[-size:] = [self.scalars(items[-size:])]
                pos += 1
                if data[pos] in PUTS:
                    pos = self.put(items[-1], pos)
            elif op == MARK:
                inner, pos = self.items(pos + 1, TUPLE, depth + 1)
                items.append(self.scalars(inner))
                if data[pos] in PUTS:
                    pos = self.put(items[-1], pos)
            else:
                value, pos = self.value(pos, depth)
                items.append(value)

    @staticmethod
    def scalars(items: list[Any]) -> tuple[Any, ...]:
        """The items as a tuple; only scalars (a tuple of containers could be a hash bomb)."""
        if not all(type(v) in _SCALARS for v in items):
            raise outside(
                "a tuple holding a container"
            )  # a tuple of containers could be a hash bomb
        return tuple(items)

    def run(self, data: bytes, size: int) -> list[Any]:
        """The values of a run of `size` keys captured from an entry (value, key reference,
        value, ...), decoded with this decoder's memo (it may write the next memo slots)."""
        found, pos = self.fragment(data + b".").items(0, STOP, 0)
        if len(found) != 2 * size - 1 or pos != len(data) + 1:
            raise outside("a run of keys that is not whole")
        return found[::2]


_TORCH = "torch's pickle layout"
_START = bytes((PROTO, 2))
_TOP = bytes((EMPTY_DICT, MARK))
_LIST = bytes((EMPTY_LIST, MARK))


def decode_torch(data: bytes) -> Decoded:
    """The dump, decoded from bytes laid out the way torch's pickler writes them; `NotDecoded`
    (why, in the words the rank records) when they are not."""
    if data[:2] != _START:
        if data[:1] == _START[:1] and len(data) > 1:
            raise NotDecoded(
                Fallback.NOT_THIS_LAYOUT,
                f"pickle protocol {data[1]}: not torch's pickle layout (protocol 2)",
            )
        raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "not torch's pickle layout")
    if data[2:4] != _TOP:
        raise NotDecoded(
            Fallback.NOT_THIS_LAYOUT, "not torch's pickle layout (the top level is not a dict)"
        )
    with reading_layout(Writer.TORCH_PICKLE, _TORCH):
        found = _decode(data)
    if found is None:
        raise outside("not ending where it should").within(Writer.TORCH_PICKLE, _TORCH)
    return found


def _decode(data: bytes) -> Decoded | None:
    reader = _Decoder(data, [])
    pos = 4
    header: dict[str, Any] = {}
    entries: EntryColumns | None = None
    while data[pos] != SETITEMS:
        key, pos = reader.value(pos)
        if type(key) is not str:
            raise outside("a top-level key that is not a string")
        if key != "entries":
            header[key], pos = reader.value(pos)
        elif data[pos : pos + 2] == _LIST and entries is None:
            entries, pos = _entries(reader, pos + 2)
            if data[pos] in PUTS or data[pos] == MARK:
                raise outside("a second entry list")
        else:
            raise outside("entries that are not a list")
    pos += 1
    if data[pos] in PUTS:  # torch memoizes the top-level dict too; nothing refers to it
        pos = reader.put(None, pos)
    if pos + 1 != len(data) or data[pos] != STOP or entries is None:
        return None
    return Decoded(header, entries)


def _entries(reader: _Decoder, pos: int) -> tuple[EntryColumns, int]:
    """Read the entry list from just after its `](` to just after its `e`.

    The decoder reads entries until one gives a layout; the layout's expression then splits
    the rest of the file in one call. What lies between two of its matches must be whole
    entries (of another layout), which the decoder reads; after the last match come the last
    such entries and the list's end."""
    data = reader.data
    slow: list[Slow] = []
    layout: Layout | None = None
    while layout is None and data[pos] != APPENDS:
        pos = slow_entry(reader, pos, slow, 0)
        slots = [(key, reader.slots.get(key, -1)) for key in slow[-1].entry]
        if all(slot >= 0 for _, slot in slots):
            layout = layout_of(slots)
    captured: list[list[bytes]] = []
    fast = 0
    combos = None
    if layout is not None and data[pos] != APPENDS:
        parts = layout.regex.split(data[pos:])
        stride = len(layout.runs) + 1
        fast = (len(parts) - 1) // stride
        gaps = parts[::stride]
        captured = [parts[i + 1 :: stride] for i in range(len(layout.runs))]
        if fast:
            combos = _in_order(reader, layout.runs, gaps, captured, slow)
        pos = len(data) - len(gaps[-1])
    while data[pos] != APPENDS:
        pos = slow_entry(reader, pos, slow, fast)
    runs = layout.runs if layout is not None and fast else ()
    columns = Columns(reader, fast, slow).build(zip(runs, captured, strict=False), combos)
    return columns, pos + 1


def _in_order(
    reader: _Decoder,
    runs: Sequence[Run],
    gaps: list[bytes],
    captured: list[list[bytes]],
    slow: list[Slow],
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
                at = slow_entry(gap, at, slow, k)
            if at != len(gaps[k]):
                raise outside("an entry read outside its layout")
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
                        raise outside("a memo slot written twice")
            elif key in writes:
                raise outside("a memo slot written twice")
            values[code].append(hit)
    return Combos(order.distinct, order.codes, values)
