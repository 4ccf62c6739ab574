"""The one renderer contract (`render.renderer`): every output a registered renderer of the one
analysis result, chosen by flag or by the name's ending, writing what its module renders; and
the text the CLI prints for `merge-traces`."""

from __future__ import annotations

import importlib
import inspect
import io
from pathlib import Path

import pytest
from rich.console import Console

from fr_analyzer import analyze
from fr_analyzer.cli.outputs import Outputs
from fr_analyzer.pipeline import Analysis, Options
from fr_analyzer.render import report, report_html, report_json, timeline, traces
from fr_analyzer.render.renderer import (
    HTML,
    JSON,
    PARQUET,
    PICKLE,
    RENDERERS,
    SQLITE,
    TEXT,
    TIMELINE,
    Entries,
    Rendered,
    ReportOptions,
    for_database,
)

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces" / "gloo_4rank"


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    return analyze(ROOT / "sample_dumps" / "nccl_not_joined", Options(workers=1))


def test_every_output_is_registered_once_with_a_module_that_writes_it() -> None:
    assert sorted(RENDERERS) == ["html", "json", "parquet", "pickle", "sqlite", "text", "timeline"]
    for renderer in RENDERERS.values():
        if renderer is PARQUET:
            continue  # pyarrow, an optional extra, is imported by its write
        write = importlib.import_module(f"fr_analyzer.render.{renderer.module}").write
        arguments = 3 if renderer.takes_options else 2
        assert len(inspect.signature(write).parameters) == arguments, renderer.name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("db.sqlite", SQLITE),
        ("db.SQLITE3", SQLITE),
        ("x/c.db", SQLITE),
        ("DB.Parquet", PARQUET),
        ("db.pkl", PICKLE),
        ("db", PICKLE),
    ],
)
def test_o_picks_the_database_renderer_by_the_name_s_ending(name: str, expected: object) -> None:
    assert for_database(Path(name)) is expected


def test_each_output_says_what_it_reads_of_the_entries() -> None:
    # what decides whether an engine keeps the rows past the analysis (`cli.outputs.Outputs`)
    assert {r.name for r in RENDERERS.values() if r.entries is Entries.NONE} == {"text", "json"}
    assert {r.name for r in RENDERERS.values() if r.entries is Entries.STREAMED} == {
        "sqlite",
        "parquet",
        "pickle",
    }
    assert {r.name for r in RENDERERS.values() if r.entries is Entries.FETCHED} == {
        "html",
        "timeline",
    }
    assert Outputs(database=Path("db.parquet")).entries_taken() is True
    assert Outputs(html=Path("r.html")).entries_taken() is True
    assert Outputs(out_dir=Path("out")).entries_taken() is True
    assert Outputs(json=Path("r.json")).entries_taken() is False
    assert Outputs().entries_taken() is False


def test_reports_are_matched_by_their_own_endings() -> None:
    assert JSON.matches(Path("r.JSON")) and HTML.matches(Path("r.htm"))
    assert not JSON.matches(Path("r.json.gz")) and not TEXT.matches(Path("r.txt"))


def test_json_and_html_renderers_write_what_their_modules_render(
    analysis: Analysis, tmp_path: Path
) -> None:
    written = JSON.render(analysis, tmp_path / "r.json", ReportOptions(cap=3))
    expected = report_json.render_json(analysis, cap=3).encode()
    assert (tmp_path / "r.json").read_bytes() == expected
    assert written == Rendered(size=len(expected))

    page = HTML.render(analysis, tmp_path / "r.html")
    assert (tmp_path / "r.html").read_bytes() == report_html.render_html(analysis).encode()
    assert page.size == (tmp_path / "r.html").stat().st_size


def test_text_renderer_prints_the_report_at_the_console_s_width(analysis: Analysis) -> None:
    screen = io.StringIO()
    console = Console(file=screen, width=70, highlight=False, soft_wrap=True, markup=False)

    TEXT.render(analysis, console, ReportOptions(cap=10, verbose=True))

    assert screen.getvalue() == report.render_text(analysis, verbose=True, cap=10, width=70)


def test_timeline_renderer_writes_the_trace_and_counts_it(
    analysis: Analysis, tmp_path: Path
) -> None:
    options = timeline.TimelineOptions()
    rendered = TIMELINE.render(analysis, tmp_path / "tl.json", options)

    trace = timeline.build(analysis, options)
    data = timeline.encode(trace)
    assert (tmp_path / "tl.json").read_bytes() == data
    slices = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    assert rendered == Rendered(
        size=len(data),
        notes=timeline.notes(trace),
        detail=f": {slices} op slices, {len(trace['traceEvents'])} events",
    )


def test_merge_summary_is_one_row_per_rank_then_the_clock(tmp_path: Path) -> None:
    out = tmp_path / "merged.json"
    merged = traces.merge([TRACES], out)

    lines = traces.summary(merged).splitlines()

    assert lines[0].split()[:3] == ["rank", "file", "rank"]
    assert [line.split()[0] for line in lines[2:-1]] == ["0", "1", "2", "3"]
    assert lines[-1] == f"clock sync: {merged.clock_source}; wrote {out}"
