"""Flight Recorder dumps as a Chrome trace (Perfetto, chrome://tracing): see the hang.

One process per rank (`rank N`, sorted by rank), two threads per process group (its
collectives, and its send/recv), one complete slice per op. A communicator runs its ops in
order, so an op's slice starts when it was enqueued or when the previous op of its track ended,
whichever is later, and ends at its discovered completion (or start + duration): slices of one
track never overlap. Ops that never completed run to the rank's dump time and are marked.
Flow arrows join the entries of one collective across ranks and each send to its recv; findings
and the root cause are instant events on the culprit ranks. `align` shifts each rank's clock by
a least-squares offset that makes the completions of collectives every member completed line
up.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .arrays import distinct
from .conclusion import Judged, Role
from .findings import sentence
from .model import INPUT_KINDS, STATE_NAMES, State, UnitKind
from .pipeline import Analysis
from .ranks import compact

SLICE_UNITS = (UnitKind.COLLECTIVE, UnitKind.BLOCK_MARKER, UnitKind.P2P, UnitKind.BATCH_MARKER)
P2P_UNITS = (UnitKind.P2P, UnitKind.BATCH_MARKER)
INCOMPLETE_COLOR = "terrible"  # a Chrome trace reserved color name
FINDING_COLOR = "bad"


@dataclass(frozen=True)
class TimelineOptions:
    """What to draw: every option bounds the output so a 16k-rank dump stays openable."""

    align: bool = False
    last: int | None = None  # keep only each rank's newest N ops
    seq: tuple[int, int] | None = None  # collective sequence ids A..B (inclusive)
    start_us: float | None = None  # window, in µs from the timeline's origin
    end_us: float | None = None
    ranks: tuple[int, ...] | None = None
    flows: bool = True


def clock_offsets(analysis: Analysis) -> dict[int, int]:
    """Per-rank clock offsets (ns) that line up the completions of collectives every member
    completed, least squares: completion[r, u] ≈ T[u] + offset[r], lowest rank's offset 0."""
    t, units, done = analysis.table, analysis.matches.collectives, analysis.matches.done
    if not t.n:
        return {}
    heads = (t.unit == UnitKind.COLLECTIVE) | (t.unit == UnitKind.BLOCK_MARKER)
    full = units.passed & (units.ranks_present == units.ranks_expected) & (units.ranks_expected > 1)
    unit = units.entry_unit
    rows = np.flatnonzero(heads & (unit >= 0) & done & (t.t_completed >= 0))
    rows = rows[full[unit[rows]]]
    if not len(rows):
        return {int(r): 0 for r in distinct(t.rank)}
    u = unit[rows]
    rank = t.rank[rows].astype(np.int64)
    completion = t.t_completed[rows].astype(np.float64)
    base = completion.min()
    c = completion - base
    n_ranks = int(rank.max()) + 1
    offset: npt.NDArray[np.float64] = np.zeros(n_ranks)
    per_unit = np.maximum(np.bincount(u, minlength=len(units.seq)), 1).astype(np.float64)
    per_rank = np.maximum(np.bincount(rank, minlength=n_ranks), 1).astype(np.float64)
    for _ in range(50):  # alternating least squares; converges fast on these designs
        unit_time = np.bincount(u, weights=c - offset[rank], minlength=len(units.seq)) / per_unit
        new = np.bincount(rank, weights=c - unit_time[u], minlength=n_ranks) / per_rank
        new = new - new[int(rank.min())]
        if np.allclose(new, offset, atol=100.0):  # 0.1 µs
            offset = new
            break
        offset = new
    present = set(distinct(rank).tolist())
    return {int(r): (round(offset[r]) if r in present else 0) for r in distinct(t.rank)}


class _Tracks:
    """Thread ids: per group, one for collectives and one for send/recv."""

    def __init__(self, base: int = 0) -> None:
        self.base = base

    def tid(self, uid: int, p2p: bool) -> int:
        return self.base + 2 * uid + (2 if p2p else 1)


def fr_events(
    analysis: Analysis,
    options: TimelineOptions,
    *,
    origin_ns: int,
    offsets: dict[int, int],
    tid_base: int = 0,
    name_prefix: str = "",
    pid_names: bool = True,
) -> Iterator[dict[str, Any]]:
    """The trace events of the dumps; timestamps are µs from `origin_ns` after each rank's
    offset is removed. Used on its own and as an overlay on merged profiler traces."""
    t, groups, _m = analysis.table, analysis.groups, analysis.matches
    tracks = _Tracks(tid_base)
    rows = _selected_rows(analysis, options, origin_ns, offsets)
    newest = _newest_ns(analysis)
    ranks = sorted(set(t.rank[rows].tolist()) | _culprit_ranks(analysis, options))

    def us(ns: int, rank: int) -> float:
        return (ns - offsets.get(rank, 0) - origin_ns) / 1000.0

    for rank in ranks:
        if pid_names:
            yield _meta("process_name", rank, 0, {"name": f"rank {rank}"})
            yield _meta("process_sort_index", rank, 0, {"sort_index": rank})
    used_tracks: set[tuple[int, int, bool]] = set()
    by_track: dict[tuple[int, int, bool], list[int]] = defaultdict(list)
    p2p_mask = np.isin(t.unit, P2P_UNITS)
    for r in rows.tolist():
        key = (int(t.rank[r]), int(groups.entry_group[r]), bool(p2p_mask[r]))
        by_track[key].append(r)
        used_tracks.add(key)
    for rank, uid, p2p in sorted(used_tracks):
        g = groups.groups[uid]
        name = f"{name_prefix}group {g.name} ({g.desc})" + (" send/recv" if p2p else "")
        tid = tracks.tid(uid, p2p)
        yield _meta("thread_name", rank, tid, {"name": name})
        yield _meta("thread_sort_index", rank, tid, {"sort_index": tid})

    members = _block_members(analysis)
    slice_at: dict[int, tuple[float, int, int]] = {}  # row → (ts, pid, tid)
    for (rank, uid, p2p), track_rows in sorted(by_track.items()):
        tid = tracks.tid(uid, p2p)
        prev_end = -math.inf
        for r in sorted(track_rows, key=lambda x: int(t.row_in_rank[x])):
            created = int(t.t_created[r])
            end, how = _end_ns(analysis, r, newest.get(rank, created))
            start_us = us(created, rank) if created >= 0 else prev_end
            if not math.isfinite(start_us):
                start_us = 0.0
            start_us = max(start_us, prev_end)
            end_us = max(us(end, rank) if end >= 0 else start_us, start_us)
            prev_end = end_us
            slice_at[r] = (start_us, rank, tid)
            event = {
                "name": _slice_name(analysis, r),
                "cat": "fr.p2p" if p2p else "fr.collective",
                "ph": "X",
                "pid": rank,
                "tid": tid,
                "ts": round(start_us, 3),
                "dur": round(end_us - start_us, 3),
                "args": _args(analysis, r, how, members.get(r), created, rank, offsets),
            }
            if how == "incomplete":
                event["cname"] = INCOMPLETE_COLOR
            yield event
    if options.flows:
        yield from _flows(analysis, slice_at)
    named: set[tuple[int, int]] = {(r, tracks.tid(u, p)) for r, u, p in used_tracks}
    for mark in _markers(analysis, options, slice_at, tracks, us, newest):
        pid, tid = int(mark["pid"]), int(mark["tid"])
        if mark["s"] == "t" and (pid, tid) not in named:
            named.add((pid, tid))
            g = groups.groups[(tid - tracks.base - 1) // 2]
            yield _meta(
                "thread_name", pid, tid, {"name": f"{name_prefix}group {g.name} ({g.desc})"}
            )
        yield mark


def build(analysis: Analysis, options: TimelineOptions | None = None) -> dict[str, Any]:
    """The whole Chrome trace as a dict."""
    options = options or TimelineOptions()
    offsets = clock_offsets(analysis) if options.align else {}
    t = analysis.table
    stamps = t.t_created[t.t_created >= 0] if t.n else np.zeros(0, np.int64)
    origin = int(stamps.min()) if len(stamps) else 0
    events = list(fr_events(analysis, options, origin_ns=origin, offsets=offsets))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "fr-analyze timeline",
            "dump_directory": analysis.summary.directory,
            "time_origin_ns": origin,
            "clock_alignment": "least-squares on collective completions"
            if options.align
            else "none (raw host clocks)",
            "clock_offsets_ns": {str(r): o for r, o in sorted(offsets.items())},
            "status": analysis.conclusion.status.value,
            "verdict": analysis.conclusion.answer,
            "root_cause": None
            if analysis.conclusion.root is None
            else analysis.conclusion.root.sentence,
        },
    }


# ---------------------------------------------------------------------------------------------


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _newest_ns(analysis: Analysis) -> dict[int, int]:
    t = analysis.table
    if not t.n:
        return {}
    stamp = np.maximum(np.maximum(t.t_created, t.t_started), t.t_completed)
    out = np.full(int(t.rank.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(out, t.rank, stamp)
    return {int(r): int(out[r]) for r in distinct(t.rank)}


def _selected_rows(
    analysis: Analysis, options: TimelineOptions, origin_ns: int, offsets: dict[int, int]
) -> npt.NDArray[np.int64]:
    t = analysis.table
    if not t.n:
        return np.zeros(0, np.int64)
    mask = np.isin(t.unit, SLICE_UNITS)
    if options.ranks is not None:
        mask &= np.isin(t.rank, list(options.ranks))
    if options.seq is not None:
        low, high = options.seq
        mask &= (t.coll_seq >= low) & (t.coll_seq <= high)
    if options.start_us is not None or options.end_us is not None:
        shift = np.array([offsets.get(int(r), 0) for r in range(int(t.rank.max()) + 1)])
        at_us = (t.t_created - shift[t.rank] - origin_ns) / 1000.0
        if options.start_us is not None:
            ends = np.where(
                t.t_completed >= 0, (t.t_completed - shift[t.rank] - origin_ns) / 1000.0, np.inf
            )
            mask &= ends >= options.start_us
        if options.end_us is not None:
            mask &= at_us <= options.end_us
    rows = np.flatnonzero(mask)
    if options.last is not None and len(rows):
        # The newest N per rank: rows are in rank order, record order within a rank.
        rank = t.rank[rows]
        counts = np.bincount(rank - rank.min())
        ends = np.cumsum(counts)[rank - rank.min()]
        rows = rows[(ends - np.arange(len(rows))) <= options.last]
    return rows


def _end_ns(analysis: Analysis, row: int, dump_time: int) -> tuple[int, str]:
    t = analysis.table
    completed = int(t.t_completed[row])
    if completed >= 0:
        return completed, "completed"
    started = int(t.t_started[row])
    duration = float(t.duration_ms[row])
    if started >= 0 and math.isfinite(duration) and 0 <= duration < 1e10:
        return started + int(duration * 1e6), "duration"
    if bool(analysis.matches.done[row]):
        return int(t.t_created[row]), "completion time unknown"
    return dump_time, "incomplete"


def _slice_name(analysis: Analysis, row: int) -> str:
    t = analysis.table
    name = t.profiling_names[int(t.pname[row])]
    op = name.partition(":")[2] or name
    if int(t.unit[row]) in (UnitKind.P2P, UnitKind.BATCH_MARKER):
        return f"{op} p#{int(t.p2p_seq[row])}"
    suffix = "" if bool(analysis.matches.done[row]) else " (not completed)"
    return f"{op} #{int(t.coll_seq[row])}{suffix}"


def _block_members(analysis: Analysis) -> dict[int, list[int]]:
    t = analysis.table
    out: dict[int, list[int]] = defaultdict(list)
    if not t.n:
        return out
    member = np.flatnonzero((t.unit == UnitKind.BLOCK_MEMBER) | (t.unit == UnitKind.BATCH_MEMBER))
    for r in member.tolist():
        out[int(t.marker[r])].append(r)
    return out


def _args(
    analysis: Analysis,
    row: int,
    how: str,
    members: list[int] | None,
    created: int,
    rank: int,
    offsets: dict[int, int],
) -> dict[str, Any]:
    t, groups = analysis.table, analysis.groups
    g = groups.groups[int(groups.entry_group[row])]

    def sizes(code: int) -> list[list[int]]:
        return [list(s) for s in t.shapes[code]]

    args: dict[str, Any] = {
        "rank": rank,
        "group": g.name,
        "group_desc": g.desc,
        "profiling_name": t.profiling_names[int(t.pname[row])],
        "collective_seq_id": int(t.coll_seq[row]),
        "p2p_seq_id": int(t.p2p_seq[row]),
        "op_id": int(t.op_id[row]),
        "record_id": int(t.record_id[row]),
        "state": STATE_NAMES[State(int(t.state[row]))],
        "retired": bool(t.retired[row]),
        "completed": bool(analysis.matches.done[row]),
        "end": how,
        "input_sizes": sizes(int(t.in_shape[row])),
        "output_sizes": sizes(int(t.out_shape[row])),
        "input_dtypes": list(t.dtypes[int(t.in_dtype[row])]),
        "output_dtypes": list(t.dtypes[int(t.out_dtype[row])]),
        "enqueued_ns": created if created >= 0 else None,
    }
    if offsets:
        args["clock_offset_ns"] = offsets.get(rank, 0)
    if members:
        args["members"] = [
            f"{t.profiling_names[int(t.pname[r])]} in={sizes(int(t.in_shape[r]))}" for r in members
        ]
    return args


def _flows(
    analysis: Analysis, slice_at: dict[int, tuple[float, int, int]]
) -> Iterator[dict[str, Any]]:
    t, m = analysis.table, analysis.matches
    by_unit: dict[int, list[int]] = defaultdict(list)
    for r in slice_at:
        u = int(m.collectives.entry_unit[r])
        if u >= 0:
            by_unit[u].append(r)
    for u, rows in sorted(by_unit.items()):
        if len(rows) < 2:
            continue
        rows.sort(key=lambda r: int(t.rank[r]))
        name = f"{m.collectives.op[u]} #{int(m.collectives.seq[u])}"
        for i, r in enumerate(rows):
            ts, pid, tid = slice_at[r]
            ph = "s" if i == 0 else ("f" if i == len(rows) - 1 else "t")
            yield {
                "name": name,
                "cat": "fr.collective",
                "ph": ph,
                "id": f"c{u}",
                "pid": pid,
                "tid": tid,
                "ts": round(ts, 3),
                "bp": "e",
            }
    for i, (s, r) in enumerate(zip(m.p2p.send_row.tolist(), m.p2p.recv_row.tolist(), strict=True)):
        if s not in slice_at or r not in slice_at:
            continue
        for ph, row in (("s", s), ("f", r)):
            ts, pid, tid = slice_at[row]
            yield {
                "name": "send/recv",
                "cat": "fr.p2p",
                "ph": ph,
                "id": f"p{i}",
                "pid": pid,
                "tid": tid,
                "ts": round(ts, 3),
                "bp": "e",
            }


def _marked(analysis: Analysis) -> list[Judged]:
    """Findings drawn as markers: every finding but input problems and ops in flight."""
    return [
        j
        for j in analysis.conclusion.findings
        if j.finding.kind not in INPUT_KINDS and j.role != Role.IN_FLIGHT
    ]


def _culprit_ranks(analysis: Analysis, options: TimelineOptions) -> set[int]:
    ranks = {r for j in _marked(analysis) for r in j.finding.culprit_ranks}
    root = analysis.conclusion.root
    if root is not None:
        ranks.update(root.ranks)
    loaded = set(analysis.groups.loaded_ranks)
    wanted = set(options.ranks) if options.ranks is not None else loaded
    return ranks & loaded & wanted


def _markers(
    analysis: Analysis,
    options: TimelineOptions,
    slice_at: dict[int, tuple[float, int, int]],
    tracks: _Tracks,
    us: Any,
    newest: dict[int, int],
) -> Iterator[dict[str, Any]]:
    """Instant events for every finding and the root cause, on the culprit ranks."""
    t, groups = analysis.table, analysis.groups
    wanted = _culprit_ranks(analysis, options)
    by_rank_seq: dict[tuple[int, int, int], int] = {}
    for r in slice_at:
        by_rank_seq[(int(t.rank[r]), int(groups.entry_group[r]), int(t.coll_seq[r]))] = r

    def place(rank: int, uid: int | None, seq: int | None) -> tuple[float, int]:
        if uid is not None and seq is not None and (rank, uid, seq) in by_rank_seq:
            ts, _, tid = slice_at[by_rank_seq[(rank, uid, seq)]]
            return ts, tid
        tid = tracks.tid(uid, False) if uid is not None else 0
        return us(newest.get(rank, 0), rank), tid

    for j in _marked(analysis):
        f = j.finding
        uid = f.group.uid if f.group is not None else None
        for rank in f.culprit_ranks:
            if rank not in wanted:
                continue
            ts, tid = place(rank, uid, f.collective_seq_id)
            yield {
                "name": f"{f.kind.value}",
                "cat": "fr.finding",
                "ph": "i",
                "s": "t",
                "pid": rank,
                "tid": tid,
                "ts": round(ts, 3),
                "cname": FINDING_COLOR,
                "args": {
                    "finding": sentence(f),
                    "culprit_ranks": compact(f.culprit_ranks),
                    "role": j.role.value,
                    "explained_by_root_cause": j.explained,
                },
            }
    root = analysis.conclusion.root
    if root is not None:
        uid = root.group.uid if root.group is not None else None
        for rank in root.ranks:
            if rank not in wanted:
                continue
            ts, _ = place(rank, uid, root.collective_seq_id)
            yield {
                "name": f"ROOT CAUSE: {root.kind.value}",
                "cat": "fr.root_cause",
                "ph": "i",
                "s": "p",
                "pid": rank,
                "tid": 0,
                "ts": round(ts, 3),
                "cname": FINDING_COLOR,
                "args": {
                    "status": analysis.conclusion.status.value,
                    "root_cause": root.sentence,
                    "evidence": list(root.evidence),
                },
            }


def parse_seq(text: str) -> tuple[int, int]:
    """`"3:9"` → (3, 9); used by the CLI's --seq."""
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ValueError(f"expected A:B, got {text!r}")
    a, b = int(low), int(high)
    if b < a:
        raise ValueError(f"empty range {text!r}")
    return a, b


__all__: Sequence[str] = ["TimelineOptions", "build", "clock_offsets", "fr_events", "parse_seq"]
