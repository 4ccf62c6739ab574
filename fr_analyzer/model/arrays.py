"""Array helpers the stages share."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

_G = TypeVar("_G", bound=np.generic)


def distinct(values: npt.NDArray[_G]) -> npt.NDArray[_G]:
    """The distinct values, ascending: `np.unique` by a sort. (numpy 2's `np.unique` hashes
    when asked for the values alone, far slower than a sort on large arrays: the figures are in
    benchmarks/README.md.)"""
    ordered = np.sort(values, axis=None)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
