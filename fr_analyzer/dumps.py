"""Find per-rank dump files, load them safely, and turn each into compact columns.

Each rank's file is read (pickle through an unpickler that refuses every global, or JSON), its
format quirks normalized (tuple vs list, `0` vs None timestamps, string sequence ids, dtype as a
bare string, `nccl_version` vs `comm_lib_version`), and its entries turned into numpy columns of
integer codes with small per-rank string/shape/stack tables. Ranks load in worker processes that
send back only the columns. `merge()` then re-codes every rank's tables into global ones and
concatenates the columns into one `EntryTable` that the matcher joins on.
"""

from __future__ import annotations

import gc
import gzip
import io
import json
import math
import os
import pickle
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import DiscoveryError, DumpError
from .model import ANY_SOURCE, Frame, P2PKind, Stack, State, UnitKind, UnreadableDump

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
B = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]

DEFAULT_MAX_FILE_BYTES = 1 << 30
NO_TIME = -1
MARKER_OPS = frozenset({"coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"})
P2P_OPS = frozenset({"send", "recv"})
KNOWN_BACKENDS = frozenset(
    {"nccl", "ncclx", "gloo", "xccl", "rccl", "hccl", "mccl", "nccl2", "c10d", "ucc", "mpi"}
)
_STATES = {"scheduled": State.SCHEDULED, "started": State.STARTED, "completed": State.COMPLETED}
_INT64_MAX = (1 << 63) - 1

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


_NAME_RE = re.compile(r"^(?P<stem>.*?)(?P<rank>\d+)(?P<suffix>\.(?:pkl|pickle|json))?(?:\.gz)?$")
_KNOWN_PREFIXES = ("comm_lib_trace_rank_", "nccl_trace_rank_", "fr_trace_rank_", "rank_")


def _family(stem: str) -> str:
    """Files of one dump set share a family: a known prefix, or the stem with digits folded."""
    for known in _KNOWN_PREFIXES:
        if stem.startswith(known):
            return known
    return re.sub(r"\d+", "#", stem)


def _walk(directory: Path) -> Iterator[Path]:
    # os.walk does not follow directory symlinks, so symlink loops cannot trap us.
    for root, dirs, names in os.walk(directory, onerror=None):
        dirs.sort()
        for name in sorted(names):
            yield Path(root) / name


def discover(directory: Path, prefix: str | None = None) -> Discovery:
    """One file per rank under `directory` (recursively); a second file for a rank is an error."""
    if not directory.is_dir():
        raise DiscoveryError(f"{directory}: not a directory")
    candidates: dict[str, list[DumpFile]] = {}
    ignored: list[str] = []
    for path in _walk(directory):
        name = path.name
        if prefix is not None:
            if not name.startswith(prefix):
                ignored.append(str(path))
                continue
            match = _NAME_RE.match(name[len(prefix) :])
            if match is None or match["stem"]:
                ignored.append(str(path))
                continue
            family = prefix
        else:
            match = _NAME_RE.match(name)
            if match is None:
                continue  # no rank number: notes, logs and the like are not candidates
            family = _family(match["stem"])
        candidates.setdefault(family, []).append(DumpFile(int(match["rank"]), path))
    if not candidates:
        hint = f" starting with {prefix!r}" if prefix else ""
        raise DiscoveryError(f"{directory}: no rank dump files{hint} found")
    # The largest family is the dump set; anything else in the folder is reported as ignored.
    family, files = max(candidates.items(), key=lambda item: (len(item[1]), item[0]))
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


# ---------------------------------------------------------------------------------------------
# Safe reading


class NoGlobalsUnpickler(pickle.Unpickler):
    """Genuine dumps hold only builtin containers and scalars, so every global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def read_raw(path: Path, rank: int | None, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Any:
    """Bytes of one file → the dump object, refusing globals; errors name the file and rank."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise DumpError(str(path), rank, f"file is {size} bytes, over the {max_bytes} limit")
        data = path.read_bytes()
    except OSError as exc:
        raise DumpError(str(path), rank, f"cannot read: {exc.strerror or exc}") from None
    if not data:
        raise DumpError(str(path), rank, "empty file")
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
                data = stream.read(max_bytes + 1)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise DumpError(str(path), rank, f"bad gzip data: {exc}") from None
        if len(data) > max_bytes:
            raise DumpError(str(path), rank, f"decompresses to over {max_bytes} bytes")
        if not data:
            raise DumpError(str(path), rank, "empty file (after gunzip)")
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise DumpError(str(path), rank, f"malformed JSON: {exc}") from None
    was_enabled = gc.isenabled()
    gc.disable()  # building millions of small containers is much faster without GC passes
    try:
        return NoGlobalsUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise DumpError(str(path), rank, f"not a valid dump pickle: {exc}") from None
    except EOFError:
        raise DumpError(str(path), rank, "pickle data was truncated") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        raise DumpError(str(path), rank, f"not a valid dump pickle: {exc}") from None
    except MemoryError:
        raise DumpError(str(path), rank, "pickle needs more memory than available") from None
    finally:
        if was_enabled:
            gc.enable()


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


def _integral(value: Any) -> bool:
    """A digit string ("12", as JSON dumps and old tests write seq ids) or a whole float."""
    if isinstance(value, str):
        return value.strip().lstrip("-").isdigit()
    return isinstance(value, float) and math.isfinite(value) and value.is_integer()


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise _EntryError(f"{what} is a boolean")
    if isinstance(value, int):
        result = value
    elif _integral(value):
        result = int(value)
    else:
        raise _EntryError(f"{what} is not an integer: {value!r:.40}")
    if not -_INT64_MAX <= result <= _INT64_MAX:
        raise _EntryError(f"{what} out of range: {result}")
    return result


def _time(value: Any) -> int:
    if value is None or value == 0 or isinstance(value, bool):
        return NO_TIME
    try:
        return _as_int(value, "timestamp")
    except _EntryError:
        return NO_TIME


def _shapes(value: Any, what: str) -> tuple[tuple[int, ...], ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise _EntryError(f"{what} is not a list")
    out = []
    for shape in value:
        if not isinstance(shape, list | tuple):
            raise _EntryError(f"{what} holds a non-list shape")
        dims = tuple(d if type(d) is int else _as_int(d, what) for d in shape)
        if any(d < 0 for d in dims):
            raise _EntryError(f"{what} has a negative dimension")
        out.append(dims)
    return tuple(out)


def _dtypes(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    raise _EntryError(f"dtypes are not a list: {value!r:.40}")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _parse_ranks(value: Any) -> tuple[int, ...] | None:
    """pg_config ranks: a string like "[0, 1]" (or a list); None when empty or unparsable."""
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("[") and text.endswith("]")):
            return None
        items = [part.strip() for part in text[1:-1].split(",") if part.strip()]
        if not all(item.lstrip("-").isdigit() for item in items):
            return None
        ranks = [int(item) for item in items]
    elif isinstance(value, list | tuple):
        if not all(type(v) is int for v in value):
            return None
        ranks = list(value)
    else:
        return None
    if not ranks or any(r < 0 for r in ranks) or len(set(ranks)) != len(ranks):
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
        raise _EntryError(f"profiling_name {pname!r:.60} has no '<backend>:' prefix")
    op, _, peer = rest.strip().partition(" ")
    if not op:
        raise _EntryError(f"profiling_name {pname!r:.60} names no op")
    if op == "send" and "->" in peer:
        src, _, dst = peer.partition("->")
        return backend, op, P2PKind.SEND, _peer(src), _peer(dst)
    if op == "recv" and "<-" in peer:
        dst, _, src = peer.partition("<-")
        return backend, op, P2PKind.RECV, _peer(src), _peer(dst)
    if op in P2P_OPS:
        raise _EntryError(f"profiling_name {pname!r:.60} has no peer")
    return backend, op, P2PKind.NONE, -1, -1


def _peer(text: str) -> int:
    text = text.strip()
    if text == "?":
        return ANY_SOURCE
    if not text.isdigit():
        raise _EntryError(f"bad peer rank {text!r:.20}")
    return int(text)


def build_rank(raw: Any, rank: int, file: str) -> RankDump:
    """Normalize one loaded dump into columns. Whole-dump problems raise DumpError."""
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
    version = _text(raw.get("version", "unknown"))
    comm = raw.get("comm_lib_version", raw.get("nccl_version", ""))
    warnings: list[str] = []

    claims: dict[str, GroupClaim] = {}
    pg_config = raw.get("pg_config")
    usable = isinstance(pg_config, dict) and bool(pg_config)
    if isinstance(pg_config, dict):
        for key, conf in pg_config.items():
            if not isinstance(conf, dict):
                usable = False
                continue
            name = _text(conf.get("name", key))
            ranks = _parse_ranks(conf.get("ranks"))
            if key == "" or name == "" or ranks is None or rank not in ranks:
                usable = False  # gloo keys every group by '' with ranks '[]'
                continue
            claims[name] = GroupClaim(name, _text(conf.get("desc", "")), ranks)
    if not usable:
        claims = {}

    groups, ops, backends, pnames = _Interner(), _Interner(), _Interner(), _Interner()
    shapes, dtypes, stacks = _Interner(), _Interner(), _Interner()
    frames: dict[tuple[str, str, int], Frame] = {}
    pname_cache: dict[str, tuple[str, str, int, int, int]] = {}
    cols: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
    errors: list[tuple[int, str]] = []
    pg_ids: dict[int, int] = {}
    unknown_backends: set[str] = set()
    append = {k: v.append for k, v in cols.items()}

    for i, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict):
                raise _EntryError("entry is not a mapping")
            pg = entry.get("process_group")
            if not isinstance(pg, list | tuple) or len(pg) != 2:
                raise _EntryError(f"bad process_group {pg!r:.60}")
            pname = entry.get("profiling_name")
            if not isinstance(pname, str):
                raise _EntryError(f"bad profiling_name {pname!r:.60}")
            parsed = pname_cache.get(pname)
            if parsed is None:
                parsed = pname_cache[pname] = _parse_name(pname)
                if parsed[0] not in KNOWN_BACKENDS:
                    unknown_backends.add(parsed[0])
            backend, op, p2p_kind, src, dst = parsed
            coll_seq = _as_int(entry.get("collective_seq_id", -1), "collective_seq_id")
            p2p_seq = _as_int(entry.get("p2p_seq_id", -1), "p2p_seq_id")
            if coll_seq < -1 or p2p_seq < -1:
                raise _EntryError("negative sequence id")
            record_id = entry.get("record_id", i)
            record_id = record_id if type(record_id) is int else _as_int(record_id, "record_id")
            state_text = entry.get("state")
            state = (
                _STATES.get(state_text, State.UNKNOWN)
                if isinstance(state_text, str)
                else (State.UNKNOWN)
            )
            in_shape = shapes(_shapes(entry.get("input_sizes"), "input_sizes"))
            out_shape = shapes(_shapes(entry.get("output_sizes"), "output_sizes"))
            in_dtype = dtypes(_dtypes(entry.get("input_dtypes")))
            out_dtype = dtypes(_dtypes(entry.get("output_dtypes")))
            raw_frames = entry.get("frames")
            stack_code = -1
            if isinstance(raw_frames, list | tuple) and raw_frames:
                stack_code = stacks(_stack(raw_frames, frames))
            duration = entry.get("duration_ms")
            try:
                duration_ms = float(duration) if duration is not None else math.nan
            except (TypeError, ValueError):
                duration_ms = math.nan
            is_p2p = entry.get("is_p2p")
            if p2p_kind == P2PKind.NONE and is_p2p is True and op not in MARKER_OPS:
                raise _EntryError(f"is_p2p entry {pname!r:.60} is neither send nor recv")
            group_code = groups((_text(pg[0]), _text(pg[1])))
            pg_id = entry.get("pg_id")
            if type(pg_id) is int:
                pg_ids.setdefault(pg_id, group_code)
        except _EntryError as exc:
            errors.append((i, str(exc)))
            continue
        append["index"](i)
        append["record_id"](record_id)
        append["group"](group_code)
        append["coll_seq"](coll_seq)
        append["p2p_seq"](p2p_seq)
        append["op_id"](_maybe_int(entry.get("op_id")))
        append["op"](ops(op))
        append["backend"](backends(backend))
        append["pname"](pnames(pname))
        append["p2p_kind"](p2p_kind)
        append["peer_src"](src)
        append["peer_dst"](dst)
        append["state"](state)
        append["retired"](entry.get("retired") is True)
        append["t_created"](_time(entry.get("time_created_ns")))
        append["t_started"](_time(entry.get("time_discovered_started_ns")))
        append["t_completed"](_time(entry.get("time_discovered_completed_ns")))
        append["duration_ms"](duration_ms)
        append["in_shape"](in_shape)
        append["out_shape"](out_shape)
        append["in_dtype"](in_dtype)
        append["out_dtype"](out_dtype)
        append["stack"](stack_code)
        append["timeout_ms"](_maybe_int(entry.get("timeout_ms")))

    if unknown_backends:
        warnings.append(f"rank {rank}: unknown backend(s) {', '.join(sorted(unknown_backends))}")
    arrays: dict[str, Any] = {k: np.asarray(v, dtype=_COLUMNS[k]) for k, v in cols.items()}
    record = arrays["record_id"]
    wrapped = bool(len(record) and int(record.min()) > 0)
    unit, marker = _blocks(arrays, ops.values, wrapped)
    status = _pg_status(raw.get("pg_status"), pg_ids)
    return RankDump(
        rank=rank,
        file=file,
        version=version,
        comm_lib_version=_text(comm) if comm is not None else "",
        claims=claims,
        pg_config_usable=usable,
        pg_status=status,
        wrapped=wrapped,
        entry_errors=errors,
        warnings=warnings,
        groups=groups.values,
        ops=ops.values,
        backends=backends.values,
        profiling_names=pnames.values,
        shapes=shapes.values,
        dtypes=dtypes.values,
        stacks=stacks.values,
        unit=unit,
        marker=marker,
        **arrays,
    )


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


def _maybe_int(value: Any) -> int:
    if type(value) is int and -_INT64_MAX <= value <= _INT64_MAX:
        return value
    try:
        return _as_int(value, "value")
    except _EntryError:
        return -1


def _stack(raw_frames: Sequence[Any], cache: dict[tuple[str, str, int], Frame]) -> Stack:
    out = []
    for raw in raw_frames:
        if not isinstance(raw, dict):
            continue
        line = raw.get("line", 0)
        key = (
            _text(raw.get("name", "?")),
            _text(raw.get("filename", "?")),
            line if type(line) is int else _maybe_int(line),
        )
        frame = cache.get(key)
        if frame is None:
            frame = cache[key] = Frame(*key)
        out.append(frame)
    return tuple(out)


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
    path = str(dump_file.path)
    try:
        raw = read_raw(dump_file.path, dump_file.rank, max_bytes)
        return build_rank(raw, dump_file.rank, path)
    except DumpError as exc:
        return UnreadableDump(path, dump_file.rank, exc.reason)
    except RecursionError:
        return UnreadableDump(path, dump_file.rank, "structure nested too deeply")
    except MemoryError:
        return UnreadableDump(path, dump_file.rank, "needs more memory than available")
    except Exception as exc:  # a malformed dump must never abort the other ranks
        return UnreadableDump(path, dump_file.rank, f"malformed dump: {type(exc).__name__}: {exc}")


def load_all(
    files: Sequence[DumpFile],
    workers: int | None = None,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[RankDump], list[UnreadableDump]]:
    """Load every rank, in worker processes when there are enough files to pay for them."""
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, min(workers, len(files) // 4 or 1))
    results: Iterable[RankDump | UnreadableDump]
    if workers == 1:
        results = (load_rank(f, max_bytes) for f in files)
        pool = None
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        chunk = max(1, min(64, len(files) // (workers * 8)))
        results = pool.map(load_rank, files, [max_bytes] * len(files), chunksize=chunk)
    loaded: list[RankDump] = []
    unreadable: list[UnreadableDump] = []
    try:
        for done, result in enumerate(results, start=1):
            if isinstance(result, RankDump):
                loaded.append(result)
            else:
                unreadable.append(result)
            if progress is not None:
                progress(done, len(files))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return loaded, unreadable


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
    """Concatenate ranks (sorted by rank) into one table, re-coding per-rank tables globally."""
    interners = {name: _Interner() for name in set(_RECODED.values())}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in _COLUMNS}
    parts["rank"], parts["row_in_rank"], parts["unit"], parts["marker"] = [], [], [], []
    offset = 0
    for dump in ranks:
        maps = {}
        for table in interners:
            values = getattr(dump, table)
            intern = interners[table]
            maps[table] = np.fromiter((intern(v) for v in values), np.int32, len(values))
        for col, dtype in _COLUMNS.items():
            values = getattr(dump, col)
            if col in _RECODED:
                table_map = maps[_RECODED[col]]
                if col == "stack":
                    values = np.where(
                        values >= 0, table_map[np.maximum(values, 0)] if len(table_map) else -1, -1
                    ).astype(np.int32)
                else:
                    values = table_map[values] if len(values) else values
            parts[col].append(np.asarray(values, dtype=dtype))
        parts["rank"].append(np.full(dump.n, dump.rank, dtype=np.int32))
        parts["row_in_rank"].append(np.arange(dump.n, dtype=np.int32))
        parts["unit"].append(dump.unit)
        parts["marker"].append(
            np.where(dump.marker >= 0, dump.marker + offset, -1).astype(np.int64)
        )
        offset += dump.n
    columns = {
        k: (np.concatenate(v) if v else np.empty(0, dtype=_COLUMNS.get(k, np.int64)))
        for k, v in parts.items()
    }
    shapes = interners["shapes"].values
    numel = np.array([_numel(s) for s in shapes], dtype=np.int64)
    rank = columns.pop("rank").astype(np.int32)
    row_in_rank = columns.pop("row_in_rank").astype(np.int32)
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


def _numel(shapes: tuple[tuple[int, ...], ...]) -> int:
    total = 0
    for shape in shapes:
        total += math.prod(shape)
    return min(total, _INT64_MAX)
