"""The root-cause rules over the wait graph (see the package docstring for their order): the
mismatch and skip rules, and a hang's root among dead, idle, stuck, deviant and deadlocked
ranks, with the peer-order oracle they share (`order`, `_path`, `_roles`, `_mirrors`,
`_own_next`).

It is over 600 lines because `Context` is still one class: its caches serve every rule, and
splitting it into one module per rule family over an explicit peer-order collaborator is the
next step of issue 35.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ..match import MatchResult
from ..model.arrays import distinct
from ..model.backends import NO_P2P_BACKENDS
from ..model.groups import GroupTable
from ..model.ranks import agree, by_count, counted, label
from ..model.records import (
    MISMATCH_KINDS,
    STATE_NAMES,
    Finding,
    FindingKind,
    Frame,
    Group,
    P2PKind,
    Stack,
    State,
    UnitKind,
)
from ..model.table import EntryTable, rank_starts
from . import stragglers, waits
from .positions import OpRef, Refs
from .records import RootCause, RootKind, RootTime, Thresholds, WaitStep
from .timing import timing_on

_REFERENCE_UNITS = 64  # groups alike consulted when ordering two ops
_REFERENCE_RANKS = 256  # ranks consulted when ordering two ops
_CYCLE_RANKS = 256  # ranks of a cycle, and edges of each, whose order is asked about
_CYCLE_EDGES = 16
_DUE_CANDIDATES = 8  # ops waited in, compared to find the one a rank was due to issue next
_MIRRORS = 4  # ranks in the same role consulted for that
_PATH_OPS = 24  # a rank's latest collectives another rank must share to be a reference
_HISTORY_MATCH = 6  # latest ops matched against a rank's own history to say what comes next


# ---------------------------------------------------------------------------------------------
# Roots


class Candidate(enum.Enum):
    """What kind of rank a hang's root may be; their order breaks ties between candidates
    that hold up as many ranks (the first is preferred)."""

    DEVIANT = "deviant"  # issued ops in another order than the others wait for
    DEAD = "dead"  # no usable dump, or stopped recording long ago
    STUCK = "stuck"  # blocked in an op nobody else holds up
    IDLE = "idle"  # waited for, but in no op at all
    DEADLOCK = "deadlock"  # ranks waiting for each other in a cycle

    @property
    def preference(self) -> int:
        return list(Candidate).index(self)


@dataclass
class _Candidate:
    kind: Candidate
    ranks: tuple[int, ...]
    behind: set[int]
    node: int = -1  # stuck: the wait node they are blocked in
    waited_row: int = -1  # deviant: the row of the op the others wait for it in


class Context:
    """Everything the root-cause rules read."""

    def __init__(
        self,
        t: EntryTable,
        groups: GroupTable,
        m: MatchResult,
        graph: waits.WaitGraph,
        newest_ns: dict[int, int],
        last_row: dict[int, int],
        refs: Refs,
        th: Thresholds,
    ) -> None:
        self.t, self.groups, self.m = t, groups, m
        self.graph = graph
        self.graph_used = graph  # after cycles are resolved and implicit edges added
        self.newest_ns = newest_ns
        self.last_row = last_row
        self.refs = refs
        self.th = th
        self._orders: dict[tuple[object, ...], int] = {}
        self._role: dict[int, tuple[tuple[str, int, int], ...]] | None = None
        self._starts: dict[int, tuple[int, int]] | None = None
        self._p2p_cache: dict[tuple[int, int], dict[int, tuple[int, tuple[object, ...]]]] = {}
        self._paths: dict[int, list[tuple[str, int]]] = {}
        self._descs: np.ndarray | None = None  # each group's description, by group code
        self.wrapped: frozenset[int] = frozenset()  # ranks whose ring buffer wrapped
        self._path_index: dict[int, dict[tuple[str, int], int]] = {}
        # idle ranks taken to wait for another (`_implicit_edges`): in an unrecorded send/recv
        self.implicit: dict[int, tuple[int, ...]] = {}

    # -- helpers ------------------------------------------------------------------------------

    def _no_p2p_recorded(self) -> bool:
        """Whether every rank's backend records no send/recv (gloo)."""
        backends = set(self.t.backends)
        return bool(backends) and backends <= NO_P2P_BACKENDS

    def ref(self, row: int) -> OpRef:
        return self.refs.refs([row])[0]

    def op_key(self, row: int) -> tuple[int, int] | None:
        """(group uid, collective seq id) of a collective row; None for send/recv."""
        if int(self.m.collectives.entry_unit[row]) < 0:
            return None
        return int(self.groups.entry_group[row]), int(self.t.coll_seq[row])

    def order(self, a: tuple[int, int], b: tuple[int, int], exclude: set[int], like: int) -> int:
        """-1 when most reference ranks issue op `a` before op `b`, +1 when after, 0 when no
        reference rank issued both (in the same groups, or groups alike at the same sequence
        ids). References are ranks outside `exclude` in the same pipeline position as `like`:
        stages interleave their collectives differently."""
        key = (a, b, frozenset(exclude), self._stage(like))
        found = self._orders.get(key)
        if found is None:
            found = self._orders[key] = self._order(a, b, exclude, like)
        return found

    def _order(self, a: tuple[int, int], b: tuple[int, int], exclude: set[int], like: int) -> int:
        first_a = self._first_rows(a)
        first_b = self._first_rows(b)
        stage = self._stage(like)
        votes = Counter[int]()
        shared = sorted(set(first_a) & set(first_b) - exclude)
        alike = [r for r in shared if self._stage(r) == stage and self._same_path(like, r)]
        if not alike:
            # No rank in the same pipeline position holds both: ranks of other positions do
            # when their collectives run in the same order as `like`'s (step-level ops).
            alike = [r for r in shared if self._same_path(like, r)]
        for rank in alike[:_REFERENCE_RANKS]:
            votes[-1 if first_a[rank] < first_b[rank] else 1] += 1
        if votes[-1] == votes[1]:
            return 0
        return -1 if votes[-1] > votes[1] else 1

    def _path(self, rank: int) -> list[tuple[str, int]]:
        """A rank's collectives in order, as (group description, seq id)."""
        found = self._paths.get(rank)
        if found is None:
            t, units = self.t, self.m.collectives
            rows = self._rows_of(rank)
            unit = units.entry_unit[rows.start : rows.stop]
            kept = unit[(unit >= 0) & (t.unit[rows.start : rows.stop] != UnitKind.BLOCK_MEMBER)]
            if self._descs is None:
                self._descs = np.array([g.desc for g in self.groups.groups], dtype=object)
            descs = self._descs[units.group[kept]].tolist()
            found = self._paths[rank] = list(zip(descs, units.seq[kept].tolist(), strict=True))
        return found

    def _same_path(self, rank: int, other: int) -> bool:
        """Whether `other` issued the collectives of `rank`'s latest ones that both hold in the
        same order: it follows the same program (ranks that skipped an op, or got further,
        still do). Pipeline stages interleave their groups' collectives differently; where no
        send/recv is recorded (gloo), this is what tells them apart."""
        mine = self._path(rank)[-_PATH_OPS:]
        where = self._positions_in_path(other)
        seen = [where[step] for step in mine if step in where]
        if len(seen) < min(len(mine), 4):
            return not mine  # too little in common to tell (a rank with no dump matches all)
        return all(a < b for a, b in itertools.pairwise(seen))

    def _positions_in_path(self, rank: int) -> dict[tuple[str, int], int]:
        found = self._path_index.get(rank)
        if found is None:
            found = self._path_index[rank] = {step: i for i, step in enumerate(self._path(rank))}
        return found

    def _stage(self, rank: int) -> tuple[tuple[str, int, int], ...]:
        """A rank's position in the groups that carry send/recv (its pipeline stage)."""
        return tuple(p for p in self._roles().get(rank, ()) if p[2] >= 0)

    def _share(self, key: tuple[int, int]) -> float:
        """Share of the op's group members that issued it."""
        units = self.m.collectives
        unit = units.find(*key)
        if unit is None:
            return 0.0
        return int(units.ranks_present[unit]) / max(int(units.ranks_expected[unit]), 1)

    def _first_rows(self, key: tuple[int, int]) -> dict[int, int]:
        uid, seq = key
        group = self.groups.groups[uid]
        siblings = [
            g.uid
            for g in self.groups.groups
            if g.uid != uid and g.desc == group.desc and g.size == group.size
        ]
        alike = [uid, *siblings[:_REFERENCE_UNITS]]
        out: dict[int, int] = {}
        units = self.m.collectives
        for other in alike:
            unit = units.find(other, seq)
            if unit is None:
                continue
            rows = units.unit_rows(unit)
            for rank, row in zip(self.t.rank[rows].tolist(), rows.tolist(), strict=True):
                out.setdefault(rank, row)
        return out

    def where(self, ref: OpRef) -> str:
        g = ref.group
        if ref.p2p_seq_id is None:
            return f"{ref.op} #{ref.collective_seq_id} of group {g.name!r} ({g.desc})"
        return f"{ref.op} (p2p #{ref.p2p_seq_id} on rank {ref.rank}) of group {g.name!r} ({g.desc})"

    def chain(self, roots: set[int]) -> tuple[WaitStep, ...]:
        """The longest wait chain that ends at one of `roots`, as (rank, group, seq) steps."""
        graph = self.graph_used
        levels = graph.levels(roots)
        if not levels:
            return ()
        start = max(levels, key=lambda r: (levels[r], -r))
        steps: list[WaitStep] = []
        for rank in graph.path(start, roots):
            row = graph.frontier.get(rank)
            if row is None:
                steps.append(WaitStep(rank, None, None))
                continue
            ref = self.ref(row)
            seq = ref.collective_seq_id if ref.p2p_seq_id is None else ref.p2p_seq_id
            steps.append(WaitStep(rank, ref.group.name, seq))
        return tuple(steps)

    def root_time(self, root: RootCause) -> RootTime | None:
        """When the root op happened, on the clock of the culprit (else of a rank waiting for
        it): the culprit's entry of that op, else (it never issued the op) its newest op,
        else (no dump) the first waiter's entry of the op."""
        t = self.t
        rows = self._root_rows(root)
        stamped = [r for r in rows if int(t.t_created[r]) >= 0]
        for rank in root.ranks:
            mine = [r for r in stamped if int(t.rank[r]) == rank]
            if mine:
                row = min(mine)
                return RootTime(
                    int(t.t_created[row]), rank, f"rank {rank} enqueued {self.where(self.ref(row))}"
                )
        for rank in root.ranks:
            last = self.last_row.get(rank)
            if last is not None and int(t.t_created[last]) >= 0:
                return RootTime(
                    int(t.t_created[last]),
                    rank,
                    f"rank {rank} enqueued its newest op, {self.where(self.ref(last))} (it never "
                    "issued the root op)",
                )
        if stamped:
            row = min(stamped, key=lambda r: (int(t.t_created[r]), r))
            rank = int(t.rank[row])
            return RootTime(
                int(t.t_created[row]),
                rank,
                f"rank {rank}, waiting for {label(root.ranks)}, enqueued "
                f"{self.where(self.ref(row))}",
            )
        return None

    def _root_rows(self, root: RootCause) -> list[int]:
        """The rows of the root's op: its collective's, or its send/recv's."""
        if root.finding is not None:
            found = _finding_rows(self, root.finding)
            if found:
                return found
        group = root.group
        if group is None:
            return []
        if root.collective_seq_id is not None and root.p2p_seq_id is None:
            unit = self.m.collectives.find(group.uid, root.collective_seq_id)
            return [] if unit is None else self.m.collectives.unit_rows(unit).tolist()
        if root.p2p_seq_id is None:
            return []
        out: list[int] = []
        for rank in root.ranks:
            mine = _p2p_rows(self, rank, group.uid)
            out += mine[self.t.p2p_seq[mine] == root.p2p_seq_id].tolist()
        return out

    def code(self, culprit_row: int | None, peer_rows: Sequence[int]) -> Stack:
        """The culprit's innermost frames that its peers' most common stack lacks (its own code
        line); when the stacks are the same, its innermost frames outside torch."""
        t = self.t
        if culprit_row is None or int(t.stack[culprit_row]) < 0:
            return ()
        mine = t.stacks[int(t.stack[culprit_row])]
        codes = Counter(int(t.stack[r]) for r in peer_rows if int(t.stack[r]) >= 0)
        theirs: set[Frame] = set()
        if codes:
            theirs = set(t.stacks[codes.most_common(1)[0][0]])
        user = [f for f in mine if "/torch/" not in f.filename]
        own = tuple(f for f in user if f not in theirs)[:4]
        return own or tuple(user[:2])

    def behind(self, root: RootCause) -> set[int]:
        """Ranks whose standing the root explains: those that wait for its ranks, directly or
        not; for a disagreement, also every rank blocked in the op it disagrees in (they wait
        in it together, for nobody), or whose recording ends with it (gloo fails the op and
        the process stops there), and the ranks that wait for them."""
        anchor = set(root.ranks)
        if root.finding is not None:
            blocked = self.graph.frontier
            unit = (
                self.m.collectives.find(root.group.uid, root.collective_seq_id)
                if root.group is not None and root.collective_seq_id is not None
                else None
            )
            rows = _finding_rows(self, root.finding)
            if unit is not None:
                rows += self.m.collectives.unit_rows(unit).tolist()
            for row in rows:
                rank = int(self.t.rank[row])
                at = blocked.get(rank, self.last_row.get(rank))
                if at is not None and _same_op(self, at, row):
                    anchor.add(rank)
        if root.kind == RootKind.MISMATCH and root.group is not None and root.finding is not None:
            # After a disagreement its group is broken (gloo fails the op, or aborts a member
            # that received more than it posted): the members that took part in it, those
            # blocked in a later op of the group, and those lost with no dump stand where they
            # do because of it.
            group, seq = root.group, root.collective_seq_id
            took_part = {int(self.t.rank[r]) for r in rows}
            for rank in group.ranks:
                # gloo: an op that failed is retired like one that completed, so a rank whose
                # ops all failed has no frontier; its newest op says where it stopped.
                at = self.graph.frontier.get(rank, self.last_row.get(rank))
                if (
                    rank in self.graph.unavailable
                    or rank in took_part
                    or (
                        at is not None
                        and seq is not None
                        and int(self.groups.entry_group[at]) == group.uid
                        and int(self.t.coll_seq[at]) >= seq
                    )
                ):
                    anchor.add(rank)
        graph = self.graph_used
        if root.finding is not None and self._no_p2p_recorded():
            # No send/recv recorded: a rank with a dump that others wait for and that blocks
            # in no recorded op is in a send/recv, a pipeline stage starved of its input by
            # the ranks the disagreement stopped (see `_implicit_edges`).
            idle = [
                r
                for r in graph.waited_on()
                if r not in graph.node_of and r not in anchor and r not in graph.unavailable
            ]
            graph = graph.with_edges({r: tuple(sorted(anchor)) for r in idle})
        return (anchor - set(root.ranks)) | graph.waiting_for(anchor)

    # -- rule 1: mismatches -------------------------------------------------------------------

    def mismatch_root(self, f: Finding) -> RootCause:
        roots = set(f.culprit_ranks)
        seq = f.collective_seq_id if f.collective_seq_id is not None else f.p2p_seq_id
        where = f"group {f.group.name!r} ({f.group.desc})" if f.group else "the job"
        what = "collective" if f.collective_seq_id is not None else "p2p"
        sentence = (
            f"{label(roots)} {agree(roots, 'disagrees', 'disagree')} with the rest of {where} "
            f"at {what} #{seq} {f.op}: {f.kind.value.replace('_', ' ')}. A program bug on "
            f"{agree(roots, 'that rank', 'those ranks')} (another code path, shape or dtype)."
        )
        if any(f is skipped for skipped in self.m.skipped):
            sentence = (
                f"{label(roots)} skipped {f.op} #{seq} of {where} and went on: "
                f"{agree(roots, 'its', 'their')} next op sits at #{seq}, where the rest of the "
                f"group issued {f.op} ({f.kind.value.replace('_', ' ')}). A program bug on "
                f"{agree(roots, 'that rank', 'those ranks')} (a rank-dependent branch)."
            )
        rows = _finding_rows(self, f)
        mine = [r for r in rows if int(self.t.rank[r]) in roots]
        peers = [r for r in rows if int(self.t.rank[r]) not in roots]
        return self._finding_root(
            RootKind.MISMATCH, f, roots, sentence, self.code(mine[0] if mine else None, peers)
        )

    def skipped_root(self, f: Finding) -> RootCause:
        """Ranks that issued an op inside sequence ids every other member leaves unrecorded
        (a gloo monitored_barrier): they skipped that collective, and the others wait in it.
        (A skip whose next op lands on the skipped seq id is a mismatch: `mismatch_root`.)"""
        roots = set(f.culprit_ranks)
        where = f"group {f.group.name!r} ({f.group.desc})" if f.group else "the job"
        others = sorted(set(f.ranks) - roots)
        sentence = (
            f"{label(roots)} skipped {f.op} #{f.collective_seq_id} of {where}, which "
            f"{label(others)} issued, and went on to later ops of that group, where "
            f"{agree(roots, 'it blocks', 'they block')}. A program bug on "
            f"{agree(roots, 'that rank', 'those ranks')} (a rank-dependent branch)."
        )
        rows = _finding_rows(self, f)
        root = self._finding_root(
            RootKind.NOT_JOINED, f, roots, sentence, self.code(rows[0] if rows else None, [])
        )
        return replace(root, p2p_seq_id=None)

    def _finding_root(
        self, kind: RootKind, f: Finding, roots: set[int], sentence: str, code: Stack
    ) -> RootCause:
        """A program bug stated by one of the matcher's findings: its place, its detail as the
        evidence, the culprits deviating from the others."""
        return RootCause(
            kind=kind,
            ranks=tuple(sorted(roots)),
            group=f.group,
            collective_seq_id=f.collective_seq_id,
            p2p_seq_id=f.p2p_seq_id,
            op=f.op,
            sentence=sentence,
            evidence=(f.detail,),
            wait_chain=self.chain(roots),
            deviates=True,
            finding=f,
            code=code,
        )

    # -- rules 3 to 5: hangs ------------------------------------------------------------------

    def hang_root(self) -> RootCause | None:
        graph = self.graph
        deviants: dict[int, int] = {}  # rank → row of the op the others wait for it in
        deadlocks: list[list[int]] = []
        for cycle in graph.cycles():
            found = self._cycle_culprit(cycle)
            if found is None:
                deadlocks.append(cycle)
            else:
                deviants[found[0]] = found[1]
        g = graph.without_edges_from(set(deviants))
        self.implicit = self._implicit_edges(g)
        g = g.with_edges(self.implicit)
        self.graph_used = g
        waited = g.waited_on()
        candidates: list[_Candidate] = []
        for rank in sorted(waited):
            if rank in deviants:
                continue
            if rank in g.unavailable:
                candidates.append(_Candidate(Candidate.DEAD, (rank,), set()))
            elif rank not in g.node_of:
                candidates.append(_Candidate(Candidate.IDLE, (rank,), set()))
        stuck: dict[int, list[int]] = {}
        for rank, node in g.node_of.items():
            if rank in graph.frontier and not g.waits[node].waits_for and rank not in deviants:
                stuck.setdefault(node, []).append(rank)
        for node, ranks in sorted(stuck.items()):
            candidates.append(_Candidate(Candidate.STUCK, tuple(sorted(ranks)), set(), node=node))
        for rank, row in sorted(deviants.items()):
            candidates.append(_Candidate(Candidate.DEVIANT, (rank,), set(), waited_row=row))
        for cycle in deadlocks:
            candidates.append(_Candidate(Candidate.DEADLOCK, tuple(cycle), set()))
        if not candidates:
            return None
        reach: dict[tuple[object, ...], set[int]] = {}
        for c in candidates:
            if c.kind in (Candidate.IDLE, Candidate.DEAD):
                key: tuple[object, ...] = ("w", *sorted(g.nodes_waiting_for(c.ranks[0])))
            else:
                key = ("r", *c.ranks)
            if key not in reach:
                reach[key] = g.waiting_for(c.ranks)
            c.behind = reach[key]
        best = max(
            candidates,
            key=lambda c: (
                len(c.behind),
                -c.kind.preference,
                -self._stopped(c.ranks),
                -c.ranks[0],
            ),
        )
        if best.kind in (Candidate.IDLE, Candidate.STUCK):
            for rank in best.ranks:
                divergence = self._p2p_divergence_any(rank)
                if divergence is not None:
                    return self._p2p_deviant_root(rank, divergence)
        if best.kind in (Candidate.IDLE, Candidate.DEAD):
            # Ranks that never joined the same op are one root (two ranks that both stopped).
            same = [
                c
                for c in candidates
                if c.kind in (Candidate.IDLE, Candidate.DEAD)
                and c.behind == best.behind
                and c is not best
            ]
            merged = tuple(sorted({*best.ranks, *(r for c in same for r in c.ranks)}))
            return self._idle_root(merged)
        if best.kind is Candidate.STUCK:
            return self._stuck_root(best)
        if best.kind is Candidate.DEVIANT:
            return self._deviant_root(best.ranks[0], best.waited_row)
        return self._deadlock_root(list(best.ranks))

    def _stopped(self, ranks: Sequence[int]) -> float:
        """When the ranks' activity stopped (their newest timestamp; a rank with no dump is
        taken as the first to stop)."""
        return float(min(self.newest_ns.get(r, -1) for r in ranks))

    def _implicit_edges(self, g: waits.WaitGraph) -> dict[int, tuple[int, ...]]:
        """On backends that record no send/recv, a rank blocked in one looks idle. Idle ranks
        that others wait for are taken to wait for the one that stopped first; but a rank
        whose whole group stopped with it (a pipeline stage starved of its input) waits for
        the ranks that stopped alone while their groups went on, whenever there are some."""
        if not self._no_p2p_recorded():
            return {}
        idle = [r for r in g.waited_on() if r not in g.node_of]
        if len(idle) < 2:
            return {}
        starved = {r for r in idle if r not in g.unavailable and self._stopped_with_group(r, g)}
        alone = [r for r in idle if r not in starved] or idle
        # Ranks that stopped at one op are told apart not by their hosts' clocks but by who
        # was due next: peers that went from that very op straight to one they wait for it in.
        alone = [r for r in alone if self._stopped_before_next(r, g)] or alone
        first = min(alone, key=lambda r: (self.newest_ns.get(r, -1), r))
        stop = self.newest_ns.get(first, -1)
        units = self.m.collectives
        last = self.last_row.get(first)
        stop_unit = int(units.entry_unit[last]) if last is not None else -1

        def stopped_with_first(r: int) -> bool:
            row = self.last_row.get(r)
            return stop_unit >= 0 and row is not None and int(units.entry_unit[row]) == stop_unit

        return {
            r: (first,)
            for r in idle
            if r != first
            and (r in starved or self.newest_ns.get(r, -1) > stop >= -1 or stopped_with_first(r))
        }

    def _stopped_before_next(self, rank: int, g: waits.WaitGraph) -> bool:
        """Whether some rank waits for `rank` in the collective it issued right after the
        collective `rank` recorded last: `rank` stopped where it was due to issue that op."""
        units = self.m.collectives
        last = self.last_row.get(rank)
        if last is None or int(units.entry_unit[last]) < 0:
            return False
        for node in g.nodes_waiting_for(rank):
            for waiter in g.waits[node].waiters[:_CYCLE_RANKS]:
                row = g.frontier.get(waiter)
                if row is None or g.node_of.get(waiter) != node:
                    continue
                rows = self._rows_of(waiter)
                prev = next(
                    (r for r in range(row - 1, rows.start - 1, -1) if units.entry_unit[r] >= 0),
                    None,
                )
                if prev is not None and int(units.entry_unit[prev]) == int(units.entry_unit[last]):
                    return True
        return False

    def _stopped_with_group(self, rank: int, g: waits.WaitGraph) -> bool:
        """Whether every member of one of the rank's groups (not the world) is idle too and
        stopped at the same collective of that group."""
        t, units = self.t, self.m.collectives
        last: dict[int, int] = {}
        for r in self._rows_of(rank):
            unit = int(units.entry_unit[r])
            if unit >= 0:
                last[int(units.group[unit])] = int(units.seq[unit])
        for uid, seq in last.items():
            group = self.groups.groups[uid]
            if group.size < 2 or group.size >= self.groups.world_size:
                continue
            found = units.find(uid, seq)
            if found is None:
                continue
            rows = units.unit_rows(found)
            members = set(t.rank[rows].tolist())
            if members != set(group.ranks) or any(m in g.node_of for m in members):
                continue
            if units.find(uid, seq + 1) is None:
                return True
        return False

    def _cycle_culprit(self, cycle: list[int]) -> tuple[int, int] | None:
        """The rank of a cycle that deviates from the order the other ranks follow, and the
        row of the op the others wait for it in; None for a genuine deadlock."""
        graph, members = self.graph, set(cycle)
        votes: Counter[int] = Counter()
        shares: Counter[int] = Counter()
        p2p_votes: Counter[int] = Counter()
        skipped: dict[int, list[int]] = {}  # rank → rows of the ops it went past
        for x in cycle[:_CYCLE_RANKS]:
            row_x = graph.frontier[x]
            key_x = self.op_key(row_x)
            inside = [y for y in graph.waits_for(x) if y in members][:_CYCLE_EDGES]
            for y in inside:
                # References: every other rank in y's role, in the cycle or not (the ranks
                # waiting with x issued both ops, in their program's order, when their host
                # ran ahead of their device).
                pair = {x, y}
                key_y = self.op_key(graph.frontier[y])
                o = self._before(row_x, graph.frontier[y], y, pair)
                if o == 0 and key_x is not None and key_y is not None:
                    o = self.order(key_x, key_y, pair, y)
                if o < 0:  # x's op comes first: y skipped it
                    votes[y] += 1
                    skipped.setdefault(y, []).append(row_x)
                elif o > 0:  # y's op comes first: x skipped y's op to issue its own
                    votes[x] += 1
                    skipped.setdefault(x, []).append(graph.frontier[y])
                elif key_x is not None and key_y is not None:
                    # No rank in y's position shows the order: the op most of its group issued
                    # is the one on the program's path; blocking in a minority's op deviates.
                    share_x, share_y = self._share(key_x), self._share(key_y)
                    if share_x > share_y and share_x > 0.5:
                        shares[y] += 1
                        skipped.setdefault(y, []).append(row_x)
                    elif share_y > share_x and share_y > 0.5:
                        shares[x] += 1
                        skipped.setdefault(x, []).append(graph.frontier[y])
        for x in cycle[:_CYCLE_RANKS]:
            # Sends/recvs are compared with what ranks in the same pipeline position issued at
            # the same p2p seq ids: a rank whose ops there differ went off the schedule.
            divergence = self._p2p_divergence_any(x)
            if divergence is not None:
                p2p_votes[x] += 1
                skipped[x] = [divergence]
        votes = p2p_votes or votes or shares
        if not votes:
            return None
        ranked = votes.most_common()
        if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
            return None
        culprit = ranked[0][0]
        rows = sorted(set(skipped.get(culprit, [graph.frontier[culprit]])))
        first = self._first_in_program(culprit, rows) if len(rows) > 1 else 0
        return culprit, rows[first or 0]

    def _p2p_rows(self, rows: range) -> npt.NDArray[np.intp]:
        """The send/recv rows among a rank's rows, in order."""
        return np.flatnonzero(self.t.p2p_kind[rows.start : rows.stop] != 0) + rows.start

    def _p2p_signature(self, row: int) -> tuple[object, ...]:
        """What a send/recv (or a batched block of them) is: kinds and group-local peers."""
        t = self.t
        marker = int(t.marker[row])
        if int(t.unit[row]) == UnitKind.BATCH_MEMBER and marker >= 0:
            rows = (np.flatnonzero(t.marker[row:marker] == marker) + row).tolist()
        else:
            rows = [row]
        return tuple(
            sorted(
                (int(t.p2p_kind[r]), int(t.peer_dst[r] if t.p2p_kind[r] == 1 else t.peer_src[r]))
                for r in rows
            )
        )

    def _p2p_divergence_any(self, rank: int) -> int | None:
        """The first row where `rank`'s send/recv ops, in any of its groups, leave the
        schedule of the ranks in its pipeline position."""
        rows = self._rows_of(rank)
        p2p = self._p2p_rows(rows)
        uids = self.groups.entry_group[p2p]
        seen: set[int] = set()
        for r, uid in zip(p2p.tolist(), uids.tolist(), strict=True):
            if uid in seen:
                continue
            seen.add(uid)
            found = self._p2p_divergence(rank, r)
            if found is not None:
                return found
        return None

    def _p2p_divergence(self, rank: int, row: int, only: int | None = None) -> int | None:
        """The first send/recv row of `rank` in `row`'s group (at p2p seq id `only`, if given)
        whose op differs from what most ranks in its pipeline position issued at that p2p seq
        id of their group alike."""
        uid = int(self.groups.entry_group[row])
        group = self.groups.groups[uid]
        sequences = []
        for mirror in self._mirrors(rank, {group.desc})[: _MIRRORS * 4]:
            alike = self._mirror_group(group, mirror)
            if alike is not None:
                sequences.append(self._p2p_sequence(mirror, alike.uid))
        if not sequences:
            return None
        for seq, (first, signature) in sorted(self._p2p_sequence(rank, uid).items()):
            if only is not None and seq != only:
                continue
            theirs = [found[seq][1] for found in sequences if seq in found]
            if theirs and sum(x != signature for x in theirs) > len(theirs) / 2:
                return first
        return None

    def _p2p_sequence(self, rank: int, uid: int) -> dict[int, tuple[int, tuple[object, ...]]]:
        """A rank's send/recv ops in one group: p2p seq id → (first row, signature)."""
        key = (rank, uid)
        found = self._p2p_cache.get(key)
        if found is None:
            t = self.t
            found = {}
            rows = self._rows_of(rank)
            p2p = self._p2p_rows(rows)
            p2p = p2p[self.groups.entry_group[p2p] == uid]
            if rank in self.wrapped and int(t.unit[rows.start]) == UnitKind.BATCH_MEMBER:
                # a batched block the ring buffer cut holds only its last ops
                p2p = p2p[t.marker[p2p] != t.marker[rows.start]]
            seqs, first = np.unique(t.p2p_seq[p2p], return_index=True)  # each seq's first row
            for seq, r in zip(seqs.tolist(), p2p[first].tolist(), strict=True):
                found[seq] = (r, self._p2p_signature(r))
            self._p2p_cache[key] = found
        return found

    def _direct_waits(self, ranks: set[int]) -> list[waits.Wait]:
        """Wait nodes whose ranks wait directly for one of `ranks`, most waiters first."""
        g = self.graph_used
        nodes = {n for r in ranks for n in g.nodes_waiting_for(r)}
        found = [g.waits[n] for n in nodes if g.waits[n].row >= 0]
        return sorted(found, key=lambda w: (-len(w.waiters), w.row))

    def _first_waited(self, ranks: set[int]) -> tuple[waits.Wait | None, list[waits.Wait]]:
        """The op the ranks were due to issue next, among the ops others wait for them in: the
        first of them in the order that ranks in the same role follow (mirror ranks), else the
        one whose waiters started waiting first."""
        direct = self._direct_waits(ranks)
        if len(direct) < 2:
            return (direct[0] if direct else None), direct
        t, g = self.t, self.graph_used

        def since(w: waits.Wait) -> int:
            created = [int(t.t_created[g.frontier[r]]) for r in w.waiters if r in g.frontier]
            valid = [c for c in created if c >= 0]
            return min(valid) if valid else 1 << 62

        ranked = sorted(direct, key=lambda w: (since(w), -len(w.waiters), w.row))
        candidates = ranked[:_DUE_CANDIDATES]
        first = self._due_next(min(ranks), candidates)
        if first is None:
            mine = self._own_next(min(ranks), [w.row for w in candidates])
            first = None if mine is None else candidates[mine]
        return (first if first is not None else ranked[0]), direct

    def _own_next(self, rank: int, rows: list[int]) -> int | None:
        """Index, in `rows`, of the op `rank` would issue next by its own history: what it did
        right after the previous time it did what it did last (a pipeline stage repeats its
        micro-batch pattern). None when its history does not say."""
        t = self.t
        own = [
            r
            for r in self._rows_of(rank)
            if int(t.unit[r]) not in (UnitKind.BLOCK_MEMBER, UnitKind.BATCH_MARKER)
        ]
        if len(own) < 3:
            return None

        def mine(row: int) -> tuple[object, ...]:
            uid = int(self.groups.entry_group[row])
            kind = int(t.p2p_kind[row])
            if kind == P2PKind.NONE:
                return (uid, t.ops[int(t.op[row])])
            peer = int(t.peer_dst[row] if kind == P2PKind.SEND else t.peer_src[row])
            return (uid, kind, peer, int(t.unit[row]))

        def theirs(row: int) -> tuple[object, ...]:
            """The op `rank` issues for the op at `row` (another rank's half of a pair)."""
            kind = int(t.p2p_kind[row])
            if kind == P2PKind.NONE or int(t.rank[row]) == rank:
                return mine(row)
            uid = int(self.groups.entry_group[row])
            group = self.groups.groups[uid]
            local = group.ranks.index(int(t.rank[row])) if int(t.rank[row]) in group.ranks else -1
            other = P2PKind.RECV if kind == P2PKind.SEND else P2PKind.SEND
            return (uid, int(other), local, int(t.unit[row]))

        # The earlier place whose ops before it match the rank's latest ops the longest.
        sigs = [mine(r) for r in own]
        n = len(sigs)
        best, best_len = -1, 0
        for j in range(n - 2, -1, -1):
            length = 0
            while length <= j and length < _HISTORY_MATCH and sigs[j - length] == sigs[-1 - length]:
                length += 1
            if length > best_len:
                best, best_len = j, length
        if best < 0:
            return None
        following = sigs[best + 1]
        hits = [i for i, r in enumerate(rows) if theirs(r) == following]
        return hits[0] if len(hits) == 1 else None

    def _due_next(self, rank: int, candidates: list[waits.Wait]) -> waits.Wait | None:
        """Of the ops others wait for `rank` in, the one that ranks with the same role as
        `rank` issued first: the op `rank` was due to issue next. None when no such rank
        holds them."""
        first = self._first_in_program(rank, [w.row for w in candidates])
        return None if first is None else candidates[first]

    def _first_in_program(self, rank: int, rows: list[int]) -> int | None:
        """Index, in `rows`, of the op that the ranks in `rank`'s role (the same local rank in
        groups alike, the same pipeline position and program) issue first; an op one of them
        has not issued yet comes after those it has. None when none of them holds the ops."""
        votes: Counter[int] = Counter()
        descs = {self.groups.groups[int(self.groups.entry_group[r])].desc for r in rows}
        # Ranks sharing a group with `rank` first (the same stage, surely), then the others;
        # mirrors that hold none of the ops do not count toward the limit.
        peers = {
            r for row in rows for r in self.groups.groups[int(self.groups.entry_group[row])].ranks
        }
        mirrors = sorted(self._mirrors(rank, descs), key=lambda r: (r not in peers, r))
        consulted = 0
        # Mirrors that hold every one of the ops show their order; those that hold only some
        # vote only when none holds them all (groups alike whose sequence ids drift apart,
        # independent subgroups, hold another op at the same id).
        partial: Counter[int] = Counter()
        for mirror in mirrors:
            if consulted >= _MIRRORS:
                break
            where = {}
            for i, row in enumerate(rows):
                found = self._counterpart_on(rank, mirror, row)
                if found is not None:
                    where[i] = found
            if where:
                consulted += 1
                first = min(where, key=lambda i: where[i])
                (votes if len(where) == len(rows) else partial)[first] += 1
        votes = votes or partial
        if not votes:
            return None
        ranked = votes.most_common()
        if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
            return None
        return ranked[0][0]

    def _roles(self) -> dict[int, tuple[tuple[str, int, int], ...]]:
        """Each rank's role: (desc, size, local rank) of every group it is in but the world.
        The local rank counts only in groups that carry send/recv (a pipeline stage orders its
        sends and receives by its position); in others every member does the same."""
        found = self._role
        if found is None:
            t = self.t
            p2p_rows = (t.unit == UnitKind.P2P) | (t.unit == UnitKind.BATCH_MEMBER)
            p2p_uids = set(distinct(self.groups.entry_group[p2p_rows]).tolist())
            ordered = {self.groups.groups[u].desc for u in p2p_uids}
            parts: dict[int, list[tuple[str, int, int]]] = {}
            for group in self.groups.groups:
                if group.size >= max(self.groups.world_size, 2):
                    continue
                for local, r in enumerate(group.ranks):
                    position = local if group.desc in ordered else -1
                    parts.setdefault(r, []).append((group.desc, group.size, position))
            found = self._role = {r: tuple(sorted(p)) for r, p in parts.items()}
        return found

    def _mirrors(self, rank: int, descs: set[str]) -> list[int]:
        """Loaded ranks in the same role as `rank` in the groups of these descriptions."""
        roles = self._roles()

        def role(r: int) -> tuple[tuple[str, int, int], ...]:
            return tuple(p for p in roles.get(r, ()) if p[0] in descs or p[2] >= 0)

        mine = role(rank)
        loaded = set(self.groups.loaded_ranks) - {rank}
        return [
            r for r in sorted(roles) if r in loaded and role(r) == mine and self._same_path(rank, r)
        ]

    def _mirror_group(self, group: Group, mirror: int) -> Group | None:
        """The group alike `group` that `mirror` is in (the same one if it is a member)."""
        if mirror in group.ranks:
            return group
        for other in self.groups.groups:
            if other.desc == group.desc and other.size == group.size and mirror in other.ranks:
                return other
        return None

    def _counterpart_on(self, rank: int, mirror: int, row: int) -> int | None:
        """The row on `mirror` (a rank in `rank`'s role) of the op at `row` as `rank` sees it:
        its own op, its part of a collective, or its half of a send/recv posted by another."""
        t, m = self.t, self.m
        group = self.groups.groups[int(self.groups.entry_group[row])]
        alike = self._mirror_group(group, mirror)
        if alike is None or rank not in group.ranks:
            return None
        if int(m.collectives.entry_unit[row]) >= 0:
            unit = m.collectives.find(alike.uid, int(t.coll_seq[row]))
            if unit is None:
                return None
            rows = m.collectives.unit_rows(unit)
            mine = rows[t.rank[rows] == mirror]
            return int(mine[0]) if len(mine) else None
        owner = int(t.rank[row])
        if owner not in group.ranks:
            return None
        # The owner's mirror in the mirror group, its op at the same p2p seq id; when the op is
        # another rank's, the mirror's half of that pair.
        their = alike.ranks[group.ranks.index(owner)]
        for other in self._rows_of(their):
            if (
                int(self.groups.entry_group[other]) == alike.uid
                and int(t.p2p_seq[other]) == int(t.p2p_seq[row])
                and int(t.p2p_kind[other]) == int(t.p2p_kind[row])
            ):
                if owner == rank:
                    return other
                pair = int(m.p2p.entry_pair[other])
                if pair < 0:
                    return None
                send, recv = int(m.p2p.send_row[pair]), int(m.p2p.recv_row[pair])
                half = recv if send == other else send
                return half if int(t.rank[half]) == mirror else None
        return None

    def _before(self, a: int, b: int, owner: int, exclude: set[int]) -> int:
        """-1 when the ranks in `owner`'s role (its pipeline position, groups alike) issue
        the op at row `a` (as `owner` sees it) before the op at row `b`, +1 after, 0 when none
        of them shows it."""
        descs = {self.groups.groups[int(self.groups.entry_group[r])].desc for r in (a, b)}
        votes = Counter[int]()
        for mirror in self._mirrors(owner, descs):
            if mirror in exclude:
                continue
            ra = self._counterpart_on(owner, mirror, a)
            rb = self._counterpart_on(owner, mirror, b)
            if ra is None or rb is None or ra == rb:
                continue
            votes[-1 if ra < rb else 1] += 1
            if sum(votes.values()) >= _REFERENCE_RANKS // 16:
                break
        if votes[-1] == votes[1]:
            return 0
        return -1 if votes[-1] > votes[1] else 1

    def _rows_of(self, rank: int) -> range:
        starts = self._starts
        if starts is None:
            at = rank_starts(self.t.rank)
            ends = np.append(at[1:], self.t.n)
            starts = self._starts = {
                int(self.t.rank[a]): (int(a), int(b))
                for a, b in zip(at.tolist(), ends.tolist(), strict=True)
            }
        a, b = starts.get(rank, (0, 0))
        return range(a, b)

    def _idle_root(self, roots: tuple[int, ...]) -> RootCause:
        t, g = self.t, self.graph_used
        root_set = set(roots)
        waited, direct = self._first_waited(root_set)
        ref = self.ref(waited.row) if waited is not None else None
        evidence = []
        for w in direct[:4]:
            wref = self.ref(w.row)
            evidence.append(
                f"{label(w.waiters)} {agree(w.waiters, 'waits', 'wait')} in {self.where(wref)} "
                f"for {label(root_set & set(w.waits_for))}"
            )
        if len(direct) > 4:
            evidence.append(
                f"... and {counted(len(direct) - 4, 'more op')} "
                f"{by_count(len(direct) - 4, 'waits', 'wait')} for them"
            )
        extra = self._extra_op(ref, root_set)
        if extra is not None:
            return extra
        dead = [r for r in roots if r in g.unavailable]
        frozen = []
        if waited is not None:
            since = min(
                (int(t.t_created[g.frontier[w]]) for w in waited.waiters if w in g.frontier),
                default=-1,
            )
            for r in roots:
                newest = self.newest_ns.get(r, -1)
                if r not in dead and newest >= 0 and since >= 0:
                    gap = (since - newest) / 1e9
                    if gap > self.th.dead_after_s:
                        frozen.append(r)
                        evidence.append(
                            f"rank {r}'s buffer ends {gap:.0f} s before its peers started "
                            "waiting for it"
                        )
        skipped: dict[int, OpRef] = {}
        for r in roots:
            if r in dead:
                evidence.append(f"rank {r} has no usable dump")
                continue
            newest_ref = self.ref(self.last_row[r]) if r in self.last_row else None
            if newest_ref is None:
                continue
            if ref is not None and self._skipped(ref.row, newest_ref.row, root_set):
                skipped[r] = newest_ref
                evidence.append(
                    f"rank {r} went on to {self.where(newest_ref)} ({newest_ref.state}), which "
                    f"the other ranks issue after {self.where(ref)}: it skipped it"
                )
            else:
                hint = (
                    "; most likely it is blocked in a send/recv with its pipeline peer (gloo "
                    "does not record send/recv)"
                    if self._in_unrecorded_p2p(r)
                    else ""
                )
                evidence.append(
                    f"rank {r} never issued it; its newest op is {self.where(newest_ref)} "
                    f"({newest_ref.flags}): it is doing something else (compute, data loading, "
                    f"another code path) or is hung outside any collective{hint}"
                )
        where = self.where(ref) if ref is not None else "the op its peers wait in"
        waiters = waited.waiters if waited is not None else ()
        others = len(self.graph_used.waiting_for(root_set)) - len(waiters)
        more = (
            f", and {counted(others, 'more rank')} {by_count(others, 'waits', 'wait')} behind "
            f"{agree(waiters, 'that rank', 'those ranks')}"
            if others > 0
            else ""
        )
        code = self.code(
            self.last_row.get(roots[0]), [g.frontier[w] for w in waiters if w in g.frontier]
        )
        if dead or frozen:
            gone = sorted(set(dead) | set(frozen))
            how = (
                agree(gone, "it has no usable dump", "they have no usable dumps")
                if dead
                else agree(gone, "it stopped", "they stopped")
                + " recording long before they started waiting"
            )
            hosts = agree(gone, "that host's", "those hosts'")
            sentence = (
                f"{label(gone)} {agree(gone, 'looks', 'look')} dead: {label(waiters)} "
                f"{agree(waiters, 'waits', 'wait')} for {agree(gone, 'it', 'them')} in "
                f"{where}{more}, and {how}; check {hosts} logs (OOM, crash, preemption, "
                "hardware)."
            )
            kind = RootKind.DEAD_RANK
        elif skipped and len(skipped) == len(roots):
            sentence = (
                f"{label(roots)} skipped {where}: {label(waiters)} "
                f"{agree(waiters, 'waits', 'wait')} in it{more}, but "
                f"{agree(roots, 'it', 'they')} went on to later ops. A program bug on "
                f"{agree(roots, 'that rank', 'those ranks')} (a rank-dependent branch)."
            )
            kind = RootKind.NOT_JOINED
        else:
            joined = (
                "posted its half of" if ref is not None and ref.p2p_seq_id is not None else "joined"
            )
            sentence = (
                f"{label(roots)} never {joined} {where}: {label(waiters)} "
                f"{agree(waiters, 'waits', 'wait')} in it{more}. Look at what "
                f"{agree(roots, 'it', 'they')} did instead: newest op and code below."
            )
            kind = RootKind.NOT_JOINED
        return RootCause(
            kind=kind,
            ranks=roots,
            group=ref.group if ref else None,
            collective_seq_id=ref.collective_seq_id if ref else None,
            p2p_seq_id=ref.p2p_seq_id if ref else None,
            op=ref.op if ref else "",
            sentence=sentence,
            evidence=tuple(evidence),
            wait_chain=self.chain(root_set),
            deviates=bool(skipped) and len(skipped) == len(roots) and kind != RootKind.DEAD_RANK,
            code=code,
        )

    def _in_unrecorded_p2p(self, rank: int) -> bool:
        """Whether `rank`, on a backend that records no send/recv (gloo), is likely blocked in
        one: it is in a pipeline group (one that carries send/recv, or is named for a
        pipeline), its newest op or that op's stack is a send/recv, or the diagnosis already
        took an idle rank to wait for it, or it for one, in an unrecorded send/recv."""
        if not self._no_p2p_recorded():
            return False
        if rank in self.implicit or any(rank in to for to in self.implicit.values()):
            return True
        t = self.t
        carry_p2p = set(distinct(self.groups.entry_group[t.p2p_kind != P2PKind.NONE]).tolist())
        for group in self.groups.groups:
            if rank in group.ranks and (group.uid in carry_p2p or _pipeline_desc(group.desc)):
                return True
        last = self.last_row.get(rank)
        if last is None:
            return False
        if int(t.p2p_kind[last]) != P2PKind.NONE:
            return True
        code = int(t.stack[last])
        return code >= 0 and any(f.name in _P2P_CALLS for f in t.stacks[code])

    def _skipped(self, missing_row: int, newest_row: int, roots: set[int]) -> bool:
        """Whether a rank whose newest op is `newest_row` went past the op at `missing_row`:
        the other ranks issue the missing op before that one."""
        owner = int(self.t.rank[newest_row])
        a, b = self.op_key(missing_row), self.op_key(newest_row)
        if a is not None and b is not None and a[0] == b[0]:
            return False  # same group: seq ids already say it stopped before the missing op
        o = self._before(missing_row, newest_row, owner, roots)
        if o == 0 and a is not None and b is not None:
            o = self.order(a, b, roots, owner)
        return o < 0

    def _extra_op(self, ref: OpRef | None, idle: set[int]) -> RootCause | None:
        """A collective only a minority issued, the rest of its group idle past it and no group
        alike at that seq id: the minority issued an extra op."""
        if ref is None or ref.collective_seq_id is None:
            return None
        units = self.m.collectives
        unit = int(units.entry_unit[ref.row])
        if unit < 0:
            return None
        rows = units.unit_rows(unit)
        issuers = sorted(set(self.t.rank[rows].tolist()))
        group = ref.group
        others = set(group.ranks) - set(issuers)
        # Only members with a dump show that they went past: a member with none is no
        # evidence (half a job's dumps lost is not half a job that skipped the op).
        seen = others - self.graph_used.unavailable
        if not seen or len(issuers) >= len(seen) or not others <= idle:
            return None
        key = (group.uid, ref.collective_seq_id)
        if len(self._first_rows(key)) > len(issuers):
            return None  # groups alike issue an op there: it is not extra
        sentence = (
            f"{label(issuers)} issued an extra {ref.op} #{ref.collective_seq_id} on group "
            f"{group.name!r} ({group.desc}) that no other member issued; "
            f"{agree(issuers, 'it waits', 'they wait')} in it. A program bug on "
            f"{agree(issuers, 'that rank', 'those ranks')} (a rank-dependent branch)."
        )
        return RootCause(
            kind=RootKind.MISMATCH,
            ranks=tuple(issuers),
            group=group,
            collective_seq_id=ref.collective_seq_id,
            p2p_seq_id=None,
            op=ref.op,
            sentence=sentence,
            evidence=(
                f"{label(issuers)} of {group.size} members issued it; the other "
                f"{len(seen)}{' with a dump' if seen != others else ''} went past that point",
            ),
            wait_chain=self.chain(set(issuers)),
            deviates=True,
            code=self.code(ref.row, []),
        )

    def _p2p_deviant_root(self, rank: int, first: int) -> RootCause:
        """A rank whose send/recv sequence left the pipeline schedule its position follows,
        from row `first` on."""
        at = self.ref(first)
        row = self.graph.frontier.get(rank, first)
        mine = self.ref(row)
        waiters = sorted(self.graph_used.waiting_for({rank}))
        who = label(waiters) if waiters else "its peers"
        sentence = (
            f"rank {rank} issued {self.where(at)} where the ranks in its pipeline position "
            "issue another send/recv: it left the schedule (a skipped or extra send/recv), "
            f"and {who} now wait for it. A program bug on that rank."
        )
        evidence = (
            f"rank {rank} is blocked in {self.where(mine)}",
            "from there on its send/recv ops differ from those the other ranks of its "
            "pipeline stage issue at the same p2p seq ids",
        )
        return RootCause(
            kind=RootKind.MISMATCH,
            ranks=(rank,),
            group=at.group,
            collective_seq_id=None,
            p2p_seq_id=at.p2p_seq_id,
            op=at.op,
            sentence=sentence,
            evidence=evidence,
            wait_chain=self.chain({rank}),
            deviates=True,
            code=self.code(row, []),
        )

    def _deviant_root(self, rank: int, waited_row: int) -> RootCause:
        if int(self.t.rank[waited_row]) == rank and int(self.t.p2p_kind[waited_row]) != 0:
            return self._p2p_deviant_root(rank, waited_row)
        waited_row = self._first_skipped(rank, waited_row)
        ref = self.ref(waited_row)
        mine = self.graph.frontier.get(rank)
        evidence = []
        if mine is not None:
            own = self.ref(mine)
            evidence.append(
                f"rank {rank} is blocked in {self.where(own)} instead, which the other ranks "
                f"issue after {self.where(ref)}"
            )
        waiters = sorted(self.graph_used.waiting_for({rank}))
        evidence.append(
            f"{label(waiters)} wait (directly or not) for rank {rank}: a cycle of waits that "
            "the order of the other ranks resolves"
        )
        sentence = (
            f"rank {rank} skipped {self.where(ref)} and went on to a later op, where it blocks; "
            "the ranks waiting in the skipped op wait for it. A program bug on that rank "
            "(a rank-dependent branch)."
        )
        peers = [self.graph.frontier[w] for w in waiters if w in self.graph.frontier]
        return RootCause(
            kind=RootKind.NOT_JOINED,
            ranks=(rank,),
            group=ref.group,
            collective_seq_id=ref.collective_seq_id,
            p2p_seq_id=ref.p2p_seq_id,
            op=ref.op,
            sentence=sentence,
            evidence=tuple(evidence),
            wait_chain=self.chain({rank}),
            deviates=True,
            code=self.code(mine, peers),
        )

    def _first_skipped(self, rank: int, waited_row: int) -> int:
        """Of the op the cycle says `rank` went past and the collectives its group issued
        and it alone never did, the one first in the program: skipping one op can leave the
        rank blocked where the cycle shows only a later consequence."""
        # The cycle's op may be of a group the rank is not in (its peers wait in it for
        # ranks that wait for the rank): it did not skip that one.
        waited_group = self.groups.groups[int(self.groups.entry_group[waited_row])]
        rows = [waited_row] if rank in waited_group.ranks else []
        for f in self.m.findings:
            if f.kind != FindingKind.NOT_JOINED or f.culprit_ranks != (rank,):
                continue
            if f.group is None or f.collective_seq_id is None:
                continue
            unit = self.m.collectives.find(f.group.uid, f.collective_seq_id)
            if unit is not None:
                rows.append(int(self.m.collectives.unit_rows(unit)[0]))
        if not rows:
            return waited_row
        if len(rows) == 1:
            return rows[0]
        first = self._first_in_program(rank, rows)
        return rows[first] if first is not None else rows[0]

    def _stuck_root(self, best: _Candidate) -> RootCause:
        g = self.graph_used
        node = g.waits[best.node]
        ref = self.ref(node.row)
        t, m = self.t, self.m
        unit = node.unit
        completed: list[int] = []
        members: set[int] = set(best.ranks)
        states: dict[str, list[int]] = {}
        if unit >= 0:
            rows = m.collectives.unit_rows(unit)
            heads = {int(t.rank[r]): r for r in rows.tolist()}
            completed = sorted(r for r, row in heads.items() if bool(m.done[row]))
            members = set(ref.group.ranks)
            for r, row in sorted(heads.items()):
                if r in completed:
                    continue
                head = int(t.marker[row]) if int(t.marker[row]) >= 0 else row
                states.setdefault(STATE_NAMES[State(int(t.state[head]))], []).append(r)
        stuck = list(best.ranks)
        laggards = completed or len(states) > 1
        evidence = []
        if unit >= 0:
            evidence.append(f"every member of group {ref.group.name!r} issued {self.where(ref)}")
        if completed:
            evidence.append(f"{label(completed)} completed it; {label(stuck)} did not")
        for state, rs in states.items():
            evidence.append(f"{label(rs)}: {state}")
        if laggards:
            behind = len(best.behind)
            sentence = (
                f"{label(stuck)} {agree(stuck, 'is', 'are')} stuck in {self.where(ref)}"
                + (
                    f", which {label(completed)} completed"
                    if completed
                    else f" while {label(members - set(stuck))} started it and wait"
                )
                + f"; {counted(behind, 'rank')} {by_count(behind, 'waits', 'wait')} behind "
                f"{agree(stuck, 'it', 'them')}. {agree(stuck, 'Its GPU', 'Their GPUs')} or "
                "NCCL stopped there (a device hang, a kernel that never finished, a network "
                f"fault on {agree(stuck, 'that host', 'those hosts')}), not a program bug."
            )
        elif states and set(states) == {"scheduled"} and timing_on(t, stuck):
            sentence = (
                f"{label(stuck)} {agree(stuck, 'is', 'are')} stuck in {self.where(ref)} although "
                "every member issued it and none completed it. NCCL timing was on and it stayed "
                "scheduled: the GPU never started it, so something before it on that GPU did "
                "not finish (a kernel, or a wait on another stream), not the network nor a "
                "program bug."
            )
        else:
            sentence = (
                f"{label(stuck)} {agree(stuck, 'is', 'are')} stuck in {self.where(ref)} although "
                "every member issued it and none completed it: a communication-level hang "
                "(network, NCCL, GPU), not a program bug."
            )
        peers = [g.frontier[w] for w in best.behind if w in g.frontier]
        return RootCause(
            kind=RootKind.STUCK_COLLECTIVE,
            ranks=tuple(stuck),
            group=ref.group,
            collective_seq_id=ref.collective_seq_id,
            p2p_seq_id=ref.p2p_seq_id,
            op=ref.op,
            sentence=sentence,
            evidence=tuple(evidence),
            wait_chain=self.chain(set(stuck)),
            code=self.code(node.row, peers[:64]),
        )

    def _deadlock_root(self, cycle: list[int]) -> RootCause:
        g = self.graph_used
        evidence = []
        for r in cycle:
            row = g.frontier.get(r)
            if row is not None:
                evidence.append(
                    f"rank {r} is blocked in {self.where(self.ref(row))} waiting for "
                    f"{label(g.waits_for(r))}"
                )
        chain = []
        node = cycle[0]
        for _ in range(len(cycle) + 1):
            row = g.frontier.get(node)
            ref = self.ref(row) if row is not None else None
            seq = None
            if ref is not None:
                seq = ref.collective_seq_id if ref.p2p_seq_id is None else ref.p2p_seq_id
            chain.append(WaitStep(node, ref.group.name if ref else None, seq))
            nxt = [w for w in g.waits_for(node) if w in cycle]
            if not nxt:
                break
            node = min(nxt)
        first_row = g.frontier.get(cycle[0])
        first = self.ref(first_row) if first_row is not None else None
        sentence = (
            f"Cross-group deadlock: {label(cycle)} wait for each other in a cycle; they issued "
            "collectives of different groups in different orders, and no other rank shows "
            "which order is right. Make every rank issue these groups' collectives in the "
            "same order."
        )
        return RootCause(
            kind=RootKind.DEADLOCK,
            ranks=tuple(cycle),
            group=first.group if first else None,
            collective_seq_id=first.collective_seq_id if first else None,
            p2p_seq_id=first.p2p_seq_id if first else None,
            op=first.op if first else "",
            sentence=sentence,
            evidence=tuple(evidence),
            wait_chain=tuple(chain),
            deviates=True,
        )


_P2P_CALLS = frozenset(
    {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}
)
"""Functions whose frame in a stack shows a send/recv."""
_PIPELINE_WORDS = frozenset({"pp", "pipe", "pipeline", "pipeline_parallel", "stage"})


def _pipeline_desc(desc: str) -> bool:
    """Whether a group's description names a pipeline (`pp`, `mesh_pp`, `pipeline`)."""
    words = {w for w in re.split(r"[^a-z]+", desc.lower()) if w}
    return bool(words & _PIPELINE_WORDS)


def first_mismatch(ctx: Context, findings: Sequence[Finding]) -> Finding | None:
    """The causally first disagreement: the one whose op was enqueued first."""
    found = [f for f in findings if f.kind in MISMATCH_KINDS]
    if not found:
        return None

    def first_enqueued(f: Finding) -> int:
        rows = _finding_rows(ctx, f)
        created = [int(ctx.t.t_created[r]) for r in rows if int(ctx.t.t_created[r]) >= 0]
        return min(created) if created else 1 << 62

    return min(found, key=first_enqueued)


def _same_op(ctx: Context, a: int, b: int) -> bool:
    """Whether rows `a` and `b` of one rank are the same op (one coalesced or batched block)."""
    return a == b or (int(ctx.t.marker[a]) >= 0 and int(ctx.t.marker[a]) == int(ctx.t.marker[b]))


def _finding_rows(ctx: Context, f: Finding) -> list[int]:
    """The rows a finding is about: its collective unit's, or its culprits' send/recv."""
    t, m = ctx.t, ctx.m
    if f.group is None:
        return []
    if f.collective_seq_id is not None:
        unit = m.collectives.find(f.group.uid, f.collective_seq_id)
        return [] if unit is None else m.collectives.unit_rows(unit).tolist()
    if f.p2p_seq_id is None:
        return []
    on = f.culprit_ranks[0] if len(f.culprit_ranks) == 1 else f.ranks[0]
    mine = _p2p_rows(ctx, on, f.group.uid)
    hit: list[int] = mine[t.p2p_seq[mine] == f.p2p_seq_id].tolist()
    # The other half: the other ranks' unfinished send/recv with `on` on this group (their own
    # p2p seq ids may differ).
    if on in f.group.ranks:
        local = f.group.ranks.index(on)
        for other in sorted(set(f.ranks) - {on}):
            rows = _p2p_rows(ctx, other, f.group.uid)
            peer = np.where(t.p2p_kind[rows] == P2PKind.SEND, t.peer_dst[rows], t.peer_src[rows])
            hit += rows[(peer == local) & ~m.done[rows]].tolist()
    return hit


def _p2p_rows(ctx: Context, rank: int, uid: int) -> npt.NDArray[np.int64]:
    """A rank's send/recv rows on one group."""
    t, span = ctx.t, ctx._rows_of(rank)
    at = slice(span.start, span.stop)
    p2p = (t.unit[at] == UnitKind.P2P) | (t.unit[at] == UnitKind.BATCH_MEMBER)
    p2p &= (ctx.groups.entry_group[at] == uid) & (t.p2p_kind[at] != P2PKind.NONE)
    return np.flatnonzero(p2p).astype(np.int64) + span.start


def straggler_root(slow: stragglers.Slowness) -> RootCause:
    if slow.stall:
        seq = (
            f"#{slow.collective_seq_id}"
            if slow.p2p_seq_id is None
            else f"(p2p #{slow.p2p_seq_id} on rank {slow.rank})"
        )
        sentence = (
            f"rank {slow.rank} stalled {slow.lateness_s:.1f} s before {slow.op} "
            f"{seq} of group {slow.group.name!r} ({slow.group.desc}); its "
            "peers waited for it there, and the delay cascaded to the ranks that waited for "
            "them. Look at that host at that moment (compute, data loading, I/O, a pause)."
        )
    elif slow.collective_seq_id is not None:
        sentence = (
            f"rank {slow.rank} keeps arriving late on its own, about "
            f"{slow.lateness_s * 1e3:.0f} ms after its peers, first at {slow.op} "
            f"#{slow.collective_seq_id} of group {slow.group.name!r} ({slow.group.desc}); they "
            "wait for it each time. Look at that host (a periodic pause: data loading, garbage "
            "collection, logging, CPU contention)."
        )
    else:
        sentence = (
            f"rank {slow.rank} is a straggler: it reaches collectives about "
            f"{slow.lateness_s * 1e3:.0f} ms after its peers, who wait for it every time; "
            "look at that host (slow GPU, data loading, CPU contention, thermal throttling)."
        )
    return RootCause(
        kind=RootKind.STRAGGLER,
        ranks=(slow.rank,),
        group=slow.group,
        collective_seq_id=slow.collective_seq_id,
        p2p_seq_id=slow.p2p_seq_id,
        op=slow.op,
        sentence=sentence,
        evidence=slow.evidence,
        wait_chain=(),
        lateness_s=slow.lateness_s,
    )
