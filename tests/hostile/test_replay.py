"""Hostile input to `fr-analyze replay` (issue 44): what an attacker with a dump folder or a
shared `--out` tries, and what the replay does now.

- A `json.py` (`numpy.py`, `fr_analyzer.py`) in the folder the replay runs from is never
  imported by a rank: ranks run isolated, in a folder of their own.
- A stray file `rank_1048575` does not make a 1,048,576-rank plan, thousands of groups do not
  start a thread each per rank past the process limit, and a tensor recorded as 2**31 floats
  is not allocated as recorded: each is refused in one line naming the limit and what raises
  it, before anything starts.
- A link planted in `--out` (`plan.json`, `logs/`, `stop`, `fr/`) is refused or replaced,
  never written through; a plan replaced there after it was written is not run.
- SIGTERM, SIGHUP (and SIGKILL) to the replay leave no rank running.

Every process a test starts is bounded in time and killed by its pid (or its process group).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fr_analyzer import cli
from fr_analyzer.errors import OutputError, UsageError
from fr_analyzer.load.safety.limits import LIMITS
from fr_analyzer.load.sources.base import Directory
from fr_analyzer.replay import bounds, files, session
from fr_analyzer.replay.plan import Kind, OpSpec, PlanOptions, ReplayBackend
from fr_analyzer.replay.runner import Launch, RunOptions, Stopped, stopped_by, write_plan
from fr_analyzer.replay.worker import WorkerArgs, read_result
from fr_analyzer.replay.worker import run as run_rank
from tools.frsim import CustomJob, Output, ProgramSpec, SimSpec, simulate, write_dumps
from tools.frsim.custom import WORLD

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "sample_dumps" / "gloo_healthy"
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed (the replay extra)"
)
DECOYS = ("json", "numpy", "fr_analyzer", "torch", "argparse", "sitecustomize", "usercustomize")
"""Modules a rank imports (or would, were the folder on its path): each decoy leaves a mark."""


def all_reduces(dumps: Path, sizes_by_rank: list[list[int]]) -> Path:
    """A gloo job whose rank r records a world all_reduce of each element count in
    `sizes_by_rank[r]`, written as torch's pickles `rank_<r>`."""
    job = CustomJob(world_size=len(sizes_by_rank))
    for rank in job.ranks():
        ops = job.on(rank)
        ops.step(0)
        for n in sizes_by_rank[rank]:
            ops.coll(WORLD, "all_reduce", [(n,)], site="grad_sync")
    sim = simulate(SimSpec(layout=job, program=ProgramSpec(backend="gloo"), timeout_ms=5000))
    write_dumps(sim, dumps, Output(fmt="torch", pattern="rank_{rank}"))
    return dumps


def one_line_error(code: int, err: str) -> str:
    assert code == cli.EXIT_ERROR, err
    assert err.count("\n") == 2 and err.startswith("fr-analyze: error: "), err
    assert "Traceback" not in err
    return err


@pytest.fixture
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch taken as installed (a refusal comes before it is needed), and a rank started
    fails the test."""

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("a rank was started")

    monkeypatch.setattr(session, "torch_available", lambda: True)
    monkeypatch.setattr(session, "spawn", started)
    monkeypatch.setattr(session, "in_process", started)


# --- ranks start isolated -----------------------------------------------------------------


@needs_torch
@pytest.mark.slow
def test_replay_from_a_folder_of_decoy_modules_imports_none_of_them(tmp_path: Path) -> None:
    # GIVEN a dump folder holding json.py, numpy.py, fr_analyzer.py, torch.py, argparse.py,
    # sitecustomize.py and usercustomize.py, each of which leaves a mark when imported
    dumps = all_reduces(tmp_path / "dumps", [[64], [64]])
    marks = tmp_path / "marks"
    marks.mkdir()
    for name in DECOYS:
        (dumps / f"{name}.py").write_text(
            f"open({str(marks / name)!r}, 'w').close()\nraise SystemExit('decoy {name}')\n"
        )

    # WHEN the replay runs from that folder (`cd dumps && fr-analyze replay .`)
    argv = [sys.executable, "-P", "-m", "fr_analyzer", "replay", ".", "--out", str(tmp_path / "o")]
    argv += ["--iterations", "1", "--warmup", "0", "--timeout", "20", "--deadline", "60"]
    ran = run_bounded(argv, cwd=dumps, timeout=120)

    # THEN every rank completed and no decoy was imported
    assert ran.returncode == cli.EXIT_OK, ran.stdout + ran.stderr
    assert "every op of every rank completed" in ran.stdout
    assert sorted(p.name for p in marks.iterdir()) == []


def run_bounded(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`argv` in its own process group, killed with all of it after `timeout` seconds."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_group(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill `proc`'s process group (it leads one) and `proc`, if still running."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait()


# --- the plan is bounded by the host ------------------------------------------------------


def test_stray_rank_files_far_beyond_the_dumps_are_not_believed_the_plan_keeps_its_world(
    tmp_path: Path,
) -> None:
    # GIVEN a 4-rank job's dumps and two stray files named rank_1048574 and rank_1048575
    dumps = tmp_path / "dumps"
    shutil.copytree(HEALTHY, dumps)
    for rank in (1048574, 1048575):
        (dumps / f"rank_{rank}").write_text("not a dump\n")
    options = session.ReplayOptions(plan=PlanOptions(), run=RunOptions(tmp_path / "o"))

    # WHEN it is planned
    started = time.monotonic()
    plan = session.make_plan(Directory(dumps), options)

    # THEN the loader sets the stray files aside (they show no job of 2^20 ranks): 4 ranks
    assert plan.world_size == 4 and len(plan.ranks) == 4
    assert time.monotonic() - started < 30


def test_an_unreadable_file_claiming_a_world_is_refused_by_the_replay_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The replay's own bound, behind the loader's: a world that only an unreadable file's
    name claims is not believed (one line, naming the file and --max-ranks)."""
    from fr_analyzer.model.records import UnreadableDump

    with pytest.raises(UsageError) as refused:
        bounds.check_world(
            1_048_576,
            64,
            (),
            [UnreadableDump("dumps/rank_1048575", 1_048_575, "not a dump")],
            "dumps",
        )
    message = str(refused.value)
    assert "rank_1048575: a 1,048,576-rank world claimed only by the name" in message
    assert "--max-ranks raises it" in message


def test_a_world_above_max_ranks_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_starts: None
) -> None:
    code = cli.run(["replay", str(HEALTHY), "--max-ranks", "3", "--out", str(tmp_path / "o")])

    err = one_line_error(code, capsys.readouterr().err)
    assert "the dumps make a 4-rank world; a replay starts at most 3 ranks" in err
    assert "--max-ranks raises it" in err


def test_an_all_reduce_recorded_as_2_31_floats_is_refused_before_any_allocation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_starts: None
) -> None:
    # GIVEN two ranks that recorded an all_reduce of 2**31 floats (8 GiB each)
    dumps = all_reduces(tmp_path / "dumps", [[2**31], [2**31]])

    # WHEN it is replayed with 10 GiB for tensors
    code = cli.run(["replay", str(dumps), "--max-bytes", "10G", "--out", str(tmp_path / "o")])

    # THEN one line names the op, the bytes, the limit and the flags
    err = one_line_error(code, capsys.readouterr().err)
    assert "rank 0's all_reduce #1 of group '0' (2,147,483,648 x float32, scale 1)" in err
    assert "holds 8.0 GiB; the 2 ranks started here, 16.0 GiB at once" in err
    assert "above the 10.0 GiB" in err and "--max-bytes raises it" in err


def test_the_byte_bound_applies_after_scale(tmp_path: Path) -> None:
    dumps = all_reduces(tmp_path / "dumps", [[2**31], [2**31]])
    scaled = session.ReplayOptions(
        plan=PlanOptions(scale=0.001),
        run=RunOptions(tmp_path / "o"),
        max_bytes=100 << 20,
    )

    plan = session.make_plan(Directory(dumps), scaled)

    assert [op.numel for op in plan.ranks[0].ops] == [2147484]  # 8 MiB a rank: it fits
    unscaled = dataclasses.replace(scaled, plan=PlanOptions())
    with pytest.raises(UsageError, match="--max-bytes raises it"):
        session.make_plan(Directory(dumps), unscaled)


def test_with_nccl_each_rank_s_own_tensors_count_against_the_bound(tmp_path: Path) -> None:
    dumps = all_reduces(tmp_path / "dumps", [[2**28], [2**28]])  # 1 GiB a rank
    options = session.ReplayOptions(
        plan=PlanOptions(backend=ReplayBackend.NCCL),
        run=RunOptions(tmp_path / "o", backend=ReplayBackend.NCCL),
    )

    fits = session.make_plan(Directory(dumps), dataclasses.replace(options, max_bytes=1 << 30))

    assert fits.world_size == 2  # 2 GiB in all, but each rank on its own GPU
    with pytest.raises(UsageError, match="one GPU's memory"):
        session.make_plan(Directory(dumps), dataclasses.replace(options, max_bytes=(1 << 30) - 1))


def test_under_a_launcher_the_world_is_the_launcher_s_and_only_this_rank_s_bytes_count(
    tmp_path: Path,
) -> None:
    dumps = tmp_path / "dumps"
    shutil.copytree(HEALTHY, dumps)
    options = session.ReplayOptions(plan=PlanOptions(), run=RunOptions(tmp_path / "o"))

    with pytest.raises(UsageError, match="the job has 8 ranks and the dumps 4"):
        session.make_plan(Directory(dumps), options, Launch(0, 8, 0))


def test_a_job_of_many_groups_is_refused_within_half_the_process_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_starts: None
) -> None:
    # GIVEN 2 ranks that created 1,500 groups of both (gloo starts threads for each)
    job = CustomJob(world_size=2)
    pairs = [job.new_group(f"g{i}", [0, 1]) for i in range(1500)]
    for rank in job.ranks():
        ops = job.on(rank)
        ops.step(0)
        for gid in pairs:
            ops.coll(gid, "all_reduce", [(4,)], site="grad_sync")
    sim = simulate(SimSpec(layout=job, program=ProgramSpec(backend="gloo"), timeout_ms=5000))
    write_dumps(sim, tmp_path / "dumps", Output(fmt="torch", pattern="rank_{rank}"))
    limits = bounds.HostLimits(max_ranks=64, max_bytes=1 << 30, max_threads=10_000)

    # WHEN it is replayed where half the process limit is 10,000 threads
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bounds, "host_limits", lambda: limits)
        code = cli.run(["replay", str(tmp_path / "dumps"), "--out", str(tmp_path / "o")])

    # THEN one line says how many groups and threads, and which limit
    err = one_line_error(code, capsys.readouterr().err)
    assert "1,500 process groups, 2 rank(s) started here: about 12,032 threads" in err
    assert "above 10,000, half this user's process limit (`ulimit -u` raises it)" in err


@pytest.mark.parametrize(
    ("op", "held"),
    [
        (OpSpec(Kind.ALL_REDUCE, "all_reduce", 0, 1, 10, "float32", ""), 40),
        (OpSpec(Kind.ALL_GATHER, "all_gather", 0, 1, 10, "float32", ""), 40 + 4 * 40),
        (OpSpec(Kind.REDUCE_SCATTER, "reduce_scatter", 0, 1, 10, "bfloat16", ""), 20 + 4 * 20),
        (OpSpec(Kind.GATHER, "gather", 0, 1, 10, "float64", "", root=0), 80 + 4 * 80),
        (OpSpec(Kind.GATHER, "gather", 0, 1, 10, "float64", "", root=1), 80),
        (
            OpSpec(
                Kind.ALL_TO_ALL,
                "all_to_all",
                0,
                1,
                6,
                "uint8",
                "",
                splits_in=(1, 5),
                splits_out=(3, 3),
            ),
            12,
        ),
        (OpSpec(Kind.BARRIER, "barrier", 0, 1, 0, "float32", ""), 0),
    ],
)
def test_a_rank_s_bytes_for_an_op_are_what_the_worker_allocates(op: OpSpec, held: int) -> None:
    assert bounds.op_bytes(op, group_size=4, rank=0) == held


def test_the_host_s_defaults_come_from_its_cpus_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 1)

    limits = bounds.host_limits()

    assert 1 <= limits.max_ranks <= LIMITS.replay_ranks_per_cpu
    assert 0 < limits.max_bytes <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# --- --out is written without following links --------------------------------------------


@pytest.fixture
def precious(tmp_path: Path) -> Path:
    """A file of the victim's that a planted link points at."""
    path = tmp_path / "precious.txt"
    path.write_text("mine\n")
    return path


@pytest.mark.parametrize("name", ["plan.json", "stop", "result_0.json", "logs", "fr"])
def test_a_link_planted_in_out_is_refused_and_nothing_is_written_through_it(
    name: str,
    tmp_path: Path,
    precious: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_starts: None,
) -> None:
    out = tmp_path / "shared"
    out.mkdir()
    (out / name).symlink_to(precious if "." in name or name == "stop" else tmp_path)

    code = cli.run(["replay", str(HEALTHY), "--out", str(out)])

    err = one_line_error(code, capsys.readouterr().err)
    assert f"{out / name}: a symbolic link where the replay writes" in err
    assert precious.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt", "shared"]


@pytest.mark.parametrize("inside", ["logs", "fr"])
def test_a_link_inside_logs_or_fr_is_refused(
    inside: str,
    tmp_path: Path,
    precious: Path,
    capsys: pytest.CaptureFixture[str],
    nothing_starts: None,
) -> None:
    out = tmp_path / "shared"
    (out / inside).mkdir(parents=True)
    (out / inside / "rank_0.log").symlink_to(precious)

    code = cli.run(["replay", str(HEALTHY), "--out", str(out)])

    assert "a symbolic link where the replay writes" in one_line_error(
        code, capsys.readouterr().err
    )
    assert precious.read_text() == "mine\n"


def test_an_out_that_is_a_link_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_starts: None
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")

    code = cli.run(["replay", str(HEALTHY), "--out", str(tmp_path / "out")])

    assert "a symbolic link; give the folder itself" in one_line_error(
        code, capsys.readouterr().err
    )
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_link_planted_after_the_check_is_replaced_not_written_through(
    tmp_path: Path, precious: Path
) -> None:
    # the check passed; then plan.json, stop and a log appear as links (a race)
    out = tmp_path / "out"
    (out / "logs").mkdir(parents=True)
    for name in ("plan.json", "stop", "logs/rank_0.log"):
        (out / name).symlink_to(precious)
    hard = out / "result_0.json"
    os.link(precious, hard)

    files.write_in(out, "plan.json", b"{}")
    files.write_in(out, "stop", b"")
    files.write_in(out, "result_0.json", b"{}")
    with files.folder(out / "logs") as logs:
        os.close(files.create(logs, "rank_0.log", out / "logs" / "rank_0.log"))

    assert precious.read_text() == "mine\n"
    assert not any(
        p.is_symlink() for p in [out / "plan.json", out / "stop", out / "logs" / "rank_0.log"]
    )
    assert (out / "plan.json").read_text() == "{}"


def test_a_folder_link_planted_after_the_check_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "fr").symlink_to(tmp_path)

    with pytest.raises(OutputError, match="a symbolic link or not a folder"):
        files.ensure(out, "fr")
    with pytest.raises(OutputError, match="a symbolic link or not a folder"):
        files.write_in(out / "fr", "rank_0.pkl", b"dump")
    assert not (tmp_path / "rank_0.pkl").exists()


def test_a_plan_changed_in_out_after_it_was_written_is_not_run(tmp_path: Path) -> None:
    # GIVEN the plan as the runner wrote it, then replaced in the shared --out by another
    plan = session.make_plan(
        Directory(HEALTHY), session.ReplayOptions(PlanOptions(), RunOptions(tmp_path))
    )
    path, digest = write_plan(plan, tmp_path)
    files.write_in(tmp_path, path.name, path.read_bytes().replace(b'"numel": 6', b'"numel": 9'))

    # WHEN a rank starts on it
    args = WorkerArgs(path, 0, 4, 0, "gloo", "tcp://127.0.0.1:1", tmp_path, 1.0, 1, 0)
    status = run_rank(dataclasses.replace(args, plan_sha256=digest))

    # THEN it runs nothing and says why
    assert status == 2
    result = read_result(tmp_path / "result_0.json")
    assert not result.ok and "changed after the replay wrote it" in result.error


# --- a stopped replay leaves no rank --------------------------------------------------------


def processes() -> Iterator[tuple[int, list[str], bytes]]:
    """Every live process (from /proc): its pid, the fields of its stat after the name
    (state, parent, process group, ...), and its command line."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            yield int(entry.name), fields, cmdline


def ranks_of(pid: int) -> set[int]:
    """The pids of the replay ranks whose parent is `pid`."""
    return {
        p for p, fields, cmd in processes() if int(fields[1]) == pid and b"replay.worker" in cmd
    }


def group_of(pgid: int) -> list[str]:
    """The command lines of the processes still in process group `pgid` (a failure's why)."""
    return [
        f"{p}: {b' '.join(cmd.split(bytes(1))).decode(errors='replace')[:120]}"
        for p, fields, cmd in processes()
        if int(fields[2]) == pgid
    ]


def alive(pids: set[int]) -> set[int]:
    """Those of `pids` still running (a zombie waiting for its reaper is not)."""
    left = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            left.add(pid)
    return left


def _stops_default() -> None:
    """SIGHUP and SIGINT as a terminal's foreground job has them: a suite run under nohup
    hands them on ignored, and one run in the background of a shell without job control
    (`cmd &` in a script) hands SIGINT on ignored; the replay keeps a signal ignored so, and
    Python turns SIGINT into KeyboardInterrupt only where it was not ignored."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def blocking_replay(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], set[int]]]:
    """A 2-rank replay whose rank 0 waits (up to 120 s) in an all_reduce rank 1 never calls,
    started in its own process group; yields it and its ranks' pids once both run. Whatever
    happens, the replay's group and every rank seen are killed by pid at the end."""
    dumps = all_reduces(tmp_path / "dumps", [[64, 64], [64]])
    argv = [sys.executable, "-P", "-m", "fr_analyzer", "replay", str(dumps)]
    argv += ["--out", str(tmp_path / "o"), "--timeout", "120", "--deadline", "300"]
    argv += ["--iterations", "1", "--warmup", "0"]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_stops_default,  # as a terminal's foreground job, however the suite runs
    )
    ranks: set[int] = set()
    try:
        limit = time.monotonic() + 60
        while len(ranks) < 2 and time.monotonic() < limit and proc.poll() is None:
            ranks |= ranks_of(proc.pid)
            time.sleep(0.1)
        assert len(ranks) == 2, "the ranks did not start"
        while not (tmp_path / "o" / "result_1.json").exists() and time.monotonic() < limit:
            time.sleep(0.1)  # rank 1 is done; rank 0 waits in its second all_reduce
        yield proc, ranks
    finally:
        kill_group(proc)
        for pid in alive(ranks):
            os.kill(pid, signal.SIGKILL)


@needs_torch
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_replay_stops_every_rank(
    sig: signal.Signals, blocking_replay: tuple[subprocess.Popen[str], set[int]]
) -> None:
    proc, ranks = blocking_replay
    assert alive(ranks) == ranks

    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the replay did not stop; its group holds {group_of(proc.pid)}")

    limit = time.monotonic() + 5
    while alive(ranks) and time.monotonic() < limit:
        time.sleep(0.1)
    assert alive(ranks) == set()
    if sig == signal.SIGINT:  # Ctrl-C: typer's exit code for it, and no message
        assert proc.returncode == 130, err
    else:
        assert proc.returncode == cli.EXIT_ERROR, err
        assert err == (
            f"fr-analyze: error: replay stopped by {sig.name}: every rank was killed\n"
            f"hint: {Stopped.default_hint}\n"
        )


@needs_torch
@pytest.mark.slow
def test_ranks_die_with_a_replay_killed_outright(
    blocking_replay: tuple[subprocess.Popen[str], set[int]],
) -> None:
    proc, ranks = blocking_replay

    proc.kill()  # SIGKILL: no handler runs; PR_SET_PDEATHSIG does the rest
    proc.wait(timeout=20)

    limit = time.monotonic() + 5
    while alive(ranks) and time.monotonic() < limit:
        time.sleep(0.1)
    assert alive(ranks) == set()


def test_a_hangup_ignored_by_nohup_stays_ignored() -> None:
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stopped_by((signal.SIGTERM, signal.SIGHUP)):
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, before)
