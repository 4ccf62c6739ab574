"""Each database written from calls that come a chunk of rows at a time (`Analysis.calls`,
as a cluster that keeps the rows gives them): the pickle, SQLite and Parquet hold what they
hold when written from the whole table, row for row, whatever the chunks. The calls here
are cut from one process's table; on a real cluster: tests/cluster/test_ray_engine.py."""

from __future__ import annotations

import dataclasses
import pickle
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer import analyze
from fr_analyzer.match.frontier import Closure, Held, Wanted, held_matches, rows_of
from fr_analyzer.match.outcomes import CallChunk, ChunkOutcome, JobUnits
from fr_analyzer.model.shown import Showing, Shown, shown_rows
from fr_analyzer.model.table import TABLE_COLUMNS, EntryTable, rank_starts
from fr_analyzer.pipeline import Analysis, Options, ShardFn, T
from fr_analyzer.render import database, database_sqlite
from fr_analyzer.render.tables import tables

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SHOWN = ("nccl3d_skip_world", "nccl_p2p_pipeline", "nccl_coalesced", "nccl_healthy")
"""Sets whose rows an output shows fetched from where the engine keeps them (`CutCalls`): a
root in a 3D job, send/recv pairs, blocks, a healthy job (`-j`, the timeline)."""
SETS = ("nccl_not_joined", "nccl_p2p_pipeline", "nccl_coalesced", "gloo3d_pp_recv_missing")


class CutCalls:
    """`pipeline.JobCalls` of a whole analysis, its rows `size` at a time."""

    def __init__(self, analysis: Analysis, size: int) -> None:
        t, m, groups = analysis.table, analysis.matches, analysis.groups
        units, pairs = m.collectives, m.p2p
        self.units = JobUnits(
            units.group,
            units.seq,
            list(units.op),
            units.ranks_present,
            units.ranks_expected,
            units.passed,
            groups.entry_group[pairs.send_row],
            t.p2p_seq[pairs.send_row],
            {},
            {},
        )
        pair_id = np.full(t.n, -1, dtype=np.int64)
        pair_id[pairs.send_row] = pair_id[pairs.recv_row] = len(units.seq) + np.arange(
            len(pairs.send_row)
        )
        self.collective = np.where(units.entry_unit >= 0, units.entry_unit, pair_id)
        self.analysis, self.size = analysis, size

    def chunks(self) -> Iterator[CallChunk]:
        a = self.analysis
        for start in range(0, a.table.n, self.size):
            rows = np.arange(start, min(start + self.size, a.table.n), dtype=np.int64)
            outcome = ChunkOutcome(
                a.groups.entry_group[rows], self.collective[rows], a.matches.done[rows]
            )
            yield CallChunk(start, rows_of(a.table, rows), outcome)

    def held(self, wanted: Wanted) -> Held:
        # the whole programs of the ranks wanted, with every row their ops are matched with,
        # as a table of their own, matches renumbered to it (no frontier: none is asked for)
        a = self.analysis
        t, m = a.table, a.matches
        mine = np.flatnonzero(np.isin(t.rank, sorted(wanted.ranks))).astype(np.int64)
        rows = Closure(t, m).closed(mine)
        groups = dataclasses.replace(a.groups, entry_group=a.groups.entry_group[rows])
        return Held(rows, rows_of(t, rows), groups, held_matches(m, rows), wanted.ranks)

    def reduced(self, fn: ShardFn[T]) -> list[T]:
        t = self.analysis.table  # as each shard sums up its ranks: here, two halves
        starts = rank_starts(t.rank)
        ranks, ends = t.rank[starts].tolist(), np.r_[starts, t.n].astype(np.int64)
        half = len(ranks) // 2
        columns = {name: getattr(t, name) for name, _ in TABLE_COLUMNS}
        return [
            fn(ranks[:half], ends[: half + 1], columns, None),
            fn(ranks[half:], ends[half:], columns, ranks[half:]),
        ]

    def shown(self, showing: Showing) -> tuple[EntryTable, Shown]:
        a = self.analysis
        got = shown_rows(a.table, a.groups.entry_group, showing)  # as each part chooses
        rows = np.arange(len(got.rows), dtype=np.int64)
        return rows_of(a.table, got.rows), Shown(rows, got.groups, got.firsts)


def streamed(name: str, size: int) -> tuple[Analysis, Analysis]:
    whole = analyze(SAMPLES / name, Options(workers=1))
    cut = dataclasses.replace(whole, calls=CutCalls(whole, size), rows_in_job=whole.table.n)
    return whole, cut


def _sqlite_rows(path: Path) -> dict[str, list[Any]]:
    with sqlite3.connect(path) as connection:
        names = [
            n for (n,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        return {n: connection.execute(f"SELECT * FROM {n}").fetchall() for n in names}


@pytest.mark.parametrize("name", SETS)
@pytest.mark.parametrize("size", [1, 37, 1 << 20])
def test_the_pickle_written_a_chunk_at_a_time_loads_as_the_whole(
    name: str, size: int, tmp_path: Path
) -> None:
    whole, cut = streamed(name, size)
    database.write(cut, tmp_path / "db.pkl")
    with (tmp_path / "db.pkl").open("rb") as f:
        assert pickle.load(f) == database.build(whole)
    assert database.load_db(tmp_path / "db.pkl").tables.keys() == set(tables(whole))


@pytest.mark.parametrize("name", SETS)
def test_sqlite_written_a_chunk_at_a_time_is_the_whole(name: str, tmp_path: Path) -> None:
    whole, cut = streamed(name, 37)
    database_sqlite.write(whole, tmp_path / "whole.sqlite")
    database_sqlite.write(cut, tmp_path / "cut.sqlite")
    assert _sqlite_rows(tmp_path / "cut.sqlite") == _sqlite_rows(tmp_path / "whole.sqlite")


@pytest.mark.parametrize("name", SETS)
def test_parquet_written_a_chunk_at_a_time_is_the_whole(name: str, tmp_path: Path) -> None:
    database_parquet = pytest.importorskip("fr_analyzer.render.database_parquet")
    pytest.importorskip("pyarrow", reason="pyarrow (the parquet extra) not installed")
    whole, cut = streamed(name, 37)
    database_parquet.write(whole, tmp_path / "whole.parquet")
    database_parquet.write(cut, tmp_path / "cut.parquet")
    got = database_parquet.read_tables(tmp_path / "cut.parquet")
    expected = database_parquet.read_tables(tmp_path / "whole.parquet")
    assert {n: t.to_pylist() for n, t in got.items()} == {
        n: t.to_pylist() for n, t in expected.items()
    }
