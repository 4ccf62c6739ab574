"""Matcher specs, including every torchfrtrace defect fr-analyze must not repeat."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from fr_analyzer.match.collectives import _by_group_and_seq, _signatures
from fr_analyzer.model.records import FindingKind
from tests.builders import make_dump, make_entry, renumber
from tests.conftest import Run

FOUR = {"0": ("default_pg", [0, 1, 2, 3])}
PP = ("0", "default_pg")


def p2p(
    kind: str, me: int, peer: int, p2p_seq: int, coll_seq: int = 0, **kw: Any
) -> dict[str, Any]:
    name = f"{me}->{peer}" if kind == "send" else f"{me}<-{peer}"
    return make_entry(kind, coll_seq, p2p_seq=p2p_seq, peer=name, group=PP, **kw)


def pipeline(stages: int, micro: int, drop_last_recv_on: int | None = None) -> dict[int, Any]:
    """Stage s receives from s-1 and sends to s+1, `micro` times, in one group of all stages."""
    dumps = {}
    for s in range(stages):
        entries = []
        seq = 0
        for m in range(micro):
            if s > 0 and not (s == drop_last_recv_on and m == micro - 1):
                seq += 1
                entries.append(p2p("recv", s, s - 1, seq))
            if s < stages - 1:
                seq += 1
                last = s + 1 == drop_last_recv_on and m == micro - 1
                entries.append(
                    p2p(
                        "send",
                        s,
                        s + 1,
                        seq,
                        state="scheduled" if last else "completed",
                        retired=not last,
                    )
                )
        dumps[s] = make_dump(renumber(entries), {"0": ("default_pg", list(range(stages)))})
    return dumps


def test_send_recv_in_a_group_larger_than_two_is_matched_per_channel(run: Run) -> None:
    analysis = run(pipeline(4, 5))
    assert analysis.findings == ()
    assert len(analysis.matches.p2p.send_row) == 3 * 5


def test_unmatched_send_blames_the_receiver_that_never_posted_its_recv(run: Run) -> None:
    analysis = run(pipeline(4, 5, drop_last_recv_on=2))
    (finding,) = analysis.findings
    assert finding.kind == FindingKind.P2P_UNMATCHED
    assert finding.culprit_ranks == (2,)
    assert finding.ranks == (1,)
    assert analysis.conclusion.root_finding is finding


def test_batched_p2p_whose_first_op_is_a_recv_matches(run: Run) -> None:
    two = {"0": ("default_pg", [0, 1])}
    marker: dict[str, Any] = {"in_sizes": [], "out_sizes": [], "is_p2p": False}
    pend: dict[str, Any] = {"state": "scheduled", "retired": False}
    r0 = [
        p2p("send", 0, 1, 1, **pend),
        p2p("recv", 0, 1, 1, **pend),
        make_entry("coalesced", 0, p2p_seq=1, group=PP, **marker),
    ]
    r1 = [
        p2p("recv", 1, 0, 1, **pend),
        p2p("send", 1, 0, 1, **pend),
        make_entry("coalesced", 0, p2p_seq=1, group=PP, **marker),
    ]
    analysis = run({0: make_dump(renumber(r0), two), 1: make_dump(renumber(r1), two)})
    assert analysis.findings == ()
    assert len(analysis.matches.p2p.send_row) == 2
    assert analysis.matches.done.all()  # members take the end marker's state


def test_collective_k_then_p2p_with_p2p_seq_k_are_not_one_block(run: Run) -> None:
    two = {"0": ("default_pg", [0, 1])}
    r0 = [make_entry("all_reduce", 1, p2p_seq=0, group=PP), p2p("send", 0, 1, 1, coll_seq=1)]
    r1 = [make_entry("all_reduce", 1, p2p_seq=0, group=PP), p2p("recv", 1, 0, 1, coll_seq=1)]
    analysis = run({0: make_dump(renumber(r0), two), 1: make_dump(renumber(r1), two)})
    assert analysis.findings == ()
    assert len(analysis.matches.collectives.seq) == 1
    assert len(analysis.matches.p2p.send_row) == 1


def test_p2p_size_mismatch_names_both_ends(run: Run) -> None:
    two = {"0": ("default_pg", [0, 1])}
    r0 = [p2p("send", 0, 1, 1, in_sizes=[[8]], out_sizes=[[8]])]
    r1 = [p2p("recv", 1, 0, 1, in_sizes=[[4]], out_sizes=[[4]])]
    (finding,) = run({0: make_dump(r0, two), 1: make_dump(r1, two)}).findings
    assert finding.kind == FindingKind.P2P_SIZE_MISMATCH
    assert finding.culprit_ranks == (0, 1)


def test_p2p_dtype_mismatch(run: Run) -> None:
    two = {"0": ("default_pg", [0, 1])}
    r0 = [p2p("send", 0, 1, 1, in_dtypes=["Float"])]
    r1 = [p2p("recv", 1, 0, 1, in_dtypes=["Half"], out_dtypes=["Half"])]
    (finding,) = run({0: make_dump(r0, two), 1: make_dump(r1, two)}).findings
    assert finding.kind == FindingKind.P2P_DTYPE_MISMATCH


def wrapped_rank(first_seq: int, last_seq: int, first_record: int) -> list[dict[str, Any]]:
    entries = [make_entry("all_reduce", s, group=PP) for s in range(first_seq, last_seq + 1)]
    for i, e in enumerate(entries):
        e["record_id"] = first_record + i
    return entries


def test_ring_buffers_that_begin_at_different_points_are_aligned_by_sequence_id(
    run: Run,
) -> None:
    # Rank 0 is in more groups, so its buffer wrapped further: it starts at seq 40.
    dumps = {
        0: make_dump(wrapped_rank(40, 99, 500), FOUR),
        1: make_dump(wrapped_rank(10, 99, 10), FOUR),
        2: make_dump(wrapped_rank(0, 99, 0), FOUR),
        3: make_dump(wrapped_rank(25, 99, 7), FOUR),
    }
    analysis = run(dumps)
    assert analysis.findings == ()
    assert analysis.matches.collectives.passed.all()


def test_missing_rank_at_the_tail_is_not_joined_even_after_wraparound(run: Run) -> None:
    dumps = {
        r: make_dump(wrapped_rank(40 - 10 * r, 99 if r != 2 else 98, 300 + r), FOUR)
        for r in range(4)
    }
    for r in (0, 1, 3):
        dumps[r]["entries"][-1].update(
            state="scheduled", retired=False, time_discovered_completed_ns=None
        )
    analysis = run(dumps)
    (finding,) = analysis.findings
    assert finding.kind == FindingKind.NOT_JOINED
    assert finding.collective_seq_id == 99
    assert finding.culprit_ranks == (2,)


def test_pg_status_proves_a_rank_issued_an_op_that_fell_out_of_its_buffer(run: Run) -> None:
    dumps = {r: make_dump(wrapped_rank(0, 5, 0), FOUR) for r in range(4)}
    # Rank 3 holds no entry of group 0 at all, but its pg_status says it reached seq 5.
    dumps[3]["entries"] = [make_entry("all_reduce", 0, group=("9", "other"), record_id=900)]
    dumps[3]["entries"][0]["pg_id"] = 7
    dumps[3]["pg_config"]["9"] = {"name": "9", "desc": "other", "ranks": "[3]"}
    dumps[3]["pg_status"] = {
        "7": {
            "last_enqueued_collective": 0,
            "last_started_collective": 0,
            "last_completed_collective": 0,
        }
    }
    analysis = run(dumps)
    assert analysis.findings == ()  # wrapped, nothing left of group 0: not in the window


def test_gloo_uses_retired_as_completion_and_blames_the_unretired_rank(run: Run) -> None:
    def gloo(retired: bool) -> dict[str, Any]:
        return make_entry("all_reduce", 1, backend="gloo", state="scheduled", retired=retired)

    two = {"0": ("default_pg", [0, 1])}
    (finding,) = run({0: make_dump([gloo(True)], two), 1: make_dump([gloo(False)], two)}).findings
    assert finding.kind == FindingKind.STATE_MISMATCH
    assert finding.culprit_ranks == (1,)


def test_state_mismatch_at_a_hang_names_the_first_op_that_did_not_complete(run: Run) -> None:
    entries = {r: [make_entry("all_reduce", s, group=PP) for s in range(3)] for r in range(4)}
    entries[2][1].update(state="started", retired=False, time_discovered_completed_ns=None)
    entries[2][2].update(state="scheduled", retired=False, time_discovered_completed_ns=None)
    for r in (0, 1, 3):
        entries[r][2].update(state="scheduled", retired=False, time_discovered_completed_ns=None)
    analysis = run({r: make_dump(renumber(e), FOUR) for r, e in entries.items()})
    root = analysis.conclusion.root_finding
    assert root is not None
    assert root.kind == FindingKind.STATE_MISMATCH
    assert root.collective_seq_id == 1
    assert root.culprit_ranks == (2,)


def test_majority_decides_the_deviating_rank(run: Run) -> None:
    entries = {r: [make_entry("all_reduce", 0, group=PP)] for r in range(4)}
    entries[3] = [make_entry("broadcast", 0, group=PP)]
    (finding,) = run({r: make_dump(e, FOUR) for r, e in entries.items()}).findings
    assert finding.kind == FindingKind.OP_TYPE_MISMATCH
    assert finding.culprit_ranks == (3,)
    assert finding.ranks == (0, 1, 2, 3)


def test_later_repeats_of_one_problem_fold_into_the_first(run: Run) -> None:
    # Ranks 0, 2 and 3 went on without rank 1: their collectives from #2 on never complete.
    pending: dict[str, Any] = {"state": "scheduled", "retired": False}
    entries = {
        r: [make_entry("all_reduce", s, group=PP, **(pending if s >= 2 else {})) for s in range(6)]
        for r in range(4)
    }
    entries[1] = entries[1][:2]
    analysis = run({r: make_dump(renumber(e), FOUR) for r, e in entries.items()})
    (finding,) = analysis.findings
    assert finding.kind == FindingKind.NOT_JOINED and finding.culprit_ranks == (1,)
    assert finding.collective_seq_id == 2
    assert analysis.conclusion.root is not None and analysis.conclusion.root.ranks == (1,)
    assert "(and 3 later collectives of this group, #3-#5)" in finding.detail


def test_group_conflict_when_ranks_disagree_on_members(run: Run) -> None:
    dumps = {r: make_dump([make_entry("all_reduce", 0, group=PP)], FOUR) for r in range(4)}
    dumps[3]["pg_config"]["5"] = {"name": "5", "desc": "tp", "ranks": "[2, 3]"}
    dumps[2]["pg_config"]["5"] = {"name": "5", "desc": "tp", "ranks": "[1, 2]"}
    dumps[1]["pg_config"]["5"] = {"name": "5", "desc": "tp", "ranks": "[1, 2]"}
    conflicts = [f for f in run(dumps).findings if f.kind == FindingKind.GROUP_CONFLICT]
    assert len(conflicts) == 1
    assert conflicts[0].culprit_ranks == (3,)


def test_group_conflict_when_ranks_describe_a_group_differently(run: Run) -> None:
    dumps = {r: make_dump([make_entry("all_reduce", 0, group=PP)], FOUR) for r in range(4)}
    dumps[2]["pg_config"]["0"]["desc"] = "something_else"
    (conflict,) = run(dumps).findings
    assert conflict.kind == FindingKind.GROUP_CONFLICT
    assert conflict.culprit_ranks == (2,)


def test_missing_dump_names_the_rank_and_what_the_others_wait_in(run: Run) -> None:
    dumps = {
        r: make_dump(
            [
                make_entry("all_reduce", 0, group=PP),
                make_entry(
                    "all_reduce", 1, group=PP, state="scheduled", retired=False, record_id=1
                ),
            ],
            FOUR,
        )
        for r in range(3)
    }
    analysis = run(dumps)
    (finding,) = analysis.findings
    assert finding.kind == FindingKind.MISSING_DUMP
    assert finding.culprit_ranks == (3,)
    assert "waiting in all_reduce #1" in finding.detail
    # Rank 3 is who the others wait for: the dead rank is the root cause, the job is hung.
    assert analysis.conclusion.status.value == "hung"
    assert analysis.conclusion.root is not None
    assert analysis.conclusion.root.kind.value == "dead_rank"
    assert analysis.conclusion.root.ranks == (3,)
    assert analysis.summary.ranks_missing == (3,)


def test_gloo_membership_is_rebuilt_from_entries(run: Run) -> None:
    gloo_config = {"": {"name": "", "desc": "", "ranks": "[]"}}
    dumps = {}
    for r in range(4):
        entries = [
            make_entry(
                "all_reduce", 1, backend="gloo", group=("0", "default_pg"), state="scheduled"
            )
        ]
        sub = "1" if r < 2 else "2"
        entries.append(
            make_entry(
                "all_reduce", 1, backend="gloo", group=(sub, "sub"), state="scheduled", record_id=1
            )
        )
        dumps[r] = {
            "version": "2.10",
            "pg_config": gloo_config,
            "pg_status": {},
            "comm_lib_version": "",
            "entries": entries,
        }
    analysis = run(dumps)
    assert analysis.findings == ()
    by_name = {g.name: g for g in analysis.groups.groups}
    assert by_name["0"].ranks == (0, 1, 2, 3) and by_name["0"].source.value == "world"
    assert by_name["1"].ranks == (0, 1) and by_name["1"].source.value == "entries"
    assert by_name["2"].ranks == (2, 3)


def test_rows_are_ordered_by_group_and_sequence_id_even_for_absurd_ids() -> None:
    """Sorts of 16-bit keys when ids span little, one sort of a combined key when they span
    more; the same stable order when they are absurd."""
    rng = np.random.default_rng(7)
    uid = rng.integers(0, 5, 500).astype(np.int64)
    spans = ((0, 50), (-1, 1 << 16), (-1, 1 << 20), (0, 1 << 62))
    for seq in (rng.integers(low, high, 500) for low, high in spans):
        seq = seq.astype(np.int64)
        order, sorted_uid, sorted_seq = _by_group_and_seq(uid, seq)
        assert order.tolist() == np.lexsort((seq, uid)).tolist()
        assert sorted_uid.tolist() == uid[order].tolist()
        assert sorted_seq.tolist() == seq[order].tolist()


@pytest.mark.parametrize("shapes", [300, 1 << 20])
def test_row_signatures_are_equal_exactly_when_all_five_codes_are(shapes: int) -> None:
    """Op, sizes and dtypes are compared as one integer per row when their codes fit one, and
    column by column when they do not: either way, two rows compare equal exactly when all
    five codes do."""
    rng = np.random.default_rng(3)
    n = 2000
    table = SimpleNamespace(
        n=n,
        ops=["op"] * 20,
        shapes=[()] * shapes,
        dtypes=[()] * 7,
        op=rng.integers(0, 3, n).astype(np.int32),
        in_shape=rng.integers(-1, 3, n).astype(np.int32),
        out_shape=rng.integers(shapes - 2, shapes, n).astype(np.int32),
        in_dtype=rng.integers(-1, 2, n).astype(np.int32),
        out_dtype=rng.integers(5, 7, n).astype(np.int32),
    )
    rows = rng.permutation(n)[:500]
    other = rng.permutation(n)[:500]
    # `table` stands in for an EntryTable with only the columns _signatures reads
    parts = list(_signatures(table, rows))  # type: ignore[arg-type]
    parts_other = list(_signatures(table, other))  # type: ignore[arg-type]
    assert len(parts) == (1 if shapes == 300 else 5)
    same = np.ones(len(rows), dtype=bool)
    for mine, theirs in zip(parts, parts_other, strict=True):
        same &= mine == theirs
    codes = (table.op, table.in_shape, table.out_shape, table.in_dtype, table.out_dtype)
    expected = np.ones(len(rows), dtype=bool)
    for column in codes:
        expected &= column[rows] == column[other]
    assert same.tolist() == expected.tolist()


def pair_of_experts(skipper: int | None, at: int = 5) -> dict[int, Any]:
    """Two ranks of one expert-parallel group, each step three all_to_all (sizes that differ per
    rank and step, as token routing makes them) then an all_reduce; `skipper` leaves out its
    `at`-th op and goes on."""
    pair = {"0": ("default_pg", [0, 1]), "5": ("ep", [0, 1])}
    dumps = {}
    for rank in (0, 1):
        entries, seq, issued = [], 0, 0
        for step in range(4):
            for j in range(4):
                issued += 1
                if rank == skipper and issued == at:
                    continue
                seq += 1
                if j < 3:
                    sent, got = 10 * (step + 1) + j, 7 * (step + 2) + 3 * j
                    sizes = ([[sent]], [[got]]) if rank == 0 else ([[got]], [[sent]])
                    entries.append(
                        make_entry(
                            "all_to_all",
                            seq,
                            group=("5", "ep"),
                            in_sizes=sizes[0],
                            out_sizes=sizes[1],
                        )
                    )
                else:
                    entries.append(make_entry("all_reduce", seq, group=("5", "ep")))
        dumps[rank] = make_dump(renumber(entries), pair)
    return dumps


@pytest.mark.parametrize("skipper", [0, 1])
def test_of_two_members_that_disagree_the_one_a_step_ahead_skipped(run: Run, skipper: int) -> None:
    """GIVEN two members of a group whose all_to_all sizes differ per rank (no majority, no
    history of sizes to compare with), one of which skipped an all_to_all and went on
    WHEN the matcher compares them
    THEN the first disagreement names only the one whose ops are the other's one op later."""
    analysis = run(pair_of_experts(skipper))
    first = analysis.findings[0]
    assert first.collective_seq_id == 5
    assert first.culprit_ranks == (skipper,)
    other = 1 - skipper
    assert f"rank {skipper} skipped all_to_all #5 and went on" in first.detail
    assert f"are rank {other}'s from #6 on" in first.detail
    root = analysis.conclusion.root
    assert root is not None and root.ranks == (skipper,)
    # the later disagreements it causes are folded into this one: still told as a skip
    assert "later collective" in first.detail
    assert f"rank {skipper} skipped all_to_all #5 of group '5' (ep) and went on" in root.sentence
    assert f"where rank {other} issued all_to_all" in root.sentence


def test_two_members_in_step_have_nothing_to_tell_apart(run: Run) -> None:
    assert run(pair_of_experts(None)).findings == ()
