"""Turn matcher output and input problems into an ordered list of findings.

Findings are grouped by process group, lowest sequence id first; repeats of one problem (the
same kind and culprits at later sequence ids of the same group, the cascade a hang produces) are
folded into the first. Which finding matters is not decided here: `conclusion` relates every
finding to the root cause.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..model.arrays import distinct
from ..model.dump import RankDump
from ..model.groups import GroupTable
from ..model.ranks import agree, compact, counted, label
from ..model.records import KIND_ORDER, Finding, FindingKind, Group, UnreadableDump
from ..model.table import EntryTable
from . import MatchResult

_KIND_ORDER = {kind: i for i, kind in enumerate(KIND_ORDER)}


def collect(
    dumps: Sequence[RankDump],
    unreadable: Sequence[UnreadableDump],
    table: EntryTable,
    groups: GroupTable,
    result: MatchResult,
) -> list[Finding]:
    """Every finding, ordered: each group's findings by sequence id, input problems last."""
    behaviour = _fold(list(result.findings) + list(groups.conflicts))
    behaviour.sort(key=_order_key)
    inputs = _input_findings(dumps, unreadable, table, groups, result)
    return behaviour + inputs


def _seq_key(f: Finding) -> tuple[int, int]:
    if f.collective_seq_id is not None:
        return (0, f.collective_seq_id)
    return (1, f.p2p_seq_id if f.p2p_seq_id is not None else -1)


def _order_key(f: Finding) -> tuple[int, tuple[int, int], int]:
    return (f.group.uid if f.group is not None else -1, _seq_key(f), _KIND_ORDER[f.kind])


def _fold(findings: list[Finding]) -> list[Finding]:
    """Fold later repeats of a collective problem (same group, kind and culprits) into the
    first occurrence. P2P findings are already one per channel and are left alone: p2p
    sequence ids of different ranks are different counters."""
    runs: dict[tuple[object, ...], list[Finding]] = defaultdict(list)
    for i, f in enumerate(sorted(findings, key=_order_key)):
        if f.collective_seq_id is None or f.group is None:
            runs[(i,)].append(f)
        else:
            runs[(f.group.uid, f.kind, f.culprit_ranks)].append(f)
    out = []
    for run in runs.values():
        first = run[0]
        if len(run) > 1:
            seqs = [f.collective_seq_id for f in run[1:] if f.collective_seq_id is not None]
            also = f" (and {counted(len(run) - 1, 'later collective')} of this group, "
            also += f"#{min(seqs)}-#{max(seqs)})" if len(seqs) > 1 else f"#{seqs[0]})"
            first = replace(first, detail=first.detail + also)
        out.append(first)
    return out


def _input_findings(
    dumps: Sequence[RankDump],
    unreadable: Sequence[UnreadableDump],
    table: EntryTable,
    groups: GroupTable,
    result: MatchResult,
) -> list[Finding]:
    out: list[Finding] = []
    if groups.missing_ranks:
        missing = set(groups.missing_ranks)
        affected = [g for g in groups.groups if missing & set(g.ranks)]
        biggest = max(affected, key=lambda g: (g.size, -g.uid)) if affected else None
        detail = f"no dump file for {label(missing)}"
        waiting = _waiting_on(groups, table, result, missing)
        if waiting:
            detail += "; " + waiting
        out.append(
            Finding(
                FindingKind.MISSING_DUMP,
                biggest,
                None,
                None,
                "",
                tuple(sorted(missing)),
                tuple(sorted(missing)),
                detail,
            )
        )
    for u in unreadable:
        member_of = [g for g in groups.groups if u.rank in g.ranks]
        group = max(member_of, key=lambda g: g.size) if member_of else None
        rank = () if u.rank is None else (u.rank,)
        out.append(
            Finding(
                FindingKind.UNREADABLE_DUMP,
                group,
                None,
                None,
                "",
                rank,
                rank,
                f"{u.file}: {u.reason}",
            )
        )
    for dump in dumps:
        if not dump.entry_errors:
            continue
        shown = "; ".join(f"entry {i}: {reason}" for i, reason in dump.entry_errors[:3])
        more = len(dump.entry_errors) - 3
        out.append(
            Finding(
                FindingKind.MALFORMED_ENTRY,
                None,
                None,
                None,
                "",
                (dump.rank,),
                (dump.rank,),
                f"{dump.file}: {len(dump.entry_errors)} malformed entries skipped: {shown}"
                + (f" (+{more} more)" if more > 0 else ""),
            )
        )
    return out


def _waiting_on(
    groups: GroupTable, table: EntryTable, result: MatchResult, missing: set[int]
) -> str:
    """The first collective, in a group with a missing member, that the others did not finish."""
    units = result.collectives
    in_unit = units.entry_unit >= 0
    unfinished = np.bincount(
        units.entry_unit[in_unit], weights=~result.done[in_unit], minlength=len(units.seq)
    )
    for u in np.flatnonzero((units.ranks_present < units.ranks_expected) & (unfinished > 0)):
        group = groups.groups[int(units.group[u])]
        if not missing & set(group.ranks):
            continue
        ranks = distinct(table.rank[units.entry_unit == u]).tolist()
        return (
            f"{label(ranks)} {agree(ranks, 'is', 'are')} waiting in {units.op[u]} "
            f"#{int(units.seq[u])} of "
            f"group {group.name!r} ({group.desc}), which the missing ranks may never have "
            "joined"
        )
    return ""


def describe_group(group: Group | None) -> str:
    """A group as the report names it: its name, description and ranks (or `the job`)."""
    if group is None:
        return "the job"
    desc = f" ({group.desc})" if group.desc else ""
    return f"group {group.name!r}{desc}, {label(group.ranks)}"


def sentence(f: Finding) -> str:
    """One sentence naming group, sequence id, op and culprits."""
    where = describe_group(f.group)
    if f.collective_seq_id is not None:
        where += f", collective #{f.collective_seq_id}"
    elif f.p2p_seq_id is not None:
        where += f", p2p #{f.p2p_seq_id}"
    if f.op:
        where += f" {f.op}"
    who = "rank" if len(f.culprit_ranks) == 1 else "ranks"
    return f"{f.kind.value} in {where}: {f.detail}. Culprit: {who} {compact(f.culprit_ranks)}."
