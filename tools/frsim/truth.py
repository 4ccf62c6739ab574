"""Ground truth of a simulated case, from the simulator's own knowledge (never an analyzer).

Rules (the fault's rank is r, its site the unit `op` of r's fault-free program):

- no fault: ok.
- stall: slow / straggler at the stalled op, lateness = the stall.
- stop_host: hung / not_joined at the op r never issued: the seq it would have had on its
  group; for a p2p op, the waiting counterpart's group, p2p seq and rank (p2p seq ids are per
  rank, and r has no record of the op).
- crash: hung / dead_rank at the op r would have issued next (located as for stop_host). The
  others may be blocked at an earlier op of r's that r enqueued but never reached on its stream:
  r has no dump, so the group and seq are the fault's site, not necessarily where they wait.
- gpu_stuck_in / gpu_stuck_before: hung / stuck_collective, culprit r, at that op.
- network_hang: hung / stuck_collective at that op, culprits every member of its group.
- swap (r issues op + 1 before op): on one group and namespace, the first divergence (as for
  skip); on two groups, desync / deadlock if r waits in op + 1 for members that wait in op for
  r: culprits r and those members, at op (where they wait; p2p: on the waiting counterpart).
- mismatch / p2p_mismatch: desync / mismatch, culprit r, at that op (p2p: r's p2p seq).
- skip / extra: desync at the first divergence: the first seq id of that group (in the op's
  namespace) where r's recorded op (names, sizes, dtypes, peers, or presence) differs from what
  the fault-free program would have recorded there; root "mismatch" if r recorded something
  different there, "not_joined" if r recorded nothing there (for p2p: located on the waiting
  counterpart, as for stop_host). An op that leaves no entry (gloo's `monitored_barrier`, two
  seq ids) counts as recorded by nobody: a rank that skipped it and recorded its next op at
  the barrier's seq, where the others have a gap, did not join it ("not_joined" at that seq).
- gloo aborts (`SimSpec.gloo_abort`): a mismatch of byte counts kills the rank that receives
  more than it posted; the truth stays the mismatch of r. When the aborted rank is r's only
  peer in the group (a 2-member replicate group), the sibling groups show the usual op.

`ambiguous` says why the dumps cannot show the truth, by construction:

- the op that shows the fault is in no ring buffer that would have to hold it (evicted, or
  never recorded by the ranks that should hold it, e.g. nobody issued the op r never issued);
- the fault site is never reached before the dump;
- a stall before r's first recorded op (start-up skew looks the same);
- the job does not hang although the fault should hang it (nobody waits for r: a crash or a
  stop nobody notices);
- gloo aborted r itself (it received more than it posted: at its mismatch when it posted
  fewer bytes, at a swap's second op): its records are lost with it;
- r went past an op that leaves no entry, and no earlier gap in its peers' dumps shows one;
- r went past an op that leaves no entry but recorded nothing after it, or no peer shows it
  reached that op;
- a skip whose later ops paired with the shifted ones (same records) and r ran to its end: one
  op short, r looks like a rank that stopped;
- a 2-member group disagrees and no sibling group (same desc) recorded that seq: no majority
  says which side deviates (the brief's "first op" case; history is not taken as evidence);
- a p2p mismatch whose channel has no other transfer in r's buffer to show its usual shape;
- gpu_stuck_before without timing: every member's op is scheduled and none completes, exactly
  what a collective stuck on all members looks like (and network_hang without timing: the
  other way round);
- a swap whose two ops do not wait on each other (no cycle);
- a stall at least as long as the timeout (the peers' watchdogs would fire).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from .program import COLL_KINDS, P2P_KINDS, Kind, Program
from .recorder import buffer_window

if TYPE_CHECKING:
    from .sim import Simulation

Status = Literal["ok", "desync", "hung", "slow"]
RootKind = Literal[
    "mismatch", "not_joined", "dead_rank", "stuck_collective", "deadlock", "straggler"
]
SeqKind = Literal["collective", "p2p"]


@dataclass(frozen=True)
class Truth:
    """What a correct analyzer concludes about a case."""

    status: Status
    root: RootKind | None = None
    culprits: tuple[int, ...] = ()
    group: str | None = None
    group_desc: str | None = None
    seq_kind: SeqKind | None = None
    seq: int | None = None
    seq_rank: int | None = None
    """Whose dump the seq id is read from (p2p seq ids are per rank); None for collectives."""
    op: str | None = None
    """Profiling name as recorded, e.g. "nccl:all_reduce", "nccl:recv 1<-0"; for a block, its
    first member's (for a mismatch, the member that differs)."""
    lateness_s: float | None = None
    ambiguous: str | None = None

    def describe(self) -> str:
        """The truth in one line: status, root, culprits, group, seq and what stays ambiguous."""
        parts: list[str] = [self.status]
        if self.root is not None:
            parts.append(self.root)
        if self.culprits:
            parts.append(f"culprit {','.join(map(str, self.culprits))}")
        if self.group is not None:
            parts.append(f"group {self.group} ({self.group_desc})")
        if self.seq is not None:
            where = f"@rank {self.seq_rank}" if self.seq_rank is not None else ""
            parts.append(f"{'c' if self.seq_kind == 'collective' else 'p'}{self.seq}{where}")
        if self.op is not None:
            parts.append(self.op)
        if self.lateness_s is not None:
            parts.append(f"late {self.lateness_s:g}s")
        if self.ambiguous is not None:
            parts.append(f"AMBIGUOUS: {self.ambiguous}")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The truth as JSON-ready data (culprits as a list)."""
        out = asdict(self)
        out["culprits"] = list(self.culprits)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Truth:
        """The truth read back from `to_dict`'s data."""
        return cls(**{**d, "culprits": tuple(d.get("culprits") or ())})


@dataclass(frozen=True)
class _Site:
    """Where an op sits: group, seq namespace and id, the rank it is read on, its name."""

    rank: int
    unit: int
    gid: int
    seq_kind: SeqKind
    seq: int
    op: str


class _Truths:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.layout = sim.spec.layout
        self.prefix = f"{sim.spec.backend}:"
        self._windows: dict[int, tuple[int, int] | None] = {}

    # -- where ops are ------------------------------------------------------------------

    def name(self, program: Program, rank: int, unit: int, member: int = 0) -> str:
        """The profiling name `rank` records for member `member` of `unit`."""
        kind = program.kind[unit]
        t = program.templates_of(unit)[member]
        if kind in (Kind.SEND, Kind.RECV) or (kind == Kind.BATCH and t.op in ("send", "recv")):
            me = self.layout.local_rank(program.role[unit], rank)
            if kind == Kind.BATCH:
                peer = program.catalog.blocks[program.item[unit]].peers[member]
            else:
                peer = program.peer[unit]
            arrow = f"{me}->{peer}" if t.op == "send" else f"{me}<-{peer}"
            return f"{self.prefix}{t.op} {arrow}"
        return self.prefix + t.op

    def site(self, program: Program, rank: int, unit: int, member: int = 0) -> _Site:
        gid = self.layout.binding(rank)[program.role[unit]]
        coll = program.kind[unit] in COLL_KINDS
        return _Site(
            rank,
            unit,
            gid,
            "collective" if coll else "p2p",
            program.seq_of(unit),
            self.name(program, rank, unit, member),
        )

    def counterpart(self, program: Program, rank: int, unit: int, member: int = 0) -> _Site | None:
        """The unit of the peer that pairs with member `member` of p2p `unit` of `rank`."""
        j = program.mstart[unit] + member
        role = program.role[unit]
        layout = self.layout
        me = layout.local_rank(role, rank)
        peer = layout.group(layout.binding(rank)[role]).ranks[program.mpeer[j]]
        other = self.sim.job.program(peer)
        send, chan = program.msend[j], program.mchan[j]
        for u in range(len(other)):
            if other.role[u] != role or other.kind[u] not in P2P_KINDS:
                continue
            for k in range(other.mstart[u], other.mstart[u + 1]):
                if other.msend[k] != send and other.mpeer[k] == me and other.mchan[k] == chan:
                    return self.site(other, peer, u, k - other.mstart[u])
        return None

    # -- what the dumps hold ------------------------------------------------------------

    def window(self, rank: int) -> tuple[int, int] | None:
        """Units [first, end) of `rank` in its dump; None if it wrote none."""
        if rank not in self._windows:
            when = self.sim.dump_times[rank]
            if when is None:
                self._windows[rank] = None
            else:
                first, end, _ = buffer_window(
                    self.sim.spec.capacity, self.sim.programs[rank], self.sim.times[rank], when
                )
                self._windows[rank] = (first, end)
        return self._windows[rank]

    def holds(self, rank: int, gid: int, seq_kind: SeqKind, seq: int) -> bool:
        """Does `rank`'s dump hold an entry of group `gid` with that seq id?"""
        window = self.window(rank)
        if window is None:
            return False
        program = self.sim.programs[rank]
        binding = self.layout.binding(rank)
        kinds = COLL_KINDS if seq_kind == "collective" else P2P_KINDS
        ids = program.cseq if seq_kind == "collective" else program.pseq
        if self.sim.spec.backend == "gloo" and seq_kind == "p2p":
            return False
        nent = program.nent  # an unrecorded op (monitored_barrier) has no entry
        for u in range(*window):
            here = binding[program.role[u]] == gid and program.kind[u] in kinds
            if here and ids[u] == seq and nent[u]:
                return True
        return False

    def coll_seqs(self, rank: int, gid: int) -> set[int]:
        """The collective seq ids of group `gid` that `rank`'s dump holds entries of."""
        window = self.window(rank)
        if window is None:
            return set()
        program = self.sim.programs[rank]
        binding = self.layout.binding(rank)
        return {
            program.cseq[u]
            for u in range(*window)
            if binding[program.role[u]] == gid and program.kind[u] in COLL_KINDS and program.nent[u]
        }

    def peers_reached(self, site: _Site, exclude: int) -> bool:
        """Did another member's dump show it reached the (unrecorded) op at the site's seq: an
        entry of the seq right before it, or of a later one (a gap where it sits)?"""
        for m in self.layout.group(site.gid).ranks:
            if m != exclude:
                seqs = self.coll_seqs(m, site.gid)
                if site.seq - 1 in seqs or any(s > site.seq for s in seqs):
                    return True
        return False

    def others_dead(self, site: _Site, exclude: int) -> bool:
        """Did every other member of the site's group die without a dump (a gloo abort)?"""
        members = self.layout.group(site.gid).ranks
        return all(self.sim.dump_times[m] is None for m in members if m != exclude)

    def peers_hold(self, site: _Site, exclude: int) -> bool:
        """Does some other member of the site's group hold its seq (collective namespace)?"""
        return any(
            self.holds(m, site.gid, site.seq_kind, site.seq)
            for m in self.layout.group(site.gid).ranks
            if m != exclude
        )

    def others_hold(self, program: Program, site: _Site) -> bool:
        """Does another rank's dump hold its side of the op at `site`: another member's entry
        with the same collective seq, or the counterpart of (the first member of) a p2p op?"""
        if site.seq_kind == "collective":
            return self.peers_hold(site, site.rank)
        other = self.counterpart(program, site.rank, site.unit)
        return other is not None and self.holds(other.rank, other.gid, "p2p", other.seq)

    def sibling_holds(self, site: _Site) -> bool:
        """Does a group of the same role (another TP group, say) hold the same seq?"""
        layout = self.layout
        role = layout.role_of(site.gid)
        for gid in range(layout.group_count):
            if gid != site.gid and layout.role_of(gid) == role:
                group = layout.group(gid)
                if any(self.holds(m, gid, site.seq_kind, site.seq) for m in group.ranks):
                    return True
        return False

    def truth(
        self,
        status: Status,
        root: RootKind,
        culprit: int,
        site: _Site | None,
        ambiguous: str | None,
        lateness: float | None = None,
    ) -> Truth:
        if site is None:
            return Truth(status, root, (culprit,), ambiguous=ambiguous or "no site")
        group = self.layout.group(site.gid)
        return Truth(
            status,
            root,
            (culprit,),
            group.name,
            group.desc,
            site.seq_kind,
            site.seq,
            site.rank if site.seq_kind == "p2p" else None,
            site.op,
            lateness,
            ambiguous,
        )


_ABORTED = "rank r aborted (gloo: it received more bytes than it posted): its records are lost"


def compute_truth(sim: Simulation) -> Truth:
    """What a correct analyzer concludes about `sim`: status, root cause, culprits, group, seq."""
    fault = sim.spec.fault
    if fault is None:
        return Truth("ok", ambiguous=_gloo_caught_mid_collective(sim))
    t = _Truths(sim)
    r, i = fault.rank, fault.op
    clean = sim.job.clean_program(r)
    actual = sim.programs[r]
    times = sim.times[r]
    dumped = sim.dump_times[r]
    reached = dumped is not None and times.enq[i] <= dumped if i < len(actual) else False
    kind = fault.kind

    if kind == "stall":
        site = t.site(clean, r, i)
        amb = None
        if fault.seconds * 1000 >= sim.spec.timeout_ms:
            amb = "the stall is as long as the timeout: the peers' watchdogs would fire"
        elif not reached:
            amb = "the stalled op is never reached before the dump"
        elif not (t.holds(r, site.gid, site.seq_kind, site.seq) and t.others_hold(clean, site)):
            amb = "the stalled op fell out of the ring buffers"
        elif not any(clean.nent[u] for u in range(i)):
            amb = (
                "a stall before the rank's first op: ranks start (and reach the first barrier) "
                "seconds apart anyway, so a late first arrival is no stall of its own"
            )
        return t.truth("slow", "straggler", r, site, amb, lateness=fault.seconds)

    if kind == "stop_host":
        return _not_issued(t, sim, clean, r, i, "not_joined")
    if kind == "crash":
        # The peers wait for the crashed rank at its first op that never completed: an op it
        # enqueued before it died but its stream never reached, or the op it was about to
        # enqueue. That op, in r's own order, is where the job stopped.
        first = times.completed()
        truth = _not_issued(t, sim, clean, r, min(first, i), "dead_rank")
        hidden = _crash_unseen(sim, r)
        return replace(truth, ambiguous=truth.ambiguous or hidden)

    if kind in ("gpu_stuck_in", "gpu_stuck_before"):
        site = t.site(clean, r, i)
        amb = None
        if kind == "gpu_stuck_before" and not sim.settings.timing:
            amb = (
                "gpu_stuck_before without timing: every member's op is scheduled and none "
                "completes, exactly like a collective stuck on all members"
            )
        elif not sim.hung:
            amb = "the job does not hang"
        elif not t.holds(r, site.gid, site.seq_kind, site.seq) or not t.peers_hold(site, r):
            amb = "the stuck op fell out of the ring buffers"
        return t.truth("hung", "stuck_collective", r, site, amb)

    if kind == "network_hang":
        site = t.site(clean, r, i)
        members = t.layout.group(site.gid).ranks
        amb = None
        if not sim.settings.timing:
            amb = (
                "network_hang without timing: every member's op is scheduled and none "
                "completes, exactly like gpu_stuck_before of one member"
            )
        elif not sim.hung:
            amb = "the job does not hang"
        elif not all(t.holds(m, site.gid, site.seq_kind, site.seq) for m in members):
            amb = "the stuck op fell out of the ring buffers"
        return replace(t.truth("hung", "stuck_collective", r, site, amb), culprits=members)
    if kind == "swap":
        truth = _swapped(t, sim, clean, actual, r, i)
        if dumped is None:  # gloo aborted r itself (SimSpec.gloo_abort)
            truth = replace(truth, ambiguous=_ABORTED)
        return truth

    if kind == "mismatch":
        site = t.site(actual, r, i, fault.member)
        amb = _ABORTED if dumped is None else _mismatch_ambiguity(t, site, r, reached)
        return t.truth("desync", "mismatch", r, site, amb)

    if kind == "p2p_mismatch":
        site = t.site(actual, r, i, fault.member)
        amb = None
        other = t.counterpart(actual, r, i, fault.member)
        if not reached:
            amb = "the fault site is never reached before the dump"
        elif not t.holds(r, site.gid, "p2p", site.seq):
            amb = "the mismatching op fell out of rank r's ring buffer"
        elif other is None or not t.holds(other.rank, other.gid, "p2p", other.seq):
            amb = "the counterpart's op is not in its dump"
        elif not _channel_has_history(t, actual, r, i, fault.member):
            amb = "no other transfer on that channel in rank r's dump shows its usual shape"
        return t.truth("desync", "mismatch", r, site, amb)

    # skip / extra: the first divergence on the faulted op's group and namespace
    role = clean.role[i]
    collective = clean.kind[i] in COLL_KINDS
    if kind == "extra":
        role, collective = fault.extra.role, True
    truth = _divergence(t, sim, clean, actual, r, role, collective)
    if dumped is None:  # gloo aborted r itself (SimSpec.gloo_abort)
        truth = replace(truth, ambiguous=_ABORTED)
    return truth


def _seen_by_others(sim: Simulation, r: int, units: list[int]) -> bool:
    """Whether another rank recorded an op of the group of one of r's `units` (the world
    aside: every rank records it), or the very world op (seq) one of them is."""
    program = sim.programs[r]
    binding = sim.spec.layout.binding(r)
    names = {str(binding[program.role[u]]) for u in units} - {"0"}
    world = {
        program.cseq[u]
        for u in units
        if binding[program.role[u]] == 0 and program.kind[u] in COLL_KINDS and program.nent[u]
    }
    for rank in range(sim.spec.layout.world_size):
        dump = sim.dump(rank) if rank != r else None
        if dump is None:
            continue
        if names & {e.process_group[0] for e in dump.entries}:
            return True
        if world & {e.collective_seq_id for e in dump.entries if e.process_group[0] == "0"}:
            return True
    return False


_SIZE_RULE_OPS = frozenset(
    {"all_gather", "_all_gather_base", "reduce_scatter", "_reduce_scatter_base"}
)


def _crash_unseen(sim: Simulation, r: int) -> str | None:
    """gloo dumps carry no usable member lists: a crashed rank shows only through the ranks
    around it (a gap), an all_gather/reduce_scatter whose sizes give its group's size, or a
    group of its own that its peers recorded. The highest rank, dead before any of these,
    leaves no trace that the job had it."""
    if sim.spec.backend != "gloo":
        return None
    layout = sim.spec.layout
    if r < layout.world_size - 1:
        return None
    mine = {str(gid) for gid in layout.member_gids(r)}
    for rank in range(layout.world_size):
        dump = sim.dump(rank) if rank != r else None
        if dump is None:
            continue
        for e in dump.entries:
            group = e.process_group[0]
            op = e.profiling_name.partition(":")[2]
            if (group in mine and group != "0") or (group == "0" and op in _SIZE_RULE_OPS):
                return None
    return "the crashed rank is the highest and no op its peers recorded shows the job had it"


def _gloo_caught_mid_collective(sim: Simulation) -> str | None:
    """A healthy gloo job dumped while running is ambiguous when one rank's newest entry is a
    collective it retired that a member has not issued in its own (earlier) dump: gloo retires
    a collective that failed at its timeout exactly so, and dumps carry no dump time, so it
    reads as that member never joining."""
    if sim.spec.backend != "gloo" or sim.spec.dump != "mid":
        return None
    held: dict[int, set[tuple[str, int]]] = {}
    dumps = {}
    for rank in range(sim.spec.layout.world_size):
        dump = sim.dump(rank)
        if dump is None:
            continue
        dumps[rank] = dump
        held[rank] = {(e.process_group[0], e.collective_seq_id) for e in dump.entries}
    for rank, dump in dumps.items():
        if not dump.entries:
            continue
        last = dump.entries[-1]
        if not last.retired:
            continue
        key = (last.process_group[0], last.collective_seq_id)
        gid = int(last.process_group[0])
        members = sim.spec.layout.group(gid).ranks
        if any(key not in held.get(m, {key}) for m in members if m != rank):
            return (
                "a healthy gloo job dumped mid-collective: a rank's newest entry is a collective "
                "it retired that a member's earlier dump lacks, which is what a collective that "
                "timed out (gloo retires it too) without that member looks like"
            )
    return None


def _swapped(t: _Truths, sim: Simulation, clean: Program, actual: Program, r: int, i: int) -> Truth:
    """r issued unit i + 1 of its fault-free program before unit i."""
    collective = clean.kind[i] in COLL_KINDS
    if clean.role[i] == clean.role[i + 1] and collective == (clean.kind[i + 1] in COLL_KINDS):
        return _divergence(t, sim, clean, actual, r, clean.role[i], collective)
    # Two groups: r's stream waits in op i + 1 (now its i-th unit) for members that wait in
    # op i for r, which its stream reaches only after op i + 1.
    if collective:
        site: _Site | None = t.site(clean, r, i)
        visible = site is not None and t.peers_hold(site, r)
    else:
        site = t.counterpart(clean, r, i)
        visible = site is not None and t.holds(site.rank, site.gid, "p2p", site.seq)
    waits_in_first = t.site(actual, r, i)
    cycle = [r]
    if sim.times[r].completed() == i:
        for m in t.layout.group(waits_in_first.gid).ranks:
            if m == r or sim.dump_times[m] is None:
                continue
            program, u = sim.programs[m], sim.times[m].completed()
            if u >= len(program) or site is None:
                continue
            here = t.site(program, m, u)
            if here.gid == site.gid and here.seq_kind == site.seq_kind and here.seq == site.seq:
                cycle.append(m)
    amb = None
    if not sim.hung or len(cycle) == 1:
        amb = "the swapped ops do not wait on each other: no cycle"
    elif not visible:
        amb = "no peer's dump holds the op rank r put second"
    truth = t.truth("desync", "deadlock", r, site, amb)
    return replace(truth, culprits=tuple(sorted(cycle)))


def _not_issued(
    t: _Truths, sim: Simulation, clean: Program, r: int, i: int, root: RootKind
) -> Truth:
    """The op r never issued (stop_host) or would have issued next (crash)."""
    if clean.kind[i] in COLL_KINDS:
        site: _Site | None = t.site(clean, r, i)
        visible = site is not None and t.peers_hold(site, r)
    else:
        site = t.counterpart(clean, r, i)
        visible = site is not None and t.holds(site.rank, site.gid, "p2p", site.seq)
    amb = None
    if not sim.hung:
        amb = "nobody waits for the rank: the job does not hang"
    elif root == "not_joined" and not visible:
        amb = "no peer's dump holds the op rank r never issued (not issued, or evicted)"
    elif root == "dead_rank" and site is not None and _async_past(sim, site, r):
        amb = (
            "gloo async ops: the peers went past the op rank r stopped before, and every "
            "copy of it ended retired (timed out), so no dump shows which of them completed"
        )
    elif site is not None and _async_past(sim, site, r) and _group_busy(sim, site.gid, r):
        amb = (
            "gloo async ops: the peers went past the op rank r never issued and are still "
            "running later ones; without the dump times, a rank that dumped a moment before "
            "the others and issues it next looks the same"
        )
    return t.truth("hung", root, r, site, amb)


def _group_busy(sim: Simulation, gid: int, r: int) -> bool:
    """Does another member of the group hold an op it had not retired at its dump?"""
    for m in sim.spec.layout.group(gid).ranks:
        dump = sim.dump(m) if m != r else None
        if dump is not None and any(not e.retired for e in dump.entries):
            return True
    return False


def _async_past(sim: Simulation, site: _Site, r: int) -> bool:
    """gloo only: every peer that recorded the site's collective issued it async, recorded a
    later op, and holds it retired. gloo records no completion, and an op retires when it
    times out as when it completes: with no dump of rank r's own, nothing places it at this
    op rather than at a later one of the peers' run of async ops."""
    if sim.spec.backend != "gloo" or site.seq_kind != "collective":
        return False
    seen = False
    for m in sim.spec.layout.group(site.gid).ranks:
        dump = sim.dump(m) if m != r else None
        if dump is None:
            continue
        program, binding = sim.programs[m], sim.spec.layout.binding(m)
        units = [
            u
            for u in range(len(program.kind))
            if program.kind[u] in COLL_KINDS
            and binding[program.role[u]] == site.gid
            and program.cseq[u] == site.seq
        ]
        mine = [
            k
            for k, e in enumerate(dump.entries)
            if e.process_group[0] == str(site.gid) and e.collective_seq_id == site.seq
        ]
        if not units or not mine:
            continue
        if not program.nowait[units[0]]:
            return False
        if mine[-1] == len(dump.entries) - 1 or not dump.entries[mine[-1]].retired:
            return False
        seen = True
    return seen


def _mismatch_ambiguity(t: _Truths, site: _Site, r: int, reached: bool) -> str | None:
    """Why the dumps cannot show that r's record at `site` differs (None: they can)."""
    if not reached:
        return "the fault site is never reached before the dump"
    if not t.holds(r, site.gid, site.seq_kind, site.seq):
        return "the mismatching op fell out of rank r's ring buffer"
    if site.seq_kind == "p2p":
        return None  # p2p seq ids are per rank: the record is compared with r's own channel
    if not t.peers_hold(site, r):
        if t.others_dead(site, r) and t.sibling_holds(site):
            return None  # the partner aborted (gloo); the sibling groups show the usual op
        return "no peer's dump holds the op to compare with"
    if t.layout.group(site.gid).size == 2 and not t.sibling_holds(site):
        return "a 2-member group disagrees and no sibling group shows which side deviates"
    return None


def _channel_has_history(t: _Truths, program: Program, r: int, unit: int, member: int) -> bool:
    window = t.window(r)
    if window is None:
        return False
    j0 = program.mstart[unit] + member
    send, peer, role = program.msend[j0], program.mpeer[j0], program.role[unit]
    for u in range(*window):
        if u == unit or program.role[u] != role:
            continue
        for j in range(program.mstart[u], program.mstart[u + 1]):
            if program.msend[j] == send and program.mpeer[j] == peer:
                return True
    return False


def _divergence(
    t: _Truths,
    sim: Simulation,
    clean: Program,
    actual: Program,
    r: int,
    role: int,
    collective: bool,
) -> Truth:
    dumped = sim.dump_times[r]
    enqueued = sim.times[r].enqueued(dumped) if dumped is not None else 0
    ours = [u for u in actual.units_on(role, collective) if u < enqueued]
    theirs = clean.units_on(role, collective)
    j = 0
    while (
        j < len(ours)
        and j < len(theirs)
        and actual.record_key(ours[j]) == clean.record_key(theirs[j])
    ):
        j += 1
    # An op that leaves no entry (gloo's monitored_barrier) on either side: r recorded nothing
    # where the others are (r never joined it), or recorded its next op where the others are in
    # one that records nothing (r went past it: not joined either).
    if j < len(ours) and j < len(theirs) and not _recorded(clean, theirs[j]):
        site = t.site(clean, r, theirs[j])
        return t.truth("desync", "not_joined", r, site, _unrecorded_ambiguity(t, site, r))
    if j < len(ours) and (j >= len(theirs) or _recorded(actual, ours[j])):
        site = t.site(actual, r, ours[j], _first_difference(actual, ours[j], clean, theirs, j))
        amb = _mismatch_ambiguity(t, site, r, True)
        return t.truth("desync", "mismatch", r, site, amb)
    if j < len(theirs):
        if collective:
            site_: _Site | None = t.site(clean, r, theirs[j])
            visible = site_ is not None and t.peers_hold(site_, r)
        else:
            site_ = t.counterpart(clean, r, theirs[j])
            visible = site_ is not None and t.holds(site_.rank, site_.gid, "p2p", site_.seq)
        amb = None if visible else "no peer's dump holds the op rank r did not record"
        fault = sim.spec.fault
        if amb is None and fault is not None and fault.kind == "skip":
            # Nothing recorded after the skipped op (gloo records no send/recv): the dumps show
            # a rank that stopped there.
            gloo = sim.spec.backend == "gloo"
            later = [
                u
                for u in range(fault.op, enqueued)
                if not (gloo and actual.kind[u] not in COLL_KINDS)
            ]
            if not later:
                amb = "rank r recorded nothing after the op it skipped: it looks like it stopped"
            elif gloo and not _seen_by_others(sim, r, later):
                amb = (
                    "rank r went on only to ops of groups no other rank recorded (gloo keeps no "
                    "member lists): it looks like it stopped"
                )
            elif sim.times[r].completed() == len(actual):
                # Its later ops paired with the shifted ones (same records) and it ran to its
                # end: one op short, exactly what a rank that stopped before it looks like.
                amb = (
                    "rank r finished its program one op short (its later ops paired with the "
                    "shifted ones): it looks like it stopped before the op it never issued"
                )
        return t.truth("desync", "not_joined", r, site_, amb)
    return Truth(
        "desync",
        None,
        (r,),
        ambiguous="rank r's records never diverge from the fault-free program before the dump",
    )


def _unrecorded_ambiguity(t: _Truths, site: _Site, r: int) -> str | None:
    """r went past an op that leaves no entry (at `site`, r's fault-free program) where the
    other members are: the dumps show it when r recorded a later op of that group at the seq
    the others leave empty, and the others show they reached it (an entry right before it or a
    gap where it sits)."""
    if not any(s >= site.seq for s in t.coll_seqs(r, site.gid)):
        return "rank r recorded nothing past the unrecorded op: it looks like the others"
    if not t.peers_reached(site, r):
        return "no peer's dump shows it reached the unrecorded op at that seq"
    if t.layout.group(site.gid).size == 2:
        return "a 2-member group disagrees and no sibling group shows which side deviates"
    if not _earlier_gap(t, site, r):
        return (
            "no earlier gap in the peers' dumps shows that they leave seq ids unrecorded "
            "there: rank r's entry looks like one its peers never issued"
        )
    return None


def _earlier_gap(t: _Truths, site: _Site, r: int) -> bool:
    """Does some peer's dump hold an earlier gap in the site's group, ids it left unrecorded
    between two entries (the unrecorded op, seen where every member called it)?"""
    for m in t.layout.group(site.gid).ranks:
        if m == r:
            continue
        seqs = sorted(s for s in t.coll_seqs(m, site.gid) if s < site.seq)
        if any(b - a > 1 for a, b in itertools.pairwise(seqs)):
            return True
    return False


def _recorded(program: Program, unit: int) -> bool:
    """Whether every op of the unit has an entry (gloo's monitored_barrier has none)."""
    return all(t.recorded for t in program.templates_of(unit))


def _first_difference(actual: Program, unit: int, clean: Program, theirs: list[int], j: int) -> int:
    """The first member of `unit` that differs from the fault-free op at the same seq."""
    if j >= len(theirs):
        return 0
    ours_t = actual.templates_of(unit)
    theirs_t = clean.templates_of(theirs[j])
    for m, (a, b) in enumerate(zip(ours_t, theirs_t, strict=False)):
        if a.signature != b.signature:
            return min(m, len(ours_t) - 1)
    return 0
