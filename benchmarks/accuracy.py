"""Accuracy campaign: draw simulated jobs with injected faults, analyze each, count right answers.

Each case is `tools.frsim.campaign.draw_case(seed)`: a layout (TP x PP x DP, 8 to 256 ranks), a
fault kind (never issues, extra op, size/dtype/op mismatch, stuck in a collective in three
variants, p2p mismatch, crash with no dump, straggler that finishes, healthy dumped at the end,
healthy dumped mid-step), a site, NCCL timing on/off or gloo, a ring-buffer size, a writer. The
simulator computes the right answer from the fault it injected (`Truth`), never from an
analyzer. A case is *right* when fr-analyze's conclusion has the same status and, when there is
a root cause, the same root kind, culprit ranks, group and sequence id, and every finding
explained by it (one fault was injected: no finding is independent of it). Cases the simulator
marks ambiguous by construction are counted apart, with their reason, never dropped.

With `--shapes all` (or a comma-separated list of "3d", "fsdp", "hsdp", "moe", "ddp",
"subgroups", "barrier") each seed draws one of those training shapes instead (frsim's
`shapes.py`: FSDP2, HSDP, MoE all_to_all, DDP buckets, `new_subgroups`, monitored barriers, on
NCCL or gloo); without it every seed draws the same 3D case as always.

With `--writer et` the same cases are written as each rank's Chakra Execution Trace
(`rank-<N>.et.json`, frsim's `et.py`) and judged against the truth an ET can show
(`tools.frsim.campaign.et_truth`): the dumps' truth where the fault changes what a rank issued
(skip, extra, mismatch, p2p mismatch, swap, stop_host, crash as a rank that stopped issuing),
"ok" where it does not (stuck kernels, network hangs, stragglers, healthy runs). An analyzer
error (it cannot read the traces) is a wrong answer, counted and shown like any other.

Each case's dump files are dated as frsim draws them (`tools.frsim.dating`): written by the
dump a little after its snapshot (0.2-3 s; 5-20 s with stack traces), or copied days later
without their times. A file time bounds a snapshot from above only, so where the dumps cannot
date a hang fr-analyze may print its likelier reading with `"confidence": "ambiguous"` and the
others in `verdict.alternatives` (the JSON report; absent: "high"). The tables count, per shape
and backend and per dating, the cases it called ambiguous and how many of those had the reading
it printed right (the judged ones: not ambiguous by construction); the dating table also counts
the verdicts whose `timing.age` is "unknown" (neither bound of the dump time settles it).

`--dating plain|stacks|copied` dates every case's files that way (the same cases otherwise), to
see what one kind of file time does to the answers.

With `--writer et --real N`, N real gloo jobs drawn from seeds `--first`.. by `tools/et_jobs.py`
(the faults of issue 47: an extra world op after a pair op of the same sizes, a rank killed
mid-call, gloo's abort on a size disagreement, a skip) run one at a time after the simulated
cases, and their share right per fault kind and backend is printed below the simulated tables
(`benchmarks/accuracy_real.py`); skipped with one line where torch cannot be imported.

Usage: `python -m benchmarks.accuracy [--cases 300] [--first 0] [--shapes all] [--workers 2]
[--writer dump|et] [--real N] [--dating drawn|plain|stacks|copied|none] [--out FILE]`
(`make accuracy`; `make accuracy-et` for the traces). Prints the share right, a table per
fault kind, one per shape and backend, one per dating of the files, the confusion of answers
and every wrong case; exits 1 unless every unambiguous case (and every real job) is right.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tabulate import tabulate

from fr_analyzer import analyze
from fr_analyzer.conclusion import Conclusion, Role
from fr_analyzer.errors import FrAnalyzerError
from fr_analyzer.pipeline import Options
from fr_analyzer.render.report_json import report_dict
from tools.frsim.campaign import ET_OUTPUT, draw_case, parse_shapes
from tools.frsim.dating import Dating
from tools.frsim.truth import Truth

DEFAULT_CASES = 300
SCHEMA = "fr-analyze.accuracy/1"


@dataclass(frozen=True)
class Outcome:
    """One case: what was injected, what fr-analyze said, and whether that is right."""

    seed: int
    kind: str
    case: str
    truth: dict[str, Any]
    got: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    ambiguous: str | None = None
    ranks: int = 0
    seconds: float = 0.0
    shape: str = "3d"
    backend: str = "nccl"
    writer: str = "dump"
    """What the case was written as: "dump" (Flight Recorder) or "et" (execution traces)."""
    confidence: str = "high"
    """The verdict's `confidence` in the JSON report ("high" where it has none; "ambiguous":
    the answer is the likelier of several readings)."""
    alternatives: list[str] = field(default_factory=list)
    """The status of each other reading the verdict lists (`verdict.alternatives`)."""
    age: str = ""
    """The verdict's `timing.age`: "old", "young", "unknown" (neither bound of the dump time
    settles it), "" (no unfinished op)."""
    dating: str = "none"
    """What the files' times were (`tools.frsim.dating.Dating`): "plain" or "stacks" (the
    dump's own, written 0.2-3 s or 5-20 s after its snapshot), "copied" (days later), "none"
    (not set: execution traces)."""

    @property
    def right(self) -> bool:
        """Whether fr-analyze's answer matched the truth (no problems found)."""
        return not self.problems

    @property
    def said_ambiguous(self) -> bool:
        """Whether fr-analyze printed its answer as the likelier of several readings."""
        return self.confidence == AMBIGUOUS


def answer(c: Conclusion) -> dict[str, Any]:
    """The parts of a conclusion the campaign compares with the truth, as JSON-ready data."""
    root = c.root
    return {
        "status": c.status.value,
        "root": root.kind.value if root else None,
        "culprits": list(root.ranks) if root else [],
        "group": root.group.name if root and root.group else None,
        "collective_seq_id": root.collective_seq_id if root else None,
        "p2p_seq_id": root.p2p_seq_id if root else None,
        "answer": c.answer,
        # Findings the root does not explain: with one injected fault, there should be none.
        "unexplained": [
            f"{j.finding.kind.value} on group {j.finding.group.name if j.finding.group else '-'}"
            for j in c.findings
            if j.role == Role.INDEPENDENT
        ],
    }


AMBIGUOUS = "ambiguous"
"""The verdict's `confidence` when two readings fit the dumps and it printed the likelier."""


@dataclass(frozen=True)
class Reading:
    """How sure the JSON report's verdict is, and how old it found the unfinished ops."""

    confidence: str = "high"
    """"high", or "ambiguous" (the answer is the likelier of several readings)."""
    alternatives: tuple[str, ...] = ()
    """The status of each other reading the verdict lists."""
    age: str = ""
    """`verdict.timing.age`: "old" (stuck), "young" (in flight), "unknown"; "" when none."""


def reading(verdict: Mapping[str, Any]) -> Reading:
    """The JSON report's verdict's confidence ("high" when it says none), the status of each
    alternative reading it lists, and the age of its unfinished ops."""
    alternatives = verdict.get("alternatives") or []
    timing = verdict.get("timing") or {}
    return Reading(
        str(verdict.get("confidence") or "high"),
        tuple(
            str(a.get("status", "?")) if isinstance(a, Mapping) else str(a) for a in alternatives
        ),
        str(timing.get("age") or ""),
    )


def judge(truth: Truth, got: dict[str, Any]) -> list[str]:
    """What differs between the right answer and fr-analyze's (empty: right)."""
    problems = []
    if got["status"] != truth.status:
        problems.append(f"status {got['status']} (want {truth.status})")
    if truth.root is None:
        return problems
    if got["unexplained"]:  # one fault was injected: it explains every finding
        problems.append(f"findings the root cause leaves unexplained: {got['unexplained'][:3]}")
    if got["root"] != truth.root:
        problems.append(f"root {got['root']} (want {truth.root})")
    if sorted(got["culprits"]) != sorted(truth.culprits):
        problems.append(f"culprits {got['culprits']} (want {list(truth.culprits)})")
    if truth.group is not None and got["group"] != truth.group:
        problems.append(f"group {got['group']} (want {truth.group})")
    if truth.seq is not None:
        key = "collective_seq_id" if truth.seq_kind == "collective" else "p2p_seq_id"
        if got[key] != truth.seq:
            problems.append(f"{key} {got[key]} (want {truth.seq})")
    return problems


def _failed(error: FrAnalyzerError) -> dict[str, Any]:
    """The answer of an analysis that stopped with `error`."""
    return {
        "status": "error", "root": None, "culprits": [], "group": None,
        "collective_seq_id": None, "p2p_seq_id": None, "answer": str(error)[:300],
        "unexplained": [],
    }  # fmt: skip


def run_case(
    seed: int, shapes: Sequence[str] = (), writer: str = "dump", dating: Dating | None = None
) -> Outcome:
    """Draw case `seed` (its files dated as drawn, or as `dating`), write its dumps (`writer`
    "et": its execution traces), analyze them and compare the answer with the truth."""
    case = draw_case(seed, shapes, dating)
    et = writer == "et"
    truth = case.et_truth if et else case.truth
    started = time.perf_counter()
    ranks = 0
    said = Reading()
    with tempfile.TemporaryDirectory(prefix="fr-accuracy-") as tmp:
        directory = Path(tmp) / "dumps"
        directory.mkdir()
        case.write(directory, ET_OUTPUT if et else None)
        try:
            analysis = analyze(directory, Options(workers=1))
        except FrAnalyzerError as error:
            if not et:
                raise
            got = _failed(error)
        else:
            got, ranks = answer(analysis.conclusion), len(analysis.summary.ranks_loaded)
            said = reading(report_dict(analysis, cap=1)["verdict"])
    return Outcome(
        seed=seed,
        kind=case.kind,
        case=case.describe(),
        truth=truth.to_dict(),
        got=got,
        problems=[] if truth.ambiguous else judge(truth, got),
        ambiguous=truth.ambiguous,
        ranks=ranks,
        seconds=time.perf_counter() - started,
        shape=case.shape,
        backend=case.backend,
        writer=writer,
        confidence=said.confidence,
        alternatives=list(said.alternatives),
        age=said.age,
        # an execution trace keeps the time it is written (no dump, nothing to date)
        dating="none" if et else case.dating.value,
    )


def run(
    seeds: Iterable[int],
    workers: int = 1,
    shapes: Sequence[str] = (),
    writer: str = "dump",
    dating: Dating | None = None,
) -> list[Outcome]:
    """Run the cases of `seeds`, in `workers` forked processes when more than one."""
    seeds = list(seeds)
    one = partial(run_case, shapes=tuple(shapes), writer=writer, dating=dating)
    if workers <= 1:
        return [one(s) for s in seeds]
    with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=20) as pool:
        return list(pool.imap(one, seeds, chunksize=1))


def _status_root(d: dict[str, Any]) -> str:
    return f"{d['status']}/{d.get('root') or '-'}"


COUNT_HEADERS = ["cases", "right", "wrong", "ambiguous", "said ambiguous", "its reading right"]
"""The counts of every breakdown: cases; right and wrong of the judged; ambiguous by
construction (not judged); verdicts fr-analyze called ambiguous; of those that were judged,
how many printed the right reading (right/judged)."""


def _counts(mine: Sequence[Outcome]) -> list[Any]:
    """The `COUNT_HEADERS` columns and the share right of the judged, for some outcomes."""
    judged = [o for o in mine if o.ambiguous is None]
    n_right = sum(o.right for o in judged)
    said = [o for o in mine if o.said_ambiguous]
    said_judged = [o for o in said if o.ambiguous is None]
    return [
        len(mine),
        n_right,
        len(judged) - n_right,
        len(mine) - len(judged),
        len(said),
        f"{sum(o.right for o in said_judged)}/{len(said_judged)}" if said_judged else "-",
        f"{100 * n_right / max(len(judged), 1):.0f}%",
    ]


def _table(
    outcomes: Sequence[Outcome],
    keys: Sequence[str],
    key: Callable[[Outcome], tuple[str, ...]],
    ages: bool = False,
) -> str:
    """One row of counts per value of `key` (columns named `keys`), in sorted order; with
    `ages`, also the verdicts that found the unfinished ops' age unknown."""
    rows = []
    for value in sorted({key(o) for o in outcomes}):
        mine = [o for o in outcomes if key(o) == value]
        counts = _counts(mine)
        if ages:
            counts.insert(-1, sum(o.age == "unknown" for o in mine))
        rows.append([*value, *counts])
    headers = [*keys, *COUNT_HEADERS, *(["age unknown"] if ages else []), "share right"]
    return tabulate(rows, headers=headers, disable_numparse=True)


def _shape_table(outcomes: Sequence[Outcome]) -> str:
    """Per (shape, backend): cases, right, wrong, ambiguous by construction, said ambiguous and
    its reading right; share right of the judged."""
    return _table(outcomes, ["shape", "backend"], lambda o: (o.shape, o.backend))


DATING_WORDS = {
    "plain": "dump, no stacks: +0.2-3 s",
    "stacks": "dump, stacks: +5-20 s",
    "copied": "copied: +days",
    "none": "not set",
}
"""Each dating of the files (`Outcome.dating`) in words: the file written by the dump so
long after its snapshot, with or without stack traces, or copied days later."""


def _dating_table(outcomes: Sequence[Outcome]) -> str:
    """Per dating of the files, and per status the truth gives: the same counts, and the
    verdicts that could not tell the unfinished ops' age (neither bound settles it)."""
    return _table(
        outcomes,
        ["file times", "truth"],
        lambda o: (DATING_WORDS.get(o.dating, o.dating), str(o.truth["status"])),
        ages=True,
    )


def render(outcomes: Sequence[Outcome]) -> str:
    """The campaign's report: right answers over the judged cases, then per fault kind and the wrong
    and ambiguous cases."""
    judged = [o for o in outcomes if o.ambiguous is None]
    right = sum(o.right for o in judged)
    traces = " written as execution traces" if any(o.writer == "et" for o in outcomes) else ""
    lines = [
        f"fault campaign{traces}: {len(outcomes)} cases, {len(judged)} judged, "
        f"{len(outcomes) - len(judged)} ambiguous by construction",
        f"right: {right}/{len(judged)} = {100 * right / max(len(judged), 1):.1f}%",
        "",
    ]
    kinds = sorted({o.kind for o in outcomes})
    rows = []
    for kind in kinds:
        mine = [o for o in outcomes if o.kind == kind]
        ok = [o for o in mine if o.ambiguous is None]
        n_right = sum(o.right for o in ok)
        rows.append(
            [
                kind,
                len(mine),
                n_right,
                len(ok) - n_right,
                len(mine) - len(ok),
                f"{100 * n_right / max(len(ok), 1):.0f}%",
            ]
        )
    lines.append(
        tabulate(
            rows,
            headers=["fault kind", "cases", "right", "wrong", "ambiguous", "share"],
            disable_numparse=True,
        )
    )
    if any(o.shape != "3d" or o.writer == "et" for o in outcomes):
        lines += ["", "Per training shape and backend:", _shape_table(outcomes)]
    if any(o.dating != "none" for o in outcomes):
        lines += ["", "Per dating of the dump files:", _dating_table(outcomes)]
    confusion: Counter[tuple[str, str, str]] = Counter()
    for o in judged:
        confusion[(o.kind, _status_root(o.truth), _status_root(o.got))] += 1
    lines += ["", "Confusion (fault kind, right answer -> fr-analyze's answer: cases):"]
    lines.append(
        tabulate(
            [
                [k, want, got, n, "" if want == got else "<--"]
                for (k, want, got), n in sorted(confusion.items())
            ],
            headers=["fault kind", "right answer", "fr-analyze", "cases", ""],
            disable_numparse=True,
        )
    )
    wrong = [o for o in judged if not o.right]
    if wrong:
        lines += ["", f"Wrong ({len(wrong)}):"]
        for o in wrong:
            lines.append(f"  seed {o.seed}: {o.case}")
            lines.append(f"    want: {Truth.from_dict(o.truth).describe()}")
            lines.append(f"    got:  {o.got['answer'][:300]}")
            if o.said_ambiguous:
                others = ", ".join(o.alternatives) or "none listed"
                lines.append(f"    said ambiguous; other readings: {others}")
            lines.append(f"    differs: {'; '.join(o.problems)}")
    said = [o for o in outcomes if o.said_ambiguous]
    if said:
        lines += ["", f"Said ambiguous ({len(said)}; seed, right/wrong/not judged, dating):"]
        lines += [
            "  " + ", ".join(f"{o.seed} {_mark(o)} {o.dating}" for o in said[i : i + 6])
            for i in range(0, len(said), 6)
        ]
    ambiguous = [o for o in outcomes if o.ambiguous is not None]
    if ambiguous:
        reasons = Counter(o.ambiguous or "" for o in ambiguous)
        lines += ["", "Ambiguous by construction (not judged):"]
        lines += [f"  {n} x {reason}" for reason, n in reasons.most_common()]
    slowest = max(outcomes, key=lambda o: o.seconds, default=None)
    if slowest is not None:
        total = sum(o.seconds for o in outcomes)
        lines += [
            "",
            f"time: {total:.0f} s of analysis+simulation in all; slowest case seed "
            f"{slowest.seed} ({slowest.ranks} ranks) {slowest.seconds:.1f} s",
        ]
    return "\n".join(lines)


def _mark(o: Outcome) -> str:
    return "not-judged" if o.ambiguous is not None else "right" if o.right else "WRONG"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the campaign the command line asks for and print its report; returns 1 unless every
    judged case is right."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES, help="number of cases")
    parser.add_argument("--first", type=int, default=0, help="seed of the first case")
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="processes (default: cores)"
    )
    parser.add_argument("--out", type=Path, help="also write every outcome as JSON here")
    parser.add_argument(
        "--shapes",
        type=parse_shapes,
        default=(),
        help="draw these training shapes: 'all' or a comma-separated list of 3d, fsdp, hsdp, "
        "moe, ddp, subgroups, barrier (default: 3d only, the same cases as always)",
    )
    parser.add_argument(
        "--writer",
        choices=("dump", "et"),
        default="dump",
        help="write each case as Flight Recorder dumps (default) or as each rank's Chakra "
        "execution trace, judged against what the traces can show",
    )
    parser.add_argument(
        "--dating",
        choices=("drawn", *(d.value for d in Dating)),
        default="drawn",
        help="date every case's dump files one way: written by the dump 0.2-3 s (plain) or 5-20 "
        "s (stacks) after its snapshot, copied days later, or none (the time they are written); "
        "default: as each seed draws it",
    )
    parser.add_argument(
        "--real",
        type=int,
        default=0,
        help="with --writer et, also run this many real gloo jobs (torch) and judge their traces",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    seeds = range(args.first, args.first + args.cases)
    dating = None if args.dating == "drawn" else Dating(args.dating)
    outcomes = run(seeds, args.workers, args.shapes, args.writer, dating)
    print(render(outcomes))
    print(f"wall time {time.perf_counter() - started:.0f} s with {args.workers} worker(s)")
    real_right = _real_jobs(args.real, args.first) if args.writer == "et" else True
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"schema": SCHEMA, "outcomes": [asdict(o) for o in outcomes]}, indent=1)
            + "\n"
        )
    judged = [o for o in outcomes if o.ambiguous is None]
    simulated_right = all(o.right for o in judged) and (bool(judged) or args.real > 0)
    return 0 if simulated_right and real_right else 1


def _real_jobs(cases: int, first: int) -> bool:
    """Run and print `cases` real gloo jobs from seed `first` (none: nothing printed); whether
    every one was right (True where torch is missing: they are skipped with one line)."""
    if cases <= 0:
        return True
    from . import accuracy_real  # it imports this module: imported when asked for

    if accuracy_real.torch_missing():
        print("\nreal jobs: skipped, torch cannot be imported here")
        return True
    started = time.perf_counter()
    outcomes = accuracy_real.run_real(range(first, first + cases))
    print("\n" + accuracy_real.render_real(outcomes))
    print(f"wall time {time.perf_counter() - started:.0f} s for the real jobs, one at a time")
    return all(o.right for o in outcomes)


if __name__ == "__main__":
    sys.exit(main())
