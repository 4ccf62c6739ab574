"""`--out-dir DIR` (issue 48, item 2): one run, one load of the dumps, every output in one
folder (report.txt, report.json, report.html, db.pkl, timeline.json), the folder replaced
whole or not at all."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import cli, pipeline
from fr_analyzer.render.renderer import OUT_DIR

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
HUNG = SAMPLES / "nccl3d_cascade_started"
FILES = sorted(name for name, _ in OUT_DIR)


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.run(["-d", str(HUNG), "--workers", "1", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_one_run_writes_every_output_from_one_load(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a hung job WHEN run once with --out-dir THEN the dumps are loaded once and the
    folder holds the whole text report, the JSON report, the page, the database and the
    timeline, each telling the same answer; the screen still gets the report."""
    loads: list[object] = []
    load = pipeline.load

    def counted(*args: Any, **kwargs: Any) -> Any:
        loads.append(args)
        return load(*args, **kwargs)

    monkeypatch.setattr(pipeline, "load", counted)
    out = tmp_path / "incident"

    code, screen, err = run(capsys, "--out-dir", str(out))

    assert code == 1
    assert len(loads) == 1
    assert sorted(p.name for p in out.iterdir()) == FILES
    assert screen.startswith("HUNG. rank 5 is stuck in all_reduce #15")
    assert f"wrote {out} (" in err
    text = (out / "report.txt").read_text()
    assert text.startswith("HUNG. rank 5 is stuck in all_reduce #15")
    assert "Symptoms the root cause explains" in text and "Process groups:" in text  # as -v
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "fr-analyze.report/1"
    assert report["verdict"]["culprit_ranks"] == [5] and report["findings_omitted"] == {}
    assert "<html" in (out / "report.html").read_text().lower()
    with (out / "db.pkl").open("rb") as f:
        assert pickle.load(f)["meta"]["status"] == "hung"
    assert json.loads((out / "timeline.json").read_text())["traceEvents"]
    assert list(tmp_path.iterdir()) == [out]  # no staging folder left beside it


def test_a_second_run_replaces_the_folder_whole(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "incident"
    assert run(capsys, "--out-dir", str(out), "-q")[0] == 1
    (out / "report.txt").write_text("stale")
    assert run(capsys, "--out-dir", str(out), "-q")[0] == 1
    assert (out / "report.txt").read_text().startswith("HUNG.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["incident"]


def test_a_folder_with_other_files_is_refused_before_the_analysis(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a folder holding a file of the user's WHEN given to --out-dir THEN exit 2 before
    any dump is read, the file untouched: the folder would be replaced whole."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.md").write_text("keep me")

    def never(*_: object, **__: object) -> None:
        raise AssertionError("analyzed")

    monkeypatch.setattr(pipeline, "analyze", never)
    code, screen, err = run(capsys, "--out-dir", str(out))
    assert code == 2 and screen == ""
    assert "holds files fr-analyze did not write (notes.md)" in err
    assert (out / "notes.md").read_text() == "keep me"


def test_an_output_that_fails_leaves_the_previous_folder_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a previous run's folder WHEN one output fails to write THEN the previous files
    stay, no half-written folder is left, and the hang's exit code stays 1."""
    from fr_analyzer.errors import OutputError
    from fr_analyzer.render import report_html

    out = tmp_path / "incident"
    assert run(capsys, "--out-dir", str(out), "-q")[0] == 1
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*_: object) -> None:
        raise OutputError("report.html: cannot write: No space left on device")

    monkeypatch.setattr(report_html, "write", broken)
    code, _, err = run(capsys, "--out-dir", str(out), "-q")
    assert code == 1
    assert "fr-analyze: error: report.html: cannot write" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["incident"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-j", "--out-dir", "OUT"], "--out-dir goes without -j"),
        (["--json", "OUT/report.json", "--out-dir", "OUT"], "--out-dir OUT writes that file too"),
        (["--out-dir", "-"], "--out-dir takes a folder"),
    ],
)
def test_out_dir_misuse_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    out = str(tmp_path / "o")
    code, _, err = run(capsys, *[a.replace("OUT", out) for a in args])
    assert code == 2
    assert message.replace("OUT", out) in err


def test_an_out_dir_inside_the_dumps_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--out-dir", str(HUNG / "incident"))
    assert code == 2 and "fr-analyze: error: " in err
    assert not (HUNG / "incident").exists()
