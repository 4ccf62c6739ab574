"""Run the ranks of a small gloo job on 127.0.0.1, one process per rank, for the tools that make
real Flight Recorder dumps with torch (`make_gloo_samples`, `make_profiler_traces`,
`make_torch_fixtures`). Standard library only: the scripts import it as a sibling module.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def worker_env(buffer_size: int = 2000) -> dict[str, str]:
    """The environment of a rank: Flight Recorder on (the default in 2.13; explicit for older
    releases) and gloo kept on the loopback interface, not the host's address."""
    env = dict(os.environ)
    env["TORCH_FR_BUFFER_SIZE"] = str(buffer_size)
    if any(name == "lo" for _, name in socket.if_nameindex()):
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return env


def run_ranks(
    argv: list[str],
    world_size: int,
    deadline_s: float,
    *,
    deadline_name: str = "the deadline",
    buffer_size: int = 2000,
) -> list[str]:
    """Start `argv --rank N` for every rank, each with its output in a log; kill the ranks
    still running `deadline_s` after the start; print each rank's own lines ("rank N: ...",
    and the end of its log when it failed). Returns the problems seen: ranks killed, exit
    statuses other than 0."""
    problems: list[str] = []
    started = time.monotonic()
    env = worker_env(buffer_size)
    with tempfile.TemporaryDirectory() as logs, contextlib.ExitStack() as stack:
        procs = []
        for rank in range(world_size):
            log = stack.enter_context((Path(logs) / f"rank_{rank}.log").open("w"))
            procs.append(
                subprocess.Popen(
                    [*argv, "--rank", str(rank)], stdout=log, stderr=subprocess.STDOUT, env=env
                )
            )
        for rank, proc in enumerate(procs):
            try:
                proc.wait(timeout=max(0.1, started + deadline_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                problems.append(f"rank {rank}: killed after {deadline_name}")
        stack.close()
        for rank, proc in enumerate(procs):
            lines = (Path(logs) / f"rank_{rank}.log").read_text(errors="replace").splitlines()
            shown = [ln for ln in lines if ln.startswith(f"rank {rank}:")]
            if proc.returncode != 0:
                problems.append(f"rank {rank}: exit status {proc.returncode}")
                shown += lines[-15:]
            for line in shown:
                print(f"    {line[:160]}")
    return problems


def reap(procs: list[subprocess.Popen[bytes]], deadline: float) -> None:
    """Wait for ranks each started in its own process group (`start_new_session`) until
    `deadline` (`time.monotonic()`), then kill the group of every one still running."""
    try:
        for proc in procs:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
