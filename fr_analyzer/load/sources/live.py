"""Ask a running job: fetch every rank's Flight Recorder and Python stacks from PyTorch's debug
server (`torch.distributed.debug.start_debug_server`), one snapshot after another, into
dump folders the analysis reads like any other.

The debug server runs a worker server on every rank, registered in the job's TCPStore as
`debug_server/rank<N>` = `http://host:port`, and a frontend on rank 0 whose `/tcpstore` page
lists those keys. A worker lists its handlers at `GET /handler/` and answers `POST
/handler/<name>`: `fr_trace_json` (PyTorch's recorder), `dump_nccl_trace_json` (NCCL's),
`torchcomms_fr_trace_json` (torchcomms') and `dump_traceback` (Python stacks). A worker
answers while its rank is blocked in a collective; a rank that does not answer (stopped,
swapping, dead host) is often the culprit, so it is named, never waited for past the timeout.

Requests go straight to the workers, in parallel (at most `concurrency` at a time), each with
its own timeout; torch is not needed. Each snapshot is a folder named by its local time
(`YYYYmmdd_HHMMSS_ffffff`, as the debug server names its files) holding `rank_<N>` per rank
that answered (the JSON it served, as a pickle of builtin types: what the recorder itself
writes, and what torchfrtrace reads; its time set to the moment the rank answered),
`stacks.txt` in the debug server's own layout and `fetch.json` (`MANIFEST`): when each rank
answered, and why the others did not.

What a server sends is input: a page's workers are asked only on the frontend's host (or the
hosts allowed), only the ranks of the job rank 0's recorder tells, every number in the
framing is read by `model.numbers`, and a snapshot's bodies share one memory budget (`Spill`),
past which they go to files as they arrive.

The module is over 600 lines because the job's addresses, the HTTP client with its budget,
the snapshots and their manifest share the one connection type and the answers' records;
they are to get a room each under load/sources/ (the house, step two).
"""

from __future__ import annotations

import asyncio
import html
import ipaddress
import json
import os
import pickle
import re
import socket
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, TypeVar

from ...errors import UsageError
from ...model.numbers import decimal, hex_size
from ...model.ranks import MAX_RANK
from ..common import printable
from ..formats.values import parse_ranks
from ..safety.door import parse_json
from ..safety.limits import LIMITS
from .manifest import FR_HANDLERS, MANIFEST, MANIFEST_SCHEMA
from .manifest import Manifest as Manifest  # the manifest's reader, also here (it was)
from .manifest import read_manifest as read_manifest

_T = TypeVar("_T")

STACKS = "stacks.txt"
STACKS_HANDLER = "dump_traceback"
MAX_BODY_BYTES = LIMITS.live_max_body_bytes
_RANK_KEY = re.compile(r"debug_server/rank([0-9]+): b(?:'|&#39;|\")([^'\"&<\s]+)")


class FetchError(UsageError):
    """The job's addresses could not be learned (nothing to analyze)."""


@dataclass(frozen=True)
class Worker:
    """One rank's worker server."""

    rank: int
    url: str  # http://host:port

    @property
    def host_port(self) -> tuple[str, int]:
        """The debug server's host and port, from its URL; a FetchError if it has none."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.hostname is None:
            raise FetchError(f"rank {self.rank}: {self.url!r} is not an http://host:port address")
        return parts.hostname, parts.port or 80


@dataclass(frozen=True)
class Answer:
    """What one rank gave in one snapshot: the Flight Recorder body (None when it did not
    answer), its stacks, when it answered and why it did not."""

    rank: int
    body: bytes | Path | None  # a file past the memory budget; None once saved (`take`)
    stacks: str | None
    handler: str | None  # which Flight Recorder handler the body came from
    time_ns: int | None  # when the rank's answer began to arrive
    error: str | None  # why there is no body
    entries: int = 0
    size: int = 0  # bytes of the body (kept after the body is dropped)


@dataclass(frozen=True)
class Snapshot:
    """One round of requests to every rank, and the folder it was saved in."""

    folder: Path
    started_ns: int
    finished_ns: int
    answers: tuple[Answer, ...]
    handlers: tuple[str, ...]  # the Flight Recorder handlers the job serves
    chosen: str | None  # the one whose bodies were saved (the most entries)
    others: dict[str, int] = field(default_factory=dict)  # the rest: handler -> entries

    @property
    def unanswered(self) -> list[Answer]:
        """The answers from ranks that no handler answered."""
        return [a for a in self.answers if a.handler is None]


@dataclass(frozen=True)
class Settings:
    """How a live job is polled: snapshots, their interval, timeouts and concurrency."""

    snapshots: int = 2
    interval_s: float = 10.0
    timeout_s: float = 30.0
    concurrency: int = 128
    memory_budget: int = LIMITS.live_memory_budget  # bodies held at once; past it, on disk


# ---------------------------------------------------------------------------------------------
# Addresses


ANY_HOST = "*"
ALLOW_HOST_FLAG = "--allow-host"


def workers(
    urls: Sequence[str], timeout_s: float, allowed: frozenset[str] = frozenset()
) -> list[Worker]:
    """The job's workers, in rank order: from the frontend's `/tcpstore` page when one URL is
    given and it is not itself a worker, else the URLs as they are (rank = position).

    A page's workers are asked only on the frontend's own host (its address, or this machine
    when both are), or on a host in `allowed` (`ANY_HOST`: any): a page is no operator, and
    would otherwise send POSTs to any host:port it names. The first worker elsewhere is a
    FetchError naming the flag that allows it."""
    bases = [_base(u) for u in urls]
    if not bases:
        raise UsageError("live: give the debug server's address (http://host:25999) or workers'")
    if len(bases) > 1:
        return [Worker(rank, base) for rank, base in enumerate(bases)]
    base = bases[0]
    status, body = asyncio.run(_one(base, "GET", "/tcpstore", timeout_s))
    if status == 200:
        found = _tcpstore_workers(body.decode("utf-8", "replace"))
        if found:
            _check_hosts(base, found, allowed)
            return found
    status, body = asyncio.run(_one(base, "GET", "/handler/", timeout_s))
    if status == 200 and _handler_list(body) is not None:
        return [Worker(0, base)]  # a single worker: a one-rank job, or one asked on purpose
    raise FetchError(
        f"{base}: neither a debug server frontend (no rank addresses at /tcpstore) nor a "
        f"worker (no handler list at /handler/): {_status_text(status, body)}"
    )


def _check_hosts(base: str, found: Sequence[Worker], allowed: frozenset[str]) -> None:
    """A FetchError at the first worker that is neither on the frontend's host nor allowed."""
    if ANY_HOST in allowed:
        return
    frontend = Worker(0, base).host_port[0]
    home = _addresses(frontend)
    seen: set[str] = {frontend, *allowed}
    for worker in found:
        host = worker.host_port[0]
        if host in seen:
            continue
        addresses = _addresses(host)
        if not (addresses & home or (_local(home) and _local(addresses))):
            shown = printable(host)[:100]  # a page's text: never printed as it came
            raise FetchError(
                f"{base}: its /tcpstore page names rank {worker.rank}'s worker at '{shown}', not"
                f" the frontend's host: live asks only the hosts named on its command line"
                f" ({ALLOW_HOST_FLAG} {shown} allows it, {ALLOW_HOST_FLAG} '{ANY_HOST}' any host)"
            )
        seen.add(host)


def _addresses(host: str) -> frozenset[str]:
    """The IP addresses `host` resolves to (none when it does not)."""
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return frozenset()
    return frozenset(str(info[4][0]) for info in found)


def _local(addresses: frozenset[str]) -> bool:
    """Whether every one of `addresses` is this machine's (loopback, or one it can bind)."""
    if not addresses:
        return False
    for address in addresses:
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        if ip.is_loopback:
            continue
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((address, 0))
        except OSError:
            return False
    return True


def within_job(fleet: Sequence[Worker], timeout_s: float) -> tuple[list[Worker], str | None]:
    """The workers of ranks inside the job as rank 0 tells it (its Flight Recorder's groups:
    their highest member + 1), and a note naming the others: a frontend's page may list any
    number of ranks (20,000 behind a 4-rank job), a job's own recorder lists its members.
    The fleet as it is (no note) when rank 0 does not tell."""
    if len(fleet) < 2:
        return list(fleet), None
    size = asyncio.run(_job_size(fleet[0], timeout_s))
    if size is None or fleet[-1].rank < size:
        return list(fleet), None
    kept = [w for w in fleet if w.rank < size]
    note = (
        f"the frontend lists {len(fleet):,} ranks (up to {fleet[-1].rank:,}), rank 0's Flight"
        f" Recorder a job of {size:,}: the {len(fleet) - len(kept):,} past it are not asked"
    )
    return kept, note


async def _job_size(worker: Worker, timeout_s: float) -> int | None:
    """The job's size as `worker`'s Flight Recorder tells it (None when it does not)."""
    host, port = worker.host_port
    try:
        async with _Connection(host, port, timeout_s) as conn:
            status, listed, _ = await conn.request("GET", "/handler/")
            names = _handler_list(_head(listed, MAX_BODY_BYTES)) if status == 200 else None
            for name in [h for h in FR_HANDLERS if h in (names or ())][:1]:
                status, body, _ = await conn.request("POST", f"/handler/{name}")
                top = _members_top(_head(body, MAX_BODY_BYTES)) if status == 200 else -1
                return top + 1 if top >= 0 else None
    except (_Failed, asyncio.IncompleteReadError, ConnectionError):
        return None
    return None


def _members_top(body: bytes) -> int:
    """The highest rank any group of a Flight Recorder JSON body lists (-2 when none)."""
    try:
        dump = parse_json(body)
    except (ValueError, RecursionError):
        return -2
    config = dump.get("pg_config") if isinstance(dump, dict) else None
    tops = [
        ranks[-1]
        for group in (config.values() if isinstance(config, dict) else ())
        if isinstance(group, dict) and (ranks := parse_ranks(group.get("ranks")))
    ]
    return max(tops, default=-2)


def _base(url: str) -> str:
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise UsageError(f"live: {url!r} is not an http://host:port address")
    return f"http://{parts.netloc}"


def _tcpstore_workers(page: str) -> list[Worker]:
    """The `debug_server/rank<N>` keys of the frontend's TCPStore page."""
    by_rank: dict[int, str] = {}
    for m in _RANK_KEY.finditer(page):
        rank = decimal(m[1], MAX_RANK)
        if rank is not None:
            by_rank[rank] = html.unescape(m[2])
    return [Worker(rank, _base(url)) for rank, url in sorted(by_rank.items())]


def _handler_list(body: bytes) -> list[str] | None:
    try:
        names = parse_json(body)
    except ValueError:
        return None
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        return names
    return None


def _status_text(status: int, body: bytes) -> str:
    if status < 0:
        return body.decode("utf-8", "replace")
    line = body[:120].decode("utf-8", "replace").splitlines()[0] if body.strip() else ""
    return f"HTTP {status}" + (f" ({line})" if line else "")


# ---------------------------------------------------------------------------------------------
# Requests


async def _one(base: str, method: str, path: str, timeout_s: float) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body), or (-1, why) when it failed."""
    host, port = Worker(0, base).host_port
    try:
        async with _Connection(host, port, timeout_s) as conn:
            status, body, _ = await conn.request(method, path)
            return status, _head(body, MAX_BODY_BYTES)  # no spill: always in memory
    except _Failed as exc:
        return -1, str(exc).encode()


class _Failed(Exception):
    pass


class _Connection:
    """A keep-alive HTTP/1.1 connection to one worker, every step under one deadline."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.host, self.port = host, port
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> _Connection:
        self.reader, self.writer = await self._within(
            asyncio.open_connection(self.host, self.port, limit=1 << 20), "connect"
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.writer is not None:
            self.writer.close()  # not waited for: the peer's part is its own

    async def _within(self, step: Awaitable[_T], what: str) -> _T:
        # asyncio.timeout_at (3.11+): a timer on the running task, no new Task per step as
        # asyncio.wait_for makes before 3.12. The loop's clock is time.monotonic.
        try:
            if self.deadline <= time.monotonic():
                raise TimeoutError
            async with asyncio.timeout_at(self.deadline):
                return await step
        except TimeoutError:
            raise _Failed(f"did not answer within {self.timeout_s:g} s") from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise _Failed(f"could not be reached ({what}: {reason})") from None

    async def request(
        self, method: str, path: str, spill: Spill | None = None
    ) -> tuple[int, bytes | Path, int]:
        """(status, body, when the answer began to arrive, ns). The body is bytes, or with
        `spill` the file it went to once the snapshot's bodies held its memory budget."""
        assert self.reader is not None and self.writer is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            "Content-Length: 0\r\nConnection: keep-alive\r\nAccept-Encoding: identity\r\n\r\n"
        )
        self.writer.write(head.encode())
        if self.writer.transport.get_write_buffer_size():
            await self._within(self.writer.drain(), "send")
        try:  # the status line and headers at once
            block: bytes = await self._within(self.reader.readuntil(b"\r\n\r\n"), "read")
        except asyncio.IncompleteReadError as exc:
            block = exc.partial  # the peer closed: what came, as readline would give it
        except asyncio.LimitOverrunError:
            raise _Failed("answered headers over 1 MiB") from None
        when = time.time_ns()
        lines = block.split(b"\n")
        parts = lines[0].split(None, 2)
        status = decimal(parts[1], 999) if len(parts) >= 2 else None
        if status is None or not parts[0].startswith(b"HTTP/"):
            raise _Failed("answered something that is not HTTP")
        length: int | None = None
        chunked = False
        for header in lines[1:]:
            name, _, value = header.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = decimal(value.strip())
                if length is None:
                    raise _Failed("answered a malformed Content-Length")
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if length is not None and length > MAX_BODY_BYTES and not chunked:
            raise _Failed(f"answered {length} bytes, over {MAX_BODY_BYTES} bytes")
        body = _Body(spill)
        try:
            if chunked:
                await self._chunks(body)
            elif length is not None:
                await self._exactly(body, length)
            else:
                while piece := await self._within(self.reader.read(_PIECE), "read"):
                    body.add(piece)
        except BaseException:
            body.abandon()
            raise
        return status, body.done(), when

    async def _exactly(self, body: _Body, length: int) -> None:
        assert self.reader is not None
        while length > 0:
            piece = await self._within(self.reader.readexactly(min(length, _PIECE)), "read")
            body.add(piece)
            length -= len(piece)

    async def _chunks(self, body: _Body) -> None:
        assert self.reader is not None
        while True:
            size_line: bytes = await self._within(self.reader.readline(), "read")
            digits = size_line.split(b";", 1)[0].strip()
            size = hex_size(size_line, MAX_BODY_BYTES) if digits else 0  # the peer closed
            if size is None:
                raise _Failed("answered a broken chunked body")
            if size == 0:
                await self._within(self.reader.readline(), "read")
                return
            await self._exactly(body, size)
            await self._within(self.reader.readexactly(2), "read")


_PIECE = 1 << 20
"""Bytes of a body read at a time: each piece is counted against the budget as it comes."""


class Spill:
    """What one snapshot's bodies hold in memory, across ranks and handlers: past `budget`
    bytes, a body goes to a file in `folder` as it arrives (endless chunked bodies from many
    ranks at once would otherwise be held together: 3 GB for 3 ranks in 10 s)."""

    def __init__(self, folder: Path, budget: int) -> None:
        self.folder = folder
        self.budget = budget
        self.held = 0
        self.files = 0

    def file(self) -> tuple[Path, BinaryIO]:
        """A new file for one body, opened for writing (never through a link)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.files += 1
        path = self.folder / f"body-{self.files}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        return path, os.fdopen(os.open(path, flags, 0o600), "wb")


class _Body:
    """One response body as it arrives: in memory within its snapshot's budget, else in a
    file; never past MAX_BODY_BYTES."""

    def __init__(self, spill: Spill | None) -> None:
        self.spill = spill
        self.parts: list[bytes] = []
        self.size = 0
        self.held = 0
        self.path: Path | None = None
        self.out: BinaryIO | None = None

    def add(self, piece: bytes) -> None:
        self.size += len(piece)
        if self.size > MAX_BODY_BYTES:
            raise _Failed(f"answered more than {MAX_BODY_BYTES} bytes")
        spill = self.spill
        if self.out is None and spill is not None and spill.held + len(piece) > spill.budget:
            self.path, self.out = spill.file()
            for part in self.parts:
                self.out.write(part)
            spill.held -= self.held
            self.parts, self.held = [], 0
        if self.out is not None:
            self.out.write(piece)
            return
        self.parts.append(piece)
        self.held += len(piece)
        if spill is not None:
            spill.held += len(piece)

    def done(self) -> bytes | Path:
        if self.out is not None and self.path is not None:
            self.out.close()
            return self.path
        return b"".join(self.parts)

    def abandon(self) -> None:
        if self.spill is not None:
            self.spill.held -= self.held
        self.parts, self.held = [], 0
        if self.out is not None and self.path is not None:
            self.out.close()
            self.path.unlink(missing_ok=True)


def _head(body: bytes | Path, most: int) -> bytes:
    """The first `most` bytes of a body, in memory or in its file."""
    if isinstance(body, bytes):
        return body[:most]
    try:
        with body.open("rb") as f:
            return f.read(most)
    except OSError:
        return b""


def _drop(body: bytes | Path | None) -> None:
    """A body no longer needed: its file, if it has one, removed."""
    if isinstance(body, Path):
        body.unlink(missing_ok=True)


_Asked = tuple[int, dict[str, bytes | Path], str | None, int | None, str | None]
STACKS_PER_RANK = 1 << 20
"""Most bytes of one rank's Python stacks kept (the debug server's are kilobytes)."""


async def _ask_rank(
    worker: Worker, handlers: Sequence[str], stacks: bool, settings: Settings, spill: Spill
) -> _Asked:
    """One rank: (rank, handler -> body, stacks, when the first answer began, error)."""
    host, port = worker.host_port
    bodies: dict[str, bytes | Path] = {}
    when: int | None = None
    error: str | None = None
    text: str | None = None
    try:
        async with _Connection(host, port, settings.timeout_s) as conn:
            for name in handlers:
                status, body, at = await conn.request("POST", f"/handler/{name}", spill)
                when = at if when is None else when
                if status == 200:
                    bodies[name] = body
                    continue
                if error is None:
                    error = f"answered {_status_text(status, _head(body, 200))} for {name}"
                _drop(body)
            if stacks:
                status, body, _ = await conn.request("POST", f"/handler/{STACKS_HANDLER}", spill)
                if status == 200:
                    text = _head(body, STACKS_PER_RANK).decode("utf-8", "replace")
                _drop(body)
    except _Failed as exc:
        error = str(exc)
    except (asyncio.IncompleteReadError, ConnectionError) as exc:
        error = f"closed the connection ({type(exc).__name__})"
    if bodies:
        error = None
    return worker.rank, bodies, text, when, error


async def _round(
    fleet: Sequence[Worker],
    handlers: Sequence[str],
    stacks: bool,
    settings: Settings,
    spill: Spill,
) -> list[_Asked]:
    gate = asyncio.Semaphore(max(1, settings.concurrency))

    async def bounded(w: Worker) -> _Asked:
        async with gate:
            return await _ask_rank(w, handlers, stacks, settings, spill)

    return list(await asyncio.gather(*(bounded(w) for w in fleet)))


def served_handlers(fleet: Sequence[Worker], timeout_s: float) -> tuple[list[str], bool]:
    """The Flight Recorder handlers the job serves (asked of the first ranks that answer) and
    whether it serves stacks."""
    for worker in fleet[:8]:
        status, body = asyncio.run(_one(worker.url, "GET", "/handler/", timeout_s))
        names = _handler_list(body) if status == 200 else None
        if names is not None:
            return [h for h in FR_HANDLERS if h in names], STACKS_HANDLER in names
    return ["fr_trace_json"], True  # nobody listed them: ask for PyTorch's recorder


# ---------------------------------------------------------------------------------------------
# Snapshots


def take(
    fleet: Sequence[Worker],
    into: Path,
    settings: Settings = Settings(),
    progress: Callable[[Snapshot], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Snapshot]:
    """`settings.snapshots` snapshots of every rank, `interval_s` apart (from the start of
    one to the start of the next), each saved in a new folder under `into`."""
    handlers, stacks = served_handlers(fleet, settings.timeout_s)
    if not handlers:
        raise FetchError(
            f"{fleet[0].url}: the job serves no Flight Recorder handler ("
            + ", ".join(FR_HANDLERS)
            + ")"
        )
    taken: list[Snapshot] = []
    for index in range(settings.snapshots):
        started = time.monotonic()
        snap = _snapshot(fleet, handlers, stacks, into, settings)
        taken.append(snap)
        if progress is not None:
            progress(snap)
        if index + 1 < settings.snapshots:
            sleep(max(0.0, settings.interval_s - (time.monotonic() - started)))
    return taken


def _snapshot(
    fleet: Sequence[Worker], handlers: list[str], stacks: bool, into: Path, settings: Settings
) -> Snapshot:
    started = time.time_ns()
    spill = Spill(into / f".bodies-{started}", settings.memory_budget)
    try:
        return _snapshot_spilled(fleet, handlers, stacks, into, settings, spill, started)
    finally:  # bodies that went to files and were not saved: none is left behind
        if spill.folder.is_dir():
            for leftover in spill.folder.iterdir():
                leftover.unlink(missing_ok=True)
            spill.folder.rmdir()


def _snapshot_spilled(
    fleet: Sequence[Worker],
    handlers: list[str],
    stacks: bool,
    into: Path,
    settings: Settings,
    spill: Spill,
    started: int,
) -> Snapshot:
    got = asyncio.run(_round(fleet, handlers, stacks, settings, spill))
    finished = time.time_ns()
    totals = dict.fromkeys(handlers, 0)
    counts: dict[tuple[int, str], int] = {}
    for rank, bodies, *_ in got:
        for name, body in bodies.items():
            counts[rank, name] = n = _entry_count(body)
            totals[name] += n
    chosen = max(handlers, key=lambda h: (totals[h], -handlers.index(h)))
    for _, bodies, *_ in got:
        for name, body in bodies.items():
            if name != chosen:
                _drop(body)
    answers = tuple(
        Answer(
            rank,
            bodies.get(chosen),
            text,
            chosen if chosen in bodies else None,
            when,
            error
            if error is not None or chosen in bodies
            else f"did not serve {chosen} (it served {', '.join(sorted(bodies)) or 'nothing'})",
            counts.get((rank, chosen), 0),
            _size(bodies.get(chosen, b"")),
        )
        for rank, bodies, text, when, error in got
    )
    folder = _folder(into, started)
    snap = Snapshot(
        folder,
        started,
        finished,
        answers,
        tuple(handlers),
        chosen,
        {h: n for h, n in totals.items() if h != chosen},
    )
    _save(snap, fleet)
    # the bodies are in the folder now: keep none (2 GB a snapshot at 16,384 ranks)
    return replace(snap, answers=tuple(replace(a, body=None) for a in snap.answers))


def _size(body: bytes | Path) -> int:
    if isinstance(body, bytes):
        return len(body)
    try:
        return body.stat().st_size
    except OSError:
        return 0


def _as_pickle(rank: int, body: bytes | Path) -> tuple[str, bytes | Path]:
    """The rank's file: the JSON it served as the pickle the recorder itself writes
    (`rank_<N>`, builtin types only), which torchfrtrace reads too; a body that is not a JSON
    object is kept as it came (`rank_<N>.json`), for the reader to say what is wrong with it.
    A body past the memory budget (in a file) is kept as it came: the reader reads it, in
    its sandbox, as any JSON dump."""
    if isinstance(body, Path):
        return f"rank_{rank}.json", body
    try:
        obj = parse_json(body)
    except (ValueError, RecursionError):
        return f"rank_{rank}.json", body
    if not isinstance(obj, dict):
        return f"rank_{rank}.json", body
    return f"rank_{rank}", pickle.dumps(obj, protocol=2)


_ENTRY_KEY = b'"record_id"'


def _entry_count(body: bytes | Path) -> int:
    """How many entries a Flight Recorder JSON body holds (counted without parsing it; a body
    in a file, piece by piece)."""
    if isinstance(body, bytes):
        return body.count(_ENTRY_KEY)
    count, tail = 0, b""
    try:
        with body.open("rb") as f:
            while piece := f.read(_PIECE):
                both = tail + piece
                count += both.count(_ENTRY_KEY)
                tail = both[-(len(_ENTRY_KEY) - 1) :]  # shorter than the key: never counted twice
    except OSError:
        return 0
    return count


def _folder(into: Path, started_ns: int) -> Path:
    stamp = datetime.fromtimestamp(started_ns / 1e9).strftime("%Y%m%d_%H%M%S_%f")
    folder = into / stamp
    n = 1
    while folder.exists():
        n += 1
        folder = into / f"{stamp}-{n}"
    return folder


def _save(snap: Snapshot, fleet: Sequence[Worker]) -> None:
    """The snapshot's folder: written under a temporary name, then renamed, so that a folder
    with the final name is always whole."""
    partial = snap.folder.with_name(snap.folder.name + ".partial")
    partial.mkdir(parents=True)
    urls = {w.rank: w.url for w in fleet}
    for a in snap.answers:
        if a.body is None:
            continue
        name, data = _as_pickle(a.rank, a.body)
        path = partial / name
        if isinstance(data, Path):
            data.rename(path)
        else:
            path.write_bytes(data)
        if a.time_ns is not None:
            os.utime(path, ns=(a.time_ns, a.time_ns))
    lines: list[str] = []
    for a in snap.answers:
        lines.append(f"=== Rank {a.rank}: {urls.get(a.rank, '?')}/handler/{STACKS_HANDLER}? ===")
        lines.append(a.stacks if a.stacks is not None else f"Error: {a.error or 'no stacks'}")
    (partial / STACKS).write_text("\n".join(lines) + "\n")
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "started_ns": snap.started_ns,
        "finished_ns": snap.finished_ns,
        "world_size": len(fleet),
        "handler": snap.chosen,
        "handlers": list(snap.handlers),
        "other_handlers": snap.others,
        "ranks": {
            str(a.rank): {"url": urls.get(a.rank), "time_ns": a.time_ns, "error": a.error}
            for a in snap.answers
        },
    }
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    partial.rename(snap.folder)
