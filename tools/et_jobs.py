"""Real gloo jobs recorded with PyTorch's `ExecutionTraceObserver`, drawn from a seed, each with
the truth of the fault it injects (issue 47, item 6): for the tests of real traces
(`tests/load/formats/test_real_traces.py`, over runs recorded in `tests/data/real_et/`) and the
real-jobs table of `make accuracy-et` (`benchmarks/accuracy_real.py`).

A case (`draw(seed)`) is a fault kind, a world of 2-4 ranks on 127.0.0.1 (gloo, CPU), a culprit
rank, the world op (all_reduce, broadcast from rank 0, all_gather), its tensor size and the
healthy steps before the fault. Every rank creates the world and a pair group {0, 1}; a step
runs an all_reduce on the pair (ranks 0 and 1), then the world op; every op has the same size,
so the pair's all_reduce shares its sizes with a world all_reduce. After the steps, the fault
step, by kind:

- `healthy`: one more step as the others.
- `extra_pair_op` (world 3-4, culprit 0, world op all_reduce): after its pair all_reduce with
  rank 1, rank 0 issues one extra world all_reduce before the step's own. From traces alone
  (gloo's name no group) its extra op fits the pair as well as the world.
- `kill_mid_call`: the culprit sleeps before the world op its peers wait in (collective
  timeout 60 s); the launcher kills every rank with SIGTERM once all reached the fault step, as
  one does on a timeout: no rank finishes its trace, each ends inside its last call.
- `abort_size` (world 3-4, world op broadcast): the culprit's broadcast disagrees in size: as
  the root (rank 0) it sends twice the elements its peers take; as a receiver it takes half
  what the root sends. gloo aborts (SIGABRT) every rank that receives more than it posted.
- `skip` (world 3-4): the culprit skips the world op its peers issue.

Then every rank (that lives) closes with a world barrier, stops its trace and exits. Collectives
time out after 3 s (60 s in `kill_mid_call`); a job is killed by its processes' groups at
`JOB_DEADLINE_S`. Worlds of 2 are drawn only for `healthy` and `kill_mid_call`: where two ranks
disagree and no third does, no majority says which of them deviates (frsim's truth calls it
ambiguous).

The truth (`RealTruth`), in the campaign's words (`tools/frsim/truth.py`, `et_truth`): `ok`;
`hung`/`not_joined` at the culprit that never came (`kill_mid_call`); `desync` with the culprit
(`abort_size`: root `mismatch`; `skip`, `extra_pair_op`: `mismatch` or `not_joined`, as the
first divergence falls). No group or sequence id is judged: a gloo trace names neither. In
`extra_pair_op` the group of rank 0's extra op cannot be told from traces; rank 0 is the one
with an op too many in every assignment, so the status and the culprit are judged, and the
verdict may say `confidence: ambiguous` (counted, not judged).

Record a case: `python -m tools.et_jobs --seed 3 --out /tmp/real` (the folder gets each rank's
`rank-N.et.json` and a `case.json`; the ranks' output goes to `<out>.logs`); `--kind skip`
draws the first seed of that kind from `--seed` on. The ranks run `python -m tools.et_jobs
--rank ...` from the repository's root.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.torch_job import reap

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("healthy", "extra_pair_op", "kill_mid_call", "abort_size", "skip")
"""The fault kinds a seed draws from, in order."""
OPS = ("all_reduce", "broadcast", "all_gather")
"""The world ops a step may run."""
JOB_DEADLINE_S = 45.0
"""The longest a job runs before every rank still running is killed by its process group."""
FAULT_LINE = "at fault"
"""What a rank prints when it reaches the fault step (a `kill_mid_call` job is killed after)."""
KILL_AFTER_S = 1.0
"""How long after every rank reached the fault step the launcher sends SIGTERM."""


@dataclass(frozen=True)
class RealTruth:
    """What a correct analyzer concludes from a case's traces."""

    status: str
    """"ok", "hung" or "desync"."""
    culprits: tuple[int, ...] = ()
    roots: tuple[str, ...] = ()
    """The root kinds that are right ("mismatch", "not_joined"); empty: no root."""
    note: str = ""
    """What is not judged, and why."""


@dataclass(frozen=True)
class Case:
    """One real job: its fault and where it sits."""

    seed: int
    kind: str
    world: int
    culprit: int
    op: str
    size: int
    steps: int
    """Healthy steps before the fault step."""

    @property
    def name(self) -> str:
        """A folder name that says the case: `skip-w4-r2-all_gather-s7`."""
        return f"{self.kind}-w{self.world}-r{self.culprit}-{self.op}-s{self.seed}"

    def describe(self) -> str:
        """The case in words."""
        return (
            f"{self.kind} on {self.world} gloo ranks, culprit rank {self.culprit}, world op "
            f"{self.op} of {self.size} floats, {self.steps} healthy step(s) before"
        )

    @property
    def truth(self) -> RealTruth:
        """The verdict a correct analyzer reaches from the traces."""
        if self.kind == "healthy":
            return RealTruth("ok")
        if self.kind == "kill_mid_call":
            return RealTruth("hung", (self.culprit,), ("not_joined",))
        if self.kind == "abort_size":
            return RealTruth("desync", (self.culprit,), ("mismatch",))
        note = ""
        if self.kind == "extra_pair_op":
            note = "the group of rank 0's extra op is not judged: the pair fits as the world"
        return RealTruth("desync", (self.culprit,), ("mismatch", "not_joined"), note)


def draw(seed: int) -> Case:
    """The case of `seed`: its kind, world, culprit, op, size and steps before the fault."""
    rng = random.Random(f"et-real:{seed}")
    kind = KINDS[seed % len(KINDS)]
    world = rng.randint(2, 4) if kind in ("healthy", "kill_mid_call") else rng.randint(3, 4)
    culprit = rng.randrange(world)
    op = rng.choice(OPS)
    if kind == "extra_pair_op":
        culprit, op = 0, "all_reduce"
    elif kind == "abort_size":
        op = "broadcast"
    return Case(seed, kind, world, culprit, op, rng.choice((4, 8, 16, 64)), rng.randint(1, 3))


def draw_kind(kind: str, first: int = 0) -> Case:
    """The first case of `kind` from seed `first` on."""
    seed = first
    while KINDS[seed % len(KINDS)] != kind:
        seed += 1
    return draw(seed)


# --- one rank ---------------------------------------------------------------------------------


def rank_main(case: Case, rank: int, port: str, out: Path) -> None:
    """Run `case`'s program as `rank`, its trace written to `out/rank-<rank>.et.json`."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ExecutionTraceObserver

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    timeout = datetime.timedelta(seconds=60 if case.kind == "kill_mid_call" else 3)
    dist.init_process_group("gloo", rank=rank, world_size=case.world, timeout=timeout)
    pair = dist.new_group([0, 1])
    trace = ExecutionTraceObserver()
    trace.register_callback(str(out / f"rank-{rank}.et.json"))
    trace.start()
    n = case.size

    def world_op(size: int = n) -> None:
        t = torch.ones(size)
        if case.op == "all_reduce":
            dist.all_reduce(t)
        elif case.op == "broadcast":
            dist.broadcast(t, 0)
        else:
            dist.all_gather_into_tensor(torch.empty(size * case.world), t)

    def pair_op() -> None:
        if rank < 2:
            dist.all_reduce(torch.ones(n), group=pair)

    try:
        for _ in range(case.steps):
            pair_op()
            world_op()
        print(FAULT_LINE, flush=True)
        pair_op()
        me = rank == case.culprit
        if case.kind == "extra_pair_op" and me:
            dist.all_reduce(torch.ones(n))  # the extra one, sizes as the pair's
        if case.kind == "kill_mid_call" and me:
            time.sleep(JOB_DEADLINE_S)  # the launcher's SIGTERM comes first
        if case.kind == "abort_size" and me:
            world_op(2 * n if rank == 0 else max(1, n // 2))
        elif not (case.kind == "skip" and me):
            world_op()
        dist.barrier()
    except RuntimeError as exc:  # a peer gone or out of step: the fault at work
        print(f"rank {rank}: {str(exc)[:160]}", flush=True)
    trace.stop()
    trace.unregister_callback()
    print("trace written", flush=True)
    os._exit(0)  # no destroy: a peer may be gone


# --- the launcher -----------------------------------------------------------------------------


def _free_port() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _reached(logs: Path, world: int) -> bool:
    return all(
        (logs / f"rank-{r}.txt").exists() and FAULT_LINE in (logs / f"rank-{r}.txt").read_text()
        for r in range(world)
    )


def run(case: Case, out: Path, deadline_s: float = JOB_DEADLINE_S) -> Path:
    """Run `case`'s ranks (each in its own process group, `python -m tools.et_jobs --rank`)
    with their traces and `case.json` in `out`, their output in `<out>.logs`; a
    `kill_mid_call` job gets SIGTERM once every rank reached the fault step; every rank left at
    the deadline is killed by its process group. Returns `out`."""
    out.mkdir(parents=True)
    logs = out.with_name(out.name + ".logs")
    logs.mkdir()
    (out / "case.json").write_text(json.dumps(asdict(case), indent=1) + "\n")
    port = _free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(ROOT))
    procs = []
    for rank in range(case.world):
        command = [sys.executable, "-m", "tools.et_jobs", "--rank", str(rank), "--port", port]
        command += ["--seed", str(case.seed), "--out", str(out)]
        with open(logs / f"rank-{rank}.txt", "wb") as log:
            procs.append(
                subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=ROOT,
                    start_new_session=True,
                )
            )
    deadline = time.monotonic() + deadline_s
    try:
        if case.kind == "kill_mid_call":
            while time.monotonic() < deadline and not _reached(logs, case.world):
                time.sleep(0.2)
            time.sleep(KILL_AFTER_S)  # every rank inside its last call
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
    finally:
        reap(procs, deadline)
    return out


def main(argv: list[str] | None = None) -> int:
    """Record a case (`--seed`, `--kind`, `--out`), or run one rank of it (`--rank`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=KINDS, help="the first case of this kind from --seed")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rank", type=int, help="run this rank (the launcher's call)")
    parser.add_argument("--port", default="")
    args = parser.parse_args(argv)
    case = draw_kind(args.kind, args.seed) if args.kind else draw(args.seed)
    if args.rank is not None:
        rank_main(case, args.rank, args.port, args.out)
        return 0
    run(case, args.out)
    print(f"{case.describe()}: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
