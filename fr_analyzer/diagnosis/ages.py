"""How old the unfinished ops were when the dumps were taken: in flight, or stuck.

A dump does not say when it was taken. The evidence, per rank, strongest first:

- The recorder looks at an op that has not been retired yet when it dumps: its
  `time_discovered_started_ns` / `time_discovered_completed_ns` are then the dump time itself.
  A rank with such an entry pins the dump time (ranks dump within about a second of each
  other, so it pins every rank's).
- The file's modification time (else a time written in its file's or folder's name, as the
  debug server and `fr-analyze live` name snapshots): the recorder writes the file at the
  dump, so it is the dump time or later (a copy that kept no times makes it later, which
  errs towards "stuck"). It is believed only between the rank's newest entry and that plus
  its longest timeout and `FILE_TIME_WINDOW_S` (a watchdog dumps when an op times out); a
  time outside that window was set by a copy, or by a clock that disagrees with the entries'.
  Archives keep member times.
- Otherwise every timestamp in a dump was taken before the dump, so the newest one is only a
  lower bound of the dump time: an age measured from it is a lower bound too.

An op that ran past its `timeout_ms` by the dump time is old for certain; so is an op that was
retired without completing (timed out or failed) on a backend that records states. PyTorch's
gloo recorder retires an op that times out (with an error), so there an op that is still
unretired has not reached its timeout: it is in flight. That rule is that recorder's alone:
torchcomms never retires an op on a timeout, and its `retired` is cleared when it is read
(`dumps.dialects`).

An unfinished op is *old* when its age at the dump time reaches its timeout, *young* when its
age is known from an exact dump time or a file's time and is below the timeout, or PyTorch's
gloo recorder left it unretired; otherwise its age is *unknown* (NCCL without timing and no
file time: a watchdog dump looks like a dump taken the moment the job stopped).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..load.dialects import Dialect
from ..match import stateless
from ..model.dump import RankDump
from ..model.records import State
from ..model.table import EntryTable, rank_starts

DUMP_SPREAD_S = 2.0
"""How far apart ranks' dumps (and their host clocks) may be: slack on every age comparison."""
FILE_TIME_WINDOW_S = 600.0
"""How long after a rank's newest entry plus its longest timeout a file's modification time is
still believed to be its dump time (a watchdog's dump, or one taken by hand while the job was
stuck); later, the file was copied without its times, or written long after."""


class Evidence(enum.StrEnum):
    """What dated one rank's dump."""

    LOOKED_AT = "an op the recorder looked at during the dump"
    FILE_TIME = "the file's modification time"
    NAME = "a time in its file's or folder's name"
    LOWER_BOUND = "nothing: only a lower bound (its newest entry)"


class Age(enum.StrEnum):
    """How old an unfinished op is at the dump: stuck, in flight, or not known."""

    OLD = "old"  # ran past its timeout, or timed out / failed
    YOUNG = "young"  # in flight: below its timeout at a known dump time
    UNKNOWN = "unknown"  # the dumps do not say when they were taken


@dataclass(frozen=True)
class DumpTime:
    """When the dumps were taken, as far as the entries tell."""

    at_ns: int | None  # newest timestamp of any rank: the dump time, or a lower bound of it
    exact: bool  # an entry was looked at during the dump, so `at_ns` is the dump time
    basis: str  # how it is known, for the report
    file_times: Mapping[int, int] = field(default_factory=dict)  # rank: believed file time
    evidence: Mapping[int, Evidence] = field(default_factory=dict)  # rank: what dated it
    timing_on: bool = False  # some op has a start time or duration: NCCL timing was on
    # ranks whose recorder retires an op that times out (PyTorch's, on gloo)
    retire_on_timeout: frozenset[int] = frozenset()
    traces_only: bool = False  # every rank an Execution Trace: no op has a time


def dump_time(t: EntryTable, dumps: Sequence[RankDump] = ()) -> DumpTime:
    """When the dumps were taken, from the entries and (`dumps`) the files' times."""
    pytorch = frozenset(d.rank for d in dumps if d.dialect == Dialect.PYTORCH)
    if not t.n:
        return DumpTime(None, False, "no entries", retire_on_timeout=pytorch)
    stamps = np.maximum(np.maximum(t.t_created, t.t_started), t.t_completed)
    newest = int(stamps.max())
    stateful = ~stateless(t)
    timing_on = bool(((t.t_started >= 0) | ~np.isnan(t.duration_ms)).any())
    if newest < 0:
        traces = bool(dumps) and all(d.dialect == Dialect.EXECUTION_TRACE for d in dumps)
        return DumpTime(
            None,
            False,
            "no timestamps in the dumps",
            retire_on_timeout=pytorch,
            traces_only=traces,
        )
    seen_at_dump = stateful & ~t.retired & ((t.t_started >= 0) | (t.t_completed >= 0))
    looked_at = frozenset(int(r) for r in np.unique(t.rank[seen_at_dump]))
    files, named = _believed_file_times(t, stamps, dumps)
    evidence = {
        d.rank: Evidence.LOOKED_AT
        if d.rank in looked_at
        else Evidence.NAME
        if d.rank in named
        else Evidence.FILE_TIME
        if d.rank in files
        else Evidence.LOWER_BOUND
        for d in dumps
    }
    if looked_at:
        basis = (
            "the recorder looked at unretired ops during the dump (their discovery times are "
            "the dump time)"
        )
        return DumpTime(newest, True, basis, files, evidence, timing_on, pytorch)
    if files and len(named) == len(files):
        basis = (
            f"the times in the files' or folders' names ({len(files)} of {len(dumps)} "
            "rank(s)): each was named at its dump, or later"
        )
        return DumpTime(newest, False, basis, files, evidence, timing_on, pytorch)
    if files:
        basis = (
            f"the files' modification times ({len(files)} of {len(dumps)} rank(s)): each file "
            "was written at its dump, or later"
        )
        if named:
            basis += f"; for {len(named)} rank(s), the time in its file's or folder's name"
        return DumpTime(newest, False, basis, files, evidence, timing_on, pytorch)
    why = "nothing was running then" if timing_on else "NCCL timing off, or nothing ran then"
    basis = (
        f"no entry was looked at during the dump ({why}) and no file's time dates it: the "
        "dump time is only known to be after the newest timestamp"
    )
    return DumpTime(newest, False, basis, files, evidence, timing_on, pytorch)


def _believed_file_times(
    t: EntryTable, stamps: npt.NDArray[np.int64], dumps: Sequence[RankDump]
) -> tuple[dict[int, int], set[int]]:
    """Each rank's file time, where it falls between the rank's newest entry and that plus its
    longest timeout and `FILE_TIME_WINDOW_S`; else the time in its file's or folder's name,
    within the same window (those ranks: the set). One pass over the rows (they are in rank
    order), whatever the number of ranks."""
    times = {d.rank: d.file_time_ns for d in dumps if d.file_time_ns is not None}
    names = {d.rank: d.name_time_ns for d in dumps if d.name_time_ns is not None}
    if not (times or names) or not t.n:
        return {}, set()
    starts = rank_starts(t.rank)
    ranks = t.rank[starts].tolist()
    newest = np.maximum.reduceat(stamps, starts).tolist()
    longest_s = (np.maximum.reduceat(t.timeout_ms, starts) / 1e3).tolist()
    found: dict[int, int] = {}
    named: set[int] = set()
    for rank, top, limit in zip(ranks, newest, longest_s, strict=True):
        window_ns = int((max(limit, 0.0) + FILE_TIME_WINDOW_S) * 1e9)
        file_time = times.get(int(rank))
        if file_time is not None and 0 <= top <= file_time <= top + window_ns:
            found[int(rank)] = file_time
            continue
        name_time = names.get(int(rank))
        # a name keeps whole seconds: the latest it can mean is up to a second later
        if name_time is not None and 0 <= top <= name_time + 999_999_999 <= top + window_ns:
            found[int(rank)] = name_time + 999_999_999
            named.add(int(rank))
    return found, named


def ages(
    t: EntryTable, rows: npt.NDArray[np.int64], when: DumpTime
) -> tuple[npt.NDArray[np.float64], list[Age]]:
    """Age in seconds (NaN when unknown) and verdict of each of `rows`, rows that did not
    complete, at the dump time: the exact dump time, else the rank's believed file time (the
    age is then at most that), else the newest timestamp (the age is then at least that)."""
    rows = np.asarray(rows, dtype=np.int64)
    created = t.t_created[rows]
    age = np.full(len(rows), np.nan)
    dated = np.zeros(len(rows), dtype=bool)  # the age is known, not only a lower bound
    has = created >= 0
    if when.at_ns is not None:
        age[has] = (when.at_ns - created[has]) / 1e9
        dated[has] = when.exact
    if when.file_times and not when.exact:
        file_time = np.array([when.file_times.get(int(r), -1) for r in t.rank[rows]])
        by_file = has & (file_time >= 0)
        age[by_file] = (file_time[by_file] - created[by_file]) / 1e9
        dated |= by_file
    timeout_s = t.timeout_ms[rows] / 1e3
    gloo = stateless(t, rows)
    retired = t.retired[rows]
    retires = np.array([int(r) in when.retire_on_timeout for r in t.rank[rows]], dtype=bool)
    # These rows did not complete, so a retired one ended in an error (on gloo, `retired` is
    # set when an op fails too: a collective some member never issued can only have failed).
    failed = retired & (gloo | (t.state[rows] != State.COMPLETED))
    out: list[Age] = []
    for a, known, limit, unretired_gloo, is_failed in zip(
        age.tolist(),
        dated.tolist(),
        timeout_s.tolist(),
        (gloo & ~retired & retires).tolist(),
        failed.tolist(),
        strict=True,
    ):
        if is_failed or (a == a and limit > 0 and a >= limit - DUMP_SPREAD_S):
            out.append(Age.OLD)
        elif (known and a == a) or unretired_gloo:
            out.append(Age.YOUNG)
        else:
            out.append(Age.UNKNOWN)
    return age, out
