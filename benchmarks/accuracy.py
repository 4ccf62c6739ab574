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

Usage: `python -m benchmarks.accuracy [--cases 300] [--first 0] [--shapes all] [--workers 2]
[--writer dump|et] [--out FILE]` (`make accuracy`; `make accuracy-et` for the traces). Prints
the share right, a table per fault kind, one per shape and backend, the confusion of answers and
every wrong case; exits 1 unless every unambiguous case is right.
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
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tabulate import tabulate

from fr_analyzer import analyze
from fr_analyzer.conclusion import Conclusion, Role
from fr_analyzer.errors import FrAnalyzerError
from fr_analyzer.pipeline import Options
from tools.frsim.campaign import ET_OUTPUT, draw_case, parse_shapes
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

    @property
    def right(self) -> bool:
        """Whether fr-analyze's answer matched the truth (no problems found)."""
        return not self.problems


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


def run_case(seed: int, shapes: Sequence[str] = (), writer: str = "dump") -> Outcome:
    """Draw case `seed`, write its dumps (`writer` "et": its execution traces), analyze them and
    compare the answer with the truth."""
    case = draw_case(seed, shapes)
    et = writer == "et"
    truth = case.et_truth if et else case.truth
    started = time.perf_counter()
    ranks = 0
    with tempfile.TemporaryDirectory(prefix="fr-accuracy-") as tmp:
        directory = Path(tmp) / "dumps"
        directory.mkdir()
        case.write(directory, ET_OUTPUT if et else None)
        if et:
            try:
                analysis = analyze(directory, Options(workers=1))
            except FrAnalyzerError as error:
                got = _failed(error)
            else:
                got, ranks = answer(analysis.conclusion), len(analysis.summary.ranks_loaded)
        else:
            analysis = analyze(directory, Options(workers=1))
            got, ranks = answer(analysis.conclusion), len(analysis.summary.ranks_loaded)
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
    )


def run(
    seeds: Iterable[int], workers: int = 1, shapes: Sequence[str] = (), writer: str = "dump"
) -> list[Outcome]:
    """Run the cases of `seeds`, in `workers` forked processes when more than one."""
    seeds = list(seeds)
    one = partial(run_case, shapes=tuple(shapes), writer=writer)
    if workers <= 1:
        return [one(s) for s in seeds]
    with multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=20) as pool:
        return list(pool.imap(one, seeds, chunksize=1))


def _status_root(d: dict[str, Any]) -> str:
    return f"{d['status']}/{d.get('root') or '-'}"


def _shape_table(outcomes: Sequence[Outcome]) -> str:
    """Cases, right, wrong and ambiguous per (shape, backend); share right of the judged."""
    rows = []
    for shape, backend in sorted({(o.shape, o.backend) for o in outcomes}):
        mine = [o for o in outcomes if o.shape == shape and o.backend == backend]
        judged = [o for o in mine if o.ambiguous is None]
        n_right = sum(o.right for o in judged)
        rows.append(
            [
                shape,
                backend,
                len(mine),
                n_right,
                len(judged) - n_right,
                len(mine) - len(judged),
                f"{100 * n_right / max(len(judged), 1):.0f}%",
            ]
        )
    return tabulate(
        rows,
        headers=["shape", "backend", "cases", "right", "wrong", "ambiguous", "share right"],
        disable_numparse=True,
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
            lines.append(f"    differs: {'; '.join(o.problems)}")
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
    args = parser.parse_args(argv)
    started = time.perf_counter()
    seeds = range(args.first, args.first + args.cases)
    outcomes = run(seeds, args.workers, args.shapes, args.writer)
    print(render(outcomes))
    print(f"wall time {time.perf_counter() - started:.0f} s with {args.workers} worker(s)")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"schema": SCHEMA, "outcomes": [asdict(o) for o in outcomes]}, indent=1)
            + "\n"
        )
    judged = [o for o in outcomes if o.ambiguous is None]
    return 0 if judged and all(o.right for o in judged) else 1


if __name__ == "__main__":
    sys.exit(main())
