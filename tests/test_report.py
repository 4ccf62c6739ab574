"""The text report: the answer first, symptoms grouped, every table safe with any rank list."""

from __future__ import annotations

from typing import Any

import pytest

from fr_analyzer import report
from fr_analyzer.pipeline import Analysis
from fr_analyzer.report import render_text
from fr_analyzer.report_json import report_dict
from tests.builders import make_dump, make_entry, renumber
from tests.conftest import Run

WORLD = 320
STRIDE = 8  # data-parallel groups take every 8th rank: rank lists like 264,272,280


def strided_job(stuck: int = 264) -> dict[int, dict[str, Any]]:
    """320 ranks; 8 data-parallel groups of every 8th rank. Rank `stuck` never issues its dp
    group's second all_reduce; the other members of that group wait in it."""
    groups: dict[str, tuple[str, list[int]]] = {"0": ("default_pg", list(range(WORLD)))}
    for j in range(STRIDE):
        groups[str(1 + j)] = ("dp", list(range(j, WORLD, STRIDE)))
    waiting = {"state": "scheduled", "retired": False}
    dumps = {}
    for r in range(WORLD):
        dp = ("1" if r % STRIDE == 0 else str(1 + r % STRIDE), "dp")
        entries = [
            make_entry("all_reduce", 1, group=("0", "default_pg")),
            make_entry("all_reduce", 1, group=dp),
        ]
        if r % STRIDE == stuck % STRIDE and r != stuck:
            entries.append(make_entry("all_reduce", 2, group=dp, **waiting))
        dumps[r] = make_dump(renumber(entries), groups)
    return dumps


@pytest.fixture(scope="module")
def strided(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    from fr_analyzer import analyze
    from fr_analyzer.pipeline import Options
    from tests.builders import write_dumps

    directory = write_dumps(tmp_path_factory.mktemp("strided"), strided_job())
    return analyze(directory, Options(workers=1))


def test_strided_rank_lists_render_in_every_table(strided: Analysis) -> None:
    text = render_text(strided, verbose=True, ranks=True, cap=10)
    assert "could not be rendered" not in text
    assert "\nHUNG. rank 264 never joined all_reduce #2 of group '1' (dp)" in text
    # Rank lists are text, never parsed as numbers (tabulate took 264,272,280 for one).
    assert "256,272-" not in text  # not compacted as a range: they are 8 apart
    assert "248,256,272" in text  # every 8th rank but the stuck 264
    assert "0,8,16,24," in text
    for title in ("All findings", "Where every rank stands", "Process groups", "Memberships"):
        assert title in text


def test_table_cells_are_never_parsed_as_numbers() -> None:
    text = report.table([["264,272,280", "1e5", "007"]], ["a", "b", "c"], [None, None, None])
    assert "264,272,280" in text and "1e5" in text and "007" in text
    # In a column of limited width too (tabulate's own wrapping fails on it).
    text = report.table([["100,108,116", "0,16,24,32,40,48,56"]], ["a", "b"], [14, 14])
    assert "100,108,116" in text and "0,16,24,32,40," in text and "48,56" in text


def test_a_failing_section_still_prints_the_answer(
    strided: Analysis, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> str:
        raise ValueError("invalid literal for int()")

    monkeypatch.setattr(report, "render_positions", broken)
    text = render_text(strided, ranks=True)
    assert "\nHUNG. rank 264 never joined" in text
    assert "(the positions section could not be rendered: ValueError: invalid literal" in text


def test_text_json_and_database_give_one_answer(strided: Analysis) -> None:
    from fr_analyzer import database

    data = report_dict(strided)
    db = database.build(strided)
    c = strided.conclusion
    assert data["verdict"]["status"] == db["meta"]["status"] == c.status.value == "hung"
    assert data["verdict"]["summary"] == db["meta"]["verdict"] == c.answer
    assert data["verdict"]["culprit_ranks"] == [264] == list(c.root.ranks if c.root else [])
    roots = [f for f in data["findings"] if f["role"] == "root"]
    assert [f["culprit_ranks"] for f in roots] == [[264]]
    columns = db["tables"]["findings"]["columns"]
    rows = [dict(zip(columns, row, strict=True)) for row in db["tables"]["findings"]["rows"]]
    assert [r["culprit_ranks"] for r in rows if r["role"] == "root"] == [[264]]


def test_symptoms_are_grouped_and_counted(run: Run) -> None:
    # Ranks 1-3 wait in world #1 for rank 0 and then nobody issues #2..#5 on rank 0: every
    # later collective they issued is the same hang, folded into one finding, one line.
    four = {"0": ("default_pg", [0, 1, 2, 3])}
    waiting = {"state": "scheduled", "retired": False}
    dumps = {0: make_dump([make_entry("all_reduce", 0, group=("0", "default_pg"))], four)}
    for r in (1, 2, 3):
        entries = [make_entry("all_reduce", 0, group=("0", "default_pg"))]
        entries += [
            make_entry("all_reduce", s, group=("0", "default_pg"), **waiting) for s in range(1, 6)
        ]
        dumps[r] = make_dump(renumber(entries), four)
    analysis = run(dumps)
    text = render_text(analysis, verbose=True)
    assert "\nHUNG. rank 0 never joined all_reduce #1 of group '0' (default_pg)" in text
    (root,) = analysis.conclusion.findings
    assert root.role.value == "root" and root.finding.culprit_ranks == (0,)
    assert analysis.conclusion.root is not None and analysis.conclusion.root.ranks == (0,)
    assert "(and 4 later collective(s) of this group, #2-#5)" in root.finding.detail
