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

import asyncio
import bz2
import errno
import gzip
import html
import io
import lzma
import os
import re
import stat
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from ..errors import DiscoveryError
from . import limits
from .common import _O_FLAGS, GZIP_MAX_RATIO, GZIP_RATIO_FLOOR, printable
from .limits import LIMITS


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
    """A local directory, searched recursively. Nothing outside it is read: a link that leads
    out of it (or nowhere) is listed with that problem, and so is a file that is no regular
    file (a FIFO, a device, a socket) or that cannot be read, so that none of them is opened."""

    kind = "directory"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = printable(str(path))

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        # os.walk does not follow directory symlinks, so symlink loops cannot trap us.
        # Directories that cannot be listed are reported, not silently skipped.
        def onerror(exc: OSError) -> None:
            problems.append(printable(f"{exc.filename} (cannot list: {exc.strerror or exc})"))

        try:
            real = Path(os.path.realpath(self.path))
        except (OSError, ValueError):
            real = self.path
        for root, dirs, names in os.walk(self.path, onerror=onerror):
            dirs.sort()
            for name in sorted(names):
                path = Path(root) / name
                problem, mtime = _local_problem(path, real)
                relative = path.relative_to(self.path).as_posix()
                yield Listed(relative, printable(str(path)), problem, _LocalItem(path, mtime))

    def recency(self, item: Listed) -> float:
        local: _LocalItem = item.handle
        return local.mtime

    def head(self, item: Listed) -> bytes:
        if item.problem:
            return b""  # never opened: it may lead outside, or block
        path = item.handle.path
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
        local: _LocalItem = item.handle
        if item.problem:  # reported with its reason, never opened
            return DumpFile(rank, local.path, Refused(item.where, item.problem))
        return DumpFile(rank, local.path)

    def owns(self, path: Path) -> bool:
        return _inside(path, self.path)

    @property
    def what(self) -> str:
        return ""


@dataclass(frozen=True)
class _LocalItem:
    path: Path
    mtime: float  # when it was last modified (0 when unknown), for choosing between two


def _local_problem(path: Path, root: Path) -> tuple[str, float]:
    """Why the file at `path` is never read ("" when it can be), and its modification time.
    A link is followed only when it leads to a file inside `root` (the directory, resolved);
    nothing is opened here."""
    try:
        info = os.lstat(path)
        mtime, target = info.st_mtime, None
        if stat.S_ISLNK(info.st_mode):
            target = Path(os.path.realpath(path, strict=True))
            info = os.stat(target)
        if not stat.S_ISREG(info.st_mode):  # the words the reader would give
            return f"not a regular file ({_local_kind(info.st_mode)})", mtime
        if target is not None and not (target == root or target.is_relative_to(root)):
            return "a link to outside the dump directory: not read", mtime
        if not os.access(path, os.R_OK):
            return f"cannot read: {os.strerror(errno.EACCES)}", mtime
        return "", mtime
    except (OSError, ValueError) as exc:  # a broken link, a loop of links, ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"cannot read: {printable(reason)[:200]}", 0.0
    except RuntimeError:  # a loop of links, as older Pythons report it
        return "cannot read: a loop of symbolic links", 0.0


def _local_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "a special file"


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
    """A stream that counts what is read through it. With `packed` (the stream whose count is
    the compressed size) it measures each member of the tar read through it apart, from its
    header on (`member`): a member whose data inflates past the ratio of a compression bomb
    is a bomb, skipped by inflating it while all bombs together stay within `budget` bytes;
    past that, or when bytes outside any member's data (headers) inflate so, `_Bomb` stops the
    reading."""

    def __init__(
        self,
        stream: IO[bytes] | io.BufferedIOBase,
        packed: _Counted | None = None,
        budget: int = 0,
    ) -> None:
        self.stream = stream
        self.packed = packed
        self.budget = budget
        self.count = 0
        self.start = self.start_packed = 0  # the counts where the current member began
        self.data_end = 0  # the count where its data ends
        self.size = 0  # its data's size
        self.bombed = 0  # bytes inflated by the bombs before it
        self.bomb = False  # whether it inflates like a bomb (so far)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.stream.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.count += n
        if self.packed is not None:
            self._measure(self.packed)
        return n

    def _measure(self, packed: _Counted) -> None:
        inflated = self.count - self.start
        if inflated <= max(GZIP_RATIO_FLOOR, GZIP_MAX_RATIO * (packed.count - self.start_packed)):
            return
        if self.count > self.data_end + GZIP_RATIO_FLOOR:  # not a member's data: cannot skip
            raise _Bomb(
                f"compression bomb: inflates more than {GZIP_MAX_RATIO}x, to over {inflated}"
                " bytes outside any member's data"
            )
        self.bomb = True
        if self.bombed + inflated > self.budget:
            raise _Bomb(
                f"{self.why()}; skipping it would inflate bombs past the {self.budget}-byte"
                " limit of a compressed tar (tar_bomb_max_bytes)",
                in_member=True,
            )

    def why(self) -> str:
        """Why the current member is a bomb ("" while it is not)."""
        if not self.bomb:
            return ""
        return f"compression bomb: inflates more than {GZIP_MAX_RATIO}x, to {self.size} bytes"

    def member(self, data_end: int, size: int) -> str:
        """A member begins (its header read), its data of `size` bytes ending at `data_end`;
        why the one before it was a bomb ("" when it was not)."""
        why = self.why()
        if why:
            self.bombed += self.count - self.start
        self.start, self.start_packed = self.count, self.packed.count if self.packed else 0
        self.data_end, self.size, self.bomb = data_end, size, False
        return why


class _Bomb(Exception):
    """The reading of a compressed tar stops here (`in_member`: in a member that is a bomb)."""

    def __init__(self, reason: str, in_member: bool = False) -> None:
        super().__init__(reason)
        self.in_member = in_member


class _Members:
    """A tar read once from its start: its members in archive order, each with the open
    archive (stream mode: a member's data can be read only until the next is asked for).
    Once the reading is past a member that inflated like a bomb, `bombs` says why, by index."""

    def __init__(self, source: TarArchive) -> None:
        self.source = source
        self.bombs: dict[int, str] = {}
        self.meter: _Counted | None = None

    def __iter__(self) -> Iterator[tuple[tarfile.TarFile, int, tarfile.TarInfo]]:
        opener = self.source.opener
        opened = opener.stream() if isinstance(opener, RemoteFile) else None
        with opened or opener.open() as raw:
            packed = _Counted(raw)
            inflated: IO[bytes] = packed  # type: ignore[assignment]
            meter = packed  # a plain tar: counted, never a bomb
            if self.source.compression:
                unpacked = _DECOMPRESSORS[self.source.compression](
                    io.BufferedReader(packed, buffer_size=1 << 16)
                )
                meter = _Counted(unpacked, packed, LIMITS.tar_bomb_max_bytes)
                inflated = io.BufferedReader(meter, 1 << 16)
            self.meter = meter
            index = -1
            try:
                with tarfile.open(fileobj=inflated, mode="r|") as archive:
                    for index, info in enumerate(archive):
                        blocks = -(-info.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
                        self._settle(index - 1, meter.member(info.offset_data + blocks, info.size))
                        yield archive, index, info
                    self._settle(index, meter.member(meter.count, 0))
            except _Bomb as exc:
                if exc.in_member and index >= 0:
                    self.bombs[index] = str(exc)
                raise

    def _settle(self, index: int, why: str) -> None:
        if why and index >= 0:
            self.bombs[index] = why

    def bomb(self) -> str:
        """Why the current member is a bomb, so far ("" while it is not)."""
        return self.meter.why() if self.meter is not None else ""


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
        self.bombs: dict[str, str] = {}  # members that inflated like a bomb, and why
        self.taken: set[str] = set()  # members made rank files (they report their own bomb)

    def _members(self) -> _Members:
        """Every member in archive order, with the open archive (see `_Members`)."""
        return _Members(self)

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        """Every member; one that inflates like a bomb is listed with that problem, once the
        reading is past it (so each is listed after the next header is read)."""
        self.stopped, self.bombs, self.taken = "", {}, set()
        members = self._members()
        last = ""
        held: tuple[int, Listed] | None = None
        try:
            for archive, index, info in members:
                if held is not None:
                    yield self._settled(*held, members.bombs)
                    held = None
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
                where = f"{self.label}:{printable(info.name)}"
                held = (index, Listed(info.name, where, problem, item))
        except _Bomb as exc:
            self.stopped = f"{self._at(last)}: {exc}"
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            self.stopped = f"{self._at(last)}: broken archive ({printable(str(exc))[:200]})"
        if held is not None:
            final = self._settled(*held, members.bombs)
            if self.stopped:  # the reading stopped in it: not skipped, `stopped` says why
                self.bombs.pop(final.where, None)
            yield final

    def _settled(self, index: int, item: Listed, bombs: dict[int, str]) -> Listed:
        why = bombs.get(index, "")
        if not why or item.problem:
            return item
        self.bombs[item.where] = why
        return Listed(item.name, item.where, why, item.handle)

    def _at(self, member: str) -> str:
        where = f" at member {printable(member[:200])}" if member else ""
        return f"{self.label}: read stopped{where} (members after it are not read)"

    def notes(self) -> list[str]:
        """The bombs skipped (those that are no rank's file: a rank's is reported as its
        reason; read after `dump_file`), and why the reading stopped early."""
        skipped = [f"{w} skipped: {why}" for w, why in self.bombs.items() if w not in self.taken]
        return skipped + ([self.stopped] if self.stopped else [])

    def head(self, item: Listed) -> bytes:
        tar_item: _TarItem = item.handle
        return tar_item.head

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        tar_item: _TarItem = item.handle
        self.taken.add(item.where)
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
        self._reader: _Members | None = None
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
        if self._reader is None or self._members is None:
            self._reader = self._archive._members()
            self._members = iter(self._reader)
        try:
            for archive, index, info in self._members:
                if index != fetch.index:
                    continue
                if info.size > self._max_bytes:
                    self._held[position] = _with(original, fetch)  # refused by its size
                    return
                stream = archive.extractfile(info)
                data = stream.read() if stream is not None else b""
                if why := self._reader.bomb():  # changed since it was listed
                    self._held[position] = _with(original, fetch, problem=why)
                    return
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
#
# Every http(s) request is made here, with the fsspec filesystem's aiohttp session (so its
# storage options still apply: headers, auth, client_kwargs) on fsspec's event loop, within
# the limits (`limits.Limits`): aiohttp's connect and read timeouts, a pace that cuts a server
# dripping bytes, a cap on what a listing may hold, and redirects followed only within the
# URL's origin (scheme, host and port). A listing's links are followed only below the URL.

REMOTE_EXTRA = "pip install 'fr-analyze[remote]'"
_HTTP = ("http", "https")
_REDIRECTS = frozenset((301, 302, 303, 307, 308))
_MOST_REDIRECTS = 10


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

    def read(self, max_bytes: int) -> bytes:
        if problem := _over_limit(self.size, max_bytes):
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
        for _ in range(_MOST_REDIRECTS + 1):
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
            raise UrlError(f"more than {_MOST_REDIRECTS} redirects: not followed")
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
        if length.isdigit() and int(length) > max_bytes:
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
    total = got.header("Content-Range").rpartition("/")[2]
    if got.status == 206 and total.isdigit():
        return int(total)
    length = got.header("Content-Length")
    if got.status == 200 and length.isdigit():
        return int(length)
    raise UrlError("the server gives no size for this file (reading it needs one)")


_A_TAG = re.compile(rb"<a\s([^<>]{0,4096})>", re.IGNORECASE)
_HREF = re.compile(rb"""\bhref\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))""", re.IGNORECASE)


def _links(page: bytes) -> Iterator[str]:
    """The targets of a page's `<a href>` links (linear in the page: a tag's attributes are
    looked at only up to 4 KiB)."""
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
    if "::" not in url and protocol in (*_HTTP, "s3", "s3a"):
        fs = _filesystem(protocol, options)  # the same, with the limits' timeouts
    if protocol in _HTTP and "::" not in url:
        # HTTP has no directories: a page is a listing unless its name says archive. Reading
        # the listing or the archive's first bytes is what tells whether it is there.
        if url.lower().endswith(_ARCHIVE_SUFFIXES):
            opener = RemoteFile(url, protocol, path, options)
            kind = _archive_kind(opener, printable(url))
            if kind == "zip":
                _check_ranges(fs, path, printable(url))
            return _archive(kind, opener, printable(url))
        return Remote(url, fs, protocol, path, options)
    try:
        info = fs.info(path, **_deadline(fs, 0))
    except FileNotFoundError:
        raise DiscoveryError(f"{url}: no such directory or archive") from None
    except Exception as exc:  # backends raise anything: credentials, network, permissions
        raise DiscoveryError(_listing_error(url, protocol, exc)) from None
    listing = protocol in _HTTP and not url.lower().endswith(_ARCHIVE_SUFFIXES)
    if info.get("type") != "directory" and not listing:
        opener = RemoteFile(url, protocol, path, options)
        kind = _archive_kind(opener, url)
        return _archive(kind, opener, url)
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
        if self.protocol in _HTTP:
            for url, name in self._http_listing():
                yield Listed(name, printable(url), handle=(url, 0))
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
            yield Listed(relative, self._url(path), handle=(path, int(size or 0)))

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
        path, _ = item.handle
        try:
            if self.protocol in _HTTP:
                with _HttpGet(self.fs, path, 0, 16) as got:
                    return got.read_up_to(16)
            data: bytes = self.fs.cat_file(path, start=0, end=16, **_deadline(self.fs, 16))
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
