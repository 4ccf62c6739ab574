"""The flat database's tables (schema `fr-analyze.db/1`), shared by its three writers: the
pickle (`database`), SQLite (`database_sqlite`) and Parquet (`database_parquet`).

Tables: `groups`, `memberships`, `collectives` (one row per collective unit and per matched
send/recv pair), `nccl_calls` (one row per entry of every rank), `tracebacks` (deduplicated
stacks that calls reference by `traceback_id`) and `findings` (each with its role: the root
cause, a symptom it explains, independent, or ops in flight). `meta` holds the conclusion:
status, the answer, the verdict object and the root cause. Ids join: `collectives.group_id` →
`groups.id`, `nccl_calls.collective_id` → `collectives.id`.

This module is the one source of the schema: `COLUMNS` names the tables and their columns,
`KINDS` says what each column holds, and `tables()` gives every table as columns (numpy arrays;
repeated values such as shapes and op names coded into one copy each), which the pickle turns
into rows and the SQLite and Parquet writers read a chunk at a time. Where the analysis' engine
keeps the rows (`Analysis.calls`: a Ray cluster, the driver holding no table), `nccl_calls`
comes a chunk of the job's rows at a time (`StreamedColumns`, one `Columns` each), and
`collectives` from the job's units and pairs as the parts numbered them (`match.outcomes`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..match.outcomes import JobUnits
from ..memory import collector_paused, small_pages
from ..model.records import STATE_NAMES, UnitKind
from ..model.table import EntryTable
from ..pipeline import Analysis, JobCalls
from .presentation import finding_record as finding_json
from .presentation import root_cause_record as root_cause_json
from .presentation import verdict_record as verdict_json

SCHEMA = "fr-analyze.db/1"

COLUMNS: dict[str, tuple[str, ...]] = {
    "groups": ("id", "name", "desc", "size", "ranks", "membership_source"),
    "memberships": ("id", "group_id", "rank", "local_rank", "has_dump"),
    "collectives": (
        "id",
        "kind",
        "group_id",
        "collective_seq_id",
        "p2p_seq_id",
        "op",
        "ranks_present",
        "ranks_expected",
        "passed",
    ),
    "nccl_calls": (
        "id",
        "rank",
        "entry_index",
        "record_id",
        "group_id",
        "collective_id",
        "profiling_name",
        "op",
        "unit",
        "collective_seq_id",
        "p2p_seq_id",
        "op_id",
        "state",
        "retired",
        "completed",
        "input_sizes",
        "output_sizes",
        "input_dtypes",
        "output_dtypes",
        "time_created_ns",
        "time_discovered_started_ns",
        "time_discovered_completed_ns",
        "duration_ms",
        "timeout_ms",
        "traceback_id",
    ),
    "tracebacks": ("id", "frames", "text"),
    "findings": (
        "id",
        "kind",
        "group_id",
        "collective_seq_id",
        "p2p_seq_id",
        "op",
        "ranks",
        "culprit_ranks",
        "detail",
        "is_verdict",
        "role",
        "explained_by_root_cause",
        "explanation",
    ),
}


class Kind(enum.Enum):
    """What a column holds; the SQLite and Parquet writers map each kind to their types."""

    INT = "integer"
    FLOAT = "float"
    BOOL = "boolean"
    TEXT = "text"
    INTS = "list of integers"
    TEXTS = "list of texts"
    SHAPES = "list of lists of integers"
    FRAMES = "list of [name, filename, line]"


KINDS: dict[str, Kind] = {
    "name": Kind.TEXT,
    "desc": Kind.TEXT,
    "membership_source": Kind.TEXT,
    "kind": Kind.TEXT,
    "op": Kind.TEXT,
    "profiling_name": Kind.TEXT,
    "unit": Kind.TEXT,
    "state": Kind.TEXT,
    "text": Kind.TEXT,
    "detail": Kind.TEXT,
    "role": Kind.TEXT,
    "explanation": Kind.TEXT,
    "duration_ms": Kind.FLOAT,
    "has_dump": Kind.BOOL,
    "passed": Kind.BOOL,
    "retired": Kind.BOOL,
    "completed": Kind.BOOL,
    "is_verdict": Kind.BOOL,
    "explained_by_root_cause": Kind.BOOL,
    "ranks": Kind.INTS,
    "culprit_ranks": Kind.INTS,
    "input_sizes": Kind.SHAPES,
    "output_sizes": Kind.SHAPES,
    "input_dtypes": Kind.TEXTS,
    "output_dtypes": Kind.TEXTS,
    "frames": Kind.FRAMES,
}
"""The kind of every column, by name (a name means the same in every table); any column not
named here holds integers (ids, ranks, sequence ids, counts, nanoseconds)."""

NULL_WHEN_NEGATIVE = frozenset({"group_id"})
"""Columns whose negative values (an entry whose group is unknown: -1) the SQL-like writers
store as NULL, so that every foreign key joins. The pickle keeps them as they are."""


def kind(column: str) -> Kind:
    """The kind of a column (see `KINDS`)."""
    return KINDS.get(column, Kind.INT)


@dataclass(frozen=True)
class Column:
    """One column of a table, a value per row: `values` itself, or, when `distinct` is given,
    a code per row into `distinct` (a repeated value, such as a shape or an op name, held once);
    `missing` marks the rows whose value is None (NULL)."""

    values: np.ndarray
    distinct: np.ndarray | None = None  # an object array: its lists stay whole
    missing: np.ndarray | None = None

    def objects(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows `start:stop` as an object array of builtins (None where missing); rows with
        equal coded values share one object."""
        if self.distinct is not None:
            out: np.ndarray = self.distinct[self.values[start:stop]]  # a gather: a new array
        else:
            out = self.values[start:stop].astype(object)  # a copy
        if self.missing is not None:
            out[self.missing[start:stop]] = None
        return out

    def with_null_below_zero(self) -> Column:
        """This column with negative values marked missing (see `NULL_WHEN_NEGATIVE`)."""
        if self.distinct is not None or self.values.dtype == object:
            negative = np.fromiter(
                (v is not None and v < 0 for v in self.objects()), bool, len(self.values)
            )
        else:
            negative = self.values < 0
        if not negative.any():
            return self
        missing = negative if self.missing is None else (self.missing | negative)
        return Column(self.values, self.distinct, missing)


@dataclass(frozen=True)
class Columns:
    """One table as columns, in the order of `COLUMNS[name]`."""

    name: str
    columns: tuple[Column, ...]
    length: int

    @property
    def names(self) -> tuple[str, ...]:
        """The table's column names, in order."""
        return COLUMNS[self.name]

    def rows(self, start: int = 0, stop: int | None = None) -> list[list[Any]]:
        """Rows `start:stop` as lists of builtins: one object array filled a column at a time
        (numpy makes each value a builtin in C), which then gives its rows as lists: numpy
        scalars read a row at a time cost far more (benchmarks/README.md, "Measured in the
        code")."""
        stop = self.length if stop is None else min(stop, self.length)
        out = np.empty((max(stop - start, 0), len(self.columns)), dtype=object)
        for j, column in enumerate(self.columns):
            out[:, j] = column.objects(start, stop)
        found: list[list[Any]] = out.tolist()
        return found

    def chunks(self, size: int) -> Iterator[tuple[int, int]]:
        """`(start, stop)` of consecutive row ranges of at most `size` rows."""
        for start in range(0, self.length, size):
            yield start, min(start + size, self.length)


def tables(analysis: Analysis) -> dict[str, Columns | StreamedColumns]:
    """Every table of the database as columns, in `COLUMNS` order: the one source of the
    pickle's, the SQLite's and the Parquet's rows."""
    with collector_paused(), small_pages():
        return _tables(analysis)


def meta(analysis: Analysis) -> dict[str, Any]:
    """The database's `meta`: the dumps read and the conclusion."""
    s, c = analysis.summary, analysis.conclusion
    return {
        "directory": s.directory,
        "source": {"kind": s.source_kind, "location": s.directory},
        "ranks_loaded": list(s.ranks_loaded),
        "ranks_missing": list(s.ranks_missing),
        "versions": {k: list(v) for k, v in s.versions.items()},
        "backends": list(s.backends),
        "readers": {name: list(ranks) for name, ranks in s.readers.items()},
        "verdict": c.answer,
        "status": c.status.value,
        "verdict_detail": verdict_json(c),
        "root_cause": root_cause_json(c.root),
    }


def meta_rows(analysis: Analysis) -> list[tuple[str, str]]:
    """`meta` as the `(key, value)` rows of the SQL-like writers' `meta` table, `schema` first:
    text values as they are, others as JSON."""
    found = {"schema": SCHEMA, **meta(analysis)}
    return [(key, v if isinstance(v, str) else json.dumps(v)) for key, v in found.items()]


def _tables(analysis: Analysis) -> dict[str, Columns | StreamedColumns]:
    t, groups = analysis.table, analysis.groups
    loaded = set(groups.loaded_ranks)
    group_rows: list[list[Any]] = []
    member_rows: list[list[Any]] = []
    for g in groups.groups:
        group_rows.append([g.uid, g.name, g.desc, g.size, list(g.ranks), g.source.value])
        for local, rank in enumerate(g.ranks):
            member_rows.append([len(member_rows), g.uid, rank, local, rank in loaded])
    calls: Columns | StreamedColumns
    if analysis.calls is not None:  # every entry from where its engine keeps them
        collectives = _collectives_of(analysis.calls.units)
        calls = StreamedColumns("nccl_calls", analysis.calls, analysis.entries, _Lookups(t))
    else:
        collectives, collective_id = _collectives(analysis)
        calls = _calls(analysis, collective_id)
    traceback_rows = [
        [
            i,
            [[f.name, f.filename, f.line] for f in stack],
            "\n".join(f"{f.name} at {f.filename}:{f.line}" for f in stack),
        ]
        for i, stack in enumerate(t.stacks)
    ]
    c = analysis.conclusion
    finding_rows: list[list[Any]] = []
    for i, j in enumerate(c.findings):
        f = j.finding
        fj = finding_json(f)
        finding_rows.append(
            [
                i,
                fj["kind"],
                f.group.uid if f.group else None,
                fj["collective_seq_id"],
                fj["p2p_seq_id"],
                fj["op"],
                fj["ranks"],
                fj["culprit_ranks"],
                fj["detail"],
                f is c.root_finding,
                j.role.value,
                j.explained,
                j.link or None,
            ]
        )
    return {
        "groups": _from_rows("groups", group_rows),
        "memberships": _from_rows("memberships", member_rows),
        "collectives": collectives,
        "nccl_calls": calls,
        "tracebacks": _from_rows("tracebacks", traceback_rows),
        "findings": _from_rows("findings", finding_rows),
    }


def _from_rows(name: str, rows: list[list[Any]]) -> Columns:
    """A small table built a row at a time, as columns."""
    columns = []
    for j in range(len(COLUMNS[name])):
        values = np.empty(len(rows), dtype=object)
        for i, row in enumerate(rows):
            values[i] = row[j]  # one at a time: a list value stays one object
        columns.append(Column(values))
    return Columns(name, tuple(columns), len(rows))


def _collectives(analysis: Analysis) -> tuple[Columns, np.ndarray]:
    """The `collectives` table (collective units, then matched send/recv pairs) and the
    collective id of every entry (-1: none)."""
    t, groups, m = analysis.table, analysis.groups, analysis.matches
    units = m.collectives
    n_units, n_pairs = len(units.seq), len(m.p2p.send_row)
    send = m.p2p.send_row.astype(np.int64)
    pair_id = np.full(t.n, -1, dtype=np.int64)
    pair_id[send] = pair_id[m.p2p.recv_row] = n_units + np.arange(n_pairs)
    collective_id = np.where(units.entry_unit >= 0, units.entry_unit, pair_id)
    job = JobUnits(
        units.group,
        units.seq,
        units.op,
        units.ranks_present,
        units.ranks_expected,
        units.passed,
        groups.entry_group[send],
        t.p2p_seq[send],
        {},
        {},
    )
    return _collectives_of(job), collective_id


def _collectives_of(units: JobUnits) -> Columns:
    """The `collectives` table of the job's units and pairs (`match.outcomes.JobUnits`: a
    whole result's, or those the parts numbered)."""
    n_units, n_pairs = units.units, units.pairs
    is_p2p = np.concatenate([np.zeros(n_units, bool), np.ones(n_pairs, bool)])
    ops = np.empty(n_units + 1, dtype=object)
    ops[:n_units] = units.op
    ops[n_units] = "send/recv"
    op_code = np.concatenate([np.arange(n_units), np.full(n_pairs, n_units)])
    columns = (
        Column(np.arange(n_units + n_pairs)),
        Column(is_p2p.astype(np.int8), _objects(["collective", "p2p"])),
        Column(np.concatenate([units.group.astype(np.int64), units.pair_group])),
        Column(np.concatenate([units.seq, np.zeros(n_pairs, np.int64)]), missing=is_p2p),
        Column(np.concatenate([np.zeros(n_units, np.int64), units.pair_seq]), missing=~is_p2p),
        Column(op_code, ops),
        Column(np.concatenate([units.ranks_present, np.full(n_pairs, 2, np.int32)])),
        Column(np.concatenate([units.ranks_expected, np.full(n_pairs, 2, np.int32)])),
        Column(np.concatenate([units.passed, np.ones(n_pairs, bool)])),
    )
    return Columns("collectives", columns, n_units + n_pairs)


class _Lookups:
    """The value of each code of the job's lists (`t`'s: every chunk codes by them), as the
    `nccl_calls` columns show them: made once."""

    def __init__(self, t: EntryTable) -> None:
        self.units = _named({k.value: k.name.lower() for k in UnitKind})
        self.states = _named({int(state): name for state, name in STATE_NAMES.items()})
        self.shapes = _objects([[list(s) for s in shape] for shape in t.shapes])
        self.dtypes = _objects([list(d) for d in t.dtypes])
        self.profiling_names = _objects(t.profiling_names)
        self.ops = _objects(t.ops)


class StreamedColumns:
    """The `nccl_calls` table of a job whose rows its engine keeps (`pipeline.JobCalls`):
    its rows `length` of them, a chunk at a time (`parts`), each chunk a `Columns` of its
    own whose ids run on from the chunk before. The writers that take a chunk at a time
    (Parquet, SQLite) hold one at a time; `rows` holds them all."""

    def __init__(self, name: str, calls: JobCalls, length: int, looked: _Lookups) -> None:
        self.name, self.length = name, length
        self._calls, self._looked = calls, looked

    @property
    def names(self) -> tuple[str, ...]:
        """The table's column names, in order."""
        return COLUMNS[self.name]

    def parts(self) -> Iterator[Columns]:
        """The table's rows in order, a chunk of the job's rows at a time."""
        for chunk in self._calls.chunks():
            o = chunk.outcome
            yield _calls_of(chunk.table, o.group, o.collective, o.done, chunk.start, self._looked)

    def rows(self) -> list[list[Any]]:
        """Every row as lists of builtins (all held at once)."""
        return [row for part in self.parts() for row in part.rows()]


def parts_of(table: Columns | StreamedColumns) -> Iterator[Columns]:
    """A table's rows in order, as one `Columns` or a chunk of rows at a time."""
    if isinstance(table, Columns):
        yield table
    else:
        yield from table.parts()


def _calls(analysis: Analysis, collective_id: np.ndarray) -> Columns:
    """The `nccl_calls` table: the entry table's columns, codes looked up in object arrays.
    Rows with equal shapes or dtypes share one list, as they always have."""
    t, groups, m = analysis.table, analysis.groups, analysis.matches
    return _calls_of(t, groups.entry_group, collective_id, m.done, 0, _Lookups(t))


def _calls_of(
    t: EntryTable,
    entry_group: np.ndarray,
    collective_id: np.ndarray,
    done: np.ndarray,
    first_id: int,
    looked: _Lookups,
) -> Columns:
    """The `nccl_calls` rows of `t` (ids from `first_id`), with each row's group, collective
    and completion."""
    columns = (
        Column(np.arange(first_id, first_id + t.n)),
        Column(t.rank),
        Column(t.index),
        Column(t.record_id),
        Column(entry_group),
        Column(collective_id, missing=collective_id < 0),
        _coded(looked.profiling_names, t.pname),
        _coded(looked.ops, t.op),
        _coded(looked.units, t.unit),
        Column(t.coll_seq),
        Column(t.p2p_seq),
        Column(t.op_id),
        _coded(looked.states, t.state),
        Column(t.retired),
        Column(done),
        _coded(looked.shapes, t.in_shape),
        _coded(looked.shapes, t.out_shape),
        _coded(looked.dtypes, t.in_dtype),
        _coded(looked.dtypes, t.out_dtype),
        Column(t.t_created, missing=t.t_created < 0),
        Column(t.t_started, missing=t.t_started < 0),
        Column(t.t_completed, missing=t.t_completed < 0),
        Column(t.duration_ms, missing=np.isnan(t.duration_ms)),
        Column(t.timeout_ms),
        Column(t.stack, missing=t.stack < 0),
    )
    return Columns("nccl_calls", columns, t.n)


def _objects(values: Sequence[Any]) -> np.ndarray:
    """An object array of `values` (lists stay whole)."""
    found = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        found[i] = value
    return found


def _named(names: dict[int, str]) -> np.ndarray:
    """An object array: the name of each code."""
    table = np.empty(max(names) + 1, dtype=object)
    for code, name in names.items():
        table[code] = name
    return table


def _coded(distinct: np.ndarray, codes: np.ndarray) -> Column:
    if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= len(distinct)):
        raise ValueError("a code with no value")  # never: the loader codes every value
    return Column(codes, distinct)
