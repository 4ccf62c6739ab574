"""Where the dumps live, and how a source lists and reads its files: the types every source
shares (`Source`, `Listed`, `DumpFile`, `Fetch`) and the local directory. Archives are in
`archives`, URLs in `remote`, and `opening.open_source` picks the source a path or URL names.

Reading happens in the loader's worker processes: a worker reads a zip member, a member of an
uncompressed tar or a remote file itself, so files are fetched in parallel and parsed as they
arrive. A directory lists only what can be a dump of its own: a FIFO, a device, or a link that
leads out of the directory is listed with its reason and never opened.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..common import O_FLAGS, file_kind, printable


class SourceError(Exception):
    """One member of a source cannot be read; the reason, without the member's name."""


class Fetch(Protocol):
    """How a worker reads one file that is not a plain local file (picklable)."""

    @property
    def where(self) -> str:
        """Where the file is, for messages."""

    @property
    def size(self) -> int:
        """The bytes expected (0: unknown), for the worker's limits."""

    def read(self, max_bytes: int) -> bytes:
        """The file's bytes, refused past `max_bytes`."""


@dataclass(frozen=True)
class DumpFile:
    """One rank's dump: a local file (`path`), or a member of another source (`fetch`)."""

    rank: int
    path: Path
    fetch: Fetch | None = None
    trace: DumpFile | None = None  # the rank's Execution Trace, read with its dump (`traces`)
    kineto: DumpFile | None = None  # the rank's Kineto (profiler) trace, beside its Execution Trace
    op_groups: tuple[str | None, ...] = ()  # a gloo trace's ops' groups (`traces.settle_groups`)
    shown: int = 0  # the ranks the source's files show (highest + 1): what a size alone may claim

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
        """Every candidate file, with its problem (`""` if none); source-wide ones in `problems`."""
        raise NotImplementedError

    def head(self, item: Listed) -> bytes:
        """The file's first bytes (for telling dumps from other numbered files), or b""."""
        raise NotImplementedError

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        """The candidate as the dump file of `rank`."""
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
        """Every file under the directory (symlinks to directories not followed)."""

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
        """The file's modification time, to order candidates by."""
        local: _LocalItem = item.handle
        return local.mtime

    def head(self, item: Listed, size: int = 16) -> bytes:
        """The file's first `size` bytes, to sniff its format (`b""` for one never opened)."""
        if item.problem:
            return b""  # never opened: it may lead outside, or block
        path = item.handle.path
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                return b""
            fd = os.open(path, O_FLAGS)
            try:
                return os.read(fd, size)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return b""

    def dump_file(self, rank: int, item: Listed) -> DumpFile:
        """The file as the dump file of `rank` (refused with its reason when it has a problem)."""
        local: _LocalItem = item.handle
        if item.problem:  # reported with its reason, never opened
            return DumpFile(rank, local.path, Refused(item.where, item.problem))
        return DumpFile(rank, local.path)

    def owns(self, path: Path) -> bool:
        """Whether `path` lies inside this directory."""
        return _inside(path, self.path)

    @property
    def what(self) -> str:
        """What kind of source this is, for messages (nothing for a directory)."""
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
            return f"not a regular file ({file_kind(info.st_mode)})", mtime
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


def _inside(path: Path, root: Path) -> bool:
    try:
        target, base = path.resolve(), root.resolve()
    except (OSError, RuntimeError):
        return False
    return target == base or target.is_relative_to(base)


@dataclass(frozen=True)
class Refused:
    """A member that is never read, and why."""

    where: str
    reason: str
    size: int = 0

    def read(self, max_bytes: int) -> bytes:
        """Never the bytes: a SourceError with the reason the file is refused."""
        raise SourceError(self.reason)
