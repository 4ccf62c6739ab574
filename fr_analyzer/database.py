"""The flat database (`-o db.pkl`): plain builtin types only, loadable without fr_analyzer.

Layout: `{"schema": "fr-analyze.db/1", "meta": {...}, "tables": {name: {"columns": [...],
"rows": [[...], ...]}}}`. Tables: `groups`, `memberships`, `collectives` (one row per
collective unit and per matched send/recv pair), `nccl_calls` (one row per entry of every
rank), `tracebacks` (deduplicated stacks that calls reference by `traceback_id`) and `findings`
(each with its role: the root cause, a symptom it explains, independent, or ops in flight).
`meta` holds the conclusion: status, the answer, the verdict object and the root cause.
Ids join: `collectives.group_id` → `groups.id`, `nccl_calls.collective_id` → `collectives.id`.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .dumps import NoGlobalsUnpickler
from .dumps.common import collector_paused, small_pages
from .errors import FrAnalyzerError
from .model import STATE_NAMES, UnitKind
from .output import write_atomic
from .pipeline import Analysis
from .report_json import finding_json, root_cause_json, verdict_json

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


def build(analysis: Analysis) -> dict[str, Any]:
    """The database as builtins, for either writer. Built with the cycle collector paused (its
    passes over the millions of rows, which hold no cycles, cost more than building them) and
    numpy's large arrays in small pages (`small_pages`)."""
    with collector_paused(), small_pages():
        return _build(analysis)


def _build(analysis: Analysis) -> dict[str, Any]:
    t, groups, m = analysis.table, analysis.groups, analysis.matches
    loaded = set(groups.loaded_ranks)
    tables: dict[str, list[list[Any]]] = {name: [] for name in COLUMNS}
    for g in groups.groups:
        tables["groups"].append([g.uid, g.name, g.desc, g.size, list(g.ranks), g.source.value])
        for local, rank in enumerate(g.ranks):
            tables["memberships"].append(
                [len(tables["memberships"]), g.uid, rank, local, rank in loaded]
            )
    units = m.collectives
    for u in range(len(units.seq)):
        tables["collectives"].append(
            [
                u,
                "collective",
                int(units.group[u]),
                int(units.seq[u]),
                None,
                units.op[u],
                int(units.ranks_present[u]),
                int(units.ranks_expected[u]),
                bool(units.passed[u]),
            ]
        )
    n_units = len(units.seq)
    pair_id = np.full(t.n, -1, dtype=np.int64)
    for i, (s, r) in enumerate(zip(m.p2p.send_row.tolist(), m.p2p.recv_row.tolist(), strict=True)):
        cid = n_units + i
        pair_id[s] = pair_id[r] = cid
        tables["collectives"].append(
            [
                cid,
                "p2p",
                int(groups.entry_group[s]),
                None,
                int(t.p2p_seq[s]),
                "send/recv",
                2,
                2,
                True,
            ]
        )
    collective_id = np.where(units.entry_unit >= 0, units.entry_unit, pair_id)
    tables["tracebacks"] = [
        [
            i,
            [[f.name, f.filename, f.line] for f in stack],
            "\n".join(f"{f.name} at {f.filename}:{f.line}" for f in stack),
        ]
        for i, stack in enumerate(t.stacks)
    ]
    tables["nccl_calls"] = _calls(analysis, collective_id)
    c = analysis.conclusion
    for i, j in enumerate(c.findings):
        f = j.finding
        fj = finding_json(f)
        tables["findings"].append(
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
    s = analysis.summary
    meta = {
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
    return {
        "schema": SCHEMA,
        "meta": meta,
        "tables": {
            name: {"columns": list(COLUMNS[name]), "rows": rows} for name, rows in tables.items()
        },
    }


def _calls(analysis: Analysis, collective_id: np.ndarray) -> list[list[Any]]:
    """The `nccl_calls` rows: one object array, a column at a time (numpy makes each value a
    builtin in C; a code's value is looked up in an object array), which then gives its rows
    as lists. Read a row at a time, the numpy scalars cost 15 s of CPU at 1,024 ranks (2M
    entries). Rows with equal shapes or dtypes share one list, as they always have."""
    t, groups, m = analysis.table, analysis.groups, analysis.matches
    unit_names = {k.value: k.name.lower() for k in UnitKind}
    state_names = {int(state): name for state, name in STATE_NAMES.items()}
    shapes = [[list(s) for s in shape] for shape in t.shapes]
    dtypes = [list(d) for d in t.dtypes]
    columns: list[tuple[np.ndarray, np.ndarray | None]] = [
        (np.arange(t.n), None),
        (t.rank, None),
        (t.index, None),
        (t.record_id, None),
        (groups.entry_group, None),
        (collective_id, collective_id < 0),
        (_lookup(t.profiling_names, t.pname), None),
        (_lookup(t.ops, t.op), None),
        (_lookup_named(unit_names, t.unit), None),
        (t.coll_seq, None),
        (t.p2p_seq, None),
        (t.op_id, None),
        (_lookup_named(state_names, t.state), None),
        (t.retired, None),
        (m.done, None),
        (_lookup(shapes, t.in_shape), None),
        (_lookup(shapes, t.out_shape), None),
        (_lookup(dtypes, t.in_dtype), None),
        (_lookup(dtypes, t.out_dtype), None),
        (t.t_created, t.t_created < 0),
        (t.t_started, t.t_started < 0),
        (t.t_completed, t.t_completed < 0),
        (t.duration_ms, np.isnan(t.duration_ms)),
        (t.timeout_ms, None),
        (t.stack, t.stack < 0),
    ]
    rows = np.empty((t.n, len(columns)), dtype=object)
    for j, (values, missing) in enumerate(columns):
        rows[:, j] = values
        if missing is not None:
            rows[missing, j] = None
    found: list[list[Any]] = rows.tolist()
    return found


def _lookup(values: list[Any], codes: np.ndarray) -> np.ndarray:
    """The value of each code: one object array gather."""
    table = np.fromiter(values, dtype=object, count=len(values))  # lists stay whole
    return _gather(table, codes)


def _lookup_named(names: dict[int, str], codes: np.ndarray) -> np.ndarray:
    """The name of each code."""
    table = np.empty(max(names) + 1, dtype=object)
    for code, name in names.items():
        table[code] = name
    return _gather(table, codes)


def _gather(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= len(table)):
        raise ValueError("a code with no value")  # never: the loader codes every value
    found: np.ndarray = table[codes]
    return found


def write(analysis: Analysis, path: Path) -> None:
    write_atomic(path, pickle.dumps(build(analysis), protocol=4))


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: list[list[Any]]

    def records(self) -> list[dict[str, Any]]:
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
        raw = NoGlobalsUnpickler(io.BytesIO(Path(path).read_bytes())).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise FrAnalyzerError(f"{path}: not an fr-analyze database: {exc}") from None
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise FrAnalyzerError(f"{path}: not an fr-analyze database (schema {SCHEMA})")
    tables = {name: Table(tuple(t["columns"]), t["rows"]) for name, t in raw["tables"].items()}
    return Database(raw["schema"], raw["meta"], tables)
