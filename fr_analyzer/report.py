"""The text report, made for one screen at 3 a.m.; returns a string.

Its first block is the answer (`Conclusion.answer`) with the evidence, the wait chain and the
culprit's own code line; then the symptoms the root cause explains, grouped and counted; then the
findings independent of it. `verbose` adds every finding, the positions of every rank and the
process groups. The answer is rendered first and on its own: if a later section fails on
something unexpected, that section says so and the rest of the report is still printed.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from tabulate import tabulate

from . import __version__
from .conclusion import Conclusion, Judged, Role
from .diagnosis import Diagnosis, RootCause
from .groups import GroupTable
from .model import Finding, Status
from .pipeline import Analysis
from .positions import OpRef
from .ranks import compact, label
from .series import Series

DETAIL_WIDTH = 72


def table(
    rows: Sequence[Sequence[Any]], headers: Sequence[str], widths: Sequence[int | None]
) -> str:
    """A plain table. Cells are text, never parsed as numbers: a rank list such as
    `264,272,280` is not a number. Cells are wrapped here, not by tabulate, whose wrapping
    parses such a cell as a number with thousands separators and fails (tabulate 0.10)."""
    return tabulate(
        [[_wrap(str(c), w) for c, w in zip(row, widths, strict=False)] for row in rows],
        headers=list(headers),
        tablefmt="simple",
        disable_numparse=True,
    )


def _wrap(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    lines = [textwrap.fill(line, width, break_on_hyphens=False) for line in text.splitlines()]
    return "\n".join(line for line in lines if line.strip())


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


def render_text(
    analysis: Analysis, *, verbose: bool = False, cap: int | None = None, ranks: bool = False
) -> str:
    c = analysis.conclusion
    sections: list[tuple[str, Callable[[], list[str]]]] = [
        ("header", lambda: _header(analysis)),
        ("answer", lambda: render_answer(c)),
        ("python stacks", lambda: render_python_stacks(analysis)),
        ("symptoms", lambda: _symptoms(c, verbose)),
        ("independent findings", lambda: _independent(c, cap)),
        ("in-flight ops", lambda: _in_flight(c, verbose)),
    ]
    if verbose:
        sections.append(("all findings", lambda: _all_findings(c, cap)))
    if c.root is not None or ranks or verbose:
        sections.append(("stacks", lambda: ["", render_stacks(analysis.diagnosis)]))
    if ranks or verbose:
        sections.append(("positions", lambda: ["", render_positions(analysis.diagnosis)]))
    if verbose:
        sections.append(("groups", lambda: ["", render_groups(analysis.groups)]))
    lines: list[str] = []
    for name, render in sections:
        try:
            lines += render()
        except Exception as exc:  # the answer above must reach the reader whatever fails here
            lines += [
                "",
                f"(the {name} section could not be rendered: {type(exc).__name__}: {exc})",
            ]
    return "\n".join(lines) + "\n"


def _header(analysis: Analysis) -> list[str]:
    s = analysis.summary
    source = f" ({s.source_what})" if s.source_what else ""
    lines = [f"fr-analyze {__version__}: {s.directory}{source}"]
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
    if analysis.series is not None:
        lines.append(_series_line(analysis.series))
    for w in s.warnings:
        lines.append(f"warning: {w}")
    if s.ignored_files:
        lines.append(f"ignored {len(s.ignored_files)} file(s) that are not rank dumps of this set")
    return lines


def _series_line(series: Series) -> str:
    span = series.span_s
    apart = f", {span:.0f} s from first to last" if span is not None else ""
    return (
        f"snapshots: {len(series.labels)} compared, the newest analyzed ({series.labels[-1]})"
        f"{apart}; dated by {series.dating}"
    )


PYTHON_STACK_RANKS = 4
"""Culprit ranks whose Python stacks are shown under the answer."""


def render_python_stacks(analysis: Analysis) -> list[str]:
    """The culprits' own Python stacks at the snapshot (the debug server's or py-spy's), where
    the dump folder has them: where a rank outside any collective really is."""
    py = analysis.python_stacks
    root = analysis.conclusion.root
    if py is None or root is None:
        return []
    lines: list[str] = []
    for rank in list(root.ranks)[:PYTHON_STACK_RANKS]:
        threads = py.by_rank.get(rank)
        if not threads:
            lines += ["", f"Python stack of rank {rank}: not in {py.file}"]
            continue
        lines += ["", f"Python stack of rank {rank} at the snapshot ({py.file}), innermost first:"]
        for thread in threads[:3]:
            if len(threads) > 1:
                lines.append(f"  {thread.name}")
            lines += [f"    {frame}" for frame in thread.frames[:8]]
    return lines


def render_answer(c: Conclusion) -> list[str]:
    """The answer paragraph, its evidence, the wait chain and the culprit's code."""
    lines = ["", c.answer]
    root = c.root
    if root is None:
        return lines
    lines += [f"  - {e}" for e in root.evidence]
    if len(root.wait_chain) > 1:
        lines.append("  wait chain: " + _chain(root))
    if root.code:
        who = label(root.ranks)
        lines.append(f"  {who}'s code (innermost frames that differ from its peers'):")
        lines += [f"    {f.name} at {f.filename}:{f.line}" for f in root.code]
    if c.status == Status.HUNG:
        lines.append(f"  timing: {c.timing.note}.")
    return lines


def _chain(root: RootCause) -> str:
    steps = []
    for rank, group, seq in root.wait_chain:
        where = f" (group {group!r} #{seq})" if group is not None else ""
        steps.append(f"rank {rank}{where}")
    return " -> waits for -> ".join(steps)


def _seq_text(f: Finding) -> str:
    if f.collective_seq_id is not None:
        return f"c{f.collective_seq_id}"
    if f.p2p_seq_id is not None:
        return f"p{f.p2p_seq_id}"
    return "-"


def _symptoms(c: Conclusion, verbose: bool) -> list[str]:
    """Symptoms grouped by kind and group, counted: a hang's cascade in a few lines."""
    symptoms = [
        j
        for j in c.having(Role.SYMPTOM) + c.having(Role.ROOT)
        if j.finding is not c.root_finding or verbose
    ]
    if not symptoms:
        return []
    grouped: dict[tuple[str, str, str], list[Judged]] = defaultdict(list)
    for j in symptoms:
        f = j.finding
        key = (f.kind.value, f.group.name if f.group else "-", f.group.desc if f.group else "-")
        grouped[key].append(j)
    rows = []
    for (kind, name, desc), js in grouped.items():
        seqs = [_seq_text(j.finding) for j in js]
        culprits = sorted({r for j in js for r in j.finding.culprit_ranks})
        rows.append(
            [
                kind,
                name,
                desc,
                len(js),
                seqs[0] if len(seqs) == 1 else f"{seqs[0]}..{seqs[-1]}",
                compact(culprits),
                js[0].link,
            ]
        )
    return [
        "",
        f"Symptoms explained by the root cause ({len(symptoms)} finding(s)):",
        table(
            rows,
            ["kind", "group", "desc", "count", "seq", "culprits", "explained by"],
            [None, 12, 16, None, 14, 24, 60],
        ),
    ]


def _finding_rows(judged: Sequence[Judged], role: bool = False) -> list[list[str]]:
    out = []
    for j in judged:
        f = j.finding
        row = [
            f.kind.value,
            f.group.name if f.group else "-",
            f.group.desc if f.group else "-",
            _seq_text(f),
            f.op or "-",
            compact(f.ranks),
            compact(f.culprit_ranks),
            f.detail,
        ]
        out.append(([j.role.value] if role else []) + row)
    return out


_HEADERS = ["kind", "group", "desc", "seq", "op", "ranks", "culprit", "detail"]
_WIDTHS: list[int | None] = [None, 12, 16, None, 24, 14, 14, DETAIL_WIDTH]


def _independent(c: Conclusion, cap: int | None) -> list[str]:
    independent = c.having(Role.INDEPENDENT)
    if not independent:
        return []
    kept, omitted = capped(independent, cap)
    title = "Independent findings" if c.root is not None else "Findings"
    lines = ["", f"{title} ({len(independent)}):", table(_finding_rows(kept), _HEADERS, _WIDTHS)]
    for name, count in omitted.items():
        lines.append(f"({count} more finding(s) in group {name!r} not shown: --mismatch-cap)")
    return lines


def _in_flight(c: Conclusion, verbose: bool) -> list[str]:
    in_flight = c.having(Role.IN_FLIGHT)
    if not in_flight:
        return []
    lines = [
        "",
        f"In flight when dumped, not a problem ({len(in_flight)} finding(s); "
        + ("listed" if verbose else "-v lists them")
        + ")",
    ]
    if verbose:
        lines.append(table(_finding_rows(in_flight), _HEADERS, _WIDTHS))
    return lines


def _all_findings(c: Conclusion, cap: int | None) -> list[str]:
    if not c.findings:
        return []
    kept, omitted = capped(c.findings, cap)
    lines = [
        "",
        f"All findings ({len(c.findings)}):",
        table(_finding_rows(kept, role=True), ["role", *_HEADERS], [None, *_WIDTHS]),
    ]
    for name, count in omitted.items():
        lines.append(f"({count} more finding(s) in group {name!r} not shown: --mismatch-cap)")
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
            out.append(
                "    (no stack in the dump: JSON dumps, torchcomms and slow dumps omit frames)"
            )
            continue
        for frame in group.stack:
            out.append(f"    {frame.name} at {frame.filename}:{frame.line}")
    return "\n".join(out)


def op_text(ref: OpRef | None, sizes: bool = False) -> str:
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
                op_text(p.last_completed),
                op_text(p.first_incomplete, sizes=True),
                "-" if p.oldest_age_s is None else f"{p.oldest_age_s:.1f}s",
            ]
        )
    blocked = [s for s in diagnosis.ranks if s.blocked is not None]
    out = [
        "Where every rank stands (ranks in the same position share a row):",
        table(
            body,
            ["group", "desc", "ranks", "last completed", "first not completed", "enqueued ago"],
            [12, 16, 30, 40, 40, 12],
        ),
    ]
    if blocked:
        rows: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for s in blocked:
            if s.blocked is not None:
                key = (s.blocked.group.name, s.blocked.describe(), compact(s.waits_for))
                rows[key].append(s.rank)
        body2 = [
            [compact(r), g, op, w if w != "-" else "nobody"]
            for (g, op, w), r in sorted(rows.items(), key=lambda kv: min(kv[1]))
        ]
        out += [
            "",
            "Blocked ranks:",
            table(body2, ["ranks", "group", "blocked in", "waiting for"], [30, 12, 40, 30]),
        ]
    return "\n".join(out)


def render_groups(groups: GroupTable) -> str:
    rows = [
        [g.uid, g.name, g.desc, g.size, compact(g.ranks), g.source.value] for g in groups.groups
    ]
    out = [
        "Process groups:",
        table(
            rows,
            ["id", "name", "desc", "size", "ranks", "membership from"],
            [None, 24, 24, None, 40, None],
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
        table(rows2, ["ranks", "groups", "no dump"], [40, 60, 30]),
    ]
    return "\n".join(out)
