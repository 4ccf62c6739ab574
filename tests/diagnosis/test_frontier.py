"""The diagnosis made on each rank's frontier (`diagnosis.frontier`) is the diagnosis of the
whole table: on every sample set and on drawn jobs, with windows far narrower than the one
used, the ranks whose programs the rules read fetched whole as they ask for them."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer import analyze
from fr_analyzer.diagnosis import Diagnosis, diagnose
from fr_analyzer.diagnosis.frontier import Frontier
from fr_analyzer.load import Directory
from fr_analyzer.match import PartRunner, match, partitions
from fr_analyzer.match.frontier import closed_window, window_rows
from fr_analyzer.match.reference import PeerOrder, Replay
from fr_analyzer.model.groups import build_groups
from fr_analyzer.pipeline import Analysis, InProcess, KeptRows, Options, load
from fr_analyzer.render.report_json import report_dict
from tests.builders import make_dump, make_entry, write_dumps
from tools.frsim.campaign import draw_case, parse_shapes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SETS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def _both(a: Analysis, window: int) -> tuple[Diagnosis, Diagnosis]:
    """The diagnosis of the whole table, and the one made on the frontier of `window` ops."""
    args: tuple[Any, ...] = (a.dumps, a.table, a.groups, a.matches, a.findings)
    args += (Options().thresholds, a.series)
    whole = diagnose(*args)  # the whole table: the frontier is off (`FRONTIER_FROM`)
    part = diagnose(*args, window=window, most_share=1.0, frontier_from=0)
    return whole, part


@pytest.mark.parametrize("name", SETS)
def test_every_sample_set_diagnosed_on_its_frontier_is_diagnosed_as_a_whole(name: str) -> None:
    a = analyze(SAMPLES / name, Options(workers=1))
    whole, part = _both(a, window=2)
    assert part == whole


@pytest.mark.parametrize("seed", [*range(0, 2000, 97), 3, 26, 291])
def test_drawn_jobs_diagnosed_on_their_frontier_are_diagnosed_as_a_whole(seed: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        draw_case(seed, parse_shapes("all"), None).write(Path(d), None)
        a = analyze(Path(d), Options(workers=1))
    whole, part = _both(a, window=2)
    assert part == whole


def test_the_report_of_a_job_diagnosed_on_its_frontier_is_the_whole_tables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the pipeline's own path: every job read on its frontier, the ops named at their rows
    whole = report_dict(analyze(SAMPLES / "nccl3d_cascade_started", Options(workers=1)))
    monkeypatch.setattr("fr_analyzer.diagnosis.FRONTIER_FROM", 0)
    monkeypatch.setattr("fr_analyzer.diagnosis.MOST_SHARE", 1.0)
    part = report_dict(analyze(SAMPLES / "nccl3d_cascade_started", Options(workers=1)))
    assert part == whole
    # and matched in parts, as a cluster does, each part finding its own groups' frontier
    engine = PartsInTurn()
    assert report_dict(analyze(SAMPLES / "nccl3d_cascade_started", Options(engine=engine))) == whole


class PartsInTurn(InProcess):
    """One process that matches the job in parts, as the Ray engine does, one after another."""

    def match_runner(self, rows: KeptRows | None = None) -> PartRunner | None:
        return PartRunner(partitions.in_turn)


@pytest.mark.parametrize("name", ["nccl3d_skip_world", "gloo3d_pp_recv_missing", "nccl_coalesced"])
def test_the_parts_of_a_job_find_and_close_its_frontier_as_the_whole_table_gives_it(
    name: str,
) -> None:
    got = load(Directory(SAMPLES / name), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    retired = got.table.retired.copy()  # matching clears it where a recorder is silent
    whole = match(got.dumps, got.table, groups)
    got.table.retired[:] = retired
    parts = match(got.dumps, got.table, groups, PartRunner(partitions.in_turn), frontier=True)
    assert whole.frontier is None  # matched whole: the diagnosis finds it
    assert parts.frontier is not None
    closed = Frontier(got.table, groups, whole).closed(window_rows(got.table, whole))
    assert np.array_equal(parts.frontier, closed)
    # with a narrower window too: the window's rows and what they are matched with
    narrow = closed_window(got.table, whole, 1)
    assert np.array_equal(narrow, Frontier(got.table, groups, whole).rows(1))
    assert np.isin(window_rows(got.table, whole, 1), narrow).all()


def _long_job(tmp_path: Path, ops: int = 40) -> Analysis:
    """Two ranks, `ops` all_reduces; rank 1 never issued the last one (rank 0 waits in it)."""
    entries = {
        rank: [
            make_entry(
                seq=s,
                state="scheduled" if s == ops - 1 else "completed",
                time_created_ns=1_000 + s,
            )
            for s in range(ops - rank)
        ]
        for rank in (0, 1)
    }
    dumps = {rank: make_dump(rows) for rank, rows in entries.items()}
    return analyze(write_dumps(tmp_path, dumps), Options(workers=1))


def test_a_ranks_frontier_is_its_first_op_not_completed_and_a_window_before_it(
    tmp_path: Path,
) -> None:
    a = _long_job(tmp_path)
    t = a.table
    rows = Frontier(t, a.groups, a.matches).rows(window=3)
    held = {(int(t.rank[r]), int(t.coll_seq[r])) for r in rows.tolist()}
    # rank 0 waits in #39: it and 3 before it; rank 1 finished its 39: its last 3, and the
    # rows of rank 0 they are matched with are there already
    assert held == {(0, s) for s in range(36, 40)} | {(1, s) for s in range(36, 39)}


def test_the_rows_held_are_a_table_of_their_own_with_their_matches(tmp_path: Path) -> None:
    a = _long_job(tmp_path)
    reads = Frontier(a.table, a.groups, a.matches)
    rows = reads.rows(window=3)
    part = reads.held(rows)
    assert part.table.n == len(rows)
    assert np.array_equal(part.table.coll_seq, a.table.coll_seq[rows])
    units = part.matches.collectives
    for unit in np.unique(units.entry_unit[units.entry_unit >= 0]).tolist():
        held_rows = units.unit_rows(unit)
        assert np.array_equal(rows[held_rows], a.matches.collectives.unit_rows(unit))
    assert part.whole_ranks == frozenset()
    every = reads.held(np.arange(a.table.n))
    assert every.whole_ranks == {0, 1}
    assert np.array_equal(every.matches.collectives.rows, a.matches.collectives.rows)


def test_a_rank_asked_for_whole_is_held_whole(tmp_path: Path) -> None:
    a = _long_job(tmp_path)
    reads = Frontier(a.table, a.groups, a.matches)
    rows = reads.with_ranks(reads.rows(window=3), [1])
    # rank 1's collectives pull in rank 0's rows of them: every row of the job
    assert len(rows) == a.table.n
    assert reads.held(rows).whole_ranks == {0, 1}


def test_the_other_ranks_programs_are_read_only_as_far_as_a_rule_asks() -> None:
    a = analyze(SAMPLES / "nccl3d_skip_world", Options(workers=1))
    peers = PeerOrder(a.table, a.groups, a.matches.collectives, a.matches.p2p)
    descs = {g.desc for g in a.groups.groups}
    every = list(peers.mirrors(0, descs))
    assert every  # rank 0 has ranks in its role
    peers = PeerOrder(a.table, a.groups, a.matches.collectives, a.matches.p2p)
    assert next(peers.mirrors(0, descs)) == every[0]
    assert peers.programs_read == {0, every[0]}  # its own, and the one mirror asked for


def test_a_replay_makes_each_item_once_and_reads_it_as_often_as_asked() -> None:
    made: list[int] = []

    def items() -> Any:
        for i in range(5):
            made.append(i)
            yield i

    replay = Replay(items())
    assert next(iter(replay)) == 0 and made == [0]
    assert list(replay) == [0, 1, 2, 3, 4] and list(replay) == [0, 1, 2, 3, 4]
    assert made == [0, 1, 2, 3, 4]
