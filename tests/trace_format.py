"""A checker for the Chrome trace event format, shared by the timeline and merge tests."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "B": {"name", "ph", "ts", "pid", "tid"},
    "E": {"ph", "ts", "pid", "tid"},
    "i": {"name", "ph", "ts", "pid"},
    "I": {"name", "ph", "ts", "pid"},
    "M": {"name", "ph", "pid", "args"},
    "s": {"name", "ph", "ts", "pid", "tid", "id"},
    "t": {"name", "ph", "ts", "pid", "tid", "id"},
    "f": {"name", "ph", "ts", "pid", "tid", "id"},
    "C": {"name", "ph", "ts", "pid", "args"},
}


def problems(trace: dict[str, Any]) -> list[str]:
    """Everything wrong with `trace`; empty when it is a valid, well-formed trace."""
    out: list[str] = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    named_pids: set[Any] = set()
    named_threads: set[tuple[Any, Any]] = set()
    used_pids: set[Any] = set()
    used_threads: set[tuple[Any, Any]] = set()
    slices: dict[tuple[Any, Any], list[tuple[float, float]]] = defaultdict(list)
    flows: dict[Any, list[str]] = defaultdict(list)
    for i, e in enumerate(events):
        ph = e.get("ph")
        need = REQUIRED.get(ph)
        if need is None:
            continue  # other phases (async, counters of other tools) are passed through
        missing = need - set(e)
        if missing:
            out.append(f"event {i} ({ph}) lacks {sorted(missing)}")
            continue
        if ph == "M":
            if e["name"] == "process_name":
                named_pids.add(e["pid"])
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e.get("tid")))
            continue
        if not isinstance(e["ts"], int | float):
            out.append(f"event {i}: ts is not a number")
        used_pids.add(e["pid"])
        if ph in ("X", "s", "t", "f") or (ph == "i" and e.get("s", "t") == "t"):
            used_threads.add((e["pid"], e["tid"]))
        if ph == "X":
            if e["dur"] < 0:
                out.append(f"event {i}: negative duration")
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        if ph in ("s", "t", "f"):
            flows[(e.get("cat"), e["id"])].append(ph)
    for pid in used_pids - named_pids:
        out.append(f"process {pid} has no process_name")
    for thread in used_threads - named_threads:
        out.append(f"thread {thread} has no thread_name")
    for thread, spans in slices.items():
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and start >= stack[-1] - 1e-6:
                stack.pop()
            if stack and end > stack[-1] + 1e-6:
                out.append(f"thread {thread}: slice {start}-{end} overlaps its parent")
                break
            stack.append(end)
    for key, phases in flows.items():
        if phases.count("s") != 1 or phases.count("f") != 1:
            out.append(f"flow {key} does not start and finish exactly once: {phases}")
    return out
