"""The diagnosis read from the parts that matched the job (`match.pieces.Pieces`): no table and
no whole match result, only each part's piece and the columns of the rows they hold, fetched
by row; the same diagnosis as the whole table's, on drawn jobs (and on every sample set, with
the findings and the conclusion too: tests/end_to_end/test_no_table.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer.diagnosis import Diagnosis, diagnose
from fr_analyzer.match import partitions
from fr_analyzer.match.findings import collect
from fr_analyzer.match.frontier import rows_of
from fr_analyzer.match.pieces import Pieces, taken_here
from fr_analyzer.pipeline import Options
from tests.parts import matched
from tools.frsim.campaign import draw_case, parse_shapes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def both(where: Path, most_share: float | None = None) -> tuple[Diagnosis, Diagnosis, Pieces]:
    """The job at `where` diagnosed on the whole table, and from its parts' pieces (cut into
    the smallest parts a runner takes), with the source it read."""
    job = matched(where)
    got, t, groups, whole = job.got, job.t, job.groups, job.whole
    parts = job.parts(frontier=True)
    shared = partitions.shared(got.dumps, t, groups, job.shape, frontier=True)
    findings = collect(got.dumps, got.unreadable, t, groups, whole)
    no_rows = rows_of(t, np.zeros(0, np.int64))  # the job's lists of values, no row
    reads = Pieces(
        shared,
        no_rows,
        groups,
        taken_here(parts),
        lambda rows: rows_of(t, rows),
        dict(zip(*(v.tolist() for v in np.unique(t.rank, return_counts=True)), strict=True)),
        findings,
    )
    args: tuple[Any, ...] = (got.dumps, t, groups, whole, findings, Options().thresholds)
    return diagnose(*args), diagnose(*args, most_share=most_share, reads=reads), reads


@pytest.mark.parametrize("seed", [*range(0, 2000, 200), 3, 26, 291])
def test_drawn_jobs_diagnosed_from_their_parts_pieces_are_diagnosed_as_a_whole(seed: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        draw_case(seed, parse_shapes("all"), None).write(Path(d), None)
        whole, pieces, _ = both(Path(d), most_share=1.0)
    assert pieces == whole


@pytest.mark.parametrize("name", ["nccl3d_skip_world", "gloo3d_pp_recv_missing"])
def test_past_the_share_of_rows_the_whole_job_is_read_from_the_pieces_too(name: str) -> None:
    whole, pieces, reads = both(SAMPLES / name, most_share=0.0)
    assert pieces == whole
    assert reads.passes == 2  # the frontier, then every rank whole
