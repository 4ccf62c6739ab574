"""One rank of a small gloo job on 127.0.0.1 that records a PyTorch Execution Trace, for
tests/load/formats/test_chakra.py: `python tests/et_job.py RANK WORLD PORT OUT MODE`.

Every rank is in the world group and in one of two halves; each step runs an all_reduce and an
all_gather on its half, then an all_reduce and a broadcast on the world. MODE `healthy`; `extra`:
rank 1 issues one more all_reduce on the world in step 1; `kill`: rank 2 kills itself (SIGKILL)
in step 1, leaving its trace cut in the middle. Collectives time out after 5 s."""

from __future__ import annotations

import datetime
import os
import signal
import sys


def main(rank: int, world: int, port: str, out: str, mode: str) -> None:
    """Run the job's steps with the trace observer on."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    timeout = datetime.timedelta(seconds=5)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    half = world // 2
    low = dist.new_group(list(range(half)))
    high = dist.new_group(list(range(half, world)))
    mine = low if rank < half else high
    trace = ExecutionTraceObserver()
    trace.register_callback(f"{out}/rank-{rank}.et.json")
    trace.start()
    t = torch.ones(16)
    try:
        for step in range(3):
            dist.all_reduce(t, group=mine)
            dist.all_gather_into_tensor(torch.empty(16 * half), t, group=mine)
            if mode == "kill" and rank == 2 and step == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            dist.all_reduce(torch.ones(4))
            dist.broadcast(t, 0)
            if mode == "extra" and rank == 1 and step == 1:
                dist.all_reduce(torch.ones(8))
        dist.barrier()
    except RuntimeError as exc:  # a peer gone or out of step: the test expects it
        print(f"rank {rank}: {str(exc)[:120]}", flush=True)
    trace.stop()
    trace.unregister_callback()
    os._exit(0)  # no destroy: a peer may be gone


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
