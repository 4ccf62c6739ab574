"""The rows a diagnosis reads, taken of the parts that matched the job, with no table and no
whole `MatchResult`: each part gives its piece (`partitions.piece`: its result over its
closed frontier, the collectives its findings are about and the rows the diagnosis asks for,
alone), the pieces are merged over the rows they hold (`merging.merge_held`), and only those
rows' columns are fetched (`Pieces.fetch`: a cluster's shards, or a table). It is the
diagnosis' `Reads` (`diagnosis.frontier`) for a driver that holds no table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from ..model.groups import GroupTable
from ..model.records import Finding
from ..model.table import EntryTable
from .frontier import Held, Wanted, about
from .merging import merge_held
from .partitions import Part, PartMatch, Shared, piece

I64 = npt.NDArray[np.int64]

Fetch = Callable[[I64], EntryTable]
"""The job's `rows` (ascending) as a table of their own, block markers renumbered to them."""
Take = Callable[[Wanted], Sequence[PartMatch]]
"""Every part's piece (`partitions.piece`) with the rows and collectives `wanted`: taken
wherever the parts are kept (`taken_here`: in this process; a cluster: in its store)."""


def taken_here(parts: Sequence[tuple[Part, PartMatch]]) -> Take:
    """`Take` of parts held here, each with its final result."""

    def take(wanted: Wanted) -> list[PartMatch]:
        return [piece(part, done, wanted) for part, done in parts]

    return take


class Pieces:
    """A diagnosis' rows from the job's parts (`take`: their pieces) and `fetch`.
    `lists`: a table of no rows with the job's lists of distinct values (every part codes by
    them); `rows_by_rank`: each rank's rows in the job (its profile's)."""

    def __init__(
        self,
        job: Shared,
        lists: EntryTable,
        groups: GroupTable,
        take: Take,
        fetch: Fetch,
        rows_by_rank: Mapping[int, int],
        findings: Sequence[Finding] = (),
    ) -> None:
        self.job, self.lists, self.groups, self.take = job, lists, groups, take
        self.fetch, self.rows_by_rank = fetch, dict(rows_by_rank)
        self._about = about(findings)
        self._made: tuple[I64, npt.NDArray[np.int32], Held] | None = None
        self.read = 0  # pieces taken: each part once a pass
        self.passes = 0  # times every part gave its piece

    @property
    def n(self) -> int:
        """The job's rows."""
        return sum(self.rows_by_rank.values())

    def select(self, wanted: Wanted) -> I64:
        """Every part's piece with the collectives of the findings and `wanted`, merged."""
        asked = replace(wanted, units=wanted.units | self._about)
        got = self.take(asked)
        self.read += len(got)
        self.passes += 1
        rows, group, matches = merge_held(self.job, self.lists, got)
        held = Held(rows, self.lists, replace(self.groups, entry_group=group), matches, frozenset())
        self._made = (rows, group, held)
        return rows

    def held(self, rows: I64) -> Held:
        """The rows `select` gave last, their columns fetched."""
        if self._made is None or not np.array_equal(self._made[0], rows):
            raise ValueError("held rows must be the ones selected last")
        _, _, made = self._made
        table = self.fetch(rows)
        ranks, counts = np.unique(table.rank, return_counts=True)
        whole = frozenset(
            r
            for r, n in zip(ranks.tolist(), counts.tolist(), strict=True)
            if self.rows_by_rank.get(r) == n
        )
        return replace(made, table=table, whole_ranks=whole)

    def whole(self) -> Held:
        """Every row of the job: every rank's whole program."""
        return self.held(self.select(Wanted(ranks=frozenset(self.rows_by_rank))))
