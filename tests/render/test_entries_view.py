"""`-j`: entries side by side that help at scale: around the root by default, global ranks in
every cell, the deviating cell marked, columns in blocks that fit the width."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import cli
from fr_analyzer.pipeline import Analysis
from fr_analyzer.render.entries_view import MARK, NEVER, EntriesView, render_entries, render_styled
from tests.builders import make_dump, make_entry
from tests.conftest import Run

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


def view_of(analysis: Analysis, **options: Any) -> str:
    view = EntriesView(**{"width": 10_000, **options})
    return render_entries(analysis.table, analysis.groups, view, analysis.conclusion.root)


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


def test_around_the_root_caps_the_columns_at_scale(run: Run) -> None:
    analysis = run(hung_at(seq=4, culprit=20, ranks=64, total=5))
    text = view_of(analysis, width=10_000)
    header = next(line for line in text.splitlines() if line.startswith("seq"))
    shown = [int(w) for w in header.replace("(culprit)", "").split()[1:] if w.isdigit()]
    assert shown == [0, 1, 2, 20, 61, 62, 63]
    assert "57 other ranks of the group not shown" in " ".join(text.split())


def test_all_entries_shows_every_row_and_rank(run: Run) -> None:
    analysis = run(hung_at(seq=6, culprit=3))
    text = view_of(analysis, around_root=False)
    assert [line.split()[0] for line in text.splitlines() if line[:1] == "#"] == [
        f"#{s}" for s in range(1, 13)
    ]
    assert all(f"rank {r}" in text for r in range(8))


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


def test_columns_come_in_blocks_that_fit_the_width(run: Run) -> None:
    analysis = run(hung_at(seq=6, culprit=3))
    text = view_of(analysis, around_root=False, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "-- ranks 0-1 (1 of 4)" in text


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
