"""Putting the parts' results together (`match.merging`): the parts' pieces (each part's
result over its closed frontier alone, `partitions.piece`) merged over the rows they hold are
the whole table's result taken over those rows, row for row: what a driver that holds no
table reads."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from fr_analyzer.diagnosis.frontier import Frontier
from fr_analyzer.load import Directory
from fr_analyzer.match import merging, partitions
from fr_analyzer.match.frontier import Wanted, held_matches
from fr_analyzer.model.groups import build_groups, grouped
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.pipeline import Options, load
from tests.match.test_partitions import assert_same_match
from tests.parts import matched
from tools.frsim.campaign import draw_case, parse_shapes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SETS = [  # every sample set merges so in tests/end_to_end/test_no_table.py; these by name
    "nccl_coalesced",  # blocks
    "nccl_batched_p2p",  # batched send/recv
    "nccl_p2p_pipeline",
    "nccl3d_skip_world",
    "nccl3d_dp_pair_mismatch",
    "gloo3d_pp_recv_missing",
    "moe_split_mismatch",
    "hsdp_dtype_mismatch",
    "subgroups_independent_hang",
    "torchcomms_not_joined",
]


NOTHING = Wanted()


def assert_pieces_merge_as_the_whole(where: Path, smallest: bool, wanted: Wanted = NOTHING) -> int:
    """The job at `where` cut into parts (the smallest a runner takes, or by family), each
    giving back its piece, merged, against the whole table's result over the same rows; the
    parts made."""
    job = matched(where)
    t, groups, whole = job.t, job.groups, job.whole
    made = job.parts(True, smallest, lambda part, done: partitions.piece(part, done, wanted))
    if len(made) < 2:
        return 1
    shared = partitions.shared(job.got.dumps, t, groups, job.shape, frontier=True)
    rows, group, merged = merging.merge_held(shared, t, [done for _, done in made])

    reads = Frontier(t, groups, whole)
    closed = reads.with_units(reads.rows(), whole.findings, wanted.units)
    closed = reads.with_ranks(closed, wanted.ranks)
    assert np.array_equal(rows, closed)
    assert np.array_equal(group, groups.entry_group[closed])
    assert_same_match(merged, held_matches(whole, closed))
    assert merged.frontier is not None and np.array_equal(merged.frontier, np.arange(len(rows)))
    assert merged.pairs_matched == whole.pairs_matched  # the job's, not the rows held
    # and the diagnosis' own view of those rows, made from the whole table
    held = reads.held(closed)
    assert_same_match(merged, held.matches)
    return len(made)


@pytest.mark.parametrize("name", SETS)
def test_sample_sets_pieces_merge_as_the_whole_result_over_their_rows(name: str) -> None:
    assert_pieces_merge_as_the_whole(SAMPLES / name, smallest=True)


def test_pieces_of_families_merge_as_the_whole_result_over_their_rows() -> None:
    assert assert_pieces_merge_as_the_whole(SAMPLES / "nccl3d_skip_world", smallest=False) > 1


@pytest.mark.parametrize("seed", [5, 33, 48, 70, 291, 12, 20, 22, 94, 135])
def test_drawn_jobs_pieces_merge_as_the_whole_result_over_their_rows(seed: int) -> None:
    # parts that ask each other (5, 33, 48, 70, 291), skips, a stall, extra ops and p2p
    # mismatches
    with tempfile.TemporaryDirectory() as d:
        draw_case(seed, parse_shapes("all"), None).write(Path(d), None)
        assert assert_pieces_merge_as_the_whole(Path(d), smallest=True) > 1


def test_a_part_matched_without_its_frontier_gives_no_piece() -> None:
    got = load(Directory(SAMPLES / "nccl_healthy"), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    shape = grouped(got.table, groups, profiles_of(got.table))
    part = partitions.whole(
        partitions.shared(got.dumps, got.table, groups, shape), got.table, groups
    )
    with pytest.raises(ValueError, match="without its frontier"):
        partitions.piece(part, partitions.match_part(part))


def test_a_part_matched_whole_is_no_piece() -> None:
    got = load(Directory(SAMPLES / "nccl_healthy"), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    shape = grouped(got.table, groups, profiles_of(got.table))
    job = partitions.shared(got.dumps, got.table, groups, shape, frontier=True)
    whole = partitions.match_part(partitions.whole(job, got.table, groups))
    with pytest.raises(ValueError, match="not as a piece"):
        merging.merge_held(job, got.table, [whole])


@pytest.mark.parametrize(
    ("name", "wanted"),
    [
        ("nccl3d_skip_world", Wanted(ranks=frozenset({3, 17}))),
        ("nccl3d_skip_world", Wanted(units=frozenset({(0, 1), (5, 2)}))),
        ("gloo3d_pp_recv_missing", Wanted(frozenset({(1, 3)}), frozenset({0, 9}))),
        ("nccl_coalesced", Wanted(ranks=frozenset({1}))),
    ],
)
def test_pieces_with_the_rows_a_diagnosis_asks_for_merge_as_the_whole(
    name: str, wanted: Wanted
) -> None:
    # whole programs and collectives far behind the frontier, each in the part holding it
    assert assert_pieces_merge_as_the_whole(SAMPLES / name, smallest=True, wanted=wanted) > 1
