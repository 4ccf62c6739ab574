"""Generate small, real per-rank PyTorch profiler (Chrome/Kineto) traces for ``merge-traces``.

A 4-process gloo job on 127.0.0.1 trains a tiny two-layer model for a few steps under
``torch.profiler.profile`` (CPU activity only, ``schedule(wait=1, warmup=1, active=4)``, one
``prof.step()`` per step, so ``ProfilerStep#N`` spans appear). Each step does a forward pass of
a few matmuls, a backward pass, an ``all_reduce`` of every gradient and a ``broadcast`` of the
first weight from rank 0. Every rank exports its Chrome trace to
``<out>/gloo_4rank/trace_rank<N>.json`` (rank 3 as ``trace_rank3.json.gz``, to exercise gzip) and
then dumps its Flight Recorder buffer (pickle) to ``<out>/gloo_4rank_fr/rank_<N>.pkl``, so the
same job's FR timeline can be overlaid on the merged trace.

The parent process hosts the rendezvous store, launches the ranks, then reloads every file with
plain json / gzip / pickle and checks the basics (ProfilerStep spans, gloo collectives, rank in
``distributedInfo``, FR entries, FR ``time_created_ns`` inside the matching profiled ``c10d::*``
op, i.e. both on one clock), exiting 1 if something is off.

It needs torch (2.13.0, CPU) in the interpreter that runs it; fr-analyze itself never imports
torch::

    python3.11 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchvenv/bin/python tools/make_profiler_traces.py --out tests/data/traces
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pickle
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

if TYPE_CHECKING:  # mypy checks this script as a module of the `tools` package
    from tools.torch_job import run_ranks
else:
    from torch_job import run_ranks  # a sibling: the script runs by its path

WORLD_SIZE = 4
STEPS = 6
WAIT, WARMUP, ACTIVE = 1, 1, 4
TRACE_DIR = "gloo_4rank"
FR_DIR = "gloo_4rank_fr"
GZIP_RANK = 3
PG_TIMEOUT = timedelta(seconds=30)
STORE_TIMEOUT = timedelta(seconds=60)
# gloo completes a work's future before its worker thread retires the flight-recorder entry;
# a short pause before dumping lets the last entries retire.
SETTLE_S = 0.5
MAX_TRACE_BYTES = 150 * 1024
# FR time_created_ns must fall inside the profiled c10d op (same clock), give or take this.
CLOCK_SLACK_NS = 1_000
# Every step: one all_reduce per gradient (2 weights) and one broadcast.
COLLECTIVES_PER_STEP = 3


def trace_name(rank: int) -> str:
    """File name of one rank's exported Chrome trace."""
    return f"trace_rank{rank}.json.gz" if rank == GZIP_RANK else f"trace_rank{rank}.json"


def fr_name(rank: int) -> str:
    """File name of one rank's Flight Recorder dump."""
    return f"rank_{rank}.pkl"


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


def train(rank: int, prof: profile) -> None:
    """The tiny deterministic training loop every rank runs (calls ``prof.step()`` per step)."""
    gen = torch.Generator().manual_seed(1234)
    w1 = torch.randn(16, 32, generator=gen).requires_grad_()
    w2 = torch.randn(32, 8, generator=gen).requires_grad_()
    data = torch.randn(STEPS, 4, 16, generator=torch.Generator().manual_seed(rank))
    for step in range(STEPS):
        hidden = torch.relu(data[step] @ w1)
        loss = (hidden @ w2).square().mean()
        loss.backward()
        with torch.no_grad():
            for weight in (w1, w2):
                assert weight.grad is not None
                dist.all_reduce(weight.grad)
                weight.grad /= WORLD_SIZE
                weight -= 0.01 * weight.grad
                weight.grad = None
            # Keep rank 0's copy authoritative (what a DDP-style sync of buffers would do).
            dist.broadcast(w1, src=0)
        prof.step()


def _store_barrier(store: Any, key: str, deadline: float) -> bool:
    """Wait until WORLD_SIZE ranks have reached `key` (or the deadline passed)."""
    store.add(key, 1)
    while store.add(key, 0) < WORLD_SIZE:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_worker(rank: int, store_port: int, out_dir: Path) -> int:
    """Run one rank: profile the training loop, export the trace, dump Flight Recorder."""
    torch.manual_seed(0)
    torch.set_num_threads(1)  # fewer intra-op threads, fewer trace rows, same on every host
    deadline = time.monotonic() + 120
    store = dist.TCPStore("127.0.0.1", store_port, is_master=False, timeout=STORE_TIMEOUT)
    _store_barrier(store, "started", deadline)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=WORLD_SIZE, timeout=PG_TIMEOUT
    )
    trace_path = out_dir / TRACE_DIR / trace_name(rank)
    exported: list[Path] = []

    def on_trace_ready(prof: profile) -> None:
        prof.export_chrome_trace(str(trace_path))  # a ".gz" suffix makes torch gzip it
        exported.append(trace_path)

    status = 0
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE),
        on_trace_ready=on_trace_ready,
        record_shapes=False,
        profile_memory=False,
        with_stack=False,
    ) as prof:
        train(rank, prof)
    if not exported:
        print(f"rank {rank}: the profiler never called on_trace_ready", flush=True)
        status = 2
    time.sleep(SETTLE_S)
    c10d = torch._C._distributed_c10d  # its private Flight Recorder dumps are not in the stubs
    raw: bytes = c10d._dump_fr_trace(  # type: ignore[attr-defined, unused-ignore]
        includeCollectives=True, includeStackTraces=True, onlyActive=False
    )
    (out_dir / FR_DIR / fr_name(rank)).write_bytes(raw)
    if not _store_barrier(store, "dumped", deadline):
        print(f"rank {rank}: gave up waiting for the other ranks", flush=True)
    return status


# --------------------------------------------------------------------------------------------
# Parent side: launch, collect, verify.
# --------------------------------------------------------------------------------------------


def load_trace(path: Path) -> dict[str, Any]:
    """Read one exported trace with the standard library only (.json or .json.gz)."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    loaded = json.loads(data)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: top level is {type(loaded).__name__}, not dict")
    return loaded


def check_trace(rank: int, trace: dict[str, Any], size: int) -> list[str]:
    """Problems with one rank's reloaded trace (empty when it looks as expected)."""
    problems = []
    info = trace.get("distributedInfo", {})
    if info.get("rank") != rank or info.get("world_size") != WORLD_SIZE:
        problems.append(f"rank {rank}: distributedInfo is {info!r}")
    events = trace.get("traceEvents", [])
    steps = sorted(e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    expected_steps = [f"ProfilerStep#{n}" for n in range(WAIT + WARMUP, STEPS)]
    if steps != expected_steps:
        problems.append(f"rank {rank}: profiler steps {steps}, expected {expected_steps}")
    gloo = [e for e in events if str(e.get("name", "")).startswith("gloo:")]
    if len(gloo) < ACTIVE * COLLECTIVES_PER_STEP:
        problems.append(f"rank {rank}: only {len(gloo)} gloo:* events")
    if size > MAX_TRACE_BYTES:
        problems.append(f"rank {rank}: trace is {size} bytes uncompressed")
    return problems


def check_fr(rank: int, dump: dict[str, Any], trace: dict[str, Any] | None) -> list[str]:
    """Problems with one rank's reloaded Flight Recorder dump, and with its clock vs the trace.

    Each profiled ``c10d::*`` op (in time order) must contain the ``time_created_ns`` of the FR
    entry of the same collective: the FR and the profiler read the same wall clock, with
    ``absolute_ns = baseTimeNanoseconds + ts_us * 1000``.
    """
    entries = dump.get("entries", [])
    expected = STEPS * COLLECTIVES_PER_STEP
    if len(entries) != expected:
        return [f"rank {rank}: {len(entries)} FR entries, expected {expected}"]
    if not all(e["retired"] for e in entries):
        return [f"rank {rank}: some FR entry is not retired"]
    if trace is None:
        return []
    base = int(trace["baseTimeNanoseconds"])
    ops = sorted(
        (e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("c10d::")),
        key=lambda e: float(e["ts"]),
    )
    profiled = entries[(WAIT + WARMUP) * COLLECTIVES_PER_STEP :]
    if len(ops) != len(profiled):
        return [f"rank {rank}: {len(ops)} c10d ops in the trace, {len(profiled)} in FR"]
    problems = []
    for op, entry in zip(ops, profiled, strict=True):
        start = base + round(float(op["ts"]) * 1000)
        end = start + round(float(op["dur"]) * 1000)
        created = int(entry["time_created_ns"])
        if not start - CLOCK_SLACK_NS <= created <= end + CLOCK_SLACK_NS:
            seq = entry["collective_seq_id"]
            problems.append(f"rank {rank}: FR seq {seq} created outside its {op['name']} span")
    return problems


def run_job(out_dir: Path) -> list[str]:
    """Launch the 4 ranks, wait for them, and return the problems found in their output."""
    for sub in (TRACE_DIR, FR_DIR):
        shutil.rmtree(out_dir / sub, ignore_errors=True)
        (out_dir / sub).mkdir(parents=True)
    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=STORE_TIMEOUT
    )
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    argv += ["--store-port", str(store.port), "--out", str(out_dir)]
    started = time.monotonic()
    problems = run_ranks(argv, WORLD_SIZE, 180)
    del store
    for rank in range(WORLD_SIZE):
        path = out_dir / TRACE_DIR / trace_name(rank)
        trace: dict[str, Any] | None = None
        try:
            trace = load_trace(path)
            raw = path.read_bytes()
            size = len(gzip.decompress(raw) if path.suffix == ".gz" else raw)
            problems += check_trace(rank, trace, size)
            events = len(trace["traceEvents"])
            print(f"    {path.name}: {events} events, {size / 1024:.1f} KiB uncompressed")
        except Exception as exc:
            problems.append(f"rank {rank}: cannot load {path.name}: {exc}")
        try:
            dump = pickle.loads((out_dir / FR_DIR / fr_name(rank)).read_bytes())
            problems += check_fr(rank, dump, trace)
        except Exception as exc:
            problems.append(f"rank {rank}: cannot check {fr_name(rank)}: {exc}")
    print(f"    {time.monotonic() - started:.1f} s")
    return problems


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: `--out`, and the internal worker options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("tests/data/traces"),
        help="output root (default: %(default)s)",
    )
    # Internal: how the parent starts one rank.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store-port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the job and check its traces (or, with the internal `--worker`, be one rank); returns the
    exit status."""
    args = parse_args(argv)
    if args.worker:
        status = run_worker(args.rank, args.store_port, args.out)
        sys.stdout.flush()
        # Skip interpreter teardown: destroying a gloo group whose peers are gone can block.
        os._exit(status)
    print(f"{TRACE_DIR} + {FR_DIR}:", flush=True)
    problems = run_job(args.out)
    for problem in problems:
        print(f"    PROBLEM: {problem}")
    print(f"    {'FAILED' if problems else 'ok'}", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
