"""The one answer: status, root cause, and how every finding relates to it.

This is the only place that decides. The text and JSON reports, the database, the timeline's
markers and the exit code all read the `Conclusion`; none of them re-decides.

- Status: `desync` when ranks disagree (a mismatch, a rank that skipped an op and went on,
  collectives issued in different orders); `hung` when they agree but something stopped (a rank
  that never arrived, a dead rank, an op stuck on a device or the network); `slow` when every op
  completed but one rank held the others up; `incomplete` when the only problems are with the
  dumps themselves; `ok` otherwise, including ops that were simply in flight when the dumps were
  taken.
- Every finding is the root itself, a symptom the root explains (its culprits are the root's
  ranks or wait for them, directly or not), independent of it, or, when nothing is stuck, ops
  that were in flight. A symptom's culprits are the root's ranks it waits for; the ranks it
  shows held up are its `held_up_ranks` (the finding's own culprits, say the rank that never
  issued an op of its group because it waits elsewhere for the root, are among them).
- When and where: the root op's wall-clock time on the culprit's clock, the dump time as far as
  it is known (and how), the culprits' hosts.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from .diagnosis import Alternative, Confidence, Diagnosis, RootCause, RootKind, Timing
from .diagnosis.ages import Age, Unknown
from .match import MatchResult
from .model.groups import GroupTable
from .model.ranks import agree, by_count, counted, label
from .model.records import INPUT_KINDS, DumpSummary, Finding, FindingKind, Status

IN_FLIGHT_KINDS = frozenset(
    {FindingKind.NOT_JOINED, FindingKind.STATE_MISMATCH, FindingKind.P2P_UNMATCHED}
)
"""Findings that ops still running when the dumps were taken also produce."""


class Role(enum.StrEnum):
    """What a finding is to the answer: the root cause, explained by it, or apart from it."""

    ROOT = "root"  # states the root cause (or is its evidence: the dead rank's missing dump)
    SYMPTOM = "symptom"  # explained by the root cause
    INDEPENDENT = "independent"  # not explained by it
    IN_FLIGHT = "in_flight"  # not a problem: ops were still running when the dumps were taken


@dataclass(frozen=True)
class Judged:
    """A finding and its relation to the root cause."""

    finding: Finding
    role: Role
    link: str  # how the root explains it, or why it is not a problem; "" when independent
    # A symptom's culprits: the root's ranks it waits for; for any other finding, its own.
    culprit_ranks: tuple[int, ...] = ()
    # A symptom's ranks held up by the root cause (blocked, waiting, or lost); () otherwise.
    held_up_ranks: tuple[int, ...] = ()

    @property
    def explained(self) -> bool:
        """Whether the root cause accounts for this finding (it is the root or a symptom of it)."""
        return self.role in (Role.ROOT, Role.SYMPTOM)


@dataclass(frozen=True)
class Conclusion:
    """The answer every renderer prints and the exit code follows."""

    status: Status
    answer: str  # one short paragraph, the first thing anyone reads
    root: RootCause | None
    findings: tuple[Judged, ...]  # root first, then symptoms, independent, in flight
    timing: Timing
    # When the root op happened (ns since the epoch) on `root_time_rank`'s clock (the
    # culprit's; a culprit with no dump: a rank waiting for it), and what happened then.
    root_time_ns: int | None = None
    root_time_rank: int | None = None
    root_time_what: str = ""  # "rank 5 enqueued all_reduce #8 of group '2' (tp)"
    # When the dumps were taken, as far as known (ns since the epoch): `dump_time_bound` says
    # whether that is the dump time ("exact"), a time it is at most ("at_most": the culprit's
    # file was written then) or at least ("at_least": the newest timestamp); "" unknown.
    dump_time_ns: int | None = None
    dump_time_bound: str = ""
    dump_time_basis: str = ""  # how it is known, one sentence
    culprit_hosts: tuple[tuple[int, str], ...] = ()  # (rank, host) of each culprit with one
    hosts: Mapping[int, str] = field(default_factory=dict)  # every rank's host, where known
    # How far the evidence carries the answer; where another reading fits the dumps as well,
    # `alternatives` names it with what would decide (the answer is the likelier reading).
    confidence: Confidence = Confidence.HIGH
    alternatives: tuple[Alternative, ...] = ()

    @property
    def root_finding(self) -> Finding | None:
        """The finding that states the root cause, if one does."""
        return next((j.finding for j in self.findings if j.role == Role.ROOT), None)

    def having(self, role: Role) -> list[Judged]:
        """The findings that play `role`, in report order."""
        return [j for j in self.findings if j.role == role]


def conclude(
    summary: DumpSummary,
    findings: Sequence[Finding],
    diagnosis: Diagnosis,
    matches: MatchResult,
    groups: GroupTable,
) -> Conclusion:
    """The one answer: the job's status, its root cause and the role of every finding."""
    units = matches.collectives
    stats = (
        f"{counted(len(units.seq), 'collective')} and "
        f"{counted(matches.pairs_matched, 'send/recv pair')} matched across "
        f"{counted(len(summary.ranks_loaded), 'rank')} in {counted(len(groups.groups), 'group')}"
    )
    root = diagnosis.root_cause
    timing = diagnosis.timing
    judged = [_judge(f, root, diagnosis) for f in findings]
    order = {Role.ROOT: 0, Role.SYMPTOM: 1, Role.INDEPENDENT: 2, Role.IN_FLIGHT: 3}
    judged.sort(key=lambda j: order[j.role])  # stable: each role keeps the findings' order
    status = _status(root, judged)
    when = root.time if root is not None else None
    dump_ns, bound, basis = _dump_time(timing, root)
    hosts = diagnosis.hosts
    others = _alternatives(status, root, timing, summary)
    return Conclusion(
        status,
        _answer(status, root, judged, timing, summary, stats),
        root,
        tuple(judged),
        timing,
        root_time_ns=when.at_ns if when is not None else None,
        root_time_rank=when.rank if when is not None else None,
        root_time_what=when.what if when is not None else "",
        dump_time_ns=dump_ns,
        dump_time_bound=bound,
        dump_time_basis=basis,
        culprit_hosts=tuple((r, hosts[r]) for r in (root.ranks if root else ()) if r in hosts),
        hosts=hosts,
        confidence=Confidence.AMBIGUOUS if others else Confidence.HIGH,
        alternatives=others,
    )


_SNAPSHOT = "a second snapshot a minute later (what moved was in flight)"
_DECIDE_AGE = {
    Unknown.UPPER_PAST_TIMEOUT: "a watchdog timeout line in the job's log (--job-log), or "
    + _SNAPSHOT,
    Unknown.COPIED: "the files' own times (copy with `cp -p`, `rsync -t` or `tar`), the job's "
    f"log (--job-log), or {_SNAPSHOT}",
    Unknown.NO_FILE_TIME: f"the job's log (--job-log), or {_SNAPSHOT}",
    Unknown.NO_TIMEOUT: f"the job's log (--job-log), or {_SNAPSHOT}",
    Unknown.RETIRE_LAG: f"the job's log (--job-log), or {_SNAPSHOT}",
}


def _alternatives(
    status: Status, root: RootCause | None, timing: Timing, summary: DumpSummary
) -> tuple[Alternative, ...]:
    """The other readings of the dumps: the root rule's own, and, where a hang rests on ops
    whose age is not known, that they were in flight."""
    found = list(root.alternatives) if root is not None else []
    traces = timing.dump.traces_only  # traces keep no times: a trace's end is where it stopped
    if status == Status.HUNG and timing.age == Age.UNKNOWN and not timing.measured and not traces:
        reason = timing.unknown or Unknown.NO_FILE_TIME
        lost = sorted(
            set(summary.ranks_missing) | {u.rank for u in summary.unreadable if u.rank is not None}
        )
        if lost:  # in flight, and those dumps lost on the way: incomplete, not ok
            reading = (
                "the job's ops were in flight when it was dumped, and the "
                f"{agree(lost, 'dump', 'dumps')} of {label(lost)} went missing for another reason"
            )
            found.append(Alternative(Status.INCOMPLETE, reading, _DECIDE_AGE[reason]))
        else:
            found.append(
                Alternative(
                    Status.OK,
                    "the job's ops were in flight when it was dumped",
                    _DECIDE_AGE[reason],
                )
            )
    return tuple(found)


_OTHER_GROUPS = (
    "Flight Recorder dumps of the same job (they name each op's group and sequence id), or "
    "each rank's stack"
)


def with_other_reading(main: Conclusion, other: Conclusion) -> Conclusion:
    """`main`, with `other` among its alternatives where its verdict differs (its status, root
    kind or culprits): `other` is the answer where gloo traces' ops are put on other groups
    that fit the traces as well (as many ops pass as the job ran them)."""

    def verdict(c: Conclusion) -> tuple[Status, RootKind | None, tuple[int, ...]]:
        return c.status, c.root.kind if c.root else None, c.root.ranks if c.root else ()

    if verdict(other) == verdict(main):
        return main
    said = other.answer.split(". ", 1)[-1].rstrip(".")
    reading = f"{said}, were the traces' ops on other groups that fit them as well"
    found = (*main.alternatives, Alternative(other.status, reading, _OTHER_GROUPS))
    return replace(main, confidence=Confidence.AMBIGUOUS, alternatives=found)


def _dump_time(timing: Timing, root: RootCause | None) -> tuple[int | None, str, str]:
    """The dump time as far as known, whether it is exact or a bound, and how it is known:
    the culprit's file time where one is believed (the dump is at most then)."""
    dump = timing.dump
    if dump.at_ns is None:
        return None, "", dump.basis
    if dump.exact:
        return dump.at_ns, "exact", dump.basis
    for rank in root.ranks if root is not None else ():
        found = dump.file_times.get(rank)
        if found is not None:
            how = dump.evidence.get(rank)
            what = how.value if how is not None else "its file's time"
            return found, "at_most", f"rank {rank}'s dump is dated by {what}, written then or later"
    if dump.file_times:
        latest = max(dump.file_times.values())
        return latest, "at_most", dump.basis
    return dump.at_ns, "at_least", dump.basis


def _status(root: RootCause | None, judged: list[Judged]) -> Status:
    if root is not None:
        if root.kind == RootKind.STRAGGLER:
            return Status.SLOW
        if root.kind in (RootKind.MISMATCH, RootKind.DEADLOCK) or root.deviates:
            return Status.DESYNC
        return Status.HUNG
    independent = [j.finding for j in judged if j.role == Role.INDEPENDENT]
    if any(f.kind not in INPUT_KINDS for f in independent):
        return Status.DESYNC
    if independent:
        return Status.INCOMPLETE
    return Status.OK


def _judge(f: Finding, root: RootCause | None, diagnosis: Diagnosis) -> Judged:
    own = f.culprit_ranks
    if root is None:
        if f.kind in IN_FLIGHT_KINDS and not diagnosis.timing.hung:
            return Judged(f, Role.IN_FLIGHT, "ops still running when the dumps were taken", own)
        return Judged(f, Role.INDEPENDENT, "", own)
    roots = set(root.ranks)
    culprits = set(own)
    # the ranks a symptom shows held up: every rank it names but the root's
    involved = tuple(sorted((set(f.ranks) | culprits) - roots))

    def symptom(link: str, held: Sequence[int] = involved) -> Judged:
        waits_for = tuple(sorted(culprits & roots)) or root.ranks
        return Judged(f, Role.SYMPTOM, link, waits_for, tuple(sorted(held)))

    if root.finding is not None and f is root.finding:
        return Judged(f, Role.ROOT, "the root cause", own)
    same_place = (
        f.group is not None
        and root.group is not None
        and f.group.uid == root.group.uid
        and (
            (f.collective_seq_id is not None and f.collective_seq_id == root.collective_seq_id)
            or (f.p2p_seq_id is not None and f.p2p_seq_id == root.p2p_seq_id)
        )
    )
    if same_place and culprits == roots and root.finding is None:
        return Judged(f, Role.ROOT, "the root cause", own)
    if f.kind in INPUT_KINDS and f.kind != FindingKind.MALFORMED_ENTRY and culprits <= roots:
        return Judged(
            f, Role.ROOT, f"{label(roots)} {agree(roots, 'is', 'are')} the root cause", own
        )
    if culprits and culprits <= roots:
        return symptom(f"the root's {agree(roots, 'rank', 'ranks')} again")
    behind = diagnosis.behind_root
    if culprits and culprits <= roots | behind:
        waiting = sorted(culprits - roots)
        how = (
            "blocked in the op that disagrees, or waiting, directly or not, for ranks blocked in it"
            if root.kind == RootKind.MISMATCH
            else f"waiting, directly or not, for {label(roots)}"
        )
        return symptom(f"{label(waiting)} {agree(waiting, 'is', 'are')} held up: {how}")
    if same_place:
        return symptom("the same op as the root cause")
    held = (set(f.ranks) - culprits) & (roots | behind)
    if f.kind == FindingKind.STATE_MISMATCH and held:
        return symptom(
            f"{label(held)} {agree(held, 'is', 'are')} held up by the root cause (gloo "
            "retires an op that times out as one that completes)",
            sorted(held - roots),
        )
    if f.kind == FindingKind.MISSING_DUMP and root.kind == RootKind.MISMATCH:
        return symptom(
            "lost after the disagreement: gloo aborts, with no dump, a rank that receives "
            "more bytes than it posted"
        )
    return Judged(f, Role.INDEPENDENT, "", own)


def _answer(
    status: Status,
    root: RootCause | None,
    judged: list[Judged],
    timing: Timing,
    summary: DumpSummary,
    stats: str,
) -> str:
    head = status.value.upper()
    if root is not None:
        return f"{head}. {root.sentence}"
    independent = [j.finding for j in judged if j.role == Role.INDEPENDENT]
    if status == Status.DESYNC:
        first = independent[0]
        return f"{head}. {first.kind.value}: {first.detail}."
    if status == Status.INCOMPLETE:
        what = "; ".join(f"{f.kind.value}: {f.detail}" for f in independent[:3])
        return (
            f"{head}. Nothing in the loaded dumps is stuck or disagrees, but the dumps are "
            f"incomplete ({what}), so a problem on those ranks cannot be ruled out."
        )
    text = f"{head}. No desync and nothing stuck: {stats}."
    in_flight = [j for j in judged if j.role == Role.IN_FLIGHT]
    if timing.blocked_ranks:
        text += f" {timing.note[0].upper()}{timing.note[1:]}."
    elif in_flight:
        n = len(in_flight)
        text += (
            f" {counted(n, 'finding')} {by_count(n, 'is an op', 'are ops')} that "
            f"{by_count(n, 'was', 'were')} in flight."
        )
    if summary.ranks_missing:
        text += f" No dump for {label(summary.ranks_missing)}."
    return text
