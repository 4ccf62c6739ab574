"""Where the recorder does not say whether an op finished (`match.completion.Quiet`), decided
from the ranks' profiles before matching: the same ranks in flight and the same ranks looked at
during the dump as the table shows once matching has cleared the silent ops' `retired`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fr_analyzer.load import Directory
from fr_analyzer.match import match
from fr_analyzer.match.completion import quiet, silent_rows
from fr_analyzer.model.backends import NO_STATE_BACKENDS
from fr_analyzer.model.groups import build_groups
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.pipeline import Options, load

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SETS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", SETS)
def test_the_profiles_tell_the_ranks_in_flight_and_looked_at_as_the_matched_table_shows(
    name: str,
) -> None:
    got = load(Directory(SAMPLES / name), Options(workers=1))
    t = got.table
    before = profiles_of(t)
    told = quiet(before, got.dumps)
    match(got.dumps, t, build_groups(got.dumps, t, got.unreadable))
    # matching cleared `retired` on the silent rows, and only there
    assert not t.retired[silent_rows(t, told)].any()
    assert told.busy(before) == frozenset(np.unique(t.rank[~t.retired]).tolist())
    stateful = ~np.array([b in NO_STATE_BACKENDS for b in t.backends], dtype=bool)[t.backend]
    seen = stateful & ~t.retired & ((t.t_started >= 0) | (t.t_completed >= 0))
    assert told.looked_at(before) == frozenset(np.unique(t.rank[seen]).tolist())


def test_xccl_that_never_completes_an_op_is_silent_and_every_rank_is_in_flight() -> None:
    got = load(Directory(SAMPLES / "xccl_healthy"), Options(workers=1))
    p = profiles_of(got.table)
    told = quiet(p, got.dumps)
    assert told.backends == frozenset({"xccl"})
    assert told.busy(p) == frozenset(range(8))
    assert any("backend xccl never reported an op completed" in n for n in told.notes)


def test_a_recorder_that_says_when_ops_finish_is_not_silent() -> None:
    got = load(Directory(SAMPLES / "nccl3d_skip_world"), Options(workers=1))
    p = profiles_of(got.table)
    told = quiet(p, got.dumps)
    assert told.backends == frozenset() and told.notes == ()
    assert not silent_rows(got.table, told).any()
