"""A fixed-seed slice of the randomized fault campaign (`make accuracy` runs 300 and more):
simulated jobs of 8 to 256 ranks with every kind of fault, each answered right."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from benchmarks.accuracy import Outcome, run
from tools.frsim.campaign import CASE_KINDS

SEEDS = range(0, 66)

pytestmark = pytest.mark.slow


def _wrong(outcomes: Sequence[Outcome]) -> list[str]:
    """Each judged case answered wrong: its seed, case, answer and what differs."""
    return [
        f"seed {o.seed}: {o.case}\n  got: {o.got['answer'][:200]}\n  differs: {o.problems}"
        for o in outcomes
        if o.ambiguous is None and not o.right
    ]


def test_every_fault_kind_of_the_slice_is_answered_right() -> None:
    outcomes = run(SEEDS, workers=1)
    kinds = Counter(o.kind for o in outcomes if o.ambiguous is None)
    assert set(kinds) == set(CASE_KINDS), kinds  # the slice judges every kind
    wrong = _wrong(outcomes)
    assert not wrong, "\n".join(wrong)
    assert sum(o.ambiguous is None for o in outcomes) >= 0.8 * len(outcomes)


SHAPES = ("fsdp", "hsdp", "moe", "ddp", "subgroups", "barrier")
SHAPE_SEEDS: tuple[int, ...]  # grows below
SHAPE_SEEDS = (3, 26, 33, 150, 193, 226, 250, 297, 337, 375, 459, 460, 496, 509, 640, 777, 792)
SHAPE_SEEDS += (803, 839, 1009, 1029, 1059, 1063, 1068, 1201, 1359, 1532, 1821, 1915, 1924, 1964)
"""Seeds of the campaign over every shape (`make accuracy`: `--shapes all`) that the rules of
the job shapes once answered wrong, each now right or ambiguous by construction: learned
layouts, lost partners, all_to_all inputs and totals, gloo async ops, skips inside a group,
skipped first barriers, healthy mid-run dumps."""


def test_the_drawn_cases_of_every_job_shape_that_once_went_wrong_are_answered_right() -> None:
    outcomes = run(SHAPE_SEEDS, workers=1, shapes=("3d", *SHAPES))
    wrong = _wrong(outcomes)
    assert not wrong, "\n".join(wrong)
    assert sum(o.ambiguous is None for o in outcomes) >= 0.6 * len(outcomes)
