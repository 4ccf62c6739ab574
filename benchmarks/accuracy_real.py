"""Real jobs for `make accuracy-et`: gloo jobs drawn from seeds by `tools/et_jobs.py`, run one
at a time on 127.0.0.1 with PyTorch's `ExecutionTraceObserver` on, each with its fault (an
extra world op after a pair op of the same sizes, a rank killed mid-call by SIGTERM, gloo's
abort on a broadcast size disagreement, a skipped collective) or none, analyzed from the
ranks' traces and judged against the case's truth (`tools.et_jobs.RealTruth`).

A case is *right* when the verdict's status is the truth's and, where there is a culprit, the
root cause names exactly the culprit ranks with a root kind the truth allows. The group and
the sequence id are not judged (a gloo trace names neither). A verdict printed with
`confidence: ambiguous` is counted apart ("said ambiguous"); its printed reading is judged as
any other. An analyzer error is a wrong answer.

NCCL jobs need a GPU: only gloo is drawn here. Without torch the real jobs are skipped with
one line. Used by `python -m benchmarks.accuracy --writer et --real N`.
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from fr_analyzer import analyze
from fr_analyzer.errors import FrAnalyzerError
from fr_analyzer.pipeline import Options
from fr_analyzer.render.report_json import report_dict
from tools.et_jobs import KINDS, Case, RealTruth, draw
from tools.et_jobs import run as run_job

from .accuracy import AMBIGUOUS, answer, reading

BACKEND = "gloo"
"""The backend every real job runs on (NCCL needs a GPU)."""


@dataclass(frozen=True)
class RealOutcome:
    """One real job: its case, the truth, what fr-analyze said, and what differs."""

    seed: int
    kind: str
    case: str
    truth: dict[str, Any]
    got: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    confidence: str = "high"
    alternatives: list[str] = field(default_factory=list)
    seconds: float = 0.0
    backend: str = BACKEND

    @property
    def right(self) -> bool:
        """Whether the verdict matched the truth."""
        return not self.problems


def judge_real(truth: RealTruth, got: dict[str, Any]) -> list[str]:
    """What differs between a real case's truth and fr-analyze's answer (empty: right)."""
    problems = []
    if got["status"] != truth.status:
        problems.append(f"status {got['status']} (want {truth.status})")
    if truth.culprits and sorted(got["culprits"]) != sorted(truth.culprits):
        problems.append(f"culprits {got['culprits']} (want {list(truth.culprits)})")
    if truth.roots and got["root"] not in truth.roots:
        problems.append(f"root {got['root']} (want {' or '.join(truth.roots)})")
    return problems


def verdict_of(directory: Path) -> tuple[dict[str, Any], str, list[str]]:
    """fr-analyze's answer over a folder of traces, its confidence and the status of each
    other reading it lists; an analyzer error is an answer of status "error"."""
    try:
        analysis = analyze(directory, Options(workers=1))
    except FrAnalyzerError as error:
        got: dict[str, Any] = {
            "status": "error",
            "root": None,
            "culprits": [],
            "answer": str(error)[:300],
        }
        return got, "high", []
    said = reading(report_dict(analysis, cap=1)["verdict"])
    return answer(analysis.conclusion), said.confidence, list(said.alternatives)


def run_real_case(case: Case) -> RealOutcome:
    """Run `case`'s job, analyze its traces and judge the answer."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fr-accuracy-real-") as tmp:
        out = run_job(case, Path(tmp) / "job")
        got, confidence, alternatives = verdict_of(out)
    return RealOutcome(
        seed=case.seed,
        kind=case.kind,
        case=case.describe(),
        truth=asdict(case.truth),
        got=got,
        problems=judge_real(case.truth, got),
        confidence=confidence,
        alternatives=alternatives,
        seconds=time.perf_counter() - started,
    )


def torch_missing() -> bool:
    """Whether torch cannot be imported here (the real jobs are skipped)."""
    return importlib.util.find_spec("torch") is None


def run_real(seeds: Iterable[int]) -> list[RealOutcome]:
    """Run the real jobs of `seeds`, one at a time."""
    return [run_real_case(draw(seed)) for seed in seeds]


def render_real(outcomes: Sequence[RealOutcome]) -> str:
    """The real jobs' report: the share right per fault kind and backend, then every wrong
    case and those said ambiguous."""
    right = sum(o.right for o in outcomes)
    lines = [
        f"real jobs written as execution traces: {len(outcomes)} cases ({BACKEND}; NCCL needs "
        "a GPU)",
        f"right: {right}/{len(outcomes)} = {100 * right / max(len(outcomes), 1):.1f}%",
        "",
    ]
    rows = []
    for kind in [k for k in KINDS if any(o.kind == k for o in outcomes)]:
        mine = [o for o in outcomes if o.kind == kind]
        n_right = sum(o.right for o in mine)
        said = sum(o.confidence == AMBIGUOUS for o in mine)
        share = f"{100 * n_right / len(mine):.0f}%"
        rows.append([kind, BACKEND, len(mine), n_right, len(mine) - n_right, said, share])
    headers = ["fault kind", "backend", "cases", "right", "wrong", "said ambiguous", "share"]
    lines.append(tabulate(rows, headers=headers, disable_numparse=True))
    wrong = [o for o in outcomes if not o.right]
    if wrong:
        lines += ["", f"Wrong ({len(wrong)}):"]
        for o in wrong:
            lines.append(f"  seed {o.seed}: {o.case}")
            lines.append(f"    got:  {o.got['answer'][:300]}")
            lines.append(f"    differs: {'; '.join(o.problems)}")
    said_ambiguous = [o for o in outcomes if o.confidence == AMBIGUOUS]
    if said_ambiguous:
        lines += ["", "Said ambiguous (seed, kind, right/WRONG, other readings):"]
        lines += [
            f"  {o.seed} {o.kind} {'right' if o.right else 'WRONG'} "
            f"{', '.join(o.alternatives) or 'none listed'}"
            for o in said_ambiguous
        ]
    total = sum(o.seconds for o in outcomes)
    lines += ["", f"time: {total:.0f} s of real jobs and their analysis"]
    return "\n".join(lines)
