"""One rank of a replay: join the job, create every group in the plan's order, run the rank's
ops (a warm-up iteration, then the timed ones), and write what happened: the per-op wall times
(`result_<rank>.json`) and, when the replay stopped anywhere, this rank's Flight Recorder
(`fr/rank_<rank>.pkl`). The only module of fr-analyze that imports torch, and only when run.

The runner starts a rank as an isolated Python that calls `main` (`runner.BOOTSTRAP`; `python
-m fr_analyzer.replay.worker ...` takes the same arguments); under torchrun or srun the CLI
calls `run` in its own process. A spawned rank dies with the runner (`die_with`) and runs only
the plan the runner wrote (its SHA-256 is on the command line). Every op is bounded by the
process-group timeout; a rank that is done waits (a bounded time) for the others before it
leaves, so that a peer still in an op sees the fault being replayed and not this rank's exit.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from . import files
from .files import FR_FILE, FR_FOLDER, RESULT, STOP
from .plan import Kind, OpSpec, ReplayPlan, from_json

__all__ = ["FR_FILE", "FR_FOLDER", "RESULT", "STOP", "RankResult", "WorkerArgs", "main", "run"]

FINISHED_KEY = "fr_replay/finished"
FAILED_KEY = "fr_replay/failed"
LEFT_KEY = "fr_replay/left"
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies
LINGER_EXTRA_S = 5.0
"""A rank that is done waits for the others up to the group timeout and this much more."""


@dataclass(frozen=True)
class WorkerArgs:
    """What one rank needs besides the plan."""

    plan: Path
    rank: int
    world_size: int
    local_rank: int
    backend: str
    init_method: str  # tcp://127.0.0.1:PORT (spawned) or env:// (torchrun, srun)
    out: Path
    timeout_s: float
    iterations: int
    warmup: int
    parent: int | None = None  # the runner's pid: this rank dies with it (spawned ranks)
    plan_sha256: str | None = None  # the plan's digest as the runner wrote it


class RecordCut(Exception):
    """A rank whose record is cut reached where it was cut: it stops there, as the job's did."""


CUT_ERROR = (
    "its record is cut: the job's rank was killed inside its last op, and the replay stops it there"
)


@dataclass(frozen=True)
class RankResult:
    """What one rank wrote: its ops' wall times, or where and why it stopped."""

    rank: int
    ok: bool
    times: tuple[tuple[float, ...], ...]  # per op, seconds of each timed iteration
    error: str = ""  # the first line of the exception that stopped it
    failed_op: int | None = None  # index into the rank's ops (None with an error: in the
    # barrier between two rounds, every op of its round done)
    failed_iteration: int | None = None  # 0 is the warm-up when there is one
    dumped: bool = False  # its Flight Recorder is in fr/
    peer_failed: bool = False  # it finished, but another rank reported a failure


def read_result(path: Path) -> RankResult:
    """A result file written by `run`."""
    data = json.loads(files.read(path))
    return RankResult(
        rank=data["rank"],
        ok=data["ok"],
        times=tuple(tuple(t) for t in data["times"]),
        error=data["error"],
        failed_op=data["failed_op"],
        failed_iteration=data["failed_iteration"],
        dumped=data["dumped"],
        peer_failed=data["peer_failed"],
    )


def run(args: WorkerArgs) -> int:
    """Replay one rank; returns its exit status (0: every op of every iteration completed)."""
    text = files.read(args.plan)
    if args.plan_sha256 is not None and hashlib.sha256(text).hexdigest() != args.plan_sha256:
        error = f"{args.plan}: changed after the replay wrote it (--out is shared?): not run"
        _write(args.out / RESULT.format(rank=args.rank), RankResult(args.rank, False, (), error))
        return 2
    plan = from_json(text.decode())
    buffer = max(2000, 4 * len(plan.ranks[args.rank].ops) * (args.iterations + args.warmup))
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(buffer))  # read when the group is made
    fr_dir = args.out / FR_FOLDER
    files.ensure(args.out, FR_FOLDER)
    if args.backend == "nccl":  # the watchdog aborts a rank that times out: it dumps first
        os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(fr_dir / "nccl_trace_rank_"))
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)  # the *_tensor ops' new names

    device = torch.device(f"cuda:{args.local_rank}" if args.backend == "nccl" else "cpu")
    if device.type == "cuda":
        gpus = torch.cuda.device_count()
        if args.local_rank >= gpus:  # said in the result: the runner prints it, nobody waits
            error = f"nccl: local rank {args.local_rank} needs cuda:{args.local_rank}, and "
            error += f"this host has {gpus} GPU(s): one process per GPU"
            _write(
                args.out / RESULT.format(rank=args.rank), RankResult(args.rank, False, (), error)
            )
            return 2
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=args.timeout_s)
    dist.init_process_group(
        args.backend,
        init_method=args.init_method,
        rank=args.rank,
        world_size=args.world_size,
        timeout=timeout,
    )
    handles: dict[int, Any] = {}
    for group in plan.groups:  # every rank, every group, the same order
        handles[group.uid] = None if group.world else dist.new_group(list(group.ranks), timeout)
    ops = plan.ranks[args.rank].ops
    times: list[list[float]] = [[] for _ in ops]
    error, failed_op, failed_iteration = "", None, None
    rounds = args.warmup + args.iterations
    try:
        for iteration in range(rounds):
            failed_iteration = iteration
            for index, op in enumerate(ops):
                failed_op = index
                seconds = _timed(op, plan, handles, args.rank, device, torch, dist)
                if iteration >= args.warmup:
                    times[index].append(seconds)
            if args.rank in plan.cut and ops:  # the job's rank was killed inside its last op
                failed_op = len(ops) - 1
                raise RecordCut(CUT_ERROR)
            failed_op = None
            if iteration + 1 < rounds:  # rounds apart: a rank done early waits, not runs ahead
                dist.barrier()
        failed_iteration = None
    except Exception as exc:  # a timeout, a peer gone: what the replay is there to show
        error = f"{type(exc).__name__}: {_first_line(exc)}"
    store = dist.distributed_c10d._get_default_store()
    if error:
        _store_add(store, FAILED_KEY, 1)
    dumped = bool(error) and _dump(fr_dir / FR_FILE.format(rank=args.rank), torch)
    result = RankResult(
        args.rank, not error, tuple(tuple(t) for t in times), error, failed_op, failed_iteration
    )
    _write(args.out / RESULT.format(rank=args.rank), dataclasses.replace(result, dumped=dumped))
    # stay until every rank is done, or long enough for a peer still waiting to time out
    _store_add(store, FINISHED_KEY, 1)
    failed = _store_add(store, FAILED_KEY, 0)
    deadline = time.monotonic() + args.timeout_s + LINGER_EXTRA_S
    while time.monotonic() < deadline:
        done = _store_add(store, FINISHED_KEY, 0)
        failed = _store_add(store, FAILED_KEY, 0)
        if done < 0 or done >= args.world_size or os.path.lexists(args.out / STOP):
            break
        time.sleep(0.05)
    _store_add(store, LEFT_KEY, 1)
    if args.rank == 0:  # it holds the store: the others read it until they leave
        deadline = time.monotonic() + LINGER_EXTRA_S
        while 0 <= _store_add(store, LEFT_KEY, 0) < _store_add(store, FINISHED_KEY, 0):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    if not error and failed != 0:  # a peer failed (or is gone)
        dumped = _dump(fr_dir / FR_FILE.format(rank=args.rank), torch)
        result = dataclasses.replace(result, dumped=dumped, peer_failed=True)
        _write(args.out / RESULT.format(rank=args.rank), result)
    return 0 if not error else 1


def _timed(
    op: OpSpec,
    plan: ReplayPlan,
    handles: dict[int, Any],
    rank: int,
    device: Any,
    torch: Any,
    dist: Any,
) -> float:
    """Run one op (tensors allocated before the clock starts); its wall time in seconds."""
    call = _prepare(op, plan, handles, rank, device, torch, dist)
    started = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def _prepare(
    op: OpSpec,
    plan: ReplayPlan,
    handles: dict[int, Any],
    rank: int,
    device: Any,
    torch: Any,
    dist: Any,
) -> Any:
    """The op as a call with its tensors allocated: `numel` elements of `dtype` that this rank
    gives (an all_gather's output is the group size times it, a reduce_scatter's input too)."""
    group = handles[op.group]
    size = len(plan.group(op.group).ranks)
    dtype = getattr(torch, op.dtype) if op.dtype else torch.float32

    def zeros(n: int) -> Any:
        return torch.zeros(n, dtype=dtype, device=device)

    kind = op.kind
    if kind == Kind.ALL_REDUCE:
        x = zeros(op.numel)
        return lambda: dist.all_reduce(x, group=group)
    if kind == Kind.BROADCAST:
        x = zeros(op.numel)
        return lambda: dist.broadcast(x, src=op.root, group=group)
    if kind == Kind.REDUCE:
        x = zeros(op.numel)
        return lambda: dist.reduce(x, dst=op.root, group=group)
    if kind == Kind.ALL_GATHER:
        x, out = zeros(op.numel), zeros(size * op.numel)
        return lambda: dist.all_gather_into_tensor(out, x, group=group)
    if kind == Kind.REDUCE_SCATTER:
        x, out = zeros(size * op.numel), zeros(op.numel)
        return lambda: dist.reduce_scatter_tensor(out, x, group=group)
    if kind == Kind.GATHER:
        x = zeros(op.numel)
        into = [zeros(op.numel) for _ in range(size)] if rank == op.root else None
        return lambda: dist.gather(x, into, dst=op.root, group=group)
    if kind == Kind.SCATTER:
        out = zeros(op.numel)
        parts = [zeros(op.numel) for _ in range(size)] if rank == op.root else None
        return lambda: dist.scatter(out, parts, src=op.root, group=group)
    if kind == Kind.ALL_TO_ALL:
        x, out = zeros(sum(op.splits_in)), zeros(sum(op.splits_out))
        return lambda: dist.all_to_all_single(
            out,
            x,
            output_split_sizes=list(op.splits_out),
            input_split_sizes=list(op.splits_in),
            group=group,
        )
    if kind == Kind.BARRIER:
        return lambda: dist.barrier(group=group)
    if kind == Kind.SEND:
        x = zeros(op.numel)
        return lambda: dist.send(x, dst=op.peer, group=group)
    if kind == Kind.RECV:
        x = zeros(op.numel)
        return lambda: dist.recv(x, src=op.peer, group=group)
    if kind == Kind.BATCH_P2P:
        p2p = [
            dist.P2POp(
                dist.isend if m.kind == Kind.SEND else dist.irecv,
                torch.zeros(m.numel, dtype=getattr(torch, m.dtype), device=device),
                m.peer,
                group,
            )
            for m in op.members
        ]

        def batch() -> None:
            for work in dist.batch_isend_irecv(p2p):
                work.wait()

        return batch
    # a coalesced block: its members one after the other (every rank alike)
    calls = [_prepare(m, plan, handles, rank, device, torch, dist) for m in op.members]
    return lambda: [call() for call in calls]


def _store_add(store: Any, key: str, amount: int) -> int:
    """`store.add`, or -1 when the store is gone (its host, rank 0, stopped)."""
    try:
        return int(store.add(key, amount))
    except Exception:
        return -1


def _dump(path: Path, torch: Any) -> bool:
    """Write this rank's Flight Recorder (torch's pickle) to `path`; whether it could."""
    c10d = torch._C._distributed_c10d
    dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
    if dump is None:
        return False
    try:
        data = dump(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        files.write_in(path.parent, path.name, data)
    except Exception:  # a dump that cannot be written: the analysis names the rank missing
        return False
    return True


def _write(path: Path, result: RankResult) -> None:
    files.write_in(path.parent, path.name, json.dumps(asdict(result)).encode())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def parse(argv: list[str]) -> WorkerArgs:
    """The worker's command line, as the runner writes it."""
    p = argparse.ArgumentParser(prog="python -m fr_analyzer.replay.worker")
    p.add_argument("--plan", type=Path, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--local-rank", type=int, default=0)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--init-method", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--timeout", type=float, required=True)
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--parent", type=int, default=None)
    p.add_argument("--plan-sha256", default=None)
    a = p.parse_args(argv)
    return WorkerArgs(
        a.plan,
        a.rank,
        a.world_size,
        a.local_rank,
        a.backend,
        a.init_method,
        a.out,
        a.timeout,
        a.iterations,
        a.warmup,
        a.parent,
        a.plan_sha256,
    )


def die_with(parent: int | None) -> None:
    """Have the kernel kill this process when the one that started it dies, even by SIGKILL
    (Linux's PR_SET_PDEATHSIG; best effort elsewhere); leave at once if it is already gone."""
    if parent is None:
        return
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # it died before the line above: nobody would kill this rank
        os._exit(1)


def main() -> None:
    """Run one rank and leave at once: tearing down a group whose peers are gone can block."""
    args = parse(sys.argv[1:])
    die_with(args.parent)
    status = run(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
