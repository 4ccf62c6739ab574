"""Load every rank, in worker processes when there are enough files to pay for them."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace

from ..errors import DumpError
from ..model import UnreadableDump
from .common import DEFAULT_MAX_FILE_BYTES, printable
from .discovery import DumpFile
from .normalize import RankDump, build_rank
from .reading import _read


def load_rank(
    dump_file: DumpFile, max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> RankDump | UnreadableDump:
    """Read and normalize one rank; any problem becomes an UnreadableDump record."""
    path = printable(str(dump_file.path))
    was_enabled = gc.isenabled()
    gc.disable()  # a dump is ~100k small containers freed by reference counting; GC passes
    try:  # over them while it is read cost more than the reading
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
) -> tuple[list[RankDump], list[UnreadableDump]]:
    """Load every rank, in worker processes when there are enough files to pay for them.

    A worker that dies (killed for memory, say) does not take the run with it: the files it
    had not returned are read again one per process, and the one that kills its process again
    is reported unreadable. Ranks outside the job (see `_outside_the_job`) are set aside."""
    if workers is None:
        workers = os.cpu_count() or 1
    workers = max(1, min(workers, len(files) // 4 or 1))
    results: dict[int, RankDump | UnreadableDump] = {}
    members: dict[tuple[int, ...], tuple[int, ...]] = {}
    if workers == 1:
        for i, dump_file in enumerate(files):
            results[i] = _share_members(load_rank(dump_file, max_bytes), members)
            if progress is not None:
                progress(len(results), len(files))
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        chunk = max(1, min(64, len(files) // (workers * 8)))
        try:
            mapped = pool.map(load_rank, files, [max_bytes] * len(files), chunksize=chunk)
            for i, result in enumerate(mapped):
                results[i] = _share_members(result, members)
                if progress is not None:
                    progress(len(results), len(files))
        except BrokenProcessPool:
            for i, dump_file in enumerate(files):
                if i not in results:
                    results[i] = _share_members(_load_isolated(dump_file, max_bytes), members)
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


def _share_members(
    result: RankDump | UnreadableDump, members: dict[tuple[int, ...], tuple[int, ...]]
) -> RankDump | UnreadableDump:
    """Every rank's pg_config lists the world group's members: keep one copy of each distinct
    member list, or memory grows with ranks squared (16,384 ranks x 16,384 members)."""
    if isinstance(result, RankDump) and result.claims:
        result.claims = {
            name: replace(claim, ranks=members.setdefault(claim.ranks, claim.ranks))
            for name, claim in result.claims.items()
        }
    return result


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
