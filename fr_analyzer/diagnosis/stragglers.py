"""Slow, not hung: the rank that made the others wait, in a job whose ops all completed.

Lateness is measured on each rank's own clock, so host clock offsets do not matter: at a
collective every member completes together, so a member that arrived late waited less between
enqueueing the op and its completion than the first arrival did; its lateness is the longest
wait of the members minus its own. (gloo records no completion time; its collectives are
synchronous, so a collective ends when its last member arrives: the latest enqueue time of its
members, on their hosts' clocks, stands in for the completion.)

Two shapes of slowness:
- a *stall*: one rank reached one collective seconds after its peers. Lateness cascades: the
  ranks that waited for it reach their next collectives of other groups late too. A late
  arrival is *explained* when the rank's previous op kept it waiting about as long; the root is
  the first late arrival that nothing explains.
- a *straggler*: one rank arrives last at most collectives (median lateness well above its
  peers').
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..match import MatchResult
from ..match.records import id_type, of_kinds
from ..model.groups import GroupTable
from ..model.ranks import label
from ..model.records import Group, UnitKind
from ..model.table import EntryTable, rank_starts
from . import sentences
from .records import RootCause, RootKind

_MEDIAN_CHUNK = 1 << 22  # values gathered at once per partition
EXPLAINED_SHARE = 0.5  # a late arrival is the rank's own when its host's gap is this share
STANDS_OUT = 5.0  # a straggler's median lateness over most other ranks' (90th percentile)
REPEATS = 3  # own late arrivals that make a rank that keeps arriving late a straggler
# A recorded completion is the time the rank's watchdog *discovered* it, at its next poll (every
# 100 ms in ProcessGroupNCCL and its kin, from a phase of its own): lateness below that is noise.
WATCHDOG_POLL_MS = 100.0


@dataclass(frozen=True)
class Slowness:
    """The rank that held the others up, where, and by how much."""

    rank: int
    group: Group
    collective_seq_id: int | None  # None for a consistent straggler (many collectives)
    op: str
    lateness_s: float
    stall: bool  # one late arrival (a stall) rather than a consistent straggler
    evidence: tuple[str, ...]
    p2p_seq_id: int | None = None  # a stall before a send/recv: its p2p seq id on the rank


def find(
    t: EntryTable, groups: GroupTable, m: MatchResult, straggler_ms: float, stall_ms: float
) -> Slowness | None:
    """A stall if there is one, else a consistent straggler, else None."""
    lateness = _lateness(t, m)
    if lateness is None:
        return None
    return (
        _stall(t, groups, m, lateness, stall_ms)
        or _repeated(t, groups, m, lateness, straggler_ms)
        or _straggler(t, groups, m, lateness, straggler_ms)
    )


@dataclass(frozen=True)
class _Lateness:
    rows: npt.NDArray[np.int64]  # head rows of complete, passed collectives, in table order
    wait_ns: npt.NDArray[np.float64]  # completion minus enqueue, own clock
    late_ms: npt.NDArray[np.float64]  # the unit's longest wait minus this row's
    gap_ns: npt.NDArray[np.float64]  # enqueue minus the rank's previous completion (NaN: none)
    resolution_ms: float  # how far a lateness can be off: the watchdog's poll when it timed ops


_HEAD_KINDS = (
    UnitKind.COLLECTIVE,
    UnitKind.BLOCK_MARKER,
    UnitKind.P2P,
    UnitKind.BATCH_MEMBER,
    UnitKind.BATCH_MARKER,
)
"""The rows that stand for an op on the stream: a whole collective or block, a send or recv."""


def _lateness(t: EntryTable, m: MatchResult) -> _Lateness | None:
    # Arrays here run over every op of the job (32 M at 16,384 ranks): each is freed as soon
    # as it is used, and the per-row results are computed on the kept rows only.
    units = m.collectives
    if not t.n:
        return None
    heads = of_kinds(t.unit, _HEAD_KINDS)
    heads &= m.done
    heads &= t.t_created >= 0
    head_rows = np.flatnonzero(heads)
    del heads
    if len(head_rows) < 2:
        return None
    # Completion: recorded (own clock); else (gloo) a synchronous collective ends when its last
    # member arrives, so the latest enqueue of its members stands in for it. A batched
    # send/recv's completion is its block's: the end marker holds it.
    unit_all = units.entry_unit[head_rows]
    source = t.marker[head_rows].astype(np.int64)
    np.copyto(source, head_rows, where=source < 0)
    completion = t.t_completed[source]
    del source
    recorded = completion >= 0
    missing = ~recorded & (unit_all >= 0)
    if bool(missing.any()):
        ends = np.full(len(units.seq), -1, dtype=np.int64)
        np.maximum.at(ends, unit_all[missing], t.t_created[head_rows[missing]])
        completion[missing] = ends[unit_all[missing]]
        del ends
    del missing

    # Collective units, and each matched send/recv pair as a unit of two (ids after them).
    n_units = len(units.seq)
    unit = unit_all.astype(np.int64, copy=False)
    del unit_all
    pair = m.p2p.entry_pair[head_rows]
    p2p = (unit < 0) & (pair >= 0)
    np.copyto(unit, pair + n_units, where=p2p)
    del pair, p2p
    # Collectives that every member issued (some may have left the ring buffers of a few:
    # lateness is measured among the members that hold it), and every matched pair.
    full = (units.passed | (units.ranks_present < units.ranks_expected)) & (units.ranks_present > 1)
    if units.not_joined:
        full[list(units.not_joined)] = False
    full = np.concatenate([full, np.ones(len(m.p2p.send_row), dtype=bool)])
    keep = (unit >= 0) & (completion >= 0)
    keep &= full[unit]  # a gather from a small array: where unit is -1, keep is False already
    if int(keep.sum()) < 2:
        return None

    # A rank reaches an op when its host enqueued it and its stream finished the op before
    # (the ops of a batched block are one op on the stream): `before` is that completion.
    member = t.unit[head_rows] == UnitKind.BATCH_MEMBER
    steps = np.flatnonzero(~member)
    rank = t.rank[head_rows[steps]]
    same = rank[1:] == rank[:-1]
    del rank
    before = np.full(len(head_rows), -1, dtype=np.int64)
    before[steps[1:][same]] = completion[steps[:-1][same]]
    del steps, same
    if bool(member.any()):
        # A block's members come before its end marker: they take what the marker has.
        markers = t.marker[head_rows[member]]
        # Each head row's position, by row: one scatter, cheaper than a binary search of
        # every marker among the head rows.
        position = np.full(t.n, -1, dtype=id_type(len(head_rows)))
        position[head_rows] = np.arange(len(head_rows))
        at = np.where(markers >= 0, position[markers], -1)
        del position
        found = at >= 0
        idx = np.flatnonzero(member)
        before[idx[found]] = before[at[found]]
    del member

    kept = np.flatnonzero(keep)
    del keep
    resolution = WATCHDOG_POLL_MS if bool(recorded[kept].any()) else 0.0
    del recorded
    # one column at a time: each old one goes as its kept rows are taken
    rows = head_rows[kept]
    del head_rows
    unit = unit[kept]
    before = before[kept]
    completion = completion[kept]
    del kept
    created = t.t_created[rows]
    # A completion taken from another rank's clock can precede the last arrival by the hosts'
    # clock offset: that rank waited about nothing.
    wait = (completion - np.maximum(created, before)).astype(np.float64)
    del completion
    np.maximum(wait, 0.0, out=wait)
    gap = (created - before).astype(np.float64)
    gap[before < 0] = np.nan
    del created, before
    longest = np.full(len(full), -np.inf)
    np.maximum.at(longest, unit, wait)
    late = longest[unit]
    del unit, longest
    late -= wait
    late /= 1e6
    return _Lateness(rows, wait, late, gap, resolution)


def _stall(
    t: EntryTable, groups: GroupTable, m: MatchResult, late: _Lateness, stall_ms: float
) -> Slowness | None:
    candidates = np.flatnonzero(late.late_ms >= stall_ms)
    if not len(candidates):
        return None
    # Late because its stream was still busy (its host had enqueued the op in time): the
    # previous op kept it waiting. Its own delay is the gap its host left after that op. A
    # rank's first op in its buffer has no previous op to measure against: ranks start (or
    # reach a startup barrier) seconds apart, and a ring buffer may have dropped what came
    # before, so a late first arrival is no stall of its own.
    gap = late.gap_ns[candidates]
    explained = np.isnan(gap) | (gap / 1e6 < EXPLAINED_SHARE * late.late_ms[candidates])
    roots = candidates[~explained]
    if not len(roots):
        return None
    # The first unexplained late arrival (by its own enqueue time), the latest one on a tie.
    rows = late.rows[roots]
    first = roots[np.lexsort((-late.late_ms[roots], t.t_created[rows]))[0]]
    row = int(late.rows[first])
    rank = int(t.rank[row])
    late_s = float(late.late_ms[first]) / 1e3
    unit = int(m.collectives.entry_unit[row])
    if unit >= 0:
        group = groups.groups[int(m.collectives.group[unit])]
        unit_rows = m.collectives.unit_rows(unit)
        waited = sorted(set(t.rank[unit_rows].tolist()) - {rank})
        op, seq, p2p_seq = m.collectives.op[unit], int(m.collectives.seq[unit]), None
        what = f"{op} #{seq}"
    else:
        pair = int(m.p2p.entry_pair[row])
        other = int(m.p2p.recv_row[pair] if m.p2p.send_row[pair] == row else m.p2p.send_row[pair])
        group = groups.groups[int(groups.entry_group[row])]
        waited = [int(t.rank[other])]
        name = t.profiling_names[int(t.pname[row])]
        op, seq, p2p_seq = name.partition(":")[2] or name, None, int(t.p2p_seq[row])
        what = f"{op} (p2p #{p2p_seq} on rank {rank})"
    n_explained = int((explained & ~np.isnan(gap)).sum())
    evidence = [
        f"rank {rank} enqueued {what} of group {group.name!r} ({group.desc}) {late_s:.1f} s "
        f"after the first of its peers; {label(waited)} waited for it",
        "its host enqueued it that long after its previous op completed: the delay is its own "
        "(host stall: compute, data loading, I/O, a pause)",
        "measured on each rank's own clock (completion minus enqueue), so host clock offsets "
        "do not distort it",
    ]
    if n_explained:
        evidence.append(
            f"{n_explained} later late arrival(s) on other ranks are explained: those ranks had "
            "just waited as long in their previous op (the delay cascading)"
        )
    return Slowness(rank, group, seq, op, late_s, True, tuple(evidence), p2p_seq)


def _own_late(late: _Lateness, at_least_ms: float) -> npt.NDArray[np.intp]:
    """Late arrivals of at least this much that the rank's own host caused (see `_stall`),
    after its first op (ranks start at different times)."""
    candidates = np.flatnonzero(late.late_ms >= at_least_ms)
    gap = late.gap_ns[candidates]
    own = ~np.isnan(gap) & (gap / 1e6 >= EXPLAINED_SHARE * late.late_ms[candidates])
    return candidates[own]


def _repeated(
    t: EntryTable, groups: GroupTable, m: MatchResult, late: _Lateness, straggler_ms: float
) -> Slowness | None:
    """One rank that keeps arriving late on its own (a hiccup at the same point of every step,
    say), while no other rank does: a straggler, placed at its first late arrival."""
    own = _own_late(late, straggler_ms)
    if not len(own):
        return None
    ranks = t.rank[late.rows[own]]
    counts = np.bincount(ranks)
    worst = int(np.argmax(counts))
    second = int(np.sort(counts)[-2]) if len(counts) > 1 else 0
    if counts[worst] < REPEATS or counts[worst] < STANDS_OUT * max(second, 1) / 2:
        return None
    mine = own[ranks == worst]
    first = mine[np.argmin(t.t_created[late.rows[mine]])]
    row = int(late.rows[first])
    unit = int(m.collectives.entry_unit[row])
    if unit < 0:
        return None
    group = groups.groups[int(m.collectives.group[unit])]
    typical = float(np.median(late.late_ms[mine]))
    evidence = (
        f"rank {worst} arrived late {int(counts[worst])} times on its own (its host enqueued the "
        f"op late), a median {typical:.0f} ms after its peers; no other rank did so more than "
        f"{second} time(s)",
        f"the first time at {m.collectives.op[unit]} #{int(m.collectives.seq[unit])} of group "
        f"{group.name!r} ({group.desc})",
        "measured on each rank's own clock (completion minus arrival), so host clock offsets "
        "do not distort it",
    )
    return Slowness(
        worst,
        group,
        int(m.collectives.seq[unit]),
        m.collectives.op[unit],
        typical / 1e3,
        False,
        evidence,
    )


def _straggler(
    t: EntryTable, groups: GroupTable, m: MatchResult, late: _Lateness, straggler_ms: float
) -> Slowness | None:
    """The rank that arrives last, measured as how much shorter it waits than its peers."""
    units = m.collectives
    is_coll = units.entry_unit[late.rows] >= 0  # the schedule makes send/recv waits uneven
    rows, late_ms = late.rows[is_coll], late.late_ms[is_coll]
    if len(rows) < 2:
        return None
    rank = t.rank[rows]  # in rank order, as the table is
    medians = _medians_by_rank(rank, late_ms)
    if len(medians) < 2:
        return None
    worst = max(medians, key=lambda r: (medians[r], -r))
    others = sorted(v for r, v in medians.items() if r != worst)
    typical = others[len(others) // 2]
    # Against the 90th percentile too: a whole pipeline stage that arrives last at the end of
    # every step is the schedule, not a slow host.
    high = others[min(len(others) - 1, (9 * len(others)) // 10)]
    # Enqueue times carry each host's run-ahead (tens of ms that differ from host to host):
    # a straggler stands well clear of that.
    # A recorded completion is only as exact as the watchdog's poll.
    floor = straggler_ms + late.resolution_ms
    if medians[worst] < max(floor, STANDS_OUT * max(typical, 1.0, high)):
        return None
    samples = int((rank == worst).sum())
    worst_units = units.entry_unit[rows[rank == worst]]
    uid = Counter(units.group[worst_units].tolist()).most_common(1)[0][0]
    group = groups.groups[int(uid)]
    evidence = (
        f"over {samples} completed collectives rank {worst} arrived a median "
        f"{medians[worst]:.0f} ms after the first rank; the other ranks' median lateness is "
        f"{typical:.1f} ms",
        "measured from each rank's own clock (completion minus enqueue, i.e. how long it "
        "waited for the others), so host clock offsets do not distort it",
    )
    return Slowness(worst, group, None, "", medians[worst] / 1e3, False, evidence)


def _medians_by_rank(
    rank: npt.NDArray[np.int32], values: npt.NDArray[np.float64]
) -> dict[int, float]:
    """The median of `values` per rank; `rank` is sorted.

    Ranks with the same number of values are taken together as the rows of one 2-D array and
    partitioned around the middle, not sorted: healthy jobs have few distinct counts, and even
    one count per rank costs only a partition per rank."""
    starts = rank_starts(rank)
    counts = np.diff(np.append(starts, len(rank)))
    medians = np.empty(len(starts), dtype=np.float64)
    by_count = np.argsort(counts, kind="stable")
    bounds = np.flatnonzero(np.diff(counts[by_count], prepend=-1, append=-1))
    for lo, hi in itertools.pairwise(bounds.tolist()):
        which = by_count[lo:hi]
        count = int(counts[which[0]])
        mid = [(count - 1) // 2, count // 2]
        step = max(1, _MEDIAN_CHUNK // count)  # bounds the gathered block's size
        for at in range(0, len(which), step):
            part = which[at : at + step]
            block = values[starts[part][:, None] + np.arange(count)]
            block.partition(mid, axis=1)
            medians[part] = (block[:, mid[0]] + block[:, mid[1]]) / 2
    return dict(zip(rank[starts].tolist(), medians.tolist(), strict=True))


def straggler_root(slow: Slowness) -> RootCause:
    """The root cause of a slow job: the rank that made the others wait."""
    return RootCause(
        kind=RootKind.STRAGGLER,
        ranks=(slow.rank,),
        group=slow.group,
        collective_seq_id=slow.collective_seq_id,
        p2p_seq_id=slow.p2p_seq_id,
        op=slow.op,
        sentence=sentences.straggler(slow),
        evidence=slow.evidence,
        wait_chain=(),
        lateness_s=slow.lateness_s,
    )
