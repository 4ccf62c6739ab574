"""What a map task returns (`cluster.shards`), without a cluster: its ranks' columns travel
joined, as one Arrow record batch, and each rank's come back as they were read. (The map
stage on a real head: `test_ray_engine.py`.)"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from fr_analyzer.cluster.shards import ShardColumns, read_shard
from fr_analyzer.load import DEFAULT_MAX_FILE_BYTES, Directory, discover

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def test_each_rank_gets_back_its_own_columns_from_the_joined_ones() -> None:
    ranks: list[dict[str, np.ndarray]] = [
        {
            "seq": np.array([1, 2, 3], dtype=np.int8),
            "t": np.array([0.5, np.nan, 2.5]),
            "ok": np.array([True, False, True]),
        },
        {"seq": np.zeros(0, dtype=np.int16), "t": np.zeros(0), "ok": np.zeros(0, bool)},  # no row
        {
            "seq": np.array([300, -1], dtype=np.int16),
            "t": np.array([3.0, 4.0]),
            "ok": np.array([False, True]),
        },
    ]
    joined = ShardColumns.of([4, 9, 2], ranks)
    assert len(joined) == 3
    assert joined.arrays["seq"].dtype == np.int16  # the widest its ranks sent
    assert joined.arrays["ok"].dtype == np.bool_  # a byte each in the block, booleans again
    assert joined.starts.tolist() == [0, 3, 3, 5]
    travelled = pickle.loads(pickle.dumps(joined, protocol=5))
    for got in (joined, travelled):
        for mine, back in zip(ranks, got, strict=True):
            assert set(back) == set(mine)
            for name, column in mine.items():
                assert back[name].dtype == got.arrays[name].dtype
                np.testing.assert_array_equal(back[name], column)
    # an Arrow block of the entries, each row named by its rank, as Ray Data and Parquet take it
    assert travelled.block.schema.names == ["rank", "seq", "t", "ok"]
    assert travelled.block.column("rank").to_pylist() == [4, 4, 4, 2, 2]
    assert travelled.block.column("t").null_count == 0  # NaN is a value, not a missing one
    assert len(ShardColumns.of([], [])) == 0


def test_the_columns_are_views_of_the_blocks_buffers_not_copies() -> None:
    column = np.arange(1000, dtype=np.int64)
    joined = ShardColumns.of([0], [{"record_id": column}])
    buffer = joined.block.column("record_id").buffers()[1]
    view = joined[0]["record_id"]
    assert view.ctypes.data == buffer.address  # the rank's rows are the block's own memory


def test_a_map_task_returns_what_the_loader_read_of_each_rank() -> None:
    found = discover(Directory(SAMPLES / "nccl_healthy"), None)
    files = list(found.source.tasks(found.files, DEFAULT_MAX_FILE_BYTES))
    shard = pickle.loads(pickle.dumps(read_shard(files, DEFAULT_MAX_FILE_BYTES, None)))
    assert [d.rank for d in shard.loaded] == list(range(8))
    assert len(shard.columns) == len(shard.loaded) == len(shard.tables)
    assert set(shard.columns.arrays) >= {"record_id", "group", "marker"}
    assert shard.profiles is not None
    rows = shard.profiles.rows.tolist()
    assert int(shard.columns.starts[-1]) == sum(rows)
    assert [len(columns["record_id"]) for columns in shard.columns] == rows
