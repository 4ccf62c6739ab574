"""A small real gloo job (torch, CPU, 127.0.0.1) that leaves one Flight Recorder dump per rank,
for the dump sets beside this script (see README.md). Run it by its path::

    .venv/bin/python tests/data/gloo_rules/job.py cpring_crash --out /tmp/cpring_crash

The launcher hosts the TCPStore, starts one process per rank (each in a session of its own),
kills every rank still running at the deadline by its process group, and checks that the
files the case promises are there. A rank dumps 0.5 s after one of its ops raised, 0.5 s after
the end of its program, or from a watchdog thread once its main thread made no progress for the
groups' timeout plus 2 s (a rank hung outside c10d). After its dump a rank stays connected until
every rank dumped or died, then leaves with ``os._exit`` (no teardown that could block).

Cases (8 ranks each; the groups' timeout 5 s):

- ``cpring`` / ``cpring_crash``: context-parallel groups [0-3] and [4-7]; per step a ring
  exchange in each (3 hops of isend to the next rank and irecv from the previous one; gloo
  records no send/recv), then two gradient bucket all_reduces over the world. In
  ``cpring_crash`` rank 2 dies (``os._exit``, no dump) at the start of step 3's ring: its ring
  peers had issued step 2's last bucket all_reduce and block or fail in the ring, the other
  ring's ranks wait in step 3's first bucket all_reduce.
- ``barrier`` / ``barrier_skip`` / ``barrier_skip_world``: ``new_subgroups(group_size=4)``; a
  world all_reduce, then per step two subgroup all_reduces, a ``monitored_barrier``
  (``wait_all_ranks``) of the subgroup (``_world``: of the world), a subgroup all_gather and a
  world all_reduce. In the ``_skip`` cases rank 5 skips step 2's barrier.
- ``fsdp2`` / ``fsdp2_hang_rs``: real FSDP2 (``fully_shard``) in HSDP on a 2 x 4 mesh
  (replicate x shard). In ``fsdp2_hang_rs`` rank 6 hangs (sleeps, a stuck compute) in step 2's
  backward of its last layer, before that layer's reduce-scatter; its watchdog thread dumps it.
"""

from __future__ import annotations

import argparse
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

WORLD = {"cpring": 8, "barrier": 8, "fsdp2": 8}
CASES = (
    "cpring",
    "cpring_crash",
    "barrier",
    "barrier_skip",
    "barrier_skip_world",
    "fsdp2",
    "fsdp2_hang_rs",
)
CRASH_RANK = 2
SKIP_RANK = 5
HANG_RANK = 6
STEPS = 3
SETTLE_S = 0.5
WATCHDOG_EXTRA_S = 2.0
STALL_S = 60.0


def shape_of(case: str) -> str:
    """The program a case runs: its name up to the first underscore."""
    return case.split("_", 1)[0]


class Rank:
    """One rank: its store, its progress (read by the watchdog) and its one dump."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank: int = args.rank
        self.world = WORLD[shape_of(args.case)]
        self.store = dist.TCPStore(
            "127.0.0.1", args.port, self.world, is_master=False, timeout=timedelta(seconds=60)
        )
        self.progress = time.monotonic()
        self.lock = threading.Lock()
        self.dumped = False

    def say(self, message: str) -> None:
        """One line of this rank's log."""
        print(f"rank {self.rank}: {message}", flush=True)

    def step(self, where: str) -> None:
        """The main thread made progress (it reached `where`)."""
        self.progress = time.monotonic()
        self.say(where)

    def dump(self, why: str) -> None:
        """Write this rank's Flight Recorder once, then count it as dumped."""
        with self.lock:
            if self.dumped:
                return
            self.dumped = True
            c10d = torch._C._distributed_c10d  # the Flight Recorder dump is not in the stubs
            raw: bytes = c10d._dump_fr_trace(  # type: ignore[attr-defined, unused-ignore]
                includeCollectives=True, includeStackTraces=False, onlyActive=False
            )
            path = Path(self.args.out) / f"rank_{self.rank}.pkl"
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(raw)
            tmp.rename(path)
            self.say(f"dumped ({why}), {len(pickle.loads(raw).get('entries', []))} entries")
            self.store.add("dumped", 1)

    def watchdog(self) -> None:
        """Dump the rank whose main thread made no progress for the timeout plus 2 s."""
        idle_s = self.args.timeout + WATCHDOG_EXTRA_S
        while not self.dumped:
            if time.monotonic() - self.progress > idle_s:
                self.dump("watchdog: main thread made no progress")
                self.leave(2)
            time.sleep(0.1)

    def leave(self, status: int) -> None:
        """Stay connected until every rank dumped or died, then leave without teardown."""
        deadline = time.monotonic() + 4 * self.args.timeout + 30
        while self.store.add("dumped", 0) + self.store.add("gone", 0) < self.world:
            if time.monotonic() > deadline:
                self.say("gave up waiting for the other ranks")
                break
            time.sleep(0.05)
        sys.stdout.flush()
        os._exit(status)


def ring_program(r: Rank, group: dist.ProcessGroup | None = None, size: int = 0) -> None:
    """Per step: a ring exchange (size - 1 rounds of isend/irecv) in `group` (of `size` ranks,
    consecutive global ranks; the world by default), then two world bucket all_reduces."""
    crash = r.args.case.endswith("_crash") and r.rank == CRASH_RANK
    size = size or r.world
    base = r.rank - r.rank % size
    right, left = base + (r.rank + 1) % size, base + (r.rank - 1) % size
    for step in range(1, STEPS + 1):
        if crash and step == 3:
            r.say("dies (os._exit) before its ring exchange of step 3")
            r.store.add("gone", 1)  # the harness's count only: the dump set has no trace of it
            os._exit(1)
        block = torch.full((256,), float(r.rank))
        for hop in range(size - 1):
            got = torch.empty_like(block)
            works = [dist.isend(block, right, group), dist.irecv(got, left, group)]
            for work in works:
                if work is not None:
                    work.wait()
            block = got
            r.step(f"step {step} ring hop {hop + 1}")
        for bucket in (torch.ones(512), torch.ones(128)):
            dist.all_reduce(bucket)
            r.step(f"step {step} bucket all_reduce [{bucket.numel()}]")


def barrier_program(r: Rank) -> None:
    """A world all_reduce, then per step: two subgroup all_reduces, the subgroup's
    monitored_barrier, a subgroup all_gather and a world all_reduce."""
    timeout = timedelta(seconds=r.args.timeout)
    sub, _ = dist.new_subgroups(group_size=4, timeout=timeout)
    dist.all_reduce(torch.tensor([float(r.rank)]))
    r.step("seed all_reduce")
    skip = r.args.case.startswith("barrier_skip") and r.rank == SKIP_RANK
    barrier_group = None if r.args.case.endswith("_world") else sub
    for step in range(1, STEPS + 1):
        for _ in range(2):
            dist.all_reduce(torch.ones(16), group=sub)
        r.step(f"step {step} subgroup all_reduces")
        if skip and step == 2:
            r.say("skips the monitored_barrier of step 2")
        else:
            dist.monitored_barrier(group=barrier_group, timeout=timeout, wait_all_ranks=True)
            r.step(f"step {step} monitored_barrier")
        out = torch.empty(8)
        dist.all_gather_into_tensor(out, torch.ones(2), group=sub)
        r.step(f"step {step} subgroup all_gather")
        dist.all_reduce(torch.tensor([1.0]))
        r.step(f"step {step} world all_reduce")


# the `misc` ignores: where torch is not installed, mypy sees it as Any (`make lint`)
class _Stall(torch.autograd.Function):  # type: ignore[misc, unused-ignore]
    """Identity forward; its backward sleeps on the rank that hangs (a stuck compute)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, hang: bool) -> torch.Tensor:
        ctx.hang = hang
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if ctx.hang:
            time.sleep(STALL_S)
        return grad, None


class _Layer(torch.nn.Module):  # type: ignore[misc, unused-ignore]
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(width, width)
        self.hang = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _Stall.apply(torch.relu(self.linear(x)), self.hang)  # type: ignore[no-untyped-call, unused-ignore]
        return out


def fsdp2_program(r: Rank) -> None:
    """Real FSDP2 (`fully_shard`) in HSDP on a 2 x 4 mesh (replicate x shard): three layers
    sharded one by one, then the root; per step a forward, a backward (its reduce-scatters on
    the shard groups, all_reduces on the replicate groups) and an SGD step."""
    torch.manual_seed(0)
    # init_device_mesh makes its groups with the default timeout (30 min), not the world's
    c10d = dist.distributed_c10d
    c10d.default_pg_timeout = timedelta(seconds=r.args.timeout)
    mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("replicate", "shard"))
    layers = [_Layer(16) for _ in range(3)]
    model = torch.nn.Sequential(*layers)
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    r.step("sharded")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hang = r.args.case == "fsdp2_hang_rs" and r.rank == HANG_RANK
    for step in range(1, STEPS + 1):
        layers[-1].hang = hang and step == 2
        if layers[-1].hang:
            r.say("hangs (sleeps) in the backward of the last layer, before its reduce-scatter")
        loss = model(torch.ones(4, 16)).sum()
        r.step(f"step {step} forward")
        loss.backward()
        r.step(f"step {step} backward")
        opt.step()
        opt.zero_grad()


def run_rank(args: argparse.Namespace) -> None:
    """One rank: join, run the case's program under the watchdog, dump, leave."""
    r = Rank(args)
    dist.init_process_group(
        "gloo",
        store=r.store,
        rank=r.rank,
        world_size=r.world,
        timeout=timedelta(seconds=args.timeout),
    )
    r.step("joined")
    threading.Thread(target=r.watchdog, daemon=True).start()
    shape = shape_of(args.case)
    try:
        if shape == "cpring":
            timeout = timedelta(seconds=args.timeout)
            cps = [
                dist.new_group([0, 1, 2, 3], timeout=timeout),
                dist.new_group([4, 5, 6, 7], timeout=timeout),
            ]
            ring_program(r, cps[r.rank // 4], 4)
        elif shape == "barrier":
            barrier_program(r)
        else:
            fsdp2_program(r)
    except RuntimeError as e:
        r.say(f"raised: {str(e).splitlines()[0][:200]}")
        time.sleep(SETTLE_S)
        r.dump("an op raised")
        r.leave(1)
    r.say("done")
    time.sleep(SETTLE_S)  # gloo retires the last op from its own thread, just after it returns
    r.dump("end of program")
    r.leave(0)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def launch(args: argparse.Namespace) -> int:
    """Host the store, run every rank, kill the ones left at the deadline, check the files."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    world = WORLD[shape_of(args.case)]
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, world + 1, is_master=True, wait_for_workers=False)
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000")
    if any(name == "lo" for _, name in socket.if_nameindex()):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    procs = []
    for rank in range(world):
        log = (out / f"rank_{rank}.log").open("w")
        argv = [sys.executable, __file__, args.case, "--out", str(out), "--port", str(port)]
        argv += ["--rank", str(rank), "--timeout", str(args.timeout)]
        procs.append(
            subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        )
    deadline = time.monotonic() + 6 * args.timeout + 90
    status = 0
    for rank, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            print(f"rank {rank}: killed at the deadline")
            status = 1
        print(f"rank {rank}: exit status {proc.returncode}")
    del store
    dead = {CRASH_RANK} if args.case.endswith("_crash") else set()
    missing = [r for r in range(world) if r not in dead and not (out / f"rank_{r}.pkl").exists()]
    if missing:
        print(f"no dump from ranks {missing}")
        status = 1
    return status


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("case", choices=CASES)
    p.add_argument("--out", required=True, help="the folder the dumps (and rank logs) go to")
    p.add_argument("--timeout", type=float, default=5.0, help="the groups' timeout, seconds")
    p.add_argument("--rank", type=int, help="(internal) run this rank")
    p.add_argument("--port", type=int, help="(internal) the launcher's TCPStore port")
    args = p.parse_args()
    if args.rank is None:
        return launch(args)
    run_rank(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
