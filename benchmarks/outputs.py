"""Output benchmark: what each output of fr-analyze adds to the analysis, at scale.

For each size (default 1,024 and 16,384 ranks, a job with a rank that never joined, made or
reused with `benchmarks.gen`) it runs, one at a time so that nothing competes for the cores:

- the plain analysis, `fr-analyze -d DIR`;
- each output: `-o db.pkl`, `-o db.sqlite`, `-o db.parquet`, `--html report.html` (where the
  CLI has it) and `fr-analyze timeline -d DIR -o trace.json`;

and reports for each its wall time, CPU time, peak RSS (the largest single process of its tree,
`ru_maxrss`), the tree's peak PSS, the output's size, and what it adds to the plain run (its
wall time minus the plain run's). Targets (on 2 cores): at 1,024 ranks each of `-o db.pkl`,
`-o db.sqlite`, `--html` and `timeline` adds at most the analysis time again; at 16,384 ranks
the whole `-o db.sqlite` run within 3 minutes and 8 GiB.

Results print as one table and are written as JSON (`bench-results/outputs.json`, which git
ignores). Timings on a machine shared with other work drift: each row carries the cores other
processes used while it ran (`others`).

Usage: `python -m benchmarks.outputs [--sizes 1024,16384] [--outputs pkl,sqlite,...]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from . import run
from .gen import DEFAULT_OUT, Spec, generate, stderr_progress
from .run import REPO, Measurement, fr_analyze_cmd, measure

DEFAULT_RESULTS = REPO / "bench-results" / "outputs.json"
OUTPUTS = ("pkl", "sqlite", "parquet", "html", "timeline")
OK_CODES = (0, 1)  # a clean job, or findings (the generated jobs hang)
GIB = 1 << 30


@dataclass(frozen=True)
class Target:
    """What an output must stay within at one size."""

    added_at_most_plain: bool = False  # its run adds at most the plain analysis time again
    wall_s: float | None = None  # the whole run's wall time
    rss_bytes: int | None = None  # the whole run's peak RSS

    def text(self) -> str:
        """The target in words, e.g. "adds <= plain, run <= 60 s" ("-": none)."""
        parts = []
        if self.added_at_most_plain:
            parts.append("adds <= plain")
        if self.wall_s is not None:
            parts.append(f"run <= {self.wall_s:.0f} s")
        if self.rss_bytes is not None:
            parts.append(f"<= {self.rss_bytes / GIB:.0f} GiB")
        return ", ".join(parts) or "-"


TARGETS: dict[tuple[int, str], Target] = {
    (1024, "pkl"): Target(added_at_most_plain=True),
    (1024, "sqlite"): Target(added_at_most_plain=True),
    (1024, "html"): Target(added_at_most_plain=True),
    (1024, "timeline"): Target(added_at_most_plain=True),
    (16384, "sqlite"): Target(wall_s=180.0, rss_bytes=8 * GIB),
}


@dataclass
class Row:
    """One run at one size (JSON-ready)."""

    ranks: int
    output: str
    status: str  # ok, crash, timeout, memory-limit, skipped
    wall_s: float | None = None
    cpu_s: float | None = None
    max_rss_bytes: int | None = None
    peak_tree_pss_bytes: int | None = None
    output_bytes: int | None = None
    added_s: float | None = None  # wall minus the plain run's
    others_cores: float | None = None
    target: str = "-"
    met: bool | None = None
    note: str = ""
    stderr_tail: tuple[str, ...] = ()


def path_bytes(path: Path) -> int:
    """A file's size, or a folder's files' sizes summed."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def html_available(cmd: Sequence[str]) -> bool:
    """Whether this fr-analyze has `--html`."""
    done = subprocess.run([*cmd, "--help"], capture_output=True, text=True, check=False)
    return "--html" in done.stdout


def output_args(output: str, directory: Path, target: Path) -> tuple[list[str], list[str]]:
    """(arguments before, arguments after) `fr-analyze` for one output."""
    if output == "timeline":
        return ["timeline"], ["-d", str(directory), "-o", str(target)]
    flag = "--html" if output == "html" else "-o"
    return [], ["-d", str(directory), flag, str(target)]


TARGET_NAMES = {
    "pkl": "db.pkl",
    "sqlite": "db.sqlite",
    "parquet": "db.parquet",
    "html": "report.html",
    "timeline": "trace.json",
}


def judge(row: Row, plain: Row | None) -> None:
    """Fill in what the row adds and whether it meets its target."""
    target = TARGETS.get((row.ranks, row.output))
    if plain is not None and plain.wall_s is not None and row.wall_s is not None:
        row.added_s = round(row.wall_s - plain.wall_s, 2)
    if target is None:
        return
    row.target = target.text()
    if row.status != "ok":
        row.met = False
        return
    met = True
    if target.added_at_most_plain:
        met &= plain is not None and row.added_s is not None and row.added_s <= (plain.wall_s or 0)
    if target.wall_s is not None:
        met &= row.wall_s is not None and row.wall_s <= target.wall_s
    if target.rss_bytes is not None:
        met &= row.max_rss_bytes is not None and row.max_rss_bytes <= target.rss_bytes
    row.met = bool(met)


def run_one(
    ranks: int,
    output: str,
    directory: Path,
    scratch: Path,
    args: argparse.Namespace,
) -> Row:
    """Run fr-analyze once with output `output` ("plain": none) on `directory` and measure it."""
    cmd = fr_analyze_cmd(None)
    target = scratch / TARGET_NAMES.get(output, "none")
    before, after = (
        ([], ["-d", str(directory)])
        if output == "plain"
        else output_args(output, directory, target)
    )
    m: Measurement = measure(
        [*cmd, *before, *after],
        scratch,
        time_limit=args.time_limit,
        mem_limit=int(args.mem_limit_gib * GIB),
        ok_codes=OK_CODES,
        # a cache of its own, new each run: every run reads every dump
        env={**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(dir=scratch)},
    )
    row = Row(
        ranks=ranks,
        output=output,
        status=m.status,
        wall_s=m.wall_s,
        cpu_s=m.cpu_s,
        max_rss_bytes=m.max_rss_bytes,
        peak_tree_pss_bytes=m.peak_tree_pss_bytes,
        output_bytes=None if output == "plain" else path_bytes(target),
        others_cores=m.others_cores,
        stderr_tail=tuple(m.stderr_tail[-3:]) if m.status != "ok" else (),
    )
    if output == "timeline" and m.status == "ok":
        row.note = " ".join(line for line in m.stderr_tail if "window" in line)[:200]
    if target.is_dir():
        shutil.rmtree(target, ignore_errors=True)
    else:
        target.unlink(missing_ok=True)
    return row


def bench_size(ranks: int, args: argparse.Namespace, html: bool) -> list[Row]:
    """Make (or reuse) a dump set of `ranks` ranks; measure the plain analysis and each output."""
    spec = Spec(world_size=ranks, fault=args.fault)
    _log(f"{ranks} ranks: dump set under {args.dumps}")
    manifest, _ = generate(spec, args.dumps, progress=stderr_progress)
    directory = Path(manifest.dumps_dir)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fr-outputs-", dir=args.scratch) as tmp:
        scratch = Path(tmp)
        _log(f"{ranks} ranks: plain analysis")
        plain = run_one(ranks, "plain", directory, scratch, args)
        for output in args.outputs:
            if output == "html" and not html:
                rows.append(Row(ranks, output, "skipped", note="this fr-analyze has no --html yet"))
                continue
            _log(f"{ranks} ranks: {output}")
            rows.append(run_one(ranks, output, directory, scratch, args))
        for _ in range(args.plain_runs - 1):  # again after the outputs: the faster one counts
            _log(f"{ranks} ranks: plain analysis again")
            again = run_one(ranks, "plain", directory, scratch, args)
            if again.status == "ok" and (again.wall_s or 0) < (plain.wall_s or 0):
                plain = again
    for row in rows:
        judge(row, plain)
    return [plain, *rows]


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 20):,.1f} MiB"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} s"


def table(rows: Sequence[Row]) -> str:
    """The rows as a text table."""
    headers = [
        "ranks",
        "output",
        "status",
        "wall",
        "adds",
        "CPU",
        "peak RSS",
        "size",
        "others",
        "target",
        "met",
    ]
    body = [
        [
            f"{r.ranks:,}",
            r.output,
            r.status,
            _s(r.wall_s),
            _s(r.added_s),
            _s(r.cpu_s),
            _mib(r.max_rss_bytes),
            _mib(r.output_bytes),
            "-" if r.others_cores is None else f"{r.others_cores:.1f}",
            r.target,
            {True: "yes", False: "NO", None: "-"}[r.met],
        ]
        for r in rows
    ]
    notes = [f"{r.ranks:,} {r.output}: {r.note}" for r in rows if r.note]
    text = tabulate(body, headers=headers, disable_numparse=True, stralign="right")
    return "\n".join([text, *notes])


def _sizes(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text}") from None


def _outputs(text: str) -> list[str]:
    found = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [o for o in found if o not in OUTPUTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown outputs {unknown}; known: {OUTPUTS}")
    return found


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line: sizes, outputs, fault, folders, limits and repeats."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.outputs", description=__doc__)
    p.add_argument("--sizes", type=_sizes, default=[1024, 16384])
    p.add_argument("--outputs", type=_outputs, default=list(OUTPUTS))
    p.add_argument("--fault", default="not_joined")
    p.add_argument("--dumps", type=Path, default=DEFAULT_OUT, help="dump sets' parent folder")
    p.add_argument("--scratch", type=Path, default=None, help="where outputs are written")
    p.add_argument("--time-limit", type=float, default=900.0, help="seconds a run may take")
    p.add_argument("--mem-limit-gib", type=float, default=16.0, help="tree PSS that kills a run")
    p.add_argument(
        "--plain-runs", type=int, default=2, help="plain analyses (the fastest is the reference)"
    )
    p.add_argument("--sample-seconds", type=float, default=1.0, help="between PSS samples")
    p.add_argument("--json", type=Path, default=DEFAULT_RESULTS)
    return p.parse_args(argv)


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every output at every size, print the table and write the JSON results; returns 0."""
    args = parse_args(argv)
    # Each PSS sample walks the page tables of a process of several GiB: sampled five times a
    # second it took a quarter of a core from the run it measures.
    run.SAMPLE_SECONDS = args.sample_seconds
    html = "html" in args.outputs and html_available(fr_analyze_cmd(None))
    rows: list[Row] = []
    started = time.time()
    for ranks in args.sizes:
        rows.extend(bench_size(ranks, args, html))
        _log(table(rows))
    print(table(rows))
    doc: dict[str, Any] = {
        "started": started,
        "sizes": args.sizes,
        "fault": args.fault,
        "targets": {f"{r}:{o}": t.text() for (r, o), t in TARGETS.items()},
        "memory_note": "max_rss_bytes: largest single process of the tree (ru_maxrss); "
        "peak_tree_pss_bytes: the tree's summed PSS, sampled",
        "rows": [asdict(r) for r in rows],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    _log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
