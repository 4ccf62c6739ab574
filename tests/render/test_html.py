"""The HTML incident report: one self-contained page, its mesh read from the process groups,
dump strings escaped; and, in a real headless Chromium, the answer on the page, one cell per
rank with the culprit's outlined, per-cell detail, and no hostile script run.

The browser tests need playwright (`pip install -e '.[html-test]'`) and Debian's `chromium`
(`make` installs both where it can); without them they skip, saying which is missing."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer import analyze
from fr_analyzer.model.groups import GroupTable
from fr_analyzer.model.records import Group, MembershipSource
from fr_analyzer.pipeline import Analysis, Options
from fr_analyzer.render.mesh import UNSPANNED, MeshDim, infer_mesh
from fr_analyzer.render.report_html import Spot, page_data, render_html
from tests.builders import make_dump, make_entry, renumber, write_dumps

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
EVIL = '</script><script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def sample(name: str) -> Analysis:
    return analyze(SAMPLES / name, Options(workers=1))


def groups_of(world: int, families: dict[str, list[list[int]]]) -> GroupTable:
    """A GroupTable holding only groups: the world, then each family's groups."""
    made = [Group(0, "0", "default_pg", tuple(range(world)), MembershipSource.PG_CONFIG)]
    for desc, member_lists in families.items():
        for members in member_lists:
            made.append(
                Group(len(made), str(len(made)), desc, tuple(members), MembershipSource.PG_CONFIG)
            )
    empty = np.zeros(0, dtype=np.int32)
    return GroupTable(tuple(made), empty, tuple(range(world)), (), world, (), empty)


def hostile_job() -> dict[int, dict[str, Any]]:
    """3 ranks whose group description and frame names and file names are markup; rank 2 never
    issues the second all_reduce the others wait in."""
    frames = [
        {"name": EVIL, "filename": f"/x/{EVIL}.py", "line": 7},
        {"name": "main", "filename": "https://example.invalid/train.py", "line": 1},
    ]
    group = ("0", EVIL)
    dumps = {}
    for rank in range(3):
        entries = [make_entry("all_reduce", 1, group=group, frames=frames)]
        if rank != 2:
            entries.append(
                make_entry(
                    "all_reduce", 2, group=group, frames=frames, state="scheduled", retired=False
                )
            )
        dumps[rank] = make_dump(renumber(entries), {"0": (EVIL, [0, 1, 2])})
    return dumps


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    directory = write_dumps(tmp_path_factory.mktemp("hostile"), hostile_job())
    return analyze(directory, Options(workers=1))


# ---------------------------------------------------------------------------------------------
# The mesh, from the process groups


def test_mesh_is_tp_inside_dp_inside_pp_when_the_groups_say_so() -> None:
    # GIVEN 16 ranks in tp groups of 4 consecutive ranks, dp pairs 4 apart, pp pairs 8 apart
    families = {
        "tp": [list(range(s, s + 4)) for s in range(0, 16, 4)],
        "dp": [[s, s + 4] for s in (0, 1, 2, 3, 8, 9, 10, 11)],
        "pp": [[s, s + 8] for s in range(8)],
    }
    # WHEN the mesh is inferred
    mesh = infer_mesh(groups_of(16, families), 16)
    # THEN it is tp (stride 1) inside dp (stride 4) inside pp (stride 8)
    assert mesh == (MeshDim("tp", 4, 1), MeshDim("dp", 2, 4), MeshDim("pp", 2, 8))


def test_a_dimension_no_group_spans_is_named_rest() -> None:
    # GIVEN gloo's view of a 3D job: tp and dp groups, no pp groups (gloo records no send/recv)
    families = {
        "tp": [list(range(s, s + 4)) for s in range(0, 16, 4)],
        "dp": [[s, s + 4] for s in (0, 1, 2, 3, 8, 9, 10, 11)],
    }
    # THEN the pipeline stages are the outer dimension no group spans
    mesh = infer_mesh(groups_of(16, families), 16)
    assert mesh == (MeshDim("tp", 4, 1), MeshDim("dp", 2, 4), MeshDim(UNSPANNED, 2, 8))


def test_no_mesh_from_one_family_or_groups_that_do_not_nest() -> None:
    halves = {"undefined": [[0, 1, 2, 3], [4, 5, 6, 7]]}
    assert infer_mesh(groups_of(8, halves), 8) is None
    crossing = {
        "a": [[0, 1], [2, 3], [4, 5], [6, 7]],
        "b": [[1, 2], [3, 4], [5, 6], [7, 0]],  # not evenly spaced from coordinate 0
    }
    assert infer_mesh(groups_of(8, crossing), 8) is None
    overlapping = {"a": [[0, 1], [2, 3], [4, 5], [6, 7]], "b": [[0, 1, 2, 3], [4, 5, 6, 7]]}
    assert infer_mesh(groups_of(8, overlapping), 8) is None


def test_sample_3d_jobs_are_laid_out_on_their_mesh() -> None:
    assert page_data(sample("nccl3d_stall"))["mesh"] == [["tp", 4, 1], ["dp", 2, 4], ["pp", 2, 8]]
    assert page_data(sample("subgroups_independent_hang"))["mesh"] is None


# ---------------------------------------------------------------------------------------------
# Where every rank stands


def test_a_dead_rank_is_dead_and_its_waiters_wait() -> None:
    data = page_data(sample("nccl_missing_dump"))
    assert data["world"] == 4
    assert data["verdict"]["culprit_ranks"] == [3]
    assert data["ranks"]["spot"] == [Spot.WAITING, Spot.WAITING, Spot.WAITING, Spot.DEAD]


def test_a_straggler_is_late_and_everyone_else_completed() -> None:
    spots = page_data(sample("nccl3d_stall"))["ranks"]["spot"]
    assert spots[10] == Spot.LATE
    assert {s for r, s in enumerate(spots) if r != 10} == {Spot.COMPLETED}


def test_ops_running_when_dumped_are_in_flight_not_waiting() -> None:
    # GIVEN a healthy job dumped mid-step: every rank has an op not yet completed
    data = page_data(sample("nccl3d_mid_step"))
    # THEN nothing is painted as waiting or stuck
    assert set(data["ranks"]["spot"]) == {Spot.IN_FLIGHT}
    assert data["verdict"]["culprit_ranks"] == []


def test_the_legend_names_the_culprits_colour_by_the_root_cause() -> None:
    data = page_data(sample("gloo3d_stuck_rank"))
    assert data["spots"][Spot.STUCK] == "stuck: never joined"
    assert data["ranks"]["spot"][5] == Spot.STUCK


# ---------------------------------------------------------------------------------------------
# One self-contained file, dump strings escaped (no browser)


def test_page_loads_nothing_from_the_network() -> None:
    page = render_html(sample("nccl3d_stall"))
    assert page.startswith("<!DOCTYPE html>")
    assert "default-src 'none'" in page  # the CSP forbids every fetch, whatever slips through
    for tag in ("<link", "<img", "<iframe", "<object", "<embed", "@import"):
        assert tag not in page
    assert not re.search(r"url\((?!#)", page)  # only the page's own fragments (an SVG marker)
    # The only URL is the SVG namespace's name, which no browser fetches.
    assert set(re.findall(r"https?://[^\s\"'<>)]*", page)) == {"http://www.w3.org/2000/svg"}
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?(https?:)?//", page)


def test_markup_in_dump_strings_is_escaped(hostile: Analysis) -> None:
    # GIVEN a job whose group description and frames are markup
    page = render_html(hostile)
    # THEN the page holds exactly its own two script elements and no injected tag
    assert page.count("<script") == 2
    assert page.count("</script>") == 2
    assert "<img" not in page
    # AND the answer shows the markup as text
    answer = page[page.index('<p id="answer-text">') :]
    assert "never joined all_reduce #2 of group &#x27;0&#x27; (&lt;/script&gt;" in answer


def test_the_data_blob_cannot_end_its_script_element(hostile: Analysis) -> None:
    page = render_html(hostile)
    blob = page[page.index('id="fr-data">') : page.index("</script>")]
    assert "<" not in blob.partition(">")[2]
    assert "\\u003c/script\\u003e" in blob


def test_numbers_json_cannot_carry_become_null(hostile: Analysis) -> None:
    # GIVEN a straggler's lateness that is not a number (the page's JSON.parse takes no NaN)
    root = hostile.conclusion.root
    assert root is not None
    odd = replace(root, lateness_s=float("nan"))
    page = render_html(replace(hostile, conclusion=replace(hostile.conclusion, root=odd)))
    # THEN the page still renders, the value as null
    assert '"lateness_s":null' in page
    assert "NaN" not in page


# ---------------------------------------------------------------------------------------------
# In a real browser


class Opened:
    """A report opened in the browser, with what happened while it loaded."""

    def __init__(self, browser: Any, analysis: Analysis, path: Path) -> None:
        path.write_text(render_html(analysis), encoding="utf-8")
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page = browser.new_page(viewport={"width": 1320, "height": 1000})
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-rendered=yes]", timeout=20_000)
        self.url = path.as_uri()


def test_report_shows_the_answer_and_one_cell_per_rank(browser: Any, tmp_path: Path) -> None:
    # GIVEN the 16-rank gloo job where rank 5 never joined
    analysis = sample("gloo3d_stuck_rank")
    # WHEN its report opens in Chromium
    opened = Opened(browser, analysis, tmp_path / "report.html")
    page = opened.page
    # THEN the answer is on the page
    assert page.text_content("#answer-text") == analysis.conclusion.answer
    # AND every rank has exactly one cell, the culprit's outlined
    ranks = page.eval_on_selector_all(".cell.rank", "cells => cells.map(c => +c.dataset.r)")
    assert sorted(ranks) == list(range(16))
    assert page.eval_on_selector_all(".cell.culprit", "cs => cs.map(c => c.dataset.r)") == ["5"]
    outline = page.eval_on_selector(
        ".cell.culprit", "c => [getComputedStyle(c).outlineStyle, getComputedStyle(c).outlineWidth]"
    )
    assert outline == ["solid", "3px"]
    # AND the culprit's detail is shown, the wait chain drawn, the groups listed
    assert page.text_content("#detail h3") == "rank 5"
    assert page.locator("#chain-graph svg g.node").count() == 3
    assert page.locator("#groups-table tbody tr").count() == len(analysis.groups.groups)
    # AND nothing failed, and nothing was fetched but the file itself
    assert opened.errors == []
    assert opened.requests == [opened.url]
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_hovering_a_cell_shows_that_rank(browser: Any, tmp_path: Path) -> None:
    page = Opened(browser, sample("gloo3d_stuck_rank"), tmp_path / "report.html").page
    page.hover(".cell.rank[data-r='0']")
    assert page.text_content("#detail h3") == "rank 0"
    assert "waits for" in page.text_content("#detail")
    page.click(".cell.rank[data-r='12']")  # a click pins it: hovering elsewhere keeps it
    page.hover(".cell.rank[data-r='3']")
    assert page.text_content("#detail h3") == "rank 12"


def test_a_script_in_a_frame_name_does_not_run(
    browser: Any, hostile: Analysis, tmp_path: Path
) -> None:
    opened = Opened(browser, hostile, tmp_path / "hostile.html")
    page = opened.page
    assert page.evaluate("window.__pwned") is None
    assert page.locator("script").count() == 2
    assert page.locator("img").count() == 0
    assert EVIL in page.text_content("#stack-pair")  # shown as text
    assert EVIL in page.text_content("#answer-text")
    assert opened.errors == []
    assert opened.requests == [opened.url]


def test_without_a_mesh_ranks_are_drawn_by_group_family(browser: Any, tmp_path: Path) -> None:
    # GIVEN a job whose only subgroups are two halves: no mesh to read
    analysis = sample("subgroups_independent_hang")
    page = Opened(browser, analysis, tmp_path / "report.html").page
    # THEN one cell per rank, and per rank one cell per family it belongs to
    assert page.locator(".cell.rank").count() == 8
    assert page.locator(".cell.fam").count() == 16  # default_pg and the half it is in
    assert "in rank order" in page.text_content("#layout-note")


def test_a_missing_rank_still_has_its_cell(browser: Any, tmp_path: Path) -> None:
    page = Opened(browser, sample("nccl_missing_dump"), tmp_path / "report.html").page
    assert page.locator(".cell.rank").count() == 4
    assert page.get_attribute(".cell.rank[data-r='3']", "class") == "cell rank s4 culprit"
