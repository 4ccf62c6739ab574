"""The flat database as SQLite (`-o db.sqlite`): the tables and columns of `fr-analyze.db/1`
(`tables.COLUMNS`), with primary keys, foreign keys, indexes on the join columns and a `meta`
table that holds the schema version and the conclusion.

Values are those of the pickle, but for two things SQL needs: lists (member ranks, sizes,
frames) are JSON text, and a group id of -1 (an entry whose group is unknown) is NULL, so that
every foreign key joins. Booleans are 0 or 1. `meta` has one row per key of the pickle's
`meta`, plus `schema`: text values as they are, others as JSON.

Written in bulk: into a new file beside the destination, renamed onto it when complete (so
neither a journal nor syncs are needed), from the database's columns a chunk of rows at a
time (memory stays flat at any size), `ROWS_PER_STATEMENT` rows to an INSERT, the calls of
large jobs by forked processes in parallel (`_fill`), with the indexes built after the rows
are in (one sort each, not a b-tree insert per row). The foreign keys hold by construction;
the tests check them with `PRAGMA foreign_key_check`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sqlite3
from pathlib import Path

import numpy as np

from ..errors import OutputError
from ..pipeline import Analysis
from .output import atomic_path
from .tables import (
    COLUMNS,
    NULL_WHEN_NEGATIVE,
    Column,
    Columns,
    Kind,
    StreamedColumns,
    kind,
    meta_rows,
    parts_of,
    tables,
)

SUFFIXES = (".sqlite", ".sqlite3", ".db")

_SQL_TYPES = {Kind.INT: "INTEGER", Kind.BOOL: "INTEGER", Kind.FLOAT: "REAL"}
"""SQL types by kind; every other kind (text, and lists as JSON) is TEXT."""

_JSON_KINDS = frozenset({Kind.INTS, Kind.TEXTS, Kind.SHAPES, Kind.FRAMES})

ROWS_PER_STATEMENT = 10
"""Rows one INSERT binds: a third less time than one row a statement."""

CHUNK_ROWS = 65_536
"""Rows given to one `executemany`: enough that the per-call cost vanishes, few enough that
the chunk's Python objects stay a few tens of MB."""


def sql_type(column: str) -> str:
    """The SQL type of a column."""
    return _SQL_TYPES.get(kind(column), "TEXT")


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


def wanted(path: Path) -> bool:
    """Whether `-o path` asks for SQLite (by its suffix)."""
    return path.suffix.lower() in SUFFIXES


def table_sql() -> list[str]:
    """The CREATE TABLE statements."""
    statements = [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ]
    for table in _ORDER:
        columns = [
            f"{name} {sql_type(name)}" + (" PRIMARY KEY" if name == "id" else "")
            for name in COLUMNS[table]
        ]
        references = [
            f"FOREIGN KEY ({column}) REFERENCES {target} (id)"
            for column, target in FOREIGN_KEYS.get(table, ())
        ]
        statements.append(f"CREATE TABLE {table} ({', '.join(columns + references)})")
    return statements


def index_sql() -> list[str]:
    """The CREATE INDEX statements (run once the rows are in)."""
    return [
        f"CREATE INDEX {table}_by_{'_'.join(keys)} ON {table} ({', '.join(keys)})"
        for table, keys in INDEXES
    ]


PARALLEL_ROWS = 1_000_000
"""From this many `nccl_calls` rows on, forked processes each fill a part of them (see
`_fill`)."""

MAX_PROCESSES = 4


def write(analysis: Analysis, path: Path) -> None:
    """Write the database to `path` as SQLite, atomically."""
    with atomic_path(path) as tmp:
        try:
            _fill(Path(tmp), meta_rows(analysis), tables(analysis))
        except sqlite3.Error as exc:
            raise OutputError(f"{path}: cannot write the SQLite database: {exc}") from None


def _processes(rows: int) -> int:
    if rows < PARALLEL_ROWS or not hasattr(os, "fork"):
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), MAX_PROCESSES))


def _fill(
    path: Path, meta: list[tuple[str, str]], columnar: dict[str, Columns | StreamedColumns]
) -> None:
    """Fill a new SQLite file. The calls, most of the rows, are bound a row at a time, which
    is CPU-bound: from `PARALLEL_ROWS` on, forked processes (one per core, sharing the
    columns copy-on-write) each write a range of them into a file of their own while this one
    writes the first range; then SQLite copies their pages of records in (`INSERT INTO ...
    SELECT *` of an identical table copies records without decoding them), and builds the
    indexes."""
    calls = columnar["nccl_calls"]
    # a table streamed a chunk at a time is written here, a chunk after the other
    processes = _processes(calls.length) if isinstance(calls, Columns) else 1
    bounds = np.linspace(0, calls.length, processes + 1).astype(int).tolist()
    ranges = list(itertools.pairwise(bounds))
    parts: list[tuple[int, Path]] = []
    path.unlink(missing_ok=True)  # the empty temporary file: SQLite makes its own
    try:
        for i, (start, stop) in enumerate(ranges[1:], 1):
            assert isinstance(calls, Columns)
            part = path.with_name(f"{path.name}.part{i}")
            parts.append((_fork_part(part, calls, start, stop), part))
        connection = _connect(path)
        try:
            connection.execute("BEGIN")
            for statement in table_sql():
                connection.execute(statement)
            connection.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta)
            for name in _ORDER:
                if name == "nccl_calls" and not isinstance(calls, Columns):
                    for chunk in parts_of(calls):
                        _insert(connection, chunk, 0, chunk.length)
                    continue
                table = columnar[name]
                assert isinstance(table, Columns)
                start, stop = ranges[0] if name == "nccl_calls" else (0, table.length)
                _insert(connection, table, start, stop)
            connection.execute("COMMIT")
            for i, (pid, part) in enumerate(parts):
                _wait(pid, part)
                connection.execute("ATTACH DATABASE ? AS part", (str(part),))
                connection.execute("INSERT INTO nccl_calls SELECT * FROM part.nccl_calls")
                connection.execute("DETACH DATABASE part")
                part.unlink()
                parts[i] = (0, part)
            connection.execute("BEGIN")
            for statement in index_sql():
                connection.execute(statement)
            connection.execute("COMMIT")
            connection.execute("PRAGMA optimize")
        finally:
            connection.close()
    finally:
        for pid, part in parts:
            if pid:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            part.unlink(missing_ok=True)


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    for pragma in _BULK_PRAGMAS:
        connection.execute(f"PRAGMA {pragma}")
    return connection


def _insert(connection: sqlite3.Connection, table: Columns, start: int, stop: int) -> None:
    """Rows `start:stop` of a table, a chunk at a time: each column's values made at once,
    the chunk's rows laid out flat in one object array, bound `ROWS_PER_STATEMENT` rows to a
    statement (Python's per-row cost of `executemany` is most of the load)."""
    width = len(table.names)
    one = f"({', '.join('?' for _ in table.names)})"
    head = f"INSERT INTO {table.name} ({', '.join(table.names)}) VALUES "
    many = head + ", ".join([one] * ROWS_PER_STATEMENT)
    columns = [_sql_column(n, c) for n, c in zip(table.names, table.columns, strict=True)]
    for at in range(start, stop, CHUNK_ROWS):
        end = min(at + CHUNK_ROWS, stop)
        rows = np.empty((end - at, width), dtype=object)
        for j, column in enumerate(columns):
            rows[:, j] = column.objects(at, end)
        whole = (end - at) // ROWS_PER_STATEMENT * ROWS_PER_STATEMENT
        if whole:
            flat = rows[:whole].reshape(-1, width * ROWS_PER_STATEMENT)
            connection.executemany(many, flat.tolist())
        if whole < end - at:
            connection.executemany(head + one, rows[whole:].tolist())


def _fork_part(part: Path, calls: Columns, start: int, stop: int) -> int:
    """A forked process that writes calls `start:stop` into a new file `part`: its pid."""
    part.unlink(missing_ok=True)
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        connection = _connect(part)
        connection.execute("BEGIN")
        connection.execute(next(s for s in table_sql() if s.startswith("CREATE TABLE nccl_calls")))
        _insert(connection, calls, start, stop)
        connection.execute("COMMIT")
        connection.close()
        code = 0
    except BaseException as exc:  # the parent reports it; nothing may unwind past the fork
        with contextlib.suppress(Exception):
            os.write(2, f"fr-analyze: {part}: {exc}\n".encode())
    finally:
        os._exit(code)


def _wait(pid: int, part: Path) -> None:
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise sqlite3.OperationalError(f"the process that wrote {part.name} failed")


_BULK_PRAGMAS = (
    "journal_mode = OFF",  # a new file, renamed onto the destination when complete
    "synchronous = OFF",  # the rename is the commit (the file is synced before it)
    "foreign_keys = OFF",  # they hold by construction; checking costs 3 lookups a call
    "cache_size = -262144",  # 256 MiB of pages, so that index builds rarely spill
    "threads = 2",  # helper threads for the index builds' sorts, where SQLite has them
)


def _sql_column(name: str, column: Column) -> Column:
    """A column as SQL stores it: lists as JSON text (each distinct value encoded once),
    negative group ids as NULL."""
    if kind(name) in _JSON_KINDS:
        if column.distinct is not None:
            encoded = np.empty(len(column.distinct), dtype=object)
            encoded[:] = [json.dumps(v) for v in column.distinct]
            column = Column(column.values, encoded, column.missing)
        else:
            encoded = np.empty(len(column.values), dtype=object)
            encoded[:] = [json.dumps(v) for v in column.values]
            column = Column(encoded)
    if name in NULL_WHEN_NEGATIVE:
        column = column.with_null_below_zero()
    return column
