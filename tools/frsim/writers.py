"""Serialize a `RankDump` the ways real dumps appear on disk, and write dump sets.

- `torch`: the bytes torch's C++ pickler writes (`_dump_fr_trace`, as seen in real 2.13
  dumps): protocol 2, no framing, every string memoized by value, each distinct
  stack frame one shared dict, no memo for lists, tuples or entries, the top-level dict
  memoized last. `pickle.load` gives exactly `dump_object(dump)`.
- `pickle`: `pickle.dumps(dump_object(dump), protocol=4)`: the same objects, other bytes.
- `pickle2`: the same with protocol 2 (no framing; a dump re-saved by an older script).
- `json`: `_dump_fr_trace_json`'s layout: sorted keys, compact; entries without frames;
  process_group a list; unset times 0; pg_status values as strings; an empty
  "nccl_comm_state"; no "entries" key when there is none.
- `pyjson`: `json.dump` of what `pickle.load` of a dump gives (a dump re-saved by a script):
  Python's default spacing (", " and ": "), keys in the pickle's order, frames kept, tuples
  as lists, unset times null.
- any of them gzip-compressed (mtime 0, so reruns are byte-identical).
- each dump file's modification time set as `SimSpec.file_times` asks (`dating.py`: the
  snapshot plus the dump's latency, or a copy's time); unset, the time it is written.
- `et`: not a Flight Recorder dump but each rank's Chakra Execution Trace (`et.py`): every op
  the rank issued, the real observer's layout; truncated (no closing bracket) for a rank that
  crashed or was killed in a hung job, and then, gzipped, no file at all (torch compresses
  only at a clean stop). Names: "rank-{rank}.et.json", PARAM's "rank-{rank}.json".

Frames (`Output.frames`): "shared" (as torch writes them: each distinct frame one dict shared
by every entry of the dump that references it) or "distinct" (fresh frame dicts in every entry:
bigger files, slower loads; a worst case for benchmarks).

File names: `FileNaming.name(rank, host)` from a pattern with `{rank}` and `{host}` (e.g.
"nccl_trace_rank_{rank}", "rank_{rank}.json", "nccl_trace_rank_container-node{host:02d}_{rank}"),
plus ".gz" for gzip.
"""

from __future__ import annotations

import gc
import gzip
import json
import multiprocessing
import os
import pickle
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from .et import rank_trace
from .recorder import Entry, RankDump
from .sites import RawFrame

if TYPE_CHECKING:
    from .sim import Simulation

Format = Literal["torch", "pickle", "pickle2", "json", "pyjson", "et"]
Frames = Literal["shared", "distinct"]
PICKLE_PROTOCOL = 4

NAMINGS: dict[str, str] = {
    "nccl_trace": "nccl_trace_rank_{rank}",
    "comm_lib": "comm_lib_trace_rank_{rank}",
    "rank_pkl": "rank_{rank}.pkl",
    "rank_json": "rank_{rank}.json",
    "nccl_trace_pkl": "nccl_trace_rank_{rank}.pkl",
    "hostname": "nccl_trace_rank_container-node{host:02d}_{rank}",
}
"""Named file-name patterns seen in real dump directories (fr-format.md section 1)."""

ET_NAMINGS: dict[str, str] = {
    "et": "rank-{rank}.et.json",
    "param": "rank-{rank}.json",
}
"""Execution trace file names: torch's examples' and PARAM's (`.gz` added when gzipped)."""


@dataclass(frozen=True)
class Output:
    """How a dump set is laid out: format, compression and file names."""

    fmt: Format = "torch"
    gzip: bool = False
    pattern: str = NAMINGS["nccl_trace"]
    frames: Frames = "shared"

    def name(self, rank: int, host: int = 0) -> str:
        """The file name of rank `rank` (on host `host`), with ".gz" when gzipped."""
        base = self.pattern.format(rank=rank, host=host)
        return base + ".gz" if self.gzip else base

    def encode(self, dump: RankDump) -> bytes:
        """`dump` as the bytes of its file: in the output's format, gzipped if asked."""
        shared = self.frames == "shared"
        if self.fmt == "torch":
            data = torch_pickle(dump, shared)
        elif self.fmt == "pickle":
            data = python_pickle(dump, shared)
        elif self.fmt == "pickle2":
            data = python_pickle(dump, shared, protocol=2)
        elif self.fmt == "json":
            data = json_bytes(dump)
        elif self.fmt == "pyjson":
            data = json.dumps(dump_object(dump, shared)).encode()
        elif self.fmt == "et":
            raise ValueError("an execution trace is written from the simulation (et.rank_trace)")
        else:
            raise ValueError(f"unknown format {self.fmt!r}")
        return gzip.compress(data, mtime=0) if self.gzip else data


# --- Python objects ---------------------------------------------------------------------------


def _frame_dicts(
    stack: tuple[RawFrame, ...], shared: dict[RawFrame, dict[str, Any]] | None
) -> list[Any]:
    if shared is None:
        return [{"name": raw[0], "filename": raw[1], "line": raw[2]} for raw in stack]
    out = []
    for raw in stack:
        found = shared.get(raw)
        if found is None:
            found = shared[raw] = {"name": raw[0], "filename": raw[1], "line": raw[2]}
        out.append(found)
    return out


def entry_object(e: Entry, shared: dict[RawFrame, dict[str, Any]] | None) -> dict[str, Any]:
    """One entry as `pickle.load` of torch's dump returns it (`shared`: the dump's frame dicts
    by frame; None: fresh frame dicts)."""
    out: dict[str, Any] = {}
    if e.frames is not None:
        out["frames"] = _frame_dicts(e.frames, shared)
    out |= {
        "record_id": e.record_id,
        "pg_id": e.pg_id,
        "process_group": e.process_group,
        "thread_name": e.thread_name,
        "thread_id": e.thread_id,
        "collective_seq_id": e.collective_seq_id,
        "p2p_seq_id": e.p2p_seq_id,
        "op_id": e.op_id,
        "profiling_name": e.profiling_name,
        "time_created_ns": e.time_created_ns,
    }
    if e.duration_ms is not None:
        out["duration_ms"] = e.duration_ms
    out |= {
        "input_sizes": [list(s) for s in e.input_sizes],
        "input_dtypes": list(e.input_dtypes),
        "output_sizes": [list(s) for s in e.output_sizes],
        "output_dtypes": list(e.output_dtypes),
        "state": e.state,
        "time_discovered_started_ns": e.time_discovered_started_ns,
        "time_discovered_completed_ns": e.time_discovered_completed_ns,
        "retired": e.retired,
        "timeout_ms": e.timeout_ms,
        "is_p2p": e.is_p2p,
    }
    return out


def dump_object(dump: RankDump, shared_frames: bool = True) -> dict[str, Any]:
    """The dump as `pickle.load` returns torch's file: frames shared within the dump (or,
    not `shared_frames`, fresh dicts in every entry)."""
    shared: dict[RawFrame, dict[str, Any]] | None = {} if shared_frames else None
    return {
        "version": dump.version,
        "pg_config": {
            key: {"name": name, "desc": desc, "ranks": ranks}
            for key, name, desc, ranks in dump.pg_config
        },
        "comm_lib_version": dump.comm_lib_version,
        "pg_status": {
            str(pg_id): {
                "last_enqueued_collective": enq,
                "last_started_collective": started,
                "last_completed_collective": done,
            }
            for pg_id, (enq, started, done) in enumerate(dump.pg_status)
        },
        "entries": [entry_object(e, shared) for e in dump.entries],
    }


def python_pickle(
    dump: RankDump, shared_frames: bool = True, protocol: int = PICKLE_PROTOCOL
) -> bytes:
    """`dump` pickled by Python's pickler; `shared_frames`: stack frames shared by identity."""
    return pickle.dumps(dump_object(dump, shared_frames), protocol=protocol)


# --- JSON -----------------------------------------------------------------------------------


def json_object(dump: RankDump) -> dict[str, Any]:
    """The dump as `json.load` of `_dump_fr_trace_json`'s output returns it."""
    obj = dump_object(dump)
    entries = []
    for e in obj.pop("entries"):
        e.pop("frames", None)
        e["process_group"] = list(e["process_group"])
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            if e[key] is None:
                e[key] = 0
        entries.append(e)
    obj["pg_status"] = {
        pg_id: {key: str(value) for key, value in status.items()}
        for pg_id, status in obj["pg_status"].items()
    }
    obj["nccl_comm_state"] = {}
    if entries:
        obj["entries"] = entries
    return obj


def json_bytes(dump: RankDump) -> bytes:
    """`dump` as compact JSON, keys sorted."""
    return json.dumps(json_object(dump), sort_keys=True, separators=(",", ":")).encode()


# --- torch's C++ pickler ---------------------------------------------------------------------

_TUPLE_OPS = (b")", b"\x85", b"\x86", b"\x87")


class TorchPickleWriter:
    """Writes a pickle the way torch's C++ pickler does (torch/csrc/jit/serialization/pickler.cpp,
    as seen in real 2.13 dumps): protocol 2, no framing; every string memoized by value (BINPUT
    on first use, BINGET after); shared dicts (the stack frames) memoized by identity; no other
    memo (lists, tuples and entry dicts are never memoized); lists always as EMPTY_LIST MARK ...
    APPENDS and dicts as EMPTY_DICT MARK ... SETITEMS; ints as BININT1/BININT2/BININT, else an
    8-byte LONG1.
    """

    def __init__(self) -> None:
        self.buf = bytearray(b"\x80\x02")
        self.memo_size = 0
        self.strings: dict[str, bytes] = {}
        self.objects: dict[object, bytes] = {}
        self.fragments: dict[object, bytes] = {}

    def _put(self) -> bytes:
        """Emit a memo put for the value just written; return the get that fetches it."""
        i = self.memo_size
        self.memo_size += 1
        if i < 256:
            self.buf += b"q" + bytes((i,))
            return b"h" + bytes((i,))
        index = i.to_bytes(4, "little")
        self.buf += b"r" + index
        return b"j" + index

    def string(self, value: str) -> None:
        """Write string `value`: BINUNICODE and a memo put the first time, a memo get after."""
        ref = self.strings.get(value)
        if ref is not None:
            self.buf += ref
            return
        data = value.encode("utf-8")
        self.buf += b"X" + len(data).to_bytes(4, "little") + data
        self.strings[value] = self._put()

    def integer(self, value: int) -> None:
        """Write int `value` in the smallest of BININT1, BININT2, BININT and LONG1 that holds it."""
        if 0 <= value < 256:
            self.buf += b"K" + bytes((value,))
        elif 0 <= value < 65_536:
            self.buf += b"M" + value.to_bytes(2, "little")
        elif -(1 << 31) <= value < (1 << 31):
            self.buf += b"J" + value.to_bytes(4, "little", signed=True)
        else:
            self.buf += b"\x8a\x08" + value.to_bytes(8, "little", signed=True)

    def value(self, value: object) -> None:
        """Any builtin value; containers are written in full (not memoized)."""
        if value is None:
            self.buf += b"N"
        elif value is True:
            self.buf += b"\x88"
        elif value is False:
            self.buf += b"\x89"
        elif isinstance(value, str):
            self.string(value)
        elif isinstance(value, int):
            self.integer(value)
        elif isinstance(value, float):
            self.buf += b"G" + struct.pack(">d", value)
        elif isinstance(value, list):
            self.buf += b"]("
            for item in value:
                self.value(item)
            self.buf += b"e"
        elif isinstance(value, tuple):
            if len(value) >= len(_TUPLE_OPS):
                self.buf += b"("
            for item in value:
                self.value(item)
            self.buf += _TUPLE_OPS[len(value)] if len(value) < len(_TUPLE_OPS) else b"t"
        elif isinstance(value, dict):
            self.buf += b"}("
            for key, item in value.items():
                self.value(key)
                self.value(item)
            self.buf += b"u"
        else:
            raise TypeError(f"cannot pickle {type(value).__name__}")

    def shared(self, key: object, value: object) -> None:
        """A value torch holds more than one reference to: written once, then fetched."""
        ref = self.objects.get(key)
        if ref is not None:
            self.buf += ref
            return
        self.value(value)
        self.objects[key] = self._put()

    def fragment(self, key: object, value: object) -> None:
        """`value`, reusing its bytes once writing it adds nothing to the memo."""
        cached = self.fragments.get(key)
        if cached is not None:
            self.buf += cached
            return
        start, size = len(self.buf), self.memo_size
        self.value(value)
        if self.memo_size == size:
            self.fragments[key] = bytes(self.buf[start:])

    def finish(self) -> bytes:
        """End the pickle (the top-level dict memoized too, as torch does); returns its bytes."""
        self._put()  # torch memoizes the top-level dict too
        self.buf += b"."
        return bytes(self.buf)


def _sizes_list(sizes: tuple[tuple[int, ...], ...]) -> list[list[int]]:
    return [list(s) for s in sizes]


def _frames(w: TorchPickleWriter, stack: tuple[RawFrame, ...]) -> None:
    """An entry's frames list: each distinct frame is one shared (memoized) dict."""
    cached = w.fragments.get(stack)
    if cached is not None:
        w.buf += cached
        return
    buf, objects, string = w.buf, w.objects, w.string
    start, size = len(buf), w.memo_size
    buf += b"]("
    for raw in stack:
        ref = objects.get(raw)
        if ref is not None:
            buf += ref
            continue
        # the same bytes as w.shared(raw, {"name": ..., "filename": ..., "line": ...})
        buf += b"}("
        string("name")
        string(raw[0])
        string("filename")
        string(raw[1])
        string("line")
        w.integer(raw[2])
        buf += b"u"
        objects[raw] = w._put()
    buf += b"e"
    if w.memo_size == size:
        w.fragments[stack] = bytes(buf[start:])


def _frames_distinct(w: TorchPickleWriter, stack: tuple[RawFrame, ...]) -> None:
    """An entry's frames as fresh dicts of its own (only the strings are memoized)."""
    w.fragment(("distinct", stack), [{"name": n, "filename": f, "line": i} for n, f, i in stack])


def _entry(w: TorchPickleWriter, e: Entry, shared_frames: bool = True) -> None:
    """One entry, the plain way (every key through the string memo)."""
    string, value, fragment = w.string, w.value, w.fragment
    w.buf += b"}("
    for key, item in zip(Entry._fields, e, strict=True):
        if key == "static" or (item is None and key in ("frames", "duration_ms")):
            continue
        string(key)
        if key == "frames":
            stack = cast("tuple[RawFrame, ...]", item)
            if shared_frames:
                _frames(w, stack)
            else:
                _frames_distinct(w, stack)
        elif key == "process_group":
            fragment(("pg", item), item)
        elif key in ("input_sizes", "output_sizes"):
            fragment(item, _sizes_list(cast("tuple[tuple[int, ...], ...]", item)))
        elif key in ("input_dtypes", "output_dtypes"):
            fragment(item, list(cast("tuple[str, ...]", item)))
        else:
            value(item)
    w.buf += b"u"


def _int_bytes(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes((value,))
    if 0 <= value < 65_536:
        return b"M" + value.to_bytes(2, "little")
    if -(1 << 31) <= value < (1 << 31):
        return b"J" + value.to_bytes(4, "little", signed=True)
    return b"\x8a\x08" + value.to_bytes(8, "little", signed=True)


def _entries_fast(
    w: TorchPickleWriter, entries: Sequence[Entry], start: int, shared_frames: bool = True
) -> None:
    """Entries after the first, whose keys are all memoized by now: the same bytes as
    `_entry`, assembled from cached chunks. A chunk (e.g. everything from input_sizes to the
    state value) is cached, under what determines it, once writing it adds nothing to the
    memo; from then on it is the same memo gets and literals every time."""
    buf, strings, fragments = w.buf, w.strings, w.fragments
    string = w.string
    k = {key: strings[key] for key in Entry._fields if key in strings and key != "static"}
    k_frames = k.get("frames", b"")
    k_record, k_cseq, k_pseq = k["record_id"], k["collective_seq_id"], k["p2p_seq_id"]
    k_op_id, k_created = k["op_id"], k["time_created_ns"]
    k_started = k["time_discovered_started_ns"]
    k_completed = k["time_discovered_completed_ns"]
    pack_double = struct.Struct(">d").pack
    number = _int_bytes
    threads: dict[tuple[int, str], bytes] = {}
    names: dict[int, bytes] = {}
    shapes: dict[tuple[int, str], bytes] = {}
    tails: dict[tuple[bool, bool], bytes] = {}

    def chunk(cache: dict[Any, bytes], key: object, e: Entry, part: int) -> None:
        begin, size = len(buf), w.memo_size
        if part == 0:
            string("pg_id")
            w.integer(e.pg_id)
            string("process_group")
            w.fragment(("pg", e.process_group), e.process_group)
            string("thread_name")
            string(e.thread_name)
            string("thread_id")
            string(e.thread_id)
        elif part == 1:
            string("profiling_name")
            string(e.profiling_name)
        elif part == 2:
            string("input_sizes")
            w.fragment(e.input_sizes, _sizes_list(e.input_sizes))
            string("input_dtypes")
            w.fragment(e.input_dtypes, list(e.input_dtypes))
            string("output_sizes")
            w.fragment(e.output_sizes, _sizes_list(e.output_sizes))
            string("output_dtypes")
            w.fragment(e.output_dtypes, list(e.output_dtypes))
            string("state")
            string(e.state)
        else:
            string("retired")
            buf.append(0x88 if e.retired else 0x89)
            string("timeout_ms")
            w.integer(e.timeout_ms)
            string("is_p2p")
            buf.append(0x88 if e.is_p2p else 0x89)
        if w.memo_size == size and (part != 1 or e.static >= 0) and (part != 2 or e.static >= 0):
            cache[key] = bytes(buf[begin:])

    for i in range(start, len(entries)):
        e = entries[i]
        buf += b"}("
        frames = e.frames
        if frames is not None:
            buf += k_frames
            if not shared_frames:
                _frames_distinct(w, frames)
            elif (cached := fragments.get(frames)) is None:
                _frames(w, frames)
            else:
                buf += cached
        buf += k_record
        x = e.record_id
        if x < 256:
            buf += b"K"
            buf.append(x)
        else:
            buf += number(x)
        key0 = (e.pg_id, e.thread_name)
        cached = threads.get(key0)
        if cached is None:
            chunk(threads, key0, e, 0)
        else:
            buf += cached
        buf += k_cseq
        x = e.collective_seq_id
        if x < 256:
            buf += b"K"
            buf.append(x)
        else:
            buf += number(x)
        buf += k_pseq
        x = e.p2p_seq_id
        if x < 256:
            buf += b"K"
            buf.append(x)
        else:
            buf += number(x)
        buf += k_op_id
        x = e.op_id
        if x < 256:
            buf += b"K"
            buf.append(x)
        else:
            buf += number(x)
        static = e.static
        cached = names.get(static)
        if cached is None:
            chunk(names, static, e, 1)
        else:
            buf += cached
        buf += k_created
        buf += number(e.time_created_ns)
        if e.duration_ms is not None:
            string("duration_ms")
            buf += b"G"
            buf += pack_double(e.duration_ms)
        key2 = (static, e.state)
        cached = shapes.get(key2)
        if cached is None:
            chunk(shapes, key2, e, 2)
        else:
            buf += cached
        buf += k_started
        when = e.time_discovered_started_ns
        buf += b"N" if when is None else number(when)
        buf += k_completed
        when = e.time_discovered_completed_ns
        buf += b"N" if when is None else number(when)
        key3 = (e.retired, e.is_p2p)
        cached = tails.get(key3)
        if cached is None:
            chunk(tails, key3, e, 3)
        else:
            buf += cached
        buf += b"u"


def torch_pickle(dump: RankDump, shared_frames: bool = True) -> bytes:
    """`dump` serialized as torch's C++ pickler writes it, straight from the entries (not
    `shared_frames`: fresh frame dicts in every entry)."""
    w = TorchPickleWriter()
    string, value, buf = w.string, w.value, w.buf
    buf += b"}("
    string("version")
    string(dump.version)
    string("pg_config")
    buf += b"}("
    for key, name, desc, ranks in dump.pg_config:
        string(key)
        value({"name": name, "desc": desc, "ranks": ranks})
    buf += b"u"
    string("comm_lib_version")
    string(dump.comm_lib_version)
    string("pg_status")
    buf += b"}("
    for pg_id, (enq, started, done) in enumerate(dump.pg_status):
        string(str(pg_id))
        value(
            {
                "last_enqueued_collective": enq,
                "last_started_collective": started,
                "last_completed_collective": done,
            }
        )
    buf += b"u"
    string("entries")
    buf += b"]("
    entries = dump.entries
    if entries:
        _entry(w, entries[0], shared_frames)
        _entries_fast(w, entries, 1, shared_frames)
    buf += b"e"
    buf += b"u"
    return w.finish()


# --- dump sets -------------------------------------------------------------------------------

_WORKER_SIM: Simulation | None = None


@dataclass(frozen=True)
class Written:
    """One rank's file: where, its size in bytes and its number of entries (an ET: of ops
    issued) (path None: the rank wrote no file)."""

    rank: int
    path: Path | None
    size: int
    entries: int


def _write_rank(job: tuple[int, str, Output]) -> tuple[int, int, int]:
    rank, directory, output = job
    sim = _WORKER_SIM
    assert sim is not None
    if output.fmt == "et":
        trace = rank_trace(sim, rank)
        if output.gzip and not trace.complete:
            return rank, -1, trace.units  # the data is in a temporary .json elsewhere
        data = trace.text.encode()
        data = gzip.compress(data, mtime=0) if output.gzip else data
        count = trace.units
    else:
        dump = sim.dump(rank)
        if dump is None:
            return rank, -1, 0
        data = output.encode(dump)
        count = len(dump.entries)
    path = os.path.join(directory, output.name(rank, sim.spec.layout.host_of(rank)))
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
    stamp = None if output.fmt == "et" else sim.file_time_ns(rank)
    if stamp is not None:
        os.utime(path, ns=(stamp, stamp))
    return rank, len(data), count


def _worker_init() -> None:
    gc.disable()  # short-lived acyclic containers only; a collection would touch every page


def write_files(
    sim: Simulation,
    directory: Path,
    output: Output = Output(),
    ranks: Iterable[int] | None = None,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> list[Written]:
    """Write one file per rank that dumps (a crashed rank writes none) into `directory`, in
    rank order; `progress(done, total)` after each rank.

    With `workers` > 1 the files are recorded and written by forked worker processes, each
    turning one rank's engine results (inherited from this process) into its file.
    """
    global _WORKER_SIM
    directory.mkdir(parents=True, exist_ok=True)
    todo: Sequence[int] = list(range(sim.world_size) if ranks is None else ranks)
    jobs = [(rank, str(directory), output) for rank in todo]
    host = sim.spec.layout.host_of
    found: list[Written] = []

    def done(result: tuple[int, int, int]) -> None:
        rank, size, entries = result
        path = directory / output.name(rank, host(rank)) if size >= 0 else None
        found.append(Written(rank, path, max(size, 0), entries))
        if progress is not None:
            progress(len(found), len(jobs))

    _WORKER_SIM = sim
    sim.file_times  # noqa: B018 - computed once here, before the workers fork
    try:
        if workers > 1 and len(jobs) > 1:
            gc.collect()
            gc.freeze()  # the workers' collectors then never visit (and copy) the parent's objects
            try:
                ctx = multiprocessing.get_context("fork")
                with ctx.Pool(workers, initializer=_worker_init) as pool:
                    for result in pool.imap_unordered(_write_rank, jobs, chunksize=8):
                        done(result)
            finally:
                gc.unfreeze()
        else:
            for job in jobs:
                done(_write_rank(job))
    finally:
        _WORKER_SIM = None
    return sorted(found, key=lambda w: w.rank)


def write_dumps(
    sim: Simulation,
    directory: Path,
    output: Output = Output(),
    ranks: Iterable[int] | None = None,
    workers: int = 1,
) -> list[Path]:
    """The paths `write_files` wrote, in rank order."""
    written = write_files(sim, directory, output, ranks, workers)
    return [w.path for w in written if w.path is not None]
