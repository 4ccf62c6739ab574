"""The HTML incident report: one self-contained page (inline CSS, JS and SVG, no network) that
shows the one `Conclusion` to a person in a browser.

The answer and its evidence are written into the page as HTML, so they read even with
JavaScript off. Everything else (where every rank stands, laid out on the job's mesh when the
process groups reveal one, else ranks by group families, and past a few hundred ranks
neighbours that stand alike folded into one cell; the wait chain; the culprit's stack beside its
peers' stacks of the same op; the findings and the process groups, every one of them reachable
page by page) is one JSON blob that the page's own script (`html/report.js`) draws. Dump
contents are hostile: the HTML part goes through `html.escape`, the JSON blob has `<`, `>` and
`&` escaped so it cannot end its script element, the script only ever puts dump strings into
text nodes and attributes, and a Content Security Policy lets no script run but the page's own
(by hash) and nothing load from anywhere.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import html
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from pathlib import Path, PurePath
from typing import Any

from .. import __version__
from ..conclusion import Conclusion
from ..diagnosis import Diagnosis, RootKind
from ..diagnosis.positions import OpRef, same_op_stacks
from ..model.ranks import compact, label
from ..model.records import Status, seq_id
from ..pipeline import Analysis
from .mesh import UNSPANNED, fold_runs, infer_mesh
from .output import write_atomic
from .presentation import (
    confidence_line,
    next_steps,
    op_text,
    root_cause_record,
    utc,
    verdict_record,
    when_where,
    when_where_lines,
)
from .rows import same_op_rows

FINDINGS_SHOWN = 300
"""Findings carried into the page (the root first); the rest are counted."""
WARNINGS_SHOWN = 30
UNREADABLE_SHOWN = 50
STACK_GROUPS_SHOWN = 12
PYTHON_STACK_RANKS = 4
"""Culprits whose Python stacks (from a stacks file beside the dumps) the page shows."""
WAIT_TARGETS_SHOWN = 8
"""Rank lists that others wait for, listed under the wait chain with how many wait for each."""
RANK_LIST_CHARS = 400
"""Longest rank list a table cell shows (the JSON report has every rank)."""
STACK_DEPTH = 8
"""Innermost frames of the peers' stacks set beside the culprit's (the analysis' default)."""


class Spot(enum.IntEnum):
    """Where one rank stands, as the picture colours it. The order is the legend's."""

    COMPLETED = 0  # every op it issued completed
    WAITING = 1  # blocked in an op, or held up (directly or not) by the root cause
    IN_FLIGHT = 2  # an op not completed, but nothing is stuck: the dump caught it running
    STUCK = 3  # the root cause's rank (never joined, stuck in an op, disagrees, deadlocked)
    DEAD = 4  # the root cause's rank, dead: no dump, or its activity stopped long before
    LATE = 5  # the root cause's rank of a slow job: the straggler
    NO_DUMP = 6  # no readable dump, and not the root cause


SPOT_NAMES = {
    Spot.COMPLETED: "completed",
    Spot.WAITING: "waiting",
    Spot.IN_FLIGHT: "in flight",
    Spot.STUCK: "stuck",
    Spot.DEAD: "dead",
    Spot.LATE: "late",
    Spot.NO_DUMP: "no dump",
}

_CULPRIT_WORDS = {
    RootKind.NOT_JOINED: "stuck: never joined",
    RootKind.STUCK_COLLECTIVE: "stuck in the op",
    RootKind.MISMATCH: "stuck: disagrees",
    RootKind.DEADLOCK: "stuck: deadlocked",
}
"""The legend's word for the culprit's colour, by the root cause's kind."""


def _short(ranks: Sequence[int]) -> str:
    """A compact rank list for a table cell, cut at `RANK_LIST_CHARS` with a count."""
    text = compact(ranks)
    if len(text) <= RANK_LIST_CHARS:
        return text
    return f"{text[:RANK_LIST_CHARS].rpartition(',')[0]},... ({len(set(ranks))} ranks)"


class _Strings:
    """Interned strings: repeated op texts and rank lists are sent once."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int:
        if text is None:
            return -1
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.values)
            self.values.append(text)
        return found


def _op_place(ref: OpRef | None) -> str | None:
    if ref is None:
        return None
    return f"{ref.describe()} in group {ref.group.name!r} ({ref.group.desc})"


def _world(analysis: Analysis) -> int:
    s = analysis.summary
    known = [
        *s.ranks_loaded,
        *s.ranks_missing,
        *(u.rank for u in s.unreadable if u.rank is not None),
    ]
    return max([analysis.groups.world_size, *(r + 1 for r in known)])


def _spots(analysis: Analysis, world: int) -> list[int]:
    """Each rank's `Spot`: the root cause's ranks by its kind; the others by whether they wait
    (blocked in an op, or held up by the root), which is in flight when nothing is stuck."""
    c, d = analysis.conclusion, analysis.diagnosis
    root = c.root
    culprit = Spot.STUCK
    if root is not None and root.kind == RootKind.DEAD_RANK:
        culprit = Spot.DEAD
    elif root is not None and root.kind == RootKind.STRAGGLER:
        culprit = Spot.LATE
    culprits = set(root.ranks) if root is not None else set()
    stuck = root is not None or c.timing.hung
    blocked = {s.rank for s in d.ranks if s.blocked is not None} | set(d.behind_root)
    loaded = set(analysis.summary.ranks_loaded)
    out: list[int] = []
    for rank in range(world):
        if rank in culprits:
            spot = culprit
        elif rank not in loaded:
            spot = Spot.NO_DUMP
        elif rank in blocked:
            spot = Spot.WAITING if stuck else Spot.IN_FLIGHT
        else:
            spot = Spot.COMPLETED
        out.append(int(spot))
    return out


def _ranks_data(analysis: Analysis, world: int, strings: _Strings) -> dict[str, Any]:
    """Per-rank columns, indexed by rank: spot, blocked op, newest op, whom it waits for, file
    (the texts interned)."""
    blocked = [-1] * world
    newest = [-1] * world
    waits = [-1] * world
    files = [-1] * world
    hosts = [-1] * world
    for s in analysis.diagnosis.ranks:
        if s.rank >= world:
            continue
        blocked[s.rank] = strings(_op_place(s.blocked))
        newest[s.rank] = strings(_op_place(s.newest))
        waits[s.rank] = strings(compact(s.waits_for)) if s.waits_for else -1
    for dump in analysis.dumps:
        if dump.rank < world:
            files[dump.rank] = strings(PurePath(dump.file).name)
            hosts[dump.rank] = strings(dump.host)
    unreadable = {
        u.rank: f"unreadable {PurePath(u.file).name}: {u.reason}"
        for u in analysis.summary.unreadable
        if u.rank is not None and u.rank < world
    }
    for rank, why in unreadable.items():
        files[rank] = strings(why)
    return {
        "spot": _spots(analysis, world),
        "blocked": blocked,
        "newest": newest,
        "waits": waits,
        "file": files,
        "host": hosts,
        "behind_root": compact(analysis.diagnosis.behind_root),
    }


def _positions_data(d: Diagnosis, strings: _Strings) -> list[list[Any]]:
    return [
        [
            p.group.uid,
            compact(p.ranks),
            strings(_op_text(p.last_completed)),
            strings(_op_text(p.first_incomplete, sizes=True)),
            None if p.oldest_age_s is None else round(p.oldest_age_s, 3),
        ]
        for p in d.positions
    ]


def _op_text(ref: OpRef | None, sizes: bool = False) -> str | None:
    return None if ref is None else op_text(ref, sizes)


def _python_stacks(analysis: Analysis) -> dict[str, Any] | None:
    """The culprits' Python threads from the stacks file beside the dumps, if there is one."""
    py = analysis.python_stacks
    root = analysis.conclusion.root
    if py is None or root is None:
        return None
    return {
        "file": py.file,
        "culprits": {
            str(rank): [
                {"thread": th.name, "frames": list(th.frames)} for th in py.by_rank.get(rank, ())
            ]
            for rank in root.ranks[:PYTHON_STACK_RANKS]
        },
    }


def _stacks_data(analysis: Analysis) -> dict[str, Any]:
    """The stack groups, and which two to set side by side: the culprit's and its peers' (the
    biggest other group among the root group's members, else the biggest other group)."""
    groups = analysis.diagnosis.stacks
    root = analysis.conclusion.root
    shown = [
        {
            "ranks": _short(g.ranks),
            "count": len(g.ranks),
            "odd": g.odd,
            "frames": None if g.stack is None else [[f.name, f.filename, f.line] for f in g.stack],
        }
        for g in groups
    ]
    culprit = peers = None
    if root is not None and root.ranks:
        culprit = next((i for i, g in enumerate(groups) if root.ranks[0] in g.ranks), None)
        near = set(root.group.ranks) if root.group is not None else set()
        others = [i for i in range(len(groups)) if i != culprit]
        ranked = sorted(others, key=lambda i: (-len(near & set(groups[i].ranks)), i))
        peers = ranked[0] if ranked else None
    keep = sorted({i for i in (culprit, peers) if i is not None} | set(range(STACK_GROUPS_SHOWN)))
    keep = [i for i in keep if i < len(shown)]
    return {
        "groups": [shown[i] for i in keep],
        "culprit": keep.index(culprit) if culprit is not None else None,
        "peers": keep.index(peers) if peers is not None else None,
        "omitted": len(shown) - len(keep),
        "culprit_rank": root.ranks[0] if root is not None and root.ranks else None,
        "same_op": _same_op_data(analysis),
    }


def _same_op_data(analysis: Analysis) -> dict[str, Any] | None:
    """The culprit's op (the one it is blocked in, else its newest) and the stack most of the
    other ranks that issued that same op share: what its own stack is set against, so that
    only frames that really differ are marked. None: no culprit, or no op of its own."""
    root = analysis.conclusion.root
    if root is None or not root.ranks:
        return None
    state = next((s for s in analysis.diagnosis.ranks if s.rank == root.ranks[0]), None)
    ref = None if state is None else state.blocked or state.newest
    if ref is None:
        return None
    t, groups = analysis.table, analysis.groups
    if analysis.calls is not None:  # the driver holds some rows only: fetch the op's
        t, groups, ref = same_op_rows(analysis, ref)
    found = same_op_stacks(t, groups, ref, STACK_DEPTH)
    issued = sum(len(g.ranks) for g in found)
    top = found[0] if found else None
    return {
        "op": _op_place(ref),
        "issued": issued,
        "ranks": None if top is None else _short(top.ranks),
        "count": 0 if top is None else len(top.ranks),
        "frames": None
        if top is None or top.stack is None
        else [[f.name, f.filename, f.line] for f in top.stack],
    }


def _findings_data(c: Conclusion) -> dict[str, Any]:
    rows = [
        {
            "role": j.role.value,
            "kind": j.finding.kind.value,
            "group": j.finding.group.name if j.finding.group else None,
            "desc": j.finding.group.desc if j.finding.group else None,
            "seq": _seq_text(j.finding.collective_seq_id, j.finding.p2p_seq_id),
            "op": j.finding.op or None,
            "ranks": _short(j.finding.ranks),
            "culprits": _short(j.finding.culprit_ranks),
            "detail": j.finding.detail,
            "link": j.link or None,
        }
        for j in c.findings[:FINDINGS_SHOWN]
    ]
    return {"rows": rows, "omitted": max(0, len(c.findings) - FINDINGS_SHOWN)}


def _seq_text(collective: int | None, p2p: int | None) -> str | None:
    if collective is not None:
        return seq_id(collective)
    if p2p is not None:
        return seq_id(p2p, p2p=True)
    return None


def _waiting_for(d: Diagnosis) -> list[list[Any]]:
    """The rank lists others wait for, most waited for first: [whom, how many, who]."""
    who: dict[tuple[int, ...], list[int]] = {}
    for s in d.ranks:
        if s.waits_for:
            who.setdefault(s.waits_for, []).append(s.rank)
    ordered = sorted(who.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [[label(k), len(v), _short(v)] for k, v in ordered[:WAIT_TARGETS_SHOWN]]


def page_data(analysis: Analysis) -> dict[str, Any]:
    """Everything the page's script draws, as plain JSON values."""
    s, c, d = analysis.summary, analysis.conclusion, analysis.diagnosis
    world = _world(analysis)
    strings = _Strings()
    mesh = infer_mesh(analysis.groups, world)
    root = c.root
    names = dict(SPOT_NAMES)
    if root is not None and root.kind in _CULPRIT_WORDS:
        names[Spot.STUCK] = _CULPRIT_WORDS[root.kind]
    t = c.timing
    families = Counter(g.desc or g.name for g in analysis.groups.groups)
    ranks = _ranks_data(analysis, world, strings)
    return {
        "version": __version__,
        "world": world,
        "spots": [names[spot] for spot in Spot],
        "mesh": None if mesh is None else [[m.name, m.size, m.stride] for m in mesh],
        "unspanned": UNSPANNED,
        "families": sorted(families),
        "verdict": verdict_record(c),
        "root": root_cause_record(root),
        "ranks": ranks,
        "runs": fold_runs(ranks, world),
        "positions": _positions_data(d, strings),
        "groups": [
            [g.uid, g.name, g.desc, g.size, compact(g.ranks), g.source.value]
            for g in analysis.groups.groups
        ],
        "stacks": _stacks_data(analysis),
        "python_stacks": _python_stacks(analysis),
        "findings": _findings_data(c),
        "waiting_for": _waiting_for(d),
        "timing": {
            "dump_time": utc(t.dump.at_ns),
            "dump_time_exact": t.dump.exact,
            "basis": t.dump.basis,
            "oldest_age_s": t.oldest_age_s,
            "note": t.note,
        },
        "dumps": {
            "directory": s.directory,
            "loaded": len(s.ranks_loaded),
            "loaded_ranks": compact(s.ranks_loaded),
            "missing": compact(s.ranks_missing) if s.ranks_missing else None,
            "unreadable": [[u.file, u.rank, u.reason] for u in s.unreadable[:UNREADABLE_SHOWN]],
            "unreadable_count": len(s.unreadable),
            "backends": list(s.backends),
            "versions": sorted(s.versions),
            "warnings": list(s.warnings[:WARNINGS_SHOWN]),
            "warnings_count": len(s.warnings),
        },
        "strings": strings.values,
    }


def _finite(value: Any) -> Any:
    """The value with every NaN or infinite float made None: the page's JSON.parse takes
    neither."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _script_json(value: Any) -> str:
    """JSON that is safe inside a `<script>` element: no `<`, `>` or `&` can end it or open a
    comment, whatever the dumps' strings hold."""
    text = json.dumps(_finite(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _asset(name: str) -> str:
    return (
        resources.files("fr_analyzer").joinpath("render", "html", name).read_text(encoding="utf-8")
    )


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _headline(c: Conclusion) -> str:
    """Status, culprit, op and group in one line: the page's title and first heading."""
    root = c.root
    parts = [c.status.value.upper()]
    if root is not None:
        parts.append(label(root.ranks))
        if root.op:
            seq = _seq_text(root.collective_seq_id, root.p2p_seq_id)
            parts.append(f"{root.op} {seq}" if seq else root.op)
        if root.group is not None:
            parts.append(f"group {root.group.name!r} ({root.group.desc})")
    return " · ".join(parts)


_BETWEEN_RANKS = re.compile(r"(?:(?<=\d)|(?<=</span>)),(?=\d|<span)")
_RANGE = re.compile(r"\d+-\d+")


def wrap_ranks(text: str) -> str:
    """`text` escaped, with a line break allowed after each comma of a rank list ("0-516,518")
    and none inside a range ("518-1023", where Chromium would break after the hyphen)."""
    kept = _RANGE.sub(lambda m: f'<span class="nowrap">{m[0]}</span>', html.escape(text))
    return _BETWEEN_RANKS.sub(",<wbr>", kept)


def _answer_html(analysis: Analysis) -> str:
    """The answer block, as static HTML (every dump string escaped): the answer, its evidence,
    the culprit's code, when and where, and the commands to run next."""
    e = html.escape
    c = analysis.conclusion
    root = c.root
    out = [
        f'<section id="answer" class="status-{e(c.status.value)}">',
        f'<h1><span class="badge">{e(c.status.value.upper())}</span> '
        f'<span id="headline">{e(_headline(c).partition(" · ")[2])}</span></h1>',
        '<div class="answer-main">',
        f'<p id="answer-text">{wrap_ranks(c.answer)}</p>',
    ]
    doubt = confidence_line(c)
    if doubt:
        out.append(f'<p id="confidence" class="ambiguous">{e(doubt)}.</p>')
    if root is not None and root.evidence:
        out.append('<ul id="evidence">')
        out += [f"<li>{wrap_ranks(item)}</li>" for item in root.evidence]
        out.append("</ul>")
    # The rest beside it on a wide screen, so that the picture's culprit is above the fold.
    out.append('</div><div class="answer-side">')
    if root is not None and root.code:
        out.append(
            f"<p>{e(label(root.ranks))}'s code (innermost frames that differ from its peers'):</p>"
        )
        out.append('<ol class="frames code">')
        out += [
            f"<li><b>{e(f.name)}</b> <span>{e(f.filename)}:{f.line}</span></li>" for f in root.code
        ]
        out.append("</ol>")
    if c.status == Status.HUNG or c.timing.blocked_ranks:
        out.append(f'<p class="timing">Timing: {e(c.timing.note)}.</p>')
    facts = when_where_lines(when_where(analysis))
    if facts:
        out.append('<ul class="when">')
        out += [f"<li>{e(line)}</li>" for line in facts]
        out.append("</ul>")
    steps = [s for s in next_steps(analysis) if "--html" not in s.argv]
    if steps:
        out.append('<p class="next">Next steps:</p><ul class="next">')
        out += [f"<li>{e(step.why)}:<br><code>{e(step.command())}</code></li>" for step in steps]
        out.append("</ul>")
    out.append("</div></section>")
    return "\n".join(out)


def _header_html(analysis: Analysis) -> str:
    e = html.escape
    s = analysis.summary
    said = "; ".join(w for w in (s.source_what, s.engine) if w)
    what = f" ({said})" if said else ""
    missing = compact(s.ranks_missing) if s.ranks_missing else "none"
    return (
        f'<header><span class="tool">fr-analyze {e(__version__)}</span> '
        f'<span class="dir">{e(s.directory)}{e(what)}</span> '
        f"<span>{len(s.ranks_loaded)} ranks loaded · missing: {wrap_ranks(missing)} · "
        f"backend: {e(', '.join(s.backends) or '-')}</span>{_TOC}</header>"
    )


# In the header's line, not below the answer, to keep the picture's culprit above the fold.
_TOC = """<nav id="toc"><a href="#picture">Ranks</a> <a href="#chain">Wait chain</a>
<a href="#stacks">Stacks</a> <a href="#findings">Findings</a> <a href="#groups">Groups</a>
<a href="#dumps">Dumps</a></nav>"""


_BODY = """
<section id="picture"><h2>Where every rank stands</h2>
<p id="layout-note"></p>
<div id="keys"><div id="legend"></div>
<div id="tools"><label>Rank <input id="find" type="number" min="0" step="1"
inputmode="numeric" aria-label="show a rank"></label>
<button id="to-culprit" type="button">Show the culprit</button>
<span id="hint">Hover or click a cell for its detail; click a group below to mark its
members.</span></div></div>
<div id="board"><div id="grid" role="img" aria-label="every rank, coloured by where it
stands"></div><aside id="detail" aria-live="polite"><p class="muted">Hover or click a rank.</p>
</aside></div>
</section>
<section id="chain"><h2>Wait chain</h2><div id="chain-graph"></div><div id="waiting-for"></div>
</section>
<section id="stacks"><h2>The culprit's stack beside its peers'</h2><div id="stack-pair"></div>
<div id="stack-others"></div><div id="py-stacks"></div></section>
<section id="findings"><h2>Findings</h2><div id="findings-table"></div></section>
<section id="groups"><h2>Process groups</h2>
<p><label>Filter <input id="group-filter" type="search" aria-label="filter the groups"
placeholder="name, desc or a rank"></label> <span id="group-count"></span>
<span id="group-pages"><button id="group-prev" type="button">Previous</button>
<button id="group-next" type="button">Next</button></span></p><div id="groups-table"></div>
</section>
<section id="dumps"><h2>Dumps</h2><div id="dumps-info"></div></section>
<noscript><p>The pictures and tables need JavaScript; the answer above does not.</p></noscript>
"""


def render_html(analysis: Analysis) -> str:
    """The whole page: one self-contained file, no network."""
    c = analysis.conclusion
    css = _asset("report.css")
    js = _asset("report.js")
    csp = (
        f"default-src 'none'; style-src {_csp_hash(css)}; script-src {_csp_hash(js)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    title = f"fr-analyze: {_headline(c)}"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">',  # no quote in it
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{css}</style>",
            "</head><body>",
            _header_html(analysis),
            _answer_html(analysis),
            _BODY,
            '<script type="application/json" id="fr-data">'
            + _script_json(page_data(analysis))
            + "</script>",
            f"<script>{js}</script>",
            "</body></html>",
            "",
        ]
    )


def write(analysis: Analysis, destination: Path) -> int:
    """The renderer: the page written to `destination` atomically; the bytes written."""
    data = render_html(analysis).encode()
    write_atomic(destination, data)
    return len(data)
