"""A fixed-seed slice of the randomized fault campaign (`make accuracy` runs 300 and more):
simulated jobs of 8 to 256 ranks with every kind of fault, each answered right."""

from __future__ import annotations

from collections import Counter

from benchmarks.accuracy import run
from tools.frsim.campaign import CASE_KINDS

SEEDS = range(0, 66)


def test_every_fault_kind_of_the_slice_is_answered_right() -> None:
    outcomes = run(SEEDS, workers=1)
    kinds = Counter(o.kind for o in outcomes if o.ambiguous is None)
    assert set(kinds) == set(CASE_KINDS), kinds  # the slice judges every kind
    wrong = [
        f"seed {o.seed}: {o.case}\n  got: {o.got['answer'][:200]}\n  differs: {o.problems}"
        for o in outcomes
        if o.ambiguous is None and not o.right
    ]
    assert not wrong, "\n".join(wrong)
    assert sum(o.ambiguous is None for o in outcomes) >= 0.8 * len(outcomes)
