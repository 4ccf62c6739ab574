"""Who waits for whom: every rank's first unfinished op and the ranks that op waits for.

A rank executes its ops in enqueue order, so it stands at its *frontier*: its oldest op that
did not complete (gloo: not retired; a collective that some member never issued cannot have
completed, whatever its flags say). A rank at an op *waits for* the participants that have not
reached that op: members with no usable dump, members that never issued it, members whose own
frontier is an earlier op, and (when the recorder reports `started`) members whose copy of the
op has not started while the waiter's has. A rank whose frontier waits for nobody is stuck on
its own there; a rank with no frontier is idle (it finished everything it issued).

Ranks at one op that wait for the same ranks share one *wait* node, so the graph is bipartite
(rank → wait node → ranks) and its size stays linear in the number of ranks even when half of a
16,384-rank job waits for the other half in one world collective.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence, Set
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..match import CollectiveUnits, MatchResult, stateless
from ..match.frontier import incomplete_rows
from ..model.groups import GroupTable
from ..model.records import ANY_SOURCE, UNKNOWN_PEER, P2PKind, State, UnitKind
from ..model.table import EntryTable, rank_starts

P2P_ROWS = (UnitKind.P2P, UnitKind.BATCH_MEMBER)


@dataclass(frozen=True)
class Wait:
    """Ranks blocked at one op (or one op and state) and the ranks they wait for."""

    row: int  # a representative row: the op the ranks are blocked in (the lowest rank's)
    unit: int  # collective unit id, or -1 for send/recv
    waiters: tuple[int, ...]
    waits_for: tuple[int, ...]


@dataclass(frozen=True)
class WaitGraph:
    """Frontier per rank and the bipartite wait graph."""

    frontier: dict[int, int]  # rank → its first unfinished row
    incomplete: npt.NDArray[np.bool_]  # rows that did not complete
    node_of: dict[int, int]  # blocked rank → index into `waits`
    waits: tuple[Wait, ...]
    unavailable: frozenset[int]  # member ranks with no usable dump

    def waits_for(self, rank: int) -> tuple[int, ...]:
        """The ranks `rank` waits for (none when it is not blocked)."""
        node = self.node_of.get(rank)
        return () if node is None else self.waits[node].waits_for

    def blocked(self, rank: int) -> bool:
        """Whether `rank` has an op that did not complete."""
        return rank in self.frontier

    def waited_on(self) -> set[int]:
        """Ranks that some blocked rank waits for."""
        live = set(self.node_of.values())
        return {r for i in live for r in self.waits[i].waits_for}

    def waiting_for(self, targets: Iterable[int], skip: frozenset[int] = frozenset()) -> set[int]:
        """Every rank that transitively waits for one of `targets` (targets excluded), not
        following edges out of the ranks in `skip`."""
        by_target = self._reverse()
        found: set[int] = set()
        seen_nodes: set[int] = set()
        queue = deque(targets)
        start = set(targets)
        while queue:
            rank = queue.popleft()
            for node in by_target.get(rank, ()):
                if node in seen_nodes:
                    continue
                seen_nodes.add(node)
                for waiter in self.waits[node].waiters:
                    if waiter in skip or waiter in start or waiter in found:
                        continue
                    if self.node_of.get(waiter) != node:
                        continue  # its edges were taken out (a rank that deviated)
                    found.add(waiter)
                    queue.append(waiter)
        return found

    def _reverse(self) -> dict[int, list[int]]:
        cached: dict[int, list[int]] | None = self.__dict__.get("_by_target")
        if cached is None:
            cached = defaultdict(list)
            for i, wait in enumerate(self.waits):
                for target in wait.waits_for:
                    cached[target].append(i)
            object.__setattr__(self, "_by_target", cached)
        return cached

    def path(self, start: int, targets: set[int]) -> list[int]:
        """A shortest wait chain from `start` to one of `targets` (ranks), or [start]. Each
        wait node is expanded once, so a world collective that 8,000 ranks wait in costs its
        targets once, not once per waiter."""
        previous: dict[int, int] = {start: start}
        seen_nodes: set[int] = set()
        queue = deque([start])
        while queue:
            rank = queue.popleft()
            if rank in targets:
                chain = [rank]
                while chain[-1] != start:
                    chain.append(previous[chain[-1]])
                return chain[::-1]
            node = self.node_of.get(rank)
            if node is None or node in seen_nodes:
                continue
            seen_nodes.add(node)
            for other in self.waits[node].waits_for:
                if other not in previous:
                    previous[other] = rank
                    queue.append(other)
        return [start]

    def levels(self, targets: set[int]) -> dict[int, int]:
        """Distance, in waits, of every rank that waits for `targets` (the targets at 0)."""
        by_target = self._reverse()
        levels = {r: 0 for r in targets}
        seen_nodes: set[int] = set()
        frontier = list(targets)
        while frontier:
            nxt = []
            for rank in frontier:
                for node in by_target.get(rank, ()):
                    if node in seen_nodes:
                        continue
                    seen_nodes.add(node)
                    for waiter in self.waits[node].waiters:
                        if waiter not in levels and self.node_of.get(waiter) == node:
                            levels[waiter] = levels[rank] + 1
                            nxt.append(waiter)
            frontier = nxt
        return levels

    def nodes_waiting_for(self, rank: int) -> list[int]:
        """The wait nodes that list `rank` among the ranks they wait for."""
        return [n for n in self._reverse().get(rank, ()) if self._live(n)]

    def _live(self, node: int) -> bool:
        """Whether some rank is still blocked at this node in this (edited) graph."""
        return any(self.node_of.get(w) == node for w in self.waits[node].waiters)

    def cycles(self) -> list[list[int]]:
        """Sets of two or more ranks that wait for each other (strongly connected components
        of the rank graph, found on the bipartite graph: linear in its size)."""
        # Node ids: ranks as ("r", rank), wait nodes as ("w", index); iterative Tarjan.
        index: dict[tuple[str, int], int] = {}
        low: dict[tuple[str, int], int] = {}
        on_stack: set[tuple[str, int]] = set()
        stack: list[tuple[str, int]] = []
        out: list[list[int]] = []
        counter = 0

        def edges(node: tuple[str, int]) -> Iterable[tuple[str, int]]:
            kind, value = node
            if kind == "r":
                target = self.node_of.get(value)
                return () if target is None else (("w", target),)
            return (("r", r) for r in self.waits[value].waits_for if r in self.node_of)

        for start_rank in sorted(self.node_of):
            start = ("r", start_rank)
            if start in index:
                continue
            index[start] = low[start] = counter
            counter += 1
            stack.append(start)
            on_stack.add(start)
            work = [(start, iter(edges(start)))]
            while work:
                node, it = work[-1]
                advanced = False
                for nxt in it:
                    if nxt not in index:
                        index[nxt] = low[nxt] = counter
                        counter += 1
                        stack.append(nxt)
                        on_stack.add(nxt)
                        work.append((nxt, iter(edges(nxt))))
                        advanced = True
                        break
                    if nxt in on_stack:
                        low[node] = min(low[node], index[nxt])
                if advanced:
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    ranks = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        if member[0] == "r":
                            ranks.append(member[1])
                        if member == node:
                            break
                    if len(ranks) > 1:
                        out.append(sorted(ranks))
        return out

    def without_edges_from(self, ranks: set[int]) -> WaitGraph:
        """The same graph with the given ranks treated as waiting for nobody."""
        node_of = {r: n for r, n in self.node_of.items() if r not in ranks}
        return WaitGraph(self.frontier, self.incomplete, node_of, self.waits, self.unavailable)

    def with_edges(self, extra: dict[int, tuple[int, ...]]) -> WaitGraph:
        """The same graph plus edges from (idle) ranks to others, each its own wait node."""
        waits = list(self.waits)
        node_of = dict(self.node_of)
        for rank, targets in sorted(extra.items()):
            node_of[rank] = len(waits)
            waits.append(Wait(-1, -1, (rank,), targets))
        return WaitGraph(self.frontier, self.incomplete, node_of, tuple(waits), self.unavailable)


def first_per_rank(rank: npt.NDArray[np.int32], mask: npt.NDArray[np.bool_]) -> dict[int, int]:
    """Each rank's first row in `mask` (rows are in rank order)."""
    rows = np.flatnonzero(mask)
    if not len(rows):
        return {}
    first = rank_starts(rank[rows])
    return dict(zip(rank[rows[first]].tolist(), rows[first].tolist(), strict=True))


def build(
    t: EntryTable, groups: GroupTable, m: MatchResult, killed: Set[int] = frozenset()
) -> WaitGraph:
    """The frontier of every rank and the wait graph; `killed`: ranks read from a trace cut
    where they were killed, beside ranks' dumps, taken as dead as a rank with no dump is (their
    record says what they issued, not what finished)."""
    unavailable = frozenset(set(range(groups.world_size)) - set(groups.loaded_ranks)) | killed
    incomplete = incomplete_rows(t, m)
    frontier = first_per_rank(t.rank, incomplete)
    for rank in killed:  # dead: it waits for nobody (its record ends where it was killed)
        frontier.pop(rank, None)
    frontier.update(_failed_with_the_dead(t, groups, m, frontier, unavailable))
    builder = _Builder(t, groups, m, frontier, unavailable)
    node_of: dict[int, int] = {}
    for rank in sorted(frontier):
        node_of[rank] = builder.node(rank, frontier[rank])
    return WaitGraph(frontier, incomplete, node_of, builder.finish(), unavailable)


def _failed_with_the_dead(
    t: EntryTable,
    groups: GroupTable,
    m: MatchResult,
    frontier: dict[int, int],
    unavailable: frozenset[int],
) -> dict[int, int]:
    """Ranks that look idle but stand in a failed collective. gloo retires a collective that
    timed out as it retires one that completed. A collective shared with a rank that left no
    dump, that the group did not get past and that is the last op the rank issued, failed
    with the dead rank when others wait for the rank, or when it is the last op of every
    member that dumped (they all stopped there)."""
    if not unavailable or not t.n:
        return {}
    no_states = stateless(t)
    waited: set[int] = set()
    units = m.collectives
    out: dict[int, int] = {}
    starts = rank_starts(t.rank)
    lasts = np.append(starts[1:], t.n) - 1
    last_of = dict(zip(t.rank[starts].tolist(), lasts.tolist(), strict=True))
    for last in lasts.tolist():
        rank = int(t.rank[last])
        if rank in frontier or not no_states[last]:
            continue
        unit = int(units.entry_unit[last])
        if unit < 0:
            continue
        group = groups.groups[int(units.group[unit])]
        if not unavailable.intersection(group.ranks):
            continue
        if int(units.seq[unit]) <= m.proven.get(group.uid, -1):
            continue  # a member got past it (gloo is synchronous): it completed
        if not waited:
            waited = _waited_collectives(m, frontier)
        if rank in waited or _all_stopped_there(t, units, unit, group.ranks, last_of):
            out[rank] = last
    return out


def _all_stopped_there(
    t: EntryTable,
    units: CollectiveUnits,
    unit: int,
    members: Sequence[int],
    last_of: dict[int, int],
) -> bool:
    """Whether every member that dumped has this unit as the last op it issued."""
    rows = units.unit_rows(unit)
    mine = dict(zip(t.rank[rows].tolist(), rows.tolist(), strict=True))
    return all(last_of.get(r) == mine.get(r, -1) for r in members if r in last_of)


def _waited_collectives(m: MatchResult, frontier: dict[int, int]) -> set[int]:
    """Members that blocked ranks wait for because they never issued a collective."""
    out: set[int] = set()
    for row in frontier.values():
        unit = int(m.collectives.entry_unit[row])
        if unit >= 0:
            out.update(m.collectives.not_joined.get(unit, ()))
    return out


class _Builder:
    """Makes one wait node per (op, waiter state): every member blocked in a world collective
    asks the same question, so it is answered once."""

    def __init__(
        self,
        t: EntryTable,
        groups: GroupTable,
        m: MatchResult,
        frontier: dict[int, int],
        unavailable: frozenset[int],
    ) -> None:
        self.t, self.groups, self.m = t, groups, m
        self.frontier = frontier
        self.unavailable = unavailable
        self.head = t.marker.copy() if t.n else np.zeros(0, np.int64)  # the row holding state
        orphans = np.flatnonzero(self.head < 0)
        self.head[orphans] = orphans
        # A blocked rank's frontier unit (collective) or frontier block marker (p2p).
        self.frontier_unit = {
            r: int(m.collectives.entry_unit[row]) for r, row in frontier.items() if t.n
        }
        self.frontier_head = {r: int(self.head[row]) for r, row in frontier.items()}
        self.stateful_started = bool(t.n) and bool((t.state == State.STARTED).any())
        self._keys: dict[tuple[object, ...], int] = {}
        self._waits: list[tuple[int, int, list[int], tuple[int, ...]]] = []
        self._units: dict[int, tuple[set[int], dict[int, int]]] = {}

    def finish(self) -> tuple[Wait, ...]:
        return tuple(Wait(row, unit, tuple(ws), targets) for row, unit, ws, targets in self._waits)

    def _node(
        self,
        key: tuple[object, ...],
        row: int,
        unit: int,
        rank: int,
        targets: Callable[[], Iterable[int]],
    ) -> int:
        found = self._keys.get(key)
        if found is None:
            found = self._keys[key] = len(self._waits)
            self._waits.append((row, unit, [], tuple(sorted(targets()))))
        self._waits[found][2].append(rank)
        return found

    def node(self, rank: int, row: int) -> int:
        t = self.t
        unit = self.frontier_unit.get(rank, -1)
        state = int(t.state[self.head[row]])
        if unit >= 0:
            return self._node(
                ("c", unit, state),
                row,
                unit,
                rank,
                lambda: self._collective_waits(unit, state, rank),
            )
        if int(t.unit[row]) in P2P_ROWS:
            return self._node(("p", row), row, -1, rank, lambda: self._p2p_waits(rank, row))
        return self._node(("o", row), row, -1, rank, lambda: ())

    def _unit_standing(self, unit: int) -> tuple[set[int], dict[int, int]]:
        """For a collective unit: the members that have not reached it, and the state of each
        member that stands at it."""
        found = self._units.get(unit)
        if found is not None:
            return found
        t, m = self.t, self.m
        group = self.groups.groups[int(m.collectives.group[unit])]
        rows = m.collectives.unit_rows(unit)
        heads: dict[int, int] = {}
        for r, row in zip(t.rank[rows].tolist(), rows.tolist(), strict=True):
            heads[r] = int(self.head[row])  # a rank's last row of the unit: its marker
        never = set(m.collectives.not_joined.get(unit, ()))
        behind: set[int] = set()
        at: dict[int, int] = {}
        done = m.done
        for member in group.ranks:
            if member in self.unavailable or member in never:
                behind.add(member)
                continue
            head = heads.get(member)
            if head is None or bool(done[head]):
                continue  # issued it outside its window and got past it, or completed it
            if self.frontier_unit.get(member, -2) != unit:
                behind.add(member)  # stuck in an earlier op of its own
                continue
            at[member] = int(t.state[head])
        self._units[unit] = found = (behind, at)
        return found

    def _collective_waits(self, unit: int, state: int, rank: int) -> set[int]:
        behind, at = self._unit_standing(unit)
        targets = set(behind)
        if self.stateful_started and state == State.STARTED:
            targets.update(r for r, s in at.items() if s == State.SCHEDULED)
        targets.discard(rank)
        return targets

    def _p2p_waits(self, rank: int, row: int) -> set[int]:
        """A send/recv (or a batched block of them) waits for the peers that have not reached
        their half: unmatched halves, and matched halves not started or behind."""
        t, m, groups = self.t, self.m, self.groups
        marker = int(t.marker[row])
        if int(t.unit[row]) == UnitKind.BATCH_MEMBER and marker >= 0:
            block = np.flatnonzero(t.marker[row : marker + 1] == marker) + row
            block = block[np.isin(t.unit[block], P2P_ROWS)]
        else:
            block = np.array([row], dtype=np.int64)
        targets: set[int] = set()
        my_state = int(t.state[self.head[row]])
        for x in block.tolist():
            pair = int(m.p2p.entry_pair[x])
            group = groups.groups[int(groups.entry_group[x])]
            if pair < 0:
                targets.update(self._intended_peers(x, group.ranks, rank))
                continue
            send, recv = int(m.p2p.send_row[pair]), int(m.p2p.recv_row[pair])
            other = recv if send == x else send
            peer = int(t.rank[other])
            other_head = int(self.head[other])
            if bool(m.done[other_head]):
                continue
            if self.frontier_head.get(peer) != other_head:
                targets.add(peer)  # its half is queued behind an earlier op of its own
            elif (
                self.stateful_started
                and my_state == State.STARTED
                and int(t.state[other_head]) == State.SCHEDULED
            ):
                targets.add(peer)
        targets.discard(rank)
        return targets

    def _intended_peers(self, row: int, members: Sequence[int], rank: int) -> set[int]:
        t = self.t
        kind = int(t.p2p_kind[row])
        local = int(t.peer_dst[row]) if kind == P2PKind.SEND else int(t.peer_src[row])
        if local in (ANY_SOURCE, UNKNOWN_PEER):  # any member (or one not recorded)
            return {r for r in members if r != rank}
        if 0 <= local < len(members):
            return {members[local]}
        return set()
