"""The NCCL-format sample dump sets `sample_dumps/nccl_*` and `sample_dumps/nccl3d_*`, simulated.

Every set is one small job run by the recorder simulator (`tools/frsim`): a `SimSpec` (a TP x PP
x DP grid running the Megatron-style program, or a free-form `CustomJob`) plus, usually, one
injected fault. The dumps emerge from the simulated execution (host enqueues, in-order streams,
collectives completing when every member arrived, watchdog timeouts, ring buffers), and the
expected verdict is the simulator's ground truth (`sim.truth`), never an analyzer's. Generating
a set fails loudly unless that truth is unambiguous and has the status and root cause the
scenario intends.

Each folder holds the rank files and a generated `NOTE.md`: what the program did, what went
wrong, the file names, and one last machine-readable line (the format of the real gloo sets):

    EXPECTED: status=hung root=not_joined culprits=5 group=0 desc=default_pg seq=7 op=all_reduce

`seq` is a collective sequence id, or `p<seq>@<rank>` for a p2p sequence id read on that rank;
`op` is the op name without the backend prefix or peers; `-` stands for none.

    python -m tools.nccl_scenarios --out sample_dumps                    # every set, a few s
    python -m tools.nccl_scenarios --out sample_dumps --only nccl_wrapped

It deletes and rewrites only the folders named in `SCENARIOS`. The output is deterministic (a
rerun gives the same bytes). Tests can write a set with `write_scenario(name, directory)` or
build `SCENARIOS[name]()` and read its `sim`, `truth` and `note()`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from tools.frsim import faults
from tools.frsim.custom import WORLD, CustomJob
from tools.frsim.layout import Group, Layout, Role
from tools.frsim.program import BF16, Kind, Program, ProgramSpec
from tools.frsim.sim import Job, SimSpec, Simulation
from tools.frsim.truth import RootKind, Status, Truth
from tools.frsim.writers import Output, write_dumps

NOTE = "NOTE.md"
TORCH = Output(fmt="torch", pattern="nccl_trace_rank_{rank}")
FORMAT_WORDS = {
    "torch": "pickles byte for byte as torch's C++ pickler writes them",
    "pickle": "Python pickles",
    "json": "JSON as _dump_fr_trace_json writes it (no stack frames)",
}


@dataclass(frozen=True)
class Scenario:
    """One sample set: the simulated job, how its files are written, and what it must show."""

    name: str
    spec: SimSpec
    status: Status
    root: RootKind | None
    program: str
    """What the job does, in plain words."""
    wrong: str
    """What goes wrong; `{culprits}`, `{group}`, `{desc}`, `{where}`, `{op}`, `{late}`,
    `{timeout}` are filled in from the truth."""
    output: Output = TORCH

    @cached_property
    def sim(self) -> Simulation:
        """The scenario's simulation, run once on first use."""
        return Simulation(self.spec)

    @cached_property
    def truth(self) -> Truth:
        """The simulator's truth, checked against what the scenario intends."""
        truth = self.sim.truth
        if truth.ambiguous is not None:
            raise RuntimeError(f"{self.name}: ambiguous truth: {truth.describe()}")
        if (truth.status, truth.root) != (self.status, self.root):
            raise RuntimeError(
                f"{self.name}: wanted {self.status}/{self.root or '-'}, "
                f"the simulation gives {truth.describe()}"
            )
        return truth

    def expected_line(self) -> str:
        """The EXPECTED line of the scenario's NOTE.md."""
        return expected_line(self.truth)

    def note(self) -> str:
        """The scenario's NOTE.md: the job, what went wrong (filled in from the truth), the files
        and the expected answer."""
        t = self.truth
        fields = {
            "culprits": _ranks_words(t.culprits),
            "group": t.group or "-",
            "desc": t.group_desc or "-",
            "where": _where(t),
            "op": _op_name(t) or "-",
            "late": f"{t.lateness_s:g} s" if t.lateness_s is not None else "-",
            "timeout": f"{self.spec.timeout_ms / 1000:g} s",
        }
        paragraphs = [
            f"# {self.name}",
            self.program,
            "What went wrong: " + self.wrong.format(**fields),
            self._files(),
            self.expected_line(),
        ]
        return "\n\n".join(paragraphs) + "\n"

    def _files(self) -> str:
        sim, out = self.sim, self.output
        host = sim.spec.layout.host_of
        names = [out.name(r, host(r)) for r in range(sim.world_size)]
        kind = FORMAT_WORDS[out.fmt] + (", gzip-compressed" if out.gzip else "")
        text = f"Files: `{names[0]}` to `{names[-1]}`, one per rank ({kind}), and this note."
        missing = [r for r in range(sim.world_size) if sim.dump_times[r] is None]
        for rank in missing:
            text += f" Rank {rank} wrote no file: `{names[rank]}` is missing."
        return text

    def write(self, directory: Path) -> list[Path]:
        """The rank files and NOTE.md, into `directory` (created if needed)."""
        note = self.note()
        paths = write_dumps(self.sim, directory, self.output)
        (directory / NOTE).write_text(note, encoding="utf-8")
        return paths


def expected_line(t: Truth) -> str:
    """The verdict as one machine-readable line."""
    culprits = ",".join(map(str, t.culprits)) or "-"
    return (
        f"EXPECTED: status={t.status} root={t.root or '-'} culprits={culprits} "
        f"group={t.group or '-'} desc={t.group_desc or '-'} seq={_seq(t)} "
        f"op={_op_name(t) or '-'}"
    )


def _seq(t: Truth) -> str:
    if t.seq is None:
        return "-"
    return str(t.seq) if t.seq_kind == "collective" else f"p{t.seq}@{t.seq_rank}"


def _op_name(t: Truth) -> str | None:
    """ "nccl:recv 1<-0" -> "recv"."""
    return None if t.op is None else t.op.split(":", 1)[-1].split(" ", 1)[0]


def _where(t: Truth) -> str:
    if t.seq is None:
        return "-"
    if t.seq_kind == "collective":
        return f"collective seq {t.seq}"
    return f"p2p seq {t.seq} on rank {t.seq_rank}"


def _ranks_words(ranks: Sequence[int]) -> str:
    if not ranks:
        return "-"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


# --- describing a grid job --------------------------------------------------------------------


def _groups_text(groups: Sequence[Group]) -> str:
    by_desc: dict[str, list[Group]] = {}
    for g in groups[1:]:
        by_desc.setdefault(g.desc, []).append(g)
    parts = ["group 0 (default_pg, every rank)"]
    for desc, found in by_desc.items():
        ids = f"{found[0].gid}-{found[-1].gid}" if len(found) > 1 else str(found[0].gid)
        members = ", ".join(str(list(g.ranks)) for g in found)
        parts.append(f"{desc} {'groups' if len(found) > 1 else 'group'} {ids} ({members})")
    return "; ".join(parts)


def grid_program(spec: SimSpec) -> str:
    """A grid job's program in plain words."""
    layout, p = spec.layout, spec.program
    assert isinstance(layout, Layout)
    hosts = layout.host_of(layout.world_size - 1) + 1
    dims = " x ".join(
        f"{name}={size}"
        for name, size in (("TP", layout.tp), ("PP", layout.pp), ("DP", layout.dp))
        if size > 1
    )
    parts = [
        f"{layout.world_size} ranks on {hosts} host{'s' if hosts > 1 else ''}, a Megatron-style "
        f"{dims} job: {_groups_text(layout.groups())}.",
        "Setup: a world barrier, a world broadcast of the parameters"
        + (", an uneven all_gather of shard sizes on tp." if layout.tp > 1 else "."),
        f"Then {p.steps} training steps of {p.micro_batches} micro-batches:",
    ]
    step = []
    if layout.pp > 1:
        pipe = (
            "a 1F1B pipeline (unbatched send/recv in warm-up and cool-down, batch_isend_irecv "
            "exchanges in the steady state"
        )
        if p.batch_p2p_sync:
            pipe += ", each followed by torch.cuda.synchronize() as Megatron's batch_p2p_sync does"
        step.append(pipe + ")")
    if layout.tp > 1:
        step.append("tp all_reduces in every forward and backward, a tp gather every other step")
    if layout.dp > 1:
        step.append("dp gradient buckets (a coalesced all_reduce block and an allreduce_coalesced)")
    step.append("world all_reduces of the gradient norm and of the loss (the host waits for both)")
    if layout.dp > 1:
        step.append("a dp _all_gather_base of the updated parameters")
    if layout.tp > 1 and p.uneven_every:
        step.append("every other step, uneven reduce_scatter / all_gather tp blocks (checkpoint)")
    parts.append("; ".join(step) + ".")
    if p.eval_micro_batches:
        parts.append(
            f"Then an evaluation pass: {p.eval_micro_batches} forward-only micro-batches and a "
            "world all_reduce of the evaluation loss."
        )
    if spec.timing:
        parts.append("NCCL timing is on (TORCH_NCCL_ENABLE_TIMING=1): ops can be `started`.")
    if spec.capacity < 2000:
        parts.append(f"Each rank's flight recorder keeps its newest {spec.capacity} entries.")
    return " ".join(parts)


def _unit(program: Program, *, nth: int = 0, **where: Any) -> int:
    """The `nth` unit (negative: from the end) whose attributes match `where`."""
    found = [
        u
        for u in range(len(program))
        if all(getattr(program, name)[u] == value for name, value in where.items())
    ]
    if not found:
        raise LookupError(f"no unit with {where}")
    return found[nth]


def _clean(spec: SimSpec, rank: int) -> Program:
    return Job(spec).clean_program(rank)


def _grid(
    tp: int,
    pp: int,
    dp: int,
    *,
    hosts: int = 2,
    seed: int,
    steps: int = 2,
    micro_batches: int = 2,
    batch_p2p_sync: bool = False,
    **spec: Any,
) -> SimSpec:
    layout = Layout(tp=tp, pp=pp, dp=dp, gpus_per_host=max(1, tp * pp * dp // hosts))
    program = ProgramSpec(steps=steps, micro_batches=micro_batches, batch_p2p_sync=batch_p2p_sync)
    return SimSpec(layout=layout, program=program, seed=seed, **spec)


def _grid3d(seed: int, **spec: Any) -> SimSpec:
    """16 ranks, TP=4 x PP=2 x DP=2 on two hosts of 8 GPUs, with Megatron's batch_p2p_sync."""
    return _grid(4, 2, 2, seed=seed, batch_p2p_sync=True, **spec)


# --- the nccl_* sets -----------------------------------------------------------------------


def healthy() -> Scenario:
    """2x2x2 job; nothing goes wrong."""
    spec = _grid(2, 2, 2, seed=101)
    return Scenario(
        "nccl_healthy",
        spec,
        "ok",
        None,
        grid_program(spec),
        "nothing. Every op completed; each rank dumped after its last op.",
    )


def p2p_pipeline() -> Scenario:
    """Pipeline of 4 stages; in the last step rank 2's host stops before a receive (not_joined)."""
    spec = _grid(1, 4, 1, seed=102, micro_batches=4)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 2), kind=Kind.RECV, site="recv_forward", step=last, nth=-1)
    spec = replace(spec, fault=faults.stop_host(2, unit))
    return Scenario(
        "nccl_p2p_pipeline",
        spec,
        "hung",
        "not_joined",
        grid_program(spec),
        "in the last step rank 2's host stops (a hung data loader) before it posts the "
        "receive of an activation from rank 1 (stage 1). Rank 1's matching send (group {group}, "
        "{where}) never completes, so rank 1 never reaches its next ops and rank 0 waits behind "
        "it in its own send to rank 1; rank 3 waits in an exchange with rank 2 for activations "
        "rank 2 never sends. Rank 2's GPU finished what was queued; every rank dumps when the "
        "first watchdog times out ({timeout}).",
    )


def batched_p2p() -> Scenario:
    """4 ranks pass blocks round a ring in batch_isend_irecv blocks ordered differently per rank;
    nothing goes wrong."""
    job = CustomJob(world_size=4, gpus_per_host=4)
    cp = job.new_group("cp", range(4), gbps=100)
    kv = (2, 1, 1024, 8, 128)
    for rank in job.ranks():
        p = job.on(rank)
        nxt, prv = (rank + 1) % 4, (rank - 1) % 4
        p.step(-1)
        p.compute(0, 5_000)
        p.coll(WORLD, "all_reduce_barrier", [(1,)], site="init_barrier")
        p.coll(WORLD, "broadcast", [(4096,)], site="setup")
        for step in range(2):
            p.step(step)
            p.compute(0, 800)
            for site, block_us in (("cp_ring_fwd", 9_000), ("cp_ring_bwd", 18_000)):
                for _ in range(2):  # micro-batches
                    for _hop in range(3):
                        p.compute(block_us, 150)  # attention on the block received last
                        with p.batch(cp, site):
                            if rank % 2 == 0:  # TransformerEngine: odd ranks post the recv first
                                p.send(cp, nxt, kv, BF16)
                                p.recv(cp, prv, kv, BF16)
                            else:
                                p.recv(cp, prv, kv, BF16)
                                p.send(cp, nxt, kv, BF16)
            with p.coalesced(cp, "coalesced", "grad_sync"):
                for bucket in ((25_165_824,), (8_388_608,)):
                    p.coll(cp, "all_reduce", [bucket], site="grad_sync")
            p.compute(200, 100)
            p.coll(WORLD, "all_reduce", [(1,)], site="grad_norm", sync=True)
            p.compute(2_000, 700)
            p.coll(WORLD, "all_reduce", [(2,)], site="loss", sync=True)
    spec = SimSpec(layout=job, seed=103)
    return Scenario(
        "nccl_batched_p2p",
        spec,
        "ok",
        None,
        "4 ranks on one host, context parallelism CP=4: group 0 (default_pg) and group 1 "
        "(cp, [0, 1, 2, 3]). Ring attention as TransformerEngine runs it: in each of 2 steps, for "
        "each of 2 micro-batches, 3 forward and 3 backward hops, each one batch_isend_irecv on "
        "group 1 that sends the key/value block to the next rank and receives it from the "
        "previous one. TransformerEngine lists the send first on even ranks and the recv "
        "first on odd ranks, so ranks 1 and 3 record `recv` before `send` in every block. Each "
        "step ends with a coalesced gradient all_reduce on group 1 and world all_reduces of the "
        "gradient norm and the loss.",
        "nothing. Every block completed; the differing order inside a batch is not a desync.",
    )


def coalesced() -> Scenario:
    """Checkpoint all_gather as a coalesced block; rank 1's member has another size (mismatch)."""
    spec = _grid(4, 1, 1, seed=104, hosts=1)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 1), site="checkpoint", step=last, nth=-1)
    spec = replace(spec, fault=faults.mismatch(1, unit, "size", member=1, shape=(1024,)))
    return Scenario(
        "nccl_coalesced",
        spec,
        "desync",
        "mismatch",
        grid_program(spec),
        "while saving the checkpoint of the last step, the uneven all_gather on group {group} "
        "({desc}, {where}) is a coalesced block of one _broadcast_oop per rank (root i sends "
        "rank i's shard) and an ALLGATHER_coalesced end marker. Rank 1 believes its own shard "
        "holds 1024 elements, so its 2nd member is [[1024]] where ranks 0, 2 and 3 record "
        "[[1000]]. The block never completes; the others' watchdogs time out ({timeout}).",
    )


def wrapped() -> Scenario:
    """2x2x2 job whose ring buffers wrap (48 entries); nothing goes wrong."""
    spec = _grid(2, 2, 2, seed=105, steps=3, capacity=48)
    return Scenario(
        "nccl_wrapped",
        spec,
        "ok",
        None,
        grid_program(spec),
        "nothing: every op completed. The buffers wrapped: each dump holds only the newest 48 "
        "entries (`record_id` keeps counting), and the last pipeline stage (ranks 4-7) records "
        "more entries per step (its tp gather of the logits), so its buffers begin at later "
        "sequence ids than those of ranks 0-3. Some buffers begin inside a coalesced block "
        "whose first members were evicted.",
    )


def stuck_started() -> Scenario:
    """Rank 2's GPU hangs inside the gradient-norm all_reduce after contributing, with timing
    (stuck_collective)."""
    spec = _grid(2, 1, 2, seed=106, timing=True)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 2), role=Role.WORLD, site="grad_norm", step=last)
    spec = replace(spec, fault=faults.gpu_stuck_in(2, unit))
    return Scenario(
        "nccl_stuck_started",
        spec,
        "hung",
        "stuck_collective",
        grid_program(spec),
        "in the last step rank 2's GPU hangs inside the gradient-norm all_reduce on group "
        "{group} ({desc}, {where}) after it contributed its data: ranks 0, 1 and 3 completed "
        "it, rank 2's stays `started` for ever. Its host waits for the result and issues "
        "nothing more. Its dp peer rank 0 waits for it in the parameter all-gather, ranks 1 "
        "and 3 in the loss all_reduce, until their watchdogs time out ({timeout}).",
    )


def not_joined() -> Scenario:
    """Rank 5's host stops right before the gradient-norm all_reduce (not_joined)."""
    spec = _grid(2, 1, 4, seed=107)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 5), role=Role.WORLD, site="grad_norm", step=last)
    spec = replace(spec, fault=faults.stop_host(5, unit))
    return Scenario(
        "nccl_not_joined",
        spec,
        "hung",
        "not_joined",
        grid_program(spec),
        "in the last step rank 5's host stops (stuck in a data-loader call) right before the "
        "gradient-norm all_reduce on group {group} ({desc}, {where}): it never issues it. Its "
        "GPU finishes what was queued. The seven others wait in that all_reduce until the "
        "first watchdog times out ({timeout}); then every rank, rank 5 included, dumps.",
    )


def missing_dump() -> Scenario:
    """Rank 3's process dies at the start of the last step and writes no dump (dead_rank)."""
    spec = _grid(2, 1, 2, seed=108)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 3), step=last)
    spec = replace(spec, fault=faults.crash(3, unit))
    return Scenario(
        "nccl_missing_dump",
        spec,
        "hung",
        "dead_rank",
        grid_program(spec),
        "at the start of the last step rank 3's process dies (host out of memory in the data "
        "loader) before its first forward tp all_reduce (group {group}, {desc}, {where}) and "
        "writes no dump. Its tp peer rank 2 waits in that all_reduce, its dp peer rank 1 in "
        "the gradient buckets, rank 0 behind them; all dump when their watchdogs time out "
        "({timeout}).",
    )


def op_mismatch_json() -> Scenario:
    """Rank 0 all_gathers where the others all_reduce, dumped as JSON (mismatch)."""
    spec = _grid(2, 1, 2, seed=109)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 0), role=Role.WORLD, site="loss", step=last)
    spec = replace(spec, fault=faults.mismatch(0, unit, "op"))
    return Scenario(
        "nccl_op_mismatch_json",
        spec,
        "desync",
        "mismatch",
        grid_program(spec),
        "in the last step rank 0 takes a logging branch the others do not: at the loss "
        "reduction on group {group} ({desc}, {where}) it calls all_gather_into_tensor "
        "(recorded as nccl:_all_gather_base) where ranks 1-3 call all_reduce. Nothing "
        "completes there; every rank dumps when the watchdogs time out ({timeout}).",
        output=Output(fmt="json", pattern="rank_{rank}.json"),
    )


def wait_chain() -> Scenario:
    """Rank 3 (stage 1) stops before its last send back to rank 1; waiters chain (not_joined)."""
    spec = _grid(2, 2, 1, seed=110)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 3), kind=Kind.SEND, site="send_backward", step=last, nth=-1)
    spec = replace(spec, fault=faults.stop_host(3, unit))
    return Scenario(
        "nccl_wait_chain",
        spec,
        "hung",
        "not_joined",
        grid_program(spec),
        "in the last step rank 3 (stage 1) stops before it sends its last gradient back to "
        "rank 1 (group {group}, {desc}). Rank 1 waits in that receive ({where}), so it never "
        "reaches its next backward tp all_reduce, in which its tp peer rank 0 waits for it: "
        "rank 0 waits on rank 1, which waits on rank 3. Rank 2 waits for rank 3 in tp.",
    )


def deadlock() -> Scenario:
    """2 ranks all_reduce gradients and metrics in opposite orders in step 3 (deadlock)."""
    job = CustomJob(world_size=2, gpus_per_host=2)
    grads = job.new_group("grads", [0, 1])
    metrics = job.new_group("metrics", [0, 1])
    for rank in job.ranks():
        p = job.on(rank)
        for step in range(3):
            p.step(step)
            p.compute(30_000, 1_200)
            p.coll(grads, "all_reduce", [(25_165_824,)], site="grad_sync")
            p.compute(200, 100)
            p.coll(metrics, "all_reduce", [(16,)], site="log_metrics")
            p.compute(2_000, 700)
            p.coll(WORLD, "all_reduce", [(2,)], site="loss", sync=True)
    spec = SimSpec(layout=job, seed=111)
    unit = _unit(_clean(spec, 1), role=grads, step=2)
    spec = replace(spec, fault=faults.swap(1, unit))
    return Scenario(
        "nccl_deadlock",
        spec,
        "desync",
        "deadlock",
        "2 ranks on one host with two process groups over both ranks: group 1 (grads, [0, 1]) "
        "for the gradient all_reduce and group 2 (metrics, [0, 1]) for a small metrics "
        "all_reduce; each of 3 steps runs the gradient all_reduce, then the metrics all_reduce, "
        "then a world all_reduce of the loss that the host waits for.",
        "in step 3 rank 1 takes another code path that reduces its metrics first. Rank 0's GPU "
        "waits in the gradient all_reduce (group {group}, {desc}, {where}) for rank 1, whose "
        "GPU waits in the metrics all_reduce (group 2, seq 3) for rank 0: a cycle, a deadlock "
        "between {culprits}. Both dump when their watchdogs time out ({timeout}).",
    )


def all_stuck() -> Scenario:
    """The gradient-norm all_reduce starts on every rank and never completes (stuck_collective)."""
    spec = _grid(2, 1, 2, seed=112, timing=True)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 0), role=Role.WORLD, site="grad_norm", step=last)
    spec = replace(spec, fault=faults.network_hang(0, unit))
    return Scenario(
        "nccl_all_stuck",
        spec,
        "hung",
        "stuck_collective",
        grid_program(spec),
        "in the last step all four ranks issue the gradient-norm all_reduce on group {group} "
        "({desc}, {where}) and every GPU starts it, but it never completes anywhere: the "
        "communicator hangs in the network (a link or NIC failure). No rank is behind or "
        "different; every one shows it `started` when the watchdogs time out ({timeout}).",
    )


def straggler() -> Scenario:
    """Rank 6's host is 0.2 s late in every step; the job finishes (straggler)."""
    spec = _grid(2, 1, 4, seed=113, steps=10)
    first = _unit(_clean(spec, 6), site="attn_fwd", step=0)
    spec = replace(spec, fault=faults.stall(6, first, 0.2, repeat=spec.program.steps))
    return Scenario(
        "nccl_straggler",
        spec,
        "slow",
        "straggler",
        grid_program(spec),
        "rank 6's data loader is slow: in every one of the 10 steps its host spends {late} "
        "more than the others before its first forward tp all_reduce (group {group}, {desc}, "
        "{where} in step 1), so it enqueues that and every later collective of the step about "
        "200 ms after its peers, who wait for it. The job completes; every rank dumps at the "
        "end.",
    )


# --- the nccl3d_* sets: 16 ranks, TP=4 x PP=2 x DP=2 ------------------------------------------


def _cascade(name: str, kind: str, timing: bool, seed: int) -> Scenario:
    spec = _grid3d(seed, timing=timing)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 5), role=Role.TP, site="mlp_fwd", step=last, nth=-1)
    fault = faults.gpu_stuck_in(5, unit) if kind == "in" else faults.gpu_stuck_before(5, unit)
    spec = replace(spec, fault=fault)
    if kind == "in":
        how = (
            "rank 5's GPU hangs inside the tp all_reduce of the last micro-batch's forward "
            "(group {group}, {desc}, {where}) after contributing its data: its tp peers 4, 6 "
            "and 7 complete it, rank 5's never completes"
            + (" (it stays `started`)." if timing else " (without timing it stays `scheduled`).")
        )
    else:
        how = (
            "rank 5's GPU hangs in a compute kernel just before the tp all_reduce of the last "
            "micro-batch's forward (group {group}, {desc}, {where}): rank 5's all_reduce stays "
            "`scheduled` while its tp peers 4, 6 and 7 started theirs and wait for it."
        )
    return Scenario(
        name,
        spec,
        "hung",
        "stuck_collective",
        grid_program(spec),
        "in the last step " + how + " Everything downstream waits: the tp peers in their next "
        "tp all_reduce, rank 5's pipeline neighbour rank 13 in its exchange with rank 5 (and "
        "13's tp peers behind it), the dp groups in the gradient buckets, and every other "
        "host in the world all_reduce of the gradient norm, until the first watchdog times "
        "out ({timeout}).",
    )


def cascade_started() -> Scenario:
    """16-rank 3D job: rank 5's GPU hangs inside a TP all_reduce, with timing (`started`)."""
    return _cascade("nccl3d_cascade_started", "in", True, 201)


def cascade_scheduled() -> Scenario:
    """16-rank 3D job: rank 5's GPU hangs just before a TP all_reduce (`scheduled`)."""
    return _cascade("nccl3d_cascade_scheduled", "before", True, 202)


def cascade_timing_off() -> Scenario:
    """16-rank 3D job: rank 5's GPU hangs inside a TP all_reduce, without timing."""
    return _cascade("nccl3d_cascade_timing_off", "in", False, 203)


def mid_step() -> Scenario:
    """16-rank 3D job dumped on demand mid-step; nothing goes wrong."""
    spec = _grid3d(204, dump="mid", skew_s=0.002)
    return Scenario(
        "nccl3d_mid_step",
        spec,
        "ok",
        None,
        grid_program(spec),
        "nothing. The dumps were requested while the job was running (an on-demand dump), "
        "within 2 ms of each other, so every rank has ops in flight: `scheduled` entries "
        "and, ranks that dumped a little later, a few more completed ones.",
    )


def skip_world() -> Scenario:
    """16-rank 3D job: rank 5 skips the world loss all_reduce of step 1 (not_joined)."""
    spec = _grid3d(205)
    unit = _unit(_clean(spec, 5), role=Role.WORLD, site="loss", step=0)
    spec = replace(spec, fault=faults.skip(5, unit))
    return Scenario(
        "nccl3d_skip_world",
        spec,
        "desync",
        "not_joined",
        grid_program(spec),
        "at the end of step 1 rank 5 skips the world all_reduce of the loss (group {group}, "
        "{desc}, {where}): a rank-dependent branch. It goes on to step 2: its GPU blocks in "
        "its next subgroup collective, the first tp all_reduce, whose peers wait in the loss "
        "all_reduce for it, and its host blocks in the first pipeline exchange "
        "(batch_p2p_sync). The other 15 ranks wait in the loss all_reduce until the "
        "watchdogs time out ({timeout}); rank 5 never records that sequence id.",
    )


def p2p_mismatch() -> Scenario:
    """16-rank 3D job: rank 2 sends an activation of half the expected length (p2p mismatch)."""
    spec = _grid3d(206)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 2), kind=Kind.SEND, site="send_forward", step=last)
    spec = replace(spec, fault=faults.p2p_mismatch(2, unit, "size", shape=(1, 2048, 1024)))
    return Scenario(
        "nccl3d_p2p_mismatch",
        spec,
        "desync",
        "mismatch",
        grid_program(spec),
        "in the last step rank 2 (stage 0) sends its first activation to rank 10 (group "
        "{group}, {desc}, {where}) with the sequence length halved, [[1, 2048, 1024]], where "
        "rank 10 receives [[1, 4096, 1024]] as in every earlier transfer on that channel. "
        "The transfer never completes; the pipeline behind it and then the whole job stop "
        "until the watchdogs time out ({timeout}).",
    )


def stall() -> Scenario:
    """16-rank 3D job: rank 10's host stalls 5 s before a backward TP all_reduce; the job finishes
    (straggler)."""
    spec = _grid3d(207)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 10), role=Role.TP, site="attn_bwd", step=last)
    spec = replace(spec, fault=faults.stall(10, unit, 5.0))
    return Scenario(
        "nccl3d_stall",
        spec,
        "slow",
        "straggler",
        grid_program(spec),
        "in the last step rank 10's host stalls for {late} (a long garbage-collection pause) "
        "before it issues a backward tp all_reduce (group {group}, {desc}, {where}). Its tp "
        "peers wait for it; then the job catches up and completes. Every rank dumps at the "
        "end.",
    )


def dp_pair_mismatch() -> Scenario:
    """16-rank 3D job: rank 13's first gradient bucket has half the elements in a coalesced DP
    all_reduce (mismatch)."""
    spec = _grid3d(208)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 13), role=Role.DP, kind=Kind.COALESCED, step=last)
    spec = replace(spec, fault=faults.mismatch(13, unit, "size", member=0, shape=(12_582_912,)))
    return Scenario(
        "nccl3d_dp_pair_mismatch",
        spec,
        "desync",
        "mismatch",
        grid_program(spec),
        "in the last step rank 13 builds its first gradient bucket with half the elements "
        "(a parameter it does not hold): in the coalesced gradient all_reduce of dp group "
        "{group} ([9, 13], {where}) its first all_reduce is [[12582912]] where rank 9 and "
        "every other dp pair record [[25165824]]. The pair never completes the block; the "
        "job stops until the watchdogs time out ({timeout}). In a 2-member group only the "
        "other dp pairs show which side deviates: the higher rank, 13.",
    )


def crash() -> Scenario:
    """16-rank 3D job: rank 3's process dies before a backward TP all_reduce and writes no dump
    (dead_rank)."""
    spec = _grid3d(209)
    last = spec.program.steps - 1
    unit = _unit(_clean(spec, 3), role=Role.TP, site="mlp_bwd", step=last)
    spec = replace(spec, fault=faults.crash(3, unit))
    return Scenario(
        "nccl3d_crash",
        spec,
        "hung",
        "dead_rank",
        grid_program(spec),
        "in the last step rank 3's process dies in the middle of the backward pass (a "
        "segmentation fault in a kernel launch), right before the tp all_reduce on group "
        "{group} ({desc}, {where}), and writes no dump. Its tp peers 0-2 wait in that "
        "all_reduce, the rest of the job behind them, until the watchdogs time out "
        "({timeout}).",
    )


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "nccl_healthy": healthy,
    "nccl_p2p_pipeline": p2p_pipeline,
    "nccl_batched_p2p": batched_p2p,
    "nccl_coalesced": coalesced,
    "nccl_wrapped": wrapped,
    "nccl_stuck_started": stuck_started,
    "nccl_not_joined": not_joined,
    "nccl_missing_dump": missing_dump,
    "nccl_op_mismatch_json": op_mismatch_json,
    "nccl_wait_chain": wait_chain,
    "nccl_deadlock": deadlock,
    "nccl_all_stuck": all_stuck,
    "nccl_straggler": straggler,
    "nccl3d_cascade_started": cascade_started,
    "nccl3d_cascade_scheduled": cascade_scheduled,
    "nccl3d_cascade_timing_off": cascade_timing_off,
    "nccl3d_mid_step": mid_step,
    "nccl3d_skip_world": skip_world,
    "nccl3d_p2p_mismatch": p2p_mismatch,
    "nccl3d_stall": stall,
    "nccl3d_dp_pair_mismatch": dp_pair_mismatch,
    "nccl3d_crash": crash,
}


def write_scenario(name: str, directory: Path) -> list[Path]:
    """Simulate scenario `name`, check its truth, write its files and NOTE.md into
    `directory`."""
    return SCENARIOS[name]().write(directory)


def main(argv: Sequence[str] | None = None) -> int:
    """Write every simulated NCCL sample set (or `--only` one) under `--out`; returns 0."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.nccl_scenarios",
        description="Write the simulated NCCL-format Flight Recorder sample sets.",
    )
    parser.add_argument("--out", type=Path, default=Path("sample_dumps"), help="parent folder")
    parser.add_argument("--only", choices=sorted(SCENARIOS), help="write just this set")
    args = parser.parse_args(argv)
    for name in [args.only] if args.only else list(SCENARIOS):
        scenario = SCENARIOS[name]()
        scenario.note()  # simulate and check before anything is deleted
        target = args.out / name
        if target.exists():
            shutil.rmtree(target)
        scenario.write(target)
        size = sum(p.stat().st_size for p in target.iterdir())
        print(f"wrote {target} ({size // 1024} KiB): {scenario.expected_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
