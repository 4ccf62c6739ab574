"""Generate real 8-rank gloo Flight Recorder dump sets of common training shapes.

Each scenario runs a small "training" program of one shape on 8 CPU processes (gloo on
127.0.0.1, PyTorch 2.13.0) and every live rank writes its own Flight Recorder dump into
``<out>/<scenario>/rank_<N>.pkl`` next to a ``NOTE.md`` that tells what the program did, what
went wrong, what the dumps show (checked here) and, on its last line, the expected verdict as
one machine-readable ``EXPECTED:`` line. The shapes:

- ``fsdp_*``: FSDP2-style sharding over the world group: per layer an async
  ``all_gather_into_tensor`` of the parameter shards, prefetched one layer ahead (one layer's
  two parameters in a ``_coalescing_manager`` block), ``reduce_scatter_tensor`` of the
  gradients in the backward (the same layer's two in a block), a loss all_reduce.
- ``hsdp_*``: the same over 2 replicas x 4 shards, plus a bfloat16 gradient all_reduce per layer
  over each replicate group (the block's two in a coalescing block).
- ``moe_*``: TP=2 x EP=4: per layer a TP all_reduce, an expert-parallel count exchange, a token
  dispatch and a combine (``all_to_all_single`` with uneven splits), a world loss all_reduce.
- ``ddp_*``: ``torch.nn.parallel.DistributedDataParallel`` with a small ``bucket_cap_mb`` (three
  gradient buckets after the first step's rebuild), bucket all_reduces from a comm hook.
- ``subgroups_*``: ``dist.new_subgroups(group_size=4)``: two subgroups training independently.
- ``barrier_*``: ``dist.monitored_barrier(wait_all_ranks=True)`` between world collectives.

One rank misbehaves in one precise way (or none does). The rank machinery is the one of
``make_gloo3d_samples.py`` (imported from it): ranks are forked from one launcher that imported
torch once; a rank dumps when its program ends or raises, or from a watchdog thread once its
main thread made no progress for longer than the group timeout; ranks that dumped stay
connected until every rank has dumped or died. Gloo kills some ranks outright (SIGABRT, no dump)
when a peer sends more bytes than they posted; the launcher reports those deaths through the
store, and the NOTE names them with gloo's message.

The expected verdict comes from the injected fault (the program's truth) and from the dumps
(which group name and sequence id the fault sits at), never from fr-analyze. The parent reloads
every file with plain pickle, checks that the dumps show what the NOTE claims and exits 1 if
they do not.

It needs torch (2.13.0, CPU) in the interpreter that runs it; fr-analyze never imports torch::

    python3.11 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0
    /tmp/torchvenv/bin/python tools/make_shape_samples.py --out sample_dumps
    /tmp/torchvenv/bin/python tools/make_shape_samples.py --out sample_dumps --only fsdp_crash

``--only NAME`` is repeatable; ``--timeout S`` sets the process-group timeout (default 6 s). All
sixteen sets take about 2.5 minutes on two cores.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import shutil
import signal
import sys
import textwrap
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:  # mypy checks this script as a module of the `tools` package
    from tools.make_gloo3d_samples import (
        CRASH_EXIT,
        HANG_S,
        SETTLE_S,
        STORE_TIMEOUT,
        Dump,
        Expected,
        Fault,
        Outcome,
        Progress,
        RunInfo,
        Worker,
        _dump_ways,
        _warm_up_stack_capture,
        agreement,
        by_seq,
        drive,
        dump_mid_run_or_now,
        entries,
        last_seq,
        load_dump,
        op_of,
        ranks_label,
        ranks_range,
        ranks_text,
        run_ranks,
        run_watched,
        say,
        unretired,
    )
else:
    from make_gloo3d_samples import (  # a sibling: the script runs by its path
        CRASH_EXIT,
        HANG_S,
        SETTLE_S,
        STORE_TIMEOUT,
        Dump,
        Expected,
        Fault,
        Outcome,
        Progress,
        RunInfo,
        Worker,
        _dump_ways,
        _warm_up_stack_capture,
        agreement,
        by_seq,
        drive,
        dump_mid_run_or_now,
        entries,
        last_seq,
        load_dump,
        op_of,
        ranks_label,
        ranks_range,
        ranks_text,
        run_ranks,
        run_watched,
        say,
        unretired,
    )
from torch import nn
from torch.distributed.distributed_c10d import _coalescing_manager

WORLD_SIZE = 8
DEFAULT_TIMEOUT_S = 6.0
NOTE_WIDTH = 100
WORLD_PG = "0"
ABORT_EXIT = -int(signal.SIGABRT)  # os.waitstatus_to_exitcode of a process killed by SIGABRT

Work = Any  # dist.Work or a _CoalescingManager: both have wait()


# --------------------------------------------------------------------------------------------
# Topologies: groups in creation order (names "1", "2", ... follow it; "0" is the world).
# --------------------------------------------------------------------------------------------

SHARD, REPLICATE = 4, 2  # HSDP
TP, EP = 2, 4  # MoE
SUBGROUP = 4


def table_of(shape: str) -> list[tuple[str, list[int]]]:
    """(desc, ranks) of every group the program creates after the world, in creation order."""
    if shape == "hsdp":
        shards = [list(range(i * SHARD, (i + 1) * SHARD)) for i in range(REPLICATE)]
        replicas = [[s + i * SHARD for i in range(REPLICATE)] for s in range(SHARD)]
        return [("shard", g) for g in shards] + [("replicate", g) for g in replicas]
    if shape == "moe":
        tps = [list(range(i * TP, (i + 1) * TP)) for i in range(WORLD_SIZE // TP)]
        eps = [list(range(t, WORLD_SIZE, TP)) for t in range(TP)]
        return [("tp", g) for g in tps] + [("ep", g) for g in eps]
    if shape == "subgroups":
        # dist.new_subgroups passes no group_desc, so new_group names them "undefined".
        return [("undefined", list(range(i, i + SUBGROUP))) for i in range(0, WORLD_SIZE, SUBGROUP)]
    return []


def group_of(shape: str, desc: str, rank: int) -> tuple[str, list[int]]:
    """(pg name, members) of the group of `desc` holding `rank`."""
    if desc == "default_pg":
        return WORLD_PG, list(range(WORLD_SIZE))
    for i, (d, ranks) in enumerate(table_of(shape)):
        if d == desc and rank in ranks:
            return str(i + 1), ranks
    raise KeyError((shape, desc, rank))


# --------------------------------------------------------------------------------------------
# Plans and the programs.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What every rank runs and which faults it meets: steps, faults, compute, a mid-run dump."""

    steps: int = 2
    faults: tuple[Fault, ...] = ()
    """Fault.action: "hang", "crash", "skip", or a shape's own ("float", "pad", "size",
    "reorder"); see the programs."""
    compute_s: float = 0.0
    """Sleep per layer ("compute"), times (1 + rank) / 4: the higher the rank, the longer."""
    mid_run_dump_at: tuple[str, int, int] | None = None
    """(point, step, index): when rank 0 reaches it, every rank dumps ~20 ms later from a
    background thread while the program keeps running; no other dump is written."""
    crashed: frozenset[int] = frozenset()
    """Ranks that os._exit without a dump (the fault)."""
    aborted: frozenset[int] = frozenset()
    """Ranks gloo kills with SIGABRT (no dump): what the runs showed, checked every run."""
    maybe_aborted: frozenset[int] = frozenset()
    """Ranks gloo kills in some runs and spares (they dump) in others, depending on timing."""


class Program:
    """The training program of one rank; subclasses build their groups and run the steps."""

    shape = ""
    builds_groups = True
    """False where the program makes its groups itself (dist.new_subgroups)."""

    def __init__(self, rank: int, plan: Plan, timeout: timedelta, progress: Progress) -> None:
        self.rank = rank
        self.plan = plan
        self.timeout = timeout
        self.progress = progress
        self.on_point: Callable[[str, int, int], None] | None = None
        self.groups: dict[str, Any] = {}
        for desc, ranks in table_of(self.shape) if self.builds_groups else ():
            group = dist.new_group(ranks, timeout=timeout, group_desc=desc)
            if rank in ranks:
                self.groups[desc] = group

    def point(self, point: str, step: int, index: int = 0) -> str | None:
        """Reach a point of the program: apply this rank's fault there, if any."""
        where = f"{point} step {step + 1} #{index + 1}"
        self.progress.at(where)
        if self.on_point is not None:
            self.on_point(point, step, index)
        for f in self.plan.faults:
            if (f.rank, f.point, f.step, f.index) != (self.rank, point, step, index):
                continue
            say(self.rank, f"fault: {f.action} before {where}")
            if f.action == "hang":
                time.sleep(HANG_S)
            elif f.action == "crash":
                os._exit(CRASH_EXIT)
            return f.action
        return None

    def compute(self) -> None:
        """Uneven load: the higher the rank, the longer; peers wait for it in collectives."""
        if self.plan.compute_s:
            time.sleep(self.plan.compute_s * (1 + self.rank) / 4)

    def run(self) -> None:
        """Run the shape's training program (each subclass has its own)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Layer:
    """One FSDP layer: its name and the shard shape of each of its parameters."""

    name: str
    shards: tuple[tuple[int, ...], ...]
    """Shard shape of each parameter; two or more are gathered in one coalescing block."""


FSDP_LAYERS = (
    Layer("embed", ((4, 16),)),
    Layer("block", ((4, 16), (4,))),
    Layer("head", ((2, 16),)),
)
GRAD_DTYPE = torch.bfloat16  # HSDP replicate all_reduce


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class FSDPProgram(Program):
    """FSDP2-style: parameters sharded over `shard_group` (world, or the HSDP shard group)."""

    shape = "fsdp"

    def __init__(self, rank: int, plan: Plan, timeout: timedelta, progress: Progress) -> None:
        super().__init__(rank, plan, timeout, progress)
        self.shard_group: Any = None  # the world group
        self.replicate_group: Any = None

    def group_size(self) -> int:
        """The number of ranks in the shard group (the world for FSDP)."""
        size: int = dist.get_world_size(self.shard_group)
        return size

    def gather(self, phase: str, step: int, layer: int) -> Work | None:
        """Async all-gather of one layer's parameter shards (a coalescing block for two+)."""
        action = self.point(f"{phase}.all_gather", step, layer)
        if action == "skip":
            return None
        shards = list(FSDP_LAYERS[layer].shards)
        if action == "size":
            shards[0] = (shards[0][0] + 1, *shards[0][1:])
        g = self.group_size()
        pairs = [(torch.empty(g * s[0], *s[1:]), torch.full(s, float(self.rank))) for s in shards]
        if len(pairs) == 1:
            out, shard = pairs[0]
            return dist.all_gather_into_tensor(out, shard, group=self.shard_group, async_op=True)
        with _coalescing_manager(self.shard_group, async_ops=True) as cm:
            for out, shard in pairs:
                dist.all_gather_into_tensor(out, shard, group=self.shard_group)
        return cm

    def reduce_scatter(self, step: int, layer: int) -> Work | None:
        """Async reduce-scatter of one layer's gradients (a coalescing block for two+)."""
        if self.point("bwd.reduce_scatter", step, layer) == "skip":
            return None
        g = self.group_size()
        shards = FSDP_LAYERS[layer].shards
        pairs = [(torch.empty(s), torch.full((g * s[0], *s[1:]), 1.0)) for s in shards]
        if len(pairs) == 1:
            out, grad = pairs[0]
            return dist.reduce_scatter_tensor(out, grad, group=self.shard_group, async_op=True)
        with _coalescing_manager(self.shard_group, async_ops=True) as cm:
            for out, grad in pairs:
                dist.reduce_scatter_tensor(out, grad, group=self.shard_group)
        return cm

    def run(self) -> None:
        """Per step: forward all_gathers with prefetch, backward all_gathers and reduce-scatters,
        HSDP's replicate all_reduces, the world loss all_reduce."""
        layers = range(len(FSDP_LAYERS))
        for step in range(self.plan.steps):
            # Forward: gather layer 0, then before computing each layer prefetch the next one.
            handles: dict[int, Work | None] = {0: self.gather("fwd", step, 0)}
            for layer in layers:
                if layer + 1 in layers:
                    handles[layer + 1] = self.gather("fwd", step, layer + 1)
                self.wait(handles.pop(layer))
                self.compute()
            # Backward: the last layer stays unsharded after the forward; before computing a
            # layer prefetch the previous one's parameters, then reduce-scatter its gradients.
            pending: list[Work | None] = []
            for layer in reversed(layers):
                if layer - 1 in layers:
                    handles[layer - 1] = self.gather("bwd", step, layer - 1)
                self.wait(handles.pop(layer, None))
                self.compute()
                pending.append(self.reduce_scatter(step, layer))
            for work in pending:
                self.wait(work)
            if self.replicate_group is not None:
                for layer in layers:
                    dtype = GRAD_DTYPE
                    if self.point("bwd.replicate_all_reduce", step, layer) == "float":
                        dtype = torch.float32
                    shards = FSDP_LAYERS[layer].shards
                    grads = [torch.full((_numel(s),), 0.5, dtype=dtype) for s in shards]
                    if len(grads) == 1:
                        dist.all_reduce(grads[0], group=self.replicate_group)
                        continue
                    with _coalescing_manager(self.replicate_group, async_ops=True) as cm:
                        for grad in grads:
                            dist.all_reduce(grad, group=self.replicate_group)
                    cm.wait()
            if self.point("world.all_reduce", step) != "skip":
                dist.all_reduce(torch.tensor([1.0 + step]))
        self.progress.at("done")

    def wait(self, work: Work | None) -> None:
        """Wait for `work`, if the op was issued (None: it was skipped)."""
        if work is not None:
            work.wait()


class HSDPProgram(FSDPProgram):
    """FSDP within a shard group, the gradients then all_reduced over the replicate group."""

    shape = "hsdp"

    def __init__(self, rank: int, plan: Plan, timeout: timedelta, progress: Progress) -> None:
        super().__init__(rank, plan, timeout, progress)
        self.shard_group = self.groups["shard"]
        self.replicate_group = self.groups["replicate"]


TOKENS, HIDDEN = 32, 8
MOE_LAYERS = 2
ROUTING = (13, 9, 6, 4)  # tokens a rank sends to its EP peers, rotated per rank/step/layer


def routing(step: int, layer: int, ep_index: int) -> list[int]:
    """Input split sizes (tokens to each EP peer) of the rank at `ep_index` of its EP group:
    every rank favours the same experts (ROUTING rotated by step + layer), and the rank at EP
    index e moves e tokens from its busiest expert to its idlest, so totals received differ."""
    k = (step + layer) % EP
    splits = list(ROUTING[k:] + ROUTING[:k])
    splits[splits.index(max(splits))] -= ep_index
    splits[splits.index(min(splits))] += ep_index
    return splits


class MoEProgram(Program):
    """Tensor parallel x expert parallel: per layer TP all_reduce, count exchange, dispatch,
    expert compute, combine; then the world loss all_reduce."""

    shape = "moe"

    def __init__(self, rank: int, plan: Plan, timeout: timedelta, progress: Progress) -> None:
        super().__init__(rank, plan, timeout, progress)
        self.tp = self.groups["tp"]
        self.ep = self.groups["ep"]
        self.ep_index = dist.get_group_rank(self.ep, rank)

    def run(self) -> None:
        """Per step: every MoE layer, then the world loss all_reduce."""
        for step in range(self.plan.steps):
            for layer in range(MOE_LAYERS):
                self.layer(step, layer)
            if self.point("world.all_reduce", step) != "skip":
                dist.all_reduce(torch.tensor([1.0 + step]))
        self.progress.at("done")

    def layer(self, step: int, layer: int) -> None:
        """One MoE layer: TP all_reduce, token count all_to_all, dispatch all_to_all, expert
        compute, combine all_to_all."""
        if self.point("tp.all_reduce", step, layer) != "skip":
            dist.all_reduce(torch.full((16, HIDDEN), 1.0), group=self.tp)
        send = routing(step, layer, self.ep_index)
        recv = [0] * EP
        if self.point("ep.counts", step, layer) != "skip":
            counts = torch.empty(EP, dtype=torch.int64)
            dist.all_to_all_single(counts, torch.tensor(send, dtype=torch.int64), group=self.ep)
            recv = [int(c) for c in counts.tolist()]
        dispatch_send = list(send)
        action = self.point("ep.dispatch", step, layer)
        if action == "pad":
            # One padding token appended for the next peer after the counts were exchanged.
            dispatch_send[(self.ep_index + 1) % EP] += 1
        tokens = torch.full((sum(dispatch_send), HIDDEN), float(self.rank))
        expert_in = torch.empty(sum(recv), HIDDEN)
        if action != "skip":
            dist.all_to_all_single(expert_in, tokens, recv, dispatch_send, group=self.ep)
        self.compute()
        if self.point("ep.combine", step, layer) != "skip":
            combined = torch.empty(sum(send), HIDDEN)
            dist.all_to_all_single(combined, expert_in * 2, send, recv, group=self.ep)


DDP_WIDTHS = (32, 64, 48, 32, 16, 4)  # Linear layers 32->64->48->32->16->4
DDP_BUCKET_CAP_MB = 0.004


# the `misc` ignores: where torch is not installed, mypy sees it as Any (`make lint`)
class _SlowBackward(torch.autograd.Function):  # type: ignore[misc, unused-ignore]
    """Identity whose backward sleeps: "compute" between a layer's gradients and the next."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        time.sleep(ctx.seconds)
        return grad, None


class Slow(nn.Module):  # type: ignore[misc, unused-ignore]
    """An identity layer whose backward sleeps `seconds` ("compute" between gradient buckets)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """`x` unchanged, through `_SlowBackward` when the layer has a backward to sleep in."""
        if not self.seconds:
            return x
        apply = _SlowBackward.apply  # unannotated in torch
        out: torch.Tensor = apply(x, self.seconds)  # type: ignore[no-untyped-call, unused-ignore]
        return out


class DDPProgram(Program):
    """DistributedDataParallel on a 5-layer MLP; the gradient buckets are all_reduced by a comm
    hook that does what DDP's default hook does (one async all_reduce per bucket, in order)."""

    shape = "ddp"

    def __init__(self, rank: int, plan: Plan, timeout: timedelta, progress: Progress) -> None:
        super().__init__(rank, plan, timeout, progress)
        torch.manual_seed(0)
        slow = plan.compute_s * (1 + rank) / 4
        mods: list[nn.Module] = []
        for i, (a, b) in enumerate(itertools.pairwise(DDP_WIDTHS)):
            mods += [nn.Linear(a, b), Slow(slow)]
            if i + 2 < len(DDP_WIDTHS):
                mods.append(nn.ReLU())
        self.model = nn.parallel.DistributedDataParallel(
            nn.Sequential(*mods), bucket_cap_mb=DDP_BUCKET_CAP_MB
        )
        self.model.register_comm_hook(None, self.hook)
        self.step = 0
        self.held: tuple[torch.Tensor, torch.futures.Future[torch.Tensor]] | None = None

    def hook(self, state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """DDP's comm hook: all_reduce the bucket (averaged); a "reorder" fault holds it back until
        the next bucket."""
        buffer = bucket.buffer()
        if self.point("ddp.bucket", self.step, bucket.index()) == "reorder":
            # Hold this bucket back and all_reduce it right after the next one.
            held: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            self.held = (buffer, held)
            return held
        future = self.all_reduce(buffer)
        if self.held is not None:
            tensor, held = self.held
            self.held = None

            def fulfil(f: torch.futures.Future[torch.Tensor]) -> None:
                try:
                    held.set_result(f.value())
                except Exception as exc:
                    # torch's stub types the argument as the result type T
                    held.set_exception(exc)  # type: ignore[arg-type, unused-ignore]

            self.all_reduce(tensor).add_done_callback(fulfil)
        return future

    def all_reduce(self, tensor: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
        """Average `tensor` over the world with an async all_reduce; a future of the result."""
        tensor.div_(WORLD_SIZE)
        work = dist.all_reduce(tensor, async_op=True)
        reduced: torch.futures.Future[torch.Tensor] = work.get_future().then(lambda f: f.value()[0])
        return reduced

    def run(self) -> None:
        """Per step: forward, backward (the buckets all_reduced by `hook`), optimizer step, world
        loss all_reduce."""
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        for step in range(self.plan.steps):
            self.step = step
            self.point("forward", step)
            loss = self.model(torch.randn(8, DDP_WIDTHS[0])).square().mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if self.point("world.all_reduce", step) != "skip":
                dist.all_reduce(loss.detach())
        self.progress.at("done")


# DDP checks a comm hook's annotations as objects; `from __future__ import annotations` made them
# strings.
DDPProgram.hook.__annotations__.update(
    {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
)


class SubgroupsProgram(Program):
    """Two independent 4-rank replicas made with dist.new_subgroups(group_size=4)."""

    shape = "subgroups"
    builds_groups = False

    def __init__(self, rank: int, plan: Plan, timeout: timedelta, progress: Progress) -> None:
        super().__init__(rank, plan, timeout, progress)
        self.sub, _ = dist.new_subgroups(group_size=SUBGROUP, timeout=timeout)

    def run(self) -> None:
        """A world all_reduce once; per step, three subgroup all_reduces and one all_gather."""
        dist.all_reduce(torch.tensor([float(self.rank)]))  # agree on a seed, once
        for step in range(self.plan.steps):
            for index in range(3):
                if self.point("sub.all_reduce", step, index) != "skip":
                    dist.all_reduce(torch.full((16,), 1.0), group=self.sub)
            if self.point("sub.all_gather", step) != "skip":
                out = torch.empty(SUBGROUP * 2)
                dist.all_gather_into_tensor(out, torch.full((2,), 1.0), group=self.sub)
        self.progress.at("done")


class BarrierProgram(Program):
    """World collectives with a monitored_barrier(wait_all_ranks=True) in each step."""

    shape = "barrier"

    def run(self) -> None:
        """Per step: world all_reduce, monitored_barrier, all_gather and the loss all_reduce."""
        for step in range(self.plan.steps):
            if self.point("world.all_reduce", step, 0) != "skip":
                dist.all_reduce(torch.full((64,), 1.0))
            if self.point("world.monitored_barrier", step) != "skip":
                dist.monitored_barrier(wait_all_ranks=True)
            if self.point("world.all_gather", step) != "skip":
                out = torch.empty(WORLD_SIZE * 2)
                dist.all_gather_into_tensor(out, torch.full((2,), float(self.rank)))
            if self.point("world.all_reduce", step, 1) != "skip":
                dist.all_reduce(torch.tensor([1.0 + step]))
        self.progress.at("done")


PROGRAMS: dict[str, type[Program]] = {
    p.shape: p
    for p in (FSDPProgram, HSDPProgram, MoEProgram, DDPProgram, SubgroupsProgram, BarrierProgram)
}
# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


class ShapeWorker(Worker):
    """make_gloo3d_samples' Worker, waiting for the dumps of the ranks that did not die."""

    def finish(self, status: int, deadline: float) -> None:
        """Stay connected until every rank has dumped or died, then leave without teardown."""
        # The launcher adds 1 to "gone" for each rank that exits without its dump (crash,
        # SIGABRT): they never count themselves in "dumped".
        while self.count("dumped") + self.count("gone") < WORLD_SIZE:
            if time.monotonic() > deadline:
                say(self.rank, "gave up waiting for the other ranks' dumps")
                break
            time.sleep(0.05)
        sys.stdout.flush()
        os._exit(status)


def run_worker(name: str, rank: int, port: int, folder: str, timeout_s: float, log: str) -> None:
    """Entry point of one rank (forked by the launcher)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # gloo's aborts leave no core files
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    scenario = SCENARIOS_BY_NAME[name]
    plan = scenario.plan
    timeout = timedelta(seconds=timeout_s)
    deadline = time.monotonic() + 4 * timeout_s + 60
    worker = ShapeWorker(scenario, rank, port, Path(folder), WORLD_SIZE)  # type: ignore[arg-type]
    worker.wait_for("started", WORLD_SIZE, deadline)
    dist.init_process_group(
        "gloo", store=worker.store, rank=rank, world_size=WORLD_SIZE, timeout=timeout
    )
    program = PROGRAMS[scenario.shape](rank, plan, timeout, worker.progress)
    worker.wait_for("groups", WORLD_SIZE, deadline)
    if plan.mid_run_dump_at is not None:
        threading.Thread(target=worker.dump_mid_run, daemon=True).start()
        if rank == 0:
            trigger = plan.mid_run_dump_at

            def on_point(point: str, step: int, index: int) -> None:
                if (point, step, index) == trigger:
                    worker.post("dump_at", repr(time.time() + 0.02))

            program.on_point = on_point
    ended = run_watched(worker, rank, program.run, timeout_s, deadline)
    if plan.mid_run_dump_at is not None:
        dump_mid_run_or_now(worker, rank)
    else:
        time.sleep(SETTLE_S)
        worker.dump(ended)
    worker.finish(0, deadline)


def launch(name: str, port: int, folder: str, timeout_s: float, logs_dir: str) -> int:
    """Launcher process: fork the ranks from one warm interpreter, report their exit codes.

    Forking happens before this process starts any thread. Afterwards it connects to the store
    and counts each rank that exits without having dumped, so the others stop waiting for it.
    """
    _warm_up_stack_capture()
    ranks: dict[int, int] = {}
    for rank in range(WORLD_SIZE):
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                log = str(Path(logs_dir) / f"rank_{rank}.log")
                run_worker(name, rank, port, folder, timeout_s, log)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(70)  # run_worker leaves with os._exit; this is never reached normally
        ranks[pid] = rank
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=STORE_TIMEOUT)
    codes: dict[int, int] = {}
    while ranks:
        pid, status = os.waitpid(-1, 0)
        rank = ranks.pop(pid)
        codes[rank] = os.waitstatus_to_exitcode(status)
        if codes[rank] != 0:
            store.add("gone", 1)
    print(json.dumps(codes), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# Reading and checking dumps.
# --------------------------------------------------------------------------------------------


@dataclass
class ShapeRunInfo(RunInfo):
    """What the parent saw of a run, with the log tails of the ranks that died."""

    tails: dict[int, list[str]] = field(default_factory=dict)
    """The last lines of the log (stderr included) of each rank that died."""


def abort_reason(info: ShapeRunInfo, rank: int) -> str:
    """gloo's message in the log of a rank that died with SIGABRT."""
    lines = info.tails.get(rank, [])
    for line in lines:
        if "what():" in line:
            return line.split("what():", 1)[1].strip()
    return lines[-1].strip() if lines else "?"


def _describe_last_ops(dumps: dict[int, Dump]) -> str:
    groups: dict[str, list[int]] = {}
    for rank, dump in sorted(dumps.items()):
        rows = entries(dump)
        if not rows:
            groups.setdefault("no entries", []).append(rank)
            continue
        last = rows[-1]
        name, desc = last["process_group"]
        text = (
            f"{op_of(last)} pg {name!r} ({desc}) seq {last['collective_seq_id']}, "
            f"retired={last['retired']}"
        )
        groups.setdefault(text, []).append(rank)
    return "; ".join(f"{ranks_label(r)}: {t}" for t, r in groups.items())


def _raised(info: RunInfo) -> dict[int, str]:
    out = {}
    for rank, lines in info.logs.items():
        for line in lines:
            if "Error at " in line or "Exception at " in line:
                out[rank] = line.split(": ", 1)[1]
    return out


def check_structure(dumps: dict[int, Dump], shape: str, gaps: bool = False) -> list[str]:
    """Group names and descs as built, groups only on their members, seqs increasing (1..n
    unless `gaps`), every entry a gloo collective in state "scheduled"."""
    problems: list[str] = []
    built = {WORLD_PG: ("default_pg", set(range(WORLD_SIZE)))}
    for i, (desc, ranks) in enumerate(table_of(shape)):
        built[str(i + 1)] = (desc, set(ranks))
    for rank, dump in dumps.items():
        for e in entries(dump):
            name, desc = e["process_group"]
            if e["state"] != "scheduled" or e["is_p2p"]:
                problems.append(f"rank {rank}: entry {e['record_id']} state {e['state']!r}")
            if not e["profiling_name"].startswith("gloo:"):
                problems.append(f"rank {rank}: unexpected op {e['profiling_name']!r}")
            want = built.get(name)
            if want is None or want[0] != desc or rank not in want[1]:
                problems.append(f"rank {rank}: pg {name!r} ({desc}) is not as built: {want}")
        for name in {e["process_group"][0] for e in entries(dump)}:
            seqs = [int(e["collective_seq_id"]) for e in entries(dump, name)]
            if seqs != sorted(set(seqs)) or (not gaps and seqs != list(range(1, len(seqs) + 1))):
                problems.append(f"rank {rank}: pg {name!r} seqs are {seqs}")
    return problems


def disagreements(dumps: dict[int, Dump]) -> dict[tuple[str, int], dict[str, dict[int, Any]]]:
    """agreement() less the sizes of all_to_all entries (uneven splits differ by design)."""
    out = {}
    for key, diff in agreement(dumps).items():
        ops = {op_of(e) for d in dumps.values() if (e := entry_at(d, *key)) is not None}
        if ops == {"all_to_all"} and set(diff) <= {"input_sizes", "output_sizes"}:
            continue
        out[key] = diff
    return out


def _no_disagreement(dumps: dict[int, Dump], allowed: Iterable[tuple[str, int]] = ()) -> list[str]:
    skip = set(allowed)
    return [
        f"ranks disagree at pg {key[0]!r} seq {key[1]}: {diff}"
        for key, diff in disagreements(dumps).items()
        if key not in skip
    ]


def _all_retired(dumps: dict[int, Dump]) -> list[str]:
    return [f"rank {r}: {len(unretired(d))} unretired" for r, d in dumps.items() if unretired(d)]


def _retired_fact(dumps: dict[int, Dump]) -> str:
    open_entries = {r: len(unretired(d)) for r, d in dumps.items() if unretired(d)}
    if open_entries:
        listed = ", ".join(f"rank {r}: {n}" for r, n in open_entries.items())
        return f"Unretired entries: {listed}; every other entry is retired=True."
    return (
        "Every entry of every dump is retired=True, the ops that timed out or failed included: "
        "in a gloo hang only the sequence ids tell who is waiting."
    )


def _message(info: RunInfo, rank: int) -> str:
    """What the rank's program raised, less gloo's source location (first line, as logged)."""
    text = _raised(info).get(rank, "?").split(": ", 1)[-1]
    if text.startswith("[/") and "] " in text:
        text = text.split("] ", 1)[1]
    return text


def _logged(info: RunInfo, rank: int, *texts: str) -> bool:
    return any(all(t in line for t in texts) for line in info.logs.get(rank, []))


def quote(entry: Dump) -> str:
    """An entry's identifying fields, as NOTE.md quotes them."""
    keys = ("profiling_name", "collective_seq_id", "op_id", "input_sizes", "output_sizes")
    text = ", ".join(f"{k}={entry[k]!r}" for k in keys)
    return f"{text}, input_dtypes={entry['input_dtypes']!r}"


def entry_at(dump: Dump, group: str, seq: int) -> Dump | None:
    """The entry of group `group` with collective seq id `seq` in the dump, or None."""
    return by_seq(dump, group).get(seq)


def seqs_of(dump: Dump, group: str) -> list[int]:
    """The collective seq ids of group `group`'s entries, in dump order."""
    return [int(e["collective_seq_id"]) for e in entries(dump, group)]


def _same_last_seq(
    dumps: dict[int, Dump], group: str, ranks: Iterable[int]
) -> tuple[int, list[str]]:
    lasts = {r: last_seq(dumps[r], group) for r in ranks if r in dumps}
    seq = max(lasts.values())
    problems = [] if set(lasts.values()) == {seq} else [f"pg {group!r} last seqs differ: {lasts}"]
    return seq, problems


def _expect(entry: Dump | None, where: str, op: str, sizes: list[list[int]]) -> list[str]:
    """Problems unless `entry` exists, is `op` and has input_sizes `sizes`."""
    if entry is None:
        return [f"{where}: no entry"]
    if op_of(entry) != op or entry["input_sizes"] != sizes:
        return [f"{where}: {entry['profiling_name']} {entry['input_sizes']}, not {op} {sizes}"]
    return []


def _deaths(info: ShapeRunInfo, plan: Plan) -> list[str]:
    """Facts on the ranks that died."""
    facts = []
    for rank in sorted(plan.crashed):
        facts.append(f"Rank {rank} exited with status {CRASH_EXIT} (os._exit) and wrote no dump.")
    for rank in sorted(r for r, code in info.exit_codes.items() if code == ABORT_EXIT):
        facts.append(
            f"Rank {rank} was killed by SIGABRT inside gloo and wrote no dump; its stderr: "
            f"{abort_reason(info, rank)!r}."
        )
    return facts


def _last_ops_fact(dumps: dict[int, Dump]) -> str:
    return f"Last entry per rank: {_describe_last_ops(dumps)}."


def _healthy(dumps: dict[int, Dump]) -> tuple[list[str], list[str]]:
    """Problems and facts every healthy run must show: all retired, agreement, same ends."""
    problems = _all_retired(dumps) + _no_disagreement(dumps)
    ends = []
    names = sorted({e["process_group"][0] for d in dumps.values() for e in entries(d)}, key=int)
    for name in names:
        holders = [r for r, d in dumps.items() if entries(d, name)]
        seq, more = _same_last_seq(dumps, name, holders)
        problems += more
        ends.append(f"pg {name!r} at seq {seq} on {ranks_label(holders)}")
    fact = "Every entry is retired; the ranks of each group end at the same seq (" + "; ".join(ends)
    return problems, [fact + ")."]


def _pg_status_fact(dumps: dict[int, Dump], rank: int) -> str:
    """How pg_status and pg_config look on `rank` (checked)."""
    dump = dumps[rank]
    ids = sorted({(int(e["pg_id"]), e["process_group"][0]) for e in entries(dump)})
    status = dump.get("pg_status", {})
    if sorted(status) != sorted(str(i) for i, _ in ids):
        raise ValueError(f"rank {rank}: pg_status keys {sorted(status)} are not the pg_ids {ids}")
    for pg_id, name in ids:
        last = entries(dump, name)[-1]
        if status[str(pg_id)]["last_enqueued_collective"] != last["op_id"]:
            raise ValueError(f"rank {rank}: pg_status[{pg_id}] is not pg {name!r}'s last op_id")
    mapping = ", ".join(f"{i!r} -> pg {n!r}" for i, n in ids)
    return (
        f"Rank {rank}'s pg_status is keyed by the entries' pg_id, a per-process index of the "
        f"groups it is in, not by the group name ({mapping}); its last_enqueued_collective is "
        f"the op_id of that group's last entry. pg_config is {dump.get('pg_config')!r}."
    )


def _mid_run(dumps: dict[int, Dump], info: ShapeRunInfo, op: str) -> Outcome:
    """A healthy job dumped mid-run: someone's `op` must be in flight (unretired)."""
    problems = _no_disagreement(dumps)
    held: dict[int, tuple[int, int]] = {}  # rank -> (entries in the dump, entries at the end)
    for rank, lines in info.logs.items():
        if not any("dump taken while the program was running" in ln for ln in lines):
            problems.append(f"rank {rank}: the dump was not taken while the program ran")
        for ln in lines:
            if "mid-run dump held" in ln:
                words = ln.split()
                held[rank] = (int(words[words.index("held") + 1]), int(words[-1]))
        if held.get(rank, (0, 0))[0] >= held.get(rank, (0, 0))[1]:
            problems.append(f"rank {rank}: no sign the program went on after the dump")
    in_flight: dict[str, list[int]] = {}
    for rank, dump in sorted(dumps.items()):
        for e in unretired(dump):
            name, desc = e["process_group"]
            text = (
                f"{op_of(e)} pg {name!r} ({desc}) seq {e['collective_seq_id']} {e['input_sizes']}"
            )
            in_flight.setdefault(text, []).append(rank)
    if not any(t.startswith(op + " ") for t in in_flight):
        problems.append(f"no unretired {op} in any dump")
    newest = [max(int(e["time_created_ns"]) for e in entries(d)) for d in dumps.values()]
    at_dump = [h[0] for h in held.values()] or [0]
    at_end = [h[1] for h in held.values()] or [0]
    facts = [
        f"The dumps hold {ranks_range(at_dump)} entries a rank; by the end of the program the "
        f"ranks had recorded {ranks_range(at_end)}.",
        "Unretired entries (in flight at the dump): "
        + "; ".join(f"{ranks_label(r)}: {t}" for t, r in in_flight.items())
        + "; every other entry is retired=True.",
        f"The newest entries of the {len(dumps)} ranks were created within "
        f"{(max(newest) - min(newest)) / 1e6:.0f} ms of each other (a dump carries no dump time).",
        _last_ops_fact(dumps),
    ]
    return Outcome(Expected("ok"), facts, problems)


# --------------------------------------------------------------------------------------------
# Checks, per scenario.
# --------------------------------------------------------------------------------------------

Check = Callable[[dict[int, Dump], ShapeRunInfo], Outcome]

PER_FSDP_STEP = 10  # world entries of an FSDP step: 3 forward, 6 backward, the loss


def _fsdp_conventions(dumps: dict[int, Dump], shape: str, rank: int) -> tuple[list[str], list[str]]:
    """Facts on how gloo recorded the FSDP ops of step 1 on `rank`, checked."""
    desc = "shard" if shape == "hsdp" else "default_pg"
    name, ranks = group_of(shape, desc, rank)
    g = len(ranks)
    rows = entries(dumps[rank], name)
    want = [
        ("all_gather", [[4, 16]], [[g, 4, 16]]),  # forward, embed
        ("all_gather", [[4, 16], [4]], [[2, 4, 16]]),  # forward, block: one coalesced entry
        ("all_gather", [[2, 16]], [[g, 2, 16]]),  # forward, head
        ("all_gather", [[4, 16], [4]], [[2, 4, 16]]),  # backward prefetch, block
        ("all_reduce", [[g * 2, 16]], [[g * 2, 16]]),  # reduce_scatter, head
        ("all_gather", [[4, 16]], [[g, 4, 16]]),  # backward prefetch, embed
        ("all_reduce", [[g * 4, 16]], [[g * 4, 16]]),  # reduce_scatter, block weight
        ("all_reduce", [[g * 4]], [[g * 4]]),  # reduce_scatter, block bias
        ("all_reduce", [[g * 4, 16]], [[g * 4, 16]]),  # reduce_scatter, embed
    ]
    got = [(op_of(e), e["input_sizes"], e["output_sizes"]) for e in rows[: len(want)]]
    if got != want:
        return [f"rank {rank}: step 1 on pg {name!r} is {got}, expected {want}"], []
    facts = [
        f"On rank {rank}, step 1 on pg {name!r} ({desc}) is {len(want)} entries, seqs "
        f"{rows[0]['collective_seq_id']}-{rows[len(want) - 1]['collective_seq_id']}: forward "
        "all_gather of embed, block, head; backward all_gather of block, all_reduce (the head's "
        "reduce_scatter_tensor), all_gather of embed, two all_reduce (the block's coalesced "
        "reduce_scatter_tensor pair), all_reduce (embed's).",
        f"all_gather_into_tensor alone: {quote(rows[0])} (output = group size {g} x shard).",
        "The coalescing block of two all_gather_into_tensor ([4, 16] and [4]) is ONE entry "
        f"with one seq: {quote(rows[1])}; its output_sizes is [number of tensors] + the first "
        "shard's shape, not the group size times the shard.",
        "reduce_scatter_tensor is recorded as gloo:all_reduce of the whole unsharded input: "
        f"{quote(rows[4])}. The coalescing block of two is two such entries with their own "
        f"seqs: {quote(rows[6])}; {quote(rows[7])}.",
    ]
    return [], facts


def check_fsdp_healthy(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the healthy FSDP run: every entry retired, the records agree, collectives as built."""
    problems, facts = _healthy(dumps)
    more, conv = _fsdp_conventions(dumps, "fsdp", 0)
    facts = conv + facts + [_pg_status_fact(dumps, 0), _last_ops_fact(dumps)]
    return Outcome(Expected("ok"), facts, problems + more)


def check_hsdp_healthy(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the healthy HSDP run: as FSDP, plus the replicate group's bf16 all_reduces."""
    problems, facts = _healthy(dumps)
    more, conv = _fsdp_conventions(dumps, "hsdp", 0)
    problems += more
    name, _ = group_of("hsdp", "replicate", 0)
    rep = entries(dumps[0], name)
    sizes = [e["input_sizes"] for e in rep[:3]]
    if sizes != [[[64]], [[64], [4]], [[32]]] or any(
        set(e["input_dtypes"]) != {"BFloat16"} for e in rep
    ):
        problems.append(f"rank 0: replicate pg {name!r} entries are {sizes}, not bf16 as built")
    else:
        facts.append(
            "The coalescing block of the block's two replicate all_reduce calls ([64] and [4], "
            f"bfloat16) is ONE entry with one seq, sizes and dtypes per tensor: {quote(rep[1])}; "
            f"a single all_reduce: {quote(rep[0])}."
        )
    facts += [_pg_status_fact(dumps, 7), _last_ops_fact(dumps)]
    return Outcome(Expected("ok"), conv + facts, problems)


def check_fsdp_mid_run(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the FSDP mid-run dump: taken while the program ran, all_gathers left unretired."""
    return _mid_run(dumps, info, "all_gather")


def check_ddp_mid_run(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the DDP mid-run dump: taken mid-run, only bucket all_reduces unretired."""
    outcome = _mid_run(dumps, info, "all_reduce")
    buckets = {json.dumps(e["input_sizes"]) for d in dumps.values() for e in unretired(d)}
    if not buckets <= {json.dumps([[n]]) for n in DDP_BUCKETS}:
        outcome.problems.append(f"unretired entries other than bucket all_reduces: {buckets}")
    return outcome


SKIP_AG_RANK = 5


def check_fsdp_skip_all_gather(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the skipped FSDP all_gather: the culprit's next all_gather sits at the seq where the
    others gather the head."""
    culprit = SKIP_AG_RANK
    others = [r for r in dumps if r != culprit]
    seq, problems = _same_last_seq(dumps, WORLD_PG, others)
    problems += _no_disagreement(dumps, [(WORLD_PG, seq)])
    problems += _expect(
        entry_at(dumps[others[0]], WORLD_PG, seq), "others", "all_gather", [[2, 16]]
    )
    mine = entry_at(dumps[culprit], WORLD_PG, seq)
    problems += _expect(mine, f"rank {culprit}", "all_gather", [[4, 16], [4]])
    if seq != PER_FSDP_STEP + 3:
        problems.append(f"seq {seq} is not the head's forward all_gather of step 2")
    later = [e for e in entries(dumps[culprit], WORLD_PG) if int(e["collective_seq_id"]) > seq]
    later_text = ", ".join(
        f"seq {e['collective_seq_id']} {op_of(e)} {e['input_sizes']}" for e in later
    )
    facts = [
        f"Ranks {ranks_text(others)} issued all_gather pg '0' seq {seq} with input [[2, 16]] (the "
        f"head's forward all_gather of step 2) and end there. At seq {seq} rank {culprit} "
        "issued its next op instead, the backward prefetch of the block (the coalesced "
        f"all_gather, input [[4, 16], [4]]), then {later_text}: one op ahead of everyone "
        "from there on, so the entries at the same seq differ in sizes.",
        f"Every seq before {seq} agrees on every rank.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    # The skipper's next op sits at the skipped seq id, where the ranks disagree: a
    # mismatch, named at that seq (frsim's truth says the same of a skip within one group).
    expected = Expected("desync", "mismatch", (culprit,), WORLD_PG, "default_pg", seq, "all_gather")
    return Outcome(expected, facts, problems)


CRASH_RANK = 3


def check_fsdp_crash(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the FSDP crash: the crashed rank wrote no dump, the others end at the block's forward
    all_gather of step 2."""
    seq, problems = _same_last_seq(dumps, WORLD_PG, dumps)
    problems += _no_disagreement(dumps)
    first = dumps[min(dumps)]
    problems += _expect(entry_at(first, WORLD_PG, seq), "last", "all_gather", [[4, 16], [4]])
    if seq != PER_FSDP_STEP + 2:
        problems.append(f"seq {seq} is not the block's forward all_gather of step 2")
    if not _logged(info, CRASH_RANK, "fault: crash before fwd.all_gather step 2 #2"):
        problems.append(f"rank {CRASH_RANK} did not crash where planned")
    flags = {r: entry_at(d, WORLD_PG, seq)["retired"] for r, d in dumps.items()}  # type: ignore[index]
    facts = [
        f"No file for rank {CRASH_RANK}. Every other rank's last entry is the coalesced "
        f"all_gather pg '0' seq {seq} (input [[4, 16], [4]]: the block's forward prefetch of "
        f"step 2; retired flags {flags}); seq {seq - 1}, the embed's all_gather, is the last "
        f"op rank {CRASH_RANK} joined.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    expected = Expected(
        "hung", "dead_rank", (CRASH_RANK,), WORLD_PG, "default_pg", seq, "all_gather"
    )
    return Outcome(expected, facts, problems)


HANG_RS_RANK = 6


def check_fsdp_hang_before_reduce_scatter(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the hang before a reduce_scatter: the others wait where the culprit never got."""
    culprit = HANG_RS_RANK
    others = [r for r in dumps if r != culprit]
    problems = _no_disagreement(dumps)
    seq = last_seq(dumps[culprit], WORLD_PG) + 1
    g = WORLD_SIZE
    for r in others:
        problems += _expect(
            entry_at(dumps[r], WORLD_PG, seq), f"rank {r}", "all_reduce", [[g * 2, 16]]
        )
    if seq != PER_FSDP_STEP + 5:
        problems.append(f"seq {seq} is not the head's reduce-scatter of step 2")
    if not _logged(info, culprit, "dumped (watchdog", "bwd.reduce_scatter step 2 #3"):
        problems.append(f"rank {culprit} was not dumped by the watchdog in its hang")
    end, more = _same_last_seq(dumps, WORLD_PG, others)
    problems += more
    tail = entries(dumps[others[0]], WORLD_PG)[-(end - seq + 1) :]
    tail_text = ", ".join(
        f"seq {e['collective_seq_id']} {op_of(e)} {e['input_sizes']}" for e in tail
    )
    facts = [
        f"Rank {culprit}'s pg '0' ends at seq {seq - 1} (the block's backward prefetch), all its "
        "entries retired; it is idle, not waiting in c10d.",
        f"Ranks {ranks_text(others)} went on, as the program lets them (the reduce-scatter and "
        f"the next prefetch are async): {tail_text}. The first of these, all_reduce "
        f"[[{g * 2}, 16]] at seq {seq}, is the head's reduce_scatter_tensor (gloo records it "
        "as all_reduce of the unsharded input), which rank "
        f"{culprit} never issued.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    expected = Expected("hung", "not_joined", (culprit,), WORLD_PG, "default_pg", seq, "all_reduce")
    return Outcome(expected, facts, problems)


SIZE_RANK = 2


def check_fsdp_size_mismatch(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the FSDP size mismatch: the ranks disagree at one world seq, in input/output sizes."""
    bad = disagreements(dumps)
    problems = []
    if len(bad) != 1:
        problems.append(f"ranks disagree at {sorted(bad)}, expected at one seq")
    (name, seq), diff = next(iter(bad.items()), ((WORLD_PG, 0), {}))
    if name != WORLD_PG or set(diff) != {"input_sizes", "output_sizes"}:
        problems.append(f"pg {name!r} seq {seq} differs in {sorted(diff)}")
    others = [r for r in dumps if r != SIZE_RANK]
    problems += _expect(entry_at(dumps[SIZE_RANK], name, seq), "culprit", "all_gather", [[5, 16]])
    problems += _expect(entry_at(dumps[others[0]], name, seq), "others", "all_gather", [[4, 16]])
    if seq != PER_FSDP_STEP + 1:
        problems.append(f"seq {seq} is not the embed's forward all_gather of step 2")
    mine = entry_at(dumps[SIZE_RANK], name, seq) or {}
    theirs = entry_at(dumps[others[0]], name, seq) or {}
    facts = [
        f"At all_gather pg '0' seq {seq} (the embed's forward all_gather of step 2) rank "
        f"{SIZE_RANK} passes input {mine.get('input_sizes')} output {mine.get('output_sizes')}; "
        f"ranks {ranks_text(others)} pass {theirs.get('input_sizes')} -> "
        f"{theirs.get('output_sizes')}. That is the only disagreement; everyone also issued "
        f"seq {seq + 1}, the block's prefetch, before blocking.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    expected = Expected(
        "desync", "mismatch", (SIZE_RANK,), WORLD_PG, "default_pg", seq, "all_gather"
    )
    return Outcome(expected, facts, problems)


DTYPE_RANK = 6


def check_hsdp_dtype_mismatch(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the HSDP dtype mismatch: one float32 replicate all_reduce, the partner's bf16."""
    problems = _no_disagreement(dumps)
    name, ranks = group_of("hsdp", "replicate", DTYPE_RANK)
    (partner,) = [r for r in ranks if r != DTYPE_RANK]
    mine = by_seq(dumps[DTYPE_RANK], name)
    floats = [s for s, e in mine.items() if set(e["input_dtypes"]) != {"BFloat16"}]
    if len(floats) != 1 or mine[floats[0]]["input_dtypes"] != ["Float"]:
        problems.append(f"rank {DTYPE_RANK}: non-bf16 seqs of pg {name!r}: {floats}")
    seq = floats[0] if floats else 0
    if seq != 6:
        problems.append(f"seq {seq} is not the head's replicate all_reduce of step 2")
    same = []
    for r, d in dumps.items():
        rep, _ = group_of("hsdp", "replicate", r)
        e = entry_at(d, rep, seq)
        if r != DTYPE_RANK and (e is None or set(e["input_dtypes"]) != {"BFloat16"}):
            problems.append(f"rank {r}: replicate seq {seq} is not bf16")
        elif r != DTYPE_RANK:
            same.append(r)
    if not _logged(info, DTYPE_RANK, "Error at bwd.replicate_all_reduce step 2 #3"):
        problems.append(f"rank {DTYPE_RANK} did not fail in that all_reduce")
    size = mine.get(seq, {}).get("input_sizes")
    if size != [[32]]:
        problems.append(f"rank {DTYPE_RANK}: replicate seq {seq} has sizes {size}")
    facts = [
        f"At all_reduce pg {name!r} (replicate) seq {seq}, the head's gradient all_reduce of "
        f"step 2, rank {DTYPE_RANK} passes Float {size}, where its partner rank {partner} "
        f"posted BFloat16 {size} (no dump: see above); the same seq of every other replicate "
        f"group (ranks {ranks_text(same)}) and rank {DTYPE_RANK}'s other seqs are BFloat16. "
        f"Rank {DTYPE_RANK}'s own entry is the only witness of the mismatch in the dumps.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    expected = Expected("desync", "mismatch", (DTYPE_RANK,), name, "replicate", seq, "all_reduce")
    return Outcome(expected, facts, problems)


def check_moe_healthy(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the healthy MoE run: every entry retired, the all_to_all splits as routed."""
    problems, facts = _healthy(dumps)
    quoted: dict[int, list[Dump]] = {}
    for rank, dump in dumps.items():
        name, ranks = group_of("moe", "ep", rank)
        index = ranks.index(rank)
        rows = entries(dump, name)
        for i in range(0, len(rows), 3):
            step, layer = divmod(i // 3, MOE_LAYERS)
            got = rows[i]["input_sizes"], rows[i + 1]["input_sizes"], rows[i + 1]["output_sizes"]
            recv = sum(routing(step, layer, j)[index] for j in range(EP))
            want = [[EP]], [[TOKENS, HIDDEN]], [[recv, HIDDEN]]
            if got != want or rows[i + 2]["input_sizes"] != [[recv, HIDDEN]]:
                problems.append(f"rank {rank}: ep entries {i + 1}-{i + 3} are {got}, not {want}")
        quoted[rank] = rows[:3]
    outs = {r: q[1]["output_sizes"] for r, q in quoted.items()}
    facts += [
        "all_to_all_single is recorded as gloo:all_to_all with the whole input and output "
        "tensors' shapes; the split sizes are not recorded. The count exchange on rank 0: "
        f"{quote(quoted[0][0])}; the dispatch on rank 0: {quote(quoted[0][1])}; on rank 2: "
        f"{quote(quoted[2][1])}; the combine on rank 2: {quote(quoted[2][2])}.",
        "Every dispatch input is [[32, 8]]; its output is the tokens the rank receives, which "
        f"differs between ranks of one EP group (step 1, layer 1: {outs}), so healthy ranks "
        "disagree on all_to_all sizes at the same seq.",
        _pg_status_fact(dumps, 5),
        _last_ops_fact(dumps),
    ]
    return Outcome(Expected("ok"), facts, problems)


PAD_RANK = 4


def check_moe_split_mismatch(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the MoE split mismatch: one padded dispatch all_to_all whose input total the peers do
    not expect."""
    name, ranks = group_of("moe", "ep", PAD_RANK)
    peers = [r for r in ranks if r != PAD_RANK and r in dumps]
    mine = by_seq(dumps[PAD_RANK], name)
    padded = [s for s, e in mine.items() if e["input_sizes"] == [[TOKENS + 1, HIDDEN]]]
    problems = [] if len(padded) == 1 else [f"rank {PAD_RANK}: [[33, 8]] at seqs {padded}"]
    seq = padded[0] if padded else 0
    if seq != 3 * (MOE_LAYERS + 1) + 2:
        problems.append(f"seq {seq} is not the dispatch of step 2, layer 2")
    problems += _no_disagreement(dumps)
    rows = []
    for r in [PAD_RANK, *peers]:
        e = entry_at(dumps[r], name, seq)
        problems += _expect(e, f"rank {r}", "all_to_all", [[TOKENS + (r == PAD_RANK), HIDDEN]])
        if e is not None:
            rows.append(f"rank {r}: input {e['input_sizes']} output {e['output_sizes']}")
    target = ranks[(ranks.index(PAD_RANK) + 1) % EP]
    # Which ranks' dispatch completes before the receiver's abort closes the connections (and
    # so which go on to the combine) varies from run to run.
    live = [PAD_RANK, *peers]
    went_on = [r for r in live if last_seq(dumps[r], name) == seq + 1]
    stopped = [r for r in live if last_seq(dumps[r], name) == seq]
    if sorted(went_on + stopped) != sorted(live):
        problems.append(f"pg {name!r} ends: {[(r, last_seq(dumps[r], name)) for r in dumps]}")
    for r in stopped:
        if not _logged(info, r, "Error at ep.dispatch step 2 #2"):
            problems.append(f"rank {r} did not fail in the dispatch")
    for r in dumps:
        if r not in ranks and entries(dumps[r])[-1]["process_group"][0] != WORLD_PG:
            problems.append(f"rank {r} does not end in the world all_reduce")
    facts = [
        f"At all_to_all pg {name!r} (ep) seq {seq}, the dispatch of step 2, layer 2: "
        + "; ".join(rows)
        + f". Rank {PAD_RANK}'s extra row went to rank {target}, which had been told "
        "(count exchange, the seq before) to expect one fewer. Split sizes are not in the "
        "dumps; the total input [[33, 8]] against [[32, 8]] everywhere else is the only trace.",
        "Of the EP group's live ranks, "
        + "; ".join(
            f"{ranks_label(rs)} {what}"
            for rs, what in (
                (went_on, f"completed the dispatch and issued the combine, seq {seq + 1}"),
                (stopped, "failed in the dispatch itself"),
            )
            if rs
        )
        + ". Which ranks' dispatch completes before the abort closes the connections varies "
        "from run to run. The ranks of the other EP group wait in the world all_reduce.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    expected = Expected("desync", "mismatch", (PAD_RANK,), name, "ep", seq, "all_to_all")
    return Outcome(expected, facts, problems)


SKIP_A2A_RANK = 2


def check_moe_skip_all_to_all(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the skipped MoE combine: the culprit's EP group ends one seq short of its peers'."""
    culprit = SKIP_A2A_RANK
    name, ranks = group_of("moe", "ep", culprit)
    peers = [r for r in ranks if r != culprit]
    seq, problems = _same_last_seq(dumps, name, peers)
    problems += _no_disagreement(dumps)
    if last_seq(dumps[culprit], name) != seq - 1:
        problems.append(f"rank {culprit}: pg {name!r} ends at {last_seq(dumps[culprit], name)}")
    if seq != 3 * 2 * MOE_LAYERS:
        problems.append(f"seq {seq} is not the combine of step 2, layer 2")
    for r in peers:
        e = entry_at(dumps[r], name, seq)
        if e is None or op_of(e) != "all_to_all" or e["output_sizes"] != [[TOKENS, HIDDEN]]:
            problems.append(f"rank {r}: pg {name!r} seq {seq} is not the combine")
    last = entries(dumps[culprit])[-1]
    if last["process_group"][0] != WORLD_PG or op_of(last) != "all_reduce":
        problems.append(f"rank {culprit}: last entry is not the world all_reduce")
    world, more = _same_last_seq(dumps, WORLD_PG, [r for r in dumps if r not in peers])
    problems += more
    facts = [
        f"Ranks {ranks_text(peers)} issued all_to_all pg {name!r} (ep) seq {seq}, the combine of "
        f"step 2, layer 2, and end there; rank {culprit}'s pg {name!r} ends at seq {seq - 1} "
        f"(the dispatch). Rank {culprit} instead issued the world all_reduce pg '0' seq {world}, "
        f"as did the ranks of the other EP group, {ranks_text(r for r in dumps if r not in ranks)}"
        f"; ranks {ranks_text(peers)} end at world seq {world - 1}.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    expected = Expected("desync", "not_joined", (culprit,), name, "ep", seq, "all_to_all")
    return Outcome(expected, facts, problems)


DDP_BUCKETS = (2164, 3120, 2112)  # numel of the buckets after the rebuild, in issue order
REORDER_RANK = 5


def _ddp_conventions(dumps: dict[int, Dump], rank: int) -> tuple[list[str], list[str]]:
    rows = entries(dumps[rank], WORLD_PG)
    got = [(op_of(e), e["input_sizes"], e["input_dtypes"]) for e in rows[:10]]
    want = [
        ("all_gather", [[1]], ["Long"]),
        ("broadcast", [[30]], ["Long"]),
        ("broadcast", [[7396]], ["Float"]),
        ("all_reduce", [[7396]], ["Float"]),
        ("all_reduce", [[]], ["Float"]),
        ("broadcast", [[11]], ["Int"]),
        ("broadcast", [[3]], ["Int"]),
        *[("all_reduce", [[n]], ["Float"]) for n in DDP_BUCKETS],
    ]
    if got != want:
        return [f"rank {rank}: the first DDP entries are {got}, not {want}"], []
    facts = [
        f"Rank {rank}'s first entries (pg '0'): DDP's construction records all_gather [[1]] "
        "Long (seq 1) and broadcast [[30]] Long (seq 2), its module-state sync broadcast "
        "[[7396]] Float (seq 3); step 1 all_reduces one bucket of all 7,396 gradients (seq 4) "
        "and the loss (seq 5, input_sizes [[]]: a 0-dim tensor); the bucket rebuild "
        "broadcasts [[11]] Int and [[3]] Int (seqs 6, 7); from step 2 on, the three buckets "
        f"are all_reduce {', '.join(f'[[{n}]]' for n in DDP_BUCKETS)}, one seq each, in bucket "
        f"order: {quote(rows[7])}.",
    ]
    return [], facts


def check_ddp_bucket_order(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the DDP bucket reorder: the culprit all_reduces two buckets in swapped order."""
    culprit = REORDER_RANK
    others = [r for r in dumps if r != culprit]
    more, facts = _ddp_conventions(dumps, min(dumps))
    end, problems = _same_last_seq(dumps, WORLD_PG, dumps)
    problems += more
    seq = end - len(DDP_BUCKETS) + 1
    problems += _no_disagreement(dumps, [(WORLD_PG, seq), (WORLD_PG, seq + 1)])
    for i, n in enumerate(DDP_BUCKETS):
        e = entry_at(dumps[min(others)], WORLD_PG, seq + i)
        problems += _expect(e, f"seq {seq + i}", "all_reduce", [[n]])
    if not _logged(info, culprit, "fault: reorder before ddp.bucket step 3 #1"):
        problems.append(f"rank {culprit} did not reorder its buckets")
    order = (DDP_BUCKETS[1], DDP_BUCKETS[0], DDP_BUCKETS[2])
    if culprit in dumps:
        for i, n in enumerate(order):
            e = entry_at(dumps[culprit], WORLD_PG, seq + i)
            problems += _expect(e, f"rank {culprit} seq {seq + i}", "all_reduce", [[n]])
        fate = (
            f"In this run gloo did not kill rank {culprit}; it raised and dumped like the "
            "others, and its dump shows "
            + ", ".join(f"seq {seq + i} [[{n}]]" for i, n in enumerate(order))
            + f"; seqs {seq} and {seq + 1} are the only disagreements in the set."
        )
    else:
        # The set must show what it claims: a run where the culprit died too is rerun.
        problems.append(f"gloo killed rank {culprit} too: no dump shows its sizes (rerun)")
        fate = (
            f"In this run gloo killed rank {culprit} too, so no dump shows its sizes; its "
            "program issues, in this order, "
            + ", ".join(f"[[{n}]] (seq {seq + i})" for i, n in enumerate(order))
            + "."
        )
    facts += [
        f"In step 3 ranks {ranks_text(others)} all_reduce the buckets in order: "
        + ", ".join(f"seq {seq + i} [[{n}]]" for i, n in enumerate(DDP_BUCKETS))
        + f", and end there. Rank {culprit}'s comm hook held bucket 1 back and issued bucket 2 "
        f"first. {fate} Whether gloo kills rank {culprit} varies from run to run.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    expected = Expected("desync", "mismatch", (culprit,), WORLD_PG, "default_pg", seq, "all_reduce")
    return Outcome(expected, facts, problems)


SUB_HANG_RANK = 1


def check_subgroups_independent_hang(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the subgroup hang: its subgroup peers wait at the seq it never reached; the other
    subgroup finished."""
    culprit = SUB_HANG_RANK
    name, ranks = group_of("subgroups", "undefined", culprit)
    other_name, other = group_of("subgroups", "undefined", WORLD_SIZE - 1)
    peers = [r for r in ranks if r != culprit]
    problems = _no_disagreement(dumps)
    seq = last_seq(dumps[culprit], name) + 1
    for r in peers:
        problems += _expect(entry_at(dumps[r], name, seq), f"rank {r}", "all_reduce", [[16]])
    if seq != 4 + 2:
        problems.append(f"seq {seq} is not the second all_reduce of step 2")
    if not _logged(info, culprit, "dumped (watchdog", "sub.all_reduce step 2 #2"):
        problems.append(f"rank {culprit} was not dumped by the watchdog in its hang")
    done, more = _same_last_seq(dumps, other_name, other)
    problems += more + _all_retired({r: dumps[r] for r in other})
    for r in other:
        if not _logged(info, r, "dumped (main thread, 0.5 s after the program ended"):
            problems.append(f"rank {r} did not finish its program")
    facts = [
        f"Ranks {ranks_text(peers)} issued all_reduce pg {name!r} (undefined) seq {seq}, the "
        f"second all_reduce of step 2, and end there; rank {culprit}'s pg {name!r} ends at seq "
        f"{seq - 1}, all its entries retired (it is idle, not waiting in c10d).",
        f"Ranks {ranks_text(other)} (pg {other_name!r}) finished: all retired, pg {other_name!r} "
        f"at seq {done} on each, and the world all_reduce at seq 1 on all 8 ranks. Nothing in "
        f"the world group waits for rank {culprit}.",
        _retired_fact(dumps),
        _pg_status_fact(dumps, culprit),
        _last_ops_fact(dumps),
    ]
    expected = Expected("hung", "not_joined", (culprit,), name, "undefined", seq, "all_reduce")
    return Outcome(expected, facts, problems)


BARRIER_SEQS = [1, 4, 5]  # the world seqs step 1 of the barrier program records (5 a step)


def _barrier_op_ids(dump: Dump) -> list[int]:
    return [int(e["op_id"]) for e in entries(dump, WORLD_PG)]


def check_barrier_healthy(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the healthy barrier run: the world seqs and op ids each monitored_barrier takes."""
    problems, facts = _healthy(dumps)
    steps = len(entries(dumps[0], WORLD_PG)) // len(BARRIER_SEQS)
    want = [s + 5 * i for i in range(steps) for s in BARRIER_SEQS]
    for rank, dump in dumps.items():
        if seqs_of(dump, WORLD_PG) != want:
            problems.append(f"rank {rank}: world seqs {seqs_of(dump, WORLD_PG)}, not {want}")
    ops0, ops1 = _barrier_op_ids(dumps[0]), _barrier_op_ids(dumps[1])
    jump0 = ops0[1] - ops0[0] - 1
    jump1 = ops1[1] - ops1[0] - 1
    if (jump0, jump1) != (2 * (WORLD_SIZE - 1), 2):
        problems.append(f"op_id jumps across the barrier: rank 0 {jump0}, rank 1 {jump1}")
    facts = [
        f"Every rank records world seqs {want}: each monitored_barrier leaves a gap of two "
        "seqs (2-3, 7-8, ...) and no entry.",
        f"op_ids: rank 0 records {ops0} (its barrier sends and receives one token to and from "
        f"each of the 7 others: {jump0} op_ids a barrier); rank 1 records {ops1} ({jump1} op_ids "
        "a barrier: one send, one recv), like every rank but 0. pg_status last_enqueued_collective "
        "is the op_id of the last entry.",
        f"The step's first entries on rank 0: {quote(entries(dumps[0])[0])}; "
        f"{quote(entries(dumps[0])[1])}.",
        *facts,
        _pg_status_fact(dumps, 0),
    ]
    return Outcome(Expected("ok"), facts, problems)


BARRIER_SKIP_RANK = 5


def check_barrier_skipped(dumps: dict[int, Dump], info: ShapeRunInfo) -> Outcome:
    """Check the skipped monitored_barrier: the culprit's world seqs run past those of the ranks
    that called it."""
    culprit = BARRIER_SKIP_RANK
    others = [r for r in dumps if r != culprit]
    problems = _no_disagreement(dumps)
    step2 = [s + 5 for s in BARRIER_SEQS]
    for r in others:
        if seqs_of(dumps[r], WORLD_PG) != BARRIER_SEQS + step2[:1]:
            problems.append(f"rank {r}: world seqs {seqs_of(dumps[r], WORLD_PG)}")
    seq = step2[0] + 1  # the first seq the step-2 barrier took on the ranks that called it
    mine = seqs_of(dumps[culprit], WORLD_PG)
    if mine != [*BARRIER_SEQS, step2[0], seq]:
        problems.append(f"rank {culprit}: world seqs {mine}")
    problems += _expect(entry_at(dumps[culprit], WORLD_PG, seq), "culprit", "all_gather", [[2]])
    if not _logged(info, 0, f"Ranks {culprit} failed to pass monitoredBarrier"):
        problems.append("rank 0 did not name the skipper")
    ops0 = _barrier_op_ids(dumps[0])
    jump = ops0[1] - ops0[0] - 1
    for r in others[1:]:
        if "successfully reached monitoredBarrier" not in _message(info, r):
            problems.append(f"rank {r} raised {_message(info, r)!r}")
    facts = [
        f"Ranks {ranks_text(others)} record world seqs {BARRIER_SEQS + step2[:1]}: in step 1 "
        f"the barrier took seqs 2-3 (no entry), and in step 2 they stop after all_reduce seq "
        f"{step2[0]}, inside the barrier, which took seqs {seq}-{seq + 1} on them but left no "
        f"entry. Rank {culprit} records {mine}: its seq {seq} is the step's all_gather "
        "(input [[2]], output [[8, 2]]), which no other rank reached.",
        f"What the ranks raised: rank 0: {_message(info, 0)!r}; rank 1 (like ranks 2, 3, 4, 6, "
        f"7): {_message(info, 1)!r}; rank {culprit}: {_message(info, culprit)!r}.",
        f"op_ids and pg_status: rank 0's last entry has op_id {entries(dumps[0])[-1]['op_id']} "
        f"(its step-1 barrier took {jump}); pg_status of rank 0: {dumps[0]['pg_status']!r}; of "
        f"rank {culprit}: {dumps[culprit]['pg_status']!r}. The failed barrier's sends and "
        "receives do not show in pg_status.",
        _retired_fact(dumps),
        _last_ops_fact(dumps),
    ]
    expected = Expected("desync", "not_joined", (culprit,), WORLD_PG, "default_pg", seq, None)
    return Outcome(expected, facts, problems)


# --------------------------------------------------------------------------------------------
# Scenario table.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One sample dump set: the shape, the program run, the story and its check."""

    name: str
    shape: str
    plan: Plan
    story: str
    check: Check
    attempts: int = 1
    fmt: str = "pickle"

    def file_name(self, rank: int) -> str:
        """The dump file name of rank `rank`: rank_<N>.pkl."""
        return f"rank_{rank}.pkl"


_FSDP_PROGRAM = """\
8-rank gloo job (torch 2.13.0 CPU, 127.0.0.1), FSDP2-style sharding over the world group (pg "0",
default_pg): three layers, embed (one parameter, shard [4, 16]), block (two parameters, shards
[4, 16] and [4]) and head (shard [2, 16]). Per step, the forward all-gathers layer 1's shards
(all_gather_into_tensor, async) and, before computing each layer, prefetches the next layer's
(the block's two in one _coalescing_manager(async_ops=True) block); the backward keeps the head
unsharded, and for each layer from the last prefetches the previous layer's parameters, computes,
and issues an async reduce_scatter_tensor of its gradients (the block's two in one coalescing
block); then it waits for the reduce-scatters and all_reduces the loss [1] over the world.
@STEPS@ steps, counted from 1 below, as are layers (1 = embed, 2 = block, 3 = head).
"""

_HSDP_PROGRAM = """\
8-rank gloo job (torch 2.13.0 CPU, 127.0.0.1), HSDP with 2 replicas x 4 shards. Groups, created
in this order on every rank: pg "0" (default_pg, world); shard pgs "1" = [0-3], "2" = [4-7] (desc
"shard"); replicate pgs "3" = {0,4}, "4" = {1,5}, "5" = {2,6}, "6" = {3,7} (desc "replicate").
Over its shard group each rank runs the FSDP2-style program of three layers, embed (shard
[4, 16]), block (shards [4, 16] and [4]) and head (shard [2, 16]): forward all_gather_into_tensor
of each layer's shards, prefetched one layer ahead (the block's two in one
_coalescing_manager(async_ops=True) block); backward prefetch of the previous layer and an async
reduce_scatter_tensor of each layer's gradients (the block's two in one block). Then, for each
layer, the all_reduce of its gradient shards (flattened, bfloat16: [64]; the block's [64] and [4]
in one _coalescing_manager(async_ops=True) block; [32]) over the replicate group, and the world
all_reduce of the loss [1]. @STEPS@ steps, counted from 1 below,
as are layers (1 = embed, 2 = block, 3 = head).
"""

_MOE_PROGRAM = """\
8-rank gloo job (torch 2.13.0 CPU, 127.0.0.1), tensor parallel TP=2 x expert parallel EP=4.
Groups, created in this order on every rank: pg "0" (default_pg, world); TP pgs "1"-"4" = {0,1},
{2,3}, {4,5}, {6,7} (desc "tp"); EP pgs "5" = {0,2,4,6}, "6" = {1,3,5,7} (desc "ep"). Per step,
for each of 2 MoE layers: TP all_reduce [16, 8]; the token-count exchange over the EP group
(all_to_all_single of int64 [4] -> [4]); the dispatch, all_to_all_single of the rank's 32 tokens
[32, 8] with uneven input splits (13, 9, 6, 4 rotated by EP index + step + layer) and the output
splits the counts gave; expert compute; the combine, all_to_all_single back with the splits
swapped. Then the world all_reduce of the loss [1]. @STEPS@ steps, counted from 1 below, as are
layers.
"""

_DDP_PROGRAM = """\
8-rank gloo job (torch 2.13.0 CPU, 127.0.0.1), torch.nn.parallel.DistributedDataParallel over the
world group (pg "0", default_pg) on a 5-layer MLP 32-64-48-32-16-4 (7,396 parameters) with
bucket_cap_mb=0.004. DDP's construction broadcasts the module state; the first backward
all_reduces a single bucket, after which DDP rebuilds its buckets (broadcasts of the new bucket
assignment) into three. A comm hook does what DDP's default hook does: divide the bucket by the
world size, all_reduce it (async_op=True). After each backward, an optimizer step and a world
all_reduce of the loss (a 0-dim tensor). @STEPS@ steps, counted from 1 below, as are buckets
(DDP's bucket index + 1; bucket 1 holds the last layers' gradients, ready first).
"""

_SUBGROUPS_PROGRAM = """\
8-rank gloo job (torch 2.13.0 CPU, 127.0.0.1): two independent 4-rank replicas made with
dist.new_subgroups(group_size=4), which creates pg "1" = [0-3] and pg "2" = [4-7] on every rank
with no group_desc, so their desc is "undefined". The program all_reduces a seed over the world
(pg "0", default_pg) once; then per step three all_reduce [16] and one all_gather_into_tensor
[2] -> [8] over the rank's subgroup; nothing else uses the world. @STEPS@ steps, counted from 1
below, as are the all_reduces of a step.
"""

_BARRIER_PROGRAM = """\
8-rank gloo job (torch 2.13.0 CPU, 127.0.0.1) on the world group (pg "0", default_pg). Per step:
all_reduce [64]; dist.monitored_barrier(wait_all_ranks=True) (gloo only: rank 0 receives a token
from every rank and sends one back to each; it is no recorded collective, but it takes two
collective sequence ids, and its send/recv take op_ids); all_gather_into_tensor [2] -> [16];
all_reduce of the loss [1]. @STEPS@ steps, counted from 1 below.
"""

PROGRAM_TEXT = {
    "fsdp": _FSDP_PROGRAM,
    "hsdp": _HSDP_PROGRAM,
    "moe": _MOE_PROGRAM,
    "ddp": _DDP_PROGRAM,
    "subgroups": _SUBGROUPS_PROGRAM,
    "barrier": _BARRIER_PROGRAM,
}


def _abort_story(victim: str) -> str:
    return (
        f"Gloo kills {victim} on the spot (SIGABRT, no dump): a receiver that gets more bytes "
        "than it posted fails 'op.preamble.length <= op.nbytes'. "
    )


_TAIL = (
    "The others error out (connection closed) or time out (@TIMEOUT@ s group timeout) and dump "
    "0.5 s after their op raised."
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="fsdp_healthy",
        shape="fsdp",
        plan=Plan(),
        story="Nothing goes wrong. Every rank dumps 0.5 s after its program ends.",
        check=check_fsdp_healthy,
    ),
    Scenario(
        name="fsdp_mid_run",
        shape="fsdp",
        plan=Plan(steps=3, compute_s=0.02, mid_run_dump_at=("fwd.all_gather", 1, 2)),
        story=(
            "Nothing goes wrong, but the job is dumped while it runs: when rank 0 reaches the "
            "prefetch of the head's all_gather in the forward of step 2, it posts a wall time "
            "20 ms ahead and every rank dumps from a background thread at that time while its "
            "main loop goes on. Each layer's compute sleeps 5-40 ms, longer the higher the "
            "rank, so fast ranks wait for slow ones in their async all-gathers. No other dump "
            "is written. Which ops are in flight differs from run to run."
        ),
        check=check_fsdp_mid_run,
        attempts=3,
    ),
    Scenario(
        name="fsdp_skip_all_gather",
        shape="fsdp",
        plan=Plan(
            faults=(Fault(SKIP_AG_RANK, "fwd.all_gather", 1, 2, "skip"),),
            aborted=frozenset({SKIP_AG_RANK + 1}),
        ),
        story=(
            f"Rank {SKIP_AG_RANK} skips the all_gather of the head's parameters in the forward "
            "of step 2 (as if it believed them still unsharded), computes, and goes on into "
            "the backward, whose first collective is the block's coalesced all_gather "
            "prefetch; the others wait in the head's all_gather. At that seq the ranks "
            f"exchange buffers of different sizes. {_abort_story(f'rank {SKIP_AG_RANK + 1}')}"
            f"Rank {SKIP_AG_RANK} then errors out in a later op. " + _TAIL
        ),
        check=check_fsdp_skip_all_gather,
        attempts=2,
    ),
    Scenario(
        name="fsdp_crash",
        shape="fsdp",
        plan=Plan(
            faults=(Fault(CRASH_RANK, "fwd.all_gather", 1, 1, "crash"),),
            crashed=frozenset({CRASH_RANK}),
        ),
        story=(
            f"Rank {CRASH_RANK} dies with os._exit in the forward of step 2, right before it "
            "would prefetch the block's parameters (the coalesced all_gather), after the "
            "embed's all_gather; it writes no dump. The others issue that prefetch and wait in "
            "it. " + _TAIL
        ),
        check=check_fsdp_crash,
    ),
    Scenario(
        name="fsdp_hang_before_reduce_scatter",
        shape="fsdp",
        plan=Plan(faults=(Fault(HANG_RS_RANK, "bwd.reduce_scatter", 1, 2, "hang"),)),
        story=(
            f"Rank {HANG_RS_RANK} hangs (sleeps, as if stuck in compute) right before the "
            "reduce_scatter_tensor of the head's gradients in the backward of step 2. The others "
            "issue it (async) and go on with the backward until they block; their ops time "
            "out (@TIMEOUT@ s) and each dumps 0.5 s after its op raised; rank "
            f"{HANG_RS_RANK} dumps from a watchdog thread once its main thread made no "
            "progress for timeout + 2 s."
        ),
        check=check_fsdp_hang_before_reduce_scatter,
    ),
    Scenario(
        name="fsdp_size_mismatch",
        shape="fsdp",
        plan=Plan(
            faults=(Fault(SIZE_RANK, "fwd.all_gather", 1, 0, "size"),),
            aborted=frozenset({SIZE_RANK + 1}),
        ),
        story=(
            f"In step 2 rank {SIZE_RANK}'s embed shard is [5, 16] where every other rank's is "
            "[4, 16] (a resharding bug), so its forward all_gather_into_tensor posts [5, 16] -> "
            f"[40, 16]. {_abort_story(f'rank {SIZE_RANK + 1}')}" + _TAIL
        ),
        check=check_fsdp_size_mismatch,
        attempts=2,
    ),
    Scenario(
        name="hsdp_healthy",
        shape="hsdp",
        plan=Plan(),
        story="Nothing goes wrong. Every rank dumps 0.5 s after its program ends.",
        check=check_hsdp_healthy,
    ),
    Scenario(
        name="hsdp_dtype_mismatch",
        shape="hsdp",
        plan=Plan(
            faults=(Fault(DTYPE_RANK, "bwd.replicate_all_reduce", 1, 2, "float"),),
            aborted=frozenset({DTYPE_RANK - SHARD}),
        ),
        story=(
            f"In step 2 rank {DTYPE_RANK} all_reduces the head's gradient shard over its "
            f"replicate group {{{DTYPE_RANK - SHARD},{DTYPE_RANK}}} as float32 where its partner "
            "(and every rank at every other step) uses bfloat16: same shape [32], twice the "
            f"bytes. {_abort_story(f'its partner, rank {DTYPE_RANK - SHARD},')}"
            f"Rank {DTYPE_RANK} gets a read error in that all_reduce. " + _TAIL
        ),
        check=check_hsdp_dtype_mismatch,
        attempts=2,
    ),
    Scenario(
        name="moe_healthy",
        shape="moe",
        plan=Plan(),
        story="Nothing goes wrong. Every rank dumps 0.5 s after its program ends.",
        check=check_moe_healthy,
    ),
    Scenario(
        name="moe_split_mismatch",
        shape="moe",
        plan=Plan(
            faults=(Fault(PAD_RANK, "ep.dispatch", 1, 1, "pad"),),
            aborted=frozenset({PAD_RANK + 2}),
        ),
        story=(
            f"In the dispatch of step 2, layer 2, rank {PAD_RANK} appends one padding token for "
            f"its next EP peer, rank {PAD_RANK + 2}, after the token counts were exchanged: its "
            "input is [33, 8] and its input split to that peer one more than the peer's output "
            f"split expects. {_abort_story(f'rank {PAD_RANK + 2}')}" + _TAIL
        ),
        check=check_moe_split_mismatch,
        attempts=2,
    ),
    Scenario(
        name="moe_skip_all_to_all",
        shape="moe",
        plan=Plan(faults=(Fault(SKIP_A2A_RANK, "ep.combine", 1, 1, "skip"),)),
        story=(
            f"Rank {SKIP_A2A_RANK} skips the combine all_to_all of step 2, layer 2 (the last "
            "MoE layer of the last step) and goes on to the world all_reduce of the loss, as "
            "do the ranks of the other EP group; its EP peers wait in the combine. All time "
            "out (@TIMEOUT@ s) and dump 0.5 s after their op raised."
        ),
        check=check_moe_skip_all_to_all,
    ),
    Scenario(
        name="ddp_mid_run",
        shape="ddp",
        plan=Plan(steps=3, compute_s=0.02, mid_run_dump_at=("ddp.bucket", 1, 1)),
        story=(
            "Nothing goes wrong, but the job is dumped while it runs: when rank 0's comm hook "
            "gets bucket 2 in the backward of step 2, it posts a wall time 20 ms ahead and "
            "every rank dumps from a background thread at that time while its backward goes "
            "on. Each layer's backward sleeps 5-40 ms, longer the higher the rank, so fast "
            "ranks wait for slow ones in their bucket all_reduces. No other dump is written. "
            "Which ops are in flight differs from run to run."
        ),
        check=check_ddp_mid_run,
        attempts=3,
    ),
    Scenario(
        name="ddp_bucket_order",
        shape="ddp",
        plan=Plan(
            steps=3,
            faults=(Fault(REORDER_RANK, "ddp.bucket", 2, 0, "reorder"),),
            aborted=frozenset({REORDER_RANK - 1}),
            maybe_aborted=frozenset({REORDER_RANK}),
        ),
        story=(
            f"In the backward of step 3 rank {REORDER_RANK}'s comm hook holds bucket 1 back and "
            "all_reduces it right after bucket 2, while every other rank all_reduces the "
            f"buckets in order, so at one seq rank {REORDER_RANK} sends {DDP_BUCKETS[1]} floats "
            f"where the others send {DDP_BUCKETS[0]}, and at the next the reverse. Gloo kills "
            f"rank {REORDER_RANK - 1} (SIGABRT, no dump), which received a chunk bigger than the "
            "one it posted ('op.preamble.length <= op.nbytes'); rank "
            f"{REORDER_RANK} receives an oversized chunk at the next seq and is killed too in "
            "most runs; in some it is spared and dumps. " + _TAIL
        ),
        check=check_ddp_bucket_order,
        attempts=12,  # gloo spares the culprit in about one run of five
    ),
    Scenario(
        name="subgroups_independent_hang",
        shape="subgroups",
        plan=Plan(faults=(Fault(SUB_HANG_RANK, "sub.all_reduce", 1, 1, "hang"),)),
        story=(
            f"Rank {SUB_HANG_RANK} hangs (sleeps) right before the second all_reduce of step 2 "
            "in its subgroup [0-3]. Subgroup [4-7] runs to the end and its ranks dump 0.5 s "
            f"after their program ends; rank {SUB_HANG_RANK}'s peers time out (@TIMEOUT@ s) and "
            f"dump 0.5 s after their op raised; rank {SUB_HANG_RANK} dumps from a watchdog "
            "thread once its main thread made no progress for timeout + 2 s. Ranks that "
            "dumped stay connected until all have."
        ),
        check=check_subgroups_independent_hang,
    ),
    Scenario(
        name="barrier_healthy",
        shape="barrier",
        plan=Plan(),
        story="Nothing goes wrong. Every rank dumps 0.5 s after its program ends.",
        check=check_barrier_healthy,
    ),
    Scenario(
        name="barrier_skipped",
        shape="barrier",
        plan=Plan(faults=(Fault(BARRIER_SKIP_RANK, "world.monitored_barrier", 1, 0, "skip"),)),
        story=(
            f"Rank {BARRIER_SKIP_RANK} skips the monitored_barrier of step 2 and goes on to the "
            "step's all_gather, which nobody else reaches. Rank 0's barrier receive from rank "
            f"{BARRIER_SKIP_RANK} times out (@TIMEOUT@ s: the group's timeout bounds it, not "
            "monitored_barrier's default of 30 min) and it raises naming rank "
            f"{BARRIER_SKIP_RANK}; the others, waiting for rank 0's reply, raise that they "
            f"reached the barrier but got errors; rank {BARRIER_SKIP_RANK}'s all_gather times "
            "out. Each dumps 0.5 s after its op raised. The barrier is no recorded op, so the "
            "EXPECTED line names no op."
        ),
        check=check_barrier_skipped,
    ),
)
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}


# --------------------------------------------------------------------------------------------
# Parent side: launch, collect, verify, write NOTE.md.
# --------------------------------------------------------------------------------------------


def run_once(scenario: Scenario, folder: Path, timeout_s: float) -> list[str]:
    """Run one attempt of a scenario; returns the problems found."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    plan = scenario.plan
    codes, lines_of, problems, elapsed = run_ranks(
        Path(__file__), scenario.name, folder, timeout_s, WORLD_SIZE
    )
    logs: dict[int, list[str]] = {}
    tails: dict[int, list[str]] = {}
    for rank, lines in lines_of.items():
        logs[rank] = [ln for ln in lines if ln.startswith(f"rank {rank}:")]
        want = {0}
        if rank in plan.crashed:
            want = {CRASH_EXIT}
        elif rank in plan.aborted:
            want = {ABORT_EXIT}
        elif rank in plan.maybe_aborted:
            want = {0, ABORT_EXIT}
        if codes[rank] != 0:
            tails[rank] = lines[-12:]
        if codes[rank] not in want:
            problems.append(f"rank {rank}: exit status {codes[rank]}, expected {want}")
            for line in lines[-6:]:
                print(f"      | {line[:200]}")
    dumps: dict[int, Dump] = {}
    missing: set[int] = set()
    for rank in range(WORLD_SIZE):
        path = folder / scenario.file_name(rank)
        if not path.exists():
            missing.add(rank)
            continue
        try:
            dumps[rank] = load_dump(path, scenario.fmt)
        except Exception as exc:
            problems.append(f"rank {rank}: cannot load {path.name}: {exc}")
    died = {r for r, code in codes.items() if code in (CRASH_EXIT, ABORT_EXIT)}
    if missing != died or not plan.crashed | plan.aborted <= died:
        want_missing = sorted(plan.crashed | plan.aborted)
        problems.append(f"missing dumps {sorted(missing)}, expected {want_missing}")
    info = ShapeRunInfo(codes, logs, missing, tails)
    outcome = Outcome(Expected("?"))
    if not problems:
        problems += check_structure(dumps, scenario.shape, gaps=scenario.shape == "barrier")
        try:
            outcome = scenario.check(dumps, info)
        except Exception as exc:  # a malformed set: report, do not crash the generator
            problems.append(f"check failed: {type(exc).__name__}: {exc}")
        problems += outcome.problems
    for rank in range(WORLD_SIZE):
        for line in logs[rank]:
            if not any(t in line for t in ("dumped (main", "dump taken while", "mid-run")):
                print(f"    {line[:150]}")
    print(f"    dumps: {_dump_ways(info)}")
    (folder / "NOTE.md").write_text(note_text(scenario, outcome, info, timeout_s))
    total = sum(p.stat().st_size for p in folder.iterdir())
    print(f"    {len(dumps)} dumps, {total / 1024:.1f} KiB, {elapsed:.1f} s")
    print(f"    {outcome.expected.line()}")
    return problems


def note_text(scenario: Scenario, outcome: Outcome, info: ShapeRunInfo, timeout_s: float) -> str:
    """The NOTE.md of a generated dump set: program, story, files, expected answer and facts."""
    plan = scenario.plan
    program = PROGRAM_TEXT[scenario.shape].replace("@STEPS@", str(plan.steps))
    story = scenario.story.replace("@TIMEOUT@", f"{timeout_s:g}")
    dead = info.missing
    names = f"{scenario.file_name(0)} ... {scenario.file_name(WORLD_SIZE - 1)}"
    if dead:
        names += f" (no file for {ranks_label(dead)})"
    by_exc: dict[str, list[int]] = {}
    for rank, text in _raised(info).items():
        kind = text.split(" at ")[0]
        reason = "timeout" if "imed out" in text else "error"
        if "Connection closed" in text or "Connection reset" in text:
            reason = "peer connection closed"
        by_exc.setdefault(f"{kind} ({reason})", []).append(rank)
    paragraphs = [
        story,
        f"Files: {names}; _dump_fr_trace(includeCollectives=True, includeStackTraces=True, "
        "onlyActive=False).",
        f"How each rank dumped: {_dump_ways(info)}.",
    ]
    if by_exc:
        paragraphs.append(
            "Raised in the program: "
            + "; ".join(f"{k}: {ranks_label(v)}" for k, v in sorted(by_exc.items()))
            + "."
        )
    program = textwrap.fill(" ".join(program.split()), NOTE_WIDTH, break_on_hyphens=False)
    lines = [f"# {scenario.name}", "", program, ""]
    for text in paragraphs:
        lines += [*textwrap.wrap(text, NOTE_WIDTH, break_on_hyphens=False), ""]
    lines.append("What the dumps show (checked by tools/make_shape_samples.py):")
    for fact in _deaths(info, plan) + outcome.facts:
        lines += textwrap.wrap(
            fact, NOTE_WIDTH, initial_indent="- ", subsequent_indent="  ", break_on_hyphens=False
        )
    lines += ["", outcome.expected.line(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Generate the scenarios asked for on the command line; returns the exit status."""
    return drive(argv, __doc__, SCENARIOS, run_once, launch, DEFAULT_TIMEOUT_S)


if __name__ == "__main__":
    sys.exit(main())
