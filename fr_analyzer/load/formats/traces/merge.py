"""A trace read with its rank's Flight Recorder dump: the dump keeps its states and times, the
trace adds the ops its ring buffer no longer holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge(dump: dict[str, Any], trace: Mapping[str, Any], where: str) -> list[str]:
    """Add to a rank's Flight Recorder dump (parsed, as dicts; changed in place) the ops of its
    trace (`to_dump`'s form) that are older than the oldest op its ring buffer holds on each
    group: the dump keeps its states and times, the trace gives the history before them, as
    ops that finished (later ones were issued after them). Ops of the trace newer than the
    dump's newest are left out: the trace was taken later. Notes for the report."""
    entries = dump.get("entries")
    if not isinstance(entries, list):
        return []
    oldest: dict[tuple[str, bool], int] = {}
    newest: dict[tuple[str, bool], int] = {}
    first_record = 0
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        key, seq = _key(entry)
        if key is None or seq is None:
            continue
        oldest[key] = min(oldest.get(key, seq), seq)
        newest[key] = max(newest.get(key, seq), seq)
        record = entry.get("record_id")
        if isinstance(record, int):
            first_record = min(first_record, record) if first_record else record
    older: list[dict[str, Any]] = []
    later = 0
    for entry in trace.get("entries", ()):
        key, seq = _key(entry)
        if key is None or seq is None:
            continue
        if key in oldest and seq >= oldest[key]:
            later += seq > newest[key]
            continue
        older.append(dict(entry, state="completed", retired=True))
    for i, entry in enumerate(older):
        entry["record_id"] = first_record - len(older) + i
    entries[:0] = older
    config = dump.get("pg_config")
    if isinstance(config, dict):
        for name, group in trace.get("pg_config", {}).items():
            config.setdefault(name, group)
    notes = []
    if older:
        notes.append(
            f"{len(older)} older ops read from its Execution Trace {where} (before its ring "
            "buffer's oldest, taken as finished)"
        )
    if later:
        notes.append(
            f"{later} ops of its Execution Trace {where} are newer than its dump's newest: the "
            "trace was taken later; the dump is read as it is"
        )
    return notes


def _key(entry: Any) -> tuple[tuple[str, bool] | None, int | None]:
    """((group name, is_p2p), sequence id) of an entry in Flight Recorder form."""
    if not isinstance(entry, dict):
        return None, None
    group = entry.get("process_group")
    if not isinstance(group, list | tuple) or not group:
        return None, None
    p2p = bool(entry.get("is_p2p"))
    seq = entry.get("p2p_seq_id" if p2p else "collective_seq_id")
    return (str(group[0]), p2p), seq if isinstance(seq, int) else None
