"""The flat database as a pickle (`-o db.pkl`): plain builtin types only, loadable without
fr_analyzer, and read back safely by `load_db()`.

Layout: `{"schema": "fr-analyze.db/1", "meta": {...}, "tables": {name: {"columns": [...],
"rows": [[...], ...]}}}`; the tables and their columns are `tables.COLUMNS` (see `tables`).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FrAnalyzerError
from ..load import unpickle
from ..memory import collector_paused, small_pages
from ..pipeline import Analysis
from .output import write_atomic
from .tables import COLUMNS, SCHEMA, meta, tables

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
    """Write the pickle database of `analysis` to `path`, atomically."""
    write_atomic(path, pickle.dumps(build(analysis), protocol=4))


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
