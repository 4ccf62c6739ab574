"""Hostile input, round three (issue 44): the doors added since round two, tried as an attacker
with a dump folder, a trace or a server would.

Each case is built in tmp_path (a bundled sample set or trace, changed), and the CLI runs it in
a child process under a memory and a file-size cap (`test_costs.fr`), or the one
function at fault is called on it. The outcome is asserted: the exit code, the ranks kept, the
odd value named; times only loosely (a child's timeout), as budgets belong to benchmarks.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer.load.formats import traces
from fr_analyzer.load.sources import live, manifest, remote
from fr_analyzer.model.numbers import decimal, hex_size, name_order
from fr_analyzer.render.presentation import NAME_SHOWN, wrap
from tests.builders import make_dump, make_entry, write_dumps
from tests.hostile.test_costs import SMALL, copy_set, fr, report_of

HERE = Path(__file__).resolve().parents[1]
GLOO_ET = HERE / "data" / "gloo_et" / "rank-0.et.json"
OK, FINDINGS = 0, 1

# ---------------------------------------------------------------------------------------------
# Numbers parsed once, by one function, with bounds


@pytest.mark.parametrize("text", ["²", "1" * 5000, "٣", " 7", "+7", "-1", "1_000", "", "0x1"])
def test_text_that_isdigit_or_int_accepts_but_no_input_means_is_no_number(text: str) -> None:
    assert decimal(text) is None
    assert decimal(text.encode("utf-8")) is None
    assert name_order(text) == (1, 0, text)  # sorts as a name, never raises


def test_a_number_is_ascii_digits_within_its_bound() -> None:
    assert decimal("007") == 7 and decimal(b"42") == 42
    assert decimal("1048575", 1048575) == 1048575 and decimal("1048576", 1048575) is None
    assert hex_size(b"1a;ext=1\r\n", 1 << 30) == 26
    assert hex_size(b"1" * 5000, 1 << 30) is None and hex_size(b"\xb2", 1 << 30) is None
    assert hex_size(b"7fffffff", 1 << 30) is None  # past the body limit


@pytest.mark.parametrize("group", ["²", "1" * 5000])
def test_a_dump_group_named_by_digits_int_refuses_costs_nothing(tmp_path: Path, group: str) -> None:
    """Before: exit 3 (`int()` of `"²"`, or of 5,000 digits, in the groups' sort key)."""
    dumps = {
        r: make_dump(
            [make_entry(seq=i, group=(group, "odd"), record_id=i) for i in range(1, 4)],
            groups={group: ("odd", [0, 1])},
        )
        for r in (0, 1)
    }
    write_dumps(tmp_path / "d", dumps)
    run = fr("-d", str(tmp_path / "d"), "--json", str(tmp_path / "r.json"))
    assert run.code == OK, run.err
    assert report_of(run, tmp_path / "r.json")["dumps"]["ranks_loaded"] == [0, 1]
    for extra in (("-v",), ("-j",), ("--html", str(tmp_path / "r.html"))):
        assert fr("-d", str(tmp_path / "d"), *extra).code == OK


def _gloo_trace(change: Any) -> dict[str, Any]:
    trace: dict[str, Any] = json.loads(GLOO_ET.read_text())
    for node in trace["nodes"]:
        if node["name"] == traces.INIT_NODE:
            groups = json.loads(node["inputs"]["values"][0])
            change(groups)
            node["inputs"]["values"][0] = json.dumps(groups)
    return trace


def test_a_trace_group_named_by_odd_digits_is_read(tmp_path: Path) -> None:
    """Before: exit 3 (`int(group.name) if group.name.isdigit()` for the entry's pg_id)."""

    def rename(groups: list[dict[str, Any]]) -> None:
        groups[1]["pg_name"] = "²"
        groups[0]["pg_name"] = "1" * 5000

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank-0.et.json").write_text(json.dumps(_gloo_trace(rename)))
    run = fr("-d", str(tmp_path / "t"), "--json", str(tmp_path / "r.json"))
    assert run.code in (OK, FINDINGS), run.err
    assert report_of(run, tmp_path / "r.json")["dumps"]["ranks_loaded"] == [0]


def test_a_tcpstore_page_rank_of_5000_digits_costs_its_line() -> None:
    page = (
        "debug_server/rank0: b'http://h0:1'\n"
        f"debug_server/rank{'9' * 5000}: b'http://h1:1'\n"
        "debug_server/rank²: b'http://h2:1'\n"
        "debug_server/rank1: b'http://h3:1'\n"
    )
    found = live._tcpstore_workers(page)
    assert [(w.rank, w.url) for w in found] == [(0, "http://h0:1"), (1, "http://h3:1")]


class _OneAnswer:
    """A server on 127.0.0.1 that answers every connection with the same raw bytes."""

    def __init__(self, answer: bytes) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.answer = answer
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(self.answer)
                time.sleep(0.2)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def answering() -> Iterator[list[_OneAnswer]]:
    servers: list[_OneAnswer] = []
    yield servers
    for server in servers:
        server.close()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: \xc2\xb2\r\n\r\nx", "malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"1" * 5000 + b"\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 5000 + b"\r\n", "chunk"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\xc2\xb2\r\nx\r\n", "chunk"),
        (b"HTTP/1.1 \xc2\xb2 OK\r\n\r\n", "not HTTP"),
    ],
)
def test_a_live_servers_odd_framing_costs_its_request(
    answering: list[_OneAnswer], answer: bytes, why: str
) -> None:
    """Before: exit 3 (`int()` of a chunk size or Content-Length `isdigit()` let through)."""
    server = _OneAnswer(answer)
    answering.append(server)
    status, body = asyncio.run(live._one(server.base, "POST", "/handler/fr_trace_json", 5.0))
    assert status == -1
    assert why.split()[-1] in body.decode(), body


class _Got:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers = status, headers

    def header(self, name: str) -> str:
        return self.headers.get(name, "")


@pytest.mark.parametrize("total", ["²", "1" * 5000, "٣"])
def test_a_url_sources_odd_content_range_total_costs_its_file(total: str) -> None:
    """Before: exit 3 (`int()` of a `Content-Range` total that `isdigit()` let through)."""
    with pytest.raises(remote.UrlError, match="gives no size"):
        remote._total_size(_Got(206, {"Content-Range": f"bytes 0-9/{total}"}))  # type: ignore[arg-type]
    assert remote._total_size(_Got(206, {"Content-Range": "bytes 0-9/1234"})) == 1234  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Costs bounded by what the input holds


def test_a_trace_claiming_a_group_of_100_million_ranks_is_named_not_believed(
    tmp_path: Path,
) -> None:
    """Before: 3.9 GB in the parent, then 'needs more memory than available' (exit 2)."""

    def claim(groups: list[dict[str, Any]]) -> None:
        groups[0]["group_size"] = 100_000_000

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank-0.et.json").write_text(json.dumps(_gloo_trace(claim)))
    started = time.monotonic()
    run = fr("-d", str(tmp_path / "t"), "-v", "--json", str(tmp_path / "r.json"), timeout=60)
    report = report_of(run, tmp_path / "r.json")
    assert report["dumps"]["ranks_loaded"] == [0]
    assert "'0' of 100,000,000 ranks by size alone" in run.out
    assert max(len(g["ranks"]) for g in report["groups"]) <= 2
    assert time.monotonic() - started < 60


def test_a_cut_trace_is_read_in_time_linear_in_its_nodes() -> None:
    """Before: each node re-sliced the rest of the text (40,000 nodes: 77.5 s)."""
    node = {"id": 0, "name": "aten::add", "ctrl_deps": 1, "inputs": {}, "outputs": {}}
    body = ", ".join(json.dumps({**node, "id": i + 2}) for i in range(40_000))
    text = '{"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [' + body
    started = time.monotonic()
    trace, count = traces.read_truncated(text[:-10])
    assert count == 39_999 and len(trace["nodes"]) == count
    assert time.monotonic() - started < 20


def test_a_16_mib_name_is_wrapped_in_linear_time_and_cut_where_printed() -> None:
    """Before: 263 s to wrap one 16 MiB op name (a 64 MB one: killed)."""
    started = time.monotonic()
    lines = wrap("op " + "x" * (16 << 20) + " of group '0'", 80)
    assert time.monotonic() - started < 10
    assert sum(map(len, lines)) < NAME_SHOWN + 200
    assert "16,777,216-character name cut" in "".join(lines)


def test_a_long_op_name_leaves_every_text_output_small(tmp_path: Path) -> None:
    name = "x" * (4 << 20)
    dumps = {
        r: make_dump(
            [make_entry(seq=1, record_id=0), make_entry(op=name if r else "all_reduce", seq=2)]
        )
        for r in (0, 1)
    }
    write_dumps(tmp_path / "d", dumps)
    for extra in ((), ("-v",), ("-j",)):
        run = fr("-d", str(tmp_path / "d"), *extra, timeout=60)
        assert run.code == FINDINGS, run.err  # rank 1 issued another op
        assert len(run.out) < 64 * 1024, (extra, len(run.out))


def _manifest(folder: Path, ranks: dict[str, Any], world: int) -> None:
    (folder / manifest.MANIFEST).write_text(
        json.dumps({"schema": manifest.MANIFEST_SCHEMA, "world_size": world, "ranks": ranks})
    )


@pytest.mark.parametrize(
    ("ranks", "world"),
    [
        ({"9999999": {"error": "did not answer"}}, 2),
        ({"1048575": {"error": "did not answer"}}, 1 << 20),
        ({"²": {"error": "x"}, "3": {"error": "did not answer"}}, 2),
    ],
)
def test_a_fetch_json_is_read_as_untrusted_input(
    tmp_path: Path, ranks: dict[str, Any], world: int
) -> None:
    """Before: a rank key of "9999999" grew past 5.7 GB."""
    folder = copy_set(tmp_path, "d")
    _manifest(folder, ranks, world)
    assert live.read_manifest(folder) is None
    run = fr("-d", str(folder), "--json", str(tmp_path / "r.json"), timeout=60)
    assert run.code == OK, run.out
    report = report_of(run, tmp_path / "r.json")
    assert report["dumps"]["ranks_loaded"] == [0, 1, 2, 3]


def test_a_fetch_json_as_live_writes_it_is_believed(tmp_path: Path) -> None:
    folder = copy_set(tmp_path, "d")
    ranks = {str(r): {"url": f"http://h:{r}", "time_ns": 5, "error": None} for r in range(4)}
    _manifest(folder, ranks, 4)
    found = live.read_manifest(folder)
    assert found is not None and found.world_size == 4 and found.times == dict.fromkeys(range(4), 5)


# ---------------------------------------------------------------------------------------------
# A stray rank number bounded by what the files show


@pytest.mark.parametrize("stray", ["junk", "copy"])
def test_a_stray_rank_1048575_in_a_gloo_folder_is_named_not_the_jobs_size(
    tmp_path: Path, stray: str
) -> None:
    """Before: a 2**20-rank job, and the stuck-rank rule never ended."""
    folder = copy_set(tmp_path, "d")
    if stray == "junk":
        (folder / "rank_1048575").write_text("not a dump\n")
    else:
        shutil.copy(folder / "rank_1.pkl", folder / "rank_1048575.pkl")
    run = fr("-d", str(folder), "--json", str(tmp_path / "r.json"), timeout=60)
    report = report_of(run, tmp_path / "r.json")
    assert report["dumps"]["ranks_loaded"] == [0, 1, 2, 3]
    assert report["dumps"]["ranks_missing"] == []
    (unreadable,) = report["dumps"]["unreadable"]
    assert unreadable["rank"] == 1048575
    assert max(len(g["ranks"]) for g in report["groups"]) == 4
    if stray == "copy":
        assert "far past the other files' ranks (up to 3" in unreadable["reason"]


def test_the_stuck_rank_rule_is_linear_in_the_ranks_without_a_dump(tmp_path: Path) -> None:
    """Four dumps whose pg_config lists a world of 50,000 ranks, hung in it: 49,996 ranks
    with no dump are the culprits (before: every one looked up in a list of the others)."""
    world = list(range(50_000))
    dumps = {
        r: make_dump(
            [make_entry(seq=1), make_entry(seq=2, state="started", retired=False)],
            groups={"0": ("default_pg", world)},
        )
        for r in range(4)
    }
    write_dumps(tmp_path / "d", dumps)
    run = fr("-d", str(tmp_path / "d"), "--json", str(tmp_path / "r.json"), timeout=120)
    assert run.code == FINDINGS
    report = report_of(run, tmp_path / "r.json")
    assert report["root_cause"]["ranks"][:2] == [4, 5]
    assert len(report["root_cause"]["ranks"]) == 49_996


# ---------------------------------------------------------------------------------------------
# An unreadable file is never a culprit by itself


@pytest.mark.parametrize(
    ("sample", "name", "culprit"),
    [
        ("gloo3d_skip_collective", "rank_16", 6),
        ("gloo3d_unretired_barrier", "rank_16", None),
        ("nccl_all_stuck", "nccl_trace_rank_4", 0),
    ],
)
def test_a_junk_file_beside_a_job_is_listed_never_a_culprit(
    tmp_path: Path, sample: str, name: str, culprit: int | None
) -> None:
    """Before: `sub/rank_16` beside a 16-rank gloo job made rank 16 'look dead'."""
    folder = copy_set(tmp_path, "d", sample)
    (folder / "sub").mkdir()
    (folder / "sub" / name).write_text("not a dump at all\n")
    run = fr("-d", str(folder), "--json", str(tmp_path / "r.json"), timeout=120)
    report = report_of(run, tmp_path / "r.json")
    junk = int(name.rsplit("_", 1)[1])
    ranks = (report.get("root_cause") or {}).get("ranks") or []
    assert junk not in ranks
    if culprit is not None:
        assert culprit in ranks
    (unreadable,) = report["dumps"]["unreadable"]
    assert unreadable["rank"] == junk and "text" in unreadable["reason"]
    assert all(junk not in g["ranks"] for g in report["groups"])


def test_pickled_outputs_of_the_round_stay_small(tmp_path: Path) -> None:
    """The stray-file case written as every database: no table grows with the stray rank."""
    folder = copy_set(tmp_path, "d")
    (folder / "rank_1048575").write_text("junk\n")
    run = fr("-d", str(folder), "-o", str(tmp_path / "db.pkl"), timeout=60)
    assert run.code in (OK, FINDINGS)
    assert (tmp_path / "db.pkl").stat().st_size < SMALL
    assert pickle.loads((tmp_path / "db.pkl").read_bytes())


def test_a_fetch_json_claiming_a_world_past_what_the_files_show_is_not_read(
    tmp_path: Path,
) -> None:
    folder = copy_set(tmp_path, "d")
    ranks = {str(r): {"time_ns": 5, "error": "did not answer"} for r in range(4, 64)}
    ranks.update({str(r): {"time_ns": 5, "error": None} for r in range(4)})
    _manifest(folder, ranks, 64)
    assert live.read_manifest(folder) is not None  # as live writes it, but 64 ranks: 4 files
    run = fr("-d", str(folder), "--json", str(tmp_path / "r.json"), timeout=60)
    assert run.code == OK, run.out
    report = report_of(run, tmp_path / "r.json")
    assert report["dumps"]["ranks_loaded"] == [0, 1, 2, 3] and report["dumps"]["unreadable"] == []
    assert "fetch.json claims a job of 64 ranks" in run.out


# ---------------------------------------------------------------------------------------------
# live: the hosts asked, the ranks asked


def _frontend(answering: list[_OneAnswer], lines: str) -> str:
    page = f"<html><pre>\n{lines}</pre></html>".encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(page)}\r\n\r\n".encode()
    server = _OneAnswer(head + page)
    answering.append(server)
    return server.base


def test_live_asks_no_host_a_frontends_page_names_unless_allowed(
    answering: list[_OneAnswer],
) -> None:
    """Before: POSTs to any host:port the rank list named."""
    base = _frontend(
        answering,
        "debug_server/rank0: b'http://127.0.0.1:9'\ndebug_server/rank1: b'http://192.0.2.7:8080'\n",
    )
    with pytest.raises(live.FetchError, match=r"rank 1's worker at '192\.0\.2\.7'") as refused:
        live.workers([base], 5)
    assert "--allow-host 192.0.2.7" in str(refused.value) and "\n" not in str(refused.value)
    for allowed in ({"192.0.2.7"}, {live.ANY_HOST}):
        found = live.workers([base], 5, frozenset(allowed))
        assert [w.url for w in found] == ["http://127.0.0.1:9", "http://192.0.2.7:8080"]


def test_live_asks_workers_on_the_frontends_own_host(answering: list[_OneAnswer]) -> None:
    base = _frontend(
        answering,
        "debug_server/rank0: b'http://127.0.0.1:9'\ndebug_server/rank1: b'http://localhost:9'\n",
    )
    assert [w.rank for w in live.workers([base], 5)] == [0, 1]


def test_live_asks_only_the_ranks_of_the_job_rank_0_tells(tmp_path: Path) -> None:
    """Before: a frontend listing 20,000 ranks behind a 4-rank job had each one asked."""
    from tests.live.test_series import Fleet

    job = {
        r: make_dump([make_entry(seq=1)], groups={"0": ("default_pg", [0, 1, 2, 3])})
        for r in range(4)
    }
    write_dumps(tmp_path, job, fmt="json", prefix="rank_")
    fleet = Fleet(tmp_path)
    try:
        first = f"http://127.0.0.1:{fleet.servers[0].server_port}"
        listed = [live.Worker(0, first)] + [
            live.Worker(r, "http://127.0.0.1:9") for r in range(1, 20_000)
        ]
        kept, note = live.within_job(listed, 5)
    finally:
        fleet.close()
    assert [w.rank for w in kept] == [0, 1, 2, 3]
    assert note is not None and "lists 20,000 ranks" in note and "a job of 4" in note


def test_live_bodies_past_the_memory_budget_go_to_disk_and_read_the_same(tmp_path: Path) -> None:
    """Before: every body held in memory until the snapshot was saved (1 GiB a handler a
    rank, 128 ranks at once)."""
    from fr_analyzer import pipeline
    from fr_analyzer.load.sources.base import Directory
    from tests.live.test_series import Fleet

    entries = [make_entry(seq=i, record_id=i - 1) for i in range(1, 3001)]
    job = {r: make_dump(entries, groups={"0": ("default_pg", [0, 1, 2])}) for r in range(3)}
    write_dumps(tmp_path / "job", job, fmt="json", prefix="rank_")
    fleet = Fleet(tmp_path / "job")
    try:
        found = live.workers([fleet.url], 5)
        settings = live.Settings(snapshots=1, timeout_s=20, memory_budget=1 << 20)
        (snap,) = live.take(found, tmp_path / "out", settings)
    finally:
        fleet.close()
    assert all(a.size > 1 << 20 and a.entries == 3000 for a in snap.answers)
    kept = sorted(p.name for p in snap.folder.iterdir())
    assert {"rank_0.json", "rank_1.json", "rank_2.json"} <= set(kept)  # as served, from disk
    assert [p.name for p in (tmp_path / "out").iterdir()] == [snap.folder.name]  # no leftovers
    got = pipeline.analyze(Directory(snap.folder))
    assert got.summary.ranks_loaded == (0, 1, 2) and got.conclusion.status.value == "ok"


# ---------------------------------------------------------------------------------------------
# Execution Traces parsed in the sandbox


def test_a_gloo_trace_is_parsed_in_a_worker_never_in_the_parent(tmp_path: Path) -> None:
    """Before: every local gloo trace was parsed in the parent to settle its ops' groups
    (a 42 MB trace: 429 MB in the parent; 60 MB of nodes: 1.55 GB)."""
    trace: dict[str, Any] = json.loads(GLOO_ET.read_text())
    top = max(n["id"] for n in trace["nodes"])
    filler = {"name": "aten::mul", "ctrl_deps": 1, "inputs": {"values": [[1, 2, 3, 4], "cpu"]}}
    trace["nodes"] += [{**filler, "id": top + 1 + i} for i in range(200_000)]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank-0.et.json").write_text(json.dumps(trace))
    assert (tmp_path / "t" / "rank-0.et.json").stat().st_size > 16 << 20
    # the child's own peak (VmHWM: ru_maxrss would keep what the forked pytest process held)
    code = (
        "import re, sys; from pathlib import Path; from fr_analyzer import pipeline;"
        " from fr_analyzer.load.sources.base import Directory;"
        " got = pipeline.analyze(Directory(Path(sys.argv[1])));"
        " peak = re.search(r'VmHWM:\\s*(\\d+)', Path('/proc/self/status').read_text())[1];"
        " print(got.summary.ranks_loaded, peak)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "t")],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    loaded, peak_kib = done.stdout.rsplit(" ", 1)
    assert loaded == "(0,)"
    assert int(peak_kib) < 160 << 10, done.stdout  # before: 223 MB; now about 50


def test_damaged_files_between_two_readable_ranks_leave_no_gap(tmp_path: Path) -> None:
    """Ranks 1 and 2 emptied (found by hypothesis in test_byte_damage): their files still
    fill their places, so rank 3 is no stray past a gap and stays in the job."""
    dumps = copy_set(tmp_path, "damaged")
    for rank in (1, 2):
        (dumps / f"rank_{rank}.pkl").write_bytes(b"")
    out = tmp_path / "r.json"
    run = fr("-d", str(dumps), "--json", str(out))
    report = report_of(run, out)
    assert run.code == 1
    assert report["dumps"]["ranks_loaded"] == [0, 3]
    assert sorted(u["rank"] for u in report["dumps"]["unreadable"]) == [1, 2]
