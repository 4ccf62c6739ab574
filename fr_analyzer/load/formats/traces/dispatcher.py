"""gloo traces (torch 2.13): no `record_param_comms`; each op is a `c10d::` dispatcher node and
a `gloo:` node named like the recorder's entry, with no group and no sequence id. Each op's
group is the one a functional collective (`_c10d_functional::`) names, else it is inferred from
the groups the rank is in and its sizes; sequence ids are counted."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....model.ops import C10D_OUTPUT_FIRST_OPS, P2P_OPS
from .nodes import (
    Group,
    attrs,
    entry,
    inputs,
    next_id,
    numel,
    p2p_name,
    recorder_backend,
    tensors,
)

_FUNCTIONAL = "_c10d_functional::"


_CALL_OPS: dict[str, str] = {
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "allreduce_coalesced",
    "broadcast_": "broadcast",
    "reduce_": "reduce",
    "allgather_": "all_gather",
    "_allgather_base_": "all_gather",
    "allgather_coalesced_": "allgather_coalesced",
    "allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "gather_": "gather",
    "scatter_": "scatter",
    "reduce_scatter_": "reduce_scatter",
    "_reduce_scatter_base_": "all_reduce",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all",
    "barrier": "barrier",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
}
"""c10d's dispatcher calls -> the op gloo's backend node names (`c10d::allreduce_` ->
`gloo:all_reduce`; gloo records `reduce_scatter_tensor` as an all_reduce and
`all_gather_into_tensor` as an all_gather), for a call whose backend node was never written;
a call the trace names otherwise before is read as the trace names it. `monitored_barrier_`
is not here: gloo records no op for it."""


def _dispatcher_ops(
    nodes: Sequence[Mapping[str, Any]],
) -> Iterator[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None, str | None]]:
    """Each backend op node (`gloo:all_reduce`) with the `c10d::` node that issued it (the
    newest one started before it) and the group a functional collective named for it
    (`_c10d_functional::all_reduce(t, "sum", "1")`: the last string is the group's name).
    A `c10d::` call left with no backend node at the end of the trace is the rank's last
    op, cut (the rank was killed inside it: its backend node is written when the op ends):
    it comes last, as (None, the call, its group)."""
    owner: Mapping[str, Any] | None = None
    named: dict[int, str] = {}

    def group_of(call: Mapping[str, Any] | None) -> str | None:
        parent = call.get("ctrl_deps") if call is not None else None
        return named.get(parent) if isinstance(parent, int) else None

    for node in nodes:
        name = node.get("name")
        if not isinstance(name, str):
            continue
        if name.startswith(_FUNCTIONAL):
            values, types = inputs(node, "values"), inputs(node, "types")
            if types and types[-1] == "String" and isinstance(values[-1], str):
                named[node["id"]] = values[-1]
        elif name.startswith("c10d::"):
            owner = node
        elif recorder_backend(name):
            yield node, owner, group_of(owner)
            owner = None
    if owner is not None:
        yield None, owner, group_of(owner)


@dataclass(frozen=True)
class Op:
    """One op of a gloo trace, before its group is chosen: the groups of the rank it could
    be on (`candidates`; one when a functional collective names it)."""

    backend: str
    op: str
    sizes: tuple[list[Any], list[str], list[Any], list[str]]
    peer: int
    candidates: tuple[str, ...]
    cut: bool = False  # the rank's last op, its backend node never written: it never ended
    rf_id: Any = None  # its `c10d::` call's record function id (its Kineto events')

    @property
    def signature(self) -> tuple[str, int]:
        """What every member's op of one collective shares: the op and its input's size."""
        return self.op, numel(self.sizes[0])


def dispatcher_ops(
    nodes: Sequence[Mapping[str, Any]], groups: Mapping[str, Group], rank: int
) -> list[Op]:
    """The ops of a gloo trace, in issue order, each with the groups it could be on."""
    mine = [g for g in groups.values() if rank in g.ranks] or list(groups.values())
    found: list[Op] = []
    learned: dict[str, tuple[str, str]] = {}  # c10d call -> (backend, op) as the trace names it
    for node, owner, named in _dispatcher_ops(nodes):
        call = str(owner["name"]).removeprefix("c10d::") if owner is not None else ""
        if node is not None:
            backend, op = str(node["name"]).split(":", 1)
            op = op.split(" ", 1)[0]
            if call:
                learned.setdefault(call, (backend, op))
            in_shapes, in_dtypes = tensors(inputs(node, "types"), inputs(node, "shapes"), 0)
        else:  # cut: the call alone tells the op and its sizes
            backend, op = learned.get(call) or (_backend(found, groups), _CALL_OPS.get(call, ""))
            if not op:
                continue
            in_shapes, in_dtypes = [], []
        out_shapes, out_dtypes = list(in_shapes), list(in_dtypes)
        peer = -1
        if owner is not None:
            types, shapes = inputs(owner, "types"), inputs(owner, "shapes")
            values = inputs(owner, "values")
            if call in C10D_OUTPUT_FIRST_OPS:
                out_shapes, out_dtypes = tensors(types, shapes, 0)
                in_shapes, in_dtypes = tensors(types, shapes, 1)
            elif node is None:
                in_shapes, in_dtypes = tensors(types, shapes, 0)
                out_shapes, out_dtypes = list(in_shapes), list(in_dtypes)
            if call in ("send", "recv_", "send_", "recv") and len(values) > 2:
                peer = values[2] if isinstance(values[2], int) else -1
        if named is not None and named in groups:
            candidates: tuple[str, ...] = (named,)
        else:
            candidates = tuple(
                g.name for g in mine if _fits(g, op, in_shapes, out_shapes, peer, rank)
            )
        sizes = (in_shapes, in_dtypes, out_shapes, out_dtypes)
        rf_id = attrs(owner).get("rf_id") if owner is not None else None
        found.append(Op(backend, op, sizes, peer, candidates, cut=node is None, rf_id=rf_id))
    return found


def _backend(found: Sequence[Op], groups: Mapping[str, Group]) -> str:
    """The backend of a cut op: the trace's other ops', else its groups'."""
    if found:
        return found[-1].backend
    return next((g.backend for g in groups.values() if g.backend), "gloo")


def own_choice(op: Op, groups: Mapping[str, Group], default: Group) -> tuple[Group, bool]:
    """The group one rank alone picks for an op, and whether that is a guess: the one group of
    its members it fits (the default group among groups alike); for a send/recv, the smallest
    (a pipeline's stage group, not the world); else the default group."""
    candidates = [groups[name] for name in op.candidates]
    if len({g.ranks for g in candidates}) == 1:
        return (default if default in candidates else candidates[0]), False
    if op.op in P2P_OPS and candidates:
        return min(candidates, key=lambda g: len(g.ranks)), True
    return default, len(candidates) > 1


def default_group(groups: Mapping[str, Group], rank: int) -> Group:
    """The rank's default group: `default_pg`, else its largest group."""
    mine = [g for g in groups.values() if rank in g.ranks] or list(groups.values())
    found = next((g for g in mine if g.desc == "default_pg"), None)
    if found is not None:
        return found
    return max(mine, key=lambda g: len(g.ranks)) if mine else Group("0", "default_pg", "gloo", ())


def from_dispatcher(
    nodes: Sequence[Mapping[str, Any]],
    groups: Mapping[str, Group],
    rank: int,
    chosen: Sequence[str | None] = (),
) -> tuple[list[dict[str, Any]], int]:
    """Entries from a gloo trace's backend op nodes; (entries, ops whose group was a guess).
    `chosen`: the group of each op where a look at every rank's trace settled it (`assign`);
    the others are the rank's own choice (`own_choice`)."""
    default = default_group(groups, rank)
    entries: list[dict[str, Any]] = []
    coll_seq: dict[str, int] = {}
    p2p_seq: dict[str, int] = {}
    op_ids: dict[str, int] = {}
    guessed = 0
    for index, item in enumerate(dispatcher_ops(nodes, groups, rank)):
        settled = chosen[index] if index < len(chosen) else None
        if settled is not None and settled in groups:
            group = groups[settled]
        else:
            group, guess = own_choice(item, groups, default)
            guessed += guess
        backend, op, peer = item.backend, item.op, item.peer
        if op in P2P_OPS:
            seq = next_id(p2p_seq, group.name)
            profiling = p2p_name(backend, op, group, rank, peer)
            coll, p2p = coll_seq.get(group.name, 0), seq
        else:
            coll, p2p = next_id(coll_seq, group.name), p2p_seq.get(group.name, 0)
            profiling = f"{backend}:{op}"
        entries.append(
            entry(
                entries,
                group,
                profiling,
                coll=coll,
                p2p=p2p,
                is_p2p=op in P2P_OPS,
                op_id=next_id(op_ids, group.name),
                sizes=_as_recorded(item, group),
            )
        )
        entries[-1]["rf_id"] = item.rf_id
    return entries, guessed


def _as_recorded(item: Op, group: Group) -> tuple[list[Any], list[str], list[Any], list[str]]:
    """An op's sizes as gloo's recorder writes them: `all_gather_into_tensor`'s one output
    of the group size times its input is recorded as `[[group size, *input]]`."""
    ins, in_dtypes, outs, out_dtypes = item.sizes
    size = len(group.ranks)
    if (
        item.op == "all_gather"
        and len(ins) == 1
        and len(outs) == 1
        and isinstance(ins[0], list)
        and isinstance(outs[0], list)
        and len(outs[0]) == len(ins[0])
        and size > 1
        and numel(outs) == numel(ins) * size
    ):
        return ins, in_dtypes, [[size, *ins[0]]], out_dtypes
    return item.sizes


def assign(
    ops: Mapping[int, Sequence[Op]], groups: Mapping[str, Group]
) -> dict[int, list[str | None]]:
    """The group of each rank's ops, settled greedily across every rank's trace (the fallback
    of the search, `assign.settle`, for a job past its budget): run the traces as the job ran
    them, a collective passing when every member (with a trace) has it next, with the
    same op and input size (then, when nothing passes, the same op), on a group each could
    be on; smaller groups are tried first, the default group first among groups alike. A
    send/recv takes the rank's own choice. Where it stops (a fault, a rank that stopped), a
    rank's next op goes to a group it could be on that holds a rank whose trace ended (the one
    it waits for): the one where most members wait in the same op, then the smallest; the rest
    stays None: the rank's own choice."""
    out: dict[int, list[str | None]] = {rank: [None] * len(listed) for rank, listed in ops.items()}
    at = dict.fromkeys(ops, 0)
    order = sorted(groups.values(), key=lambda g: (len(g.ranks), g.desc != "default_pg", g.name))
    defaults = {rank: default_group(groups, rank) for rank in ops}

    def skip_p2p() -> None:
        for rank, listed in ops.items():
            while at[rank] < len(listed) and listed[at[rank]].op in P2P_OPS:
                out[rank][at[rank]] = own_choice(listed[at[rank]], groups, defaults[rank])[0].name
                at[rank] += 1

    def one_pass(strict: bool) -> bool:
        moved = False
        for group in order:
            members = [r for r in group.ranks if r in ops]
            heads = [ops[r][at[r]] if at[r] < len(ops[r]) else None for r in members]
            if not members or any(h is None or group.name not in h.candidates for h in heads):
                continue
            kinds = {h.signature if strict else h.op for h in heads if h is not None}
            if len(kinds) != 1:
                continue
            for r in members:
                out[r][at[r]] = group.name
                at[r] += 1
            moved = True
            skip_p2p()
        return moved

    skip_p2p()
    while one_pass(strict=True) or one_pass(strict=False):
        pass
    ended = {rank for rank, listed in ops.items() if at[rank] == len(listed)}
    for rank, listed in ops.items():  # where each rank stopped: a group with one that ended
        if at[rank] == len(listed) or not ended:
            continue
        head = listed[at[rank]]
        waiting = [groups[n] for n in head.candidates if ended & set(groups[n].ranks)]

        def along(group: Group, head: Op = head) -> int:  # its members waiting in the same op
            return sum(
                at[r] < len(ops[r])
                and ops[r][at[r]].signature == head.signature
                and group.name in ops[r][at[r]].candidates
                for r in group.ranks
                if r in ops
            )

        if waiting:
            out[rank][at[rank]] = min(waiting, key=lambda g: (-along(g), len(g.ranks))).name
    return out


def _fits(
    group: Group, op: str, ins: Sequence[Any], outs: Sequence[Any], peer: int, rank: int
) -> bool:
    """Whether an op of these sizes could be on `group` (its size; a send's peer: a member
    other than the rank itself)."""
    size = len(group.ranks)
    if op in P2P_OPS:
        return 0 <= peer < size and (rank not in group.ranks or group.ranks.index(rank) != peer)
    n_in, n_out = numel(ins), numel(outs)
    if n_in and n_out and n_in != n_out:
        if n_out > n_in:
            return n_out == n_in * size
        return n_in == n_out * size
    return True
