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

Past `WINDOW_PAST_RANKS` ranks (256) a whole trace is hundreds of MB that no browser opens, so
unless the options choose what to draw (ranks, sequence ids, a time window, the newest ops) or
ask for everything (`all_ranks`), the trace is a window around the root cause: the culprit and
the members of its process groups (all but the world-sized ones), the ops that overlap the
root group's sequence ids a few either side of the root's, and the culprit's newest ops. The
built trace says so in `otherData["notes"]`, which the CLI prints.

Where the analysis' engine keeps the rows (a Ray cluster), what the trace reads of every row
(`Extent`) is summed up where they lie, the ranks drawn are decided of it and of the answer
(`plan`), and only their whole programs are fetched: the trace is the one the table gives.

It is over 600 lines because the window (and its plan, of the job's extent), the clock
alignment, the slices, the flow arrows and the markers are parts of one trace that share its
track and row bookkeeping, which `overlay` reuses for `merge-traces`.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..conclusion import Judged, Role
from ..match.findings import sentence
from ..model.arrays import distinct
from ..model.numbers import decimal
from ..model.ranks import compact
from ..model.records import INPUT_KINDS, STATE_NAMES, State, UnitKind, seq_id
from ..model.table import EntryTable
from ..pipeline import Analysis
from .output import write_atomic
from .renderer import Rendered

SLICE_UNITS = (UnitKind.COLLECTIVE, UnitKind.BLOCK_MARKER, UnitKind.P2P, UnitKind.BATCH_MARKER)
P2P_UNITS = (UnitKind.P2P, UnitKind.BATCH_MARKER)
WINDOW_PAST_RANKS = 256
"""Past this many ranks, the default trace is a window around the root cause."""
WINDOW_SEQ = 3
"""Sequence ids either side of the root's that the window keeps."""
WINDOW_NEWEST = 8
"""Newest ops of each culprit rank that the window keeps, whenever they ran."""
WINDOW_NO_ROOT_OPS = 32
"""Without a root cause, the window is this many newest ops of the first ranks."""
LARGE_BYTES = 100 * 1024 * 1024
BYTES_PER_SLICE = 600
"""About what one op slice costs in the trace, with its flows and block members (a 3D job of
256 ranks: 198 MB for 337,408 slices)."""
"""Traces larger than this are hard for a browser: the CLI warns before writing one."""
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
    all_ranks: bool = False  # past `window_past` ranks, draw everything anyway (`--all`)
    window_past: int = WINDOW_PAST_RANKS  # past this many ranks, a window by default

    def chooses(self) -> bool:
        """Whether these options choose what to draw (then no default window applies)."""
        return any(
            v is not None for v in (self.last, self.seq, self.start_us, self.end_us, self.ranks)
        )


@dataclass(frozen=True)
class Window:
    """The rows a default window keeps, and the sentence that says what it is."""

    rows: npt.NDArray[np.bool_]
    note: str


@dataclass(frozen=True)
class Extent:
    """What the trace reads of every row of the job, whichever rows it draws: how many rows
    there are, how many are drawn as slices (the window's size), and the earliest time an op
    was created (the trace's origin; -1: none)."""

    rows: int
    slices: int
    origin_ns: int

    @property
    def origin(self) -> int:
        """The trace's time origin (ns): the earliest creation, 0 where none is known."""
        return max(self.origin_ns, 0)


EXTENT_COLUMNS = ("unit", "t_created")


def extent(
    ranks: Sequence[int],
    starts: npt.NDArray[np.int64],
    columns: Mapping[str, np.ndarray],
    only: Sequence[int] | None = None,
) -> Extent:
    """The extent of the rows of `ranks` (rank i's from `starts[i]` to `starts[i + 1]`;
    `columns`: `EXTENT_COLUMNS`) that `only` names (None: all): of a table, or of a shard of
    the ranks read on a cluster (`pipeline.JobCalls.reduced`)."""
    rows = slice(int(starts[0]), int(starts[-1])) if len(starts) else slice(0, 0)
    unit, created = columns["unit"][rows], columns["t_created"][rows]
    if only is not None and len(starts):
        mine = np.isin(np.asarray(ranks, dtype=np.int64), np.asarray(only, dtype=np.int64))
        taken = np.repeat(mine, np.diff(starts))
        unit, created = unit[taken], created[taken]
    stamps = created[created >= 0]
    first = int(stamps.min()) if len(stamps) else -1
    return Extent(len(unit), int(np.isin(unit, SLICE_UNITS).sum()), first)


def joined(pieces: Sequence[Extent]) -> Extent:
    """The extent of several tables' rows together (the shards of a job)."""
    known = [p.origin_ns for p in pieces if p.origin_ns >= 0]
    return Extent(
        sum(p.rows for p in pieces), sum(p.slices for p in pieces), min(known, default=-1)
    )


def table_extent(t: EntryTable) -> Extent:
    """The extent of a table's every row."""
    starts = np.array([0, t.n], dtype=np.int64)
    return extent([0], starts, {name: getattr(t, name) for name in EXTENT_COLUMNS})


@dataclass(frozen=True)
class Plan:
    """The ranks a default window draws, and how its note begins and ends."""

    ranks: tuple[int, ...]  # ascending
    head: str
    tail: str


def plan(analysis: Analysis, options: TimelineOptions, job: Extent) -> Plan | None:
    """Whether the trace is a default window (None: everything is drawn), of which ranks:
    decided of the job's extent and the answer, before any row is read."""
    loaded = analysis.groups.loaded_ranks
    if options.all_ranks or options.chooses() or not job.rows:
        return None
    world = len(loaded)
    about = job.slices * BYTES_PER_SLICE
    if world <= options.window_past and about <= LARGE_BYTES:
        return None
    head = (
        f"{world:,} ranks, more than {options.window_past:,}: the trace is a window"
        if world > options.window_past
        else f"about {about / 2**20:,.0f} MiB of trace, more than a browser opens well "
        f"({LARGE_BYTES / 2**20:,.0f} MiB): the trace is a window"
    )
    tail = "; `fr-analyze timeline --all` draws every rank"
    root = analysis.conclusion.root
    if root is None or not root.ranks:
        return Plan(tuple(sorted(loaded[: options.window_past])), head, tail)
    culprits = set(root.ranks)
    ranks = set(culprits)
    for g in analysis.groups.groups:
        if g.size < world and not culprits.isdisjoint(g.ranks):
            ranks.update(g.ranks)
    if root.group is not None and root.group.size < world:
        ranks.update(root.group.ranks)
    return Plan(tuple(sorted(ranks)), head, tail)


def window(
    analysis: Analysis, options: TimelineOptions, job: Extent | None = None
) -> Window | None:
    """The default window (see the module docstring), or None where everything is drawn;
    `job`: the extent of the job's rows (None: of the analysis' table, which holds them all)."""
    t, groups = analysis.table, analysis.groups
    chosen = plan(analysis, options, table_extent(t) if job is None else job)
    if chosen is None:
        return None
    head, tail = chosen.head, chosen.tail
    slices = np.isin(t.unit, SLICE_UNITS)
    root = analysis.conclusion.root
    if root is None or not root.ranks:
        first = np.asarray(chosen.ranks, dtype=np.int64)
        keep = _newest(t.rank, np.isin(t.rank, first) & slices, WINDOW_NO_ROOT_OPS)
        note = (
            f"{head}: no root cause, so the newest {WINDOW_NO_ROOT_OPS} ops of ranks "
            f"{compact(first.tolist())}{tail}"
        )
        return Window(keep, note)
    culprits = set(root.ranks)
    ranks = set(chosen.ranks)
    # The window's ranks' rows, few of the table's: the work is on them alone.
    rows = np.flatnonzero(np.isin(t.rank, np.fromiter(ranks, np.int64, len(ranks))) & slices)
    rank = t.rank[rows]
    kept = np.ones(len(rows), dtype=bool)
    what = f"their newest {WINDOW_NO_ROOT_OPS} ops"
    seq, seq_ids = root.collective_seq_id, t.coll_seq
    if seq is None:
        seq, seq_ids = root.p2p_seq_id, t.p2p_seq
    near = in_group = np.zeros(len(rows), dtype=bool)
    ids, top, since = seq_ids[rows], 0, ""
    if root.group is not None and seq is not None:
        in_group = groups.entry_group[rows] == root.group.uid
        near = in_group & (np.abs(ids - seq) <= WINDOW_SEQ)
        top = seq + WINDOW_SEQ
        kind = "p2p" if root.collective_seq_id is None else "collective"
        since = f"group {root.group.name}'s {kind} sequence id {max(seq - WINDOW_SEQ, 0)}"
    if near.any():
        # Each rank's own record order, not its clock: hosts' clocks disagree by seconds.
        first = np.full(int(t.rank.max()) + 1, t.n, dtype=np.int64)
        np.minimum.at(first, rank[near], rows[near])
        has = first[rank] < t.n
        kept = has & (rows >= first[rank]) & (~in_group | (ids <= top))
        per_rank = np.bincount(rank[kept])
        typical = int(np.median(per_rank[per_rank > 0]))
        kept |= ~has & _newest(rank, ~has, typical)
        what = (
            f"each rank's ops since {since} (that group's up to {top}; on ranks outside it, "
            "as many newest)"
        )
    else:
        kept = _newest(rank, kept, WINDOW_NO_ROOT_OPS)
    mine = np.isin(rank, np.fromiter(culprits, np.int64, len(culprits)))
    kept |= _newest(rank, mine, WINDOW_NEWEST)
    keep = np.zeros(t.n, dtype=bool)
    keep[rows[kept]] = True
    note = (
        f"{head} around the root cause: {len(ranks):,} ranks (the culprit "
        f"{compact(sorted(culprits))} and the members of its groups), {what}, and the "
        f"culprit's newest {WINDOW_NEWEST} ops{tail}"
    )
    return Window(keep, note)


def _newest(rank: npt.NDArray[Any], mask: npt.NDArray[np.bool_], n: int) -> npt.NDArray[np.bool_]:
    """Of the rows in `mask`, each rank's newest `n` (rows are in rank order, record order
    within a rank)."""
    rows = np.flatnonzero(mask)
    found = np.zeros(len(mask), dtype=bool)
    if not len(rows):
        return found
    r = rank[rows]
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    ends = np.r_[starts[1:], len(rows)]
    left = np.repeat(ends, ends - starts) - np.arange(len(rows))  # rows left in its rank
    found[rows[left <= n]] = True
    return found


def write(analysis: Analysis, destination: Path, options: TimelineOptions) -> Rendered:
    """The renderer: the trace built, encoded and written to `destination` atomically, with
    what it leaves out (notes), a warning when a browser may not open it, and its counts."""
    trace = build(analysis, options)
    data = encode(trace)
    write_atomic(destination, data)
    warning = size_warning(len(data))
    events = trace["traceEvents"]
    slices = sum(1 for e in events if e["ph"] == "X")
    return Rendered(
        size=len(data),
        notes=notes(trace),
        warnings=() if warning is None else (warning,),
        detail=f": {slices} op slices, {len(events)} events",
    )


def notes(trace: dict[str, Any]) -> tuple[str, ...]:
    """What a built trace leaves out, one sentence each, for the CLI to print."""
    return tuple(trace.get("otherData", {}).get("notes", ()))


def encode(trace: dict[str, Any]) -> bytes:
    """The trace as compact JSON bytes."""
    return json.dumps(trace, separators=(",", ":")).encode()


def size_warning(size: int, limit: int = LARGE_BYTES) -> str | None:
    """A warning for a trace of `size` bytes that a browser may not open, else None."""
    if size <= limit:
        return None
    return (
        f"the trace is {size / 2**20:,.0f} MiB: browsers struggle past {limit / 2**20:,.0f} MiB;"
        " narrow it with --selected-ranks, --seq or --last"
    )


def estimate_bytes(trace: dict[str, Any], sample: int = 2000) -> int:
    """About the size of `encode(trace)`, from a sample of its events (cheap at any size)."""
    events = trace["traceEvents"]
    if len(events) <= sample:
        return len(encode(trace))
    step = len(events) // sample
    picked = events[::step][:sample]
    per_event = len(json.dumps(picked, separators=(",", ":"))) / len(picked)
    return int(per_event * len(events)) + 1024


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
    keep: npt.NDArray[np.bool_] | None = None,
    in_job: npt.NDArray[np.int64] | None = None,
) -> Iterator[dict[str, Any]]:
    """The trace events of the dumps; timestamps are µs from `origin_ns` after each rank's
    offset is removed; `keep` (a mask of rows) narrows what is drawn further (a `Window`);
    `in_job`: the table's rows in the job, where it holds some only (flows are named by
    them). Used on its own and as an overlay on merged profiler traces."""
    t, groups, _m = analysis.table, analysis.groups, analysis.matches
    tracks = _Tracks(tid_base)
    rows = _selected_rows(analysis, options, origin_ns, offsets, keep)
    newest = _newest_ns(analysis)
    rank_of = t.rank[rows].tolist()
    ranks = sorted(set(rank_of) | _culprit_ranks(analysis, options, keep))

    def us(ns: int, rank: int) -> float:
        return (ns - offsets.get(rank, 0) - origin_ns) / 1000.0

    for rank in ranks:
        if pid_names:
            yield _meta("process_name", rank, 0, {"name": f"rank {rank}"})
            yield _meta("process_sort_index", rank, 0, {"sort_index": rank})
    by_track: dict[tuple[int, int, bool], list[int]] = defaultdict(list)  # → positions in rows
    keys = zip(
        rank_of,
        groups.entry_group[rows].tolist(),
        np.isin(t.unit[rows], P2P_UNITS).tolist(),
        strict=True,
    )
    for i, key in enumerate(keys):
        by_track[key].append(i)
    used_tracks = set(by_track)
    for rank, uid, p2p in sorted(used_tracks):
        g = groups.groups[uid]
        name = f"{name_prefix}group {g.name} ({g.desc})" + (" send/recv" if p2p else "")
        tid = tracks.tid(uid, p2p)
        yield _meta("thread_name", rank, tid, {"name": name})
        yield _meta("thread_sort_index", rank, tid, {"sort_index": tid})

    slice_at: dict[int, tuple[float, int, int]] = {}  # row → (ts, pid, tid)
    cells = _Cells(analysis, rows, offsets, _block_members(analysis, rows))
    order = t.row_in_rank[rows].tolist()
    for (rank, uid, p2p), positions in sorted(by_track.items()):
        tid = tracks.tid(uid, p2p)
        prev_end = -math.inf
        dump_time = newest.get(rank)
        for i in sorted(positions, key=order.__getitem__):
            created = cells.created[i]
            end, how = cells.end(i, created if dump_time is None else dump_time)
            start_us = us(created, rank) if created >= 0 else prev_end
            if not math.isfinite(start_us):
                start_us = 0.0
            start_us = max(start_us, prev_end)
            end_us = max(us(end, rank) if end >= 0 else start_us, start_us)
            prev_end = end_us
            slice_at[cells.row[i]] = (start_us, rank, tid)
            event = {
                "name": cells.name(i),
                "cat": "fr.p2p" if p2p else "fr.collective",
                "ph": "X",
                "pid": rank,
                "tid": tid,
                "ts": round(start_us, 3),
                "dur": round(end_us - start_us, 3),
                "args": cells.args(i, how, rank),
            }
            if how == "incomplete":
                event["cname"] = INCOMPLETE_COLOR
            yield event
    if options.flows:
        yield from _flows(analysis, slice_at, in_job)
    named: set[tuple[int, int]] = {(r, tracks.tid(u, p)) for r, u, p in used_tracks}
    for mark in _markers(analysis, options, slice_at, tracks, us, newest, keep):
        pid, tid = int(mark["pid"]), int(mark["tid"])
        if mark["s"] == "t" and (pid, tid) not in named:
            named.add((pid, tid))
            g = groups.groups[(tid - tracks.base - 1) // 2]
            yield _meta(
                "thread_name", pid, tid, {"name": f"{name_prefix}group {g.name} ({g.desc})"}
            )
        yield mark


class _Cells:
    """The selected rows' columns as lists, and what a slice shows of one row (by its
    position among the selected rows): numpy scalars read one at a time cost most of the
    trace's time, and repeated values (names, shapes, dtypes) are made once."""

    def __init__(
        self,
        analysis: Analysis,
        rows: npt.NDArray[np.int64],
        offsets: dict[int, int],
        members: dict[int, list[tuple[int, int]]],
    ) -> None:
        t, groups = analysis.table, analysis.groups
        self.t, self.groups, self.offsets, self.members = t, groups, offsets, members
        self.row = rows.tolist()
        self.created = t.t_created[rows].tolist()
        self.completed = t.t_completed[rows].tolist()
        self.started = t.t_started[rows].tolist()
        self.duration = t.duration_ms[rows].tolist()
        self.done = analysis.matches.done[rows].tolist()
        self.pname = t.pname[rows].tolist()
        self.unit = t.unit[rows].tolist()
        self.coll_seq = t.coll_seq[rows].tolist()
        self.p2p_seq = t.p2p_seq[rows].tolist()
        self.op_id = t.op_id[rows].tolist()
        self.record_id = t.record_id[rows].tolist()
        self.state = t.state[rows].tolist()
        self.retired = t.retired[rows].tolist()
        self.uid = groups.entry_group[rows].tolist()
        self.in_shape = t.in_shape[rows].tolist()
        self.out_shape = t.out_shape[rows].tolist()
        self.in_dtype = t.in_dtype[rows].tolist()
        self.out_dtype = t.out_dtype[rows].tolist()
        self._shapes: dict[int, list[list[int]]] = {}
        self._states: dict[int, str] = {}
        self._dtypes: dict[int, list[str]] = {}
        self._members: dict[tuple[int, int], str] = {}

    def end(self, i: int, dump_time: int) -> tuple[int, str]:
        """When row `i`'s slice ends, and how that is known."""
        completed = self.completed[i]
        if completed >= 0:
            return completed, "completed"
        started, duration = self.started[i], self.duration[i]
        if started >= 0 and math.isfinite(duration) and 0 <= duration < 1e10:
            return started + int(duration * 1e6), "duration"
        if self.done[i]:
            return self.created[i], "completion time unknown"
        return dump_time, "incomplete"

    def name(self, i: int) -> str:
        name = self.t.profiling_names[self.pname[i]]
        op = name.partition(":")[2] or name
        if self.unit[i] in (UnitKind.P2P, UnitKind.BATCH_MARKER):
            return f"{op} {seq_id(int(self.p2p_seq[i]), p2p=True)}"
        suffix = "" if self.done[i] else " (not completed)"
        return f"{op} {seq_id(int(self.coll_seq[i]))}{suffix}"

    def sizes(self, code: int) -> list[list[int]]:
        found = self._shapes.get(code)
        if found is None:
            found = self._shapes[code] = [list(s) for s in self.t.shapes[code]]
        return found

    def dtypes(self, code: int) -> list[str]:
        found = self._dtypes.get(code)
        if found is None:
            found = self._dtypes[code] = list(self.t.dtypes[code])
        return found

    def member(self, pname: int, shape: int) -> str:
        found = self._members.get((pname, shape))
        if found is None:
            name = self.t.profiling_names[pname]
            found = self._members[(pname, shape)] = f"{name} in={self.sizes(shape)}"
        return found

    def state_name(self, code: int) -> str:
        found = self._states.get(code)
        if found is None:
            found = self._states[code] = STATE_NAMES[State(code)]
        return found

    def args(self, i: int, how: str, rank: int) -> dict[str, Any]:
        t = self.t
        g = self.groups.groups[self.uid[i]]
        created = self.created[i]
        args: dict[str, Any] = {
            "rank": rank,
            "group": g.name,
            "group_desc": g.desc,
            "profiling_name": t.profiling_names[self.pname[i]],
            "collective_seq_id": self.coll_seq[i],
            "p2p_seq_id": self.p2p_seq[i],
            "op_id": self.op_id[i],
            "record_id": self.record_id[i],
            "state": self.state_name(self.state[i]),
            "retired": bool(self.retired[i]),
            "completed": bool(self.done[i]),
            "end": how,
            "input_sizes": self.sizes(self.in_shape[i]),
            "output_sizes": self.sizes(self.out_shape[i]),
            "input_dtypes": self.dtypes(self.in_dtype[i]),
            "output_dtypes": self.dtypes(self.out_dtype[i]),
            "enqueued_ns": created if created >= 0 else None,
        }
        if self.offsets:
            args["clock_offset_ns"] = self.offsets.get(rank, 0)
        members = self.members.get(self.row[i])
        if members:
            args["members"] = [self.member(pname, shape) for pname, shape in members]
        return args


def build(analysis: Analysis, options: TimelineOptions | None = None) -> dict[str, Any]:
    """The whole Chrome trace as a dict; `otherData["notes"]` says what it leaves out. Where
    the analysis' engine keeps the rows (`Analysis.calls`), the rows drawn are fetched first:
    the whole programs of the ranks drawn (`rows.drawn_of`)."""
    options = options or TimelineOptions()
    in_job: npt.NDArray[np.int64] | None = None
    if analysis.calls is not None:
        from .rows import drawn_of

        job = joined(analysis.calls.reduced(extent))
        analysis, in_job = drawn_of(analysis, _drawn_ranks(analysis, options, job))
    else:
        job = table_extent(analysis.table)
    offsets = clock_offsets(analysis) if options.align else {}
    origin = job.origin
    shown = window(analysis, options, job)
    keep = None if shown is None else shown.rows
    events = list(
        fr_events(analysis, options, origin_ns=origin, offsets=offsets, keep=keep, in_job=in_job)
    )
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
            "notes": [] if shown is None else [shown.note],
        },
    }


# ---------------------------------------------------------------------------------------------


def _drawn_ranks(analysis: Analysis, options: TimelineOptions, job: Extent) -> tuple[int, ...]:
    """The ranks whose rows the trace reads: the window's; else those `--ranks` names, or
    every rank (and every rank where the clocks are aligned: all collectives line them up)."""
    loaded = tuple(analysis.groups.loaded_ranks)
    chosen = plan(analysis, options, job)
    if options.align or (chosen is None and options.ranks is None):
        return loaded
    if chosen is None:
        assert options.ranks is not None
        return tuple(sorted(set(options.ranks) & set(loaded)))
    return chosen.ranks


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
    analysis: Analysis,
    options: TimelineOptions,
    origin_ns: int,
    offsets: dict[int, int],
    keep: npt.NDArray[np.bool_] | None = None,
) -> npt.NDArray[np.int64]:
    t = analysis.table
    if not t.n:
        return np.zeros(0, np.int64)
    mask = np.isin(t.unit, SLICE_UNITS)
    if keep is not None:
        mask &= keep
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


def _block_members(
    analysis: Analysis, rows: npt.NDArray[np.int64]
) -> dict[int, list[tuple[int, int]]]:
    """The members of the coalesced blocks and batches whose markers are among `rows`, by
    their marker's row: (profiling name code, input shape code) each."""
    t = analysis.table
    out: dict[int, list[tuple[int, int]]] = defaultdict(list)
    if not t.n:
        return out
    member = np.flatnonzero((t.unit == UnitKind.BLOCK_MEMBER) | (t.unit == UnitKind.BATCH_MEMBER))
    member = member[np.isin(t.marker[member], rows)]
    codes = zip(
        t.marker[member].tolist(),
        t.pname[member].tolist(),
        t.in_shape[member].tolist(),
        strict=True,
    )
    for marker, pname, shape in codes:
        out[marker].append((pname, shape))
    return out


def _flows(
    analysis: Analysis,
    slice_at: dict[int, tuple[float, int, int]],
    in_job: npt.NDArray[np.int64] | None,
) -> Iterator[dict[str, Any]]:
    """Arrows joining the slices of one collective, and each send to its recv, each named
    by its first slice's row in the job (the same whichever rows the table holds)."""
    t, m = analysis.table, analysis.matches

    def job_row(row: int) -> int:
        return row if in_job is None else int(in_job[row])

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
                "id": f"c{job_row(rows[0])}",
                "pid": pid,
                "tid": tid,
                "ts": round(ts, 3),
                "bp": "e",
            }
    drawn = np.fromiter(slice_at, np.int64, len(slice_at))
    both = np.flatnonzero(np.isin(m.p2p.send_row, drawn) & np.isin(m.p2p.recv_row, drawn))
    pairs = zip(m.p2p.send_row[both].tolist(), m.p2p.recv_row[both].tolist(), strict=True)
    for s, r in pairs:
        for ph, row in (("s", s), ("f", r)):
            ts, pid, tid = slice_at[row]
            yield {
                "name": "send/recv",
                "cat": "fr.p2p",
                "ph": ph,
                "id": f"p{job_row(s)}",
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


def _culprit_ranks(
    analysis: Analysis, options: TimelineOptions, keep: npt.NDArray[np.bool_] | None
) -> set[int]:
    ranks = {r for j in _marked(analysis) for r in j.finding.culprit_ranks}
    root = analysis.conclusion.root
    if root is not None:
        ranks.update(root.ranks)
    loaded = set(analysis.groups.loaded_ranks)
    wanted = set(options.ranks) if options.ranks is not None else loaded
    if keep is not None:  # a window: its ranks only
        wanted &= set(distinct(analysis.table.rank[keep]).tolist())
    return ranks & loaded & wanted


def _markers(
    analysis: Analysis,
    options: TimelineOptions,
    slice_at: dict[int, tuple[float, int, int]],
    tracks: _Tracks,
    us: Any,
    newest: dict[int, int],
    keep: npt.NDArray[np.bool_] | None,
) -> Iterator[dict[str, Any]]:
    """Instant events for every finding and the root cause, on the culprit ranks."""
    t, groups = analysis.table, analysis.groups
    wanted = _culprit_ranks(analysis, options, keep)
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


def overlay(analysis: Analysis, shift_ns: dict[int, int]) -> Iterator[dict[str, Any]]:
    """The Flight Recorder timeline of the ranks in `shift_ns`, each shifted onto a merged
    profiler trace's clock (`traces.fr_shift_ns`), for `merge-traces`."""
    options = TimelineOptions(ranks=tuple(sorted(shift_ns)))
    yield from fr_events(
        analysis,
        options,
        origin_ns=0,
        offsets=shift_ns,
        tid_base=100_000,
        name_prefix="Flight Recorder: ",
        pid_names=False,
    )


def parse_seq(text: str) -> tuple[int, int]:
    """`"3:9"` → (3, 9); used by the CLI's --seq."""
    low, sep, high = text.partition(":")
    a, b = decimal(low.strip()), decimal(high.strip())
    if not sep or a is None or b is None:
        raise ValueError(f"expected A:B, got {text!r}")
    if b < a:
        raise ValueError(f"empty range {text!r}")
    return a, b


__all__: Sequence[str] = [
    "LARGE_BYTES",
    "Extent",
    "TimelineOptions",
    "Window",
    "build",
    "clock_offsets",
    "encode",
    "estimate_bytes",
    "extent",
    "fr_events",
    "notes",
    "parse_seq",
    "plan",
    "size_warning",
    "window",
]
