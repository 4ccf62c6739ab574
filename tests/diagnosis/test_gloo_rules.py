"""The rules of issue 43 on real gloo jobs (tests/data/gloo_rules/, made by its job.py with
torch 2.13.0): a rank with no dump beside ring peers blocked in unrecorded send/recv, a
`monitored_barrier` skipped where no group's sequence ids show it yet, a rank hung before a
reduce-scatter named at the first op it never issued, and the same jobs with no fault, which
stay clean; then the fault campaign's (frsim) cases that showed the first-missing op. Each
set's NOTE.md says what the job did and ends with the `EXPECTED:` line checked here, written
from the job, never from fr-analyze's answer.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from benchmarks.accuracy import run_case
from fr_analyzer import Analysis, analyze
from fr_analyzer.conclusion import Role
from fr_analyzer.model.records import FindingKind
from fr_analyzer.pipeline import Options

DATA = Path(__file__).resolve().parents[1] / "data" / "gloo_rules"
SETS = sorted(p.name for p in DATA.iterdir() if (p / "NOTE.md").is_file())


@cache
def analyzed(name: str) -> Analysis:
    return analyze(DATA / name, Options(workers=1))


def expected(name: str) -> dict[str, str]:
    """The `EXPECTED:` line of a set's NOTE.md, as key=value pairs."""
    line = next(
        ln
        for ln in (DATA / name / "NOTE.md").read_text().splitlines()
        if ln.startswith("EXPECTED:")
    )
    return dict(pair.split("=", 1) for pair in line.removeprefix("EXPECTED:").split())


def test_every_set_has_its_job_and_an_expected_verdict() -> None:
    assert (DATA / "job.py").is_file()
    assert set(SETS) == {
        "barrier",
        "barrier_skip",
        "barrier_skip_world",
        "cpring",
        "cpring_crash",
        "fsdp2",
        "fsdp2_hang_rs",
    }


@pytest.mark.parametrize("name", SETS)
def test_the_verdict_is_the_one_the_note_expects(name: str) -> None:
    want = expected(name)
    c = analyzed(name).conclusion
    assert c.status.value == want["status"], c.answer
    if want["status"] == "ok":
        assert c.root is None, c.answer
        return
    root = c.root
    assert root is not None, c.answer
    assert root.kind.value == want["root"], c.answer
    assert root.ranks == tuple(int(r) for r in want["culprits"].split(",")), c.answer
    assert root.group is not None and root.group.name == want["group"], c.answer
    assert root.group.desc == want["desc"]
    assert root.collective_seq_id == int(want["seq"]), c.answer
    if "op" in want:
        assert root.op == want["op"], c.answer


def test_a_rank_with_no_dump_beside_ring_peers_in_unrecorded_send_recv_is_the_root() -> None:
    """GIVEN a real gloo job where rank 2 died (no dump) in a context-parallel ring, its ring
    peers 0, 1, 3 idle past their last bucket all_reduce (blocked in send/recv gloo does not
    record) and the other ring waiting in the next bucket all_reduce
    WHEN fr-analyze reads the dumps
    THEN rank 2 is the dead root, the answer says what ranks 0, 1, 3 were doing, and rank 2's
    missing dump is the root's evidence, not an independent finding."""
    c = analyzed("cpring_crash").conclusion

    assert c.root is not None and c.root.kind.value == "dead_rank" and c.root.ranks == (2,)
    assert "ranks 0-1,3 stopped past their last recorded collective" in c.root.sentence
    assert any(
        e.startswith("ranks 0-1,3 completed all_reduce #4 of group '0'") for e in c.root.evidence
    )
    missing = [j for j in c.findings if j.finding.kind is FindingKind.MISSING_DUMP]
    assert missing and all(j.role is not Role.INDEPENDENT for j in missing)


def test_a_skipped_world_barrier_in_a_job_with_subgroups_names_the_rank_that_skipped_it() -> None:
    """GIVEN a real gloo job with new_subgroups where rank 5 skipped a world monitored_barrier
    (no entry; world #5-#6 on the others) and waits alone in its subgroup's all_gather
    WHEN fr-analyze reads the dumps
    THEN rank 5 skipped the world's monitored_barrier #5, a desync; its subgroup neighbour
    (rank 4, idle in the barrier) is not blamed."""
    c = analyzed("barrier_skip_world").conclusion

    assert c.status.value == "desync"
    assert c.root is not None and c.root.ranks == (5,)
    assert c.root.op == "monitored_barrier"
    assert "rank 5 skipped monitored_barrier #5-#6 of group '0'" in c.root.sentence


def test_a_rank_hung_before_its_reduce_scatter_is_named_at_the_first_op_it_never_issued() -> None:
    """GIVEN a real FSDP2 (HSDP) job where rank 6 hung in its backward before the
    reduce-scatter its shard peers issued, dumped by a watchdog thread
    WHEN fr-analyze reads the dumps
    THEN the root is rank 6 at mesh_shard #15 (the reduce-scatter, recorded as all_reduce), the
    first op it never issued, not a later one nor its replicate group's all_reduce."""
    c = analyzed("fsdp2_hang_rs").conclusion

    assert c.root is not None and c.root.ranks == (6,)
    assert c.root.group is not None and c.root.group.desc == "mesh_shard"
    assert c.root.collective_seq_id == 15


@pytest.mark.parametrize("name", ["cpring", "barrier", "fsdp2"])
def test_the_same_jobs_with_no_fault_read_ok_with_no_finding(name: str) -> None:
    c = analyzed(name).conclusion
    assert c.status.value == "ok", c.answer
    assert not [j for j in c.findings if j.role is not Role.IN_FLIGHT], c.answer


@pytest.mark.parametrize("seed", [0, 90])
def test_frsim_fsdp_ranks_that_stopped_before_a_reduce_scatter_are_named_at_that_op(
    seed: int,
) -> None:
    """GIVEN the fault campaign's FSDP gloo cases where a rank stopped before a reduce-scatter
    and its peers ran async ops past it (their copies retired, as gloo retires those that
    timed out, while a member still ran a later one at its dump)
    WHEN fr-analyze reads the dumps
    THEN it names that rank at the reduce-scatter, the first op it never issued (the campaign
    leaves these cases unjudged: a rank that dumped early looks the same)."""
    outcome = run_case(seed, ("barrier", "subgroups", "hsdp", "fsdp", "3d"))

    assert outcome.kind == "stop_host"
    assert outcome.got["culprits"] == outcome.truth["culprits"]
    assert outcome.got["group"] == outcome.truth["group"]
    assert outcome.got["collective_seq_id"] == outcome.truth["seq"]
