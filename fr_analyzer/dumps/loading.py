"""Load every rank, in worker processes when there are enough files to pay for them."""

from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import DumpError
from ..model import UnreadableDump
from .common import DEFAULT_MAX_FILE_BYTES, printable
from .decode import Undecodable
from .discovery import DumpFile
from .normalize import _COLUMNS, RankDump, build_rank
from .reading import _read


def load_rank(
    dump_file: DumpFile, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> RankDump | UnreadableDump:
    """Read and normalize one rank; any problem becomes an UnreadableDump record."""
    path = printable(str(dump_file.path))
    was_enabled = gc.isenabled()
    gc.disable()  # a dump is ~100k small containers freed by reference counting; GC passes
    try:  # over them while it is read cost more than the reading
        raw = _read(dump_file.path, dump_file.rank, max_bytes, fast=True)
        try:
            return build_rank(raw.obj, dump_file.rank, path, nbytes=raw.nbytes, notes=raw.notes)
        except Undecodable:
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
    finally:
        if was_enabled:
            gc.enable()


def load_all(
    files: Sequence[DumpFile],
    workers: int | None = None,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    progress: Callable[[int, int], None] | None = None,
    sink: Callable[[RankDump], None] | None = None,
) -> tuple[list[RankDump], list[UnreadableDump]]:
    """Load every rank, in worker processes when there are enough files to pay for them.

    Each loaded rank is handed to `sink` (if given) as soon as it arrives, in file order: the
    table builder takes its columns then, while the workers go on. A worker that dies (killed
    for memory, say) does not take the run with it: the files it had not returned are read again
    one per process, and the one that kills its process again is reported unreadable. Ranks
    outside the job (see `_outside_the_job`) are set aside; the caller leaves them out of its
    table."""
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, min(workers, len(files) // 4 or 1))
    results: dict[int, RankDump | UnreadableDump] = {}
    members = _Members()

    def arrived(i: int, result: RankDump | UnreadableDump) -> None:
        results[i] = result
        if sink is not None and isinstance(result, RankDump):
            sink(result)
        if progress is not None:
            progress(len(results), len(files))

    if workers == 1:
        for i, dump_file in enumerate(files):
            arrived(i, members.share(load_rank(dump_file, max_bytes)))
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        # Small chunks keep both cores busy to the end; each costs well under a millisecond.
        chunk = max(1, min(16, len(files) // (workers * 16)))
        try:
            mapped = pool.map(_load_packed, files, [max_bytes] * len(files), chunksize=chunk)
            for i, (result, packed, arrays) in enumerate(mapped):
                if isinstance(result, RankDump) and arrays is not None:
                    _unpack_arrays(result, arrays)
                unpacked = members.unpack(result, packed)
                if unpacked is None:  # never expected: see `_Members.unpack`
                    unpacked = members.share(load_rank(files[i], max_bytes))
                arrived(i, unpacked)
        except BrokenProcessPool:
            for i, dump_file in enumerate(files):
                if i not in results:
                    arrived(i, members.share(_load_isolated(dump_file, max_bytes)))
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
_ARRAY_FIELDS = (*_COLUMNS, "unit", "marker")
_SENT = np.empty(0, dtype=np.int8)  # stands in for a column while it travels in the buffer


def _pack_arrays(dump: RankDump) -> _Arrays:
    """Integer columns travel in the narrowest type that holds their values (codes and
    sequence ids mostly fit 16 bits): fewer bytes to copy through the pipe on both ends."""
    arrays = []
    for name in _ARRAY_FIELDS:
        array = getattr(dump, name)
        setattr(dump, name, _SENT)
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


def _unpack_arrays(dump: RankDump, arrays: _Arrays) -> None:
    """The columns back in their own types (those that kept theirs: read-only views of the
    buffer, which the table builder copies)."""
    layout, data = arrays
    offset = 0
    for name, dtype, n in layout:
        column = np.frombuffer(data, dtype=dtype, count=n, offset=offset)
        offset += column.nbytes
        own = _ARRAY_TYPES[name]
        setattr(dump, name, column if column.dtype == own else column.astype(own))


_NARROW = tuple(
    (np.dtype(t), int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (np.int8, np.int16, np.int32)
)
_ARRAY_TYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(t) for name, t in (*_COLUMNS.items(), ("unit", np.int8), ("marker", np.int32))
}


def _load_packed(
    dump_file: DumpFile, max_bytes: int
) -> tuple[RankDump | UnreadableDump, _Packed, _Arrays | None]:
    """`load_rank` in a worker process, with its columns in one buffer and the long member
    lists of its claims packed."""
    result = load_rank(dump_file, max_bytes)
    packed: _Packed = {}
    arrays = None
    if isinstance(result, RankDump):
        arrays = _pack_arrays(result)
        for name, claim in list(result.claims.items()):
            if len(claim.ranks) < _PACK_FROM:
                continue
            digest = _digest(claim.ranks)
            packed[name] = (digest, None if digest in _sent else claim.ranks)
            _sent.add(digest)
            result.claims[name] = replace(claim, ranks=())
    return result, packed, arrays


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
        """Swap each claim's member list (but those named in `done`) for the shared copy."""
        if isinstance(result, RankDump) and result.claims:
            skip = set(done)
            result.claims = {
                name: claim
                if name in skip
                else replace(claim, ranks=self._by_value.setdefault(claim.ranks, claim.ranks))
                for name, claim in result.claims.items()
            }
        return result

    def unpack(
        self, result: RankDump | UnreadableDump, packed: _Packed
    ) -> RankDump | UnreadableDump | None:
        """Restore packed member lists; None if a digest is unknown. That cannot happen: a
        worker handles its files in the order they were handed out, and results are taken in
        that order, so a list sent whole is always taken before any digest-only reference."""
        if not isinstance(result, RankDump):
            return result
        for name, (digest, ranks) in packed.items():
            if ranks is None:
                found = self._by_digest.get(digest)
                if found is None:
                    return None
            else:
                found = self._by_digest.setdefault(digest, self._by_value.setdefault(ranks, ranks))
            result.claims[name] = replace(result.claims[name], ranks=found)
        return self.share(result, done=packed)


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
