"""Matching in parts (`match.partitions`): the groups of each description matched alone, as a
cluster matches them, or a family cut into parts of its groups that ask each other what they
do not hold (`match.elsewhere`), give what matching the whole table gives, to the last row."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer import analyze
from fr_analyzer.load import Directory
from fr_analyzer.match import MatchResult, PartRunner, cutting, match, partitions
from fr_analyzer.match.elsewhere import Elsewhere, unheld
from fr_analyzer.match.values import OPS, TRANSFERS
from fr_analyzer.model.groups import build_groups, grouped
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.pipeline import InProcess, KeptRows, Options, load
from fr_analyzer.render.report_json import report_dict
from tests.builders import make_dump, make_entry, write_dumps
from tools.frsim.campaign import draw_case, parse_shapes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SETS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


class PartsInTurn(InProcess):
    """One process that matches the job in parts, as the Ray engine does, one after another."""

    def match_runner(self, rows: KeptRows | None = None) -> PartRunner | None:
        return PartRunner(partitions.in_turn)


def assert_same_match(parts: MatchResult, whole: MatchResult) -> None:
    """Two match results alike in every unit, pair, row and finding."""
    a, b = parts.collectives, whole.collectives
    for name in ("group", "seq", "ranks_present", "ranks_expected", "passed", "entry_unit"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.starts, b.starts)
    assert a.op == b.op
    assert list(a.not_joined.items()) == list(b.not_joined.items())
    for name in ("send_row", "recv_row", "entry_pair"):
        assert np.array_equal(getattr(parts.p2p, name), getattr(whole.p2p, name)), name
    assert np.array_equal(parts.done, whole.done)
    assert sorted(map(repr, parts.findings)) == sorted(map(repr, whole.findings))
    assert list(map(repr, parts.skipped)) == list(map(repr, whole.skipped))
    assert list(parts.proven.items()) == list(whole.proven.items())
    assert parts.notes == whole.notes


def _both(where: Path) -> tuple[MatchResult, MatchResult, int]:
    """The job at `where` matched in parts and whole, and how many parts it was cut into."""
    got = load(Directory(where), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    retired = got.table.retired.copy()  # matching clears it where a recorder is silent
    whole = match(got.dumps, got.table, groups)
    got.table.retired[:] = retired
    parts = match(got.dumps, got.table, groups, PartRunner(partitions.in_turn))
    return (
        parts,
        whole,
        len(cutting.families(grouped(got.table, groups, profiles_of(got.table)), groups)),
    )


@pytest.mark.parametrize("name", SETS)
def test_every_sample_set_matched_in_parts_matches_as_a_whole(name: str) -> None:
    parts, whole, _ = _both(SAMPLES / name)
    assert_same_match(parts, whole)


@pytest.mark.parametrize("name", ["nccl3d_skip_world", "gloo3d_pp_recv_missing", "moe_healthy"])
def test_every_sample_set_gives_the_same_report_matched_in_parts(name: str) -> None:
    def report(engine: Any) -> dict[str, Any]:
        return report_dict(analyze(SAMPLES / name, Options(engine=engine)))

    assert report(PartsInTurn()) == report(InProcess())


def test_a_3d_job_is_cut_by_description_and_each_part_holds_one() -> None:
    got = load(Directory(SAMPLES / "nccl3d_skip_world"), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    cut = cutting.families(grouped(got.table, groups, profiles_of(got.table)), groups)
    assert len(cut) == 4
    assert sorted(u for uids in cut for u in uids) == list(range(len(groups.groups)))
    for uids in cut:
        assert len({groups.groups[u].desc for u in uids}) == 1


class Counting:
    """A runner's `run` that matches the parts in turn and counts how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, cuts: Any) -> Any:
        self.calls += 1
        return partitions.in_turn(cuts)


def _loaded(name: str) -> tuple[Any, Any]:
    got = load(Directory(SAMPLES / name), Options(workers=1))
    return got, build_groups(got.dumps, got.table, got.unreadable)


def test_a_job_of_one_description_is_matched_whole_even_given_a_runner() -> None:
    got, groups = _loaded("fsdp_healthy")
    assert len(cutting.families(grouped(got.table, groups, profiles_of(got.table)), groups)) == 1
    run = Counting()
    match(got.dumps, got.table, groups, PartRunner(run))
    assert run.calls == 0


def test_a_job_with_a_group_larger_than_the_runner_takes_is_matched_whole() -> None:
    got, groups = _loaded("nccl3d_skip_world")
    rows = cutting.sizes(
        grouped(got.table, groups, profiles_of(got.table)),
        groups,
        cutting.components(grouped(got.table, groups, profiles_of(got.table)), groups),
    )
    assert sum(rows) == got.table.n
    run = Counting()
    match(got.dumps, got.table, groups, PartRunner(run, most_rows=max(rows) - 1))
    assert run.calls == 0
    match(got.dumps, got.table, groups, PartRunner(run, most_rows=max(rows)))
    assert run.calls == 1


def test_a_family_larger_than_the_runner_takes_is_cut_into_parts_of_its_groups() -> None:
    got, groups = _loaded("nccl3d_skip_world")
    families = cutting.families(grouped(got.table, groups, profiles_of(got.table)), groups)
    rows = cutting.sizes(grouped(got.table, groups, profiles_of(got.table)), groups, families)
    largest = families[rows.index(max(rows))]
    sets = cutting.cut_sets(
        grouped(got.table, groups, profiles_of(got.table)), groups, max(rows) - 1
    )
    assert sets is not None and len(sets) > len(families)
    assert sorted(u for uids in sets for u in uids) == list(range(len(groups.groups)))
    assert all(set(uids) <= set(largest) for uids in sets if uids[0] in largest)
    assert (
        max(cutting.sizes(grouped(got.table, groups, profiles_of(got.table)), groups, sets))
        <= max(rows) - 1
    )


def _smallest_parts(
    where: Path, draw: np.random.Generator | None = None
) -> tuple[MatchResult, MatchResult, Counting]:
    """The job at `where` matched whole and in the smallest parts a runner can take: each
    family cut into parts as small as its largest group (or groups a block joins); with
    `draw`, parts of a size drawn between that and the whole job."""
    got = load(Directory(where), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    retired = got.table.retired.copy()
    whole = match(got.dumps, got.table, groups)
    got.table.retired[:] = retired
    most = max(
        cutting.sizes(
            grouped(got.table, groups, profiles_of(got.table)),
            groups,
            cutting.components(grouped(got.table, groups, profiles_of(got.table)), groups),
        ),
        default=1,
    )
    if draw is not None:
        most = int(draw.integers(most, max(most, got.table.n) + 1))
    run = Counting()
    return match(got.dumps, got.table, groups, PartRunner(run, most_rows=most)), whole, run


@pytest.mark.parametrize("name", SETS)
def test_every_sample_set_matched_in_parts_of_single_groups_matches_as_a_whole(name: str) -> None:
    parts, whole, _ = _smallest_parts(SAMPLES / name)
    assert_same_match(parts, whole)


def test_a_tie_the_groups_alike_settle_is_asked_of_the_parts_that_hold_them() -> None:
    # the data-parallel pair of ranks 2 and 6 disagrees on sizes: no majority, and the
    # other pairs (in other parts) vote; their answers come in a second round
    parts, whole, run = _smallest_parts(SAMPLES / "nccl3d_dp_pair_mismatch")
    assert run.calls == 3  # the parts; those asked about, to answer; those that asked, again
    assert_same_match(parts, whole)
    settled = [f for f in parts.findings if "agree" in f.detail]
    assert settled and all(len(f.culprit_ranks) == 1 for f in settled)


def test_the_runner_is_told_the_rounds_are_over_once_they_are_or_once_they_fail() -> None:
    # a runner keeps what a later round needs (the Ray engine: each part's blocks in the
    # store) until it is told; a round that fails (Ctrl-C, a lost cluster) tells it too
    got, groups = _loaded("nccl3d_dp_pair_mismatch")
    retired = got.table.retired.copy()
    told: list[int] = []
    run = Counting()
    match(got.dumps, got.table, groups, PartRunner(run, 100, None, lambda: told.append(run.calls)))
    assert run.calls == 3 and told == [3]  # the parts, those asked, those that asked: then told

    def fails(cuts: Any) -> Any:
        raise KeyboardInterrupt

    got.table.retired[:] = retired
    told.clear()
    with pytest.raises(KeyboardInterrupt):
        match(got.dumps, got.table, groups, PartRunner(fails, 100, None, lambda: told.append(0)))
    assert told == [0]


@pytest.mark.parametrize("seed", [5, 33, 48, 70, 291])
def test_drawn_jobs_whose_parts_ask_each_other_match_as_a_whole(seed: int) -> None:
    # between them these ask every kind of value: ops, sizes at a position, dtypes, inputs,
    # whole signatures, and (291) a pipeline's agreed transfers
    with tempfile.TemporaryDirectory() as d:
        draw_case(seed, parse_shapes("all"), None).write(Path(d), None)
        parts, whole, run = _smallest_parts(Path(d))
    assert run.calls >= 3
    assert_same_match(parts, whole)


@pytest.mark.parametrize("seed", range(12))
def test_drawn_jobs_cut_into_parts_of_a_drawn_size_match_as_a_whole(seed: int) -> None:
    draw = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as d:
        draw_case(int(draw.integers(0, 2000)), parse_shapes("all"), None).write(Path(d), None)
        parts, whole, _ = _smallest_parts(Path(d), draw)
    assert_same_match(parts, whole)


def test_a_part_asks_what_it_has_no_answer_to_and_only_that() -> None:
    away = Elsewhere(frozenset({1}), {(2, 5, OPS): ("all_reduce",)})
    assert away.holds(1) and not away.holds(2)
    assert away.knows([(2, 5, OPS)])
    assert not away.knows([(2, 5, OPS), (3, 5, OPS), (3, -1, TRANSFERS)])
    assert away.asked == {(3, 5, OPS), (3, -1, TRANSFERS)}
    assert unheld(away.asked) == {(3, 5, OPS): None, (3, -1, TRANSFERS): ()}


@pytest.mark.parametrize("seed", [3, 26, 150, 297, 459, 682, 803, 1009, 1201, 1931, *range(40)])
def test_drawn_jobs_matched_in_parts_match_as_a_whole(seed: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        draw_case(seed, parse_shapes("all"), None).write(Path(d), None)
        parts, whole, _ = _both(Path(d))
    assert_same_match(parts, whole)


@pytest.mark.parametrize(
    "name", ["nccl3d_p2p_mismatch", "gloo3d_skip_collective", "nccl_coalesced"]
)
def test_no_rule_of_matching_reads_the_columns_a_part_leaves_out(name: str) -> None:
    got = load(Directory(SAMPLES / name), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    retired = got.table.retired.copy()
    whole = match(got.dumps, got.table, groups)
    got.table.retired[:] = retired
    noise = np.random.default_rng(7)
    columns: dict[str, Any] = {
        column: noise.integers(-5, 1 << 20, got.table.n).astype(getattr(got.table, column).dtype)
        for column in partitions.UNREAD
    }
    noisy = replace(got.table, **columns)
    assert_same_match(match(got.dumps, noisy, groups), whole)


def test_a_group_alike_with_no_rows_answers_as_no_unit_when_asked(tmp_path: Path) -> None:
    # four pairs of ranks in "tp" groups; the last pair recorded nothing on them, and the
    # first pair ties on sizes at its third all_reduce: the other pairs, each a part of its
    # own (the world holds one barrier), are asked, the empty one too
    dumps = {}
    for rank in range(8):
        pair = [rank - rank % 2, rank - rank % 2 + 1]
        tp = ("1", "tp")
        ops = [make_entry("barrier", 1, group=("0", "default_pg"))]
        if rank < 6:
            for i in range(3):
                size = 32 if (rank == 1 and i == 2) else 64
                sizes = [[size]]
                ops.append(
                    make_entry("all_reduce", i + 1, group=tp, in_sizes=sizes, out_sizes=sizes)
                )
        groups = {"0": ("default_pg", list(range(8))), "1": ("tp", pair)}
        dumps[rank] = make_dump(ops, groups=groups)
    parts, whole, run = _smallest_parts(write_dumps(tmp_path / "job", dumps))
    assert run.calls >= 3
    assert_same_match(parts, whole)
    assert any("2 other groups 'tp' of 2 agree" in f.detail for f in parts.findings)


def test_a_layout_one_family_learns_as_the_recorders_is_accepted_in_another_matched_again(
    tmp_path: Path,
) -> None:
    # gloo records two coalesced all_gathers as one whose output is [[2] + shard]: both
    # members of each tensor-parallel group show it, so it is learned there; in the data-
    # parallel group {0, 2} rank 0 alone shows it, which teaches nothing, and accepts it only
    # because the other family learned it
    groups = {
        "0": ("default_pg", [0, 1, 2, 3]),
        "1": ("tp", [0, 1]),
        "2": ("tp", [2, 3]),
        "3": ("dp", [0, 2]),
        "4": ("dp", [1, 3]),
    }
    coalesced: dict[str, Any] = {"in_sizes": [[4], [4]], "out_sizes": [[2, 4]]}
    plain: dict[str, Any] = {"in_sizes": [[4]], "out_sizes": [[8]]}

    def rank(tp: str, dp: str, dp_sizes: dict[str, Any]) -> dict[str, Any]:
        common: dict[str, Any] = {"backend": "gloo", "state": "scheduled"}
        entries = [
            make_entry("all_gather", 1, group=(tp, "tp"), record_id=0, **common, **coalesced),
            make_entry("all_gather", 1, group=(dp, "dp"), record_id=1, **common, **dp_sizes),
        ]
        return make_dump(entries, groups)

    dumps = {
        0: rank("1", "3", coalesced),
        1: rank("1", "4", plain),
        2: rank("2", "3", plain),
        3: rank("2", "4", plain),
    }
    got = load(Directory(write_dumps(tmp_path, dumps)), Options(workers=1))
    groups_ = build_groups(got.dumps, got.table, got.unreadable)
    whole = match(got.dumps, got.table, groups_)
    runs = Counting()
    parts = match(got.dumps, got.table, groups_, PartRunner(runs))
    assert_same_match(parts, whole)
    assert runs.calls == 2  # the data-parallel part, matched again with the layout
    assert any("records all_gather on 2 ranks as input [[4], [4]]" in n for n in whole.notes)
