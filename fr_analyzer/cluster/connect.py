"""Join a Ray cluster, or start a local one, for one run; say which.

The cluster is the one Ray's own tools would use: the address given (`--ray-address`, else
`RAY_ADDRESS`, read by the CLI), else a cluster already running on this machine (what
`ray.init(address="auto")` finds), else a local one started for this run and stopped after
it. An address that does not answer is refused in one line before Ray is asked (Ray would
retry for a minute), and so is a Ray that is not installed.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import FrAnalyzerError

POLL_S = 5.0
"""How often the driver, waiting on tasks, looks whether the cluster still runs any."""
STALLED_S = 300.0
"""How long the driver waits on tasks while the cluster runs none (every CPU free) before it
gives the run up (`wait_one`): Ray that cannot store a task's result, its spill disk past
`local_fs_capacity_threshold`, holds the result back without failing the task."""
DISK_SHARE = 0.99
"""How full its spill disk may get before a local cluster started for a run refuses to spill
(Ray's `local_fs_capacity_threshold`, 0.95 by default): on this machine's disk of 250 GB,
Ray's default stops with 12 GB still free, and the driver's table out of core (`--table-dir`,
else the system's temp folder) shares that disk."""
PROBE_TIMEOUT_S = 5.0
"""How long an address may take to accept a connection before the cluster is called silent."""


class ClusterError(FrAnalyzerError):
    """The cluster cannot be used: Ray is not installed, or the cluster does not answer."""

    default_hint = (
        "check --ray-address (the head's address, as `ray status` prints it), or leave out "
        "--engine ray to analyze in this process"
    )


@dataclass(frozen=True)
class Cluster:
    """The cluster a run uses: where it is, whether this run started it, and its size."""

    address: str
    started: bool  # a local cluster started for this run (stopped after it)
    nodes: int
    cpus: int
    # the memory one task may count on: the least, over the nodes, of a node's memory for
    # tasks over its CPUs (None: not known)
    task_memory: int | None = None

    @property
    def label(self) -> str:
        """For the report's header: where the ranks were read."""
        size = (
            f"{self.nodes} node{'s' if self.nodes != 1 else ''},"
            f" {self.cpus} CPU{'s' if self.cpus != 1 else ''}"
        )
        if self.started:
            return f"read on a local Ray cluster started for this run ({size})"
        return f"read on the Ray cluster at {self.address} ({size})"


def import_ray() -> Any:
    """Ray, or a `ClusterError` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ClusterError(
            f"--engine ray needs Ray ({exc}): pip install 'fr-analyze[ray]'"
        ) from None
    return ray


def import_arrow() -> Any:
    """pyarrow (the shards travel as Arrow blocks), or a `ClusterError` saying how to install
    it."""
    try:
        import pyarrow  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ClusterError(
            f"--engine ray needs pyarrow ({exc}): pip install 'fr-analyze[ray]'"
        ) from None
    return pyarrow


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Refuse, in one line, an address (`host:port`, optionally `ray://`) that does not
    accept a connection within `timeout_s`."""
    bare = address.removeprefix("ray://")
    host, sep, port = bare.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ClusterError(f"Ray address {address!r}: not host:port")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ClusterError(f"the Ray cluster at {address} does not answer ({reason})") from None


@contextmanager
def connect(address: str | None, *, num_cpus: int | None = None) -> Iterator[Cluster]:
    """The cluster at `address` (None: a running local one, else one started here) for the
    time of the `with` block; Ray is shut down (this driver disconnected, a cluster started
    here stopped) when it ends, whatever happens in it. A process already connected is
    refused: leaving would cut its own connection. The process's signal handlers are left
    as they were (Ray's driver installs one for SIGTERM)."""
    ray = import_ray()
    import_arrow()  # the shards' blocks: refused here, in one line, not in every task
    if ray.is_initialized():  # this process is a driver already: not ours to join or leave
        raise ClusterError("this process is already connected to a Ray cluster")
    started = False
    handlers = _handlers()
    try:
        if address is not None:
            probe(address)
            _init(ray, address=address)
        else:
            try:
                _init(ray, address="auto")
            except ConnectionError:  # none running here: start one for this run
                _init(
                    ray,
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    _system_config={"local_fs_capacity_threshold": DISK_SHARE},
                )
                started = True
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        cpus = int(ray.cluster_resources().get("CPU", 0))
        where = address or ("local" if started else _gcs_address(ray))
        yield Cluster(where, started, len(nodes), cpus, _task_memory(nodes))
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for number, handler in handlers.items():
            if handler is not None:  # None: not set from Python, nothing to put back
                signal.signal(number, handler)


HANDLED = (signal.SIGTERM, signal.SIGINT)
"""The signals whose handlers `connect` leaves as it found them."""


def _handlers() -> dict[signal.Signals, Any]:
    """The handlers of `HANDLED` now (none off the main thread, where none can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {number: signal.getsignal(number) for number in HANDLED}


def _task_memory(nodes: list[dict[str, Any]]) -> int | None:
    """The least memory a task may count on: over the nodes with CPUs, the node's memory
    for tasks (Ray's `memory` resource) over its CPUs (as many tasks run at once)."""
    shares = []
    for node in nodes:
        resources = node.get("Resources") or {}
        cpus, memory = resources.get("CPU", 0), resources.get("memory", 0)
        if cpus >= 1 and memory > 0:
            shares.append(int(memory // cpus))
    return min(shares) if shares else None


def _init(ray: Any, **kwargs: Any) -> None:
    """`ray.init`, quiet (Ray's own log lines stay in its session folder), its failures one
    line."""
    try:
        ray.init(logging_level="ERROR", log_to_driver=False, configure_logging=True, **kwargs)
    except ConnectionError:
        raise
    except Exception as exc:  # Ray's own: a version mismatch, a cluster gone while joining
        target = kwargs.get("address") or "a local cluster"
        raise ClusterError(f"Ray could not join {target}: {type(exc).__name__}: {exc}") from None
    _quiet_error_events(ray)


def _quiet_error_events(ray: Any) -> None:
    """Keep the cluster's error events (a worker lost, its task retried) off this process's
    stdout, where Ray's driver prints them from a thread of its own whatever `log_to_driver`
    says: stdout is the report's (`--json -` writes JSON there). They stay in the cluster's
    logs; the run's answer says what was lost. A Ray without that printer is left as it is."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is not None and callable(getattr(worker, "print_to_stdstream", None)):
        worker.print_to_stdstream = _dropped


def _dropped(data: Any, ignore_prefix: bool = False) -> None:
    """Ray's printer of error events, replaced: nothing printed."""


def _gcs_address(ray: Any) -> str:
    """The address of the cluster joined by "auto"."""
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # an older Ray: the address is not kept
        return "auto"


def wait_one(ray: Any, refs: list[Any], stalled_s: float = STALLED_S) -> Any:
    """The first of `refs` (tasks' results) to be ready. `ClusterError` once the cluster has
    run no task at all for `stalled_s` while none of them is ready: a stalled cluster is one
    line and exit 2, not a run that waits for ever."""
    idle_since: float | None = None
    while True:
        ready, _ = ray.wait(refs, num_returns=1, timeout=POLL_S)
        if ready:
            return ready[0]
        cpus = ray.cluster_resources().get("CPU", 0.0)
        if ray.available_resources().get("CPU", 0.0) < cpus:  # some task runs: not stalled
            idle_since = None
            continue
        now = time.monotonic()
        if idle_since is None:
            idle_since = now
        elif now - idle_since >= stalled_s:
            raise ClusterError(
                f"the Ray cluster ran no task for {stalled_s:.0f} s while {len(refs)} of this"
                " run's waited with every CPU free: it cannot store their results (is its spill"
                " disk past Ray's local_fs_capacity_threshold, 95% by default? --table-dir on"
                " another disk leaves the spill disk to Ray)"
            )


def reason_of(exc: BaseException) -> str:
    """A Ray error in one line: its class and the first line of its message."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


@contextmanager
def lost_as(what: str) -> Iterator[None]:
    """Ray's errors of a lost worker, node or object (past Ray's retries) as one
    `ClusterError` saying `what` could not be done; an error raised by a task's own code
    (`RayTaskError`: a bug of fr-analyze) is let through as it is."""
    ray = import_ray()
    try:
        yield
    except ray.exceptions.RayTaskError:
        raise
    except ray.exceptions.RayError as exc:
        raise ClusterError(f"{what}: {reason_of(exc)}") from None
