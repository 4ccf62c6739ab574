"""The straggler rule (`diagnosis.stragglers`) measured in passes (`diagnosis.lateness`): over
the parts a cluster matches (every row of some groups) and over shards of ranks, each pass
reading only its slice, the rule gives what it gives over the whole table, to the evidence."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from fr_analyzer.diagnosis import lateness, stragglers
from fr_analyzer.match import MatchResult, PartMatch
from fr_analyzer.match.frontier import rows_of
from fr_analyzer.model.groups import GroupTable
from fr_analyzer.model.table import EntryTable, rank_starts
from tests.parts import matched
from tools.frsim.campaign import draw_case, parse_shapes

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SLOW = ["nccl_straggler", "gloo3d_straggler", "nccl3d_stall"]
HEALTHY = ["nccl_healthy", "gloo_healthy"]
THRESHOLDS = [(50.0, 2000.0), (5.0, 100.0), (0.0, 0.0)]  # (straggler_ms, stall_ms)
I64 = npt.NDArray[np.int64]


def only(a: lateness.Arrivals, keep: npt.NDArray[np.bool_]) -> lateness.Arrivals:
    """The arrivals `keep` selects."""
    return replace(
        a,
        rows=a.rows[keep],
        completion=a.completion[keep],
        unit=a.unit[keep],
        kept=a.kept[keep],
        collective=a.collective[keep],
    )


def in_slices(
    t: EntryTable,
    groups: GroupTable,
    merged: MatchResult,
    parts: list[PartMatch],
    shards: int,
    straggler_ms: float,
    stall_ms: float,
) -> stragglers.Slowness | None:
    """The rule with each pass over its slices: pass 1 and 3 over each part's own rows (its
    own numbering), pass 2 and 4 over shards of whole ranks (theirs); what passes between
    them goes by row of the job, as a cluster would send it."""
    starts = rank_starts(t.rank)
    cut = [int(starts[i]) for i in np.linspace(0, len(starts), shards + 1, dtype=int)[1:-1]]
    bounds = list(zip([0, *cut], [*cut, t.n], strict=True))
    tables = {b: rows_of(t, np.arange(*b, dtype=np.int64)) for b in bounds}
    got = []
    for p in parts:
        assert p.rows is not None
        got.append((p.rows, lateness.arrivals(rows_of(t, p.rows), p.result)))
    heads = sum(len(a.rows) for _, a in got)
    counted = sum(a.counted for _, a in got)
    resolution = stragglers.WATCHDOG_POLL_MS if any(a.recorded for _, a in got) else 0.0
    # pass 2, by shard: each part's arrivals on the shard's ranks
    wait = np.full(t.n, np.nan)
    gap = np.full(t.n, np.nan)
    for lo, hi in bounds:
        mine = []
        for rows, a in got:
            job = rows[a.rows]
            mine.append((rows - lo, only(a, (job >= lo) & (job < hi))))
        w = lateness.waits(tables[(lo, hi)], lateness.Arrivals.joined(mine))
        wait[w.rows + lo] = w.wait_ns
        gap[w.rows + lo] = w.gap_ns
    # pass 3, by part
    late = np.full(t.n, np.nan)
    collective = np.zeros(t.n, dtype=bool)
    for rows, a in got:
        job = rows[a.rows[a.kept]]
        late[job] = lateness.late_ms(a.unit[a.kept], a.keys, wait[job])
        collective[job] = a.collective[a.kept]
    # pass 4, by shard
    summaries = []
    for lo, hi in bounds:
        kept = np.flatnonzero(~np.isnan(late[lo:hi])).astype(np.int64)
        w = lateness.Waits(kept, wait[kept + lo], gap[kept + lo])
        summaries.append(
            stragglers.RankLateness.of(
                tables[(lo, hi)],
                w,
                late[kept + lo],
                collective[kept + lo],
                stall_ms,
                straggler_ms,
                np.arange(lo, hi, dtype=np.int64),
            )
        )
    mine_rows = np.flatnonzero(collective & ~np.isnan(late)).astype(np.int64)

    def collectives_of(rank: int) -> I64:
        found: I64 = mine_rows[t.rank[mine_rows] == rank]
        return found

    return stragglers.decide(
        t,
        groups,
        merged,
        stragglers.RankLateness.joined(summaries),
        (heads, counted),
        resolution,
        straggler_ms,
        collectives_of,
    )


def parts_of(where: Path) -> tuple[EntryTable, GroupTable, MatchResult, list[PartMatch]]:
    """The job matched whole, and its parts as matched in the smallest a runner takes."""
    job = matched(where)
    return job.t, job.groups, job.whole, [done for _, done in job.parts()]


def assert_same_in_slices(where: Path) -> list[stragglers.Slowness | None]:
    t, groups, whole, parts = parts_of(where)
    if parts[0].rows is None:  # one part: the whole table
        parts = [replace(parts[0], rows=np.arange(t.n, dtype=np.int64))]
    found = []
    for straggler_ms, stall_ms in THRESHOLDS:
        expected = stragglers.find(t, groups, whole, straggler_ms, stall_ms)
        for shards in (1, 3):
            got = in_slices(t, groups, whole, parts, shards, straggler_ms, stall_ms)
            assert repr(got) == repr(expected), (straggler_ms, stall_ms, shards)
        found.append(expected)
    return found


@pytest.mark.parametrize("name", SLOW + HEALTHY)
def test_the_rule_over_parts_and_shards_of_ranks_is_the_rule_over_the_whole_table(
    name: str,
) -> None:
    found = assert_same_in_slices(SAMPLES / name)
    if name in SLOW:  # the default thresholds name the slow rank
        assert found[0] is not None
    else:
        assert found[0] is None


@pytest.mark.parametrize(
    ("seed", "slow"),
    [(22, True), (213, True), (28, False), (40, False), (86, False), (240, False), (19, False)],
)
def test_drawn_jobs_give_the_same_rule_over_parts_and_shards(seed: int, slow: bool) -> None:
    # stalls in 3D jobs, healthy jobs of several shapes (stopped at the end or mid-step),
    # and a host stopped (the rule is not asked there, but it still measures the same)
    with tempfile.TemporaryDirectory() as d:
        draw_case(seed, parse_shapes("all"), None).write(Path(d), None)
        found = assert_same_in_slices(Path(d))
    if slow:
        assert found[0] is not None and found[0].stall


def test_the_first_unexplained_late_arrival_of_the_job_is_the_first_of_its_shards() -> None:
    def late(row: int, created: int, ms: float) -> stragglers.Arrival:
        return stragglers.Arrival(row, row // 10, created, ms)

    a = stragglers.RankLateness({}, {}, late(3, 100, 2500.0), 1, {})
    b = stragglers.RankLateness({}, {}, late(25, 100, 3000.0), 2, {})  # as early, later
    c = stragglers.RankLateness({}, {}, late(41, 90, 2100.0), 0, {})  # the first enqueued
    assert stragglers.RankLateness.joined([a, b]).stall == late(25, 100, 3000.0)
    assert stragglers.RankLateness.joined([a, b]).explained == 3
    assert stragglers.RankLateness.joined([a, b, c]).stall == late(41, 90, 2100.0)
