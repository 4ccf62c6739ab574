"""Python stacks beside the dumps: where each rank's threads were when the snapshot was taken.

PyTorch's debug server writes every rank's stacks into one text file, a section per rank
(`=== Rank 3: http://host:port/handler/dump_traceback? ===`): `stacks.txt` in a folder saved by
`fr-analyze live`, `stacks_<YYYYmmdd_HHMMSS>.txt` and `pyspy_dump_<...>.txt` in the debug
server's `dump_dir`. A section holds Python's faulthandler layout (`Thread 0x... (most recent
call first):` then `  File "x.py", line 12 in f`) or py-spy's (`Thread 123 (idle): "MainThread"`
then `    f (x.py:12)`). The newest such file at the top of the dump folder is read; its text
is untrusted, so every line is made printable and cut, and the file's size is bounded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ...model.numbers import decimal
from ..common import printable
from ..safety.limits import LIMITS

MAX_BYTES = LIMITS.stacks_max_bytes
"""A stacks file larger than this is not read (`Limits.stacks_max_bytes`)."""
MAX_FRAMES = 12
"""Frames kept per thread, innermost first."""
MAX_THREADS = 8
"""Threads kept per rank: those with Python frames, in the order the file lists them."""
_FILE = re.compile(r"(?:stacks|pyspy_dump)(?:_(\d{8})_(\d{6}))?\.txt")
_SECTION = re.compile(r"^=== Rank ([0-9]{1,7})\b[^\n]*===\s*$")
_THREAD = re.compile(r"^(?:Current thread|Thread) ")
_FAULTHANDLER_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')
_PYSPY_FRAME = re.compile(r"^\s+(\S.*) \((.*):(\d+)\)\s*$")


@dataclass(frozen=True)
class PyThread:
    """One thread of a rank: its heading and its frames, innermost first."""

    name: str
    frames: tuple[str, ...]  # "file:line in function"


@dataclass(frozen=True)
class PythonStacks:
    """Every rank's Python threads from one stacks file."""

    file: str
    by_rank: dict[int, tuple[PyThread, ...]]


def find(folder: Path) -> PythonStacks | None:
    """The newest stacks file at the top of `folder` (by the time in its name, then its own
    modification time), parsed; None when there is none or it holds no rank section."""
    try:
        named = [p for p in folder.iterdir() if _FILE.fullmatch(p.name) and p.is_file()]
    except OSError:
        return None
    if not named:
        return None

    def newest(p: Path) -> tuple[str, float]:
        m = _FILE.fullmatch(p.name)
        stamp = f"{m[1]}{m[2]}" if m is not None and m[1] else "~"  # no time: the live layout
        try:
            return stamp, p.stat().st_mtime
        except OSError:
            return stamp, 0.0

    path = max(named, key=newest)
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    by_rank = parse(text)
    return PythonStacks(printable(str(path)), by_rank) if by_rank else None


def parse(text: str) -> dict[int, tuple[PyThread, ...]]:
    """The rank sections of a stacks file: each rank's threads that have Python frames."""
    sections: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        head = _SECTION.match(line)
        if head is not None:
            current = sections.setdefault(decimal(head[1]) or 0, [])
            continue
        if current is not None:
            current.append(line)
    return {rank: threads for rank, lines in sections.items() if (threads := _threads(lines))}


def _threads(lines: list[str]) -> tuple[PyThread, ...]:
    found: list[PyThread] = []
    name = ""
    frames: list[str] = []

    def close() -> None:
        if frames and len(found) < MAX_THREADS:
            found.append(PyThread(name, tuple(frames[:MAX_FRAMES])))

    for line in lines:
        if _THREAD.match(line):
            close()
            name, frames = _clean(line.rstrip(":").strip()), []
            continue
        fh = _FAULTHANDLER_FRAME.match(line)
        if fh is not None:
            frames.append(_clean(f"{fh[1]}:{fh[2]} in {fh[3]}"))
            continue
        spy = _PYSPY_FRAME.match(line)
        if spy is not None:
            frames.append(_clean(f"{spy[2]}:{spy[3]} in {spy[1]}"))
    close()
    return tuple(found)


def _clean(text: str) -> str:
    return printable(text)[:300]
