"""What every renderer says the same way: op and sequence texts, finding caps, line wrapping,
the answer's facts as plain records, the symptoms folded by family, and the next commands.

The renderers (text, JSON, HTML, entries, timeline, traces, databases) each render the one
`Conclusion` and import from here, never from one another, so that a rank list, an op name or
a record reads the same in every output. Nothing here prints.
"""

from __future__ import annotations

import datetime
import re
import shlex
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..conclusion import Conclusion, Judged, Role
from ..diagnosis import RootCause
from ..diagnosis.ages import DumpTime
from ..diagnosis.positions import OpRef, StackGroup
from ..diagnosis.series import Series
from ..model import ranks, records
from ..model.records import Finding, Group
from ..pipeline import Analysis

# --- short texts -----------------------------------------------------------------------------


def op_text(ref: OpRef | None, sizes: bool = False) -> str:
    """An op as the reports name it (`all_reduce #59 of group '0' (default_pg)`), with its
    sizes when asked."""
    if ref is None:
        return "-"
    return ref.describe() + (f" {ref.sizes}" if sizes and ref.sizes != "[]" else "")


def seq_text(f: Finding) -> str:
    """A finding's sequence id (`#12` for a collective one, `p2p #3` for a p2p one), `-` for
    neither."""
    if f.collective_seq_id is not None:
        return records.seq_id(f.collective_seq_id)
    if f.p2p_seq_id is not None:
        return records.seq_id(f.p2p_seq_id, p2p=True)
    return "-"


def seq_span(texts: Sequence[str]) -> str:
    """The sequence ids of several findings, lowest to highest whatever their order: `#4`,
    `#4-#9`, `p2p #4-#5`, `#4-#9, p2p #2` when both kinds are there; ids that are unknown are
    left out (never `---`)."""
    spans = []
    for p2p in (False, True):
        numbers = sorted(
            {int(m[1]) for t in texts if (m := _SEQ.fullmatch(t)) and bool(m[0][0] == "p") == p2p}
        )
        if numbers:
            first, last = (records.seq_id(n, p2p=p2p) for n in (numbers[0], numbers[-1]))
            spans.append(records.seq_id_span(first, last))
    return ", ".join(spans) or "-"


_SEQ = re.compile(r"(?:p2p )?#([0-9]+)")


def chain_steps(root: RootCause) -> list[str]:
    """The wait chain's steps: `rank 8 (group '9' #4)`."""
    steps = []
    for rank, group, seq in root.wait_chain:
        where = f" (group {group!r} #{seq})" if group is not None else ""
        steps.append(f"rank {rank}{where}")
    return steps


def plural(count: int, singular: str, many: str | None = None) -> str:
    """`1 finding`, `9 findings`."""
    return f"{count} {singular if count == 1 else (many or singular + 's')}"


def capped(judged: Sequence[Judged], cap: int | None) -> tuple[list[Judged], dict[str, int]]:
    """Keep at most `cap` findings per group; count the rest per group name."""
    if cap is None:
        return list(judged), {}
    kept: list[Judged] = []
    seen: dict[int, int] = defaultdict(int)
    omitted: dict[str, int] = defaultdict(int)
    for j in judged:
        f = j.finding
        key = f.group.uid if f.group is not None else -1
        seen[key] += 1
        if seen[key] <= cap:
            kept.append(j)
        else:
            omitted[f.group.name if f.group is not None else ""] += 1
    return kept, dict(omitted)


def utc(ns: int | None) -> str | None:
    """A timestamp in ns since the epoch as UTC, to the millisecond: `2026-11-27 20:14:03.123
    UTC`; None when unknown or not a plausible wall-clock time."""
    if ns is None or ns <= 0:
        return None
    try:
        moment = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


# --- wrapping --------------------------------------------------------------------------------


def wrap(text: str, width: int, indent: str = "", hang: str | None = None) -> list[str]:
    """`text` in lines of at most `width` characters: the first line starts with `indent`, the
    others with `hang` (default: `indent` and two spaces). Lines break at spaces; a word longer
    than a line breaks after a comma (rank lists: `0-7,16-23`), never inside a rank range, and
    only a word with no comma at all (a long path) is cut."""
    hang = indent + "  " if hang is None else hang
    room = max(width - len(hang), 8)
    pieces: list[tuple[str, bool]] = []  # (piece, joined to the previous one without a space)
    for word in names_cut(text).split():
        if len(word) <= room:
            pieces.append((word, False))
            continue
        first = True
        for part in _comma_parts(word):
            for at in range(0, len(part) - room, room):  # cut in place: linear in the part
                pieces.append((part[at : at + room], not first))
                first = False
            pieces.append((part[(max(len(part) - 1, 0) // room) * room :], not first))
            first = False
    lines: list[str] = []
    line = indent
    fresh = True
    for piece, glued in pieces:
        sep = "" if (glued or fresh) else " "
        if not fresh and len(line) + len(sep) + len(piece) > width:
            lines.append(line)
            line, fresh, sep = hang, True, ""
        line += sep + piece
        fresh = False
    if not fresh or not lines:
        lines.append(line)
    return lines


NAME_SHOWN = 1024
"""Most characters printed of one name (a word with no comma: an op, a group, a path); a
longer one (an op named by 16 MiB of text) is cut, and says how long it is."""


_LONG_NAME = re.compile(rf"[^\s,]{{{NAME_SHOWN + 1},}}")


def _cut(found: re.Match[str]) -> str:
    return f"{found[0][:NAME_SHOWN]}…({len(found[0]):,}-character name cut)"


def names_cut(text: str) -> str:
    """`text` with every name in it (a run with no space or comma) cut to `NAME_SHOWN`
    characters; in one pass, however long."""
    return _LONG_NAME.sub(_cut, text) if len(text) > NAME_SHOWN else text


def _comma_parts(word: str) -> list[str]:
    parts = word.split(",")
    return [p + "," for p in parts[:-1]] + [parts[-1]] if len(parts) > 1 else [word]


def fit(lines: Sequence[str], width: int) -> list[str]:
    """Lines of a block (a table, a stack) cut to `width`, with `…` where cut."""
    return [line if len(line) <= width else line[: width - 1] + "…" for line in lines]


# --- the answer's facts ----------------------------------------------------------------------


@dataclass(frozen=True)
class WhenWhere:
    """When the root op happened and where its ranks run, as far as the dumps tell (the
    `Conclusion`'s facts, shaped for the renderers)."""

    root_time_ns: int | None  # the root op on `root_time_rank`'s clock
    root_time_rank: int | None
    what: str  # what happened then: "rank 5 enqueued all_reduce #8 of group '2' (tp)"
    dump_time_ns: int | None
    dump_time_bound: str  # "exact", "at_most", "at_least", or "" when unknown
    dump_time_basis: str
    hosts: dict[int, str]  # culprit rank: host, where known


def when_where(analysis: Analysis) -> WhenWhere:
    """The root's wall-clock time on the culprit's clock, the dump time, the culprits' hosts."""
    c = analysis.conclusion
    return WhenWhere(
        root_time_ns=c.root_time_ns,
        root_time_rank=c.root_time_rank,
        what=c.root_time_what,
        dump_time_ns=c.dump_time_ns,
        dump_time_bound=c.dump_time_bound,
        dump_time_basis=c.dump_time_basis,
        hosts=dict(c.culprit_hosts),
    )


_BOUND = {"exact": "at", "at_most": "at the latest", "at_least": "at the earliest"}


def when_where_lines(facts: WhenWhere) -> list[str]:
    """Short sentences: when (UTC, whose clock), when the dumps were taken, where (hosts)."""
    out = []
    at = utc(facts.root_time_ns)
    if at is not None and facts.root_time_rank is not None:
        what = facts.what or f"rank {facts.root_time_rank}'s root op"
        out.append(f"when: {at} on rank {facts.root_time_rank}'s clock: {what}")
    dumped = utc(facts.dump_time_ns)
    if dumped is not None and facts.dump_time_bound in _BOUND:
        out.append(f"dumped {_BOUND[facts.dump_time_bound]} {dumped}")
    if facts.hosts:
        by_host: dict[str, list[int]] = defaultdict(list)
        for rank, host in facts.hosts.items():
            by_host[host].append(rank)
        out.append(
            "where: "
            + "; ".join(f"{ranks.label(r)} on host {h}" for h, r in sorted(by_host.items()))
        )
    return out


# --- symptoms folded -------------------------------------------------------------------------


@dataclass(frozen=True)
class SymptomFold:
    """Symptoms of one kind in one family of groups (the groups sharing a description)."""

    kind: str
    family: str  # the groups' description (`dp`), or their name when they have none
    groups: tuple[str, ...]
    count: int
    seqs: str  # `c4` or `c4..c9`
    held_up: tuple[int, ...]  # ranks held up by these symptoms (not the root's own)
    waiting_for: tuple[int, ...]  # the root's ranks they wait for, directly or not

    def sentence(self) -> str:
        """The fold as one sentence: how many findings of its kind, where, at which seq ids."""
        where = (
            f"group {self.groups[0]!r} ({self.family})"
            if len(self.groups) == 1
            else f"{len(self.groups)} {self.family} groups"
        )
        what = f"{plural(self.count, self.kind + ' finding')} in {where} at {self.seqs}"
        if not self.held_up:
            return f"{what}: the root's own {ranks.label(self.waiting_for)} again"
        verb = ranks.agree(self.held_up, "is", "are")
        return (
            f"{what}: {ranks.label(self.held_up)} {verb} held up waiting, directly or not, "
            f"for {ranks.label(self.waiting_for)}"
        )


def fold_symptoms(c: Conclusion) -> list[SymptomFold]:
    """The root's symptoms, one fold per (kind, family of groups), largest first."""
    root = c.root
    root_ranks = set(root.ranks) if root is not None else set()
    folds: dict[tuple[str, str], list[Judged]] = defaultdict(list)
    for j in c.having(Role.SYMPTOM):
        f = j.finding
        family = (f.group.desc or f.group.name) if f.group is not None else "-"
        folds[(f.kind.value, family)].append(j)
    out = []
    for (kind, family), found in folds.items():
        held = sorted({r for j in found for r in j.held_up_ranks} - root_ranks)
        waited = sorted({r for j in found for r in j.culprit_ranks}) or sorted(root_ranks)
        names = tuple(
            dict.fromkeys(j.finding.group.name for j in found if j.finding.group is not None)
        )
        out.append(
            SymptomFold(
                kind=kind,
                family=family,
                groups=names,
                count=len(found),
                seqs=seq_span([seq_text(j.finding) for j in found]),
                held_up=tuple(held),
                waiting_for=tuple(waited),
            )
        )
    return sorted(out, key=lambda s: (-len(s.held_up), -s.count, s.kind, s.family))


# --- next steps ------------------------------------------------------------------------------

PEERS_SHOWN = 7
"""Peers of the culprit put beside it in the suggested timeline."""


@dataclass(frozen=True)
class NextStep:
    """A command to run next, and why."""

    why: str
    argv: tuple[str, ...]  # empty for a hint that cannot be run from here (another host)
    hint: str = ""

    def command(self) -> str:
        """The step as one shell command line (or its hint when it has no command)."""
        return " ".join(shlex.quote(a) for a in self.argv) if self.argv else self.hint


def next_steps(analysis: Analysis) -> list[NextStep]:
    """2-4 exact commands that zoom in from the answer: the entries around the root, a
    timeline of the culprit and its peers over the root's sequence ids, an HTML picture, and
    where the culprit's host is known a `py-spy dump` there."""
    c = analysis.conclusion
    root = c.root
    source = analysis.summary.directory
    if root is None or not source:
        return []
    where = ("-d", source)
    steps = [
        NextStep(
            "the entries around the root, every rank side by side",
            ("fr-analyze", *where, "-j", "--around-root"),
        )
    ]
    seq = root.collective_seq_id
    members = root.group.ranks if root.group is not None else ()
    culprit = root.ranks[0] if root.ranks else 0
    culprits = set(root.ranks)  # a world of ranks without a dump: tens of thousands
    peers = sorted((r for r in members if r not in culprits), key=lambda r: abs(r - culprit))
    shown = sorted({*root.ranks[:PEERS_SHOWN], *peers[:PEERS_SHOWN]})
    timeline = ["fr-analyze", "timeline", *where, "--selected-ranks", ranks.compact(shown)]
    if seq is not None:
        timeline += ["--seq", f"{max(seq - 3, 0)}:{seq + 3}"]
    timeline += ["-o", "fr-timeline.json"]
    steps.append(
        NextStep("a timeline of the culprit and its peers (open in Perfetto)", tuple(timeline))
    )
    steps.append(
        NextStep("the incident as one page", ("fr-analyze", *where, "--html", "fr-report.html"))
    )
    hosts = when_where(analysis).hosts
    if hosts:
        rank, host = next(iter(sorted(hosts.items())))
        steps.append(
            NextStep(
                f"where rank {rank} is now (on its host)",
                (),
                hint=f"ssh {shlex.quote(host)} py-spy dump --pid <pid of rank {rank}>",
            )
        )
    return steps


def last_step(analysis: Analysis) -> NextStep | None:
    """The one command the text report ends with: the first of `next_steps`, or where there
    is no root cause, the report with every finding (`-v`); None when the dumps have no path
    to give again."""
    steps = next_steps(analysis)
    if steps:
        return steps[0]
    source = analysis.summary.directory
    if not source:
        return None
    return NextStep(
        "every finding, the stacks and where every rank stands", ("fr-analyze", "-d", source, "-v")
    )


def headline(c: Conclusion) -> str:
    """The answer in one line: status, culprit, op, group (`HUNG: rank 5 at all_reduce #15 in
    group '2' (tp)`), or with no root cause the status and the answer's first sentence."""
    status = c.status.value.upper()
    root = c.root
    if root is None:
        return f"{status}: {c.answer.removeprefix(status + '. ').split('. ')[0].rstrip('.')}"
    if root.collective_seq_id is not None:
        seq: str | None = records.seq_id(root.collective_seq_id)
    elif root.p2p_seq_id is not None:
        seq = records.seq_id(root.p2p_seq_id, p2p=True)
    else:
        seq = None
    op = " ".join(part for part in (root.op, seq) if part)
    at = f" at {op}" if op else ""
    where = f" in group {root.group.name!r} ({root.group.desc})" if root.group is not None else ""
    who = ranks.label(root.ranks) if root.ranks else "no rank"
    return f"{status}: {who}{at}{where}"


# --- stacks ----------------------------------------------------------------------------------


def odd_one_out(stacks: Sequence[StackGroup], root: RootCause | None) -> int | None:
    """The one stack group singled out as the odd one out, by its index, or None. Several
    groups can hold ranks whose stack differs from their peers' (a pipeline's stages run
    different code); the odd one out is the one holding the root cause's culprits, else the
    only such group; where there are several and none holds a culprit, none is singled out."""
    odd = [i for i, g in enumerate(stacks) if g.odd]
    if root is not None and root.ranks:
        culprits = set(root.ranks)
        holding = [i for i in odd if culprits & set(stacks[i].odd_ranks or stacks[i].ranks)]
        if holding:
            return max(holding, key=lambda i: len(culprits & set(stacks[i].ranks)))
    return odd[0] if len(odd) == 1 else None


# --- records (the JSON report's and the databases' shared objects) ----------------------------


def place_record(
    group: Group | None, collective_seq_id: int | None, p2p_seq_id: int | None, op: str
) -> dict[str, Any]:
    """Where a finding or the root cause is: group, sequence ids, op."""
    return {
        "group": group.name if group else None,
        "group_desc": group.desc if group else None,
        "group_ranks": list(group.ranks) if group else [],
        "collective_seq_id": collective_seq_id,
        "p2p_seq_id": p2p_seq_id,
        "op": op or None,
    }


def finding_record(f: Finding) -> dict[str, Any]:
    """A finding as the JSON report and the databases write it."""
    return (
        {"kind": f.kind.value}
        | place_record(f.group, f.collective_seq_id, f.p2p_seq_id, f.op)
        | {"ranks": list(f.ranks), "culprit_ranks": list(f.culprit_ranks), "detail": f.detail}
    )


def judged_record(j: Judged) -> dict[str, Any]:
    """A judged finding's record: the finding's, plus its role and what it waits for."""
    return finding_record(j.finding) | {
        "explained_by_root_cause": j.explained,
        "role": j.role.value,
        "explanation": j.link or None,
        "waits_for_ranks": list(j.culprit_ranks),
        "held_up_ranks": list(j.held_up_ranks),
    }


def root_cause_record(root: RootCause | None) -> dict[str, Any] | None:
    """The root cause as the JSON report writes it, or None when there is none."""
    if root is None:
        return None
    return {
        "kind": root.kind.value,
        "ranks": list(root.ranks),
        "group": root.group.name if root.group else None,
        "group_desc": root.group.desc if root.group else None,
        "collective_seq_id": root.collective_seq_id,
        "p2p_seq_id": root.p2p_seq_id,
        "op": root.op or None,
        "summary": root.sentence,
        "evidence": list(root.evidence),
        "wait_chain": [list(step) for step in root.wait_chain],
        "deviates": root.deviates,
        "lateness_s": root.lateness_s,
        "code": [[f.name, f.filename, f.line] for f in root.code],
    }


def confidence_line(c: Conclusion) -> str:
    """The verdict's confidence in one sentence where another reading fits ("" where none
    does): the other reading and what would decide."""
    if not c.alternatives:
        return ""
    others = "; ".join(
        f"or {a.status.value.upper()}: {a.reading} (to decide: {a.decide})" for a in c.alternatives
    )
    return f"confidence: {c.confidence.value}; {others}"


def alternatives_record(c: Conclusion) -> list[dict[str, str]]:
    """The other readings, as the JSON report writes them."""
    return [
        {"status": a.status.value, "reading": a.reading, "decide": a.decide} for a in c.alternatives
    ]


def verdict_record(c: Conclusion) -> dict[str, Any]:
    """The answer in one object: status, and the root cause's group, seq ids and culprits."""
    root = c.root
    finding = c.root_finding
    out: dict[str, Any] = (
        {"status": c.status.value, "kind": None}
        | place_record(None, None, None, "")
        | {"culprit_ranks": []}
    )
    if root is not None:
        out.update(
            {"kind": finding.kind.value if finding is not None else root.kind.value}
            | place_record(root.group, root.collective_seq_id, root.p2p_seq_id, root.op)
            | {"culprit_ranks": list(root.ranks)}
        )
    elif c.findings and c.status.value != "ok":
        first = c.findings[0].finding
        out.update({k: v for k, v in finding_record(first).items() if k not in ("ranks", "detail")})
    t = c.timing
    out.update(
        {
            "summary": c.answer,
            "confidence": c.confidence.value,
            "alternatives": alternatives_record(c),
            "root_cause": root.kind.value if root is not None else None,
            "root_cause_ranks": list(root.ranks) if root is not None else [],
            "timing": {
                "dump_time_ns": t.dump.at_ns,
                "dump_time_exact": t.dump.exact,
                "dump_time_basis": t.dump.basis,
                "dump_time_evidence": dump_evidence(t.dump),
                "file_times_ns": (
                    [min(t.dump.file_times.values()), max(t.dump.file_times.values())]
                    if t.dump.file_times
                    else None
                ),
                "blocked_ranks": t.blocked_ranks,
                "oldest_unfinished_age_s": t.oldest_age_s,
                "age": t.age.value,
                "stuck": t.hung,
                "measured_across_snapshots": t.measured,
                "note": t.note,
            },
        }
    )
    return out


def when_where_record(facts: WhenWhere) -> dict[str, Any]:
    """When and where the root happened, as the JSON report writes it."""
    return {
        "root_time_ns": facts.root_time_ns,
        "root_time_utc": utc(facts.root_time_ns),
        "root_time_rank": facts.root_time_rank,
        "root_time_what": facts.what or None,
        "dump_time_ns": facts.dump_time_ns,
        "dump_time_utc": utc(facts.dump_time_ns),
        "dump_time_bound": facts.dump_time_bound or None,
        "dump_time_basis": facts.dump_time_basis or None,
        "culprit_hosts": {str(r): h for r, h in sorted(facts.hosts.items())},
    }


def dump_evidence(dump: DumpTime) -> dict[str, str]:
    """What dated each rank's dump, as rank ranges by kind of evidence ("looked_at",
    "file_time", "lower_bound")."""
    by_kind: dict[str, list[int]] = {}
    for rank, evidence in sorted(dump.evidence.items()):
        by_kind.setdefault(evidence.name.lower(), []).append(rank)
    return {kind: ranks.compact(found) for kind, found in by_kind.items()}


def series_record(series: Series | None) -> dict[str, Any] | None:
    """Several snapshots compared: which, when, and how each rank moved (rank ranges)."""
    if series is None:
        return None
    moved = [r for r, m in sorted(series.ranks.items()) if m.moved]
    still = [r for r, m in sorted(series.ranks.items()) if not m.moved]
    held = [m.unchanged_s for m in series.ranks.values() if not m.moved]
    known = [h for h in held if h is not None]
    return {
        "snapshots": list(series.labels),
        "times_ns": list(series.times_ns),
        "span_s": series.span_s,
        "dating": series.dating,
        "step_s": series.step_s,
        "moved_ranks": ranks.compact(moved),
        "unchanged_ranks": ranks.compact(still),
        "longest_unchanged_s": max(known) if known else None,
    }
