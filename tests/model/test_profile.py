"""Each rank's profile (`model.profile`): what the job-wide stages read of a rank's rows, summed
up where the rows are, and the same however the ranks are split and joined again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer.load import Directory
from fr_analyzer.model.profile import Profiles, joined, profiles_of
from fr_analyzer.pipeline import Options, load
from tests.builders import make_dump, make_entry, write_dumps

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SETS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
FIELDS = (
    "rank",
    "rows",
    "newest_ns",
    "longest_timeout_ms",
    "timing_on",
    "backend_rank",
    "backend_rows",
    "backend_completed",
    "backend_unretired",
    "backend_seen",
    "backend_unretired_seen",
    "pair_rank",
    "pair_rows",
    "pair_p2p",
    "told_pair",
    "told_size",
    "told_rows",
    "link_a",
    "link_b",
)


def assert_same_profiles(a: Profiles, b: Profiles) -> None:
    """Two profiles alike in every column, their groups compared by name."""
    for name in FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.pair_keys() == b.pair_keys()
    assert [a.backends[c] for c in a.backend] == [b.backends[c] for c in b.backend]


def _profiles(tmp_path: Path, dumps: dict[int, dict[str, Any]]) -> Profiles:
    got = load(Directory(write_dumps(tmp_path, dumps)), Options(workers=1))
    return profiles_of(got.table)


def test_a_rank_profile_counts_its_rows_its_newest_time_its_longest_timeout_and_ops_not_retired(
    tmp_path: Path,
) -> None:
    world = {"0": ("default_pg", [0, 1])}
    done = [make_entry(seq=i + 1, record_id=i) for i in range(3)]
    stuck = [
        *[make_entry(seq=i + 1, record_id=i) for i in range(2)],
        make_entry(seq=3, record_id=2, state="scheduled", retired=False, timeout_ms=900_000),
    ]
    p = _profiles(tmp_path, {0: make_dump(done, world), 1: make_dump(stuck, world)})
    assert p.rank.tolist() == [0, 1]
    assert p.rows.tolist() == [3, 3]
    assert p.newest_ns.tolist() == [2_000_002, 2_000_001]  # rank 1's last op never completed
    assert p.longest_timeout_ms.tolist() == [600_000, 900_000]
    assert p.backend_rank.tolist() == [0, 1]
    assert [p.backends[c] for c in p.backend] == ["nccl", "nccl"]
    assert p.backend_rows.tolist() == [3, 3]
    assert p.backend_completed.tolist() == [True, True]
    assert p.backend_unretired.tolist() == [False, True]
    assert p.backend_seen.tolist() == [True, True]  # completion times
    assert p.backend_unretired_seen.tolist() == [False, False]  # rank 1's never started
    assert p.pair_keys() == [(0, ("0", "default")), (1, ("0", "default"))]
    assert p.pair_rows.tolist() == [3, 3]
    assert not p.pair_p2p.any()


def test_all_gathers_and_reduce_scatters_tell_their_group_size_and_sends_mark_their_group(
    tmp_path: Path,
) -> None:
    groups = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("pp", [0, 1])}
    entries = [
        make_entry("all_gather", 1, in_sizes=[[4]], out_sizes=[[16]], record_id=0),
        make_entry("all_gather", 2, in_sizes=[[4]], out_sizes=[[16]], record_id=1),
        make_entry("reduce_scatter", 3, in_sizes=[[12]], out_sizes=[[5]], record_id=2),
        make_entry("send", 0, p2p_seq=1, group=("1", "pp"), peer="0->1", record_id=3),
    ]
    p = _profiles(tmp_path, {0: make_dump(entries, groups)})
    pairs = p.pair_keys()
    world, pipe = pairs.index((0, ("0", "default"))), pairs.index((0, ("1", "pp")))
    # the two all_gathers tell 4; 12 over 5 is no whole number and tells nothing
    told = zip(p.told_pair.tolist(), p.told_size.tolist(), p.told_rows.tolist(), strict=True)
    assert list(told) == [(world, 4, 2)]
    assert p.pair_p2p.tolist()[pipe] and not p.pair_p2p.tolist()[world]


@pytest.mark.parametrize("name", SETS)
def test_profiles_of_ranks_split_and_joined_again_are_the_whole_jobs(name: str) -> None:
    got = load(Directory(SAMPLES / name), Options(workers=1))
    whole = profiles_of(got.table)
    ranks = whole.rank.tolist()
    # the odd ranks first, as shards may come in any order
    again = joined([whole.only(ranks[1::2]), whole.only(ranks[::2])])
    assert_same_profiles(again, whole)
    assert whole.only(ranks) is whole


def test_joining_no_profiles_is_no_rank() -> None:
    assert len(joined([]).rank) == 0
