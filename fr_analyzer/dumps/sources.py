"""Where the dumps live: a local directory, a tar or zip archive read member by member (never
extracted), or an fsspec URL (`s3://`, `gs://`, `https://`, ...). A source lists its files for
discovery, and says how each one is read.

Reading happens in the loader's worker processes: a worker reads a zip member, a member of an
uncompressed tar or a remote file itself, so files are fetched in parallel and parsed as they
arrive. A compressed tar can only be read from its start, so the parent streams it and hands
each member's bytes to a worker (`Streamed`), holding only the few that are queued. Members
that an extraction would get wrong (links, device files, paths with `..` or absolute ones) are
never read; each is reported with its reason, like an unreadable file. Archive members keep
the per-file limits: their size after decompression, and the ratio of a compression bomb.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol

from ..errors import DiscoveryError
from .common import _O_FLAGS, GZIP_MAX_RATIO, GZIP_RATIO_FLOOR, printable


class SourceError(Exception):
    """One member of a source cannot be read; the reason, without the member's name."""


class Fetch(Protocol):
    """How a worker reads one file that is not a plain local file (picklable)."""

    @property
    def where(self) -> str: ...

    @property
    def size(self) -> int: ...  # bytes expected (0: unknown), for the worker's limits

    def read(self, max_bytes: int) -> bytes: ...


@dataclass(frozen=True)
class DumpFile:
    """One rank's dump: a local file (`path`), or a member of another source (`fetch`)."""

    rank: int
    path: Path
    fetch: Fetch | None = None

    @property
    def where(self) -> str:
        """The name messages give it: the path, or the archive and member, or the URL."""
        return self.fetch.where if self.fetch is not None else str(self.path)


@dataclass(frozen=True)
class Listed:
    """One file of a source: its path inside the source ('/'-separated), the name messages
    give it, and why it cannot be read ('' when it can)."""

    name: str
    where: str
    problem: str = ""
    handle: Any = None  # the source's own: a local Path, a tar or zip member, a remote path


class Source:
    """A place that holds dump files. Subclasses list them and make their `DumpFile`s."""

    label: str  # what the user gave, as messages show it
    kind: str  # "directory", "tar", "tar.gz", "zip", "url", ...

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        raise NotImplementedError

    def head(self, item: Listed) -> bytes:
        """The file's first bytes (for telling dumps from other numbered files), or b""."""
        raise NotImplementedError

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        raise NotImplementedError

    def tasks(self, files: Sequence[DumpFile], max_bytes: int) -> Sequence[DumpFile]:
        """The files in the order the loader should read them (see `Streamed`)."""
        return files

    def owns(self, path: Path) -> bool:
        """Whether writing to `path` would touch this source (an output must not)."""
        return False

    def notes(self) -> list[str]:
        """Warnings about the listing (read after `listing`): an archive read only in part."""
        return []

    @property
    def what(self) -> str:
        """What the source is, for the report's header ("" for a plain directory)."""
        return f"{self.kind} archive, read member by member"


# ---------------------------------------------------------------------------------------------
# Choosing the source

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|[A-Za-z][A-Za-z0-9+.-]*::", re.ASCII)
_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")


def open_source(text: str, storage_options: dict[str, Any] | None = None) -> Source:
    """The source `text` names: a local directory or archive, or a URL (fsspec)."""
    if text.startswith("file://") and "::" not in text:
        text = text[len("file://") :] or "/"
    elif _URL.match(text):
        return _url_source(text, storage_options or {})
    path = Path(text)
    if path.is_dir():
        return Directory(path)
    if not path.exists():
        raise DiscoveryError(f"{text}: no such directory or archive")
    kind = _archive_kind(LocalFile(str(path)), text)
    return _archive(kind, LocalFile(str(path)), text)


def _archive_kind(opener: Opener, label: str) -> str:
    """The archive's kind from its first bytes: zip, tar or tar.<compression> (gz, bz2, xz);
    anything else is an error."""
    try:
        with opener.open() as stream:
            head = stream.read(512)
    except OSError as exc:
        raise DiscoveryError(f"{label}: cannot read: {exc.strerror or exc}") from None
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    for magic, name in _COMPRESSIONS:
        if head.startswith(magic):
            if name == "zst":
                raise DiscoveryError(
                    f"{label}: a zstd-compressed file; decompress it first (zstd -d), or pack"
                    " the dumps as .tar.gz or .zip"
                )
            if not label.lower().endswith(_ARCHIVE_SUFFIXES):
                break  # gzip data with no archive suffix: most likely one dump
            return f"tar.{name}"
    if head[257:262] == b"ustar":
        return "tar"
    raise DiscoveryError(
        f"{label}: not a directory, nor a .tar, .tar.gz, .tgz or .zip archive"
        " (pass the directory that holds the per-rank dumps)"
    )


_COMPRESSIONS = (
    (b"\x1f\x8b", "gz"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zst"),
)
_DECOMPRESSORS: dict[str, Callable[[IO[bytes]], io.BufferedIOBase]] = {
    "gz": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    "bz2": lambda raw: bz2.BZ2File(raw, mode="rb"),
    "xz": lambda raw: lzma.LZMAFile(raw, mode="rb"),  # noqa: SIM115 (closed with the archive)
}


def _archive(kind: str, opener: Opener, label: str) -> Source:
    if kind == "zip":
        return ZipArchive(opener, label)
    return TarArchive(opener, label, kind.partition(".")[2])


# ---------------------------------------------------------------------------------------------
# A local directory


class Directory(Source):
    kind = "directory"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = str(path)

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        # os.walk does not follow directory symlinks, so symlink loops cannot trap us.
        # Directories that cannot be listed are reported, not silently skipped.
        def onerror(exc: OSError) -> None:
            problems.append(f"{exc.filename} (cannot list: {exc.strerror or exc})")

        for root, dirs, names in os.walk(self.path, onerror=onerror):
            dirs.sort()
            for name in sorted(names):
                path = Path(root) / name
                yield Listed(name, str(path), handle=path)

    def head(self, item: Listed) -> bytes:
        path = item.handle
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                return b""
            fd = os.open(path, _O_FLAGS)
            try:
                return os.read(fd, 16)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return b""

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        return DumpFile(rank, item.handle)

    def owns(self, path: Path) -> bool:
        return _inside(path, self.path)

    @property
    def what(self) -> str:
        return ""


def _inside(path: Path, root: Path) -> bool:
    try:
        target, base = path.resolve(), root.resolve()
    except (OSError, RuntimeError):
        return False
    return target == base or target.is_relative_to(base)


# ---------------------------------------------------------------------------------------------
# Opening an archive (local or remote), and reading members within the limits


class Opener(Protocol):
    @property
    def name(self) -> str: ...

    def open(self) -> IO[bytes]: ...


@dataclass(frozen=True)
class LocalFile:
    name: str

    def open(self) -> IO[bytes]:
        fd = os.open(self.name, _O_FLAGS)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(0, "not a regular file")
        return open(fd, "rb")


def _member_problem(name: str, is_file: bool, link: str | None, what: str) -> str:
    """Why a member is never read, or ""."""
    if link is not None:
        return f"a link in the archive (to {printable(link[:200])}): not followed"
    if not is_file:
        return f"{what}, not a regular file: not read"
    parts = PurePosixPath(name).parts
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "an absolute member path (it would be written outside the archive): not read"
    if ".." in parts or ".." in name.split("\\"):
        return "a member path with '..' (it would be written outside the archive): not read"
    return ""


def _over_limit(size: int, max_bytes: int) -> str:
    return (
        f"member is {size} bytes, over the {max_bytes}-byte limit (see --max-file-size)"
        if size > max_bytes
        else ""
    )


def _read_bounded(stream: IO[bytes], max_bytes: int, packed: int = 0) -> bytes:
    """At most `max_bytes` from `stream`; with `packed` (its compressed size), stop at a ratio
    no real dump reaches."""
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(min(1 << 20, max_bytes + 1 - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise SourceError(
                f"member inflates to over the {max_bytes}-byte limit (see --max-file-size)"
            )
        if packed and total > GZIP_RATIO_FLOOR and total > GZIP_MAX_RATIO * packed:
            raise SourceError(
                f"compression bomb: {packed} compressed bytes inflate to over {total} bytes"
                f" (more than {GZIP_MAX_RATIO}x)"
            )
    return b"".join(parts)


@dataclass(frozen=True)
class Refused:
    """A member that is never read, and why."""

    where: str
    reason: str
    size: int = 0

    def read(self, max_bytes: int) -> bytes:
        raise SourceError(self.reason)


# ---------------------------------------------------------------------------------------------
# zip


@dataclass(frozen=True)
class ZipMember:
    archive: Opener
    name: str
    where: str
    size: int
    packed: int

    def read(self, max_bytes: int) -> bytes:
        if problem := _over_limit(self.size, max_bytes):
            raise SourceError(problem)
        if self.size > GZIP_RATIO_FLOOR and self.size > GZIP_MAX_RATIO * max(self.packed, 1):
            raise SourceError(
                f"compression bomb: {self.packed} compressed bytes inflate to {self.size}"
                f" bytes (more than {GZIP_MAX_RATIO}x)"
            )
        try:
            with _zip(self.archive).open(self.name) as stream:
                return _read_bounded(stream, max_bytes, self.packed)
        except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as exc:
            raise SourceError(f"cannot read from the zip archive: {exc}") from None
        except NotImplementedError as exc:  # a compression method zipfile lacks
            raise SourceError(f"cannot read from the zip archive: {exc}") from None


_zips: dict[tuple[int, str], zipfile.ZipFile] = {}
"""Open archives by (process, name): a worker opens its own (a forked copy of the parent's
would share its file offset with every other worker)."""


def _zip(opener: Opener) -> zipfile.ZipFile:
    key = (os.getpid(), opener.name)
    found = _zips.get(key)
    if found is None:
        for other in [k for k in _zips if k[0] != key[0]]:
            del _zips[other]  # inherited from the parent: never used here
        found = _zips[key] = zipfile.ZipFile(opener.open())
    return found


class ZipArchive(Source):
    kind = "zip"

    def __init__(self, opener: Opener, label: str) -> None:
        self.opener = opener
        self.label = label

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        try:
            with self.opener.open() as stream, zipfile.ZipFile(stream) as archive:
                infos = archive.infolist()
        except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:
            raise DiscoveryError(f"{self.label}: not a readable zip archive: {exc}") from None
        for info in infos:
            if info.is_dir():
                continue
            kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when no Unix mode is recorded
            link = "(link)" if kind == stat.S_IFLNK else None
            special = kind not in (0, stat.S_IFREG, stat.S_IFLNK)
            problem = _member_problem(info.filename, not special, link, "a special file")
            if not problem and info.flag_bits & 0x1:
                problem = "an encrypted member: not read"
            where = f"{self.label}:{printable(info.filename)}"
            yield Listed(info.filename, where, problem, info)

    def head(self, item: Listed) -> bytes:
        try:
            with _zip(self.opener).open(item.handle) as stream:
                return stream.read(16)
        except Exception:  # any failure here only means "not sniffed"
            return b""

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        info: zipfile.ZipInfo = item.handle
        fetch: Fetch
        if item.problem:
            fetch = Refused(item.where, item.problem)
        else:
            fetch = ZipMember(
                self.opener, info.filename, item.where, info.file_size, info.compress_size
            )
        return DumpFile(rank, Path(item.name), fetch)

    def owns(self, path: Path) -> bool:
        return isinstance(self.opener, LocalFile) and _same_file(path, Path(self.opener.name))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


# ---------------------------------------------------------------------------------------------
# tar


class _Counted(io.RawIOBase):
    """A stream that counts what is read through it; with `packed`, the stream whose count is
    the compressed size, it refuses to go past the ratio of a compression bomb."""

    def __init__(
        self, stream: IO[bytes] | io.BufferedIOBase, packed: _Counted | None = None
    ) -> None:
        self.stream = stream
        self.packed = packed
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.stream.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.count += n
        packed = self.packed
        if packed is not None and self.count > max(GZIP_RATIO_FLOOR, GZIP_MAX_RATIO * packed.count):
            raise _Bomb(packed.count, self.count)
        return n


class _Bomb(Exception):
    def __init__(self, packed: int, inflated: int) -> None:
        super().__init__(
            f"compression bomb: {packed} compressed bytes inflate to over {inflated} bytes"
            f" (more than {GZIP_MAX_RATIO}x)"
        )


@dataclass(frozen=True)
class _TarItem:
    index: int  # position among the archive's members
    offset: int  # where its data starts in the (uncompressed) archive
    size: int
    head: bytes


@dataclass(frozen=True)
class TarMember:
    """A member of an uncompressed tar: read in place, at its offset."""

    archive: Opener
    offset: int
    where: str
    size: int

    def read(self, max_bytes: int) -> bytes:
        if problem := _over_limit(self.size, max_bytes):
            raise SourceError(problem)
        try:
            with self.archive.open() as stream:
                stream.seek(self.offset)
                data = stream.read(self.size)
        except OSError as exc:
            raise SourceError(f"cannot read from the tar archive: {exc.strerror or exc}") from None
        if len(data) != self.size:
            raise SourceError("the tar archive ends inside this member (truncated?)")
        return data


@dataclass(frozen=True)
class Streamed:
    """A member of a compressed tar: the parent reads the archive in order and hands each
    member's bytes over with the task (`data`), or why it could not (`problem`)."""

    where: str
    index: int
    size: int
    data: bytes | None = None
    problem: str = ""

    def read(self, max_bytes: int) -> bytes:
        if self.problem:
            raise SourceError(self.problem)
        if problem := _over_limit(self.size, max_bytes):
            raise SourceError(problem)
        if self.data is None:
            raise SourceError("not handed over by the archive reader")
        return self.data


class TarArchive(Source):
    def __init__(self, opener: Opener, label: str, compression: str) -> None:
        self.opener = opener
        self.label = label
        self.compression = compression  # "" for a plain tar
        self.kind = f"tar.{compression}" if compression else "tar"
        self.stopped = ""  # why the listing stopped early (a bomb, a broken archive)

    def _members(self) -> Iterator[tuple[tarfile.TarFile, int, tarfile.TarInfo]]:
        """Every member in archive order, with the open archive (stream mode: each member's
        data can be read only until the next is asked for)."""
        opened = self.opener.stream() if isinstance(self.opener, RemoteFile) else None
        with opened or self.opener.open() as raw:
            packed = _Counted(raw)
            inflated: IO[bytes] = packed  # type: ignore[assignment]
            if self.compression:
                unpacked = _DECOMPRESSORS[self.compression](
                    io.BufferedReader(packed, buffer_size=1 << 16)
                )
                inflated = io.BufferedReader(_Counted(unpacked, packed), 1 << 16)
            with tarfile.open(fileobj=inflated, mode="r|") as archive:
                for index, info in enumerate(archive):
                    yield archive, index, info

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        last = ""
        try:
            for archive, index, info in self._members():
                last = info.name
                if info.isdir():
                    continue
                link = info.linkname if (info.issym() or info.islnk()) else None
                problem = _member_problem(info.name, info.isreg(), link, _tar_kind(info))
                head = b""
                if not problem:
                    stream = archive.extractfile(info)
                    head = stream.read(16) if stream is not None else b""
                item = _TarItem(index, info.offset_data, info.size, head)
                yield Listed(info.name, f"{self.label}:{printable(info.name)}", problem, item)
        except _Bomb as exc:
            self.stopped = f"{self._at(last)}: {exc}"
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            self.stopped = f"{self._at(last)}: broken archive ({printable(str(exc))[:200]})"

    def _at(self, member: str) -> str:
        where = f" at member {printable(member[:200])}" if member else ""
        return f"{self.label}: read stopped{where} (members after it are not read)"

    def notes(self) -> list[str]:
        return [self.stopped] if self.stopped else []

    def head(self, item: Listed) -> bytes:
        tar_item: _TarItem = item.handle
        return tar_item.head

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        tar_item: _TarItem = item.handle
        fetch: Fetch
        if item.problem:
            fetch = Refused(item.where, item.problem)
        elif self.compression:
            fetch = Streamed(item.where, tar_item.index, tar_item.size)
        else:
            fetch = TarMember(self.opener, tar_item.offset, item.where, tar_item.size)
        return DumpFile(rank, Path(item.name), fetch)

    def tasks(self, files: Sequence[DumpFile], max_bytes: int) -> Sequence[DumpFile]:
        if not self.compression:
            return files
        return StreamedFiles(self, files, max_bytes)

    def owns(self, path: Path) -> bool:
        return isinstance(self.opener, LocalFile) and _same_file(path, Path(self.opener.name))


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.ischr():
        return "a character device"
    if info.isblk():
        return "a block device"
    if info.isfifo():
        return "a FIFO"
    return "a special member"


class StreamedFiles(Sequence[DumpFile]):
    """The files of a compressed tar in archive order, each with its bytes read when the
    loader first asks for it; `release(i)` drops them once its result is in. The loader asks
    in order (and again, for files queued to a worker that died, before they are released), so
    the archive is read once, and only the files queued to workers are held."""

    def __init__(self, archive: TarArchive, files: Sequence[DumpFile], max_bytes: int) -> None:
        self._archive = archive
        self._max_bytes = max_bytes
        self._files = sorted(files, key=lambda f: _index(f))
        self._wanted = {_index(f): i for i, f in enumerate(self._files)}
        self._held: dict[int, DumpFile] = {}
        self._members: Iterator[tuple[tarfile.TarFile, int, tarfile.TarInfo]] | None = None
        self._next = 0  # files up to here have been read (or found unreadable)
        self._stopped = ""

    def __len__(self) -> int:
        return len(self._files)

    def __getitem__(self, i: int) -> DumpFile:  # type: ignore[override]
        if i < 0 or i >= len(self._files):
            raise IndexError(i)
        while self._next <= i:
            self._read_next()
        return self._held.get(i) or self._files[i]  # released: its result is already in

    def release(self, i: int) -> None:
        self._held.pop(i, None)

    def _read_next(self) -> None:
        """Read the archive up to the next wanted file, and hold it with its bytes."""
        position = self._next
        original = self._files[position]
        self._next += 1
        assert original.fetch is not None
        fetch = original.fetch
        if not isinstance(fetch, Streamed):  # refused from the listing on
            self._held[position] = original
            return
        if self._stopped:
            self._held[position] = _with(original, fetch, problem=self._stopped)
            return
        if self._members is None:
            self._members = self._archive._members()
        try:
            for archive, index, info in self._members:
                if index != fetch.index:
                    continue
                if info.size > self._max_bytes:
                    self._held[position] = _with(original, fetch)  # refused by its size
                    return
                stream = archive.extractfile(info)
                data = stream.read() if stream is not None else b""
                self._held[position] = _with(original, fetch, data=data)
                return
            self._stopped = "the archive ended before this member (changed since listed?)"
        except _Bomb as exc:
            self._stopped = f"not read: the archive stopped being read before it ({exc})"
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            self._stopped = f"not read: the archive is broken before it ({exc})"
        self._held[position] = _with(original, fetch, problem=self._stopped)


def _index(dump_file: DumpFile) -> int:
    fetch = dump_file.fetch
    return fetch.index if isinstance(fetch, Streamed) else -1


def _with(
    dump_file: DumpFile, fetch: Streamed, data: bytes | None = None, problem: str = ""
) -> DumpFile:
    return DumpFile(
        dump_file.rank,
        dump_file.path,
        Streamed(fetch.where, fetch.index, fetch.size, data, problem),
    )


# ---------------------------------------------------------------------------------------------
# URLs (fsspec)

REMOTE_EXTRA = "pip install 'fr-analyze[remote]'"


@dataclass(frozen=True)
class RemoteFile:
    """An archive at a URL, opened through fsspec (random access by range requests)."""

    name: str  # the URL
    protocol: str
    path: str
    options: tuple[tuple[str, Any], ...]

    def open(self) -> IO[bytes]:
        fs = _filesystem(self.protocol, self.options)
        stream: IO[bytes] = fs.open(self.path, "rb")
        return stream

    def stream(self) -> IO[bytes]:
        """Opened to be read once from the start (over HTTP, with no range requests)."""
        if self.protocol not in ("http", "https"):
            return self.open()
        fs = _filesystem(self.protocol, self.options)
        stream: IO[bytes] = fs.open(self.path, "rb", block_size=0)
        return stream


@dataclass(frozen=True)
class UrlFile:
    """One remote file, fetched by the worker that reads it."""

    where: str
    protocol: str
    path: str
    options: tuple[tuple[str, Any], ...]
    size: int

    def read(self, max_bytes: int) -> bytes:
        if problem := _over_limit(self.size, max_bytes):
            raise SourceError(problem.replace("member", "file", 1))
        try:
            fs = _filesystem(self.protocol, self.options)
            if self.size:
                data: bytes = fs.cat_file(self.path)
            else:
                with fs.open(self.path, "rb") as stream:
                    data = stream.read(max_bytes + 1)
        except Exception as exc:  # fsspec and its backends raise anything
            raise SourceError(f"cannot fetch: {_remote_error(exc)}") from None
        if len(data) > max_bytes:
            raise SourceError(f"file is over the {max_bytes}-byte limit (see --max-file-size)")
        return data


_filesystems: dict[tuple[int, str, tuple[tuple[str, Any], ...]], Any] = {}


def _filesystem(protocol: str, options: tuple[tuple[str, Any], ...]) -> Any:
    """One fsspec filesystem per process, protocol and options (a worker makes its own)."""
    key = (os.getpid(), protocol, options)
    found = _filesystems.get(key)
    if found is None:
        import fsspec

        for other in [k for k in _filesystems if k[0] != key[0]]:
            del _filesystems[other]
        found = _filesystems[key] = fsspec.filesystem(protocol, **dict(options))
    return found


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


def _url_source(url: str, storage_options: dict[str, Any]) -> Source:
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
    try:
        info = fs.info(path)
    except FileNotFoundError:
        raise DiscoveryError(f"{url}: no such directory or archive") from None
    except Exception as exc:  # backends raise anything: credentials, network, permissions
        raise DiscoveryError(_listing_error(url, protocol, exc)) from None
    # HTTP has no directories: a page is a listing unless its name says archive.
    listing = protocol in ("http", "https") and not url.lower().endswith(_ARCHIVE_SUFFIXES)
    if info.get("type") != "directory" and not listing:
        opener = RemoteFile(url, protocol, path, options)
        kind = _archive_kind(opener, url)
        return _archive(kind, opener, url)
    return Remote(url, fs, protocol, path, options)


def _listing_error(url: str, protocol: str, exc: BaseException) -> str:
    if _credentials_missing(exc):
        return (
            f"{url}: no credentials for {protocol}:// ({_remote_error(exc)}); set them up as"
            " its SDK expects (for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or"
            " AWS_PROFILE), or pass --storage-option anon=true for a public bucket"
        )
    if isinstance(exc, PermissionError):
        return f"{url}: access denied ({_remote_error(exc)})"
    return f"{url}: cannot list: {_remote_error(exc)}"


class Remote(Source):
    kind = "url"

    def __init__(
        self,
        url: str,
        fs: Any,
        protocol: str,
        path: str,
        options: tuple[tuple[str, Any], ...],
    ) -> None:
        self.label = url
        self.fs = fs
        self.protocol = protocol
        self.root = path.rstrip("/")
        self.options = options

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        try:
            found = self.fs.find(self.root, detail=True)
        except Exception as exc:  # credentials, network, permissions
            raise DiscoveryError(_listing_error(self.label, self.protocol, exc)) from None
        for path in sorted(found):
            info = found[path]
            if info.get("type") == "directory":
                continue
            relative = path[len(self.root) :].lstrip("/") if path.startswith(self.root) else path
            name = relative or path.rsplit("/", 1)[-1]
            size = info.get("size")
            yield Listed(name, self._url(path), handle=(path, int(size or 0)))

    def _url(self, path: str) -> str:
        if "://" in path:
            return printable(path)
        return printable(f"{self.protocol}://{path}")

    def head(self, item: Listed) -> bytes:
        path, _ = item.handle
        try:
            data: bytes = self.fs.cat_file(path, start=0, end=16)
            return data
        except Exception:  # only means "not sniffed"
            return b""

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        path, size = item.handle
        fetch = UrlFile(item.where, self.protocol, path, self.options, size)
        return DumpFile(rank, Path(item.name), fetch)

    @property
    def what(self) -> str:
        return f"{self.protocol} URL, fetched file by file"
