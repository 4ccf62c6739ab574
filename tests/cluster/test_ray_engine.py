"""`--engine ray`: the ranks read on a real Ray cluster give the report one process gives.

A Ray head is started for this module with `ray start --head --block` on 127.0.0.1, in its
own session, temp folder and process group, and stopped after it by its pids (never `ray
stop`). Where Ray cannot be imported, every test here skips in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import kept as kept_stage
from fr_analyzer.cli.app import run
from fr_analyzer.cluster import Cluster, RayEngine, connect, shard_size
from fr_analyzer.cluster.kept import ClusterRows
from fr_analyzer.cluster.shards import KEEP_FACTOR, PART_ROW_BYTES
from fr_analyzer.diagnosis import Thresholds, series
from fr_analyzer.load import Directory
from fr_analyzer.match import cutting, match
from fr_analyzer.model.groups import build_groups, grouped
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.pipeline import Options, analyze, analyze_series, load
from fr_analyzer.render import database, database_parquet, report_html, timeline
from fr_analyzer.render.entries_view import EntriesView, render_analysis, showing
from fr_analyzer.render.renderer import for_database
from fr_analyzer.render.report_json import report_dict
from fr_analyzer.render.timeline import TimelineOptions
from tests.builders import make_dump, make_entry, write_dumps
from tests.diagnosis.test_stragglers import SLOW
from tests.match.test_partitions import assert_same_match
from tests.model.test_profile import assert_same_profiles
from tools import ray_head
from tools.frsim.campaign import draw_case, parse_shapes
from tools.ray_head import QUIET, free_port

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'fr-analyze[ray]')")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_dumps"
SOME = (
    "nccl3d_skip_world",
    "gloo3d_pp_recv_missing",
    "nccl_straggler",
    "barrier_skipped",
    "torchcomms_healthy",
    "nccl_coalesced",
    "moe_split_mismatch",
    "nccl_missing_dump",
)
"""Sample sets of every kind of rule, for the tests that need not run all of them."""


@pytest.fixture(scope="module")
def head() -> Iterator[str]:
    """The address of a Ray head started for this module on 127.0.0.1 (`tools.ray_head`)."""
    with ray_head.head() as running:
        yield running.address


@pytest.fixture(scope="module")
def cluster(head: str) -> Iterator[Cluster]:
    """This process joined to the head (as the driver of the runs below)."""
    with ray_head.quiet(), connect(head) as joined:
        yield joined


def _report(where: Path, options: Options) -> dict[str, Any]:
    doc = report_dict(analyze(Directory(where), options))
    doc["dumps"].pop("engine")
    return doc


def test_every_sample_set_gives_the_same_report_on_ray_with_no_table_in_the_driver(
    cluster: Cluster,
) -> None:
    # (a small job's diagnosis reads most of its rows: every row is fetched, which
    # `test_a_driver_with_no_table_fetches_only_the_rows_its_diagnosis_holds` avoids)
    sets = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    assert len(sets) >= 60
    engine = RayEngine(cluster, rows_in_driver=False)
    differ = []
    for s in sets:
        if _report(s, Options(engine=engine)) != _report(s, Options()):
            differ.append(s.name)
        assert engine.matched == "from the shards, kept", s.name
    assert differ == []


def _drawn(seed: int, where: Path) -> Path:
    draw_case(seed, parse_shapes("all"), None).write(where, None)
    return where


def test_the_straggler_rule_runs_its_passes_as_tasks_and_decides_as_one_process(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # slow jobs (a straggler, stalls), a healthy one, and drawn 3D jobs with a stall; each
    # at the default thresholds and at none (every late arrival weighed), its shards of two
    # ranks (tests/diagnosis/test_stragglers.py runs the passes over more, in one process)
    jobs = [SAMPLES / n for n in (*SLOW, "gloo_healthy")]
    jobs += [_drawn(seed, tmp_path / str(seed)) for seed in (22, 213)]
    thresholds = [Thresholds(), Thresholds(straggler_ms=0.0, stall_ms=0.0)]
    alone = {(j, t): _report(j, Options(thresholds=t)) for j in jobs for t in thresholds}
    assert {alone[j, thresholds[0]]["verdict"]["status"] for j in jobs} == {"slow", "ok"}

    def whole_table(*args: object) -> None:
        raise AssertionError("the driver ran the straggler rule over every row")

    monkeypatch.setattr("fr_analyzer.diagnosis.stragglers.find", whole_table)
    engine = RayEngine(cluster, shard=2, rows_in_driver=False)
    differ = [
        (j.name, t)
        for j in jobs
        for t in thresholds
        if _report(j, Options(engine=engine, thresholds=t)) != alone[j, t]
    ]
    assert differ == []


def test_a_straggler_pass_failed_past_its_retries_reads_every_row_and_answers_the_same(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = SAMPLES / "nccl_straggler"
    alone = _report(where, Options())

    def lost(*args: object) -> None:
        raise ray.exceptions.RayError("a worker was lost past its retries")

    monkeypatch.setattr("fr_analyzer.cluster.kept.summary", lost)
    engine = RayEngine(cluster, rows_in_driver=False)
    assert _report(where, Options(engine=engine)) == alone
    assert alone["verdict"]["status"] == "slow"


@pytest.mark.parametrize("name", ["stuck_series", "healthy_series"])
def test_snapshots_compared_on_ray_are_summed_up_where_they_lie_and_give_the_same_report(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # each snapshot summed up in a task per shard (each rank's mark), the step measured on
    # the few ranks' rows fetched; the rows of every snapshot but the newest let go
    where = REPO / "tests" / "data" / "live" / name
    engine = RayEngine(cluster, rows_in_driver=False)
    released: list[object] = []
    monkeypatch.setattr(ClusterRows, "release", lambda self: released.append(self))
    snapshots = len(series.snapshot_folders(where) or [])
    assert snapshots >= 2
    on_ray = _report(where, Options(engine=engine))
    assert on_ray == _report(where, Options())
    # every older snapshot's, then the newest's once its analysis was over
    assert len(released) == len(set(map(id, released))) == snapshots


def test_snapshots_given_in_any_order_on_ray_analyze_the_newest(
    cluster: Cluster, tmp_path: Path
) -> None:
    # the newest snapshot read first: its rows, not the last read's, are matched
    where = REPO / "tests" / "data" / "live" / "stuck_series"
    folders = series.snapshot_folders(where)
    assert folders is not None
    engine = RayEngine(cluster, rows_in_driver=False)
    backwards = analyze_series(folders[::-1], Options(engine=engine))
    alone = analyze_series(folders, Options())
    assert report_dict(backwards)["verdict"] == report_dict(alone)["verdict"]
    assert backwards.series == alone.series


def test_sample_sets_give_the_same_report_on_ray_with_the_table_in_the_driver(
    cluster: Cluster,
) -> None:
    engine = RayEngine(cluster)  # for the outputs that show entries (-o, --html, -j)
    sets = [SAMPLES / n for n in SOME]
    differ = [s.name for s in sets if _report(s, Options()) != _report(s, Options(engine=engine))]
    assert differ == []


def _generated(where: Path, fault: str) -> Path:
    """The benchmark's 3D job (tensor, pipeline and data parallel, 2,000 entries a rank) at
    64 ranks, with `fault`."""
    subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.gen", "--ranks", "64", "--fault", fault),
            *("--writer", "pickle", "--workers", "1", "--out", str(where)),
        ],
        check=True,
        capture_output=True,
        cwd=REPO,
        timeout=120,
    )
    (job,) = where.glob("*/dumps")
    return job


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`_generated`, each fault's job made once for the module (the tests only read it)."""
    made: dict[str, Path] = {}

    def job(fault: str) -> Path:
        if fault not in made:
            made[fault] = _generated(tmp_path_factory.mktemp(fault), fault)
        return made[fault]

    return job


@pytest.mark.parametrize(("fault", "status"), [("not_joined", "hung"), ("none", "ok")])
def test_a_driver_with_no_table_fetches_only_the_rows_its_diagnosis_holds(
    cluster: Cluster, generated: Callable[[str], Path], fault: str, status: str
) -> None:
    # the benchmark's 3D job (tensor, pipeline and data parallel, 2,000 entries a rank) at
    # 64 ranks: one rank that never joined a collective (hung), or healthy (the straggler
    # rule weighs every completed op, in tasks)
    job = generated(fault)
    alone = _report(job, Options())
    assert alone["verdict"]["status"] == status
    engine = RayEngine(cluster, rows_in_driver=False)
    on_ray = _report(job, Options(engine=engine))
    assert on_ray == alone
    kept = engine.kept_rows()
    assert kept is not None
    assert on_ray["stats"]["entries"] == 64 * 2000
    # the frontier's rows, then the programs the rules read: never the whole job
    assert 0 < kept.most_fetched < 64 * 2000 // 2
    assert kept.finals == {} and kept.kept == []  # released once the analysis was over


@pytest.mark.parametrize("name", ["nccl3d_skip_world", "gloo3d_pp_recv_missing", "hccl_healthy"])
def test_the_groups_of_each_description_are_matched_in_a_task_and_merged_as_one_process_matches(
    cluster: Cluster, name: str
) -> None:
    got = load(Directory(SAMPLES / name), Options(workers=1))
    groups = build_groups(got.dumps, got.table, got.unreadable)
    assert len(cutting.families(grouped(got.table, groups, profiles_of(got.table)), groups)) >= 3
    retired = got.table.retired.copy()
    whole = match(got.dumps, got.table, groups)
    got.table.retired[:] = retired
    on_ray = match(got.dumps, got.table, groups, RayEngine(cluster).match_runner())
    assert_same_match(on_ray, whole)


def test_the_parts_are_gathered_from_the_shards_in_the_store_not_from_the_driver(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def sorted_by_part(*args: object) -> None:
        raise AssertionError("the driver sorted the table's rows by part")

    # the tasks number their parts' rows from the shards: the driver never finds them
    monkeypatch.setattr("fr_analyzer.match.partitions.PartRows.of", sorted_by_part)
    engine = RayEngine(cluster, shard=2)
    sets = [SAMPLES / n for n in ("nccl3d_skip_world", "gloo3d_pp_recv_missing", "moe_healthy")]
    for where in sets:
        on_ray = report_dict(analyze(Directory(where), Options(engine=engine)))
        assert engine.matched == "from the shards", where.name
        on_ray["dumps"].pop("engine")
        assert on_ray == _report(where, Options()), where.name
        assert not any("Ray task" in w for w in on_ray["dumps"]["warnings"])


def test_the_tasks_that_read_the_ranks_profile_them_as_the_table_would(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # shards of two ranks, so that the driver joins the profiles of many tasks
    engine = RayEngine(cluster, shard=2)
    made: list[object] = []
    monkeypatch.setattr("fr_analyzer.pipeline.profiles_of", lambda t: made.append(t))
    for name in ("nccl3d_skip_world", "gloo3d_pp_recv_missing", "nccl_coalesced", "moe_healthy"):
        got = load(Directory(SAMPLES / name), Options(engine=engine))
        assert got.profiles is not None
        assert_same_profiles(got.profiles, profiles_of(got.table))
        _report(SAMPLES / name, Options(engine=engine))
    assert made == []  # the analysis took the tasks' profiles, never made its own


def test_a_job_too_large_to_keep_lets_its_shards_go_and_one_with_too_large_a_group_is_matched_whole(
    cluster: Cluster,
) -> None:
    where = SAMPLES / "nccl3d_skip_world"  # 495 rows; its largest group holds 64
    small = replace(cluster, task_memory=PART_ROW_BYTES * 20)  # parts of 20 rows at most
    engine = RayEngine(small, shard=2)
    got = load(Directory(where), Options(engine=engine))
    assert got.table.n > KEEP_FACTOR * 20
    assert engine.shards_kept == 0  # let go as read
    assert _report(where, Options(engine=engine)) == _report(where, Options())
    assert engine.matched == ""  # matched whole in the driver: no part was cut

    engine = RayEngine(replace(cluster, task_memory=PART_ROW_BYTES * 50), shard=2)
    load(Directory(where), Options(engine=engine))
    assert engine.shards_kept > 0  # kept for the shuffle while reading
    assert _report(where, Options(engine=engine)) == _report(where, Options())
    assert engine.matched == "" and engine.shards_kept == 0  # a group of 64: let go, whole

    # with no table in the driver, a group larger than a task takes: every row fetched, the
    # job matched whole here
    engine = RayEngine(small, shard=2, rows_in_driver=False)
    assert _report(where, Options(engine=engine)) == _report(where, Options())
    kept = engine.kept_rows()
    assert kept is not None and kept.fetched == 495 and engine.matched == ""


def test_a_family_too_large_for_a_task_is_matched_in_parts_of_its_groups_that_ask_each_other(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the tensor-parallel family holds 392 rows, its largest group 100; the data-parallel
    # pair of ranks 2 and 6 ties on sizes, and the other pairs, in other parts, settle it
    where = SAMPLES / "nccl3d_dp_pair_mismatch"
    one_process = _report(where, Options())

    def sorted_by_part(*args: object) -> None:
        raise AssertionError("the driver sorted the table's rows by part to copy a part")

    # every round's parts are the blocks the shards were split into: none copied from the table
    monkeypatch.setattr("fr_analyzer.match.partitions.PartRows.of", sorted_by_part)
    engine = RayEngine(replace(cluster, task_memory=PART_ROW_BYTES * 100), shard=2)
    on_ray = _report(where, Options(engine=engine))
    assert engine.matched == "from the shards"
    assert engine.rounds == 2  # the parts asked about answer; the parts that asked, again
    assert engine.copied_rounds == 0
    assert engine.parts_kept == 0  # the blocks left the store once the rounds were over
    assert on_ray == one_process
    assert not any("Ray task" in w for w in on_ray["dumps"]["warnings"])

    # with no table in the driver: the same rounds, the parts' results left in the store
    engine = RayEngine(
        replace(cluster, task_memory=PART_ROW_BYTES * 100), shard=2, rows_in_driver=False
    )
    assert _report(where, Options(engine=engine)) == one_process
    assert engine.matched == "from the shards, kept"
    assert engine.rounds == 2


def test_the_table_kept_out_of_core_on_ray_gives_the_report_one_process_gives(
    cluster: Cluster, tmp_path: Path
) -> None:
    engine = RayEngine(cluster)
    sets = [SAMPLES / name for name in ("nccl3d_p2p_mismatch", "gloo3d_crash", "nccl_coalesced")]
    out_of_core = Options(engine=engine, table_dir=tmp_path)
    differ = [s.name for s in sets if _report(s, Options()) != _report(s, out_of_core)]
    assert differ == []
    assert list(tmp_path.iterdir()) == []  # every column's file removed once mapped


def test_the_header_says_which_cluster_read_the_ranks(cluster: Cluster, head: str) -> None:
    doc = report_dict(
        analyze(Directory(SAMPLES / "nccl_not_joined"), Options(engine=RayEngine(cluster)))
    )
    assert doc["dumps"]["engine"] == f"read on the Ray cluster at {head} (1 node, 2 CPUs)"
    alone = report_dict(analyze(Directory(SAMPLES / "nccl_not_joined"), Options()))
    assert alone["dumps"]["engine"] == "one process"


def test_the_command_line_joins_the_cluster_and_exits_as_one_process_does(head: str) -> None:
    env = {**os.environ, **QUIET, "COLUMNS": "200"}
    base = [sys.executable, "-m", "fr_analyzer", "-d", str(SAMPLES / "nccl_not_joined")]
    alone = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    on_ray = subprocess.run(
        [*base, "--engine", "ray", "--ray-address", head],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert on_ray.returncode == alone.returncode == 1
    assert f"(read on the Ray cluster at {head} (1 node, 2 CPUs))" in on_ray.stdout

    def without_source(text: str) -> list[str]:  # the line that names where the dumps were read
        return [line for line in text.splitlines() if not line.startswith("fr-analyze 1.0.0: ")]

    assert without_source(on_ray.stdout) == without_source(alone.stdout)
    assert "Traceback" not in on_ray.stderr


P2P = ("nccl_p2p_pipeline", "nccl_batched_p2p", "nccl3d_p2p_mismatch", "gloo3d_healthy")
"""Sample sets of send/recv pairs matched in order, batched and mismatched."""


def test_sample_sets_give_one_process_database_from_rows_kept_on_the_cluster(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the driver holds no table: the database takes every entry a chunk of rows at a time
    # (chunks of 53 rows here, so that each set takes several), each chunk's rows fetched
    # and its outcome of matching taken of the parts' results where they lie
    # (the pickle: every table, row for row, the calls' rows appended a chunk at a time)
    monkeypatch.setattr(kept_stage, "CHUNK_ROWS", 53)
    engine = RayEngine(cluster, rows_in_driver=False)
    differ = []
    for s in (SAMPLES / name for name in (*SOME, *P2P)):
        on_ray = analyze(Directory(s), Options(engine=engine, keep_rows=True))
        assert on_ray.calls is not None, s.name
        database.write(on_ray, tmp_path / "ray.pkl")
        alone = database.build(analyze(Directory(s), Options()))
        with (tmp_path / "ray.pkl").open("rb") as f:
            if pickle.load(f) != alone:
                differ.append(s.name)
    assert differ == []


VIEWS = (
    EntriesView(),  # around the root, or each group's newest ids where there is none
    EntriesView(around_root=False),  # every entry of every group
    EntriesView(around_root=False, last=2, stack=True),
    EntriesView(context=0, ranks=(0, 1, 3)),
)
"""Side-by-side views (`-j`) of each kind: the rows each chooses differ."""


def test_what_each_output_shows_on_ray_is_fetched_and_is_one_process_s(
    cluster: Cluster,
) -> None:
    # the rows kept on the cluster, each output takes what it shows (the rest is the
    # report's; all 60 sets agreed when written):
    # - the HTML page: the culprit's stack set against its peers' at the same op (that op's
    #   collective, or its send/recv sequence id, in every group of its family: `calls.held`)
    # - `-j`: each part chooses its groups' rows shown (`model.shown`) in a task, the driver
    #   fetches those alone and draws the view one process draws of its table
    # - the timeline: the job's extent summed up in a task per shard, then the whole
    #   programs of the ranks drawn fetched: every rank, or a window's past `window_past`
    engine = RayEngine(cluster, rows_in_driver=False)
    differ = []
    for s in (SAMPLES / name for name in (*SOME, *P2P)):
        on_ray = analyze(Directory(s), Options(engine=engine, keep_rows=True))
        assert on_ray.calls is not None, s.name
        alone = analyze(Directory(s), Options())
        if report_html.page_data(on_ray) != report_html.page_data(alone):
            differ.append((s.name, "html"))
        for view in VIEWS:
            if render_analysis(on_ray, view).plain != render_analysis(alone, view).plain:
                differ.append((s.name, str(view)))
        for options in (TimelineOptions(), TimelineOptions(window_past=2)):
            if timeline.build(on_ray, options) != timeline.build(alone, options):
                differ.append((s.name, f"timeline past {options.window_past}"))
    assert differ == []


def test_the_entries_side_by_side_of_a_large_job_on_ray_fetch_only_the_rows_shown(
    cluster: Cluster, generated: Callable[[str], Path]
) -> None:
    # the benchmark's job at 64 ranks x 2,000 entries: the driver holds no table and fetches
    # the rows around the root alone
    job = generated("not_joined")
    engine = RayEngine(cluster, rows_in_driver=False)
    on_ray = analyze(Directory(job), Options(engine=engine, keep_rows=True))
    kept = engine.kept_rows()
    assert kept is not None and on_ray.calls is not None
    before = kept.fetched
    chosen = showing(on_ray.groups, EntriesView(), on_ray.conclusion.root)
    table, shown = on_ray.calls.shown(chosen)
    assert table.n == len(shown.rows) == kept.fetched - before
    assert 0 < table.n <= 64 * 7  # the root's group, its seq ids either side
    view = EntriesView(width=200)
    printed = render_analysis(on_ray, view).plain
    assert printed == render_analysis(analyze(Directory(job), Options()), view).plain
    assert "!" in printed  # the rank that never joined, marked


def test_every_output_of_out_dir_and_j_on_ray_are_one_process_s(head: str, tmp_path: Path) -> None:
    # the command line on Ray keeps the rows there for every output: --out-dir writes every
    # file one process writes (the header's engine aside), -j prints its view
    where = SAMPLES / "nccl3d_p2p_mismatch"
    env = {**os.environ, **QUIET, "COLUMNS": "200"}
    on_ray = ["--engine", "ray", "--ray-address", head]
    printed = ""
    for args in (["--out-dir", "ray", *on_ray], ["--out-dir", "alone"], ["-j", *on_ray]):
        done = subprocess.run(
            [sys.executable, "-m", "fr_analyzer", "-d", str(where), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            cwd=tmp_path,
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        printed = done.stdout
    alone = analyze(Directory(where), Options())
    assert printed == render_analysis(alone, EntriesView(width=200)).plain
    ray_dir, alone_dir = tmp_path / "ray", tmp_path / "alone"
    timelines = [(d / "timeline.json").read_bytes() for d in (ray_dir, alone_dir)]
    assert timelines[0] == timelines[1]
    # (written a chunk at a time on Ray: another pickle protocol, the same tables)
    assert _database_rows(ray_dir / "db.pkl") == _database_rows(alone_dir / "db.pkl")
    reports = [json.loads((d / "report.json").read_text()) for d in (ray_dir, alone_dir)]
    for doc in reports:
        doc["dumps"].pop("engine")
        doc.pop("timing", None)
    assert reports[0] == reports[1]


def test_each_database_on_ray_streams_the_entries_and_is_one_process(
    head: str, tmp_path: Path
) -> None:
    env = {**os.environ, **QUIET}
    where = SAMPLES / "nccl3d_skip_world"
    alone = analyze(Directory(where), Options())  # one process, here
    for suffix in (".pkl", ".parquet", ".sqlite"):
        db = tmp_path / f"ray{suffix}"
        on_ray = ["--engine", "ray", "--ray-address", head]
        done = subprocess.run(
            [sys.executable, "-m", "fr_analyzer", "-d", str(where), "-o", str(db), *on_ray],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        for_database(db).render(alone, tmp_path / f"alone{suffix}")
        assert _database_rows(db) == _database_rows(tmp_path / f"alone{suffix}"), suffix
        assert len(_database_rows(db)["nccl_calls"]) > 0


def _database_rows(db: Path) -> dict[str, list[Any]]:
    if db.suffix == ".pkl":
        return {name: table.rows for name, table in database.load_db(db).tables.items()}
    if db.suffix == ".parquet":
        return {name: table.to_pylist() for name, table in database_parquet.read_tables(db).items()}
    with contextlib.closing(sqlite3.connect(db)) as connection:
        names = [
            n for (n,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        return {
            name: connection.execute(f"SELECT * FROM {name} ORDER BY rowid").fetchall()
            for name in names
        }


def test_a_cluster_that_does_not_answer_is_one_error_and_exit_2() -> None:
    # in a process of its own: this one may be a driver of the module's cluster already
    silent = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    command = [sys.executable, "-m", "fr_analyzer", "-d", str(SAMPLES / "nccl_healthy")]
    done = subprocess.run(
        [*command, "--engine", "ray", "--ray-address", silent],
        capture_output=True,
        text=True,
        env={**os.environ, **QUIET},
        timeout=120,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 2  # the error and its hint
    assert done.stderr.splitlines()[0].endswith(
        f"the Ray cluster at {silent} does not answer (Connection refused)"
    )
    assert time.monotonic() - started < 30


def test_a_process_already_connected_is_not_connected_again(cluster: Cluster) -> None:
    from fr_analyzer.cluster import ClusterError

    with pytest.raises(ClusterError, match="already connected"), connect(None):
        pass
    assert ray.is_initialized()  # the module's connection is left as it was


def test_ray_not_installed_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    code = run(["-d", str(SAMPLES / "nccl_healthy"), "--engine", "ray"])
    err = capsys.readouterr().err
    assert code == 2
    assert "pip install 'fr-analyze[ray]'" in err
    assert len(err.strip().splitlines()) == 2  # the error and its hint


def test_ray_address_without_the_ray_engine_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["-d", str(SAMPLES / "nccl_healthy"), "--ray-address", "127.0.0.1:1"])
    assert code == 2
    assert "--ray-address goes with --engine ray" in capsys.readouterr().err


def _job(tmp_path: Path, ranks: int, entries: int) -> Path:
    """A healthy job of `ranks` ranks, each with `entries` all_reduces on the world."""
    dumps = {
        rank: make_dump(
            [make_entry("all_reduce", i + 1) for i in range(entries)],
            groups={"0": ("default_pg", list(range(ranks)))},
        )
        for rank in range(ranks)
    }
    return write_dumps(tmp_path / "job", dumps)


def _title(pid: int | str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _parent(pid: int | str) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat[stat.rindex(")") + 2 :].split()[1])


class _Killer(threading.Thread):
    """Kills, by its pid, the first Ray worker seen running `task` (by default one reading a
    shard, `ray::read_shard`; not its sandboxed reader, a fork that carries the same title)."""

    def __init__(self, limit_s: float = 60.0, task: bytes = b"ray::read_shard") -> None:
        super().__init__(daemon=True)
        self.killed: int | None = None
        self.stop = threading.Event()
        self.limit_s = limit_s
        self.task = task

    def run(self) -> None:
        deadline = time.monotonic() + self.limit_s
        while not self.stop.is_set() and time.monotonic() < deadline:
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                if not _title(entry.name).startswith(self.task):
                    continue
                if not _title(_parent(entry.name)).startswith(self.task):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(entry.name), signal.SIGKILL)
                        self.killed = int(entry.name)
                        return
            time.sleep(0.005)


def test_a_worker_killed_mid_run_is_retried_and_the_answer_still_comes(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(tmp_path, 96, 300)
    alone = _report(job, Options())
    killer = _Killer()
    killer.start()
    try:
        on_ray = _report(job, Options(engine=RayEngine(cluster, shard=8, rows_in_driver=False)))
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed is not None
    assert on_ray == alone
    assert on_ray["dumps"]["unreadable"] == []
    assert len(on_ray["dumps"]["ranks_loaded"]) == 96
    time.sleep(1)  # Ray's driver gets the cluster's error events a moment later
    assert "worker died" not in capsys.readouterr().out  # stdout is the report's


def _two_families(tmp_path: Path, ranks: int, entries: int) -> Path:
    """A healthy job of `ranks` ranks, each with `entries` all_reduces on the world and as
    many on its pair of ranks (groups of two descriptions: two parts to match)."""
    world = list(range(ranks))
    dumps = {}
    for rank in range(ranks):
        pair = [rank - rank % 2, rank - rank % 2 + 1]
        ops = []
        for i in range(entries):
            ops.append(make_entry("all_reduce", i + 1, group=("0", "default_pg")))
            ops.append(make_entry("all_reduce", i + 1, group=("1", "tp")))
        dumps[rank] = make_dump(ops, groups={"0": ("default_pg", world), "1": ("tp", pair)})
    return write_dumps(tmp_path / "job", dumps)


def test_a_worker_killed_while_matching_is_retried_and_the_answer_still_comes(
    cluster: Cluster, tmp_path: Path
) -> None:
    job = _two_families(tmp_path, 128, 1000)
    alone = _report(job, Options())
    engine = RayEngine(cluster, rows_in_driver=False)  # as the command line runs it
    for _ in range(3):  # a part's task lasts a fraction of a second: the killer may miss it
        killer = _Killer(task=b"ray::match_kept")
        killer.start()
        try:
            on_ray = _report(job, Options(engine=engine))
        finally:
            killer.stop.set()
            killer.join()
        assert engine.matched == "from the shards, kept"
        assert on_ray == alone  # no part matched in the driver instead: Ray's retry answered
        if killer.killed is not None:
            break
    assert killer.killed is not None


def test_a_shard_lost_past_its_retries_leaves_its_ranks_unreadable_and_the_rest_analyzed(
    cluster: Cluster, tmp_path: Path
) -> None:
    job = _job(tmp_path, 96, 300)
    killer = _Killer()
    killer.start()
    try:
        doc = report_dict(
            analyze(Directory(job), Options(engine=RayEngine(cluster, shard=8, retries=0)))
        )
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed is not None
    lost = doc["dumps"]["unreadable"]
    assert 1 <= len(lost) <= 8 * 2  # the shard (or two) its worker was reading
    assert all(u["reason"].startswith("the Ray task reading it failed: ") for u in lost)
    assert len(doc["dumps"]["ranks_loaded"]) + len(lost) == 96
    assert doc["verdict"]["status"] != "ok" or not lost


def test_ctrl_c_cancels_the_tasks_and_leaves_the_cluster_usable(
    cluster: Cluster, tmp_path: Path
) -> None:
    job = _job(tmp_path, 64, 50)

    def interrupt(phase: str, done: int, total: int) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        analyze(Directory(job), Options(engine=RayEngine(cluster, shard=8)), interrupt)
    doc = _report(job, Options(engine=RayEngine(cluster, shard=8)))
    assert len(doc["dumps"]["ranks_loaded"]) == 64


def test_a_damaged_file_read_in_a_worker_is_unreadable_with_its_reason(
    cluster: Cluster, tmp_path: Path
) -> None:
    job = _job(tmp_path, 16, 10)
    damaged = next(job.glob("*_3*"))
    damaged.write_bytes(b"\x80\x04not a pickle")
    alone = _report(job, Options())
    on_ray = _report(job, Options(engine=RayEngine(cluster)))
    assert on_ray == alone
    assert [u["rank"] for u in on_ray["dumps"]["unreadable"]] == [3]


@pytest.mark.parametrize(
    ("ranks", "cpus", "size"), [(8, 2, 8), (1024, 2, 128), (65_536, 2, 512), (65_536, 512, 32)]
)
def test_shards_are_sized_for_the_cluster(ranks: int, cpus: int, size: int) -> None:
    assert shard_size(ranks, cpus) == size


def test_the_report_json_names_the_engine(cluster: Cluster) -> None:
    text = json.dumps(
        report_dict(
            analyze(Directory(SAMPLES / "nccl_healthy"), Options(engine=RayEngine(cluster)))
        )
    )
    assert '"engine": "read on the Ray cluster at' in text


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """sample_dumps/ served over HTTP on 127.0.0.1 by a server this test starts and stops."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=SAMPLES,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)


def test_a_url_is_fetched_by_the_workers_themselves(cluster: Cluster, served: str) -> None:
    from fr_analyzer.load import open_source

    url = f"{served}/nccl_not_joined/"
    alone = report_dict(analyze(open_source(url), Options()))
    on_ray = report_dict(analyze(open_source(url), Options(engine=RayEngine(cluster))))
    assert on_ray["dumps"].pop("engine") != alone["dumps"].pop("engine")
    assert on_ray == alone
    assert on_ray["verdict"]["culprit_ranks"] == alone["verdict"]["culprit_ranks"] != []


def test_an_archive_is_refused_in_one_line(cluster: Cluster, tmp_path: Path) -> None:
    import tarfile

    from fr_analyzer.errors import UsageError
    from fr_analyzer.load import open_source

    archive = tmp_path / "dumps.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(SAMPLES / "nccl_healthy", arcname="nccl_healthy")
    with pytest.raises(UsageError, match="drop --engine ray, or extract it"):
        analyze(open_source(str(archive)), Options(engine=RayEngine(cluster)))
