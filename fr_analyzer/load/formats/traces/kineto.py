"""A rank's PyTorch profiler (Kineto) trace joined to its Execution Trace: each op's CPU and GPU
times, by the record function id both carry.

Chakra's layout keeps beside `rank-N.et.json` the Kineto trace of the same run
(`*.pt.trace.json`, `kineto_rankN.json`): `{"baseTimeNanoseconds", "traceEvents": [...]}`,
each event `{"ph": "X", "cat", "name", "ts", "dur", "args"}` in microseconds after the base.
A `cpu_op` event's `args["Record function id"]` is the ET node's `rf_id` attribute when both
were recorded together (0 when Kineto ran alone). Within an op's CPU span, a `user_annotation`
named like the recorder's entry (`nccl:all_reduce`) has an `External id`; the
`gpu_user_annotation` of that id is the op's span on the GPU; so is each communication
kernel (`kernel` events named `nccl...`, such as `ncclDevKernel_AllReduce_Sum_f32_RING_LL`)
launched under it, which carries the same `External id`: where both are there, the span runs
from the first start to the last end. An op whose CPU side is there and whose GPU span is not,
in a trace that holds GPU spans, started and never ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_US = 1000  # ns per Kineto microsecond


def _events(kineto: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    events = kineto.get("traceEvents")
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def join(entries: Sequence[dict[str, Any]], kineto: Mapping[str, Any], where: str) -> list[str]:
    """Set each entry's times from the Kineto trace (changed in place): `time_created_ns` from
    its CPU call's start, `time_discovered_started_ns`/`_completed_ns` and `duration_ms` from
    its span on the GPU. Each entry carries its node's `rf_id` (`to_dump`). Notes for the
    report: how many ops were joined, and each op that started and never ended."""
    base = kineto.get("baseTimeNanoseconds")
    base_ns = base if isinstance(base, int) and not isinstance(base, bool) else 0
    cpu: dict[int, Mapping[str, Any]] = {}
    annotations: list[tuple[float, str, Any]] = []  # (start, name, External id)
    gpu: dict[Any, tuple[float, float]] = {}
    for event in _events(kineto):
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        start, length = _number(event.get("ts")), _number(event.get("dur"))
        if start is None:
            continue
        category, name = event.get("cat"), event.get("name")
        rf = args.get("Record function id")
        if category == "cpu_op" and isinstance(rf, int) and rf > 0:
            cpu.setdefault(rf, event)
        elif category == "user_annotation" and isinstance(name, str):
            annotations.append((start, name, args.get("External id")))
        elif length is not None and (
            category == "gpu_user_annotation"
            or (category == "kernel" and isinstance(name, str) and name.startswith("nccl"))
        ):
            ext = args.get("External id")
            span = gpu.get(ext)
            end = start + length
            gpu[ext] = (start, end) if span is None else (min(span[0], start), max(span[1], end))
    joined = 0
    unended: list[str] = []
    for entry in entries:
        rf = entry.get("rf_id")
        if not isinstance(rf, int) or rf not in cpu:
            continue
        event = cpu[rf]
        start = _number(event.get("ts")) or 0.0
        end = start + (_number(event.get("dur")) or 0.0)
        joined += 1
        entry["time_created_ns"] = base_ns + int(start * _US)
        name = entry.get("profiling_name")
        inside = [
            ext
            for at, label, ext in annotations
            if start <= at <= end and isinstance(name, str) and label == name.split(" ", 1)[0]
        ]
        span = next((gpu[ext] for ext in inside if ext in gpu), None)
        if span is not None:
            entry["time_discovered_started_ns"] = base_ns + int(span[0] * _US)
            entry["time_discovered_completed_ns"] = base_ns + int(span[1] * _US)
            entry["duration_ms"] = (span[1] - span[0]) / 1000.0
        elif gpu:
            group = entry.get("process_group") or ("",)
            seq = entry.get("p2p_seq_id" if entry.get("is_p2p") else "collective_seq_id")
            unended.append(f"{name} #{seq} of group {str(group[0])!r}")
    notes = []
    if joined:
        notes.append(
            f"its Kineto trace {where}: CPU and GPU times joined to {joined} of "
            f"{len(entries)} ops (by record function id)"
        )
    elif entries:
        notes.append(
            f"its Kineto trace {where} shares no record function id with its Execution "
            "Trace (recorded apart): no times joined"
        )
    if unended:
        more = f" and {len(unended) - 3} more" if len(unended) > 3 else ""
        shown = ", ".join(unended[:3]) + more
        notes.append(
            f"its Kineto trace {where}: {shown} started on the CPU and never ended on the GPU"
        )
    return notes
