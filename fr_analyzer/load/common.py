"""Limits, names and text helpers shared by the loader modules."""

from __future__ import annotations

import os
import re
import stat
from typing import Any

from ..model.records import State
from .safety.limits import LIMITS

# Limits. Genuine dumps are far inside every one of them. Each is a field of the one table,
# `limits.Limits` (its docstrings say what each bounds); the names below are its values, bound
# once for the modules that read them in their loops.
DEFAULT_MAX_FILE_BYTES = LIMITS.max_file_bytes
MAX_SEQ_ID = LIMITS.max_seq_id
MAX_NUMEL = LIMITS.max_numel
MAX_DURATION_MS = LIMITS.max_duration_ms
MAX_DIMS = LIMITS.max_dims
GZIP_MAX_RATIO = LIMITS.gzip_max_ratio
GZIP_RATIO_FLOOR = LIMITS.gzip_ratio_floor
FAST_SCAN_TUPLES = LIMITS.fast_scan_tuples
MAX_TUPLE_NODES = LIMITS.max_tuple_nodes
EXPANSION_FACTOR = LIMITS.expansion_factor
EXPANSION_FLOOR = LIMITS.expansion_floor
MIN_ENTRY_BYTES = LIMITS.min_entry_bytes
DENSE_FLOOR = LIMITS.dense_floor

NO_TIME = -1
STATES = {
    "scheduled": State.SCHEDULED,
    "started": State.STARTED,
    "completed": State.COMPLETED,
}
"""An entry's `state` text → its `State`."""
INT64_MAX = (1 << 63) - 1
"""The largest int64: a bound on the integers the columns hold."""
O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
"""The flags a dump file is opened with: read-only, never blocking on a FIFO, not inherited."""


_SIZE_RE = re.compile(
    r"\s*([0-9]{1,30})(?:\.([0-9]{1,9}))?\s*([kmgt]?)(?:i?b)?\s*",
    re.IGNORECASE | re.ASCII,
)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """`"512M"` → 536870912: a byte count, or a number with K, M, G or T (powers of 1024)."""
    match = _SIZE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: give bytes, or e.g. 512M or 2G")
    unit = _SIZE_UNITS[match[3].lower()]
    fraction = match[2] or "0"
    value: int = int(match[1]) * unit + int(fraction) * unit // 10 ** len(fraction)
    if value < 1:
        raise ValueError(f"{text!r} is not a size: it must be at least one byte")
    return value


# ---------------------------------------------------------------------------------------------
# Text from dumps


def _escape(text: str) -> str:
    """`text` with every unprintable character (controls, lone surrogates, ...) escaped."""
    return "".join(ch if ch.isprintable() else _escape_char(ch) for ch in text)


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """Safe to print and to encode as UTF-8: unprintable characters are escaped."""
    return text if text.isprintable() else _escape(text)


def short(value: Any, limit: int = 40) -> str:
    """A bounded, printable description of any loaded value, for messages."""
    if isinstance(value, str | bytes | bytearray):
        return repr(value[:limit]) + ("..." if len(value) > limit else "")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value) if -(10**30) < value < 10**30 else f"<{value.bit_length()}-bit integer>"
    if isinstance(value, list | tuple | dict | set | frozenset):
        return f"<{type(value).__name__} of {len(value)} items>"
    return f"<{type(value).__name__}>"


def scalar_text(value: Any) -> str | None:
    """Text for a non-str scalar (bytes, number, bool, None); None for containers."""
    if isinstance(value, bytes | bytearray):
        return printable(bytes(value).decode("utf-8", "replace"))
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return short(value)
    return None


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, from its `st_mode`: "a FIFO", ..."""
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
