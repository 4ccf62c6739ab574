"""The rows a side-by-side view of some process groups shows (`-j`, `render.entries_view`),
chosen of a table's rows: each group's rows within a few sequence ids of the root's, or its
newest sequence ids, or all of them; and each rank's first op of each group (its `Key`),
which tells an op a rank never issued from one pushed out of its ring buffer.

The choice reads a group's rows only, so a table that holds some groups whole chooses their
rows as the job's table does: one process chooses over its table, a cluster over each part
where it lies (every group lies whole in one part), and the driver fetches the rows chosen
(`pipeline.JobCalls.shown`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .records import UnitKind
from .table import EntryTable

I64 = npt.NDArray[np.int64]

Key = tuple[int, int, int, int]
"""A row of the view: (collective seq id, p2p seq id, is p2p, position among equal keys)."""

P2P_LIKE = (UnitKind.P2P, UnitKind.BATCH_MEMBER, UnitKind.BATCH_MARKER)
"""The units whose rows are counted by their p2p sequence id."""


@dataclass(frozen=True)
class Around:
    """A window of sequence ids: `context` either side of `at`, counted in p2p ids (`p2p`)
    or in collective ids."""

    at: int
    context: int
    p2p: bool = False


@dataclass(frozen=True)
class Showing:
    """Which rows of which groups a view shows: of each group of `uids`, the rows within
    `around` (None: every row), then of those the newest `last` sequence ids (None: all)."""

    uids: tuple[int, ...]
    around: Around | None = None
    last: int | None = None


@dataclass(frozen=True)
class Shown:
    """The rows chosen (`rows`: ascending, in the table chosen from; `groups`: each one's
    group uid) and each rank's first op of each group shown (`firsts[uid][rank]`)."""

    rows: I64
    groups: npt.NDArray[np.int32]
    firsts: dict[int, dict[int, Key]] = field(default_factory=dict)

    def moved(self, rows: I64 | None) -> Shown:
        """These rows renumbered by `rows` (a part's rows in the job; None: the same)."""
        return self if rows is None else Shown(rows[self.rows], self.groups, self.firsts)


def shown_rows(t: EntryTable, entry_group: npt.NDArray[np.int32], showing: Showing) -> Shown:
    """The rows of `t` (each of group `entry_group`) that `showing` asks for, and each rank's
    first op of each group asked for that `t` holds."""
    uids = list(showing.uids)
    if not t.n or not uids:
        return Shown(np.zeros(0, np.int64), np.zeros(0, np.int32))
    p2p_like = np.isin(t.unit, P2P_LIKE)
    by_group = rows_by_group(entry_group, uids)
    rows: list[I64] = [np.zeros(0, np.int64)]
    groups: list[npt.NDArray[np.int32]] = [np.zeros(0, np.int32)]
    firsts: dict[int, dict[int, Key]] = {}
    for uid in uids:
        mine = by_group[uid]
        if not len(mine):
            continue
        firsts[uid] = first_keys(t, mine, p2p_like)
        if showing.around is not None:
            mine = window(t, mine, showing.around)
        if showing.last is not None:
            mine = newest(t, mine, p2p_like, showing.last)
        rows.append(mine.astype(np.int64))
        groups.append(np.full(len(mine), uid, dtype=np.int32))
    got = np.concatenate(rows)
    order = np.argsort(got, kind="stable")
    return Shown(got[order], np.concatenate(groups)[order], firsts)


def joined(pieces: Sequence[Shown]) -> Shown:
    """The pieces of several tables (each renumbered to the job's rows) as one, ascending."""
    rows = np.concatenate([np.zeros(0, np.int64), *(p.rows for p in pieces)])
    groups = np.concatenate([np.zeros(0, np.int32), *(p.groups for p in pieces)])
    order = np.argsort(rows, kind="stable")
    firsts = {uid: ranks for p in pieces for uid, ranks in p.firsts.items()}
    return Shown(rows[order], groups[order], firsts)


def rows_by_group(
    entry_group: npt.NDArray[np.int32], uids: Sequence[int]
) -> dict[int, npt.NDArray[np.intp]]:
    """Each group's rows, in table order: one sort of the rows' groups for every group asked
    for (a job of 1,024 ranks has hundreds of groups and millions of rows)."""
    if len(uids) == 1:
        return {uids[0]: np.flatnonzero(entry_group == uids[0])}
    order = np.argsort(entry_group, kind="stable")
    ordered = entry_group[order]
    wanted = np.array(uids, dtype=entry_group.dtype)
    starts = np.searchsorted(ordered, wanted, "left").tolist()
    ends = np.searchsorted(ordered, wanted, "right").tolist()
    return {uid: order[s:e] for uid, s, e in zip(uids, starts, ends, strict=True)}


def first_keys(
    table: EntryTable, rows: npt.NDArray[np.intp], p2p_like: npt.NDArray[np.bool_]
) -> dict[int, Key]:
    """Each rank's first row of the group (`rows`): a rank with no cell at a later row never
    issued that op, while one with no cell at an earlier row had it pushed out of its ring
    buffer."""
    if not len(rows):
        return {}
    rank, coll, p2p = table.rank[rows], table.coll_seq[rows], table.p2p_seq[rows]
    is_p2p = p2p_like[rows].astype(np.int64)
    order = np.lexsort((is_p2p, p2p, coll, rank))
    ranks = rank[order]
    starts = np.flatnonzero(np.r_[True, ranks[1:] != ranks[:-1]])
    at = order[starts]
    return {
        int(r): (int(c), int(p), int(i), 0)
        for r, c, p, i in zip(
            rank[at].tolist(), coll[at].tolist(), p2p[at].tolist(), is_p2p[at].tolist(), strict=True
        )
    }


def window(table: EntryTable, rows: npt.NDArray[np.intp], around: Around) -> npt.NDArray[np.intp]:
    """The rows within `around`'s sequence ids."""
    seq = table.p2p_seq[rows] if around.p2p else table.coll_seq[rows]
    return rows[(seq >= around.at - around.context) & (seq <= around.at + around.context)]


def newest(
    table: EntryTable, rows: npt.NDArray[np.intp], p2p_like: npt.NDArray[np.bool_], last: int
) -> npt.NDArray[np.intp]:
    """The rows of the newest `last` sequence ids, in the rows' order (collective and p2p ids
    counted apart); chosen before any cell is made, as a healthy job has millions."""
    if not len(rows) or last <= 0:
        return rows[:0]
    coll, p2p = table.coll_seq[rows], table.p2p_seq[rows]
    is_p2p = p2p_like[rows]
    flag = is_p2p.astype(coll.dtype)
    # The distinct (coll, p2p, is_p2p) triples in ascending order (`np.unique(..., axis=0)`'s
    # answer, by a lexsort: that sorts rows of a structured type, many times slower), each
    # labelled in numpy (a job of 1,024 ranks has hundreds of thousands).
    order = np.lexsort((flag, p2p, coll))
    c, p, f = coll[order], p2p[order], flag[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (c[1:] != c[:-1]) | (p[1:] != p[:-1]) | (f[1:] != f[:-1])
    c, p, f = c[new], p[new], f[new]
    # Each triple's label (its p2p id for a p2p row, else its collective id), the labels in
    # the order they first come among the triples (a stable sort keeps, within a label, its
    # first triple first), and the newest `last` of them.
    value = np.where(f != 0, p, c)
    by_label = np.lexsort((value, f))
    sf, sv = f[by_label], value[by_label]
    first = np.ones(len(by_label), dtype=bool)
    first[1:] = (sf[1:] != sf[:-1]) | (sv[1:] != sv[:-1])
    kept = np.sort(by_label[first])[-last:]
    kept_coll = value[kept][f[kept] == 0].astype(coll.dtype, copy=False)
    kept_p2p = value[kept][f[kept] != 0].astype(p2p.dtype, copy=False)
    mask = np.where(is_p2p, np.isin(p2p, kept_p2p), np.isin(coll, kept_coll))
    return rows[mask]
