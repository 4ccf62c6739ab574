"""torchcomms dumps read as its source writes them (meta-pytorch/torchcomms,
`comms/torchcomms/hooks/fr/FlightRecorder.cpp`, `TorchComm.cpp`): an op is retired in the hook
that runs when its call returns. On gloo the call runs the op, so `retired` means it finished
and a hung op stays unretired; on NCCL the call only enqueues it, so every issued op is retired
with its state (and discovery times) read then, not at the dump; `timeout_ms` is a constant
600000 on every backend, not the communicator's timeout.

The jobs are `sample_dumps/torchcomms_*` (a simulated NCCL job as torchcomms writes it),
rewritten per case as torchcomms would have written the same job on gloo, or on CUDA with the
GPU already running each op when its call returned."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np

from fr_analyzer import analyze
from fr_analyzer.load.formats.dialects import rewrite
from fr_analyzer.model.recorders import Dialect, description, reports_completion
from fr_analyzer.pipeline import Options
from tests.builders import fr_json

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_dumps"
ENQUEUE_NS = 30_000
"""How long after `time_created_ns` a call returns when it only enqueues the op (CUDA)."""

Edit = Callable[[dict[int, dict[str, Any]]], None]


fr = fr_json


def torchcomms_job(sample: str, target: Path, edit: Edit) -> Path:
    """A copy of `sample_dumps/<sample>/per_rank` (rank: dump), changed by `edit`."""
    source = SAMPLES / sample / "per_rank"
    dumps = {int(p.name.split("_")[-1]): pickle.loads(p.read_bytes()) for p in source.iterdir()}
    edit(dumps)
    folder = target / "dumps" / "per_rank"
    folder.mkdir(parents=True)
    for rank, dump in dumps.items():
        (folder / f"rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))
    return folder.parent


def on_gloo(waiting: Collection[int] = ()) -> Edit:
    """The job as torchcomms writes it on gloo: communicators and ops named `gloo`; every call
    returned (retired) but the newest of each rank in `waiting`, a call that never returned.
    gloo ops have no device events: `scheduled`, no discovery times."""

    def edit(dumps: dict[int, dict[str, Any]]) -> None:
        for rank, dump in dumps.items():
            for config in dump["pg_config"].values():
                config["desc"] = "gloo"
            for entry in dump["entries"]:
                entry["profiling_name"] = entry["profiling_name"].replace("nccl:", "gloo:")
                entry["process_group"] = (entry["process_group"][0], "gloo")
                entry["retired"] = True
            if rank in waiting:
                dump["entries"][-1]["retired"] = False

    return edit


def on_cuda_started(dumps: dict[int, dict[str, Any]]) -> None:
    """The job as torchcomms writes it on CUDA when the GPU had reached each op by the time
    its call returned: `started`, discovered then (not at the dump), retired."""
    for dump in dumps.values():
        for entry in dump["entries"]:
            entry["state"] = "started"
            entry["time_discovered_started_ns"] = entry["time_created_ns"] + ENQUEUE_NS
            entry["duration_ms"] = ENQUEUE_NS / 1e6  # the call's wall-clock time


def rank_5_issues_it_too(dumps: dict[int, dict[str, Any]]) -> None:
    """In `torchcomms_not_joined`, rank 5 issues the world all_reduce the others issued last."""
    mine = dumps[5]["entries"]
    joined = copy.deepcopy(dumps[4]["entries"][-1])
    counter = mine[-1]["record_id"] + 1
    joined.update(record_id=counter, collective_seq_id=counter, op_id=counter)
    joined["time_created_ns"] = mine[-1]["time_created_ns"] + 1_000_000
    mine.append(joined)


def both(*edits: Edit) -> Edit:
    def edit(dumps: dict[int, dict[str, Any]]) -> None:
        for one in edits:
            one(dumps)

    return edit


# --- gloo: retired means the call returned, so the op finished ----------------------------


def test_a_gloo_job_stuck_on_every_rank_is_hung_in_the_op_no_call_returned(
    tmp_path: Path,
) -> None:
    """Every rank issued all_reduce #5 of 'world' and none of the calls returned."""
    stuck = both(rank_5_issues_it_too, on_gloo(waiting=range(8)))
    code, text, report = fr("-d", str(torchcomms_job("torchcomms_not_joined", tmp_path, stuck)))
    assert code == 1, text
    verdict = report["verdict"]
    assert verdict["status"] == "hung", text
    assert (verdict["group"], verdict["op"], verdict["collective_seq_id"]) == (
        "world",
        "all_reduce",
        5,
    )
    assert "ranks 0-7 are stuck in all_reduce #5 of group 'world' (gloo)" in text
    assert verdict["timing"]["age"] == "unknown" and verdict["timing"]["stuck"] is True


def test_a_healthy_gloo_job_whose_calls_all_returned_is_ok(tmp_path: Path) -> None:
    code, text, report = fr("-d", str(torchcomms_job("torchcomms_healthy", tmp_path, on_gloo())))
    assert code == 0 and text.startswith("OK. "), text
    assert report["verdict"]["status"] == "ok"
    warnings = " ".join(report["dumps"]["warnings"])
    assert "on gloo an op is retired when its call returned, so it finished" in warnings
    assert "progress is judged by what every rank issued" not in warnings


def test_on_gloo_the_rank_that_never_issued_the_op_its_peers_wait_in_is_named(
    tmp_path: Path,
) -> None:
    waiting = on_gloo(waiting=[0, 1, 2, 3, 4, 6, 7])
    result = analyze(torchcomms_job("torchcomms_not_joined", tmp_path, waiting), Options())
    c = result.conclusion
    assert c.status.value == "hung" and c.root is not None, c.answer
    assert c.root.ranks == (5,)


def test_on_gloo_the_calls_that_returned_stay_retired_and_judged_by_it(tmp_path: Path) -> None:
    result = analyze(torchcomms_job("torchcomms_healthy", tmp_path, on_gloo()), Options())
    assert result.table.retired.all()
    assert result.matches.done.all()


def world_on_gloo(dumps: dict[int, dict[str, Any]]) -> None:
    """Only the world communicator on gloo (its ops retired when their call returned; the
    newest, the world all_reduce rank 5 never issued, not on the ranks waiting in it); the
    split communicators stay on NCCL."""
    for rank, dump in dumps.items():
        dump["pg_config"]["world"]["desc"] = "gloo"
        for entry in dump["entries"]:
            if entry["process_group"][0] == "world":
                entry["profiling_name"] = entry["profiling_name"].replace("nccl:", "gloo:")
                entry["process_group"] = ("world", "gloo")
        if rank != 5:
            dump["entries"][-1]["retired"] = False


def test_each_communicator_is_judged_as_its_own_backend_tells(tmp_path: Path) -> None:
    """gloo rows by `retired`, NCCL rows by what every rank issued, in one job."""
    result = analyze(torchcomms_job("torchcomms_not_joined", tmp_path, world_on_gloo), Options())
    c = result.conclusion
    assert c.status.value == "hung" and c.root is not None and c.root.ranks == (5,), c.answer
    t = result.table
    gloo = t.backend == t.backends.index("gloo")
    done = result.matches.done
    assert done[~gloo].all()  # NCCL rows: every member issued them
    assert done[gloo].sum() == gloo.sum() - 7  # gloo rows: all but the 7 calls never returned
    (line,) = [w for w in result.summary.warnings if w.startswith("ranks 0-7: torchcomms")]
    assert "on gloo an op is retired when its call returned" in line
    assert "on nccl the recorder does not say whether an op finished" in line


# --- NCCL: retired means enqueued; the state was read then --------------------------------


def test_a_cuda_job_where_rank_5_never_issued_the_op_is_hung_not_in_flight(
    tmp_path: Path,
) -> None:
    """Each op was seen `started` when its call returned: that stamp is not the dump time."""
    folder = torchcomms_job("torchcomms_not_joined", tmp_path, on_cuda_started)
    code, text, report = fr("-d", str(folder))
    assert code == 1, text
    verdict = report["verdict"]
    assert verdict["status"] == "hung" and verdict["culprit_ranks"] == [5], text
    assert "in flight" not in verdict["summary"] and " 0.0 s old" not in text
    timing = verdict["timing"]
    assert timing["age"] == "unknown" and timing["dump_time_exact"] is False
    assert "the recorder keeps no timeout of its own" in timing["note"]


def test_the_sample_where_rank_5_never_issued_the_op_has_an_unknown_age() -> None:
    """Neither the dump time (no op looked at during the dump; the files' times are the
    checkout's) nor a timeout (torchcomms writes a constant) is known."""
    code, text, report = fr("-d", str(SAMPLES / "torchcomms_not_joined"))
    assert code == 1, text
    verdict = report["verdict"]
    assert verdict["status"] == "hung" and verdict["culprit_ranks"] == [5]
    assert verdict["timing"]["age"] == "unknown"
    assert "in flight" not in verdict["summary"]
    assert "keeps no timeout of its own (torchcomms writes a constant)" in text


def test_nccl_ops_are_not_taken_as_finished_nor_their_enqueue_stamps_as_the_dump(
    tmp_path: Path,
) -> None:
    result = analyze(torchcomms_job("torchcomms_healthy", tmp_path, on_cuda_started), Options())
    t = result.table
    assert not t.retired.any()
    assert (t.t_started < 0).all() and (t.t_completed < 0).all()
    assert np.isnan(t.duration_ms).all()  # the call's wall-clock time, not the op's
    assert result.conclusion.status.value == "ok"


def test_the_timeout_torchcomms_writes_is_not_taken_as_the_jobs(tmp_path: Path) -> None:
    for edit in (on_gloo(), on_cuda_started):
        result = analyze(torchcomms_job("torchcomms_healthy", tmp_path / str(id(edit)), edit))
        assert (result.table.timeout_ms < 0).all()  # unset: not 600 s


# --- the rewrite, entry by entry ----------------------------------------------------------


def _one(backend: str, **entry: Any) -> dict[str, Any]:
    """One torchcomms entry on a two-rank communicator of `backend`, after the rewrite."""
    raw: dict[str, Any] = {
        "version": "2.10",
        "pg_config": {"world": {"name": "world", "desc": backend, "ranks": "[0,1]"}},
        "pg_status": {},
        "entries": [
            {
                "record_id": 0,
                "process_group": ("world", backend),
                "collective_seq_id": 0,
                "p2p_seq_id": 0,
                "profiling_name": f"{backend}:all_reduce",
                "time_created_ns": 1_000,
                "state": "scheduled",
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": True,
                "timeout_ms": 600000,
                "is_p2p": False,
                **entry,
            }
        ],
    }
    rewrite(raw, 0, Dialect.TORCHCOMMS)
    out: dict[str, Any] = raw["entries"][0]
    return out


def test_on_gloo_retired_is_kept_either_way() -> None:
    assert _one("gloo", retired=True)["retired"] is True
    assert _one("gloo", retired=False)["retired"] is False
    assert _one("gloo", duration_ms=12.5)["duration_ms"] == 12.5  # the call ran the op


def test_on_nccl_the_state_read_at_enqueue_stays_and_its_stamps_go() -> None:
    entry = _one("nccl", state="started", time_discovered_started_ns=1_030, duration_ms=0.03)
    assert entry["retired"] is False
    assert entry["state"] == "started"
    assert entry["time_discovered_started_ns"] is None
    assert "duration_ms" not in entry


def test_on_nccl_an_op_completed_at_enqueue_keeps_its_events_duration() -> None:
    entry = _one(
        "nccl",
        state="completed",
        time_discovered_started_ns=1_020,
        time_discovered_completed_ns=1_030,
        duration_ms=0.01,
    )
    assert entry["state"] == "completed" and entry["duration_ms"] == 0.01
    assert entry["time_discovered_completed_ns"] is None


def test_on_nccl_an_unretired_op_is_not_completed_by_its_unrecorded_end_event() -> None:
    """Its call never returned, so its end event was never recorded; the dump's query of it
    says completed."""
    entry = _one(
        "nccl",
        retired=False,
        state="completed",
        time_discovered_started_ns=5_000,
        time_discovered_completed_ns=5_000,
    )
    assert entry["state"] == "started"
    assert (
        _one("nccl", retired=False, state="completed", time_discovered_completed_ns=5)["state"]
        == "scheduled"
    )


def test_every_backend_loses_the_constant_timeout() -> None:
    assert _one("gloo")["timeout_ms"] == _one("ncclx")["timeout_ms"] == -1


def test_completion_is_reported_per_recorder_and_backend() -> None:
    assert reports_completion(Dialect.TORCHCOMMS, "gloo")
    assert not reports_completion(Dialect.TORCHCOMMS, "nccl")
    assert not reports_completion(Dialect.TORCHCOMMS, "ncclx")
    assert reports_completion(Dialect.PYTORCH, "nccl") and reports_completion(Dialect.HCCL, "hccl")
    assert not reports_completion(Dialect.EXECUTION_TRACE, "gloo")


def test_the_report_says_what_retired_means_on_each_backend() -> None:
    gloo = description(Dialect.TORCHCOMMS, {"gloo"})
    nccl = description(Dialect.TORCHCOMMS, {"nccl"})
    both_ = description(Dialect.TORCHCOMMS, {"gloo", "nccl"})
    assert gloo is not None and nccl is not None and both_ is not None
    assert "on gloo an op is retired when its call returned, so it finished" in gloo
    assert "on nccl the recorder does not say whether an op finished" in nccl
    assert "gloo" in both_ and "nccl" in both_
    assert description(Dialect.PYTORCH, {"nccl"}) is None
