"""The training program: per rank, the ordered list of communication ops the rank calls.

An op (a *unit*: what the engine schedules as one piece of work on the stream) is one of

- `COLL`: a collective on one of the rank's groups, recorded as one entry;
- `SEND` / `RECV`: an unbatched point-to-point op (group-local peer), one entry;
- `BATCH`: a `batch_isend_irecv` block of sends/recvs, recorded as its members then an
  `nccl:coalesced` end marker whose `is_p2p` is False;
- `COALESCED`: a coalescing block of collectives (`_coalescing_manager`, uneven all_gather /
  reduce_scatter), recorded as its members then an end marker.

Each unit also carries what the engine needs: the host CPU time spent before enqueueing it,
the device compute queued before it on the stream, its communication time once every
participant arrived, and whether the host waits for its completion (`sync`, e.g. `loss.item()`).

A `Program` is a set of flat, parallel lists (no per-op objects), role-relative: it names a
group by its slot (a `Role` in a grid layout) and a p2p peer by its group-local rank, so every
rank of one pipeline stage runs the same program and ranks share it. `Job.program(rank)` binds
it to the rank. What gets recorded (op name, sizes, dtypes, torch API) is a `Template`, interned
in the job's `Catalog`; the call site is a key of `sites.SITES`.

`build_program(spec, layout, stage, catalog)` writes a Megatron-style step: a 1F1B pipeline
over micro-batches (unbatched send/recv in warm-up and cool-down, `batch_isend_irecv` exchanges
in the steady state), TP all_reduce in forward and backward, occasional TP all_gather (list and
`_all_gather_base`) and uneven all_gather / reduce_scatter blocks, DP gradient buckets (a
coalesced all_reduce block and `allreduce_coalesced`), the parameter all-gather of a distributed
optimizer, world all_reduces of the gradient norm and the loss (both synchronizing the host),
an occasional barrier and, optionally, an evaluation pass at the end. A pure function of its
arguments: cheap, deterministic. `Builder` is the same machinery for any job (custom.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Literal

from .layout import Layout, Role

Shape = tuple[int, ...]
Sizes = tuple[Shape, ...]
Backend = Literal["nccl", "gloo"]


class Kind(IntEnum):
    """A program unit's kind: collective, send, recv, batch_isend_irecv block, coalesced block."""

    COLL = 0
    SEND = 1
    RECV = 2
    BATCH = 3
    COALESCED = 4


P2P_KINDS = frozenset({Kind.SEND, Kind.RECV, Kind.BATCH})
COLL_KINDS = frozenset({Kind.COLL, Kind.COALESCED})

BF16, F32, I64 = "BFloat16", "Float", "Long"

# --- what an op records ---------------------------------------------------------------------

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


def _stacked(shape: Shape, group_size: int) -> Shape:
    """`group_size` copies of `shape` concatenated along dim 0."""
    return (shape[0] * group_size, *shape[1:]) if shape else (group_size,)


def collective_sizes(op: str, shapes: Sequence[Shape], group_size: int) -> tuple[Sizes, Sizes]:
    """Input and output sizes ProcessGroupNCCL records for `op` on a group of `group_size`.

    `shapes` are the per-rank tensors: the input of a gather, the output of a scatter, the
    tensor itself otherwise.
    """
    per_rank = tuple(tuple(shape) for shape in shapes)
    if op in _SAME_SIZE_OPS:
        return per_rank, per_rank
    if op == "all_gather":
        return per_rank, tuple(per_rank[0] for _ in range(group_size))
    if op in ("_all_gather_base", "all_gather_into_tensor_coalesced"):
        return per_rank, tuple(_stacked(shape, group_size) for shape in per_rank)
    if op == "reduce_scatter":
        return tuple(per_rank[0] for _ in range(group_size)), per_rank
    if op in ("_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
        return tuple(_stacked(shape, group_size) for shape in per_rank), per_rank
    raise ValueError(f"no size rule for op {op!r}")


OP_API: dict[str, str] = {
    "all_reduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "all_gather_into_tensor_coalesced": "_coalescing_manager",
    "reduce_scatter_tensor_coalesced": "_coalescing_manager",
    "all_to_all": "all_to_all_single",
    "monitored_barrier": "monitored_barrier",
    "all_reduce_barrier": "barrier",
    "barrier": "barrier",
    "broadcast": "broadcast",
    "_broadcast_oop": "all_gather",
    "_reduce_oop": "reduce_scatter",
    "all_gather": "all_gather",
    "_all_gather_base": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "send": "send",
    "recv": "recv",
    "coalesced": "_coalescing_manager",
    "ALLGATHER_coalesced": "all_gather",
    "REDUCE_SCATTER_coalesced": "reduce_scatter",
}
"""The torch.distributed API whose frames an op's entry records."""


@dataclass(frozen=True)
class Template:
    """What one entry records about its op, apart from counters, times and state."""

    op: str
    """Op name without the backend prefix ("all_reduce", "send", "coalesced", ...)."""
    in_sizes: Sizes
    out_sizes: Sizes
    in_dtypes: tuple[str, ...]
    out_dtypes: tuple[str, ...]
    api: str
    """torch.distributed entry point (selects the API frames)."""
    match: str | None = None
    """What must agree across the participants instead of the records, for an op whose records
    legitimately differ per rank: the logical call (an uneven `all_to_all_single`'s split
    matrix, a `monitored_barrier`'s root and non-root sides). None: the records must agree."""
    seq_ids: int = 1
    """Collective sequence ids the op takes (gloo's `monitored_barrier`: 2)."""
    op_ids: int = 1
    """op_ids the op takes (gloo's `monitored_barrier`: its sends and receives)."""
    recorded: bool = True
    """Whether the op has an entry (gloo's `monitored_barrier` has none)."""

    @property
    def signature(self) -> tuple[str, Sizes, Sizes, tuple[str, ...], tuple[str, ...]]:
        """What the op records apart from counters, times and state (not the call site)."""
        return (self.op, self.in_sizes, self.out_sizes, self.in_dtypes, self.out_dtypes)

    @property
    def agreement(self) -> object:
        """What must agree across the participants of a collective: the signature, or for an
        op whose records differ per rank, its op, dtypes and `match`."""
        if self.match is None:
            return self.signature
        return ("match", self.op, self.match, self.in_dtypes, self.out_dtypes)

    def numel(self) -> int:
        """The number of elements the op's inputs hold (its outputs' when it has no inputs)."""
        total = 0
        for shape in self.in_sizes if self.in_sizes else self.out_sizes:
            count = 1
            for dim in shape:
                count *= dim
            total += count
        return total


def template(
    op: str,
    shapes: Sequence[Shape],
    group_size: int,
    dtype: str,
    backend: Backend = "nccl",
    api: str | None = None,
) -> Template:
    """The template of collective or p2p `op` on per-rank tensors `shapes`, as `backend`
    records it. gloo records barrier as "barrier" with no sizes, all_gather (both forms) with
    the output as one [group_size, *shape] tensor, _reduce_scatter_base as all_reduce of the
    input, and allreduce_coalesced as all_reduce (fr-format.md section 6)."""
    api = api or OP_API[op]
    if backend == "gloo":
        if op == "all_reduce_barrier":
            return Template("barrier", (), (), (), (), api)
        if op in ("all_gather", "_all_gather_base"):
            shape = tuple(shapes[0])
            return Template(
                "all_gather", (shape,), ((group_size, *shape),), (dtype,), (dtype,), api
            )
        if op == "_reduce_scatter_base":
            stacked = _stacked(tuple(shapes[0]), group_size)
            return Template("all_reduce", (stacked,), (stacked,), (dtype,), (dtype,), api)
        if op == "allreduce_coalesced":
            sizes = tuple(tuple(s) for s in shapes)
            return Template(
                "all_reduce", sizes, sizes, (dtype,) * len(sizes), (dtype,) * len(sizes), api
            )
    in_sizes, out_sizes = collective_sizes(op, shapes, group_size)
    return Template(
        op, in_sizes, out_sizes, (dtype,) * len(in_sizes), (dtype,) * len(out_sizes), api
    )


FUSED_OPS: dict[str, str] = {
    "all_gather_into_tensor": "all_gather_into_tensor_coalesced",
    "reduce_scatter_tensor": "reduce_scatter_tensor_coalesced",
    "all_reduce": "allreduce_coalesced",
}
"""torch API called N times in a `_coalescing_manager` block -> the one entry ProcessGroupNCCL
records for the block (before its `coalesced` end marker)."""


def gloo_gather_block(shapes: Sequence[Shape], dtype: str) -> Template:
    """N `all_gather_into_tensor` in a `_coalescing_manager` block as gloo records them: one
    `all_gather` entry, input every tensor's shape, output [N, *first shape] (torch 2.13)."""
    ins = tuple(tuple(s) for s in shapes)
    return Template(
        "all_gather", ins, ((len(ins), *ins[0]),), (dtype,) * len(ins), (dtype,),
        "_coalescing_manager",
    )  # fmt: skip


def monitored_barrier(group_size: int, root: bool) -> Template:
    """gloo's `monitored_barrier`: no entry; two collective seq ids on every caller; op_ids for
    its sends and receives (the root receives from and answers every other member)."""
    return Template(
        "monitored_barrier", (), (), (), (), "monitored_barrier",
        match="monitored_barrier", seq_ids=2,
        op_ids=2 * max(1, group_size - 1) if root else 2, recorded=False,
    )  # fmt: skip


@dataclass(frozen=True)
class Issue:
    """How the host issues an op, beyond `sync` (gloo; NCCL's host never waits on these)."""

    nowait: bool = False
    """`async_op=True`: the host does not wait for it (gloo waits for every other op)."""
    tag: str | None = None
    """A name for the op, for a later `Builder.wait` (its `work.wait()`)."""


NO_ISSUE = Issue()


def marker_template(op: str, api: str) -> Template:
    """A coalescing end marker: empty sizes and dtypes."""
    return Template(op, (), (), (), (), api)


@dataclass(frozen=True)
class Block:
    """The members of a BATCH or COALESCED unit, and its end marker."""

    members: tuple[int, ...]
    """Template ids, in the order the rank issued them."""
    peers: tuple[int, ...]
    """Group-local peer of each member (BATCH); -1 for collective members."""
    marker: int
    """Template id of the end marker."""
    fused: bool = False
    """A `*_coalesced` fast path (`_coalescing_manager` of one kind of op, NCCL): one member
    entry listing every tensor, then the marker; both share one op_id and carry the state."""


class Catalog:
    """A job's interned templates, signatures and blocks (ids are only meaningful inside one
    process; they never reach a file)."""

    def __init__(self) -> None:
        self.templates: list[Template] = []
        self.sigs: list[int] = []
        """Collective signature id of each template."""
        self.p2p_sigs: list[int] = []
        """Point-to-point signature id (sizes and dtypes) of each template."""
        self.blocks: list[Block] = []
        self.block_sigs: list[int] = []
        self._tid: dict[Template, int] = {}
        self._sid: dict[object, int] = {}
        self._bid: dict[Block, int] = {}

    def _sig(self, key: object) -> int:
        sid = self._sid.get(key)
        if sid is None:
            sid = self._sid[key] = len(self._sid)
        return sid

    def add(self, t: Template) -> int:
        """Intern template `t` (and its signatures); returns its id."""
        tid = self._tid.get(t)
        if tid is None:
            tid = self._tid[t] = len(self.templates)
            self.templates.append(t)
            self.sigs.append(self._sig(t.agreement))
            self.p2p_sigs.append(self._sig(("p2p", t.in_sizes, t.in_dtypes)))
        return tid

    def add_block(self, block: Block) -> int:
        """Intern `block` and its signature; returns its id."""
        bid = self._bid.get(block)
        if bid is None:
            bid = self._bid[block] = len(self.blocks)
            self.blocks.append(block)
            key = ("block", tuple(self.sigs[m] for m in block.members), self.sigs[block.marker])
            self.block_sigs.append(self._sig(key))
        return bid


# --- the program ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Host and device costs of the simulated model, in microseconds."""

    fwd_us: int = 3_000
    """Device time of one micro-batch's forward pass on one stage."""
    bwd_us: int = 6_000
    host_fwd_us: int = 400
    """Host time to launch one micro-batch's forward kernels."""
    host_bwd_us: int = 500
    launch_us: int = 30
    """Host time to enqueue one communication op (per recorded entry: `entry_us`)."""
    entry_us: int = 3
    data_us: int = 800
    """Host time at the start of a step (data loading)."""
    optimizer_us: int = 2_000
    """Device time of the optimizer step (host: a third of it)."""


@dataclass(frozen=True)
class ProgramSpec:
    """Which training program every rank runs."""

    steps: int = 2
    micro_batches: int = 4
    backend: Backend = "nccl"
    setup: bool = True
    """Barrier, parameter broadcast and (TP) shard-size gather before the first step."""
    batched_p2p: bool = True
    """1F1B steady-state exchanges as batch_isend_irecv (else unbatched, parity-ordered)."""
    batch_p2p_sync: bool = False
    """Megatron's `batch_p2p_sync` (on by default there): `torch.cuda.synchronize()` after each
    batch_isend_irecv, so the host waits until the exchange (and all before it) completed."""
    tp_gather_every: int = 2
    """Every n-th step, micro-batch 0's forward gathers over TP (0: never)."""
    uneven_every: int = 2
    """Every n-th step, uneven reduce_scatter + all_gather blocks on TP (0: never; nccl)."""
    dp_coalesced: bool = True
    """DP gradient buckets as one coalesced all_reduce block (nccl), else one per bucket."""
    dp_allreduce_coalesced: bool = True
    param_gather: bool = True
    barrier_every: int = 0
    """Every n-th step ends with a world barrier (0: never)."""
    seq_len: int = 4096
    hidden: int = 1024
    timing: Timing = Timing()
    eval_micro_batches: int = 0
    """After the last step, an evaluation pass (Megatron's `evaluate`): a forward-only pipeline
    over this many micro-batches (recv_forward, TP all_reduces, send_forward), then a world
    all_reduce of the evaluation loss that the host waits for (0: no evaluation)."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.micro_batches < 1:
            raise ValueError("steps and micro_batches must be >= 1")


@dataclass
class Program:
    """One rank's (or one stage's) ordered ops as parallel lists.

    Raw fields are set by the builder (and edited by faults); `finalize` derives the rest.
    """

    catalog: Catalog
    backend: Backend
    group_sizes: tuple[int, ...]
    """Size of the rank's group per slot (0 where it has none); a grid has one slot per role."""
    kind: list[int]
    role: list[int]
    item: list[int]
    """Template id (COLL, SEND, RECV) or block id (BATCH, COALESCED)."""
    peer: list[int]
    """Group-local peer of a SEND/RECV; -1 otherwise."""
    site: list[str]
    cpu: list[int]
    """Host ns before enqueueing (after the previous enqueue or host wait)."""
    dev: list[int]
    """Device compute ns queued on the stream before the op."""
    dur: list[int]
    """Communication ns once every participant arrived."""
    sync: list[bool]
    nowait: list[bool]
    """gloo: the host does not wait for the op (`async_op=True`); NCCL never waits unless
    `sync`."""
    after: list[int]
    """gloo: the unit the host waits for before this one (before the compute preceding it):
    the `work.wait()` of an earlier async op (FSDP waits for a layer's gathered parameters
    after it issued the next layer's gather); -1: none."""
    tolerant: list[bool]
    """Completes even when the participants' records disagree (garbage result)."""
    step: list[int]
    """Training step of the op (-1: setup)."""
    # derived by finalize()
    cseq: list[int]
    pseq: list[int]
    opid: list[int]
    """op_id of the unit's first entry (gloo: of its first op)."""
    nent: list[int]
    """Entries the unit records."""
    shared: list[bool]
    """The unit's entries share one op_id and the unit's state (a fused block)."""
    ecum: list[int]
    """Entries recorded before each unit (length n + 1)."""
    sig: list[int]
    """Collective signature (COLL, COALESCED); -1 for p2p units."""
    mstart: list[int]
    """P2P members of unit i: mstart[i] .. mstart[i + 1] in the m* lists (length n + 1)."""
    msend: list[bool]
    mpeer: list[int]
    mchan: list[int]
    """n: this member is the n-th (from 1) op of its direction and peer on the group."""
    msig: list[int]
    cache: dict[object, object] = field(default_factory=dict, repr=False, compare=False)
    """Derived per-program data of other modules (the recorder's static entry fields)."""

    @classmethod
    def empty(cls, catalog: Catalog, backend: Backend, group_sizes: tuple[int, ...]) -> Program:
        """A program with no units, for `backend` and groups of `group_sizes`."""
        return cls(
            catalog, backend, group_sizes,
            [], [], [], [], [], [], [], [], [], [], [], [], [],
            [], [], [], [], [], [], [], [], [], [], [], [],
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.kind)

    RAW = (
        "kind", "role", "item", "peer", "site", "cpu", "dev", "dur", "sync", "nowait", "after",
        "tolerant", "step",
    )  # fmt: skip

    def copy(self) -> Program:
        """An independent copy (faults edit the copy of one rank's program)."""
        new = Program.empty(self.catalog, self.backend, self.group_sizes)
        for name in self.RAW:
            setattr(new, name, list(getattr(self, name)))
        return new.finalize()

    def insert(
        self,
        index: int,
        kind: Kind,
        role: int,
        item: int,
        peer: int,
        site: str,
        cpu: int,
        dev: int,
        dur: int,
        sync: bool,
        step: int,
        nowait: bool = False,
        after: int = -1,
    ) -> None:
        """Insert a raw unit before `index` (call `finalize` afterwards)."""
        if index < len(self.kind):  # waits for the units it moves follow them
            self.after = [a + 1 if a >= index else a for a in self.after]
        values = (
            int(kind), int(role), item, peer, site, cpu, dev, dur, sync, nowait, after, False,
            step,
        )  # fmt: skip
        for name, value in zip(self.RAW, values, strict=True):
            getattr(self, name).insert(index, value)

    def delete(self, index: int) -> None:
        """Remove unit `index` (call `finalize` afterwards). A wait for it goes with it."""
        for name in self.RAW:
            del getattr(self, name)[index]
        self.after = [-1 if a == index else a - 1 if a > index else a for a in self.after]

    def swap(self, index: int) -> None:
        """Units `index` and `index + 1` trade places; the host and device time between ops
        stay where they were (call `finalize` afterwards)."""
        for name in self.RAW:
            if name not in ("cpu", "dev"):
                column = getattr(self, name)
                column[index], column[index + 1] = column[index + 1], column[index]
        moved = {index: index + 1, index + 1: index}
        self.after = [moved.get(a, a) for a in self.after]

    def finalize(self) -> Program:
        """Derive sequence ids, op ids, entry counts, signatures and p2p channels."""
        self.cache.clear()
        cat, gloo = self.catalog, self.backend == "gloo"
        n = len(self.kind)
        slots = len(self.group_sizes)
        coll = [0] * slots
        p2p = [0] * slots
        ops = [0] * slots
        chans: dict[tuple[int, bool, int], int] = {}
        cseq, pseq, opid, nent, sig = [0] * n, [0] * n, [0] * n, [0] * n, [-1] * n
        shared = [False] * n
        ecum = [0] * (n + 1)
        mstart = [0] * (n + 1)
        msend: list[bool] = []
        mpeer: list[int] = []
        mchan: list[int] = []
        msig: list[int] = []
        total = 0
        for i in range(n):
            k, role, item = self.kind[i], self.role[i], self.item[i]
            mstart[i] = len(msend)
            seq = coll[role] + 1
            if k == Kind.COLL:
                t = cat.templates[item]
                coll[role] += t.seq_ids
                count, entries = t.op_ids, 1 if t.recorded else 0
                sig[i] = cat.sigs[item]
            elif k == Kind.COALESCED:
                coll[role] += 1
                block = cat.blocks[item]
                entries = len(block.members) + 1
                count = 1 if block.fused else entries
                shared[i] = block.fused
                sig[i] = cat.block_sigs[item]
            else:
                if k == Kind.BATCH:
                    block = cat.blocks[item]
                    members = list(zip(block.members, block.peers, strict=True))
                    count = len(members) + (0 if gloo else 1)
                else:
                    members = [(item, self.peer[i])]
                    count = 1
                entries = 0 if gloo else len(members) + (1 if k == Kind.BATCH else 0)
                seq = coll[role]
                if not gloo:
                    p2p[role] += 1
                for tid, peer in members:
                    is_send = cat.templates[tid].op == "send"
                    key = (role, is_send, peer)
                    chans[key] = chans.get(key, 0) + 1
                    msend.append(is_send)
                    mpeer.append(peer)
                    mchan.append(chans[key])
                    msig.append(cat.p2p_sigs[tid])
            cseq[i], pseq[i], opid[i], nent[i] = seq, p2p[role], ops[role] + 1, entries
            ops[role] += count
            total += entries
            ecum[i + 1] = total
        mstart[n] = len(msend)
        self.cseq, self.pseq, self.opid, self.nent, self.ecum, self.sig = (
            cseq,
            pseq,
            opid,
            nent,
            ecum,
            sig,
        )
        self.shared = shared
        self.mstart, self.msend, self.mpeer, self.mchan, self.msig = (
            mstart,
            msend,
            mpeer,
            mchan,
            msig,
        )
        return self

    # -- views used by faults, truth and the campaign --------------------------------------

    def seq_of(self, i: int) -> int:
        """The unit's own sequence id: collective seq for collectives, p2p seq otherwise."""
        return self.cseq[i] if self.kind[i] in COLL_KINDS else self.pseq[i]

    def templates_of(self, i: int) -> list[Template]:
        """The templates of the unit's entries (members, then the marker)."""
        cat, k, item = self.catalog, self.kind[i], self.item[i]
        if k in (Kind.BATCH, Kind.COALESCED):
            block = cat.blocks[item]
            return [cat.templates[m] for m in block.members] + [cat.templates[block.marker]]
        return [cat.templates[item]]

    def record_key(self, i: int) -> tuple[object, ...]:
        """What the unit's entries record apart from counters, times and state: op names,
        sizes, dtypes and p2p peers (used to find where two programs diverge)."""
        k = self.kind[i]
        peers: tuple[int, ...] = ()
        if k == Kind.BATCH:
            peers = self.catalog.blocks[self.item[i]].peers
        elif k in (Kind.SEND, Kind.RECV):
            peers = (self.peer[i],)
        return (k, peers, tuple(t.signature for t in self.templates_of(i)))

    def op_name(self, i: int, member: int = 0) -> str:
        """Name of the unit's op (for blocks: of member `member`), without peers."""
        return self.templates_of(i)[member].op

    def units_on(self, role: int, collective: bool) -> list[int]:
        """Indices of the units on `role` of one seq namespace, in program order."""
        kinds = COLL_KINDS if collective else P2P_KINDS
        return [i for i in range(len(self.kind)) if self.role[i] == role and self.kind[i] in kinds]

    def step_start(self, step: int) -> int:
        """Index of the first unit of `step` (len(self) if there is none)."""
        for i, s in enumerate(self.step):
            if s >= step:
                return i
        return len(self.step)


# --- the Megatron-style builder -------------------------------------------------------------


ROLE_GBPS: tuple[int, ...] = (10, 150, 20, 20)
"""Bandwidth (GB/s) of a grid's world, TP, DP and PP groups."""


class Builder:
    """Appends units to a Program; accumulates host and device time between ops.

    `group_sizes` and `gbps` give, per slot, the size of the rank's group (0: none) and its
    bandwidth in GB/s. `build_program` drives it for a grid; `custom.CustomJob` for a
    free-form job.
    """

    def __init__(
        self,
        catalog: Catalog,
        backend: Backend,
        timing: Timing,
        group_sizes: tuple[int, ...],
        gbps: tuple[int, ...],
    ) -> None:
        self.catalog = catalog
        self.backend: Backend = backend
        self.timing = timing
        self.group_sizes = group_sizes
        self.gbps = gbps
        self.program = Program.empty(catalog, backend, group_sizes)
        self.step = -1
        self.pending_cpu = 0
        self.pending_dev = 0
        self._block: tuple[Kind, int, str, list[int], list[int], str] | None = None
        self._tags: dict[str, int] = {}
        self._after = -1

    def wait(self, tag: str) -> None:
        """gloo: the host waits for the op tagged `tag` (`work.wait()` of an async op) before
        the compute that follows; NCCL's `wait` makes only the stream wait, which the in-order
        stream does anyway."""
        if tag not in self._tags:
            raise ValueError(f"no earlier op tagged {tag!r}")
        self._after = max(self._after, self._tags[tag])

    def compute(self, dev_us: int, host_us: int = 0) -> None:
        """Kernels the host launches (host_us) that run on the stream (dev_us) before the
        next communication op."""
        self.pending_dev += dev_us * 1_000
        self.pending_cpu += host_us * 1_000

    def _duration(self, role: int, t: Template, kind: Kind) -> int:
        """Transfer time once every participant arrived: latency + bytes / bandwidth."""
        nbytes = t.numel() * (2 if t.in_dtypes[:1] == (BF16,) else 4)
        gbps = self.gbps[role]
        size = max(2, self.group_sizes[role])
        latency = 12_000 + 4_000 * size.bit_length()
        factor = 1 if kind in (Kind.SEND, Kind.RECV, Kind.BATCH) else 2
        return latency + factor * nbytes // gbps

    def _unit(
        self,
        kind: Kind,
        role: int,
        item: int,
        peer: int,
        site: str,
        dur: int,
        entries: int,
        sync: bool = False,
        issue: Issue = NO_ISSUE,
    ) -> None:
        timing = self.timing
        after, self._after = self._after, -1
        if issue.tag is not None:
            self._tags[issue.tag] = len(self.program.kind)
        cpu = self.pending_cpu + (timing.launch_us + timing.entry_us * entries) * 1_000
        self.program.insert(
            len(self.program.kind),
            kind,
            role,
            item,
            peer,
            site,
            cpu,
            self.pending_dev,
            dur,
            sync,
            self.step,
            issue.nowait,
            after,
        )
        self.pending_cpu = self.pending_dev = 0

    def coll(
        self,
        role: int,
        op: str,
        shapes: Sequence[Shape],
        dtype: str,
        site: str,
        sync: bool = False,
        out_shapes: Sequence[Shape] | None = None,
        match: str | None = None,
        issue: Issue = NO_ISSUE,
    ) -> None:
        """A collective; inside `coalesced`, a member of the block. `out_shapes`: the output
        tensors where they differ from what `op`'s size rule gives (an uneven `all_to_all`:
        only the totals are recorded); `match`: what must agree across the members instead of
        the records (see `Template.match`); `issue`: async, tags and waits (gloo)."""
        t = template(op, shapes, self.group_sizes[role], dtype, self.backend)
        if out_shapes is not None or match is not None:
            outs = t.out_sizes if out_shapes is None else tuple(tuple(s) for s in out_shapes)
            t = replace(t, out_sizes=outs, out_dtypes=(dtype,) * len(outs), match=match)
        self._add_coll(role, t, site, sync, issue)

    def _add_coll(self, role: int, t: Template, site: str, sync: bool, issue: Issue) -> None:
        tid = self.catalog.add(t)
        if self._block is not None:
            kind, brole, _, members, _, _ = self._block
            if kind != Kind.COALESCED or brole != role:
                raise ValueError(f"{t.op} inside a foreign block")
            members.append(tid)
            return
        dur = self._duration(role, t, Kind.COLL)
        self._unit(Kind.COLL, role, tid, -1, site, dur, 1, sync, issue)

    def fused(
        self,
        role: int,
        op: str,
        shapes: Sequence[Shape],
        dtype: str,
        site: str,
        sync: bool = False,
        issue: Issue = NO_ISSUE,
    ) -> None:
        """`len(shapes)` calls of torch API `op` ("all_gather_into_tensor",
        "reduce_scatter_tensor", "all_reduce") in one `_coalescing_manager` block, recorded as
        the backend does. NCCL: one `*_coalesced` entry listing every tensor, then the
        `coalesced` marker, one seq id and one op_id. gloo: N all_gather_into_tensor -> one
        `all_gather` entry (output [N, *first shape]); N all_reduce -> one `all_reduce` entry
        listing N sizes; N reduce_scatter_tensor -> N `all_reduce` entries, each its own seq id
        (the block's `issue.tag` names the last).
        `shapes`: per-rank tensors (the input of a gather, the output of a scatter)."""
        if op not in FUSED_OPS:
            raise ValueError(f"no coalescing fast path for {op!r}")
        if self._block is not None:
            raise ValueError("blocks do not nest")
        size = self.group_sizes[role]
        if self.backend == "nccl":
            with self._open(Kind.COALESCED, role, "coalesced", site, sync, fused=True, issue=issue):
                t = template(FUSED_OPS[op], shapes, size, dtype, "nccl", "_coalescing_manager")
                self._add_coll(role, t, site, sync, issue)
            return
        if op == "all_gather_into_tensor":
            self._add_coll(role, gloo_gather_block(shapes, dtype), site, sync, issue)
        elif op == "all_reduce":
            t = template("allreduce_coalesced", shapes, size, dtype, "gloo", "_coalescing_manager")
            self._add_coll(role, t, site, sync, issue)
        else:
            for n, shape in enumerate(shapes):
                t = template(
                    "_reduce_scatter_base", [shape], size, dtype, "gloo", "_coalescing_manager"
                )
                last = n == len(shapes) - 1
                part = issue if last else replace(issue, tag=None)
                self._add_coll(role, t, site, sync and last, part)

    def monitored_barrier(self, role: int, site: str, root: bool) -> None:
        """gloo's `monitored_barrier` on `role` (`root`: the group's first rank); the host waits
        for it. It records nothing (see `monitored_barrier`)."""
        if self.backend != "gloo":
            raise ValueError("monitored_barrier is gloo's (NCCL: barrier, all_reduce_barrier)")
        t = monitored_barrier(self.group_sizes[role], root)
        self._add_coll(role, t, site, True, NO_ISSUE)

    def p2p(self, is_send: bool, role: int, peer: int, shape: Shape, dtype: str, site: str) -> None:
        """send (is_send) or recv with group-local `peer`; inside `batch`, a member."""
        op = "send" if is_send else "recv"
        api = "batch_isend_irecv" if self._block is not None else op
        t = template(op, [shape], 2, dtype, self.backend, api=api)
        tid = self.catalog.add(t)
        if self._block is not None:
            kind, brole, _, members, peers, _ = self._block
            if kind != Kind.BATCH or brole != role:
                raise ValueError(f"{op} inside a foreign block")
            members.append(tid)
            peers.append(peer)
            return
        kind = Kind.SEND if is_send else Kind.RECV
        self._unit(kind, role, tid, peer, site, self._duration(role, t, kind), 1)

    @contextmanager
    def coalesced(self, role: int, marker: str, site: str) -> Iterator[None]:
        """A coalesced block on `role`, closed by a `marker` entry; ops issued inside join it."""
        with self._open(Kind.COALESCED, role, marker, site):
            yield

    @contextmanager
    def batch(self, role: int, site: str, sync: bool = False) -> Iterator[None]:
        """A batch_isend_irecv block; `sync`: the host then waits for it to complete."""
        with self._open(Kind.BATCH, role, "coalesced", site, sync):
            yield

    @contextmanager
    def _open(
        self,
        kind: Kind,
        role: int,
        marker: str,
        site: str,
        sync: bool = False,
        fused: bool = False,
        issue: Issue = NO_ISSUE,
    ) -> Iterator[None]:
        if self._block is not None:
            raise ValueError("blocks do not nest")
        members: list[int] = []
        peers: list[int] = []
        self._block = (kind, role, site, members, peers, marker)
        try:
            yield
        finally:
            self._block = None
        if not members:
            return
        api = "batch_isend_irecv" if kind == Kind.BATCH else OP_API[marker]
        mtid = self.catalog.add(marker_template(marker, api))
        block = Block(tuple(members), tuple(peers) or (-1,) * len(members), mtid, fused)
        bid = self.catalog.add_block(block)
        templates = [self.catalog.templates[m] for m in members]
        dur = max(self._duration(role, t, kind) for t in templates)
        if kind == Kind.COALESCED:
            dur = dur + dur // 4 * (len(members) - 1)
        self._unit(kind, role, bid, -1, site, dur, len(members) + 1, sync, issue)


def build_program(spec: ProgramSpec, layout: Layout, stage: int, catalog: Catalog) -> Program:
    """The program every rank of pipeline `stage` runs (role-relative, shared by them)."""
    sizes = tuple(layout.role_size(r) if layout.has_role(r) else 0 for r in Role)
    b = Builder(catalog, spec.backend, spec.timing, sizes, ROLE_GBPS)
    t = spec.timing
    nccl = spec.backend == "nccl"
    tp, dp = layout.tp > 1, layout.dp > 1
    s, last = stage, layout.pp - 1
    act: Shape = (1, spec.seq_len, spec.hidden)
    buckets: tuple[Shape, ...] = ((25_165_824,), (25_165_824,), (8_388_608,))
    layernorm: tuple[Shape, ...] = ((spec.hidden,), (spec.hidden,), (4 * spec.hidden,))
    shard: Shape = (4_194_304,)

    def forward(gather: bool, sites: tuple[str, str] = ("attn_fwd", "mlp_fwd")) -> None:
        b.compute(t.fwd_us // 2, t.host_fwd_us // 2)
        if tp and gather:
            b.coll(
                Role.TP,
                "_all_gather_base",
                [(spec.seq_len // 8, 1, spec.hidden)],
                BF16,
                "sp_gather",
            )
        if tp:
            b.coll(Role.TP, "all_reduce", [act], BF16, sites[0])
        b.compute(t.fwd_us // 2, t.host_fwd_us // 2)
        if tp:
            b.coll(Role.TP, "all_reduce", [act], BF16, sites[1])
        if tp and gather and s == last:
            b.compute(t.fwd_us // 8, 40)
            b.coll(Role.TP, "all_gather", [(1, spec.seq_len, 512)], BF16, "logits_gather")

    def backward() -> None:
        b.compute(t.bwd_us // 2, t.host_bwd_us // 2)
        if tp:
            b.coll(Role.TP, "all_reduce", [act], BF16, "mlp_bwd")
        b.compute(t.bwd_us // 2, t.host_bwd_us // 2)
        if tp:
            b.coll(Role.TP, "all_reduce", [act], BF16, "attn_bwd")

    def single(is_send: bool, peer: int, site: str) -> None:
        b.p2p(is_send, Role.PP, peer, act, BF16, site)

    def exchange(peer: int, site: str) -> None:
        """Megatron's send_X_recv_Y: one batch_isend_irecv (or, unbatched, two ops ordered
        by stage parity: even stages send first, odd stages receive first)."""
        if spec.batched_p2p:
            with b.batch(Role.PP, site, sync=spec.batch_p2p_sync):
                b.p2p(True, Role.PP, peer, act, BF16, site)
                b.p2p(False, Role.PP, peer, act, BF16, site)
        elif s % 2 == 0:
            single(True, peer, site)
            single(False, peer, site)
        else:
            single(False, peer, site)
            single(True, peer, site)

    def uneven(op: str, marker: str, shapes: Sequence[Shape], dtype: str, site: str) -> None:
        with b.coalesced(Role.TP, marker, site):
            for shape in shapes:
                b.coll(Role.TP, op, [shape], dtype, site)

    if spec.setup:
        b.compute(0, 5_000)
        b.coll(Role.WORLD, "all_reduce_barrier", [(1,)], F32, "init_barrier")
        b.coll(Role.WORLD, "broadcast", [(4096,)], F32, "setup")
        if tp and nccl:
            rows = [(3 + (i * 5) % 4, 64) for i in range(layout.tp)]
            uneven("_broadcast_oop", "ALLGATHER_coalesced", rows, I64, "metadata")

    warmup = min(layout.pp - s - 1, spec.micro_batches)
    steady = spec.micro_batches - warmup
    for step in range(spec.steps):
        b.step = step
        b.compute(0, t.data_us)
        gather = spec.tp_gather_every > 0 and step % spec.tp_gather_every == 0
        first = True
        for _ in range(warmup):
            if s > 0:
                single(False, s - 1, "recv_forward")
            forward(gather and first)
            first = False
            if s < last:
                single(True, s + 1, "send_forward")
        if steady and s > 0:
            single(False, s - 1, "recv_forward")
        for i in range(steady):
            forward(gather and first)
            first = False
            if s < last:
                exchange(s + 1, "send_fwd_recv_bwd")
            backward()
            if s > 0:
                if i == steady - 1:
                    single(True, s - 1, "send_backward")
                else:
                    exchange(s - 1, "send_bwd_recv_fwd")
        for _ in range(warmup):
            if s < last:
                single(False, s + 1, "recv_backward")
            backward()
            if s > 0:
                single(True, s - 1, "send_backward")
        # gradients, optimizer, parameters, loss
        if dp:
            if nccl and spec.dp_coalesced:
                with b.coalesced(Role.DP, "coalesced", "grad_sync"):
                    for bucket in buckets:
                        b.coll(Role.DP, "all_reduce", [bucket], F32, "grad_sync")
            else:
                for bucket in buckets:
                    b.coll(Role.DP, "all_reduce", [bucket], F32, "grad_sync")
            if spec.dp_allreduce_coalesced:
                b.coll(Role.DP, "allreduce_coalesced", layernorm, F32, "grad_sync")
        if tp:
            b.coll(Role.TP, "allreduce_coalesced", layernorm, F32, "layernorm_grads")
        b.compute(200, 100)
        b.coll(Role.WORLD, "all_reduce", [(1,)], F32, "grad_norm", sync=True)
        b.compute(t.optimizer_us, t.optimizer_us // 3)
        if dp and spec.param_gather:
            b.coll(Role.DP, "_all_gather_base", [shard], BF16, "param_gather")
        b.compute(50, 50)
        b.coll(Role.WORLD, "all_reduce", [(2,)], F32, "loss", sync=True)  # [loss, tokens]
        if spec.barrier_every and step % spec.barrier_every == spec.barrier_every - 1:
            b.coll(Role.WORLD, "all_reduce_barrier", [(1,)], F32, "barrier", sync=True)
        if tp and nccl and spec.uneven_every and step % spec.uneven_every == spec.uneven_every - 1:
            chunks = [(1000 + 24 * ((i + 3) % layout.tp),) for i in range(layout.tp)]
            uneven("_reduce_oop", "REDUCE_SCATTER_coalesced", chunks, F32, "checkpoint")
            uneven("_broadcast_oop", "ALLGATHER_coalesced", chunks, F32, "checkpoint")
    if spec.eval_micro_batches:
        b.step = spec.steps
        b.compute(0, t.data_us)
        for _ in range(spec.eval_micro_batches):
            if s > 0:
                single(False, s - 1, "eval_recv_forward")
            forward(False, ("eval_attn_fwd", "eval_mlp_fwd"))
            if s < last:
                single(True, s + 1, "eval_send_forward")
        b.compute(50, 50)
        b.coll(Role.WORLD, "all_reduce", [(2,)], F32, "eval_loss", sync=True)
    return b.program.finalize()
