"""`-o db.sqlite`: the six tables of fr-analyze.db/1 in SQLite, with keys that join, opened by
the `sqlite3` command-line tool, and the README's queries answering what they say."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import analyze, load_db
from fr_analyzer.errors import OutputError
from fr_analyzer.pipeline import Options
from fr_analyzer.render import database, database_sqlite
from fr_analyzer.render.database_sqlite import _JSON_KINDS, FOREIGN_KEYS, INDEXES, write
from fr_analyzer.render.tables import COLUMNS, NULL_WHEN_NEGATIVE, Kind, kind

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
SQLITE3 = shutil.which("sqlite3")


def fr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fr_analyzer", *args], capture_output=True, text=True, timeout=120
    )


def cli(db: Path, sql: str) -> list[list[str]]:
    """Rows the `sqlite3` command-line tool prints for `sql` ('|'-separated)."""
    assert SQLITE3 is not None
    result = subprocess.run(
        [SQLITE3, "-bail", str(db)], input=sql, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [line.split("|") for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def dbs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The not-joined sample written both ways by the command line."""
    out = tmp_path_factory.mktemp("db")
    sample = SAMPLES / "nccl_not_joined"
    assert fr("-d", str(sample), "-o", str(out / "db.sqlite")).returncode == 1
    assert fr("-d", str(sample), "-o", str(out / "db.pkl")).returncode == 1
    return out / "db.sqlite", out / "db.pkl"


def test_sqlite_has_the_pickles_tables_columns_and_rows(dbs: tuple[Path, Path]) -> None:
    sqlite_path, pickle_path = dbs
    flat = load_db(pickle_path)
    with sqlite3.connect(sqlite_path) as connection:
        for table, columns in COLUMNS.items():
            cursor = connection.execute(f"SELECT * FROM {table} ORDER BY id")
            assert tuple(d[0] for d in cursor.description) == columns
            rows = cursor.fetchall()
            assert len(rows) == len(flat[table].rows) > 0, table
        meta = dict(connection.execute("SELECT key, value FROM meta"))
    assert meta["schema"] == "fr-analyze.db/1"
    assert meta["status"] == "hung"
    assert json.loads(meta["root_cause"])["ranks"] == [5]


@pytest.mark.skipif(SQLITE3 is None, reason="no sqlite3 command-line tool")
def test_the_sqlite3_tool_opens_it_and_every_foreign_key_joins(dbs: tuple[Path, Path]) -> None:
    db, _ = dbs
    assert cli(db, "PRAGMA integrity_check;") == [["ok"]]
    assert cli(db, "PRAGMA foreign_key_check;") == []
    for table, keys in FOREIGN_KEYS.items():
        for column, target in keys:
            [[set_, joined]] = cli(
                db,
                f"SELECT (SELECT COUNT(*) FROM {table} WHERE {column} IS NOT NULL),"
                f" (SELECT COUNT(*) FROM {table} JOIN {target} ON {target}.id = {table}.{column});",
            )
            assert set_ == joined, (table, column)
    indexes = {row[0] for row in cli(db, "SELECT name FROM sqlite_master WHERE type='index';")}
    assert {"nccl_calls_by_rank_entry_index", "nccl_calls_by_collective_id"} <= indexes


def _readme_queries() -> dict[str, str]:
    """The SQL blocks of the README and docs/database.md, by the comment on their first
    line."""
    text = (ROOT / "README.md").read_text() + (ROOT / "docs" / "database.md").read_text()
    blocks = re.findall(r"```sql\n(.*?)```", text, re.DOTALL)
    return {block.splitlines()[0].lstrip("- ").strip(): block for block in blocks}


@pytest.mark.skipif(SQLITE3 is None, reason="no sqlite3 command-line tool")
def test_readme_query_first_incomplete_op_per_rank(dbs: tuple[Path, Path]) -> None:
    queries = _readme_queries()
    rows = cli(dbs[0], queries["The first incomplete op of every rank"])
    assert [(r[0], r[4], r[5]) for r in rows] == [
        (str(rank), "all_reduce", "5") for rank in (0, 1, 2, 3, 4, 6, 7)
    ]


@pytest.mark.skipif(SQLITE3 is None, reason="no sqlite3 command-line tool")
def test_readme_query_collectives_a_rank_never_joined(dbs: tuple[Path, Path]) -> None:
    queries = _readme_queries()
    rows = cli(dbs[0], queries["The collectives a rank never joined"])
    assert rows == [["0", "default_pg", "5", "all_reduce", "5"]]


@pytest.mark.parametrize(
    "name",
    ["gloo3d_crash", "nccl3d_p2p_mismatch", "torchcomms_not_joined", "nccl_missing_dump"],
)
def test_foreign_keys_join_on_other_sets(name: str, tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    write(analyze(SAMPLES / name, Options(workers=1)), db)
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_sqlite_replaces_an_existing_file_whole(tmp_path: Path) -> None:
    db = tmp_path / "db.db"
    db.write_bytes(b"an older file")
    assert fr("-d", str(SAMPLES / "nccl_healthy"), "-o", str(db)).returncode == 0
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT value FROM meta WHERE key='status'").fetchone() == ("ok",)
    assert [p.name for p in tmp_path.iterdir()] == ["db.db"]  # no temporary file left


# --- the bulk load ----------------------------------------------------------------------------


def _as_pickled(table: str, rows: list[tuple[Any, ...]]) -> list[list[Any]]:
    """SQLite's rows as the pickle has them: JSON text back to lists, 0/1 back to booleans."""
    columns = COLUMNS[table]
    out = []
    for row in rows:
        values = []
        for name, value in zip(columns, row, strict=True):
            if value is not None and kind(name) in _JSON_KINDS:
                value = json.loads(value)
            elif value is not None and kind(name) == Kind.BOOL:
                value = bool(value)
            values.append(value)
        out.append(values)
    return out


def _pickled_with_nulls(table: str, rows: list[list[Any]]) -> list[list[Any]]:
    nulls = [i for i, name in enumerate(COLUMNS[table]) if name in NULL_WHEN_NEGATIVE]
    return [
        [None if i in nulls and v is not None and v < 0 else v for i, v in enumerate(r)]
        for r in rows
    ]


@pytest.mark.parametrize(
    "name", ["nccl_not_joined", "nccl3d_p2p_mismatch", "gloo3d_crash", "nccl_batched_p2p"]
)
def test_every_value_is_the_pickles(name: str, tmp_path: Path) -> None:
    # GIVEN one analysis written both ways
    analysis = analyze(SAMPLES / name, Options(workers=1))
    flat = database.build(analysis)
    write(analysis, tmp_path / "db.sqlite")
    # THEN every row of every table holds the pickle's values (lists as JSON, -1 groups NULL)
    with sqlite3.connect(tmp_path / "db.sqlite") as connection:
        for table in COLUMNS:
            rows = connection.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
            expected = _pickled_with_nulls(table, flat["tables"][table]["rows"])
            assert _as_pickled(table, rows) == expected, table


def test_large_tables_are_filled_by_forked_processes_with_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN one analysis, written by one process and by several
    analysis = analyze(SAMPLES / "nccl3d_p2p_mismatch", Options(workers=1))
    write(analysis, tmp_path / "one.sqlite")
    monkeypatch.setattr(database_sqlite, "PARALLEL_ROWS", 0)
    monkeypatch.setattr(database_sqlite, "_processes", lambda rows: 3)
    write(analysis, tmp_path / "three.sqlite")
    # THEN the two hold the same rows, every index, and nothing else is left beside them
    dumps = []
    for name in ("one.sqlite", "three.sqlite"):
        with sqlite3.connect(tmp_path / name) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
            indexes = {
                row[0]
                for row in connection.execute("SELECT name FROM sqlite_master WHERE type='index'")
            }
            assert {f"{t}_by_{'_'.join(k)}" for t, k in INDEXES} <= indexes
            dumps.append(
                {
                    t: connection.execute(f"SELECT * FROM {t} ORDER BY id").fetchall()
                    for t in COLUMNS
                }
            )
    assert dumps[0] == dumps[1] and len(dumps[0]["nccl_calls"]) > 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.sqlite", "three.sqlite"]


def test_a_failed_part_fails_the_write_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysis = analyze(SAMPLES / "nccl_healthy", Options(workers=1))
    monkeypatch.setattr(database_sqlite, "PARALLEL_ROWS", 0)
    monkeypatch.setattr(database_sqlite, "_processes", lambda rows: 2)
    insert = database_sqlite._insert

    def full_disk(connection: sqlite3.Connection, table: Any, start: int, stop: int) -> None:
        if start > 0:  # the forked process's range
            raise sqlite3.OperationalError("database or disk is full")
        insert(connection, table, start, stop)

    monkeypatch.setattr(database_sqlite, "_insert", full_disk)
    with pytest.raises(OutputError, match=r"db\.sqlite: cannot write the SQLite database"):
        write(analysis, tmp_path / "db.sqlite")
    assert list(tmp_path.iterdir()) == []
