"""The words of the answer (issue 34, part 9): sentences complete, singular and plural right, a
symptom's culprit the rank it waits for, framework frames collapsed in stacks and the odd one
out only where a stack differs, gloo ops that timed out read so, and the hint for a gloo rank
that looks idle in a pipeline. Verdicts are end_to_end/test_scenarios.py's; these read only the
words."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from fr_analyzer import analyze
from fr_analyzer.conclusion import Conclusion, Role
from fr_analyzer.diagnosis.positions import collapse, is_framework
from fr_analyzer.model.records import Frame
from fr_analyzer.pipeline import Analysis, Options
from tests.builders import make_dump, make_entry
from tests.conftest import Run

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
GLOO_HINT = (
    "most likely it is blocked in a send/recv with its pipeline peer (gloo does not record "
    "send/recv)"
)


@functools.cache
def sample(name: str) -> Analysis:
    return analyze(SAMPLES / name, Options(workers=1, file_times=False))


def sentences(c: Conclusion) -> list[str]:
    """Every sentence the answer, its evidence, the timing and the findings' explanations say."""
    out = [c.answer, c.timing.note]
    if c.root is not None:
        out += [c.root.sentence, *c.root.evidence]
    for j in c.findings:
        out += [j.link, j.finding.detail]
    return [s for s in out if s]


WORDY = [
    "nccl3d_p2p_mismatch",
    "fsdp_size_mismatch",
    "ddp_bucket_order",
    "moe_split_mismatch",
    "gloo3d_pp_recv_missing",
    "gloo3d_mid_step",
    "nccl_missing_dump",
    "nccl_stuck_started",
    "nccl3d_cascade_started",
    "nccl_healthy",
]


# --- every sentence complete ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["nccl3d_p2p_mismatch", "fsdp_size_mismatch"])
def test_a_mismatchs_symptoms_say_whom_they_wait_for_in_full(name: str) -> None:
    c = sample(name).conclusion
    links = [j.link for j in c.having(Role.SYMPTOM) if "disagrees" in j.link]
    assert links, c.answer
    for link in links:
        assert link.endswith("for ranks blocked in it"), link


@pytest.mark.parametrize("name", WORDY)
def test_no_sentence_stops_mid_way(name: str) -> None:
    dangling = re.compile(r"\b(that are|for|of|to|the|and|in|with|a)$")
    for text in sentences(sample(name).conclusion):
        assert not dangling.search(text.rstrip(". ")), text


# --- singular and plural ---------------------------------------------------------------------


@pytest.mark.parametrize("name", WORDY)
def test_counts_and_verbs_agree(name: str) -> None:
    for text in sentences(sample(name).conclusion):
        assert "(s)" not in text, text
        assert not re.search(r"\branks [0-9][0-9,\-]* (is|has|waits|looks)\b", text), text
        assert not re.search(r"\brank [0-9]+ (are|have|wait|look)\b", text), text
        assert not re.search(r"(?<![0-9,.])1 (ranks|findings|groups|collectives)\b", text), text


def test_several_dead_ranks_are_the_root_cause_in_the_plural(run: Run) -> None:
    # GIVEN ranks 0-1 waiting in all_reduce #2 for ranks 2 and 3, which left no dump
    world = {"0": ("default_pg", [0, 1, 2, 3])}
    done = [make_entry("all_reduce", 1, group=("0", "default_pg"))]
    stuck = make_entry("all_reduce", 2, group=("0", "default_pg"), state="scheduled", retired=False)
    analysis = run({r: make_dump([*done, dict(stuck)], world) for r in (0, 1)})
    # WHEN concluded, THEN the missing dumps are the root, said in the plural
    c = analysis.conclusion
    assert c.root is not None and c.root.ranks == (2, 3)
    links = [j.link for j in c.findings if j.role == Role.ROOT and j.link != "the root cause"]
    assert links == ["ranks 2-3 are the root cause"]
    assert "ranks 2-3 look dead" in c.answer


def test_one_rank_in_flight_is_counted_in_the_singular(run: Run) -> None:
    # GIVEN a gloo job dumped while rank 1 was in an op rank 0 had not issued yet
    group = ("0", "default_pg")
    done = [make_entry("all_reduce", 1, group=group, backend="gloo", state="scheduled")]
    late = make_entry(
        "all_reduce", 2, group=group, backend="gloo", state="scheduled", retired=False
    )
    analysis = run({0: make_dump(list(done)), 1: make_dump([*done, late])})
    # THEN the healthy answer counts one rank, one group, in the singular
    c = analysis.conclusion
    assert c.status.value == "ok", c.answer
    assert "across 2 ranks in 1 group. 1 rank has unfinished ops," in c.answer
    assert "(s)" not in c.answer


# --- a symptom's culprit is the rank it waits for --------------------------------------------


def test_a_symptoms_culprit_is_the_root_it_waits_for_and_its_held_up_ranks_are_apart() -> None:
    # rank 12 never joined all_reduce #8 of tp group '4'; rank 4 waits for it (in an unrecorded
    # send), so rank 0 waits for rank 4 in dp group '5' (NOTE.md)
    c = sample("gloo3d_pp_recv_missing").conclusion
    symptoms = c.having(Role.SYMPTOM)
    assert symptoms
    for j in symptoms:
        assert j.culprit_ranks == (12,), j
        assert 12 not in j.held_up_ranks, j
    (dp5,) = [j for j in symptoms if j.finding.group is not None and j.finding.group.name == "5"]
    assert dp5.finding.culprit_ranks == (4,)  # the finding's own culprit stays as the matcher had
    assert dp5.held_up_ranks == (0, 4)
    root = [j for j in c.findings if j.role == Role.ROOT]
    assert [j.culprit_ranks for j in root] == [(12,)]
    assert all(j.held_up_ranks == () for j in root)


# --- stacks ----------------------------------------------------------------------------------

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"


def test_framework_frames_collapse_to_the_call_the_program_made() -> None:
    stack = (
        Frame("all_gather_single", C10D, 4387),
        Frame("wrapper", LOGGER, 83),
        Frame("all_gather_into_tensor", C10D, 4413),
        Frame("wrapper", "/venv/lib/python3.11/site-packages/typing_extensions.py", 3140),
        Frame("wrapper", LOGGER, 83),
        Frame("run", "/job/train.py", 513),
        Frame("_call_impl", "/venv/site-packages/torch/nn/modules/module.py", 1750),
        Frame("inner", "/usr/lib/python3.11/functools.py", 10),
        Frame("main", "/job/train.py", 600),
    )
    kept, hidden = collapse(stack)
    assert [f.name for f in kept] == ["all_gather_into_tensor", "run", "main"]
    assert hidden == 6
    assert is_framework(Frame("wrapper", LOGGER, 83))
    assert not is_framework(Frame("run", "/job/train.py", 1))


def test_a_stack_of_framework_frames_alone_is_kept_whole() -> None:
    stack = (Frame("all_reduce", C10D, 1), Frame("wrapper", LOGGER, 2))
    assert collapse(stack) == (stack, 0)


@pytest.mark.parametrize("name", ["gloo3d_pp_recv_missing", "nccl3d_cascade_started"])
def test_stacks_show_no_wrapper_frames(name: str) -> None:
    for group in sample(name).diagnosis.stacks:
        for frame in group.stack or ():
            assert "c10d_logger" not in frame.filename and "functools" not in frame.filename


def test_only_a_stack_that_differs_from_its_groups_peers_is_the_odd_one_out() -> None:
    # Stages run different code: ranks 0-3,8-11 and 4-7,13-15 hold two stacks, each shared
    # by their tp peers; rank 12 alone differs from its tp group (13-15).
    stacks = sample("gloo3d_pp_recv_missing").diagnosis.stacks
    assert len(stacks) == 3
    assert [g.ranks for g in stacks if g.odd] == [(12,)]
    assert [g.odd_ranks for g in stacks if g.odd] == [(12,)]


# --- gloo: ops that timed out ----------------------------------------------------------------


def test_gloo_ops_retired_without_completing_read_timed_out_with_no_age() -> None:
    d = sample("gloo3d_pp_recv_missing").diagnosis
    blocked = [s for s in d.ranks if s.blocked is not None]
    assert blocked
    for s in blocked:
        assert s.blocked is not None
        assert s.blocked.timed_out and s.blocked.describe().endswith("(timed out)")
        assert s.blocked.age_s is None  # not "0.0 s ago" for an op that waited 10 s
    for p in d.positions:
        if p.first_incomplete is not None and p.first_incomplete.timed_out:
            assert p.oldest_age_s is None
        if p.last_completed is not None:
            assert "timed out" not in p.last_completed.describe()


@pytest.mark.parametrize("name", ["ddp_bucket_order", "fsdp_crash", "gloo3d_crash"])
def test_the_op_a_rank_is_blocked_in_is_never_its_last_completed(name: str) -> None:
    d = sample(name).diagnosis
    for s in d.ranks:
        if s.blocked is None:
            continue
        for p in d.positions:
            if s.rank not in p.ranks or p.group.uid != s.blocked.group.uid:
                continue
            last = p.last_completed
            assert last is None or (last.collective_seq_id, last.p2p_seq_id) != (
                s.blocked.collective_seq_id,
                s.blocked.p2p_seq_id,
            ), (s.rank, s.blocked.describe())


# --- gloo: a rank that looks idle in a pipeline ----------------------------------------------


@pytest.mark.parametrize("name", ["gloo3d_pp_recv_missing", "gloo3d_stuck_rank"])
def test_an_idle_gloo_rank_in_a_pipeline_is_likely_in_a_send_or_recv(name: str) -> None:
    root = sample(name).conclusion.root
    assert root is not None
    (said,) = [e for e in root.evidence if "never issued it" in e]
    assert "hung outside any collective; " + GLOO_HINT in said


@pytest.mark.parametrize("name", ["subgroups_independent_hang", "nccl_not_joined"])
def test_no_pipeline_hint_outside_a_gloo_pipeline(name: str) -> None:
    root = sample(name).conclusion.root
    assert root is not None
    assert not any("send/recv with its pipeline peer" in e for e in root.evidence)
