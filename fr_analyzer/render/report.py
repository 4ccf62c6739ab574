"""The text report, made for one screen at 3 a.m.: a string, a styled `rich` text, or (`write`,
the renderer) printed on the console it is given.

Both ends of it hold the answer. Its first block is the answer (`Conclusion.answer`) with the
evidence, the wait chain, the culprit's own code line, when and where; its last lines are the
answer again in one line (status, culprit, op, group) and the one command to run next, so that
what stays on the screen when the command returns is what a person reads. By default the
report is at most `REPORT_LINES` lines at any job size (an 80x24 terminal holds it with the
command above it and the prompt below): between the two ends, the dumps read and one line that
says what `-v` adds. `verbose` puts everything between them: every next step, the symptoms the
root cause explains, folded into one line per kind and family of groups, the findings
independent of it, every finding, the stacks, the positions of every rank and the process
groups. `quiet` is the answer alone, in one to three lines. Every line fits `width` (none is
cut when `width` is None). The answer is rendered first and on its own: if a later section
fails on something unexpected, that section says so and the rest of the report is printed.

It is over 600 lines because each section of the report and its own failure handling is one
function here, at the width it is given; the sentences come from `presentation`.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..conclusion import Conclusion, Judged, Role
from ..diagnosis import Diagnosis, RootCause
from ..diagnosis.series import Series
from ..model.groups import GroupTable
from ..model.ranks import compact, label
from ..model.records import Status
from ..pipeline import Analysis
from .presentation import (
    capped,
    chain_steps,
    confidence_line,
    fit,
    fold_symptoms,
    headline,
    last_step,
    names_cut,
    next_steps,
    odd_one_out,
    op_text,
    plural,
    seq_text,
    when_where,
    when_where_lines,
    wrap,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from .renderer import ReportOptions

DETAIL_WIDTH = 72
ANSWER_LINES = 20
"""Most lines the answer block takes in a `-v` report, whatever the job's size."""
REPORT_LINES = 22
"""Most lines of the default report at any job size: with the command line above it and the
shell's prompt below it, all of it stays on an 80x24 terminal."""
QUIET_LINES = 3
"""Most lines of the `-q` report: the answer."""
NOTE_LINES = 3
"""Unreadable files and loader warnings listed in the default report; -v lists them all."""
SYMPTOM_LINES = 8
"""Folded symptom lines shown before `-v` is needed."""
INDEPENDENT_SHOWN = 12
"""Independent findings listed one by one; more are folded by kind and family."""


def table(
    rows: Sequence[Sequence[Any]],
    headers: Sequence[str],
    widths: Sequence[int | None],
    width: int | None = None,
) -> str:
    """A plain table. Cells are text, never parsed as numbers: a rank list such as
    `264,272,280` is not a number. Cells are wrapped here, not by tabulate, whose wrapping
    parses such a cell as a number with thousands separators and fails (tabulate 0.10). With
    `width`, the wrapped columns shrink until the table fits (lines still too wide are cut)."""
    from tabulate import tabulate  # here: the short report has no table (tabulate: ~30 ms)

    limits = list(widths)
    while True:
        text = tabulate(
            [
                [_wrap(names_cut(str(c)), w) for c, w in zip(row, limits, strict=False)]
                for row in rows
            ],
            headers=list(headers),
            tablefmt="simple",
            disable_numparse=True,
        )
        widest = max((len(line) for line in text.splitlines()), default=0)
        if width is None or widest <= width:
            return text
        shrinkable = [i for i, w in enumerate(limits) if w is not None and w > 8]
        if not shrinkable:
            return "\n".join(fit(text.splitlines(), width))
        i = max(shrinkable, key=lambda k: limits[k] or 0)
        limits[i] = max(8, (limits[i] or 0) - max(2, widest - width))


def _wrap(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    lines = [textwrap.fill(line, width, break_on_hyphens=False) for line in text.splitlines()]
    return "\n".join(line for line in lines if line.strip())


def render_text(
    analysis: Analysis,
    *,
    verbose: bool = False,
    cap: int | None = None,
    ranks: bool = False,
    width: int | None = None,
    quiet: bool = False,
) -> str:
    """The report as plain text; lines at most `width` characters (None: not wrapped). By
    default at most `REPORT_LINES` lines (unless `ranks` adds its tables); `verbose`: every
    section; `quiet`: the answer alone, at most `QUIET_LINES` lines."""
    if quiet:
        return "\n".join(quiet_lines(analysis.conclusion, width)) + "\n"
    return "\n".join(_lines(analysis, verbose, cap, ranks, width)) + "\n"


def quiet_lines(c: Conclusion, width: int | None) -> list[str]:
    """The answer in one to three lines (`-q`): the headline, and where another reading fits
    the dumps as well, the confidence and that reading in at most two more (-v says what
    would decide)."""
    lines = [_one_line(headline(c), width)]
    if c.alternatives:
        others = "; ".join(f"or {a.status.value.upper()}: {a.reading}" for a in c.alternatives)
        found = _fill(
            f"confidence: {c.confidence.value}; {others} (-v: what would decide)", width, "  "
        )
        keep = QUIET_LINES - 1
        if len(found) > keep:  # the rest joined into the last line, cut with `…`
            rest = " ".join(line.strip() for line in found[keep - 1 :])
            found = [*found[: keep - 1], _one_line("    " + rest, width)]
        lines += found
    return lines


def _one_line(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else fit([text], width)[0]


def write(analysis: Analysis, destination: Console | Path, options: ReportOptions) -> None:
    """The renderer: the styled report printed on `destination`, fit to its width, or to a
    file (a path) unwrapped and written atomically. A report that fails to render still
    prints the answer, with why the rest is missing."""
    from rich.text import Text

    if isinstance(destination, Path):
        from .output import write_atomic

        plain = render_text(
            analysis,
            verbose=options.verbose,
            cap=options.cap,
            ranks=options.ranks,
            quiet=options.quiet,
        )
        write_atomic(destination, plain.encode())
        return

    try:
        text = render_styled(
            analysis,
            verbose=options.verbose,
            cap=options.cap,
            ranks=options.ranks,
            width=destination.width,
            quiet=options.quiet,
        )
    except Exception as exc:  # the answer still reaches the reader
        text = Text(
            f"{analysis.conclusion.answer}\n(the report could not be rendered: "
            f"{type(exc).__name__}: {exc})\n"
        )
    destination.print(text, end="")


def render_styled(
    analysis: Analysis,
    *,
    verbose: bool = False,
    cap: int | None = None,
    ranks: bool = False,
    width: int | None = None,
    quiet: bool = False,
) -> Text:
    """The same report with colour for a terminal: the status word, the culprits, the next
    commands, odd stacks. The characters are those of `render_text`; only styles are added."""
    from rich.text import Text

    text = Text(
        render_text(analysis, verbose=verbose, cap=cap, ranks=ranks, width=width, quiet=quiet)
    )
    c = analysis.conclusion
    colour = {
        Status.OK: "bold green",
        Status.SLOW: "bold yellow",
        Status.INCOMPLETE: "bold yellow",
    }.get(c.status, "bold red")
    text.highlight_regex(r"(?m)^(OK|HUNG|DESYNC|SLOW|INCOMPLETE)\b\.?", colour)
    text.highlight_regex(r"(?m)^(HUNG|DESYNC|SLOW|INCOMPLETE|OK):", colour)
    if c.root is not None:
        culprit = label(c.root.ranks)
        text.highlight_regex(re.escape(culprit) + r"\b", "bold yellow")
    text.highlight_regex(r"(?m)^    (fr-analyze|ssh) .*$", "cyan")
    text.highlight_regex(r"<-- odd one out", "magenta")
    return text


def _lines(
    analysis: Analysis, verbose: bool, cap: int | None, ranks: bool, width: int | None
) -> list[str]:
    c = analysis.conclusion
    tail = _guarded("last lines", lambda: render_tail(analysis, width), width)
    if not verbose:
        return _short(analysis, cap, ranks, width, tail)
    sections: list[tuple[str, Callable[[], list[str]]]] = [
        ("answer", lambda: render_answer_block(analysis, width, limit=None)[1:]),
        ("dumps", lambda: ["", *_header(analysis, width, formats=True)]),
        ("next steps", lambda: render_next_steps(analysis, width)),
        ("dump notes", lambda: _dump_notes(analysis, width)),
        ("python stacks", lambda: render_python_stacks(analysis, width)),
        ("symptoms", lambda: _symptoms(c, True, width)),
        ("independent findings", lambda: _independent(c, cap, width)),
        ("in-flight ops", lambda: _in_flight(c, True, width)),
        ("all findings", lambda: _all_findings(c, cap, width)),
        (
            "stacks",
            lambda: ["", *render_stacks(analysis.diagnosis, width=width, root=c.root).splitlines()],
        ),
        ("positions", lambda: ["", *render_positions(analysis.diagnosis, width).splitlines()]),
        ("groups", lambda: ["", *render_groups(analysis.groups, width).splitlines()]),
    ]
    lines: list[str] = []
    for name, render in sections:
        lines += _guarded(name, render, width)
    return lines + tail


def _guarded(name: str, render: Callable[[], list[str]], width: int | None) -> list[str]:
    """A section's lines, or one that says why it could not be rendered: the answer above it
    must reach the reader whatever fails here."""
    try:
        return render()
    except Exception as exc:
        return [
            "",
            *_fill(
                f"(the {name} section could not be rendered: {type(exc).__name__}: {exc})", width
            ),
        ]


def _short(
    analysis: Analysis, cap: int | None, ranks: bool, width: int | None, tail: list[str]
) -> list[str]:
    """The default report: the answer, the dumps read, what `-v` adds, and the last lines, in
    at most `REPORT_LINES` lines. The answer block takes the room the others leave; with no
    root cause, the findings take what room is left after it. `ranks` adds its tables."""
    c = analysis.conclusion
    about = _guarded("dumps", lambda: ["", *_header(analysis, width, formats=False)], width)
    about = _cut(about, 5, width)  # a very long path or URL
    notes = _guarded("dump notes", lambda: _dump_notes(analysis, width, short=True), width)
    more = _guarded("more", lambda: _more(analysis, width), width)
    room = REPORT_LINES - len(tail) - len(about) - len(notes) - len(more)
    answer = _guarded(
        "answer",
        lambda: render_answer_block(analysis, width, limit=max(room, 4), code_frames=1)[1:],
        width,
    )
    answer = _cut(answer, max(room, 4), width)
    findings: list[str] = []
    if c.root is None:
        found = _guarded("findings", lambda: _independent(c, cap, width), width)
        findings = _cut(found, room - len(answer), width) if room - len(answer) > 2 else []
    extra: list[str] = []
    if ranks:
        extra += _guarded(
            "stacks",
            lambda: ["", *render_stacks(analysis.diagnosis, width=width, root=c.root).splitlines()],
            width,
        )
        extra += _guarded(
            "positions",
            lambda: ["", *render_positions(analysis.diagnosis, width).splitlines()],
            width,
        )
    return answer + findings + about + notes + more + extra + tail


def _cut(lines: list[str], room: int, width: int | None) -> list[str]:
    """At most `room` lines: the first ones, and a last one that says -v shows the rest."""
    if len(lines) <= room:
        return lines
    return [
        *lines[: room - 1],
        *_fill(f"  ... {plural(len(lines) - room + 1, 'more line')} (-v)", width),
    ][:room]


def _more(analysis: Analysis, width: int | None) -> list[str]:
    """One line: what `-v` adds to the default report, counted."""
    c = analysis.conclusion
    parts = []
    independent = len(c.having(Role.INDEPENDENT))
    if independent and c.root is not None:
        parts.append(plural(independent, "independent finding"))
    symptoms = len(c.having(Role.SYMPTOM))
    if symptoms:
        parts.append(plural(symptoms, "symptom"))
    in_flight = len(c.having(Role.IN_FLIGHT))
    if in_flight:
        parts.append(f"{plural(in_flight, 'op')} in flight")
    steps = len(next_steps(analysis))
    if steps > 1:
        parts.append(plural(steps - 1, "more next step"))
    if analysis.diagnosis.stacks:
        parts.append("stacks")
    parts.append("positions, groups")
    return _fill("-v adds: " + ", ".join(parts), width, "", "  ")


def render_tail(analysis: Analysis, width: int | None) -> list[str]:
    """The last lines, what stays on the screen: the answer in one line (`headline`), then
    the one command to run next under a comment that says why."""
    lines = ["", recap(analysis.conclusion, width)]
    step = last_step(analysis)
    if step is not None:
        lines += _fill(f"# next: {step.why}", width, "  ", "  # ")
        lines += _command(step.command(), width)
    return lines


def _fill(text: str, width: int | None, indent: str = "", hang: str | None = None) -> list[str]:
    """One paragraph, wrapped when there is a width."""
    if width is None:
        return [indent + text]
    return wrap(text, width, indent, hang)


def recap(c: Conclusion, width: int | None) -> str:
    """The answer in one line (`headline`), for the last lines of the report."""
    return _one_line(headline(c), width)


def _header(analysis: Analysis, width: int | None, formats: bool) -> list[str]:
    """The dumps read: where, how many ranks, which are missing or unreadable; `formats`
    adds their format, backend and comm lib versions."""
    s = analysis.summary
    said = "; ".join(w for w in (s.source_what, s.engine) if w)
    source = f" ({said})" if said else ""
    lines = _fill(f"fr-analyze {__version__}: {s.directory}{source}", width)
    lines += _fill(
        f"ranks loaded: {len(s.ranks_loaded)} ({compact(s.ranks_loaded)}); missing dumps: "
        f"{compact(s.ranks_missing) if s.ranks_missing else 'none'}; "
        f"unreadable: {len(s.unreadable) or 'none'}",
        width,
        "",
        "  ",
    )
    if formats:
        versions = ", ".join(
            f"{v}" + (f" ({compact(r)})" if len(s.versions) > 1 else "")
            for v, r in s.versions.items()
        )
        lines += _fill(
            f"format: {versions}; backend: {', '.join(s.backends) or '-'};"
            f" comm lib: {', '.join(s.comm_lib_versions) or '-'}",
            width,
            "  ",
            "    ",
        )
    if analysis.series is not None:
        lines += _fill(_series_line(analysis.series), width, "  ", "    ")
    if s.ignored_files:
        lines += _fill(
            f"ignored {plural(len(s.ignored_files), 'file')} that are not rank dumps of this set",
            width,
            "  ",
        )
    return lines


def _dump_notes(analysis: Analysis, width: int | None, short: bool = False) -> list[str]:
    """The unreadable files and the loader's warnings, after the answer: at scale they are
    many, and the answer must stay on the first screen. Ten of each, the rest counted; `short`
    (the default report): `NOTE_LINES` in all, one line each, cut at the width."""
    s = analysis.summary
    notes = [f"unreadable: {u.file} (rank {u.rank}): {u.reason}" for u in s.unreadable]
    shown = [*notes[: NOTE_LINES if short else 10]]
    if not short and len(s.unreadable) > 10:
        shown.append(f"... and {len(s.unreadable) - 10} more unreadable files (--json lists them)")
    warnings = [f"warning: {w}" for w in s.warnings]
    if short:
        shown += warnings[: NOTE_LINES - len(shown)]
        left = len(notes) + len(warnings) - len(shown)
        lines = [_one_line(note, width) for note in shown]
        if left:
            lines.append(f"... and {plural(left, 'more note')} (-v or --json lists them)")
        return ["", *lines] if lines else []
    shown += warnings[:10]
    if len(s.warnings) > 10:
        shown.append(f"... and {len(s.warnings) - 10} more warnings (--json lists them)")
    return ["", *(line for note in shown for line in _fill(note, width))] if shown else []


def _series_line(series: Series) -> str:
    span = series.span_s
    apart = f", {span:.0f} s from first to last" if span is not None else ""
    return (
        f"snapshots: {len(series.labels)} compared, the newest analyzed ({series.labels[-1]})"
        f"{apart}; dated by {series.dating}"
    )


PYTHON_STACK_RANKS = 4
"""Culprit ranks whose Python stacks are shown under the answer."""


def render_python_stacks(analysis: Analysis, width: int | None = None) -> list[str]:
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
            lines += ["", *_fill(f"Python stack of rank {rank}: not in {py.file}", width)]
            continue
        lines += [
            "",
            *_fill(
                f"Python stack of rank {rank} at the snapshot ({py.file}), innermost first:", width
            ),
        ]
        for thread in threads[:3]:
            if len(threads) > 1:
                lines += _fill(thread.name, width, "  ")
            for frame in thread.frames[:8]:
                lines += _fill(frame, width, "    ", "      ")
    return lines


CHAIN_STEPS = 4
"""Wait chain steps spelled out; a longer chain shows its first step and its last ones."""
CODE_FRAMES = 3
"""Frames of the culprit's own code in the answer block."""


def render_answer_block(
    analysis: Analysis,
    width: int | None,
    limit: int | None = ANSWER_LINES,
    code_frames: int = CODE_FRAMES,
) -> list[str]:
    """The answer with what supports it, in at most `limit` lines (after a blank one; None:
    all of it): the answer paragraph and the timing sentence always; then, as room allows, the
    evidence, the culprit's code, when and where, and the wait chain. What did not fit is
    counted in a last line that says how to see it."""
    c = analysis.conclusion
    root = c.root
    answer = _fill(c.answer, width)
    doubt = confidence_line(c)
    if doubt:
        answer += _fill(doubt, width, "  ", "    ")
    if root is None:
        return ["", *answer]
    timing = (
        _fill(f"timing: {c.timing.note}.", width, "  ", "    ") if c.status == Status.HUNG else []
    )
    evidence = [_fill(f"- {e}", width, "  ", "    ") for e in root.evidence]
    chain: list[str] = []
    if len(root.wait_chain) > 1:
        steps = chain_steps(root)
        if len(steps) > CHAIN_STEPS:
            hidden = len(steps) - CHAIN_STEPS + 1
            steps = [steps[0], f"({hidden} more)", *steps[-(CHAIN_STEPS - 2) :]]
        chain = _fill("wait chain: " + " -> waits for -> ".join(steps), width, "  ", "    ")
    code: list[str] = []
    if root.code:
        code = _fill(
            f"{label(root.ranks)}'s code (innermost frames that differ from its peers'):",
            width,
            "  ",
        )
        for f in root.code[:code_frames]:
            code.append(frame_line(f.name, f.filename, f.line, width, "    "))
    place = [
        line
        for sentence in when_where_lines(when_where(analysis))
        for line in _fill(sentence, width, "  ", "    ")
    ]
    # the last line says what was left out
    room = sys.maxsize if limit is None else limit - len(answer) - len(timing) - 1
    shown_evidence: list[list[str]] = []
    left_out: list[str] = []
    for i, item in enumerate(evidence):
        if i < 3 and len(item) <= room:
            shown_evidence.append(item)
            room -= len(item)
        else:
            left_out.append("evidence")
    parts: dict[str, list[str]] = {}
    for name, block in (("chain", chain), ("code", code), ("when", place)):
        if block and len(block) <= room:
            parts[name] = block
            room -= len(block)
        elif block:
            left_out.append({"code": "code", "when": "times", "chain": "wait chain"}[name])
    for item in evidence[len(shown_evidence) :]:
        if len(item) <= room:
            shown_evidence.append(item)
            room -= len(item)
            left_out.remove("evidence")
    lines = ["", *answer]
    lines += [line for item in shown_evidence for line in item]
    lines += parts.get("chain", []) + parts.get("code", []) + parts.get("when", [])
    lines += timing
    if left_out:
        counted = sorted(set(left_out), key=left_out.index)
        lines += _fill(
            f"(not shown here: {', '.join(counted)}; --json or -v has them)", width, "  "
        )
    return lines


def frame_line(name: str, filename: str, line: int, width: int | None, indent: str) -> str:
    """A stack frame on one line; a path too long for the width loses its leading folders
    (`…/core/tensor_parallel/mappings.py:31`): the file and line stay whole."""
    text = f"{indent}{name} at {filename}:{line}"
    if width is None or len(text) <= width:
        return text
    keep = width - len(f"{indent}{name} at …:{line}")
    if keep < 12:
        return fit([text], width)[0]
    tail = filename[-keep:]
    cut = tail.find("/")
    tail = tail[cut:] if 0 <= cut < len(tail) - 1 else tail
    return f"{indent}{name} at …{tail}:{line}"


def render_next_steps(analysis: Analysis, width: int | None) -> list[str]:
    """Commands to zoom in from the answer, each under a comment that says why."""
    steps = next_steps(analysis)
    if not steps:
        return []
    lines = ["", "Next steps:"]
    for step in steps:
        lines += _fill(f"# {step.why}", width, "  ", "  # ")
        lines += _command(step.command(), width)
    return lines


def _command(command: str, width: int | None) -> list[str]:
    """A shell command, continued with backslashes when it is wider than `width`; an option
    stays on the line of its value when they fit. A word longer than a line (a deep path) is
    split by a backslash-newline inside it, the next line starting at its first column: the
    shell joins the pieces back into one word."""
    indent, more = "    ", "      "
    if width is None or len(indent) + len(command) <= width:
        return [indent + command]
    room = width - len(more) - 2
    words: list[str] = []
    for word in command.split(" "):
        joined = f"{words[-1]} {word}" if words else ""
        if words and words[-1].startswith("-") and not word.startswith("-") and len(joined) <= room:
            words[-1] = joined
        else:
            words.append(word)
    lines: list[str] = []
    line = indent
    for word in words:
        if line.strip() and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = more
        line += ("" if not line.strip() else " ") + word
        while len(line) > width:  # one word longer than a line
            lines.append(line[: width - 1] + "\\")
            line = line[width - 1 :]
    lines.append(line)
    return lines


def _symptoms(c: Conclusion, verbose: bool, width: int | None) -> list[str]:
    """Symptoms folded into one line per kind and family of groups: a hang's cascade at any
    size in a few lines. `verbose` adds the table of every symptom."""
    symptoms = c.having(Role.SYMPTOM)
    if not symptoms:
        return []
    folds = fold_symptoms(c)
    lines = ["", f"Symptoms the root cause explains ({plural(len(symptoms), 'finding')}):"]
    for fold in folds[: SYMPTOM_LINES if not verbose else None]:
        lines += _fill(f"- {fold.sentence()}", width, "  ", "    ")
    if not verbose and len(folds) > SYMPTOM_LINES:
        lines.append(f"  ... and {plural(len(folds) - SYMPTOM_LINES, 'more line')} (-v)")
    if verbose:
        rows = [
            [
                j.finding.kind.value,
                j.finding.group.name if j.finding.group else "-",
                j.finding.group.desc if j.finding.group else "-",
                seq_text(j.finding),
                compact(j.held_up_ranks),
                compact(j.culprit_ranks),
                j.link,
            ]
            for j in symptoms
        ]
        lines += [
            "",
            table(
                rows,
                ["kind", "group", "desc", "seq", "held up", "waiting for", "explained by"],
                [None, 12, 16, None, 24, 14, 60],
                width,
            ),
        ]
    return lines


def _finding_rows(judged: Sequence[Judged], role: bool = False) -> list[list[str]]:
    out = []
    for j in judged:
        f = j.finding
        row = [
            f.kind.value,
            f.group.name if f.group else "-",
            f.group.desc if f.group else "-",
            seq_text(f),
            f.op or "-",
            compact(f.ranks),
            compact(f.culprit_ranks),
            f.detail,
        ]
        out.append(([j.role.value] if role else []) + row)
    return out


_HEADERS = ["kind", "group", "desc", "seq", "op", "ranks", "culprit", "detail"]
_WIDTHS: list[int | None] = [None, 12, 16, None, 24, 14, 14, DETAIL_WIDTH]


def _independent(c: Conclusion, cap: int | None, width: int | None) -> list[str]:
    independent = c.having(Role.INDEPENDENT)
    if not independent:
        return []
    kept, omitted = capped(independent, cap)
    title = "Independent findings" if c.root is not None else "Findings"
    lines = ["", f"{title} ({len(independent)}):"]
    if width is None or width >= 120:
        lines.append(table(_finding_rows(kept), _HEADERS, _WIDTHS, width))
    else:
        for j in kept[:INDEPENDENT_SHOWN]:
            f = j.finding
            where = f" in group {f.group.name!r} ({f.group.desc})" if f.group else ""
            seq = seq_text(f)
            at = f" at {seq}" if seq != "-" else ""
            culprits = f" [{label(f.culprit_ranks)}]" if f.culprit_ranks else ""
            lines += _fill(
                f"- {f.kind.value}{where}{at}{culprits}: {f.detail}", width, "  ", "    "
            )
        if len(kept) > INDEPENDENT_SHOWN:
            lines.append(
                f"  ... and {plural(len(kept) - INDEPENDENT_SHOWN, 'more finding')} "
                "(--json lists them)"
            )
    for name, count in omitted.items():
        lines += _fill(
            f"({plural(count, 'more finding')} in group {name!r} not shown: --mismatch-cap)",
            width,
        )
    return lines


def _in_flight(c: Conclusion, verbose: bool, width: int | None) -> list[str]:
    in_flight = c.having(Role.IN_FLIGHT)
    if not in_flight:
        return []
    lines = [
        "",
        *_fill(
            f"In flight when dumped, not a problem ({plural(len(in_flight), 'finding')}; "
            + ("listed" if verbose else "-v lists them")
            + ")",
            width,
        ),
    ]
    if verbose:
        lines.append(table(_finding_rows(in_flight), _HEADERS, _WIDTHS, width))
    return lines


def _all_findings(c: Conclusion, cap: int | None, width: int | None) -> list[str]:
    if not c.findings:
        return []
    kept, omitted = capped(c.findings, cap)
    lines = [
        "",
        f"All findings ({len(c.findings)}):",
        table(_finding_rows(kept, role=True), ["role", *_HEADERS], [None, *_WIDTHS], width),
    ]
    for name, count in omitted.items():
        lines.append(
            f"({plural(count, 'more finding')} in group {name!r} not shown: --mismatch-cap)"
        )
    return lines


def render_stacks(
    diagnosis: Diagnosis,
    limit: int = 6,
    width: int | None = None,
    root: RootCause | None = None,
) -> str:
    """Distinct stacks of the ops ranks are blocked in (idle ranks: their newest op); one group
    at most is marked the odd one out (`odd_one_out`: the one holding `root`'s culprits)."""
    out = ["Stacks of the blocking op of each rank (idle ranks: newest op), innermost first:"]
    if not diagnosis.stacks:
        return out[0] + " none"
    marked = odd_one_out(diagnosis.stacks, root)
    for i, group in enumerate(diagnosis.stacks):
        if i >= limit and i != marked:
            continue
        mark = ""
        if i == marked:
            odd = group.odd_ranks or group.ranks
            mark = "  <-- odd one out" + (
                f" ({label(odd)})" if set(odd) != set(group.ranks) else ""
            )
        out += _fill(f"[{plural(len(group.ranks), 'rank')}: {compact(group.ranks)}]{mark}", width)
        if group.stack is None:
            out += _fill(
                "(no stack in the dump: JSON dumps, torchcomms and slow dumps omit frames)",
                width,
                "    ",
            )
            continue
        for frame in group.stack:
            out.append(frame_line(frame.name, frame.filename, frame.line, width, "    "))
        if group.hidden:
            out.append(
                f"    ({plural(group.hidden, 'framework frame')} left out: torch.distributed)"
            )
    hidden = len(diagnosis.stacks) - sum(
        1 for i in range(len(diagnosis.stacks)) if i < limit or i == marked
    )
    if hidden:
        out.append(f"({plural(hidden, 'more stack')} not shown: --json lists them)")
    return "\n".join(out)


def render_positions(diagnosis: Diagnosis, width: int | None = None) -> str:
    """The table of where every rank stands in each group, for `--verbose` text reports."""
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
            width,
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
            table(body2, ["ranks", "group", "blocked in", "waiting for"], [30, 12, 40, 30], width),
        ]
    return "\n".join(out)


def render_groups(groups: GroupTable, width: int | None = None) -> str:
    """The table of the job's process groups and their members."""
    rows = [
        [g.uid, g.name, g.desc, g.size, compact(g.ranks), g.source.value] for g in groups.groups
    ]
    out = [
        "Process groups:",
        table(
            rows,
            ["id", "name", "desc", "size", "ranks", "membership from"],
            [None, 24, 24, None, 40, None],
            width,
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
        table(rows2, ["ranks", "groups", "no dump"], [40, 60, 30], width),
    ]
    return "\n".join(out)
