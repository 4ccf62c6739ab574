"""The behaviour PyTorch's analyzer is tested on (shared/docs/conformance.md), as specs."""

from __future__ import annotations

from typing import Any

import pytest

from fr_analyzer.model.records import FindingKind
from tests.builders import make_dump, make_entry
from tests.conftest import Run

TWO = {"0": ("default_pg", [0, 1])}


def pair(run: Run, first: dict[str, Any], second: dict[str, Any]) -> list[Any]:
    """Rank 0 records `first`, rank 1 records `second`; returns the findings."""
    analysis = run({0: make_dump([first], TWO), 1: make_dump([second], TWO)})
    return list(analysis.findings)


def ev(op: str = "all_reduce", **kw: Any) -> dict[str, Any]:
    kw.setdefault("in_dtypes", "float32")
    kw.setdefault("out_dtypes", "float32")
    return make_entry(op, "1", p2p_seq="0", **kw)


def kinds(findings: list[Any]) -> set[FindingKind]:
    return {f.kind for f in findings}


# --- pairwise matching ------------------------------------------------------------------------


def test_1_identical_all_reduce_matches(run: Run) -> None:
    assert pair(run, ev(in_sizes=[[4, 4]], out_sizes=[[4, 4]]), ev()) == []


def test_2_all_reduce_against_all_gather_is_op_type_mismatch(run: Run) -> None:
    findings = pair(run, ev("all_reduce"), ev("all_gather"))
    assert kinds(findings) == {FindingKind.OP_TYPE_MISMATCH}


@pytest.mark.parametrize(
    ("first", "second", "ok"),
    [
        (([[4, 4]], [[4, 4]]), ([[4, 4]], [[4, 4]]), True),
        (([[4, 4]], [[4, 4]]), ([[4, 4]], [[5, 4]]), False),
    ],
)
def test_3_all_to_all_is_decided_by_the_group_wide_numel_check(
    run: Run, first: Any, second: Any, ok: bool
) -> None:
    findings = pair(
        run,
        ev("all_to_all", in_sizes=first[0], out_sizes=first[1]),
        ev("all_to_all", in_sizes=second[0], out_sizes=second[1]),
    )
    assert (findings == []) is ok
    if not ok:
        assert kinds(findings) == {FindingKind.SIZE_MISMATCH}


def test_4_different_input_sizes_are_a_size_mismatch(run: Run) -> None:
    findings = pair(
        run, ev(in_sizes=[[4, 4]], out_sizes=[[4, 4]]), ev(in_sizes=[[5, 4]], out_sizes=[[4, 4]])
    )
    assert kinds(findings) == {FindingKind.SIZE_MISMATCH}


def test_5_different_output_sizes_are_a_size_mismatch(run: Run) -> None:
    findings = pair(run, ev(out_sizes=[[4, 4]]), ev(out_sizes=[[5, 4]]))
    assert kinds(findings) == {FindingKind.SIZE_MISMATCH}


def test_6_all_reduce_with_input_unlike_output_is_a_size_mismatch(run: Run) -> None:
    bad: dict[str, Any] = {"in_sizes": [[4, 4]], "out_sizes": [[5, 4]]}
    findings = pair(run, ev(**bad), ev(**bad))
    assert kinds(findings) == {FindingKind.SIZE_MISMATCH}
    assert findings[0].culprit_ranks == (0, 1)


def test_7_state_difference_blames_the_lagging_rank_not_the_completed_one(run: Run) -> None:
    findings = pair(run, ev(state="scheduled", retired=False), ev(state="completed"))
    assert kinds(findings) == {FindingKind.STATE_MISMATCH}
    assert findings[0].culprit_ranks == (0,)


def test_8_output_dtype_difference_is_a_dtype_mismatch(run: Run) -> None:
    findings = pair(run, ev(out_dtypes="float32"), ev(out_dtypes="float16"))
    assert kinds(findings) == {FindingKind.DTYPE_MISMATCH}


@pytest.mark.parametrize("non_root_out", [[[]], [[4, 4]]])
def test_9_10_non_root_gather_outputs_are_ignored(run: Run, non_root_out: Any) -> None:
    root = ev("gather", in_sizes=[[4, 4]], out_sizes=[[4, 4], [4, 4]])
    other = ev("gather", in_sizes=[[4, 4]], out_sizes=non_root_out, out_dtypes="")
    assert pair(run, root, other) == []


# --- every collective matches itself ---------------------------------------------------------

SELF_SIZES: dict[str, tuple[list[list[int]], list[list[int]]]] = {
    "reduce_scatter": ([[4, 4]], [[8]]),
    "_reduce_scatter_base": ([[4, 4]], [[8]]),
    "reduce_scatter_tensor_coalesced": ([[4, 4]], [[8]]),
    "all_gather": ([[4, 4]], [[32]]),
    "_all_gather_base": ([[4, 4]], [[32]]),
    "all_gather_into_tensor_coalesced": ([[4, 4]], [[32]]),
}
ALL_OPS = [
    "all_reduce",
    "allreduce_coalesced",
    "broadcast",
    "_broadcast_oop",
    "reduce",
    "_reduce_oop",
    "all_gather",
    "_all_gather_base",
    "all_gather_into_tensor_coalesced",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "all_reduce_barrier",
    "barrier",
    "coalesced",
    "ALLGATHER_coalesced",
    "REDUCE_SCATTER_coalesced",
]


@pytest.mark.parametrize("op", ALL_OPS)
def test_every_collective_matches_an_identical_event(run: Run, op: str) -> None:
    sizes = SELF_SIZES.get(op, ([[4, 4]], [[4, 4]]))
    e = ev(op, in_sizes=sizes[0], out_sizes=sizes[1])
    analysis = run({0: make_dump([e], TWO), 1: make_dump([dict(e)], TWO)})
    assert analysis.findings == ()
    assert analysis.matches.collectives.passed.all()
    assert len(analysis.matches.collectives.seq) == 1


# --- size rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "in_sizes", "out_sizes", "ok"),
    [
        ("_all_gather_base", [[8]], [[24]], False),
        ("_all_gather_base", [[8]], [[16]], True),
        ("all_gather", [[8]], [[8], [8]], True),
        ("all_gather", [[8]], [[8], [8], [8]], False),
        ("all_gather_into_tensor_coalesced", [[8], [8]], [[16], [16]], True),
        ("reduce_scatter", [[8], [8]], [[8]], True),
        ("reduce_scatter", [[8]], [[8]], False),
        ("_reduce_scatter_base", [[16]], [[8]], True),
        ("_reduce_scatter_base", [[16]], [[16]], False),
        ("all_reduce", [[3, 3]], [[3, 3]], True),
        ("all_reduce", [[3, 3]], [[9]], False),
    ],
)
def test_size_rules_relative_to_group_size(
    run: Run, op: str, in_sizes: Any, out_sizes: Any, ok: bool
) -> None:
    e = ev(op, in_sizes=in_sizes, out_sizes=out_sizes)
    findings = pair(run, e, dict(e))
    assert (findings == []) is ok
    if not ok:
        assert kinds(findings) == {FindingKind.SIZE_MISMATCH}


def test_uneven_all_to_all_single_is_not_an_error_by_itself(run: Run) -> None:
    a = ev("all_to_all_single", in_sizes=[[6]], out_sizes=[[4]])
    b = ev("all_to_all_single", in_sizes=[[2]], out_sizes=[[4]])
    assert pair(run, a, b) == []


def test_all_to_all_single_whose_totals_differ_is_a_size_mismatch(run: Run) -> None:
    a = ev("all_to_all_single", in_sizes=[[6]], out_sizes=[[4]])
    b = ev("all_to_all_single", in_sizes=[[6]], out_sizes=[[4]])
    assert kinds(pair(run, a, b)) == {FindingKind.SIZE_MISMATCH}


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend", ["nccl", "ncclx", "gloo", "xccl", "rccl", "hccl", "mccl", "nccl2", "c10d"]
)
def test_known_backends_parse(run: Run, backend: str) -> None:
    e = ev(backend=backend, retired=True)
    analysis = run({0: make_dump([e], TWO), 1: make_dump([dict(e)], TWO)})
    assert analysis.findings == ()
    assert analysis.summary.warnings == ()
    assert analysis.table.ops == ["all_reduce"]


def test_unknown_backend_is_reported_not_fatal(run: Run) -> None:
    e = ev(backend="weirdlink")
    analysis = run({0: make_dump([e], TWO), 1: make_dump([dict(e)], TWO)})
    assert analysis.findings == ()
    assert any("weirdlink" in w for w in analysis.summary.warnings)


def test_profiling_name_without_colon_is_a_per_entry_error(run: Run) -> None:
    good = ev()
    bad = dict(ev(), profiling_name="allreduce")
    analysis = run({0: make_dump([good, bad], TWO), 1: make_dump([dict(good)], TWO)})
    malformed = [f for f in analysis.findings if f.kind == FindingKind.MALFORMED_ENTRY]
    assert len(malformed) == 1
    assert malformed[0].culprit_ranks == (0,)
    assert "no '<backend>:' prefix" in malformed[0].detail
    assert analysis.matches.collectives.passed.all()


def test_recv_from_any_source_matches_any_sender(run: Run) -> None:
    send = make_entry("send", 0, p2p_seq=1, peer="0->1")
    recv = make_entry("recv", 0, p2p_seq=1, peer="1<-?")
    analysis = run({0: make_dump([send], TWO), 1: make_dump([recv], TWO)})
    assert analysis.findings == ()
    assert len(analysis.matches.p2p.send_row) == 1


# --- end-to-end cases ------------------------------------------------------------------------

DEFAULT = ("0", "default")


def e2e_config(rank: int) -> dict[str, tuple[str, list[int]]]:
    return {"0": ("default_pg", [0, 1]), "1": ("sub_pg", [rank])}


def e2e(run: Run, entries: dict[int, list[dict[str, Any]]]) -> Any:
    return run({r: make_dump(e, e2e_config(r), version="2.8") for r, e in entries.items()})


def coll(op: str, seq: str = "0", group: tuple[str, str] = DEFAULT, **kw: Any) -> dict[str, Any]:
    return make_entry(
        op, seq, p2p_seq="0", group=group, in_dtypes="float32", out_dtypes="float32", **kw
    )


def test_e2e_1_same_named_one_rank_groups_are_distinct(run: Run) -> None:
    a = e2e(
        run, {r: [coll("all_reduce"), coll("all_reduce", group=("1", "sub_pg"))] for r in (0, 1)}
    )
    units = a.matches.collectives
    assert len(units.seq) == 3
    assert units.passed.all()
    assert a.findings == ()
    sub = [g for g in a.groups.groups if g.name == "1"]
    assert sorted(g.ranks for g in sub) == [(0,), (1,)]


def test_e2e_2_allreduce_coalesced_is_one_passing_collective(run: Run) -> None:
    a = e2e(
        run,
        {
            r: [coll("allreduce_coalesced", in_sizes=[[4], [4]], out_sizes=[[4], [4]])]
            for r in (0, 1)
        },
    )
    assert len(a.matches.collectives.seq) == 1
    assert a.findings == ()


def test_e2e_3_coalesced_block_is_one_collective(run: Run) -> None:
    block = [
        coll("broadcast", state="scheduled", retired=False),
        coll("broadcast", state="scheduled", retired=False),
        coll("coalesced", in_sizes=[], out_sizes=[]),
    ]
    a = e2e(run, {0: block, 1: [dict(e) for e in block]})
    assert len(a.matches.collectives.seq) == 1
    assert a.findings == ()


def test_e2e_4_size_mismatch_inside_a_block_is_reported_on_the_member(run: Run) -> None:
    def block(second: list[list[int]]) -> list[dict[str, Any]]:
        return [
            coll("_broadcast_oop", state="scheduled", retired=False),
            coll(
                "_broadcast_oop",
                in_sizes=second,
                out_sizes=second,
                state="scheduled",
                retired=False,
            ),
            coll("ALLGATHER_coalesced", in_sizes=[], out_sizes=[]),
        ]

    a = e2e(run, {0: block([[5, 5]]), 1: block([[4, 4]])})
    assert len(a.matches.collectives.seq) == 1
    (finding,) = a.findings
    assert finding.kind == FindingKind.SIZE_MISMATCH
    assert "_broadcast_oop (member 2" in finding.detail
    assert finding.op == "_broadcast_oop (member 2 of ALLGATHER_coalesced[_broadcast_oop×2])"


def test_e2e_5_reduce_scatter_block_passes(run: Run) -> None:
    block = [
        coll("_reduce_oop", state="scheduled", retired=False),
        coll("_reduce_oop", state="scheduled", retired=False),
        coll("REDUCE_SCATTER_coalesced", in_sizes=[], out_sizes=[]),
    ]
    a = e2e(run, {0: block, 1: [dict(e) for e in block]})
    assert a.findings == ()


def test_e2e_6_block_that_one_rank_never_joined_is_a_finding(run: Run) -> None:
    pending: dict[str, Any] = {"state": "scheduled", "retired": False}
    rank1 = [
        coll("all_reduce"),
        coll("_reduce_oop", "1", **pending),
        coll("_reduce_oop", "1", **pending),
        coll("REDUCE_SCATTER_coalesced", "1", in_sizes=[], out_sizes=[], **pending),
    ]
    a = e2e(run, {0: [coll("all_reduce")], 1: rank1})
    units = a.matches.collectives
    assert list(units.seq) == [0, 1]
    assert list(units.passed) == [True, False]
    (finding,) = a.findings
    assert finding.kind == FindingKind.NOT_JOINED
    assert finding.collective_seq_id == 1
    assert finding.culprit_ranks == (0,)
    assert a.conclusion.root_finding is finding
