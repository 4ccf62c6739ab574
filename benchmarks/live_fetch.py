"""Live-fetch benchmark: `fr-analyze live` against a fake fleet of N ranks on loopback
(`benchmarks.fleet`), the issue's "16,384 ranks fetched in at most 60 s".

For each size it starts the fleet (a subprocess, stopped by pid when the run ends), runs
`fr-analyze live http://127.0.0.1:PORT --snapshots S --interval I --timeout T --concurrency C
--save TMP --json TMP/report.json` as a subprocess and prints one row:

- fetch s: each snapshot's fetch, from the command's `snapshot k of S: ... answered in X s`
  lines (the requests only: from the first connection to the last answer);
- save s: from the end of each fetch to its line on stderr (writing the snapshot's folder);
- before s: from the command's start to the first snapshot's start (imports, `/tcpstore`,
  `/handler/`); analysis s: from the last snapshot's line to the command's exit;
- wall s, CPU s and max RSS of the command (`wait4`: its whole tree), the fleet's CPU over the
  same time (every serving process, from /proc), others' load (cores busy with other work);
- answered: ranks that answered in every snapshot; verdict: `right` when the report names the
  fleet's behind rank as the one that never joined (`--fault behind`) or the command exits 0
  (`--fault none`).

It exits 1 when a snapshot's fetch took longer than `--limit-s` (60 s), a rank did not answer or
the verdict was wrong; temporary folders are removed (`--keep DIR` keeps the snapshots there).

Usage: `python -m benchmarks.live_fetch --ranks 16384 [--snapshots 2] [--interval 1]
[--concurrency 128] [--procs 1] [--out bench-results/live.json]`; `--ranks` takes a comma list.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import fleet as fake

REPO = Path(__file__).resolve().parents[1]
FR_ANALYZE = REPO / ".venv" / "bin" / "fr-analyze"
SNAPSHOT_LINE = re.compile(
    r"snapshot (\d+) of (\d+): (\d+) of (\d+) ranks answered in ([\d.]+) s \((\S+)\) -> (.+)"
)
TICKS = os.sysconf("SC_CLK_TCK")
GIB = 1 << 30


@dataclass
class Row:
    """One fleet size's measurements: fetch and save times, answers, resources and the verdict."""

    ranks: int
    snapshots: int
    concurrency: int
    procs: int
    fetch_s: list[float] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    save_s: list[float] = field(default_factory=list)
    before_s: float | None = None
    analysis_s: float | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    fleet_cpu_s: float = 0.0
    others_cores: float = 0.0
    max_rss_bytes: int = 0
    fr_bytes: int = 0
    exit_code: int = 0
    verdict: str = "?"
    summary: str = ""
    behind: int | None = None
    stderr_tail: str = ""

    def ok(self, limit_s: float) -> bool:
        """Whether each snapshot came in `limit_s`, every rank answered and the verdict is right."""
        return (
            len(self.fetch_s) == self.snapshots
            and all(s <= limit_s for s in self.fetch_s)
            and all(n == self.ranks for n in self.answered)
            and self.verdict == "right"
        )


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU of `pid` and its live children (the fleet's forked servers)."""
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def _busy_s() -> float:
    """CPU seconds every core spent busy since boot (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / TICKS


class _Lines(threading.Thread):
    """Reads the command's stderr line by line, each with the wall-clock time it arrived."""

    def __init__(self, stream: Any) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[tuple[int, str]] = []

    def run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            self.lines.append((time.time_ns(), raw.decode("utf-8", "replace").rstrip("\n")))


def measure(args: argparse.Namespace, ranks: int, scratch: Path) -> Row:
    """Start a fleet of `ranks`, run `fr-analyze live` against it and measure the run."""
    row = Row(ranks, args.snapshots, args.concurrency, args.procs)
    save = scratch / "snapshots"
    report = scratch / "report.json"
    fleet_log = scratch / "fleet.log"
    with fleet_log.open("wb") as log:
        running = fake.start(
            ranks,
            procs=args.procs,
            fault=args.fault,
            world_list=args.world_list,
            stderr=log,
        )
    try:
        row.behind = running.behind
        size = re.search(r"fr_bytes=(\d+)", running.ready_line)
        row.fr_bytes = int(size[1]) if size else 0
        print(f"  {running.ready_line}", file=sys.stderr, flush=True)
        cmd = [
            os.path.abspath(args.fr_analyze),
            "live",
            running.url,
            "--snapshots",
            str(args.snapshots),
        ]
        cmd += ["--interval", str(args.interval), "--timeout", str(args.timeout)]
        cmd += ["--concurrency", str(args.concurrency), "--save", str(save)]
        cmd += ["--json", str(report)]
        fleet_before = _proc_cpu_s(running.pid)
        busy_before = _busy_s()
        start_ns = time.time_ns()
        start = time.perf_counter()
        with (scratch / "stdout.txt").open("wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=scratch
            )
        assert proc.stderr is not None
        with proc.stderr:
            reader = _Lines(proc.stderr)
            reader.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)
            except BaseException:  # interrupted: end the command too (by its pid)
                proc.kill()
                proc.wait()
                raise
            row.wall_s = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
            reader.join(10.0)
        fleet_after = _proc_cpu_s(running.pid)
        busy_after = _busy_s()
    finally:
        running.stop()
    row.exit_code = proc.returncode
    row.cpu_s = usage.ru_utime + usage.ru_stime
    row.max_rss_bytes = usage.ru_maxrss * 1024
    row.fleet_cpu_s = fleet_after - fleet_before
    others = busy_after - busy_before - row.cpu_s - row.fleet_cpu_s
    row.others_cores = max(0.0, others) / max(row.wall_s, 1e-9)
    end_ns = start_ns + int(row.wall_s * 1e9)
    last_line_ns: int | None = None
    for at_ns, line in reader.lines:
        m = SNAPSHOT_LINE.search(line)
        if m is None:
            continue
        row.fetch_s.append(float(m[5]))
        row.answered.append(int(m[3]))
        last_line_ns = at_ns
        manifest = Path(m[7]) / "fetch.json"
        with contextlib.suppress(OSError, ValueError, KeyError):
            info = json.loads(manifest.read_bytes())
            row.save_s.append((at_ns - int(info["finished_ns"])) / 1e9)
            if row.before_s is None:
                row.before_s = (int(info["started_ns"]) - start_ns) / 1e9
    if last_line_ns is not None:
        row.analysis_s = (end_ns - last_line_ns) / 1e9
    row.stderr_tail = "\n".join(line for _, line in reader.lines[-5:])
    row.verdict, row.summary = _verdict(report, row.exit_code, running.behind, args.fault)
    fleet_report = fleet_log.read_text(errors="replace").strip()
    if fleet_report:
        print("  " + fleet_report.replace("\n", "\n  "), file=sys.stderr, flush=True)
    return row


def _verdict(report: Path, code: int, behind: int | None, fault: str) -> tuple[str, str]:
    try:
        verdict = json.loads(report.read_bytes())["verdict"]
    except (OSError, ValueError, KeyError):
        return f"no report (exit {code})", ""
    summary = str(verdict.get("summary", ""))[:200]
    if fault == "none":
        return ("right" if code == 0 else f"wrong (exit {code})"), summary
    culprits = verdict.get("culprit_ranks")
    if code == 1 and verdict.get("kind") == "not_joined" and culprits == [behind]:
        return "right", summary
    return f"wrong ({verdict.get('kind')} {culprits}, exit {code})", summary


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values) or "-"


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    head = (
        "| ranks | snapshots | conc. | fetch s | answered | save s | before s | analysis s "
        "| wall s | CPU s | fleet CPU s | max RSS GiB | others' load | verdict |"
    )
    lines = [head, "|" + "---|" * head.count(" | ")]
    for r in rows:
        answered = ", ".join(f"{n}/{r.ranks}" for n in r.answered) or "-"
        lines.append(
            f"| {r.ranks:,} | {r.snapshots} | {r.concurrency} | {_fmt(r.fetch_s)} | {answered} "
            f"| {_fmt(r.save_s)} | {r.before_s or 0:.1f} | {r.analysis_s or 0:.1f} "
            f"| {r.wall_s:.1f} | {r.cpu_s:.1f} | {r.fleet_cpu_s:.1f} "
            f"| {r.max_rss_bytes / GIB:.2f} | {r.others_cores:.2f} | {r.verdict} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark for each fleet size asked for; returns 1 when a row is not ok."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="16384", help="comma list of fleet sizes")
    p.add_argument("--snapshots", type=int, default=2)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=30.0, help="fr-analyze live --timeout")
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--procs", type=int, default=1, help="the fleet's serving processes")
    p.add_argument("--fault", choices=fake.FAULTS, default="behind")
    p.add_argument("--no-world-list", dest="world_list", action="store_false")
    p.add_argument("--limit-s", type=float, default=60.0, help="longest fetch of a snapshot")
    p.add_argument("--fr-analyze", type=Path, default=FR_ANALYZE)
    p.add_argument("--keep", type=Path, help="keep each size's snapshots and report here")
    p.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.ranks.split(",") if s.strip()]
    soft, hard = fake.raise_nofile()
    print(f"open files: soft {soft}, hard {hard}", file=sys.stderr)
    rows: list[Row] = []
    for ranks in sizes:
        print(f"{ranks} ranks ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="fr-live-bench-") as tmp:
            row = measure(args, ranks, Path(tmp))
            if args.keep is not None:
                dest = args.keep / str(ranks)
                shutil.rmtree(dest, ignore_errors=True)
                shutil.copytree(tmp, dest)
        rows.append(row)
        print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
        if row.verdict != "right":
            print(f"  summary: {row.summary}\n  {row.stderr_tail}", file=sys.stderr)
    print(table(rows))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        data = {"schema": "fr-analyze.live-bench/1", "rows": [asdict(r) for r in rows]}
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    failed = [r.ranks for r in rows if not r.ok(args.limit_s)]
    if failed:
        print(
            f"FAILED at {', '.join(map(str, failed))} ranks: a fetch over {args.limit_s:g} s, "
            "a rank missing or a wrong verdict",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
