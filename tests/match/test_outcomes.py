"""Each row's outcome taken of the parts a chunk of rows at a time (`match.outcomes`): the
units, pairs, collective ids, completion and groups are the whole table's, numbered as one
process numbers them, whatever the chunks: what the database of a cluster that keeps the rows
shows."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from fr_analyzer.match import outcomes
from tests.match.test_merging import SETS
from tests.parts import matched
from tools.frsim.campaign import draw_case, parse_shapes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def assert_outcomes_are_the_whole(where: Path, chunk: int) -> int:
    """The job at `where` cut into its smallest parts, its rows' outcomes taken of them
    `chunk` rows at a time, against the whole table's; the parts made."""
    job = matched(where)
    t, groups, whole = job.t, job.groups, job.whole
    made = job.parts(smallest=True)
    bounds = np.append(np.arange(0, t.n, chunk), t.n).astype(np.int64)
    per_part = [outcomes.outcomes(part, done, bounds) for part, done in made]
    job_units = outcomes.numbered([units for units, _ in per_part])
    chunks = [
        outcomes.chunk_outcome(
            int(bounds[c]),
            int(bounds[c + 1]),
            [(units.index, got[c]) for units, got in per_part],
            job_units,
        )
        for c in range(len(bounds) - 1)
    ]
    units, pairs = whole.collectives, whole.p2p
    assert np.array_equal(job_units.group, units.group)
    assert np.array_equal(job_units.seq, units.seq)
    assert job_units.op == list(units.op)
    assert np.array_equal(job_units.ranks_present, units.ranks_present)
    assert np.array_equal(job_units.ranks_expected, units.ranks_expected)
    assert np.array_equal(job_units.passed, units.passed)
    assert np.array_equal(job_units.pair_group, groups.entry_group[pairs.send_row])
    assert np.array_equal(job_units.pair_seq, t.p2p_seq[pairs.send_row])
    # the database's collective id of every row: its unit, else its pair past the units
    pair_id = np.full(t.n, -1, dtype=np.int64)
    pair_id[pairs.send_row] = pair_id[pairs.recv_row] = len(units.seq) + np.arange(
        len(pairs.send_row)
    )
    expected = np.where(units.entry_unit >= 0, units.entry_unit, pair_id)
    assert np.array_equal(np.concatenate([c.collective for c in chunks]), expected)
    assert np.array_equal(np.concatenate([c.done for c in chunks]), whole.done)
    assert np.array_equal(np.concatenate([c.group for c in chunks]), groups.entry_group)
    return len(made)


@pytest.mark.parametrize("name", SETS)
def test_sample_sets_outcomes_from_parts_are_the_whole_tables(name: str) -> None:
    assert_outcomes_are_the_whole(SAMPLES / name, chunk=97)


@pytest.mark.parametrize("seed", [5, 33, 291, 12, 94])
def test_drawn_jobs_outcomes_from_parts_are_the_whole_tables(seed: int) -> None:
    # parts that ask each other, skips and p2p mismatches
    with tempfile.TemporaryDirectory() as d:
        draw_case(seed, parse_shapes("all"), None).write(Path(d), None)
        assert assert_outcomes_are_the_whole(Path(d), chunk=1000) > 1


def test_one_chunk_of_the_whole_job_is_the_whole_tables() -> None:
    assert assert_outcomes_are_the_whole(SAMPLES / "nccl_p2p_pipeline", chunk=1 << 30) > 1


def test_a_row_no_part_gives_is_a_bug_said_as_such() -> None:
    empty = outcomes.numbered([])
    with pytest.raises(ValueError, match="rows 0:3: 3 rows in no part"):
        outcomes.chunk_outcome(0, 3, [], empty)
