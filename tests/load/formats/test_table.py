"""The entry table out of core (`--table-dir`): its columns are files there, mapped, and the
answer is the one the table in memory gives."""

from __future__ import annotations

import copy
import mmap
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fr_analyzer.cli.analyze import table_placement
from fr_analyzer.cli.app import run
from fr_analyzer.load import ROW_BYTES, Directory, TableBuilder, discover, load_rank
from fr_analyzer.model.dump import RankDump
from fr_analyzer.pipeline import Options, analyze
from fr_analyzer.render.report_json import report_dict
from tests.builders import make_dump, make_entry, renumber, write_dumps

SAMPLES = Path(__file__).resolve().parents[3] / "sample_dumps"


def _ranks(where: Path) -> list[RankDump]:
    block = [
        make_entry("all_reduce", 0, group=("0", "default_pg")),
        make_entry("all_reduce", 0, group=("0", "default_pg")),
        make_entry("coalesced", 0, group=("0", "default_pg")),
        make_entry("broadcast", 1, group=("1", "tp")),
    ]
    groups = {"0": ("default_pg", [0, 1, 2]), "1": ("tp", [0, 1, 2])}
    write_dumps(where, {r: make_dump(renumber(copy.deepcopy(block)), groups) for r in range(3)})
    dumps = [load_rank(f) for f in discover(where).files]
    assert all(isinstance(d, RankDump) for d in dumps)
    return [d for d in dumps if isinstance(d, RankDump)]


def _mapped(column: np.ndarray) -> bool:
    """Whether the column's memory is a mapped file."""
    base: object = column
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1)])
def test_a_table_on_disk_holds_what_the_table_in_memory_holds_and_leaves_no_file(
    tmp_path: Path, order: tuple[int, ...]
) -> None:
    dumps = _ranks(tmp_path / "dumps")
    folder = tmp_path / "table"
    folder.mkdir()
    in_memory, on_disk = TableBuilder(ranks_hint=3), TableBuilder(ranks_hint=3, on_disk=folder)
    for rank in order:
        in_memory.add(dumps[rank])
        on_disk.add(dumps[rank])
    a, b = in_memory.build([0, 2]), on_disk.build([0, 2])

    for name, column in a.arrays().items():
        mapped = getattr(b, name)
        assert mapped.dtype == column.dtype, name
        assert np.array_equal(mapped, column, equal_nan=column.dtype.kind == "f"), name
    assert np.array_equal(a.rank, b.rank) and np.array_equal(a.row_in_rank, b.row_in_rank)
    assert all(_mapped(getattr(b, name)) for name in a.arrays())  # mapped, not copied
    assert os.listdir(folder) == []  # each file removed as soon as it was mapped


def test_a_table_moves_out_of_core_once_the_rows_expected_pass_its_share_of_memory(
    tmp_path: Path,
) -> None:
    dumps = _ranks(tmp_path / "dumps")
    folder = tmp_path / "table"
    folder.mkdir()
    room_for_ten_rows = 10 * ROW_BYTES
    small = TableBuilder(ranks_hint=3, on_disk=folder, in_memory_up_to=room_for_ten_rows)
    roomy = TableBuilder(ranks_hint=3, on_disk=folder, in_memory_up_to=2**30)
    for dump in dumps:
        small.add(dump)
        roomy.add(dump)

    assert small.out_of_core == folder  # 3 ranks of 4 rows: 12 expected
    assert roomy.out_of_core is None
    a, b = small.build(), roomy.build()
    assert all(_mapped(getattr(a, name)) for name in a.arrays())
    assert not any(_mapped(getattr(b, name)) for name in b.arrays())
    for name, column in b.arrays().items():
        assert np.array_equal(getattr(a, name), column, equal_nan=column.dtype.kind == "f"), name


def test_the_report_says_when_the_table_went_out_of_core_by_itself(tmp_path: Path) -> None:
    _ranks(tmp_path / "dumps")
    by_itself = Options(workers=1, table_dir=tmp_path, table_memory_bytes=1)
    asked = Options(workers=1, table_dir=tmp_path)

    told = analyze(Directory(tmp_path / "dumps"), by_itself).summary.warnings
    quiet = analyze(Directory(tmp_path / "dumps"), asked).summary.warnings

    assert any(f"kept out of core in {tmp_path}" in w for w in told)
    assert not any("out of core" in w for w in quiet)


def test_the_table_goes_where_it_is_told_else_to_the_temp_folder_past_its_share(
    tmp_path: Path,
) -> None:
    assert table_placement(tmp_path) == {"table_dir": tmp_path, "table_memory_bytes": None}
    default = table_placement(None)
    if Path("/proc/meminfo").exists():
        assert default["table_dir"] == Path(tempfile.gettempdir())
        assert default["table_memory_bytes"] > 0
    else:
        assert default == {"table_dir": None, "table_memory_bytes": None}


def test_every_sample_set_gives_the_same_report_with_its_table_on_disk(tmp_path: Path) -> None:
    sets = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    assert len(sets) >= 60

    def report(where: Path, options: Options) -> dict[str, object]:
        return report_dict(analyze(Directory(where), options))

    differ = [
        s.name
        for s in sets
        if report(s, Options(workers=1)) != report(s, Options(workers=1, table_dir=tmp_path))
    ]
    assert differ == []
    assert os.listdir(tmp_path) == []


def test_a_table_folder_that_cannot_be_written_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _ranks(tmp_path / "dumps")
    locked = Path("/proc/1")  # a folder no one, root included, makes files in
    if not locked.is_dir():
        pytest.skip("no /proc here")

    code = run(["-d", str(tmp_path / "dumps"), "--no-cache", "--table-dir", str(locked)])

    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    assert f"the entry table kept out of core in {locked}" in err
    assert "hint: --table-dir DIR" in err


def test_on_ray_the_drivers_table_is_out_of_core_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver is the one process that does not scale out: on Ray its table is mapped from
    the start (in --table-dir when given), never held in its memory until a share is passed."""
    import contextlib
    from collections.abc import Iterator

    import fr_analyzer.cluster as cluster_mod
    from fr_analyzer.cli.analyze import EngineKind, engine_options
    from fr_analyzer.cluster import Cluster

    @contextlib.contextmanager
    def joined(address: str | None) -> Iterator[Cluster]:
        yield Cluster("127.0.0.1:1", False, 1, 2)

    monkeypatch.setattr(cluster_mod, "connect", joined)
    auto = Options(**table_placement(None))
    with engine_options(auto, EngineKind.RAY, None) as on_ray:
        assert on_ray.table_dir == Path(tempfile.gettempdir())
        assert on_ray.table_memory_bytes is None
    with engine_options(Options(**table_placement(tmp_path)), EngineKind.RAY, None) as on_ray:
        assert (on_ray.table_dir, on_ray.table_memory_bytes) == (tmp_path, None)
    with engine_options(auto, EngineKind.PROCESS, None) as here:
        assert here == auto
