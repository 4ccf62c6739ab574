"""Drawn jobs (the fault campaign's, `tools.frsim.campaign`) analyzed on a Ray cluster and in
one process: the same JSON report but for `dumps.engine`, and how each was matched on Ray
(its parts gathered from the shards, copied from the table, or the job matched whole).

Usage: `python -m benchmarks.ray_same --seeds 0:150 [--traces]` (a local Ray cluster of 2
CPUs, started and stopped here by its pids, `tools.ray_head`). Prints one line per job that
differs and a count per way of matching; exits 1 if any job differs.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from fr_analyzer.load import Directory
from fr_analyzer.pipeline import Options, analyze
from fr_analyzer.render.report_json import report_dict
from tools import ray_head
from tools.frsim.campaign import ET_OUTPUT, draw_case, parse_shapes


def _seeds(text: str) -> range:
    low, _, high = text.partition(":")
    return range(int(low), int(high)) if high else range(int(low), int(low) + 1)


@contextlib.contextmanager
def _cluster() -> Iterator[Any]:
    from fr_analyzer.cluster import connect

    with ray_head.quiet(), ray_head.head() as running, connect(running.address) as cluster:
        yield cluster


def _report(where: Path, options: Options) -> dict[str, Any]:
    doc = report_dict(analyze(Directory(where), options))
    doc["dumps"].pop("engine")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """Compare the two engines on each drawn job; 1 if any report differs."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_same")
    parser.add_argument("--seeds", type=_seeds, default=range(0, 50), help="LOW:HIGH")
    parser.add_argument("--traces", action="store_true", help="with execution traces (gloo)")
    args = parser.parse_args(argv)
    from fr_analyzer.cluster import RayEngine

    ways: Counter[str] = Counter()
    differ = []
    with _cluster() as cluster:
        engine = RayEngine(cluster, shard=2)
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as folder:
                where = Path(folder)
                case = draw_case(seed, parse_shapes("all"), None)
                case.write(where, ET_OUTPUT if args.traces else None)
                engine.matched = ""
                on_ray = _report(where, Options(engine=engine))
                ways[engine.matched or "whole, in the driver"] += 1
                if on_ray != _report(where, Options()):
                    differ.append(seed)
                    print(f"seed {seed}: the reports differ")
    total = len(args.seeds)
    print(f"{total - len(differ)} of {total} drawn jobs gave the same report on Ray")
    for way, count in ways.most_common():
        print(f"  matched {way}: {count}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
