"""The answer of a driver that holds no table (docs/scale.md, "What comes next"), put together
from its pieces in one process: the ranks' headers and the job's lists of values with no row
(`load.formats.lists`), the groups from those and the ranks' profiles, each part's piece of
its result (`match.partitions.piece`), the diagnosis read from the pieces and from the rows
they hold, fetched from the ranks' own columns (`match.pieces`), the findings and the
conclusion over those rows. On every sample set it is the whole table's answer.

Not yet without the table: the straggler rule (it still reads every row here: its passes over
parts and shards are `diagnosis.lateness`), and matching itself, whose parts are cut from
the table here as a cluster gathers them from its shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from fr_analyzer.conclusion import conclude
from fr_analyzer.diagnosis import diagnose
from fr_analyzer.load.formats.lists import taken
from fr_analyzer.match import partitions
from fr_analyzer.match.findings import collect
from fr_analyzer.match.frontier import Wanted
from fr_analyzer.match.pieces import Pieces, taken_here
from fr_analyzer.model.groups import build_groups
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.model.table import EntryTable
from fr_analyzer.pipeline import Options, analyze
from tests.load.formats.test_lists import both as lists_of
from tests.parts import matched

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SETS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", SETS)
def test_the_answer_from_pieces_and_fetched_rows_is_the_whole_tables(name: str) -> None:
    where = SAMPLES / name
    full = analyze(where, Options(workers=1))
    job = matched(where)
    t, lists, no_rows, own = lists_of(where)
    dumps, unreadable = job.got.dumps, job.got.unreadable
    profiles = profiles_of(t)  # as the map tasks make them, shard by shard

    # what the driver holds: headers, lists, profiles; no row
    groups = build_groups(dumps, no_rows, unreadable, profiles)
    shared = partitions.shared(dumps, no_rows, groups, job.shape, frontier=True)
    parts = job.parts(frontier=True)  # matched where the rows are
    ranks = dict(zip(*(v.tolist() for v in np.unique(t.rank, return_counts=True)), strict=True))

    def fetch(rows: npt.NDArray[np.int64]) -> EntryTable:
        return lists.rows(no_rows, rows, taken(own))

    first = Pieces(shared, no_rows, groups, taken_here(parts), fetch, ranks)
    held = first.held(first.select(Wanted()))
    findings = collect(dumps, unreadable, held.table, held.groups, held.matches)
    reads = Pieces(shared, no_rows, groups, taken_here(parts), fetch, ranks, findings)
    found = diagnose(
        dumps,
        t,  # only for the straggler rule, where nothing is hung (see above)
        job.groups,
        job.whole,
        findings,
        Options().thresholds,
        reads=reads,
        profiles=profiles,
    )
    answer = conclude(full.summary, findings, found, held.matches, groups)

    assert list(map(repr, findings)) == list(map(repr, full.findings))
    assert found == full.diagnosis
    assert answer == full.conclusion
    assert held.matches.pairs_matched == full.matches.pairs_matched
    assert held.rows is not None and len(held.rows) <= t.n
