"""Start the ranks of a replay and bound them in time, then gather what they wrote.

Two launch modes: `spawn` starts one worker process per rank on this machine (127.0.0.1, a free
port, rank 0 holding the store) and kills, by pid, every one still running at the hard deadline;
`env` runs one rank in the calling process, its rank, world size and local rank from the
launcher's environment (torchrun's RANK/WORLD_SIZE/LOCAL_RANK, or srun's SLURM_PROCID/
SLURM_NTASKS/SLURM_LOCALID; MASTER_ADDR/MASTER_PORT for the rendezvous). The caller passes the
environment in: this module reads none of its own.

A spawned rank imports nothing from where the replay was started: Python runs isolated (`-I`:
no current folder, no PYTHONPATH, no user site on `sys.path`), in a private empty folder, and
loads this very fr_analyzer by its location (an installed, editable or plain checkout alike),
then torch from the interpreter's own site-packages. Each rank is the leader of its own process
group: SIGTERM, SIGHUP or Ctrl-C to this process kills every rank's group before it leaves, and
a rank dies with this process even when it is killed outright (`worker.die_with`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from ..errors import FrAnalyzerError, UsageError
from . import files
from .files import LOGS, PLAN_FILE
from .plan import ReplayBackend, ReplayPlan, to_json
from .worker import FR_FOLDER, RESULT, STOP, RankResult, WorkerArgs, read_result

LOG_TAIL_LINES = 5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that stop a replay: every rank is killed, then this process leaves (Ctrl-C too)."""
BOOTSTRAP = (
    "import importlib.util, sys\n"
    "home = sys.argv.pop(1)\n"
    "spec = importlib.util.spec_from_file_location(\n"
    "    'fr_analyzer', home + '/__init__.py', submodule_search_locations=[home])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules['fr_analyzer'] = module\n"
    "spec.loader.exec_module(module)\n"
    "from fr_analyzer.replay.worker import main\n"
    "main()\n"
)
"""What a spawned rank runs (`python -I -c BOOTSTRAP <package folder> <worker arguments>`):
this fr_analyzer, found by its folder and not by a search of `sys.path`."""
PACKAGE_HOME = Path(__file__).resolve().parents[1]


class Stopped(FrAnalyzerError):
    """A signal stopped the replay; every rank was killed first."""

    default_hint = "what each rank wrote before it was stopped is in the replay's --out folder"


@dataclass(frozen=True)
class RunOptions:
    """How to run a plan."""

    out: Path  # the folder for the plan, the logs, the results and the Flight Recorder dumps
    backend: ReplayBackend = ReplayBackend.GLOO
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

    def aborted(self) -> list[int]:
        """The ranks that aborted (SIGABRT: gloo aborts a rank that receives more bytes than it
        posted)."""
        return [e.rank for e in self.exits if e.returncode == -signal.SIGABRT]

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


def write_plan(plan: ReplayPlan, out: Path, name: str = PLAN_FILE) -> tuple[Path, str]:
    """The plan as the workers read it, `out/plan.json`, written without following a link; and
    its SHA-256, by which a rank knows it reads that plan (`out` may be shared)."""
    text = to_json(plan).encode()
    return files.write_in(out, name, text), hashlib.sha256(text).hexdigest()


def spawn(plan: ReplayPlan, options: RunOptions, env: Mapping[str, str]) -> RunOutcome:
    """Run every rank of `plan` as a local process, isolated, each the leader of its own
    process group; kill (by process group) those still running at the deadline, and all of
    them when this process is stopped (SIGTERM, SIGHUP, Ctrl-C)."""
    out = options.out.absolute()
    files.check_out(out)
    path, digest = write_plan(plan, out)
    with files.folder(out) as out_fd:
        for stale in [STOP, *(RESULT.format(rank=r) for r in range(plan.world_size))]:
            with contextlib.suppress(FileNotFoundError):  # an earlier run's, in a kept --out
                os.unlink(stale, dir_fd=out_fd)
    logs = out / LOGS
    port = free_port()
    started = time.monotonic()
    limit = started + deadline(options)
    procs: list[subprocess.Popen[bytes]] = []
    killed: set[int] = set()
    home = Path(tempfile.mkdtemp(prefix="fr-replay-rank-"))  # every rank's cwd: empty, private
    try:
        with stopped_by(STOP_SIGNALS), files.folder(out) as out_fd:
            with files.subfolder(out_fd, LOGS, logs) as logs_fd:
                for rank in range(plan.world_size):
                    name = f"rank_{rank}.log"
                    log = files.create(logs_fd, name, logs / name)
                    argv = [sys.executable, "-I", "-c", BOOTSTRAP, str(PACKAGE_HOME)]
                    argv += _worker_argv(path, rank, plan.world_size, options, port, out)
                    argv += ["--plan-sha256", digest]
                    try:
                        with _signals_held():  # a stop lands once the rank is in `procs`
                            procs.append(
                                subprocess.Popen(
                                    argv,
                                    stdin=subprocess.DEVNULL,
                                    stdout=log,
                                    stderr=subprocess.STDOUT,
                                    env=_rank_env(env),
                                    cwd=home,
                                    start_new_session=True,
                                )
                            )
                    finally:
                        os.close(log)
            killed = wait_or_kill(procs, limit, out)
    finally:
        with _signals_held():  # none is left behind, whatever stopped this
            for proc in procs:
                kill(proc)
        shutil.rmtree(home, ignore_errors=True)
    exits = []
    for rank, proc in enumerate(procs):
        result = _result_of(out / RESULT.format(rank=rank))
        tail = _tail(logs / f"rank_{rank}.log")
        exits.append(RankExit(rank, proc.returncode, rank in killed, result, tail))
    return RunOutcome(tuple(exits), out / FR_FOLDER, time.monotonic() - started)


def kill(proc: subprocess.Popen[bytes]) -> bool:
    """Kill a process still running, and its process group when it leads one; wait for it.
    Whether it was still running."""
    if proc.poll() is not None:
        return False
    with contextlib.suppress(OSError):
        if os.getpgid(proc.pid) == proc.pid:  # its own group (the spawned ranks): all of it
            os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()
    proc.wait()
    return True


@contextlib.contextmanager
def stopped_by(signals: Sequence[signal.Signals]) -> Iterator[None]:
    """While inside, each of `signals` raises `Stopped`, unless it was ignored (`nohup`). Only
    the main thread can handle a signal: elsewhere nothing changes, and the ranks die with this
    process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        raise Stopped(f"replay stopped by {name}: every rank was killed")

    previous: dict[signal.Signals, Callable[[int, FrameType | None], object] | int | None] = {}
    try:
        for sig in signals:
            if signal.getsignal(sig) != signal.SIG_IGN:  # nohup's SIGHUP stays ignored
                previous[sig] = signal.signal(sig, stop)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """The stop signals held back while inside (delivered on the way out)."""
    held = {*STOP_SIGNALS, signal.SIGINT}
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def wait_or_kill(procs: Sequence[subprocess.Popen[bytes]], limit: float, out: Path) -> set[int]:
    """Wait for every process (rank i is `procs[i]`) until `limit` (`time.monotonic()`); kill
    the rest (by process group where they lead one); return the ranks killed. Once every rank
    has ended or written its result in `out` and one failed, tell the rest to stop waiting for
    their peers (`STOP`)."""
    stopped = False
    while any(p.poll() is None for p in procs) and time.monotonic() < limit:
        if not stopped and _settled(procs, out):
            files.write_in(out, STOP, b"")
            stopped = True
        time.sleep(0.05)
    return {rank for rank, proc in enumerate(procs) if kill(proc)}


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


def _result_of(path: Path) -> RankResult | None:
    """What a rank wrote at `path`, or None: nothing, or nothing readable."""
    try:
        return read_result(path)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _rank_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a spawned rank: `env`, gloo on loopback (every rank is on
    127.0.0.1). PYTHONPATH is in it but not read: a rank runs isolated."""
    found = dict(env)
    if "GLOO_SOCKET_IFNAME" not in found and any(n == "lo" for _, n in socket.if_nameindex()):
        found["GLOO_SOCKET_IFNAME"] = "lo"
    return found


def _tail(path: Path) -> tuple[str, ...]:
    try:
        lines = files.read(path).decode(errors="replace").splitlines()
    except OSError:
        return ()
    return tuple(line[:200] for line in lines[-LOG_TAIL_LINES:])


def _worker_argv(
    plan: Path, rank: int, world: int, options: RunOptions, port: int | None, out: Path
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
        str(rank if options.backend == ReplayBackend.NCCL else 0),
        "--backend",
        options.backend,
        "--init-method",
        init,
        "--out",
        str(out),
        "--timeout",
        str(options.timeout_s),
        "--iterations",
        str(options.iterations),
        "--warmup",
        str(options.warmup),
        "--parent",
        str(os.getpid()),
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
    files.check_out(options.out)
    path, digest = write_plan(plan, options.out, f"plan_{launch.rank}.json")  # one per rank
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
        plan_sha256=digest,
    )
    status = worker.run(args)
    exits = []
    for rank in range(plan.world_size):
        result = _result_of(options.out / RESULT.format(rank=rank))
        if rank != launch.rank and result is None:
            continue
        exits.append(RankExit(rank, status if rank == launch.rank else None, False, result))
    return RunOutcome(tuple(exits), options.out / FR_FOLDER, time.monotonic() - started)
