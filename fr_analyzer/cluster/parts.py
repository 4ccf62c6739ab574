"""Match on a Ray cluster: one task per part of the job (`match.partitions`), each part the
rows of one family of process groups (the tensor-parallel groups, the pipeline groups, the
world) or of some groups of a family too large for a task, matched by the rules one process
runs (`match.partitions.match_part`).

The driver copies a part into the store one column at a time (it never holds a part's whole
copy) and keeps at most `window` parts in flight, so the object store holds a bounded share
of the job; the results (units, pairs
and findings of each part) come back as they finish and are merged in the order one process
makes them (`match.partitions.merge`). A part whose task fails past Ray's retries is matched
in the driver instead, where the same rules give the same result: a lost worker costs time,
never the answer. Ctrl-C cancels every task still in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from ..match import PartMatch
from ..match.partitions import COLUMNS, Cut, match_columns, match_part
from .connect import ClusterError, import_ray, wait_one

_Held = TypeVar("_Held")


def match_parts(cuts: Iterable[Cut], *, window: int, retries: int) -> Iterator[PartMatch]:
    """Each part matched in a task of its own, the results as they finish. A part whose task
    failed past its retries is matched here, from its copy in the store."""
    ray = import_ray()
    if not ray.is_initialized():
        raise ClusterError("the connection to the Ray cluster was closed before matching")
    task = ray.remote(max_retries=retries, retry_exceptions=False, num_cpus=1)(match_columns)
    pending: dict[Any, list[Any]] = {}  # the task's result -> its part, in the store
    todo = iter(cuts)
    exhausted = False
    try:
        while pending or not exhausted:
            while not exhausted and len(pending) < window:
                cut = next(todo, None)
                if cut is None:
                    exhausted = True
                    break
                stored = [ray.put(cut.frame())] + [_put(ray, cut, name) for name in COLUMNS]
                del cut
                pending[task.remote(*stored)] = stored
            if not pending:
                break
            yield next_done(
                ray, pending, lambda stored, exc: noted(match_columns(*ray.get(stored)), exc)
            )
    except BaseException:  # Ctrl-C, or the driver failing: nothing left running
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


def _put(ray: Any, cut: Cut, name: str) -> Any:
    """One column of the part, copied into the store: the driver's copy lives only for the
    time of the put (the store's spills to disk past its memory)."""
    return ray.put(cut.column(name))


def next_done(
    ray: Any, pending: dict[Any, _Held], instead: Callable[[_Held, BaseException], PartMatch]
) -> PartMatch:
    """The result of the first task of `pending` to finish (taken out of it); for a task that
    failed past its retries, `instead(what it was given, the error)`."""
    ready = wait_one(ray, list(pending))
    held = pending.pop(ready)
    try:
        got = ray.get(ready)
    except (ray.exceptions.RayTaskError, ray.exceptions.RayError) as exc:
        got = instead(held, exc)
    assert isinstance(got, PartMatch)
    return got


def matched_here(cut: Cut, exc: BaseException) -> PartMatch:
    """A part whose task failed past its retries, matched in the driver, with a note."""
    return noted(match_part(cut.part()), exc)


def noted(got: PartMatch, exc: BaseException) -> PartMatch:
    """The part's result with a note that its task failed (the report's warnings say it)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    groups = ", ".join(str(u) for u in _uids(got)) or "none"
    note = (
        f"the Ray task matching groups {groups} failed ({type(exc).__name__}: {first[:200]});"
        " they were matched in this process instead"
    )
    return replace(got, result=replace(got.result, notes=(*got.result.notes, note)))


def _uids(got: PartMatch) -> list[int]:
    return sorted(set(got.result.collectives.group.tolist()))
