"""Hang diagnosis: where every rank stands, who waits for whom, and the root cause.

Each rank is *blocked* in its oldest op that did not complete (gloo: not retired; a collective
that some member never issued cannot have completed either, whatever its flags say). A blocked
rank *waits for* the members of that collective's group that never issued it, or for the peer
of an unmatched send/recv. Following these edges across groups leads to the root ranks that
wait on nobody: a rank that is idle (never joined), a rank with no dump (dead), or ranks stuck
in an op every member issued (a communication-level hang). Cycles are cross-group deadlocks.
When nobody is blocked, a rank that consistently arrives last at collectives is a straggler;
that is measured from each rank's own clock (completion minus enqueue), so host clock offsets
do not matter.
"""

from __future__ import annotations

import enum
import itertools
from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .dumps import EntryTable, RankDump, rank_starts
from .groups import GroupTable
from .matching import MatchResult
from .model import (
    ANY_SOURCE,
    STATE_NAMES,
    Finding,
    FindingKind,
    Group,
    P2PKind,
    Stack,
    UnitKind,
)
from .ranks import agree, label

MISMATCH_KINDS = frozenset(
    {
        FindingKind.OP_TYPE_MISMATCH,
        FindingKind.SIZE_MISMATCH,
        FindingKind.DTYPE_MISMATCH,
        FindingKind.P2P_SIZE_MISMATCH,
        FindingKind.P2P_DTYPE_MISMATCH,
    }
)


class RootKind(enum.StrEnum):
    MISMATCH = "mismatch"
    NOT_JOINED = "not_joined"
    DEAD_RANK = "dead_rank"
    STUCK_COLLECTIVE = "stuck_collective"
    DEADLOCK = "deadlock"
    STRAGGLER = "straggler"


@dataclass(frozen=True)
class Thresholds:
    """Tunable limits of the diagnosis."""

    dead_after_s: float = 60.0  # an idle rank whose buffer ends this long before its waiters'
    straggler_ms: float = 50.0  # median lateness that makes a rank a straggler
    stack_depth: int = 8  # innermost frames compared when grouping stacks


@dataclass(frozen=True)
class OpRef:
    """One op of one rank, as shown to a person."""

    rank: int
    row: int
    group: Group
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op: str
    state: str
    retired: bool
    sizes: str
    age_s: float | None  # how long before the rank's newest timestamp it was enqueued

    def describe(self) -> str:
        seq = f"#{self.collective_seq_id}" if self.p2p_seq_id is None else f"p#{self.p2p_seq_id}"
        flags = self.state + (", retired" if self.retired else "")
        return f"{self.op} {seq} ({flags})"


@dataclass(frozen=True)
class Position:
    """Where ranks stand in one group: those whose last completed op and first op not
    completed read the same share one position (the ops shown are the lowest rank's)."""

    group: Group
    ranks: tuple[int, ...]
    last_completed: OpRef | None
    first_incomplete: OpRef | None
    oldest_age_s: float | None  # the longest any of them has waited in its first op not done


@dataclass(frozen=True)
class RankState:
    rank: int
    blocked: OpRef | None  # the oldest op that did not complete
    newest: OpRef | None  # the newest op in its buffer
    waits_for: tuple[int, ...]


@dataclass(frozen=True)
class StackGroup:
    """Ranks whose blocking (or, when idle, newest) op has the same innermost frames."""

    stack: Stack | None  # None: the dump has no frames for that op
    ranks: tuple[int, ...]
    odd: bool  # the odd one out: a minority stack


@dataclass(frozen=True)
class RootCause:
    kind: RootKind
    ranks: tuple[int, ...]
    group: Group | None
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op: str
    sentence: str
    evidence: tuple[str, ...]
    wait_chain: tuple[tuple[int, str | None, int | None], ...]


@dataclass(frozen=True)
class Diagnosis:
    positions: tuple[Position, ...]
    ranks: tuple[RankState, ...]
    stacks: tuple[StackGroup, ...]
    root_cause: RootCause | None


# ---------------------------------------------------------------------------------------------


class _Graph:
    """The rows and tables the diagnosis reads, with small helpers."""

    def __init__(
        self,
        table: EntryTable,
        groups: GroupTable,
        matches: MatchResult,
        newest_ns: dict[int, int],
    ) -> None:
        self.t = table
        self.groups = groups
        self.m = matches
        self.newest_ns = newest_ns
        self._missing: dict[int, tuple[int, ...]] = {}
        self._sizes: dict[int, str] = {}
        self._ops: dict[int, str] = {}

    def missing_in_unit(self, unit: int, group: Group, unavailable: set[int]) -> tuple[int, ...]:
        """Members a collective unit waits for: those that never issued it and those with no
        usable dump. Once per unit: every member blocked in it asks (16,384 in a world hang)."""
        found = self._missing.get(unit)
        if found is None:
            missing = set(self.m.collectives.not_joined.get(unit, ()))
            missing.update(unavailable.intersection(group.ranks))
            found = self._missing[unit] = tuple(sorted(missing))
        return found

    def refs(self, rows: Sequence[int]) -> list[OpRef]:
        """OpRefs of many rows, their columns read in one step each."""
        t = self.t
        at = np.asarray(rows, dtype=np.int64)
        unit = t.unit[at]
        p2p = (unit == UnitKind.P2P) | (unit == UnitKind.BATCH_MEMBER)
        p2p |= unit == UnitKind.BATCH_MARKER
        out = []
        for row, rank, p2p_, created, shape, pname, uid, coll, p2p_seq, state, retired in zip(
            at.tolist(),
            t.rank[at].tolist(),
            p2p.tolist(),
            t.t_created[at].tolist(),
            t.in_shape[at].tolist(),
            t.pname[at].tolist(),
            self.groups.entry_group[at].tolist(),
            t.coll_seq[at].tolist(),
            t.p2p_seq[at].tolist(),
            t.state[at].tolist(),
            t.retired[at].tolist(),
            strict=True,
        ):
            newest = self.newest_ns.get(rank, -1)
            age = (newest - created) / 1e9 if created >= 0 and newest >= created else None
            sizes = self._sizes.get(shape)
            if sizes is None:  # a few distinct shapes and names, asked about once per rank
                sizes = self._sizes[shape] = str([list(s) for s in t.shapes[shape]]).replace(
                    " ", ""
                )
            op = self._ops.get(pname)
            if op is None:
                name = t.profiling_names[pname]
                op = self._ops[pname] = name.partition(":")[2] or name
            out.append(
                OpRef(
                    rank=rank,
                    row=row,
                    group=self.groups.groups[uid],
                    collective_seq_id=None if p2p_ else coll,
                    p2p_seq_id=p2p_seq if p2p_ else None,
                    op=op,
                    state=_STATE_NAMES[state],
                    retired=retired,
                    sizes=sizes,
                    age_s=age,
                )
            )
        return out


_STATE_NAMES = {int(state): name for state, name in STATE_NAMES.items()}


def diagnose(
    dumps: Sequence[RankDump],
    table: EntryTable,
    groups: GroupTable,
    matches: MatchResult,
    findings: Sequence[Finding],
    thresholds: Thresholds = Thresholds(),
) -> Diagnosis:
    t = table
    unavailable = set(range(groups.world_size)) - set(groups.loaded_ranks)
    newest_ns = _newest(t)
    graph = _Graph(t, groups, matches, newest_ns)
    incomplete = _incomplete(t, matches)
    blocked_row = _first_per_rank(t.rank, incomplete)
    last_row = _last_per_rank(t)

    states: dict[int, RankState] = {}
    terminal: dict[int, str] = {}  # blocked rank → why it waits on nobody
    blocked = dict(zip(blocked_row, graph.refs(list(blocked_row.values())), strict=True))
    newest = dict(zip(last_row, graph.refs(list(last_row.values())), strict=True))
    for rank in groups.loaded_ranks:
        row = blocked_row.get(rank)
        waits: tuple[int, ...] = ()
        if row is not None:
            waits, why = _waits_for(graph, row, unavailable)
            if not waits:
                terminal[rank] = why
        states[rank] = RankState(rank, blocked.get(rank), newest.get(rank), waits)

    positions = _positions(graph, incomplete)
    stacks = _stacks(t, states, thresholds.stack_depth)
    root = _root_cause(graph, states, terminal, unavailable, findings, thresholds)
    if root is None and not blocked_row:
        root = _straggler(t, groups, matches, thresholds)
    ordered = tuple(states[r] for r in sorted(states))
    return Diagnosis(positions, ordered, stacks, root)


def _newest(t: EntryTable) -> dict[int, int]:
    if not t.n:
        return {}
    stamp = np.maximum(np.maximum(t.t_created, t.t_started), t.t_completed)
    starts = rank_starts(t.rank)
    newest = np.maximum.reduceat(stamp, starts)
    return dict(zip(t.rank[starts].tolist(), newest.tolist(), strict=True))


def _incomplete(t: EntryTable, m: MatchResult) -> npt.NDArray[np.bool_]:
    """Rows that did not complete: not done, or in a collective some member never issued."""
    out = ~m.done.copy()
    if m.collectives.not_joined:
        unjoined = np.zeros(len(m.collectives.seq) + 1, dtype=bool)  # the last: no unit (-1)
        unjoined[list(m.collectives.not_joined)] = True
        out |= unjoined[m.collectives.entry_unit]
    if t.n:
        out &= t.unit != UnitKind.ORPHAN_MARKER
    return out


def _first_per_rank(rank: npt.NDArray[np.int32], mask: npt.NDArray[np.bool_]) -> dict[int, int]:
    """Each rank's first row in `mask` (rows are in rank order)."""
    rows = np.flatnonzero(mask)
    if not len(rows):
        return {}
    first = rank_starts(rank[rows])
    return dict(zip(rank[rows[first]].tolist(), rows[first].tolist(), strict=True))


def _last_per_rank(t: EntryTable) -> dict[int, int]:
    if not t.n:
        return {}
    starts = rank_starts(t.rank)
    last = np.append(starts[1:], t.n) - 1
    return dict(zip(t.rank[starts].tolist(), last.tolist(), strict=True))


def _waits_for(graph: _Graph, row: int, unavailable: set[int]) -> tuple[tuple[int, ...], str]:
    """Ranks the op at `row` waits for; when none, why it is stuck anyway."""
    t, groups, m = graph.t, graph.groups, graph.m
    rank = int(t.rank[row])
    group = groups.groups[int(groups.entry_group[row])]
    unit = int(m.collectives.entry_unit[row])
    if unit >= 0:
        missing = graph.missing_in_unit(unit, group, unavailable)
        return tuple(r for r in missing if r != rank), "collective"
    kind = int(t.p2p_kind[row])
    if kind == P2PKind.NONE:
        return (), "other"
    if int(m.p2p.entry_pair[row]) >= 0:
        return (), "p2p"
    local = int(t.peer_dst[row]) if kind == P2PKind.SEND else int(t.peer_src[row])
    if local == ANY_SOURCE:
        return tuple(r for r in group.ranks if r != rank), "p2p"
    if 0 <= local < group.size:
        return (group.ranks[local],), "p2p"
    return (), "other"


def _positions(graph: _Graph, incomplete: npt.NDArray[np.bool_]) -> tuple[Position, ...]:
    """One position per group and pair of ops as shown. Each (rank, group) gets its last
    completed row and first row not completed; (rank, group) pairs whose two rows read alike
    (same op, sequence id, state, flags and sizes) are collapsed on their codes first, so
    OpRefs are made only for the few distinct positions, not for every rank."""
    t, groups = graph.t, graph.groups
    if not t.n:
        return ()
    n_uids = len(groups.groups) + 1
    # One position per (rank, group uid); a rank's pairs of one uid (same name, two
    # descriptions) share it.
    pair_key = t.pair_rank.astype(np.int64) * n_uids + groups.pair_uid
    keys, key_of_pair = np.unique(pair_key, return_inverse=True)
    key = key_of_pair[t.pair]
    done_rows = np.flatnonzero(
        ~incomplete & (t.unit != UnitKind.BLOCK_MEMBER) & (t.unit != UnitKind.BATCH_MEMBER)
    )
    last_done = np.full(len(keys), -1, dtype=np.int64)
    last_done[key[done_rows]] = done_rows  # ascending rows: the last assignment is the last row
    inc_rows = np.flatnonzero(incomplete)[::-1]
    first_inc = np.full(len(keys), -1, dtype=np.int64)
    first_inc[key[inc_rows]] = inc_rows  # descending rows: the last assignment is the first
    rank, uid = np.divmod(keys, n_uids)

    p2p = np.isin(t.unit, (UnitKind.P2P, UnitKind.BATCH_MEMBER, UnitKind.BATCH_MARKER))

    def shown(rows: npt.NDArray[np.int64], sizes: bool) -> list[npt.NDArray[np.int64]]:
        """What `OpRef.describe` (and the sizes) read from each row, as codes; -1 if none."""
        has = rows >= 0
        at = np.where(has, rows, 0)
        seq = np.where(p2p[at], t.p2p_seq[at], t.coll_seq[at])
        fields = [t.pname[at], p2p[at], seq, t.state[at], t.retired[at]]
        if sizes:
            fields.append(t.in_shape[at])
        return [np.where(has, f.astype(np.int64), -1) for f in [has, *fields]]

    columns = [uid, *shown(last_done, False), *shown(first_inc, True)]
    _, position_of = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    position_of = position_of.reshape(-1)
    # Age in the first op not completed, as `OpRef.age_s` has it.
    newest_ns = graph.newest_ns
    newest = np.array([newest_ns.get(r, -1) for r in rank.tolist()], dtype=np.int64)
    created = np.where(first_inc >= 0, t.t_created[np.maximum(first_inc, 0)], -1)
    aged = (first_inc >= 0) & (created >= 0) & (newest >= created)
    age = np.where(aged, (newest - created) / 1e9, -np.inf)
    oldest = np.full(position_of.max() + 1, -np.inf)
    np.maximum.at(oldest, position_of, age)
    # The lowest rank of each position shows its ops; keys are in rank order.
    example = np.full(len(oldest), -1, dtype=np.int64)
    example[position_of[::-1]] = np.arange(len(keys) - 1, -1, -1)
    members: dict[int, list[int]] = defaultdict(list)
    for p, r in zip(position_of.tolist(), rank.tolist(), strict=True):
        members[p].append(r)

    # Codes that differ can still read the same (two profiling names of one op): merge those.
    merged: dict[tuple[object, ...], tuple[Position, list[int], float]] = {}
    lc_rows, fi_rows = last_done[example], first_inc[example]
    lc_refs = iter(graph.refs(lc_rows[lc_rows >= 0].tolist()))
    fi_refs = iter(graph.refs(fi_rows[fi_rows >= 0].tolist()))
    for p, (k, lc, fi) in enumerate(
        zip(example.tolist(), lc_rows.tolist(), fi_rows.tolist(), strict=True)
    ):
        shown_pos = Position(
            groups.groups[int(uid[k])],
            (),
            next(lc_refs) if lc >= 0 else None,
            next(fi_refs) if fi >= 0 else None,
            None,
        )
        text = (
            shown_pos.group.uid,
            _shown(shown_pos.last_completed, False),
            _shown(shown_pos.first_incomplete, True),
        )
        found = merged.get(text)
        if found is None:
            merged[text] = (shown_pos, members[p], float(oldest[p]))
        else:
            first, ranks, age_max = found
            if min(members[p]) < min(ranks):
                first = shown_pos
            merged[text] = (first, ranks + members[p], max(age_max, float(oldest[p])))
    out = [
        Position(
            pos.group,
            tuple(sorted(ranks)),
            pos.last_completed,
            pos.first_incomplete,
            None if age == -np.inf else age,
        )
        for pos, ranks, age in merged.values()
    ]
    return tuple(sorted(out, key=lambda p: (p.group.uid, p.ranks[0])))


def _shown(ref: OpRef | None, sizes: bool) -> tuple[object, ...] | None:
    """What a person reads of an op in a position."""
    if ref is None:
        return None
    return (ref.describe(), ref.sizes if sizes else None)


def _stacks(t: EntryTable, states: dict[int, RankState], depth: int) -> tuple[StackGroup, ...]:
    by_stack: dict[Stack | None, list[int]] = defaultdict(list)
    for rank, state in states.items():
        ref = state.blocked or state.newest
        if ref is None:
            continue
        code = int(t.stack[ref.row])
        stack = t.stacks[code][:depth] if code >= 0 else None
        by_stack[stack].append(rank)
    if not by_stack:
        return ()
    ordered = sorted(by_stack.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    biggest = len(ordered[0][1])
    return tuple(
        StackGroup(stack, tuple(sorted(ranks)), len(ordered) > 1 and len(ranks) < biggest)
        for stack, ranks in ordered
    )


# ---------------------------------------------------------------------------------------------
# Root cause


def _reaches(states: dict[int, RankState], target: set[int]) -> dict[int, int]:
    """For every rank that (transitively) waits for `target`, its distance to it."""
    waiters: dict[int, list[int]] = defaultdict(list)
    for rank, state in states.items():
        for other in state.waits_for:
            waiters[other].append(rank)
    dist = {r: 0 for r in target}
    queue = deque(target)
    while queue:
        node = queue.popleft()
        for w in waiters.get(node, ()):
            if w not in dist:
                dist[w] = dist[node] + 1
                queue.append(w)
    return dist


def _chain(
    states: dict[int, RankState], roots: set[int]
) -> tuple[tuple[int, str | None, int | None], ...]:
    """The longest wait chain that ends at one of `roots`, as [rank, group, seq] steps."""
    dist = _reaches(states, roots)
    start = max(dist, key=lambda r: (dist[r], -r))
    chain = []
    node = start
    seen: set[int] = set()
    while node not in seen:
        seen.add(node)
        state = states.get(node)
        ref = state.blocked if state else None
        seq = (
            None
            if ref is None
            else (ref.collective_seq_id if ref.p2p_seq_id is None else ref.p2p_seq_id)
        )
        chain.append((node, ref.group.name if ref else None, seq))
        if node in roots or state is None:
            break
        nxt = [w for w in state.waits_for if w in dist and dist[w] < dist[node]]
        if not nxt:
            break
        node = min(nxt)
    return tuple(chain)


def _cycles(states: dict[int, RankState]) -> list[list[int]]:
    """Strongly connected components of more than one rank (Tarjan, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for start in sorted(states):
        if start in index:
            continue
        work = [(start, iter(states[start].waits_for))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in states:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(states[nxt].waits_for)))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _root_cause(
    graph: _Graph,
    states: dict[int, RankState],
    terminal: dict[int, str],
    unavailable: set[int],
    findings: Sequence[Finding],
    th: Thresholds,
) -> RootCause | None:
    waiting = {r for r, s in states.items() if s.waits_for}
    first_mismatch = next((f for f in findings if f.kind in MISMATCH_KINDS), None)
    if first_mismatch is not None:
        return _mismatch_root(states, first_mismatch)
    cycles = _cycles(states)
    if cycles:
        return _deadlock_root(states, cycles[0])
    if not waiting and not terminal:
        return None
    # Candidate roots: ranks waited on that wait on nobody, and blocked ranks stuck on their own.
    waited_on = {w for s in states.values() for w in s.waits_for}
    idle_roots = {
        r for r in waited_on if r in unavailable or not states.get(r) or states[r].blocked is None
    }
    candidates = idle_roots | set(terminal)
    reach = {r: len(_reaches(states, {r})) for r in candidates}
    # Terminal ranks stuck in the same collective form one root.
    by_unit: dict[tuple[str, int, int | None], set[int]] = defaultdict(set)
    for r in terminal:
        ref = states[r].blocked
        assert ref is not None  # terminal ranks are blocked by construction
        by_unit[
            (
                terminal[r],
                ref.group.uid,
                ref.collective_seq_id if ref.p2p_seq_id is None else ref.p2p_seq_id,
            )
        ].add(r)
    best_idle = max(idle_roots, key=lambda r: (reach[r], -r), default=None)
    best_unit = max(
        by_unit.items(), key=lambda kv: (sum(reach[r] for r in kv[1]), -min(kv[1])), default=None
    )
    idle_weight = reach[best_idle] if best_idle is not None else -1
    unit_weight = sum(reach[r] for r in best_unit[1]) if best_unit is not None else -1
    if best_idle is not None and idle_weight >= unit_weight:
        roots = (
            {r for r in idle_roots if reach[r] == idle_weight}
            if len(idle_roots) > 1
            else {best_idle}
        )
        return _idle_root(graph, states, roots, unavailable, th)
    if best_unit is not None:
        return _stuck_root(graph, states, best_unit[1])
    return None


def _mismatch_root(states: dict[int, RankState], f: Finding) -> RootCause:
    roots = set(f.culprit_ranks)
    chain = (
        _chain(states, roots) if any(states.get(r) and states[r].waits_for for r in states) else ()
    )
    seq = f.collective_seq_id if f.collective_seq_id is not None else f.p2p_seq_id
    where = f"group {f.group.name!r} ({f.group.desc})" if f.group else "the job"
    sentence = (
        f"{label(roots)} {agree(roots, 'disagrees', 'disagree')} with the rest of {where} at "
        f"{'collective' if f.collective_seq_id is not None else 'p2p'} #{seq} {f.op}: "
        f"{f.kind.value.replace('_', ' ')}. This is a program bug on those ranks "
        "(different code path, shapes or dtypes); look at their stacks."
    )
    return RootCause(
        RootKind.MISMATCH,
        tuple(sorted(roots)),
        f.group,
        f.collective_seq_id,
        f.p2p_seq_id,
        f.op,
        sentence,
        (f.detail,),
        chain,
    )


def _deadlock_root(states: dict[int, RankState], cycle: list[int]) -> RootCause:
    evidence = []
    for r in cycle:
        ref = states[r].blocked
        if ref is not None:
            evidence.append(
                f"rank {r} is blocked in {ref.describe()} of group "
                f"{ref.group.name!r} ({ref.group.desc}) waiting for "
                f"{label(states[r].waits_for)}"
            )
    chain = []
    node = cycle[0]
    for _ in range(len(cycle) + 1):
        ref = states[node].blocked
        seq = (
            None
            if ref is None
            else (ref.collective_seq_id if ref.p2p_seq_id is None else ref.p2p_seq_id)
        )
        chain.append((node, ref.group.name if ref else None, seq))
        nxt = [w for w in states[node].waits_for if w in cycle]
        if not nxt:
            break
        node = min(nxt)
    first = states[cycle[0]].blocked
    sentence = (
        f"Cross-group deadlock: {label(cycle)} wait for each other in a cycle; they "
        "issued collectives of different groups in different orders. Make every rank "
        "issue these groups' collectives in the same order."
    )
    return RootCause(
        RootKind.DEADLOCK,
        tuple(cycle),
        first.group if first else None,
        first.collective_seq_id if first else None,
        first.p2p_seq_id if first else None,
        first.op if first else "",
        sentence,
        tuple(evidence),
        tuple(chain),
    )


def _idle_root(
    graph: _Graph,
    states: dict[int, RankState],
    roots: set[int],
    unavailable: set[int],
    th: Thresholds,
) -> RootCause:
    waiters = {r: s for r, s in states.items() if set(s.waits_for) & roots}
    # Waiters grouped by the op they wait in; the biggest group names the root's op.
    by_op: dict[tuple[int, int | None, int | None, str], list[int]] = defaultdict(list)
    for r, s in sorted(waiters.items()):
        if s.blocked is not None:
            b = s.blocked
            by_op[(b.group.uid, b.collective_seq_id, b.p2p_seq_id, b.op)].append(r)
    ranked = sorted(by_op.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    (uid, cseq, pseq, op), _ = ranked[0]
    group = graph.groups.groups[uid]
    waiting_in = [s.blocked for s in waiters.values() if s.blocked is not None]
    evidence = []
    for (g_uid, c, p, o), rs in ranked:
        g = graph.groups.groups[g_uid]
        evidence.append(
            f"{label(rs)} {agree(rs, 'waits', 'wait')} in {o} "
            f"{'#' + str(c) if p is None else 'p#' + str(p)} of group {g.name!r} ({g.desc}) for "
            f"{label(set(roots) & {w for r in rs for w in states[r].waits_for})}"
        )
    dead = sorted(r for r in roots if r in unavailable)
    if not dead:
        oldest_wait = min(
            (graph.t.t_created[w.row] for w in waiting_in if int(graph.t.t_created[w.row]) >= 0),
            default=None,
        )
        for r in sorted(roots):
            newest = graph.newest_ns.get(r, -1)
            if (
                oldest_wait is not None
                and newest >= 0
                and (int(oldest_wait) - newest) / 1e9 > th.dead_after_s
            ):
                dead.append(r)
                evidence.append(
                    f"rank {r}'s buffer ends {(int(oldest_wait) - newest) / 1e9:.0f}"
                    " s before its peers started waiting for it"
                )
    for r in sorted(roots):
        if r in unavailable:
            evidence.append(f"rank {r} has no usable dump")
            continue
        newest_ref = states[r].newest
        if newest_ref is not None:
            evidence.append(
                f"rank {r} never issued it; its newest op is {newest_ref.describe()}"
                f" of group {newest_ref.group.name!r} ({newest_ref.group.desc}), "
                "completed: it is doing something else (compute, data loading, "
                "a different code path)"
            )
    chain = _chain(states, roots)
    where = (
        f"{op} {'#' + str(cseq) if pseq is None else 'p#' + str(pseq)} of group "
        f"{group.name!r} ({group.desc})"
    )
    direct = ranked[0][1]
    others = len(waiters) - len(direct)
    elsewhere = f" (and {others} more rank(s) elsewhere)" if others else ""
    if dead:
        kind = RootKind.DEAD_RANK
        sentence = (
            f"{label(dead)} {agree(dead, 'looks', 'look')} dead: {label(direct)} "
            f"{agree(direct, 'waits', 'wait')} for it in {where}{elsewhere}, and it "
            + (
                "has no usable dump"
                if any(r in unavailable for r in dead)
                else "stopped recording long before they started waiting"
            )
            + "; check that host's logs (OOM, crash, preemption, hardware)."
        )
    else:
        kind = RootKind.NOT_JOINED
        sentence = (
            f"{label(roots)} never joined {where} that {label(direct)} "
            f"{agree(direct, 'waits', 'wait')} in{elsewhere}; look at what it is doing instead "
            "(its newest op and stack below)."
        )
    return RootCause(
        kind, tuple(sorted(roots)), group, cseq, pseq, op, sentence, tuple(evidence), chain
    )


def _stuck_root(graph: _Graph, states: dict[int, RankState], ranks: set[int]) -> RootCause:
    any_ref = states[min(ranks)].blocked
    assert any_ref is not None  # terminal ranks are blocked by construction
    group = any_ref.group
    members = set(group.ranks)
    # Who in the group completed this op: the stuck ones are the ones that did not.
    completed: list[int] = []
    t, m = graph.t, graph.m
    unit = int(m.collectives.entry_unit[any_ref.row])
    if unit >= 0:
        rows = np.flatnonzero(m.collectives.entry_unit == unit)
        completed = sorted(set(t.rank[rows][m.done[rows]].tolist()))
    stuck = sorted(ranks - set(completed))
    evidence = [f"every member of group {group.name!r} ({group.desc}) issued {any_ref.describe()}"]
    if completed:
        evidence.append(f"{label(completed)} completed it; {label(stuck)} did not")
    else:
        evidence.append(f"none of {label(members)} completed it")
    for state, rs in _by_state(states, stuck).items():
        evidence.append(f"{label(rs)}: {state}")
    seq = any_ref.collective_seq_id if any_ref.p2p_seq_id is None else any_ref.p2p_seq_id
    sentence = (
        f"{label(stuck)} {agree(stuck, 'is', 'are')} stuck in {any_ref.op} #{seq} of group "
        f"{group.name!r} ({group.desc}) although every member issued it: a communication-level "
        "hang (network, NCCL, GPU), not a program bug."
    )
    chain = (
        _chain(states, set(stuck))
        if any(s.waits_for for s in states.values())
        else tuple((r, group.name, seq) for r in stuck[:1])
    )
    return RootCause(
        RootKind.STUCK_COLLECTIVE,
        tuple(stuck),
        group,
        any_ref.collective_seq_id,
        any_ref.p2p_seq_id,
        any_ref.op,
        sentence,
        tuple(evidence),
        chain,
    )


def _by_state(states: dict[int, RankState], ranks: Sequence[int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for r in ranks:
        ref = states[r].blocked
        if ref is not None:
            out[ref.state + (", retired without completing" if ref.retired else "")].append(r)
    return out


def _medians_by_rank(
    rank: npt.NDArray[np.int32], values: npt.NDArray[np.float64]
) -> dict[int, float]:
    """The median of `values` per rank; `rank` is sorted.

    Ranks with the same number of values are taken together as the rows of one 2-D array and
    partitioned around the middle, not sorted: healthy jobs have few distinct counts, and even
    one count per rank costs only a partition per rank."""
    starts = rank_starts(rank)
    counts = np.diff(np.append(starts, len(rank)))
    medians = np.empty(len(starts), dtype=np.float64)
    by_count = np.argsort(counts, kind="stable")
    bounds = np.flatnonzero(np.diff(counts[by_count], prepend=-1, append=-1))
    for lo, hi in itertools.pairwise(bounds.tolist()):
        which = by_count[lo:hi]
        count = int(counts[which[0]])
        mid = [(count - 1) // 2, count // 2]
        step = max(1, _MEDIAN_CHUNK // count)  # bounds the gathered block's size
        for at in range(0, len(which), step):
            part = which[at : at + step]
            block = values[starts[part][:, None] + np.arange(count)]
            block.partition(mid, axis=1)
            medians[part] = (block[:, mid[0]] + block[:, mid[1]]) / 2
    return dict(zip(rank[starts].tolist(), medians.tolist(), strict=True))


_MEDIAN_CHUNK = 1 << 22  # values gathered at once per partition


def _straggler(
    t: EntryTable, groups: GroupTable, m: MatchResult, th: Thresholds
) -> RootCause | None:
    """The rank that arrives last, measured as how much shorter it waits than its peers."""
    units = m.collectives
    rows = np.flatnonzero(
        (units.entry_unit >= 0)
        & (t.t_created >= 0)
        & (t.t_completed >= 0)
        & ((t.unit == UnitKind.COLLECTIVE) | (t.unit == UnitKind.BLOCK_MARKER))
    )
    if not len(rows):
        return None
    full = units.passed & (units.ranks_present == units.ranks_expected) & (units.ranks_expected > 1)
    rows = rows[full[units.entry_unit[rows]]]
    if len(rows) < 2:
        return None
    wait = (t.t_completed[rows] - t.t_created[rows]).astype(np.float64)
    unit = units.entry_unit[rows]
    longest = np.full(len(units.seq), -np.inf)
    np.maximum.at(longest, unit, wait)
    lateness_ms = (longest[unit] - wait) / 1e6
    rank = t.rank[rows]  # in rank order, as the table is
    medians = _medians_by_rank(rank, lateness_ms)
    if len(medians) < 2:
        return None
    worst = max(medians, key=lambda r: (medians[r], -r))
    others = sorted(v for r, v in medians.items() if r != worst)
    typical = others[len(others) // 2]
    if medians[worst] < th.straggler_ms or medians[worst] < 3 * max(typical, 1.0):
        return None
    samples = int((rank == worst).sum())
    worst_units = unit[(rank == worst)]
    uid = Counter(units.group[worst_units].tolist()).most_common(1)[0][0]
    group = groups.groups[int(uid)]
    evidence = (
        f"over {samples} completed collectives rank {worst} arrived a median "
        f"{medians[worst]:.0f} ms after the first rank; the other ranks' median lateness is "
        f"{typical:.1f} ms",
        "measured from each rank's own clock (completion minus enqueue, i.e. how long it "
        "waited for the others), so host clock offsets do not distort it",
    )
    sentence = (
        f"rank {worst} is a straggler: it reaches collectives about "
        f"{medians[worst]:.0f} ms after its peers, who wait for it every time; "
        "look at that host (slow GPU, data loading, CPU contention, thermal throttling)."
    )
    return RootCause(RootKind.STRAGGLER, (worst,), group, None, None, "", sentence, evidence, ())
