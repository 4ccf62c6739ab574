"""Hostile URL sources, each served by servers on 127.0.0.1 that the test starts and stops: a
rank redirected to another origin, listing links that lead outside the URL, servers that drip
bytes or say nothing, and an endless index. Nothing from outside the URL is ever fetched or
shown, and every run ends within the limits, shrunk here so that each test takes seconds."""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import re
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fr_analyzer import cli
from fr_analyzer.load.safety import limits
from fr_analyzer.load.sources.remote import _below

pytest.importorskip("fsspec", reason="the remote extra is not installed")
pytest.importorskip("aiohttp", reason="the remote extra is not installed")

HEALTHY = Path(__file__).resolve().parents[2] / "sample_dumps" / "nccl_healthy"
RANKS = [f"nccl_trace_rank_{rank}" for rank in range(8)]
SECRET = b"TOP-SECRET-7f3a1c: from outside the URL\n"
MOST_SECONDS = 60.0  # no handler of a test server runs longer than this


# ---------------------------------------------------------------------------------------------
# Test servers


class Server(http.server.ThreadingHTTPServer):
    """A server on 127.0.0.1 that answers each path with its route, and records the paths."""

    daemon_threads = True

    def __init__(self, routes: dict[str, Route]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.routes = routes
        self.requests: list[str] = []
        self.stopping = threading.Event()
        self.sent = 0  # bytes the endless routes sent

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    server: Server

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404)
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            route(self)  # a client that gives up is what these tests want

    def log_message(self, format: str, *args: object) -> None:
        pass


Route = Callable[[Handler], None]


@contextlib.contextmanager
def serve(routes: dict[str, Route]) -> Iterator[Server]:
    server = Server(routes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def body(data: bytes, content_type: str = "application/octet-stream") -> Route:
    def route(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    return route


def index(*links: str) -> Route:
    page = "".join(f'<a href="{link}">{link}</a><br>\n' for link in links)
    return body(f"<html><body>\n{page}</body></html>\n".encode(), "text/html")


def ranged(data: bytes) -> Route:
    """`data`, answering range requests (`bytes=A-B` or `bytes=A-`) as a file server does."""

    def route(h: Handler) -> None:
        asked = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range", ""))
        if asked is None:
            body(data)(h)
            return
        first = int(asked[1])
        last = min(int(asked[2] or len(data) - 1), len(data) - 1)
        if first >= len(data):
            h.send_response(416)
            h.send_header("Content-Range", f"bytes */{len(data)}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        h.send_response(206)
        h.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        h.send_header("Content-Length", str(last + 1 - first))
        h.end_headers()
        h.wfile.write(data[first : last + 1])

    return route


def redirect(location: str) -> Route:
    def route(h: Handler) -> None:
        h.send_response(302)
        h.send_header("Location", location)
        h.send_header("Content-Length", "0")
        h.end_headers()

    return route


def paced(data: bytes, chunk: int, every: float) -> Route:
    """`data`, `chunk` bytes every `every` seconds (forever, cycling, when chunk is 1)."""

    def route(h: Handler) -> None:
        h.send_response(200)
        h.end_headers()
        start = time.monotonic()
        for offset in range(0, 1 << 30, chunk):
            if chunk > 1 and offset >= len(data):
                return
            if h.server.stopping.is_set() or time.monotonic() - start > MOST_SECONDS:
                return
            part = data[offset : offset + chunk] if chunk > 1 else data[offset % len(data) :][:1]
            h.wfile.write(part)
            time.sleep(every)

    return route


def drip_headers(h: Handler) -> None:
    """The status line and headers, one byte every 50 ms, never ending."""
    start = time.monotonic()
    line = b"HTTP/1.0 200 OK\r\n" + b"X-Padding: " + b"a" * 100_000
    for byte in line:
        if h.server.stopping.is_set() or time.monotonic() - start > MOST_SECONDS:
            return
        h.wfile.write(bytes([byte]))
        time.sleep(0.05)


def silent(h: Handler) -> None:
    """Accept the request, then say nothing."""
    h.server.stopping.wait(MOST_SECONDS)


def endless_index(h: Handler) -> None:
    """An HTML index that never ends, as fast as the client takes it."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.end_headers()
    chunk = b"".join(b'<a href="nccl_trace_rank_%d">x</a>\n' % i for i in range(2000))
    while not h.server.stopping.is_set() and h.server.sent < 1 << 30:
        h.wfile.write(chunk)
        h.server.sent += len(chunk)


def dump_routes(prefix: str = "/dumps/", skip: tuple[int, ...] = ()) -> dict[str, Route]:
    """The healthy sample set under `prefix`: its index and its files (but ranks `skip`)."""
    routes = {f"{prefix}{name}": body((HEALTHY / name).read_bytes()) for name in RANKS}
    for rank in skip:
        del routes[f"{prefix}{RANKS[rank]}"]
    routes[prefix] = index(*RANKS)
    routes[prefix.rstrip("/")] = redirect(prefix)  # as http.server answers for a directory
    return routes


# ---------------------------------------------------------------------------------------------
# Running fr-analyze in this process, with the limits shrunk


@pytest.fixture
def tight(monkeypatch: pytest.MonkeyPatch) -> limits.Limits:
    """The limits with URL timeouts of a second, a slow minimum rate, a 256 KiB listing."""
    table = dataclasses.replace(
        limits.LIMITS,
        url_connect_timeout_s=1.0,
        url_read_timeout_s=1.0,
        url_min_rate=1024,
        listing_max_bytes=256 * 1024,
    )
    monkeypatch.setattr(limits, "LIMITS", table)
    return table


@dataclasses.dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str
    seconds: float


@pytest.fixture
def fr(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """fr-analyze's command line, run in this process (so the shrunk limits hold, also in its
    forked workers)."""

    def run(*args: str) -> Run:
        monkeypatch.setattr(sys, "argv", ["fr-analyze", "--workers", "2", *args])
        start = time.monotonic()
        with pytest.raises(SystemExit) as exited:
            cli.main()
        out, err = capfd.readouterr()
        return Run(int(exited.value.code or 0), out, err, time.monotonic() - start)

    return run


def shown(run: Run, *paths: Path) -> str:
    return run.out + run.err + "".join(p.read_text() for p in paths if p.exists())


# ---------------------------------------------------------------------------------------------
# Finding 4: nothing from outside the URL


def test_a_rank_redirected_to_another_origin_is_unreadable_and_its_content_never_fetched(
    tight: limits.Limits, fr: Callable[..., Run], tmp_path: Path
) -> None:
    """Rank 3 answers a redirect to another port (another origin, holding a secret): it is
    unreadable with that reason, the other server gets no request, and the secret is nowhere.
    Rank 5 redirects within the origin (outside the URL's directory): that one is followed."""
    with serve({"/secret": body(SECRET)}) as other:
        routes = dump_routes(skip=(3, 5))
        routes["/dumps/nccl_trace_rank_3"] = redirect(f"{other.base}/secret")
        routes["/dumps/nccl_trace_rank_5"] = redirect("/store/rank5")
        routes["/store/rank5"] = body((HEALTHY / RANKS[5]).read_bytes())
        with serve(routes) as main:
            report = tmp_path / "r.json"
            run = fr("-d", f"{main.base}/dumps/", "--json", str(report))
    assert run.code == 1, run.err
    assert other.requests == []
    assert SECRET.decode().strip() not in shown(run, report)
    line = next(li for li in run.out.splitlines() if "unreadable: " in li and "(rank 3)" in li)
    assert line.endswith(
        f"redirected to another origin (http://127.0.0.1:{other.server_address[1]}): not followed"
    )
    unreadable = json.loads(report.read_text())["dumps"]["unreadable"]
    assert [u["rank"] for u in unreadable] == [3]
    assert "/store/rank5" in main.requests
    assert run.seconds < 20


def test_listing_links_that_leave_the_url_are_never_fetched_and_are_counted_in_a_note(
    tight: limits.Limits, fr: Callable[..., Run], tmp_path: Path
) -> None:
    """The index holds the genuine ranks (rank 7 in a subdirectory) and rank-like links with
    '..', an absolute path elsewhere, another port, an encoded '..' and a name with terminal
    escapes: only the URL's own paths are asked for, the other server gets nothing, and a
    note counts the links passed over, its text escaped."""
    with serve({f"/nccl_trace_rank_{r}": body(SECRET) for r in (10, 14)}) as other:
        hostile = [
            f"{other.base}/\x1b[2J\u202enccl_trace_rank_14",
            "../nccl_trace_rank_8",
            "/elsewhere/nccl_trace_rank_9",
            f"{other.base}/nccl_trace_rank_10",
            "http://127.0.0.1:{main}/dumps/../nccl_trace_rank_11",
            "%2e%2e/nccl_trace_rank_12",
            "sub%2F..%2F..%2Fnccl_trace_rank_13",
        ]
        routes = dump_routes(skip=(7,))
        routes.update({f"/nccl_trace_rank_{r}": body(SECRET) for r in (8, 11, 12)})
        routes["/elsewhere/nccl_trace_rank_9"] = body(SECRET)
        routes["/dumps/sub/"] = index("../", RANKS[7], "../../nccl_trace_rank_15")
        routes["/dumps/sub/nccl_trace_rank_7"] = body((HEALTHY / RANKS[7]).read_bytes())
        with serve(routes) as main:
            links = [link.format(main=main.server_address[1]) for link in hostile]
            routes["/dumps/"] = index("../", "?C=N;O=D", *RANKS[:7], "sub/", "gone/", *links)
            report = tmp_path / "r.json"
            run = fr("-d", f"{main.base}/dumps/", "--json", str(report))
    assert run.code == 0, run.out + run.err
    assert other.requests == []
    assert all(path.startswith("/dumps/") for path in main.requests), main.requests
    assert "/dumps/sub/nccl_trace_rank_7" in main.requests
    assert SECRET.decode().strip() not in shown(run, report)
    assert "\x1b" not in run.out and "\u202e" not in run.out
    note = next(li for li in run.out.splitlines() if "lead outside it" in li)
    assert "8 links in its listing that lead outside it, not followed" in note
    assert note.endswith(f"({other.base}/\\x1b[2J\\u202enccl_trace_rank_14, ...)")
    assert f"{main.base}/dumps/gone/: not listed (HTTP 404 Not Found)" in run.out


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        ("nccl_trace_rank_0", "nccl_trace_rank_0"),
        ("./a%20b", "a b"),
        ("http://h:80/d/x", "x"),
        ("sub/", "sub/"),
        ("sub/x#frag", "sub/x"),
        ("../", ""),
        ("/", ""),
        ("?C=M;O=A", ""),
        ("x?download=1", ""),
        ("../x", None),
        ("/d2/x", None),
        ("/d/../x", None),
        ("http://h/d/../x", None),
        ("%2e%2e/x", None),
        ("a%2fb", None),
        ("a%5cb", None),
        ("a//b", "a/b"),  # urljoin drops the empty segment
        ("https://h/d/x", None),
        ("http://h:8080/d/x", None),
        ("http://other/d/x", None),
        ("//other/d/x", None),
        ("http://h:notaport/d/x", None),
    ],
)
def test_a_listing_link_is_a_file_below_the_url_navigation_or_outside_it(
    link: str, expected: str | None
) -> None:
    got = _below("http://h/d/", "http://h/d/", link)
    assert (got if got is None else got[1]) == expected


# ---------------------------------------------------------------------------------------------
# Finding 12: every request ends within the limits


@pytest.mark.slow
def test_ranks_that_drip_or_say_nothing_are_unreadable_within_the_timeouts(
    tight: limits.Limits, fr: Callable[..., Run]
) -> None:
    """Rank 2's body drips a byte every 50 ms, rank 4's headers drip, rank 6 says nothing:
    each is unreadable with its reason within about the connect and read timeouts (2 s
    here), while rank 0, sent steadily over 3 s (past those timeouts, above the minimum
    rate), is read; the others are analyzed."""
    routes = dump_routes()
    routes["/dumps/nccl_trace_rank_2"] = paced(b"\x80\x02", 1, 0.05)
    routes["/dumps/nccl_trace_rank_4"] = drip_headers
    routes["/dumps/nccl_trace_rank_6"] = silent
    routes["/dumps/nccl_trace_rank_0"] = paced((HEALTHY / RANKS[0]).read_bytes(), 600, 0.15)
    with serve(routes) as main:
        run = fr("-d", f"{main.base}/dumps/")
    assert run.code == 1, run.err
    reasons = {
        int(li.split("(rank ")[1].split(")")[0]): li.split("): ", 1)[1]
        for li in run.out.splitlines()
        if li.strip().startswith("unreadable: ") and "(rank " in li
    }
    assert sorted(reasons) == [2, 4, 6], run.out
    assert reasons[2].startswith("too slow: ") and "(url_min_rate)" in reasons[2]
    assert reasons[4].startswith("too slow: 0 bytes")
    assert reasons[6] == "the server sent nothing for 1 s (url_read_timeout_s)"
    assert run.seconds < 15


def test_a_listing_that_never_ends_is_cut_at_its_limit_with_one_line(
    tight: limits.Limits, fr: Callable[..., Run]
) -> None:
    with serve({"/dumps/": endless_index}) as main:
        run = fr("-d", f"{main.base}/dumps/")
    assert run.code == 2
    assert run.err.splitlines()[0] + "\n" == (
        f"fr-analyze: error: {main.base}/dumps/: cannot list: the listing is over the"
        " 262144-byte limit in all (listing_max_bytes)\n"
    )
    assert run.seconds < 10


@pytest.mark.slow
@pytest.mark.parametrize(
    ("route", "reason"),
    [
        (paced(b"<a href=", 1, 0.05), "too slow: "),
        (silent, "the server sent nothing for 1 s (url_read_timeout_s)"),
        (drip_headers, "too slow: 0 bytes"),
    ],
    ids=["drip", "silent", "dripped-headers"],
)
def test_a_listing_that_is_too_slow_is_one_line_and_exit_2(
    tight: limits.Limits, fr: Callable[..., Run], route: Route, reason: str
) -> None:
    with serve({"/dumps/": route}) as main:
        run = fr("-d", f"{main.base}/dumps/")
    assert run.code == 2
    assert run.err.startswith(f"fr-analyze: error: {main.base}/dumps/: cannot list: {reason}")
    assert run.err.count("\n") == 2 and "Traceback" not in run.err
    assert run.seconds < 10


@pytest.mark.parametrize("path", ["/dumps/", "/fr.tar.gz"])
def test_a_url_redirected_to_another_origin_is_one_line_and_exit_2(
    tight: limits.Limits, fr: Callable[..., Run], path: str
) -> None:
    with serve({path: body(SECRET)}) as other, serve({path: redirect(other.base + path)}) as main:
        run = fr("-d", main.base + path)
    assert run.code == 2
    assert run.err.startswith(f"fr-analyze: error: {main.base}{path}: ")
    assert (run.err.splitlines()[0] + "\n").endswith(
        f"redirected to another origin (http://127.0.0.1:{other.server_address[1]}): not followed\n"
    )
    assert run.err.count("\n") == 2 and other.requests == []


def test_a_server_nobody_answers_on_is_one_line(
    tight: limits.Limits, fr: Callable[..., Run]
) -> None:
    with serve({}) as gone:
        base = gone.base
    run = fr("-d", f"{base}/dumps/")
    assert run.code == 2
    assert run.err.startswith(f"fr-analyze: error: {base}/dumps/: cannot list: cannot fetch: ")
    assert run.err.count("\n") == 2


def test_a_zip_at_a_url_is_read_by_range_requests_and_without_them_is_one_line(
    tight: limits.Limits, fr: Callable[..., Run], tmp_path: Path
) -> None:
    """A zip is read where its directory says, one range request a read; from a server that
    answers no range requests it cannot be, and the error says why."""
    archive = tmp_path / "fr.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as packed:
        for name in RANKS:
            packed.write(HEALTHY / name, f"fr/{name}")
    data = archive.read_bytes()
    with serve({"/fr.zip": ranged(data), "/plain.zip": body(data)}) as main:
        read = fr("-d", f"{main.base}/fr.zip")
        refused = fr("-d", f"{main.base}/plain.zip")
    assert read.code == 0, read.err
    assert "fr.zip (zip archive, read member by member)" in read.out
    assert refused.code == 2
    assert refused.err.splitlines()[0] + "\n" == (
        f"fr-analyze: error: {main.base}/plain.zip: the server answers no range requests,"
        " which reading a zip needs (download it, or pack the dumps as .tar.gz: that is read"
        " from its start)\n"
    )
