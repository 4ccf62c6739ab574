"""Generate small, real torch 2.13 Flight Recorder dump sets for the test suite.

A 4-rank gloo job on 127.0.0.1 (CPU) runs a fixed program that calls every kind of op gloo's
flight recorder can see: world collectives of every flavour (all_reduce, async all_reduce,
broadcast, all_gather list and into-tensor, reduce_scatter list and tensor, reduce, gather,
scatter, all_to_all single and list, all_gather_object, barrier), coalesced calls
(all_reduce_coalesced, ``_coalescing_manager`` blocks), point-to-point ops (blocking send/recv,
isend/irecv, ``batch_isend_irecv``, send/recv inside a subgroup) and collectives on the pair
subgroups {0, 1} and {2, 3} made with ``new_group``. Each step of the program (``Step``)
declares the entries it should leave in the ring buffer, with their sizes, so that the parent
can check on the reloaded dumps what gloo's recorder really records.

Three runs, four folders under ``--out`` (default ``tests/data/torch213``):

- ``healthy_pickle`` and ``healthy_json``: the program completes; after a short settle every
  rank dumps the pickle (``_dump_fr_trace``, with stacks) and the JSON (``_dump_fr_trace_json``)
  of the same moment, one right after the other, into ``rank_<N>.pkl`` / ``rank_<N>.json``.
- ``stuck_pickle``: the same program with a 5 s group timeout, then rank 2 stops before a last
  world all_reduce that ranks 0, 1 and 3 enter and block in until it times out; rank 2 dumps at
  once, the others once their all_reduce raised, and every rank leaves together.
- ``coalesced_all_gather_pickle``: a healthy job whose coalesced all_gathers gloo records with
  sizes that break the all_gather size rule on every rank (kept apart from ``healthy_*``).

Each folder gets a ``NOTE.md``: the job, the torch version, the command, the facts the parent
checked on the dumps, and one ``EXPECTED:`` line in the form of the ``sample_dumps`` sets. The
parent reloads every file with plain pickle / json, checks the facts and exits 1 if one does not
hold. Reruns give the same entries; timestamps, thread ids, stack file paths and
``pg_status.last_completed_collective`` (raced by gloo's worker threads) may differ.

It needs torch 2.13 (CPU) in the interpreter that runs it; fr-analyze never imports torch::

    python3.11 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0
    /tmp/torchvenv/bin/python tools/make_torch_fixtures.py
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import shutil
import sys
import textwrap
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # mypy checks this script as a module of the `tools` package
    from tools.torch_job import run_ranks
else:
    from torch_job import run_ranks  # a sibling: the script runs by its path

try:
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _coalescing_manager
except ImportError:
    sys.exit(
        "make_torch_fixtures.py needs torch 2.13 (CPU) in the interpreter that runs it, e.g.\n"
        "    python3.11 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0\n"
        "    /tmp/torchvenv/bin/python tools/make_torch_fixtures.py"
    )

WORLD_SIZE = 4
BUFFER_SIZE = 200
HEALTHY_TIMEOUT_S = 60.0
# The stuck run's blocked ranks wait out their group timeout: gloo retires a timed-out op, and
# only then does a dump tell a hang from an op in flight.
STUCK_TIMEOUT_S = 5.0
STORE_TIMEOUT = timedelta(seconds=60)
# gloo completes a work's future before its worker thread retires the flight-recorder entry;
# a short pause before dumping makes the healthy dumps reproducible.
SETTLE_S = 0.5
STUCK_RANK = 2
RUN_DEADLINE_S = 120.0
COMMAND = "/tmp/torchvenv/bin/python tools/make_torch_fixtures.py --out tests/data/torch213"
NOTE_WIDTH = 100

WORLD_PG = "0"
WORLD_DESC = "default_pg"
PAIR_PG = {0: "1", 1: "1", 2: "2", 3: "2"}

# The dump functions and TCPStore have no stubs to type-check against.
C10D: Any = torch._C._distributed_c10d

Dump = dict[str, Any]
Shapes = list[list[int]]


# --------------------------------------------------------------------------------------------
# The programs: one step per call, with the entries it should leave behind.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ctx:
    """What a step needs: this rank and its pair subgroup."""

    rank: int
    pair: Any
    """This rank's new_group: {0, 1} or {2, 3}."""

    @property
    def partner(self) -> int:
        """The other rank of this rank's pair (global rank)."""
        return self.rank ^ 1

    @property
    def next(self) -> int:
        """The next rank in the world's ring (global rank)."""
        return (self.rank + 1) % WORLD_SIZE

    @property
    def prev(self) -> int:
        """The previous rank in the world's ring (global rank)."""
        return (self.rank - 1) % WORLD_SIZE


@dataclass(frozen=True)
class Record:
    """One entry a step leaves in the ring buffer, as recorded on every rank but the root."""

    op: str
    """profiling_name without "gloo:"."""
    inputs: Shapes
    outputs: Shapes
    dtype: str = "Float"
    """Every input and output dtype (one per shape)."""
    on_root: tuple[Shapes, Shapes] | None = None
    """(inputs, outputs) on rank 0 where the root's differ (gather, scatter)."""

    def sizes(self, rank: int) -> tuple[Shapes, Shapes]:
        """(inputs, outputs) as rank `rank` records them (the root's own where they differ)."""
        if rank == 0 and self.on_root is not None:
            return self.on_root
        return self.inputs, self.outputs

    def text(self) -> str:
        """The record as NOTE.md lists it, e.g. "gloo:all_reduce [[4]] -> [[4]]"."""
        dtype = "" if self.dtype == "Float" else f" {self.dtype}"
        root = ""
        if self.on_root is not None:
            root = f" (rank 0: {self.on_root[0]} -> {self.on_root[1]})"
        return f"gloo:{self.op} {self.inputs} -> {self.outputs}{dtype}{root}"


def rec(op: str, inputs: Shapes, outputs: Shapes | None = None, **more: Any) -> Record:
    """A Record of `op`; the outputs are the inputs unless given."""
    return Record(op, inputs, inputs if outputs is None else outputs, **more)


@dataclass(frozen=True)
class Step:
    """One call of the program and the entries gloo's recorder is expected to add for it."""

    call: str
    """What the program calls, as written in NOTE.md."""
    run: Callable[[Ctx], object]
    records: tuple[Record, ...] = ()
    group: str = "world"
    """"world" or "pair": the group of the call."""
    unrecorded: int = 0
    """p2p ops the call issues on a rank: each takes an op_id of the group but no entry."""


def _send_recv_pairs(c: Ctx) -> None:
    """Blocking send/recv on the world group: 0 <-> 1 and 2 <-> 3, the even rank first."""
    out, back = torch.full((7,), float(c.rank)), torch.empty(7)
    if c.rank % 2 == 0:
        dist.send(out, dst=c.partner)
        dist.recv(back, src=c.partner)
    else:
        dist.recv(back, src=c.partner)
        dist.send(out, dst=c.partner)


def _isend_irecv_ring(c: Ctx) -> None:
    works = [
        dist.isend(torch.full((9,), float(c.rank)), dst=c.next),
        dist.irecv(torch.empty(9), src=c.prev),
    ]
    for work in works:
        if work is not None:  # None only on a rank outside the group
            work.wait()


def _batched_ring(c: Ctx) -> None:
    ops = [
        dist.P2POp(dist.isend, torch.full((11,), float(c.rank)), c.next),
        dist.P2POp(dist.irecv, torch.empty(11), c.prev),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


def _pair_send_recv(c: Ctx) -> None:
    """Group-local send 0 -> 1 inside each pair subgroup."""
    if c.rank % 2 == 0:
        dist.send(torch.ones(13), group_dst=1, group=c.pair)
    else:
        dist.recv(torch.empty(13), group_src=0, group=c.pair)


def _async_all_reduce(c: Ctx) -> None:
    work = dist.all_reduce(torch.ones(3), async_op=True)
    if work is None:
        raise RuntimeError("all_reduce(async_op=True) returned no work")
    work.wait()


def _coalesced_all_reduce(c: Ctx) -> None:
    with _coalescing_manager(async_ops=False):
        dist.all_reduce(torch.ones(2))
        dist.all_reduce(torch.ones(3))


def _coalesced_reduce_scatter(c: Ctx) -> None:
    with _coalescing_manager(async_ops=False):
        dist.reduce_scatter_tensor(torch.empty(2), torch.ones(WORLD_SIZE * 2))
        dist.reduce_scatter_tensor(torch.empty(3), torch.ones(WORLD_SIZE * 3))


def _coalesced_all_gather(c: Ctx) -> None:
    with _coalescing_manager(async_ops=False):
        dist.all_gather_into_tensor(torch.empty(WORLD_SIZE * 2), torch.ones(2))
        dist.all_gather_into_tensor(torch.empty(WORLD_SIZE * 3), torch.ones(3))


def _root_list(c: Ctx, numel: int) -> list[Any] | None:
    return [torch.full((numel,), float(i)) for i in range(WORLD_SIZE)] if c.rank == 0 else None


W = WORLD_SIZE
HEALTHY_STEPS: tuple[Step, ...] = (
    Step(
        "all_reduce [16]",
        lambda c: dist.all_reduce(torch.full((16,), float(c.rank))),
        (rec("all_reduce", [[16]]),),
    ),
    Step(
        "all_reduce [3], async_op=True, then wait()", _async_all_reduce, (rec("all_reduce", [[3]]),)
    ),
    Step(
        "broadcast [8] from rank 0",
        lambda c: dist.broadcast(torch.arange(8.0) if c.rank == 0 else torch.zeros(8), src=0),
        (rec("broadcast", [[8]]),),
    ),
    Step(
        "all_gather [4] into a list of 4",
        lambda c: dist.all_gather([torch.empty(4) for _ in range(W)], torch.ones(4)),
        (rec("all_gather", [[4]], [[W, 4]]),),
    ),
    Step(
        "all_gather_into_tensor [4] -> [16]",
        lambda c: dist.all_gather_into_tensor(torch.empty(W * 4), torch.ones(4)),
        (rec("all_gather", [[4]], [[W, 4]]),),
    ),
    Step(
        "reduce_scatter: list of 4 x [2] -> [2]",
        lambda c: dist.reduce_scatter(torch.empty(2), [torch.ones(2) for _ in range(W)]),
        (rec("all_reduce", [[2]]),) * W,
    ),
    Step(
        "reduce_scatter_tensor [16] -> [4]",
        lambda c: dist.reduce_scatter_tensor(torch.empty(4), torch.ones(W * 4)),
        (rec("all_reduce", [[W * 4]]),),
    ),
    Step(
        "reduce [2] to rank 0",
        lambda c: dist.reduce(torch.ones(2), dst=0),
        (rec("reduce", [[2]]),),
    ),
    Step(
        "gather [2] to rank 0",
        lambda c: dist.gather(torch.ones(2), _root_list(c, 2), dst=0),
        (rec("gather", [[2]], [], on_root=([[2]], [[W, 2]])),),
    ),
    Step(
        "scatter [2] from rank 0",
        lambda c: dist.scatter(torch.empty(2), _root_list(c, 2), src=0),
        (rec("scatter", [], [[2]], on_root=([[W, 2]], [[2]])),),
    ),
    Step(
        "all_to_all_single [8]",
        lambda c: dist.all_to_all_single(torch.empty(W * 2), torch.ones(W * 2)),
        (rec("all_to_all", [[W * 2]]),),
    ),
    Step(
        "all_to_all: lists of 4 x [2]",
        lambda c: dist.all_to_all(
            [torch.empty(2) for _ in range(W)], [torch.ones(2) for _ in range(W)]
        ),
        (rec("all_to_all", [[2]] * W),),
    ),
    Step(
        "all_gather_object of {'rank': r}",
        lambda c: dist.all_gather_object([None] * W, {"rank": c.rank}),
        (
            rec("all_gather", [[1]], [[W, 1]], dtype="Long"),
            rec("all_gather", [[24]], [[W, 24]], dtype="Byte"),
        ),
    ),
    Step("barrier()", lambda c: dist.barrier(), (rec("barrier", []),)),
    Step(
        "send/recv [7], blocking, world group, 0 <-> 1 and 2 <-> 3",
        _send_recv_pairs,
        unrecorded=2,
    ),
    Step("isend/irecv [9] around the ring r -> r+1", _isend_irecv_ring, unrecorded=2),
    Step(
        "batch_isend_irecv [11] around the ring (one isend, one irecv)",
        _batched_ring,
        unrecorded=2,
    ),
    Step(
        "all_reduce_coalesced [2] + [3]",
        lambda c: dist.all_reduce_coalesced([torch.ones(2), torch.ones(3)]),
        (rec("all_reduce", [[2], [3]]),),
    ),
    Step(
        "_coalescing_manager: all_reduce [2], all_reduce [3]",
        _coalesced_all_reduce,
        (rec("all_reduce", [[2], [3]]),),
    ),
    Step(
        "_coalescing_manager: reduce_scatter_tensor [8] -> [2], [12] -> [3]",
        _coalesced_reduce_scatter,
        (rec("all_reduce", [[8]]), rec("all_reduce", [[12]])),
    ),
    Step(
        "all_reduce [5] on the pair subgroup",
        lambda c: dist.all_reduce(torch.ones(5), group=c.pair),
        (rec("all_reduce", [[5]]),),
        group="pair",
    ),
    Step(
        "send/recv [13] inside the pair subgroup (group_dst=1)",
        _pair_send_recv,
        group="pair",
        unrecorded=1,
    ),
    Step(
        "broadcast [6] on the pair subgroup from its group rank 0",
        lambda c: dist.broadcast(torch.ones(6), group_src=0, group=c.pair),
        (rec("broadcast", [[6]]),),
        group="pair",
    ),
    Step(
        "all_reduce [1] bfloat16",
        lambda c: dist.all_reduce(torch.ones(1, dtype=torch.bfloat16)),
        (rec("all_reduce", [[1]], dtype="BFloat16"),),
    ),
    Step("barrier()", lambda c: dist.barrier(), (rec("barrier", []),)),
)

# gloo records these with sizes that fit no all_gather: kept out of the healthy sets.
COALESCED_ALL_GATHER_STEPS: tuple[Step, ...] = (
    HEALTHY_STEPS[0],
    Step(
        "_coalescing_manager: all_gather_into_tensor [2] -> [8], [3] -> [12]",
        _coalesced_all_gather,
        (rec("all_gather", [[2], [3]], [[2, 2]]),),
    ),
    Step(
        "all_gather_coalesced([[t] for each rank], [t]) of one [2] tensor t",
        lambda c: dist.all_gather_coalesced([[torch.empty(2)] for _ in range(W)], [torch.ones(2)]),
        (rec("all_gather", [[2]], [[1, 2]]),),
    ),
    HEALTHY_STEPS[-1],
)

# The last world op that the stuck run's ranks but STUCK_RANK enter and block in.
STUCK_STEP = Step(
    f"all_reduce [4] (every rank but {STUCK_RANK})",
    lambda c: dist.all_reduce(torch.ones(4)),
    (rec("all_reduce", [[4]]),),
)


@dataclass(frozen=True)
class Run:
    """One job: the program its ranks run and how they dump."""

    name: str
    steps: tuple[Step, ...]
    folders: tuple[str, ...]
    """Output folders: one per dump format ("<...>_pickle", "<...>_json")."""
    stuck: bool = False
    """Ranks but STUCK_RANK then block in STUCK_STEP until it times out, then dump."""
    timeout_s: float = HEALTHY_TIMEOUT_S
    """Every group's timeout."""

    def expected(self, rank: int) -> list[tuple[str, Record]]:
        """(group name, record) of every entry a rank's dump should hold, in order."""
        steps = [*self.steps, STUCK_STEP] if self.stuck and rank != STUCK_RANK else self.steps
        out: list[tuple[str, Record]] = []
        for step in steps:
            group = WORLD_PG if step.group == "world" else PAIR_PG[rank]
            out += [(group, r) for r in step.records]
        return out

    def op_ids(self, rank: int) -> list[int]:
        """op_id of every entry of a rank's dump: a p2p op takes an op_id and leaves no entry."""
        counters = {"world": 0, "pair": 0}
        out = []
        steps = [*self.steps, STUCK_STEP] if self.stuck and rank != STUCK_RANK else self.steps
        for step in steps:
            for _ in step.records:
                counters[step.group] += 1
                out.append(counters[step.group])
            counters[step.group] += step.unrecorded
        return out

    def ops(self, group: str) -> int:
        """How many entries the steps on group `group` ("world" or "pair") record."""
        return sum(len(s.records) for s in self.steps if s.group == group)


RUNS = (
    Run("healthy", HEALTHY_STEPS, ("healthy_pickle", "healthy_json")),
    Run("stuck", HEALTHY_STEPS, ("stuck_pickle",), stuck=True, timeout_s=STUCK_TIMEOUT_S),
    Run("coalesced_all_gather", COALESCED_ALL_GATHER_STEPS, ("coalesced_all_gather_pickle",)),
)
RUNS_BY_NAME = {r.name: r for r in RUNS}


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


def say(rank: int, message: str) -> None:
    """Print `message` to the rank's log, prefixed with the rank."""
    print(f"rank {rank}: {message}", flush=True)


def _dump(folder: str) -> bytes:
    if folder.endswith("_json"):
        data: bytes = C10D._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
    else:
        data = C10D._dump_fr_trace(
            includeCollectives=True, includeStackTraces=True, onlyActive=False
        )
    return data


def _file_name(folder: str, rank: int) -> str:
    return f"rank_{rank}.json" if folder.endswith("_json") else f"rank_{rank}.pkl"


def _write_dumps(run: Run, rank: int, out: Path) -> None:
    """Every format of the run, taken one right after the other (the same moment)."""
    taken = [(folder, _dump(folder)) for folder in run.folders]
    for folder, data in taken:
        path = out / folder / _file_name(folder, rank)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(data)
        partial.replace(path)


def _store_barrier(store: Any, key: str, deadline: float) -> bool:
    """Wait until WORLD_SIZE ranks have reached `key` (or the deadline passed)."""
    store.add(key, 1)
    while store.add(key, 0) < WORLD_SIZE:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _leave(store: Any, rank: int, deadline: float) -> NoReturn:
    """Wait until every rank has dumped, then end the process without teardown."""
    # A rank leaving early would turn the others' wait into a closed connection.
    status = 0
    if not _store_barrier(store, "dumped", deadline):
        say(rank, "gave up waiting for the other ranks' dumps")
        status = 3
    sys.stdout.flush()
    # Destroying a gloo group with ops in flight can block: skip interpreter teardown.
    os._exit(status)


def run_worker(run: Run, rank: int, store_port: int, out: Path) -> NoReturn:
    """One rank of a run: the program, then its dumps."""
    warnings.filterwarnings("ignore", category=FutureWarning)  # deprecated *_tensor aliases
    warnings.filterwarnings("ignore", category=UserWarning)
    deadline = time.monotonic() + RUN_DEADLINE_S
    timeout = timedelta(seconds=run.timeout_s)
    store = C10D.TCPStore("127.0.0.1", store_port, is_master=False, timeout=STORE_TIMEOUT)
    # Start together: gloo's full-mesh connect is bounded by the group timeout.
    _store_barrier(store, "started", deadline)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD_SIZE, timeout=timeout)
    # Every rank creates both pairs, in the same order, so their names agree: "1" and "2".
    pairs = [
        dist.new_group([0, 1], timeout=timeout, group_desc="pair_0_1"),
        dist.new_group([2, 3], timeout=timeout, group_desc="pair_2_3"),
    ]
    ctx = Ctx(rank, pairs[rank // 2])
    for step in run.steps:
        step.run(ctx)
    if run.stuck and rank == STUCK_RANK:
        say(rank, "stops before the last world all_reduce and dumps at once")
    elif run.stuck:
        try:
            STUCK_STEP.run(ctx)  # blocks: STUCK_RANK never joins
            say(rank, "the last all_reduce returned")
        except RuntimeError as exc:
            say(rank, f"the last all_reduce raised: {str(exc).splitlines()[0][:120]}")
    if not (run.stuck and rank == STUCK_RANK):
        time.sleep(SETTLE_S)
    _write_dumps(run, rank, out)
    say(rank, "dumped")
    _leave(store, rank, deadline)


# --------------------------------------------------------------------------------------------
# Parent side: launch the runs, reload the dumps, check the facts, write NOTE.md.
# --------------------------------------------------------------------------------------------


def launch(run: Run, out: Path) -> list[str]:
    """Run the 4 ranks of one run; returns the problems seen (exit codes, deadline)."""
    store = C10D.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=STORE_TIMEOUT
    )
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", run.name]
    argv += ["--store-port", str(store.port), "--out", str(out)]
    started = time.monotonic()
    problems = run_ranks(
        argv,
        WORLD_SIZE,
        RUN_DEADLINE_S + 30,
        deadline_name="the run's deadline",
        buffer_size=BUFFER_SIZE,
    )
    del store
    print(f"    {time.monotonic() - started:.1f} s", flush=True)
    return problems


def load_folder(folder: Path) -> dict[int, Dump]:
    """Every rank's dump in a folder, read with the standard library only."""
    dumps: dict[int, Dump] = {}
    for rank in range(WORLD_SIZE):
        data = (folder / _file_name(folder.name, rank)).read_bytes()
        dumps[rank] = json.loads(data) if folder.name.endswith("_json") else pickle.loads(data)
    return dumps


def check_entries(run: Run, dumps: dict[int, Dump], label: str) -> list[str]:
    """Each rank holds exactly the entries its program should have left, in order."""
    problems = []
    for rank, dump in dumps.items():
        entries: list[Dump] = dump.get("entries", [])
        want = run.expected(rank)
        got = [(e["process_group"][0], e["profiling_name"]) for e in entries]
        if got != [(group, f"gloo:{r.op}") for group, r in want]:
            problems.append(f"{label} rank {rank}: entries {got}")
            continue
        for e, (_, r) in zip(entries, want, strict=True):
            inputs, outputs = r.sizes(rank)
            dtypes = ([r.dtype] * len(inputs), [r.dtype] * len(outputs))
            if (e["input_sizes"], e["output_sizes"]) != (inputs, outputs):
                problems.append(f"{label} rank {rank}: {r.op} sizes {e['input_sizes']} -> ...")
            if (e["input_dtypes"], e["output_dtypes"]) != dtypes:
                problems.append(f"{label} rank {rank}: {r.op} dtypes {e['input_dtypes']}")
        op_ids = [int(e["op_id"]) for e in entries]
        if op_ids != run.op_ids(rank):
            problems.append(f"{label} rank {rank}: op_ids {op_ids}, expected {run.op_ids(rank)}")
        unretired = [e["record_id"] for e in entries if not e["retired"]]
        if unretired:
            problems.append(f"{label} rank {rank}: unretired entries {unretired}")
        # gloo counts an op that timed out as completed in pg_status too. (Healthy runs are not
        # checked: gloo's worker threads race to update last_completed_collective.)
        world = dump.get("pg_status", {}).get("0", {})
        last_world_op_id = max(int(e["op_id"]) for e in entries if e["pg_id"] == 0)
        if run.stuck and int(world.get("last_completed_collective", -1)) != last_world_op_id:
            problems.append(f"{label} rank {rank}: pg_status['0'] {world}")
    return problems


def check_recorder_facts(run: Run, dumps: dict[int, Dump], label: str) -> list[str]:
    """The facts about gloo's recorder that NOTE.md states; each failure is one problem."""
    problems = []
    is_json = label.endswith("_json")
    for rank, dump in dumps.items():
        where = f"{label} rank {rank}"
        entries: list[Dump] = dump.get("entries", [])
        if (dump.get("version"), dump.get("comm_lib_version")) != ("2.10", ""):
            problems.append(f"{where}: version {dump.get('version')!r}")
        if dump.get("pg_config") != {"": {"name": "", "desc": "", "ranks": "[]"}}:
            problems.append(
                f"{where}: pg_config {dump.get('pg_config')!r} is not gloo's broken one"
            )
        status = dump.get("pg_status", {})
        value_type = str if is_json else int
        if not all(isinstance(v, value_type) for s in status.values() for v in s.values()):
            problems.append(f"{where}: pg_status {status!r}")
        for pg_id in {e["pg_id"] for e in entries}:
            last_op_id = max(int(e["op_id"]) for e in entries if e["pg_id"] == pg_id)
            enqueued = status.get(str(pg_id), {}).get("last_enqueued_collective")
            if enqueued is None or int(enqueued) != last_op_id:
                problems.append(f"{where}: pg_status[{pg_id}] {enqueued} != op_id {last_op_id}")
        if ("nccl_comm_state" in dump) != is_json:
            problems.append(f"{where}: nccl_comm_state present: {'nccl_comm_state' in dump}")
        for e in entries:
            if e["state"] != "scheduled" or e["is_p2p"] or int(e["p2p_seq_id"]) != 0:
                problems.append(f"{where}: entry {e['record_id']} state/is_p2p/p2p_seq_id")
            if "duration_ms" in e or ("frames" in e) == is_json:
                problems.append(f"{where}: entry {e['record_id']} duration_ms or frames")
            unset = 0 if is_json else None
            discovered = (e["time_discovered_started_ns"], e["time_discovered_completed_ns"])
            if discovered != (unset, unset):
                problems.append(f"{where}: entry {e['record_id']} discovered times {discovered}")
            if e["thread_name"] != "python" or e["timeout_ms"] != run.timeout_s * 1000:
                problems.append(f"{where}: entry {e['record_id']} thread_name/timeout_ms")
        for group in {e["process_group"][0] for e in entries}:
            seqs = [int(e["collective_seq_id"]) for e in entries if e["process_group"][0] == group]
            if seqs != list(range(1, len(seqs) + 1)):
                problems.append(f"{where}: group {group!r} seqs are not 1..n: {seqs}")
    return problems


def check_same_moment(pickles: dict[int, Dump], jsons: dict[int, Dump]) -> list[str]:
    """The JSON holds what the pickle holds, but for frames and the JSON spellings."""
    problems = []
    for rank in pickles:
        for p, j in zip(pickles[rank]["entries"], jsons[rank]["entries"], strict=False):
            same = {k: v for k, v in p.items() if k != "frames"}
            same["process_group"] = list(p["process_group"])
            same["time_discovered_started_ns"] = same["time_discovered_completed_ns"] = 0
            if same != j:
                diff = sorted(k for k in same if same[k] != j.get(k))
                problems.append(f"rank {rank}: record {p['record_id']} differs in {diff}")
        if len(pickles[rank]["entries"]) != len(jsons[rank]["entries"]):
            problems.append(f"rank {rank}: pickle and JSON hold different entry counts")
    return problems


# --------------------------------------------------------------------------------------------
# NOTE.md
# --------------------------------------------------------------------------------------------


def _para(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), NOTE_WIDTH)


def _program_text(steps: tuple[Step, ...]) -> str:
    lines = []
    for i, step in enumerate(steps, 1):
        group = "world pg 0" if step.group == "world" else "pair pg 1/2"
        texts = [r.text() for r in step.records]
        runs = [(t, len(list(same))) for t, same in itertools.groupby(texts)]
        recorded = "; ".join(t if n == 1 else f"{n} x {t}" for t, n in runs) or "nothing recorded"
        lines.append(
            textwrap.fill(
                f"{i:2}. [{group}] {step.call} => {recorded}",
                NOTE_WIDTH,
                subsequent_indent=" " * 8,
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines)


FACTS = """\
What gloo's flight recorder (torch 2.13.0) records, as checked on these dumps by
tools/make_torch_fixtures.py (sizes above are as recorded on the ranks that are not the root):
- Only collectives are recorded. send/recv, isend/irecv, batch_isend_irecv and send/recv inside a
  subgroup leave no entry at all (no "gloo:send"/"gloo:recv", no coalesced end marker), but each
  p2p op still takes an op_id of its group, so op_id has gaps (the world group's op_id runs 6
  ahead of its seq id after the three p2p steps, the pairs' 1 ahead) and would differ across ranks
  that issued different p2p ops; collective_seq_id stays 1..n on every rank and group.
- p2p_seq_id is 0 and is_p2p is False on every entry; state is always "scheduled" (gloo never
  writes "started"/"completed"); `retired` is the only completion signal; no duration_ms;
  time_discovered_started_ns / time_discovered_completed_ns are None in the pickle, 0 in the JSON;
  thread_name "python"; timeout_ms is the group's timeout (60000 here).
- Op names are "gloo:<op>", never with peers: all_reduce, broadcast, all_gather, reduce, gather,
  scatter, all_to_all, barrier. barrier() is "gloo:barrier" with empty sizes and dtypes (NCCL
  records all_reduce_barrier). reduce_scatter (list) is one all_reduce per rank of the group (4
  entries, 4 seq ids); reduce_scatter_tensor one all_reduce of the whole input. The list
  all_gather and all_gather_into_tensor [4] -> [16] both record output [[4, 4]]. gather/scatter:
  non-root ranks record empty output (gather) / input (scatter) sizes and dtypes.
  all_gather_object is two all_gathers (Long sizes, then the Byte payload).
- Coalesced calls leave no end marker and one entry: all_reduce_coalesced and a
  _coalescing_manager block of all_reduces are each ONE gloo:all_reduce whose sizes list every
  tensor ([[2], [3]]); a _coalescing_manager block of reduce_scatter_tensor is not coalesced at
  all: one all_reduce per call, each with its own seq id. Coalesced all_gathers are recorded with
  sizes no all_gather can have (see coalesced_all_gather_pickle).
- pg_config is gloo's broken one: {'': {'name': '', 'desc': '', 'ranks': '[]'}}. The entries'
  process_group names are right: world "0" (default_pg), pairs "1" (pair_0_1) and "2" (pair_2_3).
  pg_status is keyed by the per-process pg id ("0", "1": strings in both formats); its values are
  ints in the pickle, strings in the JSON, and count op_ids, not seq ids: the world group's
  last_enqueued_collective is its last op_id; last_started_collective stays -1. version "2.10",
  comm_lib_version "".
- The JSON of a moment equals the pickle of that moment but for: no `frames` (the pickle has
  stacks, innermost first), process_group as a list, discovered times 0 for None, and a top-level
  "nccl_comm_state": {} that the pickle lacks. record_id, seq ids, op_id, time_created_ns, sizes,
  dtypes, retired are equal.
"""

COALESCED_FACTS = """\
What gloo's flight recorder (torch 2.13.0) records here, as checked by
tools/make_torch_fixtures.py: a _coalescing_manager block of two all_gather_into_tensor ([2] ->
[8], [3] -> [12]) is ONE gloo:all_gather entry with inputs [[2], [3]] and output [[2, 2]];
all_gather_coalesced of one [2] tensor is one gloo:all_gather with output [[1, 2]]. No end
marker. Neither output is world x input, on any rank, yet every rank agrees and the job is
healthy: an analyzer must not call the ranks mismatched. Otherwise the facts of healthy_pickle's
NOTE.md hold (op names, states, retired, pg_config, seq ids).
"""


def _job_text(files: str, timeout_s: float) -> str:
    return _para(
        f"""4-rank gloo job on 127.0.0.1 (torch {torch.__version__}),
        TORCH_FR_BUFFER_SIZE={BUFFER_SIZE}, every group with a {timeout_s:.0f} s timeout.
        Groups: world pg "0" (desc "{WORLD_DESC}"); pair subgroups from new_group, pg "1" =
        {{0, 1}} (desc "pair_0_1") and pg "2" = {{2, 3}} (desc "pair_2_3"), created by every
        rank in that order. {files}"""
    )


PICKLE_FILES = """Files rank_<N>.pkl: _dump_fr_trace(includeCollectives=True,
includeStackTraces=True, onlyActive=False)."""
JSON_FILES = """Files rank_<N>.json: _dump_fr_trace_json(includeCollectives=True,
onlyActive=False)."""


def note(run: Run, folder: str) -> str:
    """The NOTE.md of output folder `folder` of `run`: the job, its files, the expected entries."""
    is_json = folder.endswith("_json")
    files = JSON_FILES if is_json else PICKLE_FILES
    if run.name == "healthy":
        other = "healthy_pickle/" if is_json else "healthy_json/"
        files += f""" {other} holds the {"pickle" if is_json else "JSON"} of the same moment
        (taken right {"before" if is_json else "after"} it on each rank: nothing ran between)."""
    lines = [
        f"# {folder}",
        "",
        _job_text(files, run.timeout_s),
        "",
        "The program, on every rank:",
        "",
    ]
    lines += [_program_text(run.steps), ""]
    world, pair = run.ops("world"), run.ops("pair")
    if run.stuck:
        seq = world + 1
        others = ", ".join(str(r) for r in range(WORLD_SIZE) if r != STUCK_RANK)
        what = f"""Then ranks {others} enter a last world all_reduce [4] (pg "0" seq {seq});
        rank {STUCK_RANK} stops before it and issues nothing more (its process stays alive and
        connected) and dumps at once. Ranks {others} block in that all_reduce until it times out
        ({run.timeout_s:.0f} s, RuntimeError), then dump {SETTLE_S} s later; then every rank
        leaves together. Ranks {others}: pg "0" ends at seq {seq}, retired=True (gloo retires an
        op that timed out, so no entry is unretired and only the seq ids show who waits); rank
        {STUCK_RANK}: pg "0" ends at seq {seq - 1}. The pair groups are complete (seq
        1-{pair})."""
        expected = (
            f"status=hung root=not_joined culprits={STUCK_RANK} group={WORLD_PG} "
            f"desc={WORLD_DESC} seq={seq} op=all_reduce"
        )
        p2p = sum(step.unrecorded for step in run.steps if step.group == "world")
        facts = f"""The facts about gloo's recorder listed in healthy_pickle/NOTE.md hold here
        too (timeout_ms is {run.timeout_s * 1000:.0f}). Also checked: gloo counts the all_reduce
        that timed out as completed in pg_status: on ranks {others},
        pg_status["0"].last_completed_collective = last_enqueued_collective =
        {run.op_ids(0)[-1]}, that all_reduce's op_id (its seq id is {seq}: the world group's
        {p2p} send/recv ops took op_ids too); on rank {STUCK_RANK} both are
        {run.op_ids(STUCK_RANK)[-1]}, its barrier's op_id."""
        facts = _para(facts) + "\n"
    else:
        groups = f'pg "0" seq 1-{world}' + (f" and its pair's seq 1-{pair}" if pair else "")
        what = f"""Nothing is wrong. Every op completed and is retired; each rank dumped
        {SETTLE_S} s after its program ended. Every rank holds {groups}."""
        expected = "status=ok root=- culprits=- group=- desc=- seq=- op=-"
        facts = COALESCED_FACTS if run.name == "coalesced_all_gather" else FACTS
    lines += [_para(what), "", facts, f"Command: {COMMAND}", "", f"EXPECTED: {expected}", ""]
    return "\n".join(lines)


def folder_size(folder: Path) -> str:
    """'N files, X KiB (largest Y)' of `folder`."""
    sizes = [p.stat().st_size for p in folder.iterdir()]
    return f"{len(sizes)} files, {sum(sizes) / 1024:.1f} KiB (largest {max(sizes) / 1024:.1f})"


def main(argv: list[str] | None = None) -> int:
    """Run every job (or, with the internal `--worker`, be one of its ranks); returns the status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("tests/data/torch213"),
        help="output root (default: %(default)s)",
    )
    # Internal: how the parent starts one rank.
    parser.add_argument("--worker", choices=sorted(RUNS_BY_NAME), help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out: Path = args.out
    if args.worker is not None:
        run_worker(RUNS_BY_NAME[args.worker], args.rank, args.store_port, out)
    problems: list[str] = []
    for run in RUNS:
        print(f"{run.name}:", flush=True)
        for folder in run.folders:
            shutil.rmtree(out / folder, ignore_errors=True)
            (out / folder).mkdir(parents=True)
        problems += launch(run, out)
        loaded: dict[str, dict[int, Dump]] = {}
        for folder in run.folders:
            try:
                loaded[folder] = load_folder(out / folder)
            except (OSError, ValueError, pickle.UnpicklingError) as exc:
                problems.append(f"{folder}: cannot reload a dump: {exc}")
                continue
            problems += check_entries(run, loaded[folder], folder)
            problems += check_recorder_facts(run, loaded[folder], folder)
            (out / folder / "NOTE.md").write_text(note(run, folder))
            print(f"    {folder}: {folder_size(out / folder)}")
        if len(loaded) == 2:
            problems += check_same_moment(*loaded.values())
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print("FAILED" if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
