"""How old the unfinished ops were when the dumps were taken: stuck, in flight, or not known.

A dump does not say when it was taken. Each rank's snapshot lies in an interval:

- **Lower bound**: every timestamp in a dump was taken before its snapshot, so the newest one
  (of any rank: ranks dump within `DUMP_SPREAD_S` of each other) bounds it from below.
- **Exact**: the recorder looks at an op that has not been retired yet when it dumps; its
  `time_discovered_started_ns` / `time_discovered_completed_ns` are then the snapshot time
  itself (PyTorch's and HCCL's recorders; torchcomms stamps them when the call returns, so its
  entries never pin a dump).
- **Upper bound**: the file's modification time (an archive member's, an object's
  LastModified; else a time written in the file's or folder's name, as the debug server and
  `fr-analyze live` name snapshots). The file is written after the snapshot: by the dump's own
  latency (stack symbolization took 6-19 s on real gloo jobs, `docs/dump-dating.md`), or much
  later by a copy that kept no times (`cp`, `scp`, a download). A file time beyond the rank's
  newest entry plus its longest timeout and `DUMP_LATENCY_S` is named a copy's time and not
  used; one before the newest entry, a clock that disagrees.

An op's age at the snapshot is then an interval too. It is *old* (stuck) when its lower bound
reaches its timeout, or the recorder itself proves it: an op retired without completing (timed
out or failed) on a backend that records states, or on gloo. It is *young* (in flight) when its
upper bound is below its timeout, or the recorder proves it: PyTorch's gloo recorder retires an
op that times out, so an unretired one had not reached its timeout. The recorder's rule wins
over a file time, but not over the timestamps: gloo retires a timed-out op a moment after the
caller sees the error, so a rank that dumps from its own exception handler can show the op
unretired. An unretired gloo op whose lower bound is past its timeout by more than the ranks'
clock spread is old; within the spread of it, unknown. Otherwise the age is *unknown*, and the
report says why: a file time can prove "younger than the timeout" but never "stuck" on its own.

torchcomms' `timeout_ms` is a constant (600000), not the communicator's timeout, so its ops
have none here (`dialects`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..load import WatchdogTimeout
from ..match import stateless
from ..match.completion import quiet
from ..model.dump import RankDump
from ..model.profile import Profiles
from ..model.recorders import Dialect, dumps_look_at_ops
from ..model.records import State
from ..model.table import EntryTable

DUMP_SPREAD_S = 2.0
"""How far apart ranks' dumps (and their host clocks) may be: slack on every age comparison."""
DUMP_LATENCY_S = 60.0
"""How long after its snapshot a dump's file may still be written by the dump itself: stack
symbolization took 6-19 s on real 4-rank gloo jobs here (`docs/dump-dating.md`); three times
that for slower hosts and bigger stacks. A file time later than a rank's newest entry plus its
longest timeout and this was set by a copy (or by a dump taken long after the job stopped)."""


class Evidence(enum.StrEnum):
    """What dated one rank's dump."""

    LOOKED_AT = "an op the recorder looked at during the dump"
    FILE_TIME = "the file's modification time"
    NAME = "a time in its file's or folder's name"
    COPIED = "nothing: its file's time is a copy's, far past every entry"
    LOWER_BOUND = "nothing: only a lower bound (its newest entry)"


class Age(enum.StrEnum):
    """How old an unfinished op is at the dump: stuck, in flight, or not known."""

    OLD = "old"  # its lower bound reached its timeout, or the recorder says it timed out
    YOUNG = "young"  # in flight: its upper bound is below its timeout, or the recorder says so
    UNKNOWN = "unknown"  # the evidence bounds it on both sides of its timeout, or not at all


class Unknown(enum.StrEnum):
    """Why an unfinished op's age is not known (the first that applies, for the report)."""

    NO_TIMEOUT = "the recorder keeps no timeout of its own (torchcomms writes a constant)"
    UPPER_PAST_TIMEOUT = (
        "a file's time is past the timeout, but it is written after the snapshot, often over "
        "10 s later with stack traces: it bounds the age only from above"
    )
    COPIED = "the files' times are a copy's, days past every entry, so they date nothing"
    RETIRE_LAG = (
        "gloo's recorder had not retired them, yet the newest timestamps put them at their "
        "timeout: it retires a timed-out op a moment after the caller sees the error"
    )
    NO_FILE_TIME = "no file's time dates the dump"


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
    # rank: its file time, not used: far past every entry (a copy's, or a dump long after)
    copied: Mapping[int, int] = field(default_factory=dict)


def dump_time(p: Profiles, dumps: Sequence[RankDump] = ()) -> DumpTime:
    """When the dumps were taken, from the entries (each rank's profile, `model.profile`)
    and (`dumps`) the files' times."""
    pytorch = frozenset(d.rank for d in dumps if d.dialect == Dialect.PYTORCH)
    if not len(p.rank):
        return DumpTime(None, False, "no entries", retire_on_timeout=pytorch)
    newest = int(p.newest_ns.max())
    timing_on = bool(p.timing_on.any())
    if newest < 0:
        traces = bool(dumps) and all(d.dialect == Dialect.EXECUTION_TRACE for d in dumps)
        return DumpTime(
            None,
            False,
            "no timestamps in the dumps",
            retire_on_timeout=pytorch,
            traces_only=traces,
        )
    # torchcomms stamps discovery times when the call returns, not at the dump
    blind = {d.rank for d in dumps if not dumps_look_at_ops(d.dialect)}
    looked_at = quiet(p, dumps).looked_at(p) - blind
    files, named, copied = _believed_file_times(p, dumps)
    evidence = {
        d.rank: Evidence.LOOKED_AT
        if d.rank in looked_at
        else Evidence.NAME
        if d.rank in named
        else Evidence.FILE_TIME
        if d.rank in files
        else Evidence.COPIED
        if d.rank in copied
        else Evidence.LOWER_BOUND
        for d in dumps
    }

    def made(basis: str, exact: bool = False) -> DumpTime:
        return DumpTime(newest, exact, basis, files, evidence, timing_on, pytorch, copied=copied)

    if looked_at:
        return made(
            "the recorder looked at unretired ops during the dump (their discovery times are "
            "the dump time)",
            exact=True,
        )
    if files and len(named) == len(files):
        return made(
            f"the times in the files' or folders' names ({len(files)} of {len(dumps)} "
            "rank(s)): each was named at its dump, or later"
        )
    if files:
        basis = (
            f"the files' modification times ({len(files)} of {len(dumps)} rank(s)): each file "
            "was written at its dump, or later"
        )
        if named:
            basis += f"; for {len(named)} rank(s), the time in its file's or folder's name"
        return made(basis)
    why = "nothing was running then" if timing_on else "NCCL timing off, or nothing ran then"
    basis = (
        f"no entry was looked at during the dump ({why}) and no file's time dates it: the "
        "dump time is only known to be after the newest timestamp"
    )
    if copied:
        basis += (
            f"; the file times of {len(copied)} rank(s) are far past every entry (a copy "
            "that kept no times), not used"
        )
    return made(basis)


def _believed_file_times(
    p: Profiles, dumps: Sequence[RankDump]
) -> tuple[dict[int, int], set[int], dict[int, int]]:
    """Each rank's file time, where it falls between the rank's newest entry and that plus its
    longest timeout and `DUMP_LATENCY_S`; else the time in its file's or folder's name, within
    the same window (those ranks: the set); and the file times past the window (copies'). From
    each rank's profile, whatever the number of rows."""
    times = {d.rank: d.file_time_ns for d in dumps if d.file_time_ns is not None}
    names = {d.rank: d.name_time_ns for d in dumps if d.name_time_ns is not None}
    if not (times or names) or not len(p.rank):
        return {}, set(), {}
    ranks = p.rank.tolist()
    newest = p.newest_ns.tolist()
    longest_s = (p.longest_timeout_ms / 1e3).tolist()
    found: dict[int, int] = {}
    named: set[int] = set()
    copied: dict[int, int] = {}
    for rank, top, limit in zip(ranks, newest, longest_s, strict=True):
        window_ns = int((max(limit, 0.0) + DUMP_LATENCY_S) * 1e9)
        file_time = times.get(int(rank))
        if file_time is not None and 0 <= top <= file_time <= top + window_ns:
            found[int(rank)] = file_time
            continue
        name_time = names.get(int(rank))
        # a name keeps whole seconds: the latest it can mean is up to a second later
        if name_time is not None and 0 <= top <= name_time + 999_999_999 <= top + window_ns:
            found[int(rank)] = name_time + 999_999_999
            named.add(int(rank))
            continue
        if file_time is not None and top >= 0 and file_time > top + window_ns:
            copied[int(rank)] = file_time
    return found, named, copied


@dataclass(frozen=True)
class Ages:
    """The ages of some unfinished rows at the dump: bounds in seconds (NaN where unknown),
    the verdict, and for an unknown one why."""

    at_least_s: npt.NDArray[np.float64]
    at_most_s: npt.NDArray[np.float64]
    verdicts: list[Age]
    why_unknown: list[Unknown | None]


def age_bounds(
    t: EntryTable,
    rows: npt.NDArray[np.int64],
    when: DumpTime,
    timed_out: Sequence[WatchdogTimeout] = (),
) -> Ages:
    """Each of `rows` (rows that did not complete): its age at the dump as an interval (from
    the newest timestamp, a lower bound, to the rank's exact dump time or believed file time,
    an upper bound), and whether that makes it old, young or unknown. `timed_out`: the ops the
    job's log says the watchdog timed out (old, whatever the times say)."""
    rows = np.asarray(rows, dtype=np.int64)
    logged = watchdog_rows(t, rows, timed_out)
    created = t.t_created[rows]
    has = created >= 0
    low = np.full(len(rows), np.nan)
    high = np.full(len(rows), np.nan)
    if when.at_ns is not None:
        low[has] = (when.at_ns - created[has]) / 1e9
        if when.exact:
            high[has] = low[has]
    if when.file_times and not when.exact:
        file_time = np.array([when.file_times.get(int(r), -1) for r in t.rank[rows]])
        by_file = has & (file_time >= 0)
        high[by_file] = (file_time[by_file] - created[by_file]) / 1e9
        # a file time older than another rank's newest entry still bounds this rank's dump
        low[by_file] = np.minimum(low[by_file], high[by_file])
    timeout_s = t.timeout_ms[rows] / 1e3
    gloo = stateless(t, rows)
    retired = t.retired[rows]
    retires = np.array([int(r) in when.retire_on_timeout for r in t.rank[rows]], dtype=bool)
    # These rows did not complete, so a retired one ended in an error (on gloo, `retired` is
    # set when an op fails too: a collective some member never issued can only have failed).
    failed = retired & (gloo | (t.state[rows] != State.COMPLETED))
    copied = np.array([int(r) in when.copied for r in t.rank[rows]], dtype=bool)
    verdicts: list[Age] = []
    why: list[Unknown | None] = []
    slack = DUMP_SPREAD_S
    logged_iter = iter(logged.tolist())
    for lo, hi, limit, unretired_gloo, is_failed, is_copy in zip(
        low.tolist(),
        high.tolist(),
        timeout_s.tolist(),
        (gloo & ~retired & retires).tolist(),
        failed.tolist(),
        copied.tolist(),
        strict=True,
    ):
        reached = limit > 0 and lo == lo and lo >= limit - slack  # its lower bound: timed out
        if is_failed or next(logged_iter):
            verdicts.append(Age.OLD)  # the recorder's own word: it timed out or failed
            why.append(None)
        elif unretired_gloo and not reached:
            verdicts.append(Age.YOUNG)  # PyTorch's gloo recorder: it had not timed out
            why.append(None)
        elif unretired_gloo and lo < limit + slack:  # the recorder, or the clocks' spread
            verdicts.append(Age.UNKNOWN)
            why.append(Unknown.RETIRE_LAG)
        elif reached:
            verdicts.append(Age.OLD)
            why.append(None)
        elif hi == hi and (hi < limit - slack if limit > 0 else True):
            verdicts.append(Age.YOUNG)
            why.append(None)
        else:
            verdicts.append(Age.UNKNOWN)
            why.append(
                Unknown.NO_TIMEOUT
                if limit <= 0
                else Unknown.UPPER_PAST_TIMEOUT
                if hi == hi
                else Unknown.COPIED
                if is_copy
                else Unknown.NO_FILE_TIME
            )
    return Ages(low, high, verdicts, why)


def watchdog_rows(
    t: EntryTable, rows: npt.NDArray[np.int64], timed_out: Sequence[WatchdogTimeout]
) -> npt.NDArray[np.bool_]:
    """Which of `rows` the job's log says the watchdog timed out: same rank and collective
    sequence id, and the same group where the log names it."""
    out = np.zeros(len(rows), dtype=bool)
    if not timed_out or not len(rows):
        return out
    by_place = {(w.rank, w.seq): w.group for w in timed_out}
    for i, (rank, seq, group) in enumerate(
        zip(t.rank[rows].tolist(), t.coll_seq[rows].tolist(), t.group[rows].tolist(), strict=True)
    ):
        if (rank, seq) in by_place:
            named = by_place[(rank, seq)]
            out[i] = named is None or t.group_names[group][0] == named
    return out


def ages(
    t: EntryTable, rows: npt.NDArray[np.int64], when: DumpTime
) -> tuple[npt.NDArray[np.float64], list[Age]]:
    """Age in seconds (NaN when unknown) and verdict of each of `rows`: the upper bound where
    one is known, else the lower bound (`age_bounds` gives both)."""
    found = age_bounds(t, rows, when)
    age = np.where(np.isnan(found.at_most_s), found.at_least_s, found.at_most_s)
    return age, found.verdicts
