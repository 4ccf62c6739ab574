"""gloo Execution Traces name no group: each op's group is found by a search over every rank's
trace (`load.formats.traces.assign`). An extra world all_reduce after a pair all_reduce, a
healthy job with one-rank groups, a tie said as `ambiguous`, and a job past the search's
budget, which falls back to the greedy settle with a warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import analyze
from fr_analyzer.load.formats import traces as chakra
from fr_analyzer.load.formats.traces import assign
from fr_analyzer.load.formats.traces.dispatcher import Op
from fr_analyzer.load.formats.traces.nodes import Group
from fr_analyzer.pipeline import Analysis, Options

Step = tuple[str, int]
"""One op of a rank's trace: the op ("all_reduce", "broadcast") and its elements."""


def _node(node_id: int, name: str, types: list[str], shapes: list[Any], values: list[Any]) -> Any:
    return {
        "id": node_id,
        "name": name,
        "ctrl_deps": 2,
        "inputs": {"values": values, "shapes": shapes, "types": types},
        "outputs": {"values": [], "shapes": [], "types": []},
        "attrs": [],
    }


def gloo_trace(groups: dict[str, tuple[int, ...]], steps: list[Step], world: int) -> Any:
    """A torch 2.13 gloo trace: the init record, then per op a `c10d::` dispatcher node (its
    group an "<Object>") and its `gloo:` node; complete (the trace stopped cleanly)."""
    listed = [
        {
            "pg_name": name,
            "pg_desc": "default_pg" if name == "0" else f"group_{name}",
            "backend_config": "cpu:gloo",
            "ranks": [] if len(ranks) == world else list(ranks),
            "group_size": len(ranks),
            "group_count": len(groups),
        }
        for name, ranks in groups.items()
    ]
    nodes = [_node(3, chakra.INIT_NODE, ["String"], [[]], [json.dumps(listed)])]
    for k, (op, size) in enumerate(steps):
        tensor = [6, 7, 0, size, 4, "cpu"]
        call = {"all_reduce": "allreduce_", "broadcast": "broadcast_"}[op]
        nodes.append(
            _node(
                10 + 2 * k,
                f"c10d::{call}",
                ["GenericList[Tensor(float)]", "Object"],
                [[[size]], []],
                [[tensor], "<Object>"],
            )
        )
        nodes.append(_node(11 + 2 * k, f"gloo:{op}", ["Tensor(float)"], [[size]], [tensor]))
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": nodes, "finish_ts": 1}


def write_job(
    where: Path, groups: dict[str, tuple[int, ...]], ranks: dict[int, list[Step]]
) -> Path:
    for rank, steps in ranks.items():  # the init record lists the groups the rank is in
        mine = {name: members for name, members in groups.items() if rank in members}
        trace = gloo_trace(mine, steps, len(ranks))
        (where / f"rank-{rank}.et.json").write_text(json.dumps(trace))
    return where


def run(where: Path) -> Analysis:
    return analyze(where, Options(workers=1))


AR: Step = ("all_reduce", 16)
PAIR = {"0": (0, 1, 2, 3), "1": (0, 1)}


def extra_world_all_reduce(where: Path) -> Path:
    """Two world all_reduces, a pair all_reduce on ranks 0 and 1, then rank 0 alone issues one
    more world all_reduce; every op of one size."""
    return write_job(where, PAIR, {0: [AR] * 4, 1: [AR] * 3, 2: [AR] * 2, 3: [AR] * 2})


def test_an_extra_world_all_reduce_after_a_pair_all_reduce_is_the_extra_ranks(
    tmp_path: Path,
) -> None:
    # GIVEN the traces of a job where rank 0 issued one world all_reduce too many
    analysis = run(extra_world_all_reduce(tmp_path))
    # THEN the answer is rank 0's extra all_reduce on the world, never "rank 1 never joined"
    c = analysis.conclusion
    assert c.status.value == "desync", c.answer
    assert c.root is not None and c.root.ranks == (0,), c.answer
    assert c.root.group is not None and c.root.group.name == "0", c.answer
    assert "never joined" not in c.answer


def test_the_search_puts_the_world_ops_on_the_world_and_the_pairs_on_the_pair() -> None:
    ops = {r: [_op(("0", "1") if r < 2 else ("0",)) for _ in range(n)] for r, n in
           {0: 4, 1: 3, 2: 2, 3: 2}.items()}  # fmt: skip
    found = assign.search(ops, _groups(PAIR))
    assert found is not None and found.searched
    assert found.chosen[0][:3] == ("0", "0", "1") and found.chosen[1] == ("0", "0", "1")
    assert found.chosen[2] == found.chosen[3] == ("0", "0")
    # the greedy settle (smaller groups first) took the world's all_reduces for the pair's
    assert chakra.dispatcher.assign(ops, _groups(PAIR))[0][0] == "1"


def test_a_healthy_two_rank_job_with_one_rank_groups_is_ok(tmp_path: Path) -> None:
    # GIVEN rank 0 in a group of its own (new_group([0])) beside the world; every step, rank 0
    # runs an all_reduce on its own group, then both an all_reduce and a broadcast on the
    # world, all of one size: each all_reduce of rank 0 fits its own group as well
    groups = {"0": (0, 1), "1": (0,)}
    ranks = {0: [AR, AR, ("broadcast", 16)] * 3, 1: [AR, ("broadcast", 16)] * 3}
    analysis = run(write_job(tmp_path, groups, ranks))
    # THEN it reads as the healthy job it is (the greedy settle pulled both of rank 0's
    # all_reduces onto its own group: an op-type mismatch on the world)
    assert analysis.conclusion.status.value == "ok", analysis.conclusion.answer
    assert analysis.conclusion.confidence.value == "high"


def test_two_assignments_that_pass_as_many_ops_with_other_verdicts_read_ambiguous(
    tmp_path: Path,
) -> None:
    # GIVEN the extra all_reduce of rank 0, which fits the pair as well as the world: on the
    # pair, it would be rank 1 that never joined it
    analysis = run(extra_world_all_reduce(tmp_path))
    c = analysis.conclusion
    # THEN the likelier reading is printed (the world: its other members finished), the
    # other is listed with what would decide
    assert c.confidence.value == "ambiguous", c.answer
    (other,) = [a for a in c.alternatives if "other groups" in a.reading]
    assert "group '1'" in other.reading
    assert "Flight Recorder dumps" in other.decide


def test_an_op_left_waiting_goes_where_its_groups_other_members_wait() -> None:
    # GIVEN ranks 0 and 2 stopped in a world broadcast, and rank 1 (in the pair {0, 1} with
    # rank 0) in a barrier that fits the pair as well as the world (rank 1 skipped the
    # broadcast)
    groups = _groups({"0": (0, 1, 2), "1": (0, 1)})
    sizes = ([[16]], ["Float"], [[16]], ["Float"])
    broadcast = Op("gloo", "broadcast", sizes, -1, ("0", "1"))
    barrier = Op("gloo", "barrier", ([], [], [], []), -1, ("0", "1"))
    ops = {0: [_op(("0", "1")), broadcast], 1: [_op(("0", "1")), barrier], 2: [broadcast]}
    found = assign.search(ops, groups)
    # THEN rank 1's barrier is put on the world, where its other members wait (with another
    # op: rank 1 disagrees with them), not on the pair, where rank 0 would be absent from it
    assert found is not None
    assert found.chosen[0] == ("1", "0") and found.chosen[1] == ("1", "0")


def test_a_job_past_the_search_budget_falls_back_to_the_greedy_settle_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a search budget smaller than the job
    monkeypatch.setattr(assign, "NODE_BUDGET", 1)
    analysis = run(extra_world_all_reduce(tmp_path))
    # THEN the report says so, and the greedy settle's answer stands
    (warning,) = [w for w in analysis.summary.warnings if "too many to search" in w]
    assert "settled greedily" in warning
    ops = {r: [_op(("0", "1") if r < 2 else ("0",))] * 3 for r in range(4)}
    fallen = assign.settle(ops, _groups(PAIR), node_budget=1)
    assert not fallen.searched and fallen.warning
    assert fallen.chosen == {
        r: tuple(g) for r, g in chakra.dispatcher.assign(ops, _groups(PAIR)).items()
    }


def test_the_search_is_deterministic() -> None:
    ops = {r: [_op(("0", "1") if r < 2 else ("0",)) for _ in range(3)] for r in range(4)}
    first = assign.search(ops, _groups(PAIR))
    assert first is not None
    assert all(assign.search(ops, _groups(PAIR)) == first for _ in range(3))


def _op(candidates: tuple[str, ...], size: int = 16) -> Op:
    sizes = ([[size]], ["Float"], [[size]], ["Float"])
    return Op("gloo", "all_reduce", sizes, -1, candidates)


def _groups(members: dict[str, tuple[int, ...]]) -> dict[str, Group]:
    return {
        name: Group(name, "default_pg" if name == "0" else f"group_{name}", "gloo", ranks)
        for name, ranks in members.items()
    }
