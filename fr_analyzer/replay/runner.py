"""Start the ranks of a replay and bound them in time, then gather what they wrote.

Two launch modes: `spawn` starts one worker process per rank on this machine (127.0.0.1, a free
port, rank 0 holding the store) and kills, by pid, every one still running at the hard deadline;
`env` runs one rank in the calling process, its rank, world size and local rank from the
launcher's environment (torchrun's RANK/WORLD_SIZE/LOCAL_RANK, or srun's SLURM_PROCID/
SLURM_NTASKS/SLURM_LOCALID; MASTER_ADDR/MASTER_PORT for the rendezvous). The caller passes the
environment in: this module reads none of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .plan import ReplayPlan, to_json
from .worker import FR_FOLDER, RESULT, STOP, RankResult, WorkerArgs, read_result

PLAN_FILE = "plan.json"
LOGS = "logs"
LOG_TAIL_LINES = 5


@dataclass(frozen=True)
class RunOptions:
    """How to run a plan."""

    out: Path  # the folder for the plan, the logs, the results and the Flight Recorder dumps
    backend: str = "gloo"
    timeout_s: float = 30.0  # the process-group timeout: every op is bounded by it
    deadline_s: float | None = None  # the hard limit of the whole run (None: `deadline`)
    iterations: int = 1
    warmup: int = 1


@dataclass(frozen=True)
class RankExit:
    """How one rank's process ended."""

    rank: int
    returncode: int | None  # None: killed at the deadline (or not started here)
    killed: bool
    result: RankResult | None  # None: it wrote none (it crashed, or was killed)
    log_tail: tuple[str, ...] = ()

    @property
    def how(self) -> str:
        """How it ended, in words."""
        if self.killed:
            return "killed at the deadline"
        if self.returncode == -signal.SIGABRT:
            return (
                "aborted (SIGABRT, no Python error: gloo aborts a rank that receives more "
                "bytes than it posted)"
            )
        if self.returncode is not None and self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        if self.result is None:
            return f"exited {self.returncode} with no result"
        if not self.result.ok:
            return self.result.error
        return "completed"


@dataclass(frozen=True)
class RunOutcome:
    """Every rank's end, and where their Flight Recorder dumps are."""

    exits: tuple[RankExit, ...]
    fr_dir: Path
    elapsed_s: float

    @property
    def ok(self) -> bool:
        """Whether every rank ran every op of every iteration."""
        return all(
            e.result is not None and e.result.ok and not e.result.peer_failed and not e.killed
            for e in self.exits
        ) and all(e.returncode in (0, None) for e in self.exits)

    def dumps(self) -> list[Path]:
        """The Flight Recorder dumps the ranks wrote."""
        if not self.fr_dir.is_dir():
            return []
        return sorted(p for p in self.fr_dir.iterdir() if not p.name.endswith(".partial"))


def deadline(options: RunOptions) -> float:
    """The hard limit of a run: `deadline_s`, else the start-up, twice the timeout (a stopped
    op, then the wait for peers), and a minute more."""
    if options.deadline_s is not None:
        return options.deadline_s
    return 60.0 + 4 * options.timeout_s


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the store binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_plan(plan: ReplayPlan, out: Path) -> Path:
    """The plan as the workers read it: `out/plan.json`."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / PLAN_FILE
    path.write_text(to_json(plan))
    return path


def spawn(plan: ReplayPlan, options: RunOptions, env: Mapping[str, str]) -> RunOutcome:
    """Run every rank of `plan` as a local process; kill (by pid) those still running at the
    deadline."""
    path = write_plan(plan, options.out)
    logs = options.out / LOGS
    logs.mkdir(exist_ok=True)
    port = free_port()
    env = _importable(env)
    started = time.monotonic()
    limit = started + deadline(options)
    procs: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as stack:
        try:
            for rank in range(plan.world_size):
                log = stack.enter_context((logs / f"rank_{rank}.log").open("wb"))
                argv = [sys.executable, "-m", "fr_analyzer.replay.worker"]
                argv += _worker_argv(path, rank, plan.world_size, options, port)
                procs.append(
                    subprocess.Popen(
                        argv, stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=Path.cwd()
                    )
                )
            killed = wait_or_kill(procs, limit, options.out)
        finally:
            for proc in procs:  # an interrupt, an error: none is left behind
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    exits = []
    for rank, proc in enumerate(procs):
        result_path = options.out / RESULT.format(rank=rank)
        result = read_result(result_path) if result_path.exists() else None
        tail = _tail(logs / f"rank_{rank}.log")
        exits.append(RankExit(rank, proc.returncode, rank in killed, result, tail))
    return RunOutcome(tuple(exits), options.out / FR_FOLDER, time.monotonic() - started)


def wait_or_kill(procs: Sequence[subprocess.Popen[bytes]], limit: float, out: Path) -> set[int]:
    """Wait for every process (rank i is `procs[i]`) until `limit` (`time.monotonic()`); kill
    the rest by pid; return the ranks killed. Once every rank has ended or written its result
    in `out` and one failed, tell the rest to stop waiting for their peers (`STOP`)."""
    stopped = False
    while any(p.poll() is None for p in procs) and time.monotonic() < limit:
        if not stopped and _settled(procs, out):
            (out / STOP).touch()
            stopped = True
        time.sleep(0.05)
    killed = set()
    for rank, proc in enumerate(procs):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            killed.add(rank)
    return killed


def _settled(procs: Sequence[subprocess.Popen[bytes]], out: Path) -> bool:
    """Whether no rank is still in an op and some rank failed."""
    failed = False
    for rank, proc in enumerate(procs):
        code = proc.poll()
        path = out / RESULT.format(rank=rank)
        if code is not None:
            failed = failed or code != 0
        elif not path.exists():
            return False
        else:
            try:
                failed = failed or not read_result(path).ok
            except (OSError, ValueError, KeyError):
                return False
    return failed


def _importable(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with this fr_analyzer first on PYTHONPATH: the workers import the same code
    (from a checkout too, not only from an installed package)."""
    home = str(Path(__file__).resolve().parents[2])
    paths = [home, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != home)]
    found = {**env, "PYTHONPATH": os.pathsep.join(paths)}
    if "GLOO_SOCKET_IFNAME" not in found and any(n == "lo" for _, n in socket.if_nameindex()):
        found["GLOO_SOCKET_IFNAME"] = "lo"  # every rank is on 127.0.0.1: gloo on loopback too
    return found


def _tail(path: Path) -> tuple[str, ...]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ()
    return tuple(line[:200] for line in lines[-LOG_TAIL_LINES:])


def _worker_argv(
    plan: Path, rank: int, world: int, options: RunOptions, port: int | None, local: int = 0
) -> list[str]:
    init = f"tcp://127.0.0.1:{port}" if port is not None else "env://"
    return [
        "--plan",
        str(plan),
        "--rank",
        str(rank),
        "--world-size",
        str(world),
        "--local-rank",
        str(rank if options.backend == "nccl" and port is not None else local),
        "--backend",
        options.backend,
        "--init-method",
        init,
        "--out",
        str(options.out),
        "--timeout",
        str(options.timeout_s),
        "--iterations",
        str(options.iterations),
        "--warmup",
        str(options.warmup),
    ]


@dataclass(frozen=True)
class Launch:
    """Where this process stands in a job started by torchrun or srun."""

    rank: int
    world_size: int
    local_rank: int


def launch_from(env: Mapping[str, str]) -> Launch:
    """This process's rank, world size and local rank, from torchrun's or srun's variables."""
    for rank_key, world_key, local_key in (
        ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ):
        if rank_key in env and world_key in env:
            try:
                return Launch(int(env[rank_key]), int(env[world_key]), int(env.get(local_key, 0)))
            except ValueError:
                raise UsageError(
                    f"--launcher env: {rank_key}={env[rank_key]!r}, "
                    f"{world_key}={env[world_key]!r}: not numbers"
                ) from None
    raise UsageError(
        "--launcher env: no RANK/WORLD_SIZE (torchrun) or SLURM_PROCID/SLURM_NTASKS (srun) "
        "in the environment"
    )


def in_process(plan: ReplayPlan, options: RunOptions, launch: Launch) -> RunOutcome:
    """Run this process's rank of `plan` (torchrun, srun: MASTER_ADDR/MASTER_PORT set); its
    outcome alone (rank 0 also reads the others' results when `out` is shared)."""
    from . import worker

    if launch.world_size != plan.world_size:
        raise UsageError(
            f"the job has {launch.world_size} ranks and the dumps {plan.world_size}: "
            "launch as many ranks as the dumps have"
        )
    options.out.mkdir(parents=True, exist_ok=True)
    path = options.out / f"plan_{launch.rank}.json"  # one per rank: `out` may be shared
    path.write_text(to_json(plan))
    started = time.monotonic()
    args = WorkerArgs(
        path,
        launch.rank,
        launch.world_size,
        launch.local_rank,
        options.backend,
        "env://",
        options.out,
        options.timeout_s,
        options.iterations,
        options.warmup,
    )
    status = worker.run(args)
    exits = []
    for rank in range(plan.world_size):
        result_path = options.out / RESULT.format(rank=rank)
        if rank != launch.rank and not result_path.exists():
            continue
        result = read_result(result_path) if result_path.exists() else None
        exits.append(RankExit(rank, status if rank == launch.rank else None, False, result))
    return RunOutcome(tuple(exits), options.out / FR_FOLDER, time.monotonic() - started)
