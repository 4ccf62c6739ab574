"""The HTML report at any size (issue 48, item 6), in a real headless Chromium: at 1,024 ranks
the culprit's cell and its panel are in the first screen (1280x800), alike neighbours share a
cell, every process group can be reached, and rank lists wrap only between ranks; the
culprit's stack is set against its peers' stacks of the same op, only differing frames marked.

The 1,024-rank set is simulated (`benchmarks.gen`) small in entries, so it is made and read in
seconds; without playwright or chromium the browser tests skip, saying which is missing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.gen import Spec, generate
from fr_analyzer import analyze
from fr_analyzer.pipeline import Analysis, Options
from fr_analyzer.render.mesh import FOLD_RANKS, fold_runs
from fr_analyzer.render.report_html import page_data, render_html, wrap_ranks
from tests.builders import make_dump, make_entry, renumber, write_dumps

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SCREEN = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    """1,024 ranks of a 3D-parallel job (tp 8, pp 4, dp 32), few entries each; one rank never
    joins the last world all_reduce, the other 1,023 wait in it."""
    spec = Spec(
        world_size=1024,
        fault="not_joined",
        tp=8,
        pp=4,
        steps=1,
        micro_batches=2,
        eval_micro_batches=1,
        capacity=100,
    )
    manifest, _ = generate(spec, tmp_path_factory.mktemp("big"), workers=1)
    return analyze(Path(manifest.dumps_dir), Options(workers=1))


def culprit_of(analysis: Analysis) -> int:
    root = analysis.conclusion.root
    assert root is not None
    return root.ranks[0]


def open_report(browser: Any, analysis: Analysis, path: Path, viewport: dict[str, int]) -> Any:
    """The report written to `path` and opened in a page of `viewport`'s size, drawn."""
    path.write_text(render_html(analysis), encoding="utf-8")
    page = browser.new_page(viewport=viewport)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-rendered=yes]", timeout=30_000)
    assert errors == []
    return page


def box(page: Any, selector: str) -> dict[str, float]:
    found: dict[str, float] = page.eval_on_selector(
        selector, "e => e.getBoundingClientRect().toJSON()"
    )
    return found


def peer_frames(line: int) -> list[dict[str, Any]]:
    return [
        {"name": "all_reduce", "filename": "/py/torch/distributed/distributed_c10d.py", "line": 9},
        {"name": "train_step", "filename": "/job/train.py", "line": line},
        {"name": "main", "filename": "/job/train.py", "line": 1},
    ]


def one_frame_apart_job() -> dict[int, dict[str, Any]]:
    """3 ranks: all issue all_reduce #1, rank 2 from another line of train_step; ranks 0 and 1
    then wait in all_reduce #2, issued from evaluate, which rank 2 never issues."""
    elsewhere = [
        {"name": "all_reduce", "filename": "/py/torch/distributed/distributed_c10d.py", "line": 9},
        {"name": "evaluate", "filename": "/job/eval.py", "line": 5},
        {"name": "run_eval", "filename": "/job/eval.py", "line": 2},
    ]
    dumps = {}
    for rank in range(3):
        entries = [make_entry("all_reduce", 1, frames=peer_frames(20 if rank == 2 else 10))]
        if rank != 2:
            entries.append(
                make_entry("all_reduce", 2, frames=elsewhere, state="scheduled", retired=False)
            )
        dumps[rank] = make_dump(renumber(entries), {"0": ("default_pg", [0, 1, 2])})
    return dumps


# ---------------------------------------------------------------------------------------------
# Alike neighbours share a cell (no browser)


def test_past_a_few_hundred_ranks_alike_neighbours_fold_into_one_cell(big: Analysis) -> None:
    # GIVEN 1,024 ranks, 1,023 of them waiting in the same op for the one that never joined
    culprit = culprit_of(big)
    # WHEN the page's data is made
    runs = page_data(big)["runs"]
    # THEN the waiters before and after the culprit are a run each, the culprit alone
    assert runs == [[0, culprit - 1], [culprit, culprit], [culprit + 1, 1023]]


def test_a_small_job_keeps_a_cell_per_rank() -> None:
    data = page_data(analyze(SAMPLES / "nccl3d_stall", Options(workers=1)))
    assert data["world"] == 16 <= FOLD_RANKS
    assert data["runs"] is None


def test_runs_break_wherever_a_rank_stands_otherwise() -> None:
    # GIVEN 300 ranks, waiting alike but for rank 7 (another op) and 8 (the same as 7)
    ranks = {"spot": [1] * 300, "blocked": [0] * 300, "newest": [0] * 300, "waits": [-1] * 300}
    ranks["blocked"][7] = ranks["blocked"][8] = 1
    # THEN they fold into three runs
    assert fold_runs(ranks, 300) == [[0, 6], [7, 8], [9, 299]]


def test_ranks_unlike_their_neighbours_keep_a_cell_each() -> None:
    # GIVEN 300 ranks, every other one blocked in another op (as dp groups interleave)
    ranks = {"spot": [1] * 300, "blocked": [r % 2 for r in range(300)]}
    ranks |= {"newest": [0] * 300, "waits": [-1] * 300}
    # THEN folding would not pay: the picture keeps a cell per rank
    assert fold_runs(ranks, 300) is None


# ---------------------------------------------------------------------------------------------
# The culprit's stack beside its peers' at the same op


@pytest.fixture(scope="module")
def apart(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    directory = write_dumps(tmp_path_factory.mktemp("apart"), one_frame_apart_job())
    return analyze(directory, Options(workers=1))


def test_the_culprits_stack_is_set_against_its_peers_at_the_same_op(apart: Analysis) -> None:
    # GIVEN rank 2, whose newest op, all_reduce #1, it issued from another line than its peers,
    # who then wait in all_reduce #2, issued from other code altogether
    assert culprit_of(apart) == 2
    # WHEN the page's data is made
    same = page_data(apart)["stacks"]["same_op"]
    # THEN its stack of all_reduce #1 is set against ranks 0 and 1's of all_reduce #1
    assert same["op"].startswith("all_reduce #1")
    assert (same["ranks"], same["count"], same["issued"]) == ("0-1", 2, 2)
    assert [f[0] for f in same["frames"]] == ["all_reduce", "train_step", "main"]
    assert same["frames"][1][2] == 10


def test_only_the_frames_that_differ_are_marked(
    browser: Any, apart: Analysis, tmp_path: Path
) -> None:
    page = open_report(browser, apart, tmp_path / "r.html", SCREEN)
    marked = page.eval_on_selector_all(
        "#stack-pair li.differs", "items => items.map(i => i.textContent)"
    )
    # one frame on each side: the culprit's line of train_step, and its peers'
    assert marked == ["train_step /job/train.py:20", "train_step /job/train.py:10"]
    assert "1 frame differs" in page.text_content("#stack-verdict")


def test_no_frame_is_marked_where_the_culprit_ran_its_peers_code(
    browser: Any, big: Analysis, tmp_path: Path
) -> None:
    page = open_report(browser, big, tmp_path / "r.html", SCREEN)
    assert page.locator("#stack-pair li").count() > 0
    assert page.locator("#stack-pair li.differs").count() == 0
    assert "No frame differs" in page.text_content("#stack-verdict")


# ---------------------------------------------------------------------------------------------
# 1,024 ranks in Chromium


def test_at_1024_ranks_the_culprits_cell_and_panel_are_in_the_first_screen(
    browser: Any, big: Analysis, tmp_path: Path
) -> None:
    # GIVEN the 1,024-rank report in a 1280x800 window, not scrolled
    culprit = culprit_of(big)
    page = open_report(browser, big, tmp_path / "r.html", SCREEN)
    # THEN the culprit's cell is wholly in the window
    cell = box(page, ".cell.culprit")
    assert page.get_attribute(".cell.culprit", "data-r") == str(culprit)
    assert cell["top"] >= 0 and cell["bottom"] <= SCREEN["height"]
    assert cell["left"] >= 0 and cell["right"] <= SCREEN["width"]
    # AND so is its panel's heading, which names it
    assert page.text_content("#detail h3") == f"rank {culprit}"
    assert box(page, "#detail h3")["bottom"] <= SCREEN["height"]
    # AND the grid has far fewer cells than ranks
    assert page.locator("#grid .cell").count() <= 10


def test_at_16_ranks_the_culprits_cell_and_panel_are_in_the_first_screen(
    browser: Any, tmp_path: Path
) -> None:
    # GIVEN the 16-rank job where rank 13 disagrees on a size, drawn a cell per rank
    analysis = analyze(SAMPLES / "nccl3d_dp_pair_mismatch", Options(workers=1))
    page = open_report(browser, analysis, tmp_path / "r.html", SCREEN)
    assert page.locator("#grid .cell.rank").count() == 16
    # THEN its cell and its panel's heading are in the window
    assert page.get_attribute(".cell.culprit", "data-r") == "13"
    assert box(page, ".cell.culprit")["bottom"] <= SCREEN["height"]
    assert page.text_content("#detail h3") == "rank 13"
    assert box(page, "#detail h3")["bottom"] <= SCREEN["height"]


def test_a_rank_inside_a_folded_cell_can_be_shown_alone(
    browser: Any, big: Analysis, tmp_path: Path
) -> None:
    page = open_report(browser, big, tmp_path / "r.html", SCREEN)
    page.fill("#find", "700")
    page.press("#find", "Enter")
    assert page.text_content("#detail h3") == "rank 700"
    culprit = culprit_of(big)
    assert f"One of ranks {culprit + 1}-1023" in page.text_content("#detail")
    assert page.get_attribute(".cell.pinned", "data-r") == str(culprit + 1)


def test_every_group_can_be_reached_page_by_page(
    browser: Any, big: Analysis, tmp_path: Path
) -> None:
    # GIVEN more groups than one page of the table holds
    everyone = {str(g.uid) for g in big.groups.groups}
    assert len(everyone) > 300
    page = open_report(browser, big, tmp_path / "r.html", SCREEN)
    # WHEN one pages through the table to its end
    seen: list[str] = []
    for _ in range(len(everyone)):
        seen += page.eval_on_selector_all(
            "#groups-table tbody tr", "rows => rows.map(r => r.dataset.group)"
        )
        if page.is_disabled("#group-next"):
            break
        page.click("#group-next")
    # THEN every group was listed, once
    assert sorted(seen) == sorted(everyone)


def test_a_rank_typed_in_the_filter_lists_its_groups(
    browser: Any, big: Analysis, tmp_path: Path
) -> None:
    page = open_report(browser, big, tmp_path / "r.html", SCREEN)
    page.fill("#group-filter", "517")
    listed = page.eval_on_selector_all(
        "#groups-table tbody tr", "rows => rows.map(r => r.dataset.group)"
    )
    expected = {str(g.uid) for g in big.groups.groups if 517 in g.ranks or g.name == "517"}
    assert set(listed) == expected
    assert len(listed) >= 4  # the world, and its tp, dp and pp groups


def test_the_answers_rank_lists_break_after_commas_only() -> None:
    text = wrap_ranks("ranks 0-516,518-1023 wait for 3,5 <b>")
    assert text == (
        'ranks <span class="nowrap">0-516</span>,<wbr><span class="nowrap">518-1023</span> '
        "wait for 3,<wbr>5 &lt;b&gt;"
    )


_SPLIT_NUMBERS = """() => {
  let wrapped = 0;
  const split = [];
  for (const list of document.querySelectorAll(".ranks, #answer-text")) {
    if (new Set([...list.getClientRects()].map((r) => Math.round(r.top))).size > 1) wrapped++;
    const walk = document.createTreeWalker(list, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      for (const m of node.data.matchAll(/\\d+(-\\d+)?/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (lines.size > 1) split.push(m[0]);
      }
    }
  }
  return [wrapped, split];
}"""


def test_rank_lists_wrap_between_ranks_never_inside_a_number(
    browser: Any, big: Analysis, tmp_path: Path
) -> None:
    # GIVEN a narrow window listing the dp groups, 32 ranks 8 apart each ("0,8,16,...,248")
    page = open_report(browser, big, tmp_path / "r.html", {"width": 700, "height": 800})
    page.fill("#group-filter", "dp")
    assert page.locator("#groups-table tbody tr").count() > 0
    # WHEN the page lays them out
    wrapped, split = page.evaluate(_SPLIT_NUMBERS)
    # THEN long lists wrap onto more lines, and no rank or range is cut across two
    assert wrapped > 0
    assert split == []
