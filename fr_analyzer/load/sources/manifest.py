"""A saved snapshot's manifest (`fetch.json`, written by `live`): when each rank answered,
and why the others did not; read back by the analysis of any folder, so it lives apart from
the live client (and its asyncio), which only `fr-analyze live` needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...model.numbers import decimal
from ...model.ranks import MAX_RANK
from ..safety.door import parse_json
from ..safety.limits import LIMITS

MANIFEST = "fetch.json"
MANIFEST_SCHEMA = "fr-analyze.fetch/1"
FR_HANDLERS = ("fr_trace_json", "dump_nccl_trace_json", "torchcomms_fr_trace_json")
"""The handlers that serve a rank's Flight Recorder, in the order a tie is broken."""


@dataclass(frozen=True)
class Manifest:
    """A saved snapshot's `fetch.json`."""

    started_ns: int
    world_size: int
    times: dict[int, int]  # rank -> when it answered
    errors: dict[int, str]  # rank -> why it did not
    handler: str | None
    others: dict[str, int]


def read_manifest(folder: Path) -> Manifest | None:
    """The snapshot's manifest, or None when the folder has none (or not a readable one).

    A `fetch.json` is input like a dump (any folder may hold one): it is read only up to
    `manifest_max_bytes`, its rank numbers as the dumps' are (`model.numbers`, within
    MAX_RANK), and believed only as `_save` writes it: one key per rank of its world, no
    more (a key "9999999" or a world of a million ranks is no manifest)."""
    path = folder / MANIFEST
    try:
        if path.stat().st_size > LIMITS.manifest_max_bytes:
            return None
        data = parse_json(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
        return None
    ranks = data.get("ranks")
    if not isinstance(ranks, dict):
        return None
    times: dict[int, int] = {}
    errors: dict[int, str] = {}
    for key, info in ranks.items():
        rank = decimal(key, MAX_RANK) if isinstance(key, str) else None
        if rank is None or not isinstance(info, dict):
            return None  # not as `_save` writes it
        if isinstance(info.get("time_ns"), int):
            times[rank] = info["time_ns"]
        if isinstance(info.get("error"), str):
            errors[rank] = info["error"][:300]
    started = data.get("started_ns")
    world = data.get("world_size")
    if type(world) is not int or not 0 <= world <= MAX_RANK + 1 or len(ranks) != world:
        return None
    if any(rank >= world for rank in (*times, *errors)):
        return None
    others = data.get("other_handlers")
    return Manifest(
        started if isinstance(started, int) else 0,
        world,
        times,
        errors,
        data.get("handler") if data.get("handler") in FR_HANDLERS else None,
        {k: v for k, v in others.items() if k in FR_HANDLERS and type(v) is int}
        if isinstance(others, dict)
        else {},
    )
