"""The JSON report, schema `fr-analyze.report/1` (documented in docs/json-report.md): the same
answer as the text report, from the same `Conclusion`, with stable keys. Keys are added, never
renamed or dropped without a new schema version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import __version__
from ..model import ranks
from ..pipeline import Analysis
from .output import write_atomic
from .presentation import (
    capped,
    finding_record,
    judged_record,
    next_steps,
    op_text,
    root_cause_record,
    series_record,
    verdict_record,
    when_where,
    when_where_record,
)
from .renderer import ReportOptions

SCHEMA = "fr-analyze.report/1"

# the shared records under the names this module has always exported
finding_json = finding_record
judged_json = judged_record
root_cause_json = root_cause_record
verdict_json = verdict_record
series_json = series_record


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


def report_dict(analysis: Analysis, *, cap: int | None = None) -> dict[str, Any]:
    """The JSON report (`fr-analyze.report/1`) as a dict, at most `cap` findings listed."""
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
            "engine": s.engine or "one process",
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
        "verdict": verdict_json(c) | {"when_where": when_where_record(when_where(analysis))},
        "next_steps": [
            {"why": step.why, "command": step.command(), "runnable": bool(step.argv)}
            for step in next_steps(analysis)
        ],
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
            "entries": analysis.entries,
            "groups": len(analysis.groups.groups),
            "collectives": len(units.seq),
            "collectives_passed": int(units.passed.sum()),
            "p2p_pairs": analysis.matches.pairs_matched,
        },
        "stacks": [
            {
                "ranks": list(g.ranks),
                "odd": g.odd,
                "odd_ranks": list(g.odd_ranks),
                "frames_left_out": g.hidden,
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
    """The JSON report as indented text."""
    return json.dumps(report_dict(analysis, cap=cap), indent=2) + "\n"


def write(analysis: Analysis, destination: Path, options: ReportOptions) -> int:
    """The renderer: the JSON report written to `destination` atomically (`-`: standard
    output); the bytes written."""
    data = render_json(analysis, cap=options.cap).encode()
    write_atomic(destination, data)
    return len(data)
