"""Reading single values from a dump: integers, times, durations, member lists, profiling
names, shapes, and the per-rank tables (strings, shapes, dtypes, stacks) that codes index.

Every reader shares these: a value either comes back clean (printable text, bounded numbers)
or raises `EntryError` naming what is wrong with it, and the entry holding it is skipped.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ...model.numbers import decimal
from ...model.ops import P2P_OPS, UNPAIRED_P2P_OPS
from ...model.ranks import MAX_RANK
from ...model.records import ANY_SOURCE, UNKNOWN_PEER, Frame, P2PKind
from ..common import (
    EXPANSION_FACTOR,
    EXPANSION_FLOOR,
    INT64_MAX,
    MAX_DIMS,
    MAX_DURATION_MS,
    MAX_NUMEL,
    MAX_SEQ_ID,
    NO_TIME,
    printable,
    scalar_text,
    short,
)
from ..safety.limits import LIMITS, MIB


class EntryError(Exception):
    """One entry's value cannot be read; the message says which and why."""

    pass


class Bomb(Exception):
    """The dump expands far beyond its size: it repeats references to big lists."""


_INT_RE = re.compile(r"\s*[+-]?[0-9]{1,19}\s*", re.ASCII)


def as_int(value: Any, what: str) -> int:
    """An int, a whole float, or a short decimal string ("12": JSON dumps and old tests write
    sequence ids so), within int64."""
    if type(value) is int:
        result = value
    elif isinstance(value, bool):
        raise EntryError(f"{what} is a boolean")
    elif (isinstance(value, float) and math.isfinite(value) and value.is_integer()) or (
        isinstance(value, str) and _INT_RE.fullmatch(value)
    ):
        result = int(value)
    else:
        raise EntryError(f"{what} is not an integer: {short(value)}")
    if not -INT64_MAX <= result <= INT64_MAX:
        raise EntryError(f"{what} out of range: {short(result)}")
    return result


def seq_id(value: Any, what: str) -> int:
    """A sequence id from `value` (-1 unset); an EntryError if negative or out of range."""
    result = value if type(value) is int else as_int(value, what)
    if result < -1:
        raise EntryError("negative sequence id")
    if result > MAX_SEQ_ID:
        raise EntryError(f"{what} out of range: {short(result)}")
    return result


def timestamp(value: Any) -> int:
    """A timestamp in ns from `value`, or NO_TIME when it is unset, zero or not an integer."""
    if value is None or value == 0 or isinstance(value, bool):
        return NO_TIME
    try:
        result = as_int(value, "timestamp")
    except EntryError:
        return NO_TIME
    return result if result > 0 else NO_TIME


def int_or_unset(value: Any) -> int:
    """An int64 from `value`, or -1 when it is unset or not an integer."""
    if type(value) is int and -INT64_MAX <= value <= INT64_MAX:
        return value
    try:
        return as_int(value, "value")
    except EntryError:
        return -1


def duration(value: Any) -> float:
    """A duration in ms from `value`, or NaN when it is unset, negative or past MAX_DURATION_MS."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return math.nan
    try:
        result = float(value)
    except (ValueError, OverflowError):
        return math.nan
    return result if 0 <= result <= MAX_DURATION_MS else math.nan  # NaN fails both


_PARSED_RANKS: dict[str, tuple[int, ...] | None] = {}
"""Member lists already parsed by this process, by their text: every rank of a job lists the
world group (16,384 members at 16,384 ranks), and a worker process reads many ranks. The same
text gives the same tuple object, which later stages recognize by identity."""
_PARSED_RANKS_MOST = 4096


def parse_ranks(value: Any) -> tuple[int, ...] | None:
    """pg_config ranks: a string like "[0, 1]" (or a list); None when empty or unparsable."""
    if type(value) is str:
        if value in _PARSED_RANKS:
            return _PARSED_RANKS[value]
        if len(_PARSED_RANKS) >= _PARSED_RANKS_MOST:
            _PARSED_RANKS.clear()
        parsed = _PARSED_RANKS[value] = _parse_ranks_uncached(value)
        return parsed
    return _parse_ranks_uncached(value)


def _parse_ranks_uncached(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("[") and text.endswith("]")):
            return None
        parts = [part.strip() for part in text[1:-1].split(",")]
        numbers = [decimal(part, MAX_RANK) for part in parts if part]
        if None in numbers:
            return None
        ranks = [n for n in numbers if n is not None]
    elif isinstance(value, list | tuple):
        if not all(type(v) is int for v in value):
            return None
        ranks = list(value)
    else:
        return None
    if not ranks or len(set(ranks)) != len(ranks) or not 0 <= min(ranks) <= max(ranks) <= MAX_RANK:
        return None
    return tuple(sorted(ranks))


class Interner:
    """Maps hashable values to dense codes, keeping the values in a list."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Any) -> int:
        """The code of `value`, a new one if it is new."""
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code


def parse_name(pname: str) -> tuple[str, str, int, int, int]:
    """`"nccl:send 0->1"` → (backend, op, p2p kind, local src, local dst)."""
    backend, sep, rest = pname.partition(":")
    if not sep:
        raise EntryError(f"profiling_name {short(pname, 60)} has no '<backend>:' prefix")
    op, _, peer = rest.strip().partition(" ")
    if not op:
        raise EntryError(f"profiling_name {short(pname, 60)} names no op")
    backend, op = printable(backend), printable(op)
    if op == "send" and "->" in peer:
        src, _, dst = peer.partition("->")
        return backend, op, P2PKind.SEND, _peer(src), _peer(dst)
    if op == "recv" and "<-" in peer:
        dst, _, src = peer.partition("<-")
        return backend, op, P2PKind.RECV, _peer(src), _peer(dst)
    if op in UNPAIRED_P2P_OPS:  # a batch of sends and receives, no peer or direction
        return backend, op, P2PKind.SEND, UNKNOWN_PEER, UNKNOWN_PEER
    if op in P2P_OPS and not peer:  # torchcomms names no peer: a send/recv never paired
        kind = P2PKind.SEND if op == "send" else P2PKind.RECV
        return backend, op, kind, UNKNOWN_PEER, UNKNOWN_PEER
    if op in P2P_OPS:
        raise EntryError(f"profiling_name {short(pname, 60)} has a malformed peer")
    return backend, op, P2PKind.NONE, -1, -1


def _peer(text: str) -> int:
    text = text.strip()
    if text == "?":
        return ANY_SOURCE
    rank = decimal(text, MAX_RANK)
    if rank is None:
        raise EntryError(f"bad peer rank {short(text, 20)}")
    return rank


_Cached = tuple[int, int] | EntryError  # (code, items it stands for) or why it is unusable
_SMALL = 8  # shape lists this short are read where they are met; longer ones once per object


class ValueReader:
    """Normalization state of one rank. Lists are read once per object, however often a pickle
    refers to them (memo references), and the items they stand for are counted: a file whose
    entries would expand far beyond its size is a bomb, not a dump. Caches are keyed by id(),
    which is safe because the loaded dump keeps every object alive while it is read."""

    def __init__(self, nbytes: int | None) -> None:
        self.limit = None if nbytes is None else EXPANSION_FACTOR * nbytes + EXPANSION_FLOOR
        self.text_limit = (
            None
            if nbytes is None
            else LIMITS.text_expansion_factor * nbytes + LIMITS.text_expansion_floor
        )
        self.nbytes = nbytes
        self.items = 0
        self.texts: dict[Any, str] = {}
        self.groups, self.ops, self.backends = Interner(), Interner(), Interner()
        self.pnames, self.shapes, self.dtypes, self.stacks = (
            Interner(),
            Interner(),
            Interner(),
            Interner(),
        )
        self.frames: dict[tuple[str, str, int], Frame] = {}  # by the values as found
        self.clean_frames: dict[tuple[str, str, int], Frame] = {}
        self.names: dict[str, tuple[str, str, int, int, int] | EntryError] = {}
        self.shape_lists: dict[int, _Cached] = {}
        self.dtype_lists: dict[int, _Cached] = {}
        self.stack_lists: dict[int, _Cached] = {}

    def bomb(self) -> Bomb:
        """The Bomb refusing this file: its entries expand past the limit."""
        return Bomb(
            f"refused: its entries expand to over {self.limit} items (shape dimensions, dtypes,"
            f" frames) from {self.nbytes} bytes: a pickle that repeats references to big lists"
            " (a memo bomb)"
        )

    def text_bomb(self, held: int) -> Bomb:
        """The refusal of a rank whose entries hold `held` characters of text (counted as
        the outputs write it: once per entry, stacks once each), over `text_limit`."""
        nbytes = self.nbytes or 0
        return Bomb(
            f"refused: its entries expand to {held / MIB:,.0f} MB of text (names, dtypes,"
            f" stacks) from a {nbytes / MIB:,.1f} MB file, over the limit of"
            f" {(self.text_limit or 0) / MIB:,.0f} MB: a pickle that repeats references to"
            " long strings (a memo bomb?)"
        )

    def text(self, value: Any) -> str | None:
        """Printable text for a str or scalar; None for containers."""
        if type(value) is str:
            if len(value) <= 64 and value.isprintable():
                return value
        elif type(value) is not bytes:
            return None if isinstance(value, bytearray) else scalar_text(value)
        cached = self.texts.get(value)  # long or odd text is cleaned once, however often used
        if cached is None:
            text = value if type(value) is str else value.decode("utf-8", "replace")
            cached = self.texts[value] = printable(text)
        return cached

    def name(self, pname: str) -> tuple[str, str, int, int, int] | EntryError:
        """The parts of a profiling name (cached), or the EntryError it gives."""
        try:
            parsed: tuple[str, str, int, int, int] | EntryError = parse_name(pname)
        except EntryError as exc:
            parsed = exc
        self.names[pname] = parsed
        return parsed

    # The *_of methods read one list the first time it is met and remember (code, items) by
    # the list's id; the caller looks the id up first.

    def shapes_of(self, value: Any, what: str) -> _Cached:
        """The code of a list of shapes (cached per object), and the items it holds."""
        try:
            if value is None:
                found: _Cached = (self.shapes(()), 0)
            elif not isinstance(value, list | tuple):
                raise EntryError(f"{what} is not a list")
            else:
                shapes = tuple(dims(shape, what) for shape in value)
                found = (self.shapes(shapes), 1 + len(shapes) + sum(map(len, shapes)))
        except EntryError as exc:
            found = exc
        self.shape_lists[id(value)] = found
        return found

    def dtypes_of(self, value: Any) -> _Cached:
        """The code of a list of dtypes (cached per object), and the items it holds."""
        try:
            if value is None:
                found: _Cached = (self.dtypes(()), 0)
            elif isinstance(value, str | bytes):
                found = (self.dtypes((self.text(value) or "",)), 1)
            elif not isinstance(value, list | tuple):
                raise EntryError(f"dtypes are not a list: {short(value)}")
            else:
                text = self.text
                names = tuple(
                    v
                    if type(v) is str and len(v) <= 64 and v.isprintable()
                    else (text(v) if isinstance(v, str | bytes) else None)
                    for v in value
                )
                if None in names:
                    raise EntryError(f"dtypes hold a {type(value[names.index(None)]).__name__}")
                found = (self.dtypes(names), 1 + len(names))
        except EntryError as exc:
            found = exc
        self.dtype_lists[id(value)] = found
        return found

    def stack_of(self, value: Any) -> _Cached:
        """The code of a stack of frames (cached per object), and the items it holds."""
        if not isinstance(value, list | tuple) or not value:
            found: _Cached = (-1, 0)
        else:
            frames, out = self.frames, []
            for raw in value:
                if type(raw) is not dict:
                    continue
                name, filename = raw.get("name", "?"), raw.get("filename", "?")
                line = raw.get("line", 0)
                if type(name) is str and type(filename) is str and type(line) is int:
                    key = (name, filename, line)  # as found; cleaned once, below
                    frame = frames.get(key)
                    if frame is None:
                        plain = (
                            len(name) <= 256
                            and len(filename) <= 256
                            and name.isprintable()
                            and filename.isprintable()
                            and -INT64_MAX <= line <= INT64_MAX
                        )
                        frame = Frame(*key) if plain else self._frame(name, filename, line)
                        frames[key] = frame
                else:
                    frame = self._frame(name, filename, line)
                out.append(frame)
            found = (self.stacks(tuple(out)), 1 + len(value))
        self.stack_lists[id(value)] = found
        return found

    def shape_code(self, value: Any, what: str) -> tuple[int, int]:
        """(shape-table code, items it stands for) of one input/output sizes value."""
        if type(value) is list and len(value) <= _SMALL:
            shapes = tuple([dims(shape, what) for shape in value])
            return self.shapes(shapes), 1 + len(shapes) + sum(map(len, shapes))
        hit = self.shape_lists.get(id(value)) or self.shapes_of(value, what)
        if isinstance(hit, EntryError):
            raise hit
        return hit

    def dtype_code(self, value: Any) -> tuple[int, int]:
        """(dtype-table code, items it stands for); one plain name is the common case and is
        cleaned at the end."""
        if type(value) is list and len(value) == 1 and type(value[0]) is str:
            return self.dtypes((value[0],)), 2
        hit = self.dtype_lists.get(id(value)) or self.dtypes_of(value)
        if isinstance(hit, EntryError):
            raise hit
        return hit

    def _frame(self, name: Any, filename: Any, line: Any) -> Frame:
        if type(line) is not int or not -INT64_MAX <= line <= INT64_MAX:
            line = int_or_unset(line)
        key = (self.text(name) or "?", self.text(filename) or "?", line)
        frame = self.clean_frames.get(key)
        if frame is None:
            frame = self.clean_frames[key] = Frame(*key)
        return frame


def dims(shape: Any, what: str) -> tuple[int, ...]:
    """A shape's dimensions; an EntryError for a non-list, negative or absurd shape."""
    if not isinstance(shape, list | tuple):
        raise EntryError(f"{what} holds a non-list shape")
    if len(shape) > MAX_DIMS:
        raise EntryError(f"{what} has a shape of {len(shape)} dimensions")
    dims = tuple(d if type(d) is int else as_int(d, what) for d in shape)
    if any(d < 0 for d in dims):
        raise EntryError(f"{what} has a negative dimension")
    if math.prod(dims) > MAX_NUMEL:
        shown = ", ".join(short(d) for d in dims[:8]) + (", ..." if len(dims) > 8 else "")
        raise EntryError(f"{what} has an absurd shape [{shown}]")
    return dims


def plain(text: Any, most: int) -> bool:
    """A short printable str, taken as it is."""
    return type(text) is str and len(text) <= most and text.isprintable()


def plain_shape(shape: tuple[Any, ...]) -> bool:
    """A shape of plain non-negative ints within the limits, taken as it is."""
    return (
        len(shape) <= MAX_DIMS
        and all(type(d) is int and d >= 0 for d in shape)
        and math.prod(shape) <= MAX_NUMEL
    )
