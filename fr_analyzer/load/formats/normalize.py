"""Normalize one loaded dump into a `RankDump`: its header (version, pg_config, pg_status)
read here, its entries turned into columns by the fastest reader that takes them.

A decoded dump (`decode`, `decode_python`, `decode_json`) or a list of entry dicts goes to
the column-wise reader (`columnar`); what it does not take goes to the careful per-entry
reader (`careful`), and the rank records which reader read it and why a faster one did not.
Coalesced and batched blocks are recognised last (`blocks`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import chain
from typing import Any

import numpy as np

from ...errors import DumpError
from ...model.dump import COLUMNS, GroupClaim, RankColumns, RankDump, RankTables, Reader
from ...model.records import UnitKind
from ..common import DENSE_FLOOR, INT64_MAX, MIN_ENTRY_BYTES
from ..safety.decoders.columns import Decoded, EntryColumns
from ..sources.hosts import host_in_header
from .blocks import find_blocks
from .careful import careful_columns
from .columnar import fast_columns
from .outcomes import NotDecoded
from .values import Bomb, EntryError, ValueReader, as_int, int_or_unset, parse_ranks


def build_rank(
    raw: Any,
    rank: int,
    file: str,
    *,
    nbytes: int | None = None,
    notes: Sequence[str] = (),
    fallback: str = "",
    not_decoded: NotDecoded | None = None,
    dialect: str = "pytorch",
) -> RankDump:
    """Normalize one loaded dump into columns. Whole-dump problems raise DumpError; decoded
    entries that only the careful reader takes raise `NotDecoded` (read the file again).

    `nbytes` (the size the dump was parsed from) enables the checks against dumps that expand
    far beyond their size; `notes` become warnings; `fallback` says why a faster reader did not
    read the file (the decoder, say), and `not_decoded` the decoder's reason; `dialect` the
    recorder that wrote it (`dialects`)."""
    try:
        dump = _build_rank(raw, rank, file, nbytes, notes, fallback, not_decoded)
    except Bomb as exc:
        raise DumpError(file, rank, str(exc)) from None
    return dump if dialect == dump.dialect else replace(dump, dialect=dialect)


def _build_rank(
    raw: Any,
    rank: int,
    file: str,
    nbytes: int | None,
    notes: Sequence[str],
    fallback: str,
    not_decoded: NotDecoded | None,
) -> RankDump:
    if isinstance(raw, Decoded):
        raw, entries = raw.header, raw.entries
    elif not isinstance(raw, dict):
        raise DumpError(
            file,
            rank,
            f"not a Flight Recorder dump (top level is {type(raw).__name__})",
        )
    else:
        entries = raw.get("entries", [])
    if entries is None:
        entries = []
    if not isinstance(entries, list | tuple | EntryColumns):
        raise DumpError(file, rank, "'entries' is not a list")
    if "version" not in raw and "pg_config" not in raw and not entries:
        raise DumpError(file, rank, "not a Flight Recorder dump (no version, pg_config or entries)")
    if nbytes is not None and len(entries) > max(DENSE_FLOOR, nbytes // MIN_ENTRY_BYTES):
        raise DumpError(
            file,
            rank,
            f"refused: {len(entries)} entries in {nbytes} bytes are too many to be real"
            f" (at most one per {MIN_ENTRY_BYTES} bytes; a pickle repeating one entry?)",
        )
    read = ValueReader(nbytes)
    version = read.text(raw.get("version", "unknown")) or "unknown"
    comm = raw.get("comm_lib_version", raw.get("nccl_version", ""))
    warnings = [f"rank {rank}: {note}" for note in notes]

    claims: dict[str, GroupClaim] = {}
    pg_config = raw.get("pg_config")
    usable = isinstance(pg_config, dict) and bool(pg_config)
    if isinstance(pg_config, dict):
        parsed_ranks: dict[Any, tuple[int, ...] | None] = {}
        for key, conf in pg_config.items():
            if not isinstance(conf, dict):
                usable = False
                continue
            name = read.text(conf.get("name", key))
            raw_ranks = conf.get("ranks")
            cache_key = raw_ranks if isinstance(raw_ranks, str) else id(raw_ranks)
            if cache_key not in parsed_ranks:
                parsed_ranks[cache_key] = parse_ranks(raw_ranks)
            ranks = parsed_ranks[cache_key]
            if key == "" or not name or ranks is None or rank not in ranks:
                usable = False  # gloo keys every group by '' with ranks '[]'
                continue
            claims[name] = GroupClaim(name, read.text(conf.get("desc", "")) or "", ranks)
    if not usable:
        claims = {}

    limit = read.limit if read.limit is not None else INT64_MAX
    reader = Reader.DECODER if isinstance(entries, EntryColumns) else Reader.COLUMNS
    errors: list[tuple[int, str]] = []
    try:
        arrays, pg_ids, unknown_backends, unknown_ops = fast_columns(entries, read, limit)
    except NotDecoded as exc:
        if isinstance(entries, EntryColumns):
            raise  # the careful path needs the entries as dicts: the file is read again
        if not_decoded is None:
            not_decoded = exc
        careful = careful_columns(entries, read, limit)
        arrays, pg_ids = careful.arrays, careful.pg_ids
        unknown_backends, unknown_ops = careful.unknown_backends, careful.unknown_ops
        errors = careful.errors
        if careful.odd_states:
            count = sum(careful.odd_states.values())
            warnings.append(
                f"rank {rank}: {count} entr{'y' if count == 1 else 'ies'} with an unknown state"
                f" ({_listed(careful.odd_states)})"
            )
        reader = Reader.PER_ENTRY
        fallback = "; ".join(filter(None, (fallback, str(exc))))
    if unknown_backends:
        warnings.append(f"rank {rank}: unknown backend(s) {_listed(unknown_backends)}")
    if unknown_ops:
        warnings.append(f"rank {rank}: unknown op(s) {_listed(unknown_ops)}")
    record = arrays["record_id"]
    wrapped = bool(len(record) and int(record.min()) > 0)
    unit, marker = find_blocks(arrays, read.ops.values, wrapped)
    columns = RankColumns(unit=unit, marker=marker, **arrays)
    for name, dtype in COLUMNS.items():  # every reader gives every column in its own type
        assert getattr(columns, name).dtype == dtype, name
    tables = RankTables(
        ops=read.ops.values,
        backends=read.backends.values,
        profiling_names=read.pnames.values,
        shapes=read.shapes.values,
        dtypes=[tuple(read.text(name) or "" for name in found) for found in read.dtypes.values],
        stacks=read.stacks.values,
    )
    if read.text_limit is not None:
        held = text_held(columns, tables, read.groups.values, claims.values())
        if held > read.text_limit:
            raise read.text_bomb(held)
    return RankDump(
        rank=rank,
        file=file,
        version=version,
        comm_lib_version=(read.text(comm) or "") if comm is not None else "",
        claims=claims,
        pg_config_usable=usable,
        pg_status=_in_seq_ids(_pg_status(raw.get("pg_status"), pg_ids), columns),
        wrapped=wrapped,
        entry_errors=tuple(errors),
        warnings=tuple(warnings),
        groups=read.groups.values,
        reader=reader,
        fallback=fallback,
        fallback_reason=not_decoded.reason if not_decoded is not None else None,
        fallback_writer=not_decoded.writer if not_decoded is not None else None,
        entries=columns.n,
        tables=tables,
        columns=columns,
        host=host_in_header(raw),
    )


def text_held(
    columns: RankColumns,
    tables: RankTables,
    groups: Sequence[tuple[str, str]],
    claims: Iterable[GroupClaim],
) -> int:
    """Characters of text a rank's entries hold, counted as the outputs write them: each
    entry's profiling name, op, backend, group name and description and dtypes once per
    entry (the tables code each distinct value once, but the database, `-j` and the timeline
    write it in every row), each distinct stack's frames once (the outputs keep stacks apart,
    `-j` shows a few frames of each, cut short), and the claimed groups' names and
    descriptions. Genuine dumps hold far less text than their size: only repeated references
    to long strings (a memo bomb) get near `Limits.text_expansion_factor`."""

    def lengths(texts: Iterable[str]) -> np.ndarray:
        found = np.fromiter(map(len, texts), dtype=np.int64)
        return found if len(found) else np.zeros(1, dtype=np.int64)

    dtypes = lengths(map("".join, tables.dtypes))
    per_entry = (
        (columns.pname, lengths(tables.profiling_names)),
        (columns.op, lengths(tables.ops)),
        (columns.backend, lengths(tables.backends)),
        (columns.group, lengths(name + desc for name, desc in groups)),
        (columns.in_dtype, dtypes),
        (columns.out_dtype, dtypes),
    )
    held = sum(int(table[codes].sum()) for codes, table in per_entry if len(codes))
    frames = Counter(chain.from_iterable(tables.stacks))
    held += sum((len(f.name) + len(f.filename)) * count for f, count in frames.items())
    return held + sum(len(c.name) + len(c.desc) for c in claims)


def _listed(names: Iterable[str], most: int = 8) -> str:
    values = sorted(names)
    shown = ", ".join(values[:most])
    return shown + (f" and {len(values) - most} more" if len(values) > most else "")


def _in_seq_ids(
    status: dict[int, tuple[int, int, int]], columns: RankColumns
) -> dict[int, tuple[int, int, int]]:
    """pg_status in collective sequence ids. NCCL counts collectives there; gloo counts op ids,
    which send/recv advance too although gloo records no entry for them. A group whose last
    enqueued count is its newest entry's op id, not its newest sequence id, counts op ids: each
    count becomes the sequence id of the newest entry at or before that op id (-1: none)."""
    out = dict(status)
    for code, counts in status.items():
        rows = columns.group == code
        if not rows.any():
            continue
        ops, seqs = columns.op_id[rows], columns.coll_seq[rows]
        newest_seq, newest_op = int(seqs.max()), int(ops.max())
        if int(columns.unit[np.flatnonzero(rows)[-1]]) in _P2P_UNITS:
            # ProcessGroupNCCL stores the last work's own counter: after a send/recv (or a
            # batch of them) that is the p2p sequence id, not a collective one. The newest
            # collective is then the buffer's own (nothing newer can have fallen out).
            out[code] = (newest_seq, *counts[1:])
            continue
        if counts[0] == newest_seq or counts[0] != newest_op or newest_op == newest_seq:
            continue
        order = np.argsort(ops, kind="stable")
        ops, seqs = ops[order], seqs[order]
        at = np.searchsorted(ops, np.array(counts, dtype=np.int64), side="right") - 1
        found = [int(seqs[i]) if i >= 0 and c >= 0 else -1 for i, c in zip(at, counts, strict=True)]
        out[code] = (found[0], found[1], found[2])
    return out


_P2P_UNITS = frozenset({UnitKind.P2P, UnitKind.BATCH_MEMBER, UnitKind.BATCH_MARKER})


def _pg_status(raw: Any, pg_ids: dict[int, int]) -> dict[int, tuple[int, int, int]]:
    """pg_status keyed by the rank's group code; keys are per-process ids, mapped via pg_id."""
    out: dict[int, tuple[int, int, int]] = {}
    if not isinstance(raw, dict):
        return out
    for key, status in raw.items():
        try:
            pg_id = as_int(key, "pg_status key")
        except EntryError:
            continue
        if pg_id not in pg_ids or not isinstance(status, dict):
            continue
        values = []
        for name in (
            "last_enqueued_collective",
            "last_started_collective",
            "last_completed_collective",
        ):
            values.append(int_or_unset(status.get(name, -1)))
        out[pg_ids[pg_id]] = (values[0], values[1], values[2])
    return out
