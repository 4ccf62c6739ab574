"""Generate real 16-rank gloo Flight Recorder dump sets of a 3D-parallel training job.

Each scenario runs the same small "training" program on 16 CPU processes (gloo on 127.0.0.1,
PyTorch 2.13.0): tensor parallel TP=4 x data parallel DP=2 x pipeline parallel PP=2, global rank
``(pp_stage * DP + dp_index) * TP + tp_index``. Every rank creates every group in the same order
(world "0" = default_pg, then the TP groups [0-3], [4-7], [8-11], [12-15] with desc "tp", then
the DP groups {r, r+4} of each stage with desc "dp", then the PP groups {r, r+8} with desc "pp"),
so group names agree across ranks. A step is, for each micro-batch, a forward (stage 0: TP
all_reduce, send to the PP peer; stage 1: recv, TP all_reduce, at the first micro-batch a TP
all_gather) and then, in reverse, a backward (stage 1: TP all_reduce, send; stage 0: recv, TP
all_reduce), then a DP all_reduce per gradient bucket, every other step (the first included) a
world all_gather, and a world all_reduce of the loss. Gloo records no send/recv, so the PP groups
never show in a dump; the all_gathers let an analyzer infer group sizes from tensor sizes.

One rank misbehaves in one precise way (or none does), and every live rank writes its own dump
into ``<out>/gloo3d_<scenario>/`` next to a ``NOTE.md`` that says what happened and gives the
expected verdict as one machine-readable ``EXPECTED:`` line. A rank dumps when its program ends
or raises (gloo collectives and send/recv time out with their group's timeout), or from a
watchdog thread once its main thread has made no progress for longer than that timeout (a rank
hung outside c10d never returns). Ranks that dumped stay connected until every live rank has
dumped, so that nobody sees a closed connection instead of the hang.

Afterwards the parent reloads every file with plain pickle / json / gzip, derives the expected
group, sequence id and op from the dumps themselves, checks that the dumps show what the NOTE
claims, and exits 1 if they do not. The ranks are forked from one launcher process that imported
torch once, which keeps 16 processes on a small machine quick to start.

It needs torch (2.13.0, CPU) in the interpreter that runs it; fr-analyze never imports torch::

    python3.11 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0
    /tmp/torchvenv/bin/python tools/make_gloo3d_samples.py --out sample_dumps
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

TP, DP, PP = 4, 2, 2
WORLD_SIZE = TP * DP * PP
DEFAULT_TIMEOUT_S = 10.0
STORE_TIMEOUT = timedelta(seconds=120)
# gloo completes a work's future before its worker thread retires the flight-recorder entry;
# a short pause before dumping makes the normal dumps reproducible.
SETTLE_S = 0.5
# The watchdog dumps a rank whose main thread made no progress for timeout + this long: by then
# any collective or send/recv would have timed out, so the rank is hung outside c10d.
WATCHDOG_GRACE_S = 2.0
HANG_S = 3600.0
STALL_S = 4.0
CRASH_EXIT = 17

ACT_SHAPE = (4, 8)  # activations and their gradients, float32
GATHER_SHAPE = (2, 4)  # TP all_gather_into_tensor input, float32
BUCKETS = (96, 32)  # DP gradient buckets (numel), bfloat16
STATS_NUMEL = 2  # world all_gather input, float32
GRAD_DTYPE = torch.bfloat16

WORLD_PG = "0"
NOTE_WIDTH = 100

Dump = dict[str, Any]


# --------------------------------------------------------------------------------------------
# Topology: the same arithmetic the program and the checks use.
# --------------------------------------------------------------------------------------------


def coords(rank: int) -> tuple[int, int, int]:
    """(pp_stage, dp_index, tp_index) of a global rank."""
    stage, rest = divmod(rank, TP * DP)
    dp_index, tp_index = divmod(rest, TP)
    return stage, dp_index, tp_index


def global_rank(stage: int, dp_index: int, tp_index: int) -> int:
    """The global rank at pipeline stage `stage`, DP index `dp_index` and TP index `tp_index`."""
    return (stage * DP + dp_index) * TP + tp_index


def tp_groups() -> list[list[int]]:
    """TP groups in creation order."""
    return [[global_rank(s, d, t) for t in range(TP)] for s in range(PP) for d in range(DP)]


def dp_groups() -> list[list[int]]:
    """DP groups in creation order."""
    return [[global_rank(s, d, t) for d in range(DP)] for s in range(PP) for t in range(TP)]


def pp_groups() -> list[list[int]]:
    """PP groups in creation order."""
    return [[global_rank(s, d, t) for s in range(PP)] for d in range(DP) for t in range(TP)]


def members(kind: str, rank: int) -> list[int]:
    """The members of `rank`'s group of `kind` ("tp", "dp" or "pp")."""
    table = {"tp": tp_groups, "dp": dp_groups, "pp": pp_groups}[kind]()
    return next(g for g in table if rank in g)


def built_name(kind: str, rank: int) -> str:
    """The name dist.new_group gives the group of `kind` holding `rank` (creation order)."""
    order = [*tp_groups(), *dp_groups(), *pp_groups()]
    offset = {"tp": 0, "dp": len(tp_groups()), "pp": len(tp_groups()) + len(dp_groups())}[kind]
    table = order[offset:]
    return str(1 + offset + next(i for i, g in enumerate(table) if rank in g))


# --------------------------------------------------------------------------------------------
# Faults and plans.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One misbehaviour of one rank, right before one point of the program."""

    rank: int
    point: str
    """fwd.tp_all_reduce, fwd.recv, dp.all_reduce, world.all_reduce, ... (see Trainer)."""
    step: int
    """0-based step."""
    index: int
    """0-based micro-batch (fwd.*, bwd.*) or gradient bucket (dp.*); 0 otherwise."""
    action: str
    """"stall" (sleep `seconds`, go on), "hang" (sleep for an hour), "skip" (leave the op out),
    "crash" (os._exit without a dump), "half" (the op's tensor is float16, not bfloat16)."""
    seconds: float = 0.0


@dataclass(frozen=True)
class Plan:
    """What every rank runs and which faults it meets: steps, micro-batches, compute, dumps."""

    steps: int = 3
    micro_batches: int = 3
    compute_s: float = 0.0
    """Mean sleep per forward and per backward of a micro-batch ("compute")."""
    final_barrier: bool = False
    faults: tuple[Fault, ...] = ()
    mid_run_dump_at: tuple[int, int] | None = None
    """(step, micro-batch): when rank 0's forward reaches it, every rank dumps ~20 ms later
    from a background thread while the program keeps running; no other dump is written."""
    instant_dump_ranks: frozenset[int] = frozenset()
    """Ranks that take their dump the instant their final barrier completes, in a callback on
    the barrier's future (gloo runs it before its worker thread retires the entry), and write
    it as soon as the barrier returns; no settle."""
    crashed: frozenset[int] = frozenset()
    """Ranks expected to die without a dump."""


class Progress:
    """What the main thread is doing and since when; read by the watchdog."""

    def __init__(self) -> None:
        self.since = time.monotonic()
        self.where = "setup"
        self.finished = False

    def at(self, where: str) -> None:
        """The main thread has reached `where` (now)."""
        self.since = time.monotonic()
        self.where = where


class Trainer:
    """The training program of one rank."""

    def __init__(self, rank: int, plan: Plan, timeout: timedelta, progress: Progress) -> None:
        self.rank = rank
        self.plan = plan
        self.progress = progress
        self.stage, _, _ = coords(rank)
        self.on_point: Callable[[str, int, int], None] | None = None
        self.on_barrier: Callable[[Any], None] | None = None
        made: dict[str, dict[int, Any]] = {"tp": {}, "dp": {}, "pp": {}}
        for kind, table in (("tp", tp_groups()), ("dp", dp_groups()), ("pp", pp_groups())):
            for ranks in table:
                group = dist.new_group(ranks, timeout=timeout, group_desc=kind)
                for r in ranks:
                    made[kind][r] = group
        self.tp = made["tp"][rank]
        self.dp = made["dp"][rank]
        self.pp = made["pp"][rank]
        self.peer = members("pp", rank)[1 - self.stage]

    # -- fault injection -----------------------------------------------------------------------

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
            if f.action in ("stall", "hang"):
                time.sleep(HANG_S if f.action == "hang" else f.seconds)
                self.progress.at(where)
            elif f.action == "crash":
                os._exit(CRASH_EXIT)
            return f.action
        return None

    # -- the program ---------------------------------------------------------------------------

    def run(self) -> None:
        """The training program: per step, forwards, backwards, DP bucket all_reduces, world
        all_gather (even steps) and all_reduce; an optional final barrier."""
        for step in range(self.plan.steps):
            for mb in range(self.plan.micro_batches):
                self.forward(step, mb)
            for mb in reversed(range(self.plan.micro_batches)):
                self.backward(step, mb)
            for bucket, numel in enumerate(BUCKETS):
                dtype = GRAD_DTYPE
                if self.point("dp.all_reduce", step, bucket) == "half":
                    dtype = torch.float16
                dist.all_reduce(torch.full((numel,), 0.5, dtype=dtype), group=self.dp)
            if step % 2 == 0 and self.point("world.all_gather", step) != "skip":
                stats = torch.tensor([float(self.rank), float(step)])
                dist.all_gather([torch.empty(STATS_NUMEL) for _ in range(WORLD_SIZE)], stats)
            if self.point("world.all_reduce", step) != "skip":
                dist.all_reduce(torch.tensor([1.0 + step]))
        if self.plan.final_barrier and self.point("world.barrier", self.plan.steps) != "skip":
            if self.on_barrier is None:
                dist.barrier()
            else:
                work = dist.barrier(async_op=True)
                self.on_barrier(work)
                work.wait()
        self.progress.at("done")

    def compute(self) -> None:
        """Sleep for the micro-batch's compute; the higher the TP index, the longer."""
        # Uneven load: the higher a rank's TP index, the longer it computes, so its TP peers
        # spend part of every step inside an all_reduce waiting for it.
        if self.plan.compute_s:
            time.sleep(self.plan.compute_s * (1 + coords(self.rank)[2]) / 2)

    def forward(self, step: int, mb: int) -> None:
        """The forward of micro-batch `mb`: recv from stage 0 (on stage 1), TP all_reduce, TP
        all_gather, send to stage 1 (on stage 0)."""
        act = torch.full(ACT_SHAPE, float(mb))
        if self.stage == 1 and self.point("fwd.recv", step, mb) != "skip":
            dist.recv(act, src=self.peer, group=self.pp)
        self.compute()
        if self.point("fwd.tp_all_reduce", step, mb) != "skip":
            dist.all_reduce(act, group=self.tp)
        if self.stage == 1 and mb == 0 and self.point("fwd.tp_all_gather", step, mb) != "skip":
            shard = torch.full(GATHER_SHAPE, float(self.rank))
            gathered = torch.empty(GATHER_SHAPE[0] * TP, GATHER_SHAPE[1])
            dist.all_gather_into_tensor(gathered, shard, group=self.tp)
        if self.stage == 0 and self.point("fwd.send", step, mb) != "skip":
            dist.send(act, dst=self.peer, group=self.pp)

    def backward(self, step: int, mb: int) -> None:
        """The backward of micro-batch `mb`: recv from stage 1 (on stage 0), TP all_reduce, send to
        stage 0 (on stage 1)."""
        grad = torch.full(ACT_SHAPE, 1.0)
        if self.stage == 0 and self.point("bwd.recv", step, mb) != "skip":
            dist.recv(grad, src=self.peer, group=self.pp)
        self.compute()
        if self.point("bwd.tp_all_reduce", step, mb) != "skip":
            dist.all_reduce(grad, group=self.tp)
        if self.stage == 1 and self.point("bwd.send", step, mb) != "skip":
            dist.send(grad, dst=self.peer, group=self.pp)


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


def say(rank: int, message: str) -> None:
    """Print `message` to the rank's log, prefixed with the rank."""
    print(f"rank {rank}: {message}", flush=True)


def _dump_bytes(fmt: str) -> bytes:
    c10d = torch._C._distributed_c10d  # its private Flight Recorder dumps are not in the stubs
    if fmt == "json":
        data: bytes = c10d._dump_fr_trace_json(  # type: ignore[attr-defined, unused-ignore]
            includeCollectives=True, onlyActive=False
        )
        return data
    raw: bytes = c10d._dump_fr_trace(  # type: ignore[attr-defined, unused-ignore]
        includeCollectives=True, includeStackTraces=True, onlyActive=False
    )
    return gzip.compress(raw, mtime=0) if fmt == "gzip" else raw


def _entry_count() -> int:
    c10d = torch._C._distributed_c10d  # its private Flight Recorder dumps are not in the stubs
    raw = c10d._dump_fr_trace(  # type: ignore[attr-defined, unused-ignore]
        includeCollectives=True, includeStackTraces=False, onlyActive=False
    )
    return len(pickle.loads(raw).get("entries", []))


class Worker:
    """Dumping and shutdown of one rank; safe to call from the main and the helper threads."""

    def __init__(self, scenario: Scenario, rank: int, port: int, folder: Path, live: int) -> None:
        self.scenario = scenario
        self.rank = rank
        self.folder = folder
        self.live = live
        self.progress = Progress()
        self.lock = threading.Lock()
        self.dumped = False
        self.dumped_entries = 0
        self.captured: bytes | None = None
        # One store client a process: the process groups rendezvous through it too (a second
        # client in the same process takes ~5 s to connect). Our threads only use quick calls.
        self.store_lock = threading.Lock()
        self.store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=STORE_TIMEOUT)

    def count(self, key: str, add: int = 0) -> int:
        """Add `add` to the store's counter `key`; returns its new value."""
        with self.store_lock:
            value: int = self.store.add(key, add)
            return value

    def post(self, key: str, value: str) -> None:
        """Set store key `key` to `value`."""
        with self.store_lock:
            self.store.set(key, value)

    def poll(self, key: str) -> str | None:
        """The value of store key `key`, or None while it is not set."""
        with self.store_lock:
            return self.store.get(key).decode() if self.store.check([key]) else None

    def wait_for(self, key: str, target: int, deadline: float) -> bool:
        """Count this rank in at `key`, wait for `target` ranks; False if `deadline` passes."""
        self.count(key, 1)
        while self.count(key) < target:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def capture(self) -> None:
        """Take the dump now, in memory; dump() writes it later."""
        try:
            self.captured = _dump_bytes(self.scenario.fmt)
        except Exception as exc:
            say(self.rank, f"capture failed: {exc}")

    def dump(self, why: str) -> None:
        """Write this rank's dump once (the captured one, else one taken now), logging `why`."""
        with self.lock:
            if self.dumped:
                return
            self.dumped = True
            try:
                data = self.captured or _dump_bytes(self.scenario.fmt)
                target = self.folder / self.scenario.file_name(self.rank)
                partial = target.with_name(target.name + ".partial")
                partial.write_bytes(data)
                partial.replace(target)
                self.dumped_entries = len(parse_dump(data, self.scenario.fmt).get("entries", []))
                say(self.rank, f"dumped ({why})")
            except Exception as exc:
                say(self.rank, f"dump failed: {exc}")
            self.count("dumped", 1)

    def finish(self, status: int, deadline: float) -> None:
        """Stay connected until every live rank has dumped, then leave without teardown."""
        while self.count("dumped") < self.live:
            if time.monotonic() > deadline:
                say(self.rank, "gave up waiting for the other ranks' dumps")
                break
            time.sleep(0.05)
        sys.stdout.flush()
        # Destroying a gloo group whose peers are gone can block: skip interpreter teardown.
        os._exit(status)

    def watchdog(self, idle_s: float, deadline: float) -> None:
        """Dump when the main thread idles `idle_s` in one place or `deadline` passes; finish."""
        while True:
            time.sleep(0.1)
            if self.dumped or self.progress.finished:
                return
            idle = time.monotonic() - self.progress.since
            if idle > idle_s or time.monotonic() > deadline:
                where = self.progress.where
                self.dump(f"watchdog: main thread stuck {idle:.0f} s at {where}")
                self.finish(0, deadline)

    def dump_mid_run(self) -> None:
        """Wait for the time rank 0 posts, then dump at that time while the program runs."""
        while (posted := self.poll("dump_at")) is None:
            if self.progress.finished:
                return
            time.sleep(0.005)
        when = float(posted)
        time.sleep(max(0.0, when - time.time()))
        running = not self.progress.finished
        self.dump(f"mid-run from a background thread at {self.progress.where}")
        if running:
            say(self.rank, "dump taken while the program was running")


def run_worker(name: str, rank: int, port: int, folder: str, timeout_s: float, log: str) -> None:
    """Entry point of one rank (forked by the launcher)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    scenario = SCENARIOS_BY_NAME[name]
    plan = scenario.plan
    timeout_s = scenario.timeout_for(timeout_s)
    timeout = timedelta(seconds=timeout_s)
    deadline = time.monotonic() + 4 * timeout_s + 60
    live = WORLD_SIZE - len(plan.crashed)
    worker = Worker(scenario, rank, port, Path(folder), live)
    # Start together: gloo's full-mesh connect is bounded by the group timeout.
    worker.wait_for("started", WORLD_SIZE, deadline)
    dist.init_process_group(
        "gloo", store=worker.store, rank=rank, world_size=WORLD_SIZE, timeout=timeout
    )
    trainer = Trainer(rank, plan, timeout, worker.progress)
    worker.wait_for("groups", WORLD_SIZE, deadline)
    if plan.mid_run_dump_at is not None:
        threading.Thread(target=worker.dump_mid_run, daemon=True).start()
        if rank == 0:
            trigger = plan.mid_run_dump_at

            def on_point(point: str, step: int, index: int) -> None:
                if (point, step, index) == ("fwd.tp_all_reduce", *trigger):
                    worker.post("dump_at", repr(time.time() + 0.02))

            trainer.on_point = on_point
    if rank in plan.instant_dump_ranks:
        trainer.on_barrier = lambda work: work.get_future().then(lambda _: worker.capture())
    ended = run_watched(worker, rank, trainer.run, timeout_s, deadline)
    if plan.mid_run_dump_at is not None:
        dump_mid_run_or_now(worker, rank)
    elif rank not in plan.instant_dump_ranks:
        time.sleep(SETTLE_S)
        worker.dump(ended)
    elif worker.captured is not None:
        worker.dump("taken in the barrier's completion callback")
    else:
        worker.dump("main thread, the instant the barrier returned")
    worker.finish(0, deadline)


def run_watched(
    worker: Worker, rank: int, program: Callable[[], None], timeout_s: float, deadline: float
) -> str:
    """Run a rank's program under the watchdog (it dumps a rank hung outside c10d); returns
    how the main thread will say it dumped."""
    idle_s = timeout_s + WATCHDOG_GRACE_S
    threading.Thread(target=worker.watchdog, args=(idle_s, deadline), daemon=True).start()
    worker.progress.at("start")
    try:
        program()
        ended = "main thread, 0.5 s after the program ended"
    except Exception as exc:  # the injected fault surfaces here: a timeout or a gloo error
        first = str(exc).splitlines()[0] if str(exc) else ""
        say(rank, f"{type(exc).__name__} at {worker.progress.where}: {first[:150]}")
        ended = "main thread, 0.5 s after its op raised"
    worker.progress.finished = True
    return ended


def dump_mid_run_or_now(worker: Worker, rank: int) -> None:
    """After the program of a mid-run scenario: wait for its background dump, else dump now."""
    final = _entry_count()
    give_up = time.monotonic() + 5
    while not worker.dumped and time.monotonic() < give_up:
        time.sleep(0.05)
    worker.dump("main thread: no mid-run dump happened")
    say(rank, f"mid-run dump held {worker.dumped_entries} entries, the program ended with {final}")


# --------------------------------------------------------------------------------------------
# Reading and checking dumps (plain pickle / json / gzip: what fr-analyze has to do too).
# --------------------------------------------------------------------------------------------


def load_dump(path: Path, fmt: str) -> Dump:
    """The dump file at `path` in format `fmt`, checked to be a dict."""
    loaded = parse_dump(path.read_bytes(), fmt)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: top level is {type(loaded).__name__}, not dict")
    return loaded


def parse_dump(data: bytes, fmt: str) -> Any:
    """Decode one dump with the standard library only (what fr-analyze has to do too)."""
    if fmt == "json":
        loaded = json.loads(data)
    elif fmt == "gzip":
        loaded = pickle.loads(gzip.decompress(data))
    else:
        loaded = pickle.loads(data)
    return loaded


def entries(dump: Dump, group: str | None = None) -> list[Dump]:
    """The dump's entries, those of process group `group` only when given."""
    all_entries: list[Dump] = dump.get("entries", [])
    if group is None:
        return all_entries
    return [e for e in all_entries if e["process_group"][0] == group]


def by_seq(dump: Dump, group: str) -> dict[int, Dump]:
    """The entries of group `group` by collective seq id."""
    return {int(e["collective_seq_id"]): e for e in entries(dump, group)}


def last_seq(dump: Dump, group: str) -> int:
    """The last collective seq id of group `group` in the dump (0: none)."""
    return max(by_seq(dump, group), default=0)


def op_of(entry: Dump) -> str:
    """The op of an entry, e.g. "all_reduce" for "gloo:all_reduce"."""
    name: str = entry["profiling_name"]
    return name.split(":", 1)[1]


def group_named(dump: Dump, desc: str) -> set[str]:
    """The names of the groups whose entries in the dump have desc `desc`."""
    return {e["process_group"][0] for e in entries(dump) if e["process_group"][1] == desc}


def ranks_range(values: Iterable[int]) -> str:
    """'5' or '4-7': the lowest and highest of `values`."""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def ranks_label(ranks: Iterable[int]) -> str:
    """'rank 5' or 'ranks 4, 6, 7'."""
    listed = sorted(ranks)
    return f"rank{'s' if len(listed) != 1 else ''} {ranks_text(listed)}"


def ranks_text(ranks: Iterable[int]) -> str:
    """'4, 6, 7': the ranks sorted, comma-separated."""
    return ", ".join(str(r) for r in sorted(ranks))


@dataclass
class Expected:
    """The answer fr-analyze should give on a dump set: status, root, culprits, group, seq, op."""

    status: str
    root: str | None = None
    culprits: tuple[int, ...] = ()
    group: str | None = None
    desc: str | None = None
    seq: int | None = None
    op: str | None = None

    def line(self) -> str:
        """The EXPECTED line of NOTE.md."""

        def v(x: object) -> str:
            return "-" if x is None or x == () else str(x)

        culprits = ",".join(str(r) for r in self.culprits) if self.culprits else "-"
        return (
            f"EXPECTED: status={self.status} root={v(self.root)} culprits={culprits} "
            f"group={v(self.group)} desc={v(self.desc)} seq={v(self.seq)} op={v(self.op)}"
        )


@dataclass
class Outcome:
    """What a check derived from the dumps."""

    expected: Expected
    facts: list[str] = field(default_factory=list)
    """Sentences for NOTE.md, each derived from the dumps."""
    problems: list[str] = field(default_factory=list)


@dataclass
class RunInfo:
    """What the parent saw of a run besides the dumps."""

    exit_codes: dict[int, int | None]
    logs: dict[int, list[str]]
    missing: set[int]


def check_structure(dumps: dict[int, Dump], crashed: frozenset[int]) -> list[str]:
    """Facts every set must show: group names and descs as built, membership, seqs 1..n."""
    problems: list[str] = []
    for rank, dump in dumps.items():
        names = {"tp": built_name("tp", rank), "dp": built_name("dp", rank)}
        for e in entries(dump):
            name, desc = e["process_group"]
            if e["state"] != "scheduled" or e["is_p2p"]:
                problems.append(f"rank {rank}: entry {e['record_id']} state {e['state']!r}")
            if not e["profiling_name"].startswith("gloo:"):
                problems.append(f"rank {rank}: unexpected op {e['profiling_name']!r}")
            want = {"default_pg": WORLD_PG, **names}.get(desc)
            if want != name:
                problems.append(f"rank {rank}: group {name!r} has desc {desc!r}")
        for name in {e["process_group"][0] for e in entries(dump)}:
            seqs = [int(e["collective_seq_id"]) for e in entries(dump, name)]
            if seqs != list(range(1, len(seqs) + 1)):
                problems.append(f"rank {rank}: group {name!r} seqs are not 1..n: {seqs}")
    holders: dict[str, set[int]] = {}
    for rank, dump in dumps.items():
        for e in entries(dump):
            holders.setdefault(e["process_group"][0], set()).add(rank)
    for name, ranks in holders.items():
        desc_kind = next(
            (k for k in ("tp", "dp") if any(built_name(k, r) == name for r in ranks)), None
        )
        want_ranks = set(range(WORLD_SIZE)) if name == WORLD_PG else set()
        if desc_kind is not None:
            want_ranks = set(members(desc_kind, min(ranks)))
        if ranks != want_ranks - crashed:
            problems.append(
                f"group {name!r} appears on ranks {sorted(ranks)}, not {sorted(want_ranks)}"
            )
    if any(group_named(d, "pp") for d in dumps.values()):
        problems.append("a pp group (send/recv only) shows up in the entries")
    return problems


def agreement(dumps: dict[int, Dump]) -> dict[tuple[str, int], dict[str, dict[int, Any]]]:
    """(group, seq) -> field -> rank -> value, for the fields on which ranks disagree."""
    table: dict[tuple[str, int], list[tuple[int, Dump]]] = {}
    for rank, dump in dumps.items():
        for e in entries(dump):
            key = (e["process_group"][0], int(e["collective_seq_id"]))
            table.setdefault(key, []).append((rank, e))
    out: dict[tuple[str, int], dict[str, dict[int, Any]]] = {}
    for key, rows in table.items():
        for fld in ("profiling_name", "input_sizes", "output_sizes", "input_dtypes"):
            values = {rank: json.dumps(e[fld]) for rank, e in rows}
            if len(set(values.values())) > 1:
                out.setdefault(key, {})[fld] = {r: e[fld] for r, e in rows}
    return out


def size_rule_ops(dump: Dump) -> list[tuple[str, int, int]]:
    """(group, seq, output/input ratio) of the all_gathers in a dump."""
    found = []
    for e in entries(dump):
        if op_of(e) != "all_gather":
            continue
        ins, outs = e["input_sizes"], e["output_sizes"]
        in_numel = sum(_numel(s) for s in ins)
        out_numel = sum(_numel(s) for s in outs)
        found.append((e["process_group"][0], int(e["collective_seq_id"]), out_numel // in_numel))
    return found


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def unretired(dump: Dump) -> list[Dump]:
    """The dump's entries that are not retired."""
    return [e for e in entries(dump) if not e["retired"]]


def late_arrivals(dumps: dict[int, Dump], min_s: float) -> list[tuple[int, str, int, int, float]]:
    """Collectives whose last rank arrived `min_s` after all the others, oldest first.

    Rows: (creation time of the late entry, group, seq, late rank, seconds after the others).
    """
    table: dict[tuple[str, int], dict[int, int]] = {}
    for rank, dump in dumps.items():
        for e in entries(dump):
            key = (e["process_group"][0], int(e["collective_seq_id"]))
            table.setdefault(key, {})[rank] = int(e["time_created_ns"])
    rows = []
    for (name, seq), created in table.items():
        if len(created) < 2:
            continue
        last = max(created, key=lambda r: created[r])
        wait = (created[last] - max(t for r, t in created.items() if r != last)) / 1e9
        if wait >= min_s:
            rows.append((created[last], name, seq, last, wait))
    return sorted(rows)


def newest_ns(dump: Dump) -> int:
    """When the dump's newest entry was created, in ns (0: no entries)."""
    return max((int(e["time_created_ns"]) for e in entries(dump)), default=0)


def _describe_last_ops(dumps: dict[int, Dump]) -> str:
    """'ranks a, b: <op> on pg g seq s (retired=x)' for the last entry of each rank, grouped."""
    groups: dict[str, list[int]] = {}
    for rank, dump in sorted(dumps.items()):
        last = entries(dump)[-1]
        name, desc = last["process_group"]
        text = (
            f"{op_of(last)} pg {name!r} ({desc}) seq {last['collective_seq_id']}, "
            f"retired={last['retired']}"
        )
        groups.setdefault(text, []).append(rank)
    return "; ".join(f"{ranks_label(r)}: {t}" for t, r in groups.items())


def _dump_ways(info: RunInfo) -> str:
    """How each rank came to dump, grouped: 'how: ranks a, b'."""
    ways: dict[str, list[int]] = {}
    for rank, lines in info.logs.items():
        how = "no dump"
        for line in lines:
            if "dumped (" not in line:
                continue
            why = line.split("dumped (", 1)[1].removesuffix(")")
            if why.startswith("watchdog"):
                how = "watchdog thread, main thread blocked at " + why.split(" at ", 1)[1]
            elif why.startswith("mid-run"):
                how = "background thread, mid-run"
            else:
                how = why
        ways.setdefault(how, []).append(rank)
    return "; ".join(f"{how}: {ranks_label(r)}" for how, r in sorted(ways.items()))


def _raised(info: RunInfo) -> dict[int, str]:
    out = {}
    for rank, lines in info.logs.items():
        for line in lines:
            if "Error at " in line or "Exception at " in line:
                out[rank] = line.split(": ", 1)[1]
    return out


def _retired_fact(dumps: dict[int, Dump]) -> str:
    open_entries = sum(len(unretired(d)) for d in dumps.values())
    if open_entries:
        return f"{open_entries} entries in the set are unretired."
    return (
        "Every entry of every dump is retired=True, the ops that timed out or failed included: "
        "in a gloo hang only the sequence ids tell who is waiting."
    )


def _all_retired(dumps: dict[int, Dump]) -> list[str]:
    return [f"rank {r}: {len(unretired(d))} unretired" for r, d in dumps.items() if unretired(d)]


def _no_disagreement(dumps: dict[int, Dump]) -> list[str]:
    return [f"ranks disagree at pg {k[0]!r} seq {k[1]}: {v}" for k, v in agreement(dumps).items()]


def _size_rules(dumps: dict[int, Dump], before_ns: int | None = None) -> list[str]:
    """Both size rules must be in the dumps (before `before_ns`, when given)."""
    world = tp = False
    for rank, dump in dumps.items():
        for name, seq, ratio in size_rule_ops(dump):
            e = by_seq(dump, name)[seq]
            if before_ns is not None and int(e["time_created_ns"]) >= before_ns:
                continue
            world |= name == WORLD_PG and ratio == WORLD_SIZE
            tp |= coords(rank)[0] == 1 and name == built_name("tp", rank) and ratio == TP
    problems = []
    if not world:
        problems.append("no world all_gather with output = 16 x input")
    if not tp:
        problems.append("no stage-1 TP all_gather with output = 4 x input")
    return problems


def _logged(info: RunInfo, rank: int, *texts: str) -> bool:
    """Whether one line of the rank's log holds all the texts."""
    return any(all(t in line for t in texts) for line in info.logs.get(rank, []))


def check_healthy(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the healthy run: every entry retired, the records agree, all ranks at one world seq."""
    problems = _all_retired(dumps) + _no_disagreement(dumps) + _size_rules(dumps)
    lasts = {r: last_seq(d, WORLD_PG) for r, d in dumps.items()}
    if len(set(lasts.values())) != 1:
        problems.append(f"ranks end at different world seqs: {lasts}")
    facts = [
        f"Every rank ends at world seq {lasts[0]}; every entry is retired.",
        f"Last entry per rank: {_describe_last_ops(dumps)}.",
    ]
    return Outcome(Expected("ok"), facts, problems)


def check_mid_step(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the mid-run dump: taken while the program ran, entries unretired, the records agree."""
    problems = _no_disagreement(dumps)
    open_ranks = {r: len(unretired(d)) for r, d in dumps.items() if unretired(d)}
    if not open_ranks:
        problems.append("no rank has an unretired entry")
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
    world = {r: last_seq(d, WORLD_PG) for r, d in dumps.items()}
    n_open = sum(open_ranks.values())
    newest = [newest_ns(d) for d in dumps.values()]
    spread_ms = (max(newest) - min(newest)) / 1e6
    at_dump = [h[0] for h in held.values()] or [0]
    at_end = [h[1] for h in held.values()] or [0]
    facts = [
        f"The dumps hold {ranks_range(at_dump)} entries a rank; by the end of the program the "
        f"ranks had recorded {ranks_range(at_end)}.",
        f"{n_open} entries on ranks {ranks_text(open_ranks)} are unretired (in flight at the "
        f"dump); the ranks' world groups end at seq {ranks_range(world.values())}.",
        f"The newest entries of the 16 ranks were created within {spread_ms:.0f} ms of each "
        "other (a dump carries no dump time).",
        f"Last entry per rank: {_describe_last_ops(dumps)}.",
    ]
    return Outcome(Expected("ok"), facts, problems)


BARRIER_RANK = 10


def check_unretired_barrier(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the final-barrier run: every rank's last entry is the world barrier, unretired only on
    the rank that dumped at once."""
    problems = _no_disagreement(dumps) + _size_rules(dumps)
    for rank, dump in dumps.items():
        last = entries(dump)[-1]
        if op_of(last) != "barrier":
            problems.append(f"rank {rank}: last entry is {last['profiling_name']}, not barrier")
        want_retired = rank != BARRIER_RANK
        if last["retired"] != want_retired:
            problems.append(f"rank {rank}: barrier retired={last['retired']}")
        rest = [e for e in entries(dump)[:-1] if not e["retired"]]
        if rest:
            problems.append(f"rank {rank}: {len(rest)} unretired entries before the barrier")
    seq = last_seq(dumps[BARRIER_RANK], WORLD_PG)
    facts = [
        f"Every rank's last entry is gloo:barrier on pg '0' seq {seq}; rank {BARRIER_RANK}'s is "
        "retired=False, everyone else's retired=True; all earlier entries are retired.",
    ]
    return Outcome(Expected("ok"), facts, problems)


def _not_joined(
    dumps: dict[int, Dump], culprit: int, kind: str, op: str = "all_reduce"
) -> tuple[str, int, list[str]]:
    """The group of `kind` holding `culprit` and the seq its peers reached but it did not."""
    problems: list[str] = []
    peers = [r for r in members(kind, culprit) if r != culprit and r in dumps]
    names = {n for r in peers for n in group_named(dumps[r], kind)}
    (name,) = names if len(names) == 1 else (built_name(kind, culprit),)
    if len(names) != 1:
        problems.append(f"peers of rank {culprit} disagree on their {kind} group: {names}")
    seqs = {r: last_seq(dumps[r], name) for r in peers}
    seq = max(seqs.values())
    if set(seqs.values()) != {seq}:
        problems.append(f"peers of rank {culprit} end at different seqs of pg {name!r}: {seqs}")
    for r in peers:
        if op_of(by_seq(dumps[r], name)[seq]) != op:
            problems.append(f"rank {r}: pg {name!r} seq {seq} is not {op}")
    if culprit in dumps and last_seq(dumps[culprit], name) != seq - 1:
        got = last_seq(dumps[culprit], name)
        problems.append(f"rank {culprit}: pg {name!r} ends at seq {got}, expected {seq - 1}")
    if name != built_name(kind, culprit):
        problems.append(f"pg {name!r} is not the {kind} group built for rank {culprit}")
    return name, seq, problems


STUCK_RANK = 5


def check_stuck_rank(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the stuck rank: its TP peers wait in an all_reduce it never joined, and the watchdog
    dumped it in its hang."""
    name, seq, problems = _not_joined(dumps, STUCK_RANK, "tp")
    problems += _no_disagreement(dumps) + _size_rules(dumps)
    if not _logged(info, STUCK_RANK, "dumped (watchdog", "fwd.tp_all_reduce step 2 #2"):
        problems.append(f"rank {STUCK_RANK} was not dumped by the watchdog in its hang")
    mine = entries(dumps[STUCK_RANK])
    if not all(e["retired"] for e in mine):
        problems.append(f"rank {STUCK_RANK}: has unretired entries, but it is idle")
    peers = [r for r in members("tp", STUCK_RANK) if r != STUCK_RANK]
    waits = {r: by_seq(dumps[r], name)[seq]["retired"] for r in peers}
    facts = [
        f"Ranks {ranks_text(peers)} issued all_reduce pg {name!r} (tp) seq {seq} and timed out "
        f"in it (retired flags there: {waits}); rank {STUCK_RANK}'s pg {name!r} ends at seq "
        f"{seq - 1}, all its entries retired (it is idle, not waiting in c10d).",
        _retired_fact(dumps),
        f"Last entry per rank: {_describe_last_ops(dumps)}.",
    ]
    return Outcome(
        Expected("hung", "not_joined", (STUCK_RANK,), name, "tp", seq, "all_reduce"),
        facts,
        problems,
    )


SKIP_RANK = 6


def check_skip_collective(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the skipped world all_reduce: the culprit ends one world seq short, the rest agree."""
    problems = _no_disagreement(dumps) + _size_rules(dumps)
    others = [r for r in dumps if r != SKIP_RANK]
    world = {r: last_seq(dumps[r], WORLD_PG) for r in others}
    seq = max(world.values())
    if set(world.values()) != {seq}:
        problems.append(f"ranks other than {SKIP_RANK} end at different world seqs: {world}")
    if last_seq(dumps[SKIP_RANK], WORLD_PG) != seq - 1:
        problems.append(f"rank {SKIP_RANK}: world ends at {last_seq(dumps[SKIP_RANK], WORLD_PG)}")
    for r in others:
        if op_of(by_seq(dumps[r], WORLD_PG)[seq]) != "all_reduce":
            problems.append(f"rank {r}: world seq {seq} is not all_reduce")
    tp = built_name("tp", SKIP_RANK)
    peers = [r for r in members("tp", SKIP_RANK) if r != SKIP_RANK]
    tp_seq = last_seq(dumps[SKIP_RANK], tp)
    if any(last_seq(dumps[r], tp) != tp_seq - 1 for r in peers):
        problems.append(f"rank {SKIP_RANK} is not one TP op ahead of ranks {peers}")
    if not _logged(info, SKIP_RANK, "Error at fwd.tp_all_reduce step 3 #1"):
        problems.append(f"rank {SKIP_RANK} did not fail in the TP all_reduce of step 3")
    last = entries(dumps[SKIP_RANK])[-1]
    if last["process_group"][0] != tp or int(last["collective_seq_id"]) != tp_seq:
        problems.append(f"rank {SKIP_RANK}: last entry is not its TP all_reduce")
    facts = [
        f"Ranks {ranks_text(others)} issued world all_reduce (pg '0', default_pg) seq {seq}; rank "
        f"{SKIP_RANK}'s world group ends at seq {seq - 1}. Rank {SKIP_RANK} instead issued "
        f"all_reduce pg {tp!r} (tp) seq {tp_seq}, which its TP peers {ranks_text(peers)} never "
        f"reach (they end at seq {tp_seq - 1}).",
        _retired_fact(dumps),
        f"Last entry per rank: {_describe_last_ops(dumps)}.",
    ]
    return Outcome(
        Expected("desync", "not_joined", (SKIP_RANK,), WORLD_PG, "default_pg", seq, "all_reduce"),
        facts,
        problems,
    )


CRASH_RANK = 15


def check_crash(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the crash: the rank wrote no dump and exited as planned; the others wait for it."""
    problems = _no_disagreement(dumps)
    if CRASH_RANK in dumps or CRASH_RANK not in info.missing:
        problems.append(f"rank {CRASH_RANK} has a dump file")
    if info.exit_codes.get(CRASH_RANK) != CRASH_EXIT:
        problems.append(f"rank {CRASH_RANK} exit code {info.exit_codes.get(CRASH_RANK)}")
    if not _logged(info, CRASH_RANK, "fault: crash before fwd.tp_all_reduce step 2 #2"):
        problems.append(f"rank {CRASH_RANK} did not crash where planned")
    for rank, dump in dumps.items():
        for key, pg in dump.get("pg_config", {}).items():
            listed = json.loads(pg.get("ranks", "[]") or "[]")
            if CRASH_RANK in listed:
                problems.append(f"rank {rank}: pg_config {key!r} lists rank {CRASH_RANK}")
    name, seq, more = _not_joined(dumps, CRASH_RANK, "tp")
    problems += more
    peers = [r for r in members("tp", CRASH_RANK) if r != CRASH_RANK]
    crash_ns = min(int(by_seq(dumps[r], name)[seq]["time_created_ns"]) for r in peers)
    problems += _size_rules(dumps, before_ns=crash_ns)
    ratios = sorted(
        {(n, ratio) for r in peers for n, _, ratio in size_rule_ops(dumps[r]) if n == name}
    )
    facts = [
        f"No file for rank {CRASH_RANK}; no rank's file name or pg_config reveals it. The size "
        f"rules do: world all_gather output = {WORLD_SIZE} x input (world size {WORLD_SIZE}), and "
        f"pg {name!r} all_gather output/input = {ratios[0][1] if ratios else '?'} while only "
        f"ranks {ranks_text(peers)} have pg {name!r} in their dumps.",
        f"Ranks {ranks_text(peers)} issued all_reduce pg {name!r} (tp) seq {seq} "
        f"(retired flags: {dict((r, by_seq(dumps[r], name)[seq]['retired']) for r in peers)}).",
        _retired_fact(dumps),
        f"Last entry per rank: {_describe_last_ops(dumps)}.",
    ]
    return Outcome(
        Expected("hung", "dead_rank", (CRASH_RANK,), name, "tp", seq, "all_reduce"),
        facts,
        problems,
    )


STRAGGLER_RANK = 9


def check_straggler(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the straggler: its TP all_reduce is created about the stall later than its peers', and
    the job finished."""
    problems = _all_retired(dumps) + _no_disagreement(dumps) + _size_rules(dumps)
    name = built_name("tp", STRAGGLER_RANK)
    peers = [r for r in members("tp", STRAGGLER_RANK) if r != STRAGGLER_RANK]
    lateness: dict[int, float] = {}
    for seq, e in by_seq(dumps[STRAGGLER_RANK], name).items():
        peer_ns = [int(by_seq(dumps[r], name)[seq]["time_created_ns"]) for r in peers]
        lateness[seq] = (int(e["time_created_ns"]) - statistics.median(peer_ns)) / 1e9
    seq = max(lateness, key=lambda s: lateness[s])
    late = lateness[seq]
    if not STALL_S - 0.5 <= late <= STALL_S + 1.5:
        problems.append(f"rank {STRAGGLER_RANK} is {late:.2f} s late at seq {seq}")
    if op_of(by_seq(dumps[STRAGGLER_RANK], name)[seq]) != "all_reduce":
        problems.append(f"pg {name!r} seq {seq} is not an all_reduce")
    others = sorted(v for s, v in lateness.items() if s != seq)
    if others and max(abs(v) for v in others) > 1.0:
        problems.append(f"rank {STRAGGLER_RANK} is also late elsewhere: {others}")
    events = late_arrivals(dumps, 1.0)
    first = events[0][1:4] if events else None
    if first != (name, seq, STRAGGLER_RANK):
        problems.append(f"the earliest late arrival is {first}, not rank {STRAGGLER_RANK}'s")
    later: dict[str, list[int]] = {}
    for _, g, q, r, _wait in events[1:]:
        later.setdefault(f"pg {g!r} seq {q}", []).append(r)
    facts = [
        f"Rank {STRAGGLER_RANK} created all_reduce pg {name!r} (tp) seq {seq} {late:.2f} s after "
        f"the median of ranks {ranks_text(peers)}; at its other pg {name!r} ops it is within "
        f"{max((abs(v) for v in others), default=0.0) * 1000:.0f} ms. Every entry is retired.",
        "That is the earliest collective at which one rank arrived more than 1 s after all its "
        "peers. Later ones are knock-on waits: "
        + "; ".join(f"{k} (last: rank {ranks_text(v)})" for k, v in sorted(later.items()))
        + " (stage 0 waits for the delayed backward of stage 1, and so on).",
    ]
    return Outcome(
        Expected("slow", "straggler", (STRAGGLER_RANK,), name, "tp", seq, "all_reduce"),
        facts,
        problems,
    )


PP_RANK = 12


def check_pp_recv_missing(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the missing recv: the sender blocks in its send, the receiver hangs before its recv,
    their TP peers wait."""
    name, seq, problems = _not_joined(dumps, PP_RANK, "tp")
    problems += _no_disagreement(dumps) + _size_rules(dumps)
    sender = members("pp", PP_RANK)[0]
    s_name, s_seq, more = _not_joined(dumps, sender, "tp")
    problems += more
    if not _logged(info, sender, "Error at fwd.send step 2 #1"):
        problems.append(f"rank {sender} did not fail in its send of step 2 micro-batch 1")
    if not _logged(info, PP_RANK, "dumped (watchdog", "fwd.recv step 2 #1"):
        problems.append(f"rank {PP_RANK} was not dumped by the watchdog before its recv")
    mine = newest_ns(dumps[PP_RANK])
    older = [r for r, d in dumps.items() if r != PP_RANK and newest_ns(d) <= mine]
    if older:
        problems.append(f"ranks {older} have no entry newer than rank {PP_RANK}'s newest")
    facts = [
        f"Rank {PP_RANK}'s TP peers {ranks_text(r for r in members('tp', PP_RANK) if r != PP_RANK)}"
        f" issued all_reduce pg {name!r} (tp) seq {seq}; rank {PP_RANK}'s pg {name!r} ends at seq "
        f"{seq - 1}. Rank {sender} blocked in its (unrecorded) send to rank {PP_RANK} until it "
        f"timed out, so its TP peers wait for it in all_reduce pg {s_name!r} seq {s_seq} (rank "
        f"{sender} ends at {s_seq - 1}). Rank {PP_RANK}'s newest entry is older than every "
        "other rank's newest.",
        _retired_fact(dumps),
        f"Last entry per rank: {_describe_last_ops(dumps)}.",
    ]
    return Outcome(
        Expected("hung", "not_joined", (PP_RANK,), name, "tp", seq, "all_reduce"),
        facts,
        problems,
    )


DTYPE_RANK = 5


def check_dp_dtype_mismatch(dumps: dict[int, Dump], info: RunInfo) -> Outcome:
    """Check the dtype mismatch: the DP pair disagrees at one seq, in input_dtypes only."""
    problems = _all_retired(dumps) + _size_rules(dumps)
    name = built_name("dp", DTYPE_RANK)
    (partner,) = [r for r in members("dp", DTYPE_RANK) if r != DTYPE_RANK]
    bad = agreement(dumps)
    keys = sorted(bad)
    if len(keys) != 1 or keys[0][0] != name:
        problems.append(f"ranks disagree at {keys}, expected at one seq of pg {name!r} only")
    seq = keys[0][1] if keys else 0
    if bad and set(bad[(name, seq)]) != {"input_dtypes"}:
        problems.append(f"pg {name!r} seq {seq} differs in {sorted(bad[(name, seq)])}")
    mine = by_seq(dumps[DTYPE_RANK], name)
    theirs = by_seq(dumps[partner], name)
    if mine.get(seq, {}).get("input_dtypes") != ["Half"]:
        problems.append(f"rank {DTYPE_RANK}: pg {name!r} seq {seq} is not Half")
    if theirs.get(seq, {}).get("input_dtypes") != ["BFloat16"]:
        problems.append(f"rank {partner}: pg {name!r} seq {seq} is not BFloat16")
    if any(e["input_dtypes"] != ["BFloat16"] for s, e in mine.items() if s != seq):
        problems.append(f"rank {DTYPE_RANK}: another pg {name!r} op is not BFloat16")
    others = []
    for r, d in dumps.items():
        dp = built_name("dp", r)
        if dp != name and by_seq(d, dp).get(seq, {}).get("input_dtypes") != ["BFloat16"]:
            others.append(r)
    if others:
        problems.append(f"ranks {others}: their DP all_reduce seq {seq} is not BFloat16")
    size = mine.get(seq, {}).get("input_sizes")
    facts = [
        f"At all_reduce pg {name!r} (dp) seq {seq} rank {DTYPE_RANK} passes Half {size} while "
        f"rank {partner} passes BFloat16 {size}; every other DP group's seq {seq} and rank "
        f"{DTYPE_RANK}'s earlier seqs are BFloat16. Both ops completed (retired) with garbage.",
    ]
    return Outcome(
        Expected("desync", "mismatch", (DTYPE_RANK,), name, "dp", seq, "all_reduce"),
        facts,
        problems,
    )


# --------------------------------------------------------------------------------------------
# Scenario table.
# --------------------------------------------------------------------------------------------

Check = Callable[[dict[int, Dump], RunInfo], Outcome]


@dataclass(frozen=True)
class Scenario:
    """One sample dump set: the program, the dump format and file names, the story, its check."""

    name: str
    plan: Plan
    fmt: str
    """"pickle", "json" or "gzip" (gzip-compressed pickle)."""
    file_name: Callable[[int], str]
    story: str
    """What the program did and what went wrong (NOTE.md prose)."""
    check: Check
    attempts: int = 1
    """Reruns allowed when the dumps miss a racy fact (unretired entries)."""
    min_timeout_s: float = 0.0

    def timeout_for(self, requested: float) -> float:
        """The process-group timeout to run with: `requested`, at least the scenario's minimum."""
        return max(requested, self.min_timeout_s)


def _pkl(rank: int) -> str:
    return f"rank_{rank}.pkl"


_PROGRAM = """\
16-rank gloo job (torch 2.13.0 CPU, 127.0.0.1), TP=4 x DP=2 x PP=2, global rank =
(pp_stage * 2 + dp_index) * 4 + tp_index. Groups, created in this order on every rank: pg "0"
(default_pg, world); TP pgs "1"-"4" = [0-3], [4-7], [8-11], [12-15] (desc "tp"); DP pgs "5"-"12"
= {0,4}, {1,5}, {2,6}, {3,7}, {8,12}, {9,13}, {10,14}, {11,15} (desc "dp"); PP pgs "13"-"20" =
{0,8}, {1,9}, ..., {7,15} (desc "pp", send/recv only, so never in a gloo dump). Per step, for
each of @MB@ micro-batches a forward (stage 0: TP all_reduce [4, 8], send to the PP peer;
stage 1: recv, TP all_reduce, at micro-batch 1 a TP all_gather_into_tensor [2, 4] -> [8, 4],
recorded as all_gather with output [[4, 2, 4]]),
then the backwards in reverse order (stage 1: TP all_reduce, send; stage 0: recv, TP all_reduce),
then DP all_reduce of two bf16 gradient buckets [96] and [32], at odd steps (1, 3, ...) a world
all_gather of [2] into a list of 16 tensors (recorded output [[16, 2]]), and the world all_reduce
of the loss [1]. @STEPS@ steps@BARRIER@.
Steps and micro-batches are counted from 1 below. pg_config in gloo dumps is unusable; group
membership shows in which ranks' dumps hold a group. gloo records no send/recv (they still use
op_ids), state is always "scheduled" and `retired` is the only completion signal.
"""


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="gloo3d_healthy",
        plan=Plan(),
        fmt="pickle",
        file_name=_pkl,
        story="Nothing goes wrong. Every rank dumps 0.5 s after its program ends.",
        check=check_healthy,
    ),
    Scenario(
        name="gloo3d_mid_step",
        plan=Plan(steps=6, compute_s=0.02, mid_run_dump_at=(2, 1)),
        fmt="pickle",
        file_name=lambda rank: f"comm_lib_trace_rank_{rank}",
        story=(
            "Nothing goes wrong, but the job is dumped while it runs: when rank 0's forward of "
            "step 3 micro-batch 2 begins, it posts a wall time 20 ms ahead and every rank dumps "
            "from a background thread at that time while its main loop goes on with its "
            "collectives (10-40 ms of 'compute' per forward and backward, longer the higher "
            "a rank's TP index, so TP peers wait for each other). No other dump is "
            "written. Which ops are in flight differs from run to run."
        ),
        check=check_mid_step,
        attempts=3,
    ),
    Scenario(
        name="gloo3d_unretired_barrier",
        plan=Plan(final_barrier=True, instant_dump_ranks=frozenset({BARRIER_RANK})),
        fmt="json",
        file_name=lambda rank: f"rank_{rank}.json",
        story=(
            f"Nothing goes wrong. The program ends with a world barrier. Rank {BARRIER_RANK} "
            "dumps the instant its barrier completes, with no settle: it calls "
            "barrier(async_op=True), takes the dump in a callback on the work's future (gloo "
            "completes the future before its worker thread retires the entry) and writes it when "
            "wait() returns; the generator reruns the job until that entry really is unretired. "
            "The others dump 0.5 s later."
        ),
        check=check_unretired_barrier,
        attempts=8,
    ),
    Scenario(
        name="gloo3d_stuck_rank",
        plan=Plan(faults=(Fault(STUCK_RANK, "fwd.tp_all_reduce", 1, 1, "hang"),)),
        fmt="pickle",
        file_name=_pkl,
        story=(
            f"Rank {STUCK_RANK} hangs (sleeps, as if stuck in compute) right before its TP "
            "all_reduce in the forward of step 2, micro-batch 2. Its TP peers time out in that "
            "all_reduce (@TIMEOUT@ s process-group timeout, on every group); the rest of the "
            "job blocks downstream, in DP collectives and in send/recv, which time out too. "
            "Each rank whose op raised dumps 0.5 s later; rank "
            f"{STUCK_RANK} dumps from a watchdog thread once its main thread made no progress "
            "for timeout + 2 s."
        ),
        check=check_stuck_rank,
    ),
    Scenario(
        name="gloo3d_skip_collective",
        plan=Plan(faults=(Fault(SKIP_RANK, "world.all_reduce", 1, 0, "skip"),)),
        fmt="pickle",
        file_name=_pkl,
        story=(
            f"Rank {SKIP_RANK} skips the world all_reduce of the loss at the end of step 2 (a "
            "metrics call behind a rank-dependent condition) and goes on to step 3, where it "
            "blocks in its first TP all_reduce; its TP peers and every other rank block in the "
            f"world all_reduce waiting for rank {SKIP_RANK}. All time out (@TIMEOUT@ s) and dump."
        ),
        check=check_skip_collective,
    ),
    Scenario(
        name="gloo3d_crash",
        plan=Plan(
            faults=(Fault(CRASH_RANK, "fwd.tp_all_reduce", 1, 1, "crash"),),
            crashed=frozenset({CRASH_RANK}),
        ),
        fmt="gzip",
        file_name=lambda rank: f"rank_{rank}.pkl.gz",
        story=(
            f"Rank {CRASH_RANK} (the highest rank, so no gap in the rank numbers shows it) dies "
            "with os._exit right before its TP all_reduce in the forward of step 2, "
            "micro-batch 2, after its recv; it writes no dump. The others error out (connection "
            "closed) or time out (@TIMEOUT@ s) and dump. Before the crash every rank ran a world "
            "all_gather and stage 1 ran TP all_gathers, so sizes reveal the world size and the "
            "size of the crashed rank's TP group."
        ),
        check=check_crash,
    ),
    Scenario(
        name="gloo3d_straggler",
        plan=Plan(faults=(Fault(STRAGGLER_RANK, "fwd.tp_all_reduce", 1, 1, "stall", STALL_S),)),
        fmt="pickle",
        file_name=_pkl,
        story=(
            f"Rank {STRAGGLER_RANK} stalls {STALL_S:.0f} s (sleep) right before its TP all_reduce "
            "in the forward of step 2, micro-batch 2; its TP peers wait for it, and the rest of "
            "the job waits downstream, but the timeout (@TIMEOUT@ s) is well above the stall and "
            "everything completes. Every rank dumps 0.5 s after its program ends."
        ),
        check=check_straggler,
        min_timeout_s=2.5 * STALL_S,
    ),
    Scenario(
        name="gloo3d_pp_recv_missing",
        plan=Plan(faults=(Fault(PP_RANK, "fwd.recv", 1, 0, "hang"),)),
        fmt="pickle",
        file_name=_pkl,
        story=(
            f"Rank {PP_RANK} (stage 1) never posts its recv from rank {members('pp', PP_RANK)[0]} "
            "for the forward of step 2, micro-batch 1: it hangs right before it. Rank "
            f"{members('pp', PP_RANK)[0]} blocks in its unrecorded send, so its TP peers wait "
            f"for it in their next TP all_reduce, and rank {PP_RANK}'s TP peers wait for rank "
            f"{PP_RANK} in theirs; the rest blocks downstream. Collectives and the send time "
            "out (@TIMEOUT@ s, every group) and each rank whose op raised dumps 0.5 s later; "
            f"rank {PP_RANK} dumps from a watchdog thread once its main thread made no progress "
            "for timeout + 2 s."
        ),
        check=check_pp_recv_missing,
    ),
    Scenario(
        name="gloo3d_dp_dtype_mismatch",
        plan=Plan(faults=(Fault(DTYPE_RANK, "dp.all_reduce", 1, 0, "half"),)),
        fmt="pickle",
        file_name=lambda rank: f"nccl_trace_rank_{rank}.pkl",
        story=(
            f"In the DP pair {{{ranks_text(members('dp', DTYPE_RANK))}}} rank {DTYPE_RANK} "
            "all_reduces its first gradient bucket of step 2 as float16 while rank "
            f"{members('dp', DTYPE_RANK)[0]} (and every other rank, and rank {DTYPE_RANK} at "
            "other steps) uses bfloat16: same shape, same bytes, so gloo sums the bits and both "
            "complete with garbage; the job runs to the end and every rank dumps. (A size "
            "mismatch cannot be dumped in a 2-rank gloo group: whichever side posts the smaller "
            "tensor receives more bytes than it posted and gloo aborts that process, "
            "'op.preamble.length <= op.nbytes'.) Finding kind: dtype_mismatch."
        ),
        check=check_dp_dtype_mismatch,
    ),
)
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}


# --------------------------------------------------------------------------------------------
# Parent side: launch, collect, verify, write NOTE.md.
# --------------------------------------------------------------------------------------------


def _warm_up_stack_capture() -> None:
    """Pay the first stack capture's symbolizer set-up (~1.5 s of CPU) once, before forking.

    Forked ranks inherit the warm state; otherwise 16 cold ranks on two cores spend ~15 s in
    their first _dump_fr_trace(includeStackTraces=True).
    """
    from torch.utils._traceback import CapturedTraceback

    CapturedTraceback.format_all([CapturedTraceback.extract(cpp=False)])


def launch(name: str, port: int, folder: str, timeout_s: float, logs_dir: str) -> int:
    """Launcher process: fork the 16 ranks from one warm interpreter, report their exit codes.

    This process has imported torch but started no thread, so forking it is safe; one torch
    import instead of 16 keeps a 16-rank job quick to start on a small machine.
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
            finally:
                os._exit(70)  # run_worker leaves with os._exit; this is never reached normally
        ranks[pid] = rank
    codes: dict[int, int] = {}
    while ranks:
        pid, status = os.waitpid(-1, 0)
        codes[ranks.pop(pid)] = os.waitstatus_to_exitcode(status)
    print(json.dumps(codes), flush=True)
    return 0


def _set_worker_env() -> None:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"  # on by default in 2.13; explicit for older ones
    if any(name == "lo" for _, name in socket.if_nameindex()):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # keep gloo on 127.0.0.1


def run_ranks(
    script: Path, name: str, folder: Path, timeout_s: float, world_size: int
) -> tuple[dict[int, int | None], dict[int, list[str]], list[str], float]:
    """Run one attempt of scenario `name` of a generator `script`: a TCPStore here, the
    script's launcher (`--launch`) forking the ranks in a session of its own, killed with
    them past the deadline. Returns each rank's exit code (None: unknown), its log lines, the
    problems met and the seconds taken."""
    problems: list[str] = []
    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=STORE_TIMEOUT
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as logs_dir:
        argv = [sys.executable, str(script.resolve()), "--launch", name]
        argv += ["--store-port", str(store.port), "--folder", str(folder)]
        argv += ["--timeout", str(timeout_s), "--logs", logs_dir]
        # A session of its own, so that a run past its deadline can be killed with its ranks.
        launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, _ = launcher.communicate(timeout=4 * timeout_s + 90)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            out, _ = launcher.communicate()
            problems.append("killed after the scenario deadline")
        report = out.strip().splitlines()[-1:] if out else []
        codes: dict[int, int | None] = dict.fromkeys(range(world_size))
        if report and report[0].startswith("{"):
            codes.update({int(k): v for k, v in json.loads(report[0]).items()})
        lines_of: dict[int, list[str]] = {}
        for rank in range(world_size):
            path = Path(logs_dir) / f"rank_{rank}.log"
            lines_of[rank] = path.read_text(errors="replace").splitlines() if path.exists() else []
    elapsed = time.monotonic() - started
    del store
    return codes, lines_of, problems, elapsed


def run_once(scenario: Scenario, folder: Path, timeout_s: float) -> list[str]:
    """Run one attempt of a scenario; returns the problems found."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    timeout_s = scenario.timeout_for(timeout_s)
    codes, lines_of, problems, elapsed = run_ranks(
        Path(__file__), scenario.name, folder, timeout_s, WORLD_SIZE
    )
    logs: dict[int, list[str]] = {}
    for rank, lines in lines_of.items():
        logs[rank] = [ln for ln in lines if ln.startswith(f"rank {rank}:")]
        want = CRASH_EXIT if rank in scenario.plan.crashed else 0
        if codes[rank] != want:
            problems.append(f"rank {rank}: exit status {codes[rank]}")
            logs[rank] += lines[-10:]
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
    if missing != set(scenario.plan.crashed):
        want_missing = sorted(scenario.plan.crashed)
        problems.append(f"missing dumps {sorted(missing)}, expected {want_missing}")
    info = RunInfo(codes, logs, missing)
    outcome = Outcome(Expected("?"))
    if not problems:
        problems += check_structure(dumps, scenario.plan.crashed)
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


def note_text(scenario: Scenario, outcome: Outcome, info: RunInfo, timeout_s: float) -> str:
    """The NOTE.md of a generated dump set: program, story, files, expected answer and facts."""
    plan = scenario.plan
    program = _PROGRAM.replace("@MB@", str(plan.micro_batches)).replace("@STEPS@", str(plan.steps))
    program = program.replace("@BARRIER@", ", then a world barrier" if plan.final_barrier else "")
    story = scenario.story.replace("@TIMEOUT@", f"{timeout_s:g}")
    files = {
        "pickle": "_dump_fr_trace(includeCollectives=True, includeStackTraces=True, "
        "onlyActive=False)",
        "json": "_dump_fr_trace_json(includeCollectives=True, onlyActive=False)",
        "gzip": "gzip of _dump_fr_trace(includeCollectives=True, includeStackTraces=True, "
        "onlyActive=False)",
    }[scenario.fmt]
    names = f"{scenario.file_name(0)} ... {scenario.file_name(WORLD_SIZE - 1)}"
    if plan.crashed:
        names += f" (no file for rank {ranks_text(plan.crashed)})"
    raised = _raised(info)
    by_exc: dict[str, list[int]] = {}
    for rank, text in raised.items():
        kind = text.split(" at ")[0]
        reason = "timeout" if "imed out" in text or "Timed out" in text else "error"
        if "Connection closed" in text or "Connection reset" in text:
            reason = "peer connection closed"
        by_exc.setdefault(f"{kind} ({reason})", []).append(rank)
    remark = {
        "pickle": "",
        "json": " JSON dumps carry no stack frames.",
        "gzip": " Each file is a gzip-compressed pickle.",
    }[scenario.fmt]
    paragraphs = [
        story,
        f"Files: {names}; {files}.{remark}",
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
    lines.append("What the dumps show (checked by tools/make_gloo3d_samples.py):")
    for fact in outcome.facts:
        lines += textwrap.wrap(
            fact, NOTE_WIDTH, initial_indent="- ", subsequent_indent="  ", break_on_hyphens=False
        )
    lines += ["", outcome.expected.line(), ""]
    return "\n".join(lines)


class _Runnable(Protocol):
    """What `drive` needs of a scenario (read-only: the scenarios are frozen dataclasses)."""

    @property
    def name(self) -> str: ...
    @property
    def attempts(self) -> int: ...


def drive(
    argv: list[str] | None,
    doc: str | None,
    scenarios: Sequence[_Runnable],
    run_once: Callable[[Any, Path, float], list[str]],
    launch: Callable[[str, int, str, float, str], int],
    default_timeout_s: float,
) -> int:
    """The command line of a real-job sample generator (this one and make_shape_samples.py):
    run the scenarios asked for, each retried up to its `attempts` when its checks fail, or,
    with the internal `--launch`, be the launcher of one run's ranks."""
    by_name = {s.name: s for s in scenarios}
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path("sample_dumps"), help="output root (default: %(default)s)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(by_name),
        help="run just this scenario (repeatable); default: all",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=default_timeout_s,
        help="process-group timeout in seconds (default: %(default)s)",
    )
    # Internal: how the parent starts the launcher of one run's ranks.
    parser.add_argument("--launch", choices=sorted(by_name), help=argparse.SUPPRESS)
    parser.add_argument("--store-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--logs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.launch is not None:
        return launch(args.launch, args.store_port, args.folder, args.timeout, args.logs)
    _set_worker_env()
    failed = False
    started = time.monotonic()
    for name in args.only or [s.name for s in scenarios]:
        print(f"{name}:", flush=True)
        scenario = by_name[name]
        problems: list[str] = []
        for attempt in range(1, scenario.attempts + 1):
            problems = run_once(scenario, args.out / scenario.name, args.timeout)
            if not problems or attempt == scenario.attempts:
                break
            for problem in problems:
                print(f"    retrying after: {problem}")
        for problem in problems:
            print(f"    PROBLEM: {problem}")
        failed = failed or bool(problems)
        print(f"    {'FAILED' if problems else 'ok'}", flush=True)
    print(f"total {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Generate the scenarios asked for on the command line; returns the exit status."""
    return drive(argv, __doc__, SCENARIOS, run_once, launch, DEFAULT_TIMEOUT_S)


if __name__ == "__main__":
    sys.exit(main())
