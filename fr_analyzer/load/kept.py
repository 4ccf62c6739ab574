"""A graph of frozen dataclasses kept as bytes, and read back, without pickle: what the cache
keeps of an analysis beside the table it was made from (`RankCache.read_kept`).

The structure is JSON, parsed through the door (`safety.door.parse_json`); numpy arrays are
raw typed blobs after it, each at a multiple of `ALIGN` (read back mapped, not copied), their
dtype from an allowlist (`DTYPES`), their shape and place checked against the file. Every
value is written with an explicit tag: tuples, lists, sets, frozensets, dicts (any keys),
dataclasses, enums, named tuples, arrays, numpy scalars; only `None`, booleans, integers,
floats and strings are plain JSON (and a list or tuple of those alone is one JSON list). A
dataclass or named tuple met twice is written once and then as a reference to the first, so
that what was one object is one object again (a finding named by several records is compared
by identity: `id(f)`, `f is root.finding`); an array met twice is one array too.

Classes are constructed only from a closed allowlist (`Kinds`), made once from a root class
by walking its fields' type hints (`kinds_of`): never by a name the file gives. A file naming
anything else, a value of the wrong shape, a blob out of place: `decode` returns None (a miss).
A graph holding a class outside the allowlist (or a cycle, or an array of another dtype) is
not kept: `encode` raises `Unkeepable`. Fields are not checked against their type hints
beyond that: the file is the user's own (the cache's rules), the checks are against damage.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import struct
import typing
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from .safety.door import parse_json

MAGIC = b"fr-analyze-kept/1\n"
"""What a kept graph's file begins with (its format's version in it: another is a miss)."""
HEAD = struct.Struct("<Q32s")
"""After `MAGIC`: the JSON line's length and its SHA-256 (a byte changed in it, even one that
leaves it JSON, is a miss; the arrays' bounds are checked, their bytes are the table's kind:
not hashed, a follow-up maps them)."""
ALIGN = 64
"""Where each array's bytes start in the file: a multiple of this."""
DTYPES = frozenset(
    np.dtype(t).str
    for t in (
        np.bool_,
        np.int8,
        np.uint8,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
        np.float32,
        np.float64,
    )
)
"""The array and scalar types kept (this machine's byte order): nothing holding objects."""


_PLAIN = frozenset({str, int, float, bool, type(None)})
"""What JSON holds as it is: a list or tuple of these alone is written as one JSON list."""


def _all_plain(items: Any) -> bool:
    return all(map(_PLAIN.__contains__, map(type, items)))


class Unkeepable(Exception):
    """The graph holds what cannot be kept (a class outside the allowlist, a cycle, an array
    of another dtype): it is not kept."""


@dataclasses.dataclass(frozen=True)
class Kinds:
    """The classes a kept graph may hold, each by its name in the file: dataclasses (each
    with the names of its fields, in order), enums and named tuples."""

    by_name: Mapping[str, type]
    names: Mapping[type, str]  # the other way round
    fields: Mapping[type, tuple[str, ...]]  # a dataclass's fields, in the order written
    by_keyword: frozenset[type]  # dataclasses with keyword-only fields (the others: in order)


def kinds_of(root: type, stops: Collection[type] = ()) -> Kinds:
    """Every dataclass, enum and named tuple reachable from the dataclass `root` through its
    fields' type hints (through unions, tuples, lists, sets, mappings), `root` included and
    `stops` left out (with what only they reach). Raises `TypeError` where two share a name
    or a dataclass has a field not set by its constructor."""
    by_name: dict[str, type] = {}
    fields: dict[type, tuple[str, ...]] = {}
    by_keyword: set[type] = set()
    seen: set[type] = set()

    def walk(hint: Any) -> None:
        if typing.get_origin(hint) is not None:
            for arg in typing.get_args(hint):
                walk(arg)
            return
        if not isinstance(hint, type) or hint in stops:
            return
        plain = dataclasses.is_dataclass(hint)
        named = issubclass(hint, tuple) and hasattr(hint, "_fields")
        if not (plain or named or issubclass(hint, enum.Enum)):
            return
        other = by_name.setdefault(hint.__qualname__, hint)
        if other is not hint:
            raise TypeError(f"two kept classes named {hint.__qualname__}")
        if hint in seen:
            return
        seen.add(hint)
        if plain:
            own = dataclasses.fields(hint)
            if not all(f.init for f in own):
                raise TypeError(f"{hint.__qualname__} has a field its constructor does not set")
            fields[hint] = tuple(f.name for f in own)
            if any(f.kw_only for f in own):
                by_keyword.add(hint)
        if plain or named:
            for sub in typing.get_type_hints(hint).values():
                walk(sub)

    walk(root)
    return Kinds(
        by_name,
        {cls: name for name, cls in by_name.items()},
        fields,
        frozenset(by_keyword),
    )


def encode(value: Any, kinds: Kinds, key: str) -> list[bytes | memoryview]:
    """`value` as the pieces of a file (`MAGIC`, `HEAD`, the JSON line with `key` in it, then
    each array's bytes at a multiple of `ALIGN`); raises `Unkeepable`."""
    writer = _Encoder(kinds)
    root = writer.value(value)
    layout: list[list[Any]] = []
    offsets: list[int] = []
    offset = 0
    for array in writer.arrays:
        offset = -(-offset // ALIGN) * ALIGN
        layout.append([array.dtype.str, list(array.shape), offset])
        offsets.append(offset)
        offset += array.nbytes
    text = json.dumps(
        {"key": key, "arrays": layout, "root": root}, separators=(",", ":"), ensure_ascii=True
    ).encode("ascii")
    start = len(MAGIC) + HEAD.size + len(text)
    text += b" " * (-start % ALIGN)  # JSON's own white space: the arrays start aligned
    head = HEAD.pack(len(text), hashlib.sha256(text).digest())
    pieces: list[bytes | memoryview] = [MAGIC + head + text]
    at = 0
    for offset, array in zip(offsets, writer.arrays, strict=True):
        pieces += [bytes(offset - at), array.data.cast("B")]
        at = offset + array.nbytes
    return pieces


def decode(data: npt.NDArray[np.uint8], kinds: Kinds, key: str) -> object | None:
    """The value `encode` wrote under `key` in `data` (the file's bytes), or None where it does
    not read back whole: another format or key, a tag or class not known, a blob out of
    place, a constructor that refuses its fields."""
    try:
        found: object = _decode(data, kinds, key)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return None
    except struct.error:
        return None
    return found


_MISSING = object()


def _decode(data: npt.NDArray[np.uint8], kinds: Kinds, key: str) -> Any:
    at = len(MAGIC)
    if len(data) < at + HEAD.size or data[:at].tobytes() != MAGIC:
        raise ValueError("not a kept graph")
    length, digest = HEAD.unpack_from(data.data, at)
    at += HEAD.size
    if at + length > len(data):
        raise ValueError("truncated")
    text = data[at : at + length].tobytes()
    if hashlib.sha256(text).digest() != digest:
        raise ValueError("a byte changed")
    doc = parse_json(text)
    if type(doc) is not dict or doc.get("key") != key:
        raise ValueError("another key")
    body = data[at + length :]
    arrays = [_array(body, *entry) for entry in doc["arrays"]]
    return _Decoder(kinds, arrays).value(doc["root"])


def _array(body: npt.NDArray[np.uint8], dtype: Any, shape: Any, offset: Any) -> np.ndarray:
    """One array's bytes, checked: its dtype allowed, its shape and place within the file."""
    if type(dtype) is not str or dtype not in DTYPES or type(shape) is not list:
        raise ValueError("an array of another type")
    if not all(type(d) is int and d >= 0 for d in shape) or type(offset) is not int:
        raise ValueError("an array of another shape")
    kind = np.dtype(dtype)
    size = math.prod(shape) * kind.itemsize
    if offset < 0 or offset % ALIGN or offset + size > len(body):
        raise ValueError("an array out of place")
    return body[offset : offset + size].view(kind).reshape(shape)


class _Encoder:
    def __init__(self, kinds: Kinds) -> None:
        self.kinds = kinds
        self.refs: dict[int, int] = {}  # an object's id -> its number (in the order finished)
        self.held: list[object] = []  # every object numbered: their ids stay their own
        self.open: set[int] = set()  # objects being written (one met again: a cycle)
        self.arrays: list[np.ndarray] = []
        self.array_at: dict[int, int] = {}
        self.held_arrays: list[np.ndarray] = []

    def value(self, v: Any) -> Any:
        kind = type(v)
        if v is None or kind is bool or kind is int or kind is str or kind is float:
            return v
        if kind is tuple or kind is list:
            if _all_plain(v):  # one JSON list, taken back as it is (checked)
                return ["T" if kind is tuple else "L", list(v)]
            return ["t" if kind is tuple else "l", *[self.value(x) for x in v]]
        if kind is frozenset or kind is set:
            return ["s" if kind is frozenset else "S", *[self.value(x) for x in v]]
        if kind is dict:
            out: list[Any] = ["d"]
            for k, x in v.items():
                out += [self.value(k), self.value(x)]
            return out
        if kind is np.ndarray:
            return ["a", self.array(v)]
        if isinstance(v, np.generic):
            if v.dtype.str not in DTYPES:
                raise Unkeepable(f"a numpy scalar of type {v.dtype}")
            return ["n", v.dtype.str, v.item()]
        name = self.kinds.names.get(kind)
        if name is None:
            raise Unkeepable(f"a {kind.__qualname__}, not a kept class")
        if isinstance(v, enum.Enum):
            return ["E", name, v.value]
        number = self.refs.get(id(v))
        if number is not None:
            return ["r", number]
        if id(v) in self.open:
            raise Unkeepable(f"a cycle through a {name}")
        self.open.add(id(v))
        names = self.kinds.fields.get(kind)
        if names is None:  # a named tuple
            body = ["N", name, *[self.value(x) for x in v]]
        else:
            body = ["D", name, *[self.value(getattr(v, n)) for n in names]]
        self.open.discard(id(v))
        self.refs[id(v)] = len(self.held)
        self.held.append(v)
        return body

    def array(self, v: np.ndarray) -> int:
        found = self.array_at.get(id(v))
        if found is not None:
            return found
        if v.dtype.str not in DTYPES:
            raise Unkeepable(f"an array of type {v.dtype}")
        self.held_arrays.append(v)
        number = self.array_at[id(v)] = len(self.arrays)
        self.arrays.append(np.ascontiguousarray(v))
        return number


class _Decoder:
    def __init__(self, kinds: Kinds, arrays: list[np.ndarray]) -> None:
        self.kinds = kinds
        self.arrays = arrays
        self.made: list[object] = []  # every dataclass and named tuple, in the order finished

    def value(self, v: Any) -> Any:
        kind = type(v)
        if v is None or kind is bool or kind is int or kind is str or kind is float:
            return v
        if kind is not list or not v:
            raise ValueError("a value with no tag")
        tag = v[0]
        if tag == "T" or tag == "L":
            items = v[1]
            if len(v) != 2 or type(items) is not list or not _all_plain(items):
                raise ValueError("a list of plain values that holds others")
            return tuple(items) if tag == "T" else items
        if tag == "t":
            return tuple([self.value(x) for x in v[1:]])
        if tag == "D" or tag == "N":
            cls = self.kinds.by_name[v[1]]
            items = [self.value(x) for x in v[2:]]
            names = self.kinds.fields.get(cls)
            if tag == "D":
                if names is None or len(items) != len(names):
                    raise ValueError(f"not the fields of a {v[1]}")
                if cls in self.kinds.by_keyword:
                    made = cls(**dict(zip(names, items, strict=True)))
                else:
                    made = cls(*items)
            else:
                if names is not None or not issubclass(cls, tuple):
                    raise ValueError(f"{v[1]} is not a named tuple")
                made = cls(*items)
            self.made.append(made)
            return made
        if tag == "r":
            number = v[1]
            if type(number) is not int or number < 0:
                raise ValueError("a reference that is not a number")
            return self.made[number]
        if tag == "E":
            cls = self.kinds.by_name[v[1]]
            if not issubclass(cls, enum.Enum) or len(v) != 3:
                raise ValueError(f"{v[1]} is not an enum")
            return cls(v[2])
        if tag == "l":
            return [self.value(x) for x in v[1:]]
        if tag == "d":
            if len(v) % 2 != 1:
                raise ValueError("a dict with a key and no value")
            items = [self.value(x) for x in v[1:]]
            return dict(zip(items[::2], items[1::2], strict=True))
        if tag == "s":
            return frozenset([self.value(x) for x in v[1:]])
        if tag == "S":
            return {self.value(x) for x in v[1:]}
        if tag == "a":
            number = v[1]
            if type(number) is not int or number < 0 or len(v) != 2:
                raise ValueError("an array that is not a number")
            return self.arrays[number]
        if tag == "n":
            if type(v[1]) is not str or v[1] not in DTYPES or len(v) != 3:
                raise ValueError("a numpy scalar of another type")
            if type(v[2]) not in (bool, int, float):
                raise ValueError("a numpy scalar that is not a number")
            return np.dtype(v[1]).type(v[2])
        raise ValueError(f"an unknown tag {tag!r}")
