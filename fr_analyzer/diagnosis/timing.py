"""Stuck or in flight: how old the unfinished ops were when the dumps were taken (one dump's
evidence, or several snapshots compared), and whether that makes the job hung."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from ..load import WatchdogTimeout
from ..model.dump import RankDump
from ..model.profile import profiles_of
from ..model.ranks import by_count, counted, label
from ..model.records import State
from ..model.table import EntryTable
from . import waits
from .ages import (
    DUMP_SPREAD_S,
    Age,
    Ages,
    DumpTime,
    Evidence,
    Unknown,
    age_bounds,
    dump_time,
    watchdog_rows,
)
from .records import Timing
from .series import Series

MIN_UNCHANGED_S = 1.0
"""However short the job's step, a rank unchanged for less than this is not called stuck."""


def judge_timing(
    t: EntryTable,
    graph: waits.WaitGraph,
    dumps: Sequence[RankDump] = (),
    series: Series | None = None,
    timed_out: Sequence[WatchdogTimeout] = (),
    when: DumpTime | None = None,
) -> Timing:
    """Whether the unfinished ops are stuck or in flight: by one dump's ages, or by snapshots
    (`timed_out`: what the job's log says the watchdog timed out; `when`: the dump's time,
    judged over every row of the job, where `t` holds only some, `diagnosis.frontier`)."""
    if when is None:
        when = dump_time(profiles_of(t), dumps)
    rows = np.array(sorted(graph.frontier.values()), dtype=np.int64)
    if not len(rows):
        return Timing(when, 0, None, Age.YOUNG, False, "every op in the dumps completed")
    one = _one_dump_timing(t, rows, when, timed_out)
    return one if series is None else _measured(t, rows, one, series)


def _measured(t: EntryTable, rows: npt.NDArray[np.int64], one: Timing, series: Series) -> Timing:
    """The verdict of several snapshots: a blocked rank unchanged for its op's timeout, or for
    longer than the job's step time, is stuck; blocked ranks that all moved were in flight;
    otherwise the single dump's verdict stands, with what the snapshots showed."""
    step = series.step_s
    stuck: dict[int, float] = {}
    moved: set[int] = set()
    still: set[int] = set()
    for rank, timeout_ms in zip(t.rank[rows].tolist(), t.timeout_ms[rows].tolist(), strict=True):
        m = series.ranks.get(int(rank))
        if m is None:
            continue
        if m.moved:
            moved.add(int(rank))
            continue
        still.add(int(rank))
        held = m.unchanged_s
        if held is None or held < MIN_UNCHANGED_S:
            continue
        limit = timeout_ms / 1e3
        if (limit > 0 and held >= limit - DUMP_SPREAD_S) or (step is not None and held > step):
            stuck[int(rank)] = held
    n = len(rows)
    count = len(series.labels)
    step_text = f"the job's step takes {step:.2g} s" if step is not None else "no step time known"
    timeout = float(t.timeout_ms[rows].max()) / 1e3
    if stuck:
        longest = max(stuck, key=lambda r: (stuck[r], -r))
        note = (
            f"{_unfinished(n)}; {label(sorted(stuck))} "
            f"{series.describe(longest)} (timeout {timeout:.0f} s, {step_text}): the job is hung"
        )
        return replace(
            one, oldest_age_s=stuck[longest], age=Age.OLD, hung=True, note=note, measured=True
        )
    if moved and not still and one.age is not Age.OLD:
        last, previous = series.times_ns[-1], series.times_ns[-2]
        apart = (
            f", {(last - previous) / 1e9:.0f} s apart"
            if last is not None and previous is not None
            else ""
        )
        note = (
            f"{_unfinished(n)}, but every one of them moved between the last "
            f"two of {count} snapshots{apart}: they were in flight, not stuck"
        )
        return replace(one, age=Age.YOUNG, hung=False, note=note, measured=True)
    if still:
        first = min(still)
        why = (
            f"{label(sorted(still))} {series.describe(first)}, not long enough to call stuck "
            f"(timeout {timeout:.0f} s, {step_text})"
        )
        return replace(one, note=f"{one.note}. Across the snapshots, {why}")
    return one


def _one_dump_timing(
    t: EntryTable,
    rows: npt.NDArray[np.int64],
    when: DumpTime,
    timed_out: Sequence[WatchdogTimeout] = (),
) -> Timing:
    found = age_bounds(t, rows, when, timed_out)
    logged = watchdog_rows(t, rows, timed_out)
    verdicts = found.verdicts
    age_s = np.where(np.isnan(found.at_most_s), found.at_least_s, found.at_most_s)
    known = age_s[~np.isnan(age_s)]
    oldest = float(known.max()) if len(known) else None
    timeout = float(t.timeout_ms[rows].max()) / 1e3
    n = len(rows)
    dated_by = _dated_by(when, {int(r) for r in t.rank[rows]})
    if Age.OLD in verdicts:
        old = [i for i, v in enumerate(verdicts) if v is Age.OLD]
        lows = [float(found.at_least_s[i]) for i in old]
        proven = [a for a in lows if a == a]
        failed = int((t.retired[rows] & (t.state[rows] != State.COMPLETED)).sum())
        lowest = max(proven) if proven else None
        if logged.any():
            hit = next(w for w in timed_out if _names(t, w, rows[logged]))
            why = (
                f"the job's log says the watchdog timed out rank {hit.rank}'s {hit.op} "
                f"#{hit.seq} after {hit.ran_ms} ms (timeout {hit.timeout_ms} ms)"
            )
        elif lowest is not None and timeout > 0 and lowest >= timeout - DUMP_SPREAD_S:
            exact = ", dated by an op looked at during the dump" if when.exact else ""
            bound = "" if when.exact else "at least "
            why = f"the oldest had waited {bound}{lowest:.0f} s (timeout {timeout:.0f} s{exact})"
        else:
            why = f"{failed} of them ended without completing (timed out or failed)"
        note = f"{_unfinished(n)}; {why}: the job is hung"
        return Timing(when, n, oldest, Age.OLD, True, note)
    if all(v == Age.YOUNG for v in verdicts):
        highs = found.at_most_s[~np.isnan(found.at_most_s)]
        bounded = len(highs) > 0 and float(highs.max()) < timeout - DUMP_SPREAD_S
        if not len(highs) and oldest is None:
            age_text = "still running"
        elif bounded and (when.exact or when.file_times):
            age_text = f"at most {float(highs.max()):.1f} s old"
        else:  # PyTorch's gloo recorder left them unretired: below their timeout
            floors = found.at_least_s[~np.isnan(found.at_least_s)]
            least = float(floors.max()) if len(floors) else None
            old_enough = least is not None and least >= 1
            at_least = f"at least {least:.0f} s old and " if old_enough else ""
            age_text = f"{at_least}below their timeout (gloo retires an op that times out"
            if len(highs):
                age_text += (
                    "; a file's time includes the dump's own latency, often over 10 s with stack "
                    "traces"
                )
            age_text += ")"
        note = (
            f"{_unfinished(n)}, {age_text} when the dumps were taken (timeout "
            f"{timeout:.0f} s{dated_by}): they were in flight, not stuck"
        )
        return Timing(when, n, oldest, Age.YOUNG, False, note)
    if when.traces_only:
        note = (
            f"{_unfinished(n)}, and Execution Traces keep no times: whether they were stuck or "
            "in flight is not known. A job's traces end where its ranks stopped issuing (a "
            "watchdog's kill cuts them), so they are taken as stuck"
        )
        return Timing(when, n, oldest, Age.UNKNOWN, True, note, unknown=Unknown.NO_FILE_TIME)
    reasons = [w for w in found.why_unknown if w is not None]
    reason = reasons[0] if reasons else Unknown.NO_FILE_TIME
    span = _span(found, verdicts)
    if reason is Unknown.NO_FILE_TIME:
        why = (
            "NCCL timing was on, but nothing was running at the dump"
            if when.timing_on
            else "no op was looked at during the dump: NCCL timing off"
        )
        why = f"{why}, and no file's time dates it"
    else:
        why = reason.value
    note = (
        f"{_unfinished(n)}{span}, but the dumps do not tell whether they were stuck or in "
        f"flight ({why}); taken as stuck, since a watchdog dumps when an op times out"
    )
    return Timing(when, n, oldest, Age.UNKNOWN, True, note, unknown=reason)


def _names(t: EntryTable, w: WatchdogTimeout, rows: npt.NDArray[np.int64]) -> bool:
    """Whether watchdog timeout `w` is one of `rows`."""
    return bool(((t.rank[rows] == w.rank) & (t.coll_seq[rows] == w.seq)).any())


def _span(found: Ages, verdicts: list[Age]) -> str:
    """ ", between 0.1 s and 10 s old (timeout 6 s)" for the unknown rows whose age has both
    bounds; "" where none has."""
    pairs = [
        (float(lo), float(hi))
        for lo, hi, v in zip(found.at_least_s, found.at_most_s, verdicts, strict=True)
        if v is Age.UNKNOWN and lo == lo and hi == hi
    ]
    if not pairs:
        return ""
    lo = max(p[0] for p in pairs)
    hi = max(p[1] for p in pairs)
    return f", between {max(lo, 0.0):.1f} s and {hi:.1f} s old when dumped"


def _unfinished(n: int) -> str:
    """`3 ranks have unfinished ops`, `1 rank has unfinished ops`."""
    return f"{counted(n, 'rank')} {by_count(n, 'has', 'have')} unfinished ops"


def timing_on(t: EntryTable, ranks: Sequence[int]) -> bool:
    """Whether NCCL timing was on for every one of `ranks`: some op of each has a start time
    or a duration (with timing off, no op is ever seen started)."""
    seen = (t.t_started >= 0) | ~np.isnan(t.duration_ms)
    timed = {int(r) for r in np.unique(t.rank[seen])}
    return bool(ranks) and all(r in timed for r in ranks)


def _dated_by(when: DumpTime, ranks: set[int]) -> str:
    """ ", dated by ..." for a note: what dated the dumps of `ranks` (none when only the
    entries' newest timestamp bounds it)."""
    if when.exact:
        return ", dated by an op looked at during the dump"
    files = sorted(r for r in ranks if r in when.file_times)
    if not files:
        return ""
    named = [r for r in files if when.evidence.get(r) is Evidence.NAME]
    timed = [r for r in files if when.evidence.get(r) is not Evidence.NAME]
    parts = [f"the file's modification time of {label(timed)}"] if timed else []
    if named:
        parts.append(f"the time in the file's or folder's name of {label(named)}")
    return ", dated by " + " and ".join(parts)
