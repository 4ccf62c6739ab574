"""Rebuild the job's process groups and who belongs to each, from every rank's view.

A group is its name *and* its member set: split groups may share a name. Members come from each
rank's `pg_config` when it is usable; gloo dumps key every group by `''` with ranks `'[]'`, so
for those the membership is rebuilt from the entries (the ranks whose dumps carry the group),
and a group described as `default_pg` spans the whole job. Ranks that disagree about a group are
reported as `group_conflict` findings rather than stopping the run.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .arrays import distinct
from .dump import RankDump
from .numbers import name_order
from .profile import Grouped, Profiles, profiles_of
from .ranks import compact, label
from .records import Finding, FindingKind, Group, MembershipSource, UnreadableDump
from .table import EntryTable

I32 = npt.NDArray[np.int32]

WORLD_DESCS = frozenset({"default_pg"})


@dataclass(frozen=True)
class GroupTable:
    """The job's process groups, each a name and a member set, and the group of every table row."""

    groups: tuple[Group, ...]
    entry_group: npt.NDArray[np.int32]  # group uid of every row of the EntryTable
    loaded_ranks: tuple[int, ...]
    missing_ranks: tuple[int, ...]
    world_size: int
    conflicts: tuple[Finding, ...]
    pair_uid: npt.NDArray[np.int32]  # group uid of each (rank, group) pair of the EntryTable

    def members(self, uid: int) -> tuple[int, ...]:
        """The global ranks of group `uid`, ascending."""
        return self.groups[uid].ranks


class _MemberSets:
    """Distinct member sets, each with a small id. Ranks loaded together share one tuple per
    distinct set (see `load.loading`), so a set is looked up by identity first: hashing a
    16,384-member tuple for each of 16,384 ranks would cost more than the rest of this stage."""

    def __init__(self) -> None:
        self.sets: list[tuple[int, ...]] = []
        self._by_value: dict[tuple[int, ...], int] = {}
        self._by_identity: dict[int, tuple[tuple[int, ...], int]] = {}

    def id_of(self, members: tuple[int, ...]) -> int:
        hit = self._by_identity.get(id(members))
        if hit is not None and hit[0] is members:
            return hit[1]
        found = self._by_value.setdefault(members, len(self.sets))
        if found == len(self.sets):
            self.sets.append(members)
        self._by_identity[id(members)] = (members, found)  # holds it, so the id stays its own
        return found


def _holds(members: tuple[int, ...], rank: int) -> bool:
    """Whether a sorted member tuple holds `rank` (by bisection: a world of 16,384 members is
    asked about each rank)."""
    at = bisect.bisect_left(members, rank)
    return at < len(members) and members[at] == rank


def build_groups(
    dumps: Sequence[RankDump],
    table: EntryTable,
    unreadable: Sequence[UnreadableDump],
    profiles: Profiles | None = None,
) -> GroupTable:
    """Rebuild the process groups and their members from every rank's view of them; the size
    rules read the ranks' profiles (`model.profile`: made from the table when not given)."""
    loaded = tuple(sorted(d.rank for d in dumps))
    sets = _MemberSets()
    claimed: dict[tuple[int, str], int] = {}  # (rank, group name) → member set id
    for dump in dumps:
        for name, claim in dump.claims.items():
            claimed[(dump.rank, name)] = sets.id_of(claim.ranks)
    known = set(loaded)
    for members in sets.sets:
        known.update(members)
    # An unreadable file's rank (from its name alone) counts only within the job the readable
    # files show: a junk `rank_8` beside an 8-rank job, or a stray `rank_1048575`, is listed
    # as unreadable, never made a member (nor a culprit) nor the job's size.
    shown = max(known, default=-1)
    known.update(
        u.rank for u in unreadable if u.rank is not None and (u.rank <= shown or u.job_named)
    )
    world_size = max(known) + 1 if known else 0

    # Which group names each rank's entries use, and with which descriptions.
    pair_order = np.lexsort((table.pair_group, table.pair_rank))  # by rank, then group code
    pairs = list(
        zip(
            pair_order.tolist(),
            table.pair_rank[pair_order].tolist(),
            table.pair_group[pair_order].tolist(),
            strict=True,
        )
    )
    entry_names: dict[int, dict[str, Counter[str]]] = defaultdict(dict)
    for _, rank, code in pairs:
        name, desc = table.group_names[code]
        names = entry_names[rank]
        counts = names.get(name)  # not `setdefault(name, Counter())`: a Counter made per pair
        if counts is None:
            counts = names[name] = Counter()
        counts[desc] += 1

    claims_by_rank = {d.rank: d.claims for d in dumps}
    # Groups are keyed by (name, member set id) from here on.
    members_of: dict[tuple[int, str], int] = dict(claimed)
    source: dict[tuple[str, int], MembershipSource] = {}
    descs: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    config_descs: dict[tuple[str, int], dict[int, str]] = defaultdict(dict)
    for rank, claims in claims_by_rank.items():
        for name, claim in claims.items():
            key = (name, claimed[(rank, name)])
            source[key] = MembershipSource.PG_CONFIG
            config_descs[key][rank] = claim.desc

    # Names seen only in entries: adopt a member set that another rank's config gives and that
    # contains this rank, else rebuild from the entries of all ranks. Each name's config sets,
    # its carriers' set and the world's set are found once (not once per rank: a job of many
    # groups, or of many ranks, would cost their square).
    carriers: dict[str, set[int]] = defaultdict(set)
    for rank, names in entry_names.items():
        for name in names:
            carriers[name].add(rank)
    configured: dict[str, list[int]] = defaultdict(list)  # name → its pg_config member sets
    for name, set_id in source:
        configured[name].append(set_id)
    carried: dict[str, int] = {}  # name → the set of the ranks whose entries carry it
    world: list[int] = []  # the world's set, once made
    for rank, names in entry_names.items():
        for name, desc_counts in names.items():
            if (rank, name) in members_of:
                continue
            adopted = [s for s in configured.get(name, ()) if _holds(sets.sets[s], rank)]
            if len(adopted) == 1:
                set_id = adopted[0]
            elif set(desc_counts) & WORLD_DESCS:
                if not world:
                    world.append(sets.id_of(tuple(range(world_size))))
                set_id = world[0]
                source.setdefault((name, set_id), MembershipSource.WORLD)
            else:
                if name not in carried:
                    carried[name] = sets.id_of(tuple(sorted(carriers[name])))
                set_id = carried[name]
                source.setdefault((name, set_id), MembershipSource.ENTRIES)
            members_of[(rank, name)] = set_id
    for (rank, name), set_id in members_of.items():
        counted_descs = entry_names.get(rank, {}).get(name)
        if counted_descs is not None:
            for desc, count in counted_descs.items():
                descs[(name, set_id)][desc] += count

    keys = sorted(source, key=lambda k: (name_order(k[0]), sets.sets[k[1]]))
    uid_of = {key: uid for uid, key in enumerate(keys)}
    groups = []
    for uid, key in enumerate(keys):
        name, set_id = key
        by_rank = config_descs.get(key)
        if by_rank:
            desc = Counter(by_rank.values()).most_common(1)[0][0]
        elif descs[key]:
            desc = descs[key].most_common(1)[0][0]
        else:
            desc = ""
        groups.append(Group(uid, name, desc, sets.sets[set_id], source[key]))

    # (rank, group) pairs and entry rows → group uid.
    pair_uid = np.empty(len(pairs), dtype=np.int32)
    for i, rank, code in pairs:
        name = table.group_names[code][0]
        pair_uid[i] = uid_of[(name, members_of[(rank, name)])]
    entry_group = pair_uid[table.pair] if table.n else np.empty(0, dtype=np.int32)

    within = {u.rank for u in unreadable if u.rank is not None and u.rank < world_size}
    if profiles is None:
        profiles = profiles_of(table)
    told = _sizes_by_rules(profiles, profile_uids(table, pair_uid, profiles))
    groups, world_size = _complete_by_size_rules(
        groups, told, set(loaded) | within, world_size, len(loaded)
    )
    unreadable_ranks = {u.rank for u in unreadable if u.rank is not None and u.rank < world_size}
    all_members: set[int] = set()
    for g in groups:
        all_members.update(g.ranks)
    missing = tuple(sorted(all_members - set(loaded) - unreadable_ranks))
    unviewed = {(d.rank, name) for d in dumps for name in d.claims_set_aside}
    conflicts = _conflicts(groups, set(loaded), claimed, sets.sets, config_descs, uid_of, unviewed)
    return GroupTable(
        tuple(groups),
        entry_group,
        loaded,
        missing,
        world_size,
        tuple(conflicts),
        pair_uid,
    )


def profile_uids(table: EntryTable, pair_uid: I32, profiles: Profiles) -> I32:
    """The group uid of each (rank, group) pair of `profiles`, as the table's pair of the same
    rank and group has it (`pair_uid`, by the table's pairs); -1 for a pair the table lacks."""
    code = {name: c for c, name in enumerate(table.group_names)}
    by_name = np.array([code.get(name, -1) for name in profiles.names] or [-1], dtype=np.int64)
    width = len(table.group_names) + 1
    mine = profiles.pair_rank.astype(np.int64) * width + by_name[profiles.pair_group] + 1
    theirs = table.pair_rank.astype(np.int64) * width + table.pair_group + 1
    order = np.argsort(theirs, kind="stable")
    at = np.searchsorted(theirs, mine, sorter=order)
    at = np.minimum(at, max(len(theirs) - 1, 0))
    out = np.full(len(mine), -1, dtype=np.int32)
    if len(theirs):
        hit = theirs[order[at]] == mine
        out[hit] = pair_uid[order[at[hit]]]
    return out


def grouped(table: EntryTable, groups: GroupTable, profiles: Profiles) -> Grouped:
    """`profiles` with each pair's group uid."""
    return Grouped(profiles, profile_uids(table, groups.pair_uid, profiles))


def _sizes_by_rules(profiles: Profiles, uid: I32) -> dict[int, tuple[int, int]]:
    """Group size per group uid, where its all_gather or reduce_scatter entries tell it
    (`model.profile`: the output of an all_gather is its input times the group size, the input
    of a reduce_scatter its output times the group size), and how many ranks' entries tell
    that size. The size most rows tell wins. `uid`: each profile pair's group."""
    pair = profiles.told_pair
    if not len(pair):
        return {}
    pair_uid = uid[pair].astype(np.int64)
    known = pair_uid >= 0
    keys = pair_uid[known] * (1 << 32) + profiles.told_size[known]
    rows = profiles.told_rows[known]
    values, at = np.unique(keys, return_inverse=True)
    counts = np.bincount(at.reshape(-1), weights=rows, minlength=len(values)).astype(np.int64)
    # Ranks behind each (group, size): the distinct (key, rank) pairs (a rank's two pairs of
    # one group, its name under two descriptions, tell it once), counted by key.
    ranks = profiles.pair_rank[pair[known]].astype(np.int64)
    span = int(ranks.max()) + 1 if len(ranks) else 1
    voters = np.bincount(distinct(at.reshape(-1) * span + ranks) // span, minlength=len(values))
    best: dict[int, tuple[int, int, int]] = {}
    for key, count, by in zip(values.tolist(), counts.tolist(), voters.tolist(), strict=True):
        uid_, size = divmod(key, 1 << 32)
        if size >= 2 and count > best.get(uid_, (0, 0, 0))[1]:
            best[uid_] = (size, count, by)
    return {u: (size, by) for u, (size, _, by) in best.items()}


def _believed(told: dict[int, tuple[int, int]], world_size: int, loaded: int) -> dict[int, int]:
    """The sizes the rules tell that the rest of the job supports: a size two or more ranks'
    entries tell, or one within the job the files, the claims and those sizes show. One
    rank's entries alone must not grow the job (all_gathers whose output is a million times
    their input: a world of a million ranks); with one rank loaded, nothing compares."""
    shown = max([world_size, *(size for size, by in told.values() if by >= 2)])
    return {uid: size for uid, (size, by) in told.items() if by >= 2 or size <= shown or loaded < 2}


def _complete_by_size_rules(
    groups: list[Group],
    told: dict[int, tuple[int, int]],
    known: set[int],
    world_size: int,
    loaded: int,
) -> tuple[list[Group], int]:
    """Add the members with no dump that a group rebuilt from the entries must have, by the
    size rules: a gloo job whose rank 15 crashed has a world of 16 and a tensor-parallel group
    {12, 13, 14, 15}, not {12, 13, 14}. Without a size rule, groups with the same description
    tell the size. A group's missing members are the ranks without a dump that extend its
    ranks' stride (the stride of groups alike when it has one rank); groups alike that each
    lack the ranks no group of theirs holds are grown to take them (`_tile`). `loaded`: how
    many ranks dumped (`_believed`)."""
    sizes = _believed(told, world_size, loaded)
    alike = _Alike(groups)
    out: list[Group] = []
    for g in groups:
        if g.source == MembershipSource.ENTRIES:
            size = sizes.get(g.uid, 0) or alike.size_of_others(g)
            filled = _fill_gaps(g, alike)
            if filled != g.ranks:
                g = Group(g.uid, g.name, g.desc, filled, MembershipSource.INFERRED)
            found = _extend(g, size, alike, world_size) if size > g.size else None
            if found is not None:
                g = Group(g.uid, g.name, g.desc, found, MembershipSource.INFERRED)
        out.append(g)
    out = _tile(out, known, world_size, sizes)
    # The world holds every group: at least as big as the biggest group the size rules reveal,
    # and holding every member found (a job whose highest rank left no dump is one rank bigger
    # than its dumps show).
    highest = max((r for g in out for r in g.ranks), default=-1)
    world_size = max([world_size, highest + 1, *sizes.values()])
    # A group every rank that dumped carries spans the job: the ranks without a dump too.
    everyone = {r for r in known if r < world_size}
    missing = set(range(world_size)) - known
    if missing:
        out = [
            Group(g.uid, g.name, g.desc, tuple(range(world_size)), MembershipSource.INFERRED)
            if g.source == MembershipSource.ENTRIES and set(g.ranks) >= everyone
            else g
            for g in out
        ]
    return [
        Group(g.uid, g.name, g.desc, tuple(range(world_size)), g.source)
        if g.source == MembershipSource.WORLD and len(g.ranks) != world_size
        else g
        for g in out
    ], world_size


def _tile(
    groups: list[Group], known: set[int], world_size: int, sizes: dict[int, int]
) -> list[Group]:
    """Groups alike rebuilt from the entries that leave out the same number of ranks each:
    when every rank that dumped belongs to one group of a description but a few ranks are in
    none (they stopped before their first op of that kind: data-parallel groups {0, 8, .., 48}
    and {1, 9, .., 49} when ranks 56-63 hang in their first tensor-parallel op), and growing
    each group along its stride takes exactly those ranks, one way only, the groups are that
    (unless the size rules give a group another size)."""
    index = _Alike(groups)
    grown: dict[int, Group] = {}
    for desc, alike in index.by_desc.items():
        if desc in WORLD_DESCS:
            continue
        if not all(g.source == MembershipSource.ENTRIES for g in alike):
            continue
        covered = [r for g in alike for r in g.ranks]
        left = {r for r in known if r < world_size} - set(covered)
        if len(covered) != len(set(covered)) or not left:
            continue
        # Alike groups have one size: the biggest one's, or as many more as the left ranks
        # (then less than twice the smallest: a group does not grow out of nothing).
        size = max(g.size for g in alike)
        if sum(size - g.size for g in alike) != len(left):
            size += len(left) // len(alike)
            if 2 * min(g.size for g in alike) <= size:
                continue
        if (
            len(alike) < 2  # one group: nothing shows how the ranks tile
            or sum(size - g.size for g in alike) != len(left)
            or any(sizes.get(g.uid, size) != size for g in alike)  # the size rules say no
        ):
            continue
        found = _cover(alike, size, left, index)
        if found is not None:
            for g in alike:
                grown[g.uid] = Group(g.uid, g.name, g.desc, found[g.uid], MembershipSource.INFERRED)
    return [grown.get(g.uid, g) for g in groups]


def _cover(
    alike: list[Group], size: int, left: set[int], index: _Alike
) -> dict[int, tuple[int, ...]] | None:
    """Each group grown to `size` ranks along its stride so that together they take exactly
    the ranks `left`: a group with one way to grow takes it, which can leave one way to its
    neighbours, and so on. None unless that settles every group."""
    options = {
        g.uid: [w for w in _windows(g, size, index)[1] if set(w) - set(g.ranks) <= left]
        for g in alike
    }
    chosen: dict[int, tuple[int, ...]] = {}
    used: set[int] = set()
    while len(chosen) < len(alike):
        settled = False
        for g in alike:
            if g.uid in chosen:
                continue
            ways = [w for w in options[g.uid] if not (set(w) - set(g.ranks)) & used]
            if not ways:
                return None
            if len(ways) == 1:
                chosen[g.uid] = tuple(ways[0])
                used |= set(ways[0]) - set(g.ranks)
                settled = True
        if not settled:
            return None
    return chosen if used == left else None


def _fill_gaps(g: Group, alike: _Alike) -> tuple[int, ...]:
    """The group's ranks with the gaps in their stride filled by ranks that are in no other
    group of its description (they left no dump, or never reached the group's ops):
    {0-28, 30, 31} is {0-31} when rank 29 has none."""
    ranks = sorted(g.ranks)
    if len(ranks) < 2:
        return g.ranks
    full = range(ranks[0], ranks[-1] + 1, _stride(ranks))
    if len(full) >= 2 * len(ranks):  # as many holes as ranks, or more: nothing to fill
        return g.ranks
    mine = set(ranks)
    holes = [r for r in full if r not in mine]
    if not holes or any(alike.taken(g.desc, r) for r in holes):
        return g.ranks
    return tuple(full)


def _stride(ranks: Sequence[int]) -> int:
    """The step between a sorted run of ranks (their differences' greatest common divisor)."""
    step = 0
    for a, b in itertools.pairwise(ranks):
        step = math.gcd(step, b - a)
    return step


class _Alike:
    """Groups by description ("alike"), indexed once, for the size rules' questions about a
    group's siblings: asked of every group by scanning every other one, they cost the square
    of the groups (one rank whose 60,000 entries each name a group of their own).

    A group asks about the others from its original form or a grown one (its gaps filled),
    which holds every rank the original held, so a rank outside the asking group is in another
    group exactly when any group of the description holds it."""

    def __init__(self, groups: Sequence[Group]) -> None:
        self.by_desc: dict[str, list[Group]] = defaultdict(list)
        self._holders: dict[str, Counter[int]] = defaultdict(Counter)
        self._sizes: dict[str, Counter[int]] = defaultdict(Counter)
        self._sized: dict[tuple[str, int], list[Group]] = defaultdict(list)
        self._steps: dict[tuple[str, int], int] = {}
        self._starts: dict[tuple[str, int, int], set[int]] = {}
        for g in groups:
            self.by_desc[g.desc].append(g)
            self._holders[g.desc].update(g.ranks)
            self._sizes[g.desc][g.size] += 1
            self._sized[(g.desc, g.size)].append(g)

    def taken(self, desc: str, rank: int) -> bool:
        """Whether a group of this description holds `rank` (asked of ranks outside the
        asking group: another group holds it)."""
        holders = self._holders.get(desc)
        return holders is not None and holders.get(rank, 0) > 0

    def size_of_others(self, g: Group) -> int:
        """The size every other group with `g`'s description has (0 when they differ or
        there are none): a data-parallel group rebuilt from the entries of the ranks that
        dumped has a member fewer than its siblings when one of its ranks left no dump."""
        sizes = self._sizes.get(g.desc, Counter())
        others = [size for size, count in sizes.items() if count - (size == g.size) > 0]
        return others[0] if len(others) == 1 else 0

    def step(self, desc: str, size: int) -> int:
        """The smallest step between ranks of the groups of this description and size (1
        when none has two ranks)."""
        key = (desc, size)
        if key not in self._steps:
            diffs = [
                b - a
                for o in self._sized.get(key, ())
                for a, b in itertools.pairwise(sorted(o.ranks))
            ]
            self._steps[key] = min(diffs) if diffs else 1
        return self._steps[key]

    def starts(self, desc: str, size: int, period: int) -> set[int]:
        """Where the groups of this description and size start, modulo `period`."""
        key = (desc, size, period)
        if key not in self._starts:
            self._starts[key] = {min(o.ranks) % period for o in self._sized.get((desc, size), ())}
        return self._starts[key]


def _windows(g: Group, size: int, alike: _Alike) -> tuple[int, list[range]]:
    """The stride of `g`'s ranks (of groups alike when it has one rank), and every run of
    `size` ranks along it that holds `g`'s ranks and no rank of another group of its
    description, in order. The runs overlap: each position along the stride is looked at
    once, so a group is grown in time linear in its size."""
    ranks = sorted(g.ranks)
    # One rank: the step of the groups alike (`g` is smaller than `size`: never among them).
    step = _stride(ranks) if len(ranks) >= 2 else alike.step(g.desc, size)
    start_low = ranks[-1] - step * (size - 1)
    if step <= 0 or start_low > ranks[0]:
        return step, []
    mine = set(ranks)
    positions = range(max(start_low, ranks[0] % step), ranks[0] + step * size, step)
    windows = []
    free = 0  # positions in a row, up to this one, that no other group holds
    for i, r in enumerate(positions):
        free = free + 1 if r in mine or not alike.taken(g.desc, r) else 0
        if free >= size:
            first = positions[i - size + 1]
            windows.append(range(first, first + step * size, step))
    return step, windows


def _extend(g: Group, size: int, alike: _Alike, bound: int) -> tuple[int, ...] | None:
    """The one way to grow `g` to `size` members along its stride with ranks that are in no
    other group of its description and either left no dump or carry none of its groups (a
    buffer that wrapped past them), below `bound` (the ranks that dumped) if that gives one,
    else above it; None when there is none or more than one."""
    step, windows = _windows(g, size, alike)
    # Groups alike tile the ranks: a window that starts where theirs do (modulo their span)
    # fits the layout, one that straddles two of their blocks does not.
    period = step * size
    starts = alike.starts(g.desc, size, period) if period > 0 else set()
    aligned = [w for w in windows if w[0] % period in starts] if starts else windows
    inside = [w for w in windows if w[-1] < bound]
    for choice in ([w for w in aligned if w[-1] < bound], inside, aligned, windows):
        if len(choice) == 1:
            return tuple(choice[0])
    return None


def _conflicts(
    groups: list[Group],
    loaded: set[int],
    claimed: dict[tuple[int, str], int],
    sets: list[tuple[int, ...]],
    config_descs: dict[tuple[str, int], dict[int, str]],
    uid_of: dict[tuple[str, int], int],
    unviewed: set[tuple[int, str]],
) -> list[Finding]:
    """Ranks that disagree on a group's members or description. A member whose own claim of
    the group was set aside (`unviewed`: it reached past the job) has no view to compare."""
    findings = []
    # Member sets: every loaded member of a claimed set should claim the same set.
    by_name: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (rank, name), set_id in claimed.items():
        by_name[name][set_id].append(rank)
    for name, variants in sorted(by_name.items(), key=lambda kv: name_order(kv[0])):
        disagree: set[int] = set()
        for set_id, claimants in variants.items():
            for member in sets[set_id]:
                if member not in loaded or (member, name) in unviewed:
                    continue  # no dump for it, or no view of the group: nothing to compare
                if claimed.get((member, name)) != set_id:
                    disagree.update(claimants)
                    disagree.add(member)
        if not disagree:
            continue
        ranked = sorted(variants.items(), key=lambda kv: -len(kv[1]))
        majority = set(ranked[0][1])
        culprits = tuple(sorted(disagree - majority)) or tuple(sorted(disagree))
        views = "; ".join(
            f"{label(claimants)} say [{compact(sets[set_id])}]" for set_id, claimants in ranked
        )
        group = groups[uid_of[(name, ranked[0][0])]]
        findings.append(
            Finding(
                FindingKind.GROUP_CONFLICT,
                group,
                None,
                None,
                "",
                tuple(sorted(disagree)),
                culprits,
                f"ranks disagree on the members of group {name!r}: {views}",
            )
        )
    # Descriptions: ranks that describe the same group differently.
    for key, by_rank in config_descs.items():
        if len(set(by_rank.values())) < 2:
            continue
        counts = Counter(by_rank.values())
        common = counts.most_common(1)[0][0]
        culprits = tuple(sorted(r for r, d in by_rank.items() if d != common))
        views = "; ".join(
            f"{label([r for r, d in by_rank.items() if d == desc])} say {desc!r}"
            for desc, _ in counts.most_common()
        )
        findings.append(
            Finding(
                FindingKind.GROUP_CONFLICT,
                groups[uid_of[key]],
                None,
                None,
                "",
                tuple(sorted(by_rank)),
                culprits,
                f"ranks disagree on the description of group {key[0]!r}: {views}",
            )
        )
    return findings
