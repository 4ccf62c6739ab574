"""One rank of a small gloo job on 127.0.0.1 that records a PyTorch Execution Trace and, where
the rank lives to write it, its Flight Recorder dump, for the tests of cut traces, traces
beside dumps and replays (tests/load/formats/, tests/replay/):
`python tests/et_truth_job.py RANK WORLD PORT OUT MODE`.

Every rank is in the world group and in one of two halves; each step runs an all_reduce and an
all_gather on its half, a send from rank 0 to rank 1, then an all_reduce and a broadcast on the
world. After the steps, by MODE:

- `healthy`: a barrier; every rank writes its dump (`comm_lib_trace_rank_N`).
- `stuck`: rank 2 sleeps past the collective timeout (3 s) before the world all_reduce its peers
  wait in; every rank writes its dump once its all_reduce timed out, rank 2 after its sleep
  without issuing it.
- `abort`: rank 0 broadcasts 8 elements where the others take 4: gloo aborts the ranks that
  receive more than they expect (SIGABRT, `op.preamble.length <= op.nbytes`), whose traces end
  inside the broadcast and who write no dump; the others write theirs once their op failed.
- `term`: rank 2 sleeps (60 s) before the world all_reduce its peers wait in (timeout 60 s);
  the test kills every rank with SIGTERM, as a launcher does on a timeout: no dumps, every
  trace cut.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

JOB_DEADLINE_S = 90.0
"""The longest a job runs before every rank still running is killed by its pid."""


def main(rank: int, world: int, port: str, out: str, mode: str) -> None:
    """Run the job's steps with the trace observer on."""
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    import torch
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    timeout = datetime.timedelta(seconds=60 if mode == "term" else 3)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    half = world // 2
    low = dist.new_group(list(range(half)))
    high = dist.new_group(list(range(half, world)))
    mine = low if rank < half else high
    trace = ExecutionTraceObserver()
    trace.register_callback(f"{out}/rank-{rank}.et.json")
    trace.start()
    t = torch.ones(16)

    def dump() -> None:
        c10d = torch._C._distributed_c10d
        raw = c10d._dump_fr_trace(  # type: ignore[attr-defined, unused-ignore]
            includeCollectives=True, includeStackTraces=False, onlyActive=False
        )
        with open(f"{out}/comm_lib_trace_rank_{rank}", "wb") as f:
            f.write(raw)

    try:
        for _ in range(2):
            dist.all_reduce(t, group=mine)
            dist.all_gather_into_tensor(torch.empty(16 * half), t, group=mine)
            if rank == 0:
                dist.send(torch.ones(2), 1)
            elif rank == 1:
                dist.recv(torch.empty(2), 0)
            dist.all_reduce(torch.ones(4))
            dist.broadcast(t, 0)
        print("steps done", flush=True)  # the test kills a `term` job once every rank is here
        if mode == "abort":
            dist.broadcast(torch.ones(8 if rank == 0 else 4), 0)
        if mode == "stuck" and rank == 2:
            time.sleep(5)  # its peers time out in the all_reduce meanwhile
            raise RuntimeError("dumped where it stands")
        if mode == "term" and rank == 2:
            time.sleep(60)
        dist.all_reduce(torch.ones(4))
        dist.barrier()
    except RuntimeError as exc:  # a peer gone or out of step: the test expects it
        print(f"rank {rank}: {str(exc)[:120]}", flush=True)
        # gloo's recorder retires an op that timed out a moment after the exception reaches
        # Python: a dump taken at once can still show it unretired, which the analysis, going
        # by the recorder, reads as an op still in flight (a dump from outside comes later)
        time.sleep(0.5)
    if mode != "term":
        dump()
    trace.stop()
    trace.unregister_callback()
    os._exit(0)  # no destroy: a peer may be gone


def run_job(out: Path, mode: str, world: int = 4) -> Path:
    """Run the job's ranks (each in its own process group, this file by its path) with their
    files in `out` and their output in `out`'s sibling `<out>.logs`; a `term` job is killed by
    SIGTERM once every rank reached its last op; every rank left at the deadline is killed by
    its pid. Returns `out`."""
    out.mkdir(parents=True)
    logs = out.with_name(out.name + ".logs")
    logs.mkdir()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    procs = []
    for rank in range(world):
        with open(logs / f"rank-{rank}.txt", "wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, str(rank), str(world), port, str(out), mode],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
    deadline = time.monotonic() + JOB_DEADLINE_S
    from tools.torch_job import reap  # here: a rank runs this file by its path

    try:
        if mode == "term":
            while time.monotonic() < deadline and not all(
                b"steps done" in (logs / f"rank-{r}.txt").read_bytes() for r in range(world)
            ):
                time.sleep(0.2)
            time.sleep(1.0)  # every rank inside its last call
            for proc in procs:
                os.killpg(proc.pid, signal.SIGTERM)
    finally:
        reap(procs, deadline)
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
