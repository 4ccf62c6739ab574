"""A Ray head on 127.0.0.1 for tests and benchmarks: started in its own session and temp
folder, measured while it runs, stopped by its processes' pids (never `ray stop`, which stops
every cluster of the user).

`ray start --head --block` stays in the foreground; every process it starts (GCS, raylet,
workers: Ray's workers set their own process group, not their own session) is in its session,
which is how `processes` finds them. Objects past the store's memory spill to `spill/` in the
temp folder, whose size `spilled_bytes` reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fr_analyzer.cluster.connect import DISK_SHARE

QUIET = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
"""A head on 127.0.0.1 for one test or benchmark takes no token (none is written to the
user's home) and reports no usage."""
START_S = 90.0
"""How long the head may take to accept connections."""


@dataclass(frozen=True)
class Head:
    """A running head: its address, the pid that leads its session, its temp folder."""

    address: str
    leader: int
    temp: Path

    def processes(self) -> list[int]:
        """Every live process of the cluster (zombies are gone)."""
        return session(self.leader)

    def spilled_bytes(self) -> int:
        """The bytes now in the spill folder."""
        total = 0
        for root, _, names in os.walk(self.temp / "spill"):
            for name in names:
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(root, name)).st_size
        return total


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """This process's environment with `QUIET` for the time of the `with` block (a driver
    joining a head reads them), as it was after."""
    saved = {key: os.environ.get(key) for key in QUIET}
    os.environ.update(QUIET)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def session(leader: int) -> list[int]:
    """The live processes of the session `leader` started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == leader and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def stop(leader: int) -> None:
    """TERM every process of the session, then KILL what is left, by pid."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session(leader):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5
        while session(leader) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not session(leader):
            return


@contextlib.contextmanager
def head(cpus: int = 2, object_store_bytes: int = 200_000_000) -> Iterator[Head]:
    """A head for the time of the `with` block; `RuntimeError` if it does not start."""
    temp = Path(tempfile.mkdtemp(prefix="frray"))  # short: Ray's socket paths fit 107 bytes
    port = free_port()
    spill = {"type": "filesystem", "params": {"directory_path": str(temp / "spill")}}
    config = {
        "object_spilling_config": json.dumps(spill),
        # Ray refuses to spill once its disk is 95% full: on a disk of 250 GB, with 12 GB
        # still free; the driver's table out of core shares that disk (docs/scale.md)
        "local_fs_capacity_threshold": DISK_SHARE,
    }
    command = [
        str(Path(sys.executable).with_name("ray")),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        f"--num-cpus={cpus}",
        f"--object-store-memory={object_store_bytes}",
        "--include-dashboard=false",
        f"--temp-dir={temp}",
        "--disable-usage-stats",
        f"--system-config={json.dumps(config)}",
    ]
    proc = subprocess.Popen(
        command,
        env={**os.environ, **QUIET},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head did not start in {START_S:.0f} s")
            time.sleep(0.2)
        yield Head(f"127.0.0.1:{port}", proc.pid, temp)
    finally:
        stop(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        shutil.rmtree(temp, ignore_errors=True)
