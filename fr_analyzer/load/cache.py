"""Ranks read before, kept in the user's cache: the next command on the same dumps reads the
cache instead of decoding every file again.

A rank is kept under its file's identity: the path, size, modification time and inode, a hash
of the file's first `HEAD_BYTES` (a file rewritten in place within one tick of its clock still
changes its key), what changes its reading (the size limit, a torchft world size, the ranks
the folder's files show) and this cache's format and fr-analyze's version. A changed file has
another key, and is read again. Only plain local files read alone are kept (not an archive's
member, a URL's answer, a file read with its Execution Trace or Kineto trace, a gloo trace
whose ops' groups were settled across ranks).

Each rank is one file: a line of JSON (the rank's header and tables, and where each column's
bytes are) and the columns' raw bytes. Nothing is unpickled: the JSON goes through the door
(`safety.door.parse_json`) and the columns are taken as typed arrays of their bytes; an entry
that does not read back whole (a truncated file, a code past its table) is a miss, dropped.

Beside the ranks, the table built from all of them is kept whole (`read_table`), in one file
named by the keys of every rank file (a `.job` file: the ranks' headers and the table's lists
as JSON, then its columns' bytes, mapped when read back, not copied), so that a command on a
dump set read before reads one file instead of one per rank. It is kept only where every file
has a key and none was unreadable; it is checked as a rank is (every code within its list,
every row of a rank asked for) and, like the ranks, never unpickled.

The cache is the user's own: its folder is made owner-only (0700) and each file 0600, written
whole and renamed into place; a folder or file that another user owns or could write is not
read (a note says so), never trusted. It is bounded (`max_bytes`): past it, the files used
longest ago are dropped (ranks and tables alike).

It is over 600 lines because a rank and a whole table are written and read back by the same
checked steps (the header's fields, the member lists, the codes' bounds), which stay private
to this one module: the only place that trusts what it reads back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import stat
import struct
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import __version__
from ..model.dump import COLUMNS, Fallback, GroupClaim, RankDump, RankTables, Reader, Writer
from ..model.records import Frame, UnreadableDump
from ..model.table import TABLE_COLUMNS, EntryTable, rank_starts
from .formats.table import RECODED
from .safety.door import parse_json
from .sources.base import DumpFile

FORMAT = 1
"""Bump when what a cache file holds changes: every older file becomes a miss."""
HEAD_BYTES = 1 << 16
"""The part of each dump hashed into its key."""
MAGIC = b"fr-analyze-rank-cache\n"
DEFAULT_MAX_BYTES = 2 << 30
"""The cache's size bound by default (2 GiB: about 35 M entries at ~60 bytes each)."""
SUFFIX = ".rank"
JOB_SUFFIX = ".job"
"""A whole table (every rank of a dump set, `RankCache.read_table`)."""

RankSink = Callable[[RankDump, Mapping[str, np.ndarray]], None]
"""`sink(rank, columns)`: a rank read (its header and tables) and its columns, in file order:
what every reader of ranks (`load_all`, a cluster's engine, this cache) hands on."""
Finish = Callable[
    [list[RankDump], list[UnreadableDump]],
    tuple[list[RankDump], list[UnreadableDump], EntryTable],
]
"""`finish(loaded, unreadable)`: what is decided over every rank at once, and the table."""
Read = Callable[
    [Sequence[DumpFile], Callable[[int, int], None] | None, RankSink],
    tuple[list[RankDump], list[UnreadableDump]],
]


@dataclass(frozen=True)
class _Hit:
    """A rank found in the cache: the file it is kept in."""

    path: Path


class RankCache:
    """The cache folder `root`, bounded to `max_bytes`."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.notes: list[str] = []  # why the cache was not used (another user's folder)
        self.hits = 0  # ranks taken from the cache
        self.stored = 0  # ranks kept
        self.job_hits = 0  # whole tables taken from the cache (`read_table`)
        self._writing: threading.Thread | None = None  # the whole table, being kept

    def read_through(
        self,
        read: Read,
        files: Sequence[DumpFile],
        progress: Callable[[int, int], None] | None,
        sink: RankSink,
        salt: str,
    ) -> tuple[list[RankDump], list[UnreadableDump]]:
        """Every rank, in file order, handed to `sink`: from the cache where it is kept, else
        read by `read` (and kept). Returns the ranks' headers and the unreadable, as `read`."""
        if not self._usable():
            return read(files, progress, sink)
        return self._through(read, files, progress, sink, [self._key(f, salt) for f in files])

    def read_table(
        self,
        read: Read,
        files: Sequence[DumpFile],
        progress: Callable[[int, int], None] | None,
        sink: RankSink,
        salt: str,
        finish: Finish,
    ) -> tuple[list[RankDump], list[UnreadableDump], EntryTable]:
        """What `finish` makes of every rank read through the cache (`read_through`): the
        ranks and their table, decided over every rank at once. Where every file is kept and
        none was unreadable, that answer is kept whole too, under the files' keys: the next
        command on the same files reads one file, not one per rank (`sink` then sees none)."""
        if not self._usable():
            return finish(*read(files, progress, sink))
        keys = [self._key(f, salt) for f in files]
        job = _job_key(keys)
        if job is not None:
            kept = _load_job(self.root / (job + JOB_SUFFIX), [f.rank for f in files])
            if kept is not None:
                self.hits += len(kept[0])
                self.job_hits += 1
                self._trim()  # the bound may be another's than when it was kept
                if progress is not None:
                    progress(len(files), len(files))
                return kept[0], [], kept[1]
        loaded, unreadable, table = finish(*self._through(read, files, progress, sink, keys))
        if job is not None and not unreadable:
            # Written beside the analysis, which runs on one core and leaves the other (and
            # the kernel's work of filling the page cache) to this: about 0.5 s at 1,024 ranks
            # taken off the first run. The pieces are made here; `wait` joins the writer.
            pieces = _encode_job(loaded, table)
            self.wait()
            self._writing = threading.Thread(
                target=self._keep_job, args=(job + JOB_SUFFIX, pieces), name="fr-analyze cache"
            )
            self._writing.start()
        return loaded, unreadable, table

    def wait(self) -> None:
        """Return once the whole table being kept (`read_table`) is written, or not kept."""
        if self._writing is not None:
            self._writing.join()
            self._writing = None

    def _keep_job(self, name: str, pieces: list[bytes | memoryview]) -> None:
        self._write(name, lambda: pieces)
        self._trim()

    def _through(
        self,
        read: Read,
        files: Sequence[DumpFile],
        progress: Callable[[int, int], None] | None,
        sink: RankSink,
        keys: list[str | None],
    ) -> tuple[list[RankDump], list[UnreadableDump]]:
        hits = {i: _Hit(self.root / (k + SUFFIX)) for i, k in enumerate(keys) if k and self._has(k)}
        if not hits:
            keep = self._keeping(sink, files, keys)
            read_all = read(files, progress, keep)
            self._trim()
            return read_all
        # Some ranks kept: read the others first (held, they are few), then hand every rank
        # to the sink in file order, so that the table is the one a fresh read builds.
        todo = [f for i, f in enumerate(files) if i not in hits]
        held: dict[int, tuple[RankDump, dict[str, np.ndarray]]] = {}

        def hold(dump: RankDump, columns: Mapping[str, np.ndarray]) -> None:
            held[dump.rank] = (dump, dict(columns))

        got, unreadable = read(todo, None, hold) if todo else ([], [])
        by_rank = {d.rank: d for d in got}
        loaded: list[RankDump] = []
        members: dict[tuple[int, ...], tuple[int, ...]] = {}
        for i, dump_file in enumerate(files):
            hit = hits.get(i)
            kept = None
            if hit is not None:
                kept = _load(hit.path, members, dump_file.rank)
                if kept is not None:
                    self.hits += 1
                    with contextlib.suppress(OSError):
                        os.utime(hit.path)  # used now: the last to be dropped
                else:  # it did not read back whole: read the file now
                    more, lost = read([dump_file], None, hold)
                    by_rank.update((d.rank, d) for d in more)
                    unreadable += lost
            if kept is None and dump_file.rank in held:
                dump, columns = held.pop(dump_file.rank)
                assert dump.tables is not None
                kept = (by_rank[dump_file.rank], dump.tables, columns)
                key = keys[i]
                if key:
                    self._store(key, kept)
            if kept is not None:
                header, tables, columns = kept
                sink(_with(header, tables), columns)
                loaded.append(header)
            if progress is not None:
                progress(i + 1, len(files))
        self._trim()
        return loaded, unreadable

    def _keeping(
        self, sink: RankSink, files: Sequence[DumpFile], keys: list[str | None]
    ) -> RankSink:
        """`sink`, each rank also kept under its file's key."""
        key_of = {f.rank: k for f, k in zip(files, keys, strict=True) if k}

        def keep(dump: RankDump, columns: Mapping[str, np.ndarray]) -> None:
            sink(dump, columns)
            key = key_of.get(dump.rank)
            if key is not None and dump.tables is not None:
                self._store(key, (dump.header(), dump.tables, columns))

        return keep

    def _usable(self) -> bool:
        """Whether the folder is this user's alone (made so when it is new)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            info = self.root.stat()
        except OSError as exc:
            self.notes.append(f"cache {self.root}: {exc.strerror}; not used")
            return False
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            self.notes.append(
                f"cache {self.root} is not this user's alone (owner or permissions): not used"
            )
            return False
        return True

    def _key(self, dump_file: DumpFile, salt: str) -> str | None:
        """The file's identity as a key; None for what is not kept (not a plain local file)."""
        if (
            dump_file.fetch is not None
            or dump_file.trace is not None
            or dump_file.kineto is not None
            or dump_file.op_groups
        ):
            return None
        try:
            with open(dump_file.path, "rb", opener=_no_follow) as stream:
                info = os.fstat(stream.fileno())
                if not stat.S_ISREG(info.st_mode):
                    return None
                head = stream.read(HEAD_BYTES)
        except OSError:
            return None
        identity = (
            f"{FORMAT}\0{__version__}\0{salt}\0{os.path.abspath(dump_file.path)}\0"
            f"{dump_file.rank}\0{dump_file.shown}\0{info.st_size}\0{info.st_mtime_ns}\0"
            f"{info.st_ino}\0"
        )
        digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape"))
        digest.update(head)
        return digest.hexdigest()

    def _has(self, key: str) -> bool:
        try:
            info = (self.root / (key + SUFFIX)).lstat()
        except OSError:
            return False
        return (
            stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077
        )

    def _store(self, key: str, kept: tuple[RankDump, RankTables, Mapping[str, np.ndarray]]) -> None:
        """Write one rank whole, then rename it into place (a failure keeps nothing)."""
        header, tables, columns = kept
        if self._write(key + SUFFIX, lambda: [_encode(header, tables, columns)]):
            self.stored += 1

    def _write(self, name: str, blob: Callable[[], Sequence[bytes | memoryview]]) -> bool:
        """Write the pieces `blob()` makes as the file `name`, whole, then rename it into
        place (a failure keeps nothing); whether it was kept."""
        try:
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=SUFFIX)
            try:
                with os.fdopen(fd, "wb") as out:
                    for piece in blob():
                        out.write(piece)
                os.replace(tmp, self.root / name)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            if not self.notes:
                self.notes.append(f"cache {self.root}: {exc.strerror}; ranks not kept")
            return False
        return True

    def _trim(self) -> None:
        """Drop the files used longest ago until the cache is within its bound."""
        try:
            found = [
                (entry.stat().st_mtime_ns, entry.stat().st_size, Path(entry.path))
                for entry in os.scandir(self.root)
                if entry.name.endswith((SUFFIX, JOB_SUFFIX))
                and entry.is_file(follow_symlinks=False)
            ]
        except OSError:
            return
        total = sum(size for _, size, _ in found)
        for _, size, path in sorted(found):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def _with(header: RankDump, tables: RankTables) -> RankDump:
    return replace(header, tables=tables)


# --- one rank as bytes, and back ----------------------------------------------------------------

_ENUMS: dict[str, type[Reader] | type[Fallback] | type[Writer]] = {
    "reader": Reader,
    "fallback_reason": Fallback,
    "fallback_writer": Writer,
}


def _encode(header: RankDump, tables: RankTables, columns: Mapping[str, np.ndarray]) -> bytes:
    """MAGIC, the JSON line's length, the JSON line, then each column's bytes."""
    head = _header_doc(header)
    table = {f.name: getattr(tables, f.name) for f in fields(RankTables)}  # tuples: lists
    layout = []
    offset = 0
    arrays = []
    for name in COLUMNS:
        if name not in columns:
            continue
        array = np.ascontiguousarray(columns[name])
        layout.append([name, array.dtype.str, len(array), offset])
        arrays.append(array.tobytes())
        offset += array.nbytes
    text = _json({"header": head, "tables": table, "columns": layout})
    return MAGIC + struct.pack("<Q", len(text)) + text + b"".join(arrays)


def _header_doc(header: RankDump) -> dict[str, Any]:
    """A rank's header (not its tables or columns) as plain JSON values."""
    head: dict[str, Any] = {}
    for f in fields(RankDump):
        if f.name in ("tables", "columns"):
            continue
        value = getattr(header, f.name)
        if f.name in _ENUMS:
            value = None if value is None else value.value
        elif f.name == "claims":
            value = [[c.name, c.desc, list(c.ranks)] for c in value.values()]
        elif f.name == "pg_status":
            value = [[k, list(v)] for k, v in value.items()]
        elif f.name == "claims_set_aside":
            value = sorted(value)
        head[f.name] = value
    return head


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _load(
    path: Path, members: dict[tuple[int, ...], tuple[int, ...]], rank: int
) -> tuple[RankDump, RankTables, dict[str, np.ndarray]] | None:
    """Rank `rank` as kept in `path`, or None where it does not read back whole, or is not
    that rank (then dropped)."""
    try:
        with open(path, "rb", opener=_no_follow) as stream:
            data = stream.read()
        got = _decode(data, members)
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error):
        got = None
    if got is not None and got[0].rank != rank:
        got = None
    if got is None:
        with contextlib.suppress(OSError):
            path.unlink()
    return got


def _members(ranks: list[Any], members: dict[tuple[int, ...], tuple[int, ...]]) -> tuple[int, ...]:
    """One tuple per distinct member list, shared by every rank that lists it (else a job of
    N ranks holds N copies of its N-member world), checked once."""
    key = tuple(ranks)
    found = members.get(key)
    if found is None:
        if not all(type(r) is int for r in key):
            raise TypeError("a member is not a rank number")
        found = members[key] = key
    return found


_PLAIN: dict[str, tuple[type, ...]] = {
    "rank": (int,),
    "file": (str,),
    "version": (str,),
    "comm_lib_version": (str,),
    "pg_config_usable": (bool,),
    "wrapped": (bool,),
    "fallback": (str,),
    "entries": (int,),
    "dialect": (str,),
    "file_time_ns": (int, type(None)),
    "name_time_ns": (int, type(None)),
    "host": (str, type(None)),
}
"""The header's plain fields and the types each may hold: a kept rank whose JSON holds
anything else does not read back (a miss), rather than failing a later stage."""


def _plain_fields_fit(header: RankDump) -> bool:
    return all(isinstance(getattr(header, name), kinds) for name, kinds in _PLAIN.items()) and all(
        isinstance(w, str) for w in header.warnings
    )


def _header_from(doc: dict[str, Any], members: Callable[[Any], tuple[int, ...]]) -> RankDump | None:
    """The header `_header_doc` wrote (each claim's members as `members` reads what it
    holds), or None where a field holds what it may not."""
    head = dict(doc)
    for name, enum in _ENUMS.items():
        value = head[name]
        head[name] = None if value is None else enum(value)
    head["claims"] = {
        name: GroupClaim(name, desc, members(ranks)) for name, desc, ranks in head["claims"]
    }
    head["pg_status"] = {int(k): (int(v[0]), int(v[1]), int(v[2])) for k, v in head["pg_status"]}
    head["claims_set_aside"] = frozenset(head["claims_set_aside"])
    head["entry_errors"] = tuple((int(i), str(t)) for i, t in head["entry_errors"])
    head["warnings"] = tuple(head["warnings"])
    head["groups"] = [(str(n), str(d)) for n, d in head["groups"]]
    header = RankDump(**head, tables=None, columns=None)
    return header if _plain_fields_fit(header) else None


def _decode(
    data: bytes, members: dict[tuple[int, ...], tuple[int, ...]]
) -> tuple[RankDump, RankTables, dict[str, np.ndarray]] | None:
    if not data.startswith(MAGIC):
        return None
    at = len(MAGIC)
    (length,) = struct.unpack_from("<Q", data, at)
    at += 8
    doc = parse_json(data[at : at + length])
    body = memoryview(data)[at + length :]
    header = _header_from(doc["header"], lambda ranks: _members(ranks, members))
    if header is None:
        return None
    t = doc["tables"]
    tables = RankTables(
        ops=[str(v) for v in t["ops"]],
        backends=[str(v) for v in t["backends"]],
        profiling_names=[str(v) for v in t["profiling_names"]],
        shapes=[tuple(tuple(int(d) for d in shape) for shape in s) for s in t["shapes"]],
        dtypes=[tuple(str(d) for d in s) for s in t["dtypes"]],
        stacks=[tuple(Frame(str(n), str(f), int(line)) for n, f, line in s) for s in t["stacks"]],
    )
    columns: dict[str, np.ndarray] = {}
    rows = None
    for name, dtype, count, offset in doc["columns"]:
        if name not in COLUMNS:
            return None
        kind = np.dtype(dtype)
        if kind.kind not in "iubf" or kind.hasobject:
            return None
        end = offset + count * kind.itemsize
        if end > len(body):
            return None
        columns[name] = np.frombuffer(body[offset:end], dtype=kind)
        rows = count if rows is None else rows
        if count != rows:
            return None
    if set(columns) != set(COLUMNS) - {"unit", "marker"} and set(columns) != set(COLUMNS):
        return None
    if not _codes_fit(columns, tables, header):
        return None
    return header, tables, columns


def _codes_fit(columns: Mapping[str, np.ndarray], tables: RankTables, header: RankDump) -> bool:
    """Every code indexes its table (a stack may be -1: none)."""
    for column, table in RECODED.items():
        values = columns.get(column)
        if values is None or not len(values):
            continue
        size = len(header.groups if table == "groups" else getattr(tables, table))
        low = -1 if column == "stack" else 0
        if int(values.min()) < low or int(values.max()) >= size:
            return False
    return True


# --- a whole table as bytes, and back -----------------------------------------------------------

JOB_MAGIC = b"fr-analyze-table-cache\n"
JOB_ALIGN = 64
"""Where each column of a kept table starts in its file: a multiple of this."""
JOB_ARRAYS: dict[str, np.dtype[Any]] = {
    **dict(TABLE_COLUMNS),
    "rank": np.dtype(np.int32),
    "row_in_rank": np.dtype(np.int32),
    "shape_numel": np.dtype(np.int64),
    "pair_rank": np.dtype(np.int32),
    "pair_group": np.dtype(np.int32),
}
"""The table's arrays, each with its type in the table."""
_JOB_CODES = {**RECODED, "group": "group_names", "pair_group": "group_names"}
"""The table's columns that hold codes, and the list each indexes."""


def _job_key(keys: Sequence[str | None]) -> str | None:
    """The key of the table of every file with these keys (None: one of them is not kept)."""
    if not keys or any(k is None for k in keys):
        return None
    digest = hashlib.sha256(f"job\0{FORMAT}\0{__version__}\0".encode())
    for key in keys:
        assert key is not None
        digest.update(key.encode("ascii") + b"\0")
    return digest.hexdigest()


_CHANGED_BY_THE_ANALYSIS = frozenset({"retired"})
"""Columns the analysis changes in place (`match.completion` clears `retired` where the
recorder does not say whether an op finished): the table is kept while it runs, so these are
copied first. The others are written from the table itself."""


def _encode_job(loaded: Sequence[RankDump], table: EntryTable) -> list[bytes | memoryview]:
    """JOB_MAGIC, the JSON line's length, the JSON line (the ranks' headers, the table's
    lists, where each array's bytes are), then each array's bytes as the table holds them,
    each at a multiple of `JOB_ALIGN` (so that they are read back mapped, not copied)."""
    lists = {
        "group_names": table.group_names,
        "ops": table.ops,
        "backends": table.backends,
        "profiling_names": table.profiling_names,
        "shapes": table.shapes,
        "dtypes": table.dtypes,
        "stacks": table.stacks,
    }
    layout = []
    arrays: list[tuple[int, memoryview]] = []
    offset = 0
    for name in JOB_ARRAYS:
        array = np.ascontiguousarray(getattr(table, name))
        if name in _CHANGED_BY_THE_ANALYSIS:
            array = array.copy()  # as loaded, not as the analysis leaves it
        offset = -(-offset // JOB_ALIGN) * JOB_ALIGN
        layout.append([name, array.dtype.str, len(array), offset])
        arrays.append((offset, array.data.cast("B")))
        offset += array.nbytes
    # Each distinct member list once (a job of N ranks lists its N-member world N times).
    members: dict[tuple[int, ...], int] = {}
    heads = []
    for dump in loaded:
        head = _header_doc(dump)
        head["claims"] = [
            [c.name, c.desc, members.setdefault(c.ranks, len(members))]
            for c in dump.claims.values()
        ]
        heads.append(head)
    text = _json(
        {
            "members": [list(m) for m in members],
            "ranks": heads,
            "lists": lists,
            "arrays": layout,
        }
    )
    start = len(JOB_MAGIC) + 8 + len(text)
    text += b" " * (-start % JOB_ALIGN)  # JSON's own white space: the columns start aligned
    pieces: list[bytes | memoryview] = [JOB_MAGIC + struct.pack("<Q", len(text)) + text]
    at = 0
    for offset, data in arrays:
        pieces += [bytes(offset - at), data]
        at = offset + len(data)
    return pieces


def _load_job(path: Path, ranks: Sequence[int]) -> tuple[list[RankDump], EntryTable] | None:
    """The ranks and table kept in `path` for files of these `ranks`; None where there is
    none, it is not this user's alone (not read, nor dropped here), or it does not read back whole
    (then dropped)."""
    try:
        with open(path, "rb", opener=_no_follow) as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
                return None
            # Mapped copy-on-write: the columns are the file's pages, read as they are used
            # (writable, the file never written). Files here are replaced by a rename, never
            # rewritten in place, so a mapped one does not shrink under the reader.
            data = np.frombuffer(
                mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_COPY), dtype=np.uint8
            )
    except (OSError, ValueError):  # ValueError: an empty file
        return None
    try:
        got = _decode_job(data, sorted(set(ranks)))
    except (ValueError, KeyError, TypeError, IndexError, struct.error):
        got = None
    if got is None:
        with contextlib.suppress(OSError):
            path.unlink()
    else:
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be dropped
    return got


def _decode_job(
    data: npt.NDArray[np.uint8], ranks: list[int]
) -> tuple[list[RankDump], EntryTable] | None:
    at = len(JOB_MAGIC)
    if data[:at].tobytes() != JOB_MAGIC:
        return None
    (length,) = struct.unpack_from("<Q", data.data, at)
    at += 8
    doc = parse_json(data[at : at + length].tobytes())
    body = data[at + length :].data
    shared: dict[tuple[int, ...], tuple[int, ...]] = {}
    lists_of_members = [_members(ranks, shared) for ranks in doc["members"]]

    def members(index: Any) -> tuple[int, ...]:
        if type(index) is not int or index < 0:
            raise TypeError("a claim's members are not a member list's number")
        return lists_of_members[index]

    loaded = []
    for head in doc["ranks"]:
        header = _header_from(head, members)
        if header is None:
            return None
        loaded.append(header)
    if [d.rank for d in loaded] != ranks:
        return None
    t = doc["lists"]
    lists: dict[str, Any] = {
        "group_names": [(str(n), str(d)) for n, d in t["group_names"]],
        "ops": [str(v) for v in t["ops"]],
        "backends": [str(v) for v in t["backends"]],
        "profiling_names": [str(v) for v in t["profiling_names"]],
        "shapes": [tuple(tuple(int(d) for d in shape) for shape in s) for s in t["shapes"]],
        "dtypes": [tuple(str(d) for d in s) for s in t["dtypes"]],
        "stacks": [
            tuple(Frame(str(n), str(f), int(line)) for n, f, line in s) for s in t["stacks"]
        ],
    }
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, count, offset in doc["arrays"]:
        target = JOB_ARRAYS.get(name)
        kind = np.dtype(dtype)
        if target is None or name in arrays or kind.kind not in "iubf" or kind.hasobject:
            return None
        if not np.can_cast(kind, target, "safe") or offset < 0 or count < 0:
            return None
        end = offset + count * kind.itemsize
        if end > len(body):
            return None
        array = np.frombuffer(body[offset:end], dtype=kind)
        arrays[name] = array if kind == target else array.astype(target)
    if set(arrays) != set(JOB_ARRAYS) or not _table_fits(arrays, lists, ranks):
        return None
    given: dict[str, Any] = {**arrays, **lists}
    return loaded, EntryTable(**given)


def _table_fits(
    arrays: Mapping[str, np.ndarray], lists: Mapping[str, list[Any]], ranks: list[int]
) -> bool:
    """Every column as long as the table, every code within what it indexes, every row of
    one of `ranks`."""
    n = len(arrays["rank"])
    pairs = len(arrays["pair_rank"])
    if len(arrays["shape_numel"]) != len(lists["shapes"]) or len(arrays["pair_group"]) != pairs:
        return False
    if any(len(arrays[name]) != n for name, _ in TABLE_COLUMNS) or len(arrays["row_in_rank"]) != n:
        return False
    bounds = {column: (0, len(lists[table])) for column, table in _JOB_CODES.items()}
    bounds["stack"] = (-1, len(lists["stacks"]))
    bounds["pair"] = (0, pairs)
    bounds["marker"] = (-1, n)
    bounds["row_in_rank"] = (0, max(n, 1))
    for column, (low, size) in bounds.items():
        values = arrays[column]
        if len(values) and (int(values.min()) < low or int(values.max()) >= size):
            return False
    rank = arrays["rank"]
    if len(rank) and not (rank[1:] >= rank[:-1]).all():  # rows in rank order
        return False
    known = np.array(ranks, dtype=np.int64)
    return bool(
        np.isin(rank[rank_starts(rank)], known).all() and np.isin(arrays["pair_rank"], known).all()
    )
