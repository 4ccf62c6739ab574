"""Each stage's time on one dump set, in this process: how long loading took, then the
analysis (groups, matching, findings, diagnosis, conclusion), per entry, and the peak memory.

Usage: `python -m benchmarks.stages DIR [--engine ray]` (a Ray cluster as `--engine ray`
finds one: `$RAY_ADDRESS`, one running here, else a local one started for the run). The
figures of docs/scale.md come from it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from fr_analyzer import pipeline
from fr_analyzer.load import Directory


@contextlib.contextmanager
def _options(engine: str) -> Iterator[pipeline.Options]:
    if engine == "process":
        yield pipeline.Options()
        return
    from fr_analyzer.cluster import RayEngine, connect

    with connect(None) as cluster:
        yield pipeline.Options(engine=RayEngine(cluster))


def main(argv: Sequence[str] | None = None) -> int:
    """Analyze DIR once, print the stages' times as JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stages")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--engine", choices=("process", "ray"), default="process")
    args = parser.parse_args(argv)
    done: dict[str, float] = {}
    with _options(args.engine) as options:
        start = time.perf_counter()

        def progress(phase: str, at: int, total: int) -> None:
            if at == total:
                done[phase] = time.perf_counter() - start

        analysis = pipeline.analyze(Directory(args.directory), options, progress)
    entries = analysis.table.n
    load = done.get(pipeline.LOADING, 0.0)
    analyze = done.get(pipeline.ANALYZING, load) - load
    print(
        json.dumps(
            {
                "engine": args.engine,
                "ranks": len(analysis.summary.ranks_loaded),
                "entries": entries,
                "load_s": round(load, 3),
                "analysis_s": round(analyze, 3),
                "load_us_per_entry": round(load / max(entries, 1) * 1e6, 3),
                "analysis_us_per_entry": round(analyze / max(entries, 1) * 1e6, 3),
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "status": analysis.conclusion.status.value,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
