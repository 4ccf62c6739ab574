"""Where the job is cut into parts (`match.partitions`): which groups must be matched together,
and how a family of groups too large for a task is cut, decided from the ranks' profiles
(`model.profile`: each group's rows and the groups a block joins), never from the rows.

A family is the groups of one description (`group.desc`: the tensor-parallel groups, the
pipeline groups, the world), since the rules that vote across groups ask groups of the same
description; families are joined where a coalesced block's end marker lies in another group.
"""

from __future__ import annotations

from ..model.groups import GroupTable
from ..model.profile import Grouped

CUT_SHARE = 0.5
"""The parts cut from a family too large for a task are filled to this share of what a task
takes: the parts of one family come together (the tasks of one node side by side, beside the
driver), and smaller parts cost only a few more questions."""


def families(shape: Grouped, groups: GroupTable) -> list[list[int]]:
    """The group uids of each family: the groups of one description, families joined where a
    block's end marker lies in another family's group; in order of their smallest uid."""
    by_desc: dict[str, int] = {}
    family = [by_desc.setdefault(g.desc, len(by_desc)) for g in groups.groups]
    return _joined(family, len(by_desc), shape.links())


def components(shape: Grouped, groups: GroupTable) -> list[list[int]]:
    """The group uids that must be matched together: each group alone, groups joined where a
    block's end marker lies in another group; in order of their smallest uid."""
    n = len(groups.groups)
    return _joined(list(range(n)), n, shape.links())


def cut_sets(shape: Grouped, groups: GroupTable, most_rows: int | None) -> list[list[int]] | None:
    """The group uids of each part: a family whole where it has at most `most_rows` rows
    (None: any), else its groups (`components`) packed in order into parts of at most half
    that (`CUT_SHARE`; a group alone up to `most_rows`); None where one group (or groups a
    block joins) alone has more."""
    fams = families(shape, groups)
    if most_rows is None:
        return fams
    per_group = shape.group_rows(len(groups.groups) + 1)
    pieces: dict[int, list[list[int]]] = {}
    for comp in components(shape, groups):
        pieces.setdefault(comp[0], []).append(comp)
    out: list[list[int]] = []
    for fam in fams:
        if int(per_group[fam].sum()) <= most_rows:
            out.append(fam)
            continue
        held: list[int] = []
        rows, fill = 0, max(1, int(most_rows * CUT_SHARE))
        for comp in (c for u in fam for c in pieces.get(u, [])):
            more = int(per_group[comp].sum())
            if more > most_rows:
                return None
            if held and more and rows + more > fill:  # a group with no rows joins the last
                out.append(sorted(held))
                held, rows = [], 0
            held += comp
            rows += more
        if held:
            out.append(sorted(held))
    return sorted(out, key=lambda uids: uids[0])


def sizes(shape: Grouped, groups: GroupTable, uid_sets: list[list[int]]) -> list[int]:
    """The rows of each set of groups."""
    per_group = shape.group_rows(len(groups.groups) + 1)
    return [int(per_group[uids].sum()) for uids in uid_sets]


def _joined(set_of: list[int], n_sets: int, links: set[tuple[int, int]]) -> list[list[int]]:
    """The group uids by their set (`set_of`, by uid), sets joined by linked groups."""
    part_of = [*set_of, n_sets]  # a row of no group (uid n) in a set of its own
    parent = list(range(n_sets + 1))

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    for x, y in links:
        parent[root(part_of[x])] = root(part_of[y])
    out: dict[int, list[int]] = {}
    for u in range(len(set_of)):
        out.setdefault(root(part_of[u]), []).append(u)
    return sorted(out.values(), key=lambda uids: uids[0])
