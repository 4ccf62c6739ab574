"""The command line: every flag, exit codes, one-line errors, outputs written atomically.

The tests call `cli.run(argv)` in this process (fast); a few smoke tests run the real
`python -m fr_analyzer` in a child process."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import cli, load_db, pipeline
from tests.builders import make_dump, make_entry

TWO = {"0": ("default_pg", [0, 1])}


@dataclass(frozen=True)
class Ran:
    """What one run of the command printed, and its exit code."""

    returncode: int
    stdout: str
    stderr: str


Fr = Callable[..., Ran]


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """No colour, 80 columns: what a pipe gets, whatever the shell running the tests set."""
    for name in ("FORCE_COLOR", "COLUMNS", "LINES", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fr(capsys: pytest.CaptureFixture[str]) -> Fr:
    """`fr(*args)`: `fr-analyze *args` in this process."""

    def run(*args: str) -> Ran:
        capsys.readouterr()
        code = cli.run(list(args))
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


def fr_process(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m fr_analyzer *args` in a child process (the smoke tests)."""
    return subprocess.run(
        [sys.executable, "-m", "fr_analyzer", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


@pytest.fixture
def healthy(tmp_path: Path) -> Path:
    d = tmp_path / "healthy"
    d.mkdir()
    for rank in (0, 1):
        entries = [
            make_entry(
                "all_reduce",
                s,
                record_id=s,
                frames=[{"name": "step", "filename": "train.py", "line": 212}],
            )
            for s in range(3)
        ]
        (d / f"rank_{rank}.pkl").write_bytes(pickle.dumps(make_dump(entries, TWO)))
    return d


@pytest.fixture
def desynced(tmp_path: Path) -> Path:
    d = tmp_path / "desync"
    d.mkdir()
    # Rank 1 stopped after all_reduce #1; rank 0 waits in #2 (the dumps say nothing of how
    # long, so it is taken as stuck, as a watchdog dump would be).
    waiting: dict[str, Any] = {"state": "scheduled", "retired": False}
    ranks = {
        0: [
            make_entry("all_reduce", s, record_id=s, **(waiting if s == 2 else {}))
            for s in range(3)
        ],
        1: [make_entry("all_reduce", s, record_id=s) for s in range(2)],
    }
    for rank, entries in ranks.items():
        (d / f"rank_{rank}.pkl").write_bytes(pickle.dumps(make_dump(entries, TWO)))
    return d


def test_healthy_dumps_exit_0_and_say_no_desync(fr: Fr, healthy: Path) -> None:
    result = fr("-d", str(healthy))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK. No desync and nothing stuck")
    assert result.stderr == ""


def test_findings_exit_1_and_the_answer_names_rank_group_seq_and_op(fr: Fr, desynced: Path) -> None:
    result = fr("-d", str(desynced))
    assert result.returncode == 1
    assert result.stdout.startswith("HUNG. rank 1 never joined")
    assert (  # wrapped to the width (80 columns when not a terminal)
        "HUNG. rank 1 never joined all_reduce #2 of group '0' (default_pg): rank 0 waits in "
        "it." in " ".join(result.stdout.split())
    )
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_json_report_has_the_documented_keys(fr: Fr, desynced: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert fr("-d", str(desynced), "--json", str(out)).returncode == 1
    report = json.loads(out.read_text())
    assert report["schema"] == "fr-analyze.report/1"
    assert set(report["dumps"]) >= {
        "ranks_loaded",
        "ranks_missing",
        "unreadable",
        "versions",
        "backend",
    }
    verdict = report["verdict"]
    assert verdict["status"] == "hung"
    assert verdict["kind"] == "not_joined" and verdict["root_cause"] == "not_joined"
    assert verdict["group"] == "0" and verdict["group_desc"] == "default_pg"
    assert verdict["group_ranks"] == [0, 1]
    assert verdict["collective_seq_id"] == 2 and verdict["p2p_seq_id"] is None
    assert verdict["op"] == "all_reduce" and verdict["culprit_ranks"] == [1]
    assert verdict["summary"]
    (finding,) = report["findings"]
    assert set(finding) >= set(verdict) - {
        "status",
        "summary",
        "confidence",
        "alternatives",
        "root_cause",
        "root_cause_ranks",
        "timing",
        "when_where",
    }
    assert {"ranks", "detail", "explained_by_root_cause", "role"} <= set(finding)
    assert finding["ranks"] == [0]
    assert finding["role"] == "root" and finding["explained_by_root_cause"] is True
    assert report["root_cause"]["kind"] == "not_joined" and report["root_cause"]["ranks"] == [1]


def test_database_is_written_and_read_back(fr: Fr, healthy: Path, tmp_path: Path) -> None:
    out = tmp_path / "db.pkl"
    assert fr("-d", str(healthy), "-o", str(out)).returncode == 0
    db = load_db(out)
    assert set(db.tables) == {
        "groups",
        "memberships",
        "collectives",
        "nccl_calls",
        "tracebacks",
        "findings",
    }
    groups = {g["id"] for g in db["groups"].records()}
    collectives = db["collectives"].records()
    assert len(collectives) == 3
    assert all(c["group_id"] in groups for c in collectives)
    calls = db["nccl_calls"].records()
    assert len(calls) == 6
    ids = {c["id"] for c in collectives}
    assert all(c["collective_id"] in ids for c in calls)
    (tb,) = db["tracebacks"].records()
    assert tb["frames"] == [["step", "train.py", 212]]
    assert all(c["traceback_id"] == tb["id"] for c in calls)


@pytest.mark.parametrize("sample", ["nccl_stuck_started", "nccl_batched_p2p", "nccl3d_crash"])
def test_database_calls_hold_each_entrys_values_as_builtins(sample: str) -> None:
    from fr_analyzer import analyze
    from fr_analyzer.model.records import STATE_NAMES, State, UnitKind
    from fr_analyzer.render import database

    result = analyze(Path(__file__).parents[2] / "sample_dumps" / sample)
    t, m = result.table, result.matches
    rows = database.build(result)["tables"]["nccl_calls"]["rows"]
    assert len(rows) == t.n
    columns = database.COLUMNS["nccl_calls"]
    seen_none = set()
    for i, row in enumerate(rows):
        call = dict(zip(columns, row, strict=True))
        assert all(type(v) in (int, float, str, bool, list, type(None)) for v in row)
        assert call["id"] == i and call["rank"] == int(t.rank[i])
        assert call["record_id"] == int(t.record_id[i])
        assert call["group_id"] == int(result.groups.entry_group[i])
        assert call["profiling_name"] == t.profiling_names[int(t.pname[i])]
        assert call["unit"] == UnitKind(int(t.unit[i])).name.lower()
        assert call["state"] == STATE_NAMES[State(int(t.state[i]))]
        assert call["retired"] is bool(t.retired[i]) and call["completed"] is bool(m.done[i])
        assert call["input_sizes"] == [list(s) for s in t.shapes[int(t.in_shape[i])]]
        assert call["output_dtypes"] == list(t.dtypes[int(t.out_dtype[i])])
        for name, raw in (
            ("time_created_ns", t.t_created[i]),
            ("time_discovered_started_ns", t.t_started[i]),
            ("time_discovered_completed_ns", t.t_completed[i]),
            ("traceback_id", t.stack[i]),
        ):
            assert call[name] == (None if raw < 0 else int(raw))
            seen_none |= {name} if call[name] is None else set()
        duration = float(t.duration_ms[i])
        assert call["duration_ms"] == (None if duration != duration else duration)
    assert seen_none  # the sample has values that are missing: they are None, not -1


def test_database_loads_with_plain_pickle_and_no_fr_analyzer(
    fr: Fr, healthy: Path, tmp_path: Path
) -> None:
    out = tmp_path / "db.pkl"
    fr("-d", str(healthy), "-o", str(out))
    code = (
        "import pickle,sys; sys.modules['fr_analyzer']=None; "
        f"db=pickle.load(open({str(out)!r},'rb')); print(sorted(db['tables']))"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "nccl_calls" in result.stdout


def test_just_print_entries_shows_ranks_side_by_side(fr: Fr, healthy: Path) -> None:
    result = fr("-d", str(healthy), "-j")
    assert result.returncode == 0
    assert "ranks 0-1" in result.stdout  # identical ranks share one column
    assert "#2 " in result.stdout and "all_reduce [[4,4]] completed,retired" in result.stdout


def test_just_print_entries_filters_and_stacks(fr: Fr, healthy: Path) -> None:
    result = fr(
        "-d",
        str(healthy),
        "--just-print-entries",
        "--selected-ranks",
        "1",
        "--pg-filters",
        "default_pg",
        "--print-stack-trace",
    )
    assert result.returncode == 0
    assert "rank 1" in result.stdout and "rank 0" not in result.stdout
    assert "step train.py:212" in result.stdout
    none = fr("-d", str(healthy), "-j", "--pg-filters", "nope")
    assert none.returncode == 2 and none.stdout == ""
    assert none.stderr.splitlines()[0] + "\n" == (
        "fr-analyze: error: --pg-filters nope: no process group has that name or description; "
        "the job's groups are 0 (default_pg)\n"
    )


def test_verbose_adds_group_and_membership_tables(fr: Fr, healthy: Path) -> None:
    out = fr("-d", str(healthy), "-v").stdout
    assert "Process groups:" in out and "membership from" in out and "Memberships" in out


def test_mismatch_cap_bounds_findings_per_group(fr: Fr, tmp_path: Path) -> None:
    d = tmp_path / "many"
    d.mkdir()
    for rank in (0, 1):
        entries = [
            make_entry("all_reduce", 0, in_sizes=[[rank + 1]], out_sizes=[[rank + 1]]),
            make_entry("all_reduce", 1, in_dtypes=["Float" if rank else "Half"]),
            make_entry("all_reduce" if rank else "broadcast", 2),
        ]
        (d / f"rank_{rank}").write_bytes(pickle.dumps(make_dump(entries, TWO)))
    full = fr("-d", str(d), "--mismatch-cap", "50", "--json", str(tmp_path / "a.json"))
    capped = fr("-d", str(d), "--mismatch-cap", "1", "-v", "--json", str(tmp_path / "b.json"))
    assert full.returncode == capped.returncode == 1
    a = json.loads((tmp_path / "a.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())
    assert len(b["findings"]) == 1 < len(a["findings"])
    assert b["findings_omitted"] == {"0": len(a["findings"]) - 1}
    assert "not shown: --mismatch-cap" in capped.stdout


def test_prefix_option(fr: Fr, tmp_path: Path, healthy: Path) -> None:
    result = fr("-d", str(healthy), "-p", "rank_")
    assert result.returncode == 0
    assert fr("-d", str(healthy), "-p", "zzz_").returncode == 2


def test_workers_option(fr: Fr, healthy: Path) -> None:
    assert fr("-d", str(healthy), "--workers", "2").returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-d", "/no/such/dir"], "no such directory or archive"),
        ([], "missing option -d"),
        (["-d", "."], "no rank dump files"),
        (["--bogus"], "no such option"),
        (["-d", ".", "--mismatch-cap", "0"], "--mismatch-cap"),
    ],
)
def test_bad_usage_exits_2_with_one_clear_line(
    fr: Fr, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = fr(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_filters_without_j_are_a_usage_error(fr: Fr, healthy: Path) -> None:
    result = fr("-d", str(healthy), "--selected-ranks", "0")
    assert result.returncode == 2
    assert "go with -j" in result.stderr


def test_bad_rank_list_is_a_usage_error(fr: Fr, healthy: Path) -> None:
    result = fr("-d", str(healthy), "-j", "--selected-ranks", "a-b")
    assert result.returncode == 2 and "bad rank list" in result.stderr


def test_no_readable_dump_exits_2_naming_the_file(fr: Fr, tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(b"\x80\x04garbage")
    result = fr("-d", str(tmp_path))
    assert result.returncode == 2
    assert "rank_0" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2


def _a_bug_in_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TypeError raised while building every rank, in this process (no worker sandbox):
    what a bug in fr-analyze's own code looks like, whatever the dump holds."""
    from fr_analyzer.load import loading
    from fr_analyzer.load.safety import sandbox

    def broken(*args: object, **kwargs: object) -> None:
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(sandbox, "available", lambda: False)
    monkeypatch.setattr(loading, "build_rank", broken)


def test_a_bug_in_a_reader_is_an_internal_error_not_a_malformed_dump(
    fr: Fr, healthy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN well-formed dumps and a reader with a bug
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    _a_bug_in_the_reader(monkeypatch)
    # WHEN the command runs
    result = fr("-d", str(healthy))
    # THEN it says the bug is fr-analyze's, in one line, and exits 3
    assert result.returncode == 3
    assert result.stderr == (
        "fr-analyze: internal error (a bug in fr-analyze, not your dumps): TypeError: "
        "unsupported operand type(s) for +: 'int' and 'str'; run with --debug for the "
        "traceback\n"
    )
    assert "malformed" not in result.stdout + result.stderr


def test_a_bug_in_a_sandboxed_reader_is_an_internal_error_too(
    fr: Fr, healthy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN well-formed dumps read in the worker sandbox, whose reader has a bug
    from fr_analyzer.load import loading
    from fr_analyzer.load.safety import sandbox

    if not sandbox.available():
        pytest.skip("no worker sandbox on this platform")
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)

    def broken(*args: object, **kwargs: object) -> None:
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(loading, "build_rank", broken)  # the forked workers inherit it
    # WHEN the command runs with workers
    result = fr("-d", str(healthy), "--workers", "2")
    # THEN the bug is fr-analyze's (exit 3), not an unreadable rank
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.startswith("fr-analyze: internal error (a bug in fr-analyze")
    assert "TypeError" in result.stderr and "unreadable" not in result.stdout


@pytest.mark.parametrize("how", ["--debug", "FR_ANALYZE_DEBUG=1"])
def test_debug_prints_the_traceback_of_an_internal_error(
    fr: Fr, healthy: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    # GIVEN a reader with a bug, and --debug or the environment variable
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    _a_bug_in_the_reader(monkeypatch)
    flags = [how] if how.startswith("--") else []
    if not flags:
        monkeypatch.setenv(*how.split("="))
    # WHEN the command runs
    result = fr(*flags, "-d", str(healthy))
    # THEN the traceback comes first, down to the bug, then the one line, and the code is 3
    assert result.returncode == 3
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert 'in broken\n    raise TypeError("unsupported operand' in result.stderr
    assert result.stderr.endswith(
        "fr-analyze: internal error (a bug in fr-analyze, not your dumps): TypeError: "
        "unsupported operand type(s) for +: 'int' and 'str'\n"
    )


def test_debug_changes_nothing_without_an_internal_error(fr: Fr, healthy: Path) -> None:
    plain, debug = fr("-d", str(healthy)), fr("--debug", "-d", str(healthy))
    assert (debug.returncode, debug.stdout, debug.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )


def test_output_inside_the_dump_directory_is_refused(fr: Fr, healthy: Path) -> None:
    before = sorted(p.name for p in healthy.iterdir())
    result = fr("-d", str(healthy), "-o", str(healthy / "db.pkl"))
    assert result.returncode == 2 and "inside the dump directory" in result.stderr
    assert sorted(p.name for p in healthy.iterdir()) == before


def test_unwritable_output_is_a_one_line_error(fr: Fr, healthy: Path, tmp_path: Path) -> None:
    result = fr("-d", str(healthy), "--json", str(tmp_path / "no" / "such" / "r.json"))
    assert result.returncode == 2
    assert "cannot write" in result.stderr and "Traceback" not in result.stderr


def test_existing_output_is_replaced_only_on_success(fr: Fr, healthy: Path, tmp_path: Path) -> None:
    out = tmp_path / "db.pkl"
    out.write_bytes(b"old")
    fr("-d", str(tmp_path / "missing"), "-o", str(out))
    assert out.read_bytes() == b"old"
    assert fr("-d", str(healthy), "-o", str(out)).returncode == 0
    assert load_db(out).schema == "fr-analyze.db/1"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".db.pkl")] == []


# --- smoke tests: the real command in a child process --------------------------------------


def test_smoke_version_is_quick_and_imports_nothing_heavy() -> None:
    started = time.perf_counter()
    result = fr_process("--version")
    assert result.returncode == 0 and result.stdout.startswith("fr-analyze ")
    assert time.perf_counter() - started < 5  # ~0.1 s; generous for a loaded CI machine
    code = (
        "import sys, fr_analyzer.cli; "
        "print(sorted(m for m in ('numpy', 'rich', 'tabulate', 'fr_analyzer.pipeline') "
        "if m in sys.modules))"
    )
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert imported.stdout.strip() == "[]", imported.stderr


def test_smoke_a_hung_job_in_a_child_process_exits_1(desynced: Path) -> None:
    result = fr_process(str(desynced))
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("HUNG. rank 1 never joined all_reduce #2")


def test_smoke_json_dash_writes_the_report_to_stdout_and_the_text_to_stderr(
    desynced: Path, tmp_path: Path
) -> None:
    result = fr_process(str(desynced), "--json", "-", cwd=tmp_path)
    assert result.returncode == 1
    assert json.loads(result.stdout)["verdict"]["status"] == "hung"
    assert "HUNG. rank 1 never joined" in result.stderr
    assert (
        result.stderr.rstrip()
        .splitlines()[-1]
        .startswith("wrote the JSON report to standard output (")
    )
    assert not (tmp_path / "-").exists()


# --- torchfrtrace's command line ------------------------------------------------------------

NCCL = str(Path(__file__).resolve().parents[2] / "sample_dumps" / "nccl_healthy")


@pytest.mark.parametrize(
    ("torchfrtrace", "ours"),
    [
        ([NCCL], ["-d", NCCL]),
        (
            [NCCL, "--mismatch_cap", "5", "--allow-incomplete-ranks"],
            ["-d", NCCL, "--mismatch-cap", "5"],
        ),
        ([NCCL, "-v"], ["-d", NCCL, "-v"]),
        ([NCCL, "-p", "nccl_trace_rank_"], ["-d", NCCL, "-p", "nccl_trace_rank_"]),
        (
            [NCCL, "-j", "--selected-ranks", "0", "1", "--pg-filters", "0", "1"],
            ["-d", NCCL, "-j", "--selected-ranks", "0,1", "--pg-filters", "0,1"],
        ),
        (
            [NCCL, "--just_print_entries", "--print_stack_trace", "--selected-ranks", "2"],
            ["-d", NCCL, "-j", "--print-stack-trace", "--selected-ranks", "2"],
        ),
        (["-j", "--selected-ranks", "0", "1", NCCL], ["-d", NCCL, "-j", "--selected-ranks", "0,1"]),
    ],
)
def test_torchfrtraces_documented_invocations_mean_the_same(
    fr: Fr, torchfrtrace: list[str], ours: list[str]
) -> None:
    theirs, mine = fr(*torchfrtrace), fr(*ours)
    assert theirs.returncode == mine.returncode == 0, theirs.stderr
    assert theirs.stdout == mine.stdout and theirs.stdout


def test_torchfrtraces_output_option_writes_the_database(fr: Fr, tmp_path: Path) -> None:
    out = tmp_path / "db.pkl"
    result = fr(NCCL, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert load_db(out).schema == "fr-analyze.db/1"


def test_transform_ft_needs_the_replica_size_and_says_so(fr: Fr) -> None:
    result = fr(NCCL, "--transform-ft")
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "fr-analyze: error: --transform-ft needs --group-world-size (ranks per replica group)"
    )
    assert fr(NCCL, "--transform-ft", "--group-world-size", "8").returncode == 0


def test_help_says_which_spellings_and_formats_are_read(fr: Fr) -> None:
    text = fr("--help").stdout
    for spelling in ("--mismatch_cap", "--print_stack_trace", "--just_print_entries"):
        assert spelling in text
    assert "--allow-incomplete-ranks" in text and "changes nothing" in text
    assert "torchcomms" in text and "HCCL" in text


# --- outputs: checked first, said when written ----------------------------------------------


def test_each_output_written_is_one_line_with_its_size_on_stderr(
    fr: Fr, desynced: Path, tmp_path: Path
) -> None:
    db, report = tmp_path / "db.sqlite", tmp_path / "r.json"
    result = fr(str(desynced), "-o", str(db), "--json", str(report))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines == [
        f"wrote {report} ({cli.human_size(report.stat().st_size)})",
        f"wrote {db} ({cli.human_size(db.stat().st_size)})",
    ]
    assert db.read_bytes().startswith(b"SQLite format 3")


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (0, "0 bytes"),
        (1, "1 byte"),
        (999, "999 bytes"),
        (12_345, "12.3 kB"),
        (12_300_000, "12.3 MB"),
    ],
)
def test_sizes_are_shown_in_decimal_units(size: int, shown: str) -> None:
    assert cli.human_size(size) == shown


def test_o_dispatches_on_the_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """GIVEN -o names; WHEN the database is written; THEN SQLite, Parquet or pickle."""
    called: list[str] = []
    from fr_analyzer.render import database, database_sqlite

    monkeypatch.setattr(database_sqlite, "write", lambda a, p: called.append(f"sqlite {p.name}"))
    monkeypatch.setattr(database, "write", lambda a, p: called.append(f"pickle {p.name}"))
    parquet = type(sys)("fr_analyzer.render.database_parquet")
    parquet.write = lambda a, p: called.append(f"parquet {p.name}")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fr_analyzer.render.database_parquet", parquet)
    import fr_analyzer.render

    monkeypatch.setattr(fr_analyzer.render, "database_parquet", parquet, raising=False)
    for name in ("a.sqlite", "b.sqlite3", "c.db", "d.parquet", "e.pkl", "f"):
        cli.write_database(None, tmp_path / name)  # type: ignore[arg-type]
    assert called == [
        "sqlite a.sqlite",
        "sqlite b.sqlite3",
        "sqlite c.db",
        "parquet d.parquet",
        "pickle e.pkl",
        "pickle f",
    ]


def test_an_output_that_fails_after_the_analysis_keeps_the_verdicts_exit_code(
    fr: Fr, monkeypatch: pytest.MonkeyPatch, desynced: Path, healthy: Path, tmp_path: Path
) -> None:
    """A write that fails late (a full disk) is one line; the other outputs are still
    written; the code is the verdict's when it found a problem, else 2 (never 0)."""
    from fr_analyzer.errors import OutputError
    from fr_analyzer.render import database

    def full(analysis: object, path: Path) -> None:
        raise OutputError(f"{path}: cannot write: No space left on device")

    monkeypatch.setattr(database, "write", full)
    report = tmp_path / "r.json"
    hung = fr(str(desynced), "-o", str(tmp_path / "db.pkl"), "--json", str(report))
    assert hung.returncode == 1
    assert hung.stderr.splitlines()[-2] == (
        f"fr-analyze: error: {tmp_path / 'db.pkl'}: cannot write: No space left on device"
    )
    assert json.loads(report.read_text())["verdict"]["status"] == "hung"
    ok = fr(str(healthy), "-o", str(tmp_path / "db.pkl"))
    assert ok.returncode == 2 and "OK." in ok.stdout


def test_html_report_is_written_atomically_and_said(fr: Fr, desynced: Path, tmp_path: Path) -> None:
    pytest.importorskip("fr_analyzer.render.report_html")
    page = tmp_path / "report.html"
    result = fr(str(desynced), "--html", str(page))
    assert result.returncode == 1, result.stderr
    assert page.read_text().lstrip().lower().startswith("<!doctype html")
    assert result.stderr == f"wrote {page} ({cli.human_size(page.stat().st_size)})\n"


# --- subcommands ----------------------------------------------------------------------------


@pytest.mark.parametrize("how", [["DIR"], ["-d", "DIR"]])
def test_timeline_takes_the_dump_directory_as_argument_or_with_d(
    fr: Fr, how: list[str], desynced: Path, tmp_path: Path
) -> None:
    out = tmp_path / "tl.json"
    args = [str(desynced) if a == "DIR" else a for a in how]
    result = fr("timeline", *args, "-o", str(out))
    assert result.returncode == 1, result.stderr  # the analysis' code: the dumps desync
    assert "traceEvents" in json.loads(out.read_text())
    assert result.stderr.startswith(f"wrote {out} (") and "op slices" in result.stderr


def test_timeline_all_is_passed_through(
    fr: Fr, monkeypatch: pytest.MonkeyPatch, desynced: Path, tmp_path: Path
) -> None:
    from fr_analyzer.render import timeline

    if "all_ranks" not in {f.name for f in dataclasses.fields(timeline.TimelineOptions)}:
        pytest.skip("timeline.TimelineOptions has no all_ranks field yet")
    seen: list[bool] = []
    build = timeline.build

    def spy(analysis: pipeline.Analysis, options: timeline.TimelineOptions) -> object:
        seen.append(options.all_ranks)
        return build(analysis, options)

    monkeypatch.setattr(timeline, "build", spy)
    assert fr("timeline", str(desynced), "--all", "-o", str(tmp_path / "a.json")).returncode == 1
    assert fr("timeline", str(desynced), "-o", str(tmp_path / "b.json")).returncode == 1
    assert seen == [True, False]


def test_merge_traces_takes_directories_of_traces_as_arguments(fr: Fr, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for rank in (0, 1):
        trace = {
            "distributedInfo": {"rank": rank},
            "baseTimeNanoseconds": 1_000_000_000,
            "traceEvents": [
                {"ph": "X", "name": "step", "ts": 10.0, "dur": 5.0, "pid": 1, "tid": 1}
            ],
        }
        (traces / f"rank{rank}.json").write_text(json.dumps(trace))
    out = tmp_path / "merged.json"
    result = fr("merge-traces", str(traces), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout and out.exists()


# --- progress -------------------------------------------------------------------------------


def test_the_pipeline_reports_loading_then_each_stage_of_the_analysis(desynced: Path) -> None:
    seen: list[tuple[str, int, int]] = []
    pipeline.analyze(desynced, pipeline.Options(workers=1), lambda *a: seen.append(a))
    loading = [s for s in seen if s[0] == pipeline.LOADING]
    analyzing = [s for s in seen if s[0] == pipeline.ANALYZING]
    assert loading[-1] == (pipeline.LOADING, 2, 2)
    assert [d for _, d, _ in analyzing] == list(range(pipeline.ANALYSIS_STAGES + 1))
    assert seen.index(loading[-1]) < seen.index(analyzing[0])


def test_progress_bars_draw_on_a_terminal_and_not_on_a_pipe(desynced: Path) -> None:
    from rich.console import Console

    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)
    with cli.progress_bars(console) as progress:
        assert progress is not None
        pipeline.analyze(desynced, pipeline.Options(workers=1), progress)
        console.file.flush()
    assert "loading dumps" in screen.getvalue() or "matching" in screen.getvalue()
    with cli.progress_bars() as none:  # stderr is not a terminal under pytest
        assert none is None


# --- help -----------------------------------------------------------------------------------


def test_help_has_examples_exit_codes_and_whole_command_summaries(fr: Fr) -> None:
    text = fr("--help").stdout
    assert "Examples:" in text and "Exit codes:" in text
    codes = text[text.index("Exit codes:") :]
    for code in ("0  the answer is ok", "1  a problem was found", "2  bad usage"):
        assert code in codes
    summaries = text[text.index("Commands:") : text.index("Examples:")]
    assert "..." not in summaries
    for name in ("live", "timeline", "merge-traces"):
        assert f"  {name}  " in summaries.replace("  " * 3, "  ")
    assert max(len(line) for line in text.splitlines()) <= 80


def test_every_command_has_help_text() -> None:
    import typer

    group = typer.main.get_group(cli.app)
    assert group.help
    for name, command in group.commands.items():
        assert command.help and command.short_help, name
        for param in command.params:
            assert getattr(param, "help", None), f"{name} {param.name}"


def test_install_completion_writes_the_users_shell_completion(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "SHELL": "/bin/bash",
    }
    # typer finds the user's shell among the command's parents: run it from bash, as a user
    # does (the suite itself may run under no shell at all, its parents gone)
    done = subprocess.run(
        ["/bin/bash", "-c", '"$0" -m fr_analyzer --install-completion; exit $?', sys.executable],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    script = (tmp_path / ".bash_completions" / "fr-analyze.sh").read_text()
    assert "_fr_analyze_completion" in script
    assert ".bash_completions/fr-analyze.sh" in (tmp_path / ".bashrc").read_text()
