"""The text report: the answer first, symptoms grouped, every table safe with any rank list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fr_analyzer.pipeline import Analysis
from fr_analyzer.render import report
from fr_analyzer.render.report import render_text
from fr_analyzer.render.report_json import report_dict
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
    waiting: dict[str, Any] = {"state": "scheduled", "retired": False}
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
    assert text.startswith("HUNG. rank 264 never joined all_reduce #2 of group '1' (dp)")
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
    assert text.startswith("HUNG. rank 264 never joined")
    assert "(the positions section could not be rendered: ValueError: invalid literal" in text


def test_text_json_and_database_give_one_answer(strided: Analysis) -> None:
    from fr_analyzer.render import database

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
    waiting: dict[str, Any] = {"state": "scheduled", "retired": False}
    dumps = {0: make_dump([make_entry("all_reduce", 0, group=("0", "default_pg"))], four)}
    for r in (1, 2, 3):
        entries = [make_entry("all_reduce", 0, group=("0", "default_pg"))]
        entries += [
            make_entry("all_reduce", s, group=("0", "default_pg"), **waiting) for s in range(1, 6)
        ]
        dumps[r] = make_dump(renumber(entries), four)
    analysis = run(dumps)
    text = render_text(analysis, verbose=True)
    assert text.startswith("HUNG. rank 0 never joined all_reduce #1 of group '0' (default_pg)")
    (root,) = analysis.conclusion.findings
    assert root.role.value == "root" and root.finding.culprit_ranks == (0,)
    assert analysis.conclusion.root is not None and analysis.conclusion.root.ranks == (0,)
    assert "(and 4 later collectives of this group, #2-#5)" in root.finding.detail


# --- one screen at any size -------------------------------------------------------------------

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SCREEN_SETS = [
    "nccl3d_cascade_scheduled",  # a long wait chain and a cascade of symptoms
    "gloo3d_pp_recv_missing",
    "nccl3d_p2p_mismatch",
    "moe_split_mismatch",
    "nccl_deadlock",
    "fsdp_crash",
    "nccl_healthy",
]


def answer_block(text: str) -> list[str]:
    """The lines from the answer paragraph (the first line) to the first blank line after it."""
    lines = text.splitlines()
    end = next((i for i in range(len(lines)) if not lines[i].strip()), len(lines))
    return lines[:end]


@pytest.fixture(scope="module")
def screen_sets() -> dict[str, Analysis]:
    from fr_analyzer import analyze
    from fr_analyzer.pipeline import Options

    return {
        name: analyze(SAMPLES / name, Options(workers=1, file_times=False)) for name in SCREEN_SETS
    }


@pytest.mark.parametrize("width", [80, 100, 132])
def test_the_answer_block_takes_at_most_twenty_lines_and_no_line_is_wider_than_the_terminal(
    screen_sets: dict[str, Analysis], strided: Analysis, width: int
) -> None:
    for name, analysis in [*screen_sets.items(), ("strided", strided)]:
        text = render_text(analysis, width=width, verbose=True, ranks=True)
        block = answer_block(text)
        assert block[0].startswith(analysis.conclusion.status.value.upper()), name
        assert len(block) <= report.ANSWER_LINES, (name, block)
        too_wide = [line for line in text.splitlines() if len(line) > width]
        assert not too_wide, (name, too_wide[:3])


def test_rank_ranges_are_never_broken_across_lines() -> None:
    from fr_analyzer.render.presentation import wrap

    ranks = ",".join(f"{r}-{r + 7}" for r in range(0, 2048, 16))
    lines = wrap(f"ranks {ranks} wait in all_reduce #3", 40)
    assert all(len(line) <= 40 for line in lines)
    joined = "".join(line.strip() for line in lines)  # lines break after commas, or at spaces
    listed = joined.removeprefix("ranks").split("wait")[0].strip()
    assert listed.split(",") == ranks.split(",")  # every range whole: 200-207, never 200-2 / 07


def test_a_cascade_of_symptoms_folds_into_one_line_per_kind_and_family(
    screen_sets: dict[str, Analysis],
) -> None:
    text = render_text(screen_sets["nccl3d_cascade_scheduled"], verbose=True)
    assert "Symptoms the root cause explains (9 findings):" in text
    assert (
        "  - 8 not_joined findings in 8 dp groups at #4: ranks 0-4,6-15 are held up "
        "waiting, directly or not, for rank 5" in text
    )
    assert "1 not_joined finding in group '0' (default_pg) at #5" in text


def test_every_report_ends_with_the_answer_in_one_line_and_the_next_command(
    screen_sets: dict[str, Analysis],
) -> None:
    where = SAMPLES / "nccl3d_cascade_scheduled"
    for verbose in (False, True):
        text = render_text(screen_sets["nccl3d_cascade_scheduled"], width=120, verbose=verbose)
        assert text.splitlines()[-3:] == [
            "HUNG: rank 5 at all_reduce #15 in group '2' (tp)",
            "  # next: the entries around the root, every rank side by side",
            f"    fr-analyze -d {where} -j --around-root",
        ]
    healthy = render_text(screen_sets["nccl_healthy"], width=80).splitlines()
    assert healthy[-3].startswith("OK: No desync and nothing stuck")
    assert healthy[-1] == f"    fr-analyze -d {SAMPLES / 'nccl_healthy'} -v"


def test_the_answer_says_when_on_the_culprits_clock_and_when_the_dumps_were_taken(
    screen_sets: dict[str, Analysis],
) -> None:
    text = render_text(screen_sets["nccl3d_cascade_scheduled"])
    assert (
        "when: 2025-10-09 08:53:20.063 UTC on rank 5's clock: rank 5 enqueued all_reduce #15 of "
        "group '2' (tp)" in text
    )
    assert "dumped at 2025-10-09 09:03:21.020 UTC" in text
    data = report_dict(screen_sets["nccl3d_cascade_scheduled"])
    when = data["verdict"]["when_where"]
    assert when["root_time_utc"] == "2025-10-09 08:53:20.063 UTC"
    assert when["root_time_rank"] == 5
    assert when["root_time_what"] == "rank 5 enqueued all_reduce #15 of group '2' (tp)"
    assert when["dump_time_bound"] == "exact"


def test_next_steps_name_the_culprit_and_its_peers_over_the_roots_sequence_ids(
    screen_sets: dict[str, Analysis],
) -> None:
    data = report_dict(screen_sets["nccl3d_cascade_scheduled"])
    commands = [step["command"] for step in data["next_steps"]]
    where = SAMPLES / "nccl3d_cascade_scheduled"
    assert commands[0] == f"fr-analyze -d {where} -j --around-root"
    assert "--selected-ranks 4-7 --seq 12:18" in commands[1]
    assert all(step["runnable"] for step in data["next_steps"])
    assert report_dict(screen_sets["nccl_healthy"])["next_steps"] == []


def test_colour_marks_the_status_and_the_culprit_without_changing_the_characters(
    screen_sets: dict[str, Analysis],
) -> None:
    analysis = screen_sets["nccl3d_cascade_scheduled"]
    styled = report.render_styled(analysis, width=100)
    assert styled.plain == render_text(analysis, width=100)
    styled_words = {styled.plain[s.start : s.end] for s in styled.spans}
    assert "HUNG." in styled_words and "rank 5" in styled_words


def test_a_printed_command_too_long_for_a_line_runs_as_printed() -> None:
    import shlex
    import subprocess

    deep = "/tmp/" + "/".join(f"level{i:02d}" for i in range(14)) + "/dumps"
    command = f"fr-analyze timeline -d {deep} --selected-ranks 0-7 --seq 9:15 -o tl.json"
    lines = report._command(command, 80)
    assert max(len(line) for line in lines) <= 80
    # the shell joins the continued lines (and a word split inside by backslash-newline) back
    echoed = subprocess.run(
        ["bash", "-c", "printf '%s\\n' " + "\n".join(lines).strip()],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert echoed == shlex.split(command)
