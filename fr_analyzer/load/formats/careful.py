"""The careful reader: a rank's entries read one by one, every value checked, every problem
named. It reads what the column-wise reader (`columnar`) does not take; an entry with a
problem is skipped with its reason, and the rest of the rank is kept.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...model.backends import KNOWN_BACKENDS
from ...model.dump import READ_COLUMNS
from ...model.ops import KNOWN_OPS, MARKER_OPS
from ...model.records import P2PKind, State
from ..common import INT64_MAX, MAX_SEQ_ID, STATES, short
from .values import EntryError, ValueReader, as_int, duration, int_or_unset, seq_id, timestamp


@dataclass
class Careful:
    """What the careful reader found in a rank's entries."""

    arrays: dict[str, np.ndarray]
    pg_ids: dict[int, int]  # the group code of each pg_id
    unknown_backends: set[str]
    unknown_ops: set[str]
    errors: list[tuple[int, str]]  # (entry index, reason) of each skipped entry
    odd_states: Counter[str]  # entries in a state that is not a known one, by state


def careful_columns(entries: Any, read: ValueReader, limit: int) -> Careful:
    """Columns of every usable entry; a `Bomb` when the entries expand beyond `limit` items."""
    errors: list[tuple[int, str]] = []
    odd_states: Counter[str] = Counter()
    cols: dict[str, list[Any]] = {k: [] for k in READ_COLUMNS}
    pg_ids: dict[int, int] = {}
    unknown_backends: set[str] = set()
    unknown_ops: set[str] = set()
    append = {k: v.append for k, v in cols.items()}
    names, stack_lists = read.names, read.stack_lists
    text, group_code_of = read.text, read.groups
    items = 0

    for i, entry in enumerate(entries):
        items += 1
        if items > limit:
            raise read.bomb()
        try:
            if type(entry) is not dict:
                raise EntryError("entry is not a mapping")
            pg = entry.get("process_group")
            if not isinstance(pg, list | tuple) or len(pg) != 2:
                raise EntryError(f"bad process_group {short(pg)}")
            pg_name, pg_desc = pg
            if type(pg_name) is not str or len(pg_name) > 64 or not pg_name.isprintable():
                pg_name = text(pg_name)
            if type(pg_desc) is not str or len(pg_desc) > 64 or not pg_desc.isprintable():
                pg_desc = text(pg_desc)
            if pg_name is None or pg_desc is None:
                raise EntryError(f"bad process_group {short(pg[0])}, {short(pg[1])}")
            pname = entry.get("profiling_name")
            if type(pname) is not str:
                raise EntryError(f"bad profiling_name {short(pname, 60)}")
            parsed = names.get(pname) or read.name(pname)
            if isinstance(parsed, EntryError):
                raise parsed
            backend, op, p2p_kind, src, dst = parsed
            coll_seq = entry.get("collective_seq_id", -1)
            if type(coll_seq) is not int or not -1 <= coll_seq <= MAX_SEQ_ID:
                coll_seq = seq_id(coll_seq, "collective_seq_id")
            p2p_seq = entry.get("p2p_seq_id", -1)
            if type(p2p_seq) is not int or not -1 <= p2p_seq <= MAX_SEQ_ID:
                p2p_seq = seq_id(p2p_seq, "p2p_seq_id")
            record_id = entry.get("record_id", i)
            if type(record_id) is not int or not -INT64_MAX <= record_id <= INT64_MAX:
                record_id = as_int(record_id, "record_id")
            state_text = entry.get("state")
            state = STATES.get(state_text) if type(state_text) is str else None
            in_shape, counted = read.shape_code(entry.get("input_sizes"), "input_sizes")
            items += counted
            out_shape, counted = read.shape_code(entry.get("output_sizes"), "output_sizes")
            items += counted
            in_dtype, counted = read.dtype_code(entry.get("input_dtypes"))
            items += counted
            out_dtype, counted = read.dtype_code(entry.get("output_dtypes"))
            items += counted
            value = entry.get("frames")
            hit = stack_lists.get(id(value)) or read.stack_of(value)
            if isinstance(hit, EntryError):  # never: any list of frames is usable
                raise hit
            stack_code = hit[0]
            items += hit[1]
            if p2p_kind == P2PKind.NONE and entry.get("is_p2p") is True and op not in MARKER_OPS:
                raise EntryError(f"is_p2p entry {short(pname, 60)} is neither send nor recv")
            group_code = group_code_of((pg_name, pg_desc))
            pg_id = entry.get("pg_id")
            if type(pg_id) is int:
                pg_ids.setdefault(pg_id, group_code)
        except EntryError as exc:
            errors.append((i, str(exc)))
            continue
        if state is None:
            state = State.UNKNOWN
            odd_states[short(state_text, 20)] += 1
        if backend not in KNOWN_BACKENDS:
            unknown_backends.add(backend)
        if op not in KNOWN_OPS:
            unknown_ops.add(op)
        append["index"](i)
        append["record_id"](record_id)
        append["group"](group_code)
        append["coll_seq"](coll_seq)
        append["p2p_seq"](p2p_seq)
        append["op_id"](int_or_unset(entry.get("op_id")))
        append["op"](read.ops(op))
        append["backend"](read.backends(backend))
        append["pname"](
            read.pnames(pname if len(pname) <= 64 and pname.isprintable() else text(pname))
        )
        append["p2p_kind"](p2p_kind)
        append["peer_src"](src)
        append["peer_dst"](dst)
        append["state"](state)
        append["retired"](entry.get("retired") is True)
        append["t_created"](timestamp(entry.get("time_created_ns")))
        append["t_started"](timestamp(entry.get("time_discovered_started_ns")))
        append["t_completed"](timestamp(entry.get("time_discovered_completed_ns")))
        append["duration_ms"](duration(entry.get("duration_ms")))
        append["in_shape"](in_shape)
        append["out_shape"](out_shape)
        append["in_dtype"](in_dtype)
        append["out_dtype"](out_dtype)
        append["stack"](stack_code)
        append["timeout_ms"](int_or_unset(entry.get("timeout_ms")))

    if items > limit:
        raise read.bomb()
    arrays = {k: np.asarray(v, dtype=READ_COLUMNS[k]) for k, v in cols.items()}
    return Careful(arrays, pg_ids, unknown_backends, unknown_ops, errors, odd_states)
