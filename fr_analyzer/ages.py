"""How old the unfinished ops were when the dumps were taken: in flight, or stuck.

A dump does not say when it was taken. What the entries do say:

- Every timestamp in a dump was taken before the dump, so the newest timestamp of all ranks is
  a lower bound of the dump time (ranks dump within about a second of each other).
- The recorder looks at an op that has not been retired yet when it dumps: its
  `time_discovered_started_ns` / `time_discovered_completed_ns` are then the dump time itself.
  A rank with such an entry pins the dump time: the lower bound is exact.
- An op that ran past its `timeout_ms` by the dump time is old for certain; so is an op that
  was retired without completing (timed out or failed) on a backend that records states.
- gloo retires an op that times out (with an error), so on gloo an op that is still unretired
  has not reached its timeout: it is in flight.

An unfinished op is *old* when its age at the dump time reaches its timeout, *young* when the
dump time is exact and its age is below the timeout, or gloo left it unretired; otherwise its
age is *unknown* (NCCL without timing: a watchdog dump looks like a dump taken the moment the
job stopped).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .dumps import EntryTable
from .matching import stateless
from .model import State

DUMP_SPREAD_S = 2.0
"""How far apart ranks' dumps (and their host clocks) may be: slack on every age comparison."""


class Age(enum.StrEnum):
    OLD = "old"  # ran past its timeout, or timed out / failed
    YOUNG = "young"  # in flight: below its timeout at a known dump time
    UNKNOWN = "unknown"  # the dumps do not say when they were taken


@dataclass(frozen=True)
class DumpTime:
    """When the dumps were taken, as far as the entries tell."""

    at_ns: int | None  # newest timestamp of any rank: the dump time, or a lower bound of it
    exact: bool  # an entry was looked at during the dump, so `at_ns` is the dump time
    basis: str  # how it is known, for the report


def dump_time(t: EntryTable) -> DumpTime:
    if not t.n:
        return DumpTime(None, False, "no entries")
    stamps = np.maximum(np.maximum(t.t_created, t.t_started), t.t_completed)
    newest = int(stamps.max())
    if newest < 0:
        return DumpTime(None, False, "no timestamps in the dumps")
    stateful = ~stateless(t)
    seen_at_dump = stateful & ~t.retired & ((t.t_started >= 0) | (t.t_completed >= 0))
    if bool(seen_at_dump.any()):
        return DumpTime(
            newest,
            True,
            "the recorder looked at unretired ops during the dump (their discovery times are "
            "the dump time)",
        )
    return DumpTime(
        newest,
        False,
        "no entry was looked at during the dump (timing off, or nothing ran then): the dump "
        "time is only known to be after the newest timestamp",
    )


def ages(
    t: EntryTable, rows: npt.NDArray[np.int64], when: DumpTime
) -> tuple[npt.NDArray[np.float64], list[Age]]:
    """Age in seconds (NaN when unknown) and verdict of each of `rows`, rows that did not
    complete, at the dump time."""
    rows = np.asarray(rows, dtype=np.int64)
    created = t.t_created[rows]
    age = np.full(len(rows), np.nan)
    if when.at_ns is not None:
        has = created >= 0
        age[has] = (when.at_ns - created[has]) / 1e9
    timeout_s = t.timeout_ms[rows] / 1e3
    gloo = stateless(t, rows)
    retired = t.retired[rows]
    # These rows did not complete, so a retired one ended in an error (on gloo, `retired` is
    # set when an op fails too: a collective some member never issued can only have failed).
    failed = retired & (gloo | (t.state[rows] != State.COMPLETED))
    out: list[Age] = []
    for a, limit, is_gloo, is_retired, is_failed in zip(
        age.tolist(),
        timeout_s.tolist(),
        gloo.tolist(),
        retired.tolist(),
        failed.tolist(),
        strict=True,
    ):
        if is_failed or (a == a and limit > 0 and a >= limit - DUMP_SPREAD_S):
            out.append(Age.OLD)
        elif (when.exact and a == a) or (is_gloo and not is_retired):
            out.append(Age.YOUNG)
        else:
            out.append(Age.UNKNOWN)
    return age, out
