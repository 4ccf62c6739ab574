"""The flat database as a pickle (`-o db.pkl`): plain builtin types only, loadable without
fr_analyzer, and read back safely by `load_db()`.

Layout: `{"schema": "fr-analyze.db/1", "meta": {...}, "tables": {name: {"columns": [...],
"rows": [[...], ...]}}}`; the tables and their columns are `tables.COLUMNS` (see `tables`).
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FrAnalyzerError
from ..load import unpickle
from ..memory import collector_paused, small_pages
from ..pipeline import Analysis
from .output import atomic_writer, write_atomic
from .tables import COLUMNS, SCHEMA, Columns, StreamedColumns, meta, parts_of, tables

__all__ = ["COLUMNS", "SCHEMA", "Database", "Table", "build", "load_db", "write"]


def build(analysis: Analysis) -> dict[str, Any]:
    """The database as builtins, for the pickle. Built with the cycle collector paused (its
    passes over the millions of rows, which hold no cycles, cost more than building them) and
    numpy's large arrays in small pages (`small_pages`)."""
    with collector_paused(), small_pages():
        columnar = tables(analysis)
        return {
            "schema": SCHEMA,
            "meta": meta(analysis),
            "tables": {
                name: {"columns": list(COLUMNS[name]), "rows": table.rows()}
                for name, table in columnar.items()
            },
        }


def write(analysis: Analysis, path: Path) -> None:
    """Write the pickle database of `analysis` to `path`, atomically: whole, or where the
    analysis' engine keeps the rows (`Analysis.calls`), its calls a chunk at a time
    (`_write_streamed`)."""
    if analysis.calls is None:
        write_atomic(path, pickle.dumps(build(analysis), protocol=4))
        return
    with collector_paused(), small_pages():
        _write_streamed(analysis, tables(analysis), path)


_ROWS_HERE = "\x00fr-analyze: the rows of nccl_calls go here\x00"
"""The placeholder of the calls' rows in the pickle of everything else (`_write_streamed`)."""


def _write_streamed(
    analysis: Analysis, columnar: dict[str, Columns | StreamedColumns], path: Path
) -> None:
    """The pickle, its `nccl_calls` rows written a chunk at a time, never all held.

    Everything else is pickled first (protocol 2), with the calls last and their rows a
    list of one placeholder; the file is that pickle up to the placeholder, then each
    chunk's rows as the opcodes that append them to the list (each chunk pickled as a list
    of its own, the list itself cut off), then the pickle's end, which only sets the dicts'
    items. Protocol 2 names its memo's slots (`BINPUT n`), so each chunk's pickler, which
    numbers them from the start, overwrites slots the end never reads; rows of a chunk
    share their repeated values as they do in one pickle. `pickle.load` gives what `build`
    gives, the tables' keys in another order."""
    calls = columnar["nccl_calls"]
    doc = {
        "schema": SCHEMA,
        "meta": meta(analysis),
        "tables": {
            name: {
                "columns": list(COLUMNS[name]),
                "rows": [_ROWS_HERE] if name == "nccl_calls" else table.rows(),
            }
            for name, table in (
                *((n, t) for n, t in columnar.items() if t is not calls),
                ("nccl_calls", calls),
            )
        },
    }
    whole = pickle.dumps(doc, protocol=2)
    head, tail = _around_placeholder(whole)
    with atomic_writer(path) as stream:
        stream.write(head)
        for part in parts_of(calls):
            stream.write(_appended(part.rows()))
        stream.write(tail)


def _around_placeholder(whole: bytes) -> tuple[bytes, bytes]:
    """A protocol-2 pickle cut around its one placeholder: what comes before the
    placeholder string, and what comes after it is appended to its list (which must only
    set items and stop: nothing there reads the memo)."""
    encoded = _ROWS_HERE.encode()
    pushed = b"X" + struct.pack("<I", len(encoded)) + encoded  # BINUNICODE
    at = whole.find(pushed)
    if at < 0 or whole.find(pushed, at + 1) >= 0:
        raise AssertionError("the placeholder of the calls' rows is not in the pickle once")
    rest = at + len(pushed)
    if whole[rest : rest + 1] == b"q":  # BINPUT n
        rest += 2
    elif whole[rest : rest + 1] == b"r":  # LONG_BINPUT n
        rest += 5
    if whole[rest : rest + 1] != b"a":  # APPEND
        raise AssertionError("the placeholder of the calls' rows is not appended to a list")
    tail = whole[rest + 1 :]
    if not tail.endswith(b".") or set(tail) - set(b"us."):
        raise AssertionError("the pickle goes on past the calls' rows")
    return whole[:at], tail


def _appended(rows: list[list[Any]]) -> bytes:
    """The opcodes that append `rows` to the list on the pickle's stack: their list's
    pickle (protocol 2) without its header, the list itself and its end."""
    data = pickle.dumps(rows, protocol=2)
    start = b"\x80\x02]q\x00"  # PROTO 2, EMPTY_LIST, BINPUT 0
    if not data.startswith(start) or not data.endswith(b"."):
        raise AssertionError("a chunk of rows did not pickle as a list")
    return data[len(start) : -1]


@dataclass(frozen=True)
class Table:
    """One table of a database read back: its column names and its rows."""

    columns: tuple[str, ...]
    rows: list[list[Any]]

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts keyed by column name."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


@dataclass(frozen=True)
class Database:
    """A database read back by `load_db()`."""

    schema: str
    meta: dict[str, Any]
    tables: dict[str, Table]

    def __getitem__(self, name: str) -> Table:
        return self.tables[name]


def load_db(path: str | Path) -> Database:
    """Read a database written with `-o` (safely: no globals are ever loaded)."""
    try:
        raw = unpickle(Path(path).read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise FrAnalyzerError(f"{path}: not an fr-analyze database: {exc}") from None
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise FrAnalyzerError(f"{path}: not an fr-analyze database (schema {SCHEMA})")
    tables = {name: Table(tuple(t["columns"]), t["rows"]) for name, t in raw["tables"].items()}
    return Database(raw["schema"], raw["meta"], tables)
