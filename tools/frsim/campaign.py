"""A randomized fault campaign: `draw_case(seed)` is one deterministic simulated case.

Each case draws a layout (TP x PP x DP, 8 to 256 ranks, from several families), a fault kind
(every kind of faults.py, plus "healthy_end" and "healthy_mid"), a site (TP collective, TP
gather, DP bucket, world collective, coalesced block, unbatched PP send/recv, batched PP
block; early or late step), a variant (NCCL timing on/off; nccl, or gloo for faults that make
sense without recorded p2p), the ring-buffer capacity (sometimes small, so buffers wrap), the
timeout, the dump skew, and how the files are written (format, gzip, names) and dated (the
dump's own latency, longer with stack traces, or a copy days later that kept no times:
`draw_dating`). Programs are short (2-4 micro-batches, as many steps as give rank 0 100-300
entries), so a case simulates and writes in well under a second even at 256 ranks.

    case = draw_case(7)
    case.describe()          # one line
    case.truth               # what a correct analyzer concludes
    case.write(directory)    # the dump files

`draw_case(seed, shapes=("fsdp", "moe", ...))` draws, per seed, one of the named training shapes
(`shapes.py`; "3d" is the grid above, drawn exactly as without `shapes`): a job of 8 to 64 ranks
on NCCL or gloo (with gloo's abort of the rank that receives more bytes than it posted), and one
of `SHAPE_KINDS`: healthy (end, mid-run), a hang before a collective, a crash, a skipped
collective, a size or dtype mismatch, and per shape an uneven all_to_all whose split sizes
disagree (moe), gradient buckets in another order (ddp) or a skipped barrier (barrier). Without
`shapes` every seed draws the same 3D case as before.

`python -m tools.frsim.campaign --seeds 0:300 [--shapes all|fsdp,moe,...] [--out DIR]` prints
one line per case (and writes each case into DIR/<seed>/).

The same cases written as Chakra Execution Traces (`--writer et`: one `rank-<N>.et.json` per
rank, `et.py`) are judged against `et_truth(case)`: an ET shows what each rank issued, in
order, and nothing about states or times. A fault that changes what a rank issues (an extra or
missing collective, a size, dtype or op that differs at one seq, another order, a host that
stops or dies) keeps the dumps' truth (a crash then reads as a rank that stopped issuing:
hung, not_joined, at the crash site); a fault that leaves every rank issuing the same ops (a
rank stuck in a kernel, a network hang, a straggler) expects "ok": no disagreement in what was
issued. A gloo trace names no group and no seq: there the group and seq are not judged.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from . import shapes as shape_jobs
from .dating import DAY_S, Dating, FileTimes
from .faults import ExtraOp, Fault, Field
from .layout import Layout, Role
from .program import (
    COLL_KINDS,
    Backend,
    Catalog,
    Kind,
    Program,
    ProgramSpec,
    build_program,
)
from .sim import SimSpec, Simulation
from .truth import Truth
from .writers import ET_NAMINGS, NAMINGS, Format, Output, write_dumps

LAYOUTS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "tp": ((8, 1, 1), (4, 1, 2)),
    "dp": ((1, 1, 8), (1, 1, 32)),
    "tp_dp": ((2, 1, 4), (4, 1, 4), (8, 1, 8), (8, 1, 32)),
    "pp": ((1, 4, 2), (1, 2, 8), (1, 4, 16)),
    "tp_pp": ((2, 4, 1), (4, 2, 1), (8, 4, 1)),
    "3d": ((2, 2, 2), (2, 2, 4), (4, 2, 2), (4, 4, 4), (8, 4, 4), (2, 4, 8), (8, 2, 16)),
}
"""Layout families -> (tp, pp, dp) shapes, 8 to 256 ranks."""

CASE_KINDS: tuple[str, ...] = (
    "healthy_end",
    "healthy_mid",
    "stall",
    "stop_host",
    "crash",
    "gpu_stuck_in",
    "gpu_stuck_before",
    "skip",
    "extra",
    "mismatch",
    "p2p_mismatch",
)
GLOO_KINDS = frozenset(
    {"healthy_end", "healthy_mid", "stall", "stop_host", "crash", "skip", "extra", "mismatch"}
)
"""Kinds that make sense without recorded p2p and without GPU streams (sites: collectives)."""

_FORMATS: tuple[Format, ...] = ("torch", "torch", "pickle", "json")
SITES: tuple[str, ...] = (
    "tp_coll",
    "tp_gather",
    "dp_bucket",
    "world",
    "coalesced",
    "pp_send",
    "pp_recv",
    "pp_batched",
)


def _steps_for(spec: ProgramSpec, layout: Layout, entries: int) -> int:
    """Steps (2 to 40) that give rank 0 about `entries` entries."""
    counts = []
    for steps in (2, 4):
        program = build_program(replace(spec, steps=steps), layout, 0, Catalog())
        counts.append(program.ecum[-1])
    per_step = max(1, (counts[1] - counts[0]) // 2)
    base = counts[0] - 2 * per_step
    return max(2, min(40, round((entries - base) / per_step)))


def _site_of(program: Program, unit: int) -> str:
    """The site category of a unit."""
    kind, role, op = program.kind[unit], program.role[unit], program.op_name(unit)
    if kind == Kind.SEND:
        return "pp_send"
    if kind == Kind.RECV:
        return "pp_recv"
    if kind == Kind.BATCH:
        return "pp_batched"
    if kind == Kind.COALESCED:
        return "coalesced"
    if role == Role.WORLD:
        return "world"
    if role == Role.DP:
        return "dp_bucket"
    return "tp_gather" if op in ("all_gather", "_all_gather_base") else "tp_coll"


@dataclass(frozen=True)
class Case:
    """One drawn case: the simulation spec, how its files are written, and labels."""

    seed: int
    spec: SimSpec
    output: Output
    family: str
    kind: str
    site: str
    """Site category of the fault ("-" for healthy cases)."""
    variant: str
    shape: str = "3d"
    """The training shape: "3d" (the Megatron grid) or one of `shapes.SHAPES`."""
    job: str = ""
    """A shape's job in words (`ShapeSpec.describe`); "" for a 3D case."""

    @cached_property
    def sim(self) -> Simulation:
        """The case's simulation, run once on first use."""
        return Simulation(self.spec)

    @property
    def truth(self) -> Truth:
        """What a correct analyzer concludes about the case."""
        return self.sim.truth

    @property
    def backend(self) -> str:
        """The case's backend: "nccl" or "gloo"."""
        return self.spec.backend

    @property
    def dating(self) -> Dating:
        """What the case's file times are: the dumps' own (with or without stack traces, hence
        their latency), or a copy's."""
        return self.spec.dating

    def describe(self) -> str:
        """The case in one line: seed, job, fault, output files and labels."""
        s, lay = self.spec, self.spec.layout
        fault = s.fault.describe() if s.fault is not None else "no fault"
        out = self.output
        files = f"{out.fmt}{'.gz' if out.gzip else ''} {out.name(0)}"
        if s.file_times is not None:
            files += f" {s.file_times.describe(s.stack_traces)}"
        if isinstance(lay, Layout):
            where = f"{self.family} tp{lay.tp}xpp{lay.pp}xdp{lay.dp}"
        else:
            where = self.job
        return (
            f"seed {self.seed}: {where} "
            f"({lay.world_size} ranks) {s.backend} {self.variant} cap {s.capacity} "
            f"timeout {s.timeout_ms / 1000:g}s skew {s.skew_s:.2f}s {files} | {self.kind} "
            f"{self.site}: {fault} | truth: {self.truth.describe()}"
        )

    def write(self, directory: Path, output: Output | None = None) -> list[Path]:
        """Write the case's dump files into `directory` (`output`: another way, e.g. ETs)."""
        return write_dumps(self.sim, directory, output or self.output)

    @property
    def et_truth(self) -> Truth:
        """What a correct analyzer concludes from the case's execution traces."""
        return et_truth(self.kind, self.truth, self.backend)


ET_OUTPUT = Output(fmt="et", pattern=ET_NAMINGS["et"])
"""How `--writer et` writes a case: one uncompressed `rank-<N>.et.json` per rank (a gzipped
target of a killed rank leaves no file at all)."""

ET_INVISIBLE = frozenset(
    {"healthy_end", "healthy_mid", "stall", "gpu_stuck_in", "gpu_stuck_before", "network_hang"}
)
"""Case kinds after which every rank has issued the same ops as without the fault: the hang or
the delay is in the streams or the network, which an execution trace does not record."""


ET_STOPPED = frozenset({"crash", "stop_host"})
"""Case kinds where a rank stops issuing ops. A trace shows which rank stopped, not where its
peers wait: they issue ahead of the op they block in (NCCL enqueues; the trace has no states),
so the group and sequence id the dumps' truth names (the op the peers' streams are stuck in)
are not judged, only the status, the root and the culprits."""


def et_truth(kind: str, truth: Truth, backend: str = "nccl") -> Truth:
    """The truth of a case of `kind` (dumps' truth `truth`) judged from execution traces:
    "ok" where the fault leaves what was issued unchanged; else the dumps' truth, a crash
    read as a rank that stopped issuing (its trace is cut off like every hung rank's). A gloo
    trace names no group and no seq (no `record_param_comms`, the group an "<Object>"), and a
    rank that stopped (`ET_STOPPED`) leaves where its peers wait unknown: there only the
    status, the root and the culprits are judged."""
    if kind in ET_INVISIBLE:
        return Truth("ok")
    if truth.root == "dead_rank":
        truth = replace(truth, status="hung", root="not_joined")
    if backend == "gloo" or kind in ET_STOPPED:
        truth = replace(truth, group=None, group_desc=None, seq_kind=None, seq=None, seq_rank=None)
    return truth


def _candidates(program: Program, kind: str, site: str, gloo: bool) -> list[int]:
    """Units of `program` where fault `kind` can sit, in site category `site`."""
    out = []
    for u in range(len(program)):
        if _site_of(program, u) != site:
            continue
        collective = program.kind[u] in COLL_KINDS
        if (gloo or kind in ("gpu_stuck_in", "gpu_stuck_before", "mismatch")) and not collective:
            continue
        if kind == "p2p_mismatch" and collective:
            continue
        out.append(u)
    return out


def _pick_unit(rng: random.Random, program: Program, units: list[int]) -> int:
    """Early (first step or setup) or late (last step), else anywhere."""
    when = rng.choice(("early", "late", "any"))
    last = max(program.step)
    if when == "early":
        chosen = [u for u in units if program.step[u] <= 0]
    elif when == "late":
        chosen = [u for u in units if program.step[u] == last]
    else:
        chosen = units
    return rng.choice(chosen or units)


def draw_case(seed: int, shapes: Sequence[str] = (), dating: Dating | None = None) -> Case:
    """A deterministic case for `seed`: a 3D job, or with `shapes`, a job of one of those
    shapes ("3d" among them draws the 3D case of that seed), its files dated as `draw_dating`
    draws (`dating`: every case dated that way instead, the rest of each case unchanged)."""
    case = None
    if shapes:
        pick = random.Random(f"shape:{seed}").choice(sorted(set(shapes)))
        if pick != "3d":
            case = _draw_shape_case(seed, shape_jobs.shape_of(pick))
    if case is None:
        case = _draw_3d_case(seed)
    dated = draw_dating(seed) if dating is None else forced_dating(seed, dating)
    return replace(case, spec=replace(case.spec, file_times=dated))


COPIED_SHARE = 0.25
"""The share of cases whose whole set was copied without its times."""
COPIED_AFTER_S = (0.5 * DAY_S, 10 * DAY_S)
"""How long after the dumps a copy was made, in seconds."""


def draw_dating(seed: int) -> FileTimes:
    """How case `seed`'s files are dated: as the dumps wrote them (their latency follows the
    case's `stack_traces`, drawn with the recorder), or, for `COPIED_SHARE` of the seeds, copied
    days later without their times. Its own random stream, so every other draw of the seed is
    what it was before files had times."""
    copied, after = _dating_draws(seed)
    return FileTimes(copied_after_s=after) if copied else FileTimes()


def forced_dating(seed: int, dating: Dating) -> FileTimes | None:
    """Case `seed`'s files dated as `dating` says whatever the seed draws (a copy's delay still
    drawn from the seed; `Dating.NONE`: no file times)."""
    _, after = _dating_draws(seed)
    return {
        Dating.NONE: None,
        Dating.PLAIN: FileTimes(stacks=False),
        Dating.STACKS: FileTimes(stacks=True),
        Dating.COPIED: FileTimes(copied_after_s=after),
    }[dating]


def _dating_draws(seed: int) -> tuple[bool, float]:
    """Whether seed's set was copied, and how many seconds after its dumps a copy was made."""
    rng = random.Random(f"dating:{seed}")
    copied = rng.random() < COPIED_SHARE
    return copied, round(rng.uniform(*COPIED_AFTER_S), 1)


def _draw_recording(
    rng: random.Random, small_share: float, kind: str, backend: str
) -> dict[str, Any]:
    """How the recorder and the dump are drawn (the `SimSpec` fields every shape shares), in
    one order, so each seed keeps drawing the case it always drew."""
    small = rng.random() < small_share
    return {
        "capacity": rng.randrange(40, 160) if small else 2000,
        "timeout_ms": rng.choice((5_000, 30_000, 600_000)),
        "queue_limit": rng.choice((16, 64, 64, 256)),
        "dump": "mid" if kind == "healthy_mid" else "end",
        # A watchdog makes the other ranks dump within a second or so of the first; a dump
        # of a running gloo job is coordinated by the program and lands within milliseconds
        # (gloo retires a failed op as it retires a completed one, so a rank dumped before
        # it issued a collective its peers then finished looks exactly like a hang).
        "skew_s": round(rng.uniform(0.0005, 0.005), 4)
        if backend == "gloo" and kind == "healthy_mid"
        else round(rng.uniform(0.02, 2.0), 3),
        "stack_traces": rng.random() < 0.9,
    }


def _draw_3d_case(seed: int) -> Case:
    rng = random.Random(seed)
    kind = CASE_KINDS[rng.randrange(len(CASE_KINDS))]
    families = sorted(LAYOUTS)
    if kind == "p2p_mismatch":
        families = [f for f in families if any(pp > 1 for _, pp, _ in LAYOUTS[f])]
    family = rng.choice(families)
    shapes = [s for s in LAYOUTS[family] if kind != "p2p_mismatch" or s[1] > 1]
    tp, pp, dp = rng.choice(shapes)
    layout = Layout(tp=tp, pp=pp, dp=dp)
    backend: Backend = "gloo" if kind in GLOO_KINDS and rng.random() < 0.25 else "nccl"
    timing = backend == "nccl" and rng.random() < 0.5
    program = ProgramSpec(
        steps=2,
        micro_batches=rng.choice((2, 3, 4)),
        backend=backend,
        batched_p2p=rng.random() < 0.75,
        tp_gather_every=rng.choice((0, 1, 2)),
        uneven_every=rng.choice((0, 1, 2)),
        dp_coalesced=rng.random() < 0.7,
        dp_allreduce_coalesced=rng.random() < 0.5,
        barrier_every=rng.choice((0, 0, 1, 2)),
    )
    program = replace(program, steps=_steps_for(program, layout, rng.randrange(100, 301)))
    spec = SimSpec(
        layout=layout,
        program=program,
        timing=timing,
        seed=seed,
        **_draw_recording(rng, 0.25, kind, backend),
    )
    fmt: Format = rng.choice(_FORMATS)
    if fmt == "json":
        pattern = rng.choice((NAMINGS["rank_json"], NAMINGS["nccl_trace"]))
    else:
        pattern = NAMINGS[rng.choice(sorted(k for k in NAMINGS if k != "rank_json"))]
    output = Output(fmt=fmt, gzip=rng.random() < 0.2, pattern=pattern)
    variant = "gloo" if backend == "gloo" else ("timing" if timing else "no-timing")
    if kind in ("healthy_end", "healthy_mid"):
        return Case(seed, spec, output, family, kind, "-", variant)

    # the fault: a rank, then a site category that its program has, then a unit
    from .sim import Job

    job = Job(spec)
    rank = rng.randrange(layout.world_size)
    clean = job.clean_program(rank)
    sites = list(SITES)
    rng.shuffle(sites)
    if backend == "nccl" and layout.pp > 1 and rng.random() < 0.3:
        # pipeline sites are 3 of 8 categories and fewer ranks have some: favour them
        sites.sort(key=lambda name: not name.startswith("pp_"))
    units: list[int] = []
    site = "-"
    for site in sites:
        units = _candidates(clean, kind, site, backend == "gloo")
        if units:
            break
    if not units:  # e.g. p2p_mismatch without pipeline parallelism: fall back to a mismatch
        kind = "mismatch"
        for site in sites:
            units = _candidates(clean, kind, site, backend == "gloo")
            if units:
                break
    unit = _pick_unit(rng, clean, units)
    fault = _draw_fault(rng, kind, rank, unit, clean, spec)
    if kind.startswith("gpu_stuck"):
        variant = {
            ("gpu_stuck_in", True): "started",
            ("gpu_stuck_in", False): "timing-off",
            ("gpu_stuck_before", True): "scheduled",
            ("gpu_stuck_before", False): "timing-off",
        }[(kind, timing)]
    return Case(seed, replace(spec, fault=fault), output, family, kind, site, variant)


SHAPE_KINDS: dict[str, tuple[str, ...]] = {
    shape: (
        "healthy_end",
        "healthy_mid",
        "stop_host",
        "crash",
        "skip",
        "mismatch",
        *{"moe": ("split_mismatch",), "ddp": ("bucket_order",), "barrier": ("skip_barrier",)}.get(
            shape, ()
        ),
    )
    for shape in shape_jobs.SHAPES
}
"""Case kinds per shape: the 3D kinds that apply to every shape, and each shape's own."""


def _draw_shape_case(seed: int, shape: shape_jobs.ShapeName) -> Case:
    """A case of training shape `shape` (its own random stream: 3D draws stay as they were)."""
    rng = random.Random(f"{shape}:{seed}")
    kind = rng.choice(SHAPE_KINDS[shape])
    backend: Backend = rng.choice(("nccl", "gloo"))
    timing = backend == "nccl" and rng.random() < 0.5
    sspec = shape_jobs.draw_spec(rng, shape, backend, rng.randrange(100, 301))
    job = shape_jobs.build(sspec)
    spec = SimSpec(
        layout=job,
        program=ProgramSpec(backend=backend),
        timing=timing,
        seed=seed,
        gloo_abort=True,
        **_draw_recording(rng, 0.2, kind, backend),
    )
    output = _draw_output(rng)
    variant = "gloo" if backend == "gloo" else ("timing" if timing else "no-timing")
    label = sspec.describe()
    if kind in ("healthy_end", "healthy_mid"):
        return Case(seed, spec, output, shape, kind, "-", variant, shape, label)

    from .sim import Job

    rank = rng.randrange(job.world_size)
    clean = Job(spec).clean_program(rank)
    units = _shape_candidates(clean, kind)
    if not units:  # e.g. a rank with no dispatch to split: a plain mismatch instead
        kind = "mismatch"
        units = _shape_candidates(clean, kind)
    by_site: dict[str, list[int]] = {}
    for u in units:
        by_site.setdefault(shape_jobs.site_category(clean.site[u]), []).append(u)
    site = rng.choice(sorted(by_site))
    unit = _pick_unit(rng, clean, by_site[site])
    fault = _draw_shape_fault(rng, kind, rank, unit, clean, backend)
    return Case(seed, replace(spec, fault=fault), output, shape, kind, site, variant, shape, label)


def _shape_candidates(program: Program, kind: str) -> list[int]:
    """Units of a shape's `program` where fault `kind` can sit."""
    out = []
    for u in range(len(program)):
        if program.kind[u] not in COLL_KINDS:
            continue
        templates = program.templates_of(u)
        recorded = all(t.recorded for t in templates)
        barrier = program.site[u] == "sync_barrier"
        if kind == "skip_barrier":
            ok = barrier
        elif kind == "bucket_order":
            ok = (
                program.site[u] == "ddp_bucket"
                and u + 1 < len(program)
                and program.site[u + 1] == "ddp_bucket"
                and program.role[u + 1] == program.role[u]
            )
        elif kind == "split_mismatch":
            ok = templates[0].op == "all_to_all" and (templates[0].match or "").endswith("dispatch")
        elif kind == "mismatch":
            ok = recorded and not barrier
        else:  # stop_host, crash, skip: any collective but a barrier (skip_barrier has those)
            ok = not barrier
        if ok:
            out.append(u)
    return out


def _draw_shape_fault(
    rng: random.Random, kind: str, rank: int, unit: int, program: Program, backend: Backend
) -> Fault:
    gloo = backend == "gloo"
    if kind in ("stop_host", "crash", "skip"):
        return Fault(kind, rank, unit)  # type: ignore[arg-type]
    if kind == "skip_barrier":
        return Fault("skip", rank, unit)
    if kind == "bucket_order":
        return Fault("swap", rank, unit)
    members = len(program.templates_of(unit)) - 1
    member = rng.randrange(members) if program.kind[unit] == Kind.COALESCED else 0
    if kind == "split_mismatch":
        # gloo: the culprit sends more than its receiver posted (which gloo aborts); NCCL: either
        grow = gloo or rng.random() < 0.5
        return Fault("mismatch", rank, unit, field="split", grow=grow)
    field: Field = rng.choice(("size", "dtype"))
    if gloo:
        # gloo compares byte counts only: a dtype of the same width completes with garbage; a
        # wider one, or a larger size, aborts the rank that receives more than it posted
        same_width = field == "dtype" and rng.random() < 0.25
        if same_width:
            return Fault("mismatch", rank, unit, field="dtype", member=member, completes=True)
        return Fault("mismatch", rank, unit, field=field, member=member, grow=True)
    return Fault(
        "mismatch",
        rank,
        unit,
        field=field,
        member=member,
        completes=rng.random() < 0.15,
        grow=rng.random() < 0.5,
    )


def _draw_output(rng: random.Random) -> Output:
    fmt: Format = rng.choice(_FORMATS)
    if fmt == "json":
        pattern = rng.choice((NAMINGS["rank_json"], NAMINGS["nccl_trace"]))
    else:
        pattern = NAMINGS[rng.choice(sorted(k for k in NAMINGS if k != "rank_json"))]
    return Output(fmt=fmt, gzip=rng.random() < 0.2, pattern=pattern)


def _draw_fault(
    rng: random.Random, kind: str, rank: int, unit: int, program: Program, spec: SimSpec
) -> Fault:
    members = len(program.templates_of(unit)) - 1
    member = rng.randrange(members) if program.kind[unit] in (Kind.BATCH, Kind.COALESCED) else 0
    if kind == "stall":
        # A stall of seconds (the analyzer's --stall-ms is 2 s), well inside the timeout.
        seconds = round(rng.uniform(2.5, max(2.5, min(20.0, spec.timeout_ms / 2000))), 3)
        repeat = rng.choice((1, 1, spec.program.steps))
        return Fault("stall", rank, unit, seconds=seconds, repeat=repeat)
    if kind == "extra":
        roles = [r for r in (Role.WORLD, Role.TP, Role.DP) if program.group_sizes[r] > 1]
        role = rng.choice(roles)
        if role == Role.WORLD:
            extra = ExtraOp()
        else:
            extra = ExtraOp(
                role, "all_reduce", (rng.choice((1, 16, 1024)),), "Float", "debug_barrier"
            )
        return Fault("extra", rank, unit, extra=extra)
    if kind == "mismatch":
        field: Field = rng.choice(("size", "dtype", "op"))
        if program.templates_of(unit)[member].op in ("all_reduce_barrier", "barrier"):
            field = "op"  # a barrier's tensor is torch's own: only the op can differ
        return Fault(
            "mismatch",
            rank,
            unit,
            field=field,
            member=member,
            completes=rng.random() < 0.2,
        )
    if kind == "p2p_mismatch":
        return Fault("p2p_mismatch", rank, unit, field=rng.choice(("size", "dtype")), member=member)
    if kind in ("stop_host", "crash", "gpu_stuck_in", "gpu_stuck_before", "skip"):
        return Fault(kind, rank, unit)  # type: ignore[arg-type]
    raise ValueError(f"unknown case kind {kind!r}")


ALL_SHAPES: tuple[str, ...] = ("3d", *shape_jobs.SHAPES)


def parse_shapes(text: str) -> tuple[str, ...]:
    """`--shapes`: "all" (every shape, 3d among them), or a comma-separated list."""
    if text == "all":
        return ALL_SHAPES
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in ALL_SHAPES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown shape(s) {', '.join(unknown)}; known: {', '.join(ALL_SHAPES)} or all"
        )
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """Print the cases drawn for a range of seeds, and with `--out` write each one's dumps; returns
    the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.frsim.campaign", description="Draw (and write) campaign cases."
    )
    parser.add_argument("--seeds", default="0:300", help="range start:stop (default 0:300)")
    parser.add_argument("--out", type=Path, help="write each case into OUT/<seed>/")
    parser.add_argument(
        "--shapes",
        type=parse_shapes,
        default=(),
        help="draw these training shapes (comma-separated, 'all': every shape and 3d)",
    )
    parser.add_argument(
        "--writer",
        choices=("dump", "et"),
        default="dump",
        help="write Flight Recorder dumps (default) or each rank's execution trace",
    )
    args = parser.parse_args(argv)
    start, stop = (int(x) for x in args.seeds.split(":"))
    et = args.writer == "et"
    for seed in range(start, stop):
        began = time.perf_counter()
        case = draw_case(seed, args.shapes)
        if args.out is not None:
            case.write(args.out / str(seed), ET_OUTPUT if et else None)
        line = case.describe()
        if et:
            line += f" | et truth: {case.et_truth.describe()}"
        print(f"{line}  [{time.perf_counter() - began:.2f}s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
