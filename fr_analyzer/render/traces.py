"""Merge per-rank Chrome/Kineto traces (PyTorch profiler exports) into one trace.

Every rank becomes one process (pid = global rank, named `rank N`, sorted by rank); each input
(pid, tid) becomes one thread of that process, in the input's own thread order. The rank comes
from the trace (`distributedInfo.rank`, or a top-level `rank`), else from the file name. Clocks
are synced per rank with its `clock_sync_timestamp_us` metadata when every rank has it, else
with the traces' base times (`baseTimeNanoseconds`), else not at all; the offsets are reported.
Inputs are read one at a time and written out as they go, so memory is bounded by one rank's
trace, not the sum. Flight Recorder timelines can be overlaid on the same ranks.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import FrAnalyzerError
from ..load import parse_json
from ..model.numbers import decimal
from ..model.ranks import MAX_RANK
from .output import atomic_writer

_HEAD_BYTES = 1 << 20
_RANK_IN_NAME = re.compile(r"([0-9]+)(?:\.pt)?\.json(?:\.gz)?$")
_STEP = re.compile(r"^ProfilerStep#([0-9]+)$")
_RENAMED_META = frozenset(
    {"process_name", "process_sort_index", "thread_name", "thread_sort_index", "process_labels"}
)


class TraceError(FrAnalyzerError):
    """A trace file that cannot be merged; the message names the file."""


@dataclass(frozen=True)
class TraceInfo:
    """What pass 1 learns of one input without keeping its events."""

    path: Path
    rank: int
    rank_source: str  # "trace" or "file name"
    clock_sync_us: float | None
    base_time_us: float | None
    events: int
    ts_origin_us: float  # what its `ts` values count from: 0 (epoch) or its base time


@dataclass(frozen=True)
class MergeOptions:
    """Which part of the profiler traces to keep: a time window or a range of profiler steps."""

    start_us: float | None = None
    end_us: float | None = None
    steps: tuple[int, int] | None = None  # ProfilerStep#A..#B inclusive


@dataclass
class RankReport:
    file: str
    rank: int
    rank_source: str
    offset_us: float
    events_in: int
    events_out: int
    warnings: list[str] = field(default_factory=list)


@dataclass
class MergeReport:
    """What a merge did: the clock it aligned the ranks on, each rank's trace, the output."""

    clock_source: str
    ranks: list[RankReport]
    output: str


def expand_inputs(inputs: Sequence[Path]) -> list[Path]:
    """Directories contribute their `*.json` / `*.json.gz` files (recursively)."""
    out: list[Path] = []
    for item in inputs:
        if item.is_dir():
            found = sorted(
                p
                for p in item.rglob("*")
                if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
            )
            out.extend(found)
        elif item.is_file():
            out.append(item)
        else:
            raise TraceError(f"{item}: no such file or directory")
    if not out:
        raise TraceError("no trace files to merge")
    return out


def _open(path: Path) -> IO[bytes]:
    raw = path.open("rb")
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    raw.seek(0)
    return raw


def load_trace(path: Path) -> dict[str, Any]:
    """One trace file as a dict with `traceEvents` (a bare event list is accepted too)."""
    try:
        with _open(path) as stream:
            data = parse_json(stream.read())
    except (OSError, EOFError, ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: not a readable JSON trace: {exc}") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceError(f"{path}: no traceEvents list: not a Chrome trace")
    return data


def _rank_of(data: dict[str, Any], path: Path) -> tuple[int, str]:
    info = data.get("distributedInfo")
    for holder in (info if isinstance(info, dict) else {}, data):
        rank = holder.get("rank")
        if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
            return rank, "trace"
    found = _RANK_IN_NAME.search(path.name)
    number = decimal(found.group(1), MAX_RANK) if found else None
    if number is not None:
        return number, "file name"
    raise TraceError(
        f"{path}: cannot tell the rank (no distributedInfo.rank in the trace and "
        "no rank number in the file name)"
    )


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def inspect(path: Path) -> TraceInfo:
    """Pass 1: rank and clock metadata of one trace (its events are dropped right away)."""
    data = load_trace(path)
    rank, source = _rank_of(data, path)
    sync = _number(data.get("clock_sync_timestamp_us"))
    if sync is None:
        for e in data["traceEvents"]:
            if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "clock_sync":
                sync = _number(e.get("args", {}).get("clock_sync_timestamp_us"))
                break
    base_ns = _number(data.get("baseTimeNanoseconds"))
    base_us = None if base_ns is None else base_ns / 1000.0
    # Profiler traces write `ts` either as µs since the epoch or relative to their base time;
    # epoch µs are ~1.7e15 today, relative ones are far smaller.
    stamps = [
        t
        for e in data["traceEvents"][:1000]
        if isinstance(e, dict) and e.get("ph") == "X" and (t := _number(e.get("ts"))) is not None
    ]
    relative = base_us is not None and bool(stamps) and max(stamps) < 1e14
    origin = base_us if relative and base_us is not None else 0.0
    return TraceInfo(path, rank, source, sync, base_us, len(data["traceEvents"]), origin)


def clock_offsets(infos: Sequence[TraceInfo]) -> tuple[str, dict[int, float]]:
    """Offsets (µs) to subtract from each rank's `ts`, and which clock source was used.

    With `clock_sync_timestamp_us` on every rank (one real moment, stamped on each rank's own
    clock) the sync points are made to coincide. Else, with base times, each trace's `ts` is
    put back on the epoch clock it counts from (relative `ts` + base time), measured from the
    lowest rank's origin. Else nothing is shifted.
    """
    if not infos:
        return "none", {}
    ref = min(infos, key=lambda i: i.rank)
    if all(i.clock_sync_us is not None for i in infos):
        base = ref.clock_sync_us or 0.0
        return "clock_sync_timestamp_us", {i.rank: (i.clock_sync_us or 0.0) - base for i in infos}
    if all(i.base_time_us is not None for i in infos):
        return "baseTimeNanoseconds", {
            i.rank: ref.ts_origin_us - i.ts_origin_us + 0.0 for i in infos
        }
    return "none", {i.rank: 0.0 for i in infos}


def fr_shift_ns(infos: Sequence[TraceInfo]) -> dict[int, int]:
    """Where each merged rank's clock puts its Flight Recorder times: the shift, in ns, that
    `timeline.overlay` applies to draw the recorder's ops on the merged trace's clock."""
    _, offsets = clock_offsets(infos)
    return {i.rank: round((i.ts_origin_us + offsets[i.rank]) * 1000) for i in infos}


def _sort_key(event: dict[str, Any]) -> tuple[int, float]:
    ts = _number(event.get("ts"))
    return (0 if event.get("ph") == "M" else 1, ts if ts is not None else 0.0)


def _step_window(
    events: list[dict[str, Any]], steps: tuple[int, int]
) -> tuple[float, float] | None:
    low, high = steps
    spans = []
    for e in events:
        name = e.get("name")
        if e.get("ph") != "X" or not isinstance(name, str):
            continue
        found = _STEP.match(name)
        step = decimal(found.group(1)) if found else None
        if step is not None and low <= step <= high:
            ts, dur = _number(e.get("ts")), _number(e.get("dur")) or 0.0
            if ts is not None:
                spans.append((ts, ts + dur))
    if not spans:
        return None
    return min(s for s, _ in spans), max(e for _, e in spans)


def rank_events(
    data: dict[str, Any], rank: int, offset_us: float, options: MergeOptions, report: RankReport
) -> Iterator[dict[str, Any]]:
    """One rank's events, renamed into its process and shifted onto the common clock."""
    events = [e for e in data["traceEvents"] if isinstance(e, dict)]
    names: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    thread_order: dict[tuple[Any, Any], float] = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        raw_args = e.get("args")
        args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
        if e.get("name") == "process_name":
            names[e.get("pid")] = str(args.get("name", e.get("pid")))
        elif e.get("name") == "thread_name":
            thread_names[(e.get("pid"), e.get("tid"))] = str(args.get("name", e.get("tid")))
        elif e.get("name") == "thread_sort_index":
            thread_order[(e.get("pid"), e.get("tid"))] = _number(args.get("sort_index")) or 0.0
    threads = sorted(
        {(e.get("pid"), e.get("tid")) for e in events if "pid" in e},
        key=lambda k: (thread_order.get(k, float("inf")), str(k[0]), str(k[1])),
    )
    new_tid = {key: i + 1 for i, key in enumerate(threads)}
    window = (options.start_us, options.end_us)
    if options.steps is not None:
        span = _step_window(events, options.steps)
        if span is None:
            report.warnings.append(f"no ProfilerStep#{options.steps[0]}..#{options.steps[1]}")
            return
        window = (span[0] - offset_us, span[1] - offset_us)
    yield {
        "name": "process_name",
        "ph": "M",
        "pid": rank,
        "tid": 0,
        "args": {"name": f"rank {rank}"},
    }
    yield {
        "name": "process_sort_index",
        "ph": "M",
        "pid": rank,
        "tid": 0,
        "args": {"sort_index": rank},
    }
    for key, tid in new_tid.items():
        pid, old_tid = key
        label = f"{names.get(pid, pid)} / {thread_names.get(key, old_tid)}"
        yield {"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": label}}
        yield {
            "name": "thread_sort_index",
            "ph": "M",
            "pid": rank,
            "tid": tid,
            "args": {"sort_index": tid},
        }
    events.sort(key=_sort_key)
    start, end = window
    for e in events:
        if e.get("ph") == "M" and e.get("name") in _RENAMED_META:
            continue
        out = dict(e)
        ts = _number(e.get("ts"))
        if ts is not None:
            ts -= offset_us
            dur = _number(e.get("dur")) or 0.0
            if e.get("ph") != "M" and (
                (start is not None and ts < start) or (end is not None and ts + dur > end)
            ):
                continue
            out["ts"] = round(ts, 3)
        out["pid"] = rank
        out["tid"] = new_tid.get((e.get("pid"), e.get("tid")), 0)
        if "id" in out and e.get("ph") in ("s", "t", "f", "b", "e", "n"):
            out["id"] = f"r{rank}:{e['id']}"  # flow and async ids are only unique per rank
        report.events_out += 1
        yield out


def merge(
    inputs: Sequence[Path],
    output: Path,
    options: MergeOptions | None = None,
    overlay: Iterable[dict[str, Any]] | None = None,
    infos: Sequence[TraceInfo] | None = None,
) -> MergeReport:
    """Merge the traces into `output` (written atomically), streaming one rank at a time."""
    options = options or MergeOptions()
    files = expand_inputs(inputs)
    infos = list(infos) if infos is not None else [inspect(p) for p in files]
    seen: dict[int, Path] = {}
    for info in infos:
        if info.rank in seen:
            raise TraceError(f"two traces for rank {info.rank}: {seen[info.rank]} and {info.path}")
        seen[info.rank] = info.path
    clock, offsets = clock_offsets(infos)
    reports: list[RankReport] = []
    with atomic_writer(output) as raw:
        stream = io.TextIOWrapper(raw, encoding="utf-8")
        try:
            stream.write('{"traceEvents": [\n')
            first = True
            for info in sorted(infos, key=lambda i: i.rank):
                report = RankReport(
                    str(info.path), info.rank, info.rank_source, offsets[info.rank], info.events, 0
                )
                reports.append(report)
                data = load_trace(info.path)
                for event in rank_events(data, info.rank, offsets[info.rank], options, report):
                    stream.write(("" if first else ",\n") + json.dumps(event))
                    first = False
                del data
            for event in overlay or ():
                stream.write(("" if first else ",\n") + json.dumps(event))
                first = False
            meta = {
                "generator": "fr-analyze merge-traces",
                "clock_sync": clock,
                "clock_offsets_us": {str(r.rank): r.offset_us for r in reports},
                "inputs": {str(r.rank): r.file for r in reports},
            }
            stream.write('\n], "displayTimeUnit": "ms", "otherData": ' + json.dumps(meta) + "}\n")
        finally:
            stream.flush()
            stream.detach()  # atomic_writer syncs and closes the file itself
    return MergeReport(clock, reports, str(output))


def summary(report: MergeReport) -> str:
    """What `merge-traces` prints: one row per rank (its file, where its rank came from, the
    clock offset, events in and out, warnings), then the clock sync used and the output."""
    from tabulate import tabulate

    rows = [
        [
            r.rank,
            r.file,
            r.rank_source,
            f"{r.offset_us:.1f}",
            r.events_in,
            r.events_out,
            "; ".join(r.warnings),
        ]
        for r in report.ranks
    ]
    table = tabulate(
        rows,
        headers=["rank", "file", "rank from", "offset µs", "events in", "events out", "warnings"],
        tablefmt="simple",
    )
    return f"{table}\nclock sync: {report.clock_source}; wrote {report.output}\n"


__all__ = [
    "MergeOptions",
    "MergeReport",
    "TraceError",
    "expand_inputs",
    "inspect",
    "merge",
    "summary",
]
