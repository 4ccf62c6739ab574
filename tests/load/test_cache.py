"""The user's cache of ranks read: the next command on the same dumps reads it, gives the
same report, and trusts nothing it did not write itself."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
import stat
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer.cli import merge_traces as cli_merge_traces
from fr_analyzer.cli import options as cli_options
from fr_analyzer.cli import timeline as cli_timeline
from fr_analyzer.cli.app import run
from fr_analyzer.load import Directory, RankCache
from fr_analyzer.load import cache as cache_mod
from fr_analyzer.load.sources.base import DumpFile
from fr_analyzer.model.table import EntryTable
from fr_analyzer.pipeline import Analysis, Options, analyze, load
from fr_analyzer.render.report_json import report_dict

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A copy of a 3D job's dumps (16 ranks, a stuck rank), times kept."""
    return Path(shutil.copytree(SAMPLES / "nccl3d_stall", tmp_path / "job"))


def _report(where: Path, cache: RankCache | None) -> dict[str, Any]:
    return report_dict(analyze(Directory(where), Options(cache=cache)))


def test_the_next_run_reads_every_rank_from_the_cache_and_gives_the_same_report(
    job: Path, tmp_path: Path
) -> None:
    fresh = _report(job, None)
    first = RankCache(tmp_path / "cache")
    assert _report(job, first) == fresh
    assert (first.hits, first.stored) == (0, len(fresh["dumps"]["ranks_loaded"]))
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == fresh
    assert (again.hits, again.stored) == (len(fresh["dumps"]["ranks_loaded"]), 0)


def test_a_changed_dump_is_read_again_and_the_others_come_from_the_cache(
    job: Path, tmp_path: Path
) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    changed = sorted(job.iterdir())[3]
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10**9))
    fresh = _report(job, None)
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == fresh
    assert again.stored == 1
    assert again.hits == len(fresh["dumps"]["ranks_loaded"]) - 1


def test_a_dump_replaced_by_another_is_never_taken_from_the_cache(
    job: Path, tmp_path: Path
) -> None:
    healthy = SAMPLES / "nccl3d_mid_step"
    _report(job, RankCache(tmp_path / "cache"))
    for src in healthy.iterdir():  # the same names, other contents, the same times
        target = job / src.name
        times = target.stat()
        shutil.copyfile(src, target)
        os.utime(target, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert _report(job, RankCache(tmp_path / "cache")) == _report(job, None)


@pytest.mark.parametrize("where", [0, cache_mod.HEAD_BYTES - 1, -cache_mod.TAIL_BYTES, -1], ids=str)
def test_a_byte_changed_in_a_files_head_or_tail_changes_its_key(tmp_path: Path, where: int) -> None:
    """Its size, time and inode kept: the head and the tail (the newest entries) are hashed."""
    path = tmp_path / "rank_0"
    data = bytearray(os.urandom(100_000))
    path.write_bytes(data)
    times = path.stat()
    cache = RankCache(tmp_path / "cache")
    dump_file = DumpFile(0, path)
    before = cache._key(dump_file, "")
    data[where] ^= 1
    with open(path, "r+b") as stream:  # in place: the same inode
        stream.write(data)
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert path.stat().st_ino == times.st_ino
    assert cache._key(dump_file, "") != before


def test_the_cache_is_the_users_alone(job: Path, tmp_path: Path) -> None:
    cache = RankCache(tmp_path / "cache")
    _report(job, cache)
    root = tmp_path / "cache"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    kept = list(root.iterdir())
    assert kept and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in kept)


def test_a_folder_others_can_write_is_not_read_and_a_note_says_so(
    job: Path, tmp_path: Path
) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    (tmp_path / "cache").chmod(0o777)
    shared = RankCache(tmp_path / "cache")
    doc = _report(job, shared)
    assert shared.hits == 0
    assert any("is not this user's alone" in w for w in doc["dumps"]["warnings"])


def _one_dump_changed(job: Path, which: int = 3) -> None:
    """Touch one dump (a new modification time): the whole table misses, the other ranks are
    taken from the table one by one."""
    changed = sorted(p for p in job.iterdir() if p.suffix != ".md")[which]
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10**9))


def test_the_first_run_writes_each_rank_once_in_one_table_and_no_file_per_rank(
    job: Path, tmp_path: Path
) -> None:
    first = RankCache(tmp_path / "cache")
    _report(job, first)
    kept = sorted((tmp_path / "cache").iterdir(), key=lambda p: p.suffix)
    # the table, and beside it the analysis made of it (tests/end_to_end/test_kept_analysis.py)
    assert [p.suffix for p in kept] == [cache_mod.JOB_SUFFIX, cache_mod.KEPT_SUFFIX]
    assert (first.stored, first.hits) == (16, 0)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="cut short"),
        pytest.param(lambda data: data[:200], id="cut in its index"),
        pytest.param(lambda data: b"not a cache file", id="not ours"),
        pytest.param(
            lambda data: _table_tampered(data, lambda doc: doc["read_as"].append([99, {}])),
            id="a header as read past the ranks",
        ),
        pytest.param(
            lambda data: _table_tampered(data, lambda doc: doc.__setitem__("whole", "yes")),
            id="whole not a truth value",
        ),
    ],
)
def test_a_damaged_table_is_a_miss_for_every_rank_it_holds_and_dropped(
    job: Path, tmp_path: Path, damage: Any
) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    table = _kept_table(tmp_path / "cache")
    table.write_bytes(damage(table.read_bytes()))
    _one_dump_changed(job)
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == _report(job, None)
    assert (again.hits, again.stored) == (0, 16)
    assert table not in set((tmp_path / "cache").iterdir())  # dropped


def test_a_dump_set_read_first_opens_only_the_tables_kept_for_its_folder(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file's key holds its path: a table of files in another folder cannot index it, so
    a cache of many small sets costs a new set nothing to search."""
    elsewhere = Path(shutil.copytree(job, tmp_path / "elsewhere"))
    _report(elsewhere, RankCache(tmp_path / "cache"))
    (theirs,) = (tmp_path / "cache").glob("*" + cache_mod.JOB_SUFFIX)
    _report(job, RankCache(tmp_path / "cache"))
    opened: list[Path] = []
    index_of = cache_mod._index_of

    def spied(path: Path) -> list[bytes] | None:
        opened.append(path)
        return index_of(path)

    monkeypatch.setattr(cache_mod, "_index_of", spied)
    _one_dump_changed(job)
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == _report(job, None)
    assert again.hits == 15
    assert opened and theirs not in opened


def test_a_table_behind_a_link_is_not_read(job: Path, tmp_path: Path) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    table = _kept_table(tmp_path / "cache")
    target = tmp_path / "elsewhere.job"
    target.write_bytes(table.read_bytes())
    target.chmod(0o600)
    table.unlink()
    table.symlink_to(target)
    _one_dump_changed(job)
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == _report(job, None)
    assert again.hits == 0


def test_what_older_code_kept_is_not_taken_by_fr_analyze_changed_without_a_new_version(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edited checkout (or a reinstall) keeps its version number: its code's digest is in
    every key, so neither the table nor the analysis older code kept is taken."""
    _report(job, RankCache(tmp_path / "cache"))
    monkeypatch.setattr(cache_mod, "_made_by", lambda: "another code")
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == _report(job, None)
    assert (again.hits, again.stored) == (0, 16)


def test_the_codes_digest_changes_with_any_file_of_the_package(tmp_path: Path) -> None:
    package = Path(shutil.copytree(Path(cache_mod.__file__).parents[1], tmp_path / "pkg"))
    before = cache_mod.code_digest(package)
    (package / "__pycache__").mkdir(exist_ok=True)
    (package / "__pycache__" / "x.pyc").write_bytes(b"compiled")  # not the code
    assert cache_mod.code_digest(package) == before
    edited = package / "match" / "collectives.py"
    os.utime(edited, ns=(0, edited.stat().st_mtime_ns + 1))
    assert cache_mod.code_digest(package) != before


def test_past_its_bound_the_least_recently_used_are_dropped(job: Path, tmp_path: Path) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    sizes = [p.stat().st_size for p in (tmp_path / "cache").iterdir()]
    bound = sum(sizes) // 2
    _report(job, RankCache(tmp_path / "cache", max_bytes=bound))
    assert sum(p.stat().st_size for p in (tmp_path / "cache").iterdir()) <= bound


def test_a_table_past_the_bound_is_not_written_at_all_and_the_report_says_so(
    job: Path, tmp_path: Path
) -> None:
    small = RankCache(tmp_path / "cache", max_bytes=1024)
    done = analyze(Directory(job), Options(cache=small))
    assert list((tmp_path / "cache").iterdir()) == []  # nothing written, then dropped
    assert any("past the cache's bound" in w for w in done.summary.warnings)


def test_the_command_keeps_ranks_in_the_xdg_cache_and_no_cache_keeps_none(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert run(["-d", str(job), "--no-cache"]) == 1
    assert not (tmp_path / "xdg").exists()
    assert run(["-d", str(job)]) == 1
    kept = tmp_path / "xdg" / "fr-analyze" / "ranks"
    assert not list(kept.glob("*.rank"))  # each rank written once: in the table
    assert len(list(kept.glob("*.job"))) == 1
    assert run(["-d", str(job)]) == 1


def test_timeline_and_merge_traces_read_the_table_the_main_command_kept(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next step the report suggests (`timeline`, or `merge-traces --fr`) reads the
    ranks from the table the first run kept, not every dump again; `--no-cache` reads all."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert run(["-d", str(job)]) == 1
    made: list[RankCache | None] = []

    def kept(no_cache: bool = False) -> RankCache | None:
        made.append(cli_options.rank_cache(no_cache))
        return made[-1]

    monkeypatch.setattr(cli_timeline, "rank_cache", kept)
    monkeypatch.setattr(cli_merge_traces, "rank_cache", kept)
    assert run(["timeline", str(job), "-o", str(tmp_path / "t.json")]) == 1
    assert run(["timeline", str(job), "-o", str(tmp_path / "u.json"), "--no-cache"]) == 1
    trace = str(SAMPLES.parent / "tests" / "data" / "traces" / "gloo_4rank")
    run(["merge-traces", trace, "-o", str(tmp_path / "m.json"), "--fr", str(job)])
    first, uncached, merged = made
    assert first is not None and (first.hits, first.stored) == (16, 0)
    assert uncached is None
    assert merged is not None and merged.hits == 16


def test_a_kept_rank_with_odd_values_or_another_ranks_number_is_a_miss_not_a_failure(
    job: Path, tmp_path: Path
) -> None:
    for change in (
        lambda doc: doc["ranks"][0].update(rank=doc["ranks"][0]["rank"] + 1),  # another rank's
        lambda doc: doc["ranks"][1].update(entries="many"),  # a value of the wrong type
        lambda doc: doc["ranks"][2].update(warnings=[1, 2]),
    ):
        cache = tmp_path / "cache"
        shutil.rmtree(cache, ignore_errors=True)
        _report(job, RankCache(cache))
        table = _kept_table(cache)
        table.write_bytes(_table_tampered(table.read_bytes(), change))
        _one_dump_changed(job)
        again = RankCache(cache)
        assert _report(job, again) == _report(job, None)
        assert (again.hits, again.stored) == (0, 16)  # the whole table dropped: read again


def test_a_rank_whose_groups_do_not_fit_its_codes_is_read_again_and_the_others_kept(
    job: Path, tmp_path: Path
) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    table = _kept_table(tmp_path / "cache")
    table.write_bytes(
        _table_tampered(table.read_bytes(), lambda doc: doc["ranks"][5]["groups"].reverse())
    )
    _one_dump_changed(job)
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == _report(job, None)
    assert (again.hits, again.stored) == (14, 2)


def test_a_dump_set_with_an_unreadable_dump_keeps_its_other_ranks_once_never_as_the_answer(
    job: Path, tmp_path: Path
) -> None:
    (sorted(job.iterdir())[5]).write_bytes(b"\x80\x02 not a pickle")
    first = RankCache(tmp_path / "cache")
    fresh = _report(job, None)
    assert _report(job, first) == fresh
    assert first.stored == 15
    (table,) = (tmp_path / "cache").iterdir()
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == fresh
    assert (again.job_hits, again.hits, again.stored) == (0, 15, 0)  # not written again
    assert list((tmp_path / "cache").iterdir()) == [table]


def test_a_rank_the_job_changed_is_taken_back_as_it_was_read(tmp_path: Path) -> None:
    """A rank whose pg_config claims a million-member world has that claim set aside over
    the job (`load.within_the_job`): the table holds it as decided, and, for a later job
    that takes it rank by rank, as it was read, so that the job decides again."""
    job = Path(shutil.copytree(SAMPLES / "nccl_healthy", tmp_path / "job"))
    rank_file = job / "nccl_trace_rank_3"
    dump = pickle.loads(rank_file.read_bytes())  # a bundled, trusted sample
    dump["pg_config"]["0"]["ranks"] = "[" + ", ".join(map(str, range(10**5))) + "]"
    rank_file.write_bytes(pickle.dumps(dump, protocol=4))
    _report(job, RankCache(tmp_path / "cache"))
    seen: list[Any] = []
    _table_tampered(_kept_table(tmp_path / "cache").read_bytes(), seen.append)
    ((position, as_read),) = seen[0]["read_as"]
    assert as_read["rank"] == 3 and as_read["claims_set_aside"] == []
    assert seen[0]["ranks"][position]["claims_set_aside"] == ["0"]
    _one_dump_changed(job, 0)
    again = RankCache(tmp_path / "cache")
    got = _report(job, again)
    assert got == _report(job, None)
    assert any("set aside" in w for w in got["dumps"]["warnings"])
    assert again.hits == len(got["dumps"]["ranks_loaded"]) - 1


def test_files_of_the_older_format_are_dropped(job: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    old = root / ("0" * 64 + ".rank")
    old.write_bytes(b"fr-analyze-rank-cache\n")
    old.chmod(0o600)
    _report(job, RankCache(root))
    assert not old.exists()


# --- the whole table, kept beside the ranks -----------------------------------------------------


def _analysis(where: Path, cache: RankCache | None) -> Analysis:
    return analyze(Directory(where), Options(cache=cache))


def _same_table(got: EntryTable, fresh: EntryTable) -> None:
    for f in dataclasses.fields(EntryTable):
        mine, theirs = getattr(got, f.name), getattr(fresh, f.name)
        if isinstance(theirs, np.ndarray):
            assert mine.dtype == theirs.dtype, f.name
            assert np.array_equal(mine, theirs, equal_nan=mine.dtype.kind == "f"), f.name
        else:
            assert mine == theirs, f.name


def _kept_table(root: Path) -> Path:
    (table,) = root.glob("*" + cache_mod.JOB_SUFFIX)
    return table


def test_the_next_run_reads_the_whole_table_from_one_file_and_it_is_the_same_table(
    job: Path, tmp_path: Path
) -> None:
    fresh = _analysis(job, None)
    _analysis(job, RankCache(tmp_path / "cache"))
    assert stat.S_IMODE(_kept_table(tmp_path / "cache").stat().st_mode) == 0o600
    again = RankCache(tmp_path / "cache")
    got = _analysis(job, again)
    assert (again.job_hits, again.hits, again.stored) == (1, 16, 0)
    _same_table(got.table, fresh.table)
    assert got.dumps == fresh.dumps
    assert report_dict(got) == report_dict(fresh)


def test_a_changed_dump_misses_the_whole_table_and_a_new_one_is_kept(
    job: Path, tmp_path: Path
) -> None:
    _analysis(job, RankCache(tmp_path / "cache"))
    before = _kept_table(tmp_path / "cache")
    changed = sorted(job.iterdir())[3]
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10**9))
    again = RankCache(tmp_path / "cache")
    assert report_dict(_analysis(job, again)) == report_dict(_analysis(job, None))
    assert (again.job_hits, again.hits, again.stored) == (0, 15, 1)
    tables = set((tmp_path / "cache").glob("*" + cache_mod.JOB_SUFFIX))
    assert len(tables) == 2 and before in tables


def test_a_whole_table_others_could_write_or_a_link_is_not_read(job: Path, tmp_path: Path) -> None:
    _analysis(job, RankCache(tmp_path / "cache"))
    table = _kept_table(tmp_path / "cache")
    table.chmod(0o620)  # the group may write it: not this user's alone
    shared = RankCache(tmp_path / "cache")
    assert report_dict(_analysis(job, shared)) == report_dict(_analysis(job, None))
    assert (shared.job_hits, shared.hits) == (0, 0)
    assert stat.S_IMODE(table.stat().st_mode) == 0o600  # not read: replaced by one of its own
    elsewhere = tmp_path / "elsewhere.job"
    elsewhere.write_bytes(table.read_bytes())
    elsewhere.chmod(0o600)
    table.unlink()
    table.symlink_to(elsewhere)
    linked = RankCache(tmp_path / "cache")
    _analysis(job, linked)
    assert linked.job_hits == 0


@pytest.mark.skipif(not hasattr(os, "chown") or os.getuid() != 0, reason="needs root to chown")
def test_a_whole_table_another_user_owns_is_not_read(job: Path, tmp_path: Path) -> None:
    _analysis(job, RankCache(tmp_path / "cache"))
    table = _kept_table(tmp_path / "cache")
    os.chown(table, 65534, 65534)  # nobody's, its mode still 0600
    other = RankCache(tmp_path / "cache")
    assert report_dict(_analysis(job, other)) == report_dict(_analysis(job, None))
    assert (other.job_hits, other.hits) == (0, 0)
    assert table.stat().st_uid == os.getuid()  # not read: replaced by this user's own


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="cut short"),
        pytest.param(lambda data: b"not a cache file", id="not ours"),
        pytest.param(
            lambda data: _table_tampered(data, lambda doc: doc["lists"]["ops"].pop()),
            id="a code past its list",
        ),
        pytest.param(
            lambda data: _table_tampered(data, lambda doc: doc["ranks"].pop()),
            id="a rank left out",
        ),
        pytest.param(
            lambda data: _table_tampered(data, lambda doc: doc["arrays"][0].__setitem__(1, "|O")),
            id="objects",
        ),
    ],
)
def test_a_damaged_whole_table_is_a_miss_dropped_and_the_ranks_are_read_instead(
    job: Path, tmp_path: Path, damage: Any
) -> None:
    _analysis(job, RankCache(tmp_path / "cache"))
    table = _kept_table(tmp_path / "cache")
    table.write_bytes(damage(table.read_bytes()))
    again = RankCache(tmp_path / "cache")
    assert report_dict(_analysis(job, again)) == report_dict(_analysis(job, None))
    assert (again.job_hits, again.hits) == (0, 0)
    assert table.stat().st_size > 100  # dropped, then kept again whole


def _table_tampered(data: bytes, change: Any) -> bytes:
    """The kept table `data` with `change(doc)` applied to its JSON line (after its magic,
    its ranks' count and their keys)."""
    at = len(cache_mod.JOB_MAGIC)
    (count,) = struct.unpack_from("<Q", data, at)
    at += 8 + count * cache_mod.DIGEST
    (length,) = struct.unpack_from("<Q", data, at)
    doc = json.loads(data[at + 8 : at + 8 + length])
    change(doc)
    text = json.dumps(doc).encode()
    return data[:at] + struct.pack("<Q", len(text)) + text + data[at + 8 + length :]


def test_the_whole_table_is_kept_as_loaded_though_the_analysis_changes_it(tmp_path: Path) -> None:
    """The table is kept beside the analysis, which clears `retired` on gloo where the
    recorder does not say whether an op finished (`match.completion`): what is written is the
    table as loaded, however far the analysis got meanwhile; and a call returns only once its
    writer is done."""
    job = Path(shutil.copytree(SAMPLES / "gloo3d_stuck_rank", tmp_path / "job"))
    got = load(Directory(job), Options())
    as_loaded = got.table.retired.copy()
    pieces = cache_mod._encode_job(got.dumps, got.table, True, {}, {}, {})
    got.table.retired[:] = ~as_loaded  # the analysis, while the writer is on its way
    cache = RankCache(tmp_path / "cache")
    assert cache._usable() and cache._write("t" + cache_mod.JOB_SUFFIX, lambda: pieces)
    kept = cache_mod._load_job(
        tmp_path / "cache" / ("t" + cache_mod.JOB_SUFFIX), [d.rank for d in got.dumps]
    )
    assert kept is not None and np.array_equal(kept[1].retired, as_loaded)
    first = RankCache(tmp_path / "cache2")
    _analysis(job, first)
    assert first._writing is None and len(list((tmp_path / "cache2").glob("*.job"))) == 1
