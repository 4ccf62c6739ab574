"""A fake fleet for `fr-analyze live`: one server process (asyncio, standard library only) that
impersonates the debug servers of an N-rank job on loopback.

Rank r has its own worker address, `http://127.A.B.C:PORT` (`rank_host`: every 127.x.y.z reaches
the `lo` interface on Linux), all on one port: the server listens on 0.0.0.0 and tells the ranks
apart by the local address each connection was accepted on (`sockname`), else by the Host
header. Connections to an address outside 127.0.0.0/8 are closed at once. 127.0.0.1 is the
frontend, which serves what PyTorch's debug server frontend does on rank 0:

- `GET /tcpstore`: the TCPStore page, one `debug_server/rank<N>: b'http://127.a.b.c:PORT'` line
  per rank inside `<pre>`, keys sorted as torch sorts them;

and every worker (rank address) answers as torch's worker server does:

- `GET /handler/`: the JSON list of handler names;
- `POST /handler/fr_trace_json`: the rank's Flight Recorder in `_dump_fr_trace_json`'s layout
  (sorted keys, compact, version "2.10"): a job of `--steps` steps, each a tensor-parallel
  all_gather (groups of 8 consecutive ranks) and a world all_reduce, 2 entries a step, the
  world group's members spelled out in `pg_config` as torch does (`--no-world-list`: "[]");
  with `--fault behind` (default) every rank has waited `--hang-s` seconds (900, past the
  600 s timeout) in the last world all_reduce (state `started`, its discovery time the moment
  of the request, as torch's recorder stamps an unretired op when it dumps) except rank
  `W/2 + 5` (`behind_rank`), which never issued it; `--fault none`: every op completed;
- `POST /handler/dump_traceback`: a few lines of Python stacks in faulthandler's layout;
- `POST /handler/ping`: `pong`; the other listed handlers answer 501.

Every body is built once at start-up (per rank: the part before the world's member list, the
list itself shared by every rank, the part after it; the time of the request goes in as the one
19-digit number that changes), so a request costs a look-up and a join. HTTP/1.1 keep-alive
with Content-Length; `Connection: close` is honoured. `--procs N` forks N-1 more serving
processes after start-up, each with its own SO_REUSEPORT socket on the same port (the kernel
spreads connections over them); children leave when the parent does.

Command line: `python -m benchmarks.fleet --ranks 16384 [--port 0] [--procs 1]`; it prints
`fleet ready: http://127.0.0.1:PORT ranks=N behind=R pid=P` on stdout once it answers, and on
SIGTERM or SIGINT a line of request counts and CPU time on stderr. From Python: `start()` (a
subprocess, returned once it answers) and `RunningFleet.stop()` (by pid), or `running()`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

HANDLERS = (
    "torch_profile",
    "dump_traceback",
    "pyspy_dump",
    "wait_counter_values",
    "fr_trace_json",
    "ping",
)
FAULTS = ("behind", "none")
TP = 8
"""Ranks per tensor-parallel group (one host): consecutive ranks."""
FRONTEND_HOST = "127.0.0.1"
_HOSTS_PER_C = 250  # last byte 1..250, so no address ends in .0 or .255
READY = "fleet ready: "
MAX_HEAD = 64 << 10
VERSION = "2.10"
NCCL_VERSION = "2.27.5"
STEP_NS = 250_000_000
"""Time between two entries of a rank: a step (two entries) takes half a second."""
TIMEOUT_MS = 600_000
_NOW = b"1111111111111111111"  # stands for the request's time_ns (19 digits, as that is)
ALL_REDUCE_NUMEL = 1 << 20
GATHER_NUMEL = 4096


def rank_host(rank: int) -> str:
    """The loopback address that stands for rank `rank`: 127.1.0.1, 127.1.0.2, ..."""
    c = 1 + rank % _HOSTS_PER_C
    b = (rank // _HOSTS_PER_C) % 256
    a = 1 + rank // (_HOSTS_PER_C * 256)
    if a > 254:
        raise ValueError(f"rank {rank}: too many ranks for 127.0.0.0/8")
    return f"127.{a}.{b}.{c}"


def behind_rank(ranks: int, fault: str) -> int | None:
    """The rank that never issued the last world all_reduce (`--fault behind`), or None."""
    if fault == "none" or ranks < 2:
        return None
    return min(ranks - 1, ranks // 2 + 5)


def tp_size(ranks: int) -> int:
    """The tensor-parallel group size: 8 when the world splits into groups of 8, else none."""
    return TP if ranks >= 2 * TP and ranks % TP == 0 else 0


# ---------------------------------------------------------------------------------------------
# Bodies


@dataclass(frozen=True)
class Spec:
    """The fake job: ranks, steps, fault, world list in pg_config, port, how long ago it hung."""

    ranks: int
    steps: int = 20
    fault: str = "behind"
    world_list: bool = True
    port: int = 0
    hang_s: float = 900.0


# One entry of `_dump_fr_trace_json`, keys sorted as json.dumps(sort_keys=True) writes them.
# Completed entries carry duration_ms (timing enabled); the last world all_reduce of a waiting
# rank is `started`, not retired, with no completion time.
_ENTRY = (
    '{"collective_seq_id":%d,%s"input_dtypes":["Float"],"input_sizes":[[%d]],"is_p2p":false,'
    '"op_id":%d,"output_dtypes":["Float"],"output_sizes":[[%d]],"p2p_seq_id":0,"pg_id":%d,'
    '"process_group":["%s","%s"],"profiling_name":"nccl:%s","record_id":%d,"retired":%s,'
    '"state":"%s","thread_id":"%d","thread_name":"pt_main_thread","time_created_ns":%d,'
    '"time_discovered_completed_ns":%d,"time_discovered_started_ns":%s,"timeout_ms":%d}'
)

_STACKS = """Thread 0x{loader:016x} (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/usr/lib/python3.11/queue.py", line 180 in get
  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py", \
line 55 in do_one_step
  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/pin_memory.py", \
line 81 in _pin_memory_loop
  File "/usr/lib/python3.11/threading.py", line 982 in run
  File "/usr/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Thread 0x{main:016x} (most recent call first):
{main_frames}  File "/workspace/train.py", line 262 in main
  File "/workspace/train.py", line 271 in <module>
"""
_WAITING = """\
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", \
line 2806 in all_reduce
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", \
line 81 in wrapper
  File "/workspace/train.py", line 214 in train_step
  File "/workspace/train.py", line 248 in train
"""
_BEHIND = """\
  File "/workspace/data.py", line 97 in load_shard
  File "/workspace/data.py", line 141 in next_batch
  File "/workspace/train.py", line 203 in train_step
  File "/workspace/train.py", line 248 in train
"""


def _ranks_text(ranks: range) -> str:
    return "[" + ", ".join(map(str, ranks)) + "]"


def _http(status: str, body_len: int, content_type: str) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {body_len}\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
    ).encode()


def _response(status: str, body: bytes, content_type: str = "text/plain") -> bytes:
    return _http(status, len(body), content_type) + body


class Bodies:
    """Every response the fleet gives, built once: per rank, the Flight Recorder in three parts
    (head and entries, the world's member list shared by all, the tail) and the stacks."""

    def __init__(self, spec: Spec, base_ns: int) -> None:
        self.spec = spec
        n = spec.ranks
        self.behind = behind_rank(n, spec.fault)
        self.tp = tp_size(n)
        self.world = (_ranks_text(range(n)) if spec.world_list else "[]").encode()
        self.rank_of = {rank_host(r): r for r in range(n)}
        self.fr: list[tuple[bytes, bytes, bytes]] = []  # before and after the time, tail
        self.stacks: list[bytes] = []
        durations = [round(0.35 + (k % 7) * 0.113, 3) for k in range(2 * spec.steps)]
        for rank in range(n):
            head, tail = self._fr_parts(rank, base_ns, durations)
            header = _http("200 OK", len(head) + len(self.world) + len(tail), "application/json")
            before, _, after = (header + head).partition(_NOW)
            self.fr.append((before, after, tail) if after else (before, b"", tail))
            self.stacks.append(_response("200 OK", self._stacks(rank)))
        self.handler_list = _response(
            "200 OK", json.dumps(list(HANDLERS)).encode(), "application/json"
        )
        self.pong = _response("200 OK", b"pong")
        self.not_found = _response("404 Not Found", b"not found")
        self.not_faked = _response("501 Not Implemented", b"not faked by benchmarks.fleet")
        self.port = spec.port
        self.tcpstore = b""

    def set_port(self, port: int) -> None:
        """Set the port the fleet listens on, and the TCPStore page of the rank addresses on it."""
        self.port = port
        self.tcpstore = _response("200 OK", self._tcpstore_page(port), "text/html; charset=utf-8")

    def fr_body(self, rank: int) -> bytes:
        """The whole answer: an unretired op's discovery time is now, as in a real dump."""
        before, after, tail = self.fr[rank]
        if after:
            return b"".join((before, b"%d" % time.time_ns(), after, self.world, tail))
        return b"".join((before, self.world, tail))

    def _fr_parts(self, rank: int, base_ns: int, durations: list[float]) -> tuple[bytes, bytes]:
        steps = self.spec.steps
        waiting = self.behind is not None
        tp = self.tp
        tp_name = str(1 + rank // tp) if tp else ""
        thread = 139_900_000_000_000 + rank * 4096
        clock = (rank // TP) * 7_919 + (rank % TP) * 13  # each host its own small clock offset
        entries: list[str] = []
        record = 0
        for step in range(1, steps + 1):
            ops: list[tuple[int, str, str, str, int, int]] = []
            if tp:
                ops.append((1, tp_name, "tp", "_all_gather_base", GATHER_NUMEL, GATHER_NUMEL * tp))
            ops.append((0, "0", "default_pg", "all_reduce", ALL_REDUCE_NUMEL, ALL_REDUCE_NUMEL))
            for pg_id, name, desc, op, numel_in, numel_out in ops:
                last = step == steps and pg_id == 0
                if last and waiting and rank == self.behind:
                    continue  # never issued: still loading its batch
                created = base_ns + record * STEP_NS + clock
                started: int | bytes = created + 40_000
                if last and waiting:
                    state, retired, duration, completed = "started", "false", "", 0
                    started = _NOW
                else:
                    ms = durations[record]
                    state, retired = "completed", "true"
                    duration = f'"duration_ms":{ms!r},'
                    completed = created + 40_000 + int(ms * 1e6)
                entries.append(
                    _ENTRY
                    % (
                        step,
                        duration,
                        numel_in,
                        step,
                        numel_out,
                        pg_id,
                        name,
                        desc,
                        op,
                        record,
                        retired,
                        state,
                        thread,
                        created,
                        completed,
                        started.decode() if isinstance(started, bytes) else str(started),
                        TIMEOUT_MS,
                    )
                )
                record += 1
        world_enq = steps - 1 if rank == self.behind else steps
        world_done = steps - 1 if waiting else steps
        status = {
            "0": {
                "last_completed_collective": str(world_done),
                "last_enqueued_collective": str(world_enq),
                "last_started_collective": str(world_enq),
            }
        }
        if tp:
            status["1"] = dict.fromkeys(
                (
                    "last_completed_collective",
                    "last_enqueued_collective",
                    "last_started_collective",
                ),
                str(steps),
            )
        head = (
            f'{{"comm_lib_version":"{NCCL_VERSION}","entries":[{",".join(entries)}],'
            '"nccl_comm_state":{},"pg_config":{"0":{"desc":"default_pg","name":"0","ranks":"'
        )
        tail = '"}'
        if tp:
            first = rank - rank % tp
            members = _ranks_text(range(first, first + tp))
            tail += f',"{tp_name}":{{"desc":"tp","name":"{tp_name}","ranks":"{members}"}}'
        tail += (
            "},"
            + '"pg_status":'
            + json.dumps(status, sort_keys=True, separators=(",", ":"))
            + f',"version":"{VERSION}"}}'
        )
        return head.encode(), tail.encode()

    def _stacks(self, rank: int) -> bytes:
        frames = _BEHIND if rank == self.behind else _WAITING
        text = _STACKS.format(
            loader=0x7F00_0000_0000 + rank * 0x1000 + 0x700,
            main=0x7F10_0000_0000 + rank * 0x1000,
            main_frames=frames,
        )
        return text.encode()

    def _tcpstore_page(self, port: int) -> bytes:
        """As torch's frontend renders it (`TCPSTORE_TEMPLATE`: keys sorted as strings, values
        as `repr(bytes)`, no escaping)."""
        keys = sorted(f"debug_server/rank{r}" for r in range(self.spec.ranks))
        lines = [f"{key}: b'http://{rank_host(int(key[17:]))}:{port}'\n    " for key in keys]
        page = (
            "\n<!doctype html>\n<head>\n    <title>TCPStore Keys - PyTorch Distributed</title>\n"
            '</head>\n<body>\n<nav><a href="/">Home</a> <a href="/tcpstore">TCPStore</a></nav>'
            "\n<h1>TCPStore Keys</h1>\n    <pre>\n    " + "".join(lines) + "\n    </pre>\n</body>\n"
        )
        return page.encode()

    def check(self) -> None:
        """The bodies are torch's layout: valid JSON, sorted keys, compact."""
        for rank in {0, self.spec.ranks - 1, self.behind if self.behind is not None else 0}:
            body = self.fr_body(rank)
            head, _, payload = body.partition(b"\r\n\r\n")
            data = json.loads(payload)
            again = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
            if payload != again or f"Content-Length: {len(payload)}\r\n".encode() not in head:
                raise AssertionError(f"rank {rank}: body is not in sorted compact JSON")


# ---------------------------------------------------------------------------------------------
# Serving


class Stats:
    """Requests served per handler, connections accepted and bytes sent."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.connections = 0
        self.bytes_out = 0


class _Connection(asyncio.Protocol):
    """One accepted connection: requests parsed from the buffer, answers written whole."""

    def __init__(self, bodies: Bodies, stats: Stats) -> None:
        self.bodies = bodies
        self.stats = stats
        self.transport: asyncio.Transport | None = None
        self.rank: int | None = None
        self.frontend = False
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.stats.connections += 1
        sockname = transport.get_extra_info("sockname")
        host = sockname[0] if sockname else ""
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            transport.close()  # listening on 0.0.0.0 is for 127.0.0.0/8 only
            return
        self.rank = self.bodies.rank_of.get(host)
        self.frontend = host == FRONTEND_HOST

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD:
                    transport.close()
                return
            head = self.buf[:end]
            lines = head.split(b"\r\n")
            request = lines[0].split()
            length = 0
            close = len(request) == 3 and request[2] == b"HTTP/1.0"
            host: bytes | None = None
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length" and value.strip().isdigit():
                    length = int(value)
                elif name == b"connection":
                    close = value.strip().lower() == b"close"
                elif name == b"host":
                    host = value.strip()
            if len(self.buf) < end + 4 + length:
                return  # the request's body is still coming
            self.buf = self.buf[end + 4 + length :]
            if len(request) < 2:
                transport.close()
                return
            answer = self._answer(request[0], request[1], host)
            self.stats.bytes_out += len(answer)
            transport.write(answer)
            if close:
                transport.close()
                return

    def _answer(self, method: bytes, target: bytes, host: bytes | None) -> bytes:
        bodies = self.bodies
        path = target.split(b"?", 1)[0]
        rank = self.rank
        if rank is None and not self.frontend and host is not None:
            rank = bodies.rank_of.get(host.rsplit(b":", 1)[0].decode("latin-1"))
        name = path.decode("latin-1")
        self.stats.requests[name] += 1
        if rank is None:
            if path == b"/tcpstore" and method == b"GET":
                return bodies.tcpstore
            return bodies.not_found
        if path == b"/handler/fr_trace_json":
            return bodies.fr_body(rank)
        if path == b"/handler/dump_traceback":
            return bodies.stacks[rank]
        if path in (b"/handler/", b"/handler"):
            return bodies.handler_list
        if path == b"/handler/ping":
            return bodies.pong
        if name.startswith("/handler/") and name[9:] in HANDLERS:
            return bodies.not_faked
        return bodies.not_found

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.buf = b""


def raise_nofile() -> tuple[int, int]:
    """The soft limit of open files raised to the hard limit: (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _listener(port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("0.0.0.0", port))
    sock.listen(4096)
    sock.setblocking(False)
    return sock


async def _serve(sock: socket.socket, bodies: Bodies, on_ready: str | None, parent: int) -> Stats:
    loop = asyncio.get_running_loop()
    stats = Stats()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await loop.create_server(lambda: _Connection(bodies, stats), sock=sock)
    if on_ready is not None:
        print(on_ready, flush=True)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
        if parent and os.getppid() != parent:
            break  # a child whose parent is gone
    server.close()
    return stats


def serve(spec: Spec, procs: int = 1) -> None:
    """Build the bodies, listen, fork `procs - 1` more servers, serve until SIGTERM/SIGINT."""
    soft, hard = raise_nofile()
    started = time.perf_counter()
    # the last world all_reduce (record 2 * steps - 1) was issued hang_s ago
    bodies = Bodies(spec, time.time_ns() - int(spec.hang_s * 1e9) - (2 * spec.steps - 1) * STEP_NS)
    bodies.check()
    procs = max(1, procs)
    socks = [_listener(spec.port, procs > 1)]
    port = socks[0].getsockname()[1]
    socks += [_listener(port, True) for _ in range(procs - 1)]
    bodies.set_port(port)
    build_s = time.perf_counter() - started
    children: list[int] = []
    me = os.getpid()
    for index in range(1, procs):
        pid = os.fork()
        if pid == 0:
            for i, s in enumerate(socks):
                if i != index:
                    s.close()
            stats = asyncio.run(_serve(socks[index], bodies, None, me))
            _report(stats, f"child {index}")
            os._exit(0)
        children.append(pid)
    for s in socks[1:]:
        s.close()
    size = len(bodies.fr_body(0).partition(b"\r\n\r\n")[2])
    ready = (
        f"{READY}http://{FRONTEND_HOST}:{port} ranks={spec.ranks} behind="
        f"{bodies.behind if bodies.behind is not None else '-'} pid={me} procs={procs} "
        f"built_s={build_s:.2f} fr_bytes={size} nofile={soft}/{hard}"
    )
    try:
        stats = asyncio.run(_serve(socks[0], bodies, ready, 0))
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    _report(stats, "parent")


def _report(stats: Stats, who: str) -> None:
    t = os.times()
    counts = ", ".join(f"{k} {v}" for k, v in sorted(stats.requests.items()))
    sys.stderr.write(
        f"fleet {who} (pid {os.getpid()}): {stats.connections} connections, {counts or 'none'}; "
        f"{stats.bytes_out / 1e6:.1f} MB out; CPU user {t.user:.2f} s, system {t.system:.2f} s\n"
    )
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# From Python


@dataclass
class RunningFleet:
    """A fleet started by `start`: its process, frontend URL and the rank that is behind."""

    proc: subprocess.Popen[bytes]
    url: str
    ranks: int
    behind: int | None
    ready_line: str

    @property
    def pid(self) -> int:
        """The fleet's process id."""
        return self.proc.pid

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM by pid (the fleet ends its own children), SIGKILL if it lingers."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout_s)


def start(
    ranks: int,
    *,
    port: int = 0,
    procs: int = 1,
    steps: int = 20,
    fault: str = "behind",
    world_list: bool = True,
    hang_s: float = 900.0,
    stderr: IO[bytes] | int | None = None,
    timeout_s: float = 300.0,
) -> RunningFleet:
    """Start `python -m benchmarks.fleet` and return once its frontend answers `/tcpstore`."""
    cmd = [sys.executable, "-m", "benchmarks.fleet", "--ranks", str(ranks), "--port", str(port)]
    cmd += ["--procs", str(procs), "--steps", str(steps), "--fault", fault, "--hang-s", str(hang_s)]
    if not world_list:
        cmd.append("--no-world-list")
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, cwd=repo
    )
    try:
        line = _ready_line(proc, timeout_s)
        fields = dict(f.split("=", 1) for f in line[len(READY) :].split()[1:])
        url = line[len(READY) :].split()[0]
        behind = None if fields["behind"] == "-" else int(fields["behind"])
        with urllib.request.urlopen(f"{url}/tcpstore", timeout=timeout_s) as response:
            if response.status != 200:
                raise RuntimeError(f"fleet: /tcpstore answered HTTP {response.status}")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return RunningFleet(proc, url, ranks, behind, line)


def _ready_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"fleet: not ready within {timeout_s:g} s")
            if sel.select(left):
                line = proc.stdout.readline().decode()
                if not line:
                    raise RuntimeError(f"fleet: exited before it was ready ({proc.wait()})")
                if line.startswith(READY):
                    return line.strip()


@contextlib.contextmanager
def running(
    ranks: int, *, procs: int = 1, fault: str = "behind", world_list: bool = True
) -> Iterator[RunningFleet]:
    """A fleet for the `with` block, stopped (by pid) when it ends."""
    fleet = start(ranks, procs=procs, fault=fault, world_list=world_list)
    try:
        yield fleet
    finally:
        fleet.stop()


def main(argv: list[str] | None = None) -> None:
    """Serve a fake fleet of `--ranks` ranks until killed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed when ready)")
    p.add_argument("--procs", type=int, default=1, help="serving processes (SO_REUSEPORT)")
    p.add_argument("--steps", type=int, default=20, help="steps of the job (2 entries each)")
    p.add_argument("--fault", choices=FAULTS, default="behind")
    p.add_argument(
        "--hang-s", type=float, default=900.0, help="how long ago the job stopped (behind)"
    )
    p.add_argument(
        "--no-world-list",
        dest="world_list",
        action="store_false",
        help='pg_config lists the world group as "[]" instead of its members',
    )
    args = p.parse_args(argv)
    if args.ranks < 1 or args.steps < 1:
        p.error("--ranks and --steps must be at least 1")
    rank_host(args.ranks - 1)  # fits in 127.0.0.0/8
    spec = Spec(args.ranks, args.steps, args.fault, args.world_list, args.port, args.hang_s)
    serve(spec, args.procs)


if __name__ == "__main__":
    main()
