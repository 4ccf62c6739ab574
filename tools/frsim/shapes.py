"""The common training shapes beyond Megatron's 3D grid, as free-form jobs (`CustomJob`).

Each `ShapeSpec` builds one job of 8 to 64 ranks for the NCCL or the gloo backend; the
recorders' conventions (what an op records, how a coalescing block or a `monitored_barrier`
shows) come from `program.Builder`, so the same program gives each backend's dumps:

- **fsdp**: FSDP2 (`fully_shard`) over one shard group: the world (default group) or an explicit
  group over every rank. Forward: per layer an `all_gather_into_tensor` of its parameter shards,
  prefetched (the next layer's gather is enqueued before the current layer's compute); layers
  with two parameter groups gather in one `_coalescing_manager` block. Backward (the last
  layer stays unsharded): prefetch of the previous layer, compute, `reduce_scatter_tensor` of
  the gradients (some layers as a coalescing block of several). Then the gradient norm and the
  loss all_reduces over the world (the host waits for both).
- **hsdp**: replicate x shard: shard groups ("shard", contiguous ranks) run the fsdp program; the
  gradient shard of each layer is then all_reduced over its replicate group ("replicate") in
  bfloat16, right after its reduce-scatter or for every layer at the end of the backward.
- **moe**: tensor x expert parallel: TP groups ("tp", contiguous) and EP groups ("ep", one per TP
  index). Per MoE layer: TP all_reduce, the token-count exchange (an even `all_to_all_single`
  of int64 counts), the dispatch (`all_to_all_single` with uneven splits: every EP rank sends
  the same number of tokens, each receives its own total) and the combine (the dispatch's
  output back); backward: the two all_to_all's mirrored and the TP all_reduce; then the dense
  gradients over EP and the loss over the world. Only the totals are recorded, so the members'
  records differ: they agree on the logical call (`Template.match`).
- **ddp**: DistributedDataParallel over the world: at construction a metadata all_gather and the
  module-state broadcast; the first backward all_reduces the default buckets, then DDP rebuilds
  them (two broadcasts) into 3 to 5 buckets of distinct sizes, issued async (`async_op=True`) as
  gradients are ready and waited at the end of the backward; the loss all_reduce.
- **subgroups**: `new_subgroups(group_size=k)` (descs "undefined"): a world all_reduce of the
  seed, then each subgroup's own all_reduces (subgroups run different counts) and a gather;
  optionally the world loss all_reduce each step.
- **barrier**: world collectives with `monitored_barrier(wait_all_ranks=True)` between them
  (gloo: unrecorded, two collective seq ids on every caller); NCCL has no monitored barrier, so
  there it is `barrier()` (`nccl:all_reduce_barrier`, the host waits).

Call sites are keys of `sites.SITES` ("fsdp_unshard", "moe_dispatch", ...); `site_category`
groups a unit's site into what the campaign draws faults at.

    spec = ShapeSpec("fsdp", world=16, backend="gloo", steps=3)
    job = build(spec)
    sim = simulate(SimSpec(layout=job, program=ProgramSpec(backend="gloo"), gloo_abort=True))
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from .custom import WORLD, CustomJob, RankOps
from .program import BF16, F32, I64, Backend, Shape

ShapeName = Literal["fsdp", "hsdp", "moe", "ddp", "subgroups", "barrier"]
SHAPES: tuple[ShapeName, ...] = ("fsdp", "hsdp", "moe", "ddp", "subgroups", "barrier")
WORLDS: tuple[int, ...] = (8, 16, 32, 64)


@dataclass(frozen=True)
class ShapeSpec:
    """One job of a training shape. Fields a shape does not use are ignored."""

    shape: ShapeName
    world: int = 8
    backend: Backend = "nccl"
    steps: int = 3
    layers: int = 4
    """fsdp/hsdp: layers (FSDP units); moe: MoE layers."""
    group: int = 4
    """hsdp: shard group size; moe: TP size; subgroups: subgroup size."""
    explicit_group: bool = False
    """fsdp: shard over an explicit group of every rank ("shard") instead of the default group."""
    replicate_first: bool = False
    """hsdp: the replicate groups are created before the shard groups."""
    replicate_at_end: bool = False
    """hsdp: every layer's replicate all_reduce after the whole backward (else after its
    reduce-scatter)."""
    buckets: int = 3
    """ddp: buckets after the rebuild."""
    world_sync: bool = False
    """subgroups: a world loss all_reduce ends each step."""
    seed: int = 0
    """Which layers coalesce, split sizes, bucket sizes."""

    def __post_init__(self) -> None:
        if self.world < 2:
            raise ValueError("world must be >= 2")
        if self.shape in ("hsdp", "moe", "subgroups") and (
            self.group < 2 or self.world % self.group or self.world == self.group
        ):
            raise ValueError(f"{self.shape}: group {self.group} must divide world {self.world}")
        if self.steps < 1 or self.layers < 2 or self.buckets < 3:
            raise ValueError("steps >= 1, layers >= 2, buckets >= 3")

    def describe(self) -> str:
        """The job in a few words, e.g. "hsdp 4x2 L3 s2"."""
        w, g = self.world, self.group
        text = {
            "fsdp": f"fsdp w{w}{' group' if self.explicit_group else ''} L{self.layers}",
            "hsdp": f"hsdp {w // g}x{g} L{self.layers}",
            "moe": f"moe tp{g}xep{w // g} L{self.layers}",
            "ddp": f"ddp w{w} b{self.buckets}",
            "subgroups": f"subgroups {w // g}x{g}{' +world' if self.world_sync else ''}",
            "barrier": f"barrier w{w}",
        }[self.shape]
        return f"{text} s{self.steps}"


def build(spec: ShapeSpec) -> CustomJob:
    """The job: its groups and every rank's program."""
    job = CustomJob(world_size=spec.world)
    {
        "fsdp": _fsdp,
        "hsdp": _hsdp,
        "moe": _moe,
        "ddp": _ddp,
        "subgroups": _subgroups,
        "barrier": _barrier,
    }[spec.shape](spec, job)
    return job


SITE_CATEGORY: dict[str, str] = {
    "fsdp_unshard": "all_gather",
    "fsdp_prefetch": "all_gather",
    "fsdp_unshard_bwd": "all_gather",
    "fsdp_reduce": "reduce_scatter",
    "hsdp_replicate": "replicate",
    "train_grad_norm": "world",
    "train_loss": "world",
    "loss": "world",
    "attn_fwd": "tp",
    "mlp_bwd": "tp",
    "moe_dispatch": "all_to_all",
    "moe_combine": "all_to_all",
    "moe_dispatch_bwd": "all_to_all",
    "moe_combine_bwd": "all_to_all",
    "grad_sync": "dp",
    "ddp_bucket": "bucket",
    "ddp_setup": "setup",
    "setup": "setup",
    "subgroup_metrics": "subgroup",
    "sync_barrier": "barrier",
}
"""Call site -> the site category the campaign draws faults at."""


def site_category(site: str) -> str:
    """The site category of call site `site` ("other" for a site the campaign does not name)."""
    return SITE_CATEGORY.get(site, "other")


# --- the programs ------------------------------------------------------------------------


def _layer_shapes(spec: ShapeSpec, shard_size: int) -> list[tuple[Shape, ...]]:
    """Per layer, the flat shard of each parameter group it gathers (two: a coalescing block)."""
    rng = random.Random(spec.seed * 7919 + 11)
    out: list[tuple[Shape, ...]] = []
    for layer in range(spec.layers):
        numel = 1_048_576 * rng.choice((4, 8, 12, 16)) // shard_size
        if layer == 0 or layer == spec.layers - 1:
            out.append(((numel // 4,),))  # embedding / head
        elif rng.random() < 0.4:
            out.append(((numel,), (max(1, 8_192 // shard_size),)))  # weights + norms
        else:
            out.append(((numel,),))
    return out


def _gather(
    p: RankOps, group: int, shards: tuple[Shape, ...], site: str, tag: str, dtype: str = BF16
) -> None:
    """Async all-gather of a layer's parameter shards (a coalescing block for two)."""
    if len(shards) == 1:
        p.coll(group, "_all_gather_base", shards, dtype, site, nowait=True, tag=tag)
    else:
        p.fused(group, "all_gather_into_tensor", shards, dtype, site, nowait=True, tag=tag)


def _reduce(
    p: RankOps, group: int, shards: tuple[Shape, ...], dtype: str, site: str, tag: str
) -> None:
    """Async reduce-scatter of a layer's gradients (a coalescing block for several)."""
    if len(shards) == 1:
        p.coll(group, "_reduce_scatter_base", shards, dtype, site, nowait=True, tag=tag)
    else:
        p.fused(group, "reduce_scatter_tensor", shards, dtype, site, nowait=True, tag=tag)


def fsdp_step(
    p: RankOps,
    shard: int,
    layers: list[tuple[Shape, ...]],
    rs_blocks: frozenset[int],
    rs_dtype: str,
    after_reduce: list[tuple[int, tuple[Shape, ...]]] | None = None,
    replicate: int = -1,
    gather_dtype: str = BF16,
) -> None:
    """One FSDP2 step on `shard`'s members, every collective async (`async_op=True`). Forward:
    layer 0's gather; before computing each layer, the wait for its gather, then the next
    layer's gather (prefetch: FSDP2's `pre_forward` waits, then prefetches). Backward (the last
    layer stays unsharded): before computing each layer, the wait for its gather and the
    previous layer's gather; after it, its reduce-scatter (`rs_blocks`: layers whose gradients
    reduce-scatter as a block of several tensors; a layer of two parameter groups always
    does). HSDP: each layer's replicate all_reduce right after its reduce-scatter (`replicate`
    >= 0 and `after_reduce` None) or collected into `after_reduce`. Parameters are gathered
    in `gather_dtype` (bfloat16 under mixed precision). Ends with the wait for the
    reduce-scatters. gloo's host waits where FSDP2 waits; NCCL's never does."""
    n = len(layers)
    _gather(p, shard, layers[0], "fsdp_unshard", "f0", gather_dtype)
    for layer in range(n):
        p.wait(f"f{layer}")
        if layer + 1 < n:
            _gather(p, shard, layers[layer + 1], "fsdp_prefetch", f"f{layer + 1}", gather_dtype)
        p.compute(dev_us=2_000 + 300 * layer, host_us=250)
    for layer in reversed(range(n)):
        if layer < n - 1:
            p.wait(f"b{layer}")
        if layer > 0:
            _gather(p, shard, layers[layer - 1], "fsdp_unshard_bwd", f"b{layer - 1}", gather_dtype)
        p.compute(dev_us=4_000, host_us=300)
        grads = layers[layer]
        if layer in rs_blocks and len(grads) == 1:
            grads = (*grads, (grads[0][0] // 4,), (512,))
        _reduce(p, shard, grads, rs_dtype, "fsdp_reduce", f"r{layer}")
        if replicate >= 0:
            flat = (sum(s[0] for s in grads),)
            if after_reduce is None:
                p.coll(replicate, "all_reduce", [flat], BF16, "hsdp_replicate", nowait=True)
            else:
                after_reduce.append((layer, (flat,)))
    p.wait("r0")


def _world_tail(p: RankOps, grad_norm: bool = True) -> None:
    if grad_norm:
        p.compute(dev_us=300, host_us=100)
        p.coll(WORLD, "all_reduce", [(1,)], F32, "train_grad_norm", sync=True)
    p.compute(dev_us=1_500, host_us=600)
    p.coll(WORLD, "all_reduce", [(1,)], F32, "train_loss", sync=True)


def _rs_blocks(spec: ShapeSpec) -> frozenset[int]:
    rng = random.Random(spec.seed * 31 + 5)
    return frozenset(
        layer for layer in range(spec.layers) if layer == spec.layers - 1 or rng.random() < 0.25
    )


def _fsdp(spec: ShapeSpec, job: CustomJob) -> None:
    shard = job.new_group("shard", job.ranks()) if spec.explicit_group else WORLD
    layers = _layer_shapes(spec, spec.world)
    blocks = _rs_blocks(spec)
    for rank in job.ranks():
        p = job.on(rank)
        for step in range(spec.steps):
            p.step(step)
            p.compute(host_us=800)
            fsdp_step(p, shard, layers, blocks, F32)
            _world_tail(p)


def _hsdp(spec: ShapeSpec, job: CustomJob) -> None:
    size, world = spec.group, spec.world

    def shards() -> dict[int, int]:
        return {
            k: job.new_group("shard", range(k * size, (k + 1) * size)) for k in range(world // size)
        }

    def replicas() -> dict[int, int]:
        return {s: job.new_group("replicate", range(s, world, size)) for s in range(size)}

    if spec.replicate_first:
        rep_of = replicas()
        shard_of = shards()
    else:
        shard_of = shards()
        rep_of = replicas()
    layers = _layer_shapes(spec, size)
    blocks = _rs_blocks(spec)
    for rank in job.ranks():
        p = job.on(rank)
        shard, replicate = shard_of[rank // size], rep_of[rank % size]
        for step in range(spec.steps):
            p.step(step)
            p.compute(host_us=800)
            pending: list[tuple[int, tuple[Shape, ...]]] | None = (
                [] if spec.replicate_at_end else None
            )
            fsdp_step(p, shard, layers, blocks, BF16, pending, replicate)
            for _, flat in pending or ():
                p.coll(replicate, "all_reduce", flat, BF16, "hsdp_replicate", nowait=True)
            _world_tail(p)


def moe_splits(spec: ShapeSpec, tokens: int) -> dict[tuple[int, int, int], list[list[int]]]:
    """Per (EP group index, step, layer): the matrix m[i][j] of tokens EP rank i sends to j.
    Every row sums to `tokens` (equal input totals); the column sums (output totals) differ."""
    ep = spec.world // spec.group
    out: dict[tuple[int, int, int], list[list[int]]] = {}
    for g in range(spec.group):
        for step in range(spec.steps):
            for layer in range(spec.layers):
                rng = random.Random(f"{spec.seed}:{g}:{step}:{layer}")
                matrix = []
                for _ in range(ep):
                    weights = [rng.randint(1, 9) for _ in range(ep)]
                    row = [tokens * w // sum(weights) for w in weights]
                    row[rng.randrange(ep)] += tokens - sum(row)
                    matrix.append(row)
                out[(g, step, layer)] = matrix
    return out


def _moe(spec: ShapeSpec, job: CustomJob) -> None:
    tp, world = spec.group, spec.world
    ep = world // tp
    tp_of = {k: job.new_group("tp", range(k * tp, (k + 1) * tp)) for k in range(ep)}
    ep_of = {t: job.new_group("ep", range(t, world, tp)) for t in range(tp)}
    tokens, hidden = 512, 1024
    splits = moe_splits(spec, tokens)
    act: Shape = (tokens, hidden)
    for rank in job.ranks():
        p = job.on(rank)
        tgroup, egroup, me = tp_of[rank // tp], ep_of[rank % tp], rank // tp
        for step in range(spec.steps):
            p.step(step)
            p.compute(host_us=800)
            totals = []
            for layer in range(spec.layers):
                m = splits[(rank % tp, step, layer)]
                total_out = sum(row[me] for row in m)
                totals.append(total_out)
                p.compute(dev_us=1_500, host_us=200)
                p.coll(tgroup, "all_reduce", [act], BF16, "attn_fwd")
                p.coll(egroup, "all_to_all", [(ep,)], I64, "moe_dispatch")  # token counts
                key = f"s{step}l{layer}"
                p.coll(
                    egroup, "all_to_all", [(tokens, hidden)], BF16, "moe_dispatch",
                    out_shapes=[(total_out, hidden)], match=f"{key}dispatch",
                )  # fmt: skip
                p.compute(dev_us=2_500, host_us=150)
                p.coll(
                    egroup, "all_to_all", [(total_out, hidden)], BF16, "moe_combine",
                    out_shapes=[(tokens, hidden)], match=f"{key}combine",
                )  # fmt: skip
            for layer in reversed(range(spec.layers)):
                key, total_out = f"s{step}l{layer}", totals[layer]
                p.compute(dev_us=2_000, host_us=200)
                p.coll(
                    egroup, "all_to_all", [(tokens, hidden)], BF16, "moe_combine_bwd",
                    out_shapes=[(total_out, hidden)], match=f"{key}combine_bwd",
                )  # fmt: skip
                p.compute(dev_us=3_000, host_us=150)
                p.coll(
                    egroup, "all_to_all", [(total_out, hidden)], BF16, "moe_dispatch_bwd",
                    out_shapes=[(tokens, hidden)], match=f"{key}dispatch_bwd",
                )  # fmt: skip
                p.coll(tgroup, "all_reduce", [act], BF16, "mlp_bwd")
            p.coll(egroup, "all_reduce", [(4_194_304,)], F32, "grad_sync")
            p.compute(dev_us=1_000, host_us=300)
            p.coll(WORLD, "all_reduce", [(2,)], F32, "loss", sync=True)


def ddp_buckets(spec: ShapeSpec) -> list[int]:
    """Bucket sizes (elements) after the rebuild, in the order DDP issues them: distinct."""
    rng = random.Random(spec.seed * 131 + 3)
    first = 262_144 * rng.choice((1, 2, 3))
    rest = rng.sample(range(4_000_000, 6_553_601, 4_096), spec.buckets - 1)
    return [first, *rest]


def _ddp(spec: ShapeSpec, job: CustomJob) -> None:
    """DDP as torch 2.13 records it (real gloo run): at construction the parameter-shape check
    (all_gather of int64 [1]), the broadcast of its metadata and of the module state; the first
    backward all_reduces the default bucket; the rebuild in the second iteration broadcasts the
    new assignment (int32: per parameter, per bucket); then the buckets, async, waited for at
    the end of the backward; the loss is a 0-dim all_reduce."""
    buckets = ddp_buckets(spec)
    total = sum(buckets)
    nparams = 2 * len(buckets) + 1
    for rank in job.ranks():
        p = job.on(rank)
        p.step(-1)
        p.compute(host_us=5_000)
        p.coll(WORLD, "all_gather", [(1,)], I64, "ddp_setup")
        p.coll(WORLD, "broadcast", [(3 * nparams + 3,)], I64, "ddp_setup")
        p.coll(WORLD, "broadcast", [(total,)], F32, "ddp_setup")
        for step in range(spec.steps):
            p.step(step)
            p.compute(dev_us=3_000 * len(buckets), host_us=900)
            if step == 1:  # DDP rebuilds its buckets in the forward of the second iteration
                p.coll(WORLD, "broadcast", [(nparams,)], "Int", "ddp_setup")
                p.coll(WORLD, "broadcast", [(len(buckets),)], "Int", "ddp_setup")
            sizes = [total] if step == 0 else buckets
            for n, size in enumerate(sizes):
                p.compute(dev_us=2_500, host_us=120)
                p.coll(WORLD, "all_reduce", [(size,)], F32, "ddp_bucket", nowait=True, tag=f"d{n}")
            p.wait(f"d{len(sizes) - 1}")
            p.compute(dev_us=2_000, host_us=700)
            p.coll(WORLD, "all_reduce", [()], F32, "train_loss", sync=True)


def _subgroups(spec: ShapeSpec, job: CustomJob) -> None:
    size = spec.group
    count = spec.world // size
    groups = [job.new_group("undefined", range(k * size, (k + 1) * size)) for k in range(count)]
    for rank in job.ranks():
        p = job.on(rank)
        k = rank // size
        p.step(-1)
        p.compute(host_us=3_000)
        p.coll(WORLD, "all_reduce", [(1,)], I64, "setup", sync=True)
        for step in range(spec.steps):
            p.step(step)
            for n in range(3 + k % 2):
                p.compute(dev_us=3_000, host_us=300)
                p.coll(groups[k], "all_reduce", [(16 * (n + 1),)], F32, "subgroup_metrics")
            p.coll(groups[k], "_all_gather_base", [(2,)], F32, "subgroup_metrics", sync=True)
            if spec.world_sync:
                _world_tail(p, grad_norm=False)


def _barrier(spec: ShapeSpec, job: CustomJob) -> None:
    gloo = spec.backend == "gloo"
    for rank in job.ranks():
        p = job.on(rank)
        for step in range(spec.steps):
            p.step(step)
            p.compute(dev_us=4_000, host_us=600)
            p.coll(WORLD, "all_reduce", [(64,)], F32, "grad_sync")
            if gloo:
                p.monitored_barrier(WORLD, "sync_barrier")
            else:
                p.coll(WORLD, "all_reduce_barrier", [(1,)], F32, "sync_barrier", sync=True)
            p.coll(WORLD, "_all_gather_base", [(2,)], F32, "grad_sync")
            _world_tail(p, grad_norm=False)


# --- drawing a job -------------------------------------------------------------------------


def _entries_per_step(spec: ShapeSpec) -> int:
    """About how many entries one step records on a rank (to size the job)."""
    coalesced = 2 if spec.backend == "nccl" else 1
    if spec.shape in ("fsdp", "hsdp"):
        n = 3 * spec.layers + 2 + (spec.layers if spec.shape == "hsdp" else 0)
        return n + coalesced
    if spec.shape == "moe":
        return 7 * spec.layers + 2
    if spec.shape == "ddp":
        return spec.buckets + 1
    if spec.shape == "subgroups":
        return 5 + (1 if spec.world_sync else 0)
    return 4 if spec.backend == "nccl" else 3


def draw_spec(rng: random.Random, shape: ShapeName, backend: Backend, entries: int) -> ShapeSpec:
    """A job of `shape` for `backend` whose ranks record about `entries` entries."""
    world = rng.choice(WORLDS)
    group = 4
    if shape == "hsdp":
        group = rng.choice([g for g in (2, 4, 8) if g < world])
    elif shape == "moe":
        group = rng.choice((2, 4))
    elif shape == "subgroups":
        group = rng.choice([g for g in (2, 4, 8) if g < world])
    spec = ShapeSpec(
        shape,
        world=world,
        backend=backend,
        steps=1,
        layers=rng.choice((4, 6, 8)) if shape in ("fsdp", "hsdp") else rng.choice((2, 3)),
        group=group,
        explicit_group=rng.random() < 0.4,
        replicate_first=rng.random() < 0.5,
        replicate_at_end=rng.random() < 0.3,
        buckets=rng.choice((3, 4, 5)),
        world_sync=rng.random() < 0.5,
        seed=rng.randrange(1 << 30),
    )
    steps = max(2, min(40, round(entries / max(1, _entries_per_step(spec)))))
    return replace(spec, steps=steps)


def shape_of(text: str) -> ShapeName:
    """The shape named `text`; raises ValueError for a name not in SHAPES."""
    for shape in SHAPES:
        if text == shape:
            return shape
    raise ValueError(f"unknown shape {text!r} (one of {', '.join(SHAPES)})")


def shapes_from(texts: Sequence[str]) -> tuple[ShapeName, ...]:
    """The shapes named in `texts` (see `shape_of`)."""
    return tuple(shape_of(t) for t in texts)
