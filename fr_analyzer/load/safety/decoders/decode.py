"""Decode a dump written the way torch's pickler writes it straight into entry columns.

The general path (`reading`) walks every opcode to refuse bombs, then lets the unpickler build
some 100k small objects that normalization reads once and frees. A torch-written dump is far
more regular than a pickle can be: protocol 2; each string written once and memoized, later
referred to by its memo slot; each shared frame dict memoized once complete; slots numbered in
order; and every entry a dict with the same keys in the same order. So:

- the exact stack machine (`machine.Machine`, shared with Python's reader) reads the header
  and the first entry, and any entry outside the layout;
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

from collections.abc import Sequence
from typing import Any

import numpy as np

from ....model.dump import Fallback, Writer
from ...formats.outcomes import NotDecoded, outside, reading_layout
from .columns import Columns, Combos, Decoded, EntryColumns, Slow, file_order, slow_entry
from .grammar import Layout, Run, layout_of
from .machine import Machine, read_dump
from .opcodes import APPENDS, EMPTY_DICT, MARK, PROTO

_TORCH = "torch's pickle layout"
_START = bytes((PROTO, 2))
_TOP = bytes((EMPTY_DICT, MARK))


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
        return _decode(data)


def _decode(data: bytes) -> Decoded:
    header, entries = read_dump(Machine(data, [], pickler="torch's pickler"), len(_START), _entries)
    return Decoded(header, entries)


def _entries(reader: Machine, pos: int) -> tuple[EntryColumns, int]:
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
    reader: Machine,
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
