"""Hostile input that costs: one rank that multiplies text through pickle memo references,
one whose pg_config or entries claim a far bigger job, one with a group per entry.

Each attack is built in tmp_path from a real sample set (a rank file read, changed and
written back), and the CLI runs it in a child process under a memory and a file-size cap.
What comes out is bounded: the bad rank is refused with a one-line reason, or what it claims
is set aside with a warning; the good ranks are analyzed; a healthy job stays OK; and every
output (report, JSON, -o db.pkl, -o db.sqlite, -j, timeline) stays small.

Sizes and outcomes are asserted, never times: each workload finishes in seconds, and a
quadratic (or worse) regression runs into the child's timeout instead.
"""

from __future__ import annotations

import json
import pickle
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import load, pipeline
from fr_analyzer.load.formats.normalize import text_held
from fr_analyzer.load.safety.limits import LIMITS, MIB

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
MEMORY_CAP = 4 << 30
"""Address space of the child fr-analyze (its loader workers set their own limits)."""
FILE_CAP = 256 * MIB
"""Largest file the child may write: a runaway output fails to write instead of filling the
disk."""
SMALL = 16 * MIB
"""What every output of the attacks below stays under (the healthy job's are a few KB)."""
BIG_TEXT = 4 * MIB


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def _caps() -> None:  # pragma: no cover - runs in the child
    for kind, cap in ((resource.RLIMIT_AS, MEMORY_CAP), (resource.RLIMIT_FSIZE, FILE_CAP)):
        _, hard = resource.getrlimit(kind)
        resource.setrlimit(kind, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))


def fr(*args: str, timeout: float = 120) -> Run:
    """`fr-analyze *args` in a child process under the caps; a timeout fails the test."""
    done = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_caps,
    )
    run = Run(done.returncode, done.stdout, done.stderr)
    for text in (run.out, run.err):
        assert "Traceback" not in text and "internal error" not in text, text[-2000:]
    return run


def copy_set(tmp_path: Path, name: str, sample: str = "gloo_healthy") -> Path:
    directory = tmp_path / name
    shutil.copytree(SAMPLES / sample, directory, ignore=shutil.ignore_patterns("*.md"))
    return directory


def rewrite(path: Path, change: Any) -> None:
    """Read a (trusted, bundled) rank file, let `change` edit the dump, write it back."""
    dump = pickle.loads(path.read_bytes())
    change(dump)
    path.write_bytes(pickle.dumps(dump, protocol=4))


def report_of(run: Run, path: Path) -> dict[str, Any]:
    assert path.exists(), run
    assert path.stat().st_size < SMALL
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def members(report: dict[str, Any]) -> dict[str, list[int]]:
    return {g["name"]: g["ranks"] for g in report["groups"]}


# ---------------------------------------------------------------------------------------------
# Text multiplied by memo references


@pytest.fixture(scope="module")
def memo_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gloo_healthy with rank 1's 2,000 entries sharing one 4 MB profiling_name: a 4 MB
    file whose entries hold 8 GB of text."""
    directory = copy_set(tmp_path_factory.mktemp("memo"), "dumps")
    name = "gloo:all_reduce " + "x" * BIG_TEXT

    def change(dump: dict[str, Any]) -> None:
        entries = dump["entries"]
        dump["entries"] = [
            {**entries[i % len(entries)], "profiling_name": name, "record_id": i}
            for i in range(2000)
        ]

    rewrite(directory / "rank_1.pkl", change)
    assert (directory / "rank_1.pkl").stat().st_size < 2 * BIG_TEXT
    return directory


REFUSED = "(rank 1): refused: its entries expand to 8,000 MB of text"


def test_a_rank_whose_memo_references_multiply_text_is_refused_naming_file_and_rank(
    memo_bomb: Path, tmp_path: Path
) -> None:
    run = fr("-d", str(memo_bomb), "--workers", "1", "--json", str(tmp_path / "r.json"))
    report = report_of(run, tmp_path / "r.json")
    assert run.code == 1  # rank 1 is missing from the job: its peers wait for it
    assert report["dumps"]["ranks_loaded"] == [0, 2, 3]
    (unreadable,) = report["dumps"]["unreadable"]
    assert unreadable["rank"] == 1 and unreadable["file"].endswith("rank_1.pkl")
    assert "memo bomb" in unreadable["reason"] and "\n" not in unreadable["reason"]
    assert f"rank_1.pkl {REFUSED}" in run.out
    assert len(run.out) < SMALL


@pytest.mark.parametrize("output", ["db.pkl", "db.sqlite", "-j", "timeline"])
def test_every_output_of_a_memo_bombed_job_stays_small(
    memo_bomb: Path, tmp_path: Path, output: str
) -> None:
    """Before: 8.4 GB of SQLite, `timeline` killed at 23.5 GB, `-j` past 16 GB."""
    where = tmp_path / output.lstrip("-")
    if output == "-j":
        run = fr("-d", str(memo_bomb), "--workers", "1", "-j", "--print-stack-trace")
        assert run.code in (0, 1) and len(run.out) < SMALL  # -j: the verdict's exit code
        # rank 1's refused entries are not printed: it is the culprit (it has no usable dump),
        # so -j around the root gives it a column, with nothing in it, beside its peers' one
        assert "ranks 0,2-3" in run.out and "rank 1 (culprit)" in run.out
        assert "xxxxxxxx" not in run.out
        return
    if output == "timeline":
        run = fr("timeline", "-d", str(memo_bomb), "--workers", "1", "-o", str(where))
        assert run.code == 1  # the analysis' code, as the main command's
    else:
        run = fr("-d", str(memo_bomb), "--workers", "1", "-o", str(where))
        assert run.code == 1 and REFUSED in run.out
    assert where.stat().st_size < SMALL


def test_a_long_frame_shared_by_every_entry_is_kept_written_once_and_cut_short_by_j(
    tmp_path: Path,
) -> None:
    """A stack is counted once however many entries share it (the outputs keep stacks apart):
    a 4 MB frame shared by every entry of rank 1 is kept, and `-j` shows it cut short."""
    directory = copy_set(tmp_path, "dumps")

    def change(dump: dict[str, Any]) -> None:
        frames = [{"name": "f" * BIG_TEXT, "filename": "hostile.py", "line": 1}]
        for entry in dump["entries"]:
            entry["frames"] = frames

    rewrite(directory / "rank_1.pkl", change)
    run = fr("-d", str(directory), "--workers", "1", "-o", str(tmp_path / "db.sqlite"))
    assert run.code == 0 and "OK." in run.out
    assert (tmp_path / "db.sqlite").stat().st_size < 4 * BIG_TEXT  # the stack, once
    run = fr("-d", str(directory), "--workers", "1", "-j", "--print-stack-trace")
    assert run.code == 0 and len(run.out) < SMALL
    assert f"... ({BIG_TEXT:,} chars) hostile.py:1" in run.out


def test_genuine_ranks_hold_less_text_than_the_limit_even_without_its_floor() -> None:
    """The text limit is far from anything real: the sample ranks (pickles and JSON, torch's
    recorder and others') hold less text than factor x their bytes, before the floor."""
    for sample in ("nccl_healthy", "gloo_healthy_json", "fsdp_healthy", "torchcomms_healthy"):
        for dump_file in load.discover(SAMPLES / sample, None).files:
            rank = load.load_rank(dump_file)
            assert isinstance(rank, load.RankDump) and rank.tables and rank.columns
            held = text_held(rank.columns, rank.tables, rank.groups, rank.claims.values())
            assert 0 < held < LIMITS.text_expansion_factor * dump_file.path.stat().st_size


# ---------------------------------------------------------------------------------------------
# One rank claiming a bigger job


def _ranks_text(ranks: range) -> str:
    return "[" + ", ".join(map(str, ranks)) + "]"


def _claim_the_world(dump: dict[str, Any], default: str = "0") -> None:
    """A default group of a million members, and 300 groups of 100,000 (one list, shared)."""
    config = dump["pg_config"] = {
        key: conf for key, conf in dump.get("pg_config", {}).items() if key != ""
    }
    config[default] = {"name": default, "desc": "default_pg", "ranks": _ranks_text(range(10**6))}
    hundred_thousand = _ranks_text(range(100_000))
    for i in range(300):
        config[f"x{i}"] = {"name": f"x{i}", "desc": "bogus", "ranks": hundred_thousand}


@pytest.mark.parametrize(
    ("sample", "rank_file", "size"),
    [("gloo_healthy", "rank_1.pkl", 4), ("nccl_healthy", "nccl_trace_rank_3", 8)],
)
def test_one_rank_claiming_a_million_member_job_leaves_a_healthy_job_ok(
    tmp_path: Path, sample: str, rank_file: str, size: int
) -> None:
    directory = copy_set(tmp_path, "dumps", sample)
    rewrite(directory / rank_file, _claim_the_world)
    run = fr("-d", str(directory), "--workers", "1", "--json", str(tmp_path / "r.json"))
    report = report_of(run, tmp_path / "r.json")
    assert run.code == 0 and "OK." in run.out
    assert report["dumps"]["ranks_loaded"] == list(range(size))
    assert report["dumps"]["ranks_missing"] == [] and report["dumps"]["unreadable"] == []
    assert members(report)["0"] == list(range(size))
    assert not any(name.startswith("x") for name in members(report))
    rank = 1 if sample == "gloo_healthy" else 3
    (warning,) = [w for w in report["dumps"]["warnings"] if "set aside" in w]
    assert warning.startswith(f"rank {rank}: pg_config group(s) '0', 'x0', 'x1' and 298 more")
    assert "up to rank 999,999, beyond every rank the other files" in warning
    assert warning in run.out


def test_ranks_that_support_each_others_claims_keep_them_and_name_the_missing(
    tmp_path: Path,
) -> None:
    """Two ranks of eight: their pg_config says eight, and each supports the other's."""
    directory = copy_set(tmp_path, "dumps", "nccl_healthy")
    for rank in (1, 2, 3, 4, 6, 7):
        (directory / f"nccl_trace_rank_{rank}").unlink()
    analysis = pipeline.analyze(directory, pipeline.Options(workers=1))
    assert analysis.summary.ranks_loaded == (0, 5)
    assert analysis.summary.ranks_missing == (1, 2, 3, 4, 6, 7)
    assert not [w for w in analysis.summary.warnings if "set aside" in w]


def test_a_rank_loaded_alone_keeps_its_claims(tmp_path: Path) -> None:
    """With one rank nothing compares: its pg_config names the ranks that left no dump."""
    directory = copy_set(tmp_path, "dumps", "nccl_healthy")
    for rank in range(1, 8):
        (directory / f"nccl_trace_rank_{rank}").unlink()
    analysis = pipeline.analyze(directory, pipeline.Options(workers=1))
    assert analysis.summary.ranks_loaded == (0,)
    assert analysis.summary.ranks_missing == tuple(range(1, 8))
    assert not [w for w in analysis.summary.warnings if "set aside" in w]


def test_one_ranks_all_gathers_telling_a_million_ranks_do_not_grow_the_world(
    tmp_path: Path,
) -> None:
    """A size the all_gathers of one rank alone tell is believed only within the job the rest
    shows: rank 1 is the culprit of a size mismatch, not the witness of 999,996 missing ranks."""
    directory = copy_set(tmp_path, "dumps")

    def change(dump: dict[str, Any]) -> None:
        entries = dump["entries"]
        gather = next(e for e in entries if e["profiling_name"] == "gloo:all_gather")
        entries += [
            {
                **gather,
                "input_sizes": [[1]],
                "output_sizes": [[10**6]],
                "collective_seq_id": 100 + i,
            }
            for i in range(20)
        ]

    rewrite(directory / "rank_1.pkl", change)
    run = fr("-d", str(directory), "--workers", "1", "--json", str(tmp_path / "r.json"))
    report = report_of(run, tmp_path / "r.json")
    assert run.code == 1
    assert report["dumps"]["ranks_missing"] == []
    assert members(report)["0"] == [0, 1, 2, 3]
    assert report["verdict"]["culprit_ranks"] == [1]
    assert "size mismatch" in run.out


# ---------------------------------------------------------------------------------------------
# Group reconstruction in time near-linear in the groups


@pytest.mark.slow
def test_a_rank_with_60000_entries_each_in_its_own_group_is_analyzed(tmp_path: Path) -> None:
    """Each group asked about its siblings by scanning every other group cost the square of
    the groups: 60,000 did not finish in 120 s. Now seconds; a regression times out."""
    directory = copy_set(tmp_path, "dumps")

    def change(dump: dict[str, Any]) -> None:
        entries = dump["entries"]
        first = entries[0]
        entries += [
            {**first, "process_group": (f"g{i}", "bogus"), "pg_id": 100 + i, "record_id": 100 + i}
            for i in range(60_000)
        ]

    rewrite(directory / "rank_1.pkl", change)
    run = fr("-d", str(directory), "--workers", "1", timeout=60)
    assert run.code == 0 and len(run.out) < SMALL
    assert "ranks loaded: 4 (0-3)" in run.out
    assert "across 4 ranks in 60003 groups" in run.out
