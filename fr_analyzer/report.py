"""Render an Analysis as text (tabulate) or as the `fr-analyze.report/1` JSON; return strings.

The text report is made for one screen at 3 a.m.: a header saying what was loaded, one verdict
sentence, then the findings table with each group's first finding first. The JSON report carries
the same content with stable keys (documented in the README); keys may be added, never renamed.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from tabulate import tabulate

from . import __version__
from .diagnosis import Diagnosis, OpRef, RootCause
from .dumps import EntryTable
from .findings import describe_group
from .groups import GroupTable
from .model import STATE_NAMES, Finding, State, UnitKind
from .pipeline import Analysis
from .ranks import compact, label

SCHEMA = "fr-analyze.report/1"
DETAIL_WIDTH = 72


def capped(findings: Sequence[Finding], cap: int | None) -> tuple[list[Finding], dict[str, int]]:
    """Keep at most `cap` findings per group; count the rest per group name."""
    if cap is None:
        return list(findings), {}
    kept: list[Finding] = []
    seen: Counter[int] = Counter()
    omitted: Counter[str] = Counter()
    for f in findings:
        key = f.group.uid if f.group is not None else -1
        seen[key] += 1
        if seen[key] <= cap:
            kept.append(f)
        else:
            omitted[f.group.name if f.group is not None else ""] += 1
    return kept, dict(omitted)


def ordered(analysis: Analysis) -> list[Finding]:
    """The verdict's finding, then each group's first finding, then the rest in order."""
    findings = list(analysis.findings)
    root = analysis.verdict.finding
    firsts: list[Finding] = []
    rest: list[Finding] = []
    seen: set[int] = set()
    for f in findings:
        if f is root:
            continue
        key = f.group.uid if f.group is not None else -1
        (rest if key in seen else firsts).append(f)
        seen.add(key)
    return ([root] if root is not None else []) + firsts + rest


def _stats(analysis: Analysis) -> dict[str, int]:
    units = analysis.matches.collectives
    return {
        "entries": analysis.table.n,
        "groups": len(analysis.groups.groups),
        "collectives": len(units.seq),
        "collectives_passed": int(units.passed.sum()),
        "p2p_pairs": len(analysis.matches.p2p.send_row),
    }


# ---------------------------------------------------------------------------------------------
# Text


def render_text(
    analysis: Analysis, *, verbose: bool = False, cap: int | None = None, ranks: bool = False
) -> str:
    s = analysis.summary
    lines = [f"fr-analyze {__version__}: {s.directory}"]
    versions = ", ".join(
        f"{v}" + (f" ({compact(r)})" if len(s.versions) > 1 else "") for v, r in s.versions.items()
    )
    lines.append(
        f"ranks loaded: {len(s.ranks_loaded)} ({compact(s.ranks_loaded)})   format: {versions}"
        f"   backend: {', '.join(s.backends) or '-'}"
        f"   comm lib: {', '.join(s.comm_lib_versions) or '-'}"
    )
    lines.append(
        f"missing dumps: {compact(s.ranks_missing) if s.ranks_missing else 'none'}   "
        f"unreadable: {len(s.unreadable) or 'none'}"
    )
    for u in s.unreadable[:10]:
        lines.append(f"  unreadable: {u.file} (rank {u.rank}): {u.reason}")
    if len(s.unreadable) > 10:
        lines.append(f"  ... and {len(s.unreadable) - 10} more unreadable files")
    for w in s.warnings:
        lines.append(f"warning: {w}")
    if s.ignored_files:
        lines.append(f"ignored {len(s.ignored_files)} file(s) that are not rank dumps of this set")
    stats = _stats(analysis)
    lines.append("")
    v = analysis.verdict
    root = analysis.diagnosis.root_cause
    agreed = (
        f"{stats['collectives']} collectives and {stats['p2p_pairs']} send/recv pairs matched "
        f"across {len(s.ranks_loaded)} ranks in {stats['groups']} group(s)"
    )
    if v.finding is None and root is None:
        lines.append(f"VERDICT: OK. No desync found: {agreed}.")
    elif v.finding is None and root is not None:
        state = "SLOW" if root.kind.value == "straggler" else "HUNG"
        lines.append(
            f"VERDICT: {state}. The ranks agree on every op ({agreed}), but: {root.sentence}"
        )
    else:
        lines.append(f"VERDICT: {v.status.value.upper()}. {v.summary}")
    if root is not None:
        lines += render_root_cause(root)
    findings, omitted = capped(ordered(analysis), cap)
    if findings:
        lines.append("")
        lines.append(f"Findings ({len(analysis.findings)}):")
        rows = [_finding_row(f) for f in findings]
        lines.append(
            tabulate(
                rows,
                headers=["kind", "group", "desc", "seq", "op", "ranks", "culprit", "detail"],
                tablefmt="simple",
                maxcolwidths=[None, 12, 16, None, 24, 14, 14, DETAIL_WIDTH],
            )
        )
        for name, count in omitted.items():
            lines.append(f"({count} more finding(s) in group {name!r} not shown: --mismatch-cap)")
    if root is not None or ranks:
        lines += ["", render_stacks(analysis.diagnosis)]
    if ranks or verbose:
        lines += ["", render_positions(analysis.diagnosis)]
    if verbose:
        lines.append("")
        lines.append(render_groups(analysis.groups))
    return "\n".join(lines) + "\n"


def _seq_text(f: Finding) -> str:
    if f.collective_seq_id is not None:
        return f"c{f.collective_seq_id}"
    if f.p2p_seq_id is not None:
        return f"p{f.p2p_seq_id}"
    return "-"


def _finding_row(f: Finding) -> list[str]:
    return [
        f.kind.value,
        f.group.name if f.group else "-",
        f.group.desc if f.group else "-",
        _seq_text(f),
        f.op or "-",
        compact(f.ranks),
        compact(f.culprit_ranks),
        f.detail,
    ]


def render_root_cause(root: RootCause) -> list[str]:
    lines = ["", f"ROOT CAUSE: {root.kind.value}, {label(root.ranks)}. {root.sentence}"]
    lines += [f"  - {e}" for e in root.evidence]
    if len(root.wait_chain) > 1:
        steps = []
        for rank, group, seq in root.wait_chain:
            where = f" (group {group!r} #{seq})" if group is not None else ""
            steps.append(f"rank {rank}{where}")
        lines.append("  wait chain: " + " -> waits for -> ".join(steps))
    return lines


def render_stacks(diagnosis: Diagnosis, limit: int = 6) -> str:
    """Distinct stacks of the ops ranks are blocked in (idle ranks: their newest op)."""
    out = ["Stacks of the blocking op of each rank (idle ranks: newest op), innermost first:"]
    if not diagnosis.stacks:
        return out[0] + " none"
    for i, group in enumerate(diagnosis.stacks):
        if i >= limit and not group.odd:
            continue
        mark = "  <-- odd one out" if group.odd else ""
        out.append(f"[{len(group.ranks)} rank(s): {compact(group.ranks)}]{mark}")
        if group.stack is None:
            out.append("    (no stack in the dump: gloo JSON dumps and slow dumps omit frames)")
            continue
        for frame in group.stack:
            out.append(f"    {frame.name} at {frame.filename}:{frame.line}")
    return "\n".join(out)


def _op_text(ref: OpRef | None, sizes: bool = False) -> str:
    if ref is None:
        return "-"
    return ref.describe() + (f" {ref.sizes}" if sizes and ref.sizes != "[]" else "")


def render_positions(diagnosis: Diagnosis) -> str:
    body = []
    for p in diagnosis.positions:
        body.append(
            [
                p.group.name,
                p.group.desc,
                compact(p.ranks),
                _op_text(p.last_completed),
                _op_text(p.first_incomplete, sizes=True),
                "-" if p.oldest_age_s is None else f"{p.oldest_age_s:.1f}s",
            ]
        )
    blocked = [s for s in diagnosis.ranks if s.blocked is not None]
    out = [
        "Where every rank stands (ranks in the same position share a row):",
        tabulate(
            body,
            headers=[
                "group",
                "desc",
                "ranks",
                "last completed",
                "first not completed",
                "enqueued ago",
            ],
            tablefmt="simple",
            maxcolwidths=[12, 16, 30, 40, 40, 12],
        ),
    ]
    if blocked:
        rows: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for s in blocked:
            assert s.blocked is not None
            rows[(s.blocked.group.name, s.blocked.describe(), compact(s.waits_for))].append(s.rank)
        table = [
            [compact(r), g, op, w if w != "-" else "nobody"]
            for (g, op, w), r in sorted(rows.items(), key=lambda kv: min(kv[1]))
        ]
        out += [
            "",
            "Blocked ranks:",
            tabulate(
                table,
                headers=["ranks", "group", "blocked in", "waiting for"],
                tablefmt="simple",
                maxcolwidths=[30, 12, 40, 30],
            ),
        ]
    return "\n".join(out)


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
    }


def render_groups(groups: GroupTable) -> str:
    rows = [
        [g.uid, g.name, g.desc, g.size, compact(g.ranks), g.source.value] for g in groups.groups
    ]
    out = [
        "Process groups:",
        tabulate(
            rows,
            headers=["id", "name", "desc", "size", "ranks", "membership from"],
            tablefmt="simple",
            maxcolwidths=[None, 24, 24, None, 40, None],
        ),
    ]
    by_rank: dict[int, list[int]] = defaultdict(list)
    for g in groups.groups:
        for r in g.ranks:
            by_rank[r].append(g.uid)
    same: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for r, uids in by_rank.items():
        same[tuple(uids)].append(r)
    loaded = set(groups.loaded_ranks)
    rows2 = []
    for group_ids, members in sorted(same.items(), key=lambda kv: min(kv[1])):
        no_dump = [r for r in members if r not in loaded]
        rows2.append(
            [
                compact(members),
                ", ".join(groups.groups[u].name for u in group_ids),
                compact(no_dump) if no_dump else "",
            ]
        )
    out += [
        "",
        "Memberships (ranks with the same groups share a row):",
        tabulate(
            rows2,
            headers=["ranks", "groups", "no dump"],
            tablefmt="simple",
            maxcolwidths=[40, 60, 30],
        ),
    ]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# JSON


def finding_json(f: Finding) -> dict[str, Any]:
    return {
        "kind": f.kind.value,
        "group": f.group.name if f.group else None,
        "group_desc": f.group.desc if f.group else None,
        "group_ranks": list(f.group.ranks) if f.group else [],
        "collective_seq_id": f.collective_seq_id,
        "p2p_seq_id": f.p2p_seq_id,
        "op": f.op or None,
        "ranks": list(f.ranks),
        "culprit_ranks": list(f.culprit_ranks),
        "detail": f.detail,
    }


def report_dict(analysis: Analysis, *, cap: int | None = None) -> dict[str, Any]:
    s = analysis.summary
    v = analysis.verdict
    verdict: dict[str, Any] = {"status": v.status.value}
    if v.finding is not None:
        verdict.update(
            {k: val for k, val in finding_json(v.finding).items() if k not in ("ranks", "detail")}
        )
    else:
        verdict.update(
            {
                "kind": None,
                "group": None,
                "group_desc": None,
                "group_ranks": [],
                "collective_seq_id": None,
                "p2p_seq_id": None,
                "op": None,
                "culprit_ranks": [],
            }
        )
    root = analysis.diagnosis.root_cause
    verdict["summary"] = root.sentence if v.finding is None and root is not None else v.summary
    verdict["root_cause"] = root.kind.value if root is not None else None
    verdict["root_cause_ranks"] = list(root.ranks) if root is not None else []
    findings, omitted = capped(ordered(analysis), cap)
    return {
        "schema": SCHEMA,
        "tool": {"name": "fr-analyze", "version": __version__},
        "dumps": {
            "directory": s.directory,
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
        },
        "verdict": verdict,
        "root_cause": root_cause_json(analysis.diagnosis.root_cause),
        "findings": [finding_json(f) for f in findings],
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
        "stats": _stats(analysis),
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
                "last_completed": _op_text(p.last_completed) if p.last_completed else None,
                "first_incomplete": (
                    _op_text(p.first_incomplete, sizes=True) if p.first_incomplete else None
                ),
                "oldest_age_s": p.oldest_age_s,
            }
            for p in analysis.diagnosis.positions
        ],
    }


def render_json(analysis: Analysis, *, cap: int | None = None) -> str:
    return json.dumps(report_dict(analysis, cap=cap), indent=2) + "\n"


# ---------------------------------------------------------------------------------------------
# Side-by-side entries


def render_entries(
    table: EntryTable,
    groups: GroupTable,
    *,
    ranks: Sequence[int] | None = None,
    pg_filters: Sequence[str] = (),
    stack: bool = False,
) -> str:
    """Each group's entries, one column per rank, one row per op aligned by sequence ids."""
    out: list[str] = []
    if not table.n:
        return "no entries\n"
    wanted = set(ranks) if ranks is not None else None
    p2p_like = np.isin(table.unit, (UnitKind.P2P, UnitKind.BATCH_MEMBER, UnitKind.BATCH_MARKER))
    for group in groups.groups:
        if pg_filters and not any(p in (group.name, group.desc) for p in pg_filters):
            continue
        rows = np.flatnonzero(groups.entry_group == group.uid)
        if wanted is not None:
            rows = rows[np.isin(table.rank[rows], list(wanted))]
        if not len(rows):
            continue
        cells: dict[tuple[int, int, int, int], dict[int, str]] = defaultdict(dict)
        position: Counter[tuple[int, int, int, int]] = Counter()
        for r in rows.tolist():
            rank = int(table.rank[r])
            base = (int(table.coll_seq[r]), int(table.p2p_seq[r]), int(p2p_like[r]))
            pos = position[(rank, *base)]
            position[(rank, *base)] += 1
            cells[(*base, pos)][rank] = _cell(table, r, stack)
        shown = sorted({int(x) for x in np.unique(table.rank[rows])})
        body = []
        for key in sorted(cells):
            coll, p2p, is_p2p, _ = key
            label = f"p{p2p}" if is_p2p else f"c{coll}"
            body.append([label] + [cells[key].get(rank, "") for rank in shown])
        out.append(f"== {describe_group(group)} (membership from {group.source.value})")
        out.append(
            tabulate(body, headers=["seq"] + [f"rank {r}" for r in shown], tablefmt="simple")
        )
        out.append("")
    if not out:
        return "no entries match the filters\n"
    return "\n".join(out)


def _cell(table: EntryTable, row: int, stack: bool) -> str:
    name = table.profiling_names[int(table.pname[row])]
    op = name.partition(":")[2] or name
    state = STATE_NAMES[State(int(table.state[row]))]
    if bool(table.retired[row]):
        state += ",retired"
    shapes = table.shapes[int(table.in_shape[row])]
    sizes = str([list(s) for s in shapes]).replace(" ", "") if shapes else ""
    text = f"{op} {sizes} {state}".replace("  ", " ")
    if stack:
        code = int(table.stack[row])
        if code >= 0:
            for frame in table.stacks[code][:6]:
                text += f"\n  {frame.name} {frame.filename}:{frame.line}"
        else:
            text += "\n  (no stack in dump)"
    return text
