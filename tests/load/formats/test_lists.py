"""The entry table's lists without its rows (`load.formats.lists`): the ranks taken as the table
builder takes them, the table of no rows has the table's every list and pair, and any rows
fetched later from the ranks' own columns are the table's rows, column for column."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from fr_analyzer.load import Directory, TableBuilder, discover, load_all
from fr_analyzer.load.formats.lists import Lists, taken
from fr_analyzer.match.frontier import rows_of
from fr_analyzer.model.dump import RankDump
from fr_analyzer.model.groups import build_groups
from fr_analyzer.model.profile import profiles_of
from fr_analyzer.model.table import TABLE_COLUMNS, EntryTable
from fr_analyzer.pipeline import Options, load
from tools.frsim.campaign import draw_case, parse_shapes

SAMPLES = Path(__file__).resolve().parents[3] / "sample_dumps"
LISTS = ("group_names", "ops", "backends", "profiling_names", "shapes", "dtypes", "stacks")


def both(
    where: Path, leave_out: Sequence[int] = ()
) -> tuple[EntryTable, Lists, EntryTable, dict[int, Mapping[str, np.ndarray]]]:
    """The job's table, and its lists built from the same ranks in the same order (with the
    ranks' own columns kept, as a cluster's shards keep them); `leave_out`: ranks not kept."""
    files = discover(Directory(where)).files
    builder, lists = TableBuilder(), Lists()
    own: dict[int, Mapping[str, np.ndarray]] = {}

    def sink(dump: RankDump, columns: Mapping[str, np.ndarray]) -> None:
        builder.add(dump, columns)
        assert dump.tables is not None
        carried = np.unique(columns["group"])
        lists.add(dump.rank, dump.groups, dump.tables, carried, len(columns["record_id"]))
        own[dump.rank] = {name: np.array(values) for name, values in columns.items()}

    loaded, _ = load_all(files, 1, sink=sink)
    kept = sorted(d.rank for d in loaded if d.rank not in set(leave_out))
    return builder.build(kept), lists, lists.build(kept), own


def assert_same_rows(a: EntryTable, b: EntryTable) -> None:
    for name, _ in (*TABLE_COLUMNS, ("rank", None), ("row_in_rank", None)):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
        assert getattr(a, name).dtype == getattr(b, name).dtype, name
    for name in (*LISTS, "pair_rank", "pair_group", "shape_numel"):
        assert np.array_equal(
            np.asarray(getattr(a, name), dtype=object), np.asarray(getattr(b, name), dtype=object)
        ), name


@pytest.mark.parametrize(
    ("name", "leave_out"),
    [
        ("nccl3d_skip_world", ()),
        ("nccl3d_skip_world", (5,)),  # a rank left out: its pairs are not numbered
        ("nccl_coalesced", ()),  # block markers
        ("gloo3d_pp_recv_missing", ()),
        ("torchcomms_healthy", ()),
        ("hccl_healthy", ()),
    ],
)
def test_rows_fetched_from_the_ranks_own_columns_are_the_tables_rows(
    name: str, leave_out: tuple[int, ...]
) -> None:
    t, lists, no_rows, own = both(SAMPLES / name, leave_out)
    assert no_rows.n == 0
    assert_same_rows(no_rows, rows_of(t, np.zeros(0, np.int64)))
    draw = np.random.default_rng(7)
    for share in (1.0, 0.5, 0.05):
        rows = np.flatnonzero(draw.random(t.n) < share).astype(np.int64)
        assert_same_rows(lists.rows(no_rows, rows, taken(own)), rows_of(t, rows))


def test_a_drawn_jobs_rows_fetched_are_its_tables_rows() -> None:
    with tempfile.TemporaryDirectory() as d:
        draw_case(86, parse_shapes("all"), None).write(Path(d), None)
        t, lists, no_rows, own = both(Path(d))
    rows = np.arange(0, t.n, 3, dtype=np.int64)
    assert_same_rows(lists.rows(no_rows, rows, taken(own)), rows_of(t, rows))


def test_rows_before_the_ranks_kept_are_known_is_an_error() -> None:
    none: dict[int, Mapping[str, np.ndarray]] = {}
    with pytest.raises(ValueError, match=r"before Lists\.build"):
        Lists().rows(TableBuilder().build([]), np.zeros(0, np.int64), taken(none))


@pytest.mark.parametrize("name", ["nccl3d_skip_world", "gloo3d_pp_recv_missing", "moe_healthy"])
def test_the_groups_are_rebuilt_from_the_lists_and_the_profiles_with_no_row(name: str) -> None:
    # what a driver that holds no table knows: the ranks' headers, the table of no rows and
    # the profiles the map tasks made; each row fetched later takes its group by its pair
    t, lists, no_rows, own = both(SAMPLES / name)
    dumps = load(Directory(SAMPLES / name), Options(workers=1)).dumps
    whole = build_groups(dumps, t, [])
    held = build_groups(dumps, no_rows, [], profiles_of(t))
    assert held.groups == whole.groups and held.world_size == whole.world_size
    assert np.array_equal(held.pair_uid, whole.pair_uid)
    assert (held.loaded_ranks, held.missing_ranks, held.conflicts) == (
        whole.loaded_ranks,
        whole.missing_ranks,
        whole.conflicts,
    )
    rows = np.arange(1, t.n, 2, dtype=np.int64)
    fetched = lists.rows(no_rows, rows, taken(own))
    assert np.array_equal(held.pair_uid[fetched.pair], whole.entry_group[rows])
