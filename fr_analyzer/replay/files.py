"""The files a replay writes in `--out` (the plan, the logs, the results, `stop`, the Flight
Recorder folder), written without following links.

`--out` may be a shared folder where someone else planted `plan.json` as a link to a file of
yours: every folder is opened with `O_NOFOLLOW` and every name is written under its folder's
descriptor, a new file created with `O_EXCL` and renamed over its name (a rename replaces a
link, it never writes through it). `check_out` refuses, in one line, an `--out` that is a link
or holds one where the replay writes, before anything is started.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputError

PLAN_FILE = "plan.json"
LOGS = "logs"
FR_FOLDER = "fr"
STOP = "stop"
"""Written by the runner when every rank has ended or is done and one failed: no rank is left
in an op for whom the others should stay."""
RESULT = "result_{rank}.json"
FR_FILE = "rank_{rank}.pkl"
PARTIAL = ".partial"

_OURS = re.compile(r"plan(_\d+)?\.json|result_\d+\.json|logs|fr|stop|.*\.partial")
"""The names a replay writes at the top of `--out`: a link at one of them is refused."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def check_out(out: Path) -> None:
    """Refuse an `--out` that is a link, or holds a link where the replay writes (its own names
    at the top, anything in `logs/` and `fr/`)."""
    if out.is_symlink():
        raise OutputError(f"--out {out}: a symbolic link; give the folder itself")
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputError(f"--out {out}: not a folder")
    for entry in _entries(out):
        inside = entry.name in (LOGS, FR_FOLDER) and not entry.is_symlink() and entry.is_dir()
        for found in [entry, *(_entries(Path(entry.path)) if inside else [])]:
            if found.is_symlink() and (found is not entry or _OURS.fullmatch(found.name)):
                raise OutputError(
                    f"{found.path}: a symbolic link where the replay writes; remove it or give "
                    "another --out (a replay never writes through a link)"
                )


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as found:
            return list(found)
    except OSError as exc:
        raise OutputError(f"--out {folder}: cannot be read: {exc.strerror}") from None


@contextmanager
def folder(path: Path, create: bool = True) -> Iterator[int]:
    """A descriptor of the folder `path` (made if missing, with its parents), never a link."""
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{path}: cannot be made: {exc.strerror}") from None
        _make(path, None, path)
    with _held(_open_dir(path, None, str(path))) as fd:
        yield fd


@contextmanager
def subfolder(parent: int, name: str, shown: Path) -> Iterator[int]:
    """A descriptor of the folder `name` under the descriptor `parent` (made if missing)."""
    _make(name, parent, shown)
    with _held(_open_dir(name, parent, str(shown))) as fd:
        yield fd


def _make(name: str | Path, parent: int | None, shown: Path) -> None:
    """Make the folder `name` (under the descriptor `parent`), unless it is there."""
    try:
        os.mkdir(name, dir_fd=parent)
    except FileExistsError:
        pass
    except OSError as exc:
        raise OutputError(f"{shown}: cannot be made: {exc.strerror}") from None


@contextmanager
def _held(fd: int) -> Iterator[int]:
    """`fd`, closed when the block ends."""
    try:
        yield fd
    finally:
        os.close(fd)


def _open_dir(name: str | Path, parent: int | None, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OutputError(
                f"{shown}: a symbolic link or not a folder; a replay never writes through a link"
            ) from None
        raise OutputError(f"{shown}: cannot be opened: {exc.strerror}") from None


def create(parent: int, name: str, shown: Path) -> int:
    """A new, empty file `name` under `parent`, open for writing: whatever was at that name (a
    file of an earlier run, a link, a hard link to another file) is removed, not written."""
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise OutputError(f"{shown}: cannot be replaced: {exc.strerror}") from None
    try:
        return os.open(name, _NEW_FLAGS, 0o644, dir_fd=parent)
    except OSError as exc:
        raise OutputError(f"{shown}: cannot be written: {exc.strerror}") from None


def write(parent: int, name: str, data: bytes, shown: Path) -> None:
    """`data` as the file `name` under `parent`, whole or not at all: written to a new file
    beside it, then renamed over it."""
    partial = f"{name}.{os.getpid()}{PARTIAL}"
    fd = create(parent, partial, shown)
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(partial, name, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as exc:
        raise OutputError(f"{shown}: cannot be written: {exc.strerror}") from None


def ensure(parent: Path, name: str) -> Path:
    """The folder `name` in the folder `parent` (made if missing), neither of them a link."""
    with folder(parent, create=False) as fd, subfolder(fd, name, parent / name):
        return parent / name


def write_in(folder_path: Path, name: str, data: bytes) -> Path:
    """`write` into the folder `folder_path` (made if missing); the path written."""
    with folder(folder_path) as fd:
        write(fd, name, data, folder_path / name)
    return folder_path / name


def read(path: Path) -> bytes:
    """The bytes of `path`, a regular file and not a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as stream:
        return stream.read()
