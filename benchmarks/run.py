"""Scale benchmark: how fr-analyze's time and memory grow with the number of ranks.

For each size and each writer (`--writer torch,pickle,json,gz`: the byte formats a user can
bring, see `benchmarks.gen`) it generates (or reuses) a dump set with `benchmarks.gen`, then
measures, one tool at a time so that nothing competes for the two cores:

- the load floor: one fresh Python process that only loads every file with the standard library
  (gc disabled): `pickle.load` for the pickles, `json.load` for JSON, gunzip then `pickle.loads`
  for gzip;
- `fr-analyze -d DIR` (its package's bytecode written first, as an installed tool has it):
  wall time, CPU time, peak memory, exit code, verdict and which of its readers read how many
  ranks (the report's `dumps.readers`, when it has one);
- with `--compare`: PyTorch's `torchfrtrace` (`python -m torch.distributed.flight_recorder.fr_trace
  DIR -p PREFIX`) from a separate virtualenv, killed at `--time-limit` or `--mem-limit-gib`.

Memory is reported twice: `max RSS` is the largest resident set of any single process of the
tree (`ru_maxrss` of the waited-for tree, from `wait4`); `peak PSS` is the peak of the
proportional set size summed over the whole tree (parent and worker processes, sampled five
times a second from /proc), which counts pages shared between forked workers once.

Results print as one table and are written as JSON (default `bench-results/bench.json` in the
repository, which git ignores) so that runs can be compared across commits.

Usage: `python -m benchmarks.run [--sizes 256,1024] [--writer torch,json] [--fault none]
[--compare]`.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from .gen import (
    DEFAULT_OUT,
    FAULTS,
    FILE_PREFIX,
    FRAME_MODES,
    LEGACY_PICKLERS,
    WRITERS,
    Manifest,
    Spec,
    generate,
    ring_steps,
)
from .gen import stderr_progress as gen_progress

with contextlib.suppress(ImportError):  # tools/ is beside benchmarks/ in the repository
    from tools import ray_head

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = REPO / "bench-results" / "bench.json"
DEFAULT_SIZES = (256, 1024)
TORCH_PYTHON = Path("/tmp/torchvenv/bin/python")
SCHEMA = "fr-analyze.bench/1"
GIB = 1 << 30
SAMPLE_SECONDS = 0.2

LOAD_FLOOR_CODE = """
import gc, gzip, json, os, pickle, sys, time
directory, prefix, kind = sys.argv[1:4]
names = sorted(n for n in os.listdir(directory) if n.startswith(prefix))
gc.disable()
start = time.perf_counter()
entries = 0
for name in names:
    with open(os.path.join(directory, name), "rb") as stream:
        if kind == "pickle":
            dump = pickle.load(stream)
        elif kind == "json":
            dump = json.load(stream)
        elif kind == "gzip-pickle":
            dump = pickle.loads(gzip.decompress(stream.read()))
        else:
            raise SystemExit(f"unknown floor {kind!r}")
    entries += len(dump.get("entries", ()))
    del dump
print(json.dumps({"seconds": time.perf_counter() - start, "files": len(names), "entries": entries}))
"""

FLOORS = {
    "torch": "pickle",
    "pickle": "pickle",
    "pickle2": "pickle",
    "json": "json",
    "pyjson": "json",
    "gz": "gzip-pickle",
}
"""Each writer's load floor: how one process reads its files fastest with the standard library
(`pickle.load`; `json.load`; gunzip in memory, then `pickle.loads`)."""

# --- measuring one process tree ----------------------------------------------------------------


@dataclass
class Measurement:
    """One command's run: status is ok, crash, timeout, memory-limit or unavailable."""

    status: str
    exit_code: int | None
    wall_s: float
    cpu_s: float
    max_rss_bytes: int
    peak_tree_pss_bytes: int
    others_cores: float = 0.0  # cores other processes used during the run (skews timings)
    stdout_tail: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    # the tree's peak of anonymous and shared memory: PSS less mapped files' pages (`_memory`)
    peak_tree_held_bytes: int = 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as stream:
                out.extend(int(child) for child in stream.read().split())
        except (OSError, ValueError):
            continue
    return out


def _tree(pid: int) -> list[int]:
    seen, todo = [], [pid]
    while todo:
        current = todo.pop()
        seen.append(current)
        todo.extend(_children(current))
    return seen


def _pss(pid: int) -> int:
    """Proportional set size of one process in bytes (0 if it is gone)."""
    return _memory(pid)[0]


def _memory(pid: int) -> tuple[int, int]:
    """One process's proportional set size, and the part of it the kernel cannot drop (its
    anonymous and shared memory; not the pages of mapped files, such as a table kept out of
    core by `--table-dir`, which it writes back and reads again), in bytes (0 if it is gone)."""
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as stream:
            for line in stream:
                name, _, rest = line.partition(":")
                if name in ("Pss", "Pss_Anon", "Pss_Shmem"):
                    found[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    pss = found.get("Pss", 0)
    if "Pss_Anon" not in found:  # a kernel without the split: all of it counted as held
        return pss, pss
    return pss, found["Pss_Anon"] + found.get("Pss_Shmem", 0)


class _Watch(threading.Thread):
    """Samples the tree's summed PSS (and the part of it held: `_memory`) and kills the tree
    at the time limit, or when what it holds passes the memory limit."""

    def __init__(self, pid: int, time_limit: float, mem_limit: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.time_limit, self.mem_limit = pid, time_limit, mem_limit
        self.peak = 0
        self.peak_held = 0
        self.killed: str | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.perf_counter()
        while not self.stop.wait(SAMPLE_SECONDS):
            sampled = [_memory(p) for p in _tree(self.pid)]
            total, held = sum(s[0] for s in sampled), sum(s[1] for s in sampled)
            self.peak = max(self.peak, total)
            self.peak_held = max(self.peak_held, held)
            if time.perf_counter() - start > self.time_limit:
                self.killed = "timeout"
            elif held > self.mem_limit:
                self.killed = "memory-limit"
            if self.killed:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)  # our own child's session only
                return


class _ClusterWatch(threading.Thread):
    """Samples a Ray cluster while a run uses it: the PSS summed over every Ray process (the
    object store's shared memory counted once) and the bytes in its spill folder."""

    def __init__(self, head: ray_head.Head) -> None:
        super().__init__(daemon=True)
        self.head = head
        self.peak = 0
        self.spilled = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, sum(_pss(p) for p in self.head.processes()))
            self.spilled = max(self.spilled, self.head.spilled_bytes())


def _tail(path: Path, lines: int = 8) -> list[str]:
    try:
        with path.open("rb") as stream:
            stream.seek(max(0, path.stat().st_size - 16_384))
            text = stream.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines()[-lines:]]


def measure(
    cmd: Sequence[str],
    scratch: Path,
    time_limit: float,
    mem_limit: int,
    ok_codes: tuple[int, ...] = (0,),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Measurement:
    """Run `cmd` in its own session; wall time, CPU time and memory of its whole tree.

    Status: ok (exit code in `ok_codes`), crash (any other exit), timeout or memory-limit.
    """
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        busy_before, _ = _cpu_ticks()
        start = time.perf_counter()
        proc = subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=cwd,
        )
        watch = _Watch(proc.pid, time_limit, mem_limit)
        watch.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        busy_after, _ = _cpu_ticks()
        watch.stop.set()
        watch.join()
    cpu = usage.ru_utime + usage.ru_stime
    others = max(0.0, (busy_after - busy_before) / _TICKS_PER_S - cpu) / max(wall, 1e-9)
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped by wait4; tell Popen so it does not try again
    if watch.killed:
        state = watch.killed
    elif code not in ok_codes:
        state = "crash"
    else:
        state = "ok"
    return Measurement(
        status=state,
        exit_code=code,
        wall_s=round(wall, 3),
        cpu_s=round(cpu, 3),
        max_rss_bytes=usage.ru_maxrss * 1024,
        peak_tree_pss_bytes=watch.peak,
        others_cores=round(others, 2),
        peak_tree_held_bytes=watch.peak_held,
        stdout_tail=_tail(out_path),
        stderr_tail=_tail(err_path),
    )


# --- one size --------------------------------------------------------------------------------


@dataclass
class SizeResult:
    """Everything measured for one dump set (JSON-ready)."""

    ranks: int
    fault: str
    frames: str
    pickler: str | None  # before `writer`: "torch" (torch and gz), "python" (pickle), None (json)
    dumps_dir: str
    entries: int
    disk_bytes: int
    generate_s: float
    reused: bool
    load_floor_s: float | None = None  # fastest of the runs
    load_floor_runs_s: list[float] = field(default_factory=list)
    fr_analyze: Measurement | None = None  # the fastest successful run
    fr_analyze_runs_s: list[float] = field(default_factory=list)
    ratio_to_floor: float | None = None  # fastest fr-analyze run / fastest floor run
    paired_ratios: list[float] = field(default_factory=list)
    """Each fr-analyze run over the floor run just before it: on a machine whose speed drifts
    from one minute to the next, a pair is measured at one speed."""
    paired_ratio: float | None = None  # the median of `paired_ratios`
    s_per_million_entries: float | None = None
    expected: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] | None = None
    verdict_ok: bool | None = None
    torchfrtrace: Measurement | None = None
    busy_cores_before: list[float] = field(default_factory=list)  # others' load before each run
    skipped: str | None = None
    writer: str = "torch"
    load_floor_kind: str = ""  # FLOORS[writer]
    readers: dict[str, int] | None = None
    """Ranks each fr-analyze reader read (from the report's `dumps.readers`; None: no such key)."""
    unreadable: int | None = None
    """Rank files fr-analyze could not read (the report's `dumps.unreadable`): every generated
    file is genuine, so any is a wrong answer (a limit refused a genuine dump)."""
    engine: str = "process"  # `--engine`: one process, or a local Ray cluster
    no_cache: bool = False  # `--no-cache`: the first run's writing of the cache left out
    table_on_disk: bool = False  # `--table-dir`: the table out of core
    database: str | None = None  # `-o db.<this>`: the database written too
    cluster_peak_pss_bytes: int | None = None  # Ray: the peak PSS over every Ray process
    spilled_peak_bytes: int | None = None  # Ray: the most bytes its spill folder held


_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    with open("/proc/stat", encoding="ascii") as stream:
        fields = [int(v) for v in stream.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def busy_cores(seconds: float = 2.0) -> float:
    """How many cores other processes keep busy right now (we are idle while sampling)."""
    try:
        busy0, total0 = _cpu_ticks()
        time.sleep(seconds)
        busy1, total1 = _cpu_ticks()
    except (OSError, ValueError, IndexError):
        return 0.0
    cpus = os.cpu_count() or 1
    return cpus * (busy1 - busy0) / max(1, total1 - total0)


def wait_for_idle(max_wait: float, threshold: float = 0.3) -> float:
    """Wait (up to `max_wait` s) until other processes use under `threshold` cores, so that
    timings are not skewed by someone else's job; returns the last busy reading."""
    deadline = time.monotonic() + max_wait
    while True:
        busy = busy_cores()
        if busy < threshold or time.monotonic() >= deadline:
            return round(busy, 2)
        _log(f"  machine busy ({busy:.1f} cores used by other processes); waiting")
        time.sleep(15)


def _warm(directory: Path) -> None:
    """Read every file once so that both the floor and the tools see a warm page cache."""
    with os.scandir(directory) as it:
        for entry in it:
            with open(entry.path, "rb") as stream:
                while stream.read(1 << 20):
                    pass


def load_floor(directory: Path, kind: str = "pickle") -> float:
    """The load floor of a dump set: seconds a fresh Python takes just to read its files."""
    done = subprocess.run(
        [sys.executable, "-c", LOAD_FLOOR_CODE, str(directory), FILE_PREFIX, kind],
        check=True,
        capture_output=True,
        text=True,
    )
    seconds: float = json.loads(done.stdout)["seconds"]
    return round(seconds, 3)


def verdict_matches(expected: dict[str, Any], verdict: dict[str, Any] | None, code: int) -> bool:
    """The report's verdict agrees with the simulator's truth (`Truth.to_dict()`, the set's
    manifest): the same status (ok, desync, hung, slow or incomplete) and, when the truth names
    a root cause, the same root kind, culprit ranks, group and sequence id (collective or p2p)."""
    if verdict is None:
        return False
    if expected["status"] == "ok":
        return code == 0 and verdict.get("status") == "ok"
    if code != 1 or verdict.get("status") != expected["status"]:
        return False
    if expected.get("root") is None:
        return True
    if verdict.get("root_cause") != expected["root"]:
        return False
    if sorted(verdict.get("culprit_ranks") or []) != sorted(expected.get("culprits") or []):
        return False
    if expected.get("group") is not None and verdict.get("group") != expected["group"]:
        return False
    if expected.get("seq") is not None:
        key = "collective_seq_id" if expected.get("seq_kind") == "collective" else "p2p_seq_id"
        return bool(verdict.get(key) == expected["seq"])
    return True


def estimate_bytes(spec: Spec) -> int:
    """Disk a set needs: measured ~300 KB per rank (torch pickles, shared frames; ~1.7x with
    distinct frames) plus each file's copy of the world member list, times WRITER_DISK."""
    per_rank = 310_000 if spec.frames == "shared" else 530_000
    return int(spec.world_size * (per_rank + 7 * spec.world_size) * WRITER_DISK[spec.writer])


WRITER_DISK = {"torch": 1.0, "pickle": 1.1, "pickle2": 1.3, "json": 3.5, "pyjson": 6.0, "gz": 0.15}
"""Disk of each writer's set relative to the torch pickles (256 ranks: 1.03, 3.32, 0.11)."""


def _legacy_pickler(writer: str) -> str | None:
    return {"torch": "torch", "gz": "torch", "pickle": "python"}.get(writer)


def readers_of(report: dict[str, Any]) -> dict[str, int] | None:
    """How many ranks each reader read, from the report's `dumps.readers` (reader name -> list
    of ranks); None when the report has no such key."""
    dumps = report.get("dumps")
    found = dumps.get("readers") if isinstance(dumps, dict) else None
    if not isinstance(found, dict):
        return None
    return {
        str(name): len(ranks) if isinstance(ranks, list) else 0 for name, ranks in found.items()
    }


def fr_analyze_cmd(source: Path | None) -> list[str]:
    """The working tree's `fr-analyze`, or `python -m fr_analyzer` from an exported revision."""
    script = Path(sys.executable).parent / "fr-analyze"
    if source is None and script.exists():
        return [str(script)]
    return [sys.executable, "-m", "fr_analyzer"]


def export_revision(rev: str, into: Path) -> Path:
    """`git archive` the fr_analyzer package of `rev` into `into` (the repo is not touched)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "fr_analyzer"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _compile(root: Path) -> None:
    """Write the bytecode of the fr_analyzer package under `root`, as an installed tool has it
    (pip compiles what it installs; Python writes the rest on the first run). Where
    PYTHONDONTWRITEBYTECODE is set (this sandbox sets it) nothing is ever written, and every
    run would compile the whole package again first: 0.2 s of source compilation on a 6 s
    run, which no user's second run pays."""
    if not compileall.compile_dir(root / "fr_analyzer", quiet=1):
        raise SystemExit(f"could not compile {root / 'fr_analyzer'}")


def run_size(spec: Spec, args: argparse.Namespace) -> SizeResult:
    """Generate (or reuse) the dump set of `spec` (skipped when the disk is short), then time its
    load floor and the tools on it."""
    need = estimate_bytes(spec)
    args.data.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.data).free
    manifest_path = args.data / spec.folder_name() / "manifest.json"
    if not manifest_path.exists() and free < need * 1.15:
        return SizeResult(
            spec.world_size,
            spec.fault,
            spec.frames,
            _legacy_pickler(spec.writer),
            "",
            0,
            need,
            0.0,
            False,
            skipped=f"needs ~{need / GIB:.1f} GiB, {free / GIB:.1f} GiB free",
            writer=spec.writer,
            load_floor_kind=FLOORS[spec.writer],
        )
    tag = f"[{spec.world_size} ranks, {spec.writer}]"
    _log(f"{tag} generating (or reusing) in {args.data}")
    manifest, reused = generate(spec, args.data, args.gen_workers, gen_progress)
    result = _start(spec, manifest, reused)
    directory = Path(manifest.dumps_dir)
    _log(f"{tag} warming the page cache")
    _warm(directory)
    mem_limit = int(args.mem_limit_gib * GIB)
    result.engine = args.engine
    result.no_cache = args.no_cache
    result.table_on_disk = args.table_on_disk
    result.database = args.database
    with tempfile.TemporaryDirectory(prefix="fr-bench-") as tmp, contextlib.ExitStack() as stack:
        scratch = Path(tmp)
        report = scratch / "report.json"
        cmd = [*fr_analyze_cmd(args.source), "-d", str(directory)]
        env = args.env
        head: ray_head.Head | None = None
        if args.engine == "ray":
            _log(f"{tag} starting a local Ray cluster ({args.workers} CPUs)")
            store = int(args.object_store_gib * GIB)
            head = stack.enter_context(ray_head.head(args.workers, store))
            cmd += ["--engine", "ray", "--ray-address", head.address]
            env = {**(env or os.environ), **ray_head.QUIET}
        else:
            cmd += ["--workers", str(args.workers)]
        if args.no_cache:
            cmd += ["--no-cache"]
        if args.table_on_disk:
            (scratch / "table").mkdir()
            cmd += ["--table-dir", str(scratch / "table")]
        cmd += ["--json", str(report)]
        if args.database is not None:
            cmd += ["-o", str(scratch / f"db.{args.database}")]
        _log(f"{tag} load floor ({result.load_floor_kind}), then fr-analyze, {args.repeat} time(s)")
        _log(f"{tag} fr-analyze: {' '.join(cmd)}")
        runs = []
        doc: dict[str, Any] = {}  # the report of the last run that wrote one
        for _ in range(args.repeat):
            # The floor and fr-analyze in pairs, one after the other: the machine's speed
            # drifts (by a third within an hour on the 2-core VM), and a pair sees one speed.
            result.busy_cores_before.append(wait_for_idle(args.idle_wait))
            floor = load_floor(directory, result.load_floor_kind)
            result.load_floor_runs_s.append(floor)
            result.busy_cores_before.append(wait_for_idle(args.idle_wait))
            report.unlink(missing_ok=True)
            # in the exported tree, so that `python -m` does not find the working tree's package
            # first (sys.path[0] is the current directory, ahead of PYTHONPATH)
            watch = _ClusterWatch(head) if head is not None else None
            if watch is not None:
                watch.start()
            # a cache of its own, new each run: every run reads every dump (`--no-cache`,
            # in a way older revisions, without that flag, take too)
            fresh = {**(env or os.environ), "XDG_CACHE_HOME": tempfile.mkdtemp(dir=scratch)}
            run = measure(cmd, scratch, args.time_limit, mem_limit, (0, 1), fresh, args.source)
            if watch is not None:
                watch.stop.set()
                watch.join()
                result.cluster_peak_pss_bytes = max(result.cluster_peak_pss_bytes or 0, watch.peak)
                result.spilled_peak_bytes = max(result.spilled_peak_bytes or 0, watch.spilled)
            if run.status == "ok":
                try:
                    doc = json.loads(report.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    run.status = "crash"  # no report: e.g. a traceback, which also exits 1
            runs.append(run)
            if args.keep_reports is not None and report.exists():
                args.keep_reports.mkdir(parents=True, exist_ok=True)
                kept = f"{spec.world_size}-{spec.writer}-{args.engine}.json"
                shutil.copyfile(report, args.keep_reports / kept)
            if run.status != "ok":
                break
            if floor:
                result.paired_ratios.append(round(run.wall_s / floor, 3))
        result.load_floor_s = min(result.load_floor_runs_s)
        if result.paired_ratios:
            result.paired_ratio = round(statistics.median(result.paired_ratios), 2)
        result.fr_analyze_runs_s = [r.wall_s for r in runs]
        m = result.fr_analyze = min(runs, key=lambda r: (r.status != "ok", r.wall_s))
        if m.status == "ok" and result.load_floor_s:
            result.ratio_to_floor = round(m.wall_s / result.load_floor_s, 2)
            result.s_per_million_entries = round(m.wall_s / (manifest.entries / 1e6), 3)
        verdict = doc.get("verdict") if isinstance(doc, dict) else None
        result.verdict = verdict if isinstance(verdict, dict) else None
        result.readers = readers_of(doc) if isinstance(doc, dict) else None
        result.unreadable = unreadable_of(doc) if isinstance(doc, dict) else None
        code = m.exit_code if m.exit_code is not None else -1
        if m.status == "ok":
            result.verdict_ok = (
                verdict_matches(manifest.expected, result.verdict, code) and not result.unreadable
            )
        if args.compare:
            result.busy_cores_before.append(wait_for_idle(args.idle_wait))
            result.torchfrtrace = _torchfrtrace(directory, scratch, args)
    if args.delete_after:
        shutil.rmtree(directory.parent)
    return result


def _start(spec: Spec, manifest: Manifest, reused: bool) -> SizeResult:
    return SizeResult(
        ranks=spec.world_size,
        fault=spec.fault,
        frames=spec.frames,
        pickler=_legacy_pickler(spec.writer),
        dumps_dir=manifest.dumps_dir,
        entries=manifest.entries,
        disk_bytes=manifest.bytes,
        generate_s=manifest.seconds,
        reused=reused,
        expected=manifest.expected,
        writer=spec.writer,
        load_floor_kind=FLOORS[spec.writer],
    )


def _torchfrtrace(directory: Path, scratch: Path, args: argparse.Namespace) -> Measurement:
    python = args.torch_python
    probe = subprocess.run(
        [str(python), "-c", "import torch.distributed.flight_recorder.fr_trace"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return Measurement("unavailable", None, 0.0, 0.0, 0, 0)
    cmd = [str(python), "-m", "torch.distributed.flight_recorder.fr_trace", str(directory)]
    cmd += ["-p", FILE_PREFIX]
    _log(f"torchfrtrace: {' '.join(cmd)}")
    return measure(cmd, scratch, args.time_limit, int(args.mem_limit_gib * GIB))


# --- output ----------------------------------------------------------------------------------


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def _tool_time(m: Measurement | None) -> str:
    if m is None:
        return "-"
    if m.status == "ok":
        return f"{m.wall_s:.1f}"
    if m.status == "crash":
        last = m.stderr_tail[-1] if m.stderr_tail else f"exit {m.exit_code}"
        return f"crash after {m.wall_s:.1f} ({last[:40]})"
    if m.status in ("timeout", "memory-limit"):
        return f"{m.status} at {m.wall_s:.0f}"
    return m.status


def _verdict_text(r: SizeResult) -> str:
    if r.verdict_ok is None:
        return "no result"
    text = "right" if r.verdict_ok else "WRONG"
    return text if r.fault == "none" else f"{text} ({r.fault})"


def unreadable_of(doc: dict[str, Any]) -> int | None:
    """How many rank files the report lists as unreadable (None: no such key)."""
    dumps = doc.get("dumps")
    found = dumps.get("unreadable") if isinstance(dumps, dict) else None
    return len(found) if isinstance(found, list) else None


def readers_text(readers: dict[str, int] | None) -> str:
    """`decoder 100%`, `columns 98%, per_entry 2%`: each reader's share of the ranks read."""
    total = sum(readers.values()) if readers else 0
    if not readers or total == 0:
        return "-"
    parts = []
    for name, count in sorted(readers.items(), key=lambda item: (-item[1], item[0])):
        if count == 0:
            continue
        share = round(100 * count / total)
        text = "<1" if share == 0 else ">99" if share == 100 and count < total else str(share)
        parts.append(f"{name} {text}%")
    return ", ".join(parts)


def table(results: Sequence[SizeResult], compare: bool) -> str:
    """The results as a text table (with torchfrtrace's columns when `compare`)."""
    headers = [
        "ranks",
        "writer",
        "entries",
        "disk GiB",
        "gen s",
        "load floor s",
        "fr-analyze s",
        "x floor",
        "x floor paired",
        "s / M entries",
        "CPU s",
        "max RSS GiB",
        "peak PSS GiB",
        "held GiB",
        "verdict",
        "unreadable",
        "readers",
        "others' load",
    ]
    ray = any(r.engine == "ray" for r in results)
    if ray:
        headers += ["engine", "cluster peak PSS GiB", "spilled GiB"]
    if compare:
        headers += ["torchfrtrace s", "tft max RSS GiB", "tft peak PSS GiB"]
    rows = []
    for r in results:
        if r.skipped:
            rows.append([r.ranks, r.writer, "-", _gib(r.disk_bytes), f"skipped: {r.skipped}"])
            continue
        m = r.fr_analyze
        row: list[Any] = [
            r.ranks,
            r.writer,
            f"{r.entries:,}",
            _gib(r.disk_bytes),
            "reused" if r.reused else f"{r.generate_s:.1f}",
            r.load_floor_s,
            _tool_time(m),
            r.ratio_to_floor if r.ratio_to_floor is not None else "-",
            r.paired_ratio if r.paired_ratio is not None else "-",
            r.s_per_million_entries if r.s_per_million_entries is not None else "-",
            f"{m.cpu_s:.1f}" if m else "-",
            _gib(m.max_rss_bytes) if m else "-",
            _gib(m.peak_tree_pss_bytes) if m else "-",
            _gib(m.peak_tree_held_bytes) if m else "-",
            _verdict_text(r),
            "-" if r.unreadable is None else r.unreadable,
            readers_text(r.readers),
            f"{m.others_cores:.1f}" if m else "-",
        ]
        if ray:
            peak, spilled = r.cluster_peak_pss_bytes, r.spilled_peak_bytes
            row += [r.engine, _gib(peak) if peak else "-", _gib(spilled) if spilled else "0"]
        if compare:
            t = r.torchfrtrace
            row += [
                _tool_time(t),
                _gib(t.max_rss_bytes) if t and t.max_rss_bytes else "-",
                _gib(t.peak_tree_pss_bytes) if t and t.peak_tree_pss_bytes else "-",
            ]
        rows.append(row)
    return tabulate(rows, headers=headers, disable_numparse=True, stralign="right")


def _git() -> dict[str, Any]:
    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(REPO), *argv], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty_paths": git("status", "--porcelain", "--", "fr_analyzer").splitlines(),
    }


def _analyzer(rev: str | None) -> str:
    if rev is None:
        return "working tree"
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True, check=False
    )
    return f"git revision {rev} ({done.stdout.strip()})"


def _machine() -> dict[str, Any]:
    mem = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as stream:
            for line in stream:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "mem_bytes": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text}"
        ) from None
    if not sizes or any(s < 32 or s % 32 for s in sizes):
        raise argparse.ArgumentTypeError("sizes must be multiples of 32 (tp 8 x pp 4)")
    return sizes


def _writers(text: str) -> list[str]:
    writers = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [w for w in writers if w not in WRITERS]
    if not writers or unknown:
        raise argparse.ArgumentTypeError(
            f"writers must be a comma-separated list of {', '.join(WRITERS)}"
        )
    return list(dict.fromkeys(writers))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line: sizes, fault, frames, writer, repeats, limits, folders and `--rev`."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Time and memory of fr-analyze on generated dump sets of growing size.",
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=list(DEFAULT_SIZES), help="e.g. 256,1024,4096,16384"
    )
    parser.add_argument("--fault", choices=FAULTS, default="none", help="fault to inject")
    parser.add_argument("--frames", choices=FRAME_MODES, default="shared", help="see gen.py")
    parser.add_argument(
        "--writer",
        type=_writers,
        default=None,
        help=f"comma-separated byte formats, one row each: {','.join(WRITERS)} (default: "
        "torch; see gen.py)",
    )
    parser.add_argument(
        "--pickler", choices=tuple(LEGACY_PICKLERS), help="deprecated: --writer torch|pickle"
    )
    parser.add_argument(
        "--engine",
        choices=("process", "ray"),
        default="process",
        help="fr-analyze --engine: one process, or a local Ray cluster started and stopped for "
        "each size (`tools.ray_head`), its processes' peak and its spill measured too",
    )
    parser.add_argument(
        "--object-store-gib", type=float, default=2.0, help="with --engine ray: the store's size"
    )
    parser.add_argument(
        "--table-on-disk",
        action="store_true",
        help="fr-analyze --table-dir (a folder of the run's scratch): the table out of core",
    )
    parser.add_argument(
        "--entries", type=int, default=2000, help="each rank's ring buffer (entries per dump)"
    )
    parser.add_argument(
        "--database",
        choices=("pkl", "sqlite", "parquet"),
        default=None,
        help="fr-analyze -o db.<this> (in the run's scratch): the database written too",
    )
    parser.add_argument("--compare", action="store_true", help="also time torchfrtrace")
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="fr-analyze --no-cache: the reading alone, without the first run's writing of the "
        "user's cache (every run has a cache of its own, new, either way)",
    )
    parser.add_argument("--time-limit", type=float, default=1800.0, help="seconds per tool run")
    parser.add_argument(
        "--mem-limit-gib", type=float, default=20.0, help="kill a tool whose tree PSS passes this"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="pairs of runs (the floor, then fr-analyze): the fastest of each, the median ratio",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_RESULTS, help="results JSON")
    parser.add_argument("--data", type=Path, default=DEFAULT_OUT, help="where dump sets live")
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="fr-analyze --workers"
    )
    parser.add_argument("--gen-workers", type=int, default=None, help="generator processes")
    parser.add_argument("--torch-python", type=Path, default=TORCH_PYTHON)
    parser.add_argument(
        "--rev",
        default=None,
        help="benchmark fr_analyzer as committed at this git revision (e.g. HEAD) instead of "
        "the working tree",
    )
    parser.add_argument(
        "--idle-wait",
        type=float,
        default=600.0,
        help="before each timed run, wait up to this many seconds for other processes to "
        "leave the cores idle (0: do not wait)",
    )
    parser.add_argument(
        "--delete-after", action="store_true", help="delete each dump set once measured"
    )
    parser.add_argument(
        "--keep-reports",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep each size's JSON report in DIR as RANKS-WRITER-ENGINE.json (to compare "
        "the engines' answers)",
    )
    args = parser.parse_args(argv)
    if args.pickler is not None:
        if args.writer is not None:
            parser.error("--pickler is a deprecated alias of --writer: give only --writer")
        args.writer = [LEGACY_PICKLERS[args.pickler]]
    args.writer = args.writer or ["torch"]
    if args.frames != "shared" and "json" in args.writer:
        parser.error("json dumps carry no frames: --writer json needs --frames shared")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Benchmark every size asked for, print the table and write the JSON results; returns 1 when a
    verdict is wrong."""
    args = parse_args(argv)
    results: list[SizeResult] = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="fr-bench-src-") as src:
        args.source, args.env = None, None
        if args.rev is not None:
            args.source = export_revision(args.rev, Path(src))
            args.env = {**os.environ, "PYTHONPATH": str(args.source)}
            _log(f"benchmarking fr_analyzer from {args.rev} (exported to {args.source})")
        _compile(args.source if args.source is not None else REPO)
        for size in args.sizes:
            for writer in args.writer:
                spec = Spec(
                    size,
                    fault=args.fault,
                    frames=args.frames,
                    writer=writer,
                    capacity=args.entries,
                    steps=ring_steps(args.entries),
                )
                results.append(run_size(spec, args))
                print(table(results[-1:], args.compare), file=sys.stderr, flush=True)
        args.source = args.env = None
    print(table(results, args.compare))
    doc = {
        "schema": SCHEMA,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "git": _git(),
        "analyzer": _analyzer(args.rev),
        "machine": _machine(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "memory_note": "max_rss_bytes: largest single process of the tree (ru_maxrss); "
        "peak_tree_pss_bytes: peak of the PSS summed over the tree, sampled every "
        f"{SAMPLE_SECONDS} s",
        "results": [asdict(r) for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"results written to {args.out}", file=sys.stderr)
    failed = [r for r in results if not r.skipped and not r.verdict_ok]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
