"""What a map task returns (`cluster.shards`), without a cluster: its ranks' columns travel
joined, one array a column, and each rank's come back as they were read. (The map stage on
a real head: `test_ray_engine.py`.)"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from fr_analyzer.cluster.shards import ShardColumns, read_shard
from fr_analyzer.load import DEFAULT_MAX_FILE_BYTES, Directory, discover

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def test_each_rank_gets_back_its_own_columns_from_the_joined_ones() -> None:
    ranks: list[dict[str, np.ndarray]] = [
        {"seq": np.array([1, 2, 3], dtype=np.int8), "t": np.array([0.5, 1.5, 2.5])},
        {"seq": np.zeros(0, dtype=np.int16), "t": np.zeros(0)},  # a rank with no row
        {"seq": np.array([300, -1], dtype=np.int16), "t": np.array([3.0, 4.0])},
    ]
    joined = ShardColumns.of(ranks)
    assert len(joined) == 3
    assert joined.arrays["seq"].dtype == np.int16  # the widest its ranks sent
    assert joined.starts.tolist() == [0, 3, 3, 5]
    for mine, back in zip(ranks, joined, strict=True):
        assert set(back) == set(mine)
        for name, column in mine.items():
            assert back[name].tolist() == column.tolist()
    assert len(ShardColumns.of([])) == 0


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
