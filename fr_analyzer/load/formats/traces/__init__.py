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
`scheduled` and not retired, and the dialect (`Dialect.EXECUTION_TRACE`) tells the
matcher to judge progress by what every rank issued.

A rank killed while tracing leaves a file cut in the middle of its nodes (they are appended as
ops end; the end is written at a clean stop): `read_truncated` reads it to its last complete
node. A gloo rank killed inside a call leaves its `c10d::` node and not its backend node: that
call is its last, unfinished op (`dispatcher`). A rank's Flight Recorder dump beside its trace
wins where they disagree (`merge`, `pin`); a Kineto trace beside it gives its ops' times
(`kineto`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....model.ranks import MAX_RANK
from ...safety.door import parse_json, parse_json_prefix
from ...safety.limits import LIMITS
from .assign import Settlement
from .assign import settle as search_settle
from .dispatcher import Op, dispatcher_ops, from_dispatcher
from .kineto import join as join_kineto
from .merge import merge
from .nodes import INIT_NODE, RECORD_NODE, Group, groups_of, world_size
from .pin import pin
from .records import from_records

__all__ = [
    "CUT_NOTE",
    "INIT_NODE",
    "Converted",
    "GlooOps",
    "Settlement",
    "TraceError",
    "gloo_ops",
    "is_execution_trace",
    "looks_like_trace",
    "merge",
    "pin",
    "read_truncated",
    "settle",
    "settle_groups",
    "to_dump",
]


CUT_NOTE = "its Execution Trace ends in the middle"
"""How the report begins its note on a rank whose trace was cut (`read_truncated`): the rank
was killed while tracing."""


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
            node, at = parse_json_prefix(text, at)  # no slice per node: linear in the text
        except ValueError:
            break  # the node the rank was writing when it stopped
        nodes.append(node)
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


def believed_ranks(shown: int) -> int:
    """The most ranks a trace's group given by a size alone is believed for, when the files
    show `shown` ranks (their highest rank + 1; 0: unknown, then the largest rank anywhere)."""
    if shown <= 0:
        return MAX_RANK + 1
    return min(MAX_RANK + 1, LIMITS.claimed_world_factor * shown)


@dataclass(frozen=True)
class GlooOps:
    """One rank's gloo trace as `settle` weighs it: its ops (before their groups are chosen),
    its groups, and whether the trace was cut (no `finish_ts`: the rank was killed). Small
    beside the trace: what a worker that parsed it sends back."""

    ops: tuple[Op, ...]
    groups: Mapping[str, Group]
    cut: bool = False


def gloo_ops(trace: Any, rank: int, shown: int) -> GlooOps | None:
    """A gloo trace's ops and groups (`shown`: see `believed_ranks`); None when `trace` is
    no Execution Trace or is one that names its groups (NCCL's `record_param_comms`)."""
    if not is_execution_trace(trace):
        return None
    nodes = _nodes(trace)
    if any(n.get("name") == RECORD_NODE for n in nodes):
        return None
    groups = groups_of(nodes, believed_ranks(shown))
    ops = tuple(dispatcher_ops(nodes, groups, rank))
    return GlooOps(ops, groups, "finish_ts" not in trace)


def settle(found: Mapping[int, GlooOps]) -> Settlement:
    """The group of each rank's ops that a look at every rank's gloo trace settles, by rank
    (`assign.settle`: a search, greedy past its budget)."""
    every: dict[str, Group] = {}
    for one in found.values():
        every.update(one.groups)
    ops = {rank: list(one.ops) for rank, one in found.items()}
    cut = frozenset(rank for rank, one in found.items() if one.cut)
    return search_settle(ops, every, cut)


def settle_groups(traces: Mapping[int, Mapping[str, Any]], shown: int = 0) -> Settlement:
    """For gloo traces (no `record_param_comms`), the group of each rank's ops that a look at
    every rank's trace settles (`settle`); no groups (`chosen` {}) for other traces. `shown`:
    the ranks the files show (`believed_ranks`), else those of `traces`."""
    shown = shown or max(traces, default=-1) + 1
    found: dict[int, GlooOps] = {}
    for rank, trace in traces.items():
        one = gloo_ops(trace, rank, shown)
        if one is None:
            return Settlement({})
        found[rank] = one
    return settle(found)


def to_dump(
    trace: Mapping[str, Any],
    rank: int,
    chosen: Sequence[str | None] = (),
    shown: int = 0,
    kineto: tuple[Mapping[str, Any], str] | None = None,
) -> Converted:
    """The Flight Recorder form of one rank's Execution Trace (see the module docstring);
    `chosen`: the groups of a gloo trace's ops that `settle_groups` settled; `shown`: the
    ranks the files show, within which a group's size alone is believed (`believed_ranks`);
    `kineto`: the rank's Kineto trace and where it is, whose times are joined to the ops
    (`kineto.join`)."""
    nodes = _nodes(trace)
    most = believed_ranks(max(shown, rank + 1) if shown > 0 else 0)
    groups = groups_of(nodes, most)
    world = world_size(groups)
    records = [n for n in nodes if n.get("name") == RECORD_NODE]
    notes: list[str] = []
    if records:
        entries = from_records(nodes, groups, rank, most)
    else:
        entries, inferred = from_dispatcher(nodes, groups, rank, chosen)
        notes.append(
            "a gloo Execution Trace names no group: each op's group is inferred from every "
            "rank's trace (which groups each op fits, and which members have it next)"
            + (", else counted on the default group" if inferred else "")
            + "; the answer's group is inferred"
        )
    if kineto is not None:
        notes += join_kineto(entries, *kineto)
    for one in entries:
        one.pop("rf_id", None)
    unbelieved = [g for g in groups.values() if g.unbelieved]
    if unbelieved:
        shown_names = ", ".join(f"{g.name[:40]!r} of {g.unbelieved:,}" for g in unbelieved[:3])
        notes.append(
            f"its Execution Trace gives group(s) {shown_names} ranks by size"
            f" alone, past {most:,} ({LIMITS.claimed_world_factor}x the ranks the files show):"
            " not believed, the job is what the files show"
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
