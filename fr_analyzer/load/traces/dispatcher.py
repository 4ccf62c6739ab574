"""gloo traces (torch 2.13): no `record_param_comms`; each op is a `c10d::` dispatcher node and
a `gloo:` node named like the recorder's entry, with no group and no sequence id. Each op's
group is the one a functional collective (`_c10d_functional::`) names, else it is inferred from
the groups the rank is in and its sizes; sequence ids are counted."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ...model.ops import P2P_OPS
from .nodes import BACKENDS, Group, entry, inputs, next_id, numel, tensors

_OUTPUT_FIRST = frozenset(
    {
        "_allgather_base_",
        "allgather_into_tensor_coalesced_",
        "_reduce_scatter_base_",
        "reduce_scatter_tensor_coalesced_",
        "alltoall_base_",
        "allgather_",
        "reduce_scatter_",
        "alltoall_",
    }
)


_FUNCTIONAL = "_c10d_functional::"


def _dispatcher_ops(
    nodes: Sequence[Mapping[str, Any]],
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any] | None, str | None]]:
    """Each backend op node (`gloo:all_reduce`) with the `c10d::` node that issued it (the
    newest one started before it) and the group a functional collective named for it
    (`_c10d_functional::all_reduce(t, "sum", "1")`: the last string is the group's name)."""
    owner: Mapping[str, Any] | None = None
    named: dict[int, str] = {}
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
        elif ":" in name and name.split(":", 1)[0] in BACKENDS:
            parent = owner.get("ctrl_deps") if owner is not None else None
            yield node, owner, named.get(parent) if isinstance(parent, int) else None
            owner = None


def from_dispatcher(
    nodes: Sequence[Mapping[str, Any]], groups: dict[str, Group], rank: int
) -> tuple[list[dict[str, Any]], int]:
    """Entries from a gloo trace's backend op nodes; (entries, ops whose group was a guess)."""
    mine = [g for g in groups.values() if rank in g.ranks] or list(groups.values())
    default = next((g for g in mine if g.desc == "default_pg"), None) or (
        max(mine, key=lambda g: len(g.ranks)) if mine else Group("0", "default_pg", "gloo", ())
    )
    entries: list[dict[str, Any]] = []
    coll_seq: dict[str, int] = {}
    p2p_seq: dict[str, int] = {}
    op_ids: dict[str, int] = {}
    guessed = 0
    for node, owner, named in _dispatcher_ops(nodes):
        backend, op = str(node["name"]).split(":", 1)
        op = op.split(" ", 1)[0]
        in_shapes, in_dtypes = tensors(inputs(node, "types"), inputs(node, "shapes"), 0)
        out_shapes, out_dtypes = list(in_shapes), list(in_dtypes)
        peer = -1
        if owner is not None:
            call = str(owner["name"]).removeprefix("c10d::")
            types, shapes = inputs(owner, "types"), inputs(owner, "shapes")
            values = inputs(owner, "values")
            if call in _OUTPUT_FIRST:
                out_shapes, out_dtypes = tensors(types, shapes, 0)
                in_shapes, in_dtypes = tensors(types, shapes, 1)
            if call in ("send", "recv_", "send_", "recv") and len(values) > 2:
                peer = values[2] if isinstance(values[2], int) else -1
        candidates = [g for g in mine if _fits(g, op, in_shapes, out_shapes, peer, rank)]
        distinct = {g.ranks for g in candidates}
        if named is not None and named in groups:
            group = groups[named]
        elif len(distinct) == 1:
            group = candidates[0] if default not in candidates else default
        else:
            group = default
            guessed += len(distinct) > 1
        if op in P2P_OPS:
            seq = next_id(p2p_seq, group.name)
            me = group.ranks.index(rank) if rank in group.ranks else rank
            arrow = "->" if op == "send" else "<-"
            profiling = f"{backend}:{op} {me}{arrow}{peer}"
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
                sizes=(in_shapes, in_dtypes, out_shapes, out_dtypes),
            )
        )
    return entries, guessed


def _fits(
    group: Group, op: str, ins: Sequence[Any], outs: Sequence[Any], peer: int, rank: int
) -> bool:
    """Whether an op of these sizes could be on `group` (its size, a send's peer)."""
    size = len(group.ranks)
    if op in P2P_OPS:
        return 0 <= peer < size
    n_in, n_out = numel(ins), numel(outs)
    if n_in and n_out and n_in != n_out:
        if n_out > n_in:
            return n_out == n_in * size
        return n_in == n_out * size
    return True
