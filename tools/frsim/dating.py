"""When each rank's dump file was last modified: its snapshot plus the dump's own latency, or a
copy's time, days later.

torch's `_dump_fr_trace` takes the snapshot first, then builds and writes the file. With stack
traces it symbolizes every frame before writing (13-15 s on real 8-rank gloo jobs, issue 43),
so the file's modification time is later than the snapshot by a few seconds without stack
traces and by many with them. A copy that keeps no times (`cp` without `-p`, `scp`, a download
from object storage) sets every file's time to when it was copied, days after the entries.

A file time is therefore an upper bound of its snapshot, never the snapshot itself. The truth
(`truth.py`) does not depend on it: a healthy job dumped mid-run is `ok` whatever its files'
times say.

    spec = SimSpec(..., file_times=FileTimes())                       # latency by stack_traces
    spec = SimSpec(..., file_times=FileTimes(stacks=True))            # 5-20 s whatever they are
    spec = SimSpec(..., file_times=FileTimes(copied_after_s=3 * DAY_S))  # then copied
    sim.file_time_ns(rank)  # what `write_files` sets as the file's modification time

Each rank's latency is a pure function of (seed, rank), drawn uniformly in its range; a copy
starts `copied_after_s` after the last file the dumps wrote and writes every file within
`COPY_SPREAD_S` of its start.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from .recorder import BASE_TIME_NS, Settings, clock_offset, uniform

LATENCY_PLAIN_S = (0.2, 3.0)
"""Seconds from snapshot to file without stack traces: pickling and writing the entries."""
LATENCY_STACKS_S = (5.0, 20.0)
"""Seconds from snapshot to file with stack traces: symbolizing every frame first (13-15 s
measured on real jobs; wider here for slower hosts and deeper stacks)."""
COPY_SPREAD_S = 1.0
"""A copy writes every file within this many seconds of its start."""
DAY_S = 86_400.0

_LATENCY_TAG = 0xD1A7
_COPY_TAG = 0xC0B1


class Dating(enum.StrEnum):
    """What a set's file times are (the campaign reports accuracy per variant)."""

    NONE = "none"  # not set: each file keeps the time it was written on this machine
    PLAIN = "plain"  # written by the dump without stack traces: 0.2-3 s after the snapshot
    STACKS = "stacks"  # written by the dump with stack traces: 5-20 s after the snapshot
    COPIED = "copied"  # then copied without times: days after every entry, on every rank


@dataclass(frozen=True)
class FileTimes:
    """How a simulated set's files are dated (`SimSpec.file_times`)."""

    stacks: bool | None = None
    """Whether the dump symbolized stack traces before writing its file (5-20 s, else 0.2-3 s);
    None: as the dumps carry them (`SimSpec.stack_traces`). A dump of a job whose entries have
    no frames can still be slow (`includeStackTraces` also gathers C++ stacks)."""
    copied_after_s: float | None = None
    """The whole set was then copied without its times, this many seconds after the last file
    was written (every file's time is the copy's); None: the files are the dumps' own."""

    def latency_range(self, stack_traces: bool) -> tuple[float, float]:
        """The latency range in seconds, for dumps with or without stack traces."""
        slow = stack_traces if self.stacks is None else self.stacks
        return LATENCY_STACKS_S if slow else LATENCY_PLAIN_S

    def dating(self, stack_traces: bool) -> Dating:
        """The variant these times are, for dumps with or without stack traces."""
        if self.copied_after_s is not None:
            return Dating.COPIED
        return (
            Dating.STACKS if self.latency_range(stack_traces) == LATENCY_STACKS_S else Dating.PLAIN
        )

    def describe(self, stack_traces: bool) -> str:
        """In a few words: "files +5-20s (stacks)", "copied +3.2d"."""
        if self.copied_after_s is not None:
            return f"copied +{self.copied_after_s / DAY_S:.1f}d"
        low, high = self.latency_range(stack_traces)
        return f"files +{low:g}-{high:g}s ({self.dating(stack_traces)})"


def latency_ns(settings: Settings, times: FileTimes, rank: int) -> int:
    """How long after its snapshot rank `rank`'s dump wrote its file, in ns."""
    low, high = times.latency_range(settings.stack_traces)
    u = uniform(settings.seed, _LATENCY_TAG, rank)
    return round((low + u * (high - low)) * 1e9)


def file_times_ns(
    settings: Settings, times: FileTimes, dump_times: Sequence[int | None]
) -> list[int | None]:
    """Each rank's file modification time (ns since the epoch; None: it wrote no dump), from
    its dump time (true time): on its host's clock, its snapshot plus its latency; after a copy,
    the copy's time."""
    written: list[int | None] = [
        None
        if when is None
        else BASE_TIME_NS + clock_offset(settings, rank) + when + latency_ns(settings, times, rank)
        for rank, when in enumerate(dump_times)
    ]
    if times.copied_after_s is None:
        return written
    last = max((w for w in written if w is not None), default=BASE_TIME_NS)
    start = last + round(times.copied_after_s * 1e9)
    spread = COPY_SPREAD_S * 1e9
    return [
        None if w is None else start + round(uniform(settings.seed, _COPY_TAG, rank) * spread)
        for rank, w in enumerate(written)
    ]
