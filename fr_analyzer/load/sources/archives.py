"""Tar and zip archives read member by member, never extracted, local or remote.

A compressed tar can only be read from its start, so the parent streams it and hands each
member's bytes to a worker (`Streamed`), holding only the few that are queued. Members that an
extraction would get wrong (links, device files, paths with `..` or absolute ones) are never
read; each is reported with its reason, like an unreadable file. Archive members keep the
per-file limits: their size after decompression, and the ratio of a compression bomb, which
costs only its own member (`limits.Limits.tar_bomb_max_bytes` bounds what skipping bombs may
cost in all).

It is over 600 lines because tar (streamed from its start) and zip (read by its directory),
each local or remote and each with its own bomb checks, are one source kind with one
member-safety rule; splitting them would split that rule.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import re
import stat
import struct
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol

from ...errors import DiscoveryError
from ..common import GZIP_MAX_RATIO, GZIP_RATIO_FLOOR, O_FLAGS, printable
from ..safety import limits
from .base import DumpFile, Fetch, Listed, Refused, Source, SourceError

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")
"""Names that say archive."""


def archive_kind(opener: Opener, label: str) -> str:
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
            if not label.lower().endswith(ARCHIVE_SUFFIXES):
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


def archive_source(kind: str, opener: Opener, label: str) -> Source:
    """The source of the archive `opener` opens: a zip, or a tar (`kind`: `tar.<compression>`)."""
    if kind == "zip":
        return ZipArchive(opener, label)
    return TarArchive(opener, label, kind.partition(".")[2])


# ---------------------------------------------------------------------------------------------
# Opening an archive (local or remote), and reading members within the limits


class Opener(Protocol):
    """What opens an archive: a local file, or a URL's bytes."""

    @property
    def name(self) -> str:
        """The archive's name, for messages."""

    def open(self) -> IO[bytes]:
        """The archive opened for random access."""

    def stream(self) -> IO[bytes]:
        """Opened to be read once from the start (a URL without range requests)."""
        ...


@dataclass(frozen=True)
class LocalFile:
    """An archive on the local disk, opened only if it is a regular file."""

    name: str

    def open(self) -> IO[bytes]:
        """The file opened for reading; an OSError if it is not a regular file."""
        fd = os.open(self.name, O_FLAGS)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(0, "not a regular file")
        return open(fd, "rb")

    def stream(self) -> IO[bytes]:
        """The file opened for reading (a local file is read in place either way)."""
        return self.open()


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


def over_limit(size: int, max_bytes: int) -> str:
    """Why a member of `size` bytes is refused under `max_bytes` (`""` if it is not)."""
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


# ---------------------------------------------------------------------------------------------
# zip


@dataclass(frozen=True)
class ZipMember:
    """A member of a zip archive, read from the archive when asked."""

    archive: Opener
    name: str
    where: str
    size: int
    packed: int
    mtime_ns: int | None = None  # the member's modification time: when it was dumped, or later

    def read(self, max_bytes: int) -> bytes:
        """The member's bytes, inflated; a SourceError past the size or ratio limits."""
        if problem := over_limit(self.size, max_bytes):
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
    """A zip archive as a source of dump files."""

    kind = "zip"

    def __init__(self, opener: Opener, label: str) -> None:
        self.opener = opener
        self.label = label

    def listing(self, problems: list[str]) -> Iterator[Listed]:
        """The members, each with its problem (`""` if none); archive-wide ones in `problems`."""
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
        """The member's first bytes, to sniff its format (`b""` when it cannot be read)."""
        try:
            with _zip(self.opener).open(item.handle) as stream:
                return stream.read(16)
        except Exception:  # any failure here only means "not sniffed"
            return b""

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        """The member as the dump file of `rank`, read from the archive when fetched."""
        info: zipfile.ZipInfo = item.handle
        fetch: Fetch
        if item.problem:
            fetch = Refused(item.where, item.problem)
        else:
            fetch = ZipMember(
                self.opener,
                info.filename,
                item.where,
                info.file_size,
                info.compress_size,
                zip_mtime_ns(info),
            )
        return DumpFile(rank, Path(item.name), fetch)

    def owns(self, path: Path) -> bool:
        """Whether `path` is this archive's own file."""
        return isinstance(self.opener, LocalFile) and _same_file(path, Path(self.opener.name))


_UNIX_TIME_FIELD = 0x5455  # "UT": the extended timestamp, seconds since the epoch (UTC)
_DOS_STEP_NS = 2_000_000_000 - 1  # a DOS time is cut to even seconds: the latest it can mean


def zip_mtime_ns(info: zipfile.ZipInfo) -> int | None:
    """A zip member's modification time: its extended (UTC) timestamp when the archiver wrote
    one, else its DOS date and time read as local time and taken as late as it can mean (a
    later time errs towards "stuck"); None when neither is readable."""
    extra = info.extra
    at = 0
    while at + 4 <= len(extra):
        kind, size = struct.unpack_from("<HH", extra, at)
        body = extra[at + 4 : at + 4 + size]
        if kind == _UNIX_TIME_FIELD and len(body) >= 5 and body[0] & 1:
            return int(struct.unpack_from("<i", body, 1)[0]) * 1_000_000_000
        at += 4 + size
    try:
        local = time.mktime((*info.date_time, 0, 0, -1))
    except (OverflowError, ValueError):
        return None
    return int(local) * 1_000_000_000 + _DOS_STEP_NS


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
        with opener.stream() as raw:
            packed = _Counted(raw)
            inflated: IO[bytes] = packed  # type: ignore[assignment]
            meter = packed  # a plain tar: counted, never a bomb
            if self.source.compression:
                unpacked = _DECOMPRESSORS[self.source.compression](
                    io.BufferedReader(packed, buffer_size=1 << 16)
                )
                meter = _Counted(unpacked, packed, limits.LIMITS.tar_bomb_max_bytes)
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
    mtime_ns: int | None = None  # the member's modification time


@dataclass(frozen=True)
class TarMember:
    """A member of an uncompressed tar: read in place, at its offset."""

    archive: Opener
    offset: int
    where: str
    size: int
    mtime_ns: int | None = None  # the member's modification time: when it was dumped, or later

    def read(self, max_bytes: int) -> bytes:
        """The member's bytes, read at its offset; a SourceError past the limit or if truncated."""
        if problem := over_limit(self.size, max_bytes):
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
    mtime_ns: int | None = None  # the member's modification time: when it was dumped, or later

    def read(self, max_bytes: int) -> bytes:
        """The bytes handed over with the task; a SourceError with the reason they could not be."""
        if self.problem:
            raise SourceError(self.problem)
        if problem := over_limit(self.size, max_bytes):
            raise SourceError(problem)
        if self.data is None:
            raise SourceError("not handed over by the archive reader")
        return self.data


class TarArchive(Source):
    """A tar archive (plain or compressed) as a source of dump files."""

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
                item = _TarItem(index, info.offset_data, info.size, head, _mtime_ns(info))
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
        """The member's first bytes, kept when the archive was listed."""
        tar_item: _TarItem = item.handle
        return tar_item.head

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        """The member as the dump file of `rank`: read in place (plain tar) or streamed."""
        tar_item: _TarItem = item.handle
        self.taken.add(item.where)
        fetch: Fetch
        if item.problem:
            fetch = Refused(item.where, item.problem)
        elif self.compression:
            fetch = Streamed(item.where, tar_item.index, tar_item.size, mtime_ns=tar_item.mtime_ns)
        else:
            fetch = TarMember(
                self.opener, tar_item.offset, item.where, tar_item.size, tar_item.mtime_ns
            )
        return DumpFile(rank, Path(item.name), fetch)

    def tasks(self, files: Sequence[DumpFile], max_bytes: int) -> Sequence[DumpFile]:
        """The files as tasks: a compressed tar's read in one pass, in order (`StreamedFiles`)."""
        if not self.compression:
            return files
        return StreamedFiles(self, files, max_bytes)

    def owns(self, path: Path) -> bool:
        """Whether `path` is this archive's own file."""
        return isinstance(self.opener, LocalFile) and _same_file(path, Path(self.opener.name))


def _mtime_ns(info: tarfile.TarInfo) -> int | None:
    """A member's modification time in ns (tar keeps seconds; pax headers, fractions), or
    None when the archive kept none (0: the epoch, as `tar --mtime=@0` or gzip'd sets write)."""
    try:
        seconds = float(info.mtime)
    except (TypeError, ValueError):
        return None
    return int(seconds * 1e9) if seconds > 0 else None


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
        self.archive_source = archive
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
        """Forget the bytes of file `i`: its result is in."""
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
            self._reader = self.archive_source._members()
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
        Streamed(fetch.where, fetch.index, fetch.size, data, problem, fetch.mtime_ns),
    )
