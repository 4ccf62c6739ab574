"""Deterministic generator of NCCL-format Flight Recorder dumps (dump format version "2.10").

A small simulation of what ProcessGroupNCCL records, so that scenario code reads like the
training program that produced the dumps: a `Job` owns one simulated process per global rank,
and its methods (`all_reduce`, `send`, `recv`, `batch_p2p`, `coalesced`, ...) record, on every
rank that issues the op, the entry the real recorder would keep: per-group collective and p2p
sequence ids, op ids, per-process record ids and backend ids, sizes consistent with the op's
semantics, clock-skewed timestamps, states, the ring buffer and the process-group status.
`Job.write` then dumps one file per rank as pickle or JSON, exactly as described in
/work/shared/docs/fr-format.md. The `SCENARIOS` below build the `sample_dumps/nccl_*` sets;
`python -m tools.nccl_scenarios --out sample_dumps` regenerates them byte for byte.
Standard library only: no torch needed.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import shutil
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypedDict, Unpack

State = Literal["scheduled", "started", "completed"]
DumpFormat = Literal["pickle", "json"]
SeqKind = Literal["collective", "p2p"]
Sizes = list[list[int]]
Entry = dict[str, Any]
Frame = dict[str, Any]

BASE_TIME_NS = 1_760_000_000_000_000_000
"""Simulated wall clock at the start of every job (ns since the epoch)."""
TIMEOUT_MS = 600_000
PICKLE_PROTOCOL = 4
COALESCED_MARKERS = ("nccl:coalesced", "nccl:ALLGATHER_coalesced", "nccl:REDUCE_SCATTER_coalesced")

# A rank's enqueue time is the job's clock plus its host offset plus a jitter below
# _JITTER_NS; every op call advances the clock by at least _MIN_STEP_NS > _JITTER_NS, which
# keeps time_created_ns strictly increasing on each rank.
_JITTER_NS = 20_000
_MIN_STEP_NS = 30_000
_MAX_HOST_OFFSET_NS = 4_000_000

# Ops whose input sizes equal their output sizes (send/recv record the tensor as both).
_SAME_SIZE_OPS = frozenset(
    {
        "all_reduce",
        "allreduce_coalesced",
        "all_reduce_barrier",
        "broadcast",
        "_broadcast_oop",
        "reduce",
        "_reduce_oop",
        "all_to_all",
        "send",
        "recv",
    }
)


def collective_sizes(
    op: str, shapes: Sequence[Sequence[int]], group_size: int
) -> tuple[Sizes, Sizes]:
    """Input and output sizes ProcessGroupNCCL records for `op` on a group of `group_size`.

    `shapes` are the per-rank tensors: the input of a gather, the output of a scatter, the
    tensor itself otherwise. all_gather/reduce_scatter list forms take one shape.
    """
    per_rank = [list(shape) for shape in shapes]
    if op in _SAME_SIZE_OPS:
        return per_rank, [list(shape) for shape in shapes]
    if op == "all_gather":
        return per_rank, [list(per_rank[0]) for _ in range(group_size)]
    if op in ("_all_gather_base", "all_gather_into_tensor_coalesced"):
        return per_rank, [_stacked(shape, group_size) for shape in per_rank]
    if op == "reduce_scatter":
        return [list(per_rank[0]) for _ in range(group_size)], per_rank
    if op in ("_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
        return [_stacked(shape, group_size) for shape in per_rank], per_rank
    raise ValueError(f"no size rule for op {op!r}")


def _stacked(shape: Sequence[int], group_size: int) -> list[int]:
    """The shape of `group_size` copies of `shape` concatenated along dim 0."""
    return [shape[0] * group_size, *shape[1:]] if shape else [group_size]


def _numel(sizes: Sizes) -> int:
    total = 0
    for shape in sizes:
        count = 1
        for dim in shape:
            count *= dim
        total += count
    return total


# --- stack frames ---------------------------------------------------------------------------

_SITE_PACKAGES = "/usr/local/lib/python3.11/site-packages/torch/distributed"
_C10D = f"{_SITE_PACKAGES}/distributed_c10d.py"
_C10D_LOGGER = f"{_SITE_PACKAGES}/c10d_logger.py"
_CONTEXTLIB = "/usr/local/lib/python3.11/contextlib.py"
_TRAIN = "/workspace/train.py"
_PARALLEL = "/workspace/model/parallel.py"
_PIPELINE = "/workspace/model/pipeline.py"
_RING = "/workspace/model/ring_attention.py"
_MOE = "/workspace/model/moe.py"
_METRICS = "/workspace/metrics.py"

_RawFrame = tuple[str, str, int]


def _api(function: str, line: int) -> tuple[_RawFrame, ...]:
    return ((function, _C10D, line), ("wrapper", _C10D_LOGGER, 81))


# torch.distributed entry points, innermost first; keyed by what the user called.
_API_FRAMES: dict[str, tuple[_RawFrame, ...]] = {
    "all_reduce": _api("all_reduce", 2806),
    "all_reduce_coalesced": _api("all_reduce_coalesced", 2968),
    "barrier": _api("barrier", 4786),
    "broadcast": _api("broadcast", 2714),
    "reduce": _api("reduce", 2902),
    "all_gather": _api("all_gather", 3688),
    "all_gather_into_tensor": _api("all_gather_into_tensor", 3809),
    "reduce_scatter": _api("reduce_scatter", 4187),
    "reduce_scatter_tensor": _api("reduce_scatter_tensor", 4291),
    "all_to_all_single": _api("all_to_all_single", 4563),
    "send": _api("send", 2377),
    "recv": _api("recv", 2431),
    "batch_isend_irecv": (("batch_isend_irecv", _C10D, 2671),),
    "_coalescing_manager": (("_coalescing_manager", _C10D, 2531), ("__exit__", _CONTEXTLIB, 144)),
}

# Which user-facing API records each op (uneven all_gather / reduce_scatter record
# _broadcast_oop / _reduce_oop members; the *_coalesced tensor ops go through the manager).
_OP_API: dict[str, str] = {
    "all_reduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "all_reduce_barrier": "barrier",
    "broadcast": "broadcast",
    "_broadcast_oop": "all_gather",
    "reduce": "reduce",
    "_reduce_oop": "reduce_scatter",
    "all_gather": "all_gather",
    "_all_gather_base": "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced": "_coalescing_manager",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "_coalescing_manager",
    "all_to_all": "all_to_all_single",
    "send": "send",
    "recv": "recv",
    "nccl:coalesced": "_coalescing_manager",
    "nccl:ALLGATHER_coalesced": "all_gather",
    "nccl:REDUCE_SCATTER_coalesced": "reduce_scatter",
}

_STEP_TAIL: tuple[_RawFrame, ...] = (
    ("train_step", _TRAIN, 241),
    ("train", _TRAIN, 280),
    ("main", _TRAIN, 301),
    ("<module>", _TRAIN, 305),
)
_SETUP_TAIL: tuple[_RawFrame, ...] = (("main", _TRAIN, 296), ("<module>", _TRAIN, 305))
_SETUP_SITES = frozenset({"setup", "gather_metadata", "checkpoint"})

# Call sites of the simulated training program: the user frames right below torch's,
# innermost first; `_STEP_TAIL` (or `_SETUP_TAIL` for the setup sites) follows them.
SITES: dict[str, tuple[_RawFrame, ...]] = {
    "train_step": (),
    "setup": (("broadcast_parameters", _TRAIN, 64), ("setup", _TRAIN, 92)),
    "gather_metadata": (("gather_shard_metadata", _PARALLEL, 51), ("setup", _TRAIN, 97)),
    "checkpoint": (("save_checkpoint", _TRAIN, 262), ("train", _TRAIN, 288)),
    "forward": (("forward", _PARALLEL, 188), ("forward_step", _TRAIN, 131)),
    "backward": (("backward", _PARALLEL, 231), ("backward_step", _TRAIN, 149)),
    "send_forward": (("send_forward", _PIPELINE, 77), ("forward_step", _TRAIN, 136)),
    "recv_forward": (("recv_forward", _PIPELINE, 90), ("forward_step", _TRAIN, 127)),
    "send_backward": (("send_backward", _PIPELINE, 104), ("backward_step", _TRAIN, 155)),
    "recv_backward": (("recv_backward", _PIPELINE, 117), ("backward_step", _TRAIN, 144)),
    "exchange": (("send_forward_recv_backward", _PIPELINE, 133), ("run_1f1b", _PIPELINE, 171)),
    "ring_attention": (("ring_pass_kv", _RING, 58), ("attention_forward", _RING, 102)),
    "expert_dispatch": (("dispatch_tokens", _MOE, 140), ("moe_forward", _MOE, 176)),
    "grad_sync": (("reduce_gradients", _TRAIN, 183),),
    "param_gather": (("gather_parameters", _TRAIN, 197),),
    "grad_norm": (("clip_grad_norm", _TRAIN, 210),),
    "loss": (("average_loss", _TRAIN, 219),),
    "gather_metrics": (("gather_token_stats", _METRICS, 33), ("log_metrics", _TRAIN, 226)),
    "log_metrics": (("log_metrics", _TRAIN, 228),),
    "should_stop": (("broadcast_stop_flag", _TRAIN, 234),),
}


# --- public records -------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """A process group: its name (the identity across ranks), desc and sorted global ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...]
    _local: Mapping[int, int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_local", {rank: i for i, rank in enumerate(self.ranks)})

    @property
    def size(self) -> int:
        return len(self.ranks)

    def local_rank(self, rank: int) -> int:
        """Group-local rank of global `rank`, as used in p2p profiling names."""
        try:
            return self._local[rank]
        except KeyError:
            raise ValueError(f"rank {rank} is not in group {self.name!r} ({self.desc})") from None


@dataclass(frozen=True)
class Override:
    """How one rank's record of an op differs from the others' (the scenario's defect)."""

    op: str | None = None
    """Another collective; sizes are re-derived from it unless given."""
    shapes: Sequence[Sequence[int]] | None = None
    """Other per-rank tensor shapes; sizes are re-derived from them."""
    in_sizes: Sizes | None = None
    out_sizes: Sizes | None = None
    dtype: str | None = None
    state: State | None = None
    retired: bool | None = None
    site: str | None = None


class OpOptions(TypedDict, total=False):
    """Keyword options shared by every collective helper of `Job`."""

    dtype: str
    ranks: Iterable[int] | None
    state: State | None
    retired: bool | None
    site: str
    overrides: Mapping[int, Override] | None


@dataclass(frozen=True)
class Expected:
    """One finding a correct analyzer reports for a scenario."""

    kind: str
    culprits: tuple[int, ...]
    group: Group | None = None
    seq_kind: SeqKind | None = None
    seq: int | None = None
    op: str | None = None
    on_rank: int | None = None
    """Whose dump the seq id is read from (p2p seq ids are per rank); None: every member."""
    note: str = ""

    def describe(self) -> str:
        parts = [self.kind]
        if self.group is not None:
            parts.append(f'group "{self.group.name}" (desc "{self.group.desc}")')
        if self.seq_kind is not None:
            where = f" on rank {self.on_rank}" if self.on_rank is not None else ""
            parts.append(f"{self.seq_kind}_seq_id {self.seq}{where}")
        if self.op is not None:
            parts.append(f"op {self.op}")
        parts.append(f"culprit ranks {list(self.culprits)}")
        text = ", ".join(parts)
        return f"{text} ({self.note})" if self.note else text


def default_file_name(rank: int) -> str:
    return f"nccl_trace_rank_{rank}"


@dataclass(frozen=True)
class Layout:
    """How `Job.write` lays a dump set out on disk, unless told otherwise."""

    fmt: DumpFormat = "pickle"
    name: Callable[[int], str] = default_file_name
    skip_ranks: tuple[int, ...] = ()


# --- simulated processes --------------------------------------------------------------------


@dataclass
class _PgState:
    """One rank's ProcessGroupNCCL for one group: counters and status."""

    pg_id: int
    key: tuple[str, str]
    """The entries' process_group: (name, desc)."""
    collective_seq: int = 0
    p2p_seq: int = 0
    op_id: int = 0
    last_enqueued: int = -1
    last_started: int = -1
    last_completed: int = -1


class _Process:
    """One rank's process: its flight recorder buffer and its backends."""

    def __init__(self, rank: int, capacity: int, offset_ns: int, salt: int, thread_id: str):
        self.rank = rank
        self.entries: deque[Entry] = deque(maxlen=capacity)
        self.next_record_id = 0
        self.pgs: dict[str, _PgState] = {}
        self.groups: list[Group] = []
        self.clock_ns = BASE_TIME_NS + offset_ns
        self.salt = salt
        self.thread_id = thread_id
        self.hang: State | None = None


class _Op(NamedTuple):
    """What one rank records for one call, before counters, state and times."""

    name: str
    in_sizes: Sizes
    out_sizes: Sizes
    dtype: str
    frames: list[Frame]
    in_dtypes: list[str]
    out_dtypes: list[str]


def _op(name: str, in_sizes: Sizes, out_sizes: Sizes, dtype: str, frames: list[Frame]) -> _Op:
    return _Op(
        name, in_sizes, out_sizes, dtype, frames, [dtype] * len(in_sizes), [dtype] * len(out_sizes)
    )


# How an entry counts: a collective (or a coalesced block's member/marker), a send/recv,
# or the end marker of a batched p2p block (is_p2p False, yet not a collective).
_Kind = Literal["collective", "p2p", "p2p_marker"]


@dataclass
class _Block:
    """An open coalescing block (collectives) or batch_isend_irecv (p2p) on one group."""

    kind: Literal["coalesced", "p2p"]
    group: Group
    marker: str
    numel: dict[int, int] = field(default_factory=dict)
    """Ranks that recorded a member, in order, with the elements they moved."""


class Job:
    """A simulated distributed job whose ranks record NCCL flight recorder entries.

    Every op method records on each rank that issues it; by default all members of the group.
    Ranks are global ranks; p2p profiling names use group-local ranks.
    """

    def __init__(
        self,
        world_size: int,
        *,
        version: str = "2.10",
        nccl_version: str = "2.21.5",
        capacity: int = 2000,
        timing: bool = False,
        seed: int = 0,
        stack_traces: bool = True,
        timeout_ms: int = TIMEOUT_MS,
    ) -> None:
        if world_size < 1 or capacity < 1:
            raise ValueError("world_size and capacity must be positive")
        self.version = version
        self.nccl_version = nccl_version
        self.timing = timing
        self.stack_traces = stack_traces
        self.timeout_ms = timeout_ms
        self.layout = Layout()
        self.story: list[str] = []
        """What the program did and what went wrong (NOTE.md prose)."""
        self.expected: list[Expected] = []
        """What a correct analyzer reports; empty for a healthy job."""
        self._rng = random.Random(seed)
        self._now = _MAX_HOST_OFFSET_NS  # every timestamp lands after BASE_TIME_NS
        self._block: _Block | None = None
        self._groups: dict[str, Group] = {}
        self._frames: dict[tuple[str, str], list[Frame]] = {}
        self._procs = [
            _Process(
                rank,
                capacity,
                offset_ns=self._rng.randrange(-_MAX_HOST_OFFSET_NS, _MAX_HOST_OFFSET_NS + 1),
                salt=self._rng.randrange(1 << 20),
                thread_id=str(0x7F00_0000_0000 + self._rng.randrange(1 << 24) * 4096),
            )
            for rank in range(world_size)
        ]
        self._lag_ns: dict[int, int] = {}
        self._max_lag_ns = 0
        self.world = self.group("0", "default_pg", range(world_size))

    # -- setup ---------------------------------------------------------------------------------

    @property
    def world_size(self) -> int:
        return len(self._procs)

    def group(self, name: str, desc: str, ranks: Iterable[int]) -> Group:
        """Create a process group; each member gives it the next backend id of its process."""
        if name in self._groups:
            raise ValueError(f"group {name!r} already exists")
        members = tuple(sorted(set(ranks)))
        if not members or members[0] < 0 or members[-1] >= self.world_size:
            raise ValueError(f"group {name!r}: ranks {members} outside world of {self.world_size}")
        group = Group(name, desc, members)
        self._groups[name] = group
        for rank in members:
            proc = self._procs[rank]
            proc.pgs[name] = _PgState(pg_id=len(proc.pgs), key=(name, desc))
            proc.groups.append(group)
        return group

    def advance(self, ms: float) -> None:
        """Let simulated time pass (compute between communication calls)."""
        self._now += int(ms * 1_000_000)

    def straggle(self, rank: int, ms: float) -> None:
        """From now on `rank` reaches every op `ms` later than its peers, who wait for it:
        its enqueue times are late, everyone's completion times are late by the same amount."""
        self._lag_ns[rank] = int(ms * 1_000_000)
        self._max_lag_ns = max(self._lag_ns.values())

    def hang(self, ranks: Iterable[int], first_state: State = "scheduled") -> None:
        """From now on, ops the ranks issue never complete: the first one is left in
        `first_state` (the head of the stream may have started), the rest stay scheduled."""
        self._check_state(first_state)
        for rank in ranks:
            self._procs[rank].hang = first_state

    def seq(self, group: Group, rank: int, kind: SeqKind = "collective") -> int:
        """The last sequence id `rank` assigned in `group` (0 before the first op)."""
        pg = self._pg(rank, group)
        return pg.collective_seq if kind == "collective" else pg.p2p_seq

    # -- collectives ---------------------------------------------------------------------------

    def collective(
        self,
        group: Group,
        op: str,
        shapes: Sequence[Sequence[int]],
        *,
        dtype: str = "Float",
        ranks: Iterable[int] | None = None,
        state: State | None = None,
        retired: bool | None = None,
        site: str = "train_step",
        overrides: Mapping[int, Override] | None = None,
    ) -> None:
        """Record collective `op` (name without backend) on `ranks` (default: all members)."""
        block = self._block
        if block is not None and (block.kind != "coalesced" or block.group != group):
            raise ValueError(f"{op} on group {group.name!r} inside an open {block.kind} block")
        members = self._members(group, ranks)
        overrides = overrides or {}
        if unknown := set(overrides) - set(members):
            raise ValueError(f"overrides for ranks {sorted(unknown)} that do not issue {op}")
        in_sizes, out_sizes = collective_sizes(op, shapes, group.size)
        base = _op(f"nccl:{op}", in_sizes, out_sizes, dtype, self._stack(_OP_API[op], site))
        when = self._tick(_numel(in_sizes))
        for rank in members:
            proc = self._procs[rank]
            pg = proc.pgs[group.name]
            o = overrides.get(rank)
            record = base if o is None else self._overridden(group, op, shapes, site, base, o)
            if block is not None:
                # Members share the block's seq id and never complete or retire on their
                # own: the end marker carries the block's state.
                self._join(block, rank, pg, _numel(record.in_sizes))
                self._record(proc, pg, record, "collective", "scheduled", False, when)
                continue
            pg.collective_seq += 1
            if o is not None:
                state_r = o.state or state
                retired_r = retired if o.retired is None else o.retired
                outcome = self._outcome(proc, state_r, retired_r)
            else:
                outcome = self._outcome(proc, state, retired)
            self._record(proc, pg, record, "collective", *outcome, when)

    def _overridden(
        self,
        group: Group,
        op: str,
        shapes: Sequence[Sequence[int]],
        site: str,
        base: _Op,
        o: Override,
    ) -> _Op:
        op = o.op or op
        in_sizes, out_sizes = base.in_sizes, base.out_sizes
        if o.op is not None or o.shapes is not None:
            in_sizes, out_sizes = collective_sizes(op, o.shapes or shapes, group.size)
        return _op(
            f"nccl:{op}",
            in_sizes if o.in_sizes is None else o.in_sizes,
            out_sizes if o.out_sizes is None else o.out_sizes,
            o.dtype or base.dtype,
            self._stack(_OP_API[op], o.site or site),
        )

    def all_reduce(self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]) -> None:
        self.collective(group, "all_reduce", [shape], **opts)

    def allreduce_coalesced(
        self, group: Group, shapes: Sequence[Sequence[int]], **opts: Unpack[OpOptions]
    ) -> None:
        """One entry whose sizes list every tensor."""
        self.collective(group, "allreduce_coalesced", shapes, **opts)

    def barrier(self, group: Group, **opts: Unpack[OpOptions]) -> None:
        self.collective(group, "all_reduce_barrier", [[1]], **opts)

    def broadcast(self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]) -> None:
        self.collective(group, "broadcast", [shape], **opts)

    def broadcast_oop(self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]) -> None:
        self.collective(group, "_broadcast_oop", [shape], **opts)

    def reduce_oop(self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]) -> None:
        self.collective(group, "_reduce_oop", [shape], **opts)

    def all_gather(self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]) -> None:
        """List form: the output is one tensor per member."""
        self.collective(group, "all_gather", [shape], **opts)

    def all_gather_into_tensor(
        self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]
    ) -> None:
        """Recorded as `_all_gather_base`; `shape` is the per-rank input."""
        self.collective(group, "_all_gather_base", [shape], **opts)

    def all_gather_into_tensor_coalesced(
        self, group: Group, shapes: Sequence[Sequence[int]], **opts: Unpack[OpOptions]
    ) -> None:
        self.collective(group, "all_gather_into_tensor_coalesced", shapes, **opts)

    def reduce_scatter(self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]) -> None:
        """List form: the input is one tensor per member; `shape` is the output."""
        self.collective(group, "reduce_scatter", [shape], **opts)

    def reduce_scatter_tensor(
        self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]
    ) -> None:
        """Recorded as `_reduce_scatter_base`; `shape` is the per-rank output."""
        self.collective(group, "_reduce_scatter_base", [shape], **opts)

    def reduce_scatter_tensor_coalesced(
        self, group: Group, shapes: Sequence[Sequence[int]], **opts: Unpack[OpOptions]
    ) -> None:
        self.collective(group, "reduce_scatter_tensor_coalesced", shapes, **opts)

    def all_to_all_single(
        self, group: Group, shape: Sequence[int], **opts: Unpack[OpOptions]
    ) -> None:
        """Even splits: input and output have the same shape."""
        self.collective(group, "all_to_all", [shape], **opts)

    def all_gather_uneven(
        self,
        group: Group,
        shapes: Sequence[Sequence[int]],
        *,
        dtype: str = "Float",
        state: State | None = None,
        site: str = "train_step",
    ) -> None:
        """all_gather of unequal tensors: one `_broadcast_oop` per member (root i moves
        member i's tensor), then an `ALLGATHER_coalesced` end marker."""
        self._uneven(
            group, "_broadcast_oop", "nccl:ALLGATHER_coalesced", shapes, dtype, state, site
        )

    def reduce_scatter_uneven(
        self,
        group: Group,
        shapes: Sequence[Sequence[int]],
        *,
        dtype: str = "Float",
        state: State | None = None,
        site: str = "train_step",
    ) -> None:
        """reduce_scatter of unequal chunks: one `_reduce_oop` per member, then a
        `REDUCE_SCATTER_coalesced` end marker."""
        self._uneven(
            group, "_reduce_oop", "nccl:REDUCE_SCATTER_coalesced", shapes, dtype, state, site
        )

    def _uneven(
        self,
        group: Group,
        op: str,
        marker: str,
        shapes: Sequence[Sequence[int]],
        dtype: str,
        state: State | None,
        site: str,
    ) -> None:
        if len(shapes) != group.size:
            raise ValueError(f"{op}: {len(shapes)} shapes for a group of {group.size}")
        with self.coalesced(group, marker, state=state, site=site):
            for shape in shapes:
                self.collective(group, op, [shape], dtype=dtype, site=site)

    @contextmanager
    def coalesced(
        self,
        group: Group,
        marker: str = "nccl:coalesced",
        *,
        state: State | None = None,
        retired: bool | None = None,
        site: str = "train_step",
        overrides: Mapping[int, Override] | None = None,
    ) -> Iterator[None]:
        """A coalescing block of collectives on `group`; on exit every rank that recorded a
        member records the end `marker`, which carries the block's state."""
        if marker not in COALESCED_MARKERS:
            raise ValueError(f"unknown coalescing end marker {marker!r}")
        block = self._open(_Block("coalesced", group, marker))
        try:
            yield
        except BaseException:
            self._block = None
            raise
        self._close(block, state, retired, site, overrides or {})

    # -- point to point ------------------------------------------------------------------------

    def send(
        self,
        group: Group,
        src: int,
        dst: int,
        shape: Sequence[int],
        *,
        dtype: str = "Float",
        state: State | None = None,
        retired: bool | None = None,
        site: str = "train_step",
    ) -> None:
        """Record `send` on `src` only; the profiling name uses group-local ranks."""
        name = f"nccl:send {group.local_rank(src)}->{group.local_rank(dst)}"
        self._p2p(group, src, name, "send", shape, dtype, state, retired, site)

    def recv(
        self,
        group: Group,
        dst: int,
        src: int | None,
        shape: Sequence[int],
        *,
        dtype: str = "Float",
        state: State | None = None,
        retired: bool | None = None,
        site: str = "train_step",
    ) -> None:
        """Record `recv` on `dst` only; `src=None` receives from any source (`<-?`)."""
        peer = "?" if src is None else str(group.local_rank(src))
        name = f"nccl:recv {group.local_rank(dst)}<-{peer}"
        self._p2p(group, dst, name, "recv", shape, dtype, state, retired, site)

    def send_recv(
        self,
        group: Group,
        src: int,
        dst: int,
        shape: Sequence[int],
        *,
        dtype: str = "Float",
        send_site: str = "train_step",
        recv_site: str = "train_step",
    ) -> None:
        """A matched, completed pair: `src` sends, `dst` receives."""
        self.send(group, src, dst, shape, dtype=dtype, site=send_site)
        self.recv(group, dst, src, shape, dtype=dtype, site=recv_site)

    @contextmanager
    def batch_p2p(
        self,
        group: Group,
        *,
        state: State | None = None,
        retired: bool | None = None,
        site: str = "train_step",
        overrides: Mapping[int, Override] | None = None,
    ) -> Iterator[None]:
        """batch_isend_irecv: sends/recvs issued inside are recorded as members in the order
        each rank issued them; on exit each of those ranks records an `nccl:coalesced` marker
        (is_p2p False) that carries the block's state."""
        block = self._open(_Block("p2p", group, "nccl:coalesced"))
        try:
            yield
        except BaseException:
            self._block = None
            raise
        self._close(block, state, retired, site, overrides or {})

    def _p2p(
        self,
        group: Group,
        rank: int,
        name: str,
        api: str,
        shape: Sequence[int],
        dtype: str,
        state: State | None,
        retired: bool | None,
        site: str,
    ) -> None:
        block = self._block
        if block is not None and (block.kind != "p2p" or block.group != group):
            raise ValueError(f"{name} on group {group.name!r} inside an open {block.kind} block")
        proc = self._procs[rank]
        pg = self._pg(rank, group)
        numel = _numel([list(shape)])
        when = self._tick(numel)
        if block is not None:
            frames = self._stack("batch_isend_irecv", site)
            record = _op(name, [list(shape)], [list(shape)], dtype, frames)
            self._join(block, rank, pg, numel)
            self._record(proc, pg, record, "p2p", "scheduled", False, when)
            return
        pg.p2p_seq += 1
        record = _op(name, [list(shape)], [list(shape)], dtype, self._stack(api, site))
        self._record(proc, pg, record, "p2p", *self._outcome(proc, state, retired), when)

    # -- blocks --------------------------------------------------------------------------------

    def _open(self, block: _Block) -> _Block:
        if self._block is not None:
            raise ValueError("blocks do not nest")
        self._block = block
        return block

    def _join(self, block: _Block, rank: int, pg: _PgState, numel: int) -> None:
        """Add a member on `rank`; its first one bumps the block's sequence counter once."""
        if rank not in block.numel:
            block.numel[rank] = 0
            if block.kind == "coalesced":
                pg.collective_seq += 1
            else:
                pg.p2p_seq += 1
        block.numel[rank] += numel

    def _close(
        self,
        block: _Block,
        state: State | None,
        retired: bool | None,
        site: str,
        overrides: Mapping[int, Override],
    ) -> None:
        """Record the end marker on every rank that recorded a member."""
        self._block = None
        when = self._tick(sum(block.numel.values()))
        kind: _Kind = "collective" if block.kind == "coalesced" else "p2p_marker"
        api = "batch_isend_irecv" if block.kind == "p2p" else _OP_API[block.marker]
        for rank in block.numel:
            proc = self._procs[rank]
            o = overrides.get(rank, Override())
            marker = _op(block.marker, [], [], "", self._stack(api, o.site or site))
            retired_r = retired if o.retired is None else o.retired
            outcome = self._outcome(proc, o.state or state, retired_r)
            self._record(proc, proc.pgs[block.group.name], marker, kind, *outcome, when)

    # -- recording -----------------------------------------------------------------------------

    def _members(self, group: Group, ranks: Iterable[int] | None) -> Sequence[int]:
        if ranks is None:
            return group.ranks
        members = list(ranks)
        for rank in members:
            group.local_rank(rank)
        return members

    def _pg(self, rank: int, group: Group) -> _PgState:
        try:
            return self._procs[rank].pgs[group.name]
        except (IndexError, KeyError):
            raise ValueError(f"rank {rank} is not in group {group.name!r}") from None

    def _check_state(self, state: State) -> None:
        if state == "started" and not self.timing:
            raise ValueError('state "started" needs timing=True')

    def _outcome(
        self, proc: _Process, state: State | None, retired: bool | None
    ) -> tuple[State, bool]:
        """Final state and retired flag: explicit, else the rank's hang, else completed.
        Retired defaults to completed (a timed-out op is retired but not completed)."""
        if state is not None:
            self._check_state(state)
        elif proc.hang is not None:
            state, proc.hang = proc.hang, "scheduled"
        else:
            state = "completed"
        return state, state == "completed" if retired is None else retired

    def _tick(self, numel: int) -> tuple[int, int]:
        """Advance the job clock for one op call; returns (call time, transfer duration) ns."""
        self._now += _MIN_STEP_NS + self._rng.randrange(150_000)
        return self._now, 15_000 + numel // 16

    def _stack(self, api: str, site: str) -> list[Frame]:
        key = (api, site)
        frames = self._frames.get(key)
        if frames is None:
            tail = _SETUP_TAIL if site in _SETUP_SITES else _STEP_TAIL
            raw = (*_API_FRAMES[api], *SITES[site], *tail)
            frames = [{"name": n, "filename": f, "line": line} for n, f, line in raw]
            self._frames[key] = frames
        return frames

    def _record(
        self,
        proc: _Process,
        pg: _PgState,
        op: _Op,
        kind: _Kind,
        state: State,
        retired: bool,
        when: tuple[int, int],
    ) -> None:
        t, duration = when
        pg.op_id += 1
        jitter = (proc.salt + t) % _JITTER_NS
        started: int | None = None
        completed: int | None = None
        if state != "scheduled":
            launch = proc.clock_ns + t + _JITTER_NS + 2_000 + self._max_lag_ns
            if self.timing:
                started = launch + jitter // 4
            if state == "completed":
                completed = launch + duration + 1_000 + 3 * jitter
        # One dict display in torch's key order: this runs once per entry per rank.
        entry: Entry = {
            "frames": op.frames,
            "record_id": proc.next_record_id,
            "pg_id": pg.pg_id,
            "process_group": pg.key,
            "thread_name": "pt_main_thread",
            "thread_id": proc.thread_id,
            "collective_seq_id": pg.collective_seq,
            "p2p_seq_id": pg.p2p_seq,
            "op_id": pg.op_id,
            "profiling_name": op.name,
            "time_created_ns": proc.clock_ns + t + jitter + self._lag_ns.get(proc.rank, 0),
        }
        if not self.stack_traces:
            del entry["frames"]
        if self.timing and state == "completed":
            entry["duration_ms"] = round(duration / 1_000_000, 6)
        entry |= {
            "input_sizes": op.in_sizes,
            "input_dtypes": op.in_dtypes,
            "output_sizes": op.out_sizes,
            "output_dtypes": op.out_dtypes,
            "state": state,
            "time_discovered_started_ns": started,
            "time_discovered_completed_ns": completed,
            "retired": retired,
            "timeout_ms": self.timeout_ms,
            "is_p2p": kind == "p2p",
        }
        proc.entries.append(entry)
        proc.next_record_id += 1
        if kind == "collective":
            # Sequence ids only grow, so the latest one is the maximum.
            pg.last_enqueued = pg.collective_seq
            if state != "scheduled":
                pg.last_started = pg.collective_seq
            if state == "completed":
                pg.last_completed = pg.collective_seq

    # -- output --------------------------------------------------------------------------------

    def dump(self, rank: int) -> dict[str, Any]:
        """Rank `rank`'s dump as the pickle holds it (a private copy, safe to modify)."""
        loaded: dict[str, Any] = pickle.loads(self._pickle_bytes(rank))
        return loaded

    def dump_json(self, rank: int) -> dict[str, Any]:
        """Rank `rank`'s dump as the JSON file holds it."""
        loaded: dict[str, Any] = json.loads(self._json_bytes(rank))
        return loaded

    def write(
        self,
        out_dir: Path,
        *,
        ranks: Iterable[int] | None = None,
        name: Callable[[int], str] | None = None,
        fmt: DumpFormat | None = None,
        skip_ranks: Iterable[int] | None = None,
    ) -> list[Path]:
        """Write one dump file per rank into `out_dir`; unset options come from `layout`."""
        fmt = fmt or self.layout.fmt
        name = name or self.layout.name
        skip = set(self.layout.skip_ranks if skip_ranks is None else skip_ranks)
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for rank in range(self.world_size) if ranks is None else ranks:
            if rank in skip:
                continue
            path = out_dir / name(rank)
            data = self._json_bytes(rank) if fmt == "json" else self._pickle_bytes(rank)
            path.write_bytes(data)
            written.append(path)
        return written

    def note(self, title: str) -> str:
        """NOTE.md text: the story and the expected verdict."""
        lines = [f"# {title}", *self.story]
        if self.expected:
            lines += [f"EXPECTED: {expected.describe()}" for expected in self.expected]
        else:
            lines.append("EXPECTED: no findings.")
        return "\n".join(lines) + "\n"

    def _dump_obj(self, rank: int) -> dict[str, Any]:
        proc = self._procs[rank]
        pg_config = {
            g.name: {"name": g.name, "desc": g.desc, "ranks": str(list(g.ranks))}
            for g in sorted(proc.groups, key=lambda g: g.name)
        }
        pg_status = {
            str(pg.pg_id): {
                "last_enqueued_collective": pg.last_enqueued,
                "last_started_collective": pg.last_started,
                "last_completed_collective": pg.last_completed,
            }
            for pg in sorted(proc.pgs.values(), key=lambda pg: pg.pg_id)
        }
        return {
            "version": self.version,
            "pg_config": pg_config,
            "comm_lib_version": self.nccl_version,
            "pg_status": pg_status,
            "entries": list(proc.entries),
        }

    def _pickle_bytes(self, rank: int) -> bytes:
        return pickle.dumps(self._dump_obj(rank), protocol=PICKLE_PROTOCOL)

    def _json_bytes(self, rank: int) -> bytes:
        """JSON as `_dump_fr_trace_json` writes it: sorted keys, no frames, lists for tuples,
        0 for unset timestamps, strings in pg_status, no "entries" key when empty."""
        obj = self._dump_obj(rank)
        entries = [_json_entry(entry) for entry in obj.pop("entries")]
        obj["pg_status"] = {
            pg_id: {key: str(value) for key, value in status.items()}
            for pg_id, status in obj["pg_status"].items()
        }
        if entries:
            obj["entries"] = entries
        return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _json_entry(entry: Entry) -> Entry:
    out = {key: value for key, value in entry.items() if key != "frames"}
    out["process_group"] = list(entry["process_group"])
    for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
        if out[key] is None:
            out[key] = 0
    return out


# --- scenarios ------------------------------------------------------------------------------

BF16 = "BFloat16"


def healthy() -> Job:
    """8 ranks, TP=2 x DP=2 x PP=2 with 1F1B exchanges, ZeRO-style gradient sync."""
    job = Job(world_size=8, seed=101)
    world = job.world
    # global rank = 4 * pp_stage + 2 * dp_index + tp_index
    tp = [job.group(str(1 + i), "tp", [2 * i, 2 * i + 1]) for i in range(4)]
    last_stage = job.group("5", "last_stage", [4, 5, 6, 7])
    dp = [job.group(str(6 + i), "dp", [r, r + 2]) for i, r in enumerate((0, 1, 4, 5))]
    pp = [job.group(str(10 + i), "pp", [i, i + 4]) for i in range(4)]
    first_tp, last_tp = tp[:2], tp[2:]
    act = [2, 512, 1024]

    def forward(groups: Sequence[Group]) -> None:
        for g in groups:
            job.all_reduce(g, act, dtype=BF16, site="forward")

    def backward(groups: Sequence[Group]) -> None:
        for g in groups:
            job.all_reduce(g, act, dtype=BF16, site="backward")

    job.barrier(world, site="setup")
    job.broadcast(world, [4096], site="setup")
    for g in tp:
        job.all_gather_uneven(g, [[3, 64], [5, 64]], dtype="Long", site="gather_metadata")
    for _step in range(3):
        job.advance(ms=35)
        forward(first_tp)  # micro-batch 0 on stage 0
        for g in pp:
            first, last = g.ranks
            job.send(g, first, last, act, dtype=BF16, site="send_forward")
            job.recv(g, last, first, act, dtype=BF16, site="recv_forward")
        forward(last_tp)  # micro-batch 0 on stage 1
        forward(first_tp)  # micro-batch 1 on stage 0
        backward(last_tp)  # micro-batch 0 on stage 1
        for g in pp:  # 1F1B: activation of mb 1 forward, gradient of mb 0 back
            first, last = g.ranks
            with job.batch_p2p(g, site="exchange"):
                job.send(g, first, last, act, dtype=BF16, site="exchange")
                job.recv(g, first, last, act, dtype=BF16, site="exchange")
                job.recv(g, last, first, act, dtype=BF16, site="exchange")
                job.send(g, last, first, act, dtype=BF16, site="exchange")
        forward(last_tp)
        backward(last_tp)  # micro-batch 1 on stage 1
        for g in pp:
            first, last = g.ranks
            job.send(g, last, first, act, dtype=BF16, site="send_backward")
            job.recv(g, first, last, act, dtype=BF16, site="recv_backward")
        backward(first_tp)
        backward(first_tp)
        for g in dp:
            with job.coalesced(g, site="grad_sync"):
                for shape in ([1024], [1024], [4096]):
                    job.all_reduce(g, shape, site="grad_sync")
            job.reduce_scatter_tensor(g, [262144], site="grad_sync")
        for g in tp:
            job.allreduce_coalesced(g, [[1024], [1024], [256]], site="grad_sync")
        job.all_reduce(last_stage, [1], site="loss")
        job.all_reduce(world, [1], site="grad_norm")
        for g in dp:
            job.all_gather_into_tensor(g, [262144], dtype=BF16, site="param_gather")
    job.advance(ms=20)
    for g in tp:
        job.reduce_scatter_uneven(g, [[3, 64], [5, 64]], site="checkpoint")
    job.barrier(world, site="checkpoint")
    job.story = [
        "8 ranks, TP=2 x DP=2 x PP=2 (tp groups 1-4, last_stage 5, dp 6-9, pp 10-13), 3 steps:",
        "tp all_reduce, pp send/recv and batched 1F1B exchanges, dp coalesced all_reduce, "
        "_reduce_scatter_base/_all_gather_base, uneven all_gather/reduce_scatter blocks; "
        "all completed. pg_id of one group differs across its members.",
    ]
    return job


def p2p_pipeline() -> Job:
    """4-stage pipeline in one pp group; rank 2 never posts its last receive from rank 1."""
    job = Job(world_size=4, seed=102)
    pp = job.group("1", "pp", [0, 1, 2, 3])
    act = [4, 256, 1024]
    micro_batches = 8
    for step in range(3):
        job.advance(ms=25)
        last_step = step == 2
        for mb in range(micro_batches):
            for stage in range(3):
                if last_step and mb == micro_batches - 1 and stage >= 1:
                    break
                job.send(pp, stage, stage + 1, act, dtype=BF16, site="send_forward")
                job.recv(pp, stage + 1, stage, act, dtype=BF16, site="recv_forward")
        if last_step:
            break
        for _mb in range(micro_batches):
            for stage in (3, 2, 1):
                job.send(pp, stage, stage - 1, act, dtype=BF16, site="send_backward")
                job.recv(pp, stage - 1, stage, act, dtype=BF16, site="recv_backward")
        job.broadcast(pp, [1], site="loss")
        job.all_reduce(job.world, [1], site="grad_norm")
    # Last micro-batch of step 3: rank 2's host is stuck (data loader) and never posts the
    # receive, so rank 1's send and rank 3's receive of that activation never complete.
    job.send(pp, 1, 2, act, dtype=BF16, state="scheduled", site="send_forward")
    job.recv(pp, 3, 2, act, dtype=BF16, state="scheduled", site="recv_forward")
    job.story = [
        'Pipeline of 4 stages in ONE group "1" (pp, ranks [0, 1, 2, 3]), 8 micro-batches per '
        "step, send/recv between neighbours (group-local names), pp broadcast + world "
        "all_reduce per step.",
        "In step 3, micro-batch 8, rank 2 never posts recv 2<-1: rank 1's send 1->2 stays "
        "scheduled, and rank 3's recv 3<-2 waits for a send rank 2 never issues. Rank 2's own "
        "ops all completed.",
    ]
    job.expected = [
        Expected(
            "p2p_unmatched",
            (2,),
            pp,
            "p2p",
            job.seq(pp, 1, "p2p"),
            "nccl:send 1->2",
            on_rank=1,
        ),
        Expected(
            "p2p_unmatched",
            (2,),
            pp,
            "p2p",
            job.seq(pp, 3, "p2p"),
            "nccl:recv 3<-2",
            on_rank=3,
            note="consequence of the same hang",
        ),
    ]
    return job


def batched_p2p() -> Job:
    """Ring attention over batch_isend_irecv; even ranks post their receive first."""
    job = Job(world_size=4, seed=103)
    cp = job.group("1", "cp", [0, 1, 2, 3])
    kv = [2, 8, 512, 128]
    for _step in range(3):
        job.advance(ms=15)
        job.all_gather_into_tensor(cp, [1024], dtype=BF16, site="forward")
        for _hop in range(cp.size - 1):
            with job.batch_p2p(cp, site="ring_attention"):
                for rank in cp.ranks:
                    nxt, prv = (rank + 1) % cp.size, (rank - 1) % cp.size
                    if rank % 2 == 0:
                        job.recv(cp, rank, prv, kv, dtype=BF16, site="ring_attention")
                        job.send(cp, rank, nxt, kv, dtype=BF16, site="ring_attention")
                    else:
                        job.send(cp, rank, nxt, kv, dtype=BF16, site="ring_attention")
                        job.recv(cp, rank, prv, kv, dtype=BF16, site="ring_attention")
        job.send_recv(cp, 0, 1, [16], send_site="backward", recv_site="backward")
        job.send_recv(cp, 3, 2, [16], send_site="backward", recv_site="backward")
        job.reduce_scatter_tensor(cp, [1024], site="grad_sync")
        job.all_reduce(job.world, [1], site="grad_norm")
    job.story = [
        'Context-parallel ring attention on group "1" (cp, [0, 1, 2, 3]): 3 batch_isend_irecv '
        "blocks per step, in which ranks 0 and 2 list the recv FIRST, plus unbatched "
        "send/recv pairs and cp/world collectives (collective and p2p seq ids overlap).",
        "Everything completed.",
    ]
    return job


def coalesced() -> Job:
    """FSDP-style coalesced blocks; rank 1's second _broadcast_oop has a different size."""
    job = Job(world_size=4, seed=104)
    fsdp = job.group("1", "fsdp", [0, 1, 2, 3])
    shards = [[1000], [1000], [1000], [996]]
    for _step in range(2):
        job.advance(ms=30)
        job.all_gather_uneven(fsdp, shards, dtype=BF16, site="param_gather")
        job.all_gather_into_tensor_coalesced(fsdp, [[512], [256]], dtype=BF16, site="param_gather")
        job.reduce_scatter_uneven(fsdp, shards, site="grad_sync")
        job.reduce_scatter_tensor_coalesced(fsdp, [[512], [256]], site="grad_sync")
        job.allreduce_coalesced(fsdp, [[256], [128], [64]], site="grad_sync")
        with job.coalesced(fsdp, site="grad_sync"):
            for shape in ([64], [32], [16]):
                job.all_reduce(fsdp, shape, site="grad_sync")
        job.all_reduce(job.world, [1], site="grad_norm")
    job.advance(ms=30)
    # Rank 1 believes its own shard has 1024 elements; the block never completes.
    with job.coalesced(fsdp, "nccl:ALLGATHER_coalesced", state="scheduled", site="param_gather"):
        for member, shard in enumerate(shards):
            job.broadcast_oop(
                fsdp,
                shard,
                dtype=BF16,
                site="param_gather",
                overrides={1: Override(shapes=[[1024]])} if member == 1 else None,
            )
    job.story = [
        'FSDP on group "1" (fsdp, [0, 1, 2, 3]): uneven all_gather (_broadcast_oop x4 + '
        "ALLGATHER_coalesced), uneven reduce_scatter (_reduce_oop x4 + REDUCE_SCATTER_coalesced), "
        "*_coalesced single entries, a _coalescing_manager block of all_reduce + nccl:coalesced.",
        "In the last ALLGATHER_coalesced block rank 1's 2nd _broadcast_oop is [[1024]] where "
        "ranks 0, 2, 3 record [[1000]]; the block hangs (scheduled on all ranks).",
    ]
    job.expected = [
        Expected(
            "size_mismatch",
            (1,),
            fsdp,
            "collective",
            job.seq(fsdp, 0),
            "nccl:_broadcast_oop",
            note="2nd member of the ALLGATHER_coalesced block",
        )
    ]
    return job


def wrapped() -> Job:
    """A long healthy run with a 200-entry buffer; ranks in more groups wrap earlier."""
    job = Job(world_size=4, capacity=200, seed=105)
    tp = [job.group("1", "tp", [0, 1]), job.group("2", "tp", [2, 3])]
    ep = job.group("3", "ep", [0, 1])
    pp = [job.group("4", "pp", [0, 2]), job.group("5", "pp", [1, 3])]
    act = [2, 128, 1024]
    for step in range(56):
        job.advance(ms=20)
        job.all_reduce(tp[0], act, dtype=BF16, site="forward")
        for _ in range(2):  # experts only on stage 0: ranks 0 and 1 record more per step
            job.all_to_all_single(ep, [4096, 64], dtype=BF16, site="expert_dispatch")
        for g in pp:
            job.send_recv(g, g.ranks[0], g.ranks[1], act, dtype=BF16, send_site="send_forward")
        job.all_reduce(tp[1], act, dtype=BF16, site="forward")
        job.all_reduce(tp[1], act, dtype=BF16, site="backward")
        for g in pp:
            if step % 3 == 0:
                first, last = g.ranks
                with job.batch_p2p(g, site="exchange"):
                    job.recv(g, first, last, act, dtype=BF16, site="exchange")
                    job.send(g, last, first, act, dtype=BF16, site="exchange")
            else:
                job.send_recv(g, g.ranks[1], g.ranks[0], act, dtype=BF16, send_site="send_backward")
        job.all_reduce(tp[0], act, dtype=BF16, site="backward")
        if step % 5 == 0:
            for g in tp:
                job.all_gather_uneven(g, [[3, 64], [5, 64]], dtype="Long", site="param_gather")
        job.all_reduce(job.world, [1], site="grad_norm")
    job.story = [
        "4 ranks, 56 steps, capacity 200: tp groups 1-2, ep group 3 (ranks 0, 1 only: extra "
        "all_to_all), pp groups 4-5 (send/recv and batched p2p), uneven all_gather blocks on tp, "
        "world all_reduce; all completed.",
        "Ranks 0 and 1 record more per step, so their buffers begin at later world/pp sequence "
        "ids than ranks 2 and 3 (record_id > 0 everywhere). The oldest entry of ranks 0 and 1 "
        "is the ALLGATHER_coalesced end marker of a tp block whose members were evicted.",
    ]
    return job


def stuck_started() -> Job:
    """timing=True; rank 2's world all_reduce starts and never completes."""
    job = Job(world_size=4, timing=True, seed=106)
    world = job.world
    tp = [job.group("1", "tp", [0, 1]), job.group("2", "tp", [2, 3])]
    act = [2, 256, 1024]
    for step in range(4):
        job.advance(ms=30)
        for g in tp:
            job.all_reduce(g, act, dtype=BF16, site="forward")
        for g in tp:
            job.all_reduce(g, act, dtype=BF16, site="backward")
        if step < 3:
            job.all_reduce(world, [1], site="grad_norm")
            job.all_reduce(world, [1], site="loss")
    # The GPU of rank 2 never finishes the grad-norm all_reduce; its watchdog times it out
    # (retired, not completed). Its host waits on the result and issues nothing more.
    job.all_reduce(
        world, [1], site="grad_norm", overrides={2: Override(state="started", retired=True)}
    )
    k = job.seq(world, 0)
    others = [0, 1, 3]
    job.hang(others, first_state="started")
    job.all_reduce(world, [1], ranks=others, site="loss")
    job.broadcast(world, [1], ranks=others, site="should_stop")
    job.story = [
        "4 ranks, timing enabled, tp groups 1-2 and world all_reduces per step.",
        f"World all_reduce seq {k}: ranks 0, 1, 3 completed it, rank 2's is 'started', never "
        "completes (timed out: retired True). Ranks 0, 1, 3 went on: seq "
        f"{k + 1} all_reduce 'started', seq {k + 2} broadcast 'scheduled'; rank 2 has neither.",
    ]
    job.expected = [
        Expected("state_mismatch", (2,), world, "collective", k, "nccl:all_reduce"),
        Expected(
            "not_joined",
            (2,),
            world,
            "collective",
            k + 1,
            "nccl:all_reduce",
            note=f"also seq {k + 2} nccl:broadcast; consequences of the same hang",
        ),
    ]
    return job


def not_joined() -> Job:
    """8 ranks; rank 5 never issues the world all_reduce the others wait in."""
    job = Job(world_size=8, seed=107)
    world = job.world
    tp = [job.group(str(1 + i), "tp", [2 * i, 2 * i + 1]) for i in range(4)]
    dp = [job.group("5", "dp", [0, 2, 4, 6]), job.group("6", "dp", [1, 3, 5, 7])]
    act = [2, 256, 1024]
    for step in range(3):
        job.advance(ms=30)
        for g in tp:
            job.all_reduce(g, act, dtype=BF16, site="forward")
        for g in tp:
            job.all_reduce(g, act, dtype=BF16, site="backward")
        for g in dp:
            job.reduce_scatter_tensor(g, [65536], site="grad_sync")
        job.all_reduce(world, [1], site="grad_norm")
        for g in dp:
            job.all_gather_into_tensor(g, [65536], dtype=BF16, site="param_gather")
        if step < 2:
            job.all_reduce(world, [4], site="log_metrics")
    # Rank 5's host is stuck (data loader) after its last op; the others wait in log_metrics.
    others = [rank for rank in world.ranks if rank != 5]
    job.all_reduce(world, [4], ranks=others, state="scheduled", site="log_metrics")
    k = job.seq(world, 0)
    job.story = [
        "8 ranks: tp groups 1-4 (pairs), dp groups 5 [0, 2, 4, 6] and 6 [1, 3, 5, 7], "
        "3 steps of tp all_reduce, dp _reduce_scatter_base/_all_gather_base, world all_reduce.",
        f"At world all_reduce seq {k} (log_metrics) rank 5 never issues it; its last op "
        "(dp _all_gather_base) completed. Ranks 0-4, 6, 7 are stuck with it scheduled.",
    ]
    job.expected = [Expected("not_joined", (5,), world, "collective", k, "nccl:all_reduce")]
    return job


def missing_dump() -> Job:
    """Rank 3's dump was never written; ranks 0-2 wait for it in a world all_reduce."""
    job = Job(world_size=4, seed=108)
    world = job.world
    tp = [job.group("1", "tp", [0, 1]), job.group("2", "tp", [2, 3])]
    act = [2, 256, 1024]
    for _step in range(3):
        job.advance(ms=30)
        for g in tp:
            job.all_reduce(g, act, dtype=BF16, site="forward")
            job.all_reduce(g, act, dtype=BF16, site="backward")
        job.all_reduce(world, [1], site="grad_norm")
    job.all_reduce(world, [1], ranks=[0, 1, 2], state="scheduled", site="loss")
    k = job.seq(world, 0)
    job.layout = Layout(skip_ranks=(3,))
    job.story = [
        "4 ranks, tp groups 1-2, 3 steps; rank 3's process died (host OOM): no nccl_trace_rank_3.",
        f"Ranks 0-2 are stuck in world all_reduce seq {k} (scheduled), which rank 3 never "
        "joined; the dumps alone cannot show that.",
    ]
    job.expected = [
        Expected(
            "missing_dump",
            (3,),
            note=f'ranks 0-2 wait in group "0" collective_seq_id {k} nccl:all_reduce',
        )
    ]
    return job


def op_mismatch_json() -> Job:
    """JSON dumps; rank 0 issues all_gather_into_tensor where the others all_reduce."""
    job = Job(world_size=4, seed=109)
    world = job.world
    tp = [job.group("1", "tp", [0, 1]), job.group("2", "tp", [2, 3])]
    act = [2, 256, 1024]
    for step in range(3):
        job.advance(ms=30)
        for g in tp:
            job.all_reduce(g, act, dtype=BF16, site="forward")
            job.all_reduce(g, act, dtype=BF16, site="backward")
        job.all_reduce(world, [1], site="grad_norm")
        if step < 2:
            job.all_reduce(world, [1024], site="log_metrics")
    job.all_reduce(
        world,
        [1024],
        state="scheduled",
        site="log_metrics",
        overrides={0: Override(op="_all_gather_base", site="gather_metrics")},
    )
    k = job.seq(world, 0)
    job.layout = Layout(fmt="json", name=lambda rank: f"rank_{rank}.json")
    job.story = [
        "JSON dumps (rank_<N>.json), 4 ranks, tp groups 1-2, 3 steps with world all_reduces.",
        f"At world seq {k} rank 0 calls all_gather_into_tensor (nccl:_all_gather_base, "
        "[[1024]] -> [[4096]]) while ranks 1-3 call all_reduce [[1024]]; all hang, scheduled.",
    ]
    job.expected = [
        Expected(
            "op_type_mismatch",
            (0,),
            world,
            "collective",
            k,
            "nccl:_all_gather_base",
            note="ranks 1-3 issued nccl:all_reduce",
        )
    ]
    return job


SCENARIOS: dict[str, Callable[[], Job]] = {
    "nccl_healthy": healthy,
    "nccl_p2p_pipeline": p2p_pipeline,
    "nccl_batched_p2p": batched_p2p,
    "nccl_coalesced": coalesced,
    "nccl_wrapped": wrapped,
    "nccl_stuck_started": stuck_started,
    "nccl_not_joined": not_joined,
    "nccl_missing_dump": missing_dump,
    "nccl_op_mismatch_json": op_mismatch_json,
}


def wait_chain() -> Job:
    """TP waits on PP waits on one rank that is busy elsewhere."""
    job = Job(world_size=4, seed=110)
    world = job.world
    tp = [job.group("1", "tp", [0, 1]), job.group("2", "tp", [2, 3])]
    pp = job.group("3", "pp", [1, 3])
    act = [2, 256, 1024]
    for _step in range(3):
        job.advance(ms=30)
        for g in tp:
            job.all_reduce(g, act, dtype=BF16, site="forward")
        job.send_recv(pp, 3, 1, act, dtype=BF16, send_site="backward", recv_site="forward")
        job.all_reduce(world, [1], site="grad_norm")
    # Rank 3 (stage 1) goes on computing and never sends; rank 1 waits in its recv before its
    # TP all_reduce, so rank 0 waits in the TP all_reduce for rank 1; rank 2 waits for rank 3.
    job.recv(pp, 1, 3, act, dtype=BF16, state="scheduled", site="forward")
    job.all_reduce(tp[0], act, dtype=BF16, ranks=[0], state="scheduled", site="forward")
    job.all_reduce(tp[1], act, dtype=BF16, ranks=[2], state="scheduled", site="forward")
    job.story = [
        "4 ranks: tp groups 1 [0, 1] and 2 [2, 3], pp group 3 [1, 3] (rank 3 sends to rank 1).",
        "In step 4 rank 3 never sends: rank 1 waits in its pp recv, so it never issues its tp "
        "all_reduce, in which rank 0 waits; rank 2 waits in tp all_reduce for rank 3.",
        "EXPECTED ROOT CAUSE: not_joined, root rank 3, wait chain 0 (tp) -> 1 (pp) -> 3.",
    ]
    job.expected = [Expected("p2p_unmatched", (3,), pp, "p2p", job.seq(pp, 1, "p2p"), on_rank=1)]
    return job


def deadlock() -> Job:
    """Two groups of the same ranks used in opposite orders: a cross-group cycle."""
    job = Job(world_size=2, seed=111)
    a = job.group("1", "dp_shard", [0, 1])
    b = job.group("2", "dp_replicate", [0, 1])
    for _step in range(3):
        job.advance(ms=30)
        job.all_reduce(a, [4096], site="grad_sync")
        job.all_reduce(b, [4096], site="grad_sync")
    # Rank 1 takes another code path that syncs b before a; both hosts block on the first.
    job.all_reduce(a, [4096], ranks=[0], state="scheduled", site="grad_sync")
    job.all_reduce(b, [4096], ranks=[1], state="scheduled", site="param_gather")
    job.story = [
        "2 ranks, groups 1 (dp_shard) and 2 (dp_replicate) over the same ranks, 3 healthy steps.",
        "In step 4 rank 0 all_reduces on group 1 first, rank 1 on group 2 first; each host "
        "blocks on its first op, which the other never issues.",
        "EXPECTED ROOT CAUSE: deadlock, ranks 0 and 1 (cycle 0 -> 1 -> 0).",
    ]
    job.expected = [
        Expected("not_joined", (1,), a, "collective", job.seq(a, 0)),
        Expected("not_joined", (0,), b, "collective", job.seq(b, 1)),
    ]
    return job


def all_stuck() -> Job:
    """Every rank issued the same all_reduce and none completed it: a network-level hang."""
    job = Job(world_size=4, timing=True, seed=112)
    world = job.world
    for _step in range(3):
        job.advance(ms=30)
        job.all_reduce(world, [1 << 20], dtype=BF16, site="grad_sync")
    job.all_reduce(world, [1 << 20], dtype=BF16, state="started", retired=False, site="grad_sync")
    k = job.seq(world, 0)
    job.story = [
        "4 ranks, timing enabled, world all_reduces.",
        f"All four ranks issued world all_reduce seq {k}; it started everywhere and completed "
        "nowhere (an NCCL/network hang).",
        "EXPECTED ROOT CAUSE: stuck_collective, ranks 0-3, group 0 seq "
        f"{k}; no finding (all ranks agree).",
    ]
    return job


def straggler() -> Job:
    """Rank 6 reaches every collective ~200 ms after the others; nothing hangs."""
    job = Job(world_size=8, seed=113)
    world = job.world
    tp = [job.group(str(1 + i), "tp", [2 * i, 2 * i + 1]) for i in range(4)]
    job.straggle(6, ms=200)
    for _step in range(10):
        job.advance(ms=300)
        for g in tp:
            job.all_reduce(g, [2, 256, 1024], dtype=BF16, site="forward")
        job.all_reduce(world, [1], site="grad_norm")
    job.story = [
        "8 ranks, tp pairs and world all_reduces, 10 steps, all completed.",
        "Rank 6 reaches every collective about 200 ms after its peers (slow host); they wait.",
        "EXPECTED ROOT CAUSE: straggler, rank 6; no finding.",
    ]
    return job


def dead_rank() -> Job:
    """Rank 3 stops recording long before the others start waiting for it."""
    job = Job(world_size=4, seed=114)
    world = job.world
    tp = [job.group("1", "tp", [0, 1]), job.group("2", "tp", [2, 3])]
    for _step in range(3):
        job.advance(ms=30)
        for g in tp:
            job.all_reduce(g, [2, 256, 1024], dtype=BF16, site="forward")
        job.all_reduce(world, [1], site="grad_norm")
    job.advance(ms=600_000)  # rank 3's process is gone; the others run on for 10 minutes
    job.all_reduce(tp[0], [2, 256, 1024], dtype=BF16, ranks=[0, 1], site="forward")
    job.all_reduce(tp[1], [2, 256, 1024], dtype=BF16, ranks=[2], state="scheduled", site="forward")
    job.all_reduce(world, [1], ranks=[0, 1], state="scheduled", site="grad_norm")
    k = job.seq(world, 0)
    job.story = [
        "4 ranks, tp groups 1-2; rank 3's host froze after step 3 (its dump was taken later).",
        "Its buffer ends 10 minutes before the ops ranks 0-2 wait in (tp all_reduce on rank 2, "
        f"world all_reduce seq {k} on ranks 0, 1).",
        "EXPECTED ROOT CAUSE: dead_rank, rank 3.",
    ]
    job.expected = [Expected("not_joined", (2, 3), world, "collective", k)]
    return job


SCENARIOS |= {
    "nccl_wait_chain": wait_chain,
    "nccl_deadlock": deadlock,
    "nccl_all_stuck": all_stuck,
    "nccl_straggler": straggler,
    "nccl_dead_rank": dead_rank,
}


def write_scenario(name: str, out_dir: Path) -> None:
    """Build scenario `name` and write its dump files and NOTE.md directly into `out_dir`."""
    job = SCENARIOS[name]()
    job.write(out_dir)
    (out_dir / "NOTE.md").write_text(job.note(name), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.nccl_scenarios",
        description="Write the NCCL-format Flight Recorder sample dump sets (nccl_*).",
    )
    parser.add_argument("--out", type=Path, default=Path("sample_dumps"), help="parent directory")
    parser.add_argument("--only", choices=sorted(SCENARIOS), help="write just this set")
    args = parser.parse_args(argv)
    names = [args.only] if args.only else list(SCENARIOS)
    for name in names:
        target = args.out / name
        if target.exists():
            shutil.rmtree(target)
        write_scenario(name, target)
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
