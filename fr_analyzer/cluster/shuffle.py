"""The shuffle: each part of the job (`match.partitions`) gathered from the shards themselves,
in the cluster's store, never through the driver.

The map stage leaves each shard it read in the store (`Kept`, by its reference). Once the
driver has the table, the groups and the parts, one split task per shard re-codes the
shard's rows as the table has them (the table's lists of names and shapes, `Codes`; the
rank's first row and its (rank, group) pairs, `SplitPlan`: a few numbers per rank) and cuts
them into one block per part, by the part of each row's group (`Split`, kept for the later
rounds of questions, which match the same parts again). The task of a part takes its
block of every shard (Ray hands a task the objects its arguments name, from any node), puts
the rows in the table's order and matches them (`match.partitions.match_part`): the very part
`match.partitions.Cut.part` copies from the table. What comes from the driver is the part's
shell (`Cut.shell`): the job-wide facts its rules read, decided from the ranks' profiles, and
how many rows it has; no row of it (the task numbers them and judges their completion).

Where the table's rows are not the shards' (a rank read twice, ranks from the cache) the
runner finds it before any task starts (`plans`) and the parts are copied from the driver's
table instead (`cluster.parts`); a part whose rows still come out otherwise is a bug
(`PartMismatch`), and its part is matched in the driver, said in the warnings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..load import RECODED, Lists, rank_maps, recode
from ..match import Cut, PartMatch, completion
from ..match.frontier import Wanted
from ..match.outcomes import outcomes
from ..match.partitions import COLUMNS, Part, filled, found_among, match_part, piece
from ..model.shown import Showing, Shown, shown_rows
from ..model.table import EntryTable, rank_starts
from .connect import ClusterError, import_ray, wait_one
from .parts import matched_here, next_done, noted

if TYPE_CHECKING:
    from .shards import Shard, ShardColumns

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Kept:
    """A shard left in the store by the map stage (its header, `ref`, and its columns), and
    what the driver saw of each of its ranks: (rank, rows, first record id, last record id),
    to check the table against (`Shard.seen`)."""

    ref: Any
    columns: Any
    ranks: tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True)
class SplitPlan:
    """What a split task needs of one shard's ranks: where each rank's rows begin in the
    table (a rank not in it is left out), and the table's (rank, group) pair of each of the
    rank's group codes."""

    start: dict[int, int]
    pair: dict[int, I32]  # rank -> the table's pair by the rank's own group code


@dataclass(frozen=True)
class Codes:
    """The table's lists of distinct values (`load.formats.table.RECODED`'s), by which a
    split task re-codes a rank's columns as the table has them."""

    values: dict[str, list[Any]]

    def lookups(self) -> dict[str, Callable[[Any], int]]:
        """Each list's value -> code, as a callable (`load.formats.table.rank_maps`)."""
        return {
            table: {v: code for code, v in enumerate(values)}.__getitem__
            for table, values in self.values.items()
        }


def codes_of(t: EntryTable) -> Codes:
    """The table's lists, by the names the builder gives them."""
    return Codes(
        {
            "groups": t.group_names,
            "ops": t.ops,
            "backends": t.backends,
            "profiling_names": t.profiling_names,
            "shapes": t.shapes,
            "dtypes": t.dtypes,
            "stacks": t.stacks,
        }
    )


@dataclass(frozen=True)
class Block:
    """One shard's rows of one part: the table's columns as the table has them (block
    markers as rows of the table), and those rows."""

    rows: I64
    columns: dict[str, np.ndarray]


def split(
    shard: Shard,
    shard_columns: ShardColumns,
    plan: SplitPlan,
    codes: Codes,
    part_of_pair: I32,
    parts: int,
) -> Any:
    """The task: the shard's rows (its header and its columns), re-coded as the table has
    them, cut into one `Block` per part (a tuple; the block alone where there is one part,
    as Ray returns one object)."""
    lookups = codes.lookups()
    widths = {name: len(values) for name, values in codes.values.items()}
    pieces: dict[str, list[np.ndarray]] = {name: [] for name in COLUMNS}
    rows: list[I64] = []
    for dump, tables, columns in zip(shard.loaded, shard.tables, shard_columns, strict=True):
        start = plan.start.get(dump.rank)
        n = len(columns["record_id"])
        if start is None or not n:
            continue
        maps = rank_maps(lookups, dump.groups, tables)
        for name in COLUMNS:
            if name == "rank":
                pieces[name].append(np.full(n, dump.rank, dtype=np.int32))
            elif name == "row_in_rank":
                pieces[name].append(np.arange(n, dtype=np.int32))
            elif name == "pair":
                pieces[name].append(plan.pair[dump.rank][columns["group"]])
            elif name == "marker":
                marker = columns["marker"].astype(np.int64)
                pieces[name].append(np.where(marker >= 0, marker + start, -1))
            else:
                values = recode(name, columns[name], maps)
                if name in RECODED:
                    values = _narrow(values, widths[RECODED[name]])
                pieces[name].append(values)
        rows.append(np.arange(start, start + n, dtype=np.int64))
    if not rows:
        empty = Block(np.zeros(0, np.int64), {})
        return tuple(empty for _ in range(parts)) if parts > 1 else empty
    every = np.concatenate(rows)
    columns_all = {name: np.concatenate(p) for name, p in pieces.items()}
    del pieces
    part = part_of_pair[columns_all["pair"]]
    blocks = []
    for p in range(parts):
        sel = np.flatnonzero(part == p)
        blocks.append(Block(every[sel], {name: c[sel] for name, c in columns_all.items()}))
    return tuple(blocks) if parts > 1 else blocks[0]


class PartMismatch(RuntimeError):
    """A part built from the shards is not the driver's: a bug, never bad input."""


def match_blocks(frame: Part, size: int, *blocks: Block) -> PartMatch:
    """The task: a part's table from its block of every shard, in the table's order, then
    matched (`match.partitions.match_part`): the part `Cut.part` copies from the table.
    `frame` is the part's shell (`Cut.shell`): the rows are numbered here, from the shards,
    `size` of them, as the ranks' profiles count them."""
    return match_part(assembled(frame, size, *blocks))


def match_kept(frame: Part, size: int, *blocks: Block) -> tuple[PartMatch, PartMatch]:
    """The task for a driver that holds no table (two results): `match_blocks`, as what the
    rounds read of it (`brief`) and whole (left in the store for `piece_of`)."""
    done = match_blocks(frame, size, *blocks)
    return brief(done), done


def piece_of(frame: Part, size: int, done: PartMatch, wanted: Wanted, *blocks: Block) -> PartMatch:
    """The task: the part's piece (`match.partitions.piece`) of its final result `done`,
    the part made again from its blocks (`assembled`, its silent rows' `retired` cleared as
    matching clears them)."""
    part = assembled(frame, size, *blocks)
    t = part.table
    t.retired[completion.silent_rows(t, part.quiet)] = False
    return piece(part, done, wanted)


def outcomes_of(
    frame: Part, size: int, done: PartMatch, bounds: I64, *blocks: Block
) -> tuple[Any, ...]:
    """The task: the part's units and pairs, then its rows' outcome in each chunk of the
    job's rows (`bounds`), of its final result `done` (`match.outcomes.outcomes`), the part
    made again from its blocks (`assembled`)."""
    units, got = outcomes(assembled(frame, size, *blocks), done, bounds)
    return (units, *got)


def shown_of(frame: Part, size: int, done: PartMatch, showing: Showing, *blocks: Block) -> Shown:
    """The task: the rows of the part that `showing` asks for (`model.shown`), in the job's
    rows, the part made again from its blocks (`assembled`)."""
    part = assembled(frame, size, *blocks)
    return shown_rows(part.table, part.groups.entry_group, showing).moved(part.rows)


def brief(done: PartMatch) -> PartMatch:
    """What the rounds of questions read of a part's result (`match.partitions.rounds`: its
    questions, answers and layouts, its notes and findings), with no array over its rows or
    units: small, for the driver."""
    r = done.result
    return replace(
        done,
        rows=None,
        result=replace(
            r,
            collectives=_emptied(r.collectives),
            p2p=_emptied(r.p2p),
            done=r.done[:0],
            frontier=None,
        ),
    )


_D = TypeVar("_D")


def _emptied(record: _D) -> _D:
    """A dataclass of arrays with every array cut to none of its items."""
    cut = {
        f.name: getattr(record, f.name)[:0]
        for f in fields(record)  # type: ignore[arg-type]
        if isinstance(getattr(record, f.name), np.ndarray)
    }
    return replace(record, **cut)  # type: ignore[type-var]


def assembled(frame: Part, size: int, *blocks: Block) -> Part:
    """A part's table from its block of every shard, in the table's order (`frame`: the
    part's shell, `Cut.shell`; `size`: its rows, as the ranks' profiles count them)."""
    got = [b for b in blocks if len(b.rows)]
    rows = np.concatenate([b.rows for b in got] or [np.zeros(0, np.int64)])
    order: npt.NDArray[np.intp] | None = None
    if len(rows) > 1 and not bool((rows[1:] > rows[:-1]).all()):  # shards out of rank order
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
    if len(rows) != size or (len(rows) > 1 and not bool((rows[1:] > rows[:-1]).all())):
        raise PartMismatch("the part's rows from the shards are not the table's")
    columns: dict[str, np.ndarray] = {}
    for name in COLUMNS:
        values = np.concatenate([b.columns[name] for b in got])
        if order is not None:
            values = values[order]
        columns[name] = values.astype(getattr(frame.table, name).dtype, copy=False)
    del got
    marker = columns["marker"]
    inside = marker >= 0
    marker[inside] = np.searchsorted(rows, marker[inside]).astype(marker.dtype)
    entry_group = frame.groups.pair_uid[columns["pair"]]
    frame = replace(
        frame,
        rows=rows,
        groups=replace(frame.groups, entry_group=entry_group),
        rank_ends=found_among(rows, frame.rank_ends),
    )
    return filled(frame, *(columns[name] for name in COLUMNS))


def plans(kept: list[Kept], t: EntryTable, names: dict[int, list[Any]]) -> list[SplitPlan] | None:
    """Each kept shard's plan, or None where the table's rows are not the shards' (a rank
    the table holds that no shard does, or holds otherwise)."""
    if not t.n:
        return None
    starts = rank_starts(t.rank)
    ranks = t.rank[starts].tolist()
    ends = np.append(starts[1:], t.n).tolist()
    where = dict(zip(ranks, zip(starts.tolist(), ends, strict=True), strict=True))
    code = {name: c for c, name in enumerate(t.group_names)}
    pair_of = {
        (r, g): p
        for p, (r, g) in enumerate(zip(t.pair_rank.tolist(), t.pair_group.tolist(), strict=True))
    }
    covered: set[int] = set()
    out = []
    for shard in kept:
        start: dict[int, int] = {}
        pair: dict[int, I32] = {}
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
            pair[rank] = np.array(
                [pair_of.get((rank, code.get(name, -1)), -1) for name in names[rank]],
                dtype=np.int32,
            )
        out.append(SplitPlan(start, pair))
    return out if covered == set(ranks) else None


@dataclass(frozen=True)
class Split:
    """Each part's block of every shard (`split`'s results, in the store), by the part's
    place among the job's parts (`Cut.index`) with the groups it holds: what the part's task
    takes in the first round, and again in each later round of questions
    (`match.partitions.rounds`), which match the same parts again. Held until the rounds are
    over; each block leaves the store once no part's task and no `Split` names it."""

    blocks: dict[int, tuple[tuple[int, ...], tuple[Any, ...]]]

    def of(self, cut: Cut) -> tuple[Any, ...] | None:
        """The blocks of `cut`'s part (None: not a part this split cut)."""
        got = self.blocks.get(cut.index)
        return got[1] if got is not None and got[0] == cut.uids else None


def plans_of_lists(kept: list[Kept], lists: Lists) -> list[SplitPlan]:
    """Each kept shard's plan, from the job's lists (`load.formats.lists`) where the driver
    holds no table: the shards' ranks are the table's by construction."""
    starts = lists.starts()
    out = []
    for shard in kept:
        ranks = [r for r, *_ in shard.ranks if r in starts]
        out.append(SplitPlan({r: starts[r] for r in ranks}, {r: lists.pairs(r) for r in ranks}))
    return out


def split_shards(
    cuts: list[Cut],
    kept: list[Kept],
    names: dict[int, list[Any]],
    *,
    retries: int,
    made: list[SplitPlan] | None = None,
) -> Split | None:
    """The parts' blocks, one split task per kept shard (None: the table's rows are not the
    shards'). Takes `kept` over: emptied once every shard's split task holds it, so that
    each shard leaves the store as soon as it is split; with the plans `made` (a driver
    that holds no table, `plans_of_lists`), `kept` stays: the rows are fetched from it."""
    ray = import_ray()
    if not ray.is_initialized():
        raise ClusterError("the connection to the Ray cluster was closed before matching")
    if not cuts:
        return Split({})
    t, groups = cuts[0].table, cuts[0].groups
    keep = made is not None
    if made is None:
        made = plans(kept, t, names)
    if made is None:
        return None
    part_of_uid = np.full(len(groups.groups) + 1, -1, dtype=np.int32)
    for p, cut in enumerate(cuts):
        part_of_uid[list(cut.uids)] = p
    part_of_pair = part_of_uid[groups.pair_uid]
    n = len(cuts)
    options = {"max_retries": retries, "retry_exceptions": False, "num_cpus": 1}
    splitter = ray.remote(num_returns=n, **options)(split)
    shared_codes, shared_map = ray.put(codes_of(t)), ray.put(part_of_pair)
    blocks = []
    for shard, plan in zip(kept, made, strict=True):
        got = splitter.remote(shard.ref, shard.columns, plan, shared_codes, shared_map, n)
        blocks.append(list(got) if n > 1 else [got])
    if not keep:
        kept.clear()  # each split task holds its shard now: it goes once split
    return Split({cut.index: (cut.uids, tuple(b[p] for b in blocks)) for p, cut in enumerate(cuts)})


def match_split(
    cuts: list[Cut], parts: Split, *, retries: int, finals: Finals | None = None
) -> Iterator[PartMatch] | None:
    """Each part matched in a task of its own from its blocks (None: a part `parts` did not
    cut), the results as they finish; a part whose task failed past its retries is matched
    in the driver (`cluster.parts.matched_here`). With `finals` (a driver that holds no
    table), each result stays in the store, kept there by its part (`Finals`), and what
    comes is its `brief`."""
    ray = import_ray()
    if not ray.is_initialized():
        raise ClusterError("the connection to the Ray cluster was closed before matching")
    blocks = []
    for cut in cuts:
        of_part = parts.of(cut)
        if of_part is None:
            return None
        blocks.append(of_part)
    if finals is not None:
        return _run_kept(ray, cuts, blocks, retries, finals)
    return _run(ray, cuts, blocks, retries)


@dataclass
class Final:
    """A part's result left in the store (`done`), with what makes its part again: its
    shell, its rows and its blocks."""

    done: Any
    frame: Part
    size: int
    blocks: tuple[Any, ...]


Finals = dict[int, Final]
"""Each part's latest result in the store, by the part's place among the job's parts."""


def _run_kept(
    ray: Any, cuts: list[Cut], blocks: list[tuple[Any, ...]], retries: int, finals: Finals
) -> Iterator[PartMatch]:
    options = {"max_retries": retries, "retry_exceptions": False, "num_cpus": 1}
    matcher = ray.remote(num_returns=2, **options)(match_kept)
    pending: dict[Any, Final] = {}
    try:
        for cut, of_part in zip(cuts, blocks, strict=True):
            frame = cut.shell()
            short, done = matcher.remote(frame, cut.size, *of_part)
            pending[short] = Final(done, frame, cut.size, of_part)
        del blocks
        while pending:
            ready = wait_one(ray, list(pending))
            final = pending.pop(ready)
            try:
                got = ray.get(ready)
            except (ray.exceptions.RayTaskError, ray.exceptions.RayError) as exc:
                # matched here from its blocks, its result put in the store for its pieces
                whole = noted(match_blocks(final.frame, final.size, *ray.get(final.blocks)), exc)
                final.done = ray.put(whole)
                got = brief(whole)
            assert isinstance(got, PartMatch)
            finals[got.index] = final
            yield got
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


def take_pieces(
    finals: Finals, indices: Sequence[int], wanted: Wanted, retries: int
) -> list[PartMatch]:
    """The piece (`piece_of`) of each part of `indices`, each in a task of its own where its
    result and blocks are, in the order of `indices`."""
    ray = import_ray()
    if not ray.is_initialized():
        raise ClusterError("the connection to the Ray cluster was closed before the diagnosis")
    options = {"max_retries": retries, "retry_exceptions": False, "num_cpus": 1}
    task = ray.remote(**options)(piece_of)
    at = ray.put(wanted)
    refs = [
        task.remote(f.frame, f.size, f.done, at, *f.blocks) for f in (finals[i] for i in indices)
    ]
    try:
        got = ray.get(refs)
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    return list(got)


def _run(
    ray: Any, cuts: list[Cut], blocks: list[tuple[Any, ...]], retries: int
) -> Iterator[PartMatch]:
    options = {"max_retries": retries, "retry_exceptions": False, "num_cpus": 1}
    matcher = ray.remote(**options)(match_blocks)
    pending: dict[Any, Cut] = {}
    try:
        for cut, of_part in zip(cuts, blocks, strict=True):
            pending[matcher.remote(cut.shell(), cut.size, *of_part)] = cut
        del blocks
        while pending:
            yield next_done(ray, pending, matched_here)
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise


def _narrow(codes: np.ndarray, width: int) -> np.ndarray:
    """Codes into a list of `width` values (or -1) in the narrowest type that holds them:
    they travel through the store, and the part's task widens them again."""
    for kind in (np.int8, np.int16):
        if width < np.iinfo(kind).max:
            return codes.astype(kind)
    return codes
