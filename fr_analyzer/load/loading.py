"""Load every rank in worker processes, and hand each to the table builder in file order.

This module drives the three wings of `load` (`sources`, `safety`, `formats`) over every rank, so
it sits beside the face rather than in one wing. It is over 600 lines because one rank's load,
the gloo groups settled across ranks before it, and the packing of columns from worker to parent
run in the same worker pools and share one handling of a worker's death; split apart, each part
would import the others' private helpers.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from ..errors import DumpError, FrAnalyzerError
from ..memory import collector_paused
from ..model.dump import Fallback, RankColumns, RankDump
from ..model.recorders import Dialect
from ..model.records import UnreadableDump
from .common import DEFAULT_MAX_FILE_BYTES, printable
from .formats import dialects, torchft, traces
from .formats.normalize import build_rank
from .formats.outcomes import NotDecoded
from .formats.values import EntryError
from .safety import limits, sandbox
from .safety.decoders.columns import Decoded
from .safety.limits import content_bytes
from .safety.reading import Raw, explain_pickle, read_dump, read_unpacked
from .sources import hosts, stamps
from .sources.archives import StreamedFiles
from .sources.base import DumpFile
from .sources.discovery import is_trace


def load_rank(
    dump_file: DumpFile,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    *,
    sandboxed: bool = False,
    ft_group_world_size: int | None = None,
) -> RankDump | UnreadableDump:
    """Read and normalize one rank; any problem becomes an UnreadableDump record.

    Pickles are scanned for bombs before they are unpickled, unless `sandboxed` (in a worker
    process under resource limits, see `sandbox`, where the scan only explains a failure).
    `ft_group_world_size`: a torchft job's replica size, its default groups made global
    (`torchft`)."""
    # A dump is ~100k containers: no collector passes while it is read, and none after
    # until it is freed (`_read_rank` returns only the rank, and the objects it read are
    # gone with its frame). A pass that starts while they live walks every one of them:
    # that doubled the general reader's time in a worker, whose collector is on.
    with collector_paused():
        return _read_rank(dump_file, max_bytes, not sandboxed, ft_group_world_size)


def _read_rank(
    dump_file: DumpFile, max_bytes: int, guarded: bool, ft_group_world_size: int | None
) -> RankDump | UnreadableDump:
    """`load_rank`, its collector paused by the caller."""
    path = printable(dump_file.where)
    fetch = dump_file.fetch
    try:

        def build(raw: Raw, why: NotDecoded | None) -> RankDump:
            rank = dump_file.rank
            return _build(raw, rank, path, why, ft_group_world_size, dump_file)

        trace = dump_file.trace
        if trace is not None:  # read with its Execution Trace: as entries, to merge them
            raw = read_dump(dump_file.path, dump_file.rank, max_bytes, guarded=guarded, fetch=fetch)
            extra = read_dump(trace.path, trace.rank, max_bytes, guarded=guarded, fetch=trace.fetch)
            raw = merged_with_trace(raw, extra, dump_file, printable(trace.where))
            return build(raw, raw.not_decoded)
        raw = read_dump(
            dump_file.path, dump_file.rank, max_bytes, fast=True, guarded=guarded, fetch=fetch
        )
        try:
            built = build(raw, raw.not_decoded)
        except NotDecoded as exc:
            if exc.reason not in _READ_AGAIN:
                raise
            raw = read_dump(dump_file.path, dump_file.rank, max_bytes, guarded=guarded, fetch=fetch)
            built = build(raw, exc)
        return built
    except DumpError as exc:
        return UnreadableDump(path, dump_file.rank, exc.reason)
    except RecursionError:
        return UnreadableDump(path, dump_file.rank, "structure nested too deeply")
    except MemoryError:
        return UnreadableDump(path, dump_file.rank, "needs more memory than available")
    except (
        FrAnalyzerError,
        NotDecoded,
        EntryError,
        pickle.UnpicklingError,
        EOFError,
        UnicodeError,
        json.JSONDecodeError,
        struct.error,
        zlib.error,
        OverflowError,
    ) as exc:  # what the readers raise for bytes they cannot take: this file is bad, not the
        # others; anything else (a TypeError, an AttributeError) is a bug in fr-analyze and
        # goes up, never blamed on the dump
        reason = printable(f"malformed dump: {type(exc).__name__}: {exc}")[:300]
        return UnreadableDump(path, dump_file.rank, reason)


def _file_time_ns(dump_file: DumpFile) -> int | None:
    """When the rank's file was last modified: a local file's mtime, an archive member's, or
    None where the source keeps none."""
    if dump_file.fetch is not None:
        found = getattr(dump_file.fetch, "mtime_ns", None)
        return found if isinstance(found, int) else None
    try:
        return os.stat(dump_file.path).st_mtime_ns
    except OSError:
        return None


def _name_time_ns(dump_file: DumpFile) -> int | None:
    """A time written in the file's name, else in its folder's."""
    path = dump_file.path
    return stamps.name_time_ns(path.name) or stamps.name_time_ns(path.parent.name)


def merged_with_trace(raw: Raw, trace: Raw, dump_file: DumpFile, where: str) -> Raw:
    """A rank's dump with the ops of its Execution Trace that its ring buffer no longer holds
    (`traces.merge`); the dump as it is when the trace is not one or its dump is no dict."""
    if not (isinstance(raw.obj, dict) and traces.is_execution_trace(trace.obj)):
        return raw
    chosen = dump_file.trace.op_groups if dump_file.trace is not None else ()
    converted = traces.to_dump(trace.obj, dump_file.rank, chosen, shown=dump_file.shown)
    notes = [*raw.notes, *trace.notes, *traces.merge(raw.obj, converted.dump, where)]
    return Raw(raw.obj, raw.nbytes + trace.nbytes, notes, raw.not_decoded)


def files_show(files: Sequence[DumpFile]) -> int:
    """The ranks a source's files show, by their rank numbers: the highest + 1, the files
    past a gap of more missing ranks than there are files below it left out (a stray
    `rank_1048575` beside ranks 0-3 shows 4)."""
    ranks = sorted({f.rank for f in files})
    for i in range(1, len(ranks)):
        if ranks[i] - ranks[i - 1] - 1 > i:
            return ranks[i - 1] + 1
    return ranks[-1] + 1 if ranks else 0


def with_shown(files: Sequence[DumpFile]) -> list[DumpFile]:
    """The files, each told the ranks the files show (`files_show`): what a trace's group
    given by a size alone may claim (`traces.believed_ranks`)."""
    shown = files_show(files)
    return [replace(f, shown=shown) for f in files]


@dataclass(frozen=True)
class Settled:
    """Rank files with the groups of their gloo trace ops settled (`with_settled_groups`)."""

    files: Sequence[DumpFile]
    # the same files with another assignment that lets as many ops pass and leaves the job
    # stopped elsewhere (`traces.Settlement.other`): its verdict may differ; None: there is none
    other: Sequence[DumpFile] | None = None
    notes: tuple[str, ...] = ()  # job-wide warnings (the search was past its budget)


def with_settled_groups(files: Sequence[DumpFile], max_bytes: int) -> Settled:
    """Local gloo Execution Traces with the groups of their ops settled across every rank
    (`traces.settle`). Each trace is parsed in a worker, under the limits a dump is read with
    (`sandbox`), and sends back only its ops; a rank's trace is its file, or the trace beside
    its dump (pinned to the dump's groups). The first file with a trace is looked at alone, and
    one that is no gloo trace ends the look. Other files as they are."""
    if not files or any(f.fetch is not None for f in files):
        return Settled(files)
    shown = files_show(files)
    traced = [f for f in files if f.trace is not None or is_trace(f.path.name)]
    found: dict[int, traces.GlooOps] = {}
    first = _gloo_ops_of(traced[:1], max_bytes, shown)
    if not first:
        return Settled(files)  # no trace, or NCCL's, which names its groups
    found.update(first)
    found.update(_gloo_ops_of(traced[1:], max_bytes, shown))
    settled = traces.settle(found)
    other = settled.other

    def placed(chosen: Mapping[int, tuple[str | None, ...]]) -> list[DumpFile]:
        out = []
        for f in files:
            groups = chosen.get(f.rank, ())
            if f.trace is not None:
                out.append(replace(f, trace=replace(f.trace, op_groups=groups)))
            else:
                out.append(replace(f, op_groups=groups))
        return out

    return Settled(
        placed(settled.chosen),
        None if other is None else placed(other),
        (settled.warning,) if settled.warning else (),
    )


_NoOps = str
"""Why a file gave no gloo ops (it is no gloo trace, or could not be read)."""


def _gloo_ops_of(
    files: Sequence[DumpFile], max_bytes: int, shown: int
) -> dict[int, traces.GlooOps]:
    """The gloo ops of each file that is a gloo trace, by rank: parsed in workers where they
    can be forked (this process's memory never holds a trace), else here."""
    task = functools.partial(_gloo_ops_one, max_bytes=max_bytes, shown=shown)
    if sandbox.available():
        workers = max(1, min(os.cpu_count() or 1, len(files) // 4 or 1))
        pool = sandbox.Sandbox(task, _file_size, _no_ops, workers, limits=limits.LIMITS)
        results: Iterable[tuple[int, traces.GlooOps | _NoOps]] = pool.run(files)
    else:
        results = ((i, task(f)) for i, f in enumerate(files))
    return {files[i].rank: got for i, got in results if isinstance(got, traces.GlooOps)}


def _gloo_ops_one(dump_file: DumpFile, max_bytes: int, shown: int) -> traces.GlooOps | _NoOps:
    """A rank's gloo trace ops: of its file, or of the trace beside its dump, pinned to the
    groups its dump records for them (`traces.pin`: the dump's facts win)."""
    trace = dump_file.trace if dump_file.trace is not None else dump_file
    try:
        raw = read_dump(trace.path, trace.rank, max_bytes)
        found = traces.gloo_ops(raw.obj, dump_file.rank, shown)
        if found is not None and dump_file.trace is not None:
            dump = read_dump(dump_file.path, dump_file.rank, max_bytes).obj
            if isinstance(dump, dict):
                pinned = traces.pin(found.ops, dump.get("entries"), tuple(found.groups))
                found = replace(found, ops=pinned)
    except (DumpError, MemoryError, RecursionError) as exc:
        return type(exc).__name__
    return found if found is not None else "no gloo trace"


def _no_ops(dump_file: DumpFile, death: sandbox.Death) -> _NoOps:
    return death.reason


_READ_AGAIN = frozenset({Fallback.SLOWER_READER_NEEDED, Fallback.ENTRIES_NEEDED})
"""A decoded file whose entries only a slower reader takes is read again the general way."""


def _build(
    raw: Raw,
    rank: int,
    path: str,
    not_decoded: NotDecoded | None,
    ft_group_world_size: int | None,
    dump_file: DumpFile,
) -> RankDump:
    header = raw.obj.header if isinstance(raw.obj, Decoded) else raw.obj
    notes = list(raw.notes)
    dialect = Dialect.PYTORCH
    obj = raw.obj
    if traces.is_execution_trace(header):
        converted = traces.to_dump(
            header, rank, dump_file.op_groups, dump_file.shown, _kineto(dump_file)
        )
        header = obj = converted.dump
        notes += converted.notes
        dialect = Dialect.EXECUTION_TRACE
        not_decoded = None  # no decoder reads traces: not a slower reading
    elif isinstance(header, dict):
        if isinstance(raw.obj, Decoded) and dialects.needs_entries(header):
            raise NotDecoded(
                Fallback.ENTRIES_NEEDED, "another recorder's dump, rewritten from its entries"
            )
        dialect = dialects.detect(header)
        notes += dialects.rewrite(header, rank, dialect)
        if ft_group_world_size is not None:
            torchft.global_pg_config(header, rank, ft_group_world_size)
    dump = build_rank(
        obj,
        rank,
        path,
        nbytes=raw.nbytes,
        notes=notes,
        fallback=f"decoder: {not_decoded}" if not_decoded is not None else "",
        not_decoded=not_decoded,
        dialect=dialect.value,
    )
    if ft_group_world_size is not None:
        dump = replace(dump, groups=torchft.global_groups(dump.groups, rank, ft_group_world_size))
    return dump


def _kineto(dump_file: DumpFile) -> tuple[dict[str, Any], str] | None:
    """The rank's Kineto trace beside its Execution Trace, parsed, and where it is; None when
    there is none or it cannot be read as one (the rank is read without its times)."""
    kineto = dump_file.kineto
    if kineto is None:
        return None
    try:
        found = read_dump(kineto.path, kineto.rank, DEFAULT_MAX_FILE_BYTES, fetch=kineto.fetch)
    except (DumpError, MemoryError, RecursionError):
        return None
    return (found.obj, printable(kineto.where)) if isinstance(found.obj, dict) else None


def load_all(
    files: Sequence[DumpFile],
    workers: int | None = None,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    progress: Callable[[int, int], None] | None = None,
    sink: Callable[[RankDump, Mapping[str, np.ndarray]], None] | None = None,
    ft_group_world_size: int | None = None,
    job_wide: bool = True,
) -> tuple[list[RankDump], list[UnreadableDump]]:
    """Load every rank in worker processes (see `sandbox`), in file order.

    Each loaded rank is handed to `sink` (if given) with its columns as soon as it arrives,
    in file order: the table builder takes the columns then, while the workers go on. The
    columns come by name, each in the narrowest integer type that holds its values (as they
    travel from a worker), or as `RankColumns` has them. The ranks come back without their
    entries (`RankDump.header`), each with its file's modification time (`file_time_ns`). A
    file that kills its worker is reported unreadable, with the bomb it holds if a scan finds
    one. Ranks outside the job (see `_outside_the_job`) are set aside; the caller leaves them
    out of its table. With `job_wide` false (a shard of the job's files, read on a cluster) that
    last step is left to the caller, who has every shard (`within_the_job`)."""
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, min(workers, len(files) // 4 or 1))
    members = _Members()
    loaded: list[RankDump] = []
    unreadable: list[UnreadableDump] = []
    results: Iterable[tuple[RankDump | UnreadableDump, Mapping[str, np.ndarray] | None]]
    streamed = files if isinstance(files, StreamedFiles) else None
    if sandbox.available():
        task = functools.partial(
            _load_packed, max_bytes=max_bytes, ft_group_world_size=ft_group_world_size
        )
        retry = functools.partial(
            _load_packed, max_bytes=max_bytes, ft_group_world_size=ft_group_world_size, scan=True
        )
        pool = sandbox.Sandbox(
            task, _file_size, _after_death, workers, retry=retry, limits=limits.LIMITS
        )

        def arrivals() -> Iterator[
            tuple[int, tuple[RankDump | UnreadableDump, Mapping[str, np.ndarray] | None]]
        ]:
            for i, found in pool.run(files):
                if streamed is not None:
                    streamed.release(i)  # its bytes are no longer needed
                yield i, members.unpack(*found)

        results = _in_order(arrivals())
    else:  # no fork: read in this process, every pickle scanned first

        def in_turn() -> Iterator[
            tuple[RankDump | UnreadableDump, Mapping[str, np.ndarray] | None]
        ]:
            for i in range(len(files)):
                loaded = load_rank(files[i], max_bytes, ft_group_world_size=ft_group_world_size)
                if streamed is not None:
                    streamed.release(i)
                columns = None
                if isinstance(loaded, RankDump) and loaded.columns is not None:
                    columns = loaded.columns.arrays()
                yield members.share(loaded), columns

        results = in_turn()
    for index, (result, columns) in enumerate(results):  # in file order
        if isinstance(result, RankDump):
            header = replace(
                result.header(),
                file_time_ns=_file_time_ns(files[index]),
                name_time_ns=_name_time_ns(files[index]),
                host=result.host or hosts.host_in_name(files[index].path.name),
            )
            if sink is not None and columns is not None:
                sink(replace(header, tables=result.tables), columns)
            loaded.append(header)
        else:
            unreadable.append(result)
        if progress is not None:
            progress(len(loaded) + len(unreadable), len(files))
    if not job_wide:
        return loaded, unreadable
    return within_the_job(loaded, unreadable, ft_group_world_size)


def within_the_job(
    loaded: Sequence[RankDump],
    unreadable: Sequence[UnreadableDump],
    ft_group_world_size: int | None = None,
) -> tuple[list[RankDump], list[UnreadableDump]]:
    """The ranks read, each without the groups it claims past the job
    (`_claims_within_the_job`), and those outside the job (`_outside_the_job`) moved to the
    unreadable with the reason: decided over every rank of the job at once."""
    kept = _claims_within_the_job(loaded, ft_group_world_size)
    lost = list(unreadable)
    outside = _outside_the_job(kept, [u.rank for u in lost if u.rank is not None])
    for dump, reason in outside:
        kept.remove(dump)
        lost.append(UnreadableDump(dump.file, dump.rank, reason))
    return kept, lost


def _in_order(arrivals: Iterable[tuple[int, _T]]) -> Iterator[_T]:
    """Results in index order, each as soon as it and every one before it are in."""
    waiting: dict[int, _T] = {}
    following = 0
    for index, result in arrivals:
        waiting[index] = result
        while following in waiting:
            yield waiting.pop(following)
            following += 1


_T = TypeVar("_T")


def _file_size(dump_file: DumpFile) -> int:
    """The bytes of content a file holds, which set its worker's limits (a sparse file counts
    by the blocks it occupies, not its length)."""
    if dump_file.fetch is not None:
        return dump_file.fetch.size
    return content_bytes(dump_file.path)


def _after_death(dump_file: DumpFile, death: sandbox.Death) -> _Loaded:
    """The record of a file whose workers died reading it (the last attempt scanned it
    first, in its worker, and found no bomb to name): how they died."""
    return UnreadableDump(printable(dump_file.where), dump_file.rank, death.reason), {}, None


def _scanned(dump_file: DumpFile, max_bytes: int) -> UnreadableDump | None:
    """A file that killed a worker, scanned before it is read again: the record naming the
    bomb it holds, if the scan finds one (the scan builds nothing; it runs in a worker, under
    that file's limits)."""
    try:
        data = read_unpacked(dump_file.path, dump_file.rank, max_bytes, dump_file.fetch)
        reason = explain_pickle(data)
    except DumpError as exc:
        reason = exc.reason
    except (RecursionError, MemoryError):
        return None  # the reading again finds what it finds
    if reason is None:
        return None
    return UnreadableDump(printable(dump_file.where), dump_file.rank, reason)


# Member lists between processes. Every rank's pg_config lists the world group, so sending
# each rank's member lists back whole would move ranks x world-size integers through the pipes
# (16,384 x 16,384 at 16,384 ranks). A worker sends a long list whole the first time and after
# that only its digest; the parent keeps one tuple per digest, shared by every rank.
_PACK_FROM = 64  # shorter lists always travel whole
_Packed = dict[str, tuple[bytes, tuple[int, ...] | None]]
_sent: set[bytes] = set()  # in a worker: digests of the lists this process has sent whole
_digests: dict[int, tuple[tuple[int, ...], bytes]] = {}  # in a worker: by the list's identity


# A rank's columns travel as one buffer: pickling two dozen small arrays one by one costs
# more, on both ends, than the bytes themselves. (name, dtype, length) per column, in order.
_Arrays = tuple[tuple[tuple[str, str, int], ...], bytes]
_Loaded = tuple[RankDump | UnreadableDump, _Packed, _Arrays | None]
"""A worker's answer: the rank without its columns, its packed member lists, its columns."""


def _pack_arrays(columns: RankColumns) -> _Arrays:
    """Integer columns travel in the narrowest type that holds their values (codes and
    sequence ids mostly fit 16 bits): fewer bytes to copy through the pipe on both ends."""
    arrays = []
    for name, array in columns.arrays().items():
        if array.dtype.kind == "i" and array.dtype.itemsize > 1 and len(array):
            low, high = int(array.min()), int(array.max())
            for narrow, least, most in _NARROW:
                if narrow.itemsize < array.dtype.itemsize and least <= low <= high <= most:
                    array = array.astype(narrow)
                    break
        arrays.append((name, np.ascontiguousarray(array)))
    arrays.sort(key=lambda item: -item[1].dtype.itemsize)  # every column stays aligned
    layout = tuple((name, array.dtype.str, len(array)) for name, array in arrays)
    return layout, b"".join(array.data for _, array in arrays)


def _unpack_arrays(arrays: _Arrays) -> dict[str, np.ndarray]:
    """The columns by name, as they travelled (read-only views of the buffer, some in a
    narrower type than their own): the table builder copies them into its own columns, which
    widens them on the way, so no wide copy is made here."""
    layout, data = arrays
    offset = 0
    found: dict[str, np.ndarray] = {}
    for name, dtype, n in layout:
        column = np.frombuffer(data, dtype=dtype, count=n, offset=offset)
        offset += column.nbytes
        found[name] = column
    return found


_NARROW = tuple(
    (np.dtype(t), int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (np.int8, np.int16, np.int32)
)


def _load_packed(
    dump_file: DumpFile, max_bytes: int, ft_group_world_size: int | None = None, scan: bool = False
) -> _Loaded:
    """`load_rank` in a worker process, with its columns in one buffer and the long member
    lists of its claims packed. `scan`: the file killed a worker before; look for a bomb
    first (see `_scanned`)."""
    bomb = _scanned(dump_file, max_bytes) if scan else None
    if bomb is not None:
        return bomb, {}, None
    result = load_rank(
        dump_file, max_bytes, sandboxed=True, ft_group_world_size=ft_group_world_size
    )
    if not isinstance(result, RankDump) or result.columns is None:
        return result, {}, None
    packed: _Packed = {}
    claims = dict(result.claims)
    for name, claim in result.claims.items():
        if len(claim.ranks) < _PACK_FROM:
            continue
        digest = _digest(claim.ranks)
        packed[name] = (digest, None if digest in _sent else claim.ranks)
        _sent.add(digest)
        claims[name] = replace(claim, ranks=())
    arrays = _pack_arrays(result.columns)
    return replace(result, claims=claims, columns=None), packed, arrays


def _digest(ranks: tuple[int, ...]) -> bytes:
    hit = _digests.get(id(ranks))
    if hit is not None and hit[0] is ranks:
        return hit[1]
    digest = hashlib.blake2b(np.array(ranks, dtype=np.int64).tobytes(), digest_size=16).digest()
    if len(_digests) >= 4096:
        _digests.clear()
    _digests[id(ranks)] = (ranks, digest)  # holds the tuple, so the identity stays its own
    return digest


class _Members:
    """In the parent: one tuple per distinct member list, shared by every rank that lists it
    (or memory grows with ranks squared: 16,384 ranks x 16,384 members)."""

    def __init__(self) -> None:
        self._by_value: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._by_digest: dict[bytes, tuple[int, ...]] = {}

    def share(
        self, result: RankDump | UnreadableDump, done: Iterable[str] = ()
    ) -> RankDump | UnreadableDump:
        """The rank with each claim's member list (but those named in `done`) swapped for the
        shared copy."""
        if not isinstance(result, RankDump) or not result.claims:
            return result
        skip = set(done)
        claims = {
            name: claim
            if name in skip
            else replace(claim, ranks=self._by_value.setdefault(claim.ranks, claim.ranks))
            for name, claim in result.claims.items()
        }
        return replace(result, claims=claims)

    def unpack(
        self, result: RankDump | UnreadableDump, packed: _Packed, arrays: _Arrays | None
    ) -> tuple[RankDump | UnreadableDump, dict[str, np.ndarray] | None]:
        """A worker's rank whole again, its packed member lists unpacked, and its columns by
        name (see `_unpack_arrays`). A digest is always known: a worker handles its files in
        the order they were handed out, and results are taken in that order, so a list sent
        whole is taken before any digest-only reference to it (a worker that dies takes its
        list cache with it, and its successor starts from an empty one)."""
        if not isinstance(result, RankDump):
            return result, None
        claims = dict(result.claims)
        for name, (digest, ranks) in packed.items():
            if ranks is None:
                found = self._by_digest[digest]
            else:
                found = self._by_digest.setdefault(digest, self._by_value.setdefault(ranks, ranks))
            claims[name] = replace(claims[name], ranks=found)
        columns = _unpack_arrays(arrays) if arrays is not None else None
        if packed:
            result = replace(result, claims=claims)
        return self.share(result, done=packed), columns


def _outside_the_job(
    loaded: Sequence[RankDump], unreadable: Sequence[int] = ()
) -> list[tuple[RankDump, str]]:
    """Dumps whose rank (from the file name) is beyond every group that the other ranks'
    pg_config lists: a stray file from a bigger job. Counted in, it would invent missing ranks
    and split the groups it shares a name with. Where no pg_config lists members (gloo), the
    files' rank numbers are the job: files past a gap of more missing ranks than there are
    files below it (`rank_1048575` beside ranks 0-3: a job of 2**20 ranks, all but five
    missing) are set aside, their rank named, not believed as the job's size. A file that
    could not be read still fills its place in that count (`unreadable`: their ranks): two
    damaged files between ranks 0 and 3 leave no gap."""
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
    if out:
        return out if len(out) < len(loaded) else []
    ranks = sorted({d.rank for d in loaded} | set(unreadable))
    far = next(
        (
            i
            for i in range(1, len(ranks))
            if ranks[i] - ranks[i - 1] - 1 > i and ranks[i] > ordered[0]
        ),
        None,
    )
    if far is None:
        return []
    below = ranks[far - 1]
    return [
        (
            dump,
            f"rank {dump.rank} (from the file name) is far past the other files' ranks (up to"
            f" {below}, {far} files): believed, it would make a job of {dump.rank + 1:,} ranks,"
            " most of them missing; not analyzed",
        )
        for dump in loaded
        if dump.rank > below
    ]


def _claims_within_the_job(
    loaded: Sequence[RankDump], ft_group_world_size: int | None = None
) -> list[RankDump]:
    """The ranks, each without the groups of its pg_config that reach past every rank the
    job shows otherwise: the rank's own number, the other readable files' ranks and the
    members of the other ranks' groups (an unreadable file's name alone shows nothing: a junk
    `rank_1048575` must not make a million-member claim believable). One rank's claim must
    not grow the job (a default group of a million members where eight files exist) nor turn
    a healthy job's verdict: such a claim is set aside with a warning, and the group is
    rebuilt as for a rank that lists none (from the other ranks' pg_config or the entries).
    With one rank loaded nothing compares, and nothing is set aside. In a torchft job
    (`ft_group_world_size`) a rank's own replica group is the job as it shows too."""
    if len(loaded) < 2:
        return list(loaded)
    tops = [max([d.rank, *(c.ranks[-1] for c in d.claims.values())]) for d in loaded]
    ordered = sorted(tops, reverse=True)[:2]
    replica = ft_group_world_size or 1
    out = []
    for dump, top in zip(loaded, tops, strict=True):
        others = ordered[1] if top == ordered[0] else ordered[0]
        bound = max(others, (dump.rank // replica + 1) * replica - 1)
        if top <= bound:
            out.append(dump)
            continue
        kept = {name: c for name, c in dump.claims.items() if c.ranks[-1] <= bound}
        beyond = sorted(set(dump.claims) - set(kept))
        shown = ", ".join(repr(name[:40]) for name in beyond[:3])
        more = f" and {len(beyond) - 3:,} more" if len(beyond) > 3 else ""
        note = (
            f"rank {dump.rank}: pg_config group(s) {shown}{more} list members up to rank"
            f" {top:,}, beyond every rank the other files and their groups show (up to"
            f" {bound:,}): set aside, those groups rebuilt as if unlisted"
        )
        warnings = (*dump.warnings, printable(note))
        out.append(
            replace(dump, claims=kept, warnings=warnings, claims_set_aside=frozenset(beyond))
        )
    return out
