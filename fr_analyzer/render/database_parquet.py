"""The flat database as Parquet (`-o db.parquet`): a folder with one Parquet file per table
of `fr-analyze.db/1` (`tables.COLUMNS`), the same tables and columns as the SQLite database,
`meta` included, for DuckDB, pandas, polars and Spark at any scale.

Values are those of the SQLite database, in Parquet's own types rather than JSON text: lists
(member ranks, sizes, dtypes) are Parquet lists, a stack's `frames` a list of
`{name, filename, line}`, booleans booleans; a group id of -1 is NULL, as in SQLite, so that
every join holds. `meta.parquet` has SQLite's `meta` rows (`key`, `value`: text as it is,
other values as JSON).

The folder is written beside its destination under a temporary name, then renamed onto it;
a folder of an earlier run is replaced (a folder holding anything else is refused). Rows are
converted a chunk at a time (one row group each), so memory stays flat at any size.
pyarrow is an optional extra: `pip install 'fr-analyze[parquet]'`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import OutputError, UsageError
from ..pipeline import Analysis
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

SUFFIXES = (".parquet",)

ROW_GROUP_ROWS = 1 << 20
"""Rows converted and written at a time: one Parquet row group."""

META_TABLE = "meta"

EXTRA_HINT = "pip install 'fr-analyze[parquet]'"


def wanted(path: Path) -> bool:
    """Whether `-o path` asks for Parquet (by its suffix)."""
    return path.suffix.lower() in SUFFIXES


def require() -> None:
    """Raise `UsageError` (exit 2) when pyarrow is not installed; the CLI calls it before the
    analysis so that a missing extra is found at once."""
    try:
        import pyarrow  # type: ignore[import-untyped]
        import pyarrow.parquet  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        raise UsageError(f"-o *.parquet needs pyarrow: {EXTRA_HINT}") from None


def file_names() -> tuple[str, ...]:
    """The files of the folder: one per table, `meta` first."""
    return tuple(f"{name}.parquet" for name in (META_TABLE, *COLUMNS))


def write(analysis: Analysis, path: Path) -> None:
    """Write the database to the folder `path` as Parquet, atomically."""
    require()
    _check_replaceable(path)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        _write_tables(tmp, meta_rows(analysis), tables(analysis))
        os.chmod(tmp, 0o777 & ~_umask())
        _replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_replaceable(path: Path) -> None:
    """A folder of an earlier run may be replaced; anything else there is refused."""
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        raise OutputError(f"{path}: exists and is not a Parquet folder: refusing to replace it")
    ours = set(file_names())
    others = sorted(p.name for p in path.iterdir() if p.name not in ours)
    if others:
        raise OutputError(
            f"{path}: a folder that holds other files ({', '.join(others[:3])}): "
            "refusing to replace it"
        )


def _replace(tmp: Path, path: Path) -> None:
    """`tmp` becomes `path`: a rename; a folder of an earlier run is first renamed aside (a
    folder cannot be renamed onto a folder that is not empty), then removed."""
    if not os.path.lexists(path):
        os.rename(tmp, path)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=tmp.parent))
    os.rename(path, aside / "old")
    try:
        os.rename(tmp, path)
    except OSError:
        os.rename(aside / "old", path)  # put the earlier folder back
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_tables(
    folder: Path, meta: list[tuple[str, str]], columnar: dict[str, Columns | StreamedColumns]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table(
            {
                "key": pa.array([k for k, _ in meta], pa.string()),
                "value": pa.array([v for _, v in meta], pa.string()),
            }
        ),
        folder / f"{META_TABLE}.parquet",
        compression="zstd",
    )
    for name, whole in columnar.items():
        schema = pa.schema([pa.field(n, arrow_type(n)) for n in whole.names])
        with pq.ParquetWriter(folder / f"{name}.parquet", schema, compression="zstd") as out:
            if not whole.length:
                out.write_table(schema.empty_table())
            for table in parts_of(whole):  # the whole table, or a chunk of its rows at a time
                columns = [_prepared(n, c) for n, c in zip(table.names, table.columns, strict=True)]
                for start, stop in table.chunks(ROW_GROUP_ROWS):
                    arrays = [c.chunk(start, stop) for c in columns]
                    out.write_table(pa.Table.from_arrays(arrays, schema=schema))


def arrow_type(column: str) -> Any:
    """The Arrow type of a column (by its kind)."""
    import pyarrow as pa

    frame = pa.struct(
        [pa.field("name", pa.string()), pa.field("filename", pa.string()), ("line", pa.int64())]
    )
    return {
        Kind.INT: pa.int64(),
        Kind.FLOAT: pa.float64(),
        Kind.BOOL: pa.bool_(),
        Kind.TEXT: pa.string(),
        Kind.INTS: pa.list_(pa.int64()),
        Kind.TEXTS: pa.list_(pa.string()),
        Kind.SHAPES: pa.list_(pa.list_(pa.int64())),
        Kind.FRAMES: pa.list_(frame),
    }[kind(column)]


class _Prepared:
    """A column ready to give Arrow arrays a chunk at a time: numbers straight from numpy,
    coded values as one Arrow array of the distinct values gathered by code, the rest (small
    tables) from builtins."""

    def __init__(self, column: Column, type_: Any, frames: bool) -> None:
        import pyarrow as pa

        self.column, self.type, self.frames = column, type_, frames
        self.distinct = (
            None
            if column.distinct is None
            else pa.array(self._builtins(column.distinct.tolist()), type=type_)
        )

    def _builtins(self, values: list[Any]) -> list[Any]:
        if not self.frames:
            return values
        return [
            None if v is None else [{"name": a, "filename": b, "line": c} for a, b, c in v]
            for v in values
        ]

    def chunk(self, start: int, stop: int) -> Any:
        import pyarrow as pa

        c = self.column
        missing = None if c.missing is None else c.missing[start:stop]
        if self.distinct is not None:
            taken = self.distinct.take(pa.array(c.values[start:stop]))
            if missing is not None and missing.any():
                import pyarrow.compute as pc  # type: ignore[import-untyped]

                taken = pc.if_else(pa.array(missing), pa.nulls(len(taken), self.type), taken)
            return taken
        if c.values.dtype != object:
            return pa.array(c.values[start:stop], type=self.type, mask=missing)
        return pa.array(self._builtins(c.objects(start, stop).tolist()), type=self.type)


def _prepared(name: str, column: Column) -> _Prepared:
    if name in NULL_WHEN_NEGATIVE:
        column = column.with_null_below_zero()
    return _Prepared(column, arrow_type(name), kind(name) == Kind.FRAMES)


def read_tables(path: Path) -> dict[str, Any]:
    """The folder's tables as pyarrow tables, by name (`meta` included): for tests and
    scripts."""
    require()
    import pyarrow.parquet as pq

    return {name.removesuffix(".parquet"): pq.read_table(path / name) for name in file_names()}


__all__ = ["arrow_type", "read_tables", "require", "wanted", "write"]
