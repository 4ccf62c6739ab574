"""The group of each op of a gloo Execution Trace, found by a search over every rank's trace.

A gloo trace names no group and no sequence id. Each op could be on any group of the rank that
its sizes fit (`dispatcher.Op.candidates`); the job ran the ops in order on every rank, and a
collective passed when every member (with a trace) had it next on that group. The search runs
the traces as the job ran them and finds the assignment of ops to groups that lets the most ops
pass. Groups of the same members are one choice (the traces cannot tell them apart; the
default group, else the first the op names, takes the op).

How the search goes: at each point, a group whose members all have an op next that may be on
it (the same op and input size; else the same op: it passes as a disagreement, counted apart)
either runs it, or that op of one member is taken off the group. Ops that only one group can
take run at once. Where nothing can run, the ops left at the head of each rank are where the
job stopped. Ops are taken off a group only near where the likeliest run (every choice its
first) stops: in each rank's last 1, then 2, 4, 8 (`WINDOW`) ops before it, widened while the
budget lasts (a fault stops the job near where it is; before it, the job ran as the likeliest
run reads it). Each state is searched once (memoized), a branch that cannot reach the best count
is cut, and the whole search is bounded in nodes (`NODE_BUDGET`, over every width) and ops
(`OP_BUDGET`): past either before the first width is done, the caller falls back to the greedy
settle (`dispatcher.assign`) and says so.

Which assignment is likelier, among those that let as many ops pass alike (the same op and
size): the one where more pass as a disagreement (the same op, other sizes: one collective
that went wrong, not ops that belong elsewhere), then the search's order (a larger group runs
first: the world before a pair; the default group first among groups of one size). Where the job
stopped, the ops left waiting are put, a party at a time, on the group that most of them (of one
op and size) may be on, then on the one with the fewest members absent from them that could be
what they wait for (a member waiting elsewhere, or one whose trace was cut after its last op
passed: a member whose trace ended cleanly finished its program; one already put on that group
waits there, with another op: not absent), then the larger.
An op a cut trace ends in (`Op.cut`: its backend node never written) passes only with a member
whose op ended: where no member's did, the job stopped in it.
Where another assignment lets as many ops pass and leaves the job stopped elsewhere, it is
returned as `Settlement.other`: the caller analyzes it too and, when its verdict differs, says
the answer is ambiguous.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass

from ....model.ops import P2P_OPS
from .dispatcher import Op, assign, default_group, own_choice
from .nodes import Group

NODE_BUDGET = 10_000
"""States the search visits at most before it gives up (about a few seconds of Python)."""

WINDOW = 8
"""Each rank's ops before where the most likely run stops that the search may put elsewhere."""

OP_BUDGET = 50_000
"""Collectives of every rank together past which the search is not tried."""


class OverBudget(Exception):
    """The search visited more states than its budget allows."""


@dataclass(frozen=True)
class Settlement:
    """The groups of each rank's ops (by rank, in the order of `dispatcher_ops`; None: the
    rank's own choice, past where the job stopped), an assignment that fits as well and
    leaves the job stopped elsewhere (None when there is none), and how it was found."""

    chosen: Mapping[int, tuple[str | None, ...]]
    other: Mapping[int, tuple[str | None, ...]] | None = None
    searched: bool = True  # False: over the budget, settled greedily
    nodes: int = 0  # states the search visited
    ops: int = 0  # collectives of every rank together
    window: int = 0  # each rank's last ops before the stop that the search put elsewhere

    @property
    def warning(self) -> str:
        """What the report says when the job was too large to search ("" when searched)."""
        if self.searched:
            return ""
        return (
            f"gloo Execution Traces: {self.ops} collectives are too many to search every "
            "assignment of ops to groups; each op's group was settled greedily (smaller groups "
            "first, no going back) and may be wrong where groups of different members share an "
            "op and its size"
        )


Score = tuple[int, int]
"""(ops passed alike, ops passed as a disagreement): larger is likelier."""

Sig = tuple[frozenset[tuple[int, int]], frozenset[int]]
"""Where a reading leaves the job: (rank index, group class) of each op left waiting, and the
group classes where a disagreement passed. Two readings alike here give one verdict."""


@dataclass(frozen=True)
class _Reading:
    """The best continuation found from a state: its score, where it leaves the job, and which
    child it takes (its index; at the end, the cover's) and which of that child's readings
    (0: its best, 1: its other)."""

    score: Score
    sig: Sig
    choice: int
    via: int = 0


State = tuple[tuple[int, ...], tuple[int, ...]]
"""(each rank's next op, the group classes its next op may still go to, as a bit mask)."""


@dataclass(frozen=True)
class _Step:
    """A move from a state to the next: what it passed and where it lands (after every move
    that had no choice)."""

    state: State
    passed: int  # ops passed alike (the same op and size on every member)
    loose: int  # ops passed as a disagreement (the same op, other sizes)
    disagreed: frozenset[int]
    fired: tuple[int, ...]  # the group class of each collective run, in order


class _Search:
    """One search over every rank's trace (see the module docstring)."""

    def __init__(
        self,
        ops: Mapping[int, Sequence[Op]],
        groups: Mapping[str, Group],
        cut: frozenset[int],
        node_budget: int,
    ) -> None:
        self.ranks = sorted(ops)
        self.budget = node_budget
        self.nodes = 0
        index = {rank: i for i, rank in enumerate(self.ranks)}
        by_members: dict[tuple[int, ...], list[Group]] = {}
        for group in groups.values():
            by_members.setdefault(group.ranks, []).append(group)
        classes = sorted(
            by_members,
            key=lambda m: (-len(m), all(g.desc != "default_pg" for g in by_members[m]), m),
        )
        self.class_of = {g.name: c for c, m in enumerate(classes) for g in by_members[m]}
        self.members = [tuple(index[r] for r in m if r in index) for m in classes]
        self.positions: list[list[int]] = []  # each rank's collectives: their index in `ops`
        self.masks: list[list[int]] = []
        self.names: list[list[dict[int, str]]] = []  # class -> the group name the op takes
        self.keys: list[list[tuple[str, int]]] = []
        self.p2p: dict[int, list[str | None]] = {}
        for rank in self.ranks:
            self._add_rank(rank, ops[rank], groups)
        self.count = [len(p) for p in self.positions]
        self.fits = [
            [_suffix([(m >> c) & 1 for m in masks]) for c in range(len(classes))]
            for masks in self.masks
        ]
        self.cut = [rank in cut for rank in self.ranks]
        # where each rank's last op never ended (`Op.cut`): its index among its collectives
        self.unended = [
            len(p) - 1 if p and ops[rank][p[-1]].cut else -1
            for rank, p in zip(self.ranks, self.positions, strict=True)
        ]
        self.memo: dict[State, tuple[_Reading, _Reading | None]] = {}
        self.floor = [0] * len(self.ranks)  # where a rank's ops may start to be taken off

    def window(self, start: State, ops: int) -> None:
        """Let ops be taken off groups only in each rank's last `ops` before where the most
        likely run (every choice its first) stops: a fault stops the job near where it is."""
        self.floor = [1 << 62] * len(self.ranks)
        state = start
        while steps := self.children(state):
            state = steps[0].state
        self.floor = [max(0, at - ops) for at in state[0]]

    def _add_rank(self, rank: int, listed: Sequence[Op], groups: Mapping[str, Group]) -> None:
        default = default_group(groups, rank)
        positions: list[int] = []
        masks: list[int] = []
        names: list[dict[int, str]] = []
        chosen: list[str | None] = [None] * len(listed)
        for at, op in enumerate(listed):
            if op.op in P2P_OPS:
                chosen[at] = own_choice(op, groups, default)[0].name
                continue
            options = [n for n in op.candidates if n in self.class_of]
            if not options:
                options = [own_choice(op, groups, default)[0].name]
            named: dict[int, str] = {}
            for name in options:
                c = self.class_of[name]
                if c not in named or name == default.name:
                    named[c] = name
            positions.append(at)
            masks.append(sum(1 << c for c in named))
            names.append(named)
        self.positions.append(positions)
        self.masks.append(masks)
        self.names.append(names)
        self.keys.append([listed[at].signature for at in positions])
        self.p2p[rank] = chosen

    # -- moves ------------------------------------------------------------------------------

    def _head(self, i: int, at: int) -> int:
        """The classes rank `i`'s op `at` may go to (0 past its end)."""
        return self.masks[i][at] if at < self.count[i] else 0

    def _runs(self, c: int, at: Sequence[int], allow: Sequence[int]) -> int:
        """Whether group class `c` can run a collective now: 2 as one (every member's next op
        alike), 1 as a disagreement (the same op, other sizes), 0 not."""
        members = self.members[c]
        if not members or any(not (allow[i] >> c) & 1 for i in members):
            return 0
        if all(at[i] == self.unended[i] for i in members):
            return 0  # no member's op ended: it never passed, the job stopped in it
        keys = {self.keys[i][at[i]] for i in members}
        if len(keys) == 1:
            return 2
        return 1 if len({k[0] for k in keys}) == 1 else 0

    def _run(self, c: int, at: list[int], allow: list[int]) -> int:
        """Run a collective of class `c`: every member moves on; the ops passed."""
        for i in self.members[c]:
            at[i] += 1
            allow[i] = self._head(i, at[i])
        return len(self.members[c])

    def _forced(
        self,
        at: list[int],
        allow: list[int],
        passed: tuple[int, int],
        disagreed: set[int],
        fired: list[int],
    ) -> _Step:
        """Every move with no choice (each member's next op can go nowhere else), then the
        state reached."""
        moved = True
        while moved:
            moved = False
            for c, members in enumerate(self.members):
                if not members or any(allow[i] != 1 << c for i in members):
                    continue
                kind = self._runs(c, at, allow)
                if kind == 0:
                    continue
                gained = self._run(c, at, allow)
                if kind == 2:
                    passed = (passed[0] + gained, passed[1])
                else:
                    passed = (passed[0], passed[1] + gained)
                    disagreed.add(c)
                fired.append(c)
                moved = True
        state = (tuple(at), tuple(allow))
        return _Step(state, passed[0], passed[1], frozenset(disagreed), tuple(fired))

    def start(self) -> _Step:
        """The first state, after the moves with no choice."""
        at = [0] * len(self.ranks)
        allow = [self._head(i, 0) for i in range(len(self.ranks))]
        return self._forced(at, allow, (0, 0), set(), [])

    def children(self, state: State) -> list[_Step]:
        """The moves from a state where something can run: the most likely group runs its
        collective, or one member's op is taken off it. [] at the end."""
        at, allow = state
        runnable = [(self._runs(c, at, allow), c) for c in range(len(self.members))]
        ready = sorted((-kind, c) for kind, c in runnable if kind)
        if not ready:
            return []
        kind, c = -ready[0][0], ready[0][1]
        run_at, run_allow = list(at), list(allow)
        gained = self._run(c, run_at, run_allow)
        alike = (gained, 0) if kind == 2 else (0, gained)
        run = self._forced(run_at, run_allow, alike, set() if kind == 2 else {c}, [c])
        steps = [run]
        choosy = next(
            (i for i in self.members[c] if allow[i] != 1 << c and at[i] >= self.floor[i]), None
        )
        if choosy is not None:
            off_at, off_allow = list(at), list(allow)
            off_allow[choosy] &= ~(1 << c)
            steps.append(self._forced(off_at, off_allow, (0, 0), set(), []))
        return steps

    # -- bounds and ends ----------------------------------------------------------------------

    def bound(self, state: State) -> int:
        """At most how many more ops can pass alike: a rank's ops pass only on groups
        whose every member has that many ops left that may be on them."""
        at, allow = state
        runs = []
        for c, members in enumerate(self.members):
            runs.append(
                min(
                    (((allow[i] >> c) & 1) + self.fits[i][c][at[i] + 1])
                    if at[i] < self.count[i]
                    else 0
                    for i in members
                )
                if members
                else 0
            )
        total = 0
        for i in range(len(self.ranks)):
            if at[i] >= self.count[i]:
                continue
            total += min(
                self.count[i] - at[i], sum(runs[c] for c, m in enumerate(self.members) if i in m)
            )
        return total

    def ends(self, state: State) -> list[tuple[Score, Sig, dict[int, int]]]:
        """Where the job stopped: each rank's next op put on a group (`cover`), and an other
        cover, with the first group it picked left out, that leaves it stopped elsewhere."""
        at, allow = state
        ranks = range(len(self.ranks))
        waiting = {i: (allow[i], self.keys[i][at[i]]) for i in ranks if at[i] < self.count[i]}
        stopped = {i for i in ranks if self.cut[i] and at[i] >= self.count[i]}
        first, picked = self._cover(waiting, stopped, banned=-1)
        found = [first]
        if first:
            other, _ = self._cover(waiting, stopped, banned=picked)
            if other != first:
                found.append(other)
        return [((0, 0), _sig(cover), cover) for cover in found]

    def _cover(
        self, waiting: Mapping[int, tuple[int, tuple[str, int]]], stopped: set[int], banned: int
    ) -> tuple[dict[int, int], int]:
        """Each waiting op (rank index -> the classes it may be on, its op and size) put on a
        class, and the class picked first. Ranks stopped together wait together: each pick is
        the class and op that most of the ops left share, then the one with the fewest members
        absent from them that could be what they wait for (a member waiting elsewhere or cut
        off after its last op passed; one whose trace ended cleanly finished its program; one
        already put on that class waits there: not absent), then the larger class. The
        `banned` class is left out where an op has another."""
        left = {
            i: ((mask & ~(1 << banned)) or mask if banned >= 0 else mask, key)
            for i, (mask, key) in waiting.items()
        }
        loose = set(waiting) | stopped
        out: dict[int, int] = {}
        first = -1
        while left:
            best: tuple[int, int, int] | None = None
            party: list[int] = []
            for key in sorted({k for _, k in left.values()}):
                masks = [(i, m) for i, (m, k) in left.items() if k == key]
                for c in range(len(self.members)):
                    these = [i for i, m in masks if m >> c & 1]
                    if not these:
                        continue
                    absent = sum(
                        1
                        for i in self.members[c]
                        if i in loose and i not in these and out.get(i) != c
                    )
                    rank = (-len(these), absent, c)
                    if best is None or rank < best:
                        best, party = rank, these
            if best is None:  # no class at all: cannot happen (every op has one)
                break
            c = best[2]
            first = c if first < 0 else first
            for i in party:
                out[i] = c
                del left[i]
        return out, first

    # -- the search ------------------------------------------------------------------------

    def solve(self, root: State) -> tuple[_Reading, _Reading | None]:
        """The best reading from `root` and one as good in ops passed that leaves the job
        stopped elsewhere; each state once (memoized), iteratively (no recursion limit)."""
        stack = [(root, self._node(root))]
        sent: tuple[_Reading, _Reading | None] | None = None
        while stack:
            try:
                wanted = stack[-1][1].send(sent) if sent is not None else next(stack[-1][1])
            except StopIteration:
                done, _ = stack.pop()
                sent = self.memo[done]
                continue
            self.nodes += 1
            if self.nodes > self.budget:
                raise OverBudget
            stack.append((wanted, self._node(wanted)))
            sent = None
        return self.memo[root]

    def _node(self, state: State) -> Generator[State, tuple[_Reading, _Reading | None], None]:
        """One state: its children searched in order (each by yielding it and receiving its
        readings); stores its own best and other reading in the memo."""
        best: _Reading | None = None
        found: list[_Reading] = []
        steps = self.children(state)
        if not steps:
            for n, (score, sig, _) in enumerate(self.ends(state)):
                found.append(_Reading(score, sig, n))
            self.memo[state] = _pick(found)
            return
        ceiling = self.bound(state)
        for n, step in enumerate(steps):
            if best is not None:
                if step.passed + self.bound(step.state) < best.score[0]:
                    continue
                perfect = best.score == (ceiling, 0) and not best.sig[0]
                if perfect:
                    break
            if step.state in self.memo:
                got = self.memo[step.state]
            else:
                got = yield step.state
            for via, reading in enumerate(got):
                if reading is None:
                    continue
                score = reading.score
                mine = _Reading(
                    (score[0] + step.passed, score[1] + step.loose),
                    (reading.sig[0], reading.sig[1] | step.disagreed),
                    n,
                    via,
                )
                found.append(mine)
            best, _ = _pick(found)
        self.memo[state] = _pick(found)

    # -- the answer ------------------------------------------------------------------------

    def walk(self, root: _Step, which: int) -> dict[int, tuple[str | None, ...]]:
        """The groups of every rank's ops along the best reading (`which` 0) or the other."""
        out = {rank: list(self.p2p[rank]) for rank in self.ranks}
        at = [0] * len(self.ranks)

        def place(fired: Sequence[int]) -> None:
            for c in fired:
                for i in self.members[c]:
                    self._place(out, i, at[i], c)
                    at[i] += 1

        place(root.fired)
        state = root.state
        while True:
            reading = self.memo[state][which]
            if reading is None:
                raise ValueError("no such reading")  # the caller asks only for one it has
            steps = self.children(state)
            if not steps:
                for i, c in self.ends(state)[reading.choice][2].items():
                    self._place(out, i, at[i], c)
                return {rank: tuple(listed) for rank, listed in out.items()}
            step = steps[reading.choice]
            place(step.fired)
            state, which = step.state, reading.via

    def _place(self, out: dict[int, list[str | None]], i: int, at: int, c: int) -> None:
        names = self.names[i][at]
        out[self.ranks[i]][self.positions[i][at]] = names.get(c, next(iter(names.values())))


def _suffix(values: Sequence[int]) -> list[int]:
    """Sums of `values` from each index to the end (one more, 0, past the end)."""
    out = [0] * (len(values) + 2)
    for k in range(len(values) - 1, -1, -1):
        out[k] = out[k + 1] + values[k]
    return out


def _sig(cover: Mapping[int, int]) -> Sig:
    return frozenset(cover.items()), frozenset()


def _pick(found: Sequence[_Reading]) -> tuple[_Reading, _Reading | None]:
    """The best reading (the first of the best score: the search's order breaks ties) and the
    best of those that pass as many ops and leave the job elsewhere."""
    best = found[0]
    for reading in found[1:]:
        if reading.score > best.score:
            best = reading
    other: _Reading | None = None
    for reading in found:
        if reading.score[0] != best.score[0] or reading.sig == best.sig:
            continue
        if other is None or reading.score > other.score:
            other = reading
    return best, other


def search(
    ops: Mapping[int, Sequence[Op]],
    groups: Mapping[str, Group],
    cut: frozenset[int] = frozenset(),
    node_budget: int | None = None,
    op_budget: int | None = None,
    window: int | None = None,
) -> Settlement | None:
    """The assignment of every rank's ops to groups that lets the most ops pass (see the
    module docstring); None when the job is past the budget (the caller falls back).
    `cut`: the ranks whose trace was cut by a kill; budgets and window: the module's."""
    total = sum(1 for listed in ops.values() for op in listed if op.op not in P2P_OPS)
    if total > (OP_BUDGET if op_budget is None else op_budget):
        return None
    window = WINDOW if window is None else window
    found = _Search(ops, groups, cut, NODE_BUDGET if node_budget is None else node_budget)
    start = found.start()
    result: Settlement | None = None
    width = 1
    while width <= window:  # wider while the budget lasts: the answer of the widest searched
        found.window(start.state, width)
        found.memo = {}
        try:
            _, other = found.solve(start.state)
        except OverBudget:
            break
        chosen = found.walk(start, 0)
        alternative = found.walk(start, 1) if other is not None else None
        if alternative == chosen:
            alternative = None
        result = Settlement(chosen, alternative, True, found.nodes, total, width)
        if not any(found.floor):  # every op may be put elsewhere already
            break
        width *= 2
    return result


def settle(
    ops: Mapping[int, Sequence[Op]],
    groups: Mapping[str, Group],
    cut: frozenset[int] = frozenset(),
    node_budget: int | None = None,
    op_budget: int | None = None,
) -> Settlement:
    """The search's assignment (`search`), else, past its budget, the greedy one
    (`dispatcher.assign`, `searched` False)."""
    found = search(ops, groups, cut, node_budget, op_budget)
    if found is not None:
        return found
    greedy = assign(ops, groups)
    total = sum(1 for listed in ops.values() for op in listed if op.op not in P2P_OPS)
    return Settlement({r: tuple(g) for r, g in greedy.items()}, None, False, 0, total)
