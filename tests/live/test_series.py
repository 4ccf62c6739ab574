"""Snapshots compared, a running job asked, and Python stacks joined to the answer.

`tests/data/live/` holds what `fr-analyze live --save` fetched from real 4-rank gloo jobs
(torch 2.13, its debug server on every rank): `healthy_series` (two snapshots 2 s apart of a
job stepping every 0.2 s), `stuck_series` (three snapshots 2 s apart of a job whose rank 2
sleeps before an all_reduce ranks 0, 1 and 3 wait in) and `unanswered_series` (the same job
with rank 3 stopped by SIGSTOP: it did not answer). Each snapshot folder holds `rank_<N>.json`,
`stacks.txt` and `fetch.json`, which dates it by when each rank answered.

The fetching itself is tested against a fake fleet of workers served on 127.0.0.1 by the test
(`tests/live/test_real_job.py` runs real torch jobs).
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import pipeline
from fr_analyzer.diagnosis import series
from fr_analyzer.load.sources import live, manifest, pystacks, stamps
from fr_analyzer.load.sources.base import Directory
from fr_analyzer.model.records import Status

LIVE = Path(__file__).resolve().parents[1] / "data" / "live"


def snapshots(name: str) -> list[Path]:
    return sorted(p for p in (LIVE / name).iterdir() if p.is_dir())


def fr(*args: str) -> tuple[int, str, dict[str, Any]]:
    """`fr-analyze *args --json -`: exit code, text report (stderr), JSON report."""
    done = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", *args, "--json", "-"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr, json.loads(done.stdout)


# ---------------------------------------------------------------------------------------------
# Series of snapshots


def test_a_healthy_job_seen_twice_mid_step_is_ok() -> None:
    code, text, report = fr("-d", str(LIVE / "healthy_series"))
    assert code == 0, text
    assert report["verdict"]["status"] == "ok"
    assert report["series"]["snapshots"] == [str(p) for p in snapshots("healthy_series")]


def test_a_rank_that_never_joined_is_named_with_the_age_the_snapshots_measured() -> None:
    code, text, report = fr("-d", str(LIVE / "stuck_series"))
    assert code == 1, text
    verdict = report["verdict"]
    assert verdict["status"] == "hung" and verdict["culprit_ranks"] == [2]
    assert (verdict["op"], verdict["collective_seq_id"]) == ("all_reduce", 6)
    assert "ranks 0-1,3 unchanged for 4 s across 3 snapshots" in text
    timing = verdict["timing"]
    assert timing["measured_across_snapshots"] is True and timing["age"] == "old"
    assert timing["oldest_unfinished_age_s"] == pytest.approx(4.0, abs=0.1)
    assert report["series"]["dating"] == series.Dating.ANSWERED
    assert report["series"]["unchanged_ranks"] == "0-3"
    assert "snapshots: 3 compared, the newest analyzed" in text


def test_one_snapshot_alone_cannot_tell_and_says_in_flight() -> None:
    """What the comparison adds: gloo's recorder retires an op that times out, so one dump of
    ops below their timeout reads as in flight."""
    code, text, report = fr("-d", str(snapshots("stuck_series")[-1]))
    assert code == 0, text
    assert report["verdict"]["timing"]["measured_across_snapshots"] is False
    assert report["series"] is None


def test_blocked_ranks_that_all_moved_between_snapshots_were_in_flight(tmp_path: Path) -> None:
    """The older snapshot made to hold one entry fewer on every blocked rank: each of them
    recorded a new op between the two, so what they wait in was in flight."""
    first, _, last = snapshots("stuck_series")
    older, newer = tmp_path / first.name, tmp_path / last.name
    shutil.copytree(first, older)
    shutil.copytree(last, newer)
    for rank in (0, 1, 3):
        path = older / f"rank_{rank}.json"
        dump = json.loads(path.read_text())
        dump["entries"] = dump["entries"][:-1]
        path.write_text(json.dumps(dump))
    code, text, report = fr("-d", str(older), "-d", str(newer))
    assert code == 0, text
    timing = report["verdict"]["timing"]
    assert timing["measured_across_snapshots"] is True and timing["age"] == "young"
    assert "every one of them moved between the last two of 2 snapshots, 4 s apart" in text
    assert report["series"]["moved_ranks"] == "0-1,3"


def test_snapshot_folders_given_one_by_one_in_any_order_are_put_in_time_order() -> None:
    first, middle, last = snapshots("stuck_series")
    code, text, report = fr("-d", str(last), "-d", str(first), "-d", str(middle))
    assert code == 1, text
    assert report["series"]["snapshots"] == [str(first), str(middle), str(last)]
    assert report["verdict"]["culprit_ranks"] == [2]


def test_snapshots_copied_without_their_manifest_are_dated_by_their_names(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "series"
    shutil.copytree(LIVE / "stuck_series", copy)
    for kept in copy.glob(f"*/{manifest.MANIFEST}"):
        kept.unlink()
    got = pipeline.analyze(Directory(copy), pipeline.Options(file_times=False))
    assert got.series is not None and got.series.dating == series.Dating.NAME
    assert got.conclusion.status == Status.HUNG
    assert got.conclusion.root is not None and got.conclusion.root.ranks == (2,)


def test_a_rank_that_did_not_answer_the_debug_server_is_named() -> None:
    code, text, report = fr("-d", str(LIVE / "unanswered_series"))
    assert code == 1, text
    assert "rank 3): the debug server's worker did not answer within 2 s" in text
    unreadable = report["dumps"]["unreadable"]
    assert [u["rank"] for u in unreadable] == [3]
    assert 3 in report["verdict"]["culprit_ranks"]


def test_a_dump_folder_is_not_taken_for_a_folder_of_snapshots() -> None:
    samples = Path(__file__).resolve().parents[2] / "sample_dumps"
    assert all(series.snapshot_folders(d) is None for d in samples.iterdir() if d.is_dir())
    assert series.snapshot_folders(snapshots("stuck_series")[0]) is None
    assert series.snapshot_folders(LIVE / "stuck_series") == snapshots("stuck_series")


def test_times_in_folder_names() -> None:
    assert stamps.name_time_ns("20261126_080249_166199") is not None
    assert stamps.name_time_ns("fr_trace_20261123_031502.txt") is not None
    a = stamps.name_time_ns("snap-20261123-031502")
    b = stamps.name_time_ns("snap-20261123-031504")
    assert a is not None and b is not None and b - a == 2 * 10**9
    assert stamps.name_time_ns("rank_12") is None
    assert stamps.name_time_ns("20261399_999999") is None


# ---------------------------------------------------------------------------------------------
# Python stacks


def test_the_culprits_python_stack_is_shown_under_the_answer() -> None:
    _, text, report = fr("-d", str(LIVE / "stuck_series"), "-v")
    assert "Python stack of rank 2 at the snapshot" in text
    assert "/tmp/dbg/job.py:24 in <module>" in text  # where rank 2 slept
    frames = report["python_stacks"]["culprits"]["2"][0]["frames"]
    assert frames == ["/tmp/dbg/job.py:24 in <module>"]
    assert report["python_stacks"]["ranks_with_stacks"] == "0-3"


def test_stacks_in_faulthandlers_and_py_spys_layouts() -> None:
    text = (
        "=== Rank 0: http://h:1/handler/dump_traceback? ===\n"
        "Current thread 0x00007f (most recent call first):\n"
        "  <no Python frame>\n\n"
        "Thread 0x00007e (most recent call first):\n"
        '  File "/opt/torch/distributed/c10d.py", line 2500 in all_reduce\n'
        '  File "train.py", line 88 in step\n'
        "=== Rank 1: http://h:2/handler/pyspy_dump? ===\n"
        'Thread 4242 (idle): "MainThread"\n'
        "    wait (threading.py:320)\n"
        "    load_batch (data.py:41)\n"
        "=== Rank 2: http://h:3/handler/dump_traceback? ===\n"
        "Error: 503\n"
    )
    got = pystacks.parse(text)
    assert sorted(got) == [0, 1]
    (thread,) = got[0]
    assert thread.frames == (
        "/opt/torch/distributed/c10d.py:2500 in all_reduce",
        "train.py:88 in step",
    )
    assert got[1][0].name == 'Thread 4242 (idle): "MainThread"'
    assert got[1][0].frames == ("threading.py:320 in wait", "data.py:41 in load_batch")


def test_a_stacks_file_cannot_smuggle_control_characters(tmp_path: Path) -> None:
    (tmp_path / "stacks.txt").write_text(
        "=== Rank 0: x ===\nThread 1 (most recent call first):\n"
        '  File "a\x1b[31m.py", line 1 in f\n'
    )
    found = pystacks.find(tmp_path)
    assert found is not None
    assert "\x1b" not in found.by_rank[0][0].frames[0]


# ---------------------------------------------------------------------------------------------
# Asking a job: a fake fleet of workers on 127.0.0.1


class Fleet:
    """Workers that serve a saved snapshot's ranks, and a frontend listing them."""

    def __init__(self, snapshot: Path, silent: frozenset[int] = frozenset()) -> None:
        self.snapshot = snapshot
        self.silent = silent
        self.release = threading.Event()
        self.servers: list[ThreadingHTTPServer] = []
        ranks = sorted(int(p.stem.split("_")[1]) for p in snapshot.glob("rank_*.json"))
        for rank in ranks:
            self.servers.append(self._serve(self._worker(rank)))
        listing = "".join(
            f"    debug_server/rank{r}: b'http://127.0.0.1:{s.server_port}'\n"
            for r, s in zip(ranks, self.servers, strict=True)
        )
        page = f"<html><pre>\n{listing}    default_pg/0//cpu//0/0: b'\\x02'\n</pre></html>"
        self.frontend = self._serve(self._page(page.encode()))

    def _worker(self, rank: int) -> type[BaseHTTPRequestHandler]:
        fleet = self
        body = (self.snapshot / f"rank_{rank}.json").read_bytes()

        class Worker(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                names = ["dump_traceback", "fr_trace_json", "ping"]
                self._send(200, json.dumps(names).encode())

            def do_POST(self) -> None:
                if rank in fleet.silent:
                    fleet.release.wait(10)
                    return
                if self.path.startswith("/handler/fr_trace_json"):
                    self._send(200, body)
                elif self.path.startswith("/handler/dump_traceback"):
                    stack = f'Thread 0x1 (most recent call first):\n  File "t.py", line {rank}'
                    self._send(200, (stack + " in <module>\n").encode())
                else:
                    self._send(404, b"Handler not found")

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Worker

    def _page(self, page: bytes) -> type[BaseHTTPRequestHandler]:
        class Frontend(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                status = 200 if self.path == "/tcpstore" else 404
                self.send_response(status)
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

        return Frontend

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.frontend.server_port}"

    def close(self) -> None:
        self.release.set()
        for server in [*self.servers, self.frontend]:
            server.shutdown()
            server.server_close()


@pytest.fixture
def stuck_fleet() -> Iterator[Fleet]:
    fleet = Fleet(snapshots("stuck_series")[-1])
    yield fleet
    fleet.close()


def test_the_frontend_lists_the_workers_in_rank_order(stuck_fleet: Fleet) -> None:
    found = live.workers([stuck_fleet.url], timeout_s=5)
    assert [w.rank for w in found] == [0, 1, 2, 3]
    assert [w.url for w in found] == [
        f"http://127.0.0.1:{s.server_port}" for s in stuck_fleet.servers
    ]


def test_workers_given_by_hand_are_ranks_in_the_order_given(stuck_fleet: Fleet) -> None:
    urls = [f"127.0.0.1:{s.server_port}" for s in stuck_fleet.servers]
    assert [w.url for w in live.workers(urls, 5)] == ["http://" + u for u in urls]


def test_each_snapshot_is_a_folder_fr_analyze_reads_again(
    stuck_fleet: Fleet, tmp_path: Path
) -> None:
    fleet = live.workers([stuck_fleet.url], 5)
    taken = live.take(fleet, tmp_path, live.Settings(snapshots=2, interval_s=0.2, timeout_s=5))
    assert [len(s.unanswered) for s in taken] == [0, 0]
    folder = taken[-1].folder
    assert sorted(p.name for p in folder.iterdir()) == [
        "fetch.json",
        "rank_0",
        "rank_1",
        "rank_2",
        "rank_3",
        "stacks.txt",
    ]
    manifest = live.read_manifest(folder)
    assert manifest is not None and manifest.world_size == 4 and not manifest.errors
    assert manifest.handler == "fr_trace_json"
    original = snapshots("stuck_series")[-1] / "rank_2.json"  # as the worker served it
    assert pickle.loads((folder / "rank_2").read_bytes()) == json.loads(original.read_bytes())
    assert pystacks.parse((folder / "stacks.txt").read_text())[2][0].frames == (
        "t.py:2 in <module>",
    )


@pytest.mark.slow
def test_a_rank_that_does_not_answer_in_time_is_named_and_the_others_kept(
    tmp_path: Path,
) -> None:
    fleet = Fleet(snapshots("stuck_series")[-1], silent=frozenset({1}))
    try:
        workers = live.workers([fleet.url], 5)
        (snap,) = live.take(workers, tmp_path, live.Settings(snapshots=1, timeout_s=0.5))
    finally:
        fleet.close()
    assert [(a.rank, a.error) for a in snap.unanswered] == [(1, "did not answer within 0.5 s")]
    manifest = live.read_manifest(snap.folder)
    assert manifest is not None and manifest.errors == {1: "did not answer within 0.5 s"}


def test_a_worker_that_is_gone_is_named_with_why(stuck_fleet: Fleet, tmp_path: Path) -> None:
    workers = live.workers([stuck_fleet.url], 5)
    gone = stuck_fleet.servers[3]
    gone.shutdown()
    gone.server_close()
    (snap,) = live.take(workers, tmp_path, live.Settings(snapshots=1, timeout_s=2))
    ((rank, error),) = [(a.rank, a.error) for a in snap.unanswered]
    assert rank == 3 and error is not None and error.startswith("could not be reached")


def test_live_on_the_command_line_prints_the_answer_and_saves_the_snapshots(
    stuck_fleet: Fleet, tmp_path: Path
) -> None:
    saved = tmp_path / "saved"
    code, text, report = fr(
        "live", stuck_fleet.url, "--snapshots", "2", "--interval", "0.5", "--save", str(saved)
    )
    # every snapshot serves the same bytes: nothing moved, but 0.5 s is too short to call it
    # stuck against gloo's own "below its timeout" rule; the rank that never joined is still
    # the one the report is about
    assert text.count("ranks answered in") == 2, text
    assert report["series"] is not None and len(report["series"]["snapshots"]) == 2
    assert series.snapshot_folders(saved) is not None
    assert code in (0, 1)


def test_an_address_that_is_no_debug_server_is_one_line_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", "live", "http://127.0.0.1:9", "--timeout", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("fr-analyze: error: http://127.0.0.1:9: neither a debug")
    assert len(done.stderr.splitlines()) == 2
