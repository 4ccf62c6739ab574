"""Worker processes that a hostile file can only kill: each reads one file at a time under
limits on CPU time and memory, and a file that kills its worker costs only itself.

Safety lives here rather than in a scan of every pickle before it is unpickled: the C
unpickler, refusing every global, is as fast as a plain `pickle.load`, and what it cannot
refuse (a tuple that takes forever to hash, one nested deep enough to overflow the C stack, a
memo index that allocates gigabytes) ends in an exception, or in the worker's death, for that
one file. The parent knows which file each worker holds (at most `DEPTH` are queued to it, in
order, and it reads them in that order), so a death is charged to exactly one file; the
others queued to that worker go back to the queue, and a fresh worker takes over.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import multiprocessing
import os
import resource
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEPTH = 2
"""Tasks queued to one worker: the next file is there when it finishes one."""
CPU_SECONDS_BASE = 3
CPU_NS_PER_BYTE = 1000
"""CPU time one file may take: 3 s plus 1 s per MB (a genuine dump needs under 0.1 s per MB)."""
MEMORY_BASE = 2 << 30
MEMORY_PER_BYTE = 40
"""Address space one file may add: 2 GiB plus 40 times its size."""


@dataclass(frozen=True)
class Death:
    """How a worker died while reading one task."""

    exitcode: int
    cpu_seconds: int  # the CPU budget it had for that task
    error: str = ""  # what `work` raised, when it raised instead of dying

    @property
    def reason(self) -> str:
        if self.error:
            return f"reading it failed: {self.error}"
        code = -self.exitcode
        if code == signal.SIGXCPU:
            return f"reading it took over {self.cpu_seconds} s of CPU (its limit): refused"
        if code == signal.SIGKILL:
            return "the process reading it was killed (out of memory?)"
        if code in (signal.SIGSEGV, signal.SIGBUS):
            return "it crashed the process reading it (nested too deeply?)"
        if code > 0:
            with contextlib.suppress(ValueError):
                return f"the process reading it died ({signal.Signals(code).name})"
            return f"the process reading it died (signal {code})"
        return f"the process reading it exited with status {self.exitcode}"


def available() -> bool:
    """Whether worker processes can be forked here: on Linux or macOS, and not inside a
    daemonic process (a `multiprocessing.Pool` worker), which may have no children."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon
    )


def budget(size: int) -> int:
    """CPU seconds allowed for a file of `size` bytes."""
    return CPU_SECONDS_BASE + size * CPU_NS_PER_BYTE // 1_000_000_000


@dataclass
class _Worker:
    process: Any
    conn: Connection
    queue: deque[int] = field(default_factory=deque)  # task indices sent, oldest first


class Sandbox(Generic[T, R]):
    """Runs `work` over tasks in forked workers; `size(task)` sets each task's limits and
    `dead(task, death)` gives the result of a task whose worker died reading it."""

    def __init__(
        self,
        work: Callable[[T], R],
        size: Callable[[T], int],
        dead: Callable[[T, Death], R],
        workers: int,
    ) -> None:
        self._work, self._size, self._dead = work, size, dead
        self._workers = max(1, workers)

    def run(self, tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        """(task index, result) as each result arrives. One worker's results arrive in the
        order it read its tasks."""
        context = multiprocessing.get_context("fork")
        self._tasks = tasks
        pending = deque(range(len(tasks)))
        done: dict[int, R] = {}
        live: list[_Worker] = []
        remaining = len(tasks)

        def start() -> None:
            parent, child = context.Pipe()
            process = context.Process(
                target=_serve, args=(child, self._work, self._size), daemon=True
            )
            process.start()
            child.close()
            live.append(_Worker(process, parent))

        def feed(worker: _Worker) -> None:
            while pending and len(worker.queue) < DEPTH:
                index = pending.popleft()
                worker.queue.append(index)
                worker.conn.send((index, tasks[index]))

        def bury(worker: _Worker) -> None:
            worker.process.join()
            live.remove(worker)
            worker.conn.close()
            if worker.queue:  # the oldest task was being read; the others go back
                index = worker.queue.popleft()
                death = Death(worker.process.exitcode or 0, budget(self._size(tasks[index])))
                done[index] = self._dead(tasks[index], death)
                pending.extendleft(reversed(worker.queue))
            if pending:
                start()
                feed(live[-1])

        try:
            for _ in range(min(self._workers, len(tasks))):
                start()
                feed(live[-1])
            while remaining:
                for index in list(done):
                    yield index, done.pop(index)
                    remaining -= 1
                if not remaining:
                    break
                ready = wait([w.conn for w in live] + [w.process.sentinel for w in live])
                for worker in list(live):
                    if worker.conn in ready or worker.process.sentinel in ready:
                        if self._receive(worker, done):
                            feed(worker)
                        else:
                            bury(worker)
        finally:
            for worker in live:
                with contextlib.suppress(OSError):
                    worker.conn.send(None)
                worker.conn.close()
            for worker in live:
                worker.process.join(timeout=5)
                if worker.process.is_alive():
                    worker.process.kill()

    def _receive(self, worker: _Worker, done: dict[int, Any]) -> bool:
        """Take every result the worker has sent; False when it has died."""
        try:
            while worker.conn.poll():
                index, result = worker.conn.recv()
                assert index == worker.queue[0]  # a worker reads its tasks in order
                worker.queue.popleft()
                if isinstance(result, _Raised):
                    result = self._dead(self._tasks[index], Death(0, 0, result.text))
                done[index] = result
        except (EOFError, OSError):
            return False
        return bool(worker.process.is_alive())


def _serve(conn: Connection, work: Callable[[Any], Any], size: Callable[[Any], int]) -> None:
    """A worker: read tasks until told to stop, each under its own limits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt stops
    gc.enable()  # the parent may have paused its collector; a worker's garbage is its own
    faulthandler.disable()  # a crash is this file's reason, reported by the parent; no dump
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a killed worker leaves no core file
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, task = message
        _limit(size(task))
        try:
            result = work(task)
        except Exception as exc:  # `work` should not raise; if it does, only this task fails
            result = _Raised(f"{type(exc).__name__}: {exc}"[:300])
        conn.send((index, result))


@dataclass(frozen=True)
class _Raised:
    text: str


def _limit(size: int) -> None:
    """Limits for reading a file of `size` bytes: CPU time from now, and address space beyond
    what the process already maps (it inherits the parent's)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    seconds = int(used.ru_utime + used.ru_stime) + 1 + budget(size)
    _set(resource.RLIMIT_CPU, seconds)
    try:
        with open("/proc/self/statm", "rb") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return  # no /proc: CPU time is still limited
    _set(resource.RLIMIT_AS, mapped + MEMORY_BASE + MEMORY_PER_BYTE * size)


def _set(which: int, soft: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(which, (soft, hard))
