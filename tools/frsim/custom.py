"""A free-form job: explicit process groups and, per rank, the ops it issues in order.

For jobs the grid (`Layout` + `program.build_program`) does not describe: two groups over the
same ranks, a context-parallel ring of `batch_isend_irecv` blocks, a program whose ranks do
different things. The same engine, recorder, faults, truth and writers run it: a `CustomJob` is
a `Topology` (pass it as `SimSpec.layout`) that also holds every rank's program. `SimSpec.program`
still gives the backend and the host/device costs (`Timing`); its other fields do not apply.

    job = CustomJob(world_size=2)
    grads = job.new_group("grads", [0, 1])
    for rank in job.ranks():
        p = job.on(rank)
        for step in range(3):
            p.step(step)
            p.compute(dev_us=30_000, host_us=500)
            p.coll(grads, "all_reduce", [(4096,)], site="grad_sync")
    sim = simulate(SimSpec(layout=job, fault=faults.stop_host(1, 2)))

Groups are created in order, as `torch.distributed.new_group` requires: gid 0 is the default
group (desc "default_pg", every rank), then each `group(...)` call; the name is str(gid). A
rank's slots are the job's groups (slot = gid, -1 in its binding where it is not a member), so
an op names its group by gid and a p2p peer by its *global* rank. `on(rank)` is where a rank's
ops are written; the recorded call sites are keys of `sites.SITES`. Besides plain collectives,
send/recv and blocks, a rank calls `fused` (a `_coalescing_manager` block of one kind of op,
recorded as the backend records it), `monitored_barrier` (gloo: unrecorded, two seq ids), and
`coll(..., out_shapes=, match=)` for an op whose records differ per rank (uneven all_to_all).
Finish building before simulating: a simulation reads the job, it does not copy it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from .layout import Group
from .program import F32, NO_ISSUE, Backend, Builder, Catalog, Issue, Program, Shape, Timing
from .sites import SITES

WORLD = 0
"""The default group's gid."""
DEFAULT_GBPS = 20
WORLD_GBPS = 10


class _Step(NamedTuple):
    step: int


class _Compute(NamedTuple):
    dev_us: int
    host_us: int


class _Coll(NamedTuple):
    gid: int
    op: str
    shapes: tuple[Shape, ...]
    dtype: str
    site: str
    sync: bool
    out_shapes: tuple[Shape, ...] | None = None
    match: str | None = None
    issue: Issue = NO_ISSUE


class _Fused(NamedTuple):
    gid: int
    op: str
    shapes: tuple[Shape, ...]
    dtype: str
    site: str
    sync: bool
    issue: Issue


class _Wait(NamedTuple):
    tag: str


class _MonitoredBarrier(NamedTuple):
    gid: int
    site: str


class _P2P(NamedTuple):
    is_send: bool
    gid: int
    peer: int
    """Global rank."""
    shape: Shape
    dtype: str
    site: str


@dataclass
class _Block:
    kind: Literal["batch", "coalesced"]
    gid: int
    marker: str
    site: str
    members: list[_Coll | _P2P] = field(default_factory=list)


_Op = _Step | _Compute | _Coll | _P2P | _Block | _Fused | _MonitoredBarrier | _Wait


class RankOps:
    """One rank's program as it is written: call these in the order the rank issues ops."""

    def __init__(self, job: CustomJob, rank: int) -> None:
        self.job = job
        self.rank = rank
        self.ops: list[_Op] = []
        self._block: _Block | None = None

    def step(self, step: int) -> None:
        """The ops that follow belong to training step `step` (-1: setup)."""
        self.ops.append(_Step(step))

    def compute(self, dev_us: int = 0, host_us: int = 0) -> None:
        """Kernels the host launches for `host_us` that run on the stream for `dev_us` before
        the next communication op."""
        self.ops.append(_Compute(dev_us, host_us))

    def coll(
        self,
        group: int,
        op: str,
        shapes: Sequence[Shape],
        dtype: str = F32,
        site: str = "grad_sync",
        sync: bool = False,
        out_shapes: Sequence[Shape] | None = None,
        match: str | None = None,
        nowait: bool = False,
        tag: str | None = None,
    ) -> None:
        """Collective `op` (no backend prefix) on per-rank tensors `shapes` on gid `group`;
        `sync`: the host waits for its result (`.item()`). Inside `coalesced`, a member.
        `out_shapes`: the output where it differs from `op`'s size rule (an uneven
        `all_to_all`: [[total_out, hidden]] against the input's [[total_in, hidden]]); `match`:
        the logical call every member agrees on when their records differ (the split matrix).
        `nowait`: `async_op=True`, gloo's host does not wait for it (NCCL's never waits but for
        `sync`); `tag`: a name for a later `wait`."""
        self._check(group, site)
        outs = None if out_shapes is None else tuple(tuple(s) for s in out_shapes)
        shapes_ = tuple(tuple(s) for s in shapes)
        issue = Issue(nowait, tag)
        self._add(_Coll(group, op, shapes_, dtype, site, sync, outs, match, issue))

    def fused(
        self,
        group: int,
        op: str,
        shapes: Sequence[Shape],
        dtype: str = F32,
        site: str = "grad_sync",
        sync: bool = False,
        nowait: bool = False,
        tag: str | None = None,
    ) -> None:
        """`len(shapes)` calls of torch API `op` ("all_gather_into_tensor",
        "reduce_scatter_tensor" or "all_reduce") in one `_coalescing_manager` block, recorded
        as the job's backend records them (`program.Builder.fused`); the rest as for `coll`."""
        if self._block is not None:
            raise ValueError("blocks do not nest")
        self._check(group, site)
        shapes_ = tuple(tuple(s) for s in shapes)
        issue = Issue(nowait, tag)
        self.ops.append(_Fused(group, op, shapes_, dtype, site, sync, issue))

    def wait(self, tag: str) -> None:
        """`work.wait()` of the async op tagged `tag`: gloo's host waits for it before the
        compute that follows (NCCL: the stream waits, which its in-order stream does anyway)."""
        self.ops.append(_Wait(tag))

    def monitored_barrier(self, group: int = WORLD, site: str = "barrier") -> None:
        """gloo's `monitored_barrier` on `group`: unrecorded, two collective seq ids."""
        if self._block is not None:
            raise ValueError("blocks do not nest")
        self._check(group, site)
        self.ops.append(_MonitoredBarrier(group, site))

    def send(self, group: int, peer: int, shape: Shape, dtype: str = F32, site: str = "") -> None:
        """Send to global rank `peer` on `group` (inside `batch`: a member, `site` unused)."""
        self._p2p(True, group, peer, shape, dtype, site)

    def recv(self, group: int, peer: int, shape: Shape, dtype: str = F32, site: str = "") -> None:
        """Receive from global rank `peer` on `group` (inside `batch`: a member)."""
        self._p2p(False, group, peer, shape, dtype, site)

    @contextmanager
    def batch(self, group: int, site: str) -> Iterator[None]:
        """A `batch_isend_irecv` block: its sends/recvs in the order listed, then the
        `nccl:coalesced` end marker."""
        with self._open(_Block("batch", group, "coalesced", site)):
            yield

    @contextmanager
    def coalesced(self, group: int, marker: str, site: str) -> Iterator[None]:
        """A coalescing block of collectives ending with `marker` ("coalesced",
        "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced")."""
        with self._open(_Block("coalesced", group, marker, site)):
            yield

    def _p2p(
        self, is_send: bool, group: int, peer: int, shape: Shape, dtype: str, site: str
    ) -> None:
        if self._block is None or site:
            self._check(group, site)
        if peer not in self.job.group(group).ranks or peer == self.rank:
            raise ValueError(f"rank {self.rank}: peer {peer} is not another member of {group}")
        self._add(_P2P(is_send, group, peer, tuple(shape), dtype, site))

    def _add(self, op: _Coll | _P2P) -> None:
        block = self._block
        if block is None:
            self.ops.append(op)
            return
        if block.gid != op.gid or (block.kind == "batch") != isinstance(op, _P2P):
            raise ValueError(f"rank {self.rank}: {op} does not belong in {block.kind} block")
        block.members.append(op)

    @contextmanager
    def _open(self, block: _Block) -> Iterator[None]:
        if self._block is not None:
            raise ValueError("blocks do not nest")
        self._check(block.gid, block.site)
        self._block = block
        try:
            yield
        finally:
            self._block = None
        if block.members:
            self.ops.append(block)

    def _check(self, group: int, site: str) -> None:
        if self.rank not in self.job.group(group).ranks:
            raise ValueError(f"rank {self.rank} is not in group {group}")
        if site not in SITES:
            raise ValueError(f"unknown call site {site!r} (see sites.SITES)")


class CustomJob:
    """Explicit groups and per-rank programs; a `Topology` the simulator runs like a grid."""

    def __init__(self, world_size: int, gpus_per_host: int = 8) -> None:
        if world_size < 1 or gpus_per_host < 1:
            raise ValueError("world_size and gpus_per_host must be >= 1")
        self.world_size = world_size
        self.gpus_per_host = gpus_per_host
        self._groups: list[Group] = [Group(WORLD, 0, tuple(range(world_size)), "default_pg")]
        self._gbps: list[int] = [WORLD_GBPS]
        self._kinds: dict[str, int] = {"default_pg": 0}
        self._ranks = [RankOps(self, r) for r in range(world_size)]
        self._bindings: dict[int, tuple[int, ...]] = {}

    def __repr__(self) -> str:
        groups = ", ".join(f"{g.name}:{g.desc}{list(g.ranks)}" for g in self._groups[1:])
        return f"CustomJob(world_size={self.world_size}, groups=[{groups}])"

    # -- building -------------------------------------------------------------------------

    def new_group(self, desc: str, ranks: Iterable[int], gbps: int = DEFAULT_GBPS) -> int:
        """Create a group (every rank creates it, in this order); returns its gid. `gbps` is
        its bandwidth in GB/s (it sets the simulated transfer times)."""
        members = tuple(sorted(set(ranks)))
        if not members or members[0] < 0 or members[-1] >= self.world_size:
            raise ValueError(f"group {desc!r}: ranks {members} outside the world")
        gid = len(self._groups)
        kind = self._kinds.setdefault(desc, len(self._kinds))
        self._groups.append(Group(gid, kind, members, desc))
        self._gbps.append(gbps)
        self._bindings.clear()
        return gid

    def on(self, rank: int) -> RankOps:
        """Where rank `rank`'s program is written."""
        return self._ranks[rank]

    def ranks(self) -> range:
        """Every rank of the job."""
        return range(self.world_size)

    # -- Topology -------------------------------------------------------------------------

    def group(self, gid: int) -> Group:
        """The group with creation index `gid` (0: the default group)."""
        return self._groups[gid]

    @property
    def group_count(self) -> int:
        """How many groups the job created, the default group included."""
        return len(self._groups)

    def binding(self, rank: int) -> tuple[int, ...]:
        """Per slot (= gid): the gid if `rank` is a member, else -1."""
        found = self._bindings.get(rank)
        if found is None:
            found = tuple(g.gid if rank in g.ranks else -1 for g in self._groups)
            self._bindings[rank] = found
        return found

    def group_size(self, gid: int) -> int:
        """The number of ranks in group `gid`."""
        return self._groups[gid].size

    def role_of(self, gid: int) -> int:
        """The group's kind: groups with the same desc share it (they are siblings)."""
        return self._groups[gid].role

    def local_rank(self, role: int, rank: int) -> int:
        """`rank`'s group-local rank in group `role` (its index in the sorted members)."""
        return self._groups[role].local_rank(rank)

    def member_gids(self, rank: int) -> list[int]:
        """The gids of the groups `rank` is a member of, in creation order."""
        return [gid for gid in self.binding(rank) if gid >= 0]

    def ranks_text(self, gid: int) -> str:
        """The members of group `gid` as the dump's pg_config writes them: "[0, 1, ...]"."""
        return str(list(self._groups[gid].ranks))

    def host_of(self, rank: int) -> int:
        """The host `rank` runs on (`gpus_per_host` consecutive ranks per host)."""
        return rank // self.gpus_per_host

    # -- programs -------------------------------------------------------------------------

    def program(self, rank: int, catalog: Catalog, backend: Backend, timing: Timing) -> Program:
        """Rank `rank`'s program, built into `catalog` (slot = gid)."""
        sizes = tuple(
            g.size if gid >= 0 else 0
            for g, gid in zip(self._groups, self.binding(rank), strict=True)
        )
        b = Builder(catalog, backend, timing, sizes, tuple(self._gbps))
        for op in self._ranks[rank].ops:
            if isinstance(op, _Step):
                b.step = op.step
            elif isinstance(op, _Compute):
                b.compute(op.dev_us, op.host_us)
            elif isinstance(op, _Fused):
                b.fused(op.gid, op.op, op.shapes, op.dtype, op.site, op.sync, op.issue)
            elif isinstance(op, _Wait):
                b.wait(op.tag)
            elif isinstance(op, _MonitoredBarrier):
                b.monitored_barrier(op.gid, op.site, root=self._groups[op.gid].ranks[0] == rank)
            elif isinstance(op, _Block):
                if op.kind == "batch":
                    opened = b.batch(op.gid, op.site)
                else:
                    opened = b.coalesced(op.gid, op.marker, op.site)
                with opened:
                    for member in op.members:
                        self._emit(b, member, op.site)
            else:
                self._emit(b, op, "")
        return b.program.finalize()

    def _emit(self, b: Builder, op: _Coll | _P2P, block_site: str) -> None:
        if isinstance(op, _Coll):
            b.coll(
                op.gid, op.op, op.shapes, op.dtype, op.site, op.sync,
                op.out_shapes, op.match, op.issue,
            )  # fmt: skip
        else:
            local = self._groups[op.gid].local_rank(op.peer)
            b.p2p(op.is_send, op.gid, local, op.shape, op.dtype, op.site or block_site)
