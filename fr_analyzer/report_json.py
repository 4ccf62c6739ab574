"""The JSON report, schema `fr-analyze.report/1` (documented in the README): the same answer as
the text report, from the same `Conclusion`, with stable keys. Keys are added, never renamed or
dropped without a new schema version."""

from __future__ import annotations

import json
from typing import Any

from . import __version__, ranks
from .ages import DumpTime
from .conclusion import Conclusion, Judged
from .diagnosis import RootCause
from .model import Finding, Group
from .pipeline import Analysis
from .report import capped, op_text
from .series import Series

SCHEMA = "fr-analyze.report/1"


def _place(
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


def finding_json(f: Finding) -> dict[str, Any]:
    return (
        {"kind": f.kind.value}
        | _place(f.group, f.collective_seq_id, f.p2p_seq_id, f.op)
        | {"ranks": list(f.ranks), "culprit_ranks": list(f.culprit_ranks), "detail": f.detail}
    )


def judged_json(j: Judged) -> dict[str, Any]:
    return finding_json(j.finding) | {
        "explained_by_root_cause": j.explained,
        "role": j.role.value,
        "explanation": j.link or None,
    }


def root_cause_json(root: RootCause | None) -> dict[str, Any] | None:
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


def verdict_json(c: Conclusion) -> dict[str, Any]:
    """The answer in one object: status, and the root cause's group, seq ids and culprits."""
    root = c.root
    finding = c.root_finding
    out: dict[str, Any] = (
        {"status": c.status.value, "kind": None}
        | _place(None, None, None, "")
        | {"culprit_ranks": []}
    )
    if root is not None:
        out.update(
            {"kind": finding.kind.value if finding is not None else root.kind.value}
            | _place(root.group, root.collective_seq_id, root.p2p_seq_id, root.op)
            | {"culprit_ranks": list(root.ranks)}
        )
    elif c.findings and c.status.value != "ok":
        first = c.findings[0].finding
        out.update({k: v for k, v in finding_json(first).items() if k not in ("ranks", "detail")})
    t = c.timing
    out.update(
        {
            "summary": c.answer,
            "root_cause": root.kind.value if root is not None else None,
            "root_cause_ranks": list(root.ranks) if root is not None else [],
            "timing": {
                "dump_time_ns": t.dump.at_ns,
                "dump_time_exact": t.dump.exact,
                "dump_time_basis": t.dump.basis,
                "dump_time_evidence": _evidence(t.dump),
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


def series_json(series: Series | None) -> dict[str, Any] | None:
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


def python_stacks_json(analysis: Analysis) -> dict[str, Any] | None:
    """The culprits' Python threads from the stacks file beside the dumps, if there is one."""
    py = analysis.python_stacks
    if py is None:
        return None
    root = analysis.conclusion.root
    shown = list(root.ranks) if root is not None else []
    return {
        "file": py.file,
        "ranks_with_stacks": ranks.compact(sorted(py.by_rank)),
        "culprits": {
            str(rank): [
                {"thread": th.name, "frames": list(th.frames)} for th in py.by_rank.get(rank, ())
            ]
            for rank in shown
        },
    }


def _evidence(dump: DumpTime) -> dict[str, str]:
    """What dated each rank's dump, as rank ranges by kind of evidence ("looked_at",
    "file_time", "lower_bound")."""
    by_kind: dict[str, list[int]] = {}
    for rank, evidence in sorted(dump.evidence.items()):
        by_kind.setdefault(evidence.name.lower(), []).append(rank)
    return {kind: ranks.compact(found) for kind, found in by_kind.items()}


def report_dict(analysis: Analysis, *, cap: int | None = None) -> dict[str, Any]:
    s = analysis.summary
    c = analysis.conclusion
    units = analysis.matches.collectives
    kept, omitted = capped(c.findings, cap)
    return {
        "schema": SCHEMA,
        "tool": {"name": "fr-analyze", "version": __version__},
        "dumps": {
            "directory": s.directory,
            "source": {"kind": s.source_kind, "location": s.directory},
            "ranks_loaded": list(s.ranks_loaded),
            "ranks_missing": list(s.ranks_missing),
            "unreadable": [
                {"file": u.file, "rank": u.rank, "reason": u.reason} for u in s.unreadable
            ],
            "versions": {k: list(r) for k, r in s.versions.items()},
            "backend": ",".join(s.backends),
            "comm_lib_versions": list(s.comm_lib_versions),
            "ignored_files": list(s.ignored_files),
            "warnings": list(s.warnings),
            "readers": {name: list(ranks) for name, ranks in s.readers.items()},
        },
        "verdict": verdict_json(c),
        "series": series_json(analysis.series),
        "python_stacks": python_stacks_json(analysis),
        "root_cause": root_cause_json(c.root),
        "findings": [judged_json(j) for j in kept],
        "findings_omitted": omitted,
        "groups": [
            {
                "id": g.uid,
                "name": g.name,
                "desc": g.desc,
                "ranks": list(g.ranks),
                "membership_source": g.source.value,
            }
            for g in analysis.groups.groups
        ],
        "stats": {
            "entries": analysis.table.n,
            "groups": len(analysis.groups.groups),
            "collectives": len(units.seq),
            "collectives_passed": int(units.passed.sum()),
            "p2p_pairs": len(analysis.matches.p2p.send_row),
        },
        "stacks": [
            {
                "ranks": list(g.ranks),
                "odd": g.odd,
                "frames": None
                if g.stack is None
                else [[f.name, f.filename, f.line] for f in g.stack],
            }
            for g in analysis.diagnosis.stacks
        ],
        "positions": [
            {
                "group": p.group.name,
                "ranks": list(p.ranks),
                "last_completed": op_text(p.last_completed) if p.last_completed else None,
                "first_incomplete": (
                    op_text(p.first_incomplete, sizes=True) if p.first_incomplete else None
                ),
                "oldest_age_s": p.oldest_age_s,
            }
            for p in analysis.diagnosis.positions
        ],
    }


def render_json(analysis: Analysis, *, cap: int | None = None) -> str:
    return json.dumps(report_dict(analysis, cap=cap), indent=2) + "\n"
