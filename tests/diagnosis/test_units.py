"""Hang diagnosis, unit by unit: positions, stacks, the JSON root cause, medians. The causal
rules themselves are in test_causal_rules.py; every sample set's answer in
end_to_end/test_scenarios.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer import analyze
from fr_analyzer.diagnosis import stragglers
from fr_analyzer.pipeline import Options
from fr_analyzer.render.report import render_text
from tests.builders import make_dump, make_entry, renumber
from tests.conftest import Run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def test_stuck_rank_position_names_first_incomplete_op_with_state_and_age() -> None:
    analysis = analyze(SAMPLES / "nccl_stuck_started", Options(workers=1))
    (rank2,) = [p for p in analysis.diagnosis.positions if 2 in p.ranks and p.group.name == "0"]
    assert rank2.ranks == (2,) and rank2.first_incomplete is not None
    assert rank2.first_incomplete.collective_seq_id == 5
    assert rank2.first_incomplete.state == "started"
    assert rank2.first_incomplete.age_s is not None and rank2.first_incomplete.age_s >= 600
    assert rank2.last_completed is not None and rank2.last_completed.collective_seq_id == 4


def test_ranks_in_the_same_position_collapse_into_one_row(run: Run) -> None:
    group = {"0": ("default_pg", list(range(64)))}
    dumps = {}
    for r in range(64):
        entries = [make_entry("all_reduce", s, group=("0", "default_pg")) for s in range(3)]
        if r != 7:
            entries.append(
                make_entry(
                    "all_reduce", 3, group=("0", "default_pg"), state="scheduled", retired=False
                )
            )
        dumps[r] = make_dump(renumber(entries), group)
    analysis = run(dumps)
    rows = analysis.diagnosis.positions
    assert sorted(p.ranks for p in rows) == [tuple(r for r in range(64) if r != 7), (7,)]
    text = render_text(analysis, ranks=True)
    assert "0-6,8-63" in text
    root = analysis.diagnosis.root_cause
    assert root is not None and root.kind.value == "not_joined" and root.ranks == (7,)


def test_stacks_are_grouped_with_the_odd_one_out_marked(run: Run) -> None:
    def frames(line: int) -> list[dict[str, Any]]:
        return [
            {"name": "step", "filename": "train.py", "line": line},
            {"name": "main", "filename": "train.py", "line": 1},
        ]

    group = {"0": ("default_pg", [0, 1, 2, 3])}
    dumps = {}
    for r in range(4):
        entries = [make_entry("all_reduce", 0, group=("0", "default_pg"), frames=frames(10))]
        if r != 2:
            entries.append(
                make_entry(
                    "all_reduce",
                    1,
                    group=("0", "default_pg"),
                    state="scheduled",
                    retired=False,
                    frames=frames(20),
                )
            )
        dumps[r] = make_dump(renumber(entries), group)
    stacks = run(dumps).diagnosis.stacks
    assert [(g.ranks, g.odd) for g in stacks] == [((0, 1, 3), False), ((2,), True)]
    assert stacks[1].stack is not None and stacks[1].stack[0].line == 10


def test_dumps_without_frames_say_so() -> None:
    analysis = analyze(SAMPLES / "nccl_op_mismatch_json", Options(workers=1))
    assert all(g.stack is None for g in analysis.diagnosis.stacks)
    assert "no stack in the dump" in render_text(analysis, verbose=True)


def test_root_cause_in_json(tmp_path: Path) -> None:
    import json

    from fr_analyzer.render.report_json import render_json

    data = json.loads(render_json(analyze(SAMPLES / "nccl_wait_chain", Options(workers=1))))
    rc = data["root_cause"]
    assert rc["kind"] == "not_joined" and rc["ranks"] == [3]
    assert rc["wait_chain"] == [[0, "1", 18], [1, "4", 6], [3, None, None]]
    assert rc["evidence"] and set(rc) >= {"group", "collective_seq_id", "op"}
    assert data["verdict"]["root_cause"] == "not_joined"
    assert data["positions"] and data["stacks"]


@pytest.mark.parametrize("chunk", [1 << 22, 7])
def test_median_lateness_per_rank_is_the_middle_of_its_sorted_values(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Ranks with the same number of samples are taken together (in chunks); each median is
    still the mean of the two middle values of that rank's own samples."""
    monkeypatch.setattr(stragglers, "_MEDIAN_CHUNK", chunk)
    rng = np.random.default_rng(3)
    counts = {rank: int(rng.integers(1, 9)) for rank in range(0, 60, 3)}
    rank = np.repeat(np.array(list(counts), dtype=np.int32), list(counts.values()))
    values = np.round(rng.random(len(rank)) * 100, 1)
    expected = {}
    for r in counts:
        ordered = np.sort(values[rank == r])
        expected[r] = float((ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2)
    medians, samples = stragglers._medians_by_rank(rank, values)
    assert medians == expected
    assert samples == {r: int((rank == r).sum()) for r in counts}


# --- when and where ---------------------------------------------------------------------------


def test_root_time_is_the_culprits_own_entry_of_the_root_op() -> None:
    analysis = analyze(SAMPLES / "nccl_stuck_started", Options(workers=1, file_times=False))
    c, t = analysis.conclusion, analysis.table
    (row,) = [
        i
        for i in range(t.n)
        if int(t.rank[i]) == 2
        and int(t.coll_seq[i]) == 5
        and analysis.groups.groups[int(analysis.groups.entry_group[i])].name == "0"
    ]
    assert c.root is not None and c.root.ranks == (2,)
    assert c.root_time_ns == int(t.t_created[row]) and c.root_time_rank == 2
    assert c.root_time_what == "rank 2 enqueued all_reduce #5 of group '0' (default_pg)"
    assert c.root.time is not None and c.root.time.at_ns == c.root_time_ns


def test_root_time_of_a_rank_that_never_joined_is_its_newest_op() -> None:
    # rank 12's newest entry: all_reduce #2 of the world group (NOTE.md)
    c = analyze(SAMPLES / "gloo3d_pp_recv_missing", Options(workers=1, file_times=False))
    conclusion = c.conclusion
    assert conclusion.root_time_rank == 12
    assert conclusion.root_time_ns == 1795415350734928197
    assert conclusion.root_time_what.startswith(
        "rank 12 enqueued its newest op, all_reduce #2 of group '0' (default_pg)"
    )
    assert "never issued the root op" in conclusion.root_time_what


def test_root_time_of_a_rank_with_no_dump_is_on_a_waiters_clock() -> None:
    c = analyze(SAMPLES / "nccl_missing_dump", Options(workers=1, file_times=False)).conclusion
    assert c.root is not None and c.root.ranks == (3,)
    assert c.root_time_rank is not None and c.root_time_rank != 3
    assert c.root_time_what.startswith(f"rank {c.root_time_rank}, waiting for rank 3, enqueued")


def test_dump_time_says_whether_it_is_exact_or_a_bound() -> None:
    # gloo: no entry is looked at during the dump; without file times the newest timestamp
    # is only a lower bound
    c = analyze(SAMPLES / "gloo3d_stuck_rank", Options(workers=1, file_times=False)).conclusion
    assert c.dump_time_bound == "at_least"
    assert c.dump_time_ns == c.timing.dump.at_ns and c.dump_time_basis == c.timing.dump.basis
    # a healthy job has no root, but a dump time all the same
    ok = analyze(SAMPLES / "nccl_healthy", Options(workers=1, file_times=False)).conclusion
    assert ok.root is None and ok.root_time_ns is None
    assert ok.dump_time_bound in ("exact", "at_least")


def test_dump_time_is_at_most_the_culprits_file_time(tmp_path: Path) -> None:
    import os
    import shutil

    # GIVEN the real watchdog dump, its file written 10.16 s after its newest entry
    where = tmp_path / "stuck"
    shutil.copytree(SAMPLES.parent / "tests" / "data" / "real_nccl" / "stuck_timeout", where)
    mtime = 1795652388308192300
    os.utime(where / "nccl_trace_rank_0", ns=(mtime, mtime))
    # WHEN it is analyzed with file times
    c = analyze(where, Options(workers=1)).conclusion
    # THEN the dump time is the culprit's file time, an upper bound
    assert c.root is not None and c.root.ranks == (0,)
    assert (c.dump_time_ns, c.dump_time_bound) == (mtime, "at_most")
    assert c.dump_time_basis.startswith("rank 0's dump is dated by the file's modification")
    assert c.root_time_ns is not None and 0 < (mtime - c.root_time_ns) / 1e9 < 60
