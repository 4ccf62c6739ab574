"""Drawn jobs (the fault campaign's, `tools.frsim.campaign`) analyzed on a Ray cluster and in
one process: the same JSON report but for `dumps.engine`, and how each was matched on Ray
(its parts gathered from the shards, copied from the table, or the job matched whole).
With `--smallest-parts`, each job's tasks are told to take parts no larger than its largest
group, so that every family of more than one group is cut into parts that ask each other
(`match.elsewhere`).

Usage: `python -m benchmarks.ray_same --seeds 0:150 [--traces] [--smallest-parts]` (a local
Ray cluster of 2 CPUs, started and stopped here by its pids, `tools.ray_head`). Prints one
line per job that differs and a count per way of matching; exits 1 if any job differs.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from fr_analyzer.load import Directory
from fr_analyzer.match import cutting
from fr_analyzer.model.groups import build_groups, grouped
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.pipeline import Options, analyze, load
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


def _largest_group(where: Path) -> int:
    """The rows of the job's largest group (or groups a block joins)."""
    got = load(Directory(where), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    return max(
        cutting.sizes(
            grouped(got.table, groups, profiles_of(got.table)),
            groups,
            cutting.components(grouped(got.table, groups, profiles_of(got.table)), groups),
        ),
        default=1,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Compare the two engines on each drawn job; 1 if any report differs."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_same")
    parser.add_argument("--seeds", type=_seeds, default=range(0, 50), help="LOW:HIGH")
    parser.add_argument("--traces", action="store_true", help="with execution traces (gloo)")
    parser.add_argument(
        "--smallest-parts", action="store_true", help="parts no larger than the largest group"
    )
    args = parser.parse_args(argv)
    from fr_analyzer.cluster import RayEngine
    from fr_analyzer.cluster.shards import PART_ROW_BYTES

    ways: Counter[str] = Counter()
    differ = []
    asked = copied = 0
    with _cluster() as cluster:
        engine = RayEngine(cluster, shard=2)
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as folder:
                where = Path(folder)
                case = draw_case(seed, parse_shapes("all"), None)
                case.write(where, ET_OUTPUT if args.traces else None)
                if args.smallest_parts:
                    memory = _largest_group(where) * PART_ROW_BYTES
                    engine.cluster = replace(cluster, task_memory=memory)
                engine.matched = ""
                on_ray = _report(where, Options(engine=engine))
                ways[engine.matched or "whole, in the driver"] += 1
                asked += engine.rounds > 0
                copied += engine.copied_rounds
                if on_ray != _report(where, Options()):
                    differ.append(seed)
                    print(f"seed {seed}: the reports differ")
    total = len(args.seeds)
    print(f"{total - len(differ)} of {total} drawn jobs gave the same report on Ray")
    for way, count in ways.most_common():
        print(f"  matched {way}: {count}")
    print(f"  parts asked each other (rounds after the first): {asked}")
    print(f"  rounds whose parts were copied from the driver's table: {copied}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
