"""Discrete-event execution of every rank's program: enqueue, start and completion times.

Model (times in ns of true time; a rank's recorded clock adds its host's offset later):

- Host. It spends each op's CPU time, then enqueues the op (`enq`). It runs ahead of the
  device, except that (a) after a `sync` op it waits until that op completes (gloo: after
  every op, collectives and send/recv alike, unless the op is `nowait`: `async_op=True`;
  and with gloo, before an op whose `after` names an earlier op, until that one completes), and
  (b) it never has more than `queue_limit` enqueued-but-incomplete ops: it waits for the
  oldest (the stream completes in order, so the oldest is op i - queue_limit). If what it waits
  for never completes, it stops: later ops are never enqueued.
- Device. One in-order stream per rank: `ready[i] = max(enq[i], comp[i-1] + compute before i)`.
  The op starts at `ready[i]` (it *arrives* at its collective instance or p2p pairs then).
- A collective instance (the k-th collective unit of every member on group g; a coalesced
  block is one) completes for all members at max over members of ready + duration, plus a
  per-rank jitter of up to 2 us, provided every member arrived and their records agree
  (signature: op, sizes, dtypes), unless one member's op is `tolerant` (completes with garbage).
- The n-th send a->b on group g pairs with the n-th recv on b from a (batched or not); the pair
  is done at max of the two ready times + duration, if their sizes and dtypes agree. A p2p unit
  (one send/recv, or a batched block) completes when all its pairs are done. A block arrives
  as a whole at its ready time, so there is no circularity.
- Faults (`EngineFault`): `stop_at` (host never enqueues that op or later), `crash_at` (the
  process dies when it would enqueue that op, at `crash_time`: no later enqueue, no arrival at
  or after that time, and an instance it is part of that would complete after that time never
  completes), `stuck_in` (arrives, its peers complete, its own op never does), `stuck_before`
  (enqueued, never starts), `hang_at` (every member arrives at the op's collective instance,
  which never completes for any of them: a communicator or network hang).
- gloo aborts (`abort`, one instance: the fault's). When its members' records disagree and
  their byte counts differ, gloo kills the member that receives more bytes than it posted
  (SIGABRT: it dies once every member arrived, no dump), as real 8-rank gloo jobs show. An
  all_reduce's ring receives from the successor: the first member whose successor posts more
  aborts, and nobody completes (every chunk's sum passes through it). An all_gather's ring
  receives from the predecessor: the first member whose predecessor posts more aborts; its
  predecessor already has every chunk and completes. In an all_to_all the one member whose
  input total differs, if larger, sends the extra to its successor, which aborts; of the
  other members, those whose exchange finished before the abort closed the connections
  complete it (each with even odds: real runs differ). `abort_also`: a rank that dies with it
  (a swap's culprit, which receives more at the second op of the two while gloo runs them
  together).

Resolution is a worklist fixpoint over ranks: each rank has a host cursor and a stream cursor
and suspends on the first unresolved completion it needs; an instance completing wakes its
members. What is unresolved at the end never completes (`NEVER`). Every value is a max/plus of
values it depends on, so the order of the worklist does not change the result.

Per-op state lives in flat `array('q')`s per rank (enq, ready, comp), never in per-op objects,
so one rank's results can be shipped to a worker process that writes its file.
"""

from __future__ import annotations

import random
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .faults import EngineFault, posted_bytes
from .layout import Topology
from .program import Kind, Program

NEVER = 1 << 62
"""Time of an event that never happens (also: not yet resolved, during the run)."""
WAKE_NS = 4_000
"""Host latency between a completion and the host noticing it (a synchronize returning)."""
ABORT_NS = 50_000
"""From the last arrival at a disagreeing gloo collective to the receiver's abort."""
_COLL = int(Kind.COLL)
_COALESCED = int(Kind.COALESCED)


@dataclass
class RankTimes:
    """One rank's results: per unit of its program, true times in ns (NEVER = never)."""

    enq: array[int]
    ready: array[int]
    comp: array[int]
    crash_time: int = NEVER
    """When the process died (crash fault), else NEVER."""

    def enqueued(self, until: int = NEVER - 1) -> int:
        """Units enqueued at or before `until` (a prefix: enqueue times increase)."""
        return bisect_right(self.enq, until)

    def completed(self, until: int = NEVER - 1) -> int:
        """Units completed at or before `until` (a prefix: the stream completes in order)."""
        return bisect_right(self.comp, until)

    def started(self, until: int) -> int:
        """Units whose stream start (ready) is at or before `until` (a prefix)."""
        return bisect_right(self.ready, until)


_Context = tuple[
    list[int],  # kind
    list[int],  # role
    list[int],  # cpu
    list[int],  # dev
    list[int],  # dur
    list[bool],  # sync
    list[bool],  # nowait
    list[int],  # after
    list[int],  # sig
    list[bool],  # tolerant
    list[int],  # cseq
    "array[int]",  # enq
    "array[int]",  # ready
    "array[int]",  # comp
    int,  # rank factor
    int,  # rank offset
    tuple[int, ...],  # binding
    int,  # start
    int,  # crash_at
    int,  # before_at
    int,  # hang_at
]


class _Instance:
    """A collective instance some members have arrived at."""

    __slots__ = ("bad", "crasher", "dur", "hung", "left", "members", "ready", "sig", "tolerant")

    def __init__(
        self, size: int, ready: int, dur: int, sig: int, tolerant: bool, crasher: bool
    ) -> None:
        self.left = size - 1
        """Members still to arrive."""
        self.ready = ready
        self.dur = dur
        self.sig = sig
        self.tolerant = tolerant
        self.bad = False
        """Two members' records disagree."""
        self.crasher = crasher
        self.hung = False
        """A member's op is the `hang_at` fault: the instance never completes."""
        self.members: list[int] = []
        """(rank, unit) pairs, flattened."""


class _Engine:
    def __init__(
        self,
        layout: Topology,
        programs: Sequence[Program],
        faults: dict[int, EngineFault],
        queue_limit: int,
        gloo: bool,
        seed: int,
        abort: tuple[int, int] | None = None,
        abort_also: int = -1,
    ) -> None:
        world = layout.world_size
        if len(programs) != world:
            raise ValueError(f"{len(programs)} programs for a world of {world}")
        self.layout = layout
        self.programs = programs
        self.queue_limit = max(1, queue_limit)
        self.gloo = gloo
        rng = random.Random(seed * 1_000_003 + 17)
        self.seed = seed
        self.jit = [rng.randrange(256) for _ in range(1024)]
        self.rank_factor = [rng.randrange(256) for _ in range(world)]
        self.rank_offset = [rng.randrange(1024) for _ in range(world)]
        self.start = [rng.randrange(2_000_000) for _ in range(world)]
        self.bind: list[tuple[int, ...]] = [layout.binding(r) for r in range(world)]
        self.gsize = [layout.group_size(gid) for gid in range(layout.group_count)]
        self.gmembers: dict[int, tuple[int, ...]] = {}
        """Member ranks of the groups p2p ops run on (a peer is members[local peer])."""
        self.enq = [array("q", [NEVER]) * len(p) for p in programs]
        self.ready = [array("q", [NEVER]) * len(p) for p in programs]
        self.comp = [array("q", [NEVER]) * len(p) for p in programs]
        # per-rank cursors: host cursor, host time, unit the host waits for, host limit,
        # stream cursor, arrived at the stream cursor, stream dead
        self.state: list[list[int]] = [
            [0, self.start[r], -1, len(p), 0, 0, 0] for r, p in enumerate(programs)
        ]
        # faults
        self.crash_rank = self.stuck_rank = self.before_rank = self.hang_rank = -1
        self.crash_at = self.stuck_at = self.before_at = self.hang_at = -1
        self.abort = -1 if abort is None else (abort[0] << 32) | abort[1]
        self.abort_also = abort_also
        self.dead: dict[int, int] = {}
        """Ranks gloo aborted -> when."""
        self.crash_time = NEVER
        for rank, f in faults.items():
            if f.stop_at >= 0:
                self.state[rank][3] = min(self.state[rank][3], f.stop_at)
            if f.crash_at >= 0:
                self.crash_rank, self.crash_at = rank, f.crash_at
            if f.stuck_in >= 0:
                self.stuck_rank, self.stuck_at = rank, f.stuck_in
            if f.stuck_before >= 0:
                self.before_rank, self.before_at = rank, f.stuck_before
            if f.hang_at >= 0:
                self.hang_rank, self.hang_at = rank, f.hang_at
        # pending instances and pairs
        self.pending: dict[int, _Instance] = {}
        self.pairs: dict[tuple[int, int, int, int], tuple[int, int, int, int]] = {}
        self.punits: dict[tuple[int, int], list[int]] = {}
        self.work: list[int] = list(range(world - 1, -1, -1))
        self.queued = [True] * world
        self.ctx = [self._context(r) for r in range(world)]

    def _context(self, r: int) -> _Context:
        """Everything `_advance` reads for rank r, fetched in one go."""
        p = self.programs[r]
        return (
            p.kind,
            p.role,
            p.cpu,
            p.dev,
            p.dur,
            p.sync,
            p.nowait,
            p.after,
            p.sig,
            p.tolerant,
            p.cseq,
            self.enq[r],
            self.ready[r],
            self.comp[r],
            self.rank_factor[r],
            self.rank_offset[r],
            self.bind[r],
            self.start[r],
            self.crash_at if r == self.crash_rank else -1,
            self.before_at if r == self.before_rank else -1,
            self.hang_at if r == self.hang_rank else -1,
        )

    # -- the fixpoint ---------------------------------------------------------------------

    def run(self) -> list[RankTimes]:
        work, queued, advance = self.work, self.queued, self._advance
        while work:
            r = work.pop()
            queued[r] = False
            advance(r)
        crash = self.crash_rank
        return [
            RankTimes(
                self.enq[r],
                self.ready[r],
                self.comp[r],
                self.crash_time if r == crash else self.dead.get(r, NEVER),
            )
            for r in range(len(self.programs))
        ]

    def _wake(self, r: int) -> None:
        if not self.queued[r]:
            self.queued[r] = True
            self.work.append(r)

    def _advance(self, r: int) -> None:
        (
            kind,
            role,
            cpu,
            dev,
            dur,
            sync,
            nowait,
            after,
            sig,
            tol,
            cseq,
            enq,
            ready,
            comp,
            rf,
            ro,
            bind,
            start,
            crash_at,
            before_at,
            hang_at,
        ) = self.ctx[r]
        jit, gsize, pending = self.jit, self.gsize, self.pending
        queue_limit, gloo = self.queue_limit, self.gloo
        state = self.state[r]
        hc, ht, hwait, hlimit, sc, sarr, sdead = state
        crashing = crash_at >= 0
        moved = True
        while moved:
            moved = False
            # host: enqueue as far as it can
            while hc < hlimit:
                if hwait >= 0:
                    c = comp[hwait]
                    if c == NEVER:
                        break
                    c += WAKE_NS
                    if c > ht:
                        ht = c
                    hwait = -1
                if gloo and after[hc] >= 0:  # work.wait() of an earlier async op
                    c = comp[after[hc]]
                    if c == NEVER:
                        break
                    c += WAKE_NS
                    if c > ht:
                        ht = c
                x = cpu[hc]
                t = ht + x + ((x * (rf + jit[(hc + ro) & 1023])) >> 13)
                if hc >= queue_limit:
                    c = comp[hc - queue_limit]
                    if c == NEVER:
                        break
                    if c > t:
                        t = c
                if hc == crash_at:
                    self.crash_time = t
                    hlimit = hc
                    break
                enq[hc] = t
                ht = t
                if sync[hc] or (gloo and not nowait[hc]):
                    hwait = hc
                hc += 1
                moved = True
            # stream: start what is enqueued, in order
            while sc < hc and not sdead:
                if sarr:
                    if comp[sc] == NEVER:
                        break
                    sarr = 0
                    sc += 1
                    moved = True
                    continue
                d = dev[sc]
                rd = (comp[sc - 1] if sc else start) + d
                rd += (d * (rf + jit[(3 * sc + ro) & 1023])) >> 13
                e = enq[sc]
                if e > rd:
                    rd = e
                if sc == before_at:
                    sdead = 1
                    break
                if crashing:
                    ct = self.crash_time
                    if ct != NEVER and rd >= ct:
                        sdead = 1
                        break
                ready[sc] = rd
                sarr = 1
                moved = True
                k = kind[sc]
                if k in (_COLL, _COALESCED):
                    gid = bind[role[sc]]
                    key = (gid << 32) | cseq[sc]
                    inst = pending.get(key)
                    if inst is None:
                        inst = _Instance(gsize[gid], rd, dur[sc], sig[sc], tol[sc], crashing)
                        if inst.left:
                            pending[key] = inst
                    else:
                        inst.left -= 1
                        if rd > inst.ready:
                            inst.ready = rd
                        if dur[sc] > inst.dur:
                            inst.dur = dur[sc]
                        if sig[sc] != inst.sig:
                            inst.bad = True
                        if tol[sc]:
                            inst.tolerant = True
                        if crashing:
                            inst.crasher = True
                    if sc == hang_at:
                        inst.hung = True
                    members = inst.members
                    members.append(r)
                    members.append(sc)
                    if not inst.left:
                        if len(members) > 2:
                            del pending[key]
                        if key == self.abort and inst.bad and not inst.tolerant:
                            self._abort(inst, gid)
                        self._complete(inst)
                else:
                    self._p2p_arrive(r, sc, rd)
                if crashing and self.crash_time == NEVER:
                    break  # let the host move first: the crash time bounds later arrivals
        state[:] = hc, ht, hwait, hlimit, sc, sarr, sdead

    def _complete(self, inst: _Instance) -> None:
        """All members arrived: complete the instance unless it cannot."""
        if (inst.bad and not inst.tolerant) or inst.hung:
            return
        t = inst.ready + inst.dur
        if inst.crasher and self.crash_time < t:
            return  # a participant died before the transfer finished
        comp, stuck_rank, stuck_at = self.comp, self.stuck_rank, self.stuck_at
        ms = inst.members
        queued, work = self.queued, self.work
        for j in range(0, len(ms), 2):
            rank, unit = ms[j], ms[j + 1]
            if rank == stuck_rank and unit == stuck_at:
                continue
            comp[rank][unit] = t + ((rank * 40_503 + unit * 9_973) & 2047)
            if not queued[rank]:
                queued[rank] = True
                work.append(rank)

    def _abort(self, inst: _Instance, gid: int) -> None:
        """gloo kills the member of this disagreeing instance that receives more bytes than it
        posted; those that got all they expected complete it (see the module docstring)."""
        ms = inst.members
        unit = {ms[j]: ms[j + 1] for j in range(0, len(ms), 2)}
        order = self.layout.group(gid).ranks
        if any(not t.recorded for r in order for t in self.programs[r].templates_of(unit[r])):
            return  # a monitored_barrier is sends to and from its root: nothing to compare
        posted = {r: posted_bytes(self.programs[r], unit[r]) for r in order}
        n = len(order)
        ops = {self.programs[r].templates_of(unit[r])[0].op for r in order}
        spared: list[int] = []
        if ops == {"all_to_all"}:
            usual = Counter(posted.values()).most_common(1)[0][0]
            odd = [r for r in order if posted[r] != usual]
            if len(odd) != 1 or posted[odd[0]] < usual:
                return  # a smaller total: its receivers get less than they posted
            aborted = order[(order.index(odd[0]) + 1) % n]
            coin = random.Random(self.seed * 7_919 + 0xAB)
            spared = [r for r in order if r not in (odd[0], aborted) and coin.random() < 0.5]
        elif ops <= {"all_reduce"}:
            found = [i for i in range(n) if posted[order[(i + 1) % n]] > posted[order[i]]]
            if not found:
                return
            aborted = order[found[0]]
        else:
            found = [i for i in range(n) if posted[order[i - 1]] > posted[order[i]]]
            if not found:
                return
            aborted = order[found[0]]
            spared = [order[found[0] - 1]]
        died = inst.ready + ABORT_NS
        self.dead[aborted] = died
        if self.abort_also >= 0:
            self.dead.setdefault(self.abort_also, died)
        t = inst.ready + inst.dur
        for rank in spared:
            self.comp[rank][unit[rank]] = t + ((rank * 40_503 + unit[rank] * 9_973) & 2047)
            self._wake(rank)

    def _p2p_arrive(self, r: int, u: int, rd: int) -> None:
        p = self.programs[r]
        gid = self.bind[r][p.role[u]]
        members = self.gmembers.get(gid)
        if members is None:
            members = self.gmembers[gid] = self.layout.group(gid).ranks
        lo, hi = p.mstart[u], p.mstart[u + 1]
        state = [hi - lo, 0, 0]  # members left, latest pair time, bad
        self.punits[(r, u)] = state
        dur = p.dur[u]
        for j in range(lo, hi):
            peer = members[p.mpeer[j]]
            key = (gid, r, peer, p.mchan[j]) if p.msend[j] else (gid, peer, r, p.mchan[j])
            other = self.pairs.pop(key, None)
            if other is None:
                self.pairs[key] = (r, u, rd, p.msig[j])
                continue
            orank, ounit, ord_, osig = other
            ostate = self.punits[(orank, ounit)]
            t = max(rd, ord_) + max(dur, self.programs[orank].dur[ounit])
            ok = osig == p.msig[j]
            if self.crash_rank in (r, orank) and self.crash_time < t:
                ok = False  # a side died before the transfer finished
            for rank, unit, st in ((r, u, state), (orank, ounit, ostate)):
                st[0] -= 1
                if t > st[1]:
                    st[1] = t
                if not ok:
                    st[2] = 1
                if st[0] == 0:
                    del self.punits[(rank, unit)]
                    if not st[2]:
                        self.comp[rank][unit] = st[1] + ((rank * 40_503 + unit * 9_973) & 2047)
                        self._wake(rank)


def run(
    layout: Topology,
    programs: Sequence[Program],
    faults: dict[int, EngineFault] | None = None,
    *,
    queue_limit: int = 64,
    gloo: bool = False,
    seed: int = 0,
    abort: tuple[int, int] | None = None,
    abort_also: int = -1,
) -> list[RankTimes]:
    """Execute every rank's bound program; `programs[r]` is rank r's (shared objects are
    fine: the engine never modifies a program)."""
    engine = _Engine(layout, programs, faults or {}, queue_limit, gloo, seed, abort, abort_also)
    return engine.run()
