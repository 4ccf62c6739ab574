"""Array helpers: `distinct` gives what `np.unique` gives, by a sort."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fr_analyzer.model.arrays import distinct


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=200))
def test_distinct_values_are_those_of_np_unique_in_ascending_order(values: list[int]) -> None:
    array = np.array(values, dtype=np.int64)
    found = distinct(array)
    assert found.dtype == array.dtype
    assert found.tolist() == np.unique(array).tolist()


def test_distinct_leaves_its_input_as_it_was() -> None:
    array = np.array([3, 1, 3, 2], dtype=np.int32)
    assert distinct(array).tolist() == [1, 2, 3]
    assert array.tolist() == [3, 1, 3, 2]


def test_distinct_of_a_large_array_of_mostly_distinct_values() -> None:
    rng = np.random.default_rng(0)
    array = rng.integers(0, 500_000, 1_000_000)
    assert np.array_equal(distinct(array), np.unique(array))
