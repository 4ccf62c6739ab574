"""How late each rank reached each completed collective and send/recv: the measurement the
straggler rule (`stragglers`) decides on, made in passes that each read one slice of the job.

A rank's lateness at an op is the longest wait of the op's members minus its own wait, each
on its own clock; its wait runs from when it reached the op (its host enqueued it, and its
stream had finished the op before) to the op's completion. That needs two views of the rows:
- **by group** (a part of the job, `match.partitions`: every row of some groups): an op's
  completion (gloo records none: the last arrival of its unit stands in) and whether its
  unit counts, then each unit's longest wait;
- **by rank** (a shard: every row of some ranks): when the rank reached the op, from the
  completion of its previous op, which may lie in any of its groups.

So the passes go part, shard, part: `arrivals` (part), `waits` (shard), `late_ms` (part); the
rule's summary per rank is a fourth, by shard (`stragglers.RankLateness`). Each pass takes
rows numbered in the slice it reads and returns arrays over them; `Arrivals.joined` puts the
pieces of several parts in one slice's order. One process reads the whole table as one part
and one shard (`stragglers.find`); a cluster can run each pass where its slice lies, and gets
the same numbers (tests/diagnosis/test_stragglers.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ..match import MatchResult
from ..match.records import id_type, of_kinds
from ..model.records import UnitKind
from ..model.table import EntryTable

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]

HEAD_KINDS = (
    UnitKind.COLLECTIVE,
    UnitKind.BLOCK_MARKER,
    UnitKind.P2P,
    UnitKind.BATCH_MEMBER,
    UnitKind.BATCH_MARKER,
)
"""The rows that are ops a rank reached: a coalesced block's members are one op with its end
marker, a batch's members each are one."""


@dataclass(frozen=True)
class Arrivals:
    """Pass 1, over a part: every op its ranks reached and completed (`rows`, ascending, a
    head row each), with its completion and whether its unit counts."""

    rows: I64
    completion: I64  # ns on the rank's clock; -1: none
    unit: I64  # the op's unit in the part: a collective's id, or `collectives` + its pair's
    kept: B  # counted: in a collective every member issued, or a matched pair, and completed
    collective: B  # in a collective (not a send/recv pair)
    keys: int  # the part's units and pairs
    recorded: bool  # some counted op's completion was recorded (not stood in for)

    @property
    def counted(self) -> int:
        """The ops counted."""
        return int(self.kept.sum())

    @classmethod
    def joined(cls, pieces: Sequence[tuple[I64, Arrivals]]) -> Arrivals:
        """The arrivals of several parts, each with its rows numbered anew (`(numbers,
        arrivals)`: each row's number in the slice they join in), in the slice's row order.
        Unit keys are made distinct across the parts."""
        offset = np.cumsum([0, *(a.keys for _, a in pieces)])
        rows = np.concatenate([np.zeros(0, np.int64), *(n[a.rows] for n, a in pieces)])
        order = np.argsort(rows, kind="stable")

        def of(values: list[npt.NDArray[np.generic]]) -> npt.NDArray[np.generic]:
            return np.concatenate(values)[order] if values else np.zeros(0)

        units = [
            np.where(a.unit >= 0, a.unit + o, -1) for (_, a), o in zip(pieces, offset, strict=False)
        ]
        return cls(
            rows[order],
            of([a.completion for _, a in pieces]).astype(np.int64),
            of(units).astype(np.int64),
            of([a.kept for _, a in pieces]).astype(bool),
            of([a.collective for _, a in pieces]).astype(bool),
            int(offset[-1]),
            any(a.recorded for _, a in pieces),
        )


def arrivals(t: EntryTable, m: MatchResult) -> Arrivals:
    """Pass 1 over a part (`t` its rows, `m` its matches): each op reached and completed, its
    completion and whether it counts. The arrays run over every op of the part (32 M at
    16,384 ranks for the whole table): each is freed as soon as it is used."""
    units = m.collectives
    heads = of_kinds(t.unit, HEAD_KINDS)
    heads &= m.done
    heads &= t.t_created >= 0
    rows = np.flatnonzero(heads).astype(np.int64, copy=False)
    del heads
    # Completion: recorded (own clock); else (gloo) a synchronous collective ends when its last
    # member arrives, so the latest enqueue of its members stands in for it. A batched
    # send/recv's completion is its block's: the end marker holds it.
    unit_all = units.entry_unit[rows]
    source = t.marker[rows].astype(np.int64)
    np.copyto(source, rows, where=source < 0)
    completion = t.t_completed[source].astype(np.int64, copy=False)
    del source
    recorded = completion >= 0
    missing = ~recorded & (unit_all >= 0)
    if bool(missing.any()):
        ends = np.full(len(units.seq), -1, dtype=np.int64)
        np.maximum.at(ends, unit_all[missing], t.t_created[rows[missing]])
        completion[missing] = ends[unit_all[missing]]
        del ends
    del missing
    # Collective units, and each matched send/recv pair as a unit of two (ids after them).
    n_units = len(units.seq)
    unit = unit_all.astype(np.int64)
    del unit_all
    collective = unit >= 0
    pair = m.p2p.entry_pair[rows]
    p2p = ~collective & (pair >= 0)
    np.copyto(unit, pair + n_units, where=p2p)
    del pair, p2p
    # Collectives that every member issued (some may have left the ring buffers of a few:
    # lateness is measured among the members that hold it), and every matched pair.
    full = (units.passed | (units.ranks_present < units.ranks_expected)) & (units.ranks_present > 1)
    if units.not_joined:
        full[list(units.not_joined)] = False
    full = np.concatenate([full, np.ones(len(m.p2p.send_row), dtype=bool)])
    kept = (unit >= 0) & (completion >= 0)
    kept &= full[unit]  # a gather from a small array: where unit is -1, kept is False already
    return Arrivals(rows, completion, unit, kept, collective, len(full), bool(recorded[kept].any()))


class ByRank(Protocol):
    """What the passes over a shard read of its rows (an `EntryTable`, or a shard's own
    columns, `Slice`): every row of some ranks, each rank's rows together and in order."""

    @property
    def n(self) -> int:
        """The rows."""
        ...

    @property
    def unit(self) -> npt.NDArray[np.int8]:
        """Each row's kind (`UnitKind`)."""
        ...

    @property
    def rank(self) -> npt.NDArray[np.int32]:
        """Each row's rank."""
        ...

    @property
    def marker(self) -> npt.NDArray[np.int32]:
        """Each batch member's end marker, among these rows (-1: none)."""
        ...

    @property
    def t_created(self) -> I64:
        """When each row's op was enqueued, ns on its rank's clock (-1: unknown)."""
        ...


@dataclass(frozen=True)
class Slice:
    """The columns of some ranks' rows that the passes over a shard read (`ByRank`)."""

    unit: npt.NDArray[np.int8]
    rank: npt.NDArray[np.int32]
    marker: npt.NDArray[np.int32]
    t_created: I64

    @property
    def n(self) -> int:
        """The rows."""
        return len(self.rank)


@dataclass(frozen=True)
class Waits:
    """Pass 2, over a shard: each counted op's wait and the gap its host left before it."""

    rows: I64  # the counted ops' rows in the shard, ascending
    wait_ns: F64  # completion minus arrival, own clock
    gap_ns: F64  # enqueue minus the rank's previous completion (NaN: no previous op)


def waits(t: ByRank, got: Arrivals) -> Waits:
    """Pass 2 over a shard (`t`: every row of some ranks; `got`: the arrivals of its rows,
    from every part, in its numbering): a rank reaches an op when its host enqueued it and
    its stream finished the op before (the ops of a batched block are one op on the stream)."""
    rows = got.rows
    member = t.unit[rows] == UnitKind.BATCH_MEMBER
    steps = np.flatnonzero(~member)
    rank = t.rank[rows[steps]]
    same = rank[1:] == rank[:-1]
    del rank
    before = np.full(len(rows), -1, dtype=np.int64)
    before[steps[1:][same]] = got.completion[steps[:-1][same]]
    del steps, same
    if bool(member.any()):
        # A block's members come before its end marker: they take what the marker has.
        markers = t.marker[rows[member]]
        # Each op's position, by row: one scatter, cheaper than a binary search of every
        # marker among the ops.
        position = np.full(t.n, -1, dtype=id_type(len(rows)))
        position[rows] = np.arange(len(rows))
        at = np.where(markers >= 0, position[markers], -1)
        del position
        found = at >= 0
        idx = np.flatnonzero(member)
        before[idx[found]] = before[at[found]]
    del member
    counted = rows[got.kept]
    before = before[got.kept]
    created = t.t_created[counted].astype(np.int64, copy=False)
    gap = (created - before).astype(np.float64)
    gap[before < 0] = np.nan
    # A completion taken from another rank's clock can precede the last arrival by the hosts'
    # clock offset: that rank waited about nothing.
    np.maximum(created, before, out=created)  # when the rank reached the op
    del before
    waited = got.completion[got.kept]
    waited -= created
    del created
    wait = waited.astype(np.float64)
    del waited
    np.maximum(wait, 0.0, out=wait)
    return Waits(counted, wait, gap)


def late_ms(unit: I64, keys: int, wait_ns: F64) -> F64:
    """Pass 3 over a part: each counted op's lateness in ms (its unit's longest wait minus its
    own); `unit`: the counted ops' unit keys (`Arrivals.unit`, of `keys`), `wait_ns` their
    waits, both in the part's row order."""
    longest = np.full(keys, -np.inf)
    np.maximum.at(longest, unit, wait_ns)
    late = longest[unit]
    del longest
    late -= wait_ns
    late /= 1e6
    return late
