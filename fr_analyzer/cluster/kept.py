"""The rows of a job left where the cluster read them, for a driver that holds no table
(`pipeline.KeptRows`).

The map stage leaves each shard's columns in the store and sends the driver its ranks'
headers: their tables of distinct values, the group codes their rows carry and how many rows
each has, which the driver takes into the job's lists (`load.formats.lists.Lists`, in the
order the table builder takes ranks). From those the driver has the table of no rows
(`build`); the parts are split from the shards by the lists' plans
(`shuffle.plans_of_lists`) and matched in tasks whose results stay in the store
(`shuffle.Finals`); the diagnosis takes each part's piece in a task where it lies (`take`)
and fetches only the rows the pieces hold, one task per shard that has some (`fetch`); a
database takes every row a chunk at a time, each chunk's outcome of matching taken of the
parts where they lie (`outcomes`); a side-by-side view (`-j`) the rows it shows, chosen of
the parts where they lie (`shown`). Everything stays in the store until the analysis is over
(`release`), or while its database may still be written (`Options.keep_rows`). A worker,
node or object lost past Ray's retries is one `ClusterError` (`connect.lost_as`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..diagnosis.series import step_ranks
from ..diagnosis.stragglers import Summary
from ..load import Lists, TableBuilder
from ..match import PartMatch
from ..match.frontier import Wanted
from ..match.outcomes import Outcome, Outcomes, numbered
from ..model.dump import RankDump
from ..model.shown import Showing, Shown
from ..model.table import EntryTable
from .connect import ClusterError, import_ray, lost_as
from .lateness import Layout, summary
from .shuffle import Finals, Kept, Split, outcomes_of, shown_of, take_pieces

if TYPE_CHECKING:
    from ..pipeline import ShardFn, T
    from .shards import ShardColumns

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TablePlace:
    """Where a table of every row goes (`load.TableBuilder`): in memory up to `up_to` bytes
    (None: no bound), past it in files in `on_disk` (None: in memory)."""

    on_disk: Path | None = None
    up_to: int | None = None


LOST_OUTCOMES = "the outcome of matching could not be taken from the cluster"


class ClusterRows:
    """The rows of the last read, in the cluster's store (`Kept` shards), and the job's lists
    of values the driver holds (`lists`)."""

    def __init__(
        self,
        lists: Lists,
        kept: list[Kept],
        headers: list[list[RankDump]],
        retries: int,
        placed: TablePlace = TablePlace(),
    ) -> None:
        self.lists, self.kept, self.retries = lists, kept, retries
        self.headers = headers  # each kept shard's ranks, with their tables
        self.placed = placed
        self.finals: Finals = {}  # each part's final result, in the store
        self.split: Split | None = None  # the parts' blocks
        self.fetched = 0  # rows fetched to the driver, in all (for tests and benchmarks)
        self.most_fetched = 0  # the most rows fetched at once
        self._total: tuple[int, list[int]] | None = None  # the job's rows, and its ranks
        self._where: dict[int, tuple[int, int]] = {
            rank: (s, at)
            for s, shard in enumerate(kept)
            for at, (rank, *_) in enumerate(shard.ranks)
        }

    def build(self, ranks: Sequence[int]) -> EntryTable:
        """The table of no rows of the ranks kept in the job (`Lists.build`)."""
        self._total = None
        return self.lists.build(ranks)

    def fetch(self, lists: EntryTable, rows: I64) -> EntryTable:
        """The job's `rows` (ascending) as a table of their own, from the shards that hold
        them: one task per shard, each sending the columns of its rows asked. Every row of
        the job: the table one process builds (`every`)."""
        ray = _ray()
        if self._total is None:  # made once: a database asks chunk after chunk
            starts = self.lists.starts()
            self._total = (sum(self.lists.rows_of(r) for r in starts), sorted(starts))
        total, every = self._total
        if len(rows) and len(rows) == total:
            return self.every(every)
        asked = self.lists.asked(rows)
        by_shard: dict[int, dict[int, I64]] = {}
        for rank, local in asked.items():
            s, at = self._where[rank]
            by_shard.setdefault(s, {})[at] = local
        task = ray.remote(max_retries=self.retries, retry_exceptions=False, num_cpus=1)(
            rows_of_shard
        )
        refs = {s: task.remote(self.kept[s].columns, wanted) for s, wanted in by_shard.items()}
        pieces: list[dict[str, np.ndarray]] = []
        owners: list[I64] = []
        try:
            for s, ref in refs.items():
                with lost_as("the job's rows could not be fetched from the cluster"):
                    counts, of_shard = ray.get(ref)
                places = list(by_shard[s])
                ranks = np.array([self.kept[s].ranks[at][0] for at in places], dtype=np.int64)
                owners.append(np.repeat(ranks, counts))
                pieces.append(of_shard)
        except BaseException:
            for ref in refs.values():
                ray.cancel(ref, force=True)
            raise
        self.fetched += len(rows)
        self.most_fetched = max(self.most_fetched, len(rows))
        # the shards' rows in rank order (each rank's rows ascending already)
        order = np.argsort(np.concatenate([np.zeros(0, np.int64), *owners]), kind="stable")
        joined = {
            name: np.concatenate([piece[name] for piece in pieces])[order]
            for name in (pieces[0] if pieces else {})
        }
        return self.lists.rows(lists, rows, lambda asked: joined)

    def every(self, ranks: Sequence[int]) -> EntryTable:
        """The job's table of every row of `ranks`, built as the pipeline builds it from the
        ranks read (`load.TableBuilder`, out of core as `placed` says): each shard's columns
        taken from the store in turn, in the order the ranks were read."""
        ray = _ray()
        builder = TableBuilder(
            ranks_hint=len(ranks), on_disk=self.placed.on_disk, in_memory_up_to=self.placed.up_to
        )
        for shard, headers in zip(self.kept, self.headers, strict=True):
            columns: ShardColumns = ray.get(shard.columns)
            for dump, arrays in zip(headers, columns, strict=True):
                builder.add(dump, arrays)
            del columns
        table = builder.build(ranks)
        self.fetched += table.n
        self.most_fetched = max(self.most_fetched, table.n)
        return table

    def take(self, final: Sequence[PartMatch], wanted: Wanted) -> list[PartMatch]:
        """Each part's piece of its final result (`final`: what the rounds gave of them),
        with the rows and collectives `wanted`, taken where the part lies."""
        return take_pieces(self.finals, [p.index for p in final], wanted, self.retries)

    def lateness(
        self, final: Sequence[PartMatch], stall_ms: float, straggler_ms: float
    ) -> Summary | None:
        """The straggler rule's summary of the job, its passes run where the parts and the
        shards lie (`cluster.lateness`); None where a task failed past its retries."""
        ray = _ray()
        starts = self.lists.starts()
        shard_of_rank = np.full(max(starts, default=-1) + 1, -1, dtype=np.int64)
        for s, shard in enumerate(self.kept):
            for rank, *_ in shard.ranks:
                if rank in starts:
                    shard_of_rank[rank] = s
        try:
            return summary(
                self.finals,
                [p.index for p in final],
                self.kept,
                Layout(shard_of_rank),
                [[starts.get(rank, -1) for rank, *_ in shard.ranks] for shard in self.kept],
                stall_ms,
                straggler_ms,
                self.retries,
            )
        except (ray.exceptions.RayTaskError, ray.exceptions.RayError):
            return None

    def outcomes(self, final: Sequence[PartMatch], bounds: I64) -> Outcomes:
        """The job's units and pairs, and each chunk's outcome (`bounds`: the chunks' first
        rows, then the job's end): each part's taken in a task where it lies
        (`shuffle.outcomes_of`), a chunk's fetched when asked for, then let go."""
        ray = _ray()
        chunks = len(bounds) - 1
        if chunks < 1:
            raise ValueError("no chunk of rows")
        task = ray.remote(
            num_returns=1 + chunks, max_retries=self.retries, retry_exceptions=False, num_cpus=1
        )(outcomes_of)
        at = ray.put(bounds)
        indices = [p.index for p in final]
        refs: list[list[Any]] = []
        for f in (self.finals[i] for i in indices):
            refs.append(list(task.remote(f.frame, f.size, f.done, at, *f.blocks)))
        try:
            with lost_as(LOST_OUTCOMES):
                units = ray.get([r[0] for r in refs])
        except BaseException:
            for r in refs:
                ray.cancel(r[0], force=True)
            raise
        for r in refs:
            r[0] = None

        def take(c: int) -> list[tuple[int, Outcome]]:
            if refs and refs[0][1 + c] is None:
                raise ValueError(f"the outcome of chunk {c} was taken already")
            with lost_as(LOST_OUTCOMES):
                got = ray.get([r[1 + c] for r in refs])
            for r in refs:
                r[1 + c] = None  # each chunk is asked for once
            return list(zip(indices, got, strict=True))

        return Outcomes(bounds, numbered(units), take)

    def shown(self, final: Sequence[PartMatch], showing: Showing) -> list[Shown]:
        """The rows `showing` asks for, chosen of each part in a task where it lies
        (`shuffle.shown_of`), in the job's rows."""
        ray = _ray()
        task = ray.remote(max_retries=self.retries, retry_exceptions=False, num_cpus=1)(shown_of)
        at = ray.put(showing)
        refs = [
            task.remote(f.frame, f.size, f.done, at, *f.blocks)
            for f in (self.finals[p.index] for p in final)
        ]
        return gathered(ray, refs, "the rows to show could not be chosen in the cluster")

    def reduced(self, fn: ShardFn[T]) -> list[T]:
        """`fn` of the rows of each shard's ranks that the job kept, in a task where the
        shard's columns lie (`reduce_shard`)."""
        ray = _ray()
        kept = sorted(self.lists.starts())
        task = ray.remote(max_retries=self.retries, retry_exceptions=False, num_cpus=1)(
            reduce_shard
        )
        at = ray.put(kept)
        refs = [
            task.remote(fn, shard.columns, [rank for rank, *_ in shard.ranks], at)
            for shard in self.kept
        ]
        return gathered(ray, refs, "a sum over the job's rows could not be made in the cluster")

    def step_rows(self, lists: EntryTable) -> EntryTable:
        """The rows of the ranks that measure the job's step (`series.step_ranks`),
        fetched."""
        starts = self.lists.starts()
        ranks = [r for r in sorted(starts) if self.lists.rows_of(r)]
        picked = [ranks[i] for i in step_ranks(len(ranks))]
        rows = [
            np.arange(starts[r], starts[r] + self.lists.rows_of(r), dtype=np.int64) for r in picked
        ]
        return self.fetch(lists, np.concatenate([np.zeros(0, np.int64), *rows]))

    def release(self) -> None:
        """The analysis is over: everything kept may leave the store."""
        self.kept, self.headers, self.finals, self.split = [], [], {}, None


def rows_of_shard(
    columns: ShardColumns, asked: Mapping[int, npt.NDArray[np.int64]]
) -> tuple[I64, dict[str, np.ndarray]]:
    """The fetch task: the columns of the rows `asked` of the shard's ranks (each by its
    place in the shard; rows numbered in the rank), as the ranks were read: how many rows
    each rank gave, in the order of `asked`, and one array per column."""
    starts = columns.starts
    picked = np.concatenate(
        [np.zeros(0, np.int64)] + [starts[at] + rows for at, rows in asked.items()]
    )
    counts = np.array([len(rows) for rows in asked.values()], dtype=np.int64)
    return counts, {name: values[picked] for name, values in columns.arrays.items()}


def reduce_shard(
    fn: ShardFn[T], columns: ShardColumns, ranks: Sequence[int], kept: Sequence[int]
) -> T:
    """The task of `ClusterRows.reduced`: `fn` of the shard's ranks (`ranks`, in its order)
    that the job kept (`kept`), over the shard's columns where they lie."""
    return fn(ranks, columns.starts, columns.arrays, kept)


def gathered(ray: Any, refs: list[Any], lost: str) -> list[Any]:
    """Every task's result, in order: on a failure or Ctrl-C every task is cancelled, and a
    worker, node or object lost past Ray's retries is one `ClusterError` saying `lost`."""
    try:
        with lost_as(lost):
            return list(ray.get(refs))
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise


def _ray() -> Any:
    ray = import_ray()
    if not ray.is_initialized():
        raise ClusterError("the connection to the Ray cluster was closed before the diagnosis")
    return ray
