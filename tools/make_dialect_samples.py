"""Sample dump sets written the way other recorders write them: torchcomms, HCCL, XCCL.

Each set is a simulated NCCL job (`tools.nccl_scenarios`: the healthy 3D job, the job where
rank 5's host never issues the gradient-norm all_reduce, and for torchcomms on gloo the job
whose gradient-norm all_reduce never completes) whose per-rank dumps are rewritten with the
facts of each recorder's own sources, cited in the set's NOTE.md. The expected verdict
is the simulator's truth, translated into the recorder's names and counters; never an
analyzer's.

    python -m tools.make_dialect_samples --out sample_dumps

Deterministic: a rerun writes the same bytes.
"""

from __future__ import annotations

import argparse
import pickle
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.frsim.writers import dump_object
from tools.nccl_scenarios import Scenario, all_stuck, expected_line, healthy, not_joined

NOTE = "NOTE.md"
_NCCL_TIMING = "NCCL timing is on (TORCH_NCCL_ENABLE_TIMING=1): ops can be `started`."

TORCHCOMMS_SOURCES = """Facts (meta-pytorch/torchcomms,
`comms/torchcomms/hooks/fr/FlightRecorder.hpp` and `FlightRecorder.cpp`, `TorchComm.cpp`):
version "2.10"; one pickle per rank named
`<TORCHCOMM_FR_DUMP_TEMP_FILE><rank>` (the debug-server demo, `hooks/fr/scripts/
verify_flight_recorder.py`, points it at `<dir>/per_rank/rank_`, next to the server's text
reports); `pg_config` keyed by communicator name with the backend as `desc` and ranks like
`"[0,1]"`; `pg_status` empty; `comm_lib_version` empty; no stack frames. One 0-based
`collective_seq_id` counter per process, shared by every communicator and by send/recv;
`p2p_seq_id` 0 and `is_p2p` False; `op_id` a process-wide counter; `profiling_name`
`<backend>:<op>` with no peer; a batch of p2p ops is one `batch_op_issue` entry with no tensors;
communicators split from the world one are named `<parent>::split::<color>_<name>_<counter>`
(NCCLX). An op is retired in the hook that runs when its call returns (`TorchComm::all_reduce`
calls the backend, then `postHook` -> `retire_id`). On NCCL, as here, the call only enqueues the
op: every issued op is retired, and its state (and any discovery time) is read once, then, not
at the dump: a stuck op looks like a healthy one in flight (`scheduled`, retired; here the GPU
had not reached it when its call returned). On gloo the call runs the op: retired means it
finished, and a hung op stays unretired. `timeout_ms` is 600000 on every op, not the
communicator's timeout. Simplifications: a coalesced block's members are written as plain ops
(torchcomms has no coalescing marker); no `duration_ms` (torchcomms writes the call's
wall-clock time on each retired op); on gloo, each call is taken as blocking (no `async_op`:
with it the call returns at once, and the op is retired unfinished)."""

HCCL_SOURCES = """Facts (Ascend/pytorch, `torch_npu/csrc/distributed/TraceUtils.h`,
`ProcessGroupHCCL.cpp`, `tools/flight_recorder/components/types.py`): version "2.4"; files
`hccl_trace_rank_<N>`
(TORCH_HCCL_DEBUG_INFO_TEMP_FILE, default `/tmp/hccl_trace_rank_`), pickles as torch's pickler
writes them; no comm-library version key; `profiling_name` empty for every plain op and for
send/recv, `hccl:coalesced` for a `_coalescing_manager` block's end marker; the op is the
innermost frame's function (their analyzer reads `frames[0]["name"]`); send/recv record no
peer; sequence ids, states and `retired` as PyTorch's NCCL recorder (first collective 1;
`scheduled` then `completed`; retired by the watchdog). Simplification: the set keeps the
`allreduce_coalesced` entries the simulator records (torch_npu records none for that API)."""

XCCL_SOURCES = """Facts (intel/torch-xpu-ops, issue #5381 and pull request #4078): PyTorch's
own recorder and writer, op names `xccl:*`; in affected builds no entry ever reaches `completed`
(`time_discovered_completed_ns` stays None, `state` stays `scheduled`) and every group's
`pg_status` `last_completed_collective` stays -1, on a healthy job too. Ops are not retired
(no watchdog marks them)."""


@dataclass(frozen=True)
class DialectSet:
    """A sample set in another recorder's dialect: an NCCL scenario's dumps rewritten as that
    dialect writes them."""

    name: str
    base: Callable[[], Scenario]
    dialect: str  # torchcomms | hccl | xccl
    story: str
    backend: str = "nccl"  # torchcomms: the communicators' backend (nccl, or gloo on the CPU)

    def write(self, out: Path) -> None:
        """Simulate the base scenario; write the set's dumps (as the dialect) and NOTE.md."""
        scenario = self.base()
        sim = scenario.sim
        directory = out / self.name
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        seq_map: dict[tuple[str, int], tuple[str, int]] = {}
        for rank in range(sim.world_size):
            dump = sim.dump(rank)
            if dump is None:
                continue
            raw = dump_object(dump)
            if self.dialect == "torchcomms":
                raw = _torchcomms(raw, rank, seq_map, self.backend)
                path = directory / "per_rank" / f"rank_{rank}"
            elif self.dialect == "hccl":
                raw = _hccl(raw)
                path = directory / f"hccl_trace_rank_{rank}"
            else:
                raw = _xccl(raw)
                path = directory / f"nccl_trace_rank_{rank}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(raw, protocol=2))
        if self.dialect == "torchcomms":
            _server_reports(directory)
        (directory / NOTE).write_text(self.note(scenario, seq_map), encoding="utf-8")

    def program(self, scenario: Scenario) -> str:
        """The job's program; on gloo without NCCL's timing (no device events: no op is ever
        seen `started`)."""
        if self.backend == "nccl":
            return scenario.program
        return scenario.program.replace(" " + _NCCL_TIMING, "")

    def note(self, scenario: Scenario, seq_map: dict[tuple[str, int], tuple[str, int]]) -> str:
        """The set's NOTE.md: story, the dialect's facts and files, the answer in its names."""
        truth = scenario.truth
        line = expected_line(truth)
        if self.dialect == "torchcomms" and truth.group is not None and truth.seq is not None:
            comm, seq = seq_map[(truth.group, truth.seq)]
            line = line.replace(f" group={truth.group} ", f" group={comm} ")
            line = line.replace(f" desc={truth.group_desc} ", f" desc={self.backend} ")
            line = line.replace(f" seq={truth.seq} ", f" seq={seq} ")
        sources = {"torchcomms": TORCHCOMMS_SOURCES, "hccl": HCCL_SOURCES, "xccl": XCCL_SOURCES}
        last = scenario.sim.world_size - 1
        files = {
            "torchcomms": f"`per_rank/rank_0` to `per_rank/rank_{last}` (pickles), the debug "
            "server's text reports `torchcomms_fr_trace_20261123_031502.txt` and "
            "`stacks_20261123_031502.txt` next to them, and this note.",
            "hccl": f"`hccl_trace_rank_0` to `hccl_trace_rank_{last}` (pickles) and this note.",
            "xccl": f"`nccl_trace_rank_0` to `nccl_trace_rank_{last}` (pickles; XCCL uses "
            "PyTorch's "
            "file names) and this note.",
        }[self.dialect]
        return (
            "\n\n".join(
                [
                    f"# {self.name}",
                    f"The job of `{scenario.name}`, written as {self.dialect} writes it"
                    + (f" on {self.backend}. " if self.backend != "nccl" else ". ")
                    + self.program(scenario),
                    "What went wrong: " + self.story,
                    sources[self.dialect].replace("\n", " "),
                    "Files: " + files,
                    line,
                ]
            )
            + "\n"
        )


def _comm_names(raw: dict[str, Any]) -> dict[str, str]:
    """PyTorch group name -> torchcomms communicator name (the world one, then NCCLX splits
    in order of the split calls: one per group description)."""
    names: dict[str, str] = {}
    for key, conf in raw["pg_config"].items():
        desc = conf["desc"]
        if desc == "default_pg":
            names[key] = "world"
            continue
        color = min(int(r) for r in conf["ranks"].strip("[]").split(","))
        names[key] = f"world::split::{color}_{desc}_{_SPLIT_ORDER.index(desc)}"
    return names


_SPLIT_ORDER = ("tp", "pp", "dp")  # every rank splits the world communicator in this order


def _torchcomms(
    raw: dict[str, Any],
    rank: int,
    seq_map: dict[tuple[str, int], tuple[str, int]],
    backend: str = "nccl",
) -> dict[str, Any]:
    """One rank's dump as torchcomms writes it on `backend`. On nccl the call only enqueues the
    op: every op is retired, `scheduled` (the GPU had not reached it when the call returned).
    On gloo the call runs the op: retired when it finished (a block's members and a batch:
    when its marker did); the thread blocks in the first call that never returned, so nothing
    after it is issued."""
    names = _comm_names(raw)
    config = {
        names[key]: {
            "name": names[key],
            "desc": backend,
            "ranks": conf["ranks"].replace(" ", ""),
        }
        for key, conf in raw["pg_config"].items()
    }
    pg_ids = {name: i for i, name in enumerate(config)}
    finished = _finished(raw["entries"])
    entries: list[dict[str, Any]] = []
    per_comm: dict[str, int] = {}
    batch_open = False
    for e in raw["entries"]:
        group, _ = e["process_group"]
        comm = names[group]
        op = e["profiling_name"].partition(":")[2].split(" ")[0]
        if op == "coalesced" and e["frames"] and e["frames"][0]["name"] == "batch_isend_irecv":
            batch_open = False
            continue  # the batch's one entry was written at its first member
        if op == "coalesced" or (op.endswith("_coalesced") and op[0].isupper()):
            continue  # no coalescing marker in torchcomms
        in_batch = bool(e["frames"]) and e["frames"][0]["name"] == "batch_isend_irecv"
        if in_batch and batch_open:
            continue
        if in_batch:
            batch_open = True
            op = "batch_op_issue"
        if op not in ("send", "recv", "batch_op_issue"):
            per_comm[comm] = per_comm.get(comm, 0) + 1
            seq_map.setdefault((group, e["collective_seq_id"]), (comm, per_comm[comm]))
        counter = len(entries)
        empty = op == "batch_op_issue"
        returned = backend != "gloo" or finished(e)
        entries.append(
            {
                "record_id": counter,
                "pg_id": pg_ids[comm],
                "process_group": (comm, backend),
                "thread_name": "",
                "thread_id": str(140213370087232 + rank),
                "collective_seq_id": counter,
                "p2p_seq_id": 0,
                "op_id": counter,
                "profiling_name": f"{backend}:{op}",
                "time_created_ns": e["time_created_ns"],
                "input_sizes": [] if empty else e["input_sizes"],
                "input_dtypes": [] if empty else e["input_dtypes"],
                "output_sizes": [] if empty else e["output_sizes"],
                "output_dtypes": [] if empty else e["output_dtypes"],
                "state": "scheduled",
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": returned,
                "timeout_ms": 600000,
                "is_p2p": False,
            }
        )
        if not returned:
            break  # gloo: the thread is still inside this call
    return {
        "version": "2.10",
        "pg_config": config,
        "pg_status": {},
        "comm_lib_version": "",
        "entries": entries,
    }


def _finished(entries: list[dict[str, Any]]) -> Callable[[dict[str, Any]], bool]:
    """Whether the simulator finished an op: its block's marker completed for a coalesced
    block's member or a batch's (they share the marker's group and sequence ids), else its
    own state."""
    markers: dict[tuple[str, int, int], bool] = {}
    for e in entries:
        op = e["profiling_name"].partition(":")[2].split(" ")[0]
        if op == "coalesced" or (op.endswith("_coalesced") and op[0].isupper()):
            key = (e["process_group"][0], e["collective_seq_id"], e["p2p_seq_id"])
            markers[key] = e["state"] == "completed"

    def finished(e: dict[str, Any]) -> bool:
        key = (e["process_group"][0], e["collective_seq_id"], e["p2p_seq_id"])
        own: bool = e["state"] == "completed"
        return markers.get(key, own)

    return finished


def _hccl(raw: dict[str, Any]) -> dict[str, Any]:
    entries = []
    for e in raw["entries"]:
        e = dict(e)
        op = e["profiling_name"].partition(":")[2].split(" ")[0]
        if op == "coalesced" or (op.endswith("_coalesced") and op[0].isupper()):
            e["profiling_name"] = "hccl:coalesced"  # _coalescing_manager's end marker
        else:
            e["profiling_name"] = ""
        entries.append(e)
    out = {k: v for k, v in raw.items() if k != "comm_lib_version"}
    out["version"] = "2.4"
    out["entries"] = entries
    return out


def _xccl(raw: dict[str, Any]) -> dict[str, Any]:
    entries = []
    for e in raw["entries"]:
        e = dict(e)
        e["profiling_name"] = "xccl:" + e["profiling_name"].partition(":")[2]
        e["state"] = "scheduled"
        e["time_discovered_completed_ns"] = None
        e["time_discovered_started_ns"] = None
        e["retired"] = False
        e.pop("duration_ms", None)
        entries.append(e)
    status = {
        key: {**value, "last_started_collective": -1, "last_completed_collective": -1}
        for key, value in raw["pg_status"].items()
    }
    return {**raw, "comm_lib_version": "2021.15.1", "pg_status": status, "entries": entries}


def _server_reports(directory: Path) -> None:
    """The debug server's periodic text reports, as `_frontend.PeriodicDumper` names them."""
    (directory / "torchcomms_fr_trace_20261123_031502.txt").write_text(
        "=== TorchComms FR Trace ===\n--- Groups ---\nid  desc  size\n", encoding="utf-8"
    )
    (directory / "stacks_20261123_031502.txt").write_text(
        "Rank 0:\nThread 0x7f... (most recent call first):\n", encoding="utf-8"
    )


SETS = (
    DialectSet(
        "torchcomms_healthy",
        healthy,
        "torchcomms",
        "nothing. Every op ran; each rank dumped after its last op. The recorder says no op "
        "completed (it never does), and send/recv name no peer.",
    ),
    DialectSet(
        "torchcomms_not_joined",
        not_joined,
        "torchcomms",
        "in the last step rank 5's host stops right before the gradient-norm all_reduce on "
        "the world communicator: it never issues it; the seven others do and wait in it.",
    ),
    DialectSet(
        "torchcomms_gloo_all_stuck",
        all_stuck,
        "torchcomms",
        "in the last step all four ranks call the gradient-norm all_reduce on the world "
        "communicator and none of the calls returns: gloo hangs in the network. Every rank's "
        "newest op is that all_reduce, unretired; every op before it returned, so it is retired.",
        backend="gloo",
    ),
    DialectSet(
        "hccl_healthy",
        healthy,
        "hccl",
        "nothing. Every op completed; each rank dumped after its last op.",
    ),
    DialectSet(
        "hccl_not_joined",
        not_joined,
        "hccl",
        "in the last step rank 5's host stops right before the gradient-norm all_reduce on "
        "group 0 (default_pg): it never issues it; the seven others wait in it.",
    ),
    DialectSet(
        "xccl_healthy",
        healthy,
        "xccl",
        "nothing. Every op ran; but this XCCL build never marks an op completed.",
    ),
    DialectSet(
        "xccl_not_joined",
        not_joined,
        "xccl",
        "in the last step rank 5's host stops right before the gradient-norm all_reduce on "
        "group 0 (default_pg): it never issues it; the seven others wait in it. No op is "
        "marked completed anywhere (the build's defect).",
    ),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Write every dialect set (or `--only` one) under `--out`; returns 0."""
    parser = argparse.ArgumentParser(prog="python -m tools.make_dialect_samples")
    parser.add_argument("--out", type=Path, default=Path("sample_dumps"))
    parser.add_argument("--only", default=None, help="one set's name")
    args = parser.parse_args(argv)
    for found in SETS:
        if args.only is None or found.name == args.only:
            found.write(args.out)
            print(f"wrote {args.out / found.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
