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

Protocols 2 and 3 (an older script's re-save) number every put (`_implicit_puts`): each put
is made MEMOIZE, checked in order (those of slots 0 to 255 found by reading the opcodes before
slot 256, those after by their bytes), and the file is read as protocol 4 is.

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
    FRAME,
    LONG1,
    LONG_BINGET,
    LONG_BINPUT,
    MARK,
    MEMOIZE,
    NONE,
    PROTO,
    SETITEM,
    SETITEMS,
    SHORT_BINUNICODE,
    TRUE,
    TUPLE,
    TUPLE1,
    TUPLE2,
    TUPLE3,
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
            if body[:3] != _TOP:
                raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "the top level is not a dict")
        return _decode(body, protocol)


_FIRST_LONG_SLOT = 256
"""Python's pickler writes a put of a slot below this as BINPUT (1 byte), from it on as
LONG_BINPUT (4 bytes)."""


def _implicit_puts(data: bytes) -> bytes:
    """The opcodes after PROTO of a protocol 2 or 3 pickle, each put (BINPUT, `q` and a byte,
    then LONG_BINPUT, `r` and four bytes) made MEMOIZE: the layout of protocol 4, where equal
    values are equal bytes (`decode`'s premise), so that every entry but the first is read by
    the expression, as in protocol 4 (with the puts of slots below 256 left explicit, the
    entries that hold them, a dozen in a dump, were each read by the exact machine).

    Python's pickler numbers its slots in order, 0 to 255 with BINPUT, then 256 on with
    LONG_BINPUT. The long puts are found by their bytes: each `r` followed by the number of a
    slot that follows every slot before it. The candidates in the slots' range must be
    exactly 256, 257, ... in the file's order; anything else (an `r` inside a string or an
    integer that reads as a slot in range, a put out of order) and the file is read the
    general way. A candidate taken wrongly would cut a string or an integer short, which the
    exact reads and the expression then refuse. The short puts are found by reading the
    opcodes before the first long put (`_short_puts`): a `q` inside a string is no put; each
    put must be the next slot, and the first long put must come where the opcodes read end,
    after exactly 256 short ones, or the file is read the general way.

    The long puts are tens of thousands (one per list, dict, tuple and new string), so each
    step over them is one numpy pass over the file or over its candidates, no Python loop:
    the slots are read as four-byte words in place, and the body is the file with every
    put's slot bytes masked out and its opcode made MEMOIZE."""
    size = len(data)
    if size < 7:  # PROTO, one opcode, STOP: no room for a long put
        return data[2:]
    raw = np.frombuffer(data, dtype=np.uint8)
    at = np.flatnonzero(raw[2 : size - 4] == LONG_BINPUT) + 3  # each candidate's slot bytes
    slots = _words(raw)[at] - np.uint32(_FIRST_LONG_SLOT)  # below 256: past the count
    puts = slots < len(at)
    at, slots = at[puts], slots[puts]
    if not np.array_equal(slots, np.arange(len(at), dtype=np.uint32)):
        raise NotDecoded(Fallback.NOT_THIS_LAYOUT, _NOT_NUMBERED)
    short = _short_puts(data, int(at[0]) - 1 if len(at) else size)
    if len(at) and len(short) != _FIRST_LONG_SLOT:
        raise NotDecoded(Fallback.NOT_THIS_LAYOUT, _NOT_NUMBERED)
    keep = np.ones(size, dtype=np.uint8)
    keep[:2] = 0  # PROTO
    short_at = np.array(short, dtype=np.int64)
    keep[short_at + 1] = 0
    _words(keep)[at] = 0
    body = raw[keep.view(np.bool_)]  # a copy: each put's opcode stays, its slot goes
    body[short_at - 2 - np.arange(len(short))] = MEMOIZE
    body[at - 3 - len(short) - 4 * np.arange(len(at))] = MEMOIZE
    return body.tobytes()


_NOT_NUMBERED = "memo slots not numbered as Python numbers them"


def _words(raw: np.ndarray[Any, np.dtype[np.uint8]]) -> np.ndarray[Any, np.dtype[np.uint32]]:
    """The little-endian four-byte word that starts at each byte of `raw` (but the last
    three), a view of its bytes: reading or writing one at a put reads or writes its slot."""
    return np.ndarray((len(raw) - 3,), dtype="<u4", buffer=raw, strides=(1,))


_WHOLE = dict.fromkeys(
    (MARK, NONE, TRUE, FALSE, EMPTY_LIST, APPEND, APPENDS, EMPTY_DICT, SETITEM, SETITEMS),
    0,
) | dict.fromkeys((EMPTY_TUPLE, TUPLE1, TUPLE2, TUPLE3, TUPLE), 0)
_WHOLE |= {BININT1: 1, BINGET: 1, BININT2: 2, BININT: 4, LONG_BINGET: 4, BINFLOAT: 8}
_ARGUMENT = tuple(_WHOLE.get(op, -1) for op in range(256))
"""Per opcode byte, the bytes of its argument when it is one of the exact machine's grammar
that `_short_puts` steps over whole; -1 for the rest (the puts and the strings, read apart;
STOP and what is outside the grammar, where it stops)."""


def _short_puts(data: bytes, end: int) -> list[int]:
    """Where the BINPUTs are among the opcodes from after PROTO to `end` (the first long
    put, or the file's end), read as the exact machine reads them, each checked to be the
    next slot. It stops early at STOP, at the end of the data, or at an opcode outside the
    grammar, which the exact machine then refuses. Bounded: every opcode read moves on."""
    found: list[int] = []
    pos, argument = 2, _ARGUMENT
    while pos < end:
        op = data[pos]
        width = argument[op]
        if width >= 0:
            pos += 1 + width
        elif op == BINPUT:
            if pos + 1 >= end or data[pos + 1] != len(found):
                raise NotDecoded(Fallback.NOT_THIS_LAYOUT, _NOT_NUMBERED)
            found.append(pos)
            pos += 2
        elif op == BINUNICODE:
            pos += 5 + int.from_bytes(data[pos + 1 : pos + 5], "little")
        elif op in (SHORT_BINUNICODE, LONG1) and pos + 1 < end:  # its size in a byte
            pos += 2 + data[pos + 1]
        elif op in (LONG_BINPUT, MEMOIZE):  # a put Python's pickler does not write here
            raise NotDecoded(Fallback.NOT_THIS_LAYOUT, _NOT_NUMBERED)
        else:  # STOP, or outside the grammar
            break
    if end < len(data) and pos != end:  # the first long put is not an opcode
        raise NotDecoded(Fallback.NOT_THIS_LAYOUT, _NOT_NUMBERED)
    return found


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
