"""The one exact stack machine of the decoders: what the unpickler would build from a pickle
of plain values (protocols 2 to 5), or `NotDecoded` where the bytes leave that grammar.

Both readers of pickles use it: `decode` (torch's pickler: protocol 2, puts after the value,
one batch of items) for the header, the entries outside its layout and the captures of its
expression; `decode_python` (Python's: MEMOIZE, frames, batches of a thousand) alike. The
grammar is plain values only (no global, no object built by a call), dict keys that are
strings or integers, tuples of scalars, containers nested at most `MAX_DEPTH` deep, and a
container never changed once it is referred to or placed in another (so no cycle).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, TypeVar

from ...formats.outcomes import outside, past_limit
from .grammar import MAX_DEPTH
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
    LONG1,
    LONG_BINGET,
    LONG_BINPUT,
    MARK,
    MEMOIZE,
    NONE,
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


class Entry:
    """What an entry dict read by the expression stands for in the memo: nothing refers to
    one in a dump, and a file that does is read the general way."""


AN_ENTRY = Entry()
THE_ENTRIES = Entry()
"""What the entry list read by `_entries` stands for on the stack. Where it ends up is where
the unpickler puts the list: a file where that is not the top-level dict's `entries` value (a
nested `{"entries": [...]}` read first, a second `entries` key) is read the general way."""

_LIST_STARTS = (bytes((MEMOIZE, MARK)), bytes((MEMOIZE, EMPTY_DICT)))  # a batch, or one entry
_T = TypeVar("_T")


class Machine:
    """The exact reader of both picklers' layouts: a stack machine over the opcodes of plain
    values (protocols 2 to 5), doing what the unpickler does with each.

    Every list and dict it builds has a box: [the container, its depth, whether it is
    sealed]. A container is sealed once it is referred to from the memo or placed in another,
    and is never changed after, so nothing it builds holds itself. The memo is written in
    order, by Python's MEMOIZE (the next slot, implicit) or torch's puts (a slot that must be
    the next one). `pickler` names the writer in what a refusal says."""

    def __init__(
        self,
        data: bytes,
        memo: list[Any],
        slots: dict[str, int] | None = None,
        boxes: dict[int, list[Any]] | None = None,
        pickler: str = "Python's pickler",
    ) -> None:
        """A machine over `data`, with the memo (and what it knows of it) it shares."""
        self.data = data
        self.pickler = pickler
        self.memo = memo
        self.slots: dict[str, int] = {} if slots is None else slots  # string -> its first slot
        self.boxes: dict[int, list[Any]] = {} if boxes is None else boxes

    def fragment(self, data: bytes) -> Machine:
        """A machine over other bytes (a capture, a gap) with this one's memo."""
        return Machine(data, self.memo, self.slots, self.boxes, self.pickler)

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
        elif type(value) is Entry:
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
        may hold: the caller checks where the list ended up (`THE_ENTRIES`)."""
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
                ):
                    if data[pos : pos + 2] in _LIST_STARTS:  # Python's: a batch, or one entry
                        memo.append(AN_ENTRY)  # the list: nothing refers to it
                        pos = entries(pos + 1 + (data[pos + 1] == MARK))
                        stack.append(THE_ENTRIES)
                        continue
                    if (  # Python's in protocol 2 or 3: the list's slot (the next) written
                        data[pos] == BINPUT
                        and pos + 2 < end
                        and data[pos + 1] == len(memo)
                        and data[pos + 2] in (MARK, EMPTY_DICT)
                    ):
                        memo.append(AN_ENTRY)
                        pos = entries(pos + 2 + (data[pos + 2] == MARK))
                        stack.append(THE_ENTRIES)
                        continue
                    if data[pos] == MARK:  # torch's: one batch, the list not memoized
                        pos = entries(pos + 1)
                        stack.append(THE_ENTRIES)
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
            elif op in (BINPUT, LONG_BINPUT):
                width = 1 if op == BINPUT else 4
                if pos + width > end:
                    raise outside("a memo slot past the end")
                if int.from_bytes(data[pos : pos + width], "little") != len(memo):
                    raise outside(f"a memo slot written out of order (not {self.pickler})")
                pos += width
                value = stack[-1]
                memo.append(value)
                if type(value) is str:
                    self.slots.setdefault(value, len(memo) - 1)
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
                raise outside(f"an opcode {self.pickler} does not write for a dump ({op:#x})")
        if marks:
            raise outside("a mark left open")
        return stack, pos


def read_dump(
    machine: Machine, start: int, read_entries: Callable[[Machine, int], tuple[_T, int]]
) -> tuple[dict[Any, Any], _T]:
    """Run `machine` over a whole dump from `start`: the top-level dict without its entries,
    and what `read_entries` made of the entry list (given the position just inside the list,
    it returns the position after it). `NotDecoded` unless the dump is one dict that holds one
    entry list and ends at its STOP."""
    found: list[_T] = []

    def entries(pos: int) -> int:
        if found:
            raise outside("a second entry list")
        value, pos = read_entries(machine, pos)
        found.append(value)
        return pos

    stack, pos = machine.exec(start, len(machine.data), entries=entries)
    if pos != len(machine.data) or len(stack) != 1 or type(stack[0]) is not dict or not found:
        raise outside("not ending where it should")
    header = stack[0]
    if header.get("entries") is not THE_ENTRIES:  # the list read is not the unpickler's
        raise outside("an entry list that is not the top-level dict's entries")
    del header["entries"]
    return header, found[0]
