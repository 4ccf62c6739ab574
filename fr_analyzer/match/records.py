"""What matching produces: the collective units, the send/recv pairs, and the `MatchResult`
every later stage reads; a unit as its findings name it; which backends record no states."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..model.backends import NO_STATE_BACKENDS
from ..model.records import Finding, FindingKind, Group, UnitKind
from ..model.table import EntryTable

I64 = npt.NDArray[np.int64]
Ids = npt.NDArray[np.signedinteger[Any]]
"""A unit or pair id for every row of the table: 4 bytes a row where the table has fewer than
2**31 rows (there are fewer units and pairs than rows), 8 past that (`id_type`)."""


def id_type(rows: int) -> type[np.signedinteger[Any]]:
    """The narrowest integer type that numbers anything there are at most `rows` of."""
    return np.int32 if rows < 2**31 else np.int64


def stateless(t: EntryTable, rows: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.bool_]:
    """Whether each row (every row, or `rows`) comes from a backend that records no states."""
    by_code = np.array([b in NO_STATE_BACKENDS for b in t.backends], dtype=bool)
    n = t.n if rows is None else len(rows)
    if not by_code.any():  # the common case (NCCL alone): no gather over millions of rows
        return np.zeros(n, dtype=bool)
    codes = t.backend if rows is None else t.backend[rows]
    return by_code[codes]


COLLECTIVE_UNITS = (UnitKind.COLLECTIVE, UnitKind.BLOCK_MEMBER, UnitKind.BLOCK_MARKER)
P2P_UNITS = (UnitKind.P2P, UnitKind.BATCH_MEMBER)


def of_kinds(unit: npt.NDArray[np.int8], kinds: tuple[UnitKind, ...]) -> npt.NDArray[np.bool_]:
    """Whether each row's unit kind is one of `kinds`: a lookup in a 256-entry table for the
    one-byte column (`np.isin` sorts or compares once per kind, a few times slower on the
    millions of rows of a large job)."""
    if unit.dtype.itemsize != 1:
        return np.isin(unit, kinds)
    table = np.zeros(256, dtype=bool)
    table[np.array(kinds, dtype=np.uint8)] = True
    return table[unit.view(np.uint8)]


@dataclass(frozen=True)
class UnitRef:
    """One collective unit as its findings name it: its group, its collective sequence id and
    the ranks that hold it."""

    group: Group
    seq: int
    present: tuple[int, ...]  # the ranks holding it, ascending

    def finding(
        self,
        kind: FindingKind,
        culprits: set[int],
        detail: str,
        name: str,
        ranks: tuple[int, ...] | None = None,
    ) -> Finding:
        """A finding at this unit about `name` (an op, a block, a block member), over `ranks`
        (by default the ranks holding it)."""
        over = self.present if ranks is None else ranks
        culprit_ranks = tuple(sorted(culprits))
        return Finding(kind, self.group, self.seq, None, name, over, culprit_ranks, detail)


@dataclass(frozen=True)
class CollectiveUnits:
    """One row per (group, collective sequence id) seen on any rank."""

    group: npt.NDArray[np.int32]
    seq: I64
    op: list[str]
    ranks_present: npt.NDArray[np.int32]
    ranks_expected: npt.NDArray[np.int32]
    passed: npt.NDArray[np.bool_]
    entry_unit: Ids  # unit id of every EntryTable row, -1 for rows that are not collectives
    not_joined: dict[int, tuple[int, ...]]  # unit id → members that never issued it
    rows: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # rows sorted by unit
    starts: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # unit u: rows[starts[u]:]

    def find(self, uid: int, seq: int) -> int | None:
        """The unit id of (group uid, collective seq id), if any rank issued it."""
        low = int(np.searchsorted(self.group, uid, side="left"))
        high = int(np.searchsorted(self.group, uid, side="right"))
        at = low + int(np.searchsorted(self.seq[low:high], seq))
        return at if at < high and int(self.seq[at]) == seq else None

    def unit_rows(self, unit: int) -> I64:
        """The EntryTable rows of one unit, by rank then record order."""
        end = int(self.starts[unit + 1]) if unit + 1 < len(self.starts) else len(self.rows)
        return self.rows[int(self.starts[unit]) : end]


@dataclass(frozen=True)
class P2PPairs:
    """Matched send/recv pairs: their rows, and the pair id of every table row."""

    send_row: I64
    recv_row: I64
    entry_pair: Ids  # pair id of every EntryTable row, -1 when unmatched or not p2p


@dataclass(frozen=True)
class MatchResult:
    """What matching found: the collective units, the p2p pairs, completion and the findings."""

    collectives: CollectiveUnits
    p2p: P2PPairs
    done: npt.NDArray[np.bool_]  # effective completion of every row (marker state, gloo retired)
    findings: tuple[Finding, ...]
    # group uid → highest collective seq id every member issued (see `proof`)
    proven: dict[int, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # how progress was judged where completion is not recorded
    # findings of ranks that skipped a collective and went on: not_joined ones whose culprits
    # issued an op inside sequence ids every other member leaves unrecorded (`unrecorded_gap`),
    # and mismatches whose culprits are their group's program one op ahead (`explain_skip`)
    skipped: tuple[Finding, ...] = ()
    # each (rank, group)'s frontier rows and every row they are matched with
    # (`match.frontier.closed_window`), ascending, where the parts that matched the job found
    # and closed them; None: not found yet (the diagnosis finds them)
    frontier: npt.NDArray[np.int64] | None = None
    # a result over some rows only (`match.frontier.held_matches`): the pairs matched in the
    # whole job, of which `p2p` holds those of its rows; None: `p2p` holds every pair
    pairs_in_job: int | None = None

    @property
    def pairs_matched(self) -> int:
        """The send/recv pairs matched in the job."""
        return len(self.p2p.send_row) if self.pairs_in_job is None else self.pairs_in_job
