"""A fixed-seed slice of the randomized fault campaign (`make accuracy` runs 300 and more):
simulated jobs of 8 to 256 ranks with every kind of fault, each answered right; and the
campaign's report: per shape and backend and per dating of the files, the verdicts fr-analyze
called ambiguous and how many of those printed the right reading."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.accuracy import Outcome, Reading, main, reading, render, run
from fr_analyzer import analyze
from fr_analyzer.pipeline import Options
from fr_analyzer.render.report_json import report_dict
from tools.frsim import Layout, ProgramSpec, SimSpec, faults, simulate, write_dumps
from tools.frsim.campaign import CASE_KINDS
from tools.frsim.dating import DAY_S, FileTimes
from tools.frsim.program import Backend

SEEDS = range(0, 66)


def _wrong(outcomes: Sequence[Outcome]) -> list[str]:
    """Each judged case answered wrong: its seed, case, answer and what differs."""
    return [
        f"seed {o.seed}: {o.case}\n  got: {o.got['answer'][:200]}\n  differs: {o.problems}"
        for o in outcomes
        if o.ambiguous is None and not o.right
    ]


@pytest.mark.slow
def test_every_fault_kind_of_the_slice_is_answered_right() -> None:
    outcomes = run(SEEDS, workers=1)
    kinds = Counter(o.kind for o in outcomes if o.ambiguous is None)
    assert set(kinds) == set(CASE_KINDS), kinds  # the slice judges every kind
    wrong = _wrong(outcomes)
    assert not wrong, "\n".join(wrong)
    assert sum(o.ambiguous is None for o in outcomes) >= 0.8 * len(outcomes)


SHAPES = ("fsdp", "hsdp", "moe", "ddp", "subgroups", "barrier")
SHAPE_SEEDS: tuple[int, ...]  # grows below
SHAPE_SEEDS = (3, 26, 33, 150, 193, 226, 250, 297, 337, 375, 459, 460, 496, 509, 640, 682, 777)
SHAPE_SEEDS += (792,)
SHAPE_SEEDS += (803, 839, 1009, 1029, 1059, 1063, 1068, 1201, 1359, 1532, 1821, 1915, 1924, 1931)
SHAPE_SEEDS += (1964,)
"""Seeds of the campaign over every shape (`make accuracy`: `--shapes all`) that the rules of
the job shapes once answered wrong, each now right or ambiguous by construction: learned
layouts, lost partners, all_to_all inputs and totals, gloo async ops, skips inside a group,
skipped first barriers, healthy mid-run dumps, a dead rank of a subgroup with a program of its
own."""


@pytest.mark.slow
def test_the_drawn_cases_of_every_job_shape_that_once_went_wrong_are_answered_right() -> None:
    outcomes = run(SHAPE_SEEDS, workers=1, shapes=("3d", *SHAPES))
    wrong = _wrong(outcomes)
    assert not wrong, "\n".join(wrong)
    assert sum(o.ambiguous is None for o in outcomes) >= 0.6 * len(outcomes)


# --- the report: confidence and dating ---------------------------------------------------------


def outcome(
    seed: int,
    want: str,
    got: str,
    *,
    shape: str = "fsdp",
    backend: str = "nccl",
    confidence: str = "high",
    alternatives: Sequence[str] = (),
    age: str = "",
    dating: str = "stacks",
    ambiguous: str | None = None,
) -> Outcome:
    """A campaign outcome: the truth's status `want`, fr-analyze's `got` (no root cause)."""
    return Outcome(
        seed=seed,
        kind="healthy_mid" if want == "ok" else "stop_host",
        case=f"seed {seed}: a case",
        truth={"status": want, "root": None},
        got={"status": got, "root": None, "answer": f"{got.upper()}."},
        problems=[] if want == got or ambiguous else [f"status {got} (want {want})"],
        ambiguous=ambiguous,
        shape=shape,
        backend=backend,
        confidence=confidence,
        alternatives=list(alternatives),
        age=age,
        dating=dating,
    )


def table_rows(report: str, title: str) -> list[list[str]]:
    """The rows of the table under `title` in a rendered report, split on two or more spaces."""
    lines = report.split(title + "\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [[cell for cell in line.split("  ") if cell.strip()] for line in lines]


def cells(row: list[str]) -> list[str]:
    return [c.strip() for c in row]


def test_reading_takes_the_verdicts_confidence_and_its_alternatives() -> None:
    verdict = {
        "status": "hung",
        "confidence": "ambiguous",
        "alternatives": [{"status": "ok", "reading": "in flight", "decide": "a snapshot"}],
        "timing": {"age": "unknown"},
    }
    assert reading(verdict) == Reading("ambiguous", ("ok",), "unknown")


def test_a_verdict_without_confidence_reads_as_high() -> None:
    assert reading({"status": "hung", "timing": {"age": "old"}}) == Reading("high", (), "old")


def test_the_shape_table_counts_ambiguous_verdicts_and_their_right_readings() -> None:
    # GIVEN four fsdp/nccl cases: two said ambiguous (one right, one wrong), one sure and right,
    # one ambiguous by construction and said ambiguous (not judged)
    outcomes = [
        outcome(1, "hung", "hung", confidence="ambiguous", alternatives=["ok"]),
        outcome(2, "ok", "hung", confidence="ambiguous", alternatives=["ok"]),
        outcome(3, "hung", "hung"),
        outcome(4, "ok", "hung", confidence="ambiguous", ambiguous="dumped mid-collective"),
        outcome(5, "hung", "hung", shape="ddp", backend="gloo", dating="copied"),
    ]
    # WHEN the report is rendered
    report = render(outcomes)
    # THEN the shape table has the new columns: said ambiguous 3, its reading right 1 of the 2
    # judged
    rows = table_rows(report, "Per training shape and backend:")
    assert cells(rows[0]) == [
        "shape", "backend", "cases", "right", "wrong", "ambiguous", "said ambiguous",
        "its reading right", "share right",
    ]  # fmt: skip
    assert cells(rows[2]) == ["ddp", "gloo", "1", "1", "0", "0", "0", "-", "100%"]
    assert cells(rows[3]) == ["fsdp", "nccl", "4", "2", "1", "1", "3", "1/2", "67%"]


def test_the_dating_table_has_a_row_per_dating_and_truth() -> None:
    outcomes = [
        outcome(1, "ok", "ok", dating="plain"),
        outcome(
            2, "ok", "hung", dating="stacks", confidence="ambiguous", alternatives=["ok"],
            age="unknown",
        ),
        outcome(3, "hung", "hung", dating="stacks", age="old"),
        outcome(4, "hung", "hung", dating="copied", confidence="ambiguous", age="unknown"),
    ]  # fmt: skip
    rows = [cells(r) for r in table_rows(render(outcomes), "Per dating of the dump files:")]
    assert rows[0][:3] == ["file times", "truth", "cases"]
    assert rows[0][-2:] == ["age unknown", "share right"]
    assert rows[2:] == [
        ["copied: +days", "hung", "1", "1", "0", "0", "1", "1/1", "1", "100%"],
        ["dump, no stacks: +0.2-3 s", "ok", "1", "1", "0", "0", "0", "-", "0", "100%"],
        ["dump, stacks: +5-20 s", "hung", "1", "1", "0", "0", "0", "-", "0", "100%"],
        ["dump, stacks: +5-20 s", "ok", "1", "0", "1", "0", "1", "0/1", "1", "0%"],
    ]


def test_a_wrong_case_said_ambiguous_lists_its_other_readings() -> None:
    report = render([outcome(2, "ok", "hung", confidence="ambiguous", alternatives=["ok"])])
    assert "said ambiguous; other readings: ok" in report
    assert "Said ambiguous (1; seed, right/wrong/not judged, dating):\n  2 WRONG stacks" in report


def test_execution_traces_have_no_dating_table() -> None:
    traces = [replace(outcome(1, "ok", "ok"), writer="et", dating="none")]
    assert "Per dating" not in render(traces)


TINY = (1, 4, 7)
"""Seeds of the campaign over every shape whose jobs are small (8 to 16 ranks)."""


def test_a_tiny_campaign_reports_each_cases_dating_and_confidence() -> None:
    # GIVEN a few drawn cases, WHEN the campaign runs them
    outcomes = run(TINY, workers=1, shapes=("3d", *SHAPES))
    # THEN each outcome carries its files' dating and the verdict's confidence, and the report
    # breaks them down
    assert {o.dating for o in outcomes} <= {"plain", "stacks", "copied"}
    assert {o.confidence for o in outcomes} <= {"high", "ambiguous"}
    assert {o.age for o in outcomes} <= {"", "old", "young", "unknown"}
    report = render(outcomes)
    assert "said ambiguous" in table_rows(report, "Per training shape and backend:")[0][-3]
    assert len(table_rows(report, "Per dating of the dump files:")) >= 3


def test_dating_option_dates_every_case_one_way(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN one small case (seed 1: 16 ranks, a crash), WHEN its files are dated as copied
    main(
        ["--cases", "1", "--first", "1", "--shapes", "all", "--workers", "1", "--dating", "copied"]
    )
    # THEN the dating table has that one row
    rows = table_rows(capsys.readouterr().out, "Per dating of the dump files:")
    assert [cells(r)[:3] for r in rows[2:]] == [["copied: +days", "hung", "1"]]


@pytest.mark.parametrize("copied", [False, True], ids=["dumped", "copied"])
@pytest.mark.parametrize(("backend", "timing"), [("nccl", False), ("nccl", True), ("gloo", False)])
def test_a_healthy_job_dumped_with_stacks_reads_ok_and_the_same_job_hung_reads_hung(
    backend: Backend, timing: bool, copied: bool
) -> None:
    """Issue 43: files written 5-20 s after their snapshots (stack traces, a 5 s timeout), or
    copied days later, neither make a healthy job dumped mid-run hung nor hide a hang."""
    dated = FileTimes(stacks=True, copied_after_s=3 * DAY_S if copied else None)
    job = SimSpec(
        layout=Layout(tp=2, pp=2, dp=2),
        program=ProgramSpec(steps=3, micro_batches=2, backend=backend),
        timing=timing,
        timeout_ms=5_000,
        seed=11,
        file_times=dated,
    )
    healthy = analyze_sim(replace(job, dump="mid"))
    hung = analyze_sim(replace(job, fault=faults.stop_host(rank=5, op=30)))
    assert healthy["status"] == "ok"
    assert hung["status"] == "hung" and hung["culprit_ranks"] == [5]


def analyze_sim(spec: SimSpec) -> dict[str, Any]:
    """The JSON report's verdict on the dumps of `spec`'s job."""
    with tempfile.TemporaryDirectory() as tmp:
        write_dumps(simulate(spec), Path(tmp))
        verdict: dict[str, Any] = report_dict(analyze(Path(tmp), Options(workers=1)))["verdict"]
    return verdict
