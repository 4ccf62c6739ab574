"""Tiny test-only builders for Flight Recorder entries and dump directories."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fr_analyzer.load.formats.outcomes import NotDecoded
from fr_analyzer.load.safety.decoders.columns import Decoded


def make_entry(
    op: str = "all_reduce",
    seq: int | str = 0,
    *,
    p2p_seq: int | str = 0,
    group: tuple[str, str] = ("0", "default"),
    backend: str = "nccl",
    peer: str = "",
    in_sizes: list[list[int]] | None = None,
    out_sizes: list[list[int]] | None = None,
    in_dtypes: Any = None,
    out_dtypes: Any = None,
    state: str = "completed",
    retired: bool = True,
    is_p2p: bool | None = None,
    record_id: int = 0,
    frames: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One entry as the recorder writes it (pickle flavour)."""
    name = f"{backend}:{op}" + (f" {peer}" if peer else "")
    entry: dict[str, Any] = {
        "record_id": record_id,
        "pg_id": 0,
        "process_group": group,
        "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq,
        "op_id": record_id,
        "profiling_name": name,
        "time_created_ns": 1_000_000 + record_id,
        "input_sizes": [[4, 4]] if in_sizes is None else in_sizes,
        "output_sizes": [[4, 4]] if out_sizes is None else out_sizes,
        "input_dtypes": ["Float"] if in_dtypes is None else in_dtypes,
        "output_dtypes": ["Float"] if out_dtypes is None else out_dtypes,
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": 2_000_000 + record_id if state == "completed" else None,
        "retired": retired,
        "timeout_ms": 600000,
        "is_p2p": op in ("send", "recv") if is_p2p is None else is_p2p,
        "thread_id": "1",
        "thread_name": "main",
    }
    if frames is not None:
        entry["frames"] = frames
    entry.update(extra)
    return entry


def make_dump(
    entries: Iterable[dict[str, Any]],
    groups: Mapping[str, tuple[str, list[int]]] | None = None,
    version: str = "2.10",
    **extra: Any,
) -> dict[str, Any]:
    """A whole rank dump; `groups` maps name → (desc, member ranks)."""
    entries = list(entries)
    for i, entry in enumerate(entries):
        entry.setdefault("record_id", i)
    config = {
        name: {"name": name, "desc": desc, "ranks": str(list(ranks))}
        for name, (desc, ranks) in (groups or {"0": ("default_pg", [0, 1])}).items()
    }
    dump: dict[str, Any] = {
        "version": version,
        "pg_config": config,
        "pg_status": {},
        "comm_lib_version": "2.21.5",
        "entries": entries,
    }
    dump.update(extra)
    return dump


def renumber(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, entry in enumerate(entries):
        entry["record_id"] = i
    return entries


def write_dumps(
    directory: Path,
    dumps: Mapping[int, dict[str, Any]],
    *,
    fmt: str = "pickle",
    prefix: str = "nccl_trace_rank_",
) -> Path:
    """Write one file per rank into `directory` and return it."""
    directory.mkdir(parents=True, exist_ok=True)
    for rank, dump in dumps.items():
        if fmt == "json":
            (directory / f"{prefix}{rank}.json").write_text(json.dumps(dump))
        else:
            (directory / f"{prefix}{rank}").write_bytes(pickle.dumps(dump))
    return directory


def or_why(decoder: Callable[[bytes], Decoded]) -> Callable[[bytes], Decoded | str]:
    """`decoder`, giving the words a rank records (`NotDecoded`'s) instead of raising them."""

    def decode(data: bytes) -> Decoded | str:
        try:
            return decoder(data)
        except NotDecoded as exc:
            return str(exc)

    return decode


def fr_json(*args: str) -> tuple[int, str, dict[str, Any]]:
    """`python -m fr_analyzer *args --json FILE`: the exit code, the text report and the JSON
    report (no traceback allowed)."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        done = subprocess.run(
            [sys.executable, "-m", "fr_analyzer", *args, "--json", str(report)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout, json.loads(report.read_text())
