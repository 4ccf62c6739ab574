"""Each rank's profile: what the stages that decide over the whole job read of a rank's rows,
summed up per rank and per (rank, group) pair, so that they need the rows no more.

A profile holds, per rank, its rows, its newest timestamp and its longest timeout; per (rank,
backend), its rows and whether any completed, any is not retired, any was seen started or
completed (and any such not retired): what tells whether the backend says when its ops finish,
which ranks hold an op in flight and whether the recorder looked at one during the dump
(`match.completion`, `diagnosis.ages`); per (rank, group) pair, its rows, whether it carries
sends and receives, and the group sizes its all_gather and reduce_scatter rows tell (the size
rules); and the pairs a coalesced block joins (its members in one group, its end marker in
another). It is computed where the rows are: a
worker's shard on a cluster, or the table in one process (`profiles_of`, one code path), and
joined by rank (`joined`). Groups, parts and what the parts share are decided from it
(`model.groups`, `match.partitions`), and the dump's time (`diagnosis.ages`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .ops import ALL_GATHER_OPS, REDUCE_SCATTER_OPS
from .ranks import MAX_RANK
from .records import State, UnitKind
from .table import EntryTable, rank_starts

B = npt.NDArray[np.bool_]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class BackendFacts:
    """What one rank's ops on one backend say (`Profiles.by_backend`)."""

    rank: int
    backend: str
    completed: bool  # an op completed
    unretired: bool  # an op not retired
    seen: bool  # an op with a start or completion time
    unretired_seen: bool  # such an op, not retired


@dataclass(frozen=True)
class Profiles:
    """The profiles of some ranks, as columns: per rank (ascending), per (rank, group) pair
    with rows (by rank, in the order each rank names its groups), per (pair, size told) and per
    pair of pairs a block joins. Groups are (name, description), coded into `names`."""

    rank: I32
    rows: I64
    newest_ns: I64  # the newest timestamp (enqueued, started or completed); -1: none
    longest_timeout_ms: I64  # -1: none recorded
    timing_on: B  # an op started, or with a duration
    # per (rank, backend) with rows, by rank then backend code
    backend_rank: I32
    backend: I32  # into `backends`
    backend_rows: I64
    backend_completed: B  # an op completed (its state, or a completion time)
    backend_unretired: B  # an op not retired
    backend_seen: B  # an op with a start or completion time
    backend_unretired_seen: B  # such an op, not retired
    pair_rank: I32
    pair_group: I32  # into `names`
    pair_rows: I64
    pair_p2p: B  # carries sends or receives (plain or in a batch)
    told_pair: I64  # into the pairs: an all_gather or reduce_scatter whose sizes tell a size
    told_size: I64  # that size (its output over its input, or the other way round)
    told_rows: I64  # the pair's rows that tell it
    link_a: I64  # a block member's pair
    link_b: I64  # its end marker's pair, another
    names: list[tuple[str, str]]
    backends: list[str]

    @property
    def ranks(self) -> dict[int, int]:
        """Each rank's rows."""
        return dict(zip(self.rank.tolist(), self.rows.tolist(), strict=True))

    def by_backend(self) -> Iterator[BackendFacts]:
        """Each (rank, backend) with rows, by rank then backend code."""
        for rank, code, completed, unretired, seen, unretired_seen in zip(
            self.backend_rank.tolist(),
            self.backend.tolist(),
            self.backend_completed.tolist(),
            self.backend_unretired.tolist(),
            self.backend_seen.tolist(),
            self.backend_unretired_seen.tolist(),
            strict=True,
        ):
            yield BackendFacts(
                rank, self.backends[code], completed, unretired, seen, unretired_seen
            )

    def newest(self) -> dict[int, int]:
        """Each rank's newest timestamp (enqueued, started or completed; -1: none)."""
        return dict(zip(self.rank.tolist(), self.newest_ns.tolist(), strict=True))

    def only(self, ranks: Sequence[int]) -> Profiles:
        """The profiles of `ranks` alone (those the job kept: `load.within_the_job`)."""
        keep = np.isin(self.rank, np.asarray(ranks, dtype=np.int64))
        if keep.all():
            return self
        pair_keep = np.isin(self.pair_rank, self.rank[keep])
        backend_keep = np.isin(self.backend_rank, self.rank[keep])
        renumber = np.cumsum(pair_keep) - 1
        told = pair_keep[self.told_pair]
        link = pair_keep[self.link_a] & pair_keep[self.link_b]
        return Profiles(
            self.rank[keep],
            self.rows[keep],
            self.newest_ns[keep],
            self.longest_timeout_ms[keep],
            self.timing_on[keep],
            self.backend_rank[backend_keep],
            self.backend[backend_keep],
            self.backend_rows[backend_keep],
            self.backend_completed[backend_keep],
            self.backend_unretired[backend_keep],
            self.backend_seen[backend_keep],
            self.backend_unretired_seen[backend_keep],
            self.pair_rank[pair_keep],
            self.pair_group[pair_keep],
            self.pair_rows[pair_keep],
            self.pair_p2p[pair_keep],
            renumber[self.told_pair[told]],
            self.told_size[told],
            self.told_rows[told],
            renumber[self.link_a[link]],
            renumber[self.link_b[link]],
            self.names,
            self.backends,
        )

    def pair_keys(self) -> list[tuple[int, tuple[str, str]]]:
        """Each pair as (rank, group)."""
        names = self.names
        return [
            (r, names[g])
            for r, g in zip(self.pair_rank.tolist(), self.pair_group.tolist(), strict=True)
        ]


def profiles_of(t: EntryTable) -> Profiles:
    """The profile of every rank of a table (the job's, or a worker's shard's)."""
    if not t.n:
        return _empty(list(t.group_names), list(t.backends))
    # Each per-rank figure is reduced column by column (`reduceat`), never through an array
    # over every row made for it: at 16,384 ranks each such array is 262 MB of pages never
    # touched before, which cost more than the reductions themselves.
    starts = rank_starts(t.rank)
    newest = np.maximum.reduceat(t.t_created, starts)
    np.maximum(newest, np.maximum.reduceat(t.t_started, starts), out=newest)
    np.maximum(newest, np.maximum.reduceat(t.t_completed, starts), out=newest)
    timing = np.maximum.reduceat(t.t_started, starts) >= 0
    timing |= ~np.isnan(np.fmax.reduceat(t.duration_ms, starts))  # fmax: NaN only where all are

    # Pairs with rows, by rank then by the order the rank names its groups (the table's).
    n_pairs = len(t.pair_rank)
    pair_rows = np.bincount(t.pair, minlength=n_pairs)
    kept = np.flatnonzero(pair_rows > 0)
    kept = kept[np.argsort(t.pair_rank[kept], kind="stable")]
    renumber = np.full(n_pairs, -1, dtype=np.int32)
    renumber[kept] = np.arange(len(kept))
    pair = renumber[t.pair]
    p2p_rows = (t.unit == UnitKind.P2P) | (t.unit == UnitKind.BATCH_MEMBER)
    pair_p2p = np.bincount(pair[p2p_rows], minlength=len(kept)) > 0
    told_pair, told_size, told_rows = _told(t, pair)
    link_a, link_b = _links(t, pair)
    return Profiles(
        t.rank[starts].astype(np.int32),
        np.diff(np.append(starts, t.n)).astype(np.int64),
        newest.astype(np.int64),
        np.maximum.reduceat(t.timeout_ms, starts).astype(np.int64),
        timing,
        *_by_backend(t, starts),
        t.pair_rank[kept].astype(np.int32),
        t.pair_group[kept].astype(np.int32),
        pair_rows[kept].astype(np.int64),
        pair_p2p,
        told_pair,
        told_size,
        told_rows,
        link_a,
        link_b,
        list(t.group_names),
        list(t.backends),
    )


def _by_backend(t: EntryTable, starts: npt.NDArray[np.intp]) -> tuple[I32, I32, I64, B, B, B, B]:
    """The columns of `Profiles` per (rank, backend), in their order: each (rank, backend)
    with rows, by rank then backend code."""
    width = max(len(t.backends), 1)
    seen = (t.t_started >= 0) | (t.t_completed >= 0)
    completed = (t.state == State.COMPLETED) | (t.t_completed >= 0)
    if width == 1:  # one backend (most jobs): a rank's rows are its backend's
        rows = np.diff(np.append(starts, t.n))
        kept = np.flatnonzero(rows)

        def any_of(flag: B) -> B:
            found: B = np.logical_or.reduceat(flag, starts)[kept]
            return found

    else:
        rank_index = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, t.n)))
        key = rank_index * width + t.backend
        del rank_index
        rows = np.bincount(key, minlength=len(starts) * width)
        kept = np.flatnonzero(rows)

        def any_of(flag: B) -> B:
            return np.bincount(key[flag], minlength=len(rows))[kept] > 0

    return (
        t.rank[starts][kept // width].astype(np.int32),
        (kept % width).astype(np.int32),
        rows[kept].astype(np.int64),
        any_of(completed),
        any_of(~t.retired),
        any_of(seen),
        any_of(seen & ~t.retired),
    )


def _told(t: EntryTable, pair: I32) -> tuple[I64, I64, I64]:
    """Each (pair, size) that all_gather and reduce_scatter rows tell, and their rows: the
    output of an all_gather is its input times the group size, the input of a reduce_scatter
    its output times the group size; a ratio that is no whole number, or beyond the most ranks
    a job has, tells nothing."""
    kind = np.zeros(len(t.ops), dtype=np.int8)
    for code, op in enumerate(t.ops):
        kind[code] = 1 if op in ALL_GATHER_OPS else 2 if op in REDUCE_SCATTER_OPS else 0
    rows = np.flatnonzero(kind[t.op] > 0)
    if not len(rows):
        return _none(), _none(), _none()
    in_n = t.shape_numel[t.in_shape[rows]]
    out_n = t.shape_numel[t.out_shape[rows]]
    gather = kind[t.op[rows]] == 1
    big = np.where(gather, out_n, in_n)
    small = np.where(gather, in_n, out_n)
    ok = (small > 0) & (big % np.maximum(small, 1) == 0)
    ratio = np.where(ok, big // np.maximum(small, 1), 0)
    ok &= ratio <= MAX_RANK + 1
    span = MAX_RANK + 2
    keys, counts = np.unique(pair[rows][ok].astype(np.int64) * span + ratio[ok], return_counts=True)
    return (keys // span).astype(np.int64), (keys % span).astype(np.int64), counts.astype(np.int64)


def _links(t: EntryTable, pair: I32) -> tuple[I64, I64]:
    """The distinct (member's pair, end marker's pair) of each block whose members and end
    marker lie in two groups: few rows beside the millions of a large job."""
    linked = np.flatnonzero((t.unit == UnitKind.BLOCK_MEMBER) | (t.unit == UnitKind.BATCH_MEMBER))
    linked = linked[t.marker[linked] >= 0]
    a, b = pair[linked].astype(np.int64), pair[t.marker[linked]].astype(np.int64)
    other = a != b
    if not other.any():
        return _none(), _none()
    span = int(pair.max()) + 1
    keys = np.unique(a[other] * span + b[other])
    return (keys // span).astype(np.int64), (keys % span).astype(np.int64)


def joined(parts: Sequence[Profiles]) -> Profiles:
    """The profiles of several sets of ranks (each rank in one) as one, by rank, their groups
    coded into one list (in the order the sets first name them)."""
    codes: dict[tuple[str, str], int] = {}
    backend_codes: dict[str, int] = {}
    for p in parts:
        for name in p.names:
            codes.setdefault(name, len(codes))
        for backend in p.backends:
            backend_codes.setdefault(backend, len(backend_codes))
    names = list(codes)
    if not parts:
        return _empty(names, list(backend_codes))
    order = np.argsort(np.concatenate([p.rank for p in parts]), kind="stable")
    # each set's pairs, by rank: the pairs of one rank are together, so a pair's new place is
    # its rank's new first pair plus its place among its rank's
    pair_offsets = np.cumsum([0] + [len(p.pair_rank) for p in parts])
    blocks: list[I64] = []  # each rank's pairs, as indices into every set's pairs in turn
    for p, off in zip(parts, pair_offsets[:-1].tolist(), strict=False):
        starts = np.searchsorted(p.pair_rank, p.rank)
        ends = np.searchsorted(p.pair_rank, p.rank, side="right")
        blocks += [np.arange(s + off, e + off) for s, e in zip(starts, ends, strict=True)]
    take = np.concatenate([blocks[i] for i in order.tolist()] or [_none()]).astype(np.int64)
    new_place = np.empty(len(take), dtype=np.int64)
    new_place[take] = np.arange(len(take))

    def cat(field: str) -> np.ndarray:
        return np.concatenate([getattr(p, field) for p in parts])

    recode = np.concatenate(
        [np.array([codes[n] for n in p.names], dtype=np.int32)[p.pair_group] for p in parts]
    )

    def moved(field: str) -> I64:
        return np.concatenate(
            [getattr(p, field) + off for p, off in zip(parts, pair_offsets.tolist(), strict=False)]
        )

    # each rank's (rank, backend) rows, by rank then the joined backend code
    backend_of = np.concatenate([_recoded(p.backend, p.backends, backend_codes) for p in parts])
    backend_rank = cat("backend_rank")
    backend_order = np.lexsort((backend_of, backend_rank))
    told_pair = new_place[moved("told_pair")]
    told_order = np.lexsort((cat("told_size"), told_pair))
    link_a, link_b = new_place[moved("link_a")], new_place[moved("link_b")]
    link_order = np.lexsort((link_b, link_a))
    return Profiles(
        cat("rank")[order],
        cat("rows")[order],
        cat("newest_ns")[order],
        cat("longest_timeout_ms")[order],
        cat("timing_on")[order],
        backend_rank[backend_order],
        backend_of[backend_order],
        cat("backend_rows")[backend_order],
        cat("backend_completed")[backend_order],
        cat("backend_unretired")[backend_order],
        cat("backend_seen")[backend_order],
        cat("backend_unretired_seen")[backend_order],
        cat("pair_rank")[take],
        recode[take],
        cat("pair_rows")[take],
        cat("pair_p2p")[take],
        told_pair[told_order],
        cat("told_size")[told_order],
        cat("told_rows")[told_order],
        link_a[link_order],
        link_b[link_order],
        names,
        list(backend_codes),
    )


def _recoded(codes: I32, values: list[str], into: dict[str, int]) -> I32:
    """`codes` into `values`, as codes into the list `into` numbers."""
    return np.array([into[v] for v in values] or [0], dtype=np.int32)[codes]


def _none() -> I64:
    return np.zeros(0, np.int64)


def _empty(names: list[tuple[str, str]], backends: list[str]) -> Profiles:
    b = np.zeros(0, bool)
    i32 = np.zeros(0, np.int32)
    return Profiles(
        i32,
        _none(),
        _none(),
        _none(),
        b,
        *(i32, i32, _none(), b, b, b, b),
        *(i32, i32, _none(), b),
        *(_none(),) * 5,
        names,
        backends,
    )


@dataclass(frozen=True)
class Grouped:
    """Profiles with the group uid of each of their pairs (`model.groups.grouped`): what the
    stages that decide by group read (how many rows each group has, which groups a block
    joins, which ranks carry sends and receives in which group)."""

    profiles: Profiles
    uid: I32  # each pair's group uid; -1: none

    def group_rows(self, groups: int) -> I64:
        """The rows of each of `groups` group uids."""
        known = self.uid >= 0
        rows = np.bincount(
            self.uid[known], weights=self.profiles.pair_rows[known], minlength=groups
        )
        return rows.astype(np.int64)

    def links(self) -> set[tuple[int, int]]:
        """(group uid, group uid) of each block whose members and end marker lie in two
        groups."""
        a = self.uid[self.profiles.link_a].astype(np.int64)
        b = self.uid[self.profiles.link_b].astype(np.int64)
        other = a != b
        return set(zip(a[other].tolist(), b[other].tolist(), strict=True))

    def p2p_uids(self) -> I64:
        """The groups some rank sends or receives in, ascending."""
        uid = self.uid[self.profiles.pair_p2p]
        return np.unique(uid[uid >= 0]).astype(np.int64)
