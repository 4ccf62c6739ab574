"""One rank of a real 4-rank gloo job (torch, CPU, 127.0.0.1) with PyTorch's debug server up,
for tests/live/test_real_job.py. The only file of the test suite that imports torch; run it by
its path, once per rank::

    python tests/live_job.py --mode sleeper --rank 0 --world 4 --port 29500 --fport 25999

Every rank joins the group, starts the debug server (its worker HTTP server on an ephemeral
port, registered in the store as ``debug_server/rank<N>``; rank 0 also starts the frontend on
``--fport``, a child process), runs a few warm-up collectives and prints ``ready``. Then:

- ``healthy``: training-like steps (all_reduce, all_gather and broadcast of small tensors, then
  a short sleep, about 0.2 s a step) for ``--hold`` seconds: snapshots a few seconds apart
  always see progress. Rank 0 decides when to stop and broadcasts it, so every rank runs the
  same steps and none is left alone in a collective.
- ``sleeper``: rank ``--sleep-rank`` sleeps ``--hold`` seconds before an all_reduce that the
  other ranks have already entered and are blocked in: a real hang, as the dumps see it.

The collective timeout (``--timeout``, 120 s by default) is longer than any test, so nothing
times out while a test looks. A rank leaves with ``os._exit`` (no teardown that could block on
its peers), rank 0 once it stopped the frontend; the test kills each rank's process group anyway.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.debug import start_debug_server, stop_debug_server

WARM_UP_STEPS = 5
STEP_SLEEP_S = 0.2
DUMP_INTERVAL_S = 2.0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("healthy", "sleeper"), required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=4)
    p.add_argument("--port", type=int, required=True, help="the TCPStore's port (MASTER_PORT)")
    p.add_argument("--fport", type=int, required=True, help="the debug server frontend's port")
    p.add_argument("--sleep-rank", type=int, default=2, help="sleeper: the rank that sleeps")
    p.add_argument("--hold", type=float, default=60.0, help="seconds to run (or sleep)")
    p.add_argument("--dump-dir", help="the frontend writes its periodic dumps here")
    p.add_argument("--timeout", type=float, default=120.0, help="collective timeout, seconds")
    return p.parse_args()


def join(args: argparse.Namespace) -> None:
    """Join the group and start the debug server, which reads RANK, WORLD_SIZE, MASTER_ADDR
    and MASTER_PORT from the environment (it opens a TCPStore client of its own)."""
    os.environ.update(
        RANK=str(args.rank),
        WORLD_SIZE=str(args.world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(args.port),
    )
    if any(name == "lo" for _, name in socket.if_nameindex()):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo",
        rank=args.rank,
        world_size=args.world,
        timeout=timedelta(seconds=args.timeout),
    )
    start_debug_server(port=args.fport, dump_dir=args.dump_dir, dump_interval=DUMP_INTERVAL_S)


def step(grad: torch.Tensor, world: int) -> None:
    """What a data-parallel step asks of its group: a gradient all_reduce, an all_gather of a
    metric and a broadcast of a small buffer."""
    dist.all_reduce(grad)
    metric = torch.tensor([float(dist.get_rank())])
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, metric)
    dist.broadcast(torch.zeros(4), src=0)


def healthy(args: argparse.Namespace, grad: torch.Tensor) -> None:
    deadline = time.monotonic() + args.hold
    go_on = torch.ones(1)
    while True:
        step(grad, args.world)
        time.sleep(STEP_SLEEP_S)
        if args.rank == 0:
            go_on.fill_(1.0 if time.monotonic() < deadline else 0.0)
        dist.broadcast(go_on, src=0)
        if go_on.item() == 0.0:
            return


def sleeper(args: argparse.Namespace, grad: torch.Tensor) -> None:
    if args.rank == args.sleep_rank:
        time.sleep(args.hold)  # never reaches the all_reduce its peers are blocked in
        return
    dist.all_reduce(grad)  # blocks until the sleeper comes (or the collective times out)


def main() -> None:
    args = parse_args()
    join(args)
    grad = torch.ones(1000)
    for _ in range(WARM_UP_STEPS):
        step(grad, args.world)
    print("ready", flush=True)
    try:
        if args.mode == "healthy":
            healthy(args, grad)
        else:
            sleeper(args, grad)
    except Exception as exc:  # a peer left first
        print(f"rank {args.rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        leave(args.rank, 1)
    print("done", flush=True)
    leave(args.rank, 0)


def leave(rank: int, code: int) -> None:
    """Exit without the group's teardown, which could wait on the peers. Rank 0 stops the
    frontend first (only rank 0 may call stop_debug_server): `os._exit` skips the exit hook
    that ends multiprocessing's daemon children, and the frontend would outlive the job."""
    if rank == 0:
        stopper = threading.Thread(target=stop_debug_server, daemon=True)
        stopper.start()
        stopper.join(timeout=5.0)
    os._exit(code)


if __name__ == "__main__":
    main()
