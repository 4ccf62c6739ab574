"""Write output files atomically, and refuse output paths that would touch the user's dumps."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OutputError


def check_output_path(path: Path, dump_dir: Path) -> None:
    """An output must not land inside the dump directory (it would be read as input next time,
    or overwrite a dump)."""
    try:
        target = path.resolve()
        inside = target.is_relative_to(dump_dir.resolve())
    except OSError as exc:
        raise OutputError(f"{path}: cannot resolve output path: {exc}") from None
    if inside:
        raise OutputError(f"{path}: refusing to write inside the dump directory {dump_dir}")
    if target.is_dir():
        raise OutputError(f"{path}: is a directory")


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename: an existing file is replaced only
    when the new one is complete."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
