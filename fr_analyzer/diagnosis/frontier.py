"""The rows the diagnosis reads: each rank's frontier in each of its groups, not the job.

A hang is read where every rank stands: its first op not completed in each group and the few
before it, its last op, and the ops of other ranks those are matched with. The rules that
weigh who deviated read more: the whole programs of a few ranks (the culprit's mirrors and
co-members, `match.reference.PeerOrder`); they ask for those ranks by name
(`PeerOrder.programs_read`), and the diagnosis is made again with those ranks whole until it
asks for no rank it lacks (`diagnosis.diagnose`). What is decided over every rank at once
(each rank's newest timestamp, and the straggler rule that weighs every completed
collective) is computed beside it (`Whole`), not over these rows.

`Frontier.held(rows)` is that part of the table: its rows renumbered from 0, its matches
renumbered with them, so the rules run on it unchanged; `Held.rows` maps its rows back to the
table's, and `to_table` maps the ops a diagnosis names back. Every step costs what the held
rows cost, not what the table does, but for finding the frontier itself (one pass over the
rows). On a job larger than one process holds, this is what the driver needs of the entries
(docs/scale.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ..match import MatchResult
from ..match.frontier import (
    WINDOW,
    Closure,
    Held,
    Wanted,
    about,
    held_matches,
    rows_of,
    window_rows,
)
from ..model.groups import GroupTable
from ..model.records import Finding
from ..model.table import EntryTable, rank_starts
from .positions import OpRef
from .records import Diagnosis

I64 = npt.NDArray[np.int64]


class Reads(Protocol):
    """Where the diagnosis takes the rows it reads (`diagnosis.diagnose`): the table
    (`Frontier`), or the parts that matched the job (`match.pieces.Pieces`), with no table."""

    @property
    def n(self) -> int:
        """The job's rows."""
        ...

    def select(self, wanted: Wanted) -> I64:
        """Each rank's frontier, the rows of the collectives the findings are about, and the
        rows `wanted`, closed: their rows in the job, ascending."""
        ...

    def held(self, rows: I64) -> Held:
        """The rows `select` gave last, as a table of their own."""
        ...

    def whole(self) -> Held:
        """Every row of the job."""
        ...


class Frontier:
    """The rows of one table the diagnosis reads, and that part of the table (`held`).
    A row held pulls in what it is matched with: its collective's rows on the other ranks,
    its send/recv's other half, its block's marker and members (`closed`)."""

    def __init__(
        self,
        t: EntryTable,
        groups: GroupTable,
        m: MatchResult,
        findings: Sequence[Finding] = (),
        window: int = WINDOW,
    ) -> None:
        self.t, self.groups, self.m = t, groups, m
        self._findings, self._window = tuple(findings), window
        self._selected: tuple[I64, Wanted] | None = None  # the last rows selected, and for what
        starts = rank_starts(t.rank) if t.n else np.zeros(0, np.intp)
        self._spans = dict(
            zip(
                t.rank[starts].tolist(),
                zip(starts.tolist(), np.append(starts[1:], t.n).tolist(), strict=True),
                strict=True,
            )
        )
        self._closure = Closure(t, m)

    @property
    def n(self) -> int:
        """The table's rows."""
        return self.t.n

    def select(self, wanted: Wanted) -> I64:
        """Each rank's frontier (of the window given), the rows of the collectives the
        findings given are about, and `wanted`, closed; from the rows selected last where
        `wanted` holds what was wanted then (each step closes only what it adds)."""
        if self._selected is None:
            rows, before = self.with_units(self.rows(self._window), self._findings), Wanted()
        else:
            rows, before = self._selected
            if not (before.units <= wanted.units and before.ranks <= wanted.ranks):
                self._selected = None
                return self.select(wanted)
        if wanted.units - before.units:
            rows = self.with_units(rows, (), wanted.units - before.units)
        if wanted.ranks - before.ranks:
            rows = self.with_ranks(rows, wanted.ranks - before.ranks)
        self._selected = (rows, wanted)
        return rows

    def whole(self) -> Held:
        """The table itself."""
        ranks = frozenset(self._spans)
        return Held(None, self.t, self.groups, self.m, ranks)

    def rows(self, window: int = WINDOW) -> I64:
        """Each rank's frontier: in each of its groups, its first op not completed, what
        follows it and `window` ops before it (a group it finished: its last `window` ops),
        closed: as the parts that matched the job found and closed it, where they did."""
        if self.m.frontier is not None and window == WINDOW:
            return self.m.frontier
        return self.closed(window_rows(self.t, self.m, window))

    def with_ranks(self, rows: I64, ranks: Iterable[int]) -> I64:
        """`rows` and every row of `ranks` (their whole programs), closed."""
        spans = [self._spans[r] for r in sorted(set(ranks)) if r in self._spans]
        more = [np.arange(a, b, dtype=np.int64) for a, b in spans]
        return self.closed(rows, np.concatenate([np.zeros(0, np.int64), *more]))

    def with_units(
        self, rows: I64, findings: Iterable[Finding], units: Iterable[tuple[int, int]] = ()
    ) -> I64:
        """`rows` and the rows of the collectives the findings (and the matcher's skipped
        ones) are about, and of `units` ((group uid, collective seq id)), closed: a
        disagreement may lie far behind every frontier."""
        keys = about((*findings, *self.m.skipped)) | set(units)
        wanted = Wanted(units=keys).rows(self.t, self.m, self._closure)
        if not len(wanted):
            return rows
        return self.closed(rows, wanted)

    def closed(self, rows: I64, more: I64 | None = None) -> I64:
        """`rows` (and `more`) and every row they are matched with, transitively, ascending
        (`match.frontier.Closure`)."""
        return self._closure.closed(rows, more)

    def held(self, rows: I64) -> Held:
        """The table's `rows` (ascending, closed) as a table of their own, with their groups
        and matches renumbered to it."""
        t, m = self.t, self.m
        table = rows_of(t, rows)
        matches = held_matches(m, rows)
        groups = replace(self.groups, entry_group=self.groups.entry_group[rows])
        return Held(rows, table, groups, matches, self._whole_ranks(rows))

    def _whole_ranks(self, rows: I64) -> frozenset[int]:
        """Ranks all of whose rows are among `rows`."""
        if not len(rows):
            return frozenset()
        ranks, held = np.unique(self.t.rank[rows], return_counts=True)
        return frozenset(
            r
            for r, n in zip(ranks.tolist(), held.tolist(), strict=True)
            if self._spans[r][1] - self._spans[r][0] == n
        )


def to_table(found: Diagnosis, rows: I64 | None) -> Diagnosis:
    """`found` (a diagnosis made on held rows) with every op it names at its row of the table
    (`rows` None: the table's own)."""
    if rows is None:
        return found

    def mapped(ref: OpRef | None) -> OpRef | None:
        return None if ref is None else replace(ref, row=int(rows[ref.row]))

    return replace(
        found,
        positions=tuple(
            replace(
                p,
                last_completed=mapped(p.last_completed),
                first_incomplete=mapped(p.first_incomplete),
            )
            for p in found.positions
        ),
        ranks=tuple(
            replace(s, blocked=mapped(s.blocked), newest=mapped(s.newest)) for s in found.ranks
        ),
    )
