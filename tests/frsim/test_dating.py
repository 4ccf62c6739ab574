"""frsim's file times (tools/frsim/dating.py): each dump file is written a drawn latency after
its rank's snapshot (longer with stack traces), or, copied without its times, days after every
entry on every rank; the truth never depends on them, and the campaign draws them from a stream
of their own."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from tools.frsim import faults
from tools.frsim.campaign import ALL_SHAPES, COPIED_AFTER_S, draw_case, draw_dating
from tools.frsim.dating import (
    COPY_SPREAD_S,
    DAY_S,
    LATENCY_PLAIN_S,
    LATENCY_STACKS_S,
    Dating,
    FileTimes,
)
from tools.frsim.layout import Layout
from tools.frsim.program import ProgramSpec
from tools.frsim.recorder import BASE_TIME_NS, DumpKind, clock_offset
from tools.frsim.sim import SimSpec, Simulation, simulate
from tools.frsim.writers import ET_NAMINGS, Output, write_files

SPEC = SimSpec(
    layout=Layout(tp=2, pp=2, dp=2),
    program=ProgramSpec(steps=2, micro_batches=2),
    timeout_ms=5_000,
    dump="mid",
    seed=5,
    file_times=FileTimes(),
)


def snapshot_ns(sim: Simulation, rank: int) -> int:
    """Rank `rank`'s snapshot on its own host's clock (what its entries' times are on)."""
    when = sim.dump_times[rank]
    assert when is not None
    return BASE_TIME_NS + clock_offset(sim.settings, rank) + when


def newest_entry_ns(sim: Simulation, rank: int) -> int:
    """The newest timestamp in rank `rank`'s dump."""
    dump = sim.dump(rank)
    assert dump is not None
    return max(
        max(
            e.time_created_ns,
            e.time_discovered_started_ns or 0,
            e.time_discovered_completed_ns or 0,
        )
        for e in dump.entries
    )


def undated(described: str) -> str:
    """A case's `describe()` without the words on its file times."""
    return re.sub(r" (files \+\S+ \(\w+\)|copied \+\S+d) \|", " |", described)


def latencies_s(sim: Simulation, written: Path) -> dict[int, float]:
    """Each written file's modification time minus its rank's snapshot, in seconds."""
    return {
        rank: ((written / Output().name(rank)).stat().st_mtime_ns - snapshot_ns(sim, rank)) / 1e9
        for rank in range(sim.world_size)
    }


@pytest.mark.parametrize(
    ("stack_traces", "bounds"), [(True, LATENCY_STACKS_S), (False, LATENCY_PLAIN_S)]
)
def test_each_file_is_written_a_drawn_latency_after_its_snapshot(
    tmp_path: Path, stack_traces: bool, bounds: tuple[float, float]
) -> None:
    # GIVEN a job dumped mid-run, with or without stack traces
    sim = simulate(replace(SPEC, stack_traces=stack_traces))
    # WHEN its dumps are written
    write_files(sim, tmp_path)
    # THEN every file's time is its snapshot plus a latency in the range for its kind of dump,
    # drawn per rank (no two ranks' equal), and the set says which kind it is
    late = latencies_s(sim, tmp_path)
    assert all(bounds[0] <= s <= bounds[1] for s in late.values()), late
    assert len(set(late.values())) == sim.world_size
    assert sim.spec.dating == (Dating.STACKS if stack_traces else Dating.PLAIN)


def test_a_file_time_is_never_before_the_newest_entry_of_its_dump() -> None:
    sim = simulate(replace(SPEC, stack_traces=False))
    for rank in range(sim.world_size):
        file_time = sim.file_time_ns(rank)
        assert file_time is not None and file_time > newest_entry_ns(sim, rank)


def test_latencies_are_a_function_of_the_seed() -> None:
    first, again = simulate(SPEC), simulate(SPEC)
    other = simulate(replace(SPEC, seed=6))
    assert first.file_times == again.file_times
    assert first.file_times != other.file_times


def test_a_copy_sets_every_file_days_after_every_entry(tmp_path: Path) -> None:
    # GIVEN the same set, copied two days later by a copy that kept no times
    sim = simulate(replace(SPEC, file_times=FileTimes(copied_after_s=2 * DAY_S)))
    # WHEN it is written
    write_files(sim, tmp_path)
    # THEN every rank's file is dated by the copy: two days past every entry of every rank,
    # all within a second of each other
    times = [(tmp_path / Output().name(r)).stat().st_mtime_ns for r in range(sim.world_size)]
    newest = max(newest_entry_ns(sim, r) for r in range(sim.world_size))
    assert min(times) >= newest + 2 * DAY_S * 1e9
    assert max(times) - min(times) <= COPY_SPREAD_S * 1e9
    assert sim.spec.dating == Dating.COPIED


def test_a_rank_that_crashed_has_no_file_time() -> None:
    sim = simulate(replace(SPEC, dump="end", fault=faults.crash(rank=5, op=30)))
    assert sim.file_time_ns(5) is None
    assert all(sim.file_time_ns(r) is not None for r in range(sim.world_size) if r != 5)


def test_without_file_times_a_file_keeps_the_time_it_was_written(tmp_path: Path) -> None:
    sim = simulate(replace(SPEC, file_times=None))
    write_files(sim, tmp_path)
    assert sim.spec.dating == Dating.NONE and sim.file_time_ns(0) is None
    # written now: long after the simulated job's entries
    assert (tmp_path / Output().name(0)).stat().st_mtime_ns > newest_entry_ns(sim, 0) + DAY_S * 1e9


def test_an_execution_trace_keeps_the_time_it_is_written(tmp_path: Path) -> None:
    sim = simulate(SPEC)
    write_files(sim, tmp_path, Output(fmt="et", pattern=ET_NAMINGS["et"]))
    mtime = (tmp_path / "rank-0.et.json").stat().st_mtime_ns
    assert mtime != sim.file_time_ns(0)


@pytest.mark.parametrize("file_times", [FileTimes(), FileTimes(copied_after_s=DAY_S)])
@pytest.mark.parametrize(
    ("dump", "fault", "status"),
    [("mid", None, "ok"), ("end", None, "ok"), ("end", faults.stop_host(rank=3, op=30), "hung")],
)
def test_file_times_never_change_the_truth(
    file_times: FileTimes, dump: DumpKind, fault: faults.Fault | None, status: str
) -> None:
    """A healthy job dumped mid-run stays ok, a hung one hung, whatever its files say."""
    spec = replace(SPEC, dump=dump, fault=fault)
    dated = simulate(replace(spec, file_times=file_times)).truth
    assert dated == simulate(replace(spec, file_times=None)).truth
    assert dated.status == status


# --- the campaign's draws ----------------------------------------------------------------------


def test_the_campaign_copies_a_quarter_of_the_sets_days_later() -> None:
    datings = [draw_dating(seed) for seed in range(400)]
    copied = [d.copied_after_s for d in datings if d.copied_after_s is not None]
    assert 0.18 < len(copied) / len(datings) < 0.32
    assert all(COPIED_AFTER_S[0] <= s <= COPIED_AFTER_S[1] for s in copied)
    assert draw_dating(17) == draw_dating(17)


def test_the_campaign_dates_files_by_whether_its_dumps_have_stack_traces() -> None:
    seen = set()
    for seed in range(60):
        case = draw_case(seed)
        assert case.spec.file_times == draw_dating(seed)
        want = (
            Dating.COPIED
            if draw_dating(seed).copied_after_s is not None
            else Dating.STACKS
            if case.spec.stack_traces
            else Dating.PLAIN
        )
        assert case.dating == want
        seen.add(case.dating)
    assert seen == {Dating.PLAIN, Dating.STACKS, Dating.COPIED}


@pytest.mark.parametrize(
    ("seed", "shapes", "before"),
    [
        (
            4,
            (),
            "seed 4: pp tp1xpp4xdp2 (8 ranks) nccl timing cap 2000 timeout 30s skew 1.56s pickle "
            "nccl_trace_rank_container-node00_0 | stop_host pp_send: stop_host on rank 0 at op 133 "
            "| truth: hung not_joined culprit 0 group 5 (pp) p107@rank 2 nccl:recv 1<-0",
        ),
        (
            7,
            ALL_SHAPES,
            "seed 7: fsdp w16 L6 s7 (16 ranks) gloo gloo cap 2000 timeout 30s skew 1.58s pickle "
            "rank_0.pkl | mismatch reduce_scatter: mismatch on rank 6 at op 180 (dtype, grows, "
            "member 0) | truth: desync mismatch culprit 6 group 0 (default_pg) c181 "
            "gloo:all_reduce",
        ),
    ],
)
def test_dating_leaves_every_other_draw_of_a_seed_as_it_was(
    seed: int, shapes: tuple[str, ...], before: str
) -> None:
    """`before`: the case as `describe()` put it before files had times."""
    assert undated(draw_case(seed, shapes).describe()) == before


@pytest.mark.parametrize("dating", [Dating.PLAIN, Dating.STACKS, Dating.COPIED, Dating.NONE])
def test_a_forced_dating_dates_every_case_so_and_changes_nothing_else(dating: Dating) -> None:
    for seed in (4, 7):
        drawn, forced = draw_case(seed, ALL_SHAPES), draw_case(seed, ALL_SHAPES, dating)
        assert forced.dating == dating
        assert undated(forced.describe()) == undated(drawn.describe())


def test_stack_latency_can_be_forced_on_dumps_without_frames() -> None:
    sim = simulate(replace(SPEC, stack_traces=False, file_times=FileTimes(stacks=True)))
    late = [(t - snapshot_ns(sim, r)) / 1e9 for r, t in enumerate(sim.file_times) if t is not None]
    assert sim.spec.dating == Dating.STACKS
    assert all(LATENCY_STACKS_S[0] <= s <= LATENCY_STACKS_S[1] for s in late)
