"""Real gloo jobs whose dumps test how fr-analyze dates a dump (issue: file times are not dump
times), and a measurement of a dump's own latency: the time between the call that takes the
snapshot and the file being written, with and without stack traces.

Each scenario is a 4-rank gloo job on 127.0.0.1 (timeout 5 s) that runs a few all_reduce
steps, then at one step:

- `healthy_inflight_stacks`: ranks 0-2 issue the step's all_reduce asynchronously and dump at
  once with stack traces while rank 3 is still 2 s away from joining: the op is in flight in
  their snapshots. The job then finishes. Right answer: ok.
- `hung_not_joined_stacks`: rank 3 never issues the step's all_reduce (it sleeps past the
  timeout); ranks 0-2 time out (gloo retires the op with an error) and dump with stack traces;
  rank 3 dumps when it wakes. Right answer: hung, rank 3 never joined all_reduce #N of the
  world group.

Every rank writes `rank_<N>` (pickle) and `timing.json`: for each rank, the snapshot call's
start (`snapshot_ns`), when the file was written (`written_ns`, its modification time), and a
second dump's latency taken without stack traces. The tests restore these times with
`os.utime` (git keeps none).

    .venv/bin/python tools/make_dating_samples.py --out tests/data/dating

Standard library and torch only; every rank is killed by its pid after a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy checks this script as a module of the `tools` package
    from tools.torch_job import run_ranks
else:
    from torch_job import run_ranks  # a sibling: the script runs by its path

WORLD_SIZE = 4
TIMEOUT_S = 5.0
STEPS = 4  # the fault is at the last one
SCENARIOS = ("healthy_inflight_stacks", "hung_not_joined_stacks")


def _dump(stacks: bool) -> bytes:
    import torch

    c10d = torch._C._distributed_c10d
    raw: bytes = c10d._dump_fr_trace(  # type: ignore[attr-defined, unused-ignore]
        includeCollectives=True, includeStackTraces=stacks, onlyActive=False
    )
    return raw


def _write(folder: Path, rank: int, stacks: bool) -> dict[str, int]:
    """Dump (the snapshot is taken when the call starts), write the file, and say when."""
    snapshot_ns = time.time_ns()
    data = _dump(stacks)
    target = folder / f"rank_{rank}"
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(data)
    partial.replace(target)
    return {"snapshot_ns": snapshot_ns, "written_ns": target.stat().st_mtime_ns}


def run_worker(scenario: str, rank: int, store_port: int, folder: Path) -> int:
    """One rank of `scenario`: its steps, its dump, its timing line."""
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", store_port, is_master=False, timeout=timedelta(60))
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=TIMEOUT_S)
    )
    x = torch.ones(1024)
    for _ in range(STEPS - 1):
        dist.all_reduce(x)
    times: dict[str, Any] = {}
    if scenario == "healthy_inflight_stacks":
        if rank == 3:
            time.sleep(2.0)
            dist.all_reduce(x)
        else:
            work = dist.all_reduce(x, async_op=True)
            times = _write(folder, rank, stacks=True)
            work.wait()
        # no collective after the dump: symbolizing stacks takes longer than the timeout
    else:
        if rank == 3:
            time.sleep(TIMEOUT_S + 8)  # never issues the step's all_reduce
        else:
            try:
                dist.all_reduce(x)
            except Exception as exc:  # the timeout this scenario is about
                print(f"rank {rank}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        times = _write(folder, rank, stacks=True)
    if rank == 3 and scenario == "healthy_inflight_stacks":
        times = _write(folder, rank, stacks=True)
    # the latency without stack traces, on a scratch file
    started = time.time_ns()
    _dump(False)
    times["no_stacks_latency_ns"] = time.time_ns() - started
    (folder / f"timing_{rank}.json").write_text(json.dumps(times))
    store.set(f"done_{rank}", "1")
    # stay until every rank has dumped: a rank that leaves early closes gloo's pairs
    for other in range(WORLD_SIZE):
        store.wait([f"done_{other}"], timedelta(seconds=90))
    os._exit(0)  # gloo's pairs of a timed-out group do not shut down cleanly


def run_scenario(scenario: str, out: Path) -> list[str]:
    """Run one scenario's ranks, gather their times into timing.json; the problems seen."""
    import torch.distributed as dist

    folder = out / scenario
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", scenario]
    argv += ["--store-port", str(store.port), "--out", str(folder)]
    problems: list[str] = run_ranks(argv, WORLD_SIZE, 4 * TIMEOUT_S + 60)
    ranks: dict[str, Any] = {}
    for rank in range(WORLD_SIZE):
        part = folder / f"timing_{rank}.json"
        if part.exists():
            ranks[str(rank)] = json.loads(part.read_text())
            part.unlink()
        else:
            problems.append(f"rank {rank}: no timing")
    (folder / "timing.json").write_text(json.dumps(ranks, indent=1, sort_keys=True) + "\n")
    return problems


def main(argv: list[str] | None = None) -> int:
    """`--out DIR` runs every scenario; the internal `--worker` runs one rank."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--worker", choices=SCENARIOS)
    p.add_argument("--store-port", type=int)
    p.add_argument("--rank", type=int)
    p.add_argument("--only", choices=SCENARIOS)
    args = p.parse_args(argv)
    if args.worker:
        return run_worker(args.worker, args.rank, args.store_port, args.out)
    problems: list[str] = []
    for scenario in SCENARIOS:
        if args.only in (None, scenario):
            print(f"{scenario}:", flush=True)
            problems += run_scenario(scenario, args.out)
    for line in problems:
        print(f"  problem: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
