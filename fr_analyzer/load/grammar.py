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

from .schema import ENTRY_KEYS, VARYING_KEYS, Kind

MAX_DEPTH = 64
"""Containers nested deeper than this are left to the general path."""

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

_LAYOUTS: dict[tuple[bool, tuple[tuple[str, int], ...]], Layout] = {}  # compiled, per process
_LAYOUTS_MOST = 64


def layout_of(keys: Sequence[tuple[str, int]], python: bool = False) -> Layout:
    """The expression reading one entry whose keys are these (name, memo slot) in order: one
    capture per run of varying keys or of repeating ones; as torch's pickler writes it, or
    (`python`) as Python's does."""
    ident = (python, tuple(keys))
    bodies = _PY_BODY if python else _BODY
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
        parts.append(b"u")
        if len(_LAYOUTS) >= _LAYOUTS_MOST:
            _LAYOUTS.clear()
        found = _LAYOUTS[ident] = Layout(tuple(runs), re.compile(b"".join(parts), re.DOTALL))
    return found
