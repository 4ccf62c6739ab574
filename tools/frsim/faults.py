"""Faults injected into the simulated job, each at one site: a unit of one rank's program.

`Fault.op` indexes the rank's *fault-free* program. A fault acts in one of two places:

- on the rank's program (`apply`): `stall` adds host time before the op (and, with `repeat`,
  before the same op of the next steps), `skip` removes it, `extra` inserts an op after it,
  `swap` issues it after the op that follows it (a rank-dependent order), `mismatch` /
  `p2p_mismatch` change what the rank's side of it records (and so its signature: the engine
  never completes a collective whose participants disagree, nor a send/recv pair whose sides
  differ, unless `completes` says the collective finishes with garbage);
- on the engine (`engine_fault`): `stop_host` (the host never enqueues the op or anything
  after it; the device finishes what was enqueued; the rank dumps), `crash` (the process dies
  when it would enqueue the op: no later enqueue, no stream arrival at or after that time, no
  dump), `gpu_stuck_in` (the rank arrives, so the collective completes for its peers, but its
  own op never completes), `gpu_stuck_before` (the stream hangs in compute just before the op:
  enqueued, never started), `network_hang` (every member arrives at the op's collective, which
  then never completes for any of them: a communicator or network hang).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from .layout import Role
from .program import (
    BF16,
    COLL_KINDS,
    F32,
    I64,
    P2P_KINDS,
    Block,
    Kind,
    Program,
    Template,
    template,
)

FaultKind = Literal[
    "stall",
    "stop_host",
    "crash",
    "gpu_stuck_in",
    "gpu_stuck_before",
    "skip",
    "extra",
    "mismatch",
    "p2p_mismatch",
    "network_hang",
    "swap",
]
Field = Literal["size", "dtype", "op", "split"]
"""What a mismatch changes; "split": an uneven all_to_all's input total (its split sizes),
the output kept."""


@dataclass(frozen=True)
class ExtraOp:
    """An op a rank issues that its peers do not (e.g. a rank-conditional barrier)."""

    role: Role = Role.WORLD
    op: str = "all_reduce_barrier"
    shape: tuple[int, ...] = (1,)
    dtype: str = F32
    site: str = "debug_barrier"
    sync: bool = True


@dataclass(frozen=True)
class Fault:
    """One fault at unit `op` of rank `rank`'s fault-free program."""

    kind: FaultKind
    rank: int
    op: int
    seconds: float = 0.0
    """stall: extra host time before the op."""
    repeat: int = 1
    """stall: also before the same op of the next repeat - 1 steps."""
    field: Field = "size"
    """mismatch / p2p_mismatch: what differs."""
    member: int = 0
    """mismatch / p2p_mismatch in a block: which member."""
    shape: tuple[int, ...] | None = None
    """mismatch / p2p_mismatch of the size: the tensor the rank passes instead (the op's
    per-rank shape, as `program.template` takes it); None: its last dimension halved (odd:
    plus one)."""
    completes: bool = False
    """mismatch: the collective completes anyway (garbage) and the job goes on."""
    grow: bool = False
    """mismatch: the rank's side takes more bytes than its peers': a size doubles the last
    dimension (instead of halving it), a dtype is a wider one, a split adds a row."""
    extra: ExtraOp = ExtraOp()
    """extra: the op issued after `op`."""

    def describe(self) -> str:
        """The fault in one line: kind, rank, op and the details that apply to its kind."""
        text = f"{self.kind} on rank {self.rank} at op {self.op}"
        if self.kind == "stall":
            text += f" ({self.seconds:g} s" + (
                f", {self.repeat} steps)" if self.repeat > 1 else ")"
            )
        elif self.kind in ("mismatch", "p2p_mismatch"):
            text += f" ({self.field}{', grows' if self.grow else ''}, member {self.member}" + (
                ", completes)" if self.completes else ")"
            )
        elif self.kind == "extra":
            text += f" ({self.extra.op} on {self.extra.role.name.lower()})"
        return text


@dataclass(frozen=True)
class EngineFault:
    """A fault the engine applies to one rank's execution; -1 = none."""

    stop_at: int = -1
    crash_at: int = -1
    stuck_in: int = -1
    stuck_before: int = -1
    hang_at: int = -1


def stall(rank: int, op: int, seconds: float, repeat: int = 1) -> Fault:
    """Rank's host spends `seconds` more before `op` (and that op of the next `repeat-1` steps)."""
    return Fault("stall", rank, op, seconds=seconds, repeat=repeat)


def stop_host(rank: int, op: int) -> Fault:
    """Rank's host never enqueues `op` or anything after it; its device drains and it dumps."""
    return Fault("stop_host", rank, op)


def crash(rank: int, op: int) -> Fault:
    """Rank's process dies when it would enqueue `op`; it writes no dump."""
    return Fault("crash", rank, op)


def gpu_stuck_in(rank: int, op: int) -> Fault:
    """Rank arrives at `op`, so its peers complete it, but its own op never completes."""
    return Fault("gpu_stuck_in", rank, op)


def gpu_stuck_before(rank: int, op: int) -> Fault:
    """Rank's stream hangs just before `op`: enqueued, never started."""
    return Fault("gpu_stuck_before", rank, op)


def network_hang(rank: int, op: int) -> Fault:
    """Every member of rank's collective at `op` arrives; the collective never completes."""
    return Fault("network_hang", rank, op)


def swap(rank: int, op: int) -> Fault:
    """Rank issues `op` after the op that follows it (e.g. another code path on that rank)."""
    return Fault("swap", rank, op)


def skip(rank: int, op: int) -> Fault:
    """Rank omits `op`; the later seq ids of that group shift."""
    return Fault("skip", rank, op)


def extra(rank: int, after: int, spec: ExtraOp = ExtraOp()) -> Fault:
    """Rank issues one more op, `spec`, after op `after` (default: a world barrier)."""
    return Fault("extra", rank, after, extra=spec)


def mismatch(
    rank: int,
    op: int,
    field: Field = "size",
    member: int = 0,
    completes: bool = False,
    shape: tuple[int, ...] | None = None,
    grow: bool = False,
) -> Fault:
    """Rank's record of collective `op` (or block member `member`) differs in `field`; it never
    completes unless `completes`."""
    return Fault(
        "mismatch",
        rank,
        op,
        field=field,
        member=member,
        completes=completes,
        shape=shape,
        grow=grow,
    )


def p2p_mismatch(
    rank: int,
    op: int,
    field: Field = "size",
    member: int = 0,
    shape: tuple[int, ...] | None = None,
) -> Fault:
    """Rank's side of send/recv `op` (or member `member`) differs in `field`; it never completes."""
    return Fault("p2p_mismatch", rank, op, field=field, member=member, shape=shape)


def check(fault: Fault, program: Program) -> None:
    """Raise ValueError if `fault` cannot apply at its site of `program` (fault-free)."""
    if not 0 <= fault.op < len(program):
        raise ValueError(f"{fault.describe()}: op out of range 0..{len(program) - 1}")
    kind = program.kind[fault.op]
    needs_collective = ("gpu_stuck_in", "gpu_stuck_before", "mismatch", "network_hang")
    if fault.kind in needs_collective and kind not in COLL_KINDS:
        raise ValueError(f"{fault.describe()}: needs a collective")
    if fault.kind == "swap" and fault.op + 1 >= len(program):
        raise ValueError(f"{fault.describe()}: no op after it to swap with")
    if fault.kind == "p2p_mismatch" and kind not in P2P_KINDS:
        raise ValueError(f"{fault.describe()}: needs a send, recv or batched p2p block")
    if fault.kind in ("mismatch", "p2p_mismatch"):
        members = (
            len(program.templates_of(fault.op)) - 1 if kind in (Kind.BATCH, Kind.COALESCED) else 1
        )
        if not 0 <= fault.member < max(1, members):
            raise ValueError(f"{fault.describe()}: no member {fault.member}")
        if program.backend == "gloo" and fault.kind == "p2p_mismatch":
            raise ValueError("gloo records no send/recv: p2p_mismatch needs nccl")
        if fault.field == "split" and (
            fault.kind != "mismatch"
            or program.templates_of(fault.op)[fault.member].op != "all_to_all"
        ):
            raise ValueError(f"{fault.describe()}: a split mismatch needs an all_to_all")
    if fault.kind == "extra" and program.group_sizes[fault.extra.role] == 0:
        raise ValueError(f"{fault.describe()}: the rank has no {fault.extra.role.name} group")
    if fault.kind == "stall" and fault.seconds <= 0:
        raise ValueError("stall needs seconds > 0")


def engine_fault(fault: Fault) -> EngineFault | None:
    """What the engine must do differently on the faulty rank (None: nothing)."""
    return {
        "stop_host": EngineFault(stop_at=fault.op),
        "crash": EngineFault(crash_at=fault.op),
        "gpu_stuck_in": EngineFault(stuck_in=fault.op),
        "gpu_stuck_before": EngineFault(stuck_before=fault.op),
        "network_hang": EngineFault(hang_at=fault.op),
    }.get(fault.kind)


def apply(fault: Fault, program: Program) -> Program:
    """The faulty rank's program: a copy of its fault-free `program` with the fault applied
    (the same program when the fault acts on the engine only)."""
    check(fault, program)
    if fault.kind in ("stop_host", "crash", "gpu_stuck_in", "gpu_stuck_before", "network_hang"):
        return program
    p = program.copy()
    i = fault.op
    if fault.kind == "stall":
        for j in stall_sites(program, i, fault.repeat):
            p.cpu[j] += round(fault.seconds * 1e9)
    elif fault.kind == "skip":
        p.delete(i)
    elif fault.kind == "swap":
        # The two ops trade places; the host and device time between ops stay where they were.
        p.swap(i)
    elif fault.kind == "extra":
        e = fault.extra
        t = template(e.op, [e.shape], p.group_sizes[e.role], e.dtype, p.backend)
        tid = p.catalog.add(t)
        p.insert(i + 1, Kind.COLL, e.role, tid, -1, e.site, 60_000, 0, 40_000, e.sync, p.step[i])
    else:
        _change_record(p, i, fault)
        p.tolerant[i] = fault.kind == "mismatch" and fault.completes
    return p.finalize()


def stall_sites(program: Program, op: int, repeat: int) -> list[int]:
    """`op`, then the same op (same kind, group, template and site, same occurrence within its
    step) of each of the next `repeat - 1` steps that have it."""
    key = (program.kind[op], program.role[op], program.item[op], program.site[op])
    step = program.step[op]

    def occurrences(s: int) -> list[int]:
        return [
            j
            for j in range(len(program))
            if program.step[j] == s
            and (program.kind[j], program.role[j], program.item[j], program.site[j]) == key
        ]

    nth = occurrences(step).index(op)
    sites = [op]
    for s in range(step + 1, step + repeat):
        found = occurrences(s)
        if nth < len(found):
            sites.append(found[nth])
    return sites


def _change_record(p: Program, i: int, fault: Fault) -> None:
    cat = p.catalog
    kind = p.kind[i]
    if kind in (Kind.BATCH, Kind.COALESCED):
        block = cat.blocks[p.item[i]]
        members = list(block.members)
        old = cat.templates[members[fault.member]]
        members[fault.member] = cat.add(_changed(old, fault, p))
        p.item[i] = cat.add_block(Block(tuple(members), block.peers, block.marker))
    else:
        p.item[i] = cat.add(_changed(cat.templates[p.item[i]], fault, p))


_OTHER_DTYPE = {F32: BF16, BF16: F32, I64: "Int", "Half": F32}
_WIDER_DTYPE = {F32: "Double", BF16: F32, "Half": F32, I64: "Double", "Int": I64}
DTYPE_BYTES = {"Double": 8, F32: 4, BF16: 2, "Half": 2, I64: 8, "Int": 4, "Byte": 1, "Char": 1}
"""Bytes per element of the dtypes the simulator records."""
_OTHER_OP = {
    "all_reduce": "_all_gather_base",
    "_all_gather_base": "all_reduce",
    "all_gather": "all_reduce",
    "allreduce_coalesced": "all_reduce",
    "broadcast": "all_reduce",
    "_broadcast_oop": "_reduce_oop",
    "_reduce_oop": "_broadcast_oop",
    "all_reduce_barrier": "all_reduce",
    "barrier": "all_reduce",
    "_reduce_scatter_base": "all_reduce",
    "reduce_scatter": "all_reduce",
}


def _resized(dim: int, grow: bool = False) -> int:
    if grow:
        return 2 * dim
    return dim // 2 if dim > 1 and dim % 2 == 0 else dim + 1


def nbytes(t: Template) -> int:
    """Bytes of the op's input tensors (what a rank posts)."""
    width = DTYPE_BYTES.get(t.in_dtypes[0], 4) if t.in_dtypes else 4
    return t.numel() * width if t.in_sizes else 0


def posted_bytes(program: Program, unit: int) -> int:
    """Bytes the unit's ops post (a block: every member)."""
    return sum(nbytes(t) for t in program.templates_of(unit))


def swap_kills_culprit(fault: Fault, clean: Program) -> bool:
    """gloo runs a swap's two ops together: at the second, r posts the first op's bytes where
    the others post the second's; it receives more than it posted (and aborts) when the
    second is larger (an all_to_all's receivers only get less: no abort)."""
    if fault.kind != "swap" or fault.op + 1 >= len(clean):
        return False
    first, second = clean.templates_of(fault.op), clean.templates_of(fault.op + 1)
    if any(t.op == "all_to_all" or not t.recorded for t in (*first, *second)):
        return False
    return posted_bytes(clean, fault.op + 1) > posted_bytes(clean, fault.op)


def abort_site(fault: Fault, clean: Program) -> tuple[int, int] | None:
    """(slot, collective seq id) of the collective instance where gloo may abort a rank for
    `fault` (see `engine`): the instance at the faulted op, where r's record is the odd one
    (a mismatch, or what a skip, a swap or an extra op puts at that seq); None for the faults
    that change no record."""
    if fault.kind in ("mismatch", "skip", "swap") and clean.kind[fault.op] in COLL_KINDS:
        return clean.role[fault.op], clean.cseq[fault.op]
    if fault.kind == "extra":
        role = int(fault.extra.role)
        before = [u for u in range(fault.op + 1) if clean.role[u] == role]
        seq = max((clean.cseq[u] for u in before if clean.kind[u] in COLL_KINDS), default=0)
        return role, seq + 1
    return None


def _changed(t: Template, fault: Fault, p: Program) -> Template:
    """`t` as the faulty rank records it. A barrier's tensor is torch's own, so a rank can only
    differ there by calling another op."""
    if t.op in ("all_reduce_barrier", "barrier") and fault.field != "op":
        return _changed(t, replace(fault, field="op"), p)
    if fault.field == "split":
        if not t.in_sizes or not t.in_sizes[0]:
            return _changed(t, replace(fault, field="size"), p)
        rows = t.in_sizes[0][0]
        rows = rows + 1 if fault.grow or rows <= 1 else rows - 1
        return replace(t, in_sizes=((rows, *t.in_sizes[0][1:]), *t.in_sizes[1:]), match=None)
    if fault.field == "dtype" or (fault.field == "size" and not t.in_sizes):
        if not t.in_dtypes:
            return _changed(t, replace(fault, field="op"), p)
        table = _WIDER_DTYPE if fault.grow else _OTHER_DTYPE
        other = table.get(t.in_dtypes[0], F32)
        return Template(
            t.op,
            t.in_sizes,
            t.out_sizes,
            (other,) * len(t.in_dtypes),
            (other,) * len(t.out_dtypes),
            t.api,
        )
    if fault.field == "size" and fault.shape is not None:
        group_size = p.group_sizes[p.role[fault.op]]
        dtype = t.in_dtypes[0] if t.in_dtypes else F32
        return template(t.op, [fault.shape], group_size, dtype, p.backend, api=t.api)
    if fault.field == "size":
        # The last dimension changes in every shape, which keeps the op's size rule (gathers
        # and scatters stack along dim 0, or as gloo records them, along a new first dim).
        def resize(sizes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
            # a 0-dim tensor (a loss) becomes a 1-D one
            return tuple((*s[:-1], _resized(s[-1], fault.grow)) if s else (2,) for s in sizes)

        return Template(
            t.op, resize(t.in_sizes), resize(t.out_sizes), t.in_dtypes, t.out_dtypes, t.api
        )
    op = _OTHER_OP.get(t.op, "all_reduce")
    shape = t.in_sizes[0] if t.in_sizes else (1,)
    dtype = t.in_dtypes[0] if t.in_dtypes else F32
    return template(op, [shape], p.group_sizes[p.role[fault.op]], dtype, p.backend)
