"""Rules for the training shapes beyond Megatron's 3D (FSDP, HSDP, MoE, DDP, subgroups,
monitored barriers) and the recorders' conventions they meet; README, "Job shapes and recorder
conventions". Each rule is a named test over dumps that trigger it, with a healthy twin that
must stay clean. The real 8-rank gloo sets of every shape are checked in
end_to_end/test_scenarios.py."""

from __future__ import annotations

from typing import Any

from fr_analyzer.conclusion import Role
from fr_analyzer.model.records import FindingKind
from tests.builders import make_dump, make_entry, renumber
from tests.conftest import Run

FOUR = {"0": ("default_pg", [0, 1, 2, 3])}


def _gloo(op: str, seq: int, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("group", ("0", "default_pg"))
    return make_entry(op, seq, backend="gloo", state="scheduled", **kwargs)


def _fsdp_job(out_of_rank: dict[int, list[list[int]]] | None = None) -> dict[int, Any]:
    """Four ranks; each step gloo records a coalesced pair of all_gather_into_tensor as one
    all_gather entry (inputs [16] and [2], output [[2, 16]]), then a reduce-scatter recorded
    as all_reduce, then the loss all_reduce."""
    dumps = {}
    for rank in range(4):
        entries = []
        for step in range(2):
            out = (out_of_rank or {}).get(rank, [[2, 16]]) if step == 1 else [[2, 16]]
            entries += [
                _gloo("all_gather", 3 * step + 1, in_sizes=[[16], [2]], out_sizes=out),
                _gloo("all_reduce", 3 * step + 2, in_sizes=[[64]], out_sizes=[[16]]),
                _gloo("all_reduce", 3 * step + 3, in_sizes=[[1]], out_sizes=[[1]]),
            ]
        dumps[rank] = make_dump(renumber(entries), FOUR, comm_lib_version="")
    return dumps


def test_a_size_rule_every_member_breaks_alike_is_the_recorders_layout_not_a_desync(
    run: Run,
) -> None:
    analysis = run(_fsdp_job())
    c = analysis.conclusion
    assert c.status.value == "ok", c.answer
    assert not analysis.findings
    assert any("recorder's layout" in w for w in analysis.summary.warnings)


def test_a_member_that_breaks_the_learned_layout_differently_is_still_named(run: Run) -> None:
    analysis = run(_fsdp_job({2: [[2, 17]]}))
    sizes = [f for f in analysis.findings if f.kind == FindingKind.SIZE_MISMATCH]
    assert sizes and all(f.culprit_ranks == (2,) for f in sizes), analysis.conclusion.answer
    assert analysis.conclusion.root is not None and analysis.conclusion.root.ranks == (2,)


HSDP = {
    "0": ("default_pg", list(range(8))),
    **{str(1 + k): ("shard", list(range(4 * k, 4 * k + 4))) for k in range(2)},
    **{str(3 + k): ("replicate", [k, k + 4]) for k in range(4)},
}


def _hsdp_job(float_rank: int | None, lost: tuple[int, ...]) -> dict[int, Any]:
    """Eight ranks, 2 replicas x 4 shards: per step a shard all_gather and reduce-scatter,
    then the replicate all_reduce of the gradient shard in bfloat16. `float_rank` passes
    float32 at step 2's replicate all_reduce; the `lost` ranks left no dump."""
    dumps = {}
    for rank in range(8):
        if rank in lost:
            continue
        shard, replicate = (str(1 + rank // 4), "shard"), (str(3 + rank % 4), "replicate")
        entries = []
        for step in range(2):
            last = step == 1
            dtype = "Float" if last and rank == float_rank else "BFloat16"
            entries += [
                _gloo("all_gather", 2 * step + 1, group=shard, in_sizes=[[8]], out_sizes=[[4, 8]]),
                _gloo("all_reduce", 2 * step + 2, group=shard, in_sizes=[[32]], out_sizes=[[8]]),
                _gloo(
                    "all_reduce",
                    step + 1,
                    group=replicate,
                    in_sizes=[[8]],
                    out_sizes=[[8]],
                    in_dtypes=[dtype],
                    out_dtypes=[dtype],
                    retired=not (last and float_rank is not None),
                ),
            ]
        dumps[rank] = make_dump(renumber(entries), HSDP, comm_lib_version="")
    return dumps


def test_a_disagreement_whose_partner_left_no_dump_is_found_by_comparing_groups_alike(
    run: Run,
) -> None:
    """gloo aborts the rank that receives more bytes than it posted, with no dump: rank 2's
    float32 all_reduce kills its replicate partner 6. The three other replicate groups hold
    bfloat16 at the same seq id: rank 2 deviates, and rank 6's missing dump is its consequence."""
    analysis = run(_hsdp_job(float_rank=2, lost=(6,)))
    c = analysis.conclusion
    assert c.status.value == "desync", c.answer
    assert c.root is not None and c.root.kind.value == "mismatch", c.answer
    assert c.root.ranks == (2,) and c.root.group is not None and c.root.group.name == "5"
    assert c.root.collective_seq_id == 2
    finding = c.root_finding
    assert finding is not None and finding.kind == FindingKind.DTYPE_MISMATCH
    assert "rank 6 left no dump" in finding.detail
    assert not c.having(Role.INDEPENDENT), c.answer


def test_a_rank_with_no_dump_whose_partner_agrees_with_groups_alike_is_dead_not_a_mismatch(
    run: Run,
) -> None:
    c = run(_hsdp_job(float_rank=None, lost=(6,))).conclusion
    assert c.root is not None and c.root.kind.value == "dead_rank" and c.root.ranks == (6,)


MOE = {
    "0": ("default_pg", list(range(8))),
    **{str(1 + k): ("tp", [2 * k, 2 * k + 1]) for k in range(4)},
    **{str(5 + k): ("ep", [k, k + 2, k + 4, k + 6]) for k in range(2)},
}
ROUTED = [[30, 8], [34, 8], [32, 8], [28, 8], [36, 8], [31, 8], [30, 8], [35, 8]]
"""Tokens each rank receives at the dispatch (uneven splits; every rank sends 32)."""


def _moe_job(
    rows_of_rank: dict[int, int] | None = None, lost: tuple[int, ...] = ()
) -> dict[int, Any]:
    """Eight ranks, TP=2 x EP=4: per step a TP all_reduce, the EP dispatch all_to_all (32
    tokens in on every rank, uneven totals out), the combine (uneven in, 32 out), the loss.
    `rows_of_rank` changes a rank's dispatch input at step 2."""
    dumps = {}
    for rank in range(8):
        if rank in lost:
            continue
        tp, ep = (str(1 + rank // 2), "tp"), (str(5 + rank % 2), "ep")
        entries = []
        for step in range(2):
            rows = (rows_of_rank or {}).get(rank, 32) if step == 1 else 32
            last = step == 1 and bool(rows_of_rank)
            entries += [
                _gloo("all_reduce", step + 1, group=tp, in_sizes=[[32, 8]], out_sizes=[[32, 8]]),
                _gloo(
                    "all_to_all",
                    2 * step + 1,
                    group=ep,
                    in_sizes=[[rows, 8]],
                    out_sizes=[ROUTED[rank]],
                    retired=not last,
                ),
            ]
            if not last:
                entries += [
                    _gloo(
                        "all_to_all",
                        2 * step + 2,
                        group=ep,
                        in_sizes=[ROUTED[rank]],
                        out_sizes=[[32, 8]],
                    ),
                    _gloo("all_reduce", step + 1, in_sizes=[[1]], out_sizes=[[1]]),
                ]
        dumps[rank] = make_dump(renumber(entries), MOE, comm_lib_version="")
    return dumps


def test_all_to_all_outputs_may_differ_from_rank_to_rank(run: Run) -> None:
    analysis = run(_moe_job())
    assert analysis.conclusion.status.value == "ok", analysis.conclusion.answer
    assert not analysis.findings


def test_an_all_to_all_input_that_differs_from_every_peer_and_group_alike_is_the_culprit(
    run: Run,
) -> None:
    """Rank 3 dispatches 33 tokens where every other rank of both EP groups sends 32; gloo
    aborts a receiver (rank 5, no dump). The exchange's inputs are compared, not its
    outputs: rank 3 deviates."""
    c = run(_moe_job({3: 33}, lost=(5,))).conclusion
    assert c.status.value == "desync", c.answer
    assert c.root is not None and c.root.kind.value == "mismatch" and c.root.ranks == (3,), c.answer
    assert c.root.group is not None and c.root.group.name == "6" and c.root.collective_seq_id == 3
    assert not c.having(Role.INDEPENDENT), c.answer


def _barrier_job(skipper: int | None) -> dict[int, Any]:
    """Four ranks; per step all_reduces A and B, a monitored_barrier (gloo records nothing,
    but it takes sequence ids #3-#4, #8-#9), then all_reduce C. At step 2 `skipper` skips
    the barrier: its C is recorded as #8 and waits; the others wait in the barrier."""
    dumps = {}
    for rank in range(4):
        entries = []
        for step in range(2):
            base = 5 * step
            a = _gloo("all_reduce", base + 1, in_sizes=[[8]], out_sizes=[[8]])
            b = _gloo("all_reduce", base + 2, in_sizes=[[2]], out_sizes=[[2]])
            entries += [a, b]
            if step == 0 or skipper is None:
                entries.append(_gloo("all_reduce", base + 5, in_sizes=[[4]], out_sizes=[[4]]))
            elif rank == skipper:
                # retired: it timed out (gloo retires an op that fails)
                entries.append(_gloo("all_reduce", base + 3, in_sizes=[[4]], out_sizes=[[4]]))
        dumps[rank] = make_dump(renumber(entries), FOUR, comm_lib_version="")
    return dumps


def test_sequence_ids_every_member_leaves_unrecorded_are_not_a_desync(run: Run) -> None:
    analysis = run(_barrier_job(skipper=None))
    assert analysis.conclusion.status.value == "ok", analysis.conclusion.answer


def test_a_rank_holding_an_entry_in_an_unrecorded_gap_skipped_the_barrier(run: Run) -> None:
    c = run(_barrier_job(skipper=2)).conclusion
    assert c.status.value == "desync", c.answer
    assert c.root is not None and c.root.kind.value == "not_joined", c.answer
    assert c.root.ranks == (2,) and c.root.collective_seq_id == 8, c.answer
    assert "monitored_barrier" in c.answer
