"""`-j`: entries side by side that help at scale: around the root by default (every member of
its group), ranks with identical cells folded into one column, a healthy job's newest entries,
global ranks in every cell, the deviating cell marked, columns in blocks that fit the width."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer import cli
from fr_analyzer.model import shown
from fr_analyzer.pipeline import Analysis
from fr_analyzer.render.entries_view import (
    FOLDED_SHOWN,
    MARK,
    NEVER,
    NEWEST,
    EntriesView,
    render_analysis,
    render_entries,
    render_styled,
)
from tests.builders import make_dump, make_entry
from tests.conftest import Run
from tests.render.test_database_streamed import SHOWN, streamed

EIGHT = {"0": ("default_pg", list(range(8)))}


def hung_at(seq: int, culprit: int, ranks: int = 8, total: int = 12) -> dict[int, Any]:
    """Every rank issues all_reduce 1..total except `culprit`, which stops before `seq`; the
    others wait in `seq` onwards."""
    dumps = {}
    waiting: dict[str, Any] = {"state": "scheduled", "retired": False}
    for rank in range(ranks):
        last = seq - 1 if rank == culprit else total
        entries = [
            make_entry(
                "all_reduce",
                s,
                record_id=s,
                **(waiting if s >= seq else {}),
            )
            for s in range(1, last + 1)
        ]
        dumps[rank] = make_dump(entries, {"0": ("default_pg", list(range(ranks)))})
    return dumps


def healthy(ranks: int = 8, total: int = 12) -> dict[int, Any]:
    """Every rank issues and completes all_reduce 1..total: no root cause."""
    group = {"0": ("default_pg", list(range(ranks)))}
    return {
        rank: make_dump(
            [make_entry("all_reduce", s, record_id=s) for s in range(1, total + 1)], group
        )
        for rank in range(ranks)
    }


def view_of(analysis: Analysis, **options: Any) -> str:
    view = EntriesView(**{"width": 10_000, **options})
    return render_entries(analysis.table, analysis.groups, view, analysis.conclusion.root)


def every_entry(analysis: Analysis, width: int = 10_000) -> str:
    """`--all-entries` with no culprit named: how ranks fold, whatever the diagnosis."""
    view = EntriesView(around_root=False, width=width)
    return render_entries(analysis.table, analysis.groups, view, None)


def headers(text: str) -> list[str]:
    """The column headers of the first table: `seq  ranks 0-2,4-7  rank 3 (culprit)` ->
    `["ranks 0-2,4-7", "rank 3 (culprit)"]`."""
    line = next(line for line in text.splitlines() if line.startswith("seq"))
    return [h.strip() for h in line.split("  ")[1:] if h.strip()]


def ranks_in(header: str) -> set[int]:
    """`ranks 0-2,4-7 (culprits)` -> {0, 1, 2, 4, 5, 6, 7}."""
    listed = header.split()[1]
    out: set[int] = set()
    for part in listed.split(","):
        first, _, end = part.partition("-")
        out |= set(range(int(first), int(end or first) + 1))
    return out


def labels(text: str) -> list[str]:
    return [line.split()[0] for line in text.splitlines() if line[:1] == "#"]


def test_around_the_root_shows_its_seq_ids_either_side_and_marks_the_skipped_op(run: Run) -> None:
    analysis = run(hung_at(seq=6, culprit=3))
    text = view_of(analysis, context=2)
    labels = [line.split()[0] for line in text.splitlines() if line[:1] == "#"]
    assert labels == ["#4", "#5", "#6", "#7", "#8"]
    row = next(line for line in text.splitlines() if line.startswith("#6 "))
    assert row.count(f"{MARK} {NEVER}") == 1  # rank 3's column
    assert "rank 3 (culprit)" in text
    assert "around the root cause: collective #6 and 2 sequence ids either side" in text
    assert text.rstrip().splitlines()[-1].endswith("not this one.")  # the legend


def test_identical_ranks_fold_into_one_column_headed_by_their_range_at_80_columns(
    run: Run,
) -> None:
    """GIVEN 64 ranks of which 63 wait in all_reduce #4 and rank 20 never issued it WHEN shown
    around the root at 80 columns THEN two columns side by side in one block: the 63 identical
    ranks under their range, the culprit under its own."""
    analysis = run(hung_at(seq=4, culprit=20, ranks=64, total=5))
    text = view_of(analysis, width=80)
    assert headers(text) == ["ranks 0-19,21-63", "rank 20 (culprit)"]
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "(1 of" not in text  # one block, no repeated tables
    assert "all 64 ranks, identical ones in one column" in " ".join(text.split())
    row = next(line for line in text.splitlines() if line.startswith("#4 "))
    assert row.count(f"{MARK} {NEVER}") == 1


def test_every_member_of_the_roots_group_is_present_by_default(run: Run) -> None:
    """GIVEN 8 ranks, rank 3 the culprit and rank 6 another state at #7 (before: the first and
    last three members, the culprit and the deviating ranks, one member left out) WHEN shown
    around the root THEN every one of ranks 0-7 heads a column, each exactly once."""
    dumps = hung_at(seq=6, culprit=3)
    dumps[6]["entries"][6]["state"] = "started"
    analysis = run(dumps)
    shown = headers(view_of(analysis))
    assert shown == ["ranks 0-2,4-5,7", "rank 3 (culprit)", "rank 6"]
    folded = [ranks_in(h) for h in shown]
    assert set().union(*folded) == set(range(8))
    assert sum(len(r) for r in folded) == 8


def test_selected_ranks_keep_their_own_columns_and_the_rest_are_counted(run: Run) -> None:
    analysis = run(hung_at(seq=6, culprit=3))
    text = view_of(analysis, ranks=(0, 3))
    assert headers(text) == ["rank 0", "rank 3 (culprit)"]
    assert "ranks 0,3; 6 other ranks of the group not selected" in text


def test_a_long_list_of_folded_ranks_is_a_footnote(run: Run) -> None:
    """GIVEN 64 ranks, the odd ones with other sizes at #2 WHEN shown at 80 columns THEN the odd
    ranks' header counts them and points to a footnote that lists them all."""
    dumps = healthy(ranks=64, total=3)
    for rank in range(1, 64, 2):
        dumps[rank]["entries"][1]["input_sizes"] = [[8]]
    text = every_entry(run(dumps), width=80)
    assert headers(text) == ["32 ranks [a]", "32 ranks [b]"]
    notes = " ".join(text[text.index("[a] ranks") :].split())
    assert notes.startswith("[a] ranks 0, 2, 4, 6,") and "60, 62 [b] ranks 1, 3, 5," in notes
    assert "61, 63\n" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_past_a_dozen_distinct_columns_the_rest_are_named_not_shown(run: Run) -> None:
    """GIVEN 20 ranks each with its own sizes at #2 WHEN shown THEN `FOLDED_SHOWN` columns, and a
    line that names the ranks left out and how to see them."""
    dumps = healthy(ranks=20, total=3)
    for rank in range(20):
        dumps[rank]["entries"][1]["input_sizes"] = [[rank + 1]]
    text = every_entry(run(dumps))
    assert len(headers(text)) == FOLDED_SHOWN
    assert f"{20 - FOLDED_SHOWN} other ranks with other cells not shown (--selected-ranks" in (
        " ".join(text.split())
    )


def test_all_entries_shows_every_row_and_rank(run: Run) -> None:
    analysis = run(hung_at(seq=6, culprit=3))
    text = view_of(analysis, around_root=False)
    assert labels(text) == [f"#{s}" for s in range(1, 13)]
    assert headers(text) == ["ranks 0-2,4-7", "rank 3 (culprit)"]


def test_a_healthy_job_shows_each_groups_newest_seq_ids_and_says_so_in_one_line(
    run: Run,
) -> None:
    """GIVEN a healthy job (no root cause) of 12 all_reduces WHEN shown by default at 80 columns
    THEN its newest `NEWEST` sequence ids, under a one-line note that names --all-entries."""
    analysis = run(healthy())
    assert analysis.conclusion.root is None
    text = view_of(analysis, width=80)
    assert labels(text) == [f"#{s}" for s in range(13 - NEWEST, 13)]
    note = text.splitlines()[0]
    assert note == (
        f"no root cause: each group's newest {NEWEST} sequence ids; every entry: --all-entries"
    )
    assert len(note) <= 80 and text.splitlines()[1] == ""
    assert headers(text) == ["ranks 0-7"]


def test_a_healthy_job_shows_every_entry_with_all_entries(run: Run) -> None:
    analysis = run(healthy())
    text = view_of(analysis, around_root=False)
    assert labels(text) == [f"#{s}" for s in range(1, 13)]
    assert "no root cause" not in text


def test_last_keeps_each_groups_newest_seq_ids(run: Run) -> None:
    analysis = run(hung_at(seq=6, culprit=3))
    text = view_of(analysis, around_root=False, last=2)
    assert [line.split()[0] for line in text.splitlines() if line[:1] == "#"] == ["#11", "#12"]


def test_p2p_peers_are_global_ranks_and_the_odd_size_is_marked(run: Run) -> None:
    """GIVEN group '1' = ranks (4, 6): rank 4 sends 8 elements to group-local 1 (rank 6),
    which expects 16 WHEN shown THEN `send ->r6` / `recv <-r4`, and rank 4's cell marked."""
    groups = {"0": ("default_pg", [4, 6]), "1": ("pp", [4, 6])}
    pp = ("1", "pp")
    dumps = {
        4: make_dump(
            [
                make_entry("send", 0, p2p_seq=1, group=pp, peer="0->1", in_sizes=[[16]]),
                make_entry(
                    "send",
                    0,
                    p2p_seq=2,
                    group=pp,
                    peer="0->1",
                    in_sizes=[[8]],
                    state="scheduled",
                    retired=False,
                ),
            ],
            groups,
        ),
        6: make_dump(
            [
                make_entry("recv", 0, p2p_seq=1, group=pp, peer="1<-0", in_sizes=[[16]]),
                make_entry(
                    "recv",
                    0,
                    p2p_seq=2,
                    group=pp,
                    peer="1<-0",
                    in_sizes=[[16]],
                    state="scheduled",
                    retired=False,
                ),
            ],
            groups,
        ),
    }
    analysis = run(dumps)
    text = view_of(analysis, around_root=False, pg_filters=("pp",))
    assert "send ->r6 [[16]]" in text and "recv <-r4 [[16]]" in text
    assert "0->1" not in text and "1<-0" not in text
    p2 = next(line for line in text.splitlines() if line.startswith("p2p #2 "))
    assert f"{MARK} send ->r6 [[8]] scheduled" in p2
    assert f"{MARK} recv" not in p2  # the culprit deviates, not its peer


def test_cells_wrap_so_that_folded_columns_fit_side_by_side(run: Run) -> None:
    """GIVEN cells 44 characters wide WHEN two columns are shown at 80 columns THEN each cell
    wraps under its header rather than the table splitting into blocks."""
    dumps = hung_at(seq=6, culprit=3)
    for dump in dumps.values():
        for entry in dump["entries"]:
            entry["input_sizes"] = entry["output_sizes"] = [[1, 4096, 1024]]
    text = view_of(run(dumps), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "(1 of" not in text
    assert headers(text) == ["ranks 0-2,4-7", "rank 3 (culprit)"]


def test_columns_come_in_blocks_that_fit_the_width(run: Run) -> None:
    """GIVEN 8 ranks each with its own sizes (nothing folds) WHEN shown at 80 columns THEN the
    columns come in blocks, each line within the width."""
    dumps = healthy(total=3)
    for rank in range(8):
        dumps[rank]["entries"][1]["input_sizes"] = [[1_000_000 + rank]]
    text = every_entry(run(dumps), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "-- ranks 0-2 (1 of 3)" in text


def test_the_deviating_cell_is_coloured_on_a_terminal(run: Run) -> None:
    analysis = run(hung_at(seq=6, culprit=3))
    styled = render_styled(
        analysis.table, analysis.groups, EntriesView(width=200), analysis.conclusion.root
    )
    marked = [
        styled.plain[span.start : span.end] for span in styled.spans if "red" in str(span.style)
    ]
    assert marked and all(MARK in text for text in marked)


@pytest.fixture
def hung_dir(tmp_path: Path) -> Path:
    d = tmp_path / "hung"
    d.mkdir()
    for rank, dump in hung_at(seq=6, culprit=3).items():
        (d / f"rank_{rank}").write_bytes(pickle.dumps(dump))
    return d


def test_j_exits_as_the_main_command_and_defaults_to_around_the_root(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, hung_dir: Path
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert cli.run([str(hung_dir), "-j"]) == 1
    out = capsys.readouterr().out
    assert "around the root cause: collective #6" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert cli.run([str(hung_dir), "-j", "--around-root", "--context", "1"]) == 1
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines() if line[:2] in ("#5", "#6", "#7")]
    assert not any(line.startswith(("#4 ", "#8 ")) for line in out.splitlines())


def test_j_on_a_healthy_job_prints_the_newest_seq_ids_and_all_entries_prints_every_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GIVEN a healthy job's dumps WHEN `-j` at 80 columns THEN a one-line note first, then each
    group's newest sequence ids; WHEN `-j --all-entries` THEN every one, and no note."""
    for rank, dump in healthy().items():
        (tmp_path / f"rank_{rank}").write_bytes(pickle.dumps(dump))
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert cli.run([str(tmp_path), "-j"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("no root cause: ") and "--all-entries" in out[:80]
    assert labels(out) == [f"#{s}" for s in range(13 - NEWEST, 13)]
    assert max(len(line) for line in out.splitlines()) <= 80
    assert cli.run([str(tmp_path), "-j", "--all-entries"]) == 0
    out = capsys.readouterr().out
    assert labels(out) == [f"#{s}" for s in range(1, 13)]
    assert "no root cause" not in out


def test_the_newest_ids_and_each_groups_rows_are_those_the_plain_numpy_ways_give() -> None:
    """`_newest` sorts the rows' ids by a lexsort, `_rows_by_group` finds every group's rows in
    one sort: the answers of `np.unique(..., axis=0)` and of one mask per group."""
    rng = np.random.default_rng(7)
    n = 5000
    coll = rng.integers(-1, 40, n).astype(np.int64)
    p2p = rng.integers(-1, 30, n).astype(np.int64)
    is_p2p = rng.random(n) < 0.3

    class Table:
        coll_seq, p2p_seq = coll, p2p

    rows = np.sort(rng.choice(n, 3000, replace=False))
    for last in (1, 5, 50, 10_000):
        keys = np.unique(
            np.stack([coll[rows], p2p[rows], is_p2p[rows].astype(np.int64)], axis=1), axis=0
        )
        labels = list(dict.fromkeys((bool(i), int(p) if i else int(c)) for c, p, i in keys))
        kept = set(labels[-last:])
        want = rows[
            [(bool(is_p2p[r]), int(p2p[r]) if is_p2p[r] else int(coll[r])) in kept for r in rows]
        ]
        got = shown.newest(Table(), rows, is_p2p, last)  # type: ignore[arg-type]
        assert np.array_equal(got, want)
    entry_group = rng.integers(-1, 9, n).astype(np.int32)
    for uids in ([3], [0, 2, 5, 8], list(range(-1, 12))):
        by_group = shown.rows_by_group(entry_group, uids)
        for uid in uids:
            assert np.array_equal(by_group[uid], np.flatnonzero(entry_group == uid))


@pytest.mark.parametrize("name", SHOWN)
def test_the_view_of_the_rows_an_engine_chose_and_fetched_is_the_view_of_the_table(
    name: str,
) -> None:
    # where the engine keeps the rows (`Analysis.calls`: a Ray cluster), each part chooses
    # the rows shown and each rank's first op of a group (`model.shown`), and the driver
    # draws the view of those rows alone (the cluster's own: tests/cluster/test_ray_engine.py)
    whole, cut = streamed(name, 37)
    views = (
        EntriesView(),
        EntriesView(around_root=False),
        EntriesView(around_root=False, last=1, stack=True),
        EntriesView(context=0, ranks=(1, 2)),
    )
    for view in views:
        assert render_analysis(cut, view).plain == render_analysis(whole, view).plain, view
