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
from ..model.groups import GroupTable
from ..model.table import EntryTable
from . import partitions
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
) -> MatchResult:
    """Match every collective and send/recv across ranks: the units, the pairs and the findings.
    With `runner`, the groups of each description are matched as a part of their own, where
    the runner puts them (the Ray engine: one task each), and the parts' results merged: the
    same result as matching the whole table in this process (`match.partitions`). A job of
    one description, or with a part larger than the runner takes, is matched whole here."""
    job = partitions.shared(dumps, t, groups)
    families = partitions.families(t, groups) if runner is not None else []
    if runner is None or len(families) < 2 or not runner.takes(partitions.sizes(groups, families)):
        done = partitions.match_part(partitions.whole(job, t, groups))
        r = done.result
        return MatchResult(r.collectives, r.p2p, r.done, r.findings, r.proven, job.notes, r.skipped)
    return partitions.merge(job, t, groups, runner.run(partitions.parts(job, t, groups, families)))
