"""`-o db.parquet`: a folder of Parquet tables with SQLite's tables, columns and values, read
back by pyarrow (and by pandas, DuckDB and polars where they are installed), written whole or
not at all, and a one-line error naming the extra where pyarrow is missing."""

from __future__ import annotations

import builtins
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import analyze
from fr_analyzer.errors import OutputError, UsageError
from fr_analyzer.pipeline import Analysis, Options
from fr_analyzer.render import database_parquet, database_sqlite
from fr_analyzer.render.tables import COLUMNS, Kind, kind

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow (the parquet extra) not installed")

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def load(name: str) -> Analysis:
    return analyze(SAMPLES / name, Options(workers=1))


def sqlite_tables(path: Path) -> dict[str, tuple[tuple[str, ...], list[list[Any]]]]:
    """Every table of a SQLite database (meta included): its columns and its rows by id, JSON
    text read back as lists and 0/1 flags as booleans, as Parquet holds them."""
    found = {}
    with sqlite3.connect(path) as connection:
        for table in ("meta", *COLUMNS):
            cursor = connection.execute(
                f"SELECT * FROM {table} ORDER BY {'key' if table == 'meta' else 'id'}"
            )
            columns = tuple(d[0] for d in cursor.description)
            rows = []
            for row in cursor.fetchall():
                values = []
                for name, value in zip(columns, row, strict=True):
                    k = kind(name) if table != "meta" else Kind.TEXT
                    if value is not None and k in (
                        Kind.INTS,
                        Kind.TEXTS,
                        Kind.SHAPES,
                        Kind.FRAMES,
                    ):
                        value = json.loads(value)
                    elif value is not None and k == Kind.BOOL:
                        value = bool(value)
                    values.append(value)
                rows.append(values)
            found[table] = (columns, rows)
    return found


def parquet_tables(path: Path) -> dict[str, tuple[tuple[str, ...], list[list[Any]]]]:
    """Every Parquet table of the folder, in the same shape (frames as [name, file, line])."""
    found = {}
    for table, data in database_parquet.read_tables(path).items():
        columns = tuple(data.column_names)
        records = data.to_pylist()
        records.sort(key=lambda r: r["key"] if table == "meta" else r["id"])
        rows = []
        for record in records:
            row = [record[c] for c in columns]
            if "frames" in columns:
                i = columns.index("frames")
                row[i] = [[f["name"], f["filename"], f["line"]] for f in row[i]]
            rows.append(row)
        found[table] = (columns, rows)
    return found


@pytest.mark.parametrize(
    "name", ["nccl_not_joined", "nccl3d_p2p_mismatch", "gloo3d_crash", "nccl_missing_dump"]
)
def test_parquet_has_the_sqlite_tables_columns_and_values(name: str, tmp_path: Path) -> None:
    # GIVEN one analysis written as SQLite and as Parquet
    analysis = load(name)
    database_sqlite.write(analysis, tmp_path / "db.sqlite")
    database_parquet.write(analysis, tmp_path / "db.parquet")
    # THEN the folder holds one file per table of the SQLite database, meta included
    assert sorted(p.name for p in (tmp_path / "db.parquet").iterdir()) == sorted(
        f"{t}.parquet" for t in ("meta", *COLUMNS)
    )
    # AND each has the same columns, in the same order, and the same values
    expected, found = sqlite_tables(tmp_path / "db.sqlite"), parquet_tables(tmp_path / "db.parquet")
    assert found.keys() == expected.keys()
    for table in expected:
        assert found[table][0] == expected[table][0], table
        assert found[table][1] == expected[table][1], table


def test_columns_have_parquets_own_types(tmp_path: Path) -> None:
    import pyarrow as pa  # type: ignore[import-untyped]

    database_parquet.write(load("nccl_not_joined"), tmp_path / "db.parquet")
    calls = pq.read_schema(tmp_path / "db.parquet" / "nccl_calls.parquet")
    assert calls.field("rank").type == pa.int64()
    assert calls.field("completed").type == pa.bool_()
    assert calls.field("duration_ms").type == pa.float64()
    assert calls.field("input_sizes").type == pa.list_(pa.list_(pa.int64()))
    assert calls.field("profiling_name").type == pa.string()
    groups = pq.read_schema(tmp_path / "db.parquet" / "groups.parquet")
    assert groups.field("ranks").type == pa.list_(pa.int64())


def test_large_tables_are_written_in_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database_parquet, "ROW_GROUP_ROWS", 100)
    analysis = load("nccl3d_p2p_mismatch")
    database_parquet.write(analysis, tmp_path / "db.parquet")
    info = pq.ParquetFile(tmp_path / "db.parquet" / "nccl_calls.parquet").metadata
    assert info.num_rows == analysis.table.n
    assert info.num_row_groups == -(-analysis.table.n // 100)


def test_an_earlier_folder_is_replaced_whole(tmp_path: Path) -> None:
    out = tmp_path / "db.parquet"
    database_parquet.write(load("nccl_not_joined"), out)
    database_parquet.write(load("nccl_healthy"), out)
    status = {r["key"]: r["value"] for r in pq.read_table(out / "meta.parquet").to_pylist()}
    assert status["status"] == "ok"
    assert [p.name for p in tmp_path.iterdir()] == ["db.parquet"]  # nothing left beside it


def test_a_folder_of_other_files_or_a_file_is_refused(tmp_path: Path) -> None:
    analysis = load("nccl_healthy")
    other = tmp_path / "mine.parquet"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="holds other files"):
        database_parquet.write(analysis, other)
    assert (other / "notes.txt").read_text() == "keep me"
    plain = tmp_path / "file.parquet"
    plain.write_text("a file")
    with pytest.raises(OutputError, match="not a Parquet folder"):
        database_parquet.write(analysis, plain)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.parquet", "mine.parquet"]


def test_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(database_parquet, "_write_tables", broken)
    with pytest.raises(OutputError, match="No space left on device"):
        database_parquet.write(load("nccl_healthy"), tmp_path / "db.parquet")
    assert list(tmp_path.iterdir()) == []


def test_wanted_by_suffix() -> None:
    assert database_parquet.wanted(Path("x/DB.Parquet"))
    assert not database_parquet.wanted(Path("db.sqlite"))


def test_without_pyarrow_a_one_line_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_pyarrow(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(UsageError) as raised:
        database_parquet.write(load("nccl_healthy"), tmp_path / "db.parquet")
    message = str(raised.value)
    assert "\n" not in message and "pip install 'fr-analyze[parquet]'" in message
    assert list(tmp_path.iterdir()) == []


def test_the_cli_without_pyarrow_exits_2_before_the_analysis(tmp_path: Path) -> None:
    # A site-packages-first path entry that hides pyarrow from the child process
    shadow = tmp_path / "shadow"
    (shadow / "pyarrow").mkdir(parents=True)
    (shadow / "pyarrow" / "__init__.py").write_text("raise ImportError('hidden for a test')\n")
    out = tmp_path / "db.parquet"
    done = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", "-d", str(SAMPLES / "nccl_healthy"), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(shadow), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    assert "fr-analyze[parquet]" in done.stderr
    assert not out.exists()


def test_pandas_reads_it(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    database_parquet.write(load("nccl_not_joined"), tmp_path / "db.parquet")
    calls = pd.read_parquet(tmp_path / "db.parquet" / "nccl_calls.parquet")
    assert list(calls.columns) == list(COLUMNS["nccl_calls"])


def test_duckdb_joins_it(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    database_parquet.write(load("nccl_not_joined"), tmp_path / "db.parquet")
    folder = tmp_path / "db.parquet"
    [(joined,)] = duckdb.sql(
        f"SELECT count(*) FROM '{folder}/nccl_calls.parquet' c "
        f"JOIN '{folder}/groups.parquet' g ON g.id = c.group_id"
    ).fetchall()
    assert joined == pq.read_metadata(folder / "nccl_calls.parquet").num_rows


def test_polars_reads_it(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    database_parquet.write(load("nccl_not_joined"), tmp_path / "db.parquet")
    groups = pl.read_parquet(tmp_path / "db.parquet" / "groups.parquet")
    assert groups.columns == list(COLUMNS["groups"])
