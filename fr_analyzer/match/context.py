"""The state matching shares across its rules: the entry table, completion, caches built on
first demand."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..model.groups import GroupTable
from ..model.records import Group
from ..model.table import EntryTable

if TYPE_CHECKING:
    from .elsewhere import Elsewhere

I64 = npt.NDArray[np.int64]


@dataclass
class MatchContext:
    """What the collective and p2p matchers share: the table, the groups, completion, lookups."""

    table: EntryTable
    groups: GroupTable
    done: npt.NDArray[np.bool_]
    size_bad: npt.NDArray[np.bool_]
    last_enqueued: dict[tuple[int, int], int]  # (rank, uid) → from pg_status
    wrapped: dict[int, bool]
    unavailable: frozenset[int]  # member ranks with no usable dump
    # of the whole job, whatever part of it the table holds (`match.partitions.Shared`):
    busy: frozenset[int]  # ranks with an op they have not retired
    # rank → its (desc, size, local rank) in each group carrying send/recv
    stages: dict[int, set[tuple[str, int, int]]]
    rank_ends: I64  # each rank's last row of the table, ascending (the gloo proof)
    # collective rows, by (group uid, seq)
    coll_rows: I64 = field(default_factory=lambda: np.zeros(0, np.int64))
    # (rank, uid) → newest collective seq in the rank's buffer, for all pairs on first demand
    newest: dict[tuple[int, int], int] | None = None
    # group uid → highest collective seq id every member is known to have issued: a collective
    # that some member completed (or, on gloo, got past) was issued by all of its members, so a
    # member whose dump lacks it was dumped before it got there (or its buffer wrapped).
    proof: dict[int, int] = field(default_factory=dict)
    # (group uid, seq) → (start, end) into coll_rows, built on first demand (no-majority ties)
    unit_at: dict[tuple[int, int], tuple[int, int]] | None = None
    unit_bounds: tuple[I64, I64, I64, I64] | None = None  # uid, seq, start, end of every unit
    skipped: set[int] = field(default_factory=set)  # ids of the findings that tell a skip
    # distinct ranks holding each unit (aligned with `unit_bounds`)
    unit_ranks: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    in_flight: dict[int, bool] = field(default_factory=dict)  # group uid → a member is busy
    # (desc, size) → the groups of that description and size, built on first demand
    alike: dict[tuple[str, int], list[Group]] | None = None
    # of the pairs `match_p2p` made, how many (the last ones) took a recv from any source
    wild_pairs: int = 0
    # the groups this table does not hold, asked about (None: it holds every group's rows)
    elsewhere: Elsewhere | None = None
