"""Where each rank stands in each of its groups, as rows: its first op not completed, what
follows it, and a window of ops before it (`window_rows`). What the diagnosis reads of a job
starts there (`diagnosis.frontier`); every (rank, group) pair lies in one group, so a part
of the job finds its own groups' (`partitions.match_part`) and the parts' rows together are
the job's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..model.records import UnitKind
from ..model.table import EntryTable, rank_starts
from .records import MatchResult

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

WINDOW = 16
"""Ops of each (rank, group) kept before its first op not completed (or before its end): what
the diagnosis reads of the history near the frontier. On every sample set and drawn case 2
already gives the diagnosis of the whole table (tests/diagnosis/test_frontier.py)."""
CHUNK_ROWS = 1 << 22
"""Rows (whole ranks) taken at once: the working arrays are a few of this size, not of the
table's."""


def incomplete_rows(t: EntryTable, m: MatchResult) -> B:
    """Rows that did not complete: not done, or in a collective some member never issued."""
    out = ~m.done.copy()
    if m.collectives.not_joined:
        unjoined = np.zeros(len(m.collectives.seq) + 1, dtype=bool)  # the last: no unit (-1)
        unjoined[list(m.collectives.not_joined)] = True
        out |= unjoined[m.collectives.entry_unit]
    if t.n:
        out &= t.unit != UnitKind.ORPHAN_MARKER
    return out


def window_rows(t: EntryTable, m: MatchResult, window: int = WINDOW) -> I64:
    """Per (rank, group) pair: its rows from `window` before its first incomplete one (or
    before its end) on, ascending."""
    if not t.n:
        return np.zeros(0, np.int64)
    incomplete = incomplete_rows(t, m)
    # chunks of whole ranks: those whose rows start in one stretch of CHUNK_ROWS rows
    starts = rank_starts(t.rank)
    stretch = starts // CHUNK_ROWS
    cuts = starts[np.flatnonzero(stretch[1:] != stretch[:-1]) + 1].tolist()
    out: list[I64] = []
    for begin, end in zip([0, *cuts], [*cuts, t.n], strict=True):
        keep = _pair_windows(t.pair[begin:end], incomplete[begin:end], window)
        out.append(np.flatnonzero(keep).astype(np.int64) + begin)
    return np.concatenate(out)


def joined(parts: Sequence[tuple[I64, I64 | None]]) -> I64 | None:
    """The job's frontier rows from its parts' ((the part's rows, its frontier in them)):
    None unless every part found its own."""
    if any(found is None for _, found in parts):
        return None
    return np.sort(np.concatenate([np.zeros(0, np.int64), *(rows[f] for rows, f in parts)]))


def _pair_windows(pair: npt.NDArray[np.int32], incomplete: B, window: int) -> B:
    """`window_rows` over some whole ranks' rows (`pair`: each row's pair code)."""
    n = len(pair)
    low = int(pair.min())
    local = (pair - low).astype(np.int64)
    n_pairs = int(local.max()) + 1
    order = np.argsort(local, kind="stable")  # each pair's rows one run, in row order
    sorted_pair = local[order]
    count = np.bincount(local, minlength=n_pairs)
    begin = np.concatenate([[0], np.cumsum(count)[:-1]])
    position = np.empty(n, dtype=np.int64)  # each row's place among its pair's rows
    position[order] = np.arange(n) - begin[sorted_pair]
    first = count.copy()  # a pair with no incomplete row: its end
    late = np.flatnonzero(incomplete)[::-1]
    first[local[late]] = position[late]  # descending rows: the last write is the first
    keep: B = position >= first[local] - window
    return keep
