"""A gloo trace's ops pinned to the groups its rank's Flight Recorder dump records for them.

A gloo trace names no group; a gloo dump does (its entries' `process_group`), for the ops its
ring buffer still holds. Where a rank left both, the dump's facts win: its collectives and the
trace's are lined up (the dump holds a stretch of the rank's history, the trace another, both
in issue order), and each trace op the dump holds is given the dump's group as its only
candidate, so that the search over every rank's trace (`assign`) cannot put it elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ....model.ops import P2P_OPS
from .dispatcher import Op


def recorded(entries: Any) -> list[tuple[str, str]]:
    """(group name, op) of each collective of a dump's entries (as parsed), in record order:
    send/recv left out (gloo records none)."""
    found: list[tuple[str, str]] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue
        group, name = entry.get("process_group"), entry.get("profiling_name")
        if not isinstance(group, list | tuple) or not group or not isinstance(name, str):
            continue
        op = name.partition(":")[2].split(" ", 1)[0]
        if op in P2P_OPS:
            continue
        found.append((str(group[0]), op))
    return found


SHIFTS = 1024
"""Shifts tried either side of the one that ends the trace with the dump (a trace and a dump
of one job end near each other), past which the lining up does not look."""


def offset(trace_ops: Sequence[str], dumped: Sequence[str]) -> int | None:
    """Where the trace's collectives start in the dump's (trace op j is dump op j + offset):
    of the shifts at which every op both hold is the same op, the one where they share the
    most, then the one that ends them nearest each other (a program repeats its ops: several
    shifts fit); None when no shift lets them share one."""
    ends = len(dumped) - len(trace_ops)  # the shift that ends them together
    low = max(-len(trace_ops) + 1, ends - SHIFTS)
    high = min(len(dumped) - 1, ends + SHIFTS)
    best: tuple[int, int, int] | None = None  # (shared, -distance from `ends`, shift)
    for shift in range(low, high + 1):
        lo, hi = max(0, -shift), min(len(trace_ops), len(dumped) - shift)
        if hi <= lo:
            continue
        if all(trace_ops[j] == dumped[j + shift] for j in range(lo, hi)):
            found = (hi - lo, -abs(shift - ends), shift)
            best = found if best is None or found > best else best
    return None if best is None else best[2]


def pin(ops: Sequence[Op], entries: Any, groups: Sequence[str]) -> tuple[Op, ...]:
    """The trace's ops, each one the dump holds given the dump's group (`groups`: the names of
    the rank's groups) as its only candidate; as they are when the two cannot be lined up."""
    dumped = recorded(entries)
    at = [i for i, op in enumerate(ops) if op.op not in P2P_OPS]
    shift = offset([ops[i].op for i in at], [op for _, op in dumped])
    if shift is None:
        return tuple(ops)
    out = list(ops)
    for j, i in enumerate(at):
        if 0 <= j + shift < len(dumped) and dumped[j + shift][0] in groups:
            out[i] = replace(ops[i], candidates=(dumped[j + shift][0],))
    return tuple(out)
