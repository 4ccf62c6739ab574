"""The diagnosis read from the parts that matched the job (`match.pieces.Pieces`): no table and
no whole match result, only each part's piece and the columns of the rows they hold, fetched
by row; the same diagnosis as the whole table's, on every sample set and on drawn jobs."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer.diagnosis import Diagnosis, diagnose
from fr_analyzer.load import Directory
from fr_analyzer.match import Cut, Part, PartMatch, PartRunner, cutting, match, partitions
from fr_analyzer.match.findings import collect
from fr_analyzer.match.frontier import rows_of
from fr_analyzer.match.pieces import Pieces
from fr_analyzer.model.groups import build_groups, grouped
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.pipeline import Options, load
from tools.frsim.campaign import draw_case, parse_shapes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SETS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def both(where: Path, most_share: float | None = None) -> tuple[Diagnosis, Diagnosis, Pieces]:
    """The job at `where` diagnosed on the whole table, and from its parts' pieces (cut into
    the smallest parts a runner takes), with the source it read."""
    got = load(Directory(where), Options(workers=1))
    t = got.table
    groups = build_groups(got.dumps, t, got.unreadable)
    retired = t.retired.copy()
    whole = match(got.dumps, t, groups)
    after = t.retired.copy()
    t.retired[:] = retired
    shape = grouped(t, groups, profiles_of(t))
    job = partitions.shared(got.dumps, t, groups, shape, frontier=True)
    most = max(cutting.sizes(shape, groups, cutting.components(shape, groups)), default=1)
    sets = cutting.cut_sets(shape, groups, most)
    parts: list[tuple[Part, PartMatch]]
    if sets is None or len(sets) < 2:
        one = replace(partitions.whole(job, t, groups), frontier=True)
        parts = [(one, partitions.match_part(one))]
    else:
        made: dict[int, Part] = {}

        def run(cuts: Iterable[Cut]) -> Iterator[PartMatch]:
            for cut in cuts:
                part = cut.part()
                done = partitions.match_part(part)
                made[id(done)] = part
                yield done

        final = partitions.rounds(PartRunner(run, most_rows=most), job, t, groups, sets, shape)
        assert final is not None
        parts = [(made[id(done)], done) for done in final]
    t.retired[:] = after
    findings = collect(got.dumps, got.unreadable, t, groups, whole)
    no_rows = rows_of(t, np.zeros(0, np.int64))  # the job's lists of values, no row
    reads = Pieces(
        job,
        no_rows,
        groups,
        parts,
        lambda rows: rows_of(t, rows),
        dict(zip(*(v.tolist() for v in np.unique(t.rank, return_counts=True)), strict=True)),
        findings,
    )
    args: tuple[Any, ...] = (got.dumps, t, groups, whole, findings, Options().thresholds)
    return diagnose(*args), diagnose(*args, most_share=most_share, reads=reads), reads


@pytest.mark.parametrize("name", SETS)
def test_every_sample_set_diagnosed_from_its_parts_pieces_is_diagnosed_as_a_whole(
    name: str,
) -> None:
    whole, pieces, reads = both(SAMPLES / name, most_share=1.0)
    assert pieces == whole
    assert reads.read >= len(reads.parts)


@pytest.mark.parametrize("seed", [*range(0, 2000, 131), 3, 26, 291])
def test_drawn_jobs_diagnosed_from_their_parts_pieces_are_diagnosed_as_a_whole(seed: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        draw_case(seed, parse_shapes("all"), None).write(Path(d), None)
        whole, pieces, _ = both(Path(d), most_share=1.0)
    assert pieces == whole


@pytest.mark.parametrize("name", ["nccl3d_skip_world", "gloo3d_pp_recv_missing"])
def test_past_the_share_of_rows_the_whole_job_is_read_from_the_pieces_too(name: str) -> None:
    whole, pieces, reads = both(SAMPLES / name, most_share=0.0)
    assert pieces == whole
    assert reads.read == 2 * len(reads.parts)  # the frontier, then every rank whole
