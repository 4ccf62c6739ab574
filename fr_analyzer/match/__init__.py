"""Match every collective and every send/recv across ranks, and say where they disagree.

Collectives are joined on (group, collective sequence id): a coalesced block (members plus end
marker) is one unit, with the marker's state. Units that are complete and uniform are passed by
vectorized checks over the columns; only the rest (the few that desynced, and ops whose sizes
legitimately differ per rank such as gather, scatter and all_to_all) get a per-unit look.
Point-to-point ops are matched per channel (group, sender, receiver): the n-th send a→b with
the n-th recv on b from a; `recv x<-?` takes any sender. The collective and p2p sequence-id
namespaces are never mixed. A rank whose buffer no longer holds an op (ring-buffer wrap) is
"not in the window", never "did not join".
"""

from __future__ import annotations

from collections.abc import Sequence

from ..model.backends import NO_STATE_BACKENDS
from ..model.dump import RankDump
from ..model.groups import GroupTable, grouped
from ..model.profile import Grouped, profiles_of
from ..model.table import EntryTable
from . import completion, merging, partitions
from .conventions import convention_notes
from .cutting import cut_sets
from .partitions import Cut, Part, PartMatch, PartRunner
from .records import COLLECTIVE_UNITS, P2P_UNITS, CollectiveUnits, MatchResult, P2PPairs, stateless

__all__ = [
    "COLLECTIVE_UNITS",
    "NO_STATE_BACKENDS",
    "P2P_UNITS",
    "CollectiveUnits",
    "Cut",
    "MatchResult",
    "P2PPairs",
    "Part",
    "PartMatch",
    "PartRunner",
    "match",
    "stateless",
]


def match(
    dumps: Sequence[RankDump],
    t: EntryTable,
    groups: GroupTable,
    runner: PartRunner | None = None,
    frontier: bool = False,
    shape: Grouped | None = None,
) -> MatchResult:
    """Match every collective and send/recv across ranks: the units, the pairs and the findings.
    With `runner`, the groups of each description are matched as a part of their own (a
    family larger than the runner takes, in parts of some of its groups, which ask each
    other what their rules read across groups: `match.elsewhere`), where the runner puts
    them (the Ray engine: one task each), and the parts' results merged: the same result as
    matching the whole table in this process (`match.partitions`). A job of one part, or
    with a group larger than the runner takes, is matched whole here. `frontier`: the parts
    find their groups' frontier too, for a diagnosis that reads it (`MatchResult.frontier`).
    `shape`: the ranks' profiles by group (`model.profile`), made from the table when not
    given."""
    if shape is None:
        shape = grouped(t, groups, profiles_of(t))
    job = partitions.shared(dumps, t, groups, shape, frontier)
    sets = cut_sets(shape, groups, runner.most_rows) if runner is not None else None
    got = None
    if runner is not None and sets is not None and len(sets) > 1:
        try:
            got = partitions.rounds(runner, job, t, groups, sets, shape)
        finally:
            if runner.end is not None:
                runner.end()
    if got is None:
        if runner is not None and runner.whole is not None:
            runner.whole()
        done = partitions.match_part(partitions.whole(job, t, groups))
        r = done.result
        notes = job.notes + convention_notes(t, done.learned)
        return MatchResult(r.collectives, r.p2p, r.done, r.findings, r.proven, notes, r.skipped)
    merged = merging.merge(job, t, groups, got)
    # the parts judged completion on their own copies of the rows: clear `retired` here too
    # where the recorder does not say whether an op finished (`match.completion.judged`)
    t.retired[completion.silent_rows(t, job.quiet)] = False
    return merged
