"""Other recorders' dumps (torchcomms, HCCL, XCCL), torchft jobs, debug-server folders and the
newer op names read as PyTorch's own; the sample sets' verdicts are in
end_to_end/test_scenarios.py."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import analyze
from fr_analyzer.errors import DiscoveryError
from fr_analyzer.load.formats.values import parse_name
from fr_analyzer.model.records import UNKNOWN_PEER, P2PKind
from fr_analyzer.pipeline import Options
from tests.builders import make_dump, make_entry, write_dumps

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_dumps"
DIALECT_SETS = sorted(
    p.name for p in SAMPLES.iterdir() if p.name.split("_")[0] in ("torchcomms", "hccl", "xccl")
)


def test_there_is_a_healthy_and_a_faulty_set_per_dialect() -> None:
    for dialect in ("torchcomms", "hccl", "xccl"):
        assert f"{dialect}_healthy" in DIALECT_SETS
        assert f"{dialect}_not_joined" in DIALECT_SETS
    assert "intel/torch-xpu-ops" in (SAMPLES / "xccl_healthy" / "NOTE.md").read_text()


@pytest.mark.parametrize("name", DIALECT_SETS)
def test_committed_dialect_samples_are_what_the_maker_writes(name: str, tmp_path: Path) -> None:
    from tools.make_dialect_samples import SETS

    (found,) = [s for s in SETS if s.name == name]
    found.write(tmp_path)

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert files(tmp_path / name) == files(SAMPLES / name)


def test_the_report_says_which_recorder_wrote_the_ranks() -> None:
    warnings = analyze(SAMPLES / "torchcomms_healthy", Options(workers=1)).summary.warnings
    assert any(w.startswith("ranks 0-7: torchcomms dumps") for w in warnings)
    assert any("progress is judged by what every rank issued" in w for w in warnings)
    hccl = analyze(SAMPLES / "hccl_healthy", Options(workers=1)).summary.warnings
    assert any(w.startswith("ranks 0-7: HCCL dumps (torch_npu)") for w in hccl)
    xccl = analyze(SAMPLES / "xccl_healthy", Options(workers=1)).summary.warnings
    assert any("backend xccl never reported an op completed" in w for w in xccl)


def _as_json(value: Any) -> Any:
    """What a recorder's JSON writer gives for a pickled value: lists for tuples, 0 for an
    unset time, no stack frames."""
    if isinstance(value, dict):
        out = {k: _as_json(v) for k, v in value.items() if k != "frames"}
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            if key in out and out[key] is None:
                out[key] = 0
        return out
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    return value


def test_torchcomms_json_from_the_control_plane_gives_the_same_verdict(tmp_path: Path) -> None:
    source = SAMPLES / "torchcomms_not_joined" / "per_rank"
    for path in sorted(source.iterdir()):
        dump = pickle.loads(path.read_bytes())
        (tmp_path / f"{path.name}.json").write_text(json.dumps(_as_json(dump)))
    from_json = analyze(tmp_path, Options(workers=1)).conclusion
    from_pickle = analyze(source.parent, Options(workers=1)).conclusion
    assert from_json.status == from_pickle.status
    assert from_json.root is not None and from_pickle.root is not None
    assert from_json.root.ranks == from_pickle.root.ranks == (5,)


def test_hccl_json_without_frames_says_the_ops_are_unknown(tmp_path: Path) -> None:
    for path in sorted((SAMPLES / "hccl_healthy").glob("hccl_trace_rank_*")):
        dump = pickle.loads(path.read_bytes())
        (tmp_path / f"{path.name}.json").write_text(json.dumps(_as_json(dump)))
    result = analyze(tmp_path, Options(workers=1))
    assert any("with no frames: op unknown" in w for w in result.summary.warnings)


def test_a_send_that_names_no_peer_is_never_paired_nor_malformed() -> None:
    assert parse_name("nccl:send")[1:] == ("send", P2PKind.SEND, UNKNOWN_PEER, UNKNOWN_PEER)
    assert parse_name("nccl:recv")[2] == P2PKind.RECV
    assert parse_name("ncclx:batch_op_issue")[2:] == (P2PKind.SEND, UNKNOWN_PEER, UNKNOWN_PEER)


# --- completion not recorded --------------------------------------------------------------


def _two_ranks(tmp_path: Path, backend: str, rank1_ops: int, **entry: Any) -> Path:
    dumps = {}
    for rank in (0, 1):
        n = 3 if rank == 0 else rank1_ops
        entries = [make_entry("all_reduce", s, backend=backend, **entry) for s in range(1, n + 1)]
        dumps[rank] = make_dump(entries)
    return write_dumps(tmp_path, dumps)


def test_a_backend_that_retires_ops_when_enqueued_and_never_completes_is_not_hung(
    tmp_path: Path,
) -> None:
    quiet = _two_ranks(tmp_path, "c10d", 3, state="scheduled", retired=True)
    result = analyze(quiet, Options(workers=1))
    assert result.conclusion.status.value == "ok", result.conclusion.answer
    assert any("backend c10d never reported an op completed" in w for w in result.summary.warnings)


def test_without_completion_a_rank_that_never_issued_a_collective_is_still_named(
    tmp_path: Path,
) -> None:
    quiet = _two_ranks(tmp_path, "xccl", 2, state="scheduled", retired=False)
    c = analyze(quiet, Options(workers=1)).conclusion
    assert c.status.value == "hung" and c.root is not None, c.answer
    assert c.root.ranks == (1,) and c.root.collective_seq_id == 3


def test_nccl_with_nothing_completed_is_a_hang_not_a_silent_recorder(tmp_path: Path) -> None:
    stuck = _two_ranks(tmp_path, "nccl", 3, state="scheduled", retired=False)
    result = analyze(stuck, Options(workers=1))
    assert result.conclusion.status.value == "hung", result.conclusion.answer
    assert not any("never reported an op completed" in w for w in result.summary.warnings)


# --- torchft --------------------------------------------------------------------------------


def _torchft_job(tmp_path: Path) -> Path:
    """Two replica groups of two ranks; files by global rank, default_pg in local ranks; rank 3
    (replica 1) never issues the third all_reduce."""
    dumps = {}
    for rank in range(4):
        n = 2 if rank == 3 else 3
        entries = [make_entry("all_reduce", s, group=("0", "default_pg")) for s in range(1, n + 1)]
        entries[-1]["state"] = "scheduled" if rank == 2 else entries[-1]["state"]
        entries[-1]["retired"] = rank != 2
        dumps[rank] = make_dump(entries, {"0": ("default_pg", [0, 1])})
    return write_dumps(tmp_path, dumps, prefix="")


def test_transform_ft_makes_each_replicas_default_group_global(tmp_path: Path) -> None:
    job = _torchft_job(tmp_path)
    result = analyze(job, Options(workers=1, ft_group_world_size=2))
    names = sorted(g.name for g in result.groups.groups)
    assert names == ["0@replica0", "0@replica1"]
    by_name = {g.name: g.ranks for g in result.groups.groups}
    assert by_name["0@replica1"] == (2, 3)
    missing = [f for f in result.findings if f.group is not None and f.culprit_ranks == (3,)]
    assert [f.group.name for f in missing if f.group is not None] == ["0@replica1"], missing


# --- where the dumps are --------------------------------------------------------------------


def test_a_folder_of_debug_server_text_reports_says_what_to_pass(tmp_path: Path) -> None:
    (tmp_path / "fr_trace_20261123_031502.txt").write_text("=== FR Trace ===\n")
    (tmp_path / "stacks_20261123_031502.txt").write_text("Rank 0:\n")
    with pytest.raises(DiscoveryError, match=r"debug server's text reports.*per_rank"):
        analyze(tmp_path, Options(workers=1))


def test_debug_server_json_with_extra_keys_is_read(tmp_path: Path) -> None:
    for rank in (0, 1):
        entries = [make_entry("all_reduce", s) for s in (1, 2)]
        dump = _as_json(make_dump(entries)) | {"rank": rank, "host_name": f"10.0.0.{rank}"}
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(dump))
    assert analyze(tmp_path, Options(workers=1)).conclusion.status.value == "ok"


def test_per_rank_folder_next_to_text_reports_is_found(tmp_path: Path) -> None:
    shutil.copytree(SAMPLES / "torchcomms_healthy", tmp_path / "fr")
    result = analyze(tmp_path / "fr", Options(workers=1))
    assert result.summary.ranks_loaded == tuple(range(8))


# --- newer op names and backends ------------------------------------------------------------


def test_newer_op_names_and_backends_are_known_with_their_size_rules(tmp_path: Path) -> None:
    dumps = {}
    for rank in (0, 1):
        entries = [
            make_entry("all_gather_single", 1, backend="nccl2", in_sizes=[[4]], out_sizes=[[8]]),
            make_entry(
                "reduce_scatter_single", 2, backend="rcclx", in_sizes=[[8]], out_sizes=[[4]]
            ),
            make_entry(
                "all_to_all_v_single",
                3,
                backend="c10d",
                in_sizes=[[3 + rank]],
                out_sizes=[[4 - rank]],
            ),
            make_entry("all_gather_v", 4, in_sizes=[[1 + rank]], out_sizes=[[3]]),
            make_entry("reduce_scatter_v", 5, in_sizes=[[3]], out_sizes=[[1 + rank]]),
        ]
        dumps[rank] = make_dump(entries)
    result = analyze(write_dumps(tmp_path / "ok", dumps), Options(workers=1))
    assert result.conclusion.status.value == "ok", result.conclusion.answer
    assert not any("unknown" in w for w in result.summary.warnings), result.summary.warnings
    dumps[1]["entries"][0]["output_sizes"] = [[6]]  # all_gather_single: not 2 x 4
    bad = analyze(write_dumps(tmp_path / "bad", dumps), Options(workers=1)).conclusion
    assert bad.status.value == "desync" and bad.root is not None, bad.answer
    assert bad.root.ranks == (1,)
