"""Each file's limits are its own: a worker's CPU and memory budgets are measured for the file
it reads, scale with the file's content up to absolute ceilings, and a file whose worker
dies is read again in a fresh worker before it is called unreadable."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import cli
from fr_analyzer.errors import DumpError
from fr_analyzer.load.safety import limits, reading, sandbox
from fr_analyzer.load.safety.limits import GIB, LIMITS, Limits, content_bytes

pytestmark = pytest.mark.skipif(
    not sandbox.available(), reason="worker processes need fork (Linux, macOS)"
)

TIGHT = Limits(cpu_base_s=0.5, cpu_per_mib_s=0.0, cpu_ceiling_s=0.5)


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _burn(task: float) -> str:
    """A task that uses `task` seconds of CPU (forever, when negative)."""
    _spin(task if task >= 0 else 3600.0)
    return "done"


def _dead(task: object, death: sandbox.Death) -> str:
    return death.reason


def test_each_file_has_its_whole_cpu_budget_however_much_its_worker_used_before() -> None:
    """Six files of 0.3 s each in one worker: 1.8 s in all, each far inside its 0.5 s."""
    pool = sandbox.Sandbox(_burn, lambda _: 0, _dead, workers=1, limits=TIGHT)
    assert dict(pool.run([0.3] * 6)) == {i: "done" for i in range(6)}


def _collector_on(task: int) -> bool:
    """Whether the collector is on while a task runs."""
    return gc.isenabled()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


_LEFT: list[weakref.ref[_Cycle]] = []


def _leave_a_cycle(task: int) -> bool:
    """Task 0 leaves a cycle behind; the next tells whether it was collected."""
    if task == 0:
        _LEFT.append(weakref.ref(_Cycle()))
        return True
    return _LEFT[0]() is None


def test_a_worker_reads_with_its_collector_off() -> None:
    """A pass of the collector while a file's ~100k objects are alive walks each of them:
    that doubled the time of the general reader (a Python pickle of protocol 2) in a worker."""
    pool = sandbox.Sandbox(_collector_on, lambda _: 0, _dead, workers=1)
    assert dict(pool.run([0, 1])) == {0: False, 1: False}


def test_what_a_task_leaves_in_cycles_is_collected_once_it_is_done() -> None:
    pool = sandbox.Sandbox(_leave_a_cycle, lambda _: 0, _dead, workers=1)
    assert dict(pool.run([0, 1])) == {0: True, 1: True}


@pytest.mark.slow
def test_a_file_over_its_cpu_budget_is_refused_after_one_more_try() -> None:
    pool = sandbox.Sandbox(_burn, lambda _: 0, _dead, workers=1, limits=TIGHT)
    started = time.monotonic()
    results = dict(pool.run([0.0, -1.0, 0.0]))
    assert results[0] == results[2] == "done"
    assert results[1] == (
        "reading it took over 0.5 s of CPU (its limit): refused"
        " (read 2 times, each in a fresh process)"
    )
    assert time.monotonic() - started < 10


def _die_first_time(marker: str) -> str:
    """Kills its worker the first time it runs (a worker left short by an earlier file)."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return "read"


def _again(marker: str) -> str:
    return "read again"


def test_a_file_whose_worker_died_is_read_again_in_a_fresh_worker(tmp_path: Path) -> None:
    markers = [str(tmp_path / f"m{i}") for i in range(4)]
    Path(markers[0]).touch()  # task 0 reads at once; the others kill one worker each
    pool = sandbox.Sandbox(_die_first_time, lambda _: 0, _dead, workers=2, retry=_again)
    assert dict(pool.run(markers)) == {0: "read", 1: "read again", 2: "read again", 3: "read again"}


def test_with_no_retries_a_death_is_final(tmp_path: Path) -> None:
    pool = sandbox.Sandbox(_die_first_time, lambda _: 0, _dead, workers=1, limits=Limits(retries=0))
    assert dict(pool.run([str(tmp_path / "m")])) == {
        0: "the process reading it was killed (out of memory?)"
    }


def test_budgets_grow_with_content_up_to_ceilings() -> None:
    assert sandbox.budget(0) == LIMITS.cpu_base_s
    assert sandbox.budget(4 << 20) == LIMITS.cpu_base_s + 4 * LIMITS.cpu_per_mib_s
    assert sandbox.budget(1 << 40) == LIMITS.cpu_ceiling_s
    assert sandbox.memory(0) == LIMITS.memory_base
    assert sandbox.memory(1 << 40) <= LIMITS.memory_ceiling
    assert sandbox.memory(1 << 40) <= max(
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2, LIMITS.memory_base
    )


def test_a_sparse_file_counts_by_its_content(tmp_path: Path) -> None:
    """200 MB long, 8 bytes written: its worker's limits are those of a tiny file."""
    sparse = tmp_path / "rank_1.pkl"
    with open(sparse, "wb") as stream:
        stream.truncate(200 << 20)
        stream.write(b"\x80\x02r\xff\xff\xff\x7f.")
    assert sparse.stat().st_size == 200 << 20
    assert content_bytes(sparse) < 1 << 20
    assert sandbox.memory(content_bytes(sparse)) < LIMITS.memory_base + GIB


def test_a_dense_file_counts_whole(tmp_path: Path) -> None:
    dense = tmp_path / "rank_1.pkl"
    dense.write_bytes(b"x" * 100_000)
    assert content_bytes(dense) == 100_000


def _allocate(gib: float) -> str:
    try:
        block = bytearray(int(gib * GIB))
    except MemoryError:
        return "refused"
    return f"allocated {len(block)}"


def test_memory_beyond_a_files_allowance_is_refused() -> None:
    small = Limits(memory_base=256 << 20, memory_per_byte=0, memory_ceiling=256 << 20)
    pool = sandbox.Sandbox(_allocate, lambda _: 0, _dead, workers=1, limits=small)
    assert dict(pool.run([0.01, 1.0])) == {0: f"allocated {int(0.01 * GIB)}", 1: "refused"}


def test_limits_are_frozen() -> None:
    with pytest.raises(AttributeError):
        LIMITS.retries = 5  # type: ignore[misc]


def test_without_workers_a_pickle_that_could_outgrow_the_memory_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In the calling process (no fork) nothing limits the unpickler: a file whose worst case
    (16x its size) exceeds half the memory available is refused, not read."""
    rank_1 = Path(__file__).resolve().parents[2] / "sample_dumps" / "gloo_healthy" / "rank_1.pkl"
    assert isinstance(reading.read_raw(rank_1, 1), dict)
    monkeypatch.setattr(reading, "memory_available", lambda: 2 * rank_1.stat().st_size)
    with pytest.raises(DumpError) as refused:
        reading.read_raw(rank_1, 1)
    assert "no worker process to read it under limits): refused" in refused.value.reason


# ---------------------------------------------------------------------------------------------
# The attacks, end to end: the bomb costs only its rank, bounded

NASTY = Path(__file__).resolve().parents[1] / "nasty"
SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def _with_rank_1(tmp_path: Path, write: Callable[[Path], None]) -> Path:
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "gloo_healthy", directory)
    (directory / "rank_1.pkl").unlink()
    write(directory / "rank_1.pkl")
    return directory


def _analyze(directory: Path, tmp_path: Path) -> dict[str, Any]:
    report = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", "-d", str(directory), "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    data: dict[str, Any] = json.loads(report.read_text())
    return data


def test_a_sparse_memo_bomb_costs_only_its_rank(tmp_path: Path) -> None:
    """200 MB long, 8 bytes of content (a memo index of 2**31-1): its worker's memory is that
    of an 8-byte file, and the rank is refused with the scan's reason; the others are read."""

    def sparse(path: Path) -> None:
        with open(path, "wb") as stream:
            stream.write((NASTY / "memo_index_bomb.pkl").read_bytes())
            stream.truncate(200 << 20)

    directory = _with_rank_1(tmp_path, sparse)
    data = _analyze(directory, tmp_path)
    assert data["dumps"]["ranks_loaded"] == [0, 2, 3]
    [unreadable] = data["dumps"]["unreadable"]
    assert unreadable["rank"] == 1 and "memo index 2147483647" in unreadable["reason"]


def test_a_hash_bomb_padded_to_100_mb_costs_at_most_the_cpu_ceiling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The padding is content, so the budget grows with it, but never past `cpu_ceiling_s`
    (lowered here to 1 s); the read again scans first and names the bomb."""

    def padded(path: Path) -> None:
        path.write_bytes((NASTY / "tuple_hash_bomb.pkl").read_bytes() + b"\0" * (100 << 20))

    directory = _with_rank_1(tmp_path, padded)
    monkeypatch.setattr(limits, "LIMITS", dataclasses.replace(LIMITS, cpu_ceiling_s=1.0))
    started = time.monotonic()
    report = tmp_path / "r.json"
    saved, sys.argv = sys.argv, ["fr-analyze", "-d", str(directory), "--json", str(report)]
    try:
        with pytest.raises(SystemExit):
            cli.main()
    finally:
        sys.argv = saved
    assert time.monotonic() - started < 20
    data = json.loads(report.read_text())
    assert data["dumps"]["ranks_loaded"] == [0, 2, 3]
    [unreadable] = data["dumps"]["unreadable"]
    assert unreadable["reason"].startswith(
        "refused: pickle builds a tuple of over 10000 nested or repeated tuples"
    )


_PARENT = """
import sys, time
from fr_analyzer.load.safety import sandbox

def wait(task):
    time.sleep(3600)

def dead(task, death):
    return ""

pool = sandbox.Sandbox(wait, lambda _: 0, dead, workers=1)
for _ in pool.run([0]):
    pass
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("gone", [False, True])
def test_a_worker_whose_parent_died_before_it_asked_to_die_with_it_leaves_at_once(
    gone: bool,
) -> None:
    """The parent killed between the fork and the worker's first line: the worker, now some
    other process's child, checks against the pid its parent gave it before the fork (not
    the one it sees after), and leaves, rather than hold the parent's sockets open for ever
    (a Ray driver would wait minutes for the lost worker's channel). Its parent alive, it
    goes on."""
    given = os.getpid() + (7_654_321 if gone else 0)  # the pid the parent gave it
    code = (
        "from fr_analyzer.load.safety.sandbox import _die_with_parent\n"
        f"_die_with_parent({given})\n"
        "print('went on')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == ((1, "") if gone else (0, "went on"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl's death signal is Linux's")
def test_a_parent_killed_outright_takes_its_workers_with_it() -> None:
    """A Ray worker lost mid-task, or fr-analyze killed by the OOM killer: no reader is left
    behind holding the parent's pipes and sockets open."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (workers := _children(parent.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers, "the sandbox started no worker"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{w}").exists() for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(Path(f"/proc/{w}").exists() for w in workers)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
