"""Real traces as tests (issue 47, item 6): real gloo jobs recorded with PyTorch's
`ExecutionTraceObserver`, drawn by `tools/et_jobs.py` with each fault of the issue (an extra
world op after a pair op of the same sizes, a rank killed mid-call by SIGTERM, gloo's abort on
a broadcast size disagreement, a skipped collective) and none, recorded once in
`tests/data/real_et/` (how far a killed or aborted rank got depends on the machine's load) and
analyzed from the traces alone; each verdict judged as `make accuracy-et` judges the same cases
live (`benchmarks/accuracy_real.py`). NCCL jobs need a GPU: none is recorded here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.accuracy_real import RealOutcome, judge_real, render_real, verdict_of
from tools.et_jobs import KINDS, Case, RealTruth, draw, draw_kind

RECORDED = Path(__file__).resolve().parents[2] / "data" / "real_et"
"""One real run of each fault kind (tests/data/real_et/README.md)."""


def recorded(run: str, into: Path) -> tuple[Case, Path]:
    """The recorded run `run` (a folder of tests/data/real_et/): its case and a copy of its
    traces (no `case.json`)."""
    where = RECORDED / run
    case = Case(**json.loads((where / "case.json").read_text()))
    into.mkdir()
    for path in where.glob("rank-*.et.json.gz"):
        shutil.copy(path, into / path.name)
    return case, into


# --- the generator ----------------------------------------------------------------------------


def test_a_seed_draws_one_case_the_same_every_time() -> None:
    assert [draw(s) for s in range(20)] == [draw(s) for s in range(20)]
    assert {draw(s).kind for s in range(len(KINDS))} == set(KINDS)


def test_every_drawn_case_fits_its_fault() -> None:
    for seed in range(200):
        case = draw(seed)
        assert 2 <= case.world <= 4 and 0 <= case.culprit < case.world
        assert 1 <= case.steps <= 3
        if case.kind in ("extra_pair_op", "abort_size", "skip"):
            # with two ranks no majority says which side of a disagreement deviates
            assert case.world >= 3
        if case.kind == "extra_pair_op":
            assert (case.culprit, case.op) == (0, "all_reduce")  # the pair's op and sizes
        if case.kind == "abort_size":
            assert case.op == "broadcast"


def test_each_case_knows_its_truth() -> None:
    assert draw_kind("healthy").truth.status == "ok"
    killed = draw_kind("kill_mid_call")
    assert (killed.truth.status, killed.truth.culprits) == ("hung", (killed.culprit,))
    assert draw_kind("abort_size").truth.roots == ("mismatch",)
    for kind in ("extra_pair_op", "skip"):
        case = draw_kind(kind)
        assert (case.truth.status, case.truth.culprits) == ("desync", (case.culprit,))


def test_a_real_case_is_judged_on_its_status_culprits_and_root_kind_only() -> None:
    truth = RealTruth("desync", (2,), ("mismatch", "not_joined"))
    got = {"status": "desync", "root": "not_joined", "culprits": [2], "group": "1"}
    assert judge_real(truth, got) == []  # the group is not judged: a gloo trace names none
    assert judge_real(truth, {**got, "culprits": [2, 3]}) == ["culprits [2, 3] (want [2])"]
    assert judge_real(truth, {**got, "root": "dead_rank"}) == [
        "root dead_rank (want mismatch or not_joined)"
    ]
    assert judge_real(RealTruth("ok"), {"status": "error", "root": None, "culprits": []}) == [
        "status error (want ok)"
    ]


def test_the_real_jobs_table_has_a_row_per_fault_kind_and_backend() -> None:
    def outcome(kind: str, problems: list[str], confidence: str = "high") -> RealOutcome:
        got = {"status": "desync", "answer": "DESYNC."}
        return RealOutcome(1, kind, kind, {}, got, problems, confidence, ["desync"])

    table = render_real(
        [
            outcome("skip", []),
            outcome("skip", ["culprits [0] (want [1])"], "ambiguous"),
            outcome("healthy", []),
        ]
    )
    assert "right: 2/3 = 66.7%" in table
    rows = {line.split()[0]: line.split() for line in table.splitlines() if "gloo  " in line}
    assert rows["skip"][1:] == ["gloo", "2", "1", "1", "1", "50%"]
    assert rows["healthy"][1:] == ["gloo", "1", "1", "0", "0", "100%"]
    assert "differs: culprits [0] (want [1])" in table


# --- the recorded runs, one per fault kind ----------------------------------------------------


def test_a_real_healthy_job_stays_clean(tmp_path: Path) -> None:
    case, where = recorded("healthy", tmp_path / "et")
    got, confidence, _ = verdict_of(where)
    assert judge_real(case.truth, got) == [], got["answer"]
    assert confidence == "high"


def test_an_extra_world_op_after_a_pair_op_of_the_same_sizes_names_rank_0(
    tmp_path: Path,
) -> None:
    # GIVEN rank 0 issued one extra world all_reduce after its pair all_reduce with rank 1,
    # of the same sizes: from traces alone it fits the pair as well as the world
    case, where = recorded("extra_pair_op", tmp_path / "et")
    got, confidence, alternatives = verdict_of(where)
    # THEN rank 0, the one with an op too many in every assignment, is named; the verdict may
    # say it is the likelier of several readings (the group is not judged)
    assert judge_real(case.truth, got) == [], got["answer"]
    assert confidence in ("high", "ambiguous")
    assert all(status == "desync" for status in alternatives)


def test_a_rank_killed_mid_call_by_sigterm_is_the_one_that_never_came(tmp_path: Path) -> None:
    # GIVEN the culprit asleep before the world op its peers waited in, every rank killed by
    # the launcher's SIGTERM: each trace ends inside its last call
    case, where = recorded("kill_mid_call", tmp_path / "et")
    got, _, _ = verdict_of(where)
    assert judge_real(case.truth, got) == [], got["answer"]


def test_gloos_abort_on_a_broadcast_size_disagreement_names_the_rank_that_disagreed(
    tmp_path: Path,
) -> None:
    # GIVEN the culprit's broadcast of another size than its peers': gloo aborted every rank
    # that received more than it posted, their traces cut inside the broadcast
    case, where = recorded("abort_size", tmp_path / "et")
    got, _, _ = verdict_of(where)
    assert judge_real(case.truth, got) == [], got["answer"]


def test_a_rank_that_skips_a_collective_its_peers_issue_is_named(tmp_path: Path) -> None:
    case, where = recorded("skip", tmp_path / "et")
    got, _, _ = verdict_of(where)
    assert judge_real(case.truth, got) == [], got["answer"]


# --- wrong verdicts the real runs exposed -------------------------------------------------------


def test_gloos_abort_of_a_receiver_that_posted_too_few_names_that_receiver(
    tmp_path: Path,
) -> None:
    # GIVEN rank 2 of 4 took 2 elements of a broadcast of 4 from rank 0: gloo aborted rank 2,
    # the others failed on its lost connection and stopped their traces after the barrier
    case, where = recorded("abort_size_receiver", tmp_path / "et")
    got, _, _ = verdict_of(where)
    # THEN rank 2 is named: ranks 0-1's broadcast and barrier pass alike on their pair, so the
    # world's broadcast is rank 2 (2 elements) against rank 3 (4), with no majority; the world
    # agreed on 4 at its broadcast before, with every member, ranks 2 and 3 among them
    assert judge_real(case.truth, got) == [], got["answer"]


def test_a_pair_member_that_skips_a_world_collective_of_three_ranks_is_named(
    tmp_path: Path,
) -> None:
    # GIVEN rank 1 (in the pair {0, 1}) skipped the world broadcast of 3 ranks and went on to
    # the world barrier, which fits the pair too; ranks 0 and 2 wait in the broadcast
    case, where = recorded("skip_on_three", tmp_path / "et")
    got, _, _ = verdict_of(where)
    # THEN rank 1's barrier waits on the world beside its members' broadcast: rank 1 is named
    # (its barrier on the pair read as rank 0 never joining it)
    assert judge_real(case.truth, got) == [], got["answer"]


# --- a live job -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_live_healthy_job_drawn_by_the_generator_stays_clean(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from tools.et_jobs import run

    case = draw_kind("healthy")
    out = run(case, tmp_path / "job")
    assert sorted(p.name for p in out.glob("rank-*.et.json")) == [
        f"rank-{r}.et.json" for r in range(case.world)
    ]
    (out / "case.json").unlink()
    got, _, _ = verdict_of(out)
    assert judge_real(case.truth, got) == [], got["answer"]
