"""Generate small, real gloo Flight Recorder dump sets for fr-analyze's tests and demos.

Each scenario runs a 4-process gloo job on 127.0.0.1 with PyTorch's flight recorder on, lets the
program misbehave in one precise way (or not at all), and has every rank write its own dump into
``<out>/<scenario>/`` together with a ``NOTE.md`` that states the expected verdict. The parent
process hosts the rendezvous store, so a rank that dies cannot take the others' coordination with
it; afterwards it reloads every file with plain pickle / json / gzip and checks that the dumps
really show what the scenario's NOTE.md claims, exiting 1 if they do not.

It needs torch (2.13.0, CPU) in the interpreter that runs it; fr-analyze itself never imports
torch::

    python3.11 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0
    /tmp/torchvenv/bin/python tools/make_gloo_samples.py --out sample_dumps
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
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:  # mypy checks this script as a module of the `tools` package
    from tools.torch_job import run_ranks
else:
    from torch_job import run_ranks  # a sibling: the script runs by its path

WORLD_SIZE = 4
DEFAULT_TIMEOUT_S = 5.0
STORE_TIMEOUT = timedelta(seconds=60)
# gloo completes a work's future before its worker thread retires the flight-recorder entry, so
# a rank that dumps the instant its last collective returns may catch that entry unretired. A
# short pause makes the dumps reproducible.
SETTLE_S = 0.5

WORLD_PG = "0"
PAIR_01_PG = "1"
PAIR_23_PG = "2"

Dump = dict[str, Any]
Program = Callable[[int, timedelta], None]
Check = Callable[[dict[int, Dump]], list[str]]


# --------------------------------------------------------------------------------------------
# The programs each rank runs. Tensor sizes and values are fixed so reruns give equivalent
# dumps; only timestamps, thread ids and file paths in stack frames change.
# --------------------------------------------------------------------------------------------


def _pair_group(rank: int, timeout: timedelta, descs: tuple[str | None, str | None]) -> Any:
    """Create the subgroups {0, 1} and {2, 3} (every rank, same order); return this rank's."""
    first = dist.new_group([0, 1], timeout=timeout, group_desc=descs[0])
    second = dist.new_group([2, 3], timeout=timeout, group_desc=descs[1])
    return first if rank < 2 else second


def run_healthy(rank: int, timeout: timedelta) -> None:
    """A realistic mix of world and subgroup collectives, all of which complete."""
    world = WORLD_SIZE
    pair = _pair_group(rank, timeout, (None, None))
    pair_root = 0 if rank < 2 else 2
    for step in range(3):
        dist.all_reduce(torch.full((16,), float(rank + step)))
    weights = torch.arange(8, dtype=torch.float32) if rank == 0 else torch.zeros(8)
    dist.broadcast(weights, src=0)
    dist.all_gather([torch.empty(4) for _ in range(world)], torch.full((4,), float(rank)))
    dist.all_gather_into_tensor(torch.empty(world * 4), torch.full((4,), float(rank)))
    dist.reduce_scatter_tensor(torch.empty(4), torch.ones(world * 4))
    dist.reduce_scatter(torch.empty(2), [torch.full((2,), float(i)) for i in range(world)])
    dist.reduce(torch.tensor([float(rank)]), dst=0)
    gather_list = [torch.empty(2) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.full((2,), float(rank)), gather_list, dst=0)
    scatter_list = [torch.full((2,), float(i)) for i in range(world)] if rank == 0 else None
    dist.scatter(torch.empty(2), scatter_list, src=0)
    dist.all_to_all_single(torch.empty(world * 2), torch.arange(world * 2.0) + 100 * rank)
    # Uneven splits: rank r sends j + 1 elements to rank j, so it receives r + 1 from each.
    dist.all_to_all_single(
        torch.empty(world * (rank + 1)),
        torch.ones(sum(range(1, world + 1))),
        output_split_sizes=[rank + 1] * world,
        input_split_sizes=[j + 1 for j in range(world)],
    )
    dist.all_reduce(torch.ones(4, dtype=torch.bfloat16))
    dist.all_reduce(torch.tensor([rank], dtype=torch.int64))
    dist.all_reduce_coalesced([torch.ones(2), torch.ones(3)])
    dist.barrier()
    for _ in range(2):
        dist.all_reduce(torch.full((6,), float(rank)), group=pair)
    dist.broadcast(torch.ones(6), src=pair_root, group=pair)
    dist.all_reduce(torch.ones(16))
    dist.barrier()


def run_skip_collective(rank: int, timeout: timedelta) -> None:
    """Rank 2 leaves the training loop one step early (uneven inputs); the others hang."""
    for step in range(4):
        if rank == 2 and step == 3:
            return
        dist.all_reduce(torch.full((16,), float(rank + step)))


def run_size_mismatch(rank: int, timeout: timedelta) -> None:
    """Rank 1 all-reduces a 4-element tensor at the last step while the others use 8."""
    # Rank 1's tensor is the smaller one on purpose: a peer receiving more bytes than it posted
    # makes gloo's I/O thread abort the whole process, which could then not dump.
    for step in range(3):
        numel = 4 if rank == 1 and step == 2 else 8
        dist.all_reduce(torch.full((numel,), 1.0))


def run_op_mismatch(rank: int, timeout: timedelta) -> None:
    """At the last step rank 3 calls all_gather while ranks 0, 1 and 2 call all_reduce."""
    for step in range(3):
        grad = torch.full((8,), float(rank))
        if rank == 3 and step == 2:
            dist.all_gather([torch.empty(8) for _ in range(WORLD_SIZE)], grad)
        else:
            dist.all_reduce(grad)


def run_subgroup_desync(rank: int, timeout: timedelta) -> None:
    """Rank 3 skips its third all_reduce on subgroup {2, 3} and stops; rank 2 hangs in it."""
    pair = _pair_group(rank, timeout, ("pair_0_1", "pair_2_3"))
    for step in range(3):
        dist.all_reduce(torch.full((8,), float(step)))
        if rank == 3 and step == 2:
            return
        dist.all_reduce(torch.full((4,), float(rank)), group=pair)


# --------------------------------------------------------------------------------------------
# Checks run by the parent on the reloaded dumps: each returns the ways the dumps disagree with
# the scenario's NOTE.md (empty when they agree).
# --------------------------------------------------------------------------------------------


def _by_seq(dump: Dump, group: str) -> dict[int, Dump]:
    """Entries of one process group in a dump, keyed by collective sequence id."""
    return {
        int(e["collective_seq_id"]): e
        for e in dump.get("entries", [])
        if e["process_group"][0] == group
    }


def _last_seq(dump: Dump, group: str) -> int:
    return max(_by_seq(dump, group), default=0)


def _expect_last_seqs(dumps: dict[int, Dump], group: str, expected: dict[int, int]) -> list[str]:
    problems = []
    for rank, seq in expected.items():
        got = _last_seq(dumps[rank], group)
        if got != seq:
            problems.append(f"rank {rank}: group {group!r} ends at seq {got}, expected {seq}")
    return problems


def _expect_field(
    dumps: dict[int, Dump], group: str, seq: int, field: str, expected: dict[int, Any]
) -> list[str]:
    problems = []
    for rank, value in expected.items():
        entry = _by_seq(dumps[rank], group).get(seq)
        got = None if entry is None else entry[field]
        if got != value:
            problems.append(f"rank {rank}: group {group!r} seq {seq} {field} = {got!r}")
    return problems


def _expect_desc(dumps: dict[int, Dump], group: str, ranks: range, desc: str) -> list[str]:
    problems = []
    for rank in ranks:
        descs = {e["process_group"][1] for e in _by_seq(dumps[rank], group).values()}
        if descs != {desc}:
            problems.append(f"rank {rank}: group {group!r} has descs {descs}, expected {desc!r}")
    return problems


HEALTHY_WORLD_OPS = 22
HEALTHY_PAIR_OPS = 3


def check_healthy(dumps: dict[int, Dump]) -> list[str]:
    """Problems with the healthy dumps: the last seqs and descs of the world and pair groups, the
    same world ops on every rank."""
    pairs = HEALTHY_PAIR_OPS
    problems = _expect_last_seqs(dumps, WORLD_PG, dict.fromkeys(range(4), HEALTHY_WORLD_OPS))
    problems += _expect_last_seqs(dumps, PAIR_01_PG, {0: pairs, 1: pairs, 2: 0, 3: 0})
    problems += _expect_last_seqs(dumps, PAIR_23_PG, {0: 0, 1: 0, 2: pairs, 3: pairs})
    problems += _expect_desc(dumps, WORLD_PG, range(4), "default_pg")
    problems += _expect_desc(dumps, PAIR_01_PG, range(2), "undefined")
    problems += _expect_desc(dumps, PAIR_23_PG, range(2, 4), "undefined")
    op_lists = [
        [e["profiling_name"] for e in _by_seq(d, WORLD_PG).values()] for d in dumps.values()
    ]
    if any(ops != op_lists[0] for ops in op_lists):
        problems.append("ranks disagree on the world group's op sequence")
    for rank, dump in dumps.items():
        if not all(e["retired"] for e in dump["entries"]):
            problems.append(f"rank {rank}: some entry is not retired")
    return problems


def check_skip_collective(dumps: dict[int, Dump]) -> list[str]:
    """Problems with gloo_skip_collective's dumps: rank 2 ends one world seq short, the others at an
    all_reduce."""
    problems = _expect_last_seqs(dumps, WORLD_PG, {0: 4, 1: 4, 2: 3, 3: 4})
    problems += _expect_field(dumps, WORLD_PG, 4, "profiling_name", {0: "gloo:all_reduce"})
    return problems


def check_size_mismatch(dumps: dict[int, Dump]) -> list[str]:
    """Problems with gloo_size_mismatch's dumps: rank 1's world all_reduce at seq 3 is [[4]], the
    others' [[8]]."""
    problems = _expect_last_seqs(dumps, WORLD_PG, dict.fromkeys(range(4), 3))
    sizes = {0: [[8]], 1: [[4]], 2: [[8]], 3: [[8]]}
    problems += _expect_field(dumps, WORLD_PG, 3, "input_sizes", sizes)
    return problems


def check_op_mismatch(dumps: dict[int, Dump]) -> list[str]:
    """Problems with gloo_op_mismatch: rank 3 all_gathers at world seq 3, the others all_reduce."""
    problems = _expect_last_seqs(dumps, WORLD_PG, dict.fromkeys(range(4), 3))
    names = dict.fromkeys(range(3), "gloo:all_reduce") | {3: "gloo:all_gather"}
    problems += _expect_field(dumps, WORLD_PG, 3, "profiling_name", names)
    return problems


def check_subgroup_desync(dumps: dict[int, Dump]) -> list[str]:
    """Problems with gloo_subgroup_desync's dumps: rank 3 ends one seq short on pair {2,3}, the
    descs as named."""
    problems = _expect_last_seqs(dumps, WORLD_PG, dict.fromkeys(range(4), 3))
    problems += _expect_last_seqs(dumps, PAIR_01_PG, {0: 3, 1: 3, 2: 0, 3: 0})
    problems += _expect_last_seqs(dumps, PAIR_23_PG, {0: 0, 1: 0, 2: 3, 3: 2})
    problems += _expect_desc(dumps, PAIR_01_PG, range(2), "pair_0_1")
    problems += _expect_desc(dumps, PAIR_23_PG, range(2, 4), "pair_2_3")
    return problems


# --------------------------------------------------------------------------------------------
# Scenario table.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One dump set: the program every rank runs, how its files are named, what it shows."""

    name: str
    """Folder name under the output directory."""
    program: Program
    """Run by every rank after init_process_group; a fault surfaces as an exception."""
    fmt: str
    """"pickle", "json" or "gzip" (gzip-compressed pickle)."""
    file_name: Callable[[int], str]
    """Dump file name for a global rank."""
    note: str
    """Text of NOTE.md: what the program did, what is wrong, the expected verdict."""
    check: Check
    """Compares the reloaded dumps (rank -> dump) with the note."""


def _node_name(rank: int) -> str:
    return f"nccl_trace_rank_container-node{7 + rank // 2:02d}_{rank}"


_HEALTHY_NOTE = """\
4-rank gloo job (torch 2.13.0 CPU); @FILES@. World pg "0" (desc "default_pg"): all_reduce x3,
broadcast, all_gather (list), all_gather_into_tensor, reduce_scatter_tensor, reduce_scatter (list,
recorded as 4 all_reduce), reduce, gather, scatter, all_to_all_single (even, uneven), bf16 + int64
all_reduce, all_reduce_coalesced, barrier, later all_reduce + barrier; pair subgroups pg "1" = {0,1}
and pg "2" = {2,3} (desc "undefined"): all_reduce x2 + broadcast. Nothing is wrong.
Every op completed (pg "0" seq 1-22 on all ranks, pg "1"/"2" seq 1-3 on their pairs).
EXPECTED: status=ok root=- culprits=- group=- desc=- seq=- op=-
"""

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="gloo_healthy",
        program=run_healthy,
        fmt="pickle",
        file_name=lambda rank: f"rank_{rank}.pkl",
        note=_HEALTHY_NOTE.replace("@FILES@", "files rank_<N>.pkl (_dump_fr_trace)"),
        check=check_healthy,
    ),
    Scenario(
        name="gloo_healthy_json",
        program=run_healthy,
        fmt="json",
        file_name=lambda rank: f"rank_{rank}.json",
        note=_HEALTHY_NOTE.replace("@FILES@", "files rank_<N>.json (_dump_fr_trace_json)"),
        check=check_healthy,
    ),
    Scenario(
        name="gloo_skip_collective",
        program=run_skip_collective,
        fmt="pickle",
        file_name=lambda rank: f"comm_lib_trace_rank_{rank}",
        note="""\
4-rank gloo job, 5 s timeout: a loop of 4 all_reduce([16]) on the world group; rank 2 leaves it
one step early and issues nothing more. Ranks 0, 1, 3 time out in the 4th all_reduce (gloo marks it
retired=True anyway); every rank dumps (comm_lib_trace_rank_<N>, pickle, no suffix).
Rank 2 never issued pg "0" seq 4 (its dump ends at seq 3); ranks 0, 1, 3 wait in it.
EXPECTED: status=hung root=not_joined culprits=2 group=0 desc=default_pg seq=4 op=all_reduce
""",
        check=check_skip_collective,
    ),
    Scenario(
        name="gloo_size_mismatch",
        program=run_size_mismatch,
        fmt="pickle",
        file_name=lambda rank: f"nccl_trace_rank_{rank}.pkl",
        note="""\
4-rank gloo job, 5 s timeout: 3 all_reduce on the world group, [8] floats each, except rank 1
passes a [4] tensor at the 3rd. Gloo "completes" rank 1's op with garbage and ranks 0, 2, 3
time out; every rank dumps (nccl_trace_rank_<N>.pkl).
At pg "0" seq 3 rank 1's input/output are [[4]], [[8]] on ranks 0, 2, 3 (size_mismatch).
EXPECTED: status=desync root=mismatch culprits=1 group=0 desc=default_pg seq=3 op=all_reduce
""",
        check=check_size_mismatch,
    ),
    Scenario(
        name="gloo_op_mismatch",
        program=run_op_mismatch,
        fmt="gzip",
        file_name=lambda rank: f"rank_{rank}.pkl.gz",
        note="""\
4-rank gloo job, 5 s timeout: 3 steps on the world group; at the 3rd, ranks 0, 1, 2 call
all_reduce([8]) while rank 3 calls all_gather (list of 4 x [8]). All four time out and dump
(rank_<N>.pkl.gz, gzip-compressed pickle).
At pg "0" seq 3 rank 3 issued gloo:all_gather, ranks 0, 1, 2 gloo:all_reduce (op_type_mismatch).
EXPECTED: status=desync root=mismatch culprits=3 group=0 desc=default_pg seq=3 op=all_gather
""",
        check=check_op_mismatch,
    ),
    Scenario(
        name="gloo_subgroup_desync",
        program=run_subgroup_desync,
        fmt="pickle",
        file_name=_node_name,
        note="""\
4-rank gloo job, 5 s timeout, subgroups pg "1" = {0,1} (desc "pair_0_1") and pg "2" = {2,3}
(desc "pair_2_3"). Each of 3 steps: world all_reduce([8]), then pair all_reduce([4]). At step 3
rank 3 skips its pair all_reduce and stops; rank 2 waits in it and times out; ranks 0, 1 finish.
Files: nccl_trace_rank_container-node07_<N> (ranks 0, 1), ...-node08_<N> (ranks 2, 3).
Rank 3 never issued pg "2" seq 3 (its pg "2" ends at seq 2); rank 2 waits in it. World group and
pg "1" are clean.
EXPECTED: status=hung root=not_joined culprits=3 group=2 desc=pair_2_3 seq=3 op=all_reduce
""",
        check=check_subgroup_desync,
    ),
)
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


def _store_barrier(store: Any, key: str, deadline: float) -> bool:
    """Wait until WORLD_SIZE ranks have reached `key` (or the deadline passed)."""
    store.add(key, 1)
    while store.add(key, 0) < WORLD_SIZE:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


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


def run_worker(
    scenario: Scenario, rank: int, store_port: int, folder: Path, timeout_s: float
) -> int:
    """Run one rank of a scenario and write its dump; returns the process exit status."""
    warnings.filterwarnings("ignore", category=FutureWarning)  # deprecated *_tensor aliases
    timeout = timedelta(seconds=timeout_s)
    deadline = time.monotonic() + 4 * timeout_s + 40
    store = dist.TCPStore("127.0.0.1", store_port, is_master=False, timeout=STORE_TIMEOUT)
    # Start together: gloo's full-mesh connect is bounded by the (short) group timeout.
    _store_barrier(store, "started", deadline)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD_SIZE, timeout=timeout)
    status = 0
    try:
        scenario.program(rank, timeout)
    except Exception as exc:  # the injected fault surfaces here: a timeout or a gloo error
        print(f"rank {rank}: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
    finally:
        time.sleep(SETTLE_S)
        try:
            target = folder / scenario.file_name(rank)
            partial = target.with_name(target.name + ".partial")
            partial.write_bytes(_dump_bytes(scenario.fmt))
            partial.replace(target)
        except Exception as exc:
            print(f"rank {rank}: dump failed: {exc}", flush=True)
            status = 3
    # A rank that skipped a collective must stay connected until the others time out, or they
    # would see "connection closed" instead of the hang this scenario is about.
    if not _store_barrier(store, "dumped", deadline):
        print(f"rank {rank}: gave up waiting for the other ranks' dumps", flush=True)
    return status


# --------------------------------------------------------------------------------------------
# Parent side: launch, collect, verify.
# --------------------------------------------------------------------------------------------


def load_dump(path: Path, fmt: str) -> Dump:
    """Read one dump with the standard library only (what fr-analyze will have to do)."""
    data = path.read_bytes()
    if fmt == "json":
        loaded = json.loads(data)
    elif fmt == "gzip":
        loaded = pickle.loads(gzip.decompress(data))
    else:
        loaded = pickle.loads(data)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: top level is {type(loaded).__name__}, not dict")
    return loaded


def run_scenario(scenario: Scenario, out_dir: Path, timeout_s: float) -> list[str]:
    """Run one scenario's 4 ranks, write NOTE.md, and return the problems found."""
    folder = out_dir / scenario.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=STORE_TIMEOUT
    )
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", scenario.name]
    argv += ["--store-port", str(store.port), "--out", str(folder), "--timeout", str(timeout_s)]
    started = time.monotonic()
    problems = run_ranks(
        argv, WORLD_SIZE, 4 * timeout_s + 90, deadline_name="the scenario deadline"
    )
    del store
    (folder / "NOTE.md").write_text(f"# {scenario.name}\n\n{scenario.note}")
    dumps: dict[int, Dump] = {}
    for rank in range(WORLD_SIZE):
        path = folder / scenario.file_name(rank)
        try:
            dumps[rank] = load_dump(path, scenario.fmt)
        except Exception as exc:
            problems.append(f"rank {rank}: cannot load {path.name}: {exc}")
    if len(dumps) == WORLD_SIZE:
        problems += scenario.check(dumps)
    total = sum(p.stat().st_size for p in folder.iterdir())
    print(f"    {len(dumps)} dumps, {total / 1024:.1f} KiB, {time.monotonic() - started:.1f} s")
    return problems


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: `--out`, `--only`, `--timeout`, and the internal worker options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=Path("sample_dumps"), help="output root (default: %(default)s)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(SCENARIOS_BY_NAME),
        help="run just this scenario (repeatable); default: all",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="process-group timeout in seconds (default: %(default)s)",
    )
    # Internal: how the parent starts one rank.
    parser.add_argument("--worker", choices=sorted(SCENARIOS_BY_NAME), help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store-port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Generate the scenarios asked for (or, with the internal `--worker`, be one rank); returns the
    exit status."""
    args = parse_args(argv)
    if args.worker is not None:
        status = run_worker(
            SCENARIOS_BY_NAME[args.worker], args.rank, args.store_port, args.out, args.timeout
        )
        sys.stdout.flush()
        # Skip interpreter teardown: destroying a gloo group whose peers are gone can block.
        os._exit(status)
    names = args.only or [s.name for s in SCENARIOS]
    failed = False
    for name in names:
        print(f"{name}:", flush=True)
        problems = run_scenario(SCENARIOS_BY_NAME[name], args.out, args.timeout)
        for problem in problems:
            print(f"    PROBLEM: {problem}")
        failed = failed or bool(problems)
        print(f"    {'FAILED' if problems else 'ok'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
