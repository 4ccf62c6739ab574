"""The flat database as SQLite (`-o db.sqlite`): the tables and columns of `fr-analyze.db/1`
(`database.COLUMNS`), with primary keys, foreign keys, indexes on the join columns and a `meta`
table that holds the schema version and the conclusion.

Values are those of the pickle, but for two things SQL needs: lists (member ranks, sizes,
frames) are JSON text, and a group id of -1 (an entry whose group is unknown) is NULL, so that
every foreign key joins. Booleans are 0 or 1. `meta` has one row per key of the pickle's
`meta`, plus `schema`: text values as they are, others as JSON. The file is written beside
its destination and renamed onto it when complete.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from .database import COLUMNS, build
from .errors import OutputError
from .output import atomic_path
from .pipeline import Analysis

SUFFIXES = (".sqlite", ".sqlite3", ".db")

_TYPES: dict[str, str] = {
    "name": "TEXT",
    "desc": "TEXT",
    "membership_source": "TEXT",
    "kind": "TEXT",
    "op": "TEXT",
    "profiling_name": "TEXT",
    "unit": "TEXT",
    "state": "TEXT",
    "text": "TEXT",
    "detail": "TEXT",
    "role": "TEXT",
    "explanation": "TEXT",
    "duration_ms": "REAL",
    "ranks": "TEXT",  # JSON lists from here on
    "culprit_ranks": "TEXT",
    "frames": "TEXT",
    "input_sizes": "TEXT",
    "output_sizes": "TEXT",
    "input_dtypes": "TEXT",
    "output_dtypes": "TEXT",
}
"""Column types; any column not named here holds integers (ids, ranks, counts, 0/1 flags)."""

FOREIGN_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "memberships": (("group_id", "groups"),),
    "collectives": (("group_id", "groups"),),
    "nccl_calls": (
        ("group_id", "groups"),
        ("collective_id", "collectives"),
        ("traceback_id", "tracebacks"),
    ),
    "findings": (("group_id", "groups"),),
}

INDEXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("memberships", ("group_id", "rank")),
    ("memberships", ("rank",)),
    ("collectives", ("group_id", "collective_seq_id")),
    ("nccl_calls", ("rank", "entry_index")),
    ("nccl_calls", ("group_id", "collective_seq_id")),
    ("nccl_calls", ("collective_id",)),
    ("nccl_calls", ("traceback_id",)),
    ("findings", ("group_id",)),
)

_ORDER = ("groups", "memberships", "collectives", "tracebacks", "nccl_calls", "findings")
"""Tables in an order where every foreign key points to a table already filled."""

_NULL_WHEN_NEGATIVE = {"group_id"}


def wanted(path: Path) -> bool:
    """Whether `-o path` asks for SQLite (by its suffix)."""
    return path.suffix.lower() in SUFFIXES


def schema_sql() -> list[str]:
    """The CREATE statements of every table and index."""
    statements = [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ]
    for table in _ORDER:
        columns = [
            f"{name} {_TYPES.get(name, 'INTEGER')}" + (" PRIMARY KEY" if name == "id" else "")
            for name in COLUMNS[table]
        ]
        references = [
            f"FOREIGN KEY ({column}) REFERENCES {target} (id)"
            for column, target in FOREIGN_KEYS.get(table, ())
        ]
        statements.append(f"CREATE TABLE {table} ({', '.join(columns + references)})")
    for table, keys in INDEXES:
        name = f"{table}_by_{'_'.join(keys)}"
        statements.append(f"CREATE INDEX {name} ON {table} ({', '.join(keys)})")
    return statements


def write(analysis: Analysis, path: Path) -> None:
    """Write the database to `path` as SQLite, atomically."""
    flat = build(analysis)
    with atomic_path(path) as tmp:
        try:
            _fill(Path(tmp), flat)
        except sqlite3.Error as exc:
            raise OutputError(f"{path}: cannot write the SQLite database: {exc}") from None


def _fill(path: Path, flat: dict[str, Any]) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode = OFF")  # a new file, renamed when complete
        connection.execute("PRAGMA synchronous = OFF")  # the rename is the commit
        connection.execute("PRAGMA foreign_keys = ON")
        with connection:
            for statement in schema_sql():
                connection.execute(statement)
            meta = {"schema": flat["schema"], **flat["meta"]}
            connection.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [(key, v if isinstance(v, str) else json.dumps(v)) for key, v in meta.items()],
            )
            for table in _ORDER:
                columns = COLUMNS[table]
                marks = ", ".join("?" for _ in columns)
                connection.executemany(
                    f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
                    _rows(columns, flat["tables"][table]["rows"]),
                )
        connection.execute("PRAGMA optimize")
    finally:
        connection.close()


def _rows(columns: tuple[str, ...], rows: list[list[Any]]) -> Any:
    """Rows with lists as JSON text and negative group ids as NULL."""
    as_json = [i for i, name in enumerate(columns) if _TYPES.get(name) == "TEXT" and name in _JSON]
    nullable = [i for i, name in enumerate(columns) if name in _NULL_WHEN_NEGATIVE]
    for row in rows:
        if as_json or nullable:
            row = list(row)
            for i in as_json:
                row[i] = json.dumps(row[i])
            for i in nullable:
                if row[i] is not None and row[i] < 0:
                    row[i] = None
        yield row


_JSON = {
    "ranks",
    "culprit_ranks",
    "frames",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
}
