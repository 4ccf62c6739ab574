"""Every bundled sample dump set gives the verdict its NOTE.md promises; reports are golden.

Refresh the golden reports after an intended change with `pytest --update-golden`, then read
the diff.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fr_analyzer import analyze
from fr_analyzer.pipeline import Options
from fr_analyzer.report import render_text

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_dumps"
GOLDEN = Path(__file__).resolve().parent / "golden"


@dataclass(frozen=True)
class Expect:
    status: str
    kind: str | None = None
    group: str | None = None
    seq: int | None = None  # collective seq id, or p2p seq id for p2p kinds
    op: str | None = None
    culprits: tuple[int, ...] = ()


EXPECTED: dict[str, Expect] = {
    "gloo_healthy": Expect("ok"),
    "gloo_healthy_json": Expect("ok"),
    "gloo_skip_collective": Expect("desync", "not_joined", "0", 4, "all_reduce", (2,)),
    "gloo_size_mismatch": Expect("desync", "size_mismatch", "0", 3, "all_reduce", (1,)),
    "gloo_op_mismatch": Expect("desync", "op_type_mismatch", "0", 3, "all_reduce", (3,)),
    "gloo_subgroup_desync": Expect("desync", "not_joined", "2", 3, "all_reduce", (3,)),
    "nccl_healthy": Expect("ok"),
    "nccl_batched_p2p": Expect("ok"),
    "nccl_wrapped": Expect("ok"),
    "nccl_coalesced": Expect("desync", "size_mismatch", "1", 13, "_broadcast_oop", (1,)),
    "nccl_not_joined": Expect("desync", "not_joined", "0", 6, "all_reduce", (5,)),
    "nccl_op_mismatch_json": Expect("desync", "op_type_mismatch", "0", 6, None, (0,)),
    "nccl_stuck_started": Expect("desync", "state_mismatch", "0", 7, "all_reduce", (2,)),
    "nccl_missing_dump": Expect("incomplete", "missing_dump", "0", None, None, (3,)),
    # Rank 2 never posts its last recv from rank 1, so it never sends its last to rank 3
    # either: both unmatched ends name rank 2; the recv on rank 3 has p2p seq 40.
    "nccl_p2p_pipeline": Expect("desync", "p2p_unmatched", "1", 40, None, (2,)),
    "nccl_wait_chain": Expect("desync", "not_joined", "2", 4, "all_reduce", (3,)),
    "nccl_deadlock": Expect("desync", "not_joined", "1", 4, "all_reduce", (1,)),
    "nccl_all_stuck": Expect("ok"),
    "nccl_straggler": Expect("ok"),
    "nccl_dead_rank": Expect("desync", "not_joined", "0", 4, "all_reduce", (2, 3)),
}


def scenarios() -> list[str]:
    return sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def test_every_sample_set_has_an_expectation_and_a_note() -> None:
    assert set(scenarios()) == set(EXPECTED)
    for name in scenarios():
        assert (SAMPLES / name / "NOTE.md").is_file(), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_verdict(name: str) -> None:
    expect = EXPECTED[name]
    analysis = analyze(SAMPLES / name, Options(workers=1))
    verdict = analysis.verdict
    assert verdict.status.value == expect.status, verdict.summary
    if expect.status == "ok":
        assert analysis.findings == ()
        return
    f = verdict.finding
    assert f is not None
    assert f.kind.value == expect.kind, verdict.summary
    assert f.group is not None and f.group.name == expect.group
    seq = f.collective_seq_id if f.collective_seq_id is not None else f.p2p_seq_id
    assert seq == expect.seq
    if expect.op is not None:
        assert f.op.startswith(expect.op)
    assert f.culprit_ranks == expect.culprits


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_golden_text_report(
    name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    text = render_text(
        analyze(Path("sample_dumps") / name, Options(workers=1)), verbose=True, cap=10
    )
    golden = GOLDEN / f"{name}.txt"
    if request.config.getoption("--update-golden"):
        golden.write_text(text)
    assert golden.exists(), f"no golden report for {name}: run pytest --update-golden"
    assert text == golden.read_text()


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.startswith("nccl_")))
def test_committed_nccl_samples_are_what_the_generator_makes(name: str, tmp_path: Path) -> None:
    from tools.nccl_scenarios import write_scenario

    write_scenario(name, tmp_path)
    made = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in (SAMPLES / name).iterdir()}
    assert made == committed
