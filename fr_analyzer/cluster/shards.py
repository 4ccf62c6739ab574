"""Read the ranks' files on a Ray cluster: the map stage, one task per shard of ranks.

Each task runs on a worker, reads its shard's files itself (a shared path or the URL; the
driver sends names, never bytes) with the loader one process uses (`load.load_all`: the same
sandbox, decoder and limits), and returns each rank's header, its tables of distinct values
and the shard's columns as one Arrow record batch (`ShardColumns`). Ray keeps the result in
its object store, which spills to disk past its memory. The driver takes the shards in file
order, hands each rank to the pipeline's sink (its table builder) as one process does, and
drops the shard; at most `window` shards are in flight or waiting, so the store holds a
bounded part of the job.

Faults: a worker lost mid-task is retried by Ray (`RETRIES`); a shard whose task still fails
makes its ranks unreadable, the reason named, and the other ranks are analyzed. Ctrl-C
cancels every task still in flight.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..load import (
    Directory,
    DumpFile,
    Lists,
    RankDump,
    RankSink,
    RankTables,
    Remote,
    Source,
    TableBuilder,
    load_all,
)
from ..match import Cut, PartMatch, PartRunner
from ..model.profile import Profiles, joined, profiles_of
from ..model.records import UnreadableDump
from .connect import Cluster, ClusterError, import_arrow, import_ray, reason_of, wait_one
from .kept import ClusterRows, TablePlace
from .parts import match_parts
from .shuffle import Kept, Split, match_split, plans_of_lists, split_shards

if TYPE_CHECKING:
    from ..pipeline import KeptRows, Options

RETRIES = 3
"""How often Ray runs a shard's task again after losing its worker (a crash, a node lost)."""
SHARD_MIN, SHARD_MAX = 8, 512
"""Ranks per task: enough that a task's start is a small part of it, few enough that a lost
worker costs little and every core has work (`shard_size`)."""
PART_ROW_BYTES = 400
"""What a row of a part costs the task matching it, at its peak: the part's blocks as they
arrive, its table, and the matcher's working arrays (measured about 300 at 4,096 ranks)."""
KEEP_FACTOR = 16
"""The map stage keeps its shards in the store (for the shuffle) while the job's rows (the
ranks still to come as large as those read) are at most this many times the largest part a
task takes: a job is matched in parts while its largest group fits a task, and the largest
group of the jobs measured (the world, in a 3D job) holds 2.5% of the rows; past that, the
parts are copied from the driver's table."""
TASKS_PER_CPU = 4
"""Shards per CPU of the cluster: the last tasks are short, so no core waits long."""


def shard_size(ranks: int, cpus: int) -> int:
    """How many ranks one task reads, for a job of `ranks` on a cluster of `cpus`."""
    per = math.ceil(ranks / max(1, cpus * TASKS_PER_CPU))
    return max(SHARD_MIN, min(SHARD_MAX, per))


RANK = "rank"
"""The block's column naming each row's rank (the entry columns keep their own names)."""
_NUMPY_BOOL = b"numpy bool"
"""A field's metadata value for a column of numpy booleans, which the block holds as one byte
each (Arrow's booleans are bits: no view of numpy's either way)."""


class ShardColumns:
    """Every rank's columns of a shard as one Arrow record batch (`block`): a `rank` column,
    then each entry column (`model.dump.COLUMNS`: the codes into each rank's tables of
    distinct values, which travel in its header), the ranks' rows one after the other in the
    shard's order, each column in the widest type its ranks sent. An Arrow block is what Ray
    Data and Parquet take as they are; Ray stores it and the driver decodes it as a few large
    buffers where it would thousands of small arrays (at 512 ranks a shard: 7 ms against 53).
    The columns are numpy views of the block's buffers (`arrays`), a rank's columns views of
    those (`[i]`, or iterating): no copy on either side."""

    def __init__(self, block: Any, starts: npt.NDArray[np.int64]) -> None:
        self.block = block  # a pyarrow.RecordBatch
        self.starts = starts  # each rank's first row, then the rows in all
        self._arrays: dict[str, np.ndarray] | None = None

    @classmethod
    def of(cls, ranks: Sequence[int], columns: Sequence[Mapping[str, np.ndarray]]) -> ShardColumns:
        """The ranks' columns (the same names for every rank), joined into one block."""
        pa = import_arrow()
        counts = [len(next(iter(c.values()))) if c else 0 for c in columns]
        starts = np.zeros(len(columns) + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        rank = np.repeat(np.asarray(ranks, dtype=np.int32), counts)
        fields, arrays = [pa.field(RANK, pa.int32())], [pa.array(rank)]
        for name in list(columns[0]) if columns else []:
            joined = np.concatenate([c[name] for c in columns])
            meta = None
            if joined.dtype == np.bool_:
                joined, meta = joined.view(np.uint8), {b"numpy": _NUMPY_BOOL}
            arrays.append(pa.array(joined))
            fields.append(pa.field(name, arrays[-1].type, nullable=False, metadata=meta))
        return cls(pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields)), starts)

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """Every entry column of the block (not `rank`), as numpy views of its buffers."""
        if self._arrays is None:
            out: dict[str, np.ndarray] = {}
            for field, column in zip(self.block.schema, self.block.columns, strict=True):
                if field.name == RANK:
                    continue
                values = column.to_numpy(zero_copy_only=True)
                if field.metadata and field.metadata.get(b"numpy") == _NUMPY_BOOL:
                    values = values.view(np.bool_)
                out[field.name] = values
            self._arrays = out
        return self._arrays

    def __reduce__(self) -> tuple[Any, ...]:
        # the block and where each rank begins: never the views (each would travel as a copy)
        return (ShardColumns, (self.block, self.starts))

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        a, b = int(self.starts[i]), int(self.starts[i + 1])
        return {name: column[a:b] for name, column in self.arrays.items()}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return (self[i] for i in range(len(self)))


@dataclass(frozen=True)
class Shard:
    """What one task read: its ranks' headers (with their files' times), each rank's tables
    and columns (in the same order), the files that could not be read, and its ranks'
    profiles (`model.profile`, made here: the driver decides groups and parts from them).
    `carried`: each rank's group codes its rows carry (each once); `seen`: each rank as
    `shuffle.Kept.ranks` holds it (what the driver checks the table against)."""

    loaded: list[RankDump]
    tables: list[RankTables]
    columns: ShardColumns
    unreadable: list[UnreadableDump]
    profiles: Profiles | None = None
    carried: tuple[npt.NDArray[np.int64], ...] = ()
    seen: tuple[tuple[int, int, int, int], ...] = ()

    def apart(self) -> tuple[Shard, ShardColumns]:
        """The shard's header (every field but the columns, which are left empty) and its
        columns: two objects in the store, so that a driver may take the header alone."""
        return replace(self, columns=ShardColumns.of([], [])), self.columns


def read_shard(files: Sequence[DumpFile], max_bytes: int, ft_group_world_size: int | None) -> Shard:
    """The task: read a shard's files in this worker (one sandboxed reader process), as
    `load.load_all` reads them in one process, leaving the job-wide checks to the driver."""
    tables: list[RankTables] = []
    columns: list[dict[str, np.ndarray]] = []
    builder = TableBuilder(ranks_hint=len(files))  # the shard's own table, for its profiles

    def keep(dump: RankDump, arrays: Mapping[str, np.ndarray]) -> None:
        assert dump.tables is not None
        tables.append(dump.tables)
        columns.append(dict(arrays))
        builder.add(dump, arrays)

    loaded, unreadable = load_all(
        files,
        1,
        max_bytes,
        None,
        sink=keep,
        ft_group_world_size=ft_group_world_size,
        job_wide=False,
    )
    carried = tuple(np.unique(c["group"]).astype(np.int64) for c in columns)
    seen = tuple(_seen(d.rank, c["record_id"]) for d, c in zip(loaded, columns, strict=True))
    joined_columns = ShardColumns.of([d.rank for d in loaded], columns)
    columns.clear()  # each rank's buffer goes before the profiles' working arrays come
    profiles = profiles_of(builder.build())
    return Shard(loaded, tables, joined_columns, unreadable, profiles, carried, seen)


def read_shard_apart(
    files: Sequence[DumpFile], max_bytes: int, ft_group_world_size: int | None
) -> tuple[Shard, ShardColumns]:
    """The map task (two results: `Shard.apart`): `read_shard`."""
    return read_shard(files, max_bytes, ft_group_world_size).apart()


def _seen(rank: int, ids: np.ndarray) -> tuple[int, int, int, int]:
    n = len(ids)
    return (rank, n, int(ids[0]) if n else -1, int(ids[-1]) if n else -1)


class RayEngine:
    """The engine (`pipeline.Engine`) that reads on a Ray cluster joined with `connect`."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        shard: int | None = None,
        window: int | None = None,
        retries: int = RETRIES,
        rows_in_driver: bool = True,
    ) -> None:
        self.cluster = cluster
        # False: the driver holds no table (`kept_rows`): the rows stay in the store
        self.rows_in_driver = rows_in_driver
        self.shard = shard  # ranks per task (None: `shard_size`)
        self.window = window or max(2, 2 * cluster.cpus)  # shards in flight or waiting
        self.retries = retries
        # the shards of the last read, left in the store for the match stage's shuffle, and
        # each rank's group names by code (as the table builder took them)
        self._kept: list[Kept] = []
        self._names: dict[int, list[tuple[str, str]]] = {}
        self._profiles: list[Profiles] = []  # each shard's of the last read
        self.matched = ""  # how the last match stage had its parts (for tests and benchmarks)
        self.rounds = 0  # runs of parts after the first: questions answered, parts matched again
        self.copied_rounds = 0  # of those, the runs whose parts were copied from the table
        self._split: Split | None = None  # the parts' blocks, for the later rounds
        self._rows: ClusterRows | None = None  # the rows of the last read (no table)

    @property
    def label(self) -> str:
        """Where the ranks were read, for the report's header."""
        return self.cluster.label

    def match_runner(self, rows: KeptRows | None = None) -> PartRunner:
        """Matching on the cluster: one task per part of the job, its rows gathered from the
        shards of the last read (`cluster.shuffle`), else copied from the driver's table
        (`cluster.parts`). The parts of later rounds (`match.partitions.rounds`) take the
        blocks the shards were split into again, kept in the store until the rounds are
        over; they are copied from the table only where the first round was. A part is at
        most what a task's share of a node's memory holds (`PART_ROW_BYTES` a row); a family
        of groups larger than that is cut into parts of some of its groups, and a job with
        one group larger is matched whole in the driver, its table out of core."""
        self.matched, self.rounds, self.copied_rounds = "", 0, 0
        self._split = None
        if rows is not None:  # of the read analyzed: not the last of several snapshots
            assert isinstance(rows, ClusterRows)
            return self._kept_runner(rows)
        if self._rows is not None:
            return self._kept_runner(self._rows)

        def run(cuts: Iterable[Cut]) -> Iterator[PartMatch]:
            kept, self._kept = self._kept, []
            names, self._names = self._names, {}
            cuts = list(cuts)
            first = not self.matched
            got = None
            if kept:
                self._split = split_shards(cuts, kept, names, retries=self.retries)
            if self._split is not None:
                got = match_split(cuts, self._split, retries=self.retries)
            copied = got is None
            if got is None:
                got = match_parts(cuts, window=max(1, self.cluster.cpus), retries=self.retries)
                self.matched = self.matched or "copied from the table"
            else:
                self.matched = "from the shards"
            if not first:
                self.rounds += 1
                self.copied_rounds += copied
            yield from got

        def whole() -> None:  # the job is matched in the driver: the shards are not needed
            self._kept, self._names, self._split = [], {}, None

        def end() -> None:  # the rounds are over: the parts' blocks may leave the store
            self._split = None

        return PartRunner(run, self._most_rows(), whole, end)

    def _kept_runner(self, rows: ClusterRows) -> PartRunner:
        """Matching where the driver holds no table: the parts split from the kept shards by
        the job's lists, each result left in the store for the diagnosis (`ClusterRows`)."""

        def run(cuts: Iterable[Cut]) -> Iterator[PartMatch]:
            cuts = list(cuts)
            if rows.split is None:
                made = plans_of_lists(rows.kept, rows.lists)
                rows.split = split_shards(cuts, rows.kept, {}, retries=self.retries, made=made)
            assert rows.split is not None
            got = match_split(cuts, rows.split, retries=self.retries, finals=rows.finals)
            if got is None:
                raise AssertionError("a part the first round did not cut")
            if self.matched:
                self.rounds += 1
            self.matched = "from the shards, kept"
            yield from got

        return PartRunner(run, self._most_rows())

    def kept_rows(self) -> ClusterRows | None:
        """Where the rows of the last read are kept, the driver holding no table (None: they
        went into the table, `rows_in_driver`)."""
        return self._rows

    def profiles(self) -> Profiles | None:
        """The profiles of the ranks of the last read, made by the tasks that read them."""
        made, self._profiles = self._profiles, []
        return joined(made) if made else None

    @property
    def shards_kept(self) -> int:
        """How many shards of the last read wait in the store for the match stage."""
        return len(self._kept)

    @property
    def parts_kept(self) -> int:
        """How many parts' blocks wait in the store for a later round of the match stage."""
        return 0 if self._split is None else len(self._split.blocks)

    def _most_rows(self) -> int | None:
        """The rows of the largest part a task takes (None: any)."""
        memory = self.cluster.task_memory
        return None if memory is None else memory // PART_ROW_BYTES

    def refuses(self, source: Source) -> str | None:
        """A folder (which every node must reach at the same path) or a URL: each worker
        reads its own files. An archive is read in one stream by one process."""
        if isinstance(source, (Directory, Remote)):
            return None
        return (
            f"--engine ray reads a folder every node reaches, or a URL; {source.label} is a"
            f" {source.kind} archive, read in one stream: drop --engine ray, or extract it"
        )

    def read(
        self,
        files: Sequence[DumpFile],
        options: Options,
        progress: Callable[[int, int], None] | None,
        sink: RankSink,
    ) -> tuple[list[RankDump], list[UnreadableDump]]:
        """Read every file on the cluster; the shards taken in file order, each rank handed
        to `sink` as one process hands it."""
        ray = import_ray()
        if not ray.is_initialized():  # else Ray would start a cluster of its own, unasked
            raise ClusterError("the connection to the Ray cluster was closed before the read")
        task = ray.remote(
            num_returns=2, max_retries=self.retries, retry_exceptions=False, num_cpus=1
        )(read_shard_apart)
        size = self.shard or shard_size(len(files), self.cluster.cpus)
        pieces = [list(files[i : i + size]) for i in range(0, len(files), size)]
        loaded: list[RankDump] = []
        unreadable: list[UnreadableDump] = []
        self._kept, self._names, self._profiles = [], {}, []
        lists = None if self.rows_in_driver else Lists()
        headers: list[list[RankDump]] = []  # each kept shard's ranks with their tables
        self._rows = None
        # past this many rows the job's largest part will not fit a task (in a job of groups
        # of a few descriptions, one holds half the rows or more): the shards go as read
        most = self._most_rows()
        keep_up_to = None if most is None or lists is not None else KEEP_FACTOR * most
        kept_rows = kept_ranks = 0
        keeping = True
        pending: deque[tuple[list[DumpFile], tuple[Any, Any]]] = deque()
        members = _Members()
        following = 0
        try:
            while following < len(pieces) or pending:
                while following < len(pieces) and len(pending) < self.window:
                    piece = pieces[following]
                    refs = task.remote(piece, options.max_file_bytes, options.ft_group_world_size)
                    pending.append((piece, tuple(refs)))
                    following += 1
                piece, (ref, columns_ref) = pending.popleft()
                shard = _taken(ray, piece, ref)
                if shard.loaded and keeping:
                    # left in the store for the shuffle (`cluster.shuffle`)
                    self._kept.append(Kept(ref, columns_ref, shard.seen))
                    kept_rows += sum(n for _, n, _, _ in self._kept[-1].ranks)
                    kept_ranks += len(shard.loaded)
                    expected = kept_rows * len(files) // max(1, kept_ranks)
                    if keep_up_to is not None and expected > keep_up_to:
                        # too large a job to keep in the store (the ranks still to come as
                        # large as those read): let them go
                        self._kept, keeping = [], False
                del ref
                if lists is not None:  # the columns stay in the store
                    if shard.loaded:
                        pairs = zip(shard.loaded, shard.tables, strict=True)
                        headers.append([_with_tables(d, t) for d, t in pairs])
                    for dump, tables, carried, (_, n, _, _) in zip(
                        shard.loaded, shard.tables, shard.carried, shard.seen, strict=True
                    ):
                        lists.add(dump.rank, dump.groups, tables, carried, n)
                else:
                    columns = ray.get(columns_ref) if shard.loaded else ShardColumns.of([], [])
                    for dump, tables, arrays in zip(
                        shard.loaded, shard.tables, columns, strict=True
                    ):
                        self._names[dump.rank] = dump.groups
                        sink(_with_tables(dump, tables), arrays)
                    del columns
                del columns_ref
                loaded += members.share(shard.loaded)
                unreadable += shard.unreadable
                if shard.profiles is not None:
                    self._profiles.append(shard.profiles)
                del shard
                if progress is not None:
                    progress(len(loaded) + len(unreadable), len(files))
        except BaseException:  # Ctrl-C, or the driver failing: nothing left running
            for _, (ref, _) in pending:
                ray.cancel(ref, force=True)
            raise
        if lists is not None:
            placed = TablePlace(options.table_dir, options.table_memory_bytes)
            self._rows = ClusterRows(lists, self._kept, headers, self.retries, placed)
            self._kept = []
        return loaded, unreadable


def _taken(ray: Any, piece: list[DumpFile], ref: Any) -> Shard:
    """The shard a task returned, or, where its task failed past its retries, every rank of
    it unreadable with the reason."""
    try:
        got = ray.get(wait_one(ray, [ref]))
    except (ray.exceptions.RayTaskError, ray.exceptions.RayError) as exc:
        why = reason_of(exc)
        return Shard(
            [],
            [],
            ShardColumns.of([], []),
            [
                UnreadableDump(f.where, f.rank, f"the Ray task reading it failed: {why}")
                for f in piece
            ],
        )
    assert isinstance(got, Shard)
    return got


def _with_tables(dump: RankDump, tables: RankTables) -> RankDump:
    """The header with its tables again, as the table builder takes a rank."""
    return replace(dump, tables=tables)


class _Members:
    """One tuple per distinct member list across shards (each shard's ranks share theirs
    already, as one process's do): else a job of N ranks whose groups span it holds N copies
    of an N-member list, memory growing with N squared."""

    def __init__(self) -> None:
        self._by_value: dict[tuple[int, ...], tuple[int, ...]] = {}

    def share(self, dumps: list[RankDump]) -> list[RankDump]:
        """The shard's ranks with their claims' member lists swapped for the shared copies
        (each distinct list object of the shard hashed once)."""
        seen: dict[int, tuple[int, ...]] = {}
        out = []
        for dump in dumps:
            if not dump.claims:
                out.append(dump)
                continue
            claims = {}
            for name, claim in dump.claims.items():
                shared = seen.get(id(claim.ranks))
                if shared is None:
                    shared = self._by_value.setdefault(claim.ranks, claim.ranks)
                    seen[id(claim.ranks)] = shared
                claims[name] = replace(claim, ranks=shared)
            out.append(replace(dump, claims=claims))
        return out
