"""`fr-analyze replay`: the plan (what each rank replays, the window, the scale rule, the dtype
stand-ins, its JSON) without torch, the command without torch, and real 4-rank gloo replays on
127.0.0.1 (slow: a healthy one, and one where rank 2's recorded size differs)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import pytest

from fr_analyzer import cli, pipeline
from fr_analyzer.errors import UsageError
from fr_analyzer.load.sources.base import Directory
from fr_analyzer.model.groups import build_groups
from fr_analyzer.replay import session
from fr_analyzer.replay.dtypes import replay_dtype
from fr_analyzer.replay.plan import (
    Kind,
    PlanOptions,
    ReplayPlan,
    Window,
    build,
    from_json,
    to_json,
)
from fr_analyzer.replay.results import (
    Stats,
    closing,
    endings,
    opening,
    per_op,
    per_rank,
    table,
)
from fr_analyzer.replay.runner import (
    Launch,
    RankExit,
    RunOutcome,
    free_port,
    launch_from,
    wait_or_kill,
)
from fr_analyzer.replay.worker import RankResult
from tools.frsim import CustomJob, Output, ProgramSpec, SimSpec, faults, simulate, write_dumps
from tools.frsim.custom import WORLD

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "sample_dumps" / "gloo_healthy"
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed (the replay extra)"
)


def plan_of(path: Path, **options: object) -> ReplayPlan:
    got = pipeline.load(Directory(path), pipeline.Options())
    groups = build_groups(got.dumps, got.table, got.unreadable)
    return build(got.table, groups, str(path), PlanOptions(**options))  # type: ignore[arg-type]


def seqs(plan: ReplayPlan) -> dict[int, dict[str, list[int]]]:
    """Per rank, per group name, the sequence ids it replays, in order."""
    found: dict[int, dict[str, list[int]]] = {}
    for rank in plan.ranks:
        by_group: dict[str, list[int]] = defaultdict(list)
        for op in rank.ops:
            by_group[plan.group(op.group).name].append(op.seq)
        found[rank.rank] = dict(by_group)
    return found


def small_job(dumps: Path, fault: faults.Fault | None = None, **spec: object) -> Path:
    """4 gloo ranks: per step a world all_reduce of 1024, a {2, 3} all_reduce of 64 on ranks
    2 and 3, and a world all_gather of 32; written as torch's pickles."""
    job = CustomJob(world_size=4)
    pair = job.new_group("pair", [2, 3])
    for rank in job.ranks():
        ops = job.on(rank)
        for step in range(3):
            ops.step(step)
            ops.coll(WORLD, "all_reduce", [(1024,)], site="grad_sync")
            if rank >= 2:
                ops.coll(pair, "all_reduce", [(64,)], site="layernorm_grads")
            ops.coll(WORLD, "all_gather", [(32,)], site="sp_gather")
    sim = simulate(
        SimSpec(
            layout=job,
            program=ProgramSpec(backend="gloo"),
            fault=fault,
            timeout_ms=5000,
            **spec,  # type: ignore[arg-type]
        )
    )
    write_dumps(sim, dumps, Output(fmt="torch", pattern="rank_{rank}"))
    return dumps


# --- the plan ---------------------------------------------------------------------------------


def test_plan_replays_every_rank_s_ops_in_record_order_with_the_groups_in_creation_order() -> None:
    plan = plan_of(HEALTHY)

    assert plan.world_size == 4
    assert [(g.name, g.ranks, g.world) for g in plan.groups] == [
        ("0", (0, 1, 2, 3), True),
        ("1", (0, 1), False),
        ("2", (2, 3), False),
    ]
    by_rank = seqs(plan)
    assert by_rank[0] == {"0": list(range(1, 23)), "1": [1, 2, 3]}
    assert by_rank[3] == {"0": list(range(1, 23)), "2": [1, 2, 3]}
    ops = plan.ranks[0].ops
    assert [o.kind for o in ops[:6]] == [Kind.ALL_REDUCE] * 3 + [Kind.BROADCAST] + [
        Kind.ALL_GATHER
    ] * 2
    gather = next(o for o in ops if o.kind == Kind.GATHER)
    assert gather.root == 0  # the member whose output is recorded


def test_plan_round_trips_through_json() -> None:
    plan = plan_of(HEALTHY, scale=0.5)

    assert from_json(to_json(plan)) == plan


def test_last_keeps_each_group_s_newest_n_sequence_ids_on_every_rank() -> None:
    plan = plan_of(HEALTHY, window=Window(last=2))

    by_rank = seqs(plan)
    assert by_rank[0] == {"0": [21, 22], "1": [2, 3]}
    assert by_rank[2] == {"0": [21, 22], "2": [2, 3]}


def test_seq_keeps_those_sequence_ids_of_every_group() -> None:
    plan = plan_of(HEALTHY, window=Window(seq=(5, 6)))

    assert {r: s for r, s in seqs(plan).items()} == {r: {"0": [5, 6]} for r in range(4)}


def test_window_starts_where_every_rank_s_ring_buffer_reaches(tmp_path: Path) -> None:
    # ranks 2 and 3 record a pair op per step more: their 4-entry buffers reach less far back
    plan = plan_of(small_job(tmp_path, capacity=4))

    world = {rank: groups["0"] for rank, groups in seqs(plan).items()}
    assert len({tuple(s) for s in world.values()}) == 1, world
    assert world[0] and world[0][-1] == 6


def test_scale_maps_sizes_alike_on_every_rank_keeping_them_distinct_and_ordered() -> None:
    full, small = plan_of(HEALTHY), plan_of(HEALTHY, scale=0.01)

    pairs = {
        (a.numel, b.numel)
        for ra, rb in zip(full.ranks, small.ranks, strict=True)
        for a, b in zip(ra.ops, rb.ops, strict=True)
        if a.kind not in (Kind.ALL_TO_ALL, Kind.BARRIER)
    }
    mapping = dict(pairs)
    assert len(mapping) == len(pairs)  # one scaled size per recorded size
    ordered = sorted(mapping)
    assert all(mapping[n] >= 1 for n in ordered)
    assert all(mapping[a] < mapping[b] for a, b in itertools.pairwise(ordered))


def test_scaled_all_to_all_splits_still_agree_across_ranks() -> None:
    plan = plan_of(HEALTHY, scale=0.3)

    a2a: dict[int, dict[int, tuple[tuple[int, ...], tuple[int, ...]]]] = defaultdict(dict)
    for rank in plan.ranks:
        for op in rank.ops:
            if op.kind == Kind.ALL_TO_ALL:
                a2a[op.seq][rank.rank] = (op.splits_in, op.splits_out)
    assert len(a2a) == 2
    for by_rank in a2a.values():
        for i, (splits_in, _) in by_rank.items():
            for j, (_, splits_out) in by_rank.items():
                assert splits_in[j] == splits_out[i]


def test_scale_keeps_a_size_mismatch(tmp_path: Path) -> None:
    plan = plan_of(small_job(tmp_path, faults.mismatch(2, 3, "size")), scale=0.001)

    at_3 = {r.rank: next(o.numel for o in r.ops if o.seq == 3 and o.group == 0) for r in plan.ranks}
    assert at_3[0] == at_3[1] == at_3[3] != at_3[2]


def test_a_dtype_the_backend_lacks_becomes_one_of_the_same_width() -> None:
    assert replay_dtype("Float8_e4m3fn", "gloo", "all_reduce") == ("uint8", 1)
    assert replay_dtype("Float8_e5m2", "nccl", "all_reduce") == ("uint8", 1)
    assert replay_dtype("Float8_e5m2", "nccl", "all_gather") == ("float8_e5m2", 1)
    assert replay_dtype("BFloat16", "gloo", "all_reduce") == ("bfloat16", 1)
    assert replay_dtype("Bool", "gloo", "broadcast") == ("uint8", 1)
    assert replay_dtype("ComplexDouble", "gloo", "all_reduce") == ("float64", 2)


def test_the_plan_says_which_dtype_it_replaced(tmp_path: Path) -> None:
    job = CustomJob(world_size=2)
    for rank in job.ranks():
        job.on(rank).coll(WORLD, "all_reduce", [(64,)], dtype="Float8_e4m3fn", site="grad_sync")
    sim = simulate(SimSpec(layout=job, program=ProgramSpec(backend="gloo"), timeout_ms=5000))
    write_dumps(sim, tmp_path, Output(fmt="torch", pattern="rank_{rank}"))

    plan = plan_of(tmp_path)

    assert {o.dtype for r in plan.ranks for o in r.ops} == {"uint8"}
    assert any("Float8_e4m3fn replayed as uint8" in note for note in plan.notes)


def test_an_uneven_all_to_all_whose_members_disagree_keeps_each_rank_s_own_totals() -> None:
    plan = plan_of(ROOT / "sample_dumps" / "moe_split_mismatch")

    a2a = [o for r in plan.ranks for o in r.ops if o.kind == Kind.ALL_TO_ALL]
    assert a2a and all(sum(o.splits_in) == o.numel for o in a2a)


def test_sends_and_recvs_of_a_recorder_that_keeps_no_peer_are_left_out_with_a_note() -> None:
    plan = plan_of(ROOT / "sample_dumps" / "hccl_healthy")

    assert any(n.startswith("batch_isend_irecv: not replayed") for n in plan.notes)
    assert all(
        o.peer is not None for r in plan.ranks for o in r.ops if o.kind in (Kind.SEND, Kind.RECV)
    )


# --- what a run measured, and how a stopped one is told ----------------------------------------


def outcome_of(
    plan: ReplayPlan, results: Mapping[int, RankResult | None], **codes: int
) -> RunOutcome:
    exits = tuple(
        RankExit(rank, codes.get(f"rank{rank}", 0), False, results.get(rank))
        for rank in range(plan.world_size)
    )
    return RunOutcome(exits, Path("/nonexistent/fr"), 1.0)


def test_per_op_times_are_min_median_max_over_every_rank_and_iteration() -> None:
    plan = plan_of(HEALTHY, window=Window(seq=(1, 1)))  # one all_reduce on every rank
    results = {
        rank: RankResult(rank, True, ((0.001 * (rank + 1), 0.003 * (rank + 1)),))
        for rank in range(4)
    }

    (op,) = per_op(plan, outcome_of(plan, results))
    rows = per_rank(plan, outcome_of(plan, results))

    assert (op.group, op.seq, op.op, op.ranks) == ("0", 1, "all_reduce", (0, 1, 2, 3))
    assert op.slowest_rank == 3
    assert (op.stats.min_ms, op.stats.max_ms, op.stats.samples) == (1.0, 12.0, 8)
    assert rows[1].stats == Stats(2.0, 4.0, 6.0, 2)
    assert table([op]).splitlines()[2].split() == [
        "0",
        "(default_pg)",
        "1",
        "all_reduce",
        "16",
        "float32",
        "0-3",
        "1.000",
        "3.500",
        "12.000",
        "3",
    ]


def test_a_stopped_replay_says_where_each_rank_stopped() -> None:
    plan = plan_of(HEALTHY, window=Window(seq=(1, 1)))
    results: dict[int, RankResult | None] = {
        0: RankResult(0, False, ((),), "RuntimeError: Timed out", 0, 0),
        1: RankResult(1, False, ((),), "RuntimeError: Timed out", None, 0),
        2: None,
        3: RankResult(3, True, ((0.001,),), peer_failed=True),
    }

    lines = endings(plan, outcome_of(plan, results, rank2=-signal.SIGABRT))

    assert lines[2:] == [
        "  rank 0: RuntimeError: Timed out in all_reduce #1 of group '0' "
        "(round 1, the warm-up counted)",
        "  rank 1: RuntimeError: Timed out in the barrier after round 1: "
        "it had run every op it recorded",
        "  rank 2: aborted (SIGABRT, no Python error: gloo aborts a rank that receives more "
        "bytes than it posted)",
        "  rank 3: completed",
        "  ranks 1,3 ran every op of the round; rank 0 stopped in one",
    ]


def test_a_replay_prints_its_table_first_and_how_it_ended_last() -> None:
    """GIVEN a replay of one all_reduce that rank 2 did not finish; WHEN it is told; THEN the
    header and table open it, and the ranks' endings and the answer's heading close it."""
    plan = plan_of(HEALTHY, window=Window(seq=(1, 1)))
    done = {rank: RankResult(rank, True, ((0.001,),)) for rank in range(4)}
    stopped = {**done, 2: None}

    ran = session.ReplayReport(plan, outcome_of(plan, done), None)
    stuck = session.ReplayReport(plan, outcome_of(plan, stopped, rank2=1), None)
    other_rank = session.ReplayReport(plan, outcome_of(plan, done), None, reporter=False)

    assert opening(ran).splitlines()[0].startswith(f"replay of {plan.source}: 4 ranks, gloo")
    assert opening(ran).endswith(table(per_op(plan, ran.outcome)))
    assert closing(ran, kept=False) == "replay: every op of every rank completed"
    assert closing(stuck, kept=False).splitlines()[1] == "REPLAY STOPPED. How each rank ended:"
    assert closing(stuck, kept=False).endswith("no rank wrote a Flight Recorder dump")
    assert opening(other_rank) == "replay: rank 0: completed"


# --- the command without torch, and its misuse ------------------------------------------------


def test_replay_without_torch_says_to_install_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(session, "torch_available", lambda: False)

    code = cli.run(["replay", str(HEALTHY)])

    err = capsys.readouterr().err
    assert code == cli.EXIT_ERROR
    assert err.count("\n") == 2 and "pip install 'fr-analyze[replay]'" in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--scale", "2"], "--scale 2"),
        (["--backend", "mpi"], "--backend 'mpi'"),
        (["--last", "2", "--seq", "1:3"], "--last and --seq"),
    ],
)
def test_bad_replay_options_are_one_line_errors(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.run(["replay", str(HEALTHY), *args])

    err = capsys.readouterr().err
    assert code == cli.EXIT_ERROR
    assert err.count("\n") == 2 and words in err


def test_without_torch_the_analysis_works_and_replay_says_to_install_the_extra() -> None:
    code = (
        "import sys; sys.modules['torch'] = None  # `import torch` fails, as when it is missing\n"
        "from fr_analyzer.cli import run\n"
        f"analyzed = run(['-d', {str(HEALTHY)!r}])\n"
        f"replayed = run(['replay', {str(HEALTHY)!r}])\n"
        "print('codes', analyzed, replayed)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert ran.stdout.splitlines()[-1] == "codes 0 2", ran.stderr
    assert ran.stderr.splitlines()[0] + "\n" == (
        "fr-analyze: error: fr-analyze replay needs torch: pip install 'fr-analyze[replay]'\n"
    )


def test_fr_analyzer_and_the_replay_plan_import_no_torch() -> None:
    code = (
        "import sys, fr_analyzer.cli, fr_analyzer.replay.session, fr_analyzer.replay.results; "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, Launch(3, 8, 1)),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "5"}, Launch(5, 8, 5)),
        ({"RANK": "2", "WORLD_SIZE": "4", "SLURM_PROCID": "9"}, Launch(2, 4, 0)),
    ],
)
def test_env_launcher_reads_torchrun_then_srun(env: dict[str, str], expected: Launch) -> None:
    assert launch_from(env) == expected


def test_env_launcher_without_a_launcher_s_variables_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="RANK/WORLD_SIZE"):
        launch_from({"MASTER_ADDR": "127.0.0.1"})


def test_ranks_still_running_at_the_deadline_are_killed_by_pid(tmp_path: Path) -> None:
    sleepers = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)
    ]
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    procs = [quick, *sleepers]
    try:
        killed = wait_or_kill(procs, time.monotonic() + 1.5, tmp_path)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    assert killed == {1, 2}
    assert quick.returncode == 0
    assert all(p.returncode == -signal.SIGKILL for p in sleepers)


def test_a_folder_with_no_dumps_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.run(["replay", str(tmp_path)])

    err = capsys.readouterr().err
    assert code == cli.EXIT_ERROR
    assert err.count("\n") == 2 and err.startswith("fr-analyze: error:")


# --- real replays: 4 gloo ranks on 127.0.0.1 --------------------------------------------------


def replay(args: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`fr-analyze replay ... --out out` in this process; afterwards, no worker of it is left
    (any found is killed by its pid, and the test fails)."""
    try:
        code = cli.run(["replay", *args, "--out", str(out)])
    finally:
        left = _workers_of(out)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"workers left running: {left}"
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _workers_of(out: Path) -> list[int]:
    """The pids of the replay workers whose command line names `out`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            any(b"fr_analyzer.replay.worker" in arg for arg in cmdline)
            and str(out).encode() in cmdline
        ):
            found.append(int(proc.name))
    return found


@needs_torch
@pytest.mark.slow
def test_healthy_replay_exits_0_and_times_every_op(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timings = tmp_path / "timings.json"
    args = [str(HEALTHY), "--iterations", "2", "--timeout", "20", "--deadline", "120"]

    code, printed = replay([*args, "--json", str(timings)], tmp_path / "run", capsys)

    assert code == cli.EXIT_OK, printed
    lines = [ln.split() for ln in printed.splitlines()]
    listed = {(ln[0], ln[2]) for ln in lines if len(ln) > 3 and ln[2].isdigit()}
    assert listed == {("0", str(s)) for s in range(1, 23)} | {
        (g, str(s)) for g in ("1", "2") for s in (1, 2, 3)
    }
    assert "every op of every rank completed" in printed
    data = json.loads(timings.read_text())
    assert data["ok"] is True and len(data["ops"]) == 28
    assert len(data["rank_ops"]) == 4 * 25
    for row in data["rank_ops"]:
        stats = row["stats"]
        assert stats["samples"] == 2
        assert 0 <= stats["min_ms"] <= stats["median_ms"] <= stats["max_ms"]


@needs_torch
@pytest.mark.slow
def test_replay_where_rank_2_recorded_another_size_stops_and_names_rank_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dumps = small_job(tmp_path / "dumps", faults.mismatch(2, 3, "size"))
    args = [str(dumps), "--iterations", "1", "--timeout", "3", "--deadline", "90"]

    code, printed = replay(args, tmp_path / "run", capsys)

    assert code == cli.EXIT_FINDINGS, printed
    assert "REPLAY STOPPED" in printed
    answer = next(ln for ln in printed.splitlines() if ln.startswith(("HUNG.", "DESYNC.", "SLOW.")))
    assert "rank 2 " in answer, printed
    assert list((tmp_path / "run" / "fr").iterdir())


@needs_torch
@pytest.mark.slow
def test_scaled_replay_where_rank_3_called_another_op_names_rank_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = ROOT / "sample_dumps" / "gloo_op_mismatch"  # rank 3 all_gathers, the rest all_reduce
    args = [str(sample), "--scale", "0.5", "--timeout", "3", "--deadline", "90"]

    code, printed = replay(args, tmp_path / "run", capsys)

    assert code == cli.EXIT_FINDINGS, printed
    answer = next(ln for ln in printed.splitlines() if ln.startswith("DESYNC."))
    assert answer.startswith("DESYNC. rank 3 disagrees"), printed


@needs_torch
@pytest.mark.slow
def test_under_torchrun_s_variables_every_rank_replays_and_rank_0_reports(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "shared"
    procs = []
    for rank in range(4):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="4",
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            PYTHONPATH=str(ROOT),
        )
        argv = [sys.executable, "-m", "fr_analyzer", "replay", str(HEALTHY), "--launcher", "env"]
        argv += ["--iterations", "1", "--timeout", "20", "--out", str(out)]
        procs.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    try:
        printed = [p.communicate(timeout=120)[0].decode() for p in procs]
    finally:
        for proc in procs:  # every one, by its pid, whatever happened
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    assert [p.returncode for p in procs] == [0] * 4, printed
    assert "every op of every rank completed" in printed[0]
    assert any(line.split()[:3] == ["0", "(default_pg)", "22"] for line in printed[0].splitlines())
    for rank in (1, 2, 3):
        assert printed[rank].strip() == f"replay: rank {rank}: completed"


@needs_torch
@pytest.mark.slow
def test_the_real_gpu_execution_trace_replays_on_gloo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # tests/data/real_nccl/et: one rank, three groups, coalesced blocks, a bfloat16 broadcast
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(ROOT / "tests" / "data" / "real_nccl" / "et" / "rank-0.et.json", traces)
    timings = tmp_path / "timings.json"
    args = [str(traces), "--iterations", "2", "--timeout", "20", "--deadline", "90"]

    code, printed = replay([*args, "--json", str(timings)], tmp_path / "run", capsys)

    assert code == cli.EXIT_OK, printed
    assert "1 ranks, gloo, 9 ops in all" in printed
    data = json.loads(timings.read_text())
    ops = {(op["group"], op["seq"], op["op"]) for op in data["ops"]}
    assert ("2", 6, "broadcast") in ops and ("1", 6, "coalesced") in ops
    assert len(ops) == 9
