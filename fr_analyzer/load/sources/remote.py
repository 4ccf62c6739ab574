"""Dumps at a URL (fsspec: `s3://`, `gs://`, `https://`, ...), within the limits: every request
with connect and read timeouts and a minimum pace, listings capped, redirects followed only
within the URL's origin, and listing links followed only below the URL.

It is over 600 lines because every request fr-analyze makes goes through here, so that one
module holds the timeouts, the pace, the redirect rule and the listing parsers (S3, GCS,
HTTP index pages) that make a remote source safe.
"""

from __future__ import annotations

import io
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from ...errors import DiscoveryError
from ...model.numbers import decimal
from ..common import printable
from ..safety import limits
from .archives import ARCHIVE_SUFFIXES, archive_kind, archive_source, over_limit
from .base import DumpFile, Listed, Source, SourceError

# ---------------------------------------------------------------------------------------------
# URLs (fsspec)
#
# Every http(s) request is made here, with the fsspec filesystem's aiohttp session (so its
# storage options still apply: headers, auth, client_kwargs) on fsspec's event loop, within
# the limits (`limits.Limits`): aiohttp's connect and read timeouts, a pace that cuts a server
# dripping bytes, a cap on what a listing may hold, and redirects followed only within the
# URL's origin (scheme, host and port). A listing's links are followed only below the URL.

REMOTE_EXTRA = "pip install 'fr-analyze[remote]'"
_HTTP = ("http", "https")
_REDIRECTS = frozenset((301, 302, 303, 307, 308))


class UrlError(OSError):
    """A URL that cannot be read within the limits; the reason, its names escaped (an OSError:
    archive readers report it as a read that failed)."""


@dataclass(frozen=True)
class RemoteFile:
    """An archive at a URL, opened through fsspec (random access by range requests)."""

    name: str  # the URL
    protocol: str
    path: str
    options: tuple[tuple[str, Any], ...]

    def open(self) -> IO[bytes]:
        """Open the object for reading (HTTP by ranges; other protocols through fsspec)."""
        fs = _filesystem(self.protocol, self.options)
        if self.protocol in _HTTP:
            return io.BufferedReader(_HttpRanges(fs, self.path), 1 << 20)
        stream: IO[bytes] = fs.open(self.path, "rb")
        return stream

    def stream(self) -> IO[bytes]:
        """Opened to be read once from the start (over HTTP, with no range requests)."""
        if self.protocol not in _HTTP:
            return self.open()
        fs = _filesystem(self.protocol, self.options)
        return io.BufferedReader(_HttpStream(fs, self.path), 1 << 16)


@dataclass(frozen=True)
class UrlFile:
    """One remote file, fetched by the worker that reads it."""

    where: str
    protocol: str
    path: str
    options: tuple[tuple[str, Any], ...]
    size: int
    mtime_ns: int | None = None  # the object's modification time, from the listing

    def read(self, max_bytes: int) -> bytes:
        """The whole object, refused past `max_bytes` or when the fetch is too slow."""
        if problem := over_limit(self.size, max_bytes):
            raise SourceError(problem.replace("member", "file", 1))
        over = f"file is over the {max_bytes}-byte limit (see --max-file-size)"
        try:
            fs = _filesystem(self.protocol, self.options)
            if self.protocol in _HTTP:
                return _http_fetch(fs, self.path, max_bytes, over)
            if self.size:
                data: bytes = fs.cat_file(self.path, **_deadline(fs, self.size))
            else:
                with fs.open(self.path, "rb") as stream:
                    data = stream.read(max_bytes + 1)
        except UrlError as exc:
            raise SourceError(str(exc)) from None
        except Exception as exc:  # fsspec and its backends raise anything
            if type(exc).__name__ == "FSTimeoutError":
                raise SourceError(_not_within(self.size)) from None
            raise SourceError(f"cannot fetch: {_remote_error(exc)}") from None
        if len(data) > max_bytes:
            raise SourceError(over)
        return data


def _allowed(size: int) -> float:
    """Seconds a response of `size` bytes may take: the connect and read timeouts, then
    `url_min_rate`."""
    table = limits.LIMITS
    grace = table.url_connect_timeout_s + table.url_read_timeout_s
    return grace + size / table.url_min_rate


def _too_slow(received: int, seconds: float) -> str:
    rate = limits.LIMITS.url_min_rate
    return (
        f"too slow: {received} bytes in {seconds:.1f} s, under the {rate} bytes/s a response"
        " must average past the connect and read timeouts (url_min_rate)"
    )


def _not_within(size: int) -> str:
    return (
        f"not fetched within {_allowed(size):.1f} s (the connect and read timeouts, then"
        f" {size} bytes at url_min_rate)"
    )


def _deadline(fs: Any, size: int) -> dict[str, float]:
    """fsspec's keyword for a call on an async filesystem that must end within `_allowed`."""
    return {"timeout": _allowed(size)} if getattr(fs, "async_impl", False) else {}


_filesystems: dict[tuple[Any, ...], Any] = {}


def _filesystem(protocol: str, options: tuple[tuple[str, Any], ...]) -> Any:
    """One fsspec filesystem per process, protocol, options and timeouts (a worker makes its
    own), with the limits' connect and read timeouts unless the options set their own."""
    table = limits.LIMITS
    timeouts = (table.url_connect_timeout_s, table.url_read_timeout_s)
    key = (os.getpid(), protocol, repr(options), timeouts)
    found = _filesystems.get(key)
    if found is None:
        import fsspec

        for other in [k for k in _filesystems if k[0] != key[0]]:
            del _filesystems[other]
        kwargs = _with_timeouts(protocol, dict(options), *timeouts)
        found = _filesystems[key] = fsspec.filesystem(protocol, **kwargs)
    return found


def _with_timeouts(
    protocol: str, options: dict[str, Any], connect: float, read: float
) -> dict[str, Any]:
    """The storage options with connect and read timeouts (aiohttp's for http(s), botocore's
    for S3), unless they set their own."""
    if protocol in _HTTP:
        import aiohttp

        client = dict(options.get("client_kwargs") or {})
        client.setdefault(
            "timeout", aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)
        )
        client["auto_decompress"] = False  # gzip is inflated by the reader, within the limits
        options["client_kwargs"] = client
        options["skip_instance_cache"] = True
    elif protocol in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", connect)
        config.setdefault("read_timeout", read)
        options["config_kwargs"] = config
    return options


# ---------------------------------------------------------------------------------------------
# http(s) requests


class _HttpGet:
    """One GET over http(s), read a chunk at a time within the limits: aiohttp's connect and
    read timeouts, and the time spent waiting on the server within `_allowed` of the bytes
    received so far (a server that drips bytes is cut; a reader that pauses, as the reader of
    a compressed tar does while its workers are busy, is not). Redirects are followed only
    within the URL's origin."""

    def __init__(self, fs: Any, url: str, first: int = 0, end: int | None = None) -> None:
        self.fs = fs
        self.waited = 0.0  # seconds spent waiting on the server
        self.received = 0
        self.response: Any = None
        self.response = self._run(self._open, url, first, end)

    def __enter__(self) -> _HttpGet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def status(self) -> int:
        return int(self.response.status)

    def header(self, name: str) -> str:
        return str(self.response.headers.get(name, ""))

    def read(self, n: int) -> bytes:
        chunk: bytes = self._run(self._read, n)
        self.received += len(chunk)
        return chunk

    def read_up_to(self, n: int) -> bytes:
        parts: list[bytes] = []
        got = 0
        while got < n and (chunk := self.read(n - got)):
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        response, self.response = self.response, None
        if response is not None and not self.fs.loop.is_closed():
            self.fs.loop.call_soon_threadsafe(response.close)

    def _run(self, step: Callable[..., Any], *args: Any) -> Any:
        from fsspec.asyn import sync

        start = time.monotonic()
        try:
            return sync(self.fs.loop, self._paced, step, *args)
        finally:
            self.waited += time.monotonic() - start

    async def _paced(self, step: Callable[..., Any], *args: Any) -> Any:
        import asyncio  # here, as aiohttp: a folder's analysis imports this module, not them

        import aiohttp

        allowed = _allowed(self.received)
        timer = asyncio.timeout(max(0.0, allowed - self.waited))
        try:
            async with timer:
                return await step(*args)
        except UrlError:
            raise
        except TimeoutError as exc:  # ours, or aiohttp's (its timeouts are TimeoutErrors)
            if timer.expired():
                raise UrlError(_too_slow(self.received, allowed)) from None
            raise UrlError(_timed_out(exc)) from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise UrlError(f"cannot fetch: {_remote_error(exc)}") from None

    async def _open(self, url: str, first: int, end: int | None) -> Any:
        import yarl

        session = await self.fs.set_session()
        options = dict(self.fs.kwargs)
        options.pop("allow_redirects", None)
        headers = dict(options.pop("headers", None) or {})
        headers.setdefault("Accept-Encoding", "identity")
        ranged = bool(first) or end is not None
        if ranged:
            headers["Range"] = f"bytes={first}-{'' if end is None else end - 1}"
        target = self.fs.encode_url(url)
        for _ in range(limits.LIMITS.url_max_redirects + 1):
            response = await session.get(target, headers=headers, allow_redirects=False, **options)
            location = response.headers.get("Location")
            if response.status not in _REDIRECTS or location is None:
                break
            response.close()  # its body is never read
            try:
                following = response.url.join(yarl.URL(location))
            except ValueError:
                raise UrlError("redirected to something that is not a URL: not followed") from None
            if _origin(following) != _origin(response.url):
                shown = printable(f"{following.scheme}://{following.host}:{following.port}")
                raise UrlError(f"redirected to another origin ({shown[:200]}): not followed")
            target = following
        else:
            raise UrlError(f"more than {limits.LIMITS.url_max_redirects} redirects: not followed")
        if not 200 <= response.status < 300 and not (ranged and response.status == 416):
            response.close()
            reason = printable(f"HTTP {response.status} {response.reason or ''}".strip())
            raise UrlError(reason[:200])
        return response

    async def _read(self, n: int) -> bytes:
        data: bytes = await self.response.content.read(n)
        return data


def _origin(url: Any) -> tuple[str, str, int | None]:
    return (str(url.scheme).lower(), str(url.host or "").lower(), url.port)


def _timed_out(exc: BaseException) -> str:
    table = limits.LIMITS
    if "onnect" in f"{type(exc).__name__} {exc}":
        return f"no connection within {table.url_connect_timeout_s:g} s (url_connect_timeout_s)"
    return f"the server sent nothing for {table.url_read_timeout_s:g} s (url_read_timeout_s)"


def _http_fetch(fs: Any, url: str, max_bytes: int, over: str) -> bytes:
    """The body at `url`; UrlError `over` past `max_bytes` (a length announced is checked
    before anything is read)."""
    with _HttpGet(fs, url) as got:
        length = got.header("Content-Length")
        announced = decimal(length)
        if announced is not None and announced > max_bytes:
            raise UrlError(over)
        parts: list[bytes] = []
        total = 0
        while chunk := got.read(min(1 << 20, max_bytes + 1 - total)):
            parts.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise UrlError(over)
    return b"".join(parts)


class _HttpStream(io.RawIOBase):
    """An http(s) file read once from its start (a compressed tar), within the limits."""

    def __init__(self, fs: Any, url: str) -> None:
        super().__init__()
        self._get = _HttpGet(fs, url)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._get.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._get.close()
        super().close()


class _HttpRanges(io.RawIOBase):
    """An http(s) file read where asked, one range request a read (a zip, a plain tar)."""

    def __init__(self, fs: Any, url: str) -> None:
        super().__init__()
        self._fs = fs
        self._url = url
        self._pos = 0
        self._size: int | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos}.get(whence)
        position = (self._length() if base is None else base) + offset
        if position < 0:
            raise UrlError("seek before the start of the file")
        self._pos = position
        return position

    def _length(self) -> int:
        if self._size is None:
            with _HttpGet(self._fs, self._url, 0, 1) as got:
                self._size = _total_size(got)
        return self._size

    def readinto(self, buffer: Any) -> int:
        want = len(buffer)
        if not want or (self._size is not None and self._pos >= self._size):
            return 0
        with _HttpGet(self._fs, self._url, self._pos, self._pos + want) as got:
            if got.status == 416:
                return 0
            if got.status != 206 and self._pos:
                raise UrlError("the server answers no range requests (reading this needs them)")
            if self._size is None and (got.status == 206 or self._pos == 0):
                self._size = _total_size(got)
            data = got.read_up_to(want)
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _total_size(got: _HttpGet) -> int:
    """The file's size from a response to a range request: its Content-Range, or the
    Content-Length of a whole answer."""
    total = decimal(got.header("Content-Range").rpartition("/")[2])
    if got.status == 206 and total is not None:
        return total
    length = decimal(got.header("Content-Length"))
    if got.status == 200 and length is not None:
        return length
    raise UrlError("the server gives no size for this file (reading it needs one)")


_A_TAG = re.compile(rb"<a\s([^<>]{0,4096})>", re.IGNORECASE)
_HREF = re.compile(rb"""\bhref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)


def _links(page: bytes) -> Iterator[str]:
    """The targets of a page's `<a href>` links (linear in the page: a tag's attributes are
    looked at only up to 4 KiB)."""
    import html  # here: a folder's analysis imports this module, and never reads a page

    for tag in _A_TAG.finditer(page):
        found = _HREF.search(tag.group(1))
        if found is not None:
            raw = next(group for group in found.groups() if group is not None)
            yield html.unescape(raw.decode("utf-8", "replace")).strip()


def _below(base: str, page: str, link: str) -> tuple[str, str] | None:
    """Where a link of the listing `page` leads: (its URL, its path below `base`, ending in
    '/' for a directory); ("", "") for a link that is not a file of the listing (the page
    itself, a parent, a sort order); None for one that leaves `base` (another origin, a path
    outside, a '..' or an encoded '/' in it)."""
    url = urldefrag(urljoin(page, link))[0]
    target, root = urlsplit(url), urlsplit(base)
    try:
        if _split_origin(target) != _split_origin(root):
            return None
    except ValueError:  # a port that is no number
        return None
    path = target.path or "/"
    page_path = urlsplit(page).path
    if path == page_path.rstrip("/") or (path.endswith("/") and page_path.startswith(path)):
        return ("", "")
    if not path.startswith(root.path):
        return None
    parts = path[len(root.path) :].split("/")
    directory = len(parts) > 1 and parts[-1] == ""
    names = [unquote(part) for part in (parts[:-1] if directory else parts)]
    if any(name in ("", ".", "..") or "/" in name or "\\" in name for name in names):
        return None
    if target.query:
        return ("", "")
    return url, "/".join(names) + ("/" if directory else "")


def _split_origin(url: Any) -> tuple[str, str, int | None]:
    return (url.scheme, url.hostname or "", url.port or {"http": 80, "https": 443}.get(url.scheme))


def _remote_error(exc: BaseException) -> str:
    return printable(f"{type(exc).__name__}: {exc}")[:300]


def _credentials_missing(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        name = type(seen).__name__
        if "Credential" in name or "credentials" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def url_source(url: str, storage_options: dict[str, Any]) -> Source:
    """The source a URL names (a directory-like prefix, a file or an archive), through fsspec."""
    try:
        import fsspec
        import fsspec.core
    except ImportError:
        raise DiscoveryError(
            f"{url}: reading dumps from a URL needs the remote extra ({REMOTE_EXTRA})"
        ) from None
    try:
        fs, path = fsspec.core.url_to_fs(url, **storage_options)
    except ImportError as exc:
        raise DiscoveryError(
            f"{url}: this protocol needs a package that is not installed ({exc});"
            f" {REMOTE_EXTRA} installs the S3 and HTTP ones"
        ) from None
    except (ValueError, TypeError) as exc:
        raise DiscoveryError(f"{url}: not a URL fsspec can open: {exc}") from None
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    options = tuple(sorted(storage_options.items()))
    if "::" not in url and protocol in (*_HTTP, "s3", "s3a"):
        fs = _filesystem(protocol, options)  # the same, with the limits' timeouts
    if protocol in _HTTP and "::" not in url:
        # HTTP has no directories: a page is a listing unless its name says archive. Reading
        # the listing or the archive's first bytes is what tells whether it is there.
        if url.lower().endswith(ARCHIVE_SUFFIXES):
            opener = RemoteFile(url, protocol, path, options)
            kind = archive_kind(opener, printable(url))
            if kind == "zip":
                _check_ranges(fs, path, printable(url))
            return archive_source(kind, opener, printable(url))
        return Remote(url, fs, protocol, path, options)
    try:
        info = fs.info(path, **_deadline(fs, 0))
    except FileNotFoundError:
        raise DiscoveryError(f"{url}: no such directory or archive") from None
    except Exception as exc:  # backends raise anything: credentials, network, permissions
        raise DiscoveryError(_listing_error(url, protocol, exc)) from None
    listing = protocol in _HTTP and not url.lower().endswith(ARCHIVE_SUFFIXES)
    if info.get("type") != "directory" and not listing:
        opener = RemoteFile(url, protocol, path, options)
        kind = archive_kind(opener, url)
        return archive_source(kind, opener, url)
    return Remote(url, fs, protocol, path, options)


def _check_ranges(fs: Any, url: str, label: str) -> None:
    """A zip is read where its directory says: the server must answer range requests."""
    try:
        with _HttpGet(fs, url, 1, 2) as got:
            answered = got.status == 206
    except UrlError as exc:
        raise DiscoveryError(f"{label}: cannot read: {exc}") from None
    if not answered:
        raise DiscoveryError(
            f"{label}: the server answers no range requests, which reading a zip needs"
            " (download it, or pack the dumps as .tar.gz: that is read from its start)"
        )


def _listing_error(url: str, protocol: str, exc: BaseException) -> str:
    if type(exc).__name__ == "FSTimeoutError":
        return f"{url}: cannot list: {_not_within(0)}"
    if _credentials_missing(exc):
        return (
            f"{url}: no credentials for {protocol}:// ({_remote_error(exc)}); set them up as"
            " its SDK expects (for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or"
            " AWS_PROFILE), or pass --storage-option anon=true for a public bucket"
        )
    if isinstance(exc, PermissionError):
        return f"{url}: access denied ({_remote_error(exc)})"
    return f"{url}: cannot list: {_remote_error(exc)}"


def _listed_size(value: Any) -> int:
    """An object's size as a listing gives it (a number, or text from a server's header);
    0, for the reader to find out, when it is none."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return decimal(value) or 0 if isinstance(value, str | bytes) else 0


def info_time_ns(info: dict[str, Any]) -> int | None:
    """An object's modification time from an fsspec listing: `LastModified` (S3), `mtime`
    (most others), `updated` (GCS), as a datetime, a number of seconds or an ISO string."""
    for key in ("LastModified", "mtime", "updated", "last_modified"):
        value = info.get(key)
        if isinstance(value, datetime):
            stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
            return int(stamp.timestamp() * 1e9)
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e11:
            return int(value * 1e9)  # seconds (1e11: year 5138; inf and NaN are no time)
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            stamp = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
            return int(stamp.timestamp() * 1e9)
    return None


class Remote(Source):
    """A directory at a URL: its files below the URL (a link or key that leads out of it is
    never fetched, and the notes count them), each fetched by the worker that reads it."""

    kind = "url"

    def __init__(
        self,
        url: str,
        fs: Any,
        protocol: str,
        path: str,
        options: tuple[tuple[str, Any], ...],
    ) -> None:
        self.url = url
        self.label = printable(url)
        self.fs = fs
        self.protocol = protocol
        self.root = path.rstrip("/")
        self.options = options
        self.outside: list[str] = []  # what the listing named outside the URL, not followed
        self.unlisted: list[str] = []  # subdirectories whose index could not be read

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        """Every file below the URL, problems appended to `problems`."""
        if self.protocol in _HTTP:
            for url, name in self._http_listing():
                yield Listed(name, printable(url), handle=(url, 0, None))
            return
        try:
            found = self.fs.find(self.root, detail=True)
        except Exception as exc:  # credentials, network, permissions
            raise DiscoveryError(_listing_error(self.label, self.protocol, exc)) from None
        for path in sorted(found):
            info = found[path]
            if info.get("type") == "directory":
                continue
            if path == self.root:
                continue
            relative = path[len(self.root) + 1 :] if path.startswith(self.root + "/") else ""
            if not relative or {".", ".."} & set(relative.split("/")):
                self.outside.append(path)
                continue
            size = info.get("size")
            yield Listed(
                relative, self._url(path), handle=(path, _listed_size(size), info_time_ns(info))
            )

    def _http_listing(self) -> list[tuple[str, str]]:
        """The files below the URL: its index page and each subdirectory's, within
        `listing_max_bytes` and `listing_max_pages` in all; (URL, path below it)."""
        table = limits.LIMITS
        base = self.root + "/"
        pending, seen = [base], {base}
        files: dict[str, str] = {}
        left = table.listing_max_bytes
        over = f"over the {table.listing_max_bytes}-byte limit in all (listing_max_bytes)"
        pages = 0
        while pending:
            page = pending.pop()
            pages += 1
            if pages > table.listing_max_pages:
                raise DiscoveryError(
                    f"{self.label}: more than {table.listing_max_pages} index pages"
                    " (listing_max_pages): not listed"
                )
            try:
                body = _http_fetch(self.fs, page, left, f"the listing is {over}")
            except UrlError as exc:
                where = printable(page)
                if page != base and not str(exc).endswith("(listing_max_bytes)"):
                    self.unlisted.append(f"{where}: not listed ({exc})")
                    continue
                if str(exc).startswith("HTTP 404"):
                    raise DiscoveryError(f"{where}: no such directory or archive") from None
                raise DiscoveryError(f"{where}: cannot list: {exc}") from None
            left -= len(body)
            for link in _links(body):
                below = _below(base, page, link)
                if below is None:
                    self.outside.append(link)
                elif below[1].endswith("/"):
                    if below[0] not in seen:
                        seen.add(below[0])
                        pending.append(below[0])
                elif below[1]:
                    files[below[0]] = below[1]
        return sorted(files.items())

    def notes(self) -> list[str]:
        """What the listing passed over (unreadable indexes, links outside the URL), to report."""
        notes = self.unlisted[:10]
        if self.outside:
            count = len(self.outside)
            links = "a link" if count == 1 else f"{count} links"
            notes.append(
                f"{self.label}: {links} in its listing that lead outside it, not followed"
                f" ({printable(self.outside[0])[:200]}{', ...' if count > 1 else ''})"
            )
        return notes

    def _url(self, path: str) -> str:
        if "://" in path:
            return printable(path)
        return printable(f"{self.protocol}://{path}")

    def head(self, item: Listed) -> bytes:
        """The first bytes of a listed file (empty when they cannot be fetched)."""
        path, _, _ = item.handle
        try:
            if self.protocol in _HTTP:
                with _HttpGet(self.fs, path, 0, 16) as got:
                    return got.read_up_to(16)
            data: bytes = self.fs.cat_file(path, start=0, end=16, **_deadline(self.fs, 16))
            return data
        except Exception:  # only means "not sniffed"
            return b""

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        """The rank's file as a `DumpFile` that fetches it when read."""
        path, size, mtime_ns = item.handle
        fetch = UrlFile(item.where, self.protocol, path, self.options, size, mtime_ns)
        return DumpFile(rank, Path(item.name), fetch)

    @property
    def what(self) -> str:
        """The source's kind, as the report names it."""
        return f"{self.protocol} URL, fetched file by file"
