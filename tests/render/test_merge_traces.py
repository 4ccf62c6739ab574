"""`fr-analyze merge-traces`: real per-rank profiler traces merged into one valid trace."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer.render.traces import MergeOptions, TraceError, inspect, load_trace, merge
from tests.trace_format import problems

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
REAL = DATA / "gloo_4rank"
REAL_FR = DATA / "gloo_4rank_fr"


def events_of(path: Path) -> list[dict[str, Any]]:
    return [e for e in load_trace(path)["traceEvents"] if e.get("ph") != "M"]


def merged(tmp_path: Path, inputs: list[Path], **kw: Any) -> dict[str, Any]:
    out = tmp_path / "merged.json"
    overlay = kw.pop("overlay", None)
    merge(inputs, out, MergeOptions(**kw), overlay)
    trace: dict[str, Any] = json.loads(out.read_text())
    return trace


def test_real_traces_merge_into_a_valid_trace_with_pid_equal_to_rank(tmp_path: Path) -> None:
    trace = merged(tmp_path, [REAL])
    assert problems(trace) == []
    names = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names == {r: f"rank {r}" for r in range(4)}
    pids = [e["pid"] for e in trace["traceEvents"] if e["ph"] != "M"]
    assert pids == sorted(pids)  # ranks appear in order
    assert trace["otherData"]["clock_sync"] == "baseTimeNanoseconds"


def test_every_input_event_appears_exactly_once(tmp_path: Path) -> None:
    trace = merged(tmp_path, [REAL])
    out = [e for e in trace["traceEvents"] if e["ph"] != "M"]
    for rank, path in enumerate(sorted(REAL.iterdir())):
        expected = Counter(
            (e["ph"], e.get("name"), e.get("ts"), e.get("dur")) for e in events_of(path)
        )
        got = Counter(
            (e["ph"], e.get("name"), e.get("ts"), e.get("dur")) for e in out if e["pid"] == rank
        )
        assert got == expected


def test_threads_keep_their_order_and_original_names(tmp_path: Path) -> None:
    trace = merged(tmp_path, [REAL])
    threads = [
        (e["tid"], e["args"]["name"])
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 0
    ]
    assert [t for t, _ in threads] == list(range(1, len(threads) + 1))
    assert all(" / " in name for _, name in threads)


def synthetic(path: Path, rank: int | None, events: list[dict[str, Any]], **top: Any) -> Path:
    data: dict[str, Any] = {"traceEvents": events, **top}
    if rank is not None:
        data["distributedInfo"] = {"rank": rank, "world_size": 2}
    text = json.dumps(data)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def x(name: str, ts: float, dur: float = 10.0) -> dict[str, Any]:
    return {"ph": "X", "name": name, "pid": 100, "tid": 7, "ts": ts, "dur": dur}


def test_clock_sync_timestamps_line_ranks_up(tmp_path: Path) -> None:
    a = synthetic(tmp_path / "a.json", 0, [x("op", 1000.0)], clock_sync_timestamp_us=500.0)
    b = synthetic(tmp_path / "b.json", 1, [x("op", 3000.0)], clock_sync_timestamp_us=2500.0)
    trace = merged(tmp_path, [b, a])
    ops = {e["pid"]: e["ts"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert ops == {0: 1000.0, 1: 1000.0}
    assert trace["otherData"]["clock_offsets_us"] == {"0": 0.0, "1": 2000.0}


def test_base_times_put_relative_timestamps_on_one_clock(tmp_path: Path) -> None:
    a = synthetic(tmp_path / "a.json", 0, [x("op", 1000.0)], baseTimeNanoseconds=5_000_000)
    b = synthetic(tmp_path / "b.json", 1, [x("op", 1000.0)], baseTimeNanoseconds=7_000_000)
    trace = merged(tmp_path, [a, b])
    ops = {e["pid"]: e["ts"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert ops == {0: 1000.0, 1: 3000.0}  # rank 1's base is 2000 µs later


def test_without_clock_metadata_nothing_is_shifted(tmp_path: Path) -> None:
    a = synthetic(tmp_path / "trace_rank0.json", None, [x("op", 10.0)])
    b = synthetic(tmp_path / "trace_rank1.json.gz", None, [x("op", 20.0)])
    trace = merged(tmp_path, [a, b])
    assert trace["otherData"]["clock_sync"] == "none"
    assert {e["pid"]: e["ts"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0: 10, 1: 20}
    assert inspect(a).rank_source == "file name"


def test_a_trace_with_no_rank_anywhere_is_an_error(tmp_path: Path) -> None:
    bad = synthetic(tmp_path / "profile.json", None, [x("op", 1.0)])
    with pytest.raises(TraceError, match="cannot tell the rank"):
        merge([bad], tmp_path / "out.json")


def test_two_traces_for_one_rank_is_an_error(tmp_path: Path) -> None:
    a = synthetic(tmp_path / "a.json", 0, [x("op", 1.0)])
    b = synthetic(tmp_path / "b.json", 0, [x("op", 1.0)])
    with pytest.raises(TraceError, match="two traces for rank 0"):
        merge([a, b], tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_start_end_window_keeps_only_events_inside(tmp_path: Path) -> None:
    a = synthetic(tmp_path / "a.json", 0, [x("early", 0.0), x("mid", 100.0), x("late", 500.0)])
    trace = merged(tmp_path, [a], start_us=50.0, end_us=200.0)
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"] == ["mid"]


def test_steps_window_from_profiler_step_annotations(tmp_path: Path) -> None:
    trace = merged(tmp_path, [REAL], steps=(3, 4))
    assert problems(trace) == []
    steps = {
        e["name"] for e in trace["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")
    }
    assert steps == {"ProfilerStep#3", "ProfilerStep#4"}
    full = merged(tmp_path, [REAL])
    assert len(trace["traceEvents"]) < len(full["traceEvents"])


def test_flight_recorder_overlay_lines_up_with_the_profiler(tmp_path: Path) -> None:
    from fr_analyzer import analyze
    from fr_analyzer.pipeline import Options
    from fr_analyzer.render.timeline import overlay as fr_overlay
    from fr_analyzer.render.traces import expand_inputs, fr_shift_ns

    infos = [inspect(p) for p in expand_inputs([REAL])]
    overlay = fr_overlay(analyze(REAL_FR, Options(workers=1)), fr_shift_ns(infos))
    trace = merged(tmp_path, [REAL], overlay=overlay)
    assert problems(trace) == []
    fr = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] >= 100_000]
    assert {e["pid"] for e in fr} == {0, 1, 2, 3}
    # The newest FR all_reduce of rank 0 starts within a millisecond of the profiler's.
    last_fr = max(e["ts"] for e in fr if e["pid"] == 0 and e["name"].startswith("all_reduce"))
    prof = [
        e["ts"]
        for e in trace["traceEvents"]
        if e["pid"] == 0 and e.get("name") == "gloo:all_reduce"
    ]
    assert min(abs(last_fr - p) for p in prof) < 1000


def test_cli_merge_traces(tmp_path: Path) -> None:
    from tests.cli.test_cli import fr_process as fr

    out = tmp_path / "merged.json"
    result = fr("merge-traces", "-o", str(out), str(REAL), "--fr", str(REAL_FR), "--steps", "2:5")
    assert result.returncode == 0, result.stderr
    assert "clock sync: baseTimeNanoseconds" in result.stdout
    assert problems(json.loads(out.read_text())) == []
    same = fr("merge-traces", "-o", str(REAL / "trace_rank0.json"), str(REAL))
    assert same.returncode == 2 and "is one of the input traces" in same.stderr
