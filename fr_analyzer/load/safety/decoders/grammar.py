"""The layout grammars of torch's and Python's picklers, shared by the pickle decoders
(`decode`: torch's; `decode_python`: Python's): how an entry of a given layout (its keys' memo
slots, in order) is written, as one compiled regular expression with a capture per run of
adjacent keys whose values vary from entry to entry (integers) or repeat.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ...formats.schema import ENTRY_KEYS, VARYING_KEYS, Kind
from ..limits import LIMITS
from .opcodes import CODES

MAX_DEPTH = LIMITS.max_nesting
"""Containers nested deeper than this are left to the general path (`Limits.max_nesting`)."""


# How the entry expression reads the value of each key. Each `<NAME>` is that opcode's byte
# (`opcodes`); the other bytes are data (lengths, memo slots, values).
def _ops(template: bytes) -> bytes:
    """`template` with each `<NAME>` replaced by the byte of that opcode, escaped."""
    return re.sub(rb"<([A-Z0-9_]+)>", lambda m: re.escape(bytes([CODES[m[1].decode()]])), template)


def _text(opcode: bytes, length_pad: bytes, then: bytes) -> bytes:
    """A string of up to 255 bytes written by `opcode` (its length: one byte, then
    `length_pad`), followed by `then` (its memo put)."""
    return (
        _ops(b"<" + opcode + b">(?:")
        + b"|".join(re.escape(bytes([n])) + length_pad + b".{%d}" % n for n in range(256))
        + b")"
        + then
    )


_INT_BODY = _ops(
    rb"<BININT1>.|<BININT2>..|<BININT>....|<LONG1>"
    rb"(?:\x00|\x01.|\x02..|\x03...|\x04....|\x05.{5}|\x06.{6}|\x07.{7}|\x08.{8})"
)
_REF_BODY = _ops(rb"<BINGET>.|<LONG_BINGET>....")
# A string first written inside an entry (a new op name or frame): BINUNICODE of up to 255
# bytes, then its memo put. And a frame dict first written inside an entry's frames: its keys
# and values references, new strings or integers, then its memo put.
_PUT = _ops(rb"(?:<BINPUT>.|<LONG_BINPUT>....)")
_TEXT = _text(b"BINUNICODE", b"\x00\x00\x00", _PUT)
_REF_OR_TEXT = _REF_BODY + b"|" + _TEXT
_NEW_DICT, _NEW_LIST = _ops(b"<EMPTY_DICT><MARK>"), _ops(b"<EMPTY_LIST><MARK>")
_NONE, _SETITEMS, _APPENDS = _ops(b"<NONE>"), _ops(b"<SETITEMS>"), _ops(b"<APPENDS>")
_FRAME = (
    _REF_BODY
    + b"|"
    + _NEW_DICT
    + b"(?:"
    + _REF_OR_TEXT
    + b"|"
    + _NONE
    + b"|"
    + _INT_BODY
    + b")*+"
    + _SETITEMS
    + _PUT
)
_BODY = {
    "int": _INT_BODY,
    "optional int": _NONE + b"|" + _INT_BODY,
    "flag": _ops(b"[<NEWTRUE><NEWFALSE><NONE>]"),
    "ref": _REF_OR_TEXT,
    "refs": _NEW_LIST + b"(?:" + _REF_OR_TEXT + b")*+" + _APPENDS,
    "frames": _NEW_LIST + b"(?:" + _FRAME + b")*+" + _APPENDS,
    # a dimension past 2**31: LONG1
    "shapes": _NEW_LIST
    + b"(?:"
    + _NEW_LIST
    + b"(?:"
    + _INT_BODY
    + b")*+"
    + _APPENDS
    + b")*+"
    + _APPENDS,
    "pair": b"(?:" + _REF_OR_TEXT + b")(?:" + _REF_OR_TEXT + b")" + _ops(b"<TUPLE2>"),
    "float": _ops(b"<NONE>|<BINFLOAT>.{8}"),
    "scalar": _ops(b"<NONE>|[<NEWTRUE><NEWFALSE>]|<BINFLOAT>.{8}|") + _REF_BODY + b"|" + _INT_BODY,
}
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
class Run:
    """Adjacent keys of a layout read by one capture: the bytes of the first value, then the
    key reference and value of each next key (`refs`: each such reference's length)."""

    names: tuple[str, ...]
    varying: bool
    refs: tuple[int, ...]


@dataclass(frozen=True)
class Layout:
    """The expression reading one entry of a layout, and its runs (a capture each)."""

    runs: tuple[Run, ...]
    regex: re.Pattern[bytes]


# How Python's pickler (protocols 4 and 5; 2 and 3 once their puts are MEMOIZE, see
# `decode_python`) writes the same values: every list, dict and tuple is memoized (MEMOIZE,
# no slot number: equal values stay equal bytes), a list of one item is appended alone
# (APPEND), and a list, tuple or frames list met before is a memo reference.
_MEMO_LIST, _MEMOIZE = _ops(b"<EMPTY_LIST><MEMOIZE>"), _ops(b"<MEMOIZE>")
_MARK, _APPEND = _ops(b"<MARK>"), _ops(b"<APPEND>")
_PY_INTS = b"(?:" + _INT_BODY + b")"
_PY_SHAPE = (
    b"(?:"
    + _MEMO_LIST
    + b"(?:"
    + _MARK
    + _PY_INTS
    + b"++"
    + _APPENDS
    + b"|"
    + _PY_INTS
    + _APPEND
    + b")?|"
    + _REF_BODY
    + b")"
)
# A string written again (another object of the same value: some writers build one per
# entry), or first written inside an entry, instead of referred to: SHORT_BINUNICODE (up to
# 255 bytes), then MEMOIZE; in protocols 2 and 3, BINUNICODE (its puts made MEMOIZE, see
# `decode_python`).
_PY_TEXTS = {
    4: _text(b"SHORT_BINUNICODE", b"", _MEMOIZE),
    2: _text(b"BINUNICODE", b"\x00\x00\x00", _MEMOIZE),
}


def _py_list(item: bytes) -> bytes:
    """A list as Python's pickler writes it: memoized, then its items in a batch, one item
    appended alone, or none; or a reference to one met before."""
    return (
        _MEMO_LIST
        + b"(?:"
        + _MARK
        + b"(?:"
        + item
        + b")++"
        + _APPENDS
        + b"|(?:"
        + item
        + b")"
        + _APPEND
        + b")?|"
        + _REF_BODY
    )


def _py_bodies(text: bytes) -> dict[str, bytes]:
    """How Python's pickler writes each kind of value, its strings written by `text`."""
    ref_or_text = _REF_BODY + b"|" + text
    # A frame dict first written inside an entry's frames (Python's pickler writes each
    # distinct frame once, where it is first met): its keys and values references, new
    # strings or integers.
    frame = (
        _REF_BODY
        + b"|"
        + _ops(b"<EMPTY_DICT><MEMOIZE><MARK>")
        + b"(?:"
        + ref_or_text
        + b"|"
        + _NONE
        + b"|"
        + _INT_BODY
        + b")*+"
        + _SETITEMS
    )
    return _BODY | {
        "ref": ref_or_text,
        "scalar": _BODY["scalar"] + b"|" + text,
        "refs": _py_list(ref_or_text),
        "frames": _py_list(frame),
        "shapes": _MEMO_LIST
        + b"(?:"
        + _MARK
        + _PY_SHAPE
        + b"++"
        + _APPENDS
        + b"|"
        + _PY_SHAPE
        + _APPEND
        + b")?|"
        + _REF_BODY,
        # The reference first: it is what every entry but the first holds, and tried second
        # it would cost a failed tuple on each.
        "pair": _REF_BODY
        + b"|(?:"
        + ref_or_text
        + b")(?:"
        + ref_or_text
        + b")"
        + _ops(b"<TUPLE2><MEMOIZE>"),
    }


_PY_BODIES = {protocol: _py_bodies(text) for protocol, text in _PY_TEXTS.items()}
# An entry of Python's: its dict memoized. The entry list's batch boundaries (Python's pickler
# appends a thousand items at a time) are left between two matches, where the exact reader
# takes them: an expression that began with an optional boundary would be tried at every byte,
# where one that begins with a fixed string is only tried where that string is (10% of a split).
_START = {False: _NEW_DICT, True: _ops(b"<EMPTY_DICT><MEMOIZE><MARK>")}
_END = _SETITEMS

_LAYOUTS: dict[tuple[bool, int, tuple[tuple[str, int], ...]], Layout] = {}  # compiled, per process
_LAYOUTS_MOST = 64


def layout_of(keys: Sequence[tuple[str, int]], python: bool = False, protocol: int = 4) -> Layout:
    """The expression reading one entry whose keys are these (name, memo slot) in order: one
    capture per run of varying keys or of repeating ones; as torch's pickler writes it, or
    (`python`) as Python's does: `protocol` 4 or 5, or 2 or 3 (strings as BINUNICODE)."""
    protocol = 4 if protocol >= 4 else 2
    ident = (python, protocol, tuple(keys))
    bodies = _PY_BODIES[protocol] if python else _BODY
    found = _LAYOUTS.get(ident)
    if found is None:
        parts = [_START[python]]
        runs: list[Run] = []
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
            runs.append(Run(tuple(names), varying, tuple(refs)))
        parts.append(_END)
        if len(_LAYOUTS) >= _LAYOUTS_MOST:
            _LAYOUTS.clear()
        found = _LAYOUTS[ident] = Layout(tuple(runs), re.compile(b"".join(parts), re.DOTALL))
    return found
