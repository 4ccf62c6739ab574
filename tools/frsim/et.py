"""Write the Chakra Execution Trace (ET) each rank of a simulated job would leave.

torch's `ExecutionTraceObserver` (`torch.profiler.ExecutionTraceObserver`, schema
"1.1.1-chakra.0.0.4") appends one JSON node per operator as the operator *ends*; its id was
taken when it *started*, from the one counter that also numbers every tensor and storage the
observer first sees. So a parent is written after its children, ids have gaps where tensors
took numbers, and the file is not in id order. The layout here is the one of
`/work/shared/real_nccl/extras/rank-0.et.json` (torch 2.11, NCCL):

- the thread node (id 2) first, then two `## process_group:init ##` nodes whose one input is
  the JSON text of `_world.pg_config_info` (`ranks` [] for a group of every rank);
- per collective: the allocations torch makes for its outputs (`aten::empty`,
  `aten::empty_like`), then the dispatcher op `c10d::<op>_`, whose child `record_param_comms`
  (ProcessGroupNCCL's `RECORD_PARAM_COMMS_DATA`: [tensors, (seq, is_p2p), (pg name, desc),
  rank, collective name, split sizes, global rank start and stride, group size], and the
  `ParamCommsDebugInfo` attrs) has the work's record function `nccl:<profiling name>` as its
  child. `seq` is Flight Recorder's collective_seq_id, a p2p op's p2p_seq_id (is_p2p true);
  `rank` is the group rank of the caller, the root of a rooted op, the peer of a send/recv;
- a coalesced block (a `_coalescing_manager` or `batch_isend_irecv`): its members, then the
  block's own work `nccl:coalesced` at the top level and the `record_param_comms` "wait" of
  `work.wait()` carrying the block's seq. Sends and receives inside a batch create no work,
  so they have no `nccl:send` child. An uneven all_gather (reduce_scatter) is one
  `c10d::allgather_` (`reduce_scatter_`) whose `record_param_comms` holds the per-rank
  `nccl:_broadcast_oop` (`_reduce_oop`) works and the block's `nccl:ALLGATHER_coalesced`;
- a group's first collective creates its NCCL communicator: an "init" `record_param_comms`
  holding a "broadcastUniqueNCCLID" one, under that collective's `record_param_comms` (not
  for send/recv's own pair communicators, whose records were not seen);
- `[pytorch|profiler|execution_trace|process]` (id 1) and the closing `], "finish_ts"` only at
  a clean stop;
- gloo (as torch 2.13's gloo traces show): no `record_param_comms` (no group, no seq in the
  file), each dispatcher op followed by its `gloo:<op>` work at the top level, no coalesced
  blocks (gloo runs a batch's sends and receives one by one).

An ET has no states and no times of ops: it holds what a rank *issued*, all of it (no ring
buffer). A rank that crashed, or that the watchdog killed in a hung job, never stops the
observer: its file ends after the last node it wrote (the op it issued last), no closing
bracket. A `.gz` target is compressed only at a clean stop; a killed rank's data is in a
temporary `.json` elsewhere (`tempfile`), so nothing is at its `.gz` path.

What frsim does not know is made up, deterministically: tensor ids (a buffer is keyed by its
call site, shape and dtype, so a step reuses the previous step's tensors, as a training loop's
buffers do), the uneven all_to_all split sizes (the input and output totals split as evenly as
they go), pid and clocks. No user compute ops are written, only what the communication ops
themselves run; nor the aten ops gloo's own worker thread runs (its second thread node).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .engine import NEVER
from .program import Kind, Program, Template
from .recorder import BASE_TIME_NS, clock_offset, mix

if TYPE_CHECKING:
    from .sim import Simulation

SCHEMA = "1.1.1-chakra.0.0.4"
THREAD_NODE = "[pytorch|profiler|execution_trace|thread]"
PROCESS_NODE = "[pytorch|profiler|execution_trace|process]"
PG_INIT_NODE = "## process_group:init ##"
PARAM_COMMS = "record_param_comms"
USER_SCOPE = 7
"""`RecordScope::USER_SCOPE`: the root nodes and the works' record functions."""
FUNCTION_SCOPE = 0

DTYPES: dict[str, tuple[str, int, int]] = {
    "Float": ("float", 4, 6),
    "BFloat16": ("c10::BFloat16", 2, 15),
    "Half": ("c10::Half", 2, 5),
    "Double": ("double", 8, 7),
    "Long": ("long int", 8, 4),
    "Int": ("int", 4, 3),
    "Short": ("short int", 2, 2),
    "Byte": ("unsigned char", 1, 0),
    "Char": ("signed char", 1, 1),
    "Bool": ("bool", 1, 11),
}
"""Flight Recorder dtype -> (the C++ type name ET writes in "Tensor(...)", itemsize, the
ScalarType number torch passes as an op's dtype argument)."""

_PG = "__torch__.torch.classes.c10d.ProcessGroup process_group"
_OP = "__torch__.torch.classes.c10d.ReduceOp reduce_op"
_WORK = "__torch__.torch.classes.c10d.Work"
SCHEMAS: dict[str, str] = {
    "c10d::allreduce_": f"c10d::allreduce_(Tensor[] tensors, {_PG}, {_OP}, Tensor? sparse_indices,"
    f" bool async_op=True, int timeout=-1) -> (Tensor[], {_WORK})",
    "c10d::allreduce_coalesced_": f"c10d::allreduce_coalesced_(Tensor[] tensors, {_PG}, {_OP},"
    f" bool async_op=True, int timeout=-1) -> {_WORK}",
    "c10d::broadcast_": f"c10d::broadcast_(Tensor[] tensors, {_PG}, int root_rank, int root_tensor,"
    f" bool async_op=True, int timeout=-1) -> (Tensor[], {_WORK})",
    "c10d::reduce_": f"c10d::reduce_(Tensor[] tensors, {_PG}, {_OP}, int root_rank,"
    f" int root_tensor, bool async_op=True, int timeout=-1) -> {_WORK}",
    "c10d::_allgather_base_": f"c10d::_allgather_base_(Tensor output_tensor, Tensor input_tensor,"
    f" {_PG}, bool async_op=True, int timeout=-1) -> (Tensor, {_WORK})",
    "c10d::allgather_": f"c10d::allgather_(Tensor[][] output_tensors, Tensor[] input_tensors,"
    f" {_PG}, bool async_op=True, int timeout=-1) -> (Tensor[][], {_WORK})",
    "c10d::_reduce_scatter_base_": f"c10d::_reduce_scatter_base_(Tensor output_tensor,"
    f" Tensor input_tensor, {_PG}, {_OP}, bool async_op=True, int timeout=-1)"
    f" -> (Tensor, {_WORK})",
    "c10d::reduce_scatter_": f"c10d::reduce_scatter_(Tensor[] output_tensors,"
    f" Tensor[][] input_tensors, {_PG}, {_OP}, bool async_op=True, int timeout=-1)"
    f" -> (Tensor[], {_WORK})",
    "c10d::alltoall_base_": f"c10d::alltoall_base_(Tensor output, Tensor input, {_PG},"
    f" int[] output_split_sizes, int[] input_split_sizes, bool async_op=True, int timeout=-1)"
    f" -> {_WORK}",
    "c10d::allgather_into_tensor_coalesced_": "c10d::allgather_into_tensor_coalesced_("
    f"Tensor[] outputs, Tensor[] inputs, {_PG}, bool async_op=True) -> {_WORK}",
    "c10d::reduce_scatter_tensor_coalesced_": "c10d::reduce_scatter_tensor_coalesced_("
    f"Tensor[] outputs, Tensor[] inputs, {_PG}, {_OP}, bool async_op=True) -> {_WORK}",
    "c10d::barrier": f"c10d::barrier(Tensor tensor, {_PG}, int[] device_ids, bool async_op=True,"
    f" int timeout=-1) -> {_WORK}",
    "c10d::monitored_barrier_": f"c10d::monitored_barrier_(Tensor tensor, {_PG},"
    " int[] device_ids, int timeout, bool wait_all_ranks) -> ()",
    "c10d::send": f"c10d::send(Tensor[] tensors, {_PG}, int dst, int tag) -> {_WORK}",
    "c10d::recv_": f"c10d::recv_(Tensor[] tensors, {_PG}, int src, int tag) -> {_WORK}",
    "aten::empty": "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None,"
    " Layout? layout=None, Device? device=None, bool? pin_memory=None,"
    " MemoryFormat? memory_format=None) -> Tensor",
    "aten::empty_like": "aten::empty_like(Tensor self, *, ScalarType? dtype=None,"
    " Layout? layout=None, Device? device=None, bool? pin_memory=None,"
    " MemoryFormat? memory_format=None) -> Tensor",
    "aten::empty_strided": "aten::empty_strided(SymInt[] size, SymInt[] stride, *,"
    " ScalarType? dtype=None, Layout? layout=None, Device? device=None,"
    " bool? pin_memory=None) -> Tensor",
    "aten::zeros": "aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None,"
    " Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::zero_": "aten::zero_(Tensor(a!) self) -> Tensor(a!)",
    "aten::fill_": "aten::fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)",
    "aten::flatten": "aten::flatten.using_ints(Tensor(a) self, int start_dim=0,"
    " int end_dim=-1) -> Tensor(a)",
    "aten::copy_": "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False)"
    " -> Tensor(a!)",
}
"""The operator schemas ET writes as `op_schema` (torch 2.11's)."""

# --- values, as the observer's convertIValue writes them -------------------------------------


@dataclass(frozen=True)
class Tensor:
    """A tensor argument: `key` says which buffer it is (same key, same ids)."""

    key: tuple[object, ...]
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class _Tag:
    """An argument written as "<Object>", "<None>" or a device string."""

    type: str
    text: str


OBJECT = _Tag("Object", '"<Object>"')
NONE = _Tag("None", '"<None>"')
Value = Tensor | _Tag | bool | int | float | str | Sequence["Value"]
"""An op argument: lists (`GenericList`) and tuples (`Tuple`) nest."""


def _device(backend: str) -> _Tag:
    return _Tag("Device", '"cpu"' if backend == "gloo" else '"cuda:0"')


def _strides(shape: tuple[int, ...]) -> list[int]:
    out, step = [], 1
    for dim in reversed(shape):
        out.append(step)
        step *= dim
    return out[::-1]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def _list(items: Sequence[str]) -> str:
    return "[" + ",".join(items) + "]"


class _Ids:
    """The observer's one id counter (ops, tensors, storages) and its tensor table."""

    def __init__(self, device: str) -> None:
        self.next = 3  # 1: the process node, 2: the thread node
        self.tensors: dict[tuple[object, ...], tuple[int, int]] = {}
        self.device = device

    def new(self) -> int:
        found = self.next
        self.next += 1
        return found

    def convert(self, v: Value, base: bool = True) -> tuple[str, str, str, str]:
        """(shape, stride, type, value) of `v`; a tensor seen for the first time takes two ids
        (its TensorImpl's, then its storage's)."""
        if isinstance(v, Tensor):
            ids = self.tensors.get(v.key)
            if ids is None:
                tensor_id = self.new()
                ids = self.tensors[v.key] = (tensor_id, self.new())
            ctype, itemsize, _ = DTYPES.get(v.dtype, (v.dtype.lower(), 4, 6))
            kind = f"Tensor({ctype})"
            text = f'[{ids[0]},{ids[1]},0,{_numel(v.shape)},{itemsize},"{self.device}"]'
            shape = _list([str(d) for d in v.shape])
            stride = _list([str(s) for s in _strides(v.shape)])
            return shape, stride, f'"{kind}"' if base else kind, text
        if isinstance(v, (list, tuple)):
            parts = [self.convert(item, False) for item in v]
            kind = ("GenericList" if isinstance(v, list) else "Tuple") + _list(
                [p[2] for p in parts]
            )
            return (
                _list([p[0] for p in parts]),
                _list([p[1] for p in parts]),
                f'"{kind}"' if base else kind,
                _list([p[3] for p in parts]),
            )
        if isinstance(v, _Tag):
            kind, text = v.type, v.text
        elif isinstance(v, bool):
            kind, text = "Bool", "true" if v else "false"
        elif isinstance(v, int):
            kind, text = "Int", str(v)
        elif isinstance(v, float):
            kind, text = "Double", f"{v:f}"
        else:
            kind, text = "String", json.dumps(v)
        return "[]", "[]", f'"{kind}"' if base else kind, text

    def io(self, values: Sequence[Value]) -> str:
        """The `{"values", "shapes", "types", "strides"}` object of an op's inputs/outputs."""
        parts = [self.convert(v) for v in values]
        shapes, strides, types, texts = (_list([p[i] for p in parts]) for i in range(4))
        return f'{{"values": {texts}, "shapes": {shapes}, "types": {types}, "strides": {strides}}}'


# --- nodes ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comms:
    """A `record_param_comms` call: its inputs after the tensors, and the debug info attrs."""

    seq: int
    is_p2p: bool
    pg: tuple[str, str]
    rank: int
    name: str
    dtype: str
    in_nelems: int
    out_nelems: int
    in_splits: tuple[int, ...] = ()
    out_splits: tuple[int, ...] = ()
    rank_start: int = 0
    rank_stride: int = 1
    size: int = 1

    def inputs(self) -> list[Value]:
        """The macro's parameter list after its tensors."""
        return [
            (self.seq, self.is_p2p),
            self.pg,
            self.rank,
            self.name,
            list(self.in_splits),
            list(self.out_splits),
            self.rank_start,
            self.rank_stride,
            self.size,
        ]

    def attrs(self) -> str:
        """The attrs ET adds after tensor_range (`getAttrJson`, each on its own line)."""

        def attr(name: str, kind: str, value: str) -> str:
            return f'\n  {{"name": "{name}", "type": "{kind}", "value": {value}}}'

        found = [
            attr("collective_name", "string", json.dumps(self.name)),
            attr("dtype", "string", json.dumps(self.dtype)),
            attr("in_msg_nelems", "uint64", str(self.in_nelems)),
            attr("out_msg_nelems", "uint64", str(self.out_nelems)),
            attr("in_split_size", "string", json.dumps(_list([str(s) for s in self.in_splits]))),
            attr("out_split_size", "string", json.dumps(_list([str(s) for s in self.out_splits]))),
        ]
        if self.rank_start >= 0:
            found.append(attr("global_rank_start", "uint64", str(self.rank_start)))
        if self.rank_stride > 0:
            found.append(attr("global_rank_stride", "uint64", str(self.rank_stride)))
        found += [
            attr("pg_name", "string", json.dumps(self.pg[0])),
            attr("pg_desc", "string", json.dumps(self.pg[1])),
            attr("pg_size", "uint64", str(self.size)),
        ]
        return ", " + ", ".join(found)


def node_text(
    node_id: int,
    name: str,
    parent: int,
    inputs: str,
    outputs: str,
    rf_id: int,
    seq_id: int,
    scope: int,
    tid: int,
    schema: str = "",
    extra: str = "",
) -> str:
    """One node as `writeJsonNode` writes it (torch 2.11's indentation)."""
    return (
        f'\n      {{\n        "id": {node_id}, "name": {json.dumps(name)}, "ctrl_deps": {parent},'
        f'\n        "inputs": {inputs},\n        "outputs": {outputs},'
        f'\n        "attrs": [{{"name": "rf_id", "type": "uint64", "value": {rf_id}}},'
        f'{{"name": "fw_parent", "type": "uint64", "value": 0}},'
        f'{{"name": "seq_id", "type": "int64", "value": {seq_id}}},'
        f'{{"name": "scope", "type": "uint64", "value": {scope}}},'
        f'{{"name": "tid", "type": "uint64", "value": {tid}}},'
        f'{{"name": "fw_tid", "type": "uint64", "value": 0}},'
        f'{{"name": "op_schema", "type": "string", "value": {json.dumps(schema)}}},'
        f'{{"name": "kernel_backend", "type": "string", "value": ""}},'
        f'{{"name": "kernel_file", "type": "string", "value": ""}},'
        f'{{"name": "tensor_range", "type": "string", "value": ""}}{extra}]\n      }}'
    )


EMPTY_IO = '{"values": [], "shapes": [], "types": [], "strides": []}'
Body = Callable[[int], object]
"""The children of an op: called with its id while it runs."""


class Tracer:
    """One rank's observer: allocates ids as ops start, writes nodes as they end."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.device = _device(backend)
        self.ids = _Ids("cpu" if backend == "gloo" else "cuda:0")
        self.rf = 1
        self.nodes: list[str] = [
            node_text(2, THREAD_NODE, 1, EMPTY_IO, EMPTY_IO, 0, -1, USER_SCOPE, 1)
        ]
        self.gloo = backend == "gloo"
        self.after: list[Body] = []
        """gloo: works that start once the current dispatcher op has returned."""

    def op(
        self,
        name: str,
        parent: int,
        inputs: Sequence[Value] = (),
        outputs: Sequence[Value] = (),
        body: Body | None = None,
        scope: int = FUNCTION_SCOPE,
        seq_id: int = -1,
        comms: Comms | None = None,
    ) -> int:
        """Run one op: its id and rf_id now, its inputs' ids, its children (`body(id)`), then
        its outputs' ids, and write it; returns its id."""
        node_id = self.ids.new()
        rf_id = self.rf
        self.rf += 1
        ins = self.ids.io(inputs)
        if body is not None:
            body(node_id)
        outs = self.ids.io(outputs)
        extra = comms.attrs() if comms is not None else ""
        schema = SCHEMAS.get(name, "")
        self.nodes.append(
            node_text(node_id, name, parent, ins, outs, rf_id, seq_id, scope, 1, schema, extra)
        )
        if parent == 2 and self.after:
            pending, self.after = self.after, []
            for start in pending:
                start(2)
        return node_id

    def work(
        self, name: str, parent: int, tensors: Sequence[Tensor], body: Body | None = None
    ) -> None:
        """The record function of a work (`nccl:all_reduce`, `nccl:coalesced`, ...)."""
        self.op(name, parent, list(tensors), body=body, scope=USER_SCOPE)

    def comms(
        self,
        parent: int,
        info: Comms,
        tensors: Value | None,
        outputs: Value | None,
        body: Body | None = None,
    ) -> None:
        """`record_param_comms`: `RECORD_PARAM_COMMS_DATA` (with tensors) or, tensors None,
        `RECORD_PARAM_COMMS` (barrier, wait). ProcessGroupGloo records none: its work starts
        after the dispatcher op returned, a top-level node (torch 2.13's gloo traces)."""
        if self.gloo:
            if body is not None:
                self.after.append(body)
            return
        ins = info.inputs() if tensors is None else [tensors, *info.inputs()]
        outs = [] if outputs is None else [outputs]
        self.op(PARAM_COMMS, parent, ins, outs, body, comms=info)

    def empty(self, out: Tensor, pin: Value = False) -> None:
        """`torch.empty(shape, dtype=...)` of an output buffer (`pin`: its pin_memory
        argument; c10d's own barrier tensor passes none)."""
        code = DTYPES.get(out.dtype, ("", 4, 6))[2]
        self.op(
            "aten::empty",
            2,
            [list(out.shape), NONE if code == 6 else code, NONE, self.device, pin, NONE],
            [out],
        )

    def empty_like(self, like: Tensor, out: Tensor) -> None:
        """`torch.empty_like(like)`, which runs `aten::empty_strided`."""
        code = DTYPES.get(out.dtype, ("", 4, 6))[2]

        def body(me: int) -> None:
            self.op(
                "aten::empty_strided",
                me,
                [list(out.shape), _strides(out.shape), code, 0, self.device, False],
                [out],
            )

        self.op("aten::empty_like", 2, [like, NONE, NONE, NONE, False, NONE], [out], body)

    def zeros(self, parent: int, out: Tensor) -> None:
        """`torch.zeros(shape)`: empty, then zero_ (which fills)."""
        code = DTYPES.get(out.dtype, ("", 4, 6))[2]

        def body(me: int) -> None:
            self.op(
                "aten::empty", me, [list(out.shape), code, NONE, self.device, NONE, NONE], [out]
            )
            self.op(
                "aten::zero_",
                me,
                [out],
                [out],
                lambda z: self.op("aten::fill_", z, [out, 0], [out]),
                seq_id=0,
            )

        self.op(
            "aten::zeros", parent, [list(out.shape), code, NONE, self.device, NONE], [out], body
        )


# --- one rank's trace -----------------------------------------------------------------------


def _splits(total: int, parts: int) -> tuple[int, ...]:
    """`total` rows split over `parts` ranks as evenly as they go (the first ones get more)."""
    base, extra = divmod(total, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def _rank_span(ranks: tuple[int, ...]) -> tuple[int, int]:
    """ProcessGroupNCCL's globalRankStart_ and globalRankStride_ (-1: not strided)."""
    if len(ranks) == 1:
        return ranks[0], 0
    stride = ranks[1] - ranks[0]
    if all(r == ranks[0] + i * stride for i, r in enumerate(ranks)):
        return ranks[0], stride
    return ranks[0], -1


def _gloo_call(t: Template, group_size: int) -> tuple[str, tuple[tuple[int, ...], ...]]:
    """The call behind a gloo record (gloo records some calls as other ops, `program.template`)
    as (the op whose dispatcher node it is, its output tensors)."""
    if t.op == "all_gather" and t.api == "all_gather_into_tensor":
        return "_all_gather_base", ((_numel(t.out_sizes[0]),),)
    if t.op == "all_reduce" and t.api == "reduce_scatter_tensor":
        return "_reduce_scatter_base", ((_numel(t.in_sizes[0]) // max(1, group_size),),)
    if t.op == "all_gather" and t.api == "_coalescing_manager":
        outs = tuple((_numel(s) * group_size,) for s in t.in_sizes)
        return "all_gather_into_tensor_coalesced", outs
    if t.op == "all_reduce" and t.api == "_coalescing_manager" and len(t.in_sizes) > 1:
        return "allreduce_coalesced", t.out_sizes
    return t.op, t.out_sizes


@dataclass(frozen=True)
class _Group:
    """The group an op runs on, as this rank sees it."""

    name: str
    desc: str
    me: int
    size: int
    start: int
    stride: int


class RankTrace:
    """Builds the nodes of one rank's ET from its program, unit by unit."""

    def __init__(self, sim: Simulation, rank: int, comms_created: bool = False) -> None:
        self.sim, self.rank = sim, rank
        self.ready: set[str] = set()
        """Groups whose NCCL communicator exists (`comms_created`: all, as in a trace started
        after the first step)."""
        self.comms_created = comms_created
        self.layout = sim.spec.layout
        self.program: Program = sim.programs[rank]
        self.backend = sim.spec.backend
        self.t = Tracer(self.backend)
        self.binding = self.layout.binding(rank)
        self._groups: dict[int, _Group] = {}
        self._pg_init()

    def comm_init(self, parent: int, group: _Group) -> None:
        """ProcessGroupNCCL creates a group's communicator at its first collective, inside that
        collective's `record_param_comms`: an "init" record holding a "broadcastUniqueNCCLID"
        one, both on seq 0 (torch 2.11, `tests/data/real_nccl/et_many_ops`)."""
        if self.t.gloo or self.comms_created or group.name in self.ready:
            return
        self.ready.add(group.name)
        pg = (group.name, group.desc)

        def info(name: str) -> Comms:
            span = (group.start, group.stride, group.size)
            return Comms(0, False, pg, group.me, name, "Byte", 0, 0, (), (), *span)

        tr = self.t
        tr.comms(
            parent,
            info("init"),
            None,
            None,
            lambda me: tr.comms(me, info("broadcastUniqueNCCLID"), None, None),
        )

    def _group(self, slot: int) -> _Group:
        gid = self.binding[slot]
        found = self._groups.get(gid)
        if found is None:
            g = self.layout.group(gid)
            # the default group has no explicit rank list: start 0, stride 1; any other group
            # (even one of every rank) has one, so a one-rank group has stride 0
            start, stride = (0, 1) if gid == 0 else _rank_span(g.ranks)
            desc = g.desc or ("default_pg" if gid == 0 else "undefined")
            found = self._groups[gid] = _Group(
                str(gid), desc, g.local_rank(self.rank), g.size, start, stride
            )
        return found

    def _pg_init(self) -> None:
        layout = self.layout
        world = layout.world_size
        config = []
        backend = "cpu:gloo,cuda:gloo" if self.backend == "gloo" else "cuda:nccl"
        for gid in layout.member_gids(self.rank):
            g = layout.group(gid)
            config.append(
                {
                    "pg_name": str(gid),
                    "pg_desc": g.desc or ("default_pg" if gid == 0 else "undefined"),
                    "backend_config": backend,
                    "ranks": [] if g.size == world else list(g.ranks),
                    "group_size": g.size,
                    "group_count": layout.group_count,
                }
            )
        text = json.dumps(config)
        for _ in range(2):  # the observer's start records the groups twice (torch 2.11, 2.13)
            self.t.op(PG_INIT_NODE, 2, [text], scope=USER_SCOPE)

    # -- units ----------------------------------------------------------------------------

    def unit(self, u: int, names: Sequence[str]) -> None:
        """Every node unit `u` of the program writes; `names` are its entries' profiling names
        (members, then the marker), as Flight Recorder records them."""
        p = self.program
        kind, slot = p.kind[u], p.role[u]
        group = self._group(slot)
        templates = p.templates_of(u)
        site = p.site[u]
        nowait = p.nowait[u]
        if kind == Kind.COLL:
            self.collective(templates[0], names[0], p.cseq[u], group, (site, 0), nowait)
        elif kind in (Kind.SEND, Kind.RECV):
            self.p2p(templates[0], names[0], p.pseq[u], group, p.peer[u], (site, 0), True)
        elif kind == Kind.BATCH:
            block = p.catalog.blocks[p.item[u]]
            for j, t in enumerate(templates[:-1]):
                self.p2p(t, names[j], p.pseq[u], group, block.peers[j], (site, j), False)
            self.end_block(names[-1], p.pseq[u], True, group)
        else:
            self.block(templates, names, p.cseq[u], group, site, nowait)

    def _comms(
        self,
        group: _Group,
        seq: int,
        name: str,
        t: Template,
        is_p2p: bool = False,
        rank: int | None = None,
        nelems: tuple[int, int] | None = None,
        splits: tuple[tuple[int, ...], tuple[int, ...]] = ((), ()),
        dtype: str | None = None,
    ) -> Comms:
        """The `record_param_comms` of `t` on `group` (`rank`: the root or peer, else the
        caller's group rank; `nelems`: (in, out) where they are not `t`'s sizes)."""
        if nelems is None:
            nelems = (sum(_numel(s) for s in t.in_sizes), sum(_numel(s) for s in t.out_sizes))
        dtype = dtype or (t.in_dtypes or t.out_dtypes or ("Byte",))[0]
        return Comms(
            seq, is_p2p, (group.name, group.desc), group.me if rank is None else rank, name,
            dtype, nelems[0], nelems[1], splits[0], splits[1], group.start, group.stride,
            group.size,
        )  # fmt: skip

    def collective(
        self,
        t: Template,
        name: str,
        seq: int,
        group: _Group,
        where: tuple[str, int],
        nowait: bool,
    ) -> None:
        """A collective on its own (or a member of a coalesced block)."""
        tr = self.t
        op, out_sizes = t.op, t.out_sizes
        if tr.gloo:
            op, out_sizes = _gloo_call(t, group.size)
        ins = [
            Tensor(("in", *where, i, s), s, d)
            for i, (s, d) in enumerate(zip(t.in_sizes, t.in_dtypes, strict=True))
        ]
        out_dtype = (t.out_dtypes or t.in_dtypes or ("Float",))[0]
        outs = [Tensor(("out", *where, i, s), s, out_dtype) for i, s in enumerate(out_sizes)]
        seq_id = 0

        def kernel(children: Body | None = None, tensors: Sequence[Tensor] = ins) -> Body:
            def run(me: int) -> None:
                self.comm_init(me, group)
                tr.work(name, me, tensors, children)

            return run

        if not t.recorded:  # gloo's monitored_barrier: no work of its own in the records
            tr.op(
                "c10d::monitored_barrier_",
                2,
                [Tensor(("mb",), (1,), "Float"), OBJECT, [], 1_800_000, False],
                [],
                seq_id=seq_id,
            )
            return
        if op in ("all_reduce", "allreduce_coalesced"):
            fused = op == "allreduce_coalesced"
            info = self._comms(group, seq, "allreduce_coalesced" if fused else "allreduce", t)
            body = lambda me: tr.comms(me, info, ins, ins, kernel())  # noqa: E731
            if fused:
                tr.op(
                    "c10d::allreduce_coalesced_",
                    2,
                    [ins, OBJECT, OBJECT, nowait, -1],
                    [OBJECT],
                    body,
                    seq_id=seq_id,
                )
            else:
                tr.op(
                    "c10d::allreduce_",
                    2,
                    [ins, OBJECT, OBJECT, NONE, nowait, -1],
                    [ins, OBJECT],
                    body,
                    seq_id=seq_id,
                )
        elif op in ("broadcast", "_broadcast_oop"):
            info = self._comms(group, seq, "broadcast", t, rank=0)
            body = lambda me: tr.comms(me, info, ins, ins, kernel())  # noqa: E731
            tr.op(
                "c10d::broadcast_",
                2,
                [ins, OBJECT, 0, 0, nowait, -1],
                [ins, OBJECT],
                body,
                seq_id=seq_id,
            )
        elif op in ("reduce", "_reduce_oop"):
            info = self._comms(group, seq, "reduce", t, rank=0)
            body = lambda me: tr.comms(me, info, ins, ins, kernel())  # noqa: E731
            tr.op(
                "c10d::reduce_",
                2,
                [ins, OBJECT, OBJECT, 0, 0, nowait, -1],
                [OBJECT],
                body,
                seq_id=seq_id,
            )
        elif op == "_all_gather_base":
            tr.empty(outs[0])
            info = self._comms(group, seq, "_allgather_base", t)
            body = lambda me: tr.comms(me, info, ins[0], outs[0], kernel())  # noqa: E731
            tr.op(
                "c10d::_allgather_base_",
                2,
                [outs[0], ins[0], OBJECT, nowait, -1],
                [outs[0], OBJECT],
                body,
                seq_id=seq_id,
            )
        elif op == "_reduce_scatter_base":
            tr.empty(outs[0])
            info = self._comms(group, seq, "_reduce_scatter_base", t)
            copy: Body | None = None
            if group.size == 1:  # one rank: the "reduction" is a copy (as the real file shows)

                def copy(me: int) -> None:
                    tr.op("aten::flatten", me, [outs[0], 0, -1], [outs[0]], seq_id=0)
                    tr.op("aten::flatten", me, [ins[0], 0, -1], [ins[0]], seq_id=0)
                    tr.op("aten::copy_", me, [outs[0], ins[0], True], [outs[0]], seq_id=0)

            body = lambda me: tr.comms(me, info, ins[0], outs[0], kernel(copy))  # noqa: E731
            args: list[Value] = [outs[0], ins[0], OBJECT, OBJECT, nowait, -1]
            tr.op("c10d::_reduce_scatter_base_", 2, args, [outs[0], OBJECT], body, seq_id=seq_id)
        elif op == "all_gather":
            for o in outs:
                tr.empty_like(ins[0], o)
            info = self._comms(group, seq, "all_gather", t)
            body = lambda me: tr.comms(me, info, ins, [outs], kernel())  # noqa: E731
            tr.op(
                "c10d::allgather_",
                2,
                [[outs], ins, OBJECT, nowait, -1],
                [[outs], OBJECT],
                body,
                seq_id=seq_id,
            )
        elif op == "reduce_scatter":
            info = self._comms(group, seq, "reduce_scatter", t)
            body = lambda me: tr.comms(me, info, [ins], outs, kernel())  # noqa: E731
            tr.op(
                "c10d::reduce_scatter_",
                2,
                [outs, [ins], OBJECT, OBJECT, nowait, -1],
                [outs, OBJECT],
                body,
                seq_id=seq_id,
            )
        elif op == "all_to_all":
            tr.empty_like(ins[0], outs[0])
            splits: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
            if t.match is not None:  # uneven: the split sizes the caller passed
                rows_in = ins[0].shape[0] if ins[0].shape else 1
                rows_out = outs[0].shape[0] if outs[0].shape else 1
                splits = (_splits(rows_in, group.size), _splits(rows_out, group.size))
            info = self._comms(group, seq, "all_to_allv", t, splits=splits)
            body = lambda me: tr.comms(me, info, ins[0], outs[0], kernel())  # noqa: E731
            args = [outs[0], ins[0], OBJECT, list(splits[1]), list(splits[0]), nowait, -1]
            tr.op("c10d::alltoall_base_", 2, args, [OBJECT], body, seq_id=seq_id)
        elif op in ("all_reduce_barrier", "barrier"):
            flag = Tensor(("barrier_flag",), (1,), "Byte")
            tr.empty(flag, NONE)
            info = self._comms(group, seq, "barrier", t, nelems=(0, 0), dtype="Byte")
            zero = Tensor(("barrier",), (1,), "Float")

            def rpc_body(me: int) -> None:
                self.comm_init(me, group)
                if op == "all_reduce_barrier":
                    tr.zeros(me, zero)
                    tr.work(name, me, [zero])
                else:
                    tr.work(name, me, [])

            body = lambda me: tr.comms(me, info, None, None, rpc_body)  # noqa: E731
            tr.op("c10d::barrier", 2, [flag, OBJECT, [], nowait, -1], [OBJECT], body, seq_id=seq_id)
        elif op in ("all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced"):
            for o in outs:
                tr.empty(o)
            gather = op.startswith("all_gather")
            label = (
                "allgather_into_tensor_coalesced" if gather else "reduce_scatter_tensor_coalesced"
            )
            info = self._comms(group, seq, label, t)
            body = lambda me: tr.comms(me, info, ins, outs, kernel())  # noqa: E731
            args = [outs, ins, OBJECT, nowait] if gather else [outs, ins, OBJECT, OBJECT, nowait]
            tr.op(f"c10d::{label}_", 2, args, [OBJECT], body, seq_id=seq_id)
        else:  # an op frsim does not record otherwise: a plain dispatcher op on its inputs
            info = self._comms(group, seq, op, t)
            body = lambda me: tr.comms(me, info, ins, outs, kernel())  # noqa: E731
            tr.op(f"c10d::{op}_", 2, [ins, OBJECT, nowait, -1], [OBJECT], body, seq_id=seq_id)

    def p2p(
        self,
        t: Template,
        name: str,
        seq: int,
        group: _Group,
        peer: int,
        where: tuple[str, int],
        own_work: bool,
    ) -> None:
        """An unbatched send/recv (`own_work`: it has its `nccl:send a->b` work) or a member
        of a batch (no work: inside a coalescing block only the block has one)."""
        tr = self.t
        send = t.op == "send"
        tensor = Tensor(
            ("send" if send else "recv", *where, peer, t.in_sizes[0]), t.in_sizes[0], t.in_dtypes[0]
        )
        info = self._comms(group, seq, t.op, t, True, rank=peer)
        kernel = (lambda me: tr.work(name, me, [tensor])) if own_work else None
        body = lambda me: tr.comms(me, info, [tensor], [tensor], kernel)  # noqa: E731
        tr.op(
            "c10d::send" if send else "c10d::recv_",
            2,
            [[tensor], OBJECT, peer, 0],
            [OBJECT],
            body,
            seq_id=0,
        )

    def end_block(self, name: str, seq: int, is_p2p: bool, group: _Group) -> None:
        """A block's own work (top-level `nccl:coalesced`), then the `wait` on it (gloo
        coalesces nothing: its ops were each their own work)."""
        tr = self.t
        if tr.gloo:
            return
        tr.work(name, 2, [])
        pg = (group.name, group.desc)
        # WorkNCCL::wait records no global rank span (-1, -1): no global_rank_* attrs
        info = Comms(seq, is_p2p, pg, group.me, "wait", "Byte", 0, 0, (), (), -1, -1, group.size)
        tr.comms(2, info, None, None)

    def block(
        self,
        templates: Sequence[Template],
        names: Sequence[str],
        seq: int,
        group: _Group,
        site: str,
        nowait: bool,
    ) -> None:
        """A coalesced block of collectives: fused, uneven all_gather/reduce_scatter, or
        members then the block's work and wait."""
        members, marker = templates[:-1], templates[-1]
        if marker.op in ("ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"):
            self.uneven(members, names, seq, group, site, nowait)
            return
        for j, t in enumerate(members):
            self.collective(t, names[j], seq, group, (site, j), nowait)
        self.end_block(names[-1], seq, False, group)

    def uneven(
        self,
        members: Sequence[Template],
        names: Sequence[str],
        seq: int,
        group: _Group,
        site: str,
        nowait: bool,
    ) -> None:
        """An all_gather (reduce_scatter) of per-rank tensors of different sizes: one dispatcher
        op whose `record_param_comms` runs a broadcast (reduce) per rank in a coalescing block."""
        tr = self.t
        gather = members[0].op == "_broadcast_oop"
        chunks = [
            Tensor(("chunk", site, j, m.in_sizes[0]), m.in_sizes[0], m.in_dtypes[0])
            for j, m in enumerate(members)
        ]
        shape = chunks[min(group.me, len(chunks) - 1)].shape
        mine = Tensor(("mine", site, shape), shape, chunks[0].dtype)
        # ProcessGroupNCCL records the caller's tensor times the group size as the other side
        # (it checks for uneven sizes only after recording)
        size = _numel(shape)
        label = "all_gather" if gather else "reduce_scatter"
        nelems = (size, size * group.size) if gather else (size * group.size, size)
        info = self._comms(group, seq, label, members[0], nelems=nelems)

        def works(me: int) -> None:
            self.comm_init(me, group)
            for j, c in enumerate(chunks):
                tr.work(names[j], me, [c])
            tr.work(names[-1], me, [])

        if gather:
            body = lambda me: tr.comms(me, info, [mine], [chunks], works)  # noqa: E731
            tr.op(
                "c10d::allgather_",
                2,
                [[chunks], [mine], OBJECT, nowait, -1],
                [[chunks], OBJECT],
                body,
                seq_id=0,
            )
        else:
            body = lambda me: tr.comms(me, info, [chunks], [mine], works)  # noqa: E731
            tr.op(
                "c10d::reduce_scatter_",
                2,
                [[mine], [chunks], OBJECT, OBJECT, nowait, -1],
                [[mine], OBJECT],
                body,
                seq_id=0,
            )


# --- files ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankET:
    """One rank's trace: its text, whether the observer stopped cleanly, and its unit count."""

    text: str
    complete: bool
    units: int


def issued_units(sim: Simulation, rank: int) -> tuple[int, bool]:
    """(units rank `rank` issued while tracing, whether its observer stopped cleanly). A rank
    that crashed, or that the watchdog killed because the job hung, stops mid-trace."""
    times = sim.times[rank]
    if times.crash_time != NEVER:
        return times.enqueued(times.crash_time), False
    if sim.hung:
        when = sim.dump_times[rank]
        return times.enqueued(NEVER - 1 if when is None else when), False
    return times.enqueued(), True


def _profiling_names(sim: Simulation, rank: int) -> list[list[str]]:
    """Per unit, the profiling names of its entries (Flight Recorder's, which are the works'
    record-function names)."""
    from .recorder import _statics

    layout = sim.spec.layout
    binding = layout.binding(rank)
    local = tuple(
        layout.local_rank(slot, rank) if gid >= 0 else -1 for slot, gid in enumerate(binding)
    )
    statics = _statics(sim.programs[rank], f"{sim.spec.backend}:", local, False)
    return [[s.name for s in row] for row in statics]


def rank_trace(sim: Simulation, rank: int, comms_created: bool = False) -> RankET:
    """Rank `rank`'s ET as the observer leaves it on disk (`comms_created`: the NCCL
    communicators existed before the observer started, so no "init" records)."""
    issued, complete = issued_units(sim, rank)
    trace = RankTrace(sim, rank, comms_created)
    names = _profiling_names(sim, rank)
    for u in range(issued):
        trace.unit(u, names[u])
    seed = sim.spec.seed
    pid = 100 + mix(seed, 0x91D, rank) % 60_000
    wall = (BASE_TIME_NS + clock_offset(sim.settings, rank)) // 1_000_000_000
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(wall))
    start_ts = 10_000 + mix(seed, 0x57A, sim.spec.layout.host_of(rank)) % 5_000_000
    header = (
        f'{{\n  "schema": "{SCHEMA}", "pid": {pid}, "time": "{stamp}", "start_ts": {start_ts},'
        f'\n  "nodes": ['
    )
    nodes = trace.t.nodes
    if complete:
        nodes = [*nodes, node_text(1, PROCESS_NODE, 1, EMPTY_IO, EMPTY_IO, 0, -1, USER_SCOPE, 0)]
    text = header + ",".join(nodes)
    if complete:
        comp = sim.times[rank].comp
        last = max((c for c in comp if c != NEVER), default=0)
        text += f'\n  ],\n  "finish_ts": {start_ts + last // 1_000_000 + 1}\n}}'
    return RankET(text, complete, issued)
