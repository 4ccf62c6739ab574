"""Every bundled sample dump set gives the answer its NOTE.md promises; reports are golden.

Each NOTE.md ends with one machine-readable line written by whoever made the set (the real gloo
jobs' scripts, or the simulator's own truth for the NCCL sets), never by fr-analyze:
`EXPECTED: status=... root=... culprits=... group=... desc=... seq=... op=...`.

Refresh the golden reports after an intended change with `pytest --update-golden`, then read
the diff.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from fr_analyzer import analyze
from fr_analyzer.pipeline import Options
from fr_analyzer.render.report import render_text

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
_LINE = re.compile(r"^EXPECTED: (.*)$", re.M)


@dataclass(frozen=True)
class Expected:
    status: str
    root: str | None
    culprits: tuple[int, ...]
    group: str | None
    desc: str | None
    seq: int | None
    p2p: bool
    op: str | None
    seq_rank: int | None = None  # p2p seq ids count per rank: the rank that `seq` is on

    @classmethod
    def of(cls, name: str) -> Expected:
        found = _LINE.findall((SAMPLES / name / "NOTE.md").read_text())
        assert len(found) == 1, f"{name}: NOTE.md needs exactly one EXPECTED: line"
        fields = dict(item.split("=", 1) for item in found[0].split())

        def value(key: str) -> str | None:
            return None if fields[key] == "-" else fields[key]

        seq = value("seq")
        p2p = seq is not None and seq.startswith("p")
        number = None if seq is None else int(seq.lstrip("p").split("@")[0])
        on = int(seq.split("@")[1]) if seq is not None and "@" in seq else None
        culprits = value("culprits")
        return cls(
            fields["status"],
            value("root"),
            tuple(int(r) for r in culprits.split(",")) if culprits else (),
            value("group"),
            value("desc"),
            number,
            p2p,
            value("op"),
            on,
        )


def samples() -> list[str]:
    return sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def test_every_sample_set_has_a_note_with_its_expected_answer() -> None:
    assert len(samples()) == 60
    for name in samples():
        Expected.of(name)


@pytest.mark.parametrize("name", samples())
def test_sample_answer(name: str) -> None:
    want = Expected.of(name)
    c = analyze(SAMPLES / name, Options(workers=1, file_times=False)).conclusion
    assert c.status.value == want.status, c.answer
    root = c.root
    if want.root is None:
        assert root is None, c.answer
        return
    assert root is not None, c.answer
    assert root.kind.value == want.root, c.answer
    assert root.ranks == want.culprits, c.answer
    assert root.group is not None and root.group.name == want.group, c.answer
    assert root.group.desc == want.desc, c.answer
    seq = root.p2p_seq_id if want.p2p else root.collective_seq_id
    assert seq == want.seq, c.answer
    if want.p2p:
        # A p2p seq id is counted on one rank: the wait chain names it with its rank.
        assert want.seq_rank is not None, f"{name}: a p2p seq needs its rank (p6@1)"
        assert (want.seq_rank, want.group, want.seq) in root.wait_chain, c.answer
    if want.op is not None:
        # The op the culprit issued: the root's op, or, where ranks disagree on the op, the
        # one the evidence says the culprit issued.
        culprit = want.culprits[0]
        assert root.op.startswith(want.op) or any(
            e.startswith(f"rank {culprit} issued {want.op} where") for e in root.evidence
        ), c.answer
        if root.finding is not None and root.finding.p2p_seq_id is not None:
            assert f"rank {culprit} {want.op}s " in root.finding.detail, c.answer


@pytest.mark.parametrize("name", samples())
def test_golden_text_report(
    name: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    text = render_text(
        # the files' times depend on the checkout: the goldens are the entries' answer alone
        analyze(Path("sample_dumps") / name, Options(workers=1, file_times=False)),
        verbose=True,
        cap=10,
    )
    golden = GOLDEN / f"{name}.txt"
    if request.config.getoption("--update-golden"):
        golden.write_text(text)
        pytest.skip("golden report written")
    assert golden.exists(), f"no golden report for {name}: run pytest --update-golden"
    assert text == golden.read_text()


def test_every_golden_report_has_its_sample_set() -> None:
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(samples())


@pytest.mark.parametrize("name", [n for n in samples() if n.startswith("nccl")])
def test_committed_nccl_samples_are_what_the_simulator_makes(name: str, tmp_path: Path) -> None:
    from tools.nccl_scenarios import write_scenario

    write_scenario(name, tmp_path)
    made = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in (SAMPLES / name).iterdir()}
    assert made == committed
