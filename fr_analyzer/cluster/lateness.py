"""The straggler rule's passes (`diagnosis.lateness`) as Ray tasks, for a driver that holds no
table: each pass runs where its slice of the job lies, and only the rule's summary comes to
the driver (`stragglers.RankLateness`, a few numbers a rank).

1. **Arrivals, per part** (`part_arrivals`): the part made again from its blocks, with its
   final result (both in the store), gives each op's completion and whether it counts; the
   ops are cut by the shard their rank was read in, one object per shard.
2. **Waits, per shard** (`shard_waits`): the shard's own columns (the rank, the kind of each
   row, block markers, enqueue times: none recoded) and the arrivals of its rows from every
   part give each counted op's wait; they are cut by part again.
3. **Lateness, per part** (`part_late`): each unit's longest wait, so each counted op's
   lateness; cut by shard.
4. **Summary, per shard** (`shard_summary`): each rank's summary.

Rows travel numbered in the job; each task numbers its slice's rows itself. One process runs
the same passes over the whole table (`stragglers.find`): the same summary
(tests/cluster/test_ray_engine.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..diagnosis import lateness
from ..diagnosis.stragglers import RankLateness, Summary
from ..match import PartMatch, completion
from ..match.partitions import Part
from ..model.dump import COLUMNS as OWN
from .connect import ClusterError, import_ray

if TYPE_CHECKING:
    from .shards import ShardColumns
    from .shuffle import Block, Finals, Kept

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Counted:
    """What pass 1 tells the driver of a part: its ops reached, those counted, whether some
    counted op's completion was recorded."""

    ops: int
    kept: int
    recorded: bool


@dataclass(frozen=True)
class Layout:
    """Where each rank's rows lie: the shard it was read in (its place among the shards
    kept)."""

    shard_of_rank: I64  # by rank (-1: none)

    def shard(self, rank: npt.NDArray[np.int32]) -> I64:
        """The shard of each row, by its rank."""
        found: I64 = self.shard_of_rank[rank.astype(np.int64)]
        return found


def part_arrivals(
    frame: Part, size: int, done: PartMatch, layout: Layout, shards: int, *blocks: Block
) -> tuple[Any, ...]:
    """Pass 1: (`Counted`, the part's counted ops (rows in the job, unit keys), then one
    `lateness.Arrivals` per shard, its rows numbered in the job)."""
    from .shuffle import assembled

    part = assembled(frame, size, *blocks)
    t = part.table
    t.retired[completion.silent_rows(t, part.quiet)] = False
    got = lateness.arrivals(t, done.result)
    rows = part.rows
    assert rows is not None
    job = rows[got.rows]
    shard = layout.shard(t.rank[got.rows])
    told = Counted(len(got.rows), got.counted, got.recorded)
    kept = (job[got.kept], got.unit[got.kept], got.keys)
    out: list[Any] = [told, kept]
    # by shard in one stable sort (rows ascending within each), not a scan per shard
    order = np.argsort(shard, kind="stable")
    bounds = np.searchsorted(shard[order], np.arange(shards + 1))
    for s in range(shards):
        sel = order[bounds[s] : bounds[s + 1]]
        out.append(
            replace(
                got,
                rows=job[sel],
                completion=got.completion[sel],
                unit=got.unit[sel],
                kept=got.kept[sel],
                collective=got.collective[sel],
            )
        )
    return tuple(out)


def _slice(
    columns: ShardColumns, ranks: Sequence[int], starts: Sequence[int]
) -> tuple[lateness.Slice, I64]:
    """The rows of the shard's ranks in the job (`starts`: each one's first row in the job,
    -1 for a rank left out of it) as a slice, and each slice row's row in the job."""
    first = columns.starts[:-1]
    counts = np.diff(columns.starts)
    kept = [i for i, start in enumerate(starts) if start >= 0]
    rows = np.concatenate(
        [np.zeros(0, np.int64)]
        + [np.arange(first[i], first[i] + counts[i], dtype=np.int64) for i in kept]
    )
    n = counts[kept]
    at = np.cumsum([0, *n.tolist()])[:-1]  # each kept rank's first row in the slice
    arrays = columns.arrays
    marker = arrays["marker"][rows].astype(np.int64)
    base = np.repeat(at, n)
    marker = np.where(marker >= 0, marker + base, -1)
    job = np.concatenate(
        [np.zeros(0, np.int64)]
        + [np.arange(starts[i], starts[i] + counts[i], dtype=np.int64) for i in kept]
    )
    got = lateness.Slice(
        arrays["unit"][rows].astype(OWN["unit"], copy=False),
        np.repeat(np.asarray([ranks[i] for i in kept], dtype=np.int32), n),
        marker.astype(np.int32),
        arrays["t_created"][rows].astype(np.int64, copy=False),
    )
    return got, job


def _in_slice(job: I64, rows: I64) -> I64:
    """Rows of the job as the slice numbers them (`job`: each slice row's; every one there)."""
    order = np.argsort(job, kind="stable")
    at = np.searchsorted(job, rows, sorter=order)
    return order[at].astype(np.int64)


def shard_waits(
    columns: ShardColumns,
    ranks: Sequence[int],
    starts: Sequence[int],
    parts: int,
    *pieces: lateness.Arrivals,
) -> tuple[Any, ...]:
    """Pass 2: (the shard's state for pass 4, then each part's counted ops of the shard: their
    rows in the job and their waits)."""
    t, job = _slice(columns, ranks, starts)
    numbered = [replace(a, rows=_in_slice(job, a.rows)) for a in pieces]
    every = np.arange(t.n, dtype=np.int64)
    got = lateness.Arrivals.joined([(every, a) for a in numbered])
    # each op's part, in the order `joined` puts them (by row: a row lies in one part)
    rows = np.concatenate([np.zeros(0, np.int64), *(a.rows for a in numbered)])
    part = np.repeat(np.arange(len(pieces)), [len(a.rows) for a in pieces])
    part = part[np.argsort(rows, kind="stable")]
    w = lateness.waits(t, got)
    of_part = part[got.kept]
    state = (t, w, got.collective[got.kept], job)
    out: list[Any] = [state]
    for p in range(parts):
        sel = np.flatnonzero(of_part == p)
        out.append((job[w.rows[sel]], w.wait_ns[sel]))
    return tuple(out)


def part_late(kept: tuple[I64, I64, int], shards: int, *waited: tuple[I64, Any]) -> tuple[Any, ...]:
    """Pass 3: each shard's counted ops of the part: their rows in the job and lateness."""
    rows, unit, keys = kept
    got_rows = np.concatenate([np.zeros(0, np.int64), *(r for r, _ in waited)])
    wait = np.concatenate([np.zeros(0, np.float64), *(w for _, w in waited)])
    order = np.argsort(got_rows, kind="stable")
    if not np.array_equal(got_rows[order], rows):
        raise AssertionError("the shards' counted ops of a part are not the part's")
    late = np.empty(len(rows), dtype=np.float64)
    late[order] = lateness.late_ms(unit, keys, wait[order])
    bounds = np.cumsum([0, *(len(r) for r, _ in waited)])
    out = [(waited[s][0], late[bounds[s] : bounds[s + 1]]) for s in range(shards)]
    return tuple(out) if shards > 1 else out[0]


def shard_summary(
    state: tuple[lateness.Slice, lateness.Waits, Any, I64],
    stall_ms: float,
    straggler_ms: float,
    *late: tuple[I64, Any],
) -> RankLateness:
    """Pass 4: the shard's summary, its arrivals numbered in the job."""
    t, w, collective, job = state
    rows = _in_slice(job, np.concatenate([np.zeros(0, np.int64), *(r for r, _ in late)]))
    values = np.concatenate([np.zeros(0, np.float64), *(v for _, v in late)])
    order = np.argsort(rows, kind="stable")
    if not np.array_equal(rows[order], w.rows):
        raise AssertionError("the parts' counted ops of a shard are not the shard's")
    return RankLateness.of(t, w, values[order], collective, stall_ms, straggler_ms, numbers=job)


def summary(
    finals: Finals,
    indices: Sequence[int],
    kept: Sequence[Kept],
    layout: Layout,
    starts: Sequence[Sequence[int]],
    stall_ms: float,
    straggler_ms: float,
    retries: int,
) -> Summary:
    """The four passes over the job's parts (`indices` of `finals`) and kept shards."""
    ray = import_ray()
    if not ray.is_initialized():
        raise ClusterError("the connection to the Ray cluster was closed before the diagnosis")
    options = {"max_retries": retries, "retry_exceptions": False, "num_cpus": 1}
    n_shards, n_parts = len(kept), len(indices)
    at = ray.put(layout)
    one = []
    for i in indices:
        f = finals[i]
        task = ray.remote(num_returns=2 + n_shards, **options)(part_arrivals)
        one.append(task.remote(f.frame, f.size, f.done, at, n_shards, *f.blocks))
    told: list[Counted] = ray.get([refs[0] for refs in one])
    two = []
    for s, shard in enumerate(kept):
        task = ray.remote(num_returns=1 + n_parts, **options)(shard_waits)
        ranks = [r for r, *_ in shard.ranks]
        two.append(
            task.remote(shard.columns, ranks, starts[s], n_parts, *(refs[2 + s] for refs in one))
        )
    three = []
    for p, refs in enumerate(one):
        task = ray.remote(num_returns=n_shards, **options)(part_late)
        got = task.remote(refs[1], n_shards, *(w[1 + p] for w in two))
        three.append(list(got) if n_shards > 1 else [got])
    four = [
        ray.remote(**options)(shard_summary).remote(
            w[0], stall_ms, straggler_ms, *(late[s] for late in three)
        )
        for s, w in enumerate(two)
    ]
    pieces: list[RankLateness] = ray.get(four)
    return Summary(
        RankLateness.joined(pieces),
        sum(c.ops for c in told),
        sum(c.kept for c in told),
        any(c.recorded for c in told),
    )
