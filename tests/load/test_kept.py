"""A graph of frozen dataclasses kept without pickle: read back as it was written (shared
objects shared), built only from the classes its root's type hints reach, and a file that
does not read back whole is a miss, never a failure."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pytest

from fr_analyzer.load import kept


class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class Point(NamedTuple):
    x: int
    y: float


@dataclass(frozen=True)
class Leaf:
    name: str
    colour: Colour


@dataclass(frozen=True, kw_only=True)
class Late:
    when: int | None = None


@dataclass(frozen=True)
class Root:
    leaves: tuple[Leaf, ...]
    chosen: Leaf | None
    by_rank: dict[int, tuple[int, ...]]
    ranks: frozenset[int]
    points: list[Point]
    rows: npt.NDArray[np.int64]
    same_rows: npt.NDArray[np.int64]
    flags: npt.NDArray[np.bool_]
    late: Late = field(default_factory=Late)
    mixed: tuple[Any, ...] = ()


class Stranger:
    """A class no type hint of `Root` reaches."""


KINDS = kept.kinds_of(Root)


def _bytes(pieces: list[bytes | memoryview]) -> npt.NDArray[np.uint8]:
    return np.frombuffer(bytearray(b"".join(bytes(p) for p in pieces)), dtype=np.uint8)


def _root() -> Root:
    leaf = Leaf("a", Colour.RED)
    rows = np.arange(10, dtype=np.int64) * 3
    return Root(
        leaves=(leaf, Leaf("a", Colour.RED), Leaf("b", Colour.BLUE)),
        chosen=leaf,
        by_rank={3: (1, 2), -1: ()},
        ranks=frozenset({1, 5}),
        points=[Point(1, 2.5), Point(-3, float("inf"))],
        rows=rows,
        same_rows=rows,
        flags=np.array([[True, False], [False, True]]),
        late=Late(when=7),
        mixed=(None, "s", 1, 1.5, True, np.int64(4), (Colour.BLUE, [1, (2,)])),
    )


def _back(root: Root) -> Root:
    """`root` written and read back."""
    back = kept.decode(_bytes(kept.encode(root, KINDS, "k")), KINDS, "k")
    assert isinstance(back, Root)
    return back


def _tamper(data: npt.NDArray[np.uint8], change: Any) -> npt.NDArray[np.uint8]:
    """`data` with `change(doc)` applied to its JSON, its hash made again (the arrays left
    where they were)."""
    raw = data.tobytes()
    at = len(kept.MAGIC)
    length, _ = kept.HEAD.unpack_from(raw, at)
    doc = json.loads(raw[at + kept.HEAD.size : at + kept.HEAD.size + length])
    change(doc)
    text = json.dumps(doc).encode()
    head = raw[:at] + kept.HEAD.pack(len(text), hashlib.sha256(text).digest()) + text
    return np.frombuffer(bytearray(head + raw[at + kept.HEAD.size + length :]), np.uint8)


def test_the_allowlist_is_every_class_the_roots_hints_reach() -> None:
    assert set(KINDS.by_name) == {"Root", "Leaf", "Colour", "Late", "Point"}
    assert kept.kinds_of(Root, stops=(Leaf,)).by_name.keys() == {"Root", "Late", "Point"}


def test_a_graph_reads_back_equal_with_its_types() -> None:
    root = _root()
    back = _back(root)
    assert back.leaves == root.leaves and back.chosen == root.chosen
    assert back.by_rank == root.by_rank and back.ranks == root.ranks
    assert back.points == root.points and type(back.points[0]) is Point
    assert back.late == Late(when=7)
    assert back.mixed == root.mixed and type(back.mixed[5]) is np.int64
    assert type(back.mixed[6][1]) is list and type(back.mixed[6][1][1]) is tuple
    assert back.rows.dtype == np.int64 and np.array_equal(back.rows, root.rows)
    assert back.flags.shape == (2, 2) and np.array_equal(back.flags, root.flags)


def test_an_object_named_twice_is_one_object_and_equal_ones_stay_two() -> None:
    back = _back(_root())
    assert back.chosen is back.leaves[0]
    assert back.leaves[1] == back.leaves[0] and back.leaves[1] is not back.leaves[0]
    assert back.same_rows is back.rows


def test_the_arrays_start_aligned_so_they_are_read_in_place() -> None:
    data = _bytes(kept.encode(_root(), KINDS, "k"))
    back = kept.decode(data, KINDS, "k")
    assert isinstance(back, Root)
    assert np.shares_memory(back.rows, data)
    assert (back.rows.ctypes.data - data.ctypes.data) % kept.ALIGN == 0


def test_another_key_or_format_is_a_miss() -> None:
    data = _bytes(kept.encode(_root(), KINDS, "k"))
    assert kept.decode(data, KINDS, "other") is None
    data[len(kept.MAGIC) - 2] ^= 1  # the format's version, in the magic
    assert kept.decode(data, KINDS, "k") is None


def test_a_byte_changed_in_the_json_is_a_miss_though_it_is_still_json() -> None:
    data = _bytes(kept.encode(_root(), KINDS, "k"))
    at = data.tobytes().index(b'"Leaf","a"') + len('"Leaf","')
    data[at] = ord("z")
    assert kept.decode(data, KINDS, "k") is None


def test_a_truncated_file_is_a_miss_wherever_it_ends() -> None:
    data = _bytes(kept.encode(_root(), KINDS, "k"))
    for end in (0, 5, len(kept.MAGIC) + 4, len(kept.MAGIC) + 30, len(data) // 2, len(data) - 1):
        assert kept.decode(data[:end], KINDS, "k") is None


def test_a_class_outside_the_allowlist_is_never_constructed() -> None:
    data = _bytes(kept.encode(_root(), KINDS, "k"))

    def stranger(doc: dict[str, Any]) -> None:
        doc["root"][3] = ["D", "Stranger"]  # `chosen`

    assert kept.decode(_tamper(data, stranger), KINDS, "k") is None

    def builtin(doc: dict[str, Any]) -> None:
        doc["root"][3] = ["D", "os.system", "echo"]

    assert kept.decode(_tamper(data, builtin), KINDS, "k") is None


@pytest.mark.parametrize(
    "value",
    [
        ["Q", 1],  # an unknown tag
        ["D", "Leaf", "a"],  # too few fields
        ["E", "Colour", "green"],  # not one of its values
        ["E", "Leaf", "a"],  # not an enum
        ["N", "Leaf", "a", ["E", "Colour", "red"]],  # not a named tuple
        ["r", 99],  # a reference to nothing made
        ["a", 99],  # an array not in the file
        ["L", [1, ["D", "Leaf"]]],  # a plain list holding more
        ["n", "|O", 1],  # a numpy scalar of another type
        ["d", 1],  # a key with no value
        ["d", ["l"], 1],  # a key that cannot be one
        [],
    ],
    ids=str,
)
def test_a_value_not_as_written_is_a_miss(value: Any) -> None:
    data = _bytes(kept.encode(_root(), KINDS, "k"))

    def change(doc: dict[str, Any]) -> None:
        doc["root"][3] = value

    assert kept.decode(_tamper(data, change), KINDS, "k") is None


@pytest.mark.parametrize(
    "layout",
    [["|O", [10], 0], ["<i8", [10**9], 0], ["<i8", [10], 3], ["<i8", [-1], 0], ["<i8", 10, 0]],
    ids=str,
)
def test_an_array_of_another_type_or_out_of_place_is_a_miss(layout: list[Any]) -> None:
    data = _bytes(kept.encode(_root(), KINDS, "k"))

    def change(doc: dict[str, Any]) -> None:
        doc["arrays"][0] = layout

    assert kept.decode(_tamper(data, change), KINDS, "k") is None


def test_a_graph_holding_another_class_or_an_object_array_is_not_kept() -> None:
    with pytest.raises(kept.Unkeepable):
        kept.encode(dataclasses.replace(_root(), mixed=(Stranger(),)), KINDS, "k")
    with pytest.raises(kept.Unkeepable):
        kept.encode(dataclasses.replace(_root(), rows=np.array([object()])), KINDS, "k")
