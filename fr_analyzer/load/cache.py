"""Ranks read before, kept in the user's cache: the next command on the same dumps reads the
cache instead of decoding every file again.

A rank is kept under its file's identity: the path, size, modification time and inode, a hash
of the file's first `HEAD_BYTES` and last `TAIL_BYTES` (a file rewritten in place within one
tick of its clock still changes its key), what changes its reading (the size limit, a torchft
world size, the ranks the folder's files show) and this cache's format, fr-analyze's
version and its code as installed (`code_digest`: an edited checkout is another code). A
changed file has another key, and is read again. Only plain local files read alone are kept
(not an archive's member, a URL's answer, a file read with its Execution Trace or Kineto
trace, a gloo trace whose ops' groups were settled across ranks).

What is kept is the table built from the ranks read (`read_table`), written once: one `.job`
file per dump set, holding the table's columns as it holds them, the ranks' headers and the
table's lists as JSON, and an index (each rank's key, and its codes into the table's lists),
so that it serves twice. Where every file has a key and none was unreadable, it is named by
the keys of every file and is the whole answer: a command on a dump set read before reads
this one file (its columns mapped, not copied). Otherwise, and when one dump changed, the
ranks it indexes are taken from it one by one (each rank's rows, its codes turned back into
its own), and only the others are read; only tables of the same folder are searched (each
table's name begins with a digest of the folder that holds its files). A rank's data is
written once, never a file per rank beside the table: the first run writes a third less.

Beside a whole table, what was made of it is kept too (`keep`, `read_kept`: the pipeline's
analysis, written by `kept`), under the table's name and a key its maker gives (everything
else that changes it): a command whose table came whole from the cache takes it back instead
of making it again. It follows the table's rules below, and is counted in the bound.

Nothing is unpickled: the JSON goes through the door (`safety.door.parse_json`) and the
columns are taken as typed arrays of their bytes; a table that does not read back whole (a
truncated file, a code past its list, a rank's rows out of place) is a miss, dropped.

The cache is the user's own: its folder is made owner-only (0700) and each file 0600, written
whole and renamed into place; a folder or file that another user owns or could write is not
read (a note says so), never trusted. It is bounded (`max_bytes`): past it, the files used
longest ago are dropped.

It is over 600 lines because a table is written and read back by checked steps (the header's
fields, the member lists, the codes' bounds, each rank's rows), which stay private to this one
module: the only place that trusts what it reads back.
"""

from __future__ import annotations

import contextlib
import functools
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
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from .. import __version__
from ..model.dump import COLUMNS, Fallback, GroupClaim, RankDump, RankTables, Reader, Writer
from ..model.records import Frame, UnreadableDump
from ..model.table import TABLE_COLUMNS, EntryTable, rank_starts
from .formats.table import RECODED
from .safety.door import parse_json
from .sources.base import DumpFile

FORMAT = 2
"""Bump when what a cache file holds changes: every older file becomes a miss."""
HEAD_BYTES = 1 << 12
"""The head of each dump hashed into its key: what kind of dump it is (the version, the start
of pg_config, the oldest entries)."""
TAIL_BYTES = 1 << 12
"""The tail of each dump hashed into its key too: where a dump written again differs first
(the newest entries are the last; a gzip copy ends with its content's CRC-32 and length).
Head and tail, 8 KiB, catch a file rewritten in place with its size, time and inode kept
better than the 64 KiB head hashed before, which covered the oldest entries alone; and a
follow-up at 1,024 ranks reads and hashes 8 MiB, not 64 MiB (about 0.07 s)."""
DEFAULT_MAX_BYTES = 2 << 30
"""The cache's size bound by default (2 GiB: about 15 M entries at ~140 bytes each)."""
JOB_SUFFIX = ".job"
"""A table of the ranks of a dump set (`RankCache.read_table`)."""
OLD_SUFFIXES = (".rank",)
"""Files of an older format (one per rank): never read, dropped when the cache is trimmed."""
KEPT_SUFFIX = ".kept"
"""What was made of a whole table (an analysis), kept beside it (`RankCache.keep`)."""
TMP_PREFIX = ".tmp-"
"""A file being written (then renamed into place): counted in the bound, never read."""

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
KeptRank = tuple[RankDump, RankTables, dict[str, np.ndarray]]
"""A rank taken from a kept table: its header as read, its tables, its columns."""
T = TypeVar("T")
_Own = tuple[list[tuple[str, str]], RankTables]
"""A rank's own lists as read (its groups and tables): what its codes index."""


class RankCache:
    """The cache folder `root`, bounded to `max_bytes`."""

    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.notes: list[str] = []  # why the cache was not used (another user's folder)
        self.hits = 0  # ranks taken from the cache
        self.stored = 0  # ranks read from their dumps and kept (once the table is written)
        self.job_hits = 0  # whole tables taken from the cache (`read_table`)
        self._writing: threading.Thread | None = None  # the table, being kept
        # the name of the whole table of the files `read_table` was given (taken from the
        # cache, or being kept): what `keep` and `read_kept` key by; None: there is none
        self.whole: str | None = None
        self.whole_hit = False  # that table was taken from the cache
        self.kept_hits = 0  # what was made of a whole table, taken from the cache (`read_kept`)

    def read_table(
        self,
        read: Read,
        files: Sequence[DumpFile],
        progress: Callable[[int, int], None] | None,
        sink: RankSink,
        salt: str,
        finish: Finish,
    ) -> tuple[list[RankDump], list[UnreadableDump], EntryTable]:
        """What `finish` makes of every rank, each handed to `sink` in file order (taken from
        a kept table where one indexes its file's key, else read by `read`): the ranks and
        their table, decided over every rank at once. Where every file is kept and none was
        unreadable, that answer is kept whole, under the files' keys: the next command on the
        same files reads one file (`sink` then sees none)."""
        if not self._usable():
            return finish(*read(files, progress, sink))
        keys = [self._key(f, salt) for f in files]
        folder = _folder(files)
        job = _job_key(keys)
        self.whole, self.whole_hit = None, False
        if job is not None:
            kept = _load_job(
                self.root / f"{folder}-{job}{JOB_SUFFIX}", sorted({f.rank for f in files})
            )
            if kept is not None:
                self.hits += len(kept[0])
                self.job_hits += 1
                self.whole, self.whole_hit = f"{folder}-{job}", True
                self._trim()  # the bound may be another's than when it was kept
                if progress is not None:
                    progress(len(files), len(files))
                return kept[0], [], kept[1]
        own: dict[int, _Own] = {}

        def noting(dump: RankDump, columns: Mapping[str, np.ndarray]) -> None:
            assert dump.tables is not None
            own[dump.rank] = (dump.groups, dump.tables)
            sink(dump, columns)

        as_read, unreadable, taken = self._through(read, files, progress, noting, keys, folder)
        loaded, unreadable, table = finish(list(as_read), unreadable)
        whole = job is not None and not unreadable
        self._keep(files, keys, folder, whole, as_read, taken, own, table, loaded)
        return loaded, unreadable, table

    def read_kept(self, key: str, decode: Callable[[npt.NDArray[np.uint8]], T | None]) -> T | None:
        """What `keep` kept under `key` beside the whole table just taken from the cache
        (`read_table`), as `decode` reads the file's bytes (mapped); None where there is no
        such table or file, it is not this user's alone, or it is past the bound (not read),
        or `decode` does not read it back (then dropped)."""
        if not self.whole_hit:
            return None
        path = self._kept_path(key)
        data = _open_own(path)
        if data is None or len(data) > self.max_bytes:
            return None
        got = decode(data)
        if got is None:
            with contextlib.suppress(OSError):
                path.unlink()
        else:
            self.kept_hits += 1
            with contextlib.suppress(OSError):
                os.utime(path)  # used now: the last to be dropped
        return got

    def keep(self, key: str, pieces: Sequence[bytes | memoryview]) -> None:
        """Keep `pieces` under `key` beside the whole table of the files `read_table` was
        given (taken from the cache or being kept; else nothing is kept), written after it,
        whole, by the same writer (`wait` joins it); not past the cache's bound."""
        if self.whole is None or sum(len(p) for p in pieces) > self.max_bytes:
            return
        name = self._kept_path(key).name
        before = self._writing

        def write() -> None:
            if before is not None:
                before.join()
            self._write(name, lambda: pieces)
            self._trim()

        self._writing = threading.Thread(target=write, name="fr-analyze cache")
        self._writing.start()

    def _kept_path(self, key: str) -> Path:
        assert self.whole is not None
        # the table's name holds the format, the version and the code already (`_job_key`)
        digest = hashlib.sha256(f"kept\0{self.whole}\0".encode())
        digest.update(key.encode("utf-8", "surrogateescape"))
        return self.root / f"{self.whole}-{digest.hexdigest()}{KEPT_SUFFIX}"

    def wait(self) -> None:
        """Return once the table being kept (`read_table`) is written, or not kept."""
        if self._writing is not None:
            self._writing.join()
            self._writing = None

    def _keep(
        self,
        files: Sequence[DumpFile],
        keys: list[str | None],
        folder: str,
        whole: bool,
        as_read: Sequence[RankDump],
        taken: set[int],
        own: Mapping[int, _Own],
        table: EntryTable,
        loaded: Sequence[RankDump],
    ) -> None:
        """Start writing the table beside the analysis, indexed by the keys of the ranks it
        holds (`_encode_job`); a table of some ranks only (one unreadable, one not kept) is
        written once for those keys, and never taken as the whole answer."""
        key_of: dict[int, str | None] = {}
        for dump_file, key in zip(files, keys, strict=True):
            key_of[dump_file.rank] = None if dump_file.rank in key_of else key  # one file a rank
        index = {d.rank: key_of[d.rank] for d in loaded if key_of.get(d.rank) and d.rank in own}
        if not index:
            return
        if whole:
            key = _job_key(keys)
        else:
            key = _part_key(sorted(k for k in index.values() if k is not None))
        name = f"{folder}-{key}"
        if _own_file(self.root / (name + JOB_SUFFIX)):
            self.whole = name if whole else None
            return  # these very ranks, kept already
        size = sum(column.nbytes for column in table.arrays().values())
        if size > self.max_bytes:  # kept, it would be dropped at once, after writing it all
            self.notes.append(
                f"cache {self.root}: this job's table ({size / 2**30:.1f} GiB) is past the"
                f" cache's bound ({self.max_bytes / 2**30:.1f} GiB): not kept, the next"
                " command reads the dumps again"
            )
            return
        # Written beside the analysis, which runs on one core and leaves the other (and
        # the kernel's work of filling the page cache) to this. The pieces are made here;
        # `wait` joins the writer.
        self.whole = name if whole else None
        read_now = sum(1 for i, f in enumerate(files) if i not in taken and f.rank in index)
        pieces = _encode_job(loaded, table, whole, index, own, {d.rank: d for d in as_read})
        self.wait()
        self._writing = threading.Thread(
            target=self._keep_job,
            args=(name + JOB_SUFFIX, pieces, read_now),
            name="fr-analyze cache",
        )
        self._writing.start()

    def _keep_job(self, name: str, pieces: list[bytes | memoryview], read_now: int) -> None:
        if self._write(name, lambda: pieces):
            self.stored += read_now
        self._trim()

    def _through(
        self,
        read: Read,
        files: Sequence[DumpFile],
        progress: Callable[[int, int], None] | None,
        sink: RankSink,
        keys: list[str | None],
        folder: str,
    ) -> tuple[list[RankDump], list[UnreadableDump], set[int]]:
        """Every rank handed to `sink` in file order, those a kept table indexes taken from
        it; the ranks' headers, the unreadable, and which files were taken."""
        found = self._kept_ranks(files, keys, folder)
        if not found:
            return (*read(files, progress, sink), set())
        # Some ranks kept: read the others first (held, they are few), then hand every rank
        # to the sink in file order, so that the table is the one a fresh read builds.
        todo = [f for i, f in enumerate(files) if i not in found]
        held: dict[int, tuple[RankDump, dict[str, np.ndarray]]] = {}

        def hold(dump: RankDump, columns: Mapping[str, np.ndarray]) -> None:
            held[dump.rank] = (dump, dict(columns))

        got, unreadable = read(todo, None, hold) if todo else ([], [])
        by_rank = {d.rank: d for d in got}
        loaded: list[RankDump] = []
        for i, dump_file in enumerate(files):
            kept = found.get(i)
            if kept is not None:
                self.hits += 1
            elif dump_file.rank in held:
                dump, columns = held.pop(dump_file.rank)
                assert dump.tables is not None
                kept = (by_rank[dump_file.rank], dump.tables, columns)
            if kept is not None:
                header, tables, columns = kept
                sink(replace(header, tables=tables), columns)
                loaded.append(header)
            if progress is not None:
                progress(i + 1, len(files))
        return loaded, unreadable, set(found)

    def _kept_ranks(
        self, files: Sequence[DumpFile], keys: list[str | None], folder: str
    ) -> dict[int, KeptRank]:
        """The files (by position) whose ranks a kept table of the same `folder` indexes, each
        rank as read; the newest table first where two index one key. A table that does not
        read back whole is dropped, and its ranks are read."""
        wanted = {bytes.fromhex(k): i for i, k in enumerate(keys) if k}
        where: dict[Path, dict[int, int]] = {}  # table -> {file's position: rank's position}
        for path in self._tables(folder):
            digests = _index_of(path)
            for at, digest in enumerate(digests or ()):
                i = wanted.pop(digest, None)
                if i is not None:
                    where.setdefault(path, {})[i] = at
            if not wanted:
                break
        found: dict[int, KeptRank] = {}
        for path, positions in where.items():
            ranks = _load_ranks(path, set(positions.values()))
            for i, at in positions.items():
                kept = ranks.get(at)
                if kept is not None and kept[0].rank == files[i].rank:
                    found[i] = kept
        return found

    def _tables(self, folder: str) -> list[Path]:
        """The tables kept of files in `folder` (`_folder`), the newest first."""
        try:
            found = [
                (entry.stat(follow_symlinks=False).st_mtime_ns, Path(entry.path))
                for entry in os.scandir(self.root)
                if entry.name.endswith(JOB_SUFFIX)
                and entry.name.startswith(folder + "-")
                and entry.is_file(follow_symlinks=False)
            ]
        except OSError:
            return []
        return [path for _, path in sorted(found, reverse=True)]

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
                if info.st_size > HEAD_BYTES:
                    stream.seek(max(info.st_size - TAIL_BYTES, HEAD_BYTES))
                    head += stream.read(TAIL_BYTES)
        except OSError:
            return None
        identity = (
            f"{_made_by()}\0{salt}\0{os.path.abspath(dump_file.path)}\0"
            f"{dump_file.rank}\0{dump_file.shown}\0{info.st_size}\0{info.st_mtime_ns}\0"
            f"{info.st_ino}\0"
        )
        digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape"))
        digest.update(head)
        return digest.hexdigest()

    def _write(self, name: str, blob: Callable[[], Sequence[bytes | memoryview]]) -> bool:
        """Write the pieces `blob()` makes as the file `name`, whole, then rename it into
        place (a failure keeps nothing); whether it was kept."""
        try:
            fd, tmp = tempfile.mkstemp(
                dir=self.root, prefix=TMP_PREFIX, suffix=os.path.splitext(name)[1]
            )
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
        """Drop the files used longest ago until the cache is within its bound (and every file
        of an older format, never read again)."""
        try:
            found = []
            for entry in os.scandir(self.root):
                if not entry.is_file(follow_symlinks=False):
                    continue
                name = entry.name
                if name.endswith(OLD_SUFFIXES) and not name.startswith(TMP_PREFIX):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
                elif name.endswith((JOB_SUFFIX, KEPT_SUFFIX, *OLD_SUFFIXES)):  # or being written
                    info = entry.stat(follow_symlinks=False)
                    found.append((info.st_mtime_ns, info.st_size, Path(entry.path)))
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


def _own_file(path: Path) -> bool:
    """Whether `path` is a plain file of this user's alone."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


# --- a rank's header as JSON, and back ----------------------------------------------------------

_ENUMS: dict[str, type[Reader] | type[Fallback] | type[Writer]] = {
    "reader": Reader,
    "fallback_reason": Fallback,
    "fallback_writer": Writer,
}


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


# --- a table as bytes, and back -----------------------------------------------------------------

JOB_MAGIC = b"fr-analyze-table-cache\n"
JOB_ALIGN = 64
"""Where each column of a kept table starts in its file: a multiple of this."""
DIGEST = 32
"""The bytes of a rank's key in a table's index (a SHA-256)."""
JOB_ARRAYS: dict[str, np.dtype[Any]] = {
    **dict(TABLE_COLUMNS),
    "rank": np.dtype(np.int32),
    "row_in_rank": np.dtype(np.int32),
    "shape_numel": np.dtype(np.int64),
    "pair_rank": np.dtype(np.int32),
    "pair_group": np.dtype(np.int32),
}
"""The table's arrays, each with its type in the table."""
OWN_LISTS = ("group_names", "ops", "backends", "profiling_names", "shapes", "dtypes", "stacks")
"""The table's lists a rank's own codes index (its groups, then `RankTables`' lists)."""
INDEX_ARRAYS: dict[str, np.dtype[Any]] = {
    "own_codes": np.dtype(np.int32),
    "own_starts": np.dtype(np.int64),
}
"""Each rank's own lists as codes into the table's (`own_codes`, rank by rank, list by list in
`OWN_LISTS` order; `own_starts` where each rank's list starts, one more at the end): what
turns a rank's rows back into its own codes."""
_JOB_CODES = {**RECODED, "group": "group_names", "pair_group": "group_names"}
"""The table's columns that hold codes, and the list each indexes."""
_OWN_CODES = {
    column: ("group_names" if table == "groups" else table) for column, table in RECODED.items()
}
"""A rank's columns that hold its own codes, and the table's list each indexes."""


def _folder(files: Sequence[DumpFile]) -> str:
    """What the names of the tables of these files begin with: a digest of the folder that
    holds them all. A file's key holds its absolute path, so only a table of files in that
    folder can index it: a dump set read for the first time opens those tables' indexes, not
    every table of a cache that may hold thousands of small ones."""
    where = [os.path.abspath(f.path) for f in files if f.fetch is None]
    try:
        common = os.path.commonpath(where) if where else ""
    except ValueError:  # paths on different drives
        common = ""
    return hashlib.sha256(common.encode("utf-8", "surrogateescape")).hexdigest()[:16]


@functools.cache
def _made_by() -> str:
    """What made a cache file, in every key: this cache's format, fr-analyze's version and
    its code as installed (`code_digest`), so that fr-analyze changed without a new version
    number (an edited checkout, a reinstall) never takes a table or an analysis that older
    code made."""
    return f"{FORMAT}\0{__version__}\0{code_digest(Path(__file__).resolve().parents[1])}"


def code_digest(package: Path) -> str:
    """A digest of the files of `package` (each one's path in it, size and modification
    time; `__pycache__` left out): about 140 files stat'ed, a few milliseconds."""
    digest = hashlib.sha256()
    for folder, children, names in os.walk(package):
        children[:] = sorted(c for c in children if c != "__pycache__")
        for name in sorted(names):
            path = os.path.join(folder, name)
            info = os.stat(path)
            made = f"{os.path.relpath(path, package)}\0{info.st_size}\0{info.st_mtime_ns}\0"
            digest.update(made.encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _job_key(keys: Sequence[str | None]) -> str | None:
    """The key of the table of every file with these keys (None: one of them is not kept)."""
    if not keys or any(k is None for k in keys):
        return None
    digest = hashlib.sha256(f"job\0{_made_by()}\0".encode())
    for key in keys:
        assert key is not None
        digest.update(key.encode("ascii") + b"\0")
    return digest.hexdigest()


def _part_key(keys: Sequence[str]) -> str:
    """The name of a table of some ranks only (never the whole answer): another digest than
    any `_job_key`."""
    digest = hashlib.sha256(f"part\0{_made_by()}\0".encode())
    for key in keys:
        digest.update(key.encode("ascii") + b"\0")
    return digest.hexdigest()


_CHANGED_BY_THE_ANALYSIS = frozenset({"retired"})
"""Columns the analysis changes in place (`match.completion` clears `retired` where the
recorder does not say whether an op finished): the table is kept while it runs, so these are
copied first. The others are written from the table itself."""


def _encode_job(
    loaded: Sequence[RankDump],
    table: EntryTable,
    whole: bool,
    index: Mapping[int, str | None],
    own: Mapping[int, _Own],
    as_read: Mapping[int, RankDump],
) -> list[bytes | memoryview]:
    """JOB_MAGIC; the number of ranks and each one's key (`DIGEST` bytes; zeros for a rank
    not indexed); the JSON line's length and the JSON line (the ranks' headers, each one's as
    read where the job changed it, the table's lists, where each array's bytes are); then
    each array's bytes as the table holds them, each at a multiple of `JOB_ALIGN` (so that
    they are read back mapped, not copied), the index's arrays last."""
    lists = {name: getattr(table, name) for name in OWN_LISTS}
    codes, starts, digests = _own_codes(loaded, lists, index, own)
    layout = []
    arrays: list[tuple[int, memoryview]] = []
    offset = 0
    given = {**{name: getattr(table, name) for name in JOB_ARRAYS}, **codes_arrays(codes, starts)}
    for name, array in given.items():
        array = np.ascontiguousarray(array)
        if name in _CHANGED_BY_THE_ANALYSIS:
            array = array.copy()  # as loaded, not as the analysis leaves it
        offset = -(-offset // JOB_ALIGN) * JOB_ALIGN
        layout.append([name, array.dtype.str, len(array), offset])
        arrays.append((offset, array.data.cast("B")))
        offset += array.nbytes
    # Each distinct member list once (a job of N ranks lists its N-member world N times).
    members: dict[tuple[int, ...], int] = {}

    def doc(dump: RankDump) -> dict[str, Any]:
        head = _header_doc(dump)
        head["claims"] = [
            [c.name, c.desc, members.setdefault(c.ranks, len(members))]
            for c in dump.claims.values()
        ]
        return head

    heads = [doc(d) for d in loaded]
    read_as = [
        [at, doc(as_read[d.rank])]
        for at, d in enumerate(loaded)
        if digests[at] != bytes(DIGEST) and as_read.get(d.rank, d) != d
    ]
    text = _json(
        {
            "whole": whole,
            "members": [list(m) for m in members],
            "ranks": heads,
            "read_as": read_as,
            "lists": lists,
            "arrays": layout,
        }
    )
    before = JOB_MAGIC + struct.pack("<Q", len(loaded)) + b"".join(digests)
    start = len(before) + 8 + len(text)
    text += b" " * (-start % JOB_ALIGN)  # JSON's own white space: the columns start aligned
    pieces: list[bytes | memoryview] = [before + struct.pack("<Q", len(text)) + text]
    at = 0
    for offset, data in arrays:
        pieces += [bytes(offset - at), data]
        at = offset + len(data)
    return pieces


def codes_arrays(codes: list[int], starts: list[int]) -> dict[str, np.ndarray]:
    """The index's arrays (`INDEX_ARRAYS`) of these codes and starts."""
    return {
        "own_codes": np.array(codes, dtype=np.int32),
        "own_starts": np.array(starts, dtype=np.int64),
    }


def _own_codes(
    loaded: Sequence[RankDump],
    lists: Mapping[str, list[Any]],
    index: Mapping[int, str | None],
    own: Mapping[int, _Own],
) -> tuple[list[int], list[int], list[bytes]]:
    """Each rank's own lists as codes into the table's, where each rank's start, and each
    rank's key: zeros (not indexed) for a rank without one, or whose own list holds a value
    twice (its codes could not be turned back)."""
    where = {name: {value: code for code, value in enumerate(lists[name])} for name in OWN_LISTS}
    codes: list[int] = []
    starts: list[int] = [0]
    digests: list[bytes] = []
    for dump in loaded:
        key = index.get(dump.rank)
        mine: list[int] = []
        if key is not None:
            groups, tables = own[dump.rank]
            for name in OWN_LISTS:
                values = groups if name == "group_names" else getattr(tables, name)
                got = [where[name].get(v, -1) for v in values]
                if -1 in got or len(set(got)) != len(got):
                    key, mine = None, []
                    break
                mine += got
                starts.append(len(codes) + len(mine))
        if key is None:
            starts += [len(codes)] * len(OWN_LISTS)
        codes += mine
        digests.append(bytes(DIGEST) if key is None else bytes.fromhex(key))
    return codes, starts, digests


def _open_own(path: Path) -> npt.NDArray[np.uint8] | None:
    """The file `path` mapped copy-on-write, or None where there is none or it is not this
    user's alone (not read, nor dropped here)."""
    try:
        with open(path, "rb", opener=_no_follow) as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
                return None
            # Mapped copy-on-write: the columns are the file's pages, read as they are used
            # (writable, the file never written). Files here are replaced by a rename, never
            # rewritten in place, so a mapped one does not shrink under the reader.
            return np.frombuffer(
                mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_COPY), dtype=np.uint8
            )
    except (OSError, ValueError):  # ValueError: an empty file
        return None


def _index_of(path: Path) -> list[bytes] | None:
    """The keys of the ranks the table in `path` holds (zeros: not indexed); None where it
    is not this user's alone (not read), or not a table (then dropped)."""
    data = _open_own(path)
    if data is None:
        return None
    at = len(JOB_MAGIC)
    keys = b""
    if len(data) >= at + 8 and data[:at].tobytes() == JOB_MAGIC:
        (count,) = struct.unpack_from("<Q", data.data, at)
        keys = data[at + 8 : at + 8 + count * DIGEST].tobytes()
    if not keys or len(keys) != count * DIGEST:
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return [keys[i : i + DIGEST] for i in range(0, len(keys), DIGEST)]


@dataclass(frozen=True)
class _Kept:
    """A table read back whole, and checked."""

    loaded: list[RankDump]  # the ranks' headers, as the job decided them
    table: EntryTable
    whole: bool  # the answer for every file of its keys (none unreadable)
    read_as: dict[int, RankDump]  # by position: a rank's header as read, where it differs
    own_codes: npt.NDArray[np.int32]
    own_starts: npt.NDArray[np.int64]


def _read_kept(path: Path, ranks: Sequence[int] | None) -> _Kept | None:
    """The table kept in `path` (for files of exactly these `ranks`, when given); None where
    there is none, it is not this user's alone (not read, nor dropped), or it does not read
    back whole (then dropped)."""
    data = _open_own(path)
    if data is None:
        return None
    try:
        got = _decode_job(data, None if ranks is None else sorted(set(ranks)))
    except (ValueError, KeyError, TypeError, IndexError, struct.error):
        got = None
    if got is None:
        with contextlib.suppress(OSError):
            path.unlink()
    else:
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be dropped
    return got


def _load_job(path: Path, ranks: Sequence[int]) -> tuple[list[RankDump], EntryTable] | None:
    """The whole answer kept in `path` for files of these `ranks`, or None (`_read_kept`); a
    table of some ranks only is not one."""
    kept = _read_kept(path, ranks)
    if kept is None or not kept.whole:
        return None
    return kept.loaded, kept.table


def _load_ranks(path: Path, positions: set[int]) -> dict[int, KeptRank]:
    """The ranks at these positions of the table kept in `path`, as read (`_own_rank`); those
    that do not turn back whole are left out (read again)."""
    kept = _read_kept(path, None)
    if kept is None:
        return {}
    starts = rank_starts(kept.table.rank)
    bounds = dict(
        zip(
            kept.table.rank[starts].tolist(),
            zip(starts.tolist(), [*starts[1:].tolist(), len(kept.table.rank)], strict=True),
            strict=True,
        )
    )
    found = {}
    for at in sorted(positions):
        if at >= len(kept.loaded):
            continue
        header = kept.read_as.get(at, kept.loaded[at])
        rows = bounds.get(header.rank, (0, 0))
        rank = _own_rank(kept, at, header, rows)
        if rank is not None:
            found[at] = rank
    return found


def _own_rank(kept: _Kept, at: int, header: RankDump, rows: tuple[int, int]) -> KeptRank | None:
    """The rank at position `at` of the table, its rows `rows`, as it was read: its own
    lists, its columns with its own codes (the table's turned back through its own lists),
    its block markers its own rows; None where its codes do not turn back."""
    table = kept.table
    first, end = rows
    lists: dict[str, list[Any]] = {}
    back: dict[str, npt.NDArray[np.int32]] = {}
    for number, name in enumerate(OWN_LISTS):
        s = 7 * at + number
        codes = kept.own_codes[int(kept.own_starts[s]) : int(kept.own_starts[s + 1])]
        of_table = getattr(table, name)
        lists[name] = [of_table[c] for c in codes.tolist()]
        turned = np.full(len(of_table) + 1, -1, dtype=np.int32)  # the last: "none" (-1)
        turned[codes] = np.arange(len(codes), dtype=np.int32)
        back[name] = turned
    if lists["group_names"] != header.groups:
        return None
    columns: dict[str, np.ndarray] = {}
    for name in COLUMNS:
        values = getattr(table, name)[first:end]
        if name in _OWN_CODES:
            ours = back[_OWN_CODES[name]][values]  # -1 (a stack's "none") takes the last
            if ((ours < 0) != (values < 0)).any():
                return None  # a code this rank's own lists do not hold
            values = ours
        elif name == "marker":
            if len(values) and (
                values.max() >= end or values[values >= 0].min(initial=first) < first
            ):
                return None
            values = np.where(values >= 0, values - first, -1).astype(values.dtype)
        columns[name] = values
    tables = RankTables(**{name: lists[name] for name in OWN_LISTS if name != "group_names"})
    return header, tables, columns


def _decode_job(data: npt.NDArray[np.uint8], ranks: list[int] | None) -> _Kept | None:
    at = len(JOB_MAGIC)
    if data[:at].tobytes() != JOB_MAGIC:
        return None
    (count,) = struct.unpack_from("<Q", data.data, at)
    at += 8 + count * DIGEST
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
    numbers = [d.rank for d in loaded]
    if len(loaded) != count or numbers != sorted(set(numbers)):
        return None
    if ranks is not None and numbers != ranks:
        return None
    read_as: dict[int, RankDump] = {}
    for position, head in doc["read_as"]:
        header = _header_from(head, members)
        if header is None or type(position) is not int or not 0 <= position < count:
            return None
        if header.rank != loaded[position].rank:
            return None
        read_as[position] = header
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
    wanted = {**JOB_ARRAYS, **INDEX_ARRAYS}
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, rows, offset in doc["arrays"]:
        target = wanted.get(name)
        kind = np.dtype(dtype)
        if target is None or name in arrays or kind.kind not in "iubf" or kind.hasobject:
            return None
        if not np.can_cast(kind, target, "safe") or offset < 0 or rows < 0:
            return None
        end = offset + rows * kind.itemsize
        if end > len(body):
            return None
        array = np.frombuffer(body[offset:end], dtype=kind)
        arrays[name] = array if kind == target else array.astype(target)
    if set(arrays) != set(wanted) or not _table_fits(arrays, lists, numbers):
        return None
    own_codes, own_starts = arrays.pop("own_codes"), arrays.pop("own_starts")
    if ranks is None and not _index_fits(own_codes, own_starts, lists, count):
        return None  # checked where ranks are taken one by one (the whole answer needs none)
    given: dict[str, Any] = {**arrays, **lists}
    whole = doc["whole"]
    if type(whole) is not bool:
        return None
    return _Kept(loaded, EntryTable(**given), whole, read_as, own_codes, own_starts)


def _index_fits(
    codes: npt.NDArray[np.int32],
    starts: npt.NDArray[np.int64],
    lists: Mapping[str, list[Any]],
    count: int,
) -> bool:
    """Each rank's own lists' starts in order and within `codes`, each code within the
    table's list it indexes."""
    if len(starts) != len(OWN_LISTS) * count + 1 or starts[0] != 0 or starts[-1] != len(codes):
        return False
    lengths = np.diff(starts)
    if (lengths < 0).any():
        return False
    sizes = np.array([len(lists[name]) for name in OWN_LISTS], dtype=np.int64)
    bound = np.repeat(np.tile(sizes, count), lengths)  # each code's list's length
    return not len(codes) or (int(codes.min()) >= 0 and bool((codes < bound).all()))


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
