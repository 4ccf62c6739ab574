"""The nodes of an Execution Trace: their parts, tensors, groups, and the Flight Recorder
entry each op becomes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....model.backends import KNOWN_BACKENDS
from ....model.dtypes import TRACE_DTYPES
from ....model.numbers import decimal
from ...safety.door import parse_json

INIT_NODE = "## process_group:init ##"
RECORD_NODE = "record_param_comms"

KNOWN_DTYPES = frozenset(TRACE_DTYPES.values())
"""The recorder's dtype names an Execution Trace's element types are read as."""
TENSOR_TYPE = re.compile(r"Tensor\(([^()]*(?:\([^()]*\))?[^()]*)\)")


@dataclass(frozen=True)
class Group:
    """One group of the init record (or of a record that names one the init record lacks)."""

    name: str
    desc: str
    backend: str
    ranks: tuple[int, ...]
    unbelieved: int = 0  # a size the trace gave alone, past what the files show (`most`)


def groups_of(nodes: Sequence[Mapping[str, Any]], most: int) -> dict[str, Group]:
    """The groups of the init records (the last record of a group wins), by name. A group
    listed as `[]` with a `group_size` (every rank) is believed up to `most` ranks: the size
    alone costs nothing to write (`"group_size": 100000000` in a 20 kB trace), so past that it
    is named (`Group.unbelieved`) and the job is what the files show."""
    found: dict[str, Group] = {}
    for node in nodes:
        if node.get("name") != INIT_NODE:
            continue
        values = inputs(node, "values")
        if not values or not isinstance(values[0], str):
            continue
        try:
            listed = parse_json(values[0])
        except ValueError:
            continue
        if not isinstance(listed, list):
            continue
        for item in listed:
            if not isinstance(item, dict) or "pg_name" not in item:
                continue
            name = str(item["pg_name"])
            ranks = item.get("ranks")
            members = (
                tuple(r for r in ranks if isinstance(r, int)) if isinstance(ranks, list) else ()
            )
            size = item.get("group_size")
            unbelieved = 0
            if not members and type(size) is int and size > 0:
                if size <= most:
                    members = tuple(range(size))  # `[]`: every rank
                else:
                    unbelieved = size
            found[name] = Group(
                name,
                str(item.get("pg_desc", "")),
                backend_of(str(item.get("backend_config", ""))),
                members,
                unbelieved,
            )
    return found


def world_size(groups: Mapping[str, Group]) -> int:
    """The job's size: the default group's, else the largest group's."""
    for group in groups.values():
        if group.desc == "default_pg":
            return len(group.ranks)
    return max((len(g.ranks) for g in groups.values()), default=0)


def backend_of(config: str) -> str:
    """`cuda:nccl` / `cpu:gloo,cuda:gloo` → the backend of the device ops run on."""
    parts = [p.split(":", 1)[-1] for p in config.split(",") if p]
    for part in parts:
        if part != "gloo":
            return part
    return parts[0] if parts else ""


def group_from_record(
    groups: dict[str, Group],
    name: str,
    desc: str,
    strided: tuple[int, int, int],
    most: int,
) -> Group:
    """The group a record names; one the init record lacks is built from the record's
    strided member list (`global_rank_start`, `global_rank_stride`, `group_size`), believed
    when its ranks stay below `most` (see `groups_of`)."""
    group = groups.get(name)
    if group is None:
        start, stride, size = strided
        fits = start >= 0 and stride > 0 and start + (size - 1) * stride < most
        members = tuple(start + i * stride for i in range(size)) if fits else ()
        unbelieved = size if not fits and size > 0 else 0
        group = groups[name] = Group(name, desc, "nccl", members, unbelieved)
    return group


def inputs(node: Mapping[str, Any], key: str) -> list[Any]:
    """A part of a node's inputs (`values`, `shapes`, `types`), or [] when it has none."""
    part = node.get("inputs")
    value = part.get(key) if isinstance(part, dict) else None
    return value if isinstance(value, list) else []


def outputs(node: Mapping[str, Any], key: str) -> list[Any]:
    """A part of a node's outputs, or [] when it has none."""
    part = node.get("outputs")
    value = part.get(key) if isinstance(part, dict) else None
    return value if isinstance(value, list) else []


def attrs(node: Mapping[str, Any]) -> dict[str, Any]:
    """A node's attributes by name."""
    attrs = node.get("attrs")
    if not isinstance(attrs, list):
        return {}
    return {a["name"]: a.get("value") for a in attrs if isinstance(a, dict) and "name" in a}


def tensors(types: Sequence[Any], shapes: Sequence[Any], index: int) -> tuple[list[Any], list[str]]:
    """The shapes and dtypes of the tensor argument at `index` (one tensor or a list)."""
    if index >= len(types) or index >= len(shapes) or not isinstance(types[index], str):
        return [], []
    kind, shape = types[index], shapes[index]
    dtypes = [TRACE_DTYPES.get(t.strip(), t.strip()) for t in TENSOR_TYPE.findall(kind)]
    if not dtypes:
        return [], []
    if kind.startswith("Tensor("):
        return [shape], dtypes[:1]
    flat: list[Any] = []
    for item in shape if isinstance(shape, list) else []:
        if isinstance(item, list) and item and all(isinstance(x, list) for x in item):
            flat.extend(item)  # a list of lists of tensors (all_gather's outputs)
        else:
            flat.append(item)
    if len(dtypes) < len(flat):
        dtypes += dtypes[-1:] * (len(flat) - len(dtypes))
    return flat, dtypes[: len(flat)]


def children(nodes: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """Each node's children (`ctrl_deps` names the parent), in id order."""
    kids: dict[int, list[Mapping[str, Any]]] = {}
    for node in nodes:
        parent = node.get("ctrl_deps")
        if isinstance(parent, int):
            kids.setdefault(parent, []).append(node)
    return kids


def recorder_backend(name: str) -> str | None:
    """The backend of a node named like a recorder's entry (`nccl:all_reduce`), one of the
    model's backends (`model.backends`); None for any other name, a `c10d::` dispatcher op
    included."""
    backend, colon, op = name.partition(":")
    return backend if colon and not op.startswith(":") and backend in KNOWN_BACKENDS else None


def profiling_child(kids: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The child named like the recorder's entry (`nccl:all_reduce`), if any."""
    for kid in kids:
        name = kid.get("name")
        if isinstance(name, str) and recorder_backend(name):
            return kid
    return None


def p2p_name(backend: str, op: str, group: Group, rank: int, peer: int) -> str:
    """The recorder's name of a send or recv: `nccl:send 0->1`, group-local ranks."""
    me = group.ranks.index(rank) if rank in group.ranks else rank
    return f"{backend}:{op} {me}{'->' if op == 'send' else '<-'}{peer}"


def next_id(counters: dict[str, int], key: str) -> int:
    """The next of a per-group counter (1 first)."""
    counters[key] = counters.get(key, 0) + 1
    return counters[key]


def entry(
    entries: Sequence[Any],
    group: Group,
    profiling: str,
    *,
    coll: int,
    p2p: int,
    is_p2p: bool,
    op_id: int,
    sizes: tuple[list[Any], list[str], list[Any], list[str]],
) -> dict[str, Any]:
    """One op as a Flight Recorder entry: no times and no state but `scheduled` (a trace
    keeps neither), its sizes as `(in shapes, in dtypes, out shapes, out dtypes)`."""
    in_shapes, in_dtypes, out_shapes, out_dtypes = sizes
    return {
        "record_id": len(entries),
        "pg_id": decimal(group.name) or 0,
        "process_group": (group.name, group.desc),
        "collective_seq_id": coll,
        "p2p_seq_id": p2p,
        "op_id": op_id,
        "profiling_name": profiling,
        "input_sizes": in_shapes,
        "input_dtypes": in_dtypes,
        "output_sizes": out_shapes,
        "output_dtypes": out_dtypes,
        "state": "scheduled",
        "retired": False,
        "is_p2p": is_p2p,
        "time_created_ns": 0,  # unset: a trace keeps no time of its ops
        "time_discovered_started_ns": 0,
        "time_discovered_completed_ns": 0,
        "timeout_ms": 0,
    }


def numel(shapes: Sequence[Any]) -> int:
    """The elements of a list of shapes, together."""
    total = 0
    for shape in shapes:
        count = 1
        for dim in shape if isinstance(shape, list) else []:
            count *= dim if isinstance(dim, int) else 1
        total += count
    return total
