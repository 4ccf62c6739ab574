"""Several snapshots of one job, compared rank by rank: what moved was in flight, what stayed
the same for long enough was stuck, with an age measured rather than guessed.

A snapshot is a folder of per-rank dumps taken at one moment: one of the folders given with
several `-d`, a sub-folder of a `-d` folder whose sub-folders are snapshots (what `fr-analyze
live --save` writes, or timestamped folders of dumps), each dated by, strongest first, the
time each rank answered the debug server (`fetch.json`), the ranks' file times, or a time in
the folder's name.

Per rank, a *mark* sums up its record: its newest record id and how many of its entries were
started, completed and retired. A rank whose mark changed between the last two snapshots
*moved*; one whose mark stayed the same has been unchanged for at least the time between the
oldest snapshot with that mark and the newest. An unchanged rank blocked in an op is stuck once
that time reaches the op's timeout or exceeds the job's step time (the longest period of the
ops that recur, measured in the newest snapshot).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ..load import name_time_ns
from ..model.dump import RankDump
from ..model.records import State
from ..model.table import EntryTable, rank_starts

Mark = tuple[int, int, int, int]
"""A rank's record summed up: newest record id, entries started, completed, retired."""

STEP_SAMPLE_RANKS = 64
"""Ranks whose entries measure the step time (evenly spread; the step is the job's)."""


class Dating:
    """What dated a snapshot, strongest first."""

    ANSWERED = "when each rank answered the debug server"
    FILE_TIMES = "the files' modification times"
    NAME = "the time in the folder's name"
    ENTRIES = "nothing: ordered by the newest entry, ages not measured"


@dataclass(frozen=True)
class Taken:
    """One snapshot, reduced to what the comparison needs."""

    label: str
    time_ns: int | None  # when it was taken (its ranks' median), None when unknown
    dating: str  # a `Dating` value
    marks: Mapping[int, Mark]
    newest_entry_ns: int  # its newest timestamp: the order when no time is known


@dataclass(frozen=True)
class Motion:
    """One rank across the snapshots."""

    rank: int
    moved: bool  # its record changed between the previous snapshot and the newest
    unchanged_s: float | None  # measured time its record stayed the same (None: not measured)
    snapshots: int  # how many snapshots, the newest included, showed that same record


@dataclass(frozen=True)
class Series:
    """The comparison the diagnosis reads: the newest snapshot is the one analyzed."""

    labels: tuple[str, ...]  # oldest first
    times_ns: tuple[int | None, ...]
    dating: str  # how the times are known (the weakest of the snapshots')
    ranks: Mapping[int, Motion]
    step_s: float | None  # the job's step time, when recurring ops show it

    @property
    def span_s(self) -> float | None:
        """Seconds from the first snapshot to the last, when both times are known."""
        first, last = self.times_ns[0], self.times_ns[-1]
        return None if first is None or last is None else (last - first) / 1e9

    def describe(self, rank: int) -> str:
        """ "unchanged for 42 s across 3 snapshots" or "moved between the last two snapshots"."""
        m = self.ranks.get(rank)
        if m is None:
            return "not in every snapshot"
        if m.moved:
            return "moved between the last two snapshots"
        if m.unchanged_s is None:
            return f"unchanged across {m.snapshots} snapshots (their times are unknown)"
        return f"unchanged for {m.unchanged_s:.0f} s across {m.snapshots} snapshots"


MARKED = ("record_id", "t_started", "state", "retired", "t_created", "t_completed")
"""The columns a snapshot is summed up from (`summed`): the rows as read, not matched."""


@dataclass(frozen=True)
class Summed:
    """A snapshot's rows summed up: each rank's mark, and its newest entry's time (-1: none)."""

    marks: dict[int, Mark]
    newest_entry_ns: int


def summed(t: EntryTable) -> Summed:
    """The table's rows summed up, in one pass (they are in rank order)."""
    starts = rank_starts(t.rank) if t.n else np.zeros(0, np.int64)
    columns = {name: getattr(t, name) for name in MARKED}
    return summed_ranks(t.rank[starts].tolist(), np.r_[starts, t.n].astype(np.int64), columns)


def summed_ranks(
    ranks: Sequence[int],
    starts: npt.NDArray[np.int64],
    columns: Mapping[str, np.ndarray],
    only: Sequence[int] | None = None,
) -> Summed:
    """The rows of `ranks` (rank i's from `starts[i]` to `starts[i + 1]`; `columns`: `MARKED`)
    summed up, of the ranks `only` names (None: all): a rank with no row has no mark. The
    same sums for a table and for each shard of the ranks read on a cluster
    (`pipeline.KeptRows.reduced`)."""
    counts = np.diff(starts)
    some = counts > 0
    if only is not None:
        some &= np.isin(np.asarray(ranks, dtype=np.int64), np.asarray(only, dtype=np.int64))
    chosen = np.flatnonzero(some)
    if not len(chosen):
        return Summed({}, -1)
    # every rank with rows, in one pass each; then the ranks chosen of them
    at = starts[:-1][counts > 0] - starts[0]
    of = np.flatnonzero(counts > 0)
    pick = np.searchsorted(of, chosen)
    rows = slice(int(starts[0]), int(starts[-1]))
    record_id, t_started, state, retired, t_created, t_completed = (
        columns[name][rows] for name in MARKED
    )
    newest = np.maximum.reduceat(record_id, at)[pick].tolist()
    begun = (t_started >= 0) | (state >= State.STARTED)
    started = np.add.reduceat(begun, at)[pick].tolist()
    completed = np.add.reduceat(state == State.COMPLETED, at)[pick].tolist()
    retired_n = np.add.reduceat(retired, at)[pick].tolist()
    last = np.maximum.reduceat(np.maximum(t_created, t_completed), at)[pick]
    named = [ranks[i] for i in chosen.tolist()]
    marks = {
        int(r): (int(a), int(b), int(c), int(d))
        for r, a, b, c, d in zip(named, newest, started, completed, retired_n, strict=True)
    }
    return Summed(marks, int(last.max()))


def joined(pieces: Sequence[Summed]) -> Summed:
    """The sums of several tables' ranks (the shards of a job) together."""
    marks = {rank: mark for one in pieces for rank, mark in one.marks.items()}
    return Summed(marks, max((one.newest_entry_ns for one in pieces), default=-1))


def marks(t: EntryTable) -> dict[int, Mark]:
    """Each rank's mark, in one pass over the table's rows (they are in rank order)."""
    return summed(t).marks


def taken(
    label: str,
    rows: EntryTable | Summed,
    dumps: Sequence[RankDump],
    answered: Mapping[int, int] | None = None,
    named_ns: int | None = None,
) -> Taken:
    """A snapshot's time and marks, of its table or its rows summed up where they lie.
    `answered`: when each rank answered the debug server; `named_ns`: the time in the
    snapshot folder's name."""
    got = summed(rows) if isinstance(rows, EntryTable) else rows
    newest = got.newest_entry_ns
    if answered:
        when, dating = int(np.median(list(answered.values()))), Dating.ANSWERED
    elif any(d.file_time_ns is not None for d in dumps):
        stamps = [d.file_time_ns for d in dumps if d.file_time_ns is not None]
        when, dating = int(np.median(stamps)), Dating.FILE_TIMES
    elif named_ns is not None:
        when, dating = named_ns, Dating.NAME
    else:
        return Taken(label, None, Dating.ENTRIES, got.marks, newest)
    return Taken(label, when, dating, got.marks, newest)


def ordered(snapshots: Sequence[Taken]) -> list[Taken]:
    """Oldest first: by time when every snapshot has one, else by the newest entry."""
    if all(s.time_ns is not None for s in snapshots):
        return sorted(snapshots, key=lambda s: (s.time_ns or 0, s.newest_entry_ns))
    return sorted(snapshots, key=lambda s: s.newest_entry_ns)


def compare(snapshots: Sequence[Taken], newest: EntryTable) -> Series:
    """Each rank of the newest snapshot against the older ones (`snapshots` oldest first);
    `newest`: its table, or the rows of its ranks that measure the step (`step_ranks`)."""
    timed = all(s.time_ns is not None for s in snapshots)
    last = snapshots[-1]
    motion: dict[int, Motion] = {}
    for rank, mark in last.marks.items():
        same = 1
        for older in reversed(snapshots[:-1]):
            if older.marks.get(rank) != mark:
                break
            same += 1
        previous = snapshots[-2].marks.get(rank) if len(snapshots) > 1 else None
        moved = previous is not None and previous != mark
        unchanged: float | None = None
        if timed and same > 1:
            first = snapshots[len(snapshots) - same]
            unchanged = ((last.time_ns or 0) - (first.time_ns or 0)) / 1e9
        elif timed:
            unchanged = 0.0
        motion[rank] = Motion(rank, moved, unchanged, same)
    datings = [s.dating for s in snapshots]
    order = [Dating.ANSWERED, Dating.FILE_TIMES, Dating.NAME, Dating.ENTRIES]
    weakest = max(datings, key=order.index)
    return Series(
        tuple(s.label for s in snapshots),
        tuple(s.time_ns for s in snapshots),
        weakest,
        motion,
        step_time_s(newest),
    )


def step_time_s(t: EntryTable) -> float | None:
    """The job's step time: on each of a few ranks, the longest median period among the ops
    that recur (same group, op and input shape, at least three times); the median over those
    ranks. None when nothing recurs."""
    if not t.n:
        return None
    starts = [*rank_starts(t.rank).tolist(), t.n]
    steps: list[float] = []
    for i in step_ranks(len(starts) - 1):
        lo, hi = starts[i], starts[i + 1]
        created = t.t_created[lo:hi]
        keys = (
            t.group[lo:hi].astype(np.int64) << 40
            | t.op[lo:hi].astype(np.int64) << 20
            | t.in_shape[lo:hi].astype(np.int64)
        )
        longest = 0.0
        for key in np.unique(keys):
            times = np.sort(created[(keys == key) & (created >= 0)])
            if len(times) >= 3:
                longest = max(longest, float(np.median(np.diff(times))) / 1e9)
        if longest > 0:
            steps.append(longest)
    return float(np.median(steps)) if steps else None


def step_ranks(count: int) -> list[int]:
    """Which of `count` ranks with entries (by their place, in rank order) measure the step
    time: `STEP_SAMPLE_RANKS` of them, evenly spread; all of them when there are fewer. A
    table of those ranks' rows alone measures the same step (each is picked again)."""
    return sorted({int(i * count / STEP_SAMPLE_RANKS) for i in range(STEP_SAMPLE_RANKS)})


def snapshot_folders(path: Path) -> list[Path] | None:
    """The snapshot sub-folders of `path`, when it is a folder of snapshots: no rank file of
    its own, and two or more sub-folders that are snapshots (a `fetch.json`, or a time in the
    name, and files inside). None otherwise."""
    from ..load import MANIFEST

    if not path.is_dir():
        return None
    try:
        children = sorted(path.iterdir())
    except OSError:
        return None
    if any(c.is_file() and re.search(r"\d", c.name) and not _is_note(c) for c in children):
        return None  # rank files of its own: a dump folder, not a folder of snapshots
    found = [
        c
        for c in children
        if c.is_dir()
        and not c.is_symlink()
        and not c.name.endswith(".partial")
        and ((c / MANIFEST).is_file() or name_time_ns(c.name) is not None)
    ]
    return found if len(found) >= 2 else None


def _is_note(path: Path) -> bool:
    """Files a folder of snapshots may hold beside them: logs, notes, the debug server's text
    reports (named by time, not by rank)."""
    return path.suffix in (".txt", ".log", ".md", ".json") and name_time_ns(path.name) is not None
