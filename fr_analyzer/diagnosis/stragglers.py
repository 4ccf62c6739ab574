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

The rule reads every completed op of the job, yet decides on a few numbers a rank: the
lateness is measured in passes over parts of groups and shards of ranks (`lateness`), the
fourth pass sums each shard's ranks up (`RankLateness`: medians, the first unexplained late
arrival, each rank's own late arrivals), and `decide` reads the table and the matches only
at the op or the rank it names. One process runs every pass over the whole table (`find`);
tests/diagnosis/test_stragglers.py runs them over a cluster's slices and gets the same.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ..match import MatchResult
from ..model.groups import GroupTable
from ..model.ranks import label
from ..model.records import Group
from ..model.table import EntryTable, rank_starts
from . import lateness, sentences
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
    """A stall if there is one, else a consistent straggler, else None: the passes of
    `lateness` over the whole table as one part and one shard, then `decide`."""
    if not t.n:
        return None
    got = lateness.arrivals(t, m)
    w = lateness.waits(t, got)
    unit, keys, collective = got.unit[got.kept], got.keys, got.collective[got.kept]
    counted = (len(got.rows), len(unit))
    resolution = WATCHDOG_POLL_MS if got.recorded else 0.0
    del got
    late = lateness.late_ms(unit, keys, w.wait_ns)
    del unit
    ranks = RankLateness.of(t, w, late, collective, stall_ms, straggler_ms)
    mine = w.rows[collective]
    del w, late, collective

    def collectives_of(rank: int) -> npt.NDArray[np.int64]:
        found: npt.NDArray[np.int64] = mine[t.rank[mine] == rank]
        return found

    return decide(t, groups, m, ranks, counted, resolution, straggler_ms, collectives_of)


@dataclass(frozen=True)
class Arrival:
    """One late arrival: its op's row, its rank, when the rank enqueued it, how late."""

    row: int
    rank: int
    created_ns: int
    late_ms: float

    def first_key(self) -> tuple[int, float, int]:
        """Order among late arrivals: by enqueue time, the latest arrival on a tie."""
        return (self.created_ns, -self.late_ms, self.row)


@dataclass(frozen=True)
class OwnLate:
    """A rank's late arrivals its own host caused (`_own`): how many, the first, the median."""

    count: int
    first: Arrival
    median_ms: float


@dataclass(frozen=True)
class RankLateness:
    """Pass 4, over a shard: what the rule reads of each rank's counted ops, small (a few
    numbers a rank): its median lateness at collectives, the first late arrival that
    nothing explains, and the late arrivals its own host caused. Shards' summaries join
    (`joined`) into the job's."""

    medians: dict[int, float]  # rank -> median lateness at collectives, ms
    samples: dict[int, int]  # rank -> collectives counted
    stall: Arrival | None  # the first late arrival of at least stall_ms that nothing explains
    explained: int  # late arrivals of at least stall_ms explained by the rank's previous op
    own: dict[int, OwnLate]  # rank -> its own late arrivals of at least straggler_ms

    @classmethod
    def of(
        cls,
        t: lateness.ByRank,
        w: lateness.Waits,
        late_ms: npt.NDArray[np.float64],
        collective: npt.NDArray[np.bool_],
        stall_ms: float,
        straggler_ms: float,
        numbers: npt.NDArray[np.int64] | None = None,
    ) -> RankLateness:
        """The summary of a shard's counted ops (`w`, with their lateness and whether each is
        a collective); `numbers` maps the shard's rows to the job's (None: the same)."""
        rank = t.rank[w.rows]
        coll = np.flatnonzero(collective)
        medians, samples = _medians_by_rank(rank[coll], late_ms[coll])
        del coll
        job = w.rows if numbers is None else numbers[w.rows]

        def arrival(i: int) -> Arrival:
            row = int(w.rows[i])
            return Arrival(int(job[i]), int(rank[i]), int(t.t_created[row]), float(late_ms[i]))

        # Late because its stream was still busy (its host had enqueued the op in time): the
        # previous op kept it waiting. Its own delay is the gap its host left after that op. A
        # rank's first op in its buffer has no previous op to measure against: ranks start (or
        # reach a startup barrier) seconds apart, and a ring buffer may have dropped what came
        # before, so a late first arrival is no stall of its own.
        candidates = np.flatnonzero(late_ms >= stall_ms)
        gap = w.gap_ns[candidates]
        explained = np.isnan(gap) | (gap / 1e6 < EXPLAINED_SHARE * late_ms[candidates])
        roots = candidates[~explained]
        stall = None
        if len(roots):
            created = t.t_created[w.rows[roots]]
            stall = arrival(int(roots[np.lexsort((-late_ms[roots], created))[0]]))
        n_explained = int((explained & ~np.isnan(gap)).sum())
        own: dict[int, OwnLate] = {}
        mine = _own(w.gap_ns, late_ms, straggler_ms)
        if len(mine):  # in row order, so by rank
            starts = rank_starts(rank[mine]).tolist()
            for lo, hi in itertools.pairwise([*starts, len(mine)]):
                hers = mine[lo:hi]
                first = hers[np.argmin(t.t_created[w.rows[hers]])]
                own[int(rank[hers[0]])] = OwnLate(
                    len(hers), arrival(int(first)), float(np.median(late_ms[hers]))
                )
        return cls(medians, samples, stall, n_explained, own)

    def renumbered(self, row: Callable[[int], int]) -> RankLateness:
        """The summary with each arrival's row numbered anew (`row(job's row)`)."""

        def moved(a: Arrival) -> Arrival:
            return replace(a, row=row(a.row))

        return replace(
            self,
            stall=None if self.stall is None else moved(self.stall),
            own={r: replace(v, first=moved(v.first)) for r, v in self.own.items()},
        )

    def named(self) -> frozenset[int]:
        """The ranks `decide` may read the rows of: the stall's, the one late most often on
        its own, the one with the highest median lateness."""
        out = set()
        if self.stall is not None:
            out.add(self.stall.rank)
        if self.own:
            out.add(_most_often(self))
        if self.medians:
            out.add(_slowest(self.medians))
        return frozenset(out)

    @classmethod
    def joined(cls, pieces: Sequence[RankLateness]) -> RankLateness:
        """The summaries of shards of distinct ranks as the job's."""
        stalls = [p.stall for p in pieces if p.stall is not None]
        return cls(
            {r: v for p in pieces for r, v in p.medians.items()},
            {r: v for p in pieces for r, v in p.samples.items()},
            min(stalls, key=Arrival.first_key) if stalls else None,
            sum(p.explained for p in pieces),
            {r: v for p in pieces for r, v in p.own.items()},
        )


@dataclass(frozen=True)
class Summary:
    """The rule's summary of the job (`decide` reads it): each rank's, and the ops
    reached and counted, and whether a completion was recorded (the watchdog's resolution)."""

    ranks: RankLateness
    ops: int
    kept: int
    recorded: bool


def decide(
    t: EntryTable,
    groups: GroupTable,
    m: MatchResult,
    ranks: RankLateness,
    counted: tuple[int, int],
    resolution_ms: float,
    straggler_ms: float,
    collectives_of: Callable[[int], npt.NDArray[np.int64]],
) -> Slowness | None:
    """The rule over the job's summary (`ranks`; `counted`: the ops reached and those
    counted): a stall, else a rank late on its own again and again, else a straggler. `t`
    and `m` are read only at the ops named (and `collectives_of(rank)`: that rank's counted
    collectives' rows), never as a whole."""
    ops, kept = counted
    if ops < 2 or kept < 2:
        return None
    return (
        _stall(t, groups, m, ranks)
        or _repeated(groups, m, ranks)
        or _straggler(groups, m, ranks, straggler_ms + resolution_ms, collectives_of)
    )


def _stall(
    t: EntryTable, groups: GroupTable, m: MatchResult, ranks: RankLateness
) -> Slowness | None:
    """The first late arrival that nothing explains (see `RankLateness.of`), by its own
    enqueue time."""
    if ranks.stall is None:
        return None
    row, rank = ranks.stall.row, ranks.stall.rank
    late_s = ranks.stall.late_ms / 1e3
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
    evidence = [
        f"rank {rank} enqueued {what} of group {group.name!r} ({group.desc}) {late_s:.1f} s "
        f"after the first of its peers; {label(waited)} waited for it",
        "its host enqueued it that long after its previous op completed: the delay is its own "
        "(host stall: compute, data loading, I/O, a pause)",
        "measured on each rank's own clock (completion minus enqueue), so host clock offsets "
        "do not distort it",
    ]
    if ranks.explained:
        evidence.append(
            f"{ranks.explained} later late arrival(s) on other ranks are explained: those ranks "
            "had just waited as long in their previous op (the delay cascading)"
        )
    return Slowness(rank, group, seq, op, late_s, True, tuple(evidence), p2p_seq)


def _own(
    gap_ns: npt.NDArray[np.float64], late_ms: npt.NDArray[np.float64], at_least_ms: float
) -> npt.NDArray[np.intp]:
    """Late arrivals of at least this much that the rank's own host caused (see
    `RankLateness.of`), after its first op (ranks start at different times)."""
    candidates = np.flatnonzero(late_ms >= at_least_ms)
    gap = gap_ns[candidates]
    own = ~np.isnan(gap) & (gap / 1e6 >= EXPLAINED_SHARE * late_ms[candidates])
    return candidates[own]


def _repeated(groups: GroupTable, m: MatchResult, ranks: RankLateness) -> Slowness | None:
    """One rank that keeps arriving late on its own (a hiccup at the same point of every step,
    say), while no other rank does: a straggler, placed at its first late arrival."""
    if not ranks.own:
        return None
    counts = sorted(((v.count, -r) for r, v in ranks.own.items()), reverse=True)
    worst = _most_often(ranks)
    most = counts[0][0]
    second = counts[1][0] if len(counts) > 1 else 0
    if most < REPEATS or most < STANDS_OUT * max(second, 1) / 2:
        return None
    hers = ranks.own[worst]
    unit = int(m.collectives.entry_unit[hers.first.row])
    if unit < 0:
        return None
    group = groups.groups[int(m.collectives.group[unit])]
    typical = hers.median_ms
    evidence = (
        f"rank {worst} arrived late {most} times on its own (its host enqueued the "
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
    groups: GroupTable,
    m: MatchResult,
    ranks: RankLateness,
    floor: float,
    collectives_of: Callable[[int], npt.NDArray[np.int64]],
) -> Slowness | None:
    """The rank that arrives last, measured as how much shorter it waits than its peers at
    collectives (the schedule makes send/recv waits uneven); `floor`: the least median
    lateness that can be a straggler's (the threshold and the watchdog's poll)."""
    medians = ranks.medians
    if sum(ranks.samples.values()) < 2 or len(medians) < 2:
        return None
    worst = _slowest(medians)
    others = sorted(v for r, v in medians.items() if r != worst)
    typical = others[len(others) // 2]
    # Against the 90th percentile too: a whole pipeline stage that arrives last at the end of
    # every step is the schedule, not a slow host.
    high = others[min(len(others) - 1, (9 * len(others)) // 10)]
    # Enqueue times carry each host's run-ahead (tens of ms that differ from host to host):
    # a straggler stands well clear of that.
    # A recorded completion is only as exact as the watchdog's poll.
    if medians[worst] < max(floor, STANDS_OUT * max(typical, 1.0, high)):
        return None
    samples = ranks.samples[worst]
    worst_units = m.collectives.entry_unit[collectives_of(worst)]
    uid = Counter(m.collectives.group[worst_units].tolist()).most_common(1)[0][0]
    group = groups.groups[int(uid)]
    evidence = (
        f"over {samples} completed collectives rank {worst} arrived a median "
        f"{medians[worst]:.0f} ms after the first rank; the other ranks' median lateness is "
        f"{typical:.1f} ms",
        "measured from each rank's own clock (completion minus enqueue, i.e. how long it "
        "waited for the others), so host clock offsets do not distort it",
    )
    return Slowness(worst, group, None, "", medians[worst] / 1e3, False, evidence)


def _most_often(ranks: RankLateness) -> int:
    """The rank late on its own most often (the lowest on a tie)."""
    return min(ranks.own, key=lambda r: (-ranks.own[r].count, r))


def _slowest(medians: dict[int, float]) -> int:
    """The rank of the highest median lateness (the lowest on a tie)."""
    return max(medians, key=lambda r: (medians[r], -r))


def _medians_by_rank(
    rank: npt.NDArray[np.int32], values: npt.NDArray[np.float64]
) -> tuple[dict[int, float], dict[int, int]]:
    """The median of `values` per rank, and how many values each rank has; `rank` is sorted.

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
    ranks = rank[starts].tolist()
    return (
        dict(zip(ranks, medians.tolist(), strict=True)),
        dict(zip(ranks, counts.tolist(), strict=True)),
    )


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
