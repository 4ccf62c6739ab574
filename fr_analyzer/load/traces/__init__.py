"""PyTorch Execution Traces (Chakra ET, `torch.profiler.ExecutionTraceObserver`) rewritten into
the form of a Flight Recorder dump, so that they go through the same stages.

An ET is `{"schema": "1.1.1-chakra.0.0.4", "pid", "time", "start_ts", "nodes", "finish_ts"}`;
`pid` is the OS process id, so the rank comes from the file name. Node ids are given when an op
starts and nodes written when it ends: the nodes are read in id order. What is read (facts from
real files, torch 2.11 on a GPU and 2.13 on CPU):

- `## process_group:init ##` (once or twice): a JSON string listing the groups the rank belongs
  to (`pg_name`, `pg_desc`, `backend_config`, `ranks` where `[]` is every rank, `group_size`).
  It becomes `pg_config`.
- **NCCL/XCCL**: one `record_param_comms` node per op, its inputs `[tensors, (seq, is_p2p),
  (pg_name, pg_desc), rank, collective_name, in_split, out_split, global_rank_start,
  global_rank_stride, group_size]` (no tensors: the first is left out; `rank` is the root of a
  rooted op, the peer of a send/recv, group-local) and its outputs the output tensors. Its child
  is named like the recorder's profiling name (`nccl:_all_gather_base`). `seq` is the group's
  collective sequence id (`collective_seq_id`), or its p2p one. A coalesced block ends with a
  top-level `nccl:coalesced` node and a `wait` record carrying the block's sequence id, as the
  recorder's `nccl:coalesced` entry does.
- **gloo** (torch 2.13): no `record_param_comms`; each op is a `c10d::<op>` dispatcher node
  (its group written as `"<Object>"`) and a `gloo:<op>` node named like the recorder's entry.
  No group and no sequence id: each op's group is inferred from the groups the rank is in and
  the op's sizes (an all_gather's output is its input times the group size; a send's peer is
  a member), and where several groups could hold it, counted on the default group. Sequence
  ids are counted per group.

An ET holds what each rank issued, in order: no states and no times. Its entries are marked
`scheduled` and not retired, and the dialect (`dialects.Dialect.EXECUTION_TRACE`) tells the
matcher to judge progress by what every rank issued.

A rank killed while tracing leaves a file cut in the middle of its nodes (they are appended as
ops end; the end is written at a clean stop): `read_truncated` reads it to its last complete
node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..safety import parse_json, parse_json_prefix
from .assign import Settlement, settle
from .dispatcher import Op, dispatcher_ops, from_dispatcher
from .merge import merge
from .nodes import INIT_NODE, RECORD_NODE, Group, groups_of, world_size
from .records import from_records

__all__ = [
    "INIT_NODE",
    "Converted",
    "Settlement",
    "TraceError",
    "is_execution_trace",
    "looks_like_trace",
    "merge",
    "read_truncated",
    "settle_groups",
    "to_dump",
]


class TraceError(ValueError):
    """An Execution Trace that cannot be read as one; the message says why."""


def is_execution_trace(obj: Any) -> bool:
    """Whether a parsed JSON object is an Execution Trace (nodes, a Chakra schema or the
    trace's start/finish stamps) rather than a Flight Recorder dump."""
    if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list):
        return False
    if "entries" in obj or "pg_config" in obj:
        return False
    schema = obj.get("schema")
    return (isinstance(schema, str) and "chakra" in schema) or "start_ts" in obj


_TRUNCATED_HEAD = re.compile(rb'\A\s*\{\s*"schema"\s*:\s*"[^"]*"')
_NODES_KEY = re.compile(r'"nodes"\s*:\s*\[')


def looks_like_trace(data: bytes) -> bool:
    """Whether JSON text starts like an Execution Trace (its first key is `schema`)."""
    return _TRUNCATED_HEAD.match(data[:4096]) is not None


def read_truncated(text: str) -> tuple[dict[str, Any], int]:
    """An Execution Trace cut in the middle (a rank killed while tracing), read to its last
    complete node: the trace and how many nodes it holds. Raises TraceError when not even the
    header before the nodes is whole."""
    found = _NODES_KEY.search(text)
    if found is None:
        raise TraceError("cut before its nodes")
    try:
        header = parse_json(text[: found.start()].rstrip().rstrip(",") + "}")
    except ValueError:
        raise TraceError("its header is malformed") from None
    if not isinstance(header, dict):
        raise TraceError("its header is not an object")
    nodes: list[Any] = []
    at = found.end()
    size = len(text)
    while True:
        while at < size and text[at] in " \t\r\n,":
            at += 1
        if at >= size or text[at] != "{":
            break
        try:
            node, length = parse_json_prefix(text[at:])
        except ValueError:
            break  # the node the rank was writing when it stopped
        nodes.append(node)
        at += length
    header["nodes"] = nodes
    return header, len(nodes)


@dataclass(frozen=True)
class Converted:
    """A trace in Flight Recorder form, and notes for the report."""

    dump: dict[str, Any]
    notes: tuple[str, ...]


def _nodes(trace: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The trace's nodes in id order (the order their ops started)."""
    return sorted(
        (n for n in trace["nodes"] if isinstance(n, dict) and isinstance(n.get("id"), int)),
        key=lambda n: n["id"],
    )


def settle_groups(traces: Mapping[int, Mapping[str, Any]]) -> Settlement:
    """For gloo traces (no `record_param_comms`), the group of each rank's ops that a look at
    every rank's trace settles (`assign.settle`); no groups (`chosen` {}) for other traces."""
    ops: dict[int, list[Op]] = {}
    every: dict[str, Group] = {}
    for rank, trace in traces.items():
        if not is_execution_trace(trace):
            return Settlement({})
        nodes = _nodes(trace)
        if any(n.get("name") == RECORD_NODE for n in nodes):
            return Settlement({})
        groups = groups_of(nodes)
        every.update(groups)
        ops[rank] = dispatcher_ops(nodes, groups, rank)
    cut = frozenset(rank for rank, trace in traces.items() if "finish_ts" not in trace)
    return settle(ops, every, cut)


def to_dump(trace: Mapping[str, Any], rank: int, chosen: Sequence[str | None] = ()) -> Converted:
    """The Flight Recorder form of one rank's Execution Trace (see the module docstring);
    `chosen`: the groups of a gloo trace's ops that `settle_groups` settled."""
    nodes = _nodes(trace)
    groups = groups_of(nodes)
    world = world_size(groups)
    records = [n for n in nodes if n.get("name") == RECORD_NODE]
    notes: list[str] = []
    if records:
        entries = from_records(nodes, groups, rank)
    else:
        entries, inferred = from_dispatcher(nodes, groups, rank, chosen)
        notes.append(
            "a gloo Execution Trace names no group: each op's group is inferred from every "
            "rank's trace (which groups each op fits, and which members have it next)"
            + (", else counted on the default group" if inferred else "")
            + "; the answer's group is inferred"
        )
    config = {
        g.name: {
            "name": g.name,
            "desc": g.desc,
            "ranks": str(list(g.ranks or range(world))),
            "backend": g.backend,
        }
        for g in groups.values()
    }
    dump = {
        "version": f"ET {trace.get('schema', '')}".strip(),
        "pg_config": config,
        "pg_status": {},
        "entries": entries,
        "execution_trace": {
            "schema": str(trace.get("schema", "")),
            "pid": trace.get("pid"),
            "complete": "finish_ts" in trace,
        },
    }
    return Converted(dump, tuple(notes))
