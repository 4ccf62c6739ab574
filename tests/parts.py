"""A job matched whole and in the parts a cluster matches, for the tests that compare what the
parts give (pieces, passes, diagnoses) with what the whole table gives."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fr_analyzer.load import Directory
from fr_analyzer.match import (
    Cut,
    MatchResult,
    Part,
    PartMatch,
    PartRunner,
    cutting,
    match,
    partitions,
)
from fr_analyzer.model.groups import GroupTable, build_groups, grouped
from fr_analyzer.model.profile import Grouped, profiles_of
from fr_analyzer.model.table import EntryTable
from fr_analyzer.pipeline import Loaded, Options, load


@dataclass(frozen=True)
class Job:
    """A job loaded, its groups, its table matched whole, and what cutting it needs."""

    got: Loaded
    groups: GroupTable
    whole: MatchResult
    shape: Grouped
    most: int  # the rows of the smallest parts a runner may take (the largest group's)
    unmatched: npt.NDArray[np.bool_]  # the table's `retired` before matching changed it

    @property
    def t(self) -> EntryTable:
        return self.got.table

    def parts(
        self, frontier: bool = False, smallest: bool = True, then: Piecer | None = None
    ) -> list[tuple[Part, PartMatch]]:
        """The job matched in parts, each with its final result (`then(part, result)`: what
        the runner gives of it instead); the whole table as one part where it is one."""
        t, groups = self.t, self.groups
        matched = t.retired.copy()  # matching clears it where a recorder is silent
        t.retired[:] = self.unmatched
        job = partitions.shared(self.got.dumps, t, groups, self.shape, frontier)
        sets = cutting.cut_sets(self.shape, groups, self.most if smallest else None)
        made: dict[int, Part] = {}

        def run(cuts: Iterable[Cut]) -> Iterator[PartMatch]:
            for cut in cuts:
                part = cut.part()
                done = partitions.match_part(part)
                if then is not None:
                    done = then(part, done)
                made[id(done)] = part
                yield done

        if sets is None or len(sets) < 2:
            one = replace(partitions.whole(job, t, groups), frontier=frontier)
            done = partitions.match_part(one)
            final = [done if then is None else then(one, done)]
            made[id(final[0])] = one
        else:
            got = partitions.rounds(
                PartRunner(run, most_rows=self.most), job, t, groups, sets, self.shape
            )
            assert got is not None
            final = got
        t.retired[:] = matched
        return [(made[id(done)], done) for done in final]


Piecer = Callable[[Part, PartMatch], PartMatch]


def matched(where: Path) -> Job:
    """The job at `where`, loaded and matched whole (its table as matching left it, as the
    pipeline's is)."""
    got = load(Directory(where), Options(workers=1))
    t = got.table
    groups = build_groups(got.dumps, t, got.unreadable)
    unmatched = t.retired.copy()
    whole = match(got.dumps, t, groups)
    shape = grouped(t, groups, profiles_of(t))
    most = max(cutting.sizes(shape, groups, cutting.components(shape, groups)), default=1)
    return Job(got, groups, whole, shape, most, unmatched)
