"""Read one dump file safely: regular files only, bounded sizes, gzip, JSON; pickles laid out
the way a known pickler writes them decoded into columns, and other pickles scanned for bombs
before an unpickler that refuses every global builds them. Every object is built through the
one door, `safety`."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import pickletools
import re
import stat
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import DumpError
from ...memory import collector_paused
from ..common import (
    DEFAULT_MAX_FILE_BYTES,
    FAST_SCAN_TUPLES,
    GZIP_MAX_RATIO,
    GZIP_RATIO_FLOOR,
    MAX_TUPLE_NODES,
    O_FLAGS,
    file_kind,
    printable,
    short,
)
from ..formats import traces
from ..formats.outcomes import NotDecoded
from ..sources.base import Fetch, SourceError
from .decoders.opcodes import CODES
from .door import Refused, decode_json, decode_pickle, parse_json, unpickle
from .limits import LIMITS, memory_available


@dataclass
class Raw:
    """A loaded file: the object, how many bytes it was parsed from, notes for warnings, and
    why the decoder did not read it (None if it did, or was not asked to)."""

    obj: Any
    nbytes: int
    notes: list[str]
    not_decoded: NotDecoded | None = None


def read_raw(path: Path, rank: int | None, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Any:
    """Bytes of one file → the dump object, refusing globals; errors name the file and rank."""
    return read_dump(path, rank, max_bytes).obj


def read_dump(
    path: Path,
    rank: int | None,
    max_bytes: int,
    *,
    fast: bool = False,
    guarded: bool = True,
    fetch: Fetch | None = None,
) -> Raw:
    """The file's dump object; with `fast`, a pickle or JSON laid out the way torch (or
    Python) writes it comes back as a `Decoded` (see `decode`, `decode_python`, `decode_json`).

    `guarded` scans a pickle for bombs before it is unpickled: for use in a process that
    must survive any file. A worker process of the loader reads unguarded, under resource
    limits (see `sandbox`): a bomb costs it that file, and the scan then only explains why.
    `fetch` reads a file that is not a local one (an archive member, a URL; see `archives`,
    `remote`)."""
    where = printable(fetch.where if fetch is not None else str(path))
    data = _utf8_json(read_unpacked(path, rank, max_bytes, fetch), where, rank)
    notes: list[str] = []
    why: NotDecoded | None = None
    if starts_like_json(data):
        if fast:
            try:
                return Raw(decode_json(data), len(data), notes)
            except NotDecoded as exc:
                why = exc
        return Raw(_load_json(data, where, rank, notes), len(data), notes, why)
    if fast:
        try:
            return Raw(decode_pickle(data), len(data), notes)
        except NotDecoded as exc:
            why = exc
    if guarded:
        reason = explain_pickle(data) or _too_big_here(len(data))
        if reason is not None:
            raise DumpError(where, rank, reason)
    return Raw(_unpickle(data, where, rank, explain=not guarded), len(data), notes, why)


def _too_big_here(size: int) -> str | None:
    """Why a pickle of `size` bytes is not unpickled in this process, which has no worker to
    read it under limits: its worst case (`Limits.unforked_expansion`) exceeds half the memory
    available."""
    room = memory_available()
    worst = LIMITS.unforked_expansion * size
    if room is None or worst <= room // 2:
        return None
    return (
        f"reading its {size} bytes here could take up to {worst >> 20} MiB, more than half the"
        f" {room >> 20} MiB available (no worker process to read it under limits): refused"
    )


_UTF8_BOM = b"\xef\xbb\xbf"
_JSON_SPACE = re.compile(rb"[ \t\n\r]*")
_JSON_FIRST = frozenset(b"{[ \t\n\r")
_WIDE_BOMS = (
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\xfe\xff", "utf-16"),
    (b"\xff\xfe", "utf-16"),
)


def starts_like_json(data: bytes) -> bool:
    """Whether UTF-8 data is JSON rather than a pickle: it starts (after a byte order mark)
    with `{` or `[`, or with whitespace, however long, which no pickle starts with."""
    body = data.removeprefix(_UTF8_BOM)
    match = _JSON_SPACE.match(body)
    start = match.end() if match is not None else 0
    return start > 0 or body[:1] in (b"{", b"[")


def wide_json(data: bytes) -> str | None:
    """The codec of text in UTF-16 or UTF-32 (a byte order mark, or JSON's first character
    beside NUL bytes, as `json.detect_encoding` tells them), or None: no pickle starts so."""
    for bom, codec in _WIDE_BOMS:
        if data.startswith(bom):
            return codec
    if len(data) < 4:
        return None
    a, b, c, d = data[:4]
    if a == b == c == 0 and d in _JSON_FIRST:
        return "utf-32-be"
    if a == c == 0 and b in _JSON_FIRST:
        return "utf-16-be"
    if b == c == d == 0 and a in _JSON_FIRST:
        return "utf-32-le"
    if b == d == 0 and a in _JSON_FIRST:
        return "utf-16-le"
    return None


def _utf8_json(data: bytes, where: str, rank: int | None) -> bytes:
    """UTF-16 or UTF-32 JSON re-encoded as UTF-8 (what every reader takes); other data as is."""
    codec = wide_json(data)
    if codec is None:
        return data
    try:
        return data.decode(codec, "surrogatepass").encode("utf-8", "surrogatepass")
    except UnicodeError as exc:
        name = codec[:6].upper()
        at = f" at byte {exc.start}" if isinstance(exc, UnicodeDecodeError) else ""
        raise DumpError(where, rank, f"malformed {name} JSON: does not decode{at}") from None


def read_unpacked(
    path: Path, rank: int | None, max_bytes: int, fetch: Fetch | None = None
) -> bytes:
    """The file's bytes (read by `fetch` if given), gunzipped if they are gzip data, within
    the limits; other compressed formats are refused by name."""
    if fetch is not None:
        where = printable(fetch.where)
        try:
            data = fetch.read(max_bytes)
        except SourceError as exc:
            raise DumpError(where, rank, str(exc)) from None
    else:
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
    return data


def explain_pickle(data: bytes) -> str | None:
    """Why a pickle would harm the process that unpickles it (a memo index that allocates
    gigabytes, tuples that take forever to hash or nest deep enough to crash), or None. It
    builds nothing; the exact tuple check walks every opcode in Python, so it only runs when
    the quick scan finds tuples that could be shared or nested."""
    return _explain(data, _scan_pickle(data))


def _explain(data: bytes, scan: _Scan) -> str | None:
    return _check_tuples(data) if scan.reason is None and scan.exact else scan.reason


_OTHER_FORMATS = (
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"BZh", "bzip2-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    (b"\x04\x22\x4d\x18", "lz4-compressed"),
    (b"PK\x03\x04", "zip"),
)


def _read_bytes(path: Path, where: str, rank: int | None, max_bytes: int) -> bytes:
    """At most `max_bytes` of a regular file; FIFOs, devices and sockets are never opened."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise DumpError(where, rank, f"not a regular file ({file_kind(info.st_mode)})")
        if info.st_size > max_bytes:
            raise DumpError(
                where,
                rank,
                f"file is {info.st_size} bytes, over the {max_bytes}-byte limit"
                " (see --max-file-size)",
            )
        with open(os.open(path, O_FLAGS), "rb", buffering=0) as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):  # replaced between stat and open
                raise DumpError(where, rank, f"not a regular file ({file_kind(info.st_mode)})")
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
            where,
            rank,
            f"file is over the {max_bytes}-byte limit (see --max-file-size)",
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
            return parse_json(data)
        except UnicodeDecodeError:
            notes.append("bytes that are not UTF-8 were replaced")
            return parse_json(data.decode("utf-8", "replace"))
    except RecursionError:
        raise DumpError(where, rank, "malformed JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        if traces.looks_like_trace(data):
            return _truncated_trace(data, where, rank, notes, exc)
        what = _looks_like(data) if exc.pos < 8 else None
        reason = f"looks like {what}, not JSON" if what else printable(str(exc))[:200]
        raise DumpError(where, rank, f"malformed JSON: {reason}") from None
    except ValueError as exc:
        raise DumpError(where, rank, f"malformed JSON: {printable(str(exc))[:200]}") from None


def _truncated_trace(
    data: bytes, where: str, rank: int | None, notes: list[str], exc: json.JSONDecodeError
) -> Any:
    """An Execution Trace that does not parse: one cut in the middle of its nodes (its rank
    was killed, or is still tracing) is read to its last complete node, with a note."""
    try:
        trace, count = traces.read_truncated(data.decode("utf-8", "replace"))
    except traces.TraceError as why:
        raise DumpError(where, rank, f"malformed Execution Trace: {why} ({exc.msg})") from None
    notes.append(
        f"{traces.CUT_NOTE} (the rank was killed or was still tracing): "
        f"read to its last complete node ({count} nodes)"
    )
    return trace


def _unpickle(data: bytes, where: str, rank: int | None, explain: bool = False) -> Any:
    """Unpickle with garbage collection paused, through the door's unpickler that refuses every
    global (`safety.unpickle`). With `explain` (an unguarded read), a file the unpickler fails
    on is scanned afterwards for a bomb (see `explain_pickle`), so that a bomb gets the same
    reason either way."""
    try:
        with collector_paused():
            return unpickle(data)
    except _UNPICKLE_ERRORS as exc:
        reason = explain_pickle(data) if explain else None
        raise DumpError(where, rank, reason or _unpickle_error(exc, data)) from None


_UNPICKLE_ERRORS = (
    EOFError,
    MemoryError,
    RecursionError,
    pickle.UnpicklingError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
)


def _unpickle_error(exc: BaseException, data: bytes) -> str:
    if isinstance(exc, EOFError):
        return "pickle data was truncated"
    if isinstance(exc, MemoryError):
        return "pickle needs more memory than available"
    if isinstance(exc, RecursionError):
        return "not a valid dump pickle: nested too deeply"
    return f"not a valid dump pickle: {_pickle_error(exc, data)}"


def _pickle_error(exc: BaseException, data: bytes) -> str:
    """The unpickler's complaint, or what the file looks like when it is plainly something
    else (text, a program): never its content, which may be anything (a key, a password)."""
    text = printable(str(exc))[:200]
    if data[:1] != bytes((CODES["PROTO"],)) and not isinstance(exc, Refused):
        kind = _looks_like(data)
        if kind:
            return f"looks like {kind}, not a pickle"
    return text


_MAGIC = (
    (b"\x7fELF", "an ELF binary"),
    (b"%PDF", "a PDF document"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"#!", "a script"),
)


def _looks_like(data: bytes) -> str | None:
    """What a file that is no dump looks like ("text", "an ELF binary"), from its first bytes,
    or None; never a word of its content."""
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    try:
        head = data[:200].decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < 196:  # not just a character cut at the end
            return None
        head = data[: exc.start].decode("utf-8")
    if head.strip() and all(ch.isprintable() or ch in "\t\r\n" for ch in head):
        return "text"
    return None


# Opcode scan. Opcodes whose argument has a fixed size and that neither build tuples nor share
# them are skipped in runs by one regular expression; the rest are looked at one by one.
_OPS = {ord(op.code): op for op in pickletools.opcodes}
_TUPLE_OPS = frozenset(CODES[n] for n in ("TUPLE1", "TUPLE2", "TUPLE3", "TUPLE"))
_SHARING_OPS = frozenset(
    CODES[n] for n in ("DUP", "POP", "POP_MARK", "EMPTY_SET", "ADDITEMS", "FROZENSET")
)
_MEMO_PUTS = frozenset(CODES[n] for n in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"))
_STOP, _FRAME, _LONG_BINPUT, _PUT = (
    CODES["STOP"],
    CODES["FRAME"],
    CODES["LONG_BINPUT"],
    CODES["PUT"],
)
_NEUTRAL = frozenset((_FRAME, CODES["PROTO"]))
_TWO_LINES = frozenset((CODES["GLOBAL"], CODES["INST"]))  # module and name lines
_TUPLE_BYTES = tuple(bytes((code,)) for code in sorted(_TUPLE_OPS))
_COUNTED = {
    -2: (1, False),
    -3: (4, True),
    -4: (4, False),
    -5: (8, False),
}  # length prefixes


def _plain_run(tuples: bool) -> re.Pattern[bytes]:
    """Runs of opcodes the walk need not stop at. With `tuples`, tuple opcodes that are not
    memoized (the next opcode is no memo put, FRAME or PROTO) are skipped too: for files whose
    tuple count is already bounded another way."""
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

    # Most frequent first (BINGET and the small ints take one byte): 25% faster than zero first.
    parts = [charset(codes) + b".{%d}" % size for size, codes in sorted(fixed.items())[:1]]
    parts.append(charset(zero))
    if tuples:
        parts.append(charset(_TUPLE_OPS) + b"(?!" + charset(_MEMO_PUTS | _NEUTRAL) + b")")
    parts += [charset(codes) + b".{%d}" % size for size, codes in sorted(fixed.items())[1:]]
    parts.append(b"r..[\\x00-\\x0f]\\x00")  # LONG_BINPUT to a memo slot below 2**20
    parts.append(  # LONG1 of up to 9 bytes: timestamps and the like
        b"\\x8a(?:" + b"|".join(re.escape(bytes([n])) + b".{%d}" % n for n in range(10)) + b")"
    )
    return re.compile(b"(?:" + b"|".join(parts) + b")*+", re.DOTALL)


_PLAIN_RUN = _plain_run(tuples=False)
_PLAIN_RUN_TUPLES = _plain_run(tuples=True)


@dataclass(frozen=True)
class _Scan:
    """What the opcode walk found: a reason to refuse the file (or None); whether its tuples
    need the exact check."""

    reason: str | None
    exact: bool = False


def _scan_pickle(data: bytes) -> _Scan:
    """Walk a pickle's opcodes without building anything. Where the stream is malformed the
    walk stops: the unpickler, which reads the same opcodes in the same order, refuses it at
    that point. It is a bomb detector, not a gate for globals: every pickle, whatever the walk
    says, is unpickled by the door's unpickler that refuses them (`safety`)."""
    n = len(data)
    pos = tuples = 0
    tuple_memo = sharing = False
    # Every tuple opcode is one of these bytes, so their count bounds the tuples. Under the
    # bound, unmemoized tuples need not be counted one by one: the regex skips them.
    bound = sum(data.count(code) for code in _TUPLE_BYTES)
    skip = (_PLAIN_RUN_TUPLES if bound <= FAST_SCAN_TUPLES else _PLAIN_RUN).match
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
        if op is None:
            break
        if op.arg is None:
            pos += 1
            continue
        size = op.arg.n
        if code in (_LONG_BINPUT, _FRAME):
            width = 4 if code == _LONG_BINPUT else 8
            if pos + 1 + width > n:
                break
            value = int.from_bytes(data[pos + 1 : pos + 1 + width], "little")
            if code == _LONG_BINPUT and value > pos:
                return _Scan(_memo_bomb(value, pos))
            if code == _FRAME and value > n - pos - 9:
                return _Scan("pickle data was truncated")
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
                    return _Scan(_memo_bomb(int(text) if len(text) <= 20 else 10**20, pos))
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
                return _Scan("pickle data was truncated")
    if bound <= FAST_SCAN_TUPLES:
        tuples = bound  # an upper bound: some tuples were skipped uncounted
    exact = tuples > FAST_SCAN_TUPLES or (tuples > 1 and (tuple_memo or sharing))
    return _Scan(None, exact)


def _memo_bomb(index: int, pos: int) -> str:
    return (
        f"refused: pickle memo index {short(index)} at byte {pos} is beyond anything the file"
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
