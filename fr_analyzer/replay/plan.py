"""The replay plan: from a loaded job (its entry table and groups, whatever format the loader
read), what each rank replays, in its own record order: the op kind, the group (global members,
name, desc), the element count and dtype to allocate, the root or peer, the group's sequence id.

A plan is records only (no torch), serializable to JSON: it is what the worker processes
receive. The rules it follows, so that a replay neither hides nor creates a disagreement:

- *Window.* Per group, one range of sequence ids for every rank: from the newest first id any
  rank's buffer holds (an op older than that is missing on some rank only because its ring
  buffer wrapped) to the newest id any rank recorded; `--last N` keeps each group's newest N,
  `--seq A:B` ids A to B. p2p ops are windowed by their p2p sequence id the same way.
- *Scale.* Every element count n becomes ceil(n·F) (at least 1), raised just enough that counts
  that differ in the records stay different and in the same order: one map for the whole plan,
  so equal counts stay equal on every rank. Counts derived by a size rule (an all_gather's
  output is the group size times its input) are derived after scaling, so the rule holds.
- *Dtypes.* A dtype the backend cannot run becomes one of the same width (`dtypes`); the plan
  says which.
- *Root.* Flight Recorder keeps no root: a gather's is the member whose output is recorded, a
  scatter's the member whose input is; a broadcast's or reduce's is the group's first member.
"""

from __future__ import annotations

import enum
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import UsageError
from ..model import ops as catalog
from ..model.dtypes import DTYPES
from ..model.groups import WORLD_DESCS, GroupTable
from ..model.ranks import agree, compact
from ..model.records import ANY_SOURCE, P2PKind, UnitKind
from ..model.table import EntryTable
from .dtypes import replay_dtype

PLAN_SCHEMA = "fr-analyze.replay-plan/1"


class ReplayBackend(enum.StrEnum):
    """The backend a replay runs on."""

    GLOO = "gloo"  # on the CPU, every rank a local process or one of torchrun's
    NCCL = "nccl"  # one process per GPU


class Kind(enum.StrEnum):
    """What the worker runs for an op."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    GATHER = "gather"
    SCATTER = "scatter"
    ALL_TO_ALL = "all_to_all"
    BARRIER = "barrier"
    SEND = "send"
    RECV = "recv"
    COALESCED = "coalesced"  # a coalesced block: its members, one after the other
    BATCH_P2P = "batch_p2p"  # batch_isend_irecv: its sends and recvs at once


KIND_OF_OP: dict[str, Kind] = {
    **dict.fromkeys(catalog.SAME_IN_OUT_OPS, Kind.ALL_REDUCE),
    **dict.fromkeys(catalog.ALL_REDUCE_COALESCED_OPS, Kind.ALL_REDUCE),
    **dict.fromkeys(catalog.ALL_GATHER_OPS, Kind.ALL_GATHER),
    **dict.fromkeys(catalog.ALL_GATHER_COALESCED_OPS, Kind.ALL_GATHER),
    **dict.fromkeys(catalog.REDUCE_SCATTER_OPS, Kind.REDUCE_SCATTER),
    **dict.fromkeys(catalog.BROADCAST_OPS, Kind.BROADCAST),
    **dict.fromkeys(catalog.REDUCE_OPS, Kind.REDUCE),
    **dict.fromkeys(catalog.GATHER_OPS, Kind.GATHER),
    **dict.fromkeys(catalog.SCATTER_OPS, Kind.SCATTER),
    **dict.fromkeys(catalog.ALL_TO_ALL_OPS, Kind.ALL_TO_ALL),
    **dict.fromkeys(catalog.BARRIER_OPS, Kind.BARRIER),
    "send": Kind.SEND,
    "recv": Kind.RECV,
}
"""Each op of the catalog (`model.ops`) that a replay runs, by the kind it runs as; an op not
here (a communicator split, a sparse all_reduce, ...) is left out on every rank, with a note."""


@dataclass(frozen=True)
class Window:
    """Which sequence ids of each group to replay (None: all that every rank can replay)."""

    last: int | None = None  # each group's newest N sequence ids
    seq: tuple[int, int] | None = None  # sequence ids A to B, inclusive


@dataclass(frozen=True)
class PlanOptions:
    """How to turn the records into a plan."""

    backend: ReplayBackend = ReplayBackend.GLOO
    scale: float = 1.0  # every element count times this (see the module docstring)
    window: Window = field(default_factory=Window)


@dataclass(frozen=True)
class GroupSpec:
    """A process group as every rank creates it (all ranks, in `ReplayPlan.groups` order)."""

    uid: int
    name: str
    desc: str
    ranks: tuple[int, ...]  # global ranks, ascending
    world: bool  # the default group: not created, it is the one init_process_group makes


@dataclass(frozen=True)
class OpSpec:
    """One op a rank replays."""

    kind: Kind
    op: str  # the op's recorded name (no backend prefix)
    group: int  # GroupSpec.uid
    seq: int  # the group's collective sequence id (p2p: its p2p sequence id)
    numel: int  # elements this rank gives (scaled): see `worker` for what each kind allocates
    dtype: str  # torch's name of the dtype allocated
    recorded: str  # what the record says, for people: "[[16]] Float"
    root: int | None = None  # global rank: broadcast, reduce, gather, scatter
    peer: int | None = None  # global rank: send, recv (None: any source)
    splits_in: tuple[int, ...] = ()  # all_to_all: elements to each member (scaled)
    splits_out: tuple[int, ...] = ()  # all_to_all: elements from each member (scaled)
    members: tuple[OpSpec, ...] = ()  # coalesced, batch_p2p


@dataclass(frozen=True)
class RankPlan:
    """What one rank replays, in its record order."""

    rank: int
    ops: tuple[OpSpec, ...]


@dataclass(frozen=True)
class ReplayPlan:
    """Everything the worker processes need: the groups to create and each rank's ops."""

    source: str
    world_size: int
    backend: ReplayBackend
    scale: float
    groups: tuple[GroupSpec, ...]
    ranks: tuple[RankPlan, ...]  # by rank, every rank of the world
    notes: tuple[str, ...] = ()  # what the replay changes: dtypes, ops left out, roots guessed
    cut: tuple[int, ...] = ()  # ranks whose record is cut: replayed to where it ends

    def group(self, uid: int) -> GroupSpec:
        """The group of uid `uid`."""
        for g in self.groups:
            if g.uid == uid:
                return g
        raise KeyError(uid)

    def op_count(self) -> int:
        """How many ops every rank replays, together."""
        return sum(len(r.ops) for r in self.ranks)


@dataclass(frozen=True)
class _Row:
    """One usable entry of one rank, as the plan reads it."""

    rank: int
    unit: UnitKind
    op: str
    group: int
    seq: int
    p2p_seq: int
    p2p: P2PKind
    peer_src: int
    peer_dst: int
    in_shapes: tuple[tuple[int, ...], ...]
    out_shapes: tuple[tuple[int, ...], ...]
    in_dtypes: tuple[str, ...]
    out_dtypes: tuple[str, ...]

    @property
    def is_p2p(self) -> bool:
        return self.unit in (UnitKind.P2P, UnitKind.BATCH_MEMBER)


def _numel(shapes: Iterable[tuple[int, ...]]) -> int:
    return sum(math.prod(s) for s in shapes)


def _rows(table: EntryTable, groups: GroupTable) -> dict[int, list[_Row]]:
    """Every rank's rows in record order."""
    order = np.lexsort((table.index, table.rank))
    by_rank: dict[int, list[_Row]] = defaultdict(list)
    for i in order.tolist():
        by_rank[int(table.rank[i])].append(
            _Row(
                rank=int(table.rank[i]),
                unit=UnitKind(int(table.unit[i])),
                op=table.ops[table.op[i]],
                group=int(groups.entry_group[i]),
                seq=int(table.coll_seq[i]),
                p2p_seq=int(table.p2p_seq[i]),
                p2p=P2PKind(int(table.p2p_kind[i])),
                peer_src=int(table.peer_src[i]),
                peer_dst=int(table.peer_dst[i]),
                in_shapes=table.shapes[table.in_shape[i]],
                out_shapes=table.shapes[table.out_shape[i]],
                in_dtypes=table.dtypes[table.in_dtype[i]],
                out_dtypes=table.dtypes[table.out_dtype[i]],
            )
        )
    return by_rank


def _ranges(rows: Mapping[int, list[_Row]], window: Window) -> dict[tuple[int, bool], range]:
    """Per (group, p2p or not), the sequence ids every rank replays (see the module docstring)."""
    first: dict[tuple[int, bool], dict[int, int]] = defaultdict(dict)
    last: dict[tuple[int, bool], int] = {}
    for rank, own in rows.items():
        for row in own:
            if row.unit == UnitKind.ORPHAN_MARKER or row.unit == UnitKind.BATCH_MARKER:
                continue
            key = (row.group, row.is_p2p)
            seq = row.p2p_seq if row.is_p2p else row.seq
            first[key].setdefault(rank, seq)
            last[key] = max(last.get(key, seq), seq)
    ranges = {}
    for key, firsts in first.items():
        lo, hi = max(firsts.values()), last[key]
        if window.last is not None:
            lo = max(lo, hi - window.last + 1)
        if window.seq is not None:
            lo, hi = max(lo, window.seq[0]), min(hi, window.seq[1])
        ranges[key] = range(lo, hi + 1)
    return ranges


class _Scaler:
    """The one map of element counts for a plan (see the module docstring)."""

    def __init__(self, factor: float, counts: Iterable[int]) -> None:
        self.factor = factor
        self.map: dict[int, int] = {0: 0}
        previous = 0
        for n in sorted(set(counts) - {0}):
            scaled = max(1, math.ceil(n * factor), previous + 1)
            self.map[n] = scaled
            previous = scaled

    def __call__(self, n: int) -> int:
        return self.map[n]


def _recorded(row: _Row) -> str:
    shapes = row.in_shapes or row.out_shapes
    dtypes = row.in_dtypes or row.out_dtypes
    text = "[" + ", ".join(f"[{', '.join(map(str, s))}]" for s in shapes) + "]"
    return f"{text} {'/'.join(sorted(set(dtypes)))}" if dtypes else text


def _count(kind: Kind, row: _Row) -> int:
    """The element count a rank gives for its op, from its own record."""
    if kind in (Kind.REDUCE_SCATTER, Kind.SCATTER, Kind.RECV):
        return _numel(row.out_shapes) or _numel(row.in_shapes)
    if kind == Kind.BARRIER:
        return 0
    return _numel(row.in_shapes) or _numel(row.out_shapes)


def _even(total: int, parts: int) -> tuple[int, ...]:
    base, extra = divmod(total, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def _split_matrix(ins: Sequence[int], outs: Sequence[int]) -> list[list[int]] | None:
    """Elements each member sends each member, given what each gives and gets in all (the
    northwest-corner rule: one matrix every rank computes alike); None when the totals do not
    balance."""
    if sum(ins) != sum(outs):
        return None
    n = len(ins)
    if len(set(ins) | set(outs)) == 1 and ins[0] % n == 0:  # the usual even exchange
        return [[ins[0] // n] * n for _ in range(n)]
    left, want = list(ins), list(outs)
    matrix = [[0] * n for _ in range(n)]
    i = j = 0
    while i < n and j < n:
        moved = min(left[i], want[j])
        matrix[i][j] = moved
        left[i] -= moved
        want[j] -= moved
        if left[i] == 0:
            i += 1
        else:
            j += 1
    return matrix


def build(
    table: EntryTable, groups: GroupTable, source: str, options: PlanOptions = PlanOptions()
) -> ReplayPlan:
    """The plan of a loaded job (`pipeline.load` then `build_groups`)."""
    if options.scale <= 0 or options.scale > 1:
        raise UsageError(f"--scale {options.scale:g}: must be above 0 and at most 1")
    if not groups.world_size:
        raise UsageError(f"{source}: no rank recorded an op to replay")
    rows = _rows(table, groups)
    ranges = _ranges(rows, options.window)
    notes: list[str] = []
    group_specs = _groups(groups)
    members = {g.uid: g.ranks for g in group_specs}
    by_key: dict[tuple[int, int], list[_Row]] = defaultdict(list)  # (group, seq) → collectives
    for own in rows.values():
        for row in own:
            if not row.is_p2p and row.unit != UnitKind.BATCH_MARKER:
                by_key[(row.group, row.seq)].append(row)

    # all_to_all: each (group, seq)'s split matrix, in elements, before scaling
    splits: dict[tuple[int, int], list[list[int]] | None] = {}
    for key, found in by_key.items():
        a2a = [r for r in found if KIND_OF_OP.get(r.op) == Kind.ALL_TO_ALL]
        if not a2a:
            continue
        ranks = members[key[0]]
        by_rank = {r.rank: r for r in a2a}
        if set(by_rank) != set(ranks):
            splits[key] = None
            continue
        ins = [_numel(by_rank[m].in_shapes) for m in ranks]
        outs = [_numel(by_rank[m].out_shapes) for m in ranks]
        splits[key] = _split_matrix(ins, outs)

    chosen: dict[int, list[list[_Row]]] = {}  # rank → its units (one row, or a block)
    counts: set[int] = set()
    left_out: dict[str, int] = defaultdict(int)
    for rank in range(groups.world_size):
        chosen[rank] = []
        for unit in _units(rows.get(rank, [])):
            head = unit[0]
            seq = head.p2p_seq if head.is_p2p else head.seq
            if seq not in ranges.get((head.group, head.is_p2p), range(0)):
                continue
            for r in unit:
                if not _replayable(r, members) and r.unit not in MARKERS:
                    left_out[r.op] += 1
            if any(_replayable(r, members) for r in unit):
                chosen[rank].append(unit)
            for r in unit:
                kind = KIND_OF_OP.get(r.op)
                if kind is not None:
                    counts.add(_count(kind, r) * _widen(r, options.backend, kind))
                if kind == Kind.ALL_TO_ALL and splits.get((r.group, r.seq)) is None:
                    size = len(members[r.group])
                    counts.update(_even(_numel(r.in_shapes), size))
                    counts.update(_even(_numel(r.out_shapes), size))
    for matrix in splits.values():
        for line in matrix or []:
            counts.update(line)
    scale = _Scaler(options.scale, counts)

    substituted: dict[tuple[str, str], int] = defaultdict(int)
    guessed_roots: set[str] = set()
    plans = []
    for rank in range(groups.world_size):
        ops = []
        for unit in chosen[rank]:
            specs = [
                _op(r, members, splits, scale, options.backend, substituted, guessed_roots, by_key)
                for r in unit
                if _replayable(r, members)
            ]
            marker = unit[-1]
            if marker.unit in MARKERS:
                kind = Kind.BATCH_P2P if marker.unit == UnitKind.BATCH_MARKER else Kind.COALESCED
                ops.append(
                    OpSpec(
                        kind,
                        marker.op,
                        marker.group,
                        specs[0].seq,
                        sum(s.numel for s in specs),
                        specs[0].dtype,
                        f"{len(specs)} ops",
                        members=tuple(specs),
                    )
                )
            else:
                ops.extend(specs)
        plans.append(RankPlan(rank, tuple(ops)))
    for (recorded, used), n in sorted(substituted.items()):
        notes.append(
            f"dtype {recorded} replayed as {used} ({options.backend} has no {recorded} in "
            f"these ops; same width): {n} op(s)"
        )
    for op, n in sorted(left_out.items()):
        notes.append(f"{op}: not replayed ({n} record(s) on all ranks together)")
    silent = [rank for rank in range(groups.world_size) if rank not in rows]
    if silent:
        notes.append(
            f"{agree(silent, 'rank', 'ranks')} {compact(silent)}: no dump, nothing to replay"
        )
    for name in sorted(guessed_roots):
        notes.append(f"{name}: Flight Recorder keeps no root; the group's first member is used")
    return ReplayPlan(
        source=source,
        world_size=groups.world_size,
        backend=options.backend,
        scale=options.scale,
        groups=group_specs,
        ranks=tuple(plans),
        notes=tuple(notes),
    )


MARKERS = frozenset({UnitKind.BLOCK_MARKER, UnitKind.BATCH_MARKER})


def _units(rows: Iterable[_Row]) -> Iterable[list[_Row]]:
    """A rank's rows as units: one plain op, or a block's members and its end marker (an end
    marker whose members fell out of the buffer is dropped)."""
    block: list[_Row] = []
    for row in rows:
        if row.unit in (UnitKind.BLOCK_MEMBER, UnitKind.BATCH_MEMBER):
            block.append(row)
        elif row.unit in MARKERS:
            if block:
                yield [*block, row]
            block = []
        elif row.unit != UnitKind.ORPHAN_MARKER:
            yield from ([r] for r in block)  # members with no marker yet: plain ops
            block = []
            yield [row]
    yield from ([r] for r in block)


def _replayable(row: _Row, members: Mapping[int, tuple[int, ...]]) -> bool:
    """Whether the replay can run a row: an op it knows; for a send or recv, a peer in the
    group (or any source, for a recv); a recorder that keeps no peer (torchcomms, HCCL) leaves
    its sends and recvs out."""
    kind = KIND_OF_OP.get(row.op)
    if kind not in (Kind.SEND, Kind.RECV):
        return kind is not None
    local = row.peer_dst if kind == Kind.SEND else row.peer_src
    return 0 <= local < len(members[row.group]) or (kind == Kind.RECV and local == ANY_SOURCE)


def _widen(row: _Row, backend: str, kind: Kind) -> int:
    dtypes = row.in_dtypes or row.out_dtypes
    return replay_dtype(dtypes[0], backend, kind.value)[1] if dtypes else 1


def _groups(groups: GroupTable) -> tuple[GroupSpec, ...]:
    """The groups in the order the job created them (their names are creation counters where
    torch named them; others after, by name), the default group marked."""
    world = tuple(range(groups.world_size))
    specs = []
    seen_world = False
    for g in groups.groups:  # already in torch's creation order (`build_groups` sorts by name)
        is_world = not seen_world and g.ranks == world and (g.desc in WORLD_DESCS or g.name == "0")
        seen_world = seen_world or is_world
        specs.append(GroupSpec(g.uid, g.name, g.desc, g.ranks, is_world))
    return tuple(specs)


def _op(
    row: _Row,
    members: Mapping[int, tuple[int, ...]],
    splits: Mapping[tuple[int, int], list[list[int]] | None],
    scale: _Scaler,
    backend: str,
    substituted: dict[tuple[str, str], int],
    guessed_roots: set[str],
    by_key: Mapping[tuple[int, int], list[_Row]],
) -> OpSpec:
    kind = KIND_OF_OP[row.op]
    ranks = members[row.group]
    dtypes = row.in_dtypes or row.out_dtypes
    recorded_dtype = dtypes[0] if dtypes else "Float"
    dtype, widen = replay_dtype(recorded_dtype, backend, kind.value)
    if dtypes and dtype != _torch_name(recorded_dtype):
        substituted[(recorded_dtype, dtype)] += 1
    numel = scale(_count(kind, row) * widen)
    root = peer = None
    splits_in: tuple[int, ...] = ()
    splits_out: tuple[int, ...] = ()
    if kind in (Kind.BROADCAST, Kind.REDUCE):
        root = ranks[0]
        guessed_roots.add(kind.value)
    elif kind in (Kind.GATHER, Kind.SCATTER):
        side = "out_shapes" if kind == Kind.GATHER else "in_shapes"
        holders = [r.rank for r in by_key.get((row.group, row.seq), []) if getattr(r, side)]
        root = min(holders) if holders else ranks[0]
    elif kind in (Kind.SEND, Kind.RECV):
        local = row.peer_dst if kind == Kind.SEND else row.peer_src
        peer = ranks[local] if 0 <= local < len(ranks) else None  # None: any source
    elif kind == Kind.ALL_TO_ALL:
        matrix = splits.get((row.group, row.seq))
        me = ranks.index(row.rank)
        if matrix is not None:
            splits_in = tuple(scale(n) for n in matrix[me])
            splits_out = tuple(scale(line[me]) for line in matrix)
        else:  # the members disagree: each rank splits its own record evenly
            splits_in = tuple(scale(n) for n in _even(_numel(row.in_shapes), len(ranks)))
            splits_out = tuple(scale(n) for n in _even(_numel(row.out_shapes), len(ranks)))
        numel = sum(splits_in)
    seq = row.p2p_seq if row.is_p2p else row.seq
    return OpSpec(
        kind,
        row.op,
        row.group,
        seq,
        numel,
        dtype,
        _recorded(row),
        root,
        peer,
        splits_in,
        splits_out,
    )


def _torch_name(recorded: str) -> str:
    known = DTYPES.get(recorded)
    return known.torch_name if known else "float32"


# --- JSON ---------------------------------------------------------------------------------


def to_json(plan: ReplayPlan) -> str:
    """The plan as JSON text (what `from_json` reads back)."""
    from dataclasses import asdict

    return json.dumps({"schema": PLAN_SCHEMA, **asdict(plan)})


def from_json(text: str) -> ReplayPlan:
    """A plan written by `to_json`."""
    data = json.loads(text)
    if data.get("schema") != PLAN_SCHEMA:
        raise UsageError(f"not a replay plan ({PLAN_SCHEMA}): schema {data.get('schema')!r}")
    if data.get("backend") not in set(ReplayBackend):
        raise UsageError(f"a replay plan for backend {data.get('backend')!r}: gloo or nccl")
    return ReplayPlan(
        source=data["source"],
        world_size=data["world_size"],
        backend=ReplayBackend(data["backend"]),
        scale=data["scale"],
        groups=tuple(
            GroupSpec(g["uid"], g["name"], g["desc"], tuple(g["ranks"]), g["world"])
            for g in data["groups"]
        ),
        ranks=tuple(
            RankPlan(r["rank"], tuple(_op_from(o) for o in r["ops"])) for r in data["ranks"]
        ),
        notes=tuple(data["notes"]),
        cut=tuple(data.get("cut", ())),
    )


def _op_from(data: dict[str, Any]) -> OpSpec:
    return OpSpec(
        kind=Kind(data["kind"]),
        op=data["op"],
        group=data["group"],
        seq=data["seq"],
        numel=data["numel"],
        dtype=data["dtype"],
        recorded=data["recorded"],
        root=data["root"],
        peer=data["peer"],
        splits_in=tuple(data["splits_in"]),
        splits_out=tuple(data["splits_out"]),
        members=tuple(_op_from(m) for m in data["members"]),
    )
