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
from ..model.records import Finding
from ..model.table import EntryTable
from . import completion
from .collectives import match_collectives
from .context import MatchContext
from .conventions import intrinsic_size_errors, recorder_conventions
from .p2p import match_p2p
from .records import COLLECTIVE_UNITS, P2P_UNITS, CollectiveUnits, MatchResult, P2PPairs, stateless

__all__ = [
    "COLLECTIVE_UNITS",
    "NO_STATE_BACKENDS",
    "P2P_UNITS",
    "CollectiveUnits",
    "MatchResult",
    "P2PPairs",
    "match",
    "stateless",
]


def match(dumps: Sequence[RankDump], t: EntryTable, groups: GroupTable) -> MatchResult:
    """Match every collective and send/recv across ranks: the units, the pairs and the findings."""
    done = completion.recorded(t)
    quiet = completion.silent(t, dumps, stateless(t))
    if quiet.rows.any():
        rows = completion.collective_rows(t)
        done = completion.judged_by_issue(t, groups, done, quiet.rows, rows)
    size_bad, conventions = recorder_conventions(t, groups, intrinsic_size_errors(t, groups))
    ctx = MatchContext(
        table=t,
        groups=groups,
        done=done,
        size_bad=size_bad,
        last_enqueued=_last_enqueued(dumps, t, groups),
        wrapped={d.rank: d.wrapped for d in dumps},
        unavailable=frozenset(
            set(groups.missing_ranks) | (set(range(groups.world_size)) - set(groups.loaded_ranks))
        ),
    )
    findings: list[Finding] = []
    units = match_collectives(ctx, findings)
    pairs = match_p2p(ctx, findings)
    notes = quiet.notes + conventions
    skipped = tuple(f for f in findings if id(f) in ctx.skipped)
    return MatchResult(units, pairs, done, tuple(findings), dict(ctx.proof), notes, skipped)


def _last_enqueued(
    dumps: Sequence[RankDump], t: EntryTable, groups: GroupTable
) -> dict[tuple[int, int], int]:
    """pg_status's last enqueued collective per (rank, group uid)."""
    out: dict[tuple[int, int], int] = {}
    if not t.n:
        return out
    code_to_uid = dict(
        zip(
            zip(t.pair_rank.tolist(), t.pair_group.tolist(), strict=True),
            groups.pair_uid.tolist(),
            strict=True,
        )
    )
    global_codes = {name: code for code, name in enumerate(t.group_names)}
    for dump in dumps:
        for code, (enqueued, _, _) in dump.pg_status.items():
            name = dump.groups[code] if code < len(dump.groups) else None
            if name is None:
                continue
            uid = code_to_uid.get((dump.rank, global_codes.get(name, -1)))
            if uid is not None and enqueued >= 0:
                out[(dump.rank, uid)] = enqueued
    return out
