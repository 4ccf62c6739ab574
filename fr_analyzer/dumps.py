"""Find per-rank dump files, load them safely, and turn each into compact columns.

Each rank's file is read (pickle through an unpickler that refuses every global, or JSON), its
format quirks normalized (tuple vs list, `0` vs None timestamps, string sequence ids, dtype as a
bare string, `nccl_version` vs `comm_lib_version`), and its entries turned into numpy columns of
integer codes with small per-rank string/shape/stack tables. Ranks load in worker processes that
send back only the columns. `merge()` then re-codes every rank's tables into global ones and
concatenates the columns into one `EntryTable` that the matcher joins on.

Hostile input is expected. Only regular files are opened; a file over `max_bytes` (or gzip data
that inflates past it, or past `GZIP_MAX_RATIO` times its compressed size) is refused. Before a
pickle is unpickled, `_scan_pickle` walks its opcodes (runs of plain opcodes are skipped by one
regular expression, so a genuine dump costs a fraction of its load time) and refuses memo
indices that would make the unpickler allocate gigabytes from a few bytes; tuples that could
be nested deeply or shared (a deep or exponential hash when used as a dict key) are checked
exactly by `_check_tuples`. Normalization reads each list once however often a pickle refers
to it, counts the items it would expand to and refuses a file whose entries expand far beyond
its size. Every string taken from a dump is made printable (control characters, lone
surrogates). A problem with one entry skips that entry; a problem with the file makes the rank
unreadable, with a reason; nothing raises past `load_rank`.
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import math
import operator
import os
import pickle
import pickletools
import re
import stat
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import DiscoveryError, DumpError
from .model import ANY_SOURCE, Frame, P2PKind, Stack, State, UnitKind, UnreadableDump
from .ranks import MAX_RANK

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
B = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]

# Limits. Genuine dumps are far inside every one of them.
DEFAULT_MAX_FILE_BYTES = 1 << 30
"""Largest rank file read, counted after gunzip (`--max-file-size`)."""
MAX_SEQ_ID = 1 << 62
"""Largest sequence id: a per-group counter never gets near it."""
MAX_NUMEL = 1 << 40
"""Largest number of elements in one tensor shape (2**40 elements is terabytes)."""
MAX_DURATION_MS = 1e10
"""Longest duration believed (115 days); longer, negative or NaN durations count as unknown."""
MAX_DIMS = 64
"""Most dimensions in one tensor shape."""
GZIP_MAX_RATIO = 500
"""Refuse gzip data that inflates more than this many times (dumps compress about 5-30x)..."""
GZIP_RATIO_FLOOR = 32 << 20
"""...once it has produced this many bytes."""
FAST_SCAN_TUPLES = 20_000
"""Pickles with more tuples than this (a genuine one has one per entry) get the exact check."""
MAX_TUPLE_NODES = 10_000
"""Most tuples one tuple may hold, counted through nesting and repeats (hashing visits each)."""
EXPANSION_FACTOR = 4
EXPANSION_FLOOR = 1 << 20
"""A file's entries may expand to at most FACTOR x its bytes + FLOOR items (entries, shapes,
dimensions, dtypes, frames). Every item costs at least one byte unless the pickle refers to one
list many times, so only such repetition (a memo bomb) gets near the limit."""
MIN_ENTRY_BYTES = 16
DENSE_FLOOR = 10_000
"""More entries than max(DENSE_FLOOR, bytes / MIN_ENTRY_BYTES) cannot be real entries."""

NO_TIME = -1
MARKER_OPS = frozenset({"coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"})
P2P_OPS = frozenset({"send", "recv"})
KNOWN_BACKENDS = frozenset(
    {"nccl", "ncclx", "gloo", "xccl", "rccl", "hccl", "mccl", "nccl2", "c10d", "ucc", "mpi"}
)
KNOWN_OPS = (
    MARKER_OPS
    | P2P_OPS
    | frozenset(
        {
            "all_reduce",
            "allreduce",
            "allreduce_coalesced",
            "all_reduce_coalesced",
            "all_reduce_barrier",
            "all_reduce_sparse",
            "barrier",
            "monitored_barrier",
            "broadcast",
            "_broadcast_oop",
            "reduce",
            "_reduce_oop",
            "all_gather",
            "allgather",
            "_all_gather_base",
            "all_gather_into_tensor",
            "all_gather_into_tensor_coalesced",
            "allgather_into_tensor_coalesced",
            "allgather_coalesced",
            "reduce_scatter",
            "_reduce_scatter_base",
            "reduce_scatter_tensor",
            "reduce_scatter_tensor_coalesced",
            "gather",
            "scatter",
            "all_to_all",
            "all_to_all_single",
            "alltoall",
            "alltoall_base",
            "recvAnysource",
        }
    )
)
_STATES = {"scheduled": State.SCHEDULED, "started": State.STARTED, "completed": State.COMPLETED}
_INT64_MAX = (1 << 63) - 1
_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


_SIZE_RE = re.compile(r"\s*([0-9]{1,30})(?:\.([0-9]{1,9}))?\s*([kmgt]?)(?:i?b)?\s*", re.I | re.A)
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


def _short(value: Any, limit: int = 40) -> str:
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


def _scalar_text(value: Any) -> str | None:
    """Text for a non-str scalar (bytes, number, bool, None); None for containers."""
    if isinstance(value, bytes | bytearray):
        return printable(bytes(value).decode("utf-8", "replace"))
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return _short(value)
    return None


# ---------------------------------------------------------------------------------------------
# Discovery


@dataclass(frozen=True)
class DumpFile:
    rank: int
    path: Path


@dataclass(frozen=True)
class Discovery:
    files: tuple[DumpFile, ...]
    ignored: tuple[str, ...]  # files that look like rank dumps but are not of the chosen set


_NAME_RE = re.compile(
    r"(?P<stem>.*?)(?P<rank>[0-9]+)(?P<suffix>\.(?:pkl|pickle|json))?(?:\.gz)?", re.S | re.A
)
_KNOWN_PREFIXES = ("comm_lib_trace_rank_", "nccl_trace_rank_", "fr_trace_rank_", "rank_")


def _family(stem: str) -> str:
    """Files of one dump set share a family: a known prefix, or the stem with digits folded."""
    for known in _KNOWN_PREFIXES:
        if stem.startswith(known):
            return known
    return re.sub(r"[0-9]+", "#", stem)


def _walk(directory: Path, problems: list[str]) -> Iterator[Path]:
    # os.walk does not follow directory symlinks, so symlink loops cannot trap us. Directories
    # that cannot be listed are reported, not silently skipped.
    def onerror(exc: OSError) -> None:
        problems.append(f"{exc.filename} (cannot list: {exc.strerror or exc})")

    for root, dirs, names in os.walk(directory, onerror=onerror):
        dirs.sort()
        for name in sorted(names):
            yield Path(root) / name


def _rank_of(digits: str) -> int | None:
    """The rank a file name's trailing digits give; None when absurd (beyond MAX_RANK)."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(MAX_RANK)):
        return None
    value = int(significant or "0")
    return value if value <= MAX_RANK else None


def _looks_like_dump(path: Path) -> bool:
    """Whether a file starts like a pickle (protocol 2+), a JSON object or gzip data."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        fd = os.open(path, _O_FLAGS)
        try:
            head = os.read(fd, 16)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return head[:1] in (b"\x80", b"{") or head[:2] == b"\x1f\x8b"


def discover(directory: Path, prefix: str | None = None) -> Discovery:
    """One file per rank under `directory` (recursively); a second file for a rank is an error."""
    if not directory.is_dir():
        raise DiscoveryError(f"{directory}: not a directory")
    candidates: dict[str, list[DumpFile]] = {}
    ignored: list[str] = []
    for path in _walk(directory, ignored):
        name = path.name
        if prefix is not None:
            if not name.startswith(prefix):
                ignored.append(str(path))
                continue
            match = _NAME_RE.fullmatch(name[len(prefix) :])
            if match is None or match["stem"]:
                ignored.append(str(path))
                continue
            family = prefix
        else:
            match = _NAME_RE.fullmatch(name)
            if match is None:
                continue  # no rank number: notes, logs and the like are not candidates
            family = _family(match["stem"])
        rank = _rank_of(match["rank"])
        if rank is None:
            ignored.append(str(path))  # a "rank" beyond any job: not a rank file
            continue
        candidates.setdefault(family, []).append(DumpFile(rank, path))
    if not candidates:
        hint = f" starting with {prefix!r}" if prefix else ""
        raise DiscoveryError(f"{directory}: no rank dump files{hint} found")
    family, files = _choose_family(candidates)
    for other, rest in candidates.items():
        if other != family:
            ignored.extend(str(f.path) for f in rest)
    by_rank: dict[int, DumpFile] = {}
    for dump_file in files:
        seen = by_rank.get(dump_file.rank)
        if seen is not None:
            raise DiscoveryError(
                f"two dump files for rank {dump_file.rank}: {seen.path} and {dump_file.path}"
                " (remove one, or choose with -p/--prefix)"
            )
        by_rank[dump_file.rank] = dump_file
    return Discovery(tuple(by_rank[r] for r in sorted(by_rank)), tuple(sorted(ignored)))


def _choose_family(candidates: dict[str, list[DumpFile]]) -> tuple[str, list[DumpFile]]:
    """The dump set: a known prefix first, then a family whose files start like dumps (so that
    thousands of unrelated numbered files do not win), then the largest family."""

    def base(item: tuple[str, list[DumpFile]]) -> tuple[bool, int, str]:
        return (item[0] in _KNOWN_PREFIXES, len(item[1]), item[0])

    ordered = sorted(candidates.items(), key=base, reverse=True)
    if len(ordered) == 1:
        return ordered[0]
    sniffed = {
        family: any(_looks_like_dump(f.path) for f in files[:3]) for family, files in ordered[:20]
    }
    return max(ordered, key=lambda item: (base(item)[0], sniffed.get(item[0], False), base(item)))


# ---------------------------------------------------------------------------------------------
# Safe reading


class NoGlobalsUnpickler(pickle.Unpickler):
    """Genuine dumps hold only builtin containers and scalars, so every global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"refused to load global {printable(module[:80])}.{printable(name[:80])}"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


@dataclass
class _Raw:
    """A loaded file: the object, how many bytes it was parsed from, and notes for warnings."""

    obj: Any
    nbytes: int
    notes: list[str]


def read_raw(path: Path, rank: int | None, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Any:
    """Bytes of one file → the dump object, refusing globals; errors name the file and rank."""
    return _read(path, rank, max_bytes).obj


def _read(path: Path, rank: int | None, max_bytes: int) -> _Raw:
    where = printable(str(path))
    data = _read_bytes(path, where, rank, max_bytes)
    if not data:
        raise DumpError(where, rank, "empty file")
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, where, rank, max_bytes)
        if not data:
            raise DumpError(where, rank, "empty file (after gunzip)")
        if data[:2] == b"\x1f\x8b":
            raise DumpError(where, rank, "gzip data inside gzip data: decompress it first")
    for magic, kind in _OTHER_FORMATS:
        if data.startswith(magic):
            raise DumpError(where, rank, f"{kind} data, not a dump (only gzip is read)")
    notes: list[str] = []
    head = data[:64].removeprefix(b"\xef\xbb\xbf").lstrip()[:1]
    if head in (b"{", b"["):
        return _Raw(_load_json(data, where, rank, notes), len(data), notes)
    reason, exact = _scan_pickle(data)
    if reason is None and exact:
        reason = _check_tuples(data)
    if reason is not None:
        raise DumpError(where, rank, reason)
    return _Raw(_unpickle(data, where, rank), len(data), notes)


_OTHER_FORMATS = (
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"BZh", "bzip2-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    (b"\x04\x22\x4d\x18", "lz4-compressed"),
    (b"PK\x03\x04", "zip"),
)


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _read_bytes(path: Path, where: str, rank: int | None, max_bytes: int) -> bytes:
    """At most `max_bytes` of a regular file; FIFOs, devices and sockets are never opened."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise DumpError(where, rank, f"not a regular file ({_file_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            raise DumpError(
                where,
                rank,
                f"file is {info.st_size} bytes, over the {max_bytes}-byte limit"
                " (see --max-file-size)",
            )
        with open(os.open(path, _O_FLAGS), "rb", buffering=0) as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):  # replaced between stat and open
                raise DumpError(where, rank, f"not a regular file ({_file_kind(info.st_mode)})")
            parts: list[bytes] = []
            total, want = 0, min(info.st_size, max_bytes) + 1
            while total <= max_bytes:
                chunk = stream.read(min(want, max_bytes + 1 - total))
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
                want = 1 << 20
    except OSError as exc:
        raise DumpError(where, rank, f"cannot read: {exc.strerror or exc}") from None
    if total > max_bytes:
        raise DumpError(
            where, rank, f"file is over the {max_bytes}-byte limit (see --max-file-size)"
        )
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _gunzip(data: bytes, where: str, rank: int | None, max_bytes: int) -> bytes:
    """Inflate gzip data (every member) in steps, stopping at the size limit or at a ratio no
    real dump reaches (a gzip bomb)."""
    source = io.BytesIO(data)
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=source) as stream:
            while chunk := stream.read(1 << 20):
                out += chunk
                if len(out) > max_bytes:
                    raise DumpError(
                        where,
                        rank,
                        f"gzip data inflates to over the {max_bytes}-byte limit"
                        " (see --max-file-size)",
                    )
                if len(out) > GZIP_RATIO_FLOOR and len(out) > GZIP_MAX_RATIO * source.tell():
                    raise DumpError(
                        where,
                        rank,
                        f"gzip bomb: {source.tell()} compressed bytes inflate to over"
                        f" {len(out)} bytes (more than {GZIP_MAX_RATIO}x)",
                    )
    except (OSError, EOFError, zlib.error) as exc:
        raise DumpError(where, rank, f"bad gzip data: {printable(str(exc))[:200]}") from None
    return bytes(out)


def _load_json(data: bytes, where: str, rank: int | None, notes: list[str]) -> Any:
    try:
        try:
            return json.loads(data)
        except UnicodeDecodeError:
            notes.append("bytes that are not UTF-8 were replaced")
            return json.loads(data.decode("utf-8", "replace"))
    except RecursionError:
        raise DumpError(where, rank, "malformed JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        what = _text_head(data) if exc.pos < 8 else None
        reason = f"looks like text ({what})" if what else printable(str(exc))[:200]
        raise DumpError(where, rank, f"malformed JSON: {reason}") from None
    except ValueError as exc:
        raise DumpError(where, rank, f"malformed JSON: {printable(str(exc))[:200]}") from None


def _unpickle(data: bytes, where: str, rank: int | None) -> Any:
    was_enabled = gc.isenabled()
    gc.disable()  # building millions of small containers is much faster without GC passes
    try:
        return NoGlobalsUnpickler(io.BytesIO(data)).load()
    except EOFError:
        raise DumpError(where, rank, "pickle data was truncated") from None
    except MemoryError:
        raise DumpError(where, rank, "pickle needs more memory than available") from None
    except RecursionError:
        raise DumpError(where, rank, "not a valid dump pickle: nested too deeply") from None
    except (
        pickle.UnpicklingError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        OverflowError,
    ) as exc:
        raise DumpError(
            where, rank, f"not a valid dump pickle: {_pickle_error(exc, data)}"
        ) from None
    finally:
        if was_enabled:
            gc.enable()


def _pickle_error(exc: Exception, data: bytes) -> str:
    """The unpickler's complaint, or what the file looks like when it is plainly text."""
    text = printable(str(exc))[:200]
    if data[:1] != b"\x80" and not text.startswith("refused"):
        head = _text_head(data)
        if head:
            return f"looks like text, not a pickle ({head})"
    return text


def _text_head(data: bytes) -> str | None:
    """The first line, quoted and cut short, when a file starts as plain text."""
    try:
        head = data[:200].decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < 196:  # not just a character cut at the end
            return None
        head = data[: exc.start].decode("utf-8")
    lines = head.strip().splitlines()
    if lines and all(ch.isprintable() or ch in "\t\r\n" for ch in head):
        return _short(lines[0])
    return None


# Opcode scan. Opcodes whose argument has a fixed size and that neither build tuples nor share
# them are skipped in runs by one regular expression; the rest are looked at one by one.
_OPS = {ord(op.code): op for op in pickletools.opcodes}
_TUPLE_OPS = frozenset(b"\x85\x86\x87t")
_SHARING_OPS = frozenset(b"201\x8f\x90\x91")  # DUP, POP, POP_MARK, EMPTY_SET, ADDITEMS, FROZENSET
_MEMO_PUTS = frozenset(b"qrp\x94")  # BINPUT, LONG_BINPUT, PUT, MEMOIZE
_STOP, _FRAME, _LONG_BINPUT, _PUT = ord("."), 0x95, ord("r"), ord("p")
_NEUTRAL = frozenset((_FRAME, 0x80))  # FRAME, PROTO
_TWO_LINES = frozenset(b"ci")  # GLOBAL and INST: module and name lines
_COUNTED = {-2: (1, False), -3: (4, True), -4: (4, False), -5: (8, False)}  # length prefixes


def _plain_run() -> re.Pattern[bytes]:
    special = _TUPLE_OPS | _SHARING_OPS | {_STOP, _FRAME, _LONG_BINPUT}
    zero: list[int] = []
    fixed: dict[int, list[int]] = {}
    for code, op in _OPS.items():
        size = 0 if op.arg is None else op.arg.n
        if code in special or size < 0:
            continue
        (zero if size == 0 else fixed.setdefault(size, [])).append(code)

    def charset(codes: Iterable[int]) -> bytes:
        return b"[" + b"".join(re.escape(bytes([c])) for c in sorted(codes)) + b"]"

    parts = [charset(zero)]
    parts += [charset(codes) + b".{%d}" % size for size, codes in sorted(fixed.items())]
    parts.append(b"r..[\\x00-\\x0f]\\x00")  # LONG_BINPUT to a memo slot below 2**20
    parts.append(  # LONG1 of up to 9 bytes: timestamps and the like
        b"\\x8a(?:" + b"|".join(re.escape(bytes([n])) + b".{%d}" % n for n in range(10)) + b")"
    )
    return re.compile(b"(?:" + b"|".join(parts) + b")*+", re.S)


_PLAIN_RUN = _plain_run()


def _scan_pickle(data: bytes) -> tuple[str | None, bool]:
    """Walk a pickle's opcodes without building anything: (a reason to refuse it, or None;
    whether its tuples need the exact check). Where the stream is malformed the walk stops: the
    unpickler, which reads the same opcodes in the same order, refuses it at that point."""
    n = len(data)
    pos = tuples = 0
    tuple_memo = sharing = False
    skip = _PLAIN_RUN.match
    while True:
        pos = skip(data, pos).end()  # type: ignore[union-attr]  # `*+` always matches
        if pos >= n:
            break
        code = data[pos]
        if code == _STOP:
            break
        if code in _TUPLE_OPS:
            tuples += 1
            pos += 1
            after = pos  # past opcodes that leave the stack alone: is the tuple memoized?
            while after < n and data[after] in _NEUTRAL:
                after += 9 if data[after] == _FRAME else 2
            tuple_memo = tuple_memo or (after < n and data[after] in _MEMO_PUTS)
            continue
        if code in _SHARING_OPS:
            sharing = True
            pos += 1
            continue
        op = _OPS.get(code)
        if op is None or op.arg is None:
            break
        size = op.arg.n
        if code in (_LONG_BINPUT, _FRAME):
            width = 4 if code == _LONG_BINPUT else 8
            if pos + 1 + width > n:
                break
            value = int.from_bytes(data[pos + 1 : pos + 1 + width], "little")
            if code == _LONG_BINPUT and value > pos:
                return _memo_bomb(value, pos), False
            if code == _FRAME and value > n - pos - 9:
                return "pickle data was truncated", False
            pos += 1 + width
        elif size > 0:
            pos += 1 + size
        elif size == -1:  # protocol 0 text argument(s), newline-terminated
            end = data.find(b"\n", pos + 1)
            if end >= 0 and code in _TWO_LINES:
                end = data.find(b"\n", end + 1)
            if end < 0:
                break
            if code == _PUT:
                text = data[pos + 1 : end].strip()
                if not text.isdigit():
                    break
                if len(text) > 20 or int(text) > pos:
                    return _memo_bomb(int(text) if len(text) <= 20 else 10**20, pos), False
            pos = end + 1
        else:
            width, signed = _COUNTED[size]
            if pos + 1 + width > n:
                break
            length = int.from_bytes(data[pos + 1 : pos + 1 + width], "little", signed=signed)
            if length < 0:
                break
            pos += 1 + width + length
            if pos > n:
                return "pickle data was truncated", False
    exact = tuples > FAST_SCAN_TUPLES or (tuples > 1 and (tuple_memo or sharing))
    return None, exact


def _memo_bomb(index: int, pos: int) -> str:
    return (
        f"refused: pickle memo index {_short(index)} at byte {pos} is beyond anything the file"
        " holds (the unpickler would allocate gigabytes for it)"
    )


def _check_tuples(data: bytes) -> str | None:
    """Exact check of the tuples a pickle builds: hashing a tuple (as a dict key or set member)
    visits every tuple inside it, recursively, so one may hold at most MAX_TUPLE_NODES tuples,
    counting nested ones and repeats. Slow (every opcode in Python); only for pickles that share
    tuples or hold very many."""
    stack: list[int] = []  # per item: how many tuples it is made of (0 for anything else)
    marks: list[int] = []
    memo: dict[int, int] = {}
    markobject = pickletools.markobject
    try:
        for op, arg, _pos in pickletools.genops(data):
            code = op.code
            if code in "\x85\x86\x87t)":
                if code == "t":
                    start = marks.pop() if marks else 0
                elif code == ")":
                    start = len(stack)
                else:
                    start = max(0, len(stack) - (ord(code) - 0x84))
                nodes = 1 + sum(stack[start:])
                del stack[start:]
                if nodes > MAX_TUPLE_NODES:
                    return (
                        f"refused: pickle builds a tuple of over {MAX_TUPLE_NODES} nested or"
                        " repeated tuples (hashing it would never finish or crash)"
                    )
                stack.append(nodes)
            elif code == "(":
                marks.append(len(stack))
            elif code in "qrp":
                memo[int(arg or 0)] = stack[-1] if stack else 0
            elif code == "\x94":
                memo[len(memo)] = stack[-1] if stack else 0
            elif code in "hjg":
                stack.append(memo.get(int(arg or 0), 0))
            elif code == "2":
                stack.append(stack[-1] if stack else 0)
            elif code == ".":
                break
            else:
                before = op.stack_before
                if markobject in before:
                    start = marks.pop() if marks else 0
                    del stack[start:]
                    below = before.index(markobject)
                else:
                    below = len(before)
                if below:
                    del stack[max(0, len(stack) - below) :]
                stack.extend([0] * len(op.stack_after))
    except ValueError as exc:
        return f"not a valid dump pickle: {printable(str(exc))[:200]}"
    return None


# ---------------------------------------------------------------------------------------------
# Per-rank columns


@dataclass(frozen=True)
class GroupClaim:
    """What one rank's usable pg_config says about a group."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass
class RankDump:
    """One rank's dump as columns. Codes index the per-rank tables (re-coded by `merge`)."""

    rank: int
    file: str
    version: str
    comm_lib_version: str
    claims: dict[str, GroupClaim]
    pg_config_usable: bool
    # pg_status by group code (mapped through the entries' pg_id): (enqueued, started, completed)
    pg_status: dict[int, tuple[int, int, int]]
    wrapped: bool
    entry_errors: list[tuple[int, str]]
    warnings: list[str]
    # tables
    groups: list[tuple[str, str]]
    ops: list[str]
    backends: list[str]
    profiling_names: list[str]
    shapes: list[tuple[tuple[int, ...], ...]]
    dtypes: list[tuple[str, ...]]
    stacks: list[Stack]
    # columns, one row per usable entry, in record order
    index: I32  # position of the entry in the file's entry list
    record_id: I64
    group: I32
    coll_seq: I64
    p2p_seq: I64
    op_id: I64
    op: I32
    backend: I32
    pname: I32
    p2p_kind: I8
    peer_src: I32  # group-local rank for p2p, ANY_SOURCE for `?`, -1 otherwise
    peer_dst: I32
    unit: I8
    marker: I32  # row of this entry's block end marker (itself for plain ops), -1 if none
    state: I8
    retired: B
    t_created: I64
    t_started: I64
    t_completed: I64
    duration_ms: F64
    in_shape: I32
    out_shape: I32
    in_dtype: I32
    out_dtype: I32
    stack: I32
    timeout_ms: I64

    @property
    def n(self) -> int:
        return len(self.record_id)


class _EntryError(Exception):
    pass


class _Bomb(Exception):
    """The dump expands far beyond its size: it repeats references to big lists."""


_INT_RE = re.compile(r"\s*[+-]?[0-9]{1,19}\s*", re.A)


def _as_int(value: Any, what: str) -> int:
    """An int, a whole float, or a short decimal string ("12": JSON dumps and old tests write
    sequence ids so), within int64."""
    if type(value) is int:
        result = value
    elif isinstance(value, bool):
        raise _EntryError(f"{what} is a boolean")
    elif (isinstance(value, float) and math.isfinite(value) and value.is_integer()) or (
        isinstance(value, str) and _INT_RE.fullmatch(value)
    ):
        result = int(value)
    else:
        raise _EntryError(f"{what} is not an integer: {_short(value)}")
    if not -_INT64_MAX <= result <= _INT64_MAX:
        raise _EntryError(f"{what} out of range: {_short(result)}")
    return result


def _seq(value: Any, what: str) -> int:
    result = value if type(value) is int else _as_int(value, what)
    if result < -1:
        raise _EntryError("negative sequence id")
    if result > MAX_SEQ_ID:
        raise _EntryError(f"{what} out of range: {_short(result)}")
    return result


def _time(value: Any) -> int:
    if value is None or value == 0 or isinstance(value, bool):
        return NO_TIME
    try:
        result = _as_int(value, "timestamp")
    except _EntryError:
        return NO_TIME
    return result if result > 0 else NO_TIME


def _maybe_int(value: Any) -> int:
    if type(value) is int and -_INT64_MAX <= value <= _INT64_MAX:
        return value
    try:
        return _as_int(value, "value")
    except _EntryError:
        return -1


def _duration(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return math.nan
    try:
        result = float(value)
    except (ValueError, OverflowError):
        return math.nan
    return result if 0 <= result <= MAX_DURATION_MS else math.nan  # NaN fails both


def _parse_ranks(value: Any) -> tuple[int, ...] | None:
    """pg_config ranks: a string like "[0, 1]" (or a list); None when empty or unparsable."""
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("[") and text.endswith("]")):
            return None
        items = [part.strip() for part in text[1:-1].split(",") if part.strip()]
        if not all(item.isascii() and item.isdigit() and len(item) <= 7 for item in items):
            return None
        ranks = [int(item) for item in items]
    elif isinstance(value, list | tuple):
        if not all(type(v) is int for v in value):
            return None
        ranks = list(value)
    else:
        return None
    if not ranks or len(set(ranks)) != len(ranks) or not 0 <= min(ranks) <= max(ranks) <= MAX_RANK:
        return None
    return tuple(sorted(ranks))


class _Interner:
    """Maps hashable values to dense codes, keeping the values in a list."""

    def __init__(self) -> None:
        self.codes: dict[Any, int] = {}
        self.values: list[Any] = []

    def __call__(self, value: Any) -> int:
        code = self.codes.get(value)
        if code is None:
            code = self.codes[value] = len(self.values)
            self.values.append(value)
        return code


def _parse_name(pname: str) -> tuple[str, str, int, int, int]:
    """`"nccl:send 0->1"` → (backend, op, p2p kind, local src, local dst)."""
    backend, sep, rest = pname.partition(":")
    if not sep:
        raise _EntryError(f"profiling_name {_short(pname, 60)} has no '<backend>:' prefix")
    op, _, peer = rest.strip().partition(" ")
    if not op:
        raise _EntryError(f"profiling_name {_short(pname, 60)} names no op")
    backend, op = printable(backend), printable(op)
    if op == "send" and "->" in peer:
        src, _, dst = peer.partition("->")
        return backend, op, P2PKind.SEND, _peer(src), _peer(dst)
    if op == "recv" and "<-" in peer:
        dst, _, src = peer.partition("<-")
        return backend, op, P2PKind.RECV, _peer(src), _peer(dst)
    if op in P2P_OPS:
        raise _EntryError(f"profiling_name {_short(pname, 60)} has no peer")
    return backend, op, P2PKind.NONE, -1, -1


def _peer(text: str) -> int:
    text = text.strip()
    if text == "?":
        return ANY_SOURCE
    if not (text.isascii() and text.isdigit()) or len(text) > 7 or int(text) > MAX_RANK:
        raise _EntryError(f"bad peer rank {_short(text, 20)}")
    return int(text)


_Cached = tuple[int, int] | _EntryError  # (code, items it stands for) or why it is unusable
_SMALL = 8  # shape lists this short are read where they are met; longer ones once per object


class _Reader:
    """Normalization state of one rank. Lists are read once per object, however often a pickle
    refers to them (memo references), and the items they stand for are counted: a file whose
    entries would expand far beyond its size is a bomb, not a dump. Caches are keyed by id(),
    which is safe because the loaded dump keeps every object alive while it is read."""

    def __init__(self, nbytes: int | None) -> None:
        self.limit = None if nbytes is None else EXPANSION_FACTOR * nbytes + EXPANSION_FLOOR
        self.nbytes = nbytes
        self.items = 0
        self.texts: dict[Any, str] = {}
        self.groups, self.ops, self.backends = _Interner(), _Interner(), _Interner()
        self.pnames, self.shapes, self.dtypes, self.stacks = (
            _Interner(),
            _Interner(),
            _Interner(),
            _Interner(),
        )
        self.frames: dict[tuple[str, str, int], Frame] = {}  # by the values as found
        self.clean_frames: dict[tuple[str, str, int], Frame] = {}
        self.names: dict[str, tuple[str, str, int, int, int] | _EntryError] = {}
        self.shape_lists: dict[int, _Cached] = {}
        self.dtype_lists: dict[int, _Cached] = {}
        self.stack_lists: dict[int, _Cached] = {}

    def bomb(self) -> _Bomb:
        return _Bomb(
            f"refused: its entries expand to over {self.limit} items (shape dimensions, dtypes,"
            f" frames) from {self.nbytes} bytes: a pickle that repeats references to big lists"
            " (a memo bomb)"
        )

    def text(self, value: Any) -> str | None:
        """Printable text for a str or scalar; None for containers."""
        if type(value) is str:
            if len(value) <= 64 and value.isprintable():
                return value
        elif type(value) is not bytes:
            return None if isinstance(value, bytearray) else _scalar_text(value)
        cached = self.texts.get(value)  # long or odd text is cleaned once, however often used
        if cached is None:
            text = value if type(value) is str else value.decode("utf-8", "replace")
            cached = self.texts[value] = printable(text)
        return cached

    def name(self, pname: str) -> tuple[str, str, int, int, int] | _EntryError:
        try:
            parsed: tuple[str, str, int, int, int] | _EntryError = _parse_name(pname)
        except _EntryError as exc:
            parsed = exc
        self.names[pname] = parsed
        return parsed

    # The *_of methods read one list the first time it is met and remember (code, items) by
    # the list's id; the caller looks the id up first.

    def shapes_of(self, value: Any, what: str) -> _Cached:
        try:
            if value is None:
                found: _Cached = (self.shapes(()), 0)
            elif not isinstance(value, list | tuple):
                raise _EntryError(f"{what} is not a list")
            else:
                shapes = tuple(_dims(shape, what) for shape in value)
                found = (self.shapes(shapes), 1 + len(shapes) + sum(map(len, shapes)))
        except _EntryError as exc:
            found = exc
        self.shape_lists[id(value)] = found
        return found

    def dtypes_of(self, value: Any) -> _Cached:
        try:
            if value is None:
                found: _Cached = (self.dtypes(()), 0)
            elif isinstance(value, str | bytes):
                found = (self.dtypes((self.text(value) or "",)), 1)
            elif not isinstance(value, list | tuple):
                raise _EntryError(f"dtypes are not a list: {_short(value)}")
            else:
                text = self.text
                names = tuple(
                    v
                    if type(v) is str and len(v) <= 64 and v.isprintable()
                    else (text(v) if isinstance(v, str | bytes) else None)
                    for v in value
                )
                if None in names:
                    raise _EntryError(f"dtypes hold a {type(value[names.index(None)]).__name__}")
                found = (self.dtypes(names), 1 + len(names))
        except _EntryError as exc:
            found = exc
        self.dtype_lists[id(value)] = found
        return found

    def stack_of(self, value: Any) -> _Cached:
        if not isinstance(value, list | tuple) or not value:
            found: _Cached = (-1, 0)
        else:
            frames, out = self.frames, []
            for raw in value:
                if type(raw) is not dict:
                    continue
                name, filename = raw.get("name", "?"), raw.get("filename", "?")
                line = raw.get("line", 0)
                if type(name) is str and type(filename) is str and type(line) is int:
                    key = (name, filename, line)  # as found; cleaned once, below
                    frame = frames.get(key)
                    if frame is None:
                        plain = (
                            len(name) <= 256
                            and len(filename) <= 256
                            and name.isprintable()
                            and filename.isprintable()
                            and -_INT64_MAX <= line <= _INT64_MAX
                        )
                        frame = Frame(*key) if plain else self._frame(name, filename, line)
                        frames[key] = frame
                else:
                    frame = self._frame(name, filename, line)
                out.append(frame)
            found = (self.stacks(tuple(out)), 1 + len(value))
        self.stack_lists[id(value)] = found
        return found

    def _frame(self, name: Any, filename: Any, line: Any) -> Frame:
        if type(line) is not int or not -_INT64_MAX <= line <= _INT64_MAX:
            line = _maybe_int(line)
        key = (self.text(name) or "?", self.text(filename) or "?", line)
        frame = self.clean_frames.get(key)
        if frame is None:
            frame = self.clean_frames[key] = Frame(*key)
        return frame


def _dims(shape: Any, what: str) -> tuple[int, ...]:
    if not isinstance(shape, list | tuple):
        raise _EntryError(f"{what} holds a non-list shape")
    if len(shape) > MAX_DIMS:
        raise _EntryError(f"{what} has a shape of {len(shape)} dimensions")
    dims = tuple(d if type(d) is int else _as_int(d, what) for d in shape)
    if any(d < 0 for d in dims):
        raise _EntryError(f"{what} has a negative dimension")
    if math.prod(dims) > MAX_NUMEL:
        shown = ", ".join(_short(d) for d in dims[:8]) + (", ..." if len(dims) > 8 else "")
        raise _EntryError(f"{what} has an absurd shape [{shown}]")
    return dims


_FRAME_FIELDS = operator.itemgetter("name", "filename", "line")
_Fast = tuple[dict[str, Any], dict[int, int], set[str], set[str]]


def _column(entries: Sequence[dict[str, Any]], key: str) -> list[Any]:
    return [e.get(key) for e in entries]


def _ints(values: list[Any], low: int, high: int) -> npt.NDArray[np.int64] | None:
    """An int64 column when every value is a plain int in [low, high]; else None."""
    if not set(map(type, values)) <= {int}:
        return None
    try:
        out = np.array(values, dtype=np.int64)
    except OverflowError:
        return None
    if len(out) and (int(out.min()) < low or int(out.max()) > high):
        return None
    return out


def _stamps(values: list[Any]) -> npt.NDArray[np.int64] | None:
    """Timestamps: None or 0 (JSON) mean unset (-1); anything but ints and None: not fast."""
    kinds = set(map(type, values))
    if not kinds <= {int, type(None)}:
        return None
    try:
        out = np.array(
            values if type(None) not in kinds else [-1 if v is None else v for v in values],
            dtype=np.int64,
        )
    except OverflowError:
        return None
    out[out <= 0] = NO_TIME
    return out


def _plain(text: Any, most: int) -> bool:
    return type(text) is str and len(text) <= most and text.isprintable()


def _fast_columns(entries: Any, read: _Reader, limit: int) -> _Fast | None:
    """Columns of a rank whose entries are all well formed, one pass per key in C-level loops,
    each distinct value validated once. None sends the rank through the careful per-entry
    path, which names every problem; so anything unusual here just returns None."""
    n = len(entries)
    if not n or not isinstance(entries, list) or set(map(type, entries)) != {dict}:
        return None
    try:
        ins, outs = _column(entries, "input_sizes"), _column(entries, "output_sizes")
        frames = _column(entries, "frames")
        if not set(map(type, ins)) | set(map(type, outs)) <= {list}:
            return None
        if not set(map(type, frames)) <= {list, type(None)}:
            return None
        # The expansion bound first: len() of a list repeated by memo references is O(1), so a
        # memo bomb is caught here before anything is copied.
        shapes = sum(map(len, ins)) + sum(map(len, outs))
        dims = sum(map(len, chain.from_iterable(ins))) + sum(map(len, chain.from_iterable(outs)))
        items = 5 * n + shapes + dims + sum(map(len, filter(None, frames)))
        if items > limit:
            raise read.bomb()
        if shapes > 16 * n:
            return None
        in_keys = [tuple(map(tuple, v)) for v in ins]
        out_keys = [tuple(map(tuple, v)) for v in outs]
        stack_keys = [tuple(map(_FRAME_FIELDS, f)) if f else None for f in frames]
        in_dt = _column(entries, "input_dtypes")
        out_dt = _column(entries, "output_dtypes")
        if not set(map(type, in_dt)) | set(map(type, out_dt)) <= {list}:
            return None
        in_dt_keys = [tuple(v) for v in in_dt]
        out_dt_keys = [tuple(v) for v in out_dt]
        pgs = _column(entries, "process_group")
        pg_keys = [p if type(p) is tuple else tuple(p) for p in pgs]
        pnames = _column(entries, "profiling_name")
    except (TypeError, KeyError):
        return None

    shape_code: dict[Any, int] = {}
    for key in dict.fromkeys(chain.from_iterable(zip(in_keys, out_keys, strict=True))):
        if not all(_fast_shape(shape) for shape in key):
            return None
        shape_code[key] = read.shapes(key)
    dtype_code: dict[Any, int] = {}
    for key in dict.fromkeys(chain.from_iterable(zip(in_dt_keys, out_dt_keys, strict=True))):
        if not all(_plain(d, 64) for d in key):
            return None
        dtype_code[key] = read.dtypes(key)
    stack_code: dict[Any, int] = {None: -1}
    frame_of: dict[tuple[Any, Any, Any], Frame] = {}
    for found_stack in dict.fromkeys(stack_keys):
        if found_stack is None:
            continue
        stack = []
        for name, filename, line in found_stack or ():
            frame = frame_of.get((name, filename, line))
            if frame is None:
                if not (
                    _plain(name, 256)
                    and _plain(filename, 256)
                    and type(line) is int
                    and -_INT64_MAX <= line <= _INT64_MAX
                ):
                    return None
                frame = frame_of[(name, filename, line)] = Frame(name, filename, line)
            stack.append(frame)
        stack_code[found_stack] = read.stacks(tuple(stack))
    group_code: dict[Any, int] = {}
    for key in dict.fromkeys(pg_keys):
        if len(key) != 2 or not (_plain(key[0], 64) and _plain(key[1], 64)):
            return None
        group_code[key] = read.groups(key)
    parsed: dict[Any, tuple[int, int, int, int, int, int, int]] = {}
    unknown_backends: set[str] = set()
    unknown_ops: set[str] = set()
    for pname in dict.fromkeys(pnames):
        if not _plain(pname, 64):
            return None
        found = read.names.get(pname) or read.name(pname)
        if isinstance(found, _EntryError):
            return None
        backend, op, kind, src, dst = found
        if backend not in KNOWN_BACKENDS:
            unknown_backends.add(backend)
        if op not in KNOWN_OPS:
            unknown_ops.add(op)
        marker = op in MARKER_OPS
        parsed[pname] = (
            read.pnames(pname),
            read.ops(op),
            read.backends(backend),
            kind,
            src,
            dst,
            int(marker),
        )
    states = _column(entries, "state")
    if not set(states) <= _STATES.keys():
        return None
    table = np.array([parsed[p] for p in pnames], dtype=np.int64).reshape(n, 7)
    is_p2p = np.array([v is True for v in _column(entries, "is_p2p")])
    if bool((is_p2p & (table[:, 3] == P2PKind.NONE) & (table[:, 6] == 0)).any()):
        return None  # an is_p2p entry that is neither send nor recv: reported per entry
    coll = _ints(_column(entries, "collective_seq_id"), -1, MAX_SEQ_ID)
    p2p = _ints(_column(entries, "p2p_seq_id"), -1, MAX_SEQ_ID)
    record = _ints(_column(entries, "record_id"), -_INT64_MAX, _INT64_MAX)
    op_id = _ints(_column(entries, "op_id"), -_INT64_MAX, _INT64_MAX)
    timeout = _ints(_column(entries, "timeout_ms"), -_INT64_MAX, _INT64_MAX)
    created = _stamps(_column(entries, "time_created_ns"))
    started = _stamps(_column(entries, "time_discovered_started_ns"))
    completed = _stamps(_column(entries, "time_discovered_completed_ns"))
    columns = (coll, p2p, record, op_id, timeout, created, started, completed)
    if any(c is None for c in columns):
        return None
    assert coll is not None and p2p is not None and record is not None  # for the type checker
    assert op_id is not None and timeout is not None and created is not None
    assert started is not None and completed is not None
    durations = _column(entries, "duration_ms")
    if set(map(type, durations)) <= {type(None)}:
        duration = np.full(n, math.nan)
    else:
        duration = np.array([_duration(v) for v in durations], dtype=np.float64)
    groups = np.array([group_code[k] for k in pg_keys], dtype=np.int32)
    pg_ids: dict[int, int] = {}
    for pg_id, code in zip(_column(entries, "pg_id"), groups.tolist(), strict=True):
        if type(pg_id) is int and pg_id not in pg_ids:
            pg_ids[pg_id] = code
    arrays: dict[str, Any] = {
        "index": np.arange(n, dtype=np.int32),
        "record_id": record,
        "group": groups,
        "coll_seq": coll,
        "p2p_seq": p2p,
        "op_id": op_id,
        "op": table[:, 1].astype(np.int32),
        "backend": table[:, 2].astype(np.int32),
        "pname": table[:, 0].astype(np.int32),
        "p2p_kind": table[:, 3].astype(np.int8),
        "peer_src": table[:, 4].astype(np.int32),
        "peer_dst": table[:, 5].astype(np.int32),
        "state": np.array([_STATES[v] for v in states], dtype=np.int8),
        "retired": np.array([v is True for v in _column(entries, "retired")], dtype=np.bool_),
        "t_created": created,
        "t_started": started,
        "t_completed": completed,
        "duration_ms": duration,
        "in_shape": np.array([shape_code[k] for k in in_keys], dtype=np.int32),
        "out_shape": np.array([shape_code[k] for k in out_keys], dtype=np.int32),
        "in_dtype": np.array([dtype_code[k] for k in in_dt_keys], dtype=np.int32),
        "out_dtype": np.array([dtype_code[k] for k in out_dt_keys], dtype=np.int32),
        "stack": np.array([stack_code[k] for k in stack_keys], dtype=np.int32),
        "timeout_ms": timeout,
    }
    return arrays, pg_ids, unknown_backends, unknown_ops


def _fast_shape(shape: tuple[Any, ...]) -> bool:
    return (
        len(shape) <= MAX_DIMS
        and all(type(d) is int and d >= 0 for d in shape)
        and math.prod(shape) <= MAX_NUMEL
    )


def build_rank(
    raw: Any,
    rank: int,
    file: str,
    *,
    nbytes: int | None = None,
    notes: Sequence[str] = (),
) -> RankDump:
    """Normalize one loaded dump into columns. Whole-dump problems raise DumpError.

    `nbytes` (the size the dump was parsed from) enables the checks against dumps that expand
    far beyond their size; `notes` become warnings."""
    try:
        return _build_rank(raw, rank, file, nbytes, notes)
    except _Bomb as exc:
        raise DumpError(file, rank, str(exc)) from None


def _build_rank(
    raw: Any, rank: int, file: str, nbytes: int | None, notes: Sequence[str]
) -> RankDump:
    if not isinstance(raw, dict):
        raise DumpError(
            file, rank, f"not a Flight Recorder dump (top level is {type(raw).__name__})"
        )
    entries = raw.get("entries", [])
    if entries is None:
        entries = []
    if not isinstance(entries, list | tuple):
        raise DumpError(file, rank, "'entries' is not a list")
    if "version" not in raw and "pg_config" not in raw and not entries:
        raise DumpError(file, rank, "not a Flight Recorder dump (no version, pg_config or entries)")
    if nbytes is not None and len(entries) > max(DENSE_FLOOR, nbytes // MIN_ENTRY_BYTES):
        raise DumpError(
            file,
            rank,
            f"refused: {len(entries)} entries in {nbytes} bytes are too many to be real"
            f" (at most one per {MIN_ENTRY_BYTES} bytes; a pickle repeating one entry?)",
        )
    read = _Reader(nbytes)
    version = read.text(raw.get("version", "unknown")) or "unknown"
    comm = raw.get("comm_lib_version", raw.get("nccl_version", ""))
    warnings = [f"rank {rank}: {note}" for note in notes]

    claims: dict[str, GroupClaim] = {}
    pg_config = raw.get("pg_config")
    usable = isinstance(pg_config, dict) and bool(pg_config)
    if isinstance(pg_config, dict):
        parsed_ranks: dict[Any, tuple[int, ...] | None] = {}
        for key, conf in pg_config.items():
            if not isinstance(conf, dict):
                usable = False
                continue
            name = read.text(conf.get("name", key))
            raw_ranks = conf.get("ranks")
            cache_key = raw_ranks if isinstance(raw_ranks, str) else id(raw_ranks)
            if cache_key not in parsed_ranks:
                parsed_ranks[cache_key] = _parse_ranks(raw_ranks)
            ranks = parsed_ranks[cache_key]
            if key == "" or not name or ranks is None or rank not in ranks:
                usable = False  # gloo keys every group by '' with ranks '[]'
                continue
            claims[name] = GroupClaim(name, read.text(conf.get("desc", "")) or "", ranks)
    if not usable:
        claims = {}

    errors: list[tuple[int, str]] = []
    odd_states: Counter[str] = Counter()
    limit = read.limit if read.limit is not None else _INT64_MAX
    arrays: dict[str, Any]
    pg_ids: dict[int, int]
    unknown_backends: set[str]
    unknown_ops: set[str]
    fast = _fast_columns(entries, read, limit)
    if fast is not None:
        arrays, pg_ids, unknown_backends, unknown_ops = fast
    else:
        cols: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
        pg_ids, unknown_backends, unknown_ops = {}, set(), set()
        append = {k: v.append for k, v in cols.items()}
        names, shape_lists, dtype_lists, stack_lists = (
            read.names,
            read.shape_lists,
            read.dtype_lists,
            read.stack_lists,
        )
        text, group_code_of = read.text, read.groups
        shape_code_of, dtype_code_of = read.shapes, read.dtypes
        items = 0

        for i, entry in enumerate(entries):
            items += 1
            if items > limit:
                raise read.bomb()
            try:
                if type(entry) is not dict:
                    raise _EntryError("entry is not a mapping")
                pg = entry.get("process_group")
                if not isinstance(pg, list | tuple) or len(pg) != 2:
                    raise _EntryError(f"bad process_group {_short(pg)}")
                pg_name, pg_desc = pg
                if type(pg_name) is not str or len(pg_name) > 64 or not pg_name.isprintable():
                    pg_name = text(pg_name)
                if type(pg_desc) is not str or len(pg_desc) > 64 or not pg_desc.isprintable():
                    pg_desc = text(pg_desc)
                if pg_name is None or pg_desc is None:
                    raise _EntryError(f"bad process_group {_short(pg[0])}, {_short(pg[1])}")
                pname = entry.get("profiling_name")
                if type(pname) is not str:
                    raise _EntryError(f"bad profiling_name {_short(pname, 60)}")
                parsed = names.get(pname) or read.name(pname)
                if isinstance(parsed, _EntryError):
                    raise parsed
                backend, op, p2p_kind, src, dst = parsed
                coll_seq = entry.get("collective_seq_id", -1)
                if type(coll_seq) is not int or not -1 <= coll_seq <= MAX_SEQ_ID:
                    coll_seq = _seq(coll_seq, "collective_seq_id")
                p2p_seq = entry.get("p2p_seq_id", -1)
                if type(p2p_seq) is not int or not -1 <= p2p_seq <= MAX_SEQ_ID:
                    p2p_seq = _seq(p2p_seq, "p2p_seq_id")
                record_id = entry.get("record_id", i)
                if type(record_id) is not int or not -_INT64_MAX <= record_id <= _INT64_MAX:
                    record_id = _as_int(record_id, "record_id")
                state_text = entry.get("state")
                state = _STATES.get(state_text) if type(state_text) is str else None
                value = entry.get("input_sizes")
                if type(value) is list and len(value) <= _SMALL:
                    shapes = tuple([_dims(shape, "input_sizes") for shape in value])
                    in_shape = shape_code_of(shapes)
                    items += 1 + len(shapes) + sum(map(len, shapes))
                else:
                    hit = shape_lists.get(id(value)) or read.shapes_of(value, "input_sizes")
                    if isinstance(hit, _EntryError):
                        raise hit
                    in_shape = hit[0]
                    items += hit[1]
                value = entry.get("output_sizes")
                if type(value) is list and len(value) <= _SMALL:
                    shapes = tuple([_dims(shape, "output_sizes") for shape in value])
                    out_shape = shape_code_of(shapes)
                    items += 1 + len(shapes) + sum(map(len, shapes))
                else:
                    hit = shape_lists.get(id(value)) or read.shapes_of(value, "output_sizes")
                    if isinstance(hit, _EntryError):
                        raise hit
                    out_shape = hit[0]
                    items += hit[1]
                value = entry.get("input_dtypes")
                if type(value) is list and len(value) == 1 and type(value[0]) is str:
                    in_dtype = dtype_code_of((value[0],))  # the common case; cleaned at the end
                    items += 2
                else:
                    hit = dtype_lists.get(id(value)) or read.dtypes_of(value)
                    if isinstance(hit, _EntryError):
                        raise hit
                    in_dtype = hit[0]
                    items += hit[1]
                value = entry.get("output_dtypes")
                if type(value) is list and len(value) == 1 and type(value[0]) is str:
                    out_dtype = dtype_code_of((value[0],))
                    items += 2
                else:
                    hit = dtype_lists.get(id(value)) or read.dtypes_of(value)
                    if isinstance(hit, _EntryError):
                        raise hit
                    out_dtype = hit[0]
                    items += hit[1]
                value = entry.get("frames")
                hit = stack_lists.get(id(value)) or read.stack_of(value)
                if isinstance(hit, _EntryError):  # never: any list of frames is usable
                    raise hit
                stack_code = hit[0]
                items += hit[1]
                if (
                    p2p_kind == P2PKind.NONE
                    and entry.get("is_p2p") is True
                    and op not in MARKER_OPS
                ):
                    raise _EntryError(f"is_p2p entry {_short(pname, 60)} is neither send nor recv")
                group_code = group_code_of((pg_name, pg_desc))
                pg_id = entry.get("pg_id")
                if type(pg_id) is int:
                    pg_ids.setdefault(pg_id, group_code)
            except _EntryError as exc:
                errors.append((i, str(exc)))
                continue
            if state is None:
                state = State.UNKNOWN
                odd_states[_short(state_text, 20)] += 1
            if backend not in KNOWN_BACKENDS:
                unknown_backends.add(backend)
            if op not in KNOWN_OPS:
                unknown_ops.add(op)
            append["index"](i)
            append["record_id"](record_id)
            append["group"](group_code)
            append["coll_seq"](coll_seq)
            append["p2p_seq"](p2p_seq)
            append["op_id"](_maybe_int(entry.get("op_id")))
            append["op"](read.ops(op))
            append["backend"](read.backends(backend))
            append["pname"](
                read.pnames(pname if len(pname) <= 64 and pname.isprintable() else text(pname))
            )
            append["p2p_kind"](p2p_kind)
            append["peer_src"](src)
            append["peer_dst"](dst)
            append["state"](state)
            append["retired"](entry.get("retired") is True)
            append["t_created"](_time(entry.get("time_created_ns")))
            append["t_started"](_time(entry.get("time_discovered_started_ns")))
            append["t_completed"](_time(entry.get("time_discovered_completed_ns")))
            append["duration_ms"](_duration(entry.get("duration_ms")))
            append["in_shape"](in_shape)
            append["out_shape"](out_shape)
            append["in_dtype"](in_dtype)
            append["out_dtype"](out_dtype)
            append["stack"](stack_code)
            append["timeout_ms"](_maybe_int(entry.get("timeout_ms")))

        if items > limit:
            raise read.bomb()
        arrays = {k: np.asarray(v, dtype=_COLUMNS[k]) for k, v in cols.items()}
    if unknown_backends:
        warnings.append(f"rank {rank}: unknown backend(s) {_listed(unknown_backends)}")
    if unknown_ops:
        warnings.append(f"rank {rank}: unknown op(s) {_listed(unknown_ops)}")
    if odd_states:
        count = sum(odd_states.values())
        warnings.append(
            f"rank {rank}: {count} entr{'y' if count == 1 else 'ies'} with an unknown state"
            f" ({_listed(odd_states)})"
        )
    record = arrays["record_id"]
    wrapped = bool(len(record) and int(record.min()) > 0)
    unit, marker = _blocks(arrays, read.ops.values, wrapped)
    status = _pg_status(raw.get("pg_status"), pg_ids)
    return RankDump(
        rank=rank,
        file=file,
        version=version,
        comm_lib_version=(read.text(comm) or "") if comm is not None else "",
        claims=claims,
        pg_config_usable=usable,
        pg_status=status,
        wrapped=wrapped,
        entry_errors=errors,
        warnings=warnings,
        groups=read.groups.values,
        ops=read.ops.values,
        backends=read.backends.values,
        profiling_names=read.pnames.values,
        shapes=read.shapes.values,
        dtypes=[tuple(read.text(name) or "" for name in found) for found in read.dtypes.values],
        stacks=read.stacks.values,
        unit=unit,
        marker=marker,
        **arrays,
    )


def _listed(names: Iterable[str], most: int = 8) -> str:
    values = sorted(names)
    shown = ", ".join(values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


_COLUMNS: dict[str, type] = {
    "index": np.int32,
    "record_id": np.int64,
    "group": np.int32,
    "coll_seq": np.int64,
    "p2p_seq": np.int64,
    "op_id": np.int64,
    "op": np.int32,
    "backend": np.int32,
    "pname": np.int32,
    "p2p_kind": np.int8,
    "peer_src": np.int32,
    "peer_dst": np.int32,
    "state": np.int8,
    "retired": np.bool_,
    "t_created": np.int64,
    "t_started": np.int64,
    "t_completed": np.int64,
    "duration_ms": np.float64,
    "in_shape": np.int32,
    "out_shape": np.int32,
    "in_dtype": np.int32,
    "out_dtype": np.int32,
    "stack": np.int32,
    "timeout_ms": np.int64,
}


def _pg_status(raw: Any, pg_ids: dict[int, int]) -> dict[int, tuple[int, int, int]]:
    """pg_status keyed by the rank's group code; keys are per-process ids, mapped via pg_id."""
    out: dict[int, tuple[int, int, int]] = {}
    if not isinstance(raw, dict):
        return out
    for key, status in raw.items():
        try:
            pg_id = _as_int(key, "pg_status key")
        except _EntryError:
            continue
        if pg_id not in pg_ids or not isinstance(status, dict):
            continue
        values = []
        for name in (
            "last_enqueued_collective",
            "last_started_collective",
            "last_completed_collective",
        ):
            values.append(_maybe_int(status.get(name, -1)))
        out[pg_ids[pg_id]] = (values[0], values[1], values[2])
    return out


def _blocks(cols: dict[str, np.ndarray], ops: list[str], wrapped: bool) -> tuple[I8, I32]:
    """Recognise coalesced collective blocks and batched p2p blocks on one rank.

    A block's members come right before its end marker in the group's own order. An end marker
    belongs to a batched p2p block when the group's previous entry is a p2p op with the
    marker's p2p sequence id (its `is_p2p` is False, so that flag cannot tell); otherwise to a
    collective block whose members share the marker's collective sequence id. A marker with
    no members at the start of a wrapped buffer lost them to the wrap: it is left out.
    """
    n = len(cols["group"])
    unit = np.full(n, UnitKind.COLLECTIVE, dtype=np.int8)
    marker = np.arange(n, dtype=np.int32)
    is_marker_op = np.array([op in MARKER_OPS for op in ops], dtype=bool)
    p2p = cols["p2p_kind"] != P2PKind.NONE
    unit[p2p] = UnitKind.P2P
    marker_rows = np.flatnonzero(is_marker_op[cols["op"]]) if n else np.empty(0, np.int64)
    if not len(marker_rows):
        return unit, marker
    group, coll, p2p_seq = cols["group"], cols["coll_seq"], cols["p2p_seq"]
    last_closed: dict[int, int] = {}  # group → row of its last end marker
    rows_by_group: dict[int, list[int]] = {}
    marker_set = set(marker_rows.tolist())
    for row in range(n):
        g = int(group[row])
        rows = rows_by_group.setdefault(g, [])
        if row not in marker_set:
            rows.append(row)
            continue
        floor = last_closed.get(g, -1)
        members: list[int] = []
        kind = UnitKind.ORPHAN_MARKER
        if rows and rows[-1] > floor:
            prev = rows[-1]
            if p2p[prev] and p2p_seq[prev] == p2p_seq[row]:
                kind = UnitKind.BATCH_MARKER
                for r in reversed(rows):
                    if r <= floor or not p2p[r] or p2p_seq[r] != p2p_seq[row]:
                        break
                    members.append(r)
            elif not p2p[prev] and coll[prev] == coll[row]:
                kind = UnitKind.BLOCK_MARKER
                for r in reversed(rows):
                    if r <= floor or p2p[r] or coll[r] != coll[row]:
                        break
                    members.append(r)
            elif coll[row] > coll[prev]:
                kind = UnitKind.BLOCK_MARKER  # a block whose members were not recorded
        elif not wrapped or (rows and coll[row] > coll[rows[-1]]):
            kind = UnitKind.BLOCK_MARKER
        unit[row] = kind
        member_kind = (
            UnitKind.BATCH_MEMBER if kind == UnitKind.BATCH_MARKER else (UnitKind.BLOCK_MEMBER)
        )
        for r in members:
            unit[r] = member_kind
            marker[r] = row
        if kind == UnitKind.ORPHAN_MARKER:
            marker[row] = -1
        rows.append(row)
        last_closed[g] = row
    return unit, marker


def load_rank(
    dump_file: DumpFile, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> RankDump | UnreadableDump:
    """Read and normalize one rank; any problem becomes an UnreadableDump record."""
    path = printable(str(dump_file.path))
    try:
        raw = _read(dump_file.path, dump_file.rank, max_bytes)
        return build_rank(raw.obj, dump_file.rank, path, nbytes=raw.nbytes, notes=raw.notes)
    except DumpError as exc:
        return UnreadableDump(path, dump_file.rank, exc.reason)
    except RecursionError:
        return UnreadableDump(path, dump_file.rank, "structure nested too deeply")
    except MemoryError:
        return UnreadableDump(path, dump_file.rank, "needs more memory than available")
    except Exception as exc:  # a malformed dump must never abort the other ranks
        reason = printable(f"malformed dump: {type(exc).__name__}: {exc}")[:300]
        return UnreadableDump(path, dump_file.rank, reason)


def load_all(
    files: Sequence[DumpFile],
    workers: int | None = None,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[RankDump], list[UnreadableDump]]:
    """Load every rank, in worker processes when there are enough files to pay for them.

    A worker that dies (killed for memory, say) does not take the run with it: the files it
    had not returned are read again one per process, and the one that kills its process again
    is reported unreadable. Ranks outside the job (see `_outside_the_job`) are set aside."""
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, min(workers, len(files) // 4 or 1))
    results: dict[int, RankDump | UnreadableDump] = {}
    if workers == 1:
        for i, dump_file in enumerate(files):
            results[i] = load_rank(dump_file, max_bytes)
            if progress is not None:
                progress(len(results), len(files))
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        chunk = max(1, min(64, len(files) // (workers * 8)))
        try:
            mapped = pool.map(load_rank, files, [max_bytes] * len(files), chunksize=chunk)
            for i, result in enumerate(mapped):
                results[i] = result
                if progress is not None:
                    progress(len(results), len(files))
        except BrokenProcessPool:
            for i, dump_file in enumerate(files):
                if i not in results:
                    results[i] = _load_isolated(dump_file, max_bytes)
                    if progress is not None:
                        progress(len(results), len(files))
        finally:
            pool.shutdown(cancel_futures=True)
    loaded: list[RankDump] = []
    unreadable: list[UnreadableDump] = []
    for i in range(len(files)):
        result = results[i]
        (loaded if isinstance(result, RankDump) else unreadable).append(result)  # type: ignore[arg-type]
    outside = _outside_the_job(loaded)
    for dump, reason in outside:
        loaded.remove(dump)
        unreadable.append(UnreadableDump(dump.file, dump.rank, reason))
    return loaded, unreadable


def _load_isolated(dump_file: DumpFile, max_bytes: int) -> RankDump | UnreadableDump:
    """Load one file in a process of its own; its death is that file's reason."""
    with ProcessPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(load_rank, dump_file, max_bytes).result()
        except BrokenProcessPool:
            return UnreadableDump(
                printable(str(dump_file.path)),
                dump_file.rank,
                "the process reading it died (out of memory, or killed)",
            )


def _outside_the_job(loaded: Sequence[RankDump]) -> list[tuple[RankDump, str]]:
    """Dumps whose rank (from the file name) is beyond every group that the other ranks'
    pg_config lists: a stray file from a bigger job. Counted in, it would invent missing ranks
    and split the groups it shares a name with."""
    tops = {d.rank: max((c.ranks[-1] for c in d.claims.values()), default=-1) for d in loaded}
    ordered = sorted(tops.values(), reverse=True)
    if len(ordered) < 2:
        return []
    out = []
    for dump in loaded:
        others = ordered[1] if tops[dump.rank] == ordered[0] else ordered[0]
        if 0 <= others < dump.rank:
            reason = (
                f"rank {dump.rank} (from the file name) is outside the job: the other ranks'"
                f" process groups hold ranks up to {others}; not analyzed"
            )
            out.append((dump, reason))
    return out if len(out) < len(loaded) else []


# ---------------------------------------------------------------------------------------------
# Global table


@dataclass
class EntryTable:
    """Every usable entry of every loaded rank, as columns with global codes."""

    rank: I32
    row_in_rank: I32
    group_names: list[tuple[str, str]]
    ops: list[str]
    backends: list[str]
    profiling_names: list[str]
    shapes: list[tuple[tuple[int, ...], ...]]
    shape_numel: I64
    dtypes: list[tuple[str, ...]]
    stacks: list[Stack]
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["columns"][name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def n(self) -> int:
        return len(self.rank)


_RECODED = {
    "group": "groups",
    "op": "ops",
    "backend": "backends",
    "pname": "profiling_names",
    "in_shape": "shapes",
    "out_shape": "shapes",
    "in_dtype": "dtypes",
    "out_dtype": "dtypes",
    "stack": "stacks",
}


def merge(ranks: Sequence[RankDump]) -> EntryTable:
    """Concatenate ranks (sorted by rank) into one table, re-coding per-rank tables globally.

    Column by column, each rank's copy is released as soon as it is in the table (the ranks
    keep only their metadata), so memory peaks at one table plus one column, not two tables.
    """
    interners = {name: _Interner() for name in set(_RECODED.values())}
    maps: list[dict[str, npt.NDArray[np.int32]]] = []
    for dump in ranks:
        per_rank = {}
        for table, intern in interners.items():
            values = getattr(dump, table)
            per_rank[table] = np.fromiter((intern(v) for v in values), np.int32, len(values))
        maps.append(per_rank)
    sizes = np.array([d.n for d in ranks], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if len(ranks) else sizes
    columns: dict[str, np.ndarray] = {}
    for col, dtype in (*_COLUMNS.items(), ("unit", np.int8), ("marker", np.int64)):
        pieces: list[np.ndarray] = []
        for dump, per_rank, offset in zip(ranks, maps, offsets.tolist(), strict=True):
            values = getattr(dump, col)
            if col in _RECODED and len(values):
                table_map = per_rank[_RECODED[col]]
                if col == "stack":
                    safe = table_map[np.maximum(values, 0)] if len(table_map) else -1
                    values = np.where(values >= 0, safe, -1)
                else:
                    values = table_map[values]
            elif col == "marker":
                values = np.where(values >= 0, values + offset, -1)
            pieces.append(np.asarray(values, dtype=dtype))
            setattr(dump, col, _EMPTY)
        columns[col] = np.concatenate(pieces) if pieces else np.empty(0, dtype=dtype)
        del pieces
    rank = np.repeat(np.array([d.rank for d in ranks], dtype=np.int32), sizes)
    starts = np.repeat(offsets, sizes)
    row_in_rank = (np.arange(int(sizes.sum()), dtype=np.int64) - starts).astype(np.int32)
    shapes = interners["shapes"].values
    numel = np.array([_numel(s) for s in shapes], dtype=np.int64)
    return EntryTable(
        rank=rank,
        row_in_rank=row_in_rank,
        group_names=interners["groups"].values,
        ops=interners["ops"].values,
        backends=interners["backends"].values,
        profiling_names=interners["profiling_names"].values,
        shapes=shapes,
        shape_numel=numel,
        dtypes=interners["dtypes"].values,
        stacks=interners["stacks"].values,
        columns=columns,
    )


_EMPTY = np.empty(0, dtype=np.int8)


def _numel(shapes: tuple[tuple[int, ...], ...]) -> int:
    total = 0
    for shape in shapes:
        total += math.prod(shape)
    return min(total, _INT64_MAX)
