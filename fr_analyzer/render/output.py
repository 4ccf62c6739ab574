"""Write outputs atomically, never replacing what is not a regular file, and refuse output
paths that would touch the user's dumps.

Where an output goes depends on what its path names (`destination`):
- a new path or a regular file: a temporary file beside it, renamed onto it once complete;
- a symlink: the same, at the file it points to (the link stays a link);
- `-` and this process's descriptors (`/dev/stdout`, `/dev/fd/N`): written to that descriptor,
  joining its stream (a shell's `>` file is appended to, not replaced);
- a character device (`/dev/null`, a terminal) or a FIFO: written in place, never created,
  truncated or replaced; a FIFO that no process reads is refused rather than waited on;
- a directory, a block device, a socket: refused, with a one-line reason.

A folder of outputs (`--out-dir`) is written whole into a new folder beside it and renamed onto
it (`atomic_folder`): a reader sees the previous set or the new one, never half of one.

Streams get the output once it is complete (a temporary file holds it until then), so a
failure writes nothing anywhere.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import OutputError
from ..load import Directory, Source, file_kind, printable
from ..model.numbers import decimal

STDOUT = "-"
"""The output path that means standard output."""

_DESCRIPTOR_PATHS = re.compile(r"/dev/(?:stdout|stderr|fd/[0-9]+)|/proc/self/fd/[0-9]+")
_NAMED_DESCRIPTORS = {"/dev/stdout": 1, "/dev/stderr": 2}


class How(enum.Enum):
    """How an output reaches its path."""

    REPLACE = "a temporary file beside it, renamed onto it"
    DESCRIPTOR = "streamed to a descriptor this process holds"
    IN_PLACE = "streamed to a device or FIFO, opened as it is"


@dataclass(frozen=True)
class Destination:
    """Where and how one output is written, decided before anything is."""

    path: Path  # where the bytes go (a symlink's target, for REPLACE)
    how: How
    descriptor: int | None = None  # for DESCRIPTOR


def is_stdout(path: Path | None) -> bool:
    """Whether an output path means standard output (`-`, `/dev/stdout`, `/dev/fd/1`)."""
    if path is None:
        return False
    text = str(path)
    return text == STDOUT or _descriptor_of(text) == 1


def _descriptor_of(text: str) -> int | None:
    if not _DESCRIPTOR_PATHS.fullmatch(text):
        return None
    return _NAMED_DESCRIPTORS.get(text) or decimal(text.rsplit("/", 1)[-1])


def destination(path: Path) -> Destination:
    """Where and how an output to `path` is written (see the module docstring): a symlink
    leads to the file it points to; `-` and the names of this process's descriptors
    (`/dev/stdout`, `/dev/fd/N`) write to that descriptor, so the output joins the stream
    (a shell's `>` file, a pipe) rather than replacing it. Raises `OutputError` for a path
    that can take no output."""
    text = str(path)
    descriptor = 1 if text == STDOUT else _descriptor_of(text)
    if descriptor is not None:
        return Destination(path, How.DESCRIPTOR, descriptor)
    try:
        info = os.stat(path)  # follows links
    except FileNotFoundError:
        if os.path.islink(path):  # a link to a file not there yet: created where it points
            return Destination(Path(os.path.realpath(path)), How.REPLACE)
        return Destination(path, How.REPLACE)
    except OSError as exc:
        raise OutputError(f"{_shown(path)}: cannot write: {exc.strerror or exc}") from None
    mode = info.st_mode
    if stat.S_ISREG(mode):
        linked = os.path.islink(path)
        return Destination(Path(os.path.realpath(path)) if linked else path, How.REPLACE)
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return Destination(path, How.IN_PLACE)
    raise OutputError(f"{_shown(path)}: is {file_kind(mode)}: refusing to write there")


def _shown(path: Path) -> str:
    return printable(str(path))


def check_output_path(path: Path, source: Path | Source) -> None:
    """An output must not land inside the dump directory (it would be read as input next time,
    or overwrite a dump), nor on a file the dump directory links to (a dump kept elsewhere),
    nor on the archive the dumps are read from."""
    if isinstance(source, Path):
        dump_dir = source
    elif isinstance(source, Directory):
        dump_dir = source.path
    else:
        if source.owns(path):
            raise OutputError(
                f"{_shown(path)}: refusing to overwrite the archive the dumps are read from"
            )
        destination(path)
        return
    if is_stdout(path) or _descriptor_of(str(path)) is not None:
        return  # a stream this process holds: nothing of the dumps to overwrite
    try:
        target = path.resolve()
        root = dump_dir.resolve()
        inside = target == root or target.is_relative_to(root)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise OutputError(f"{_shown(path)}: cannot resolve output path: {exc}") from None
    if inside:
        raise OutputError(
            f"{_shown(path)}: refusing to write inside the dump directory {_shown(dump_dir)}"
        )
    if destination(path).how != How.REPLACE:
        return  # a device or a FIFO: written in place, nothing replaced
    linked = _input_behind(target, root)
    if linked is not None:
        raise OutputError(
            f"{_shown(path)}: refusing to overwrite an input dump"
            f" ({printable(linked)} points to it)"
        )


def _input_behind(target: Path, root: Path) -> str | None:
    """The entry of the dump directory that is `target` under another name (a symlink to it,
    or a hard link), if any."""
    try:
        info = os.stat(target)
    except OSError:
        return None  # nothing there yet: nothing to overwrite
    same = (info.st_dev, info.st_ino)
    for folder, _dirs, names in os.walk(root):
        for name in names:
            entry = os.path.join(folder, name)
            try:
                found = os.stat(entry)
            except OSError:
                continue
            if (found.st_dev, found.st_ino) == same:
                return entry
    return None


@contextmanager
def atomic_path(path: Path) -> Iterator[str]:
    """The name of a new temporary file that becomes the output at `path` when the block ends
    without error (see the module docstring): beside the file it replaces, renamed onto it
    (synced, with the permissions of the file it replaces), so an existing file is replaced
    only when the new one is complete; or, for a path written in place, streamed there once
    complete. On any error the temporary file is removed and `path` is untouched."""
    where = destination(path)
    if where.how != How.REPLACE:
        with _streamed(path, where) as tmp:
            yield tmp
        return
    target = where.path
    directory = target.parent if str(target.parent) else Path(".")
    mode = _mode_for(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
        os.close(fd)
    except OSError as exc:
        raise OutputError(f"{_shown(path)}: cannot write: {exc.strerror or exc}") from None
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDWR)
        try:
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{_shown(path)}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _streamed(path: Path, where: Destination) -> Iterator[str]:
    """A temporary file (in the system's temporary folder) whose bytes are copied to `path`,
    opened in place (standard output, a device, a FIFO), when the block ends without error."""
    try:
        fd, tmp = tempfile.mkstemp(prefix="fr-analyze.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise OutputError(f"{_shown(path)}: cannot write: {exc.strerror or exc}") from None
    try:
        yield tmp
        with open(tmp, "rb") as source:
            if where.descriptor is not None:
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()  # what this process printed before comes first
                out = os.dup(where.descriptor)  # shares the offset: joins the stream
            else:
                out = _open_in_place(path)
            with open(out, "wb", closefd=True) as sink:
                shutil.copyfileobj(source, sink)
    except OSError as exc:
        raise OutputError(f"{_shown(path)}: cannot write: {exc.strerror or exc}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _open_in_place(path: Path) -> int:
    """A descriptor writing to a device or FIFO as it is: never created, truncated or
    replaced. A FIFO is opened without waiting (no reader: refused), then written to
    blocking."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(
                f"{_shown(path)}: a FIFO that no process is reading: nothing written"
            ) from None
        raise
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    return fd


@contextmanager
def atomic_writer(path: Path) -> Iterator[IO[bytes]]:
    """A binary stream to a new file that replaces `path` when the block ends without error
    (see `atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        yield stream


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (see `atomic_writer`)."""
    with atomic_writer(path) as stream:
        stream.write(data)


def check_folder(path: Path, ours: Iterable[str]) -> None:
    """Refuse, before anything is written, a folder of outputs at `path` that cannot be
    replaced whole: something that is not a folder, or a folder holding anything but the
    files named `ours` (a previous run's), or whose parent does not exist or cannot be
    written. Raises `OutputError` naming the path."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OutputError(f"{_shown(path)}: exists and is not a folder")
    if path.is_dir():
        try:
            others = sorted(p.name for p in path.iterdir() if p.name not in set(ours))
        except OSError as exc:
            raise OutputError(f"{_shown(path)}: cannot read: {exc.strerror or exc}") from None
        if others:
            shown = ", ".join(others[:3]) + (" ..." if len(others) > 3 else "")
            raise OutputError(
                f"{_shown(path)}: holds files fr-analyze did not write ({shown}): it would "
                "replace the folder whole"
            )
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{_shown(path)}: cannot write: no such directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{_shown(path)}: cannot write: permission denied in {parent}")


@contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """A new, empty folder beside `path` to write outputs into; when the block ends without
    error it becomes `path` (the folder there before, checked by `check_folder`, is removed
    once the new one is in place). On any error the new folder is removed and `path` is
    untouched."""
    parent = path.parent if str(path.parent) else Path(".")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise OutputError(f"{_shown(path)}: cannot write: {exc.strerror or exc}") from None
    old: Path | None = None
    try:
        yield staging
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=parent))
            os.replace(path, old)  # onto the empty folder just made: a rename of folders
        os.replace(staging, path)
    except OSError as exc:
        if old is not None and not path.exists():
            os.replace(old, path)  # the previous set back where it was
            old = None
        shutil.rmtree(staging, ignore_errors=True)
        raise OutputError(f"{_shown(path)}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _mode_for(path: Path) -> int:
    """The permissions of the file being replaced, else what a plain open() would give."""
    try:
        info = os.stat(path)
        if stat.S_ISREG(info.st_mode):
            return stat.S_IMODE(info.st_mode)
    except OSError:
        pass
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
