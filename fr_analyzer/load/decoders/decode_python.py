"""Decode a dump written by Python's pickler (protocols 4 and 5) straight into entry columns.

Dumps reach users re-saved by Python (post-processed, copied by a script, written by another
recorder), and Python's pickler lays the same objects out its own way: the stream is cut into
frames; every list, dict and tuple is memoized as it is begun (MEMOIZE: the slot is implicit, the
next one); items go a thousand at a time, and a batch of one is appended alone. The decoder of
torch's layout (`decode`) reads none of it, and the unpickler builds 100k objects that the
column-wise reader then walks: four times slower than `pickle.load`.

This reader keeps `decode`'s design. The frames are joined; an exact stack machine (`_Machine`)
reads the header, the first entry and any entry outside the layout; once an entry gives a
layout (its keys' memo slots), `decode`'s expression, in Python's dialect, reads every later
entry of that layout in one `re.split`, first definitions (a new string or frame dict) inside
its repeating runs included. Because the slots of what an entry memoizes are implicit, equal
values stay equal bytes, so each distinct combination of an entry's repeating captures is
decoded once. The memo is rebuilt exactly, in order: each expression-read entry adds what its
combination memoized (the first entry with a combination decodes it with the memo as it
stands; a reference is to an absolute slot, so a capture met again refers to what it referred
to where first met, as the unpickler would), so the entries read exactly afterwards, and the
captures decoded later, see the slots the unpickler would.

The grammar is `decode`'s: plain values only (no global, no object built by a call), dict keys
that are strings or integers, tuples of scalars, containers nested at most 64 deep, and a
container never changed once it is referred to or placed in another (so no cycle). A file it
does not accept is read the general way, which says why.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from typing import Any

from ...model.dump import Fallback, Writer
from ..outcomes import NotDecoded, outside, past_limit, reading_layout
from .columns import Columns, Combos, Decoded, EntryColumns, Slow, file_order, slow_entry
from .grammar import MAX_DEPTH, layout_of
from .opcodes import (
    APPEND,
    APPENDS,
    BINFLOAT,
    BINGET,
    BININT,
    BININT1,
    BININT2,
    BINUNICODE,
    EMPTY_DICT,
    EMPTY_LIST,
    EMPTY_TUPLE,
    FALSE,
    FRAME,
    LONG1,
    LONG_BINGET,
    MARK,
    MEMOIZE,
    NONE,
    PROTO,
    SETITEM,
    SETITEMS,
    SHORT_BINUNICODE,
    STOP,
    TRUE,
    TUPLE,
    TUPLE1,
    TUPLE3,
)

_SCALARS = (str, int, float, bool, type(None))


class _Entry:
    """What an entry dict read by the expression stands for in the memo: nothing refers to
    one in a dump, and a file that does is read the general way."""


_AN_ENTRY = _Entry()
_THE_ENTRIES = _Entry()
"""What the entry list read by `_entries` stands for on the stack. Where it ends up is where
the unpickler puts the list: a file where that is not the top-level dict's `entries` value (a
nested `{"entries": [...]}` read first, a second `entries` key) is read the general way."""


_PYTHON = "Python's pickle layout"
_TOP = bytes((EMPTY_DICT, MEMOIZE, MARK))
_LIST_STARTS = (bytes((MEMOIZE, MARK)), bytes((MEMOIZE, EMPTY_DICT)))  # a batch, or one entry
_AN_ENTRY_STARTS = bytes((EMPTY_DICT,))


def decode_python(data: bytes) -> Decoded:
    """The dump, decoded from bytes laid out the way Python's pickler writes them (protocol 4
    or 5); `NotDecoded` (why, in the words the rank records) when they are not."""
    if data[:1] != bytes((PROTO,)) or len(data) < 2 or data[1] not in (4, 5):
        raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "not Python's pickle layout (protocol 4 or 5)")
    with reading_layout(Writer.PYTHON_PICKLE, _PYTHON):
        body = _unframe(data)
        if body[:3] != _TOP:
            raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "the top level is not a dict")
        return _decode(body)


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


def _decode(body: bytes) -> Decoded:
    machine = _Machine(body, [])
    found: list[EntryColumns] = []

    def entries(pos: int) -> int:
        if found:
            raise outside("a second entry list")
        columns, pos = _entries(machine, pos)
        found.append(columns)
        return pos

    stack, pos = machine.exec(0, len(body), entries=entries)
    if pos != len(body) or len(stack) != 1 or type(stack[0]) is not dict or not found:
        raise outside("not ending where it should")
    header = stack[0]
    if header.get("entries") is not _THE_ENTRIES:  # the list read is not the unpickler's
        raise outside("an entry list that is not the top-level dict's entries")
    del header["entries"]
    return Decoded(header, found[0])


class _Machine:
    """Exact reader of Python's layout: a stack machine over the opcodes of plain values.

    Every list and dict it builds has a box: [the container, its depth, whether it is
    sealed]. A container is sealed once it is referred to from the memo or placed in another,
    and is never changed after, so nothing it builds holds itself."""

    def __init__(
        self,
        data: bytes,
        memo: list[Any],
        slots: dict[str, int] | None = None,
        boxes: dict[int, list[Any]] | None = None,
    ) -> None:
        self.data = data
        self.memo = memo
        self.slots: dict[str, int] = {} if slots is None else slots  # string -> its first slot
        self.boxes: dict[int, list[Any]] = {} if boxes is None else boxes

    def fragment(self, data: bytes) -> _Machine:
        """A machine over other bytes (a capture, a gap) with this one's memo."""
        return _Machine(data, self.memo, self.slots, self.boxes)

    def run(self, data: bytes, size: int) -> list[Any]:
        """The values of a run of `size` keys captured from an entry (value, key reference,
        value, ...)."""
        reader = self.fragment(data)
        found, pos = reader.exec(0, len(data))
        if len(found) != 2 * size - 1 or pos != len(data):
            raise outside("a run of keys that is not whole")
        return found[::2]

    def entry(self, pos: int) -> tuple[Any, int]:
        """The entry dict that starts at `pos`, and the position after it."""
        found, pos = self.exec(pos, len(self.data), one=True)
        if len(found) != 1:
            raise outside("an entry that is not whole")
        return found[0], pos

    def _ref(self, value: Any) -> Any:
        if type(value) is list or type(value) is dict:
            box = self.boxes[id(value)]
            box[2] = True
        elif type(value) is _Entry:
            raise outside("a reference to an entry or to the entry list")
        return value

    def _place(self, parent: Any, children: Any) -> None:
        """Check that `parent` may take `children` (then sealed), and deepen it."""
        boxes = self.boxes
        box = boxes[id(parent)]
        if box[2]:
            raise outside("a container changed after it is referred to")
        for child in children:
            if type(child) is list or type(child) is dict:
                inner = boxes[id(child)]
                inner[2] = True
                if inner[1] >= box[1]:
                    if inner[1] >= MAX_DEPTH:
                        raise past_limit("containers nested too deeply")
                    box[1] = inner[1] + 1

    def exec(
        self,
        pos: int,
        end: int,
        *,
        one: bool = False,
        entries: Callable[[int], int] | None = None,
    ) -> tuple[list[Any], int]:
        """Run the opcodes from `pos` to `end` (or a STOP); the complete values left on the
        stack, and where it stopped. `one`: stop when one dict is complete. `entries`: the
        reader of the top-level dict's entry list, given the position after its `]\\x94(`
        and returning the position after the list. It is called for the first list that
        follows an `entries` key with the top-level mark open, which a nested dict of one key
        may hold: the caller checks where the list ended up (`_THE_ENTRIES`)."""
        data, memo, stack = self.data, self.memo, []
        marks: list[int] = []
        while pos < end:
            op = data[pos]
            pos += 1
            if op == BINGET:
                value = memo[data[pos]]
                pos += 1
                stack.append(value if type(value) is str else self._ref(value))
            elif op == MEMOIZE:
                value = stack[-1]
                memo.append(value)
                if type(value) is str:
                    self.slots.setdefault(value, len(memo) - 1)
            elif op in (SHORT_BINUNICODE, BINUNICODE):
                width = 1 if op == SHORT_BINUNICODE else 4
                size = int.from_bytes(data[pos : pos + width], "little")
                if pos + width + size > end:
                    raise outside("a string runs past the end")
                stack.append(
                    data[pos + width : pos + width + size].decode("utf-8", "surrogatepass")
                )
                pos += width + size
            elif op == BININT1:
                stack.append(data[pos])
                pos += 1
            elif op == BININT2:
                stack.append(data[pos] | data[pos + 1] << 8)
                pos += 2
            elif op in (EMPTY_LIST, EMPTY_DICT):
                if (
                    entries is not None
                    and op == EMPTY_LIST
                    and len(marks) == 1
                    and (len(stack) - marks[0]) % 2
                    and stack[-1] == "entries"
                    and data[pos : pos + 2] in _LIST_STARTS  # a batch, or one entry
                ):
                    memo.append(_AN_ENTRY)  # the list: nothing refers to it
                    pos = entries(pos + 1 + (data[pos + 1] == MARK))
                    stack.append(_THE_ENTRIES)
                    continue
                container: Any = [] if op == EMPTY_LIST else {}
                self.boxes[id(container)] = [container, 1, False]
                stack.append(container)
            elif op == APPEND:
                if len(stack) - 2 < (marks[-1] if marks else 0):
                    raise outside("an append with no list")
                value = stack.pop()
                target = stack[-1]
                if type(target) is not list:
                    raise outside("an append to something other than a list")
                self._place(target, (value,))
                target.append(value)
            elif op == MARK:
                if len(marks) >= MAX_DEPTH:
                    raise past_limit("containers nested too deeply")
                marks.append(len(stack))
            elif op in (APPENDS, SETITEMS, SETITEM):
                if op == SETITEM:
                    at = len(stack) - 2
                    if at - 1 < (marks[-1] if marks else 0):
                        raise outside("an item with no dict")
                else:
                    if not marks:
                        raise outside("items without a mark")
                    at = marks.pop()
                if at < 1:
                    raise outside("items with no container")
                items = stack[at:]
                del stack[at:]
                target = stack[-1]
                if op == APPENDS:
                    if type(target) is not list:
                        raise outside("items appended to something other than a list")
                    self._place(target, items)
                    target.extend(items)
                else:
                    if type(target) is not dict or len(items) % 2:
                        raise outside("dict items that are not key and value pairs")
                    keys = items[::2]
                    if not all(type(k) is str or type(k) is int for k in keys):
                        raise outside("a dict key that is not a string or an integer")
                    values = items[1::2]
                    self._place(target, values)
                    target.update(zip(keys, values, strict=True))
                    if one and not marks and len(stack) == 1:
                        return stack, pos
            elif op == LONG_BINGET:
                value = memo[int.from_bytes(data[pos : pos + 4], "little")]
                pos += 4
                stack.append(value if type(value) is str else self._ref(value))
            elif op == NONE:
                stack.append(None)
            elif op in (TRUE, FALSE):
                stack.append(op == TRUE)
            elif op == BININT:
                stack.append(int.from_bytes(data[pos : pos + 4], "little", signed=True))
                pos += 4
            elif op == LONG1:
                size = data[pos]
                if size > 8:
                    raise outside("an integer wider than 8 bytes")
                stack.append(int.from_bytes(data[pos + 1 : pos + 1 + size], "little", signed=True))
                pos += 1 + size
            elif op == BINFLOAT:
                stack.append(struct.unpack(">d", data[pos : pos + 8])[0])
                pos += 8
            elif TUPLE1 <= op <= TUPLE3 or op == TUPLE:
                if op == TUPLE:
                    if not marks:
                        raise outside("a tuple without a mark")
                    at = marks.pop()
                else:
                    at = len(stack) - (op - TUPLE1 + 1)
                    if at < (marks[-1] if marks else 0):
                        raise outside("a tuple with too few items")
                items = stack[at:]
                if not all(type(v) in _SCALARS for v in items):
                    raise outside("a tuple holding a container")  # could be a hash bomb
                del stack[at:]
                stack.append(tuple(items))
            elif op == EMPTY_TUPLE:
                stack.append(())
            elif op == STOP:
                break
            else:
                raise outside(f"an opcode Python's pickler does not write for a dump ({op:#x})")
        if marks:
            raise outside("a mark left open")
        return stack, pos


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


def _entries(machine: _Machine, pos: int) -> tuple[EntryColumns, int]:
    """Read the entry list from just after its `]\\x94(` to just after its last `e` (or `a`)."""
    data = machine.data
    slow: list[Slow] = []
    layout = None
    at = _next_entry(data, pos)
    while layout is None and at is not None:
        pos = slow_entry(machine, at, slow, 0)
        slots = [(key, machine.slots.get(key, -1)) for key in slow[-1].entry]
        if all(slot >= 0 for _, slot in slots):
            layout = layout_of(slots, python=True)
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
    machine: _Machine,
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
            memo.append(_AN_ENTRY)
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
            added[code] = (_AN_ENTRY, *memo[base + 1 :])
            done = k + 1
    memo.extend(itertools.chain.from_iterable(map(added.__getitem__, code_list[done:])))
    return Combos(order.distinct, order.codes, values)
