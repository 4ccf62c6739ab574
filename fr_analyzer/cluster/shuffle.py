"""The shuffle: each part of the job (`match.partitions`) gathered from the shards themselves,
in the cluster's store, never through the driver.

The map stage leaves each shard it read in the store (`Shard`, kept by its reference). Once
the driver has the groups and the parts, one split task per shard cuts that shard's rows into
one block per part (a row's part is its group's: `SplitPlan`, a few numbers per rank); the
task of a part takes its block of every shard (Ray hands a task the objects its arguments
name, from any node), builds the part's table from them with the table builder one process
uses (`load.TableBuilder`: its own codes of names and shapes, which no rule compares across
parts) and matches it (`match.partitions.match_part`). What comes from the driver is the
part's frame: its rows' completion and the job-wide facts (`match.partitions.Cut.frame`),
about 14 bytes a row against the hundred of its columns.

A part whose rows do not come out as the driver's table has them (a rank read twice, the
cache's ranks) is never matched from the shards: the runner checks each rank's rows first
and otherwise copies the parts from the driver's table (`cluster.parts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..load import RankTables, TableBuilder
from ..match import Cut, PartMatch
from ..match.partitions import Part, match_part
from ..model.groups import GroupTable
from ..model.table import EntryTable, rank_starts
from .connect import ClusterError, import_ray
from .parts import matched_here

if TYPE_CHECKING:
    from .shards import Shard

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Kept:
    """A shard left in the store by the map stage, and what the driver saw of each of its
    ranks: (rank, rows, first record id, last record id), to check the table against."""

    ref: Any
    ranks: tuple[tuple[int, int, int, int], ...]


def seen(shard: Shard) -> tuple[tuple[int, int, int, int], ...]:
    """Each rank of a shard as `Kept.ranks` holds it."""
    out = []
    for dump, columns in zip(shard.loaded, shard.columns, strict=True):
        ids = columns["record_id"]
        n = len(ids)
        out.append((dump.rank, n, int(ids[0]) if n else -1, int(ids[-1]) if n else -1))
    return tuple(out)


@dataclass(frozen=True)
class SplitPlan:
    """What a split task needs of one shard's ranks: where each rank's rows begin in the
    table (-1: not in it), and the group uid of each of its group codes."""

    start: dict[int, int]
    uid: dict[int, I32]  # rank -> group uid by the rank's own group code


@dataclass(frozen=True)
class RankRows:
    """One rank's rows of one part: its columns (the rank's codes, markers counted from the
    first of these rows), where they sit in the rank and in the table, and their groups."""

    rank: int
    groups: list[tuple[str, str]]
    tables: RankTables
    columns: dict[str, np.ndarray]
    local: I32  # each row's place among the rank's rows
    start: int  # the rank's first row in the table
    uid: I32  # each row's group uid


def split(shard: Shard, plan: SplitPlan, part_of_uid: I32, parts: int) -> Any:
    """The task: the shard's rows cut into one block per part (a list of `RankRows`), a
    tuple of them (one block alone where there is one part, as Ray returns one object)."""
    blocks: list[list[RankRows]] = [[] for _ in range(parts)]
    for dump, tables, columns in zip(shard.loaded, shard.tables, shard.columns, strict=True):
        start = plan.start.get(dump.rank, -1)
        if start < 0 or not len(columns["record_id"]):
            continue
        uid = plan.uid[dump.rank][columns["group"].astype(np.int64)]
        part = part_of_uid[uid]
        for p in range(parts):
            rows = np.flatnonzero(part == p)
            if not len(rows):
                continue
            taken = {name: values[rows] for name, values in columns.items()}
            marker = taken["marker"].astype(np.int64)
            inside = marker >= 0
            marker[inside] = np.searchsorted(rows, marker[inside])
            taken["marker"] = marker
            blocks[p].append(
                RankRows(
                    dump.rank,
                    dump.groups,
                    tables,
                    taken,
                    rows.astype(np.int32),
                    start,
                    uid[rows].astype(np.int32),
                )
            )
    return tuple(blocks) if parts > 1 else blocks[0]


class PartMismatch(RuntimeError):
    """A part built from the shards is not the driver's: a bug, never bad input."""


def match_blocks(frame: Part, *blocks: list[RankRows]) -> PartMatch:
    """The task: a part's table built from its block of every shard, then matched."""
    got = sorted((rows for block in blocks for rows in block), key=lambda r: r.rank)
    builder = TableBuilder(ranks_hint=max(1, len(got)))
    for rows in got:
        builder.add_rows(rows.rank, rows.groups, rows.tables, rows.columns)
    t = builder.build()
    empty = np.zeros(0, np.int32)
    at = np.concatenate(
        [r.start + r.local.astype(np.int64) for r in got] or [empty.astype(np.int64)]
    )
    if frame.rows is None or not np.array_equal(at, frame.rows):
        raise PartMismatch("the part's rows from the shards are not the table's")
    uid = np.concatenate([r.uid for r in got] or [empty]).astype(np.int32)
    t = replace(t, row_in_rank=np.concatenate([r.local for r in got] or [empty]))
    pair_uid = np.full(len(t.pair_rank), -1, dtype=np.int32)
    pair_uid[t.pair] = uid
    groups = replace(frame.groups, entry_group=uid, pair_uid=pair_uid)
    return match_part(replace(frame, table=t, groups=groups))


def plans(
    kept: Sequence[Kept], t: EntryTable, groups: GroupTable, names: dict[int, list[Any]]
) -> list[SplitPlan] | None:
    """Each kept shard's plan, or None where the table's rows are not the shards' (a rank
    the table holds that no shard does, or holds otherwise)."""
    if not t.n:
        return None
    starts = rank_starts(t.rank)
    ranks = t.rank[starts].tolist()
    ends = np.append(starts[1:], t.n).tolist()
    where = dict(zip(ranks, zip(starts.tolist(), ends, strict=True), strict=True))
    code = {name: c for c, name in enumerate(t.group_names)}
    pair_uid = {
        (r, g): u
        for r, g, u in zip(
            t.pair_rank.tolist(), t.pair_group.tolist(), groups.pair_uid.tolist(), strict=True
        )
    }
    covered: set[int] = set()
    out = []
    for shard in kept:
        start: dict[int, int] = {}
        uid: dict[int, I32] = {}
        for rank, n, first, last in shard.ranks:
            span = where.get(rank)
            if span is None:
                continue  # read, but left out of the job
            s, e = span
            if rank in covered or e - s != n or not n:
                return None
            if int(t.record_id[s]) != first or int(t.record_id[e - 1]) != last:
                return None
            covered.add(rank)
            start[rank] = s
            uid[rank] = np.array(
                [pair_uid.get((rank, code.get(name, -1)), -1) for name in names[rank]],
                dtype=np.int32,
            )
        out.append(SplitPlan(start, uid))
    return out if covered == set(ranks) else None


def match_shuffled(
    cuts: Iterable[Cut], kept: Sequence[Kept], names: dict[int, list[Any]], *, retries: int
) -> Iterator[PartMatch] | None:
    """The parts matched from the shards (None: the table's rows are not the shards')."""
    ray = import_ray()
    if not ray.is_initialized():
        raise ClusterError("the connection to the Ray cluster was closed before matching")
    cut_list = list(cuts)
    if not cut_list:
        return iter(())
    t, groups = cut_list[0].table, cut_list[0].groups
    made = plans(kept, t, groups, names)
    if made is None:
        return None
    part_of_uid = np.full(len(groups.groups) + 1, -1, dtype=np.int32)
    for p, cut in enumerate(cut_list):
        part_of_uid[list(cut.uids)] = p
    return _run(ray, cut_list, kept, made, part_of_uid, retries)


def _run(
    ray: Any,
    cuts: list[Cut],
    kept: Sequence[Kept],
    made: list[SplitPlan],
    part_of_uid: I32,
    retries: int,
) -> Iterator[PartMatch]:
    n = len(cuts)
    options = {"max_retries": retries, "retry_exceptions": False, "num_cpus": 1}
    splitter = ray.remote(num_returns=n, **options)(split)
    matcher = ray.remote(**options)(match_blocks)
    shared_map = ray.put(part_of_uid)
    blocks = []
    pending: dict[Any, Cut] = {}
    try:
        for shard, plan in zip(kept, made, strict=True):
            got = splitter.remote(shard.ref, plan, shared_map, n)
            blocks.append(list(got) if n > 1 else [got])
        for p, cut in enumerate(cuts):
            frame = cut.frame()
            frame = replace(frame, groups=replace(frame.groups, entry_group=np.zeros(0, np.int32)))
            pending[matcher.remote(frame, *(b[p] for b in blocks))] = cut
        del blocks
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            cut = pending.pop(ref)
            try:
                result = ray.get(ref)
            except (ray.exceptions.RayTaskError, ray.exceptions.RayError) as exc:
                result = matched_here(cut, exc)
            del ref
            assert isinstance(result, PartMatch)
            yield result
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
