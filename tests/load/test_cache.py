"""The user's cache of ranks read: the next command on the same dumps reads it, gives the
same report, and trusts nothing it did not write itself."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fr_analyzer.cli.app import run
from fr_analyzer.load import Directory, RankCache
from fr_analyzer.load import cache as cache_mod
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


def _kept_ranks(root: Path) -> list[Path]:
    """The ranks kept in `root`, the whole tables kept beside them dropped (so that the next
    run reads rank by rank)."""
    for table in root.glob("*" + cache_mod.JOB_SUFFIX):
        table.unlink()
    return sorted(root.glob("*" + cache_mod.SUFFIX))


def test_a_link_or_a_damaged_file_in_the_cache_is_a_miss(job: Path, tmp_path: Path) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    kept = _kept_ranks(tmp_path / "cache")
    kept[0].write_bytes(kept[0].read_bytes()[:200])  # cut short
    kept[1].write_bytes(b"not a cache file")
    target = tmp_path / "elsewhere.rank"
    target.write_bytes(kept[2].read_bytes())
    kept[2].unlink()
    kept[2].symlink_to(target)
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == _report(job, None)
    assert again.hits == len(kept) - 3
    assert not kept[0].exists() or kept[0].stat().st_size > 200  # dropped, then kept again


def test_past_its_bound_the_least_recently_used_are_dropped(job: Path, tmp_path: Path) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    sizes = [p.stat().st_size for p in (tmp_path / "cache").iterdir()]
    bound = sum(sizes) // 2
    _report(job, RankCache(tmp_path / "cache", max_bytes=bound))
    assert sum(p.stat().st_size for p in (tmp_path / "cache").iterdir()) <= bound


def test_the_command_keeps_ranks_in_the_xdg_cache_and_no_cache_keeps_none(
    job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert run(["-d", str(job), "--no-cache"]) == 1
    assert not (tmp_path / "xdg").exists()
    assert run(["-d", str(job)]) == 1
    kept = tmp_path / "xdg" / "fr-analyze" / "ranks"
    assert len(list(kept.glob("*.rank"))) == 16
    assert len(list(kept.glob("*.job"))) == 1
    assert run(["-d", str(job)]) == 1


def _tampered(path: Path, change: Any) -> None:
    """Rewrite the JSON line of the kept rank in `path` with `change(header)` applied."""
    data = path.read_bytes()
    at = len(cache_mod.MAGIC)
    (length,) = struct.unpack_from("<Q", data, at)
    doc = json.loads(data[at + 8 : at + 8 + length])
    change(doc["header"])
    text = json.dumps(doc).encode()
    path.write_bytes(
        cache_mod.MAGIC + struct.pack("<Q", len(text)) + text + data[at + 8 + length :]
    )


def test_a_kept_rank_with_odd_values_or_another_ranks_number_is_a_miss_not_a_failure(
    job: Path, tmp_path: Path
) -> None:
    _report(job, RankCache(tmp_path / "cache"))
    kept = _kept_ranks(tmp_path / "cache")
    _tampered(kept[0], lambda h: h.update(rank=h["rank"] + 1))  # another rank's number
    _tampered(kept[1], lambda h: h.update(entries="many"))  # a value of the wrong type
    _tampered(kept[2], lambda h: h.update(warnings=[1, 2]))
    again = RankCache(tmp_path / "cache")
    assert _report(job, again) == _report(job, None)
    assert again.hits == len(kept) - 3
    assert again.stored == 3  # read from their dumps, and kept again


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
    assert (shared.job_hits, shared.hits) == (0, 16)
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
    assert (other.job_hits, other.hits) == (0, 16)
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
    assert (again.job_hits, again.hits) == (0, 16)
    assert table.stat().st_size > 100  # dropped, then kept again whole


def _table_tampered(data: bytes, change: Any) -> bytes:
    """The kept table `data` with `change(doc)` applied to its JSON line."""
    at = len(cache_mod.JOB_MAGIC)
    (length,) = struct.unpack_from("<Q", data, at)
    doc = json.loads(data[at + 8 : at + 8 + length])
    change(doc)
    text = json.dumps(doc).encode()
    return cache_mod.JOB_MAGIC + struct.pack("<Q", len(text)) + text + data[at + 8 + length :]


def test_no_whole_table_is_kept_when_a_dump_is_unreadable(job: Path, tmp_path: Path) -> None:
    (sorted(job.iterdir())[5]).write_bytes(b"\x80\x02 not a pickle")
    cache = RankCache(tmp_path / "cache")
    _analysis(job, cache)
    assert cache.stored == 15
    assert not list((tmp_path / "cache").glob("*" + cache_mod.JOB_SUFFIX))


def test_the_whole_table_is_kept_as_loaded_though_the_analysis_changes_it(tmp_path: Path) -> None:
    """The table is kept beside the analysis, which clears `retired` on gloo where the
    recorder does not say whether an op finished (`match.completion`): what is written is the
    table as loaded, however far the analysis got meanwhile; and a call returns only once its
    writer is done."""
    job = Path(shutil.copytree(SAMPLES / "gloo3d_stuck_rank", tmp_path / "job"))
    got = load(Directory(job), Options())
    as_loaded = got.table.retired.copy()
    pieces = cache_mod._encode_job(got.dumps, got.table)
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
