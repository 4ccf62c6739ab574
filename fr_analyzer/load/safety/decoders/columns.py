"""The columns builder shared by the decoders (torch's pickle, Python's pickle, JSON): a rank's
entries, read by a layout's expression (captures per run) and by an exact reader (whole entries),
become `EntryColumns`; the entries read exactly are kept in their rows (`Slow`), and the
repeating runs' captures are coded together and decoded once per distinct capture.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ...formats.outcomes import outside, past_limit
from ...formats.schema import ENTRY_KEYS, REQUIRED_KEYS, Kind, keys_of
from ..limits import LIMITS
from .grammar import Run
from .opcodes import BININT, BININT1, BININT2, LONG1, NONE

MAX_SLOW_ENTRIES = LIMITS.max_entries_outside_layout
"""Entries read by the exact decoder before the unpickler is cheaper (`Limits`)."""


@dataclass
class EntryColumns:
    """A rank's entries as columns, one value per entry and column.

    `ints` hold the integer columns (-1 where an optional one is None). `coded` holds each
    other column as a code per entry and the value each code stands for. Every coded column
    shares one code array, dense and in order of first appearance: an entry's combination of
    repeating captures (or its own code, for an entry read exactly), so two codes may stand
    for equal values. `items` counts the shapes, dimensions, dtypes and frames of the entries,
    for the expansion check."""

    n: int
    ints: dict[str, npt.NDArray[np.int64]]
    coded: dict[str, tuple[npt.NDArray[np.int32], list[Any]]]
    items: int = 0

    def __len__(self) -> int:
        return self.n


@dataclass
class Decoded:
    """A decoded dump: the top-level dict, with the entries as columns."""

    header: dict[str, Any]
    entries: EntryColumns


@dataclass
class Slow:
    """An entry the decoder read, and its row."""

    row: int
    entry: dict[str, Any]


@dataclass(frozen=True)
class FileOrder:
    """Where the pickle decoders stop, in file order, among the expression-read entries: at
    the first entry with each combination of repeating captures (which decodes them), and at
    each entry with entries of another layout just before it (`gaps`)."""

    repeating: list[int]  # the repeating runs, by index
    distinct: list[tuple[bytes, ...]]  # the combinations, in order of first appearance
    codes: npt.NDArray[np.int32]  # each entry's combination
    firsts: list[int]  # each combination's first entry
    visits: list[int]  # the entries to stop at, in order


def file_order(runs: Sequence[Run], gaps: list[bytes], captured: list[list[bytes]]) -> FileOrder:
    """`FileOrder` for the expression's entries: their runs, the gaps before them (one more:
    the tail), and their captures per run."""
    fast = len(gaps) - 1
    repeating = [i for i, run in enumerate(runs) if not run.varying]
    distinct, codes = combination_codes([captured[i] for i in repeating], fast)
    first = np.full(len(distinct), fast, dtype=np.int64)
    first[codes[::-1]] = np.arange(fast - 1, -1, -1)  # the last write is the first
    firsts = first.tolist()
    visits = sorted({*firsts, *itertools.compress(range(fast), gaps)})
    return FileOrder(repeating, distinct, codes, firsts, visits)


class ExactReader(Protocol):
    """What reads the bytes exactly, with the dump's memo: `machine.Machine`, for both picklers'
    layouts (a protocol, so that the builder needs nothing else of it)."""

    memo: list[Any]

    def entry(self, pos: int) -> tuple[Any, int]:
        """The entry dict that starts at `pos`, and the position after it."""
        ...

    def run(self, data: bytes, size: int) -> list[Any]:
        """The values of a captured run of `size` keys."""
        ...


def slow_entry(reader: ExactReader, pos: int, slow: list[Slow], fast_before: int) -> int:
    """Read one entry exactly; `fast_before` entries read by the expression come before it."""
    if len(slow) >= MAX_SLOW_ENTRIES:
        raise past_limit("too many entries outside the layout (over 256)")
    entry, pos = reader.entry(pos)
    keep_slow(entry, slow, fast_before)
    return pos


def keep_slow(entry: Any, slow: list[Slow], fast_before: int) -> None:
    """Keep an entry read exactly (not by the expression), in its row; at most 256 of them."""
    if len(slow) >= MAX_SLOW_ENTRIES:
        raise past_limit("too many entries outside the layout (over 256)")
    if type(entry) is not dict or not entry.keys() >= REQUIRED_KEYS:
        raise outside("an entry that lacks a required key")
    slow.append(Slow(fast_before + len(slow), entry))


# The varying runs' captures with the lengths of the key references between their integers,
# and their integers read: per run, a column per key.
VaryingRuns = Sequence[tuple[Sequence[bytes], Sequence[int]]]
IntRuns = list[list[npt.NDArray[np.int64]]]

_INT_KEYS = keys_of(Kind.INT)
_OPTIONAL_INT_KEYS = keys_of(Kind.OPTIONAL_INT)
_INT_COLUMNS = tuple(sorted(_INT_KEYS | _OPTIONAL_INT_KEYS))
_CODED = tuple(
    key.name for key in ENTRY_KEYS if key.kind not in (Kind.INT, Kind.OPTIONAL_INT, Kind.SCALAR)
)
_LISTS = keys_of(Kind.SHAPES, Kind.TEXTS, Kind.FRAMES)


class Columns:
    """Builds a rank's `EntryColumns` from the captures of the expression-read entries (in
    order, with gaps where the decoder-read entries go) and the decoder-read entries.

    Every column the repeating runs give is a function of an entry's combination of repeating
    captures (a few dozen distinct ones a rank), so those columns share one code array: each
    entry's combination, and the decoder-read entries one code each. Their values are built
    per combination, and nothing per entry but that one code array."""

    def __init__(self, reader: ExactReader, nfast: int, slow: list[Slow]) -> None:
        self.reader = reader
        self.n = nfast + len(slow)
        self.slow = slow
        self.slow_rows = [s.row for s in slow]
        self.is_fast = np.ones(self.n, dtype=bool)
        self.is_fast[self.slow_rows] = False
        self.ints: dict[str, npt.NDArray[np.int64]] = {}
        self.coded: dict[str, tuple[npt.NDArray[np.int32], list[Any]]] = {}
        self.items = 0

    def build(
        self,
        runs: Iterable[tuple[Run, list[bytes]]],
        combos: Combos | None = None,
        ints: Callable[[VaryingRuns], IntRuns] | None = None,
    ) -> EntryColumns:
        """`combos`: the repeating runs' captures already coded together, and decoded (by
        the caller, which needs them in order: Python's pickler memoizes inside entries).
        `ints`: what reads the varying runs' integers (pickled ones, by default)."""
        varying: list[tuple[Run, list[bytes]]] = []
        repeating: list[tuple[Run, list[bytes]]] = []
        for run, caps in runs:
            (varying if run.varying else repeating).append((run, caps))
        nfast = self.n - len(self.slow)
        if combos is None:
            combos = self.decoded_combos(repeating, nfast)
        self.combination_columns([run for run, _ in repeating], combos)
        if varying:
            read = (ints or run_ints)([(caps, run.refs) for run, caps in varying])
            for (run, _), columns in zip(varying, read, strict=True):
                for name, values in zip(run.names, columns, strict=True):
                    self.int_column(name, values)
        for name in _INT_COLUMNS:
            if name not in self.ints:  # in every entry's layout: only when no entry has one
                if nfast:
                    raise outside("an entry without an integer key the others have")
                self.int_column(name, np.empty(0, dtype=np.int64))
        return EntryColumns(self.n, self.ints, self.coded, self.items)

    def decoded_combos(self, repeating: list[tuple[Run, list[bytes]]], nfast: int) -> Combos:
        """The distinct combinations of the repeating runs' captures, each entry's, and each
        combination's values: each distinct capture of a run is decoded once. For readers
        without a memo (JSON): the pickle decoders decode their captures in file order
        (`_in_order`, `decode_python._replay`)."""
        distinct, codes = combination_codes([caps for _, caps in repeating], nfast)
        values: list[list[list[Any]]] = [[] for _ in distinct]
        for i, (run, _) in enumerate(repeating):
            parts, part_of = distinct_codes([combo[i] for combo in distinct])
            decoded = [self.reader.run(raw, len(run.names)) for raw in parts]
            for combo, part in enumerate(part_of.tolist()):
                values[combo].append(decoded[part])
        return Combos(distinct, codes, values)

    def int_column(self, name: str, fast: npt.NDArray[np.int64]) -> None:
        """Set the integer column `name`: the expression-read entries' values, then each
        decoder-read entry's own."""
        column = np.empty(self.n, dtype=np.int64)
        column[self.is_fast] = fast
        for s in self.slow:
            value = s.entry.get(name)
            if value is None and name in _OPTIONAL_INT_KEYS:
                value = -1
            if type(value) is not int or not -(1 << 63) < value < (1 << 63):
                raise outside(
                    "an integer key holding something else"
                )  # an odd value: the careful path names it
            column[s.row] = value
        self.ints[name] = column

    def combination_columns(self, runs: Sequence[Run], combos: Combos) -> None:
        """The columns of the repeating runs' keys (and None for a coded key no layout has):
        one code per entry, shared by every such column (its combination, or a code of its
        own for a decoder-read entry, numbered in order of first appearance), and each code's
        value per column."""
        ncombo, nslow = len(combos.values), len(self.slow)
        codes = np.empty(self.n, dtype=np.int32)
        codes[self.is_fast] = combos.codes
        codes[self.slow_rows] = np.arange(ncombo, ncombo + nslow, dtype=np.int32)
        order = None
        if nslow and ncombo:  # codes in order of first appearance, as the entries have them
            first = np.empty(ncombo + nslow, dtype=np.int64)
            first[codes[::-1]] = np.arange(self.n - 1, -1, -1)  # the last write is the first
            order = np.argsort(first).tolist()
            renumber = np.empty(len(order), dtype=np.int32)
            renumber[order] = np.arange(len(order), dtype=np.int32)
            codes = renumber[codes]
        columns: dict[str, list[Any]] = {}
        for i, run in enumerate(runs):
            for j, name in enumerate(run.names):
                columns[name] = [combo[i][j] for combo in combos.values]
        for name in _CODED:
            columns.setdefault(name, [None] * ncombo)  # not in the layout (duration_ms, say)
        counts: npt.NDArray[np.int64] | None = None
        for name, fast_values in columns.items():
            values = fast_values + [s.entry.get(name) for s in self.slow]
            if order is not None:
                values = [values[k] for k in order]
            if name in _INT_KEYS:  # pg_id, timeout_ms: repeating integers
                if not all(type(v) is int and -(1 << 63) < v < (1 << 63) for v in values):
                    raise outside(
                        "an integer key holding something else"
                    )  # an odd value: the careful path names it
                self.ints[name] = np.array(values, dtype=np.int64)[codes]
            else:
                self.coded[name] = (codes, values)
            if name in _LISTS:
                if counts is None:
                    counts = np.bincount(codes, minlength=len(values))
                self.items += int(np.dot(counts, list(map(_items, values))))


def _items(value: Any) -> int:
    """Shapes and dimensions (or dtypes, or frames) that a value holds."""
    if type(value) is not list:
        return 0
    if value and type(value[0]) is list and all(type(v) is list for v in value):  # shapes
        return len(value) + sum(map(len, value))
    return len(value) + sum(len(v) for v in value if type(v) is list)


@dataclass(frozen=True)
class Combos:
    """The repeating runs' captures of the expression-read entries coded together: the
    distinct combinations (a capture per run), each entry's combination, and each
    combination's decoded values (per run, the values of its keys)."""

    distinct: list[tuple[bytes, ...]]
    codes: npt.NDArray[np.int32]
    values: list[list[list[Any]]]


def combination_codes(
    captures: Sequence[list[bytes]], n: int
) -> tuple[list[tuple[bytes, ...]], npt.NDArray[np.int32]]:
    """The distinct combinations of the runs' captures (one per entry, `n` entries) in order
    of first appearance, and each entry's."""
    if not n:
        return [], np.zeros(0, dtype=np.int32)
    if not captures:
        return [()], np.zeros(n, dtype=np.int32)
    if len(captures) == 1:  # no tuple per entry
        parts, codes = distinct_codes(captures[0])
        return [(part,) for part in parts], codes
    return distinct_codes(list(zip(*captures, strict=True)))


def distinct_codes(keys: Sequence[Any]) -> tuple[list[Any], npt.NDArray[np.int32]]:
    """The distinct keys in order of first appearance, and each key's index among them.

    One hash of each key: each key's first position comes from `setdefault` in one C-level
    pass, and positions become dense codes with numpy (a second pass of lookups would hash
    every key again: tuples do not keep their hash)."""
    first: dict[Any, int] = {}
    at = np.fromiter(map(first.setdefault, keys, itertools.count()), np.intp, len(keys))
    dense = np.cumsum(at == np.arange(len(keys)), dtype=np.int32) - 1
    return list(first), dense[at]


def run_ints(runs: VaryingRuns) -> IntRuns:
    """The integers of runs' captures (BININT1/2, BININT, LONG1 of up to 8 bytes; NONE gives
    -1): per run, a column per key. Each run is its captures and the lengths of the key
    references between its integers. The n-th integers of all runs are read at once."""
    caps = list(itertools.chain.from_iterable(c for c, _ in runs))
    sizes = np.fromiter(map(len, caps), np.int64, len(caps))
    data = b"".join(caps) + bytes(16)
    buf = np.frombuffer(data, np.uint8)
    words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))  # unaligned
    starts = np.cumsum(sizes) - sizes
    bounds = np.cumsum([0] + [len(c) for c, _ in runs]).tolist()
    at = [starts[lo:hi] for lo, hi in itertools.pairwise(bounds)]
    columns: list[list[npt.NDArray[np.int64]]] = [[] for _ in runs]
    for step in range(1 + max((len(refs) for _, refs in runs), default=-1)):
        active = [i for i, (_, refs) in enumerate(runs) if len(refs) >= step]
        ats = [at[i] + (runs[i][1][step - 1] if step else 0) for i in active]
        values, ends = _ints_at(words, buf, np.concatenate(ats))
        offset = 0
        for i, part in zip(active, ats, strict=True):
            columns[i].append(values[offset : offset + len(part)])
            at[i] = ends[offset : offset + len(part)]
            offset += len(part)
    return columns


def _ints_at(
    words: npt.NDArray[np.uint64], buf: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The pickled integers (or NONE) starting at each offset, and the offset after each.
    `words[i]` is the little-endian 8 bytes at `buf[i]`."""
    ops = buf[at]
    long1 = ops == LONG1
    width = np.where(long1, buf[at + 1], _WIDTH[ops])
    first = at + 1 + long1
    raw = words[first] & _MASK[width]
    values: npt.NDArray[np.int64] = raw.view(np.int64)
    negative = _SIGN[ops] & ((raw & _SIGN_BIT[width]) != 0)
    if negative.any():
        values[negative] -= _SPAN[width[negative]]
    values[ops == NONE] = -1
    return values, first + width


_WIDTH = np.zeros(256, dtype=np.int64)
_WIDTH[[BININT1, BININT2, BININT]] = (1, 2, 4)
_SIGN = np.zeros(256, dtype=bool)  # two's complement: BININT, LONG1
_SIGN[[BININT, LONG1]] = True
_MASK = np.array([(1 << 8 * w) - 1 for w in range(9)], dtype=np.uint64)  # by width in bytes
_SIGN_BIT = np.array([1 << 8 * w - 1 if 0 < w < 8 else 0 for w in range(9)], dtype=np.uint64)
_SPAN = np.array([1 << 8 * w if w < 8 else 0 for w in range(9)], dtype=np.int64)
