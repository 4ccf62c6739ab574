"""Decode a dump written by Python's pickler (protocols 2 to 5) straight into entry columns.

Dumps reach users re-saved by Python (post-processed, copied by a script, written by another
recorder), and Python's pickler lays the same objects out its own way: the stream is cut into
frames; every list, dict and tuple is memoized as it is begun (MEMOIZE: the slot is implicit, the
next one); items go a thousand at a time, and a batch of one is appended alone. The decoder of
torch's layout (`decode`) reads none of it, and the unpickler builds 100k objects that the
column-wise reader then walks: four times slower than `pickle.load`.

This reader keeps `decode`'s design. The frames are joined; the exact stack machine
(`machine.Machine`, shared with torch's reader) reads the header, the first entry and any entry
outside the layout; once an entry gives a layout (its keys' memo slots), `decode`'s expression,
in Python's dialect, reads every later entry of that layout in one `re.split`, first
definitions (a new string or frame dict) inside its repeating runs included. Because the slots
of what an entry memoizes are implicit, equal values stay equal bytes, so each distinct
combination of an entry's repeating captures is decoded once. The memo is rebuilt exactly, in
order: each expression-read entry adds what its combination memoized (the first entry with a
combination decodes it with the memo as it stands; a reference is to an absolute slot, so a
capture met again refers to what it referred to where first met, as the unpickler would), so
the entries read exactly afterwards, and the captures decoded later, see the slots the
unpickler would.

Protocols 2 and 3 (an older script's re-save) number every put (`_implicit_puts`): past slot
255 each put is made MEMOIZE by its bytes, checked in order, and the file is read as protocol
4 is; the slots below stay explicit, read by the exact machine.

The grammar is `decode`'s: plain values only (no global, no object built by a call), dict keys
that are strings or integers, tuples of scalars, containers nested at most 64 deep, and a
container never changed once it is referred to or placed in another (so no cycle). A file it
does not accept is read the general way, which says why.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np

from ....model.dump import Fallback, Writer
from ...formats.outcomes import NotDecoded, outside, reading_layout
from .columns import Columns, Combos, Decoded, EntryColumns, Slow, file_order, slow_entry
from .grammar import layout_of
from .machine import AN_ENTRY, Machine, read_dump
from .opcodes import (
    APPEND,
    APPENDS,
    BINPUT,
    BINUNICODE,
    EMPTY_DICT,
    FRAME,
    LONG_BINPUT,
    MARK,
    MEMOIZE,
    PROTO,
)

_PYTHON = "Python's pickle layout"
_TOP = bytes((EMPTY_DICT, MEMOIZE, MARK))
_LIST_STARTS = (bytes((MEMOIZE, MARK)), bytes((MEMOIZE, EMPTY_DICT)))  # a batch, or one entry
_AN_ENTRY_STARTS = bytes((EMPTY_DICT,))


def decode_python(data: bytes) -> Decoded:
    """The dump, decoded from bytes laid out the way Python's pickler writes them (protocols
    2 to 5); `NotDecoded` (why, in the words the rank records) when they are not."""
    if data[:1] != bytes((PROTO,)) or len(data) < 2 or data[1] not in (2, 3, 4, 5):
        raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "not Python's pickle layout (protocols 2-5)")
    protocol = data[1]
    with reading_layout(Writer.PYTHON_PICKLE, _PYTHON):
        if protocol >= 4:
            body = _unframe(data)
            if body[:3] != _TOP:
                raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "the top level is not a dict")
        else:
            body = _implicit_puts(data)
            if body[:4] != _TOP_UNFRAMED:
                raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "the top level is not a dict")
        return _decode(body, protocol)


_TOP_UNFRAMED = bytes((EMPTY_DICT, BINPUT, 0, MARK))
_FIRST_LONG_SLOT = 256
"""Python's pickler writes a put of a slot below this as BINPUT (1 byte), from it on as
LONG_BINPUT (4 bytes)."""


def _implicit_puts(data: bytes) -> bytes:
    """The opcodes after PROTO of a protocol 2 or 3 pickle, each put of slot 256 and later
    (LONG_BINPUT, `r` and four bytes) made MEMOIZE: the layout of protocol 4, where equal
    values are equal bytes (`decode`'s premise); the slots below stay explicit, read by the
    exact machine, which checks each.

    Python's pickler numbers its slots in order, so the puts are found by their bytes: each
    `r` followed by the number of a slot that follows every slot before it. The candidates in
    the slots' range must be exactly 256, 257, ... in the file's order; anything else (an
    `r` inside a string or an integer that reads as a slot in range, a put out of order) and
    the file is read the general way. A candidate taken wrongly would cut a string or an
    integer short, which the exact reads and the expression then refuse."""
    raw = np.frombuffer(data, dtype=np.uint8)
    at = np.flatnonzero(raw[2 : len(raw) - 4] == LONG_BINPUT) + 2
    slots = (
        raw[at + 1].astype(np.int64)
        | raw[at + 2].astype(np.int64) << 8
        | raw[at + 3].astype(np.int64) << 16
        | raw[at + 4].astype(np.int64) << 24
    )
    puts = (slots >= _FIRST_LONG_SLOT) & (slots < _FIRST_LONG_SLOT + len(at))
    at, slots = at[puts], slots[puts]
    if not np.array_equal(slots, np.arange(_FIRST_LONG_SLOT, _FIRST_LONG_SLOT + len(at))):
        raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "memo slots not numbered as Python numbers them")
    keep = np.ones(len(raw), dtype=bool)
    keep[:2] = False  # PROTO
    for k in range(1, 5):
        keep[at + k] = False
    body = raw[keep]  # a copy: each put's opcode stays, its slot goes
    body[at - 2 - 4 * np.arange(len(at))] = MEMOIZE
    return body.tobytes()


def _unframe(data: bytes) -> bytes:
    """The opcodes after PROTO with the frame headers taken out. Python's pickler cuts frames
    between opcodes and writes nothing outside a frame but a string too big for one (64 KiB
    and over: the member list of a world of 10,000 ranks and more, in pg_config), opcode,
    length and text, between two frames."""
    parts: list[bytes] = []
    pos, end = 2, len(data)
    if data[pos] != FRAME:
        return data[pos:]  # a small pickle: not framed
    while pos < end:
        if data[pos] == FRAME:
            start, size = pos + 9, int.from_bytes(data[pos + 1 : pos + 9], "little")
        elif data[pos] == BINUNICODE:
            start, size = pos, 5 + int.from_bytes(data[pos + 1 : pos + 5], "little")
        else:
            raise outside("data outside a frame")
        if start + size > end:
            raise outside("a frame that runs past the end")
        parts.append(data[start : start + size])
        pos = start + size
    return b"".join(parts)


def _decode(body: bytes, protocol: int) -> Decoded:
    header, entries = read_dump(
        Machine(body, []), 0, functools.partial(_entries, protocol=protocol)
    )
    return Decoded(header, entries)


def _next_entry(data: bytes, pos: int) -> int | None:
    """Where the next entry of the entry list starts, at `pos` after an entry (or at the
    list's start); None at the list's end. Python's pickler appends the entries a thousand at
    a time: `e(` between two batches, `e` before a last batch of one (then `a`)."""
    op = data[pos]
    if op == EMPTY_DICT:  # `}`: the next entry of this batch
        return pos
    if op == APPENDS:
        after = data[pos + 1]
        if after == MARK:
            return pos + 2
        return pos + 1 if after == EMPTY_DICT else None
    if op == APPEND:
        return None
    raise outside("an entry list holding something other than entries")


def _entries(machine: Machine, pos: int, protocol: int = 4) -> tuple[EntryColumns, int]:
    """Read the entry list from just after its `]\\x94(` to just after its last `e` (or `a`)."""
    data = machine.data
    slow: list[Slow] = []
    layout = None
    at = _next_entry(data, pos)
    while layout is None and at is not None:
        pos = slow_entry(machine, at, slow, 0)
        slots = [(key, machine.slots.get(key, -1)) for key in slow[-1].entry]
        if all(slot >= 0 for _, slot in slots):
            layout = layout_of(slots, python=True, protocol=protocol)
        at = _next_entry(data, pos)
    fast = 0
    runs: list[Any] = []
    captured: list[list[bytes]] = []
    combos: Combos | None = None
    if layout is not None and at is not None:
        parts = layout.regex.split(data[pos:])
        stride = len(layout.runs) + 1
        fast = (len(parts) - 1) // stride
        if fast:
            runs = list(layout.runs)
            captured = [parts[i + 1 :: stride] for i in range(len(runs))]
            combos = _replay(machine, parts[::stride], runs, captured, slow)
        pos = len(data) - len(parts[-1])
        at = _next_entry(data, pos)
    while at is not None:
        pos = slow_entry(machine, at, slow, fast)
        at = _next_entry(data, pos)
    columns = Columns(machine, fast, slow)
    built = columns.build(zip(runs, captured, strict=True), combos)
    return built, pos + 1


def _replay(
    machine: Machine,
    gaps: list[bytes],
    runs: list[Any],
    captured: list[list[bytes]],
    slow: list[Slow],
) -> Combos:
    """Rebuild the memo through the expression-read entries and the entries between them, in
    order: the gaps' entries are read exactly, and the first entry with each combination of
    repeating captures decodes it; every other entry adds what its combination memoized."""
    memo = machine.memo
    order = file_order(runs, gaps, captured)
    repeating, firsts, code_list = order.repeating, order.firsts, order.codes.tolist()
    added: list[tuple[Any, ...]] = [()] * len(firsts)  # per combination: what it memoizes
    values: list[list[list[Any]]] = [[] for _ in firsts]
    # Per run and capture: its values and what it memoizes. A capture met again (in another
    # combination) refers to the same slots, all written before it was first met.
    known: dict[tuple[int, bytes], tuple[list[Any], tuple[Any, ...]]] = {}
    done = 0  # entries whose memo slots are in
    for k in order.visits:
        memo.extend(itertools.chain.from_iterable(map(added.__getitem__, code_list[done:k])))
        done = k
        if gaps[k]:
            gap = machine.fragment(gaps[k] + _AN_ENTRY_STARTS)  # the next entry's first byte
            at = 0
            while at < len(gaps[k]):
                start = _next_entry(gap.data, at)
                if start is None:
                    raise outside("the entry list ends between entries of one layout")
                at = start if start == len(gaps[k]) else slow_entry(gap, start, slow, k)
            if at != len(gaps[k]):
                raise outside("an entry read outside its layout")
        code = code_list[k]
        if firsts[code] == k:
            base = len(memo)
            memo.append(AN_ENTRY)
            for i in repeating:
                capture = captured[i][k]
                hit = known.get((i, capture))
                if hit is None:
                    start = len(memo)
                    found = machine.run(capture, len(runs[i].names))
                    hit = known[i, capture] = (found, tuple(memo[start:]))
                else:
                    memo.extend(hit[1])
                values[code].append(hit[0])
            added[code] = (AN_ENTRY, *memo[base + 1 :])
            done = k + 1
    memo.extend(itertools.chain.from_iterable(map(added.__getitem__, code_list[done:])))
    return Combos(order.distinct, order.codes, values)
