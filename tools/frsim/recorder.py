"""What each rank's Flight Recorder holds when it dumps, derived from the simulated execution.

Dump times (true time; `dump_times`):

- The job hangs (some enqueued op never completes): the watchdog of the first live rank whose
  oldest never-completing op passes `timeout_ms` (counted from that op's enqueue time) dumps
  at D0, the first watchdog poll at or after enqueue + timeout; every other live rank dumps at
  D0 + U(0, skew) (the dump signal travels through the store). A crashed rank writes nothing.
- `end` and no hang: every rank dumps at the last completion of the job + U(0, skew).
- `mid`: one instant drawn between the end of the first full step and the end of the job, then
  + U(0, skew) per rank.

A rank's dump (`record`), at its dump time D on its own clock (true time + host offset):

- Entries: every op enqueued by D, in enqueue order (a coalesced block: its members then its end
  marker; a batched p2p block: its sends/recvs then an `nccl:coalesced` marker with is_p2p
  False), keeping only the newest `capacity` (the ring buffer; record_id keeps counting).
- State: completed if the op completed by D; else started if timing is on and it started by D;
  else scheduled. Block members stay scheduled and unretired; the marker carries the state.
- Watchdog (NCCL): it polls every `poll_ms` from a per-rank phase. A completion is discovered at
  the first poll at or after it: the entry is retired then, time_discovered_completed_ns = that
  poll (timing on: time_discovered_started_ns too, and duration_ms = completion - start, the
  CUDA events' elapsed time as a float32). A completion after the last poll before D is found
  by the dump itself: completed, not retired, discovered at D. An unretired op that started
  (timing on) has time_discovered_started_ns = D. Timed-out ops are not retired (TearDown
  aborts after the dump). Without timing, time_discovered_started_ns is None, no duration_ms.
- gloo: profiling names "gloo:<op>"; send/recv and batched p2p are not recorded (they still
  take op_ids); state always "scheduled"; no discovered times, no duration; retired once the op
  finished, or failed at its timeout (age at the dump >= timeout); pg_config broken as gloo
  writes it (one key '', name and desc '', ranks '[]' once subgroups exist); comm_lib_version "".
- pg_status per pg_id: last enqueued / started (watchdog-discovered; -1 without timing) /
  completed (retired) collective sequence id, -1 for none. pg_config (NCCL): the rank's groups,
  keyed by name in string order, ranks as a string "[0, 1, 2]".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal, NamedTuple

from .engine import NEVER, RankTimes
from .layout import Topology
from .program import COLL_KINDS, P2P_KINDS, Kind, Program, Sizes
from .sites import RawFrame, is_autograd, stack

_COLL_KINDS = frozenset(int(k) for k in COLL_KINDS)

BASE_TIME_NS = 1_760_000_000_000_000_000
"""Wall clock (ns since the epoch) at true time 0 of every simulated job."""

State = Literal["scheduled", "started", "completed"]


class Entry(NamedTuple):
    """One entry, fields in the order torch writes them (frames first when present)."""

    frames: tuple[RawFrame, ...] | None
    record_id: int
    pg_id: int
    process_group: tuple[str, str]
    thread_name: str
    thread_id: str
    collective_seq_id: int
    p2p_seq_id: int
    op_id: int
    profiling_name: str
    time_created_ns: int
    duration_ms: float | None
    input_sizes: Sizes
    input_dtypes: tuple[str, ...]
    output_sizes: Sizes
    output_dtypes: tuple[str, ...]
    state: str
    time_discovered_started_ns: int | None
    time_discovered_completed_ns: int | None
    retired: bool
    timeout_ms: int
    is_p2p: bool
    static: int = -1
    """Not written: equal for entries of one dump whose frames, thread kind, name, sizes,
    dtypes and is_p2p are equal (writers may reuse bytes by it); -1: unknown."""


@dataclass
class RankDump:
    """One rank's dump, before a writer serializes it."""

    rank: int
    version: str
    pg_config: list[tuple[str, str, str, str]]
    """(key, name, desc, ranks text), in the dump's order."""
    comm_lib_version: str
    pg_status: list[tuple[int, int, int]]
    """Per pg_id: last enqueued, started, completed collective seq id."""
    entries: list[Entry]


@dataclass(frozen=True)
class Settings:
    """How every rank records and dumps (shared by all ranks of a job)."""

    layout: Topology
    backend: str = "nccl"
    timing: bool = False
    capacity: int = 2000
    timeout_ms: int = 600_000
    poll_ms: int = 100
    version: str = "2.10"
    comm_lib_version: str = "2.21.5"
    stack_traces: bool = True
    entry_gap_ns: int = 3_000
    """Host time between the entries of one block (members, then the marker)."""
    seed: int = 0
    max_clock_offset_ns: int = 4_000_000


# --- per-rank constants (pure functions of seed and rank) ------------------------------------

_MASK = (1 << 64) - 1


def mix(*values: int) -> int:
    """A 64-bit hash of integers (splitmix64 steps); stable across processes."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        h = (h ^ (h >> 27)) * 0x94D049BB133111EB & _MASK
        h ^= h >> 31
    return h


def uniform(*values: int) -> float:
    """U[0, 1) from a hash of `values`."""
    return (mix(*values) >> 11) / float(1 << 53)


def clock_offset(settings: Settings, rank: int) -> int:
    """The rank's host clock minus true time (ranks on one host share it)."""
    host = settings.layout.host_of(rank)
    span = 2 * settings.max_clock_offset_ns + 1
    return mix(settings.seed, 0xC10C, host) % span - settings.max_clock_offset_ns


def poll_phase(settings: Settings, rank: int) -> int:
    """Where in the watchdog's polling period rank `rank` polls, in ns (seeded per rank)."""
    return mix(settings.seed, 0x9011, rank) % (settings.poll_ms * 1_000_000)


def thread_ids(settings: Settings, rank: int) -> tuple[str, str]:
    """(main thread id, autograd thread id) as torch writes them: decimal strings."""
    base = 0x7F00_0000_0000
    main = base + mix(settings.seed, 0x7D, rank) % (1 << 24) * 4096
    autograd = base + mix(settings.seed, 0xA7, rank) % (1 << 24) * 4096
    return str(main), str(autograd)


def first_poll_at_or_after(t: int, phase: int, period: int) -> int:
    """The watchdog polls at phase + k * period for every integer k."""
    return phase + -((phase - t) // period) * period


def last_poll_at_or_before(t: int, phase: int, period: int) -> int:
    """The last watchdog poll at or before time `t` (polls at phase + k * period)."""
    return phase + (t - phase) // period * period


# --- dump times ------------------------------------------------------------------------------


DumpKind = Literal["end", "mid"]


def oldest_stuck(times: RankTimes) -> int:
    """Index of the rank's oldest enqueued op that never completes, or -1."""
    u = times.completed()
    return u if u < len(times.enq) and times.enq[u] != NEVER else -1


def dump_times(
    settings: Settings,
    programs: list[Program],
    times: list[RankTimes],
    kind: DumpKind = "end",
    skew_ns: int = 1_000_000_000,
) -> tuple[list[int | None], int]:
    """Each rank's dump time (None: it crashed and writes no dump), and the index of the rank
    whose watchdog fired first (-1 without a hang)."""
    seed = settings.seed
    live = [r for r, t in enumerate(times) if t.crash_time == NEVER]
    period = settings.poll_ms * 1_000_000
    timeout = settings.timeout_ms * 1_000_000
    first, base = -1, NEVER
    if kind == "end":
        for r in live:
            u = oldest_stuck(times[r])
            if u >= 0:
                fire = first_poll_at_or_after(
                    times[r].enq[u] + timeout, poll_phase(settings, r), period
                )
                if fire < base:
                    first, base = r, fire
    if first < 0:
        end = max((t.comp[t.completed() - 1] for t in times if t.completed()), default=0)
        base = end
        if kind == "mid":
            step_end = 0
            for r in live:
                last_of_first_step = programs[r].step_start(1) - 1
                t = times[r]
                if 0 <= last_of_first_step < len(t.comp) and t.comp[last_of_first_step] != NEVER:
                    step_end = max(step_end, t.comp[last_of_first_step])
            base = step_end + int(uniform(seed, 0x31D) * max(0, end - step_end))
    out: list[int | None] = [None] * len(times)
    for r in live:
        out[r] = base if r == first else base + int(uniform(seed, 0x5E3, r) * skew_ns)
    return out, first


# --- one rank's dump ---------------------------------------------------------------------------


def _float32(value: float) -> float:
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def pg_config(settings: Settings, rank: int) -> list[tuple[str, str, str, str]]:
    """The pg_config rows of `rank`'s dump: (key, name, desc, members) of each group it is in;
    gloo's single row keyed by ''."""
    layout = settings.layout
    if settings.backend == "gloo":
        # gloo keys every group by '' and later groups overwrite earlier ones: once any
        # subgroup exists, what remains is an empty member list (fr-format.md section 6).
        ranks = layout.ranks_text(0) if layout.group_count == 1 else "[]"
        return [("", "", "", ranks)]
    groups = sorted(layout.member_gids(rank), key=str)
    return [(str(g), str(g), layout.group(g).desc, layout.ranks_text(g)) for g in groups]


def _last_seq_per_role(
    program: Program, end: int, roles: list[int], own_counter: bool = False
) -> dict[int, int]:
    """For each role, the collective seq counter after units [0, end): -1 when zero.

    With `own_counter` (ProcessGroupNCCL), the last unit's own counter instead: the p2p
    sequence id when that unit is a send/recv or a batch of them."""
    found: dict[int, int] = {}
    role, cseq = program.role, program.cseq
    i = end - 1
    while i >= 0 and len(found) < len(roles):
        g = role[i]
        if g not in found:
            found[g] = program.seq_of(i) if own_counter else cseq[i]
        i -= 1
    return {g: (found.get(g, 0) or -1) for g in roles}


def _last_op_per_role(program: Program, end: int, roles: list[int]) -> dict[int, int]:
    """gloo: for each role, the op_id of its last recorded collective among units [0, end); -1
    when none. gloo's pg_status counts op_ids, which unrecorded ops (send/recv,
    `monitored_barrier`) advance too; on a group of plain collectives it is the seq id."""
    found: dict[int, int] = {}
    role, kind, opid, nent = program.role, program.kind, program.opid, program.nent
    i = end - 1
    while i >= 0 and len(found) < len(roles):
        g = role[i]
        if g not in found and kind[i] in _COLL_KINDS and nent[i]:
            found[g] = opid[i] + nent[i] - 1
        i -= 1
    return {g: found.get(g, -1) for g in roles}


def buffer_window(
    capacity: int, program: Program, times: RankTimes, dump_time: int
) -> tuple[int, int, int]:
    """(first unit with an entry in the ring buffer, units enqueued by the dump, index of the
    oldest entry kept): the dump holds units [first, enqueued), the first maybe in part."""
    enqueued = times.enqueued(dump_time)
    ecum = program.ecum
    first_entry = max(0, ecum[enqueued] - capacity)
    lo, hi = 0, enqueued
    while lo < hi:
        mid = (lo + hi) // 2
        if ecum[mid + 1] <= first_entry:
            lo = mid + 1
        else:
            hi = mid
    return lo, enqueued, first_entry


class _Static(NamedTuple):
    """The fields of one entry that every rank running the same program records alike."""

    key: int
    frames: tuple[RawFrame, ...] | None
    name: str
    in_sizes: Sizes
    in_dtypes: tuple[str, ...]
    out_sizes: Sizes
    out_dtypes: tuple[str, ...]
    is_p2p: bool
    autograd: bool


def _statics(
    program: Program, prefix: str, local: tuple[int, ...], stack_traces: bool
) -> list[tuple[_Static, ...]]:
    """Per unit, the static fields of its entries (members, then the marker), cached on the
    program. They depend on the rank only through its local rank in the groups the program
    sends/receives on (p2p names), so ranks sharing a program share them."""
    p2p_roles = sorted(
        {program.role[u] for u in range(len(program)) if program.kind[u] in P2P_KINDS}
    )
    key = ("statics", prefix, tuple(local[r] for r in p2p_roles), stack_traces)
    found = program.cache.get(key)
    if found is not None:
        return found  # type: ignore[return-value]
    cat = program.catalog
    interned: dict[tuple[object, ...], _Static] = {}
    out: list[tuple[_Static, ...]] = []
    for u in range(len(program)):
        kind, site = program.kind[u], program.site[u]
        autograd = is_autograd(site)
        if kind in (Kind.BATCH, Kind.COALESCED):
            block = cat.blocks[program.item[u]]
            members = [(cat.templates[m], block.peers[j]) for j, m in enumerate(block.members)]
            members.append((cat.templates[block.marker], -1))
        else:
            members = [(cat.templates[program.item[u]], program.peer[u])]
        row = []
        for j, (t, peer) in enumerate(members):
            marker = kind in (Kind.BATCH, Kind.COALESCED) and j == len(members) - 1
            p2p = kind in (Kind.SEND, Kind.RECV) or (kind == Kind.BATCH and not marker)
            if p2p:
                me = local[program.role[u]]
                arrow = f"{me}->{peer}" if t.op == "send" else f"{me}<-{peer}"
                name = f"{prefix}{t.op} {arrow}"
            else:
                name = prefix + t.op
            frames = stack(site, t.api) if stack_traces else None
            fields = (
                frames,
                name,
                t.in_sizes,
                t.in_dtypes,
                t.out_sizes,
                t.out_dtypes,
                p2p,
                autograd,
            )
            static = interned.get(fields)
            if static is None:
                static = interned[fields] = _Static(len(interned), *fields)
            row.append(static)
        out.append(tuple(row))
    program.cache[key] = out
    return out


def record(
    settings: Settings,
    rank: int,
    program: Program,
    times: RankTimes,
    dump_time: int,
) -> RankDump:
    """Rank `rank`'s dump at true time `dump_time`."""
    s = settings
    gloo = s.backend == "gloo"
    layout = s.layout
    offset = BASE_TIME_NS + clock_offset(s, rank)
    period = s.poll_ms * 1_000_000
    phase = poll_phase(s, rank)
    timeout_ns = s.timeout_ms * 1_000_000
    timeout_ms = s.timeout_ms
    d = dump_time
    last_poll = last_poll_at_or_before(d, phase, period)
    binding = layout.binding(rank)
    member_roles = [slot for slot, gid in enumerate(binding) if gid >= 0]
    pg_ids = [0] * len(binding)
    keys: list[tuple[str, str]] = [("", "")] * len(binding)
    for i, member_role in enumerate(member_roles):
        pg_ids[member_role] = i
        keys[member_role] = (str(binding[member_role]), layout.group(binding[member_role]).desc)
    main_tid, autograd_tid = thread_ids(s, rank)
    main_name = "python" if gloo else "pt_main_thread"
    local = tuple(
        layout.local_rank(slot, rank) if gid >= 0 else -1 for slot, gid in enumerate(binding)
    )
    statics = _statics(program, f"{s.backend}:", local, s.stack_traces)
    enq, ready, comp = times.enq, times.ready, times.comp
    p_role, p_cseq, p_pseq, p_opid, p_nent, p_shared = (
        program.role,
        program.cseq,
        program.pseq,
        program.opid,
        program.nent,
        program.shared,
    )

    lo, enqueued, first_entry = buffer_window(s.capacity, program, times, d)
    ecum = program.ecum
    entries: list[Entry] = []
    append = entries.append
    gap = s.entry_gap_ns
    timing = s.timing and not gloo
    for u in range(lo, enqueued):
        n = p_nent[u]
        if n == 0:
            continue
        role = p_role[u]
        pg_id, key = pg_ids[role], keys[role]
        cs, ps, op0, rid0 = p_cseq[u], p_pseq[u], p_opid[u], ecum[u]
        e, c = enq[u], comp[u]
        # the unit's (the marker's) state and times
        duration: float | None = None
        started: int | None = None
        completed: int | None = None
        if gloo:
            state: State = "scheduled"
            retired = c <= d or d - e >= timeout_ns
        elif c <= d:
            state = "completed"
            found = first_poll_at_or_after(c, phase, period)
            if found <= d:
                retired = True
                completed = found + offset
                if timing:
                    started = completed
                    duration = _float32((c - ready[u]) / 1e6)
            else:
                retired = False
                completed = d + offset
                if timing:
                    started = completed
        elif timing and ready[u] <= d:
            state, retired, started = "started", False, d + offset
        else:
            state, retired = "scheduled", False
        row = statics[u]
        t0 = e + offset - (n - 1) * gap
        shared = p_shared[u]
        for j in range(max(0, first_entry - rid0), n):
            st = row[j]
            tname, tid = ("pt_autograd_0", autograd_tid) if st.autograd else (main_name, main_tid)
            # Only a block's last entry carries its state; the others stay scheduled. A fused
            # block's entries are one op: they share its op_id and state.
            last = j == n - 1 or shared
            append(
                Entry(
                    st.frames,
                    rid0 + j,
                    pg_id,
                    key,
                    tname,
                    tid,
                    cs,
                    ps,
                    op0 if shared else op0 + j,
                    st.name,
                    t0 + j * gap,
                    duration if last else None,
                    st.in_sizes,
                    st.in_dtypes,
                    st.out_sizes,
                    st.out_dtypes,
                    state if last else "scheduled",
                    started if last else None,
                    completed if last else None,
                    retired if last else False,
                    timeout_ms,
                    st.is_p2p,
                    st.key,
                )
            )

    # pg_status: enqueued, watchdog-started, retired prefixes of the program
    roles = [int(r) for r in member_roles]
    last_enqueued = _last_seq_per_role(program, enqueued, roles, own_counter=not gloo)
    if gloo:
        last_enqueued = _last_op_per_role(program, enqueued, roles)
        done = times.completed(d)
        if done < enqueued and d - enq[done] >= timeout_ns:
            done += 1  # failed at its timeout: retired, counted as completed
        last_started = dict.fromkeys(roles, -1)
    else:
        done = min(enqueued, times.completed(last_poll))
        if timing:
            last_started = _last_seq_per_role(
                program, min(enqueued, times.started(last_poll)), roles, own_counter=True
            )
        else:
            last_started = dict.fromkeys(roles, -1)
    if gloo:
        last_completed = _last_op_per_role(program, done, roles)
    else:
        last_completed = _last_seq_per_role(program, done, roles, own_counter=True)
    status = [(last_enqueued[g], last_started[g], last_completed[g]) for g in roles]
    return RankDump(
        rank,
        s.version,
        pg_config(s, rank),
        "" if gloo else s.comm_lib_version,
        status,
        entries,
    )
