"""The peer reference: what the other ranks do, asked by matching and by the diagnosis.

One module answers "what do the ranks like this one do here, and who left it?", with one set
of limits (below) and one notion of groups alike (`groups_alike`: the same description and
size). It holds two votes, because they answer two questions:

- **The value at one unit** (`deviants`, matching): ranks disagree at one collective (op,
  sizes, dtypes) with no majority. The *groups* alike (same description and size, the same
  ops before this seq id, the same pipeline stage first: `group_stage`) vote with one value
  each (`sibling_reference`), else the group's own history (`history_reference`).
- **The order of two ops** (`PeerOrder`, the diagnosis): ranks wait for each other in a cycle,
  or an idle rank's newest op is another group's. The *ranks* in the same role (the same
  local rank in groups alike, the same pipeline position: `PeerOrder.stage`, and the same
  recent path of collectives: `PeerOrder.same_path`) vote with the order they issued the two
  ops in (`PeerOrder.before`, `PeerOrder.order`), or say what came next by their own history
  (`PeerOrder.own_next`).

The two votes cannot be one: they count different things (groups with one value each
against ranks with one order each), stop at different limits, and fall back differently (a
group's history of values against a rank's history of ops). Their notions of a pipeline stage
differ too, and are kept as they were: matching's is a group's (the positions its members hold
in the groups that recorded send/recv, the world included), the diagnosis' a rank's (its
positions in every group but the world whose description is one that recorded send/recv).
They part on a pipeline whose group is the world and on pipeline groups whose buffers hold no
send/recv; neither the fault campaign nor the golden reports has such a job (taking
matching's notion for both leaves their answers as they are), so merging them would be a
change of behaviour nothing checks, left for a change that adds those jobs.

The values compared at a unit are read by `match.values` (by kind, so that a part of the job
can ask another for them: `match.elsewhere`).

It is over 600 lines because the two votes share their limits and their notion of groups
alike, which have one place: splitting the votes apart would give each a copy of them.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from ..model.arrays import distinct
from ..model.groups import GroupTable
from ..model.profile import Grouped
from ..model.ranks import by_count, counted
from ..model.records import Group, P2PKind, UnitKind
from ..model.table import EntryTable, rank_starts
from .context import MatchContext
from .records import CollectiveUnits, P2PPairs
from .values import OPS, Value, ValueKind, ValueOf, reader

I64 = npt.NDArray[np.int64]
_V = TypeVar("_V")

# -- limits: how many peers, groups and ops each vote consults ---------------------------------
# values at one unit (matching)
HISTORY_UNITS = 32  # earlier units of a group searched for a rank's own history
NEWEST_UNITS = 8  # a group's newest units compared with groups alike when a member is lost
MOST_VOTES = 16  # groups alike asked at most (at 16,384 ranks a group has thousands)
ASK_AT_ONCE = 64  # groups alike held elsewhere asked about in one round (`match.elsewhere`)
ALIKE_UNITS = 6  # earlier units another group must agree on to count as alike
# the order of ops (diagnosis)
REFERENCE_UNITS = 64  # groups alike consulted when ordering two ops
REFERENCE_RANKS = 256  # ranks consulted when ordering two ops
CYCLE_RANKS = 256  # ranks of a cycle, and edges of each, whose order is asked about
CYCLE_EDGES = 16
DUE_CANDIDATES = 8  # ops waited in, compared to find the one a rank was due to issue next
MIRRORS = 4  # ranks in the same role consulted for that
PATH_OPS = 24  # a rank's latest collectives another rank must share to be a reference
HISTORY_MATCH = 6  # latest ops matched against a rank's own history to say what comes next


def groups_alike(groups: GroupTable) -> dict[tuple[str, int], list[Group]]:
    """The groups of each (description, size), in the table's order: groups alike run the
    same program on other ranks (data-parallel replicas of a tensor-parallel group, say)."""
    alike: dict[tuple[str, int], list[Group]] = {}
    for group in groups.groups:
        alike.setdefault((group.desc, group.size), []).append(group)
    return alike


# -- the value at one unit (matching) ---------------------------------------------------------


def deviants(
    ctx: MatchContext, group: Group, seq: int, values: dict[int, Value], kind: ValueKind
) -> tuple[set[int], str]:
    """Ranks whose value deviates, and, when that is not a plain majority, what the judgement
    rests on. With no majority (a pair that disagrees), the groups of the same description and
    size at the same seq id vote, then each rank's own history in this group; the lower rank is
    never taken as the reference by default."""
    counts = Counter(values.values())
    ranked = counts.most_common()
    leaders = [v for v, c in ranked if c == ranked[0][1]]
    if len(leaders) == 1:
        return {r for r, v in values.items() if v != leaders[0]}, ""
    reference, basis = sibling_reference(ctx, group, seq, kind, leaders)
    if reference is None:
        reference, basis = history_reference(ctx, group, seq, values, reader(ctx.table, kind))
    if reference is None:
        return set(values), (
            " (no majority, and neither groups alike nor the ranks' own history tell which "
            "side deviates: all are named)"
        )
    return {r for r, v in values.items() if v != reference}, f" (no majority; {basis})"


def unit_span(ctx: MatchContext, uid: int, seq: int) -> tuple[int, int] | None:
    """Where unit (group uid, seq) lies in `coll_rows`."""
    if ctx.unit_at is None:
        ctx.unit_at = {}
        if ctx.unit_bounds is not None:
            uids, seqs, starts, ends = ctx.unit_bounds
            ctx.unit_at = {
                (u, q): (a, b)
                for u, q, a, b in zip(
                    uids.tolist(), seqs.tolist(), starts.tolist(), ends.tolist(), strict=True
                )
            }
    return ctx.unit_at.get((uid, seq))


def newest_seqs(t: EntryTable, groups: GroupTable, rows: I64) -> dict[tuple[int, int], int]:
    """(rank, group uid) → the newest collective sequence id the rank holds in that group,
    for every pair at once: `rows` are the collective rows sorted by (group, seq) (`coll_rows`,
    `CollectiveUnits.rows`)."""
    # A (rank, group) pair is of one group: its last row has its newest seq (of equal
    # indices, the last assignment stays).
    last = np.full(len(t.pair_rank), -1, dtype=np.int64)
    last[t.pair[rows]] = np.arange(len(rows))
    has = np.flatnonzero(last >= 0)
    newest: dict[tuple[int, int], int] = {}
    for key, value in zip(
        zip(t.pair_rank[has].tolist(), groups.pair_uid[has].tolist(), strict=True),
        t.coll_seq[rows[last[has]]].tolist(),
        strict=True,
    ):
        if value > newest.get(key, value - 1):  # a rank's pairs of one uid: the max
            newest[key] = value
    return newest


def uniform_value(ctx: MatchContext, uid: int, seq: int, value_of: ValueOf) -> Value | None:
    """The one value every rank of unit (uid, seq) has, or None."""
    span = unit_span(ctx, uid, seq)
    if span is None:
        return None
    found = set(value_of(ctx.coll_rows[span[0] : span[1]]).values())
    return found.pop() if len(found) == 1 else None


def sibling_votes(
    ctx: MatchContext, group: Group, seq: int, kind: ValueKind, same_stage: bool = False
) -> Counter[Value]:
    """What the groups like this one (same description and size, the same ops before this
    seq id) each hold at this seq id, when all their members agree: one vote per group.
    Groups of other pipeline stages vote only when none of this one does, and never with
    `same_stage`. Of the groups whose rows are elsewhere (`ctx.elsewhere`), the values are
    the answers given, else asked (`ASK_AT_ONCE` groups at a time)."""
    votes: Counter[Value] = Counter()
    ops, value_of = reader(ctx.table, OPS), reader(ctx.table, kind)
    mine = [
        (k, v)
        for k in range(seq - 1, max(seq - 1 - HISTORY_UNITS, -1), -1)
        if (v := uniform_value(ctx, group.uid, k, ops)) is not None
    ][:ALIKE_UNITS]
    if ctx.alike is None:
        ctx.alike = groups_alike(ctx.groups)
    # Groups of this pipeline stage vote; those of other stages only when none of this one
    # does (they share the first step's short history, not the program).
    stage = group_stage(ctx, group)
    elsewhere: Counter[Value] = Counter()
    away, asked = ctx.elsewhere, 0
    for other in ctx.alike.get((group.desc, group.size), []):
        if other.uid == group.uid:
            continue
        if away is not None and not away.holds(other.uid):
            history = [(other.uid, k, OPS) for k, _ in mine]
            if not away.knows([*history, (other.uid, seq, kind)]):
                asked += 1
                if asked >= ASK_AT_ONCE:
                    break
                continue
            alike_before = all(
                away.answers[q] == v for q, (_, v) in zip(history, mine, strict=True)
            )
            value = away.answers[(other.uid, seq, kind)]
        else:
            # Alike only if it issued the same ops before this seq id: groups of different
            # pipeline stages share a description but not a program.
            alike_before = all(uniform_value(ctx, other.uid, k, ops) == v for k, v in mine)
            value = uniform_value(ctx, other.uid, seq, value_of) if alike_before else None
        if not alike_before:
            continue
        if value is not None:
            (votes if group_stage(ctx, other) == stage else elsewhere)[value] += 1
            if votes.total() >= MOST_VOTES:
                break
    return votes if same_stage else votes or elsewhere


def group_stage(ctx: MatchContext, group: Group) -> frozenset[tuple[str, int, int]]:
    """The pipeline position of a group's members: (desc, size, local rank) in each group
    that carries send/recv. Groups of different stages share a description and often a short
    history (the first step's), but not a program."""
    return frozenset(p for r in group.ranks for p in ctx.stages.get(r, ()))


def pipeline_stages(shape: Grouped, groups: GroupTable) -> dict[int, set[tuple[str, int, int]]]:
    """Each rank's (desc, size, local rank) in every group that carries send/recv: what
    `group_stage` reads (`MatchContext.stages`), over the whole job (from the ranks' profiles:
    the groups some rank sends or receives in)."""
    stages: dict[int, set[tuple[str, int, int]]] = {}
    for uid in shape.p2p_uids().tolist():
        pipe = groups.groups[int(uid)]
        for local, rank in enumerate(pipe.ranks):
            stages.setdefault(rank, set()).add((pipe.desc, pipe.size, local))
    return stages


def sibling_reference(
    ctx: MatchContext, group: Group, seq: int, kind: ValueKind, leaders: list[Value]
) -> tuple[Value | None, str]:
    """The value that groups like this one (same description and size) agree on at this seq
    id, if it is one of the tied values."""
    votes = sibling_votes(ctx, group, seq, kind)
    ranked = [(v, c) for v, c in votes.most_common() if v in leaders]
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None, ""
    value, count = ranked[0]
    return value, (
        f"{counted(count, 'other group')} {group.desc!r} of {group.size} "
        f"{by_count(count, 'agrees', 'agree')} at #{seq}"
    )


def history_reference(
    ctx: MatchContext, group: Group, seq: int, values: dict[int, Value], value_of: ValueOf
) -> tuple[Value | None, str]:
    """The tied value that equals what this group agreed on the last time it issued the same
    op before this seq id (values carry the op name, so sizes of an all_reduce are compared
    with an earlier all_reduce's): a rank that changed what it sends deviates. Every tied rank
    must have taken part then, and every rank then agreed; ranks that took part then but hold
    no value now (they died in this op, or it left their ring buffers) do not stop it."""
    for earlier in range(seq - 1, max(seq - 1 - HISTORY_UNITS, -1), -1):
        span = unit_span(ctx, group.uid, earlier)
        if span is None:
            continue
        before = value_of(ctx.coll_rows[span[0] : span[1]])
        if not set(values) <= set(before) or len(set(before.values())) != 1:
            continue
        value = next(iter(before.values()))
        if value in values.values():
            return value, f"this group used it at #{earlier}, the same op"
    return None, ""


# -- the order of ops (diagnosis) -------------------------------------------------------------


class Replay(Generic[_V]):
    """An iterator's items, each made once when first asked for, read as often as asked."""

    def __init__(self, items: Iterator[_V]) -> None:
        self._items = items
        self._made: list[_V] = []

    def __iter__(self) -> Iterator[_V]:
        at = 0
        while True:
            if at == len(self._made):
                made = next(self._items, _DONE)
                if made is _DONE:
                    return
                self._made.append(made)  # type: ignore[arg-type]
            yield self._made[at]
            at += 1


_DONE = object()


Role = tuple[tuple[str, int, int], ...]
"""A rank's role: (desc, size, local rank) of groups it is in (see `PeerOrder.roles`)."""


class PeerOrder:
    """The order the other ranks follow: which of two ops ranks in one's role issue first, who
    those ranks are, and what a rank's own history says comes next. Answers are cached: one
    `PeerOrder` serves one diagnosis."""

    def __init__(
        self, t: EntryTable, groups: GroupTable, units: CollectiveUnits, pairs: P2PPairs
    ) -> None:
        self.t, self.groups, self.units, self.pairs = t, groups, units, pairs
        self._orders: dict[tuple[object, ...], int] = {}
        self._role: dict[int, Role] | None = None
        self._starts: dict[int, tuple[int, int]] | None = None
        # ranks whose whole program was read (`rows_of`): a diagnosis made on part of the
        # table asks for them whole (`diagnosis.frontier`)
        self.programs_read: set[int] = set()
        self._paths: dict[int, I64] = {}
        self._unit_steps: I64 | None = None  # each unit's step (`path`), by unit
        self._alike: dict[tuple[str, int], list[Group]] | None = None
        self._newest: dict[tuple[int, int], int] | None = None

    def alike(self, group: Group) -> list[Group]:
        """The groups alike `group` (itself included), in the table's order."""
        if self._alike is None:
            self._alike = groups_alike(self.groups)
        return self._alike.get((group.desc, group.size), [])

    def rows_of(self, rank: int) -> range:
        """A rank's rows of the entry table (empty for a rank with no dump)."""
        self.programs_read.add(rank)
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

    def op_key(self, row: int) -> tuple[int, int] | None:
        """(group uid, collective seq id) of a collective row; None for send/recv."""
        if int(self.units.entry_unit[row]) < 0:
            return None
        return int(self.groups.entry_group[row]), int(self.t.coll_seq[row])

    def order(self, a: tuple[int, int], b: tuple[int, int], exclude: set[int], like: int) -> int:
        """-1 when most reference ranks issue op `a` before op `b`, +1 when after, 0 when no
        reference rank issued both (in the same groups, or groups alike at the same sequence
        ids). References are ranks outside `exclude` in the same pipeline position as `like`:
        stages interleave their collectives differently."""
        key = (a, b, frozenset(exclude), self.stage(like))
        found = self._orders.get(key)
        if found is None:
            found = self._orders[key] = self._order(a, b, exclude, like)
        return found

    def _order(self, a: tuple[int, int], b: tuple[int, int], exclude: set[int], like: int) -> int:
        first_a = self.first_rows(a)
        first_b = self.first_rows(b)
        stage = self.stage(like)
        votes = Counter[int]()
        shared = sorted(set(first_a) & set(first_b) - exclude)
        alike = [r for r in shared if self.stage(r) == stage and self.same_path(like, r)]
        if not alike:
            # No rank in the same pipeline position holds both: ranks of other positions do
            # when their collectives run in the same order as `like`'s (step-level ops).
            alike = [r for r in shared if self.same_path(like, r)]
        for rank in alike[:REFERENCE_RANKS]:
            votes[-1 if first_a[rank] < first_b[rank] else 1] += 1
        if votes[-1] == votes[1]:
            return 0
        return -1 if votes[-1] > votes[1] else 1

    def path(self, rank: int) -> I64:
        """A rank's collectives in order, as steps: one integer per distinct (group
        description, seq id), so that ranks of groups alike share them."""
        found = self._paths.get(rank)
        if found is None:
            t, units = self.t, self.units
            rows = self.rows_of(rank)
            unit = units.entry_unit[rows.start : rows.stop]
            kept = unit[(unit >= 0) & (t.unit[rows.start : rows.stop] != UnitKind.BLOCK_MEMBER)]
            found = self._paths[rank] = self._steps()[kept]
        return found

    def _steps(self) -> I64:
        """Each unit's step: the dense index of its (group description, seq id), found once
        by one sort of the units (comparing ranks' paths as arrays of these, not as lists of
        tuples, is what makes asking about hundreds of ranks cheap)."""
        if self._unit_steps is None:
            units = self.units
            code: dict[str, int] = {}
            desc = np.array(
                [code.setdefault(g.desc, len(code)) for g in self.groups.groups], dtype=np.int64
            )
            unit_desc = desc[units.group] if len(units.group) else np.zeros(0, np.int64)
            order = np.lexsort((units.seq, unit_desc))
            change = np.ones(len(order), dtype=bool)
            sorted_desc, sorted_seq = unit_desc[order], units.seq[order]
            change[1:] = (sorted_desc[1:] != sorted_desc[:-1]) | (sorted_seq[1:] != sorted_seq[:-1])
            self._unit_steps = np.empty(len(order), dtype=np.int64)
            self._unit_steps[order] = np.cumsum(change) - 1
        return self._unit_steps

    def same_path(self, rank: int, other: int) -> bool:
        """Whether `other` issued the collectives of `rank`'s latest ones that both hold in the
        same order: it follows the same program (ranks that skipped an op, or got further,
        still do). Pipeline stages interleave their groups' collectives differently; where no
        send/recv is recorded (gloo), this is what tells them apart."""
        mine = self.path(rank)[-PATH_OPS:]
        theirs = self.path(other)
        # Where each of `mine` stands in `theirs` (its last place, should one repeat).
        hit = np.flatnonzero(np.isin(theirs, mine))
        where = dict(zip(theirs[hit].tolist(), hit.tolist(), strict=True))
        seen = [where[step] for step in mine.tolist() if step in where]
        if len(seen) < min(len(mine), 4):
            return not len(mine)  # too little in common to tell (a rank with no dump matches all)
        return all(a < b for a, b in itertools.pairwise(seen))

    def stage(self, rank: int) -> Role:
        """A rank's position in the groups that carry send/recv (its pipeline stage)."""
        return tuple(p for p in self.roles().get(rank, ()) if p[2] >= 0)

    def share(self, key: tuple[int, int]) -> float:
        """Share of the op's group members that issued it."""
        units = self.units
        unit = units.find(*key)
        if unit is None:
            return 0.0
        return int(units.ranks_present[unit]) / max(int(units.ranks_expected[unit]), 1)

    def first_rows(self, key: tuple[int, int]) -> dict[int, int]:
        """Each rank's row of op `key` (group uid, seq id) or of the same seq id of a group
        alike (same description and size): what ranks in the same role issued there."""
        uid, seq = key
        siblings = [g.uid for g in self.alike(self.groups.groups[uid]) if g.uid != uid]
        alike = [uid, *siblings[:REFERENCE_UNITS]]
        out: dict[int, int] = {}
        units = self.units
        for other in alike:
            unit = units.find(other, seq)
            if unit is None:
                continue
            rows = units.unit_rows(unit)
            for rank, row in zip(self.t.rank[rows].tolist(), rows.tolist(), strict=True):
                out.setdefault(rank, row)
        return out

    def roles(self) -> dict[int, Role]:
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

    def mirrors(self, rank: int, descs: set[str], first: Collection[int] = ()) -> Iterator[int]:
        """Loaded ranks in the same role as `rank` in the groups of these descriptions, in
        rank order (those in `first` before the others), each found when it is asked for:
        telling a mirror reads its whole program (`same_path`), and a caller that has heard
        enough of them stops (a job of 65,536 ranks has thousands in each role)."""
        roles = self.roles()

        def role(r: int) -> Role:
            return tuple(p for p in roles.get(r, ()) if p[0] in descs or p[2] >= 0)

        mine = role(rank)
        loaded = set(self.groups.loaded_ranks) - {rank}
        alike = [r for r in sorted(roles) if r in loaded and role(r) == mine]
        if first:
            alike.sort(key=lambda r: r not in first)  # stable: rank order within each
        return (r for r in alike if self.same_path(rank, r))

    def mirror_group(self, group: Group, mirror: int) -> Group | None:
        """The group alike `group` that `mirror` is in (the same one if it is a member)."""
        if mirror in group.ranks:
            return group
        return next((other for other in self.alike(group) if mirror in other.ranks), None)

    def counterpart_on(self, rank: int, mirror: int, row: int) -> int | None:
        """The row on `mirror` (a rank in `rank`'s role) of the op at `row` as `rank` sees it:
        its own op, its part of a collective, or its half of a send/recv posted by another."""
        t, units, pairs = self.t, self.units, self.pairs
        group = self.groups.groups[int(self.groups.entry_group[row])]
        alike = self.mirror_group(group, mirror)
        if alike is None or rank not in group.ranks:
            return None
        if int(units.entry_unit[row]) >= 0:
            unit = units.find(alike.uid, int(t.coll_seq[row]))
            if unit is None:
                return None
            rows = units.unit_rows(unit)
            mine = rows[t.rank[rows] == mirror]
            return int(mine[0]) if len(mine) else None
        owner = int(t.rank[row])
        if owner not in group.ranks:
            return None
        # The owner's mirror in the mirror group, its op at the same p2p seq id; when the op is
        # another rank's, the mirror's half of that pair.
        their = alike.ranks[group.ranks.index(owner)]
        for other in self.rows_of(their):
            if (
                int(self.groups.entry_group[other]) == alike.uid
                and int(t.p2p_seq[other]) == int(t.p2p_seq[row])
                and int(t.p2p_kind[other]) == int(t.p2p_kind[row])
            ):
                if owner == rank:
                    return other
                pair = int(pairs.entry_pair[other])
                if pair < 0:
                    return None
                send, recv = int(pairs.send_row[pair]), int(pairs.recv_row[pair])
                half = recv if send == other else send
                return half if int(t.rank[half]) == mirror else None
        return None

    def before(self, a: int, b: int, owner: int, exclude: set[int]) -> int:
        """-1 when the ranks in `owner`'s role (its pipeline position, groups alike) issue
        the op at row `a` (as `owner` sees it) before the op at row `b`, +1 after, 0 when none
        of them shows it."""
        descs = {self.groups.groups[int(self.groups.entry_group[r])].desc for r in (a, b)}
        votes = Counter[int]()
        for mirror in self.mirrors(owner, descs):
            if mirror in exclude:
                continue
            ra = self.counterpart_on(owner, mirror, a)
            rb = self.counterpart_on(owner, mirror, b)
            if ra is None or rb is None or ra == rb:
                continue
            votes[-1 if ra < rb else 1] += 1
            if sum(votes.values()) >= REFERENCE_RANKS // 16:
                break
        if votes[-1] == votes[1]:
            return 0
        return -1 if votes[-1] > votes[1] else 1

    def first_in_program(self, rank: int, rows: list[int]) -> int | None:
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
        mirrors = Replay(self.mirrors(rank, descs, peers))
        together = self._co_members_first(rows, mirrors)
        if together is not None:
            return together
        consulted = 0
        # Mirrors that hold every one of the ops show their order; those that hold only some
        # vote only when none holds them all (groups alike whose sequence ids drift apart,
        # independent subgroups, hold another op at the same id).
        partial: Counter[int] = Counter()
        for mirror in mirrors:
            if consulted >= MIRRORS:
                break
            where = {}
            for i, row in enumerate(rows):
                found = self.counterpart_on(rank, mirror, row)
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

    def _co_members_first(self, rows: list[int], mirrors: Iterable[int]) -> int | None:
        """Index, in `rows` (collectives), of the op that the mirrors in every one of their
        groups issue first: their own sequence ids, not those of groups alike (which drift
        apart where subgroups run programs of their own). A co-member that issued some of the
        ops and has not reached the others (its newest sequence id in their group is below
        theirs) shows the ones it issued come first. None when no co-member tells, or they
        disagree evenly."""
        keys = [self.op_key(row) for row in rows]
        if any(key is None for key in keys):
            return None
        uids = {key[0] for key in keys if key is not None}
        members = [set(self.groups.groups[uid].ranks) for uid in uids]
        votes: Counter[int] = Counter()
        for mirror in (r for r in mirrors if all(r in m for m in members)):
            if sum(votes.values()) >= MIRRORS:
                break
            held: dict[int, int] = {}
            reached = True
            for i, key in enumerate(keys):
                assert key is not None
                unit = self.units.find(*key)
                mine = None if unit is None else self.units.unit_rows(unit)
                if mine is not None:
                    mine = mine[self.t.rank[mine] == mirror]
                if mine is not None and len(mine):
                    held[i] = int(mine[0])
                elif self._newest_seqs().get((mirror, key[0]), -1) >= key[1]:
                    reached = False  # gone from its buffer, or skipped: it does not tell
            if held and reached:
                votes[min(held, key=lambda i: held[i])] += 1
        ranked = votes.most_common()
        if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
            return None
        return ranked[0][0]

    def _newest_seqs(self) -> dict[tuple[int, int], int]:
        """Each (rank, group uid)'s newest collective sequence id (`newest_seqs`, once)."""
        if self._newest is None:
            self._newest = newest_seqs(self.t, self.groups, self.units.rows)
        return self._newest

    def own_next(self, rank: int, rows: list[int]) -> int | None:
        """Index, in `rows`, of the op `rank` would issue next by its own history: what it did
        right after the previous time it did what it did last (a pipeline stage repeats its
        micro-batch pattern). None when its history does not say."""
        t = self.t
        own = [
            r
            for r in self.rows_of(rank)
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
            while length <= j and length < HISTORY_MATCH and sigs[j - length] == sigs[-1 - length]:
                length += 1
            if length > best_len:
                best, best_len = j, length
        if best < 0:
            return None
        following = sigs[best + 1]
        hits = [i for i, r in enumerate(rows) if theirs(r) == following]
        return hits[0] if len(hits) == 1 else None
