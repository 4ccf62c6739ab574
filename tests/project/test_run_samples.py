"""`make run` (tools/run_samples.py): one row per sample set, right only when the answer and
the exit code are the expected ones, and an exit status that says whether every set was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.run_samples import Answer, Outcome, exit_code, main, table

ROOT = Path(__file__).resolve().parents[2]
HUNG_5 = Answer("hung", (5,))


def test_expected_answer_with_agreeing_exit_code_is_right() -> None:
    assert Outcome("s", HUNG_5, HUNG_5, 1).right
    assert Outcome("s", Answer("ok", ()), Answer("ok", ()), 0).right


def test_other_culprit_is_wrong_and_exits_1() -> None:
    wrong = Outcome("s", HUNG_5, Answer("hung", (4,)), 1)
    assert not wrong.right and not wrong.failed
    assert wrong.row() == ["s", "hung 5", "hung 4", "NO"]
    assert exit_code([Outcome("t", HUNG_5, HUNG_5, 1), wrong]) == 1


def test_exit_code_that_contradicts_the_answer_is_wrong() -> None:
    outcome = Outcome("s", HUNG_5, HUNG_5, 0)
    assert not outcome.right
    assert outcome.row()[2] == "hung 5 (exit 0)"


def test_tool_error_is_shown_in_the_row_and_exits_2() -> None:
    crashed = Outcome("s", HUNG_5, None, 2, "fr-analyze: internal error")
    assert crashed.failed
    assert crashed.row() == ["s", "hung 5", "error (exit 2): fr-analyze: internal error", "NO"]
    assert exit_code([crashed]) == 2


def test_table_has_the_four_columns() -> None:
    header = table([Outcome("nccl_healthy", Answer("ok", ()), Answer("ok", ()), 0)]).splitlines()
    assert header[0].split() == ["set", "expected", "got", "right"]
    assert header[2].split() == ["nccl_healthy", "ok", "ok", "yes"]


def test_real_sets_end_with_the_table_and_write_the_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two bundled sets, one healthy and one hung
    out = tmp_path / "reports"
    argv = ["--out", str(out), "nccl_healthy", "nccl_not_joined"]
    # WHEN they are run as `make run` runs them
    status = main(argv)
    printed = capsys.readouterr().out
    # THEN both are right, the table is the output, and the full reports are files
    assert status == 0, printed
    lines = printed.splitlines()
    assert lines[0].split() == ["set", "expected", "got", "right"]
    assert lines[2].split() == ["nccl_healthy", "ok", "ok", "yes"]
    assert lines[3].split() == ["nccl_not_joined", "hung", "5", "hung", "5", "yes"]
    assert lines[4].startswith("2 of 2 sets got their expected answer")
    assert sorted(p.name for p in out.iterdir()) == [
        "nccl_healthy.json",
        "nccl_healthy.txt",
        "nccl_not_joined.json",
        "nccl_not_joined.txt",
    ]
    assert "rank 5" in (out / "nccl_not_joined.txt").read_text()
