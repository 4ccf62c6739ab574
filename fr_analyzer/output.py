"""Write output files atomically, and refuse output paths that would touch the user's dumps."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .errors import OutputError


def check_output_path(path: Path, dump_dir: Path) -> None:
    """An output must not land inside the dump directory (it would be read as input next time,
    or overwrite a dump), nor on a file the dump directory links to (a dump kept elsewhere)."""
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
    source = _input_behind(target, root)
    if source is not None:
        raise OutputError(f"{path}: refusing to overwrite an input dump ({source} points to it)")


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
def atomic_writer(path: Path) -> Iterator[IO[bytes]]:
    """A binary stream to a temporary file beside `path`, renamed onto it when the block ends
    without error: an existing file is replaced only when the new one is complete (and keeps
    its permissions); on any error the temporary file is removed."""
    directory = path.parent if str(path.parent) else Path(".")
    mode = _mode_for(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
            os.fchmod(stream.fileno(), mode)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
