"""Worker processes that a hostile file can only kill: each reads one file at a time under
limits on CPU time and memory, and a file that kills its worker costs only itself.

Safety lives here rather than in a scan of every pickle before it is unpickled: the C
unpickler, refusing every global, is as fast as a plain `pickle.load`, and what it cannot
refuse (a tuple that takes forever to hash, one nested deep enough to overflow the C stack, a
memo index that allocates gigabytes) ends in an exception, or in the worker's death, for that
one file. The parent knows which file each worker holds (at most `DEPTH` are queued to it, in
order, and it reads them in that order), so a death is charged to exactly one file; the
others queued to that worker go back to the queue, and a fresh worker takes over.

Each file's limits are its own (`limits.Limits`): its CPU time is counted from zero when its
reading starts (a virtual timer, so the files a worker read before cannot use it up; user
time, since the system time of a busy machine's page reclaim is charged to whichever process
allocates; the process's CPU limit, user and system time, is a looser backstop), and its
memory is what it may add to what the worker already maps; both grow with the file's content
up to absolute ceilings. A file whose worker dies is read again, `retries` times, in a
fresh worker, by `retry` (which may first look for the reason, see `loading`), before it is
called unreadable: a genuine dump is never refused for what another file left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
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

from .limits import LIMITS, Limits, memory_ceiling

T = TypeVar("T")
R = TypeVar("R")

DEPTH = 2
"""Tasks queued to one worker: the next file is there when it finishes one."""


@dataclass(frozen=True)
class Death:
    """How a worker died while reading one task."""

    exitcode: int
    cpu_seconds: float  # the CPU budget it had for that task
    error: str = ""  # what `work` raised, when it raised instead of dying
    attempts: int = 1  # how many workers it killed

    @property
    def reason(self) -> str:
        """Why the file could not be read, as the report says it."""
        if self.error:
            return f"reading it failed: {self.error}"
        again = f" (read {self.attempts} times, each in a fresh process)"
        return self._what() + (again if self.attempts > 1 else "")

    def _what(self) -> str:
        code = -self.exitcode
        if code in (signal.SIGVTALRM, signal.SIGXCPU):
            return f"reading it took over {self.cpu_seconds:g} s of CPU (its limit): refused"
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


def budget(size: int, limits: Limits = LIMITS) -> float:
    """CPU seconds allowed for a file of `size` bytes of content."""
    return min(limits.cpu_base_s + limits.cpu_per_mib_s * size / (1 << 20), limits.cpu_ceiling_s)


def memory(size: int, limits: Limits = LIMITS) -> int:
    """Bytes of address space a file of `size` bytes of content may add to its worker."""
    return min(limits.memory_base + limits.memory_per_byte * size, memory_ceiling(limits))


@dataclass
class _Worker:
    process: Any
    conn: Connection
    queue: deque[int] = field(default_factory=deque)  # task indices sent, oldest first


class Sandbox(Generic[T, R]):
    """Runs `work` over tasks in forked workers; `size(task)` sets each task's limits (the
    bytes of content it reads), a task whose worker died is run again by `retry` (default
    `work`) in a fresh worker, up to `limits.retries` times, and `dead(task, death)` gives
    the result of a task whose last worker died too."""

    def __init__(
        self,
        work: Callable[[T], R],
        size: Callable[[T], int],
        dead: Callable[[T, Death], R],
        workers: int,
        retry: Callable[[T], R] | None = None,
        limits: Limits = LIMITS,
    ) -> None:
        self._work, self._size, self._dead = work, size, dead
        self._retry = work if retry is None else retry
        self._workers = max(1, workers)
        self._limits = limits

    def run(self, tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        """(task index, result) as each result arrives. One worker's results arrive in the
        order it read its tasks."""
        context = multiprocessing.get_context("fork")
        self._tasks = tasks
        pending = deque(range(len(tasks)))
        done: dict[int, R] = {}
        live: list[_Worker] = []
        remaining = len(tasks)
        deaths: dict[int, int] = {}  # task index: workers it killed
        limits = self._limits

        def start() -> None:
            parent, child = context.Pipe()
            process = context.Process(
                target=_serve,
                args=(child, self._work, self._retry, self._size, limits, os.getpid()),
                daemon=True,
            )
            process.start()
            child.close()
            live.append(_Worker(process, parent))

        def feed(worker: _Worker) -> None:
            while pending and len(worker.queue) < DEPTH:
                index = pending.popleft()
                worker.queue.append(index)
                worker.conn.send((index, tasks[index], deaths.get(index, 0)))
                if deaths.get(index):
                    break  # a task read again is its worker's only one

        def bury(worker: _Worker) -> None:
            worker.process.join()
            live.remove(worker)
            worker.conn.close()
            if worker.queue:  # the oldest task was being read; the others go back
                index = worker.queue.popleft()
                pending.extendleft(reversed(worker.queue))
                deaths[index] = deaths.get(index, 0) + 1
                if deaths[index] <= limits.retries:
                    pending.appendleft(index)  # again, first, in a fresh worker
                else:
                    size = self._size(tasks[index])
                    death = Death(
                        worker.process.exitcode or 0, budget(size, limits), "", deaths[index]
                    )
                    done[index] = self._dead(tasks[index], death)
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
                if isinstance(result, _Raised):  # `work` raised: a bug, not the file's fault
                    raise WorkerBug(f"reading task {index} in a worker: {result.text}")
                done[index] = result
        except (EOFError, OSError):
            return False
        return bool(worker.process.is_alive())


def _serve(
    conn: Connection,
    work: Callable[[Any], Any],
    retry: Callable[[Any], Any],
    size: Callable[[Any], int],
    limits: Limits,
    parent: int,
) -> None:
    """A worker: read tasks until told to stop, each under its own limits (`retry` reads a
    task that killed an earlier worker); `parent` is the pid of the process that forked it."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt stops
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)  # the CPU limit: the timer's signal kills
    # No collector passes while a task runs: a pass walks every object alive, the file's
    # ~100k among them (it doubled the general reader's time). What a task leaves in cycles
    # is collected once its result is sent and freed, when little else is alive.
    gc.disable()
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
        index, task, attempt = message
        _limit(size(task), limits)
        try:
            result = (retry if attempt else work)(task)
        except Exception as exc:  # `work` should not raise; if it does, only this task fails
            result = _Raised(f"{type(exc).__name__}: {exc}"[:300])
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        conn.send((index, result))
        del result
        gc.collect(0)


_PR_SET_PDEATHSIG = 1
"""Linux's prctl option: the signal a process gets when the thread that forked it dies."""


def _die_with_parent(parent: int) -> None:
    """Make this worker die when its parent (`parent`, its pid as the parent saw it before
    the fork) does. A worker holds a copy of every file its parent had open (its end of each
    pipe, a cluster's sockets), so a parent killed outright (SIGKILL: the OOM killer, a Ray
    worker lost) would leave it waiting forever on a pipe it holds open itself, and the
    parent's sockets open behind it (a Ray driver may then wait minutes, gRPC's keepalive,
    before it retries the lost task). The parent may die between the fork and the call below;
    the pid the parent gave, not the one this process sees, tells. Linux only; elsewhere the
    check alone."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the call: nothing would tell us
        os._exit(1)


@dataclass(frozen=True)
class _Raised:
    text: str


class WorkerBug(RuntimeError):
    """`work` raised in a worker. It turns every problem of its input into a result, so an
    exception is a bug in fr-analyze: raised in the parent as an internal error, never taken
    for the file's fault (exit 3, not an unreadable rank)."""


def _limit(size: int, limits: Limits) -> None:
    """Limits for reading a file of `size` bytes of content: user CPU time counted from now
    by a virtual timer (its signal kills), with the process's CPU limit (user and system
    time) a looser backstop, and address space beyond what the process already maps (it
    inherits the parent's)."""
    seconds = budget(size, limits)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    used = resource.getrusage(resource.RUSAGE_SELF)
    _set(resource.RLIMIT_CPU, int(used.ru_utime + used.ru_stime + 2 * seconds) + 5)
    try:
        with open("/proc/self/statm", "rb") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return  # no /proc: CPU time is still limited
    _set(resource.RLIMIT_AS, mapped + memory(size, limits))


def _set(which: int, soft: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(which, (soft, hard))
