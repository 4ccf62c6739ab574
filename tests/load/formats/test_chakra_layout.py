"""Chakra's layout (issue 47, item 4): Execution Traces beside the PyTorch profiler's Kineto
traces (`kineto_rank0.json`, `<host>.<pid>.pt.trace.json`) and meta files in one folder are
read, and where a Kineto trace and an ET were recorded together, each op's CPU and GPU times
are joined to its ET node by the record function id, so that an op that started and never
ended shows as such. Real files: `tests/data/real_nccl/` (one GPU, NCCL 2.28.9)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import analyze, cli
from fr_analyzer.load.formats import traces as chakra
from fr_analyzer.load.sources.discovery import discover
from fr_analyzer.pipeline import Options

REAL = Path(__file__).resolve().parents[3] / "tests" / "data" / "real_nccl"
REAL_ET = REAL / "et" / "rank-0.et.json"
REAL_KINETO = REAL / "kineto" / "kineto_rank0.json"
BASE_NS = 1_790_857_026_000_000_000


def chakra_folder(where: Path, kineto_name: str = "kineto_rank0.json") -> Path:
    """The real trace, the real Kineto trace and two meta files, as Chakra's tools lay out."""
    where.mkdir()
    shutil.copy(REAL_ET, where / "rank-0.et.json")
    shutil.copy(REAL_KINETO, where / kineto_name)
    (where / "trace_meta_0.json").write_text(json.dumps({"rank": 0, "world_size": 1}))
    (where / "rank-0.meta.json").write_text(json.dumps({"pid": 480}))
    return where


def test_a_folder_in_chakras_layout_is_analyzed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an ET, its rank's Kineto trace and meta files in one folder
    folder = chakra_folder(tmp_path / "chakra")
    # WHEN it is analyzed
    code = cli.run(["-d", str(folder)])
    # THEN the ET is the rank's file, the healthy job is healthy, and nothing says "no
    # readable rank dump"
    out = capsys.readouterr()
    assert code == cli.EXIT_OK, out.out + out.err
    assert "no readable rank dump" not in out.err
    (found,) = discover(folder).files
    assert found.path.name == "rank-0.et.json"
    assert found.kineto is not None and found.kineto.path.name == "kineto_rank0.json"


def test_a_kineto_trace_recorded_apart_from_the_et_joins_no_time_and_says_so(
    tmp_path: Path,
) -> None:
    analysis = analyze(chakra_folder(tmp_path / "chakra"), Options(workers=1))
    assert analysis.conclusion.status.value == "ok"
    (note,) = [w for w in analysis.summary.warnings if "Kineto" in w]
    assert "shares no record function id with its Execution Trace" in note


def test_a_profiler_trace_is_read_beside_the_rank_its_distributed_info_names(
    tmp_path: Path,
) -> None:
    folder = chakra_folder(tmp_path / "chakra", "worker-host_480.1790857026.pt.trace.json")
    (found,) = discover(folder).files
    assert found.kineto is not None
    assert found.kineto.path.name == "worker-host_480.1790857026.pt.trace.json"


def recorded_together(unended: int) -> dict[str, Any]:
    """A Kineto trace of the real ET's ops, as when both are recorded together: each
    `record_param_comms` node's CPU call (its rf_id as the `Record function id`), the
    annotation named like its recorder entry inside it, and that annotation's span on the
    GPU, except for the op at index `unended`, which never ended there."""
    nodes = json.loads(REAL_ET.read_text())["nodes"]
    kids = {n.get("ctrl_deps"): n for n in nodes if str(n.get("name", "")).startswith("nccl:")}
    events: list[dict[str, Any]] = []
    records = [n for n in sorted(nodes, key=lambda n: n["id"]) if n["name"] == "record_param_comms"]
    for i, node in enumerate(r for r in records if r["id"] in kids):
        rf = next(a["value"] for a in node["attrs"] if a["name"] == "rf_id")
        start = 1000.0 * (i + 1)
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "record_param_comms",
                "ts": start,
                "dur": 100.0,
                "args": {"Record function id": rf, "External id": 2 * i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": kids[node["id"]]["name"],
                "ts": start + 10.0,
                "dur": 50.0,
                "args": {"External id": 2 * i + 1},
            }
        )
        if i != unended:
            events.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": kids[node["id"]]["name"],
                    "ts": start + 20.0,
                    "dur": 250.0,
                    "args": {"External id": 2 * i + 1},
                }
            )
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS, "traceEvents": events}


def test_kineto_times_are_joined_to_each_op_and_an_op_that_never_ended_is_named() -> None:
    # GIVEN the real ET and a Kineto trace recorded with it, whose first all_reduce on group
    # '1' (mesh_tp) started on the CPU and never showed on the GPU
    trace = json.loads(REAL_ET.read_text())
    kineto = recorded_together(unended=0)
    # WHEN the trace is read with it
    converted = chakra.to_dump(copy.deepcopy(trace), 0, kineto=(kineto, "kineto_rank0.json"))
    entries = converted.dump["entries"]
    # THEN each op has its CPU start and its GPU span, by its record function id
    timed = [e for e in entries if "duration_ms" in e]
    assert entries[1]["time_created_ns"] == BASE_NS + 2_000_000
    assert entries[1]["time_discovered_started_ns"] == BASE_NS + 2_020_000
    assert entries[1]["time_discovered_completed_ns"] == BASE_NS + 2_270_000
    assert entries[1]["duration_ms"] == pytest.approx(0.25)
    assert len(timed) == 8
    # AND the op that started and never ended is named
    assert entries[0]["time_created_ns"] == BASE_NS + 1_000_000
    assert "duration_ms" not in entries[0]
    assert converted.notes[-1] == (
        "its Kineto trace kineto_rank0.json: nccl:all_reduce #4 of group '1' started on the "
        "CPU and never ended on the GPU"
    )
    assert not any("rf_id" in e for e in entries)  # the join's key is no entry field


def test_an_nccl_kernel_under_an_op_is_its_span_on_the_gpu() -> None:
    # GIVEN a Kineto trace whose profiler saw the communication kernels but no GPU annotation
    # for them, and one op whose kernel never ran
    trace = json.loads(REAL_ET.read_text())
    kineto = recorded_together(unended=0)
    for event in kineto["traceEvents"]:
        if event["cat"] == "gpu_user_annotation":
            event["cat"] = "kernel"
            event["name"] = (
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, ulong, ncclWork*)"
            )
    # AND a kernel of another library under an op, which says nothing of its collective
    kineto["traceEvents"].append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "void at::native::vectorized_elementwise_kernel<4>",
            "ts": 10.0,
            "dur": 5.0,
            "args": {"External id": 1},
        }
    )
    # WHEN the trace is read with it
    converted = chakra.to_dump(copy.deepcopy(trace), 0, kineto=(kineto, "kineto_rank0.json"))
    entries = converted.dump["entries"]
    # THEN each op's GPU span is its kernel's
    assert entries[1]["time_discovered_started_ns"] == BASE_NS + 2_020_000
    assert entries[1]["time_discovered_completed_ns"] == BASE_NS + 2_270_000
    assert len([e for e in entries if "duration_ms" in e]) == 8
    # AND the op whose kernel never ran started and never ended
    assert "duration_ms" not in entries[0]
    assert converted.notes[-1].endswith("started on the CPU and never ended on the GPU")


def test_a_folder_whose_kineto_was_recorded_with_its_et_says_which_op_never_ended(
    tmp_path: Path,
) -> None:
    folder = chakra_folder(tmp_path / "chakra")
    (folder / "kineto_rank0.json").write_text(json.dumps(recorded_together(unended=0)))
    analysis = analyze(folder, Options(workers=1))
    warnings = "\n".join(analysis.summary.warnings)
    assert "CPU and GPU times joined to 9 of 11 ops (by record function id)" in warnings
    assert "nccl:all_reduce #4 of group '1' started on the CPU and never ended on the GPU" in (
        warnings.replace("\n", " ")
    )
