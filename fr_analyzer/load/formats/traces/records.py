"""NCCL/XCCL traces: one `record_param_comms` node per op, with the group, its sequence id,
the sizes and the peer or root; blocks of coalesced ops end with a `coalesced` node."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ....model.ops import C10D_OP_NAMES, P2P_OPS
from .nodes import (
    KNOWN_DTYPES,
    RECORD_NODE,
    Group,
    attrs,
    children,
    entry,
    group_from_record,
    inputs,
    next_id,
    outputs,
    p2p_name,
    profiling_child,
    recorder_backend,
    tensors,
)

_SETUP = frozenset({"init", "broadcastUniqueNCCLID"})
"""Records of a communicator's setup (sequence id 0), not ops: the recorder keeps none."""


def from_records(
    nodes: Sequence[Mapping[str, Any]], groups: dict[str, Group], rank: int, most: int
) -> list[dict[str, Any]]:
    """Entries from `record_param_comms` nodes (and the blocks' `coalesced` markers); a
    group only a record names is believed up to `most` ranks (`nodes.group_from_record`)."""
    kids = children(nodes)
    entries: list[dict[str, Any]] = []
    coll_seq: dict[str, int] = {}
    p2p_seq: dict[str, int] = {}
    op_ids: dict[str, int] = {}
    pending_marker: Mapping[str, Any] | None = None
    for node in nodes:
        name = node.get("name")
        if isinstance(name, str) and name.endswith(":coalesced") and recorder_backend(name):
            pending_marker = node
            continue
        if name != RECORD_NODE:
            continue
        parsed = _record(node)
        if parsed is None:
            continue
        seq, is_p2p, pg_name, pg_desc, peer, collective, start, stride, size = parsed
        group = group_from_record(groups, pg_name, pg_desc, (start, stride, size), most)
        if collective in _SETUP:
            continue
        if collective == "wait":
            if pending_marker is not None:
                entries.append(
                    entry(
                        entries,
                        group,
                        f"{group.backend or 'nccl'}:coalesced",
                        coll=seq,
                        p2p=p2p_seq.get(group.name, 0),
                        is_p2p=False,
                        op_id=next_id(op_ids, group.name),
                        sizes=([], [], [], []),
                    )
                )
                pending_marker = None
            continue
        pending_marker = None
        works = [k for k in kids.get(node["id"], ()) if profiling_child([k]) is not None]
        if len(works) > 1:  # an uneven all_gather (reduce_scatter): one work per member
            coll_seq[group.name] = seq
            entries += _block(entries, group, works, seq, p2p_seq.get(group.name, 0), op_ids)
            continue
        types, shapes = inputs(node, "types"), inputs(node, "shapes")
        has_tensors = bool(types) and isinstance(types[0], str) and "Tensor" in types[0]
        in_shapes, in_dtypes = tensors(types, shapes, 0) if has_tensors else ([], [])
        out_shapes, out_dtypes = tensors(outputs(node, "types"), outputs(node, "shapes"), 0)
        child = profiling_child(kids.get(node["id"], ()))
        if not in_shapes and child is not None:  # barrier: the tensor its all_reduce takes
            in_shapes, in_dtypes = tensors(inputs(child, "types"), inputs(child, "shapes"), 0)
        if not out_shapes:
            out_shapes, out_dtypes = list(in_shapes), list(in_dtypes)
        named = attrs(node).get("dtype")  # the record's own dtype: for a type not in TRACE_DTYPES
        if isinstance(named, str) and has_tensors:
            in_dtypes = [d if d in KNOWN_DTYPES else named for d in in_dtypes]
            out_dtypes = [d if d in KNOWN_DTYPES else named for d in out_dtypes]
        op = C10D_OP_NAMES.get(collective, collective)
        backend = group.backend or "nccl"
        if child is not None and isinstance(child.get("name"), str):
            backend, op = child["name"].split(":", 1)
            op = op.split(" ", 1)[0]
        if is_p2p or op in P2P_OPS:
            p2p_seq[group.name] = seq
            profiling = p2p_name(backend, op, group, rank, peer)
            coll, p2p = coll_seq.get(group.name, 0), seq
        else:
            coll_seq[group.name] = seq
            profiling = f"{backend}:{op}"
            coll, p2p = seq, p2p_seq.get(group.name, 0)
        entries.append(
            entry(
                entries,
                group,
                profiling,
                coll=coll,
                p2p=p2p,
                is_p2p=bool(is_p2p or op in P2P_OPS),
                op_id=next_id(op_ids, group.name),
                sizes=(in_shapes, in_dtypes, out_shapes, out_dtypes),
            )
        )
        entries[-1]["rf_id"] = attrs(node).get("rf_id")  # its Kineto events' (`kineto`)
    return entries


def _block(
    entries: list[dict[str, Any]],
    group: Group,
    works: Sequence[Mapping[str, Any]],
    seq: int,
    p2p: int,
    op_ids: dict[str, int],
) -> list[dict[str, Any]]:
    """The entries of one op that NCCL runs as a block of works under one sequence id (an
    uneven all_gather: a `_broadcast_oop` per member, then `ALLGATHER_coalesced`), as the
    recorder keeps them: each work with its tensor, the marker with none."""
    block: list[dict[str, Any]] = []
    for work in works:
        name = str(work["name"])
        shapes, dtypes = tensors(inputs(work, "types"), inputs(work, "shapes"), 0)
        block.append(
            entry(
                [*entries, *block],
                group,
                name.split(" ", 1)[0],
                coll=seq,
                p2p=p2p,
                is_p2p=False,
                op_id=next_id(op_ids, group.name),
                sizes=(shapes, dtypes, list(shapes), list(dtypes)),
            )
        )
    return block


_Record = tuple[int, bool, str, str, int, str, int, int, int]


def _record(node: Mapping[str, Any]) -> _Record | None:
    """(seq, is_p2p, pg_name, pg_desc, rank, collective_name, global_rank_start, stride,
    group_size) of a `record_param_comms` node; None when it is not laid out so."""
    values, types = inputs(node, "values"), inputs(node, "types")
    at = next((i for i, t in enumerate(types) if t == "Tuple[Int,Bool]"), None)
    if at is None or len(values) < at + 4:
        return None
    pair, group, peer, collective = values[at : at + 4]
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int)):
        return None
    if not (isinstance(group, list) and len(group) == 2 and isinstance(collective, str)):
        return None
    rest = [v if isinstance(v, int) else -1 for v in values[at + 6 : at + 9]]
    rest += [-1] * (3 - len(rest))
    return (
        pair[0],
        bool(pair[1]),
        str(group[0]),
        str(group[1]),
        peer if isinstance(peer, int) else -1,
        collective,
        rest[0],
        rest[1],
        rest[2],
    )
