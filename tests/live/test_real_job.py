"""`fr-analyze live URL`, against a real job: 4 gloo ranks of torch (CPU) on 127.0.0.1, each with
PyTorch's debug server up (tests/live_job.py), looked at while it runs.

The command fetches every rank's Flight Recorder and Python stacks a few times, some seconds
apart, from the debug server's frontend (rank 0's) or from the ranks' worker servers, and
prints the report `fr-analyze -d DIR` prints; `--save DIR` keeps the snapshots, which
`fr-analyze -d DIR` reads back to the same answer. The jobs: a healthy one that keeps stepping,
one where rank 2 sleeps before an all_reduce its peers are blocked in (a real hang), and a
healthy one whose rank 3 is stopped with SIGSTOP (its worker server stops answering).

Needs torch, aiohttp and jinja2 in the interpreter that runs the tests (`make test` installs
them); the module skips otherwise. Every process a job starts is killed with its process group
(the frontend is a child of rank 0) when its fixture ends, and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # each test starts a real torch job

_MISSING = [m for m in ("torch", "aiohttp", "jinja2") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(
        f"the live tests run a real torch job with its debug server: {', '.join(_MISSING)} "
        f"not installed for {sys.executable}",
        allow_module_level=True,
    )

JOB_SCRIPT = Path(__file__).resolve().parents[1] / "live_job.py"
WORLD = 4
SLEEP_RANK = 2
STOPPED_RANK = 3
START_TIMEOUT_S = 60.0
# Longer than the module takes: the job's own end never races a test (stop() ends it first).
HOLD_S = 240.0
CLI_TIMEOUT_S = 90.0
# Two snapshots 2 s apart, 5 s for a request: a few seconds a run.
LIVE_ARGS = ("--snapshots", "2", "--interval", "2", "--timeout", "5")
SNAPSHOT_NAME = re.compile(r"\d{8}_\d{6}_\d{6}")
WORKER_LINE = re.compile(r"debug_server/rank(\d+): b'(http://[^']+)'")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def ask(url: str, *, post: bool = False, timeout: float = 5.0) -> str:
    """GET `url` (POST with an empty body, as the worker's handlers take it): the body."""
    request = urllib.request.Request(url, data=b"" if post else None)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body: bytes = response.read()
        return body.decode("utf-8", errors="replace")


@dataclass
class Job:
    """The ranks of a running job: `pids[rank]`, the frontend's URL, the ranks' logs."""

    procs: list[subprocess.Popen[bytes]]
    fport: int
    logs: Path
    dump_dir: Path | None = None
    _own_logs: bool = False
    _stopped: bool = field(default=False, repr=False)

    @property
    def frontend(self) -> str:
        return f"http://127.0.0.1:{self.fport}"

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def log(self, rank: int) -> str:
        return (self.logs / f"rank_{rank}.log").read_text(errors="replace")

    def logs_tail(self, lines: int = 15) -> str:
        return "\n".join(
            f"--- rank {rank} (exit {p.poll()}):\n"
            + "\n".join(self.log(rank).splitlines()[-lines:])
            for rank, p in enumerate(self.procs)
        )

    def workers(self) -> list[str]:
        """Every rank's worker server, in rank order, as the frontend's /tcpstore page lists
        them (`http://<hostname>:<port>`)."""
        found = {int(r): url for r, url in WORKER_LINE.findall(ask(f"{self.frontend}/tcpstore"))}
        return [found[rank] for rank in sorted(found)]

    def stop(self) -> None:
        """Kill every rank's process group (rank 0's holds the frontend), SIGCONT first for
        a stopped rank, and wait (bounded) until no process of the groups is left."""
        if self._stopped:
            return
        self._stopped = True
        for pid in self.pids:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_group_alive(pid) for pid in self.pids):
            time.sleep(0.1)
        if self._own_logs:
            shutil.rmtree(self.logs, ignore_errors=True)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def start_job(
    mode: str,
    world: int = WORLD,
    *,
    sleep_rank: int = SLEEP_RANK,
    hold: float = HOLD_S,
    dump_dir: Path | None = None,
    logs: Path | None = None,
    start_timeout: float = START_TIMEOUT_S,
) -> Job:
    """Start `world` ranks of tests/live_job.py in `mode` (healthy, sleeper), each in its own
    session, and wait until every rank printed "ready" and the frontend lists every rank's
    worker server; the job is stopped and the test fails with the ranks' logs otherwise."""
    own_logs = logs is None
    logs = Path(tempfile.mkdtemp(prefix="fr-live-job-")) if logs is None else logs
    logs.mkdir(parents=True, exist_ok=True)
    port, fport = free_port(), free_port()
    while fport == port:
        fport = free_port()
    argv = [sys.executable, str(JOB_SCRIPT), "--mode", mode, "--world", str(world)]
    argv += ["--port", str(port), "--fport", str(fport), "--sleep-rank", str(sleep_rank)]
    argv += ["--hold", str(hold)]
    if dump_dir is not None:
        argv += ["--dump-dir", str(dump_dir)]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen[bytes]] = []
    job = Job(procs, fport, logs, dump_dir, _own_logs=own_logs)
    try:
        for rank in range(world):
            with (logs / f"rank_{rank}.log").open("wb") as out:
                procs.append(
                    subprocess.Popen(
                        [*argv, "--rank", str(rank)],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=env,
                        start_new_session=True,
                    )
                )
        _wait_ready(job, world, start_timeout)
    except BaseException:
        job.stop()
        raise
    return job


def _wait_ready(job: Job, world: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        dead = [rank for rank, p in enumerate(job.procs) if p.poll() is not None]
        if dead:
            pytest.fail(f"ranks {dead} of the job exited while starting:\n{job.logs_tail()}")
        if all("ready" in job.log(rank).splitlines() for rank in range(world)):
            with contextlib.suppress(OSError, http.client.HTTPException):
                if len(job.workers()) == world:
                    return
        if time.monotonic() > deadline:
            pytest.fail(f"the job was not ready after {timeout:.0f} s:\n{job.logs_tail()}")
        time.sleep(0.25)


def fr(*args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fr_analyzer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@dataclass
class Run:
    """One run of the CLI, with its JSON report when it wrote one."""

    proc: subprocess.CompletedProcess[str]
    report: dict[str, Any] | None

    @property
    def said(self) -> str:
        """What the run printed, for assertion messages."""
        return (
            f"exit {self.proc.returncode}\n--- stdout:\n{self.proc.stdout}"
            f"\n--- stderr:\n{self.proc.stderr}"
        )

    @property
    def status(self) -> str | None:
        """The JSON report's `verdict.status` (schema fr-analyze.report/1)."""
        return None if self.report is None else self.report.get("verdict", {}).get("status")

    @property
    def culprits(self) -> list[int]:
        """The JSON report's `verdict.culprit_ranks`."""
        if self.report is None:
            return []
        return list(self.report.get("verdict", {}).get("culprit_ranks", []))


def analyze(*args: str, json_to: Path) -> Run:
    """Run `fr-analyze *args --json json_to` and read the JSON report back."""
    json_to.unlink(missing_ok=True)
    proc = fr(*args, "--json", str(json_to))
    report = json.loads(json_to.read_text()) if json_to.exists() else None
    return Run(proc, report)


def status_line(run: Run) -> str:
    """The text report's answer: its first line that starts with a status word, after the
    header (`fr-analyze VERSION: SOURCE`, what was loaded, the snapshots compared)."""
    found = re.search(r"^(OK|HUNG|DESYNC|SLOW|INCOMPLETE)\b.*$", run.proc.stdout, re.M)
    return found.group(0) if found else ""


def assert_hung_on(run: Run, rank: int) -> None:
    assert run.proc.returncode == 1, run.said
    assert run.status == "hung", run.said
    assert rank in run.culprits, run.said


# --- the jobs: one of each, shared by the tests of the module ---------------------------------


@pytest.fixture(scope="module")
def healthy_job() -> Iterator[Job]:
    with start_job("healthy") as job:
        yield job


@pytest.fixture(scope="module")
def sleeper_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    """Rank 2 sleeps before an all_reduce its peers are blocked in; the frontend writes its
    periodic dumps (every 2 s) to `job.dump_dir`."""
    dump_dir = tmp_path_factory.mktemp("debug_server_dumps")
    with start_job("sleeper", dump_dir=dump_dir) as job:
        yield job


@pytest.fixture(scope="module")
def stopped_rank_job() -> Iterator[Job]:
    """A healthy job whose rank 3 is stopped (SIGSTOP): its worker server does not answer."""
    with start_job("healthy") as job:
        os.kill(job.pids[STOPPED_RANK], signal.SIGSTOP)
        yield job  # stop() sends SIGCONT before it kills


@pytest.fixture(scope="module")
def sleeper_live(sleeper_job: Job, tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    """`fr-analyze live FRONTEND --save DIR` on the sleeper job: the run and DIR."""
    out = tmp_path_factory.mktemp("sleeper_live")
    saved = out / "snapshots"
    run = analyze(
        "live", sleeper_job.frontend, *LIVE_ARGS, "--save", str(saved), json_to=out / "r.json"
    )
    return run, saved


# --- the job itself, without fr-analyze -------------------------------------------------------


def test_the_job_serves_every_rank_flight_recorder(sleeper_job: Job) -> None:
    dumps = [
        json.loads(ask(f"{url}/handler/fr_trace_json", post=True)) for url in sleeper_job.workers()
    ]
    assert len(dumps) == WORLD
    for dump in dumps:
        assert dump["entries"], dump
    sleeper = dumps[SLEEP_RANK]["entries"]
    assert all(e["retired"] for e in sleeper), sleeper[-3:]
    for rank, dump in enumerate(dumps):
        if rank != SLEEP_RANK:
            blocked = dump["entries"][-1]
            assert blocked["profiling_name"] == "gloo:all_reduce", blocked
            assert not blocked["retired"], blocked
            assert len(dump["entries"]) == len(sleeper) + 1, (rank, len(dump["entries"]))


def test_the_job_serves_every_rank_python_stacks(sleeper_job: Job) -> None:
    stacks = [ask(f"{url}/handler/dump_traceback", post=True) for url in sleeper_job.workers()]
    assert " in sleeper" in stacks[SLEEP_RANK], stacks[SLEEP_RANK]
    assert " in all_reduce" not in stacks[SLEEP_RANK], stacks[SLEEP_RANK]
    assert " in all_reduce" in stacks[0], stacks[0]


def test_the_healthy_job_makes_progress_between_snapshots(healthy_job: Job) -> None:
    url = healthy_job.workers()[1]

    def newest_record() -> int:
        entries = json.loads(ask(f"{url}/handler/fr_trace_json", post=True))["entries"]
        return max(int(e["record_id"]) for e in entries)

    before = newest_record()
    time.sleep(1.0)
    assert newest_record() > before


def test_a_stopped_rank_does_not_answer_while_the_others_do(stopped_rank_job: Job) -> None:
    workers = stopped_rank_job.workers()
    for rank, url in enumerate(workers):
        if rank == STOPPED_RANK:
            with pytest.raises((TimeoutError, urllib.error.URLError)):
                ask(f"{url}/handler/", timeout=1.0)
        else:
            assert "fr_trace_json" in ask(f"{url}/handler/", timeout=5.0)


def test_the_job_leaves_no_process_once_stopped() -> None:
    with start_job("sleeper", world=2, sleep_rank=1) as job:
        os.kill(job.pids[1], signal.SIGSTOP)
    assert all(p.poll() is not None for p in job.procs)
    assert not any(_group_alive(pid) for pid in job.pids)


# --- fr-analyze live ---------------------------------------------------------------------------


def test_live_says_ok_for_a_healthy_job(healthy_job: Job, tmp_path: Path) -> None:
    run = analyze("live", healthy_job.frontend, *LIVE_ARGS, json_to=tmp_path / "r.json")
    assert run.proc.returncode == 0, run.said
    assert run.status == "ok", run.said
    assert status_line(run).startswith("OK."), run.said


def test_live_names_the_sleeping_rank_of_a_hung_job(sleeper_live: tuple[Run, Path]) -> None:
    run, _ = sleeper_live
    assert_hung_on(run, SLEEP_RANK)
    assert status_line(run).startswith("HUNG."), run.said
    assert "unchanged for" in run.proc.stdout, run.said


def test_live_saves_one_folder_per_snapshot(sleeper_live: tuple[Run, Path]) -> None:
    run, saved = sleeper_live
    snapshots = sorted(p for p in saved.iterdir() if p.is_dir()) if saved.is_dir() else []
    assert len(snapshots) == 2, (snapshots, run.said)
    for snapshot in snapshots:
        assert SNAPSHOT_NAME.fullmatch(snapshot.name), snapshot.name
        names = {p.name for p in snapshot.iterdir()}
        expected = {f"rank_{r}" for r in range(WORLD)} | {"stacks.txt", "fetch.json"}
        assert expected <= names, (snapshot, sorted(names))


def test_saved_snapshots_give_the_same_answer_offline(
    sleeper_live: tuple[Run, Path], tmp_path: Path
) -> None:
    live, saved = sleeper_live
    assert_hung_on(live, SLEEP_RANK)
    offline = analyze("-d", str(saved), json_to=tmp_path / "r.json")
    assert_hung_on(offline, SLEEP_RANK)
    assert offline.culprits == live.culprits, offline.said


def test_live_takes_the_worker_addresses_in_rank_order(sleeper_job: Job, tmp_path: Path) -> None:
    workers = sleeper_job.workers()
    assert len(workers) == WORLD
    run = analyze("live", *workers, *LIVE_ARGS, json_to=tmp_path / "r.json")
    assert_hung_on(run, SLEEP_RANK)
    assert "unchanged for" in run.proc.stdout, run.said


def test_live_names_a_rank_that_does_not_answer(stopped_rank_job: Job, tmp_path: Path) -> None:
    args = ("--snapshots", "2", "--interval", "2", "--timeout", "3")
    run = analyze("live", stopped_rank_job.frontend, *args, json_to=tmp_path / "r.json")
    assert run.proc.returncode == 1, run.said
    assert STOPPED_RANK in run.culprits, run.said
    assert re.search(rf"\brank {STOPPED_RANK}\b", run.proc.stdout), run.said
    assert "did not answer" in run.proc.stdout.lower(), run.said


def test_the_debug_server_periodic_dumps_are_refused_with_one_line(sleeper_job: Job) -> None:
    """The frontend's `dump_dir` holds text reports only (stacks_*.txt, and on gloo no
    fr_trace tables, which fail inside torch): `-d` on it is an error that says so. (Live on
    the same job's frontend, saved and read back with `-d`, is
    test_saved_snapshots_give_the_same_answer_offline.)"""
    assert sleeper_job.dump_dir is not None
    deadline = time.monotonic() + 30
    while len(list(sleeper_job.dump_dir.glob("stacks_*.txt"))) < 2:
        assert time.monotonic() < deadline, sorted(sleeper_job.dump_dir.iterdir())
        time.sleep(0.5)
    proc = fr("-d", str(sleeper_job.dump_dir))
    said = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.returncode == 2, said
    assert len(proc.stderr.strip().splitlines()) == 2, said
    assert "debug server" in proc.stderr, said
