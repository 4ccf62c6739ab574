"""Run PARAM's comms replay on a Chakra Execution Trace folder, on gloo/CPU, for comparison.

PARAM (https://github.com/facebookresearch/param) replays the collectives that a Chakra host
Execution Trace (ET) records, as `record_param_comms` nodes, with its comms replay
`et_replay/tools/comm_replay.py` (`--trace-type et`). This script runs that replay on one
machine for N ranks, each a separate process on gloo and the CPU, rendezvousing at 127.0.0.1 on
a free port, all of them bounded by one timeout. It then prints, for each rank, how many ops
PARAM says it replayed, its exit status, the wall time and the last lines PARAM printed. It
exists so that `fr-analyze replay` can be compared with PARAM on the same ET. PARAM is **not**
part of this repository and nothing here imports it. Its snapshot lives outside the repo.

Getting the snapshot (any clone of the public repository works the same):

    git clone https://github.com/facebookresearch/param /tmp/param
    # or, from a bare mirror:  git --git-dir=<mirror> archive HEAD | tar -x -C /tmp/param

PARAM's replay needs torch, numpy, intervaltree and pydot. None of them is a dependency of
fr-analyze. Install them in a private virtualenv and pass its interpreter with `--python`:

    python3.11 -m venv /tmp/param-venv
    /tmp/param-venv/bin/pip install torch==2.13.0 numpy intervaltree pydot
    python3 tools/param_compare.py --param /tmp/param --et ETDIR --ranks 4 \\
        --python /tmp/param-venv/bin/python

ETDIR holds one ET per rank. PARAM itself reads `<trace-path>/rank-<N>.json` or
`rank-<N>.json.gz`. This script also accepts `rank-<N>.et.json[.gz]`, the name fr-analyze's
samples use. It links every file under PARAM's name in a scratch folder. PARAM is launched the
way it reads its environment (`comms_utils.read_comms_env_vars`): `WORLD_SIZE`, `RANK`,
`LOCAL_SIZE` and `LOCAL_RANK`, no torchrun and no mpirun. Every rank gets `LOCAL_RANK=0` and
`LOCAL_SIZE=1`, as if each ran on a host of its own. On the CPU the local rank picks no device,
and with `--enable-local-report` every rank then prints PARAM's end-of-replay report, not only
rank 0. The command line is

    python -m et_replay.tools.comm_replay --trace-type et --trace-path DIR --backend gloo
        --device cpu --master-ip 127.0.0.1 --master-port PORT --num-replays 1 --warmup-iter 0
        --enable-local-report [EXTRA...]

`--num-replays 1 --warmup-iter 0` makes PARAM run each op of the trace once. Its defaults, 5 and
2, run every op 7 times. "Ops replayed" is the sum of the `Replayed <n> <collective>` lines of
that report. It counts wait and barrier ops but not the process-group `init` entries, which the
`+++++ <n> msgs recorded +++++` line includes. PARAM prints the report only after the whole
replay. A rank that is stopped (killed at the timeout, or crashed) prints none, so it shows no
count there.

`--op-log` shows how far a stopped rank got. It starts PARAM through a small wrapper that sets
the level of PARAM's own logger (`et_replay.tools.comm_replay`) from INFO to DEBUG and then calls
its `main()`. PARAM's code is unchanged. PARAM then logs `[Rank r] [k / M] Replaying <op>` just
before each op. The script counts those lines ("ops started") and shows the last one, the op a
stopped rank was in. Arguments after `--` go to PARAM unchanged.

"ET ops" counts each rank's `record_param_comms` nodes that are not process-group inits. A rank
of a hung or crashed job never closes its ET, so the file ends after the last node it wrote,
with no closing bracket. Such a file is counted node by node up to its end and marked `*`.
PARAM cannot read it: that rank fails with `Could not find a suitable trace path`.

Each rank runs in a session of its own. At the timeout every rank still running gets SIGTERM
at the same moment, sent to its process group by its pid, and SIGKILL 3 s later. Lines that a
rank prints after that signal are shown apart from the rest. They tell of the kill (a peer's
socket closing), not of the replay. "first error" is the first line of a rank's output that
is logged at ERROR, names an exception, or is gloo's C++ abort (`what(): ...`).

Exit status: 0 when every rank exited 0, 1 when any rank failed or was killed at the timeout,
and 2 when the snapshot or the ET folder is not usable.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

REPLAY_MODULE = "et_replay.tools.comm_replay"
# names PARAM reads (first two) and names fr-analyze's samples use, per rank
ET_NAMES = ("rank-{r}.json", "rank-{r}.json.gz", "rank-{r}.et.json", "rank-{r}.et.json.gz")
# launcher variables that PARAM's read_comms_env_vars prefers over WORLD_SIZE/RANK
FOREIGN_LAUNCH_VARS = re.compile(r"^(MV2_COMM_WORLD_|OMPI_COMM_WORLD_|PMI_|SLURM_|MPI_LOCAL)")
# raise PARAM's logger to DEBUG so that it logs every op it starts; PARAM's code is unchanged
OP_LOG_WRAPPER = (
    "import logging\n"
    f"import {REPLAY_MODULE} as replay\n"
    "replay.logger.setLevel(logging.DEBUG)\n"
    "replay.main()\n"
)
REPLAYED_RE = re.compile(r"\bReplayed (\d+) (\S+) \(")
RECORDED_RE = re.compile(r"\+\+\+\+\+ (\d+) msgs recorded \+\+\+\+\+")
IN_TRACE_RE = re.compile(r"\b(\d+) messages in the trace")
STARTED_RE = re.compile(r"\[Rank +\d+\] \[(\d+) / (\d+)\] Replaying (.*)$")
E2E_RE = re.compile(r"E2E latency \(us\): ([\d.]+) for (\d+) iters")
SKIP_RE = re.compile(r"Skip collective (\S+) id = (\S+)")
# the first line that says why a rank failed: an ERROR log line, an exception, gloo's C++ abort
ERROR_RE = re.compile(r"(\[ERROR\]: |\w*Error: |\w*Exception: |what\(\): |enforce fail)")


@dataclass
class RankResult:
    """What one rank's PARAM process did and printed."""

    rank: int
    et_ops: int
    et_whole: bool = True
    returncode: int | None = None
    killed: bool = False
    wall_s: float = 0.0
    lines: list[str] = field(default_factory=list)
    replayed: dict[str, int] = field(default_factory=dict)
    msgs_recorded: int | None = None
    msgs_in_trace: int | None = None
    started: int = 0
    last_started: str = ""
    skipped: int = 0
    first_error: str = ""
    e2e: str = ""
    bytes_at_kill: int | None = None
    after_kill: list[str] = field(default_factory=list)

    @property
    def ops_replayed(self) -> int | None:
        """The sum of PARAM's `Replayed <n> <collective>` lines, or None without a report."""
        return sum(self.replayed.values()) if self.replayed else None

    @property
    def status(self) -> str:
        """The exit status in words."""
        if self.killed:
            return f"killed at timeout (rc {self.returncode})"
        if self.returncode is None:
            return "not run"
        if self.returncode < 0:
            return f"died of signal {-self.returncode}"
        return f"exit {self.returncode}"


def find_et_files(et_dir: Path, ranks: int) -> list[Path]:
    """Return each rank's ET file in `et_dir`, under any name in `ET_NAMES`."""
    found: list[Path] = []
    for rank in range(ranks):
        for pattern in ET_NAMES:
            path = et_dir / pattern.format(r=rank)
            if path.is_file():
                found.append(path)
                break
        else:
            names = ", ".join(p.format(r=rank) for p in ET_NAMES)
            raise FileNotFoundError(f"no ET for rank {rank} in {et_dir} (looked for {names})")
    return found


def read_et_nodes(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Return an ET's nodes and whether the file is whole JSON.

    A rank that never stopped its ExecutionTraceObserver (a hung or crashed job) leaves a file
    that ends after its last node, with no closing bracket. Its nodes are read one by one up to
    the first that does not parse.
    """
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    try:
        nodes: list[dict[str, Any]] = json.loads(text).get("nodes", [])
        return nodes, True
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    nodes = []
    start = text.find("[", text.find('"nodes"'))
    pos = start + 1 if start >= 0 else len(text)
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            node, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        if isinstance(node, dict):
            nodes.append(node)
    return nodes, False


def count_et_ops(path: Path) -> tuple[int, bool]:
    """Count an ET's `record_param_comms` nodes that are not process-group inits.

    The second value says whether the file is whole JSON; PARAM cannot read one that is not.
    """
    nodes, whole = read_et_nodes(path)
    count = 0
    for node in nodes:
        if node.get("name") != "record_param_comms":
            continue
        names = [
            a.get("value") for a in node.get("attrs", []) if a.get("name") == "collective_name"
        ]
        if not names or str(names[0]).lower() != "init":
            count += 1
    return count, whole


def stage_traces(files: list[Path], stage: Path) -> None:
    """Link each rank's ET into `stage` as `rank-<N>.json[.gz]`, the names PARAM reads."""
    for rank, src in enumerate(files):
        suffix = ".json.gz" if src.name.endswith(".gz") else ".json"
        (stage / f"rank-{rank}{suffix}").symlink_to(src.resolve())


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def rank_env(param: Path, rank: int, ranks: int, port: int) -> dict[str, str]:
    """The environment of one rank: PARAM on the path, and the variables PARAM reads."""
    env = {k: v for k, v in os.environ.items() if not FOREIGN_LAUNCH_VARS.match(k)}
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(param) + (os.pathsep + path if path else "")
    env.update(
        WORLD_SIZE=str(ranks),
        RANK=str(rank),
        LOCAL_SIZE="1",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    return env


def param_command(python: str, op_log: bool, param_args: list[str]) -> list[str]:
    """The command line of one rank."""
    if op_log:
        return [python, "-c", OP_LOG_WRAPPER, *param_args]
    return [python, "-m", REPLAY_MODULE, *param_args]


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """End the ranks still running, each by its own process group (its pid): SIGTERM, then SIGKILL.

    Every rank gets the signal at once, so that no rank sees a peer die first and reports that.
    """
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        live = [p for p in procs if p.poll() is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        end = time.monotonic() + grace
        for proc in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, end - time.monotonic()))


def parse_output(result: RankResult, text: str) -> None:
    """Fill `result` from what PARAM printed."""
    result.lines = text.splitlines()
    for line in result.lines:
        if m := REPLAYED_RE.search(line):
            name = m.group(2)
            result.replayed[name] = result.replayed.get(name, 0) + int(m.group(1))
        elif m := RECORDED_RE.search(line):
            result.msgs_recorded = int(m.group(1))
        elif m := IN_TRACE_RE.search(line):
            result.msgs_in_trace = int(m.group(1))
        elif m := STARTED_RE.search(line):
            result.started += 1
            result.last_started = f"[{m.group(1)} / {m.group(2)}] {m.group(3)}"
        elif m := E2E_RE.search(line):
            result.e2e = f"{m.group(1)} us for {m.group(2)} replay(s)"
        elif SKIP_RE.search(line):
            result.skipped += 1
        if not result.first_error and ERROR_RE.search(line):
            result.first_error = line.strip()


def run(
    param: Path,
    files: list[Path],
    python: str,
    timeout: float,
    op_log: bool,
    replay_args: list[str],
    log_dir: Path,
) -> tuple[list[RankResult], float]:
    """Run PARAM's replay for every rank at once; return each rank's result and the wall time."""
    ranks = len(files)
    results = []
    for rank, path in enumerate(files):
        et_ops, whole = count_et_ops(path)
        results.append(RankResult(rank=rank, et_ops=et_ops, et_whole=whole))
    stage = log_dir / "traces"
    stage.mkdir(parents=True, exist_ok=True)
    stage_traces(files, stage)
    port = free_port()
    args = [
        "--trace-type", "et",
        "--trace-path", str(stage),
        "--backend", "gloo",
        "--device", "cpu",
        "--master-ip", "127.0.0.1",
        "--master-port", str(port),
        "--enable-local-report",
        *replay_args,
    ]  # fmt: skip
    cmd = param_command(python, op_log, args)
    print("$ " + " ".join(cmd if not op_log else [python, "-c", "<op-log wrapper>", *args]))
    print(f"  cwd {param}, WORLD_SIZE={ranks}, RANK=0..{ranks - 1}, LOCAL_RANK=0, port {port}")
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    start = time.monotonic()
    try:
        for rank in range(ranks):
            log = (log_dir / f"rank-{rank}.log").open("wb")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    cmd,
                    cwd=param,
                    env=rank_env(param, rank, ranks, port),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = start + timeout
        running = set(range(ranks))
        while running:
            for rank in sorted(running):
                if procs[rank].poll() is not None:
                    results[rank].wall_s = time.monotonic() - start
                    running.discard(rank)
            if running and time.monotonic() >= deadline:
                for rank in running:
                    results[rank].killed = True
                    results[rank].wall_s = time.monotonic() - start
                    results[rank].bytes_at_kill = (log_dir / f"rank-{rank}.log").stat().st_size
                break
            time.sleep(0.05)
    finally:
        stop_all(procs)
        for handle in logs:
            handle.close()
    wall = time.monotonic() - start
    for rank, proc in enumerate(procs):
        results[rank].returncode = proc.returncode
        data = (log_dir / f"rank-{rank}.log").read_bytes()
        cut = results[rank].bytes_at_kill
        before, after = (data, b"") if cut is None else (data[:cut], data[cut:])
        parse_output(results[rank], before.decode("utf-8", errors="replace"))
        results[rank].after_kill = after.decode("utf-8", errors="replace").splitlines()
    return results, wall


def report(results: list[RankResult], wall: float, tail: int, log_dir: Path) -> None:
    """Print each rank's count, exit status and last lines."""
    print(f"\nwall time {wall:.2f} s; logs in {log_dir}")
    header = f"{'rank':>4}  {'ET ops':>6}  {'replayed':>8}  {'started':>7}  {'wall s':>6}  status"
    print(header)
    print("-" * len(header))
    for r in results:
        replayed = "-" if r.ops_replayed is None else str(r.ops_replayed)
        started = str(r.started) if r.started else "-"
        et_ops = str(r.et_ops) if r.et_whole else f"{r.et_ops}*"
        print(
            f"{r.rank:>4}  {et_ops:>6}  {replayed:>8}  {started:>7}  {r.wall_s:>6.2f}  {r.status}"
        )
    if not all(r.et_whole for r in results):
        print("* the ET is not whole JSON (no closing bracket): ops counted up to its end")
    for r in results:
        print(f"\n== rank {r.rank}: {r.status}")
        if r.replayed:
            counts = ", ".join(f"{n} {c}" for c, n in r.replayed.items())
            print(f"   PARAM's report: {r.ops_replayed} ops replayed ({counts})")
        else:
            print("   PARAM's report: none (PARAM prints it only after the whole replay)")
        if r.e2e:
            print(f"   PARAM's E2E latency: {r.e2e}")
        if r.msgs_in_trace is not None or r.msgs_recorded is not None:
            seen = r.msgs_in_trace if r.msgs_in_trace is not None else r.msgs_recorded
            print(f"   PARAM: {seen} messages in the trace (process-group inits included)")
        if r.started:
            print(f"   ops started: {r.started}; last: {r.last_started}")
        if r.skipped:
            print(f"   ops PARAM skipped: {r.skipped}")
        if r.first_error:
            print(f"   first error: {r.first_error}")
        before = " before the timeout" if r.killed else ""
        print(f"   last {tail} lines{before}:")
        for line in r.lines[len(r.lines) - max(tail, 0) :]:
            print("   | " + line)
        if r.after_kill:
            errors = [line.strip() for line in r.after_kill if ERROR_RE.search(line)]
            said = f"; first error: {errors[0]}" if errors else ""
            print(f"   after the kill signal: {len(r.after_kill)} more lines{said}")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run PARAM's replay and print what each rank did."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Arguments after `--` go to PARAM's comm_replay unchanged.",
    )
    parser.add_argument("--param", type=Path, required=True, help="extracted PARAM snapshot")
    parser.add_argument("--et", type=Path, required=True, help="folder of rank-<N> ET files")
    parser.add_argument("--ranks", type=int, required=True, help="number of ranks to launch")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for all ranks")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter with torch, numpy, intervaltree"
    )
    parser.add_argument("--num-replays", type=int, default=1, help="PARAM's --num-replays")
    parser.add_argument("--warmup-iter", type=int, default=0, help="PARAM's --warmup-iter")
    parser.add_argument(
        "--op-log", action="store_true", help="raise PARAM's logger to DEBUG: one line per op"
    )
    parser.add_argument("--tail", type=int, default=12, help="last lines to show per rank")
    parser.add_argument("--log-dir", type=Path, help="keep the logs here (default: a temp dir)")
    ours = list(sys.argv[1:] if argv is None else argv)
    theirs: list[str] = []
    if "--" in ours:
        cut = ours.index("--")
        ours, theirs = ours[:cut], ours[cut + 1 :]
    args = parser.parse_args(ours)

    param = args.param.resolve()
    if not (param / "et_replay" / "tools" / "comm_replay.py").is_file():
        print(f"{param}: no et_replay/tools/comm_replay.py; not a PARAM snapshot", file=sys.stderr)
        return 2
    if args.ranks < 1:
        print("--ranks must be at least 1", file=sys.stderr)
        return 2
    try:
        files = find_et_files(args.et, args.ranks)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    replay_args = [
        "--num-replays", str(args.num_replays), "--warmup-iter", str(args.warmup_iter), *theirs,
    ]  # fmt: skip
    if args.log_dir is not None:
        log_dir = args.log_dir.resolve()
        log_dir.mkdir(parents=True, exist_ok=True)
        if (log_dir / "traces").exists():
            print(f"{log_dir / 'traces'} exists; use a fresh --log-dir", file=sys.stderr)
            return 2
    else:
        log_dir = Path(tempfile.mkdtemp(prefix="param_compare_"))
    results, wall = run(param, files, args.python, args.timeout, args.op_log, replay_args, log_dir)
    report(results, wall, args.tail, log_dir)
    return 0 if all(r.returncode == 0 and not r.killed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
