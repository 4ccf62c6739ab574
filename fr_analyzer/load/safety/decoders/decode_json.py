"""Decode a dump written as JSON the way torch writes it straight into entry columns.

torch's `_dump_fr_trace_json` writes compact JSON (no whitespace) with each object's keys
sorted; Python's `json.dump` writes `, ` and `: ` between items. Either way every entry is an
object with the same keys in the same order, and its bytes differ from another entry's mostly
in the integers that vary (record and sequence ids, timestamps). `json.loads` builds some 100k
objects a rank that the column-wise reader then walks; this reader keeps `decode`'s design
instead:

- the first entry gives the layout (its keys, in order) and the separators between items;
- one compiled regular expression reads every entry of that layout in one `re.split`,
  capturing each varying integer on its own and each run of adjacent repeating keys (group,
  op, shapes, dtypes, stack, state, flags) as bytes;
- each distinct capture of a repeating run is decoded once by `json.loads`, and the entries
  share one code per combination of captures (`columns.Columns`); the integers are parsed
  column by column.

Exactness. The expression tokenizes JSON strictly (strings with their escapes, numbers,
literals, arrays and objects of those), and ends an entry at its separator, so the file is cut
only between elements of the entry array. Everything between two matches, and after the last,
is read by `json.loads`: the header with the entries the expression did not read, and the
entries between matches. Any doubt (a second key `entries` anywhere, however its escapes spell
it, a separator out of place, an integer past int64, a capture `json.loads` refuses) sends the
file to the general path, which gives the reason.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ....model.dump import Fallback, Writer
from ...formats.outcomes import NotDecoded, outside, reading_layout
from ...formats.schema import ENTRY_KEYS, VARYING_KEYS, Kind
from ..door import parse_json, parse_json_prefix
from .columns import Columns, Decoded, IntRuns, Slow, VaryingRuns, keep_slow
from .grammar import Run

_INT = rb"-?(?:0|[1-9][0-9]*+)"
_NUMBER = _INT + rb"(?:\.[0-9]++)?(?:[eE][-+]?[0-9]++)?|NaN|-?Infinity"
_STR = rb'"[^"\\\x00-\x1f]*+(?:\\.[^"\\\x00-\x1f]*+)*+"'
_SCALAR = _STR + rb"|" + _NUMBER + rb"|true|false|null"


def _list_of(item: bytes, sep: bytes) -> bytes:
    return rb"\[(?:(?:" + item + rb")(?:" + sep + rb"(?:" + item + rb"))*+)?\]"


def _bodies(sep: bytes, colon: bytes) -> dict[Kind, bytes]:
    """How the expression reads a value of each kind, with these separators."""
    member = _STR + colon + rb"(?:" + _SCALAR + rb")"
    frame = rb"\{(?:" + member + rb"(?:" + sep + member + rb")*+)?\}"
    return {
        Kind.INT: _INT,
        Kind.OPTIONAL_INT: rb"null|" + _INT,
        Kind.FLAG: rb"true|false",
        Kind.TEXT: _STR,
        Kind.SCALAR: _SCALAR,
        Kind.TEXTS: _list_of(_STR, sep),
        Kind.SHAPES: _list_of(_list_of(_INT, sep), sep),
        Kind.PAIR: rb"\[" + _STR + sep + _STR + rb"\]",
        Kind.FLOAT: rb"null|" + _NUMBER,
        Kind.FRAMES: _list_of(frame, sep),
    }


# Separators between items and between a key and its value: torch's compact JSON, and
# Python's `json.dump` by default.
_STYLES = ((b",", b":"), (b", ", b": "))
_KIND = {key.name: key.kind for key in ENTRY_KEYS}
_ENTRIES = b'"entries"'


class _Layout:
    """The expression reading one entry of these keys, written with these separators (the
    entry's own separator after it): a capture per varying key, and one per run of adjacent
    repeating keys."""

    def __init__(self, keys: Sequence[str], sep: bytes, colon: bytes) -> None:
        bodies = _bodies(re.escape(sep), re.escape(colon))

        def key(name: str) -> bytes:
            return re.escape(json.dumps(name).encode()) + re.escape(colon)

        def body(name: str) -> bytes:
            return rb"(?:" + bodies[_KIND.get(name, Kind.SCALAR)] + rb")"

        fields: list[bytes] = []  # each `"key": (value ...)`, joined by the separator
        runs: list[Run] = []
        for varying, group in itertools.groupby(keys, lambda name: name in VARYING_KEYS):
            names = list(group)
            if varying:  # each integer a capture of its own
                fields += [key(name) + rb"(" + body(name) + rb")" for name in names]
                runs += [Run((name,), True, ()) for name in names]
                continue
            inside = [body(names[0])] + [key(name) + body(name) for name in names[1:]]
            fields.append(key(names[0]) + rb"(" + re.escape(sep).join(inside) + rb")")
            runs.append(Run(tuple(names), False, ()))
        # An entry ends with its separator, or (the last) before the array's end.
        end = rb"\}(?:" + re.escape(sep) + rb"|(?=\]))"
        pattern = rb"\{" + re.escape(sep).join(fields) + end
        self.runs = tuple(runs)
        self.regex = re.compile(pattern, re.DOTALL)


_LAYOUTS: dict[tuple[tuple[str, ...], bytes, bytes], _Layout] = {}  # compiled, per process
_LAYOUTS_MOST = 64


def _layout(keys: tuple[str, ...], sep: bytes, colon: bytes) -> _Layout:
    found = _LAYOUTS.get((keys, sep, colon))
    if found is None:
        if len(_LAYOUTS) >= _LAYOUTS_MOST:
            _LAYOUTS.clear()
        found = _LAYOUTS[keys, sep, colon] = _Layout(keys, sep, colon)
    return found


class _Runs:
    """Decodes the distinct captures of a repeating run (`columns.Columns` asks): the run's
    values, in order. JSON has no memo."""

    def __init__(self) -> None:
        self.memo: list[Any] = []

    def run(self, data: bytes, size: int) -> list[Any]:
        found = parse_json(b'{"":' + data + b"}")
        if type(found) is not dict or len(found) != size:
            raise outside("a run of keys that is not whole")
        return list(found.values())

    def entry(self, pos: int) -> tuple[Any, int]:
        raise outside("no entry is read at a position")  # `Columns` never asks


def decode_json_layout(data: bytes) -> Decoded:
    """The dump, decoded from JSON laid out the way torch (or Python's `json`) writes it;
    `NotDecoded` (why, in the words the rank records) when it is not."""
    pos, sep, colon = _entries_start(data)
    torch = sep == b","
    layout = "torch's JSON layout" if torch else "Python's JSON layout"
    writer = Writer.TORCH_JSON if torch else Writer.PYTHON_JSON
    # JSONDecodeError and UnicodeError are ValueErrors
    with reading_layout(writer, layout, (ValueError, RecursionError, OverflowError)):
        return _decode(data, pos, sep, colon)


def _decode(data: bytes, pos: int, sep: bytes, colon: bytes) -> Decoded:
    slow: list[Slow] = []
    runs: tuple[Run, ...] = ()
    captured: list[list[bytes]] = []
    fast = 0
    tail = data[pos:]
    if tail[:1] != b"]":
        layout = _layout(_first_keys(tail), sep, colon)
        if layout.regex.match(tail) is None:
            raise outside("the first entry laid out otherwise (spaces, or an odd value)")
        parts = layout.regex.split(tail)
        stride = len(layout.runs) + 1
        fast = (len(parts) - 1) // stride
        runs = layout.runs
        gaps = parts[::stride]
        for k in itertools.compress(range(fast), gaps):  # entries between matches
            _gap_entries(gaps[k], sep, slow, k)
        captured = [parts[i + 1 :: stride] for i in range(len(runs))]
        read = len(tail) - len(gaps[-1])
        tail = gaps[-1]
        # After the last match: more entries (the match took a separator) or the array's end
        # (it did not), else a separator after the last entry, which JSON does not allow.
        if (tail.lstrip(b" \t\n\r")[:1] == b"]") == data.endswith(sep, pos, pos + read):
            raise outside("a separator after the last entry, or none before the next")
    text = data[:pos] + tail  # the header, with the entries the expression left
    header = _header(text)
    rest = header.pop("entries", None)
    if type(rest) is not list:
        raise outside("not one entry list at the top level")
    for entry in rest:
        keep_slow(entry, slow, fast)
    columns = Columns(_Runs(), fast, slow).build(zip(runs, captured, strict=True), ints=_ints)
    return Decoded(header, columns)


def _header(text: bytes) -> dict[str, Any]:
    """The top-level object of `text` (the file less the entries the expression read), as
    `json.loads` gives it; refused unless exactly one key in `text`, compared once unescaped,
    is `entries`. That key is then the one the entry array was found after (a key, as the
    bytes `"entries":[` outside a string can only be), and the top-level object's if it has
    one: the array read is the one `json.loads` takes for the entries. A key spelled with
    escapes (`"\\u0065ntries"`, the same key to `json.loads`) is counted too."""
    if b"\\" not in text:  # no escape anywhere: each key is spelled as its bytes are
        found = parse_json(text)
        named = text.count(_ENTRIES)
    else:
        named = 0

        def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
            nonlocal named
            named += sum(key == "entries" for key, _ in items)
            return dict(items)  # as `json.loads` builds it: the last of equal keys wins

        found = parse_json(text, object_pairs_hook=pairs)
    if type(found) is not dict or named != 1:
        raise outside("not one entry list at the top level")
    return found


def _first_keys(tail: bytes) -> tuple[str, ...]:
    """The keys of the entry `tail` starts with, in order (the layout of the entries)."""
    try:  # an entry is rarely longer than 64 KiB: no need to decode the whole file for it
        first, _ = parse_json_prefix(tail[: 1 << 16].decode("utf-8", "replace"))
    except ValueError:
        first, _ = parse_json_prefix(tail.decode("utf-8", "replace"))
    if type(first) is not dict or not first:
        raise outside("an entry that is not an object")
    return tuple(first)


def _entries_start(data: bytes) -> tuple[int, bytes, bytes]:
    """Where the entry array's first element starts, and the separators the file uses;
    `NotDecoded` when the file is not laid out so."""
    at = data.find(_ENTRIES)
    if at < 1 or data[at - 1 : at] not in (b"{", b",", b" "):
        raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "not torch's JSON layout (no entry list)")
    for sep, colon in _STYLES:
        opening = _ENTRIES + colon + b"["
        if data.startswith(opening, at):
            return at + len(opening), sep, colon
    raise NotDecoded(
        Fallback.NOT_THIS_LAYOUT, "not torch's JSON layout (an entry list laid out otherwise)"
    )


def _gap_entries(gap: bytes, sep: bytes, slow: list[Slow], fast_before: int) -> None:
    """The whole entries between two matches, each followed by its separator."""
    found = parse_json(b"[" + gap[: -len(sep)] + b"]") if gap.endswith(sep) else None
    if not found:  # a stray separator, or an entry read outside its layout
        raise outside("an entry read outside its layout")
    for entry in found:
        keep_slow(entry, slow, fast_before)


def _ints(runs: VaryingRuns) -> IntRuns:
    """The integers of the varying captures (decimal, or `null` for an unset optional one:
    -1), a column per run; an integer past int64 is refused (OverflowError)."""
    columns = []
    for caps, _ in runs:
        if b"null" in caps:
            values = np.fromiter((-1 if c == b"null" else int(c) for c in caps), np.int64)
        else:
            values = np.fromiter(map(int, caps), np.int64, len(caps))
        columns.append([values])
    return columns
