"""The analysis kept in the user's cache beside the whole table: a follow-up on the same dumps
with the same options skips the analysis and gives the very same reports; anything that
changes the analysis (a dump, a threshold, a job log) makes it again; a kept analysis that
does not read back whole, or names a class it may not, is a miss, dropped."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer import pipeline
from fr_analyzer.cli.app import run
from fr_analyzer.diagnosis import Thresholds
from fr_analyzer.load import Directory, RankCache, decode_kept, encode_kept, kept
from fr_analyzer.load import cache as cache_mod
from fr_analyzer.pipeline import Analysis, Kept, Options, analyze, kept_kinds
from fr_analyzer.render.report_json import report_dict

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
SETS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
FEW = ["barrier_skipped", "gloo3d_stuck_rank", "nccl3d_stall", "fsdp_skip_all_gather"]
"""Sets with skipped findings (shared with `findings`), gloo's `retired` cleared by the
analysis, a 3D job."""


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A copy of a job that skipped a collective (a finding both in `findings` and `skipped`)."""
    return Path(shutil.copytree(SAMPLES / "fsdp_skip_all_gather", tmp_path / "job"))


@pytest.fixture
def not_analyzed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within it, analyzing fails: whatever is analyzed was kept."""

    def refused(*args: Any, **kwargs: Any) -> Analysis:
        raise AssertionError("analyzed, not taken from the cache")

    with monkeypatch.context() as patched:
        patched.setattr(pipeline, "analyze_loaded", refused)
        yield


def _command(
    argv: list[str], capsys: pytest.CaptureFixture[str], *outputs: Path
) -> tuple[int, str, list[bytes]]:
    code = run(argv)
    return code, capsys.readouterr().out, [p.read_bytes() for p in outputs]


@pytest.mark.parametrize("name", SETS)
def test_a_follow_up_from_the_kept_analysis_gives_the_same_text_and_json_reports(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    where = ["-d", str(SAMPLES / name), "-v", "--json"]
    first = _command([*where, str(tmp_path / "a.json")], capsys, tmp_path / "a.json")
    with monkeypatch.context() as patched:
        patched.setattr(pipeline, "analyze_loaded", None)  # a follow-up that analyzes fails
        again = _command([*where, str(tmp_path / "b.json")], capsys, tmp_path / "b.json")
    assert again == first
    assert list((tmp_path / "xdg" / "fr-analyze" / "ranks").glob("*" + cache_mod.KEPT_SUFFIX))


@pytest.mark.parametrize("name", FEW)
def test_a_follow_up_from_the_kept_analysis_gives_the_same_html_and_entries(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    where = ["-d", str(SAMPLES / name)]
    html = tmp_path / "r.html"
    first = [
        _command([*where, "--html", str(html)], capsys, html),
        _command([*where, "-j", "--around-root"], capsys),
        _command([*where, "-j", "--all-entries"], capsys),
    ]
    with monkeypatch.context() as patched:
        patched.setattr(pipeline, "analyze_loaded", None)
        html.unlink()
        again = [
            _command([*where, "--html", str(html)], capsys, html),
            _command([*where, "-j", "--around-root"], capsys),
            _command([*where, "-j", "--all-entries"], capsys),
        ]
    assert again == first


@pytest.mark.parametrize("name", SETS)
def test_every_sample_sets_analysis_reads_back_as_it_was_and_renders_the_same(name: str) -> None:
    done = analyze(Directory(SAMPLES / name), Options())
    made = Kept.of(done, np.zeros(0, np.int64), np.zeros(0, bool))
    data = b"".join(bytes(p) for p in encode_kept(made, kept_kinds(), "k"))
    back = decode_kept(np.frombuffer(bytearray(data), np.uint8), kept_kinds(), "k")
    assert isinstance(back, Kept)
    fields = (back.groups, back.matches, back.findings, back.diagnosis, back.conclusion)
    again = Analysis(back.summary, done.dumps, done.table, *fields)
    assert json.dumps(report_dict(again)) == json.dumps(report_dict(done))
    assert _sharing(again) == _sharing(done)


def _sharing(done: Analysis) -> list[int]:
    """Which of the findings the analysis names in several places are one object: for each,
    the number of the first place it was met (by identity, as `id(f)` and `is` compare)."""
    root = done.conclusion.root
    named = [
        *done.findings,
        *done.matches.findings,
        *done.matches.skipped,
        *done.groups.conflicts,
        *(j.finding for j in done.conclusion.findings),
        *([] if root is None or root.finding is None else [root.finding]),
    ]
    first: dict[int, int] = {}
    return [first.setdefault(id(f), at) for at, f in enumerate(named)]


def _analysis(where: Path, cache: RankCache, **options: Any) -> Analysis:
    return analyze(Directory(where), Options(cache=cache, **options))


def _kept_file(cache: Path) -> Path:
    (found,) = cache.glob("*" + cache_mod.KEPT_SUFFIX)
    return found


def test_skipped_findings_are_the_same_objects_as_the_findings_once_taken_back(
    job: Path, tmp_path: Path
) -> None:
    first = _analysis(job, RankCache(tmp_path / "cache"))
    assert first.matches.skipped  # the set skipped a collective
    again = RankCache(tmp_path / "cache")
    done = _analysis(job, again)
    assert again.kept_hits == 1
    skipped = done.matches.skipped[0]
    assert any(f is skipped for f in done.matches.findings)
    assert _sharing(done) == _sharing(first)
    assert report_dict(done) == report_dict(first)


def _one_dump_changed(job: Path) -> None:
    changed = sorted(job.iterdir())[3]
    info = changed.stat()
    os.utime(changed, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))


def test_a_changed_dump_makes_the_analysis_again(job: Path, tmp_path: Path) -> None:
    _analysis(job, RankCache(tmp_path / "cache"))
    _one_dump_changed(job)
    again = RankCache(tmp_path / "cache")
    fresh = _analysis(job, RankCache(tmp_path / "fresh"))
    assert report_dict(_analysis(job, again)) == report_dict(fresh)
    assert (again.whole_hit, again.kept_hits) == (False, 0)
    third = RankCache(tmp_path / "cache")
    _analysis(job, third)
    assert third.kept_hits == 1  # kept anew beside the new table


def test_changed_thresholds_make_the_analysis_again_and_each_is_kept(
    job: Path, tmp_path: Path
) -> None:
    slow = Thresholds(straggler_ms=1.0)
    plain = _analysis(job, RankCache(tmp_path / "cache"))
    other = RankCache(tmp_path / "cache")
    strict = _analysis(job, other, thresholds=slow)
    assert (other.whole_hit, other.kept_hits) == (True, 0)
    assert report_dict(strict) == report_dict(analyze(Directory(job), Options(thresholds=slow)))
    assert len(list((tmp_path / "cache").glob("*" + cache_mod.KEPT_SUFFIX))) == 2
    for thresholds, expected in ((Thresholds(), plain), (slow, strict)):
        cache = RankCache(tmp_path / "cache")
        assert report_dict(_analysis(job, cache, thresholds=thresholds)) == report_dict(expected)
        assert cache.kept_hits == 1


def test_a_changed_job_log_makes_the_analysis_again(job: Path, tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("nothing timed out\n")
    _analysis(job, RankCache(tmp_path / "cache"), job_logs=(log,))
    same = RankCache(tmp_path / "cache")
    _analysis(job, same, job_logs=(log,))
    assert same.kept_hits == 1
    info = log.stat()
    log.write_text("nothing timed out!\n")  # its size changed, its time kept
    os.utime(log, ns=(info.st_atime_ns, info.st_mtime_ns))
    changed = RankCache(tmp_path / "cache")
    _analysis(job, changed, job_logs=(log,))
    assert changed.kept_hits == 0
    none = RankCache(tmp_path / "cache")
    _analysis(job, none)
    assert none.kept_hits == 0  # no log given: another analysis


@pytest.mark.parametrize("damage", ["truncated", "flipped", "emptied"])
def test_a_damaged_kept_analysis_is_a_miss_and_dropped(
    job: Path, tmp_path: Path, damage: str
) -> None:
    expected = report_dict(_analysis(job, RankCache(tmp_path / "cache")))
    path = _kept_file(tmp_path / "cache")
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":
        data[len(kept.MAGIC) + kept.HEAD.size + 20] ^= 0x01  # inside the JSON
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    again = RankCache(tmp_path / "cache")
    assert report_dict(_analysis(job, again)) == expected
    assert again.kept_hits == 0
    third = RankCache(tmp_path / "cache")  # dropped, then kept again
    assert report_dict(_analysis(job, third)) == expected
    assert third.kept_hits == 1


def _renamed_class(data: bytes, old: str, new: str) -> bytes:
    """The kept analysis `data` naming the class `new` where it named `old`, its hash made
    again: what the allowlist alone must refuse."""
    at = len(kept.MAGIC)
    length, _ = kept.HEAD.unpack_from(data, at)
    start = at + kept.HEAD.size
    text = data[start : start + length].replace(f'"{old}"'.encode(), f'"{new}"'.encode())
    head = kept.HEAD.pack(len(text), hashlib.sha256(text).digest())
    return data[:at] + head + text + data[start + length :]


@pytest.mark.parametrize("name", ["Stranger", "posix.system", "RankDump", "EntryTable"])
def test_a_kept_analysis_naming_a_class_outside_the_allowlist_is_refused(
    job: Path, tmp_path: Path, name: str
) -> None:
    expected = report_dict(_analysis(job, RankCache(tmp_path / "cache")))
    path = _kept_file(tmp_path / "cache")
    path.write_bytes(_renamed_class(path.read_bytes(), "Finding", name))
    again = RankCache(tmp_path / "cache")
    assert report_dict(_analysis(job, again)) == expected
    assert again.kept_hits == 0
    assert "RankDump" not in kept_kinds().by_name and "EntryTable" not in kept_kinds().by_name


def test_a_kept_analysis_others_could_write_or_behind_a_link_is_not_read(
    job: Path, tmp_path: Path
) -> None:
    _analysis(job, RankCache(tmp_path / "cache"))
    path = _kept_file(tmp_path / "cache")
    path.chmod(0o666)
    open_to_others = RankCache(tmp_path / "cache")
    _analysis(job, open_to_others)
    assert open_to_others.kept_hits == 0 and path.exists()  # not read, nor dropped
    moved = tmp_path / "elsewhere.kept"
    path.chmod(0o600)
    path.rename(moved)
    path.symlink_to(moved)
    linked = RankCache(tmp_path / "cache")
    _analysis(job, linked)
    assert linked.kept_hits == 0


def test_the_kept_analysis_is_owner_only_and_counted_in_the_bound(
    job: Path, tmp_path: Path
) -> None:
    _analysis(job, RankCache(tmp_path / "cache"))
    path = _kept_file(tmp_path / "cache")
    assert path.stat().st_mode & 0o777 == 0o600
    table = next((tmp_path / "cache").glob("*" + cache_mod.JOB_SUFFIX))
    bound = table.stat().st_size + path.stat().st_size - 1
    small = RankCache(tmp_path / "cache", max_bytes=bound)
    _analysis(job, small)
    assert sum(p.stat().st_size for p in (tmp_path / "cache").iterdir()) <= bound


def test_no_cache_keeps_no_analysis(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert run(["-d", str(job), "--no-cache", "-q"]) == 1
    assert not (tmp_path / "xdg").exists()


def test_timeline_takes_the_kept_analysis_and_draws_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    where = str(SAMPLES / "gloo3d_stuck_rank")
    trace = tmp_path / "t.json"
    fresh = _command(["timeline", where, "-o", str(trace), "--no-cache"], capsys, trace)
    assert not (tmp_path / "xdg").exists()
    assert _command(["-d", where, "-q"], capsys)[0] == 1  # keeps the table and the analysis
    with monkeypatch.context() as patched:
        patched.setattr(pipeline, "analyze_loaded", None)
        again = _command(["timeline", where, "-o", str(trace)], capsys, trace)
    assert again == fresh
