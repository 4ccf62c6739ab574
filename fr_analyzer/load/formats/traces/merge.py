"""A trace read with its rank's Flight Recorder dump: the dump's recorder facts win (its ops,
their states and times); the trace adds only what the dump lacks: the ops its ring buffer no
longer holds, and the send/recv gloo's recorder never records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge(dump: dict[str, Any], trace: Mapping[str, Any], where: str) -> list[str]:
    """Add to a rank's Flight Recorder dump (parsed, as dicts; changed in place) what its
    trace (`to_dump`'s form) holds and the dump lacks, and notes for the report:

    - ops older than the oldest op the ring buffer holds on their group, as finished (the
      dump's ops were issued after them);
    - send/recv on a group whose dump records none (gloo's), placed after the collective the
      trace issued before them; finished when the dump holds a later op (the rank went on:
      gloo's send/recv returned), else as the trace has them (issued, not known to finish).

    Where the trace and the dump disagree (another op at one sequence id: the trace's group or
    count is not the dump's), nothing is added: the dump is read as it is. Ops of the trace
    newer than the dump's newest are left out (the trace was taken later)."""
    entries = dump.get("entries")
    if not isinstance(entries, list):
        return []
    held: dict[tuple[str, bool, int], int] = {}
    ops_at: dict[tuple[str, bool, int], set[str]] = {}  # a block's members share one id
    oldest: dict[tuple[str, bool], int] = {}
    newest: dict[tuple[str, bool], int] = {}
    first_record = 0
    for position, entry in enumerate(entries):
        key, seq = _key(entry)
        if key is None or seq is None:
            continue
        held.setdefault((*key, seq), position)
        ops_at.setdefault((*key, seq), set()).add(_op(entry))
        oldest[key] = min(oldest.get(key, seq), seq)
        newest[key] = max(newest.get(key, seq), seq)
        record = entry.get("record_id")
        if isinstance(record, int):
            first_record = min(first_record, record) if first_record else record
    listed = [e for e in trace.get("entries", ()) if _key(e)[1] is not None]
    for entry in listed:
        key, seq = _key(entry)
        found = ops_at.get((*key, seq)) if key is not None and seq is not None else None
        if found is not None and _op(entry) not in found and not _marker(entry):
            return [
                f"its Execution Trace {where} disagrees with its dump ({_op(entry)} where the "
                f"dump holds {'/'.join(sorted(found))} at #{seq} of group "
                f"{key[0] if key else ''!r}): the dump is read as it is"
            ]
    older: list[dict[str, Any]] = []
    unrecorded: list[tuple[int, dict[str, Any]]] = []  # (insert before this position, op)
    later = 0
    after = -1  # the dump position of the last collective the trace issued, -1: none yet
    for entry in listed:
        key, seq = _key(entry)
        if key is None or seq is None:
            continue
        if key[1] and key not in oldest and _unrecorded(entry):  # gloo records no send/recv
            if after < 0:
                older.append(dict(entry, state="completed", retired=True))
            else:
                unrecorded.append((after + 1, entry))
            continue
        if key in oldest and seq >= oldest[key]:
            later += seq > newest[key]
            if (*key, seq) in held:
                after = held[(*key, seq)]
            continue
        older.append(dict(entry, state="completed", retired=True))
    for position, entry in reversed(unrecorded):
        done = position < len(entries)  # the rank went on: the call returned
        added = dict(entry, state="completed", retired=True) if done else dict(entry)
        added["record_id"] = _record_before(entries, position)
        entries.insert(position, added)
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
    if unrecorded:
        notes.append(
            f"{len(unrecorded)} send/recv read from its Execution Trace {where} (its recorder "
            "records none), finished where the dump holds a later op"
        )
    if later:
        notes.append(
            f"{later} ops of its Execution Trace {where} are newer than its dump's newest: the "
            "trace was taken later; the dump is read as it is"
        )
    return notes


def _op(entry: Mapping[str, Any]) -> str:
    """The op of an entry's profiling name (`gloo:send 0->1` -> `send`)."""
    name = entry.get("profiling_name")
    return name.partition(":")[2].split(" ", 1)[0] if isinstance(name, str) else ""


def _marker(entry: Mapping[str, Any]) -> bool:
    """Whether an op is a coalesced block's end marker (named unlike its members)."""
    return _op(entry).endswith("coalesced")


def _unrecorded(entry: Mapping[str, Any]) -> bool:
    """Whether an op is one the recorder never records: a send/recv on gloo."""
    name = entry.get("profiling_name")
    return isinstance(name, str) and name.startswith("gloo:")


def _record_before(entries: list[Any], position: int) -> int:
    """A record id for an op put before `position`: its predecessor's (record ids only order
    a rank's ops; the table keeps the list's order among equal ones)."""
    for entry in reversed(entries[:position]):
        if isinstance(entry, dict) and isinstance(entry.get("record_id"), int):
            record: int = entry["record_id"]
            return record
    return 0


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
