"""Write output files atomically, and refuse output paths that would touch the user's dumps."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .dumps.sources import Directory, Source
from .errors import OutputError


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
            raise OutputError(f"{path}: refusing to overwrite the archive the dumps are read from")
        if path.is_dir():
            raise OutputError(f"{path}: is a directory")
        return
    try:
        target = path.resolve()
        root = dump_dir.resolve()
        inside = target == root or target.is_relative_to(root)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise OutputError(f"{path}: cannot resolve output path: {exc}") from None
    if inside:
        raise OutputError(f"{path}: refusing to write inside the dump directory {dump_dir}")
    if target.is_dir():
        raise OutputError(f"{path}: is a directory")
    linked = _input_behind(target, root)
    if linked is not None:
        raise OutputError(f"{path}: refusing to overwrite an input dump ({linked} points to it)")


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
    """The name of a new temporary file beside `path`, renamed onto it (synced, with the
    permissions of the file it replaces) when the block ends without error: an existing file
    is replaced only when the new one is complete; on any error the temporary file is
    removed."""
    directory = path.parent if str(path.parent) else Path(".")
    mode = _mode_for(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        os.close(fd)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDWR)
        try:
            os.fsync(fd)
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
