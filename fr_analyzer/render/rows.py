"""The rows an output shows beyond the answer, taken of the analysis: its table, or where the
analysis' engine keeps the rows (`Analysis.calls`: a Ray cluster, the driver holding some
rows only), fetched from there: the parts' pieces with the rows wanted (`JobCalls.held`:
the HTML report's, the timeline's ranks), or the rows a side-by-side view chooses
(`JobCalls.shown`, `-j`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from ..diagnosis.positions import OpRef
from ..match.frontier import Wanted
from ..model.groups import GroupTable
from ..model.shown import Showing, Shown, shown_rows
from ..model.table import EntryTable
from ..pipeline import Analysis

__all__ = ["drawn_of", "same_op_rows", "shown_of"]


def drawn_of(
    analysis: Analysis, ranks: Sequence[int]
) -> tuple[Analysis, npt.NDArray[np.int64] | None]:
    """The analysis over the whole programs of `ranks` (a timeline's), fetched from where
    its engine keeps the rows (`JobCalls.held`: with each rank's frontier, and every row
    their ops are matched with), and those rows' places in the job (None: every row)."""
    assert analysis.calls is not None
    held = analysis.calls.held(Wanted(ranks=frozenset(ranks)))
    drawn = dataclasses.replace(
        analysis,
        table=held.table,
        groups=held.groups,
        matches=held.matches,
        rows_in_job=analysis.entries,
        calls=None,
    )
    return drawn, held.rows


def shown_of(analysis: Analysis, showing: Showing) -> tuple[EntryTable, Shown]:
    """The rows `showing` asks for (`-j`): chosen of the analysis' table, or where its engine
    keeps the rows (`JobCalls.shown`: chosen there, then fetched), with the table they are
    rows of."""
    if analysis.calls is None:
        t = analysis.table
        return t, shown_rows(t, analysis.groups.entry_group, showing)
    return analysis.calls.shown(showing)


def same_op_rows(analysis: Analysis, ref: OpRef) -> tuple[EntryTable, GroupTable, OpRef]:
    """Where the analysis' engine keeps the rows (`Analysis.calls`): the rows of `ref`'s op
    in every group of its family (its collective, or its send/recv sequence id), fetched,
    and `ref` in them (by rank, group and sequence id; by op too, in a block)."""
    assert analysis.calls is not None
    family = ref.group.desc or ref.group.name
    uids = [g.uid for g in analysis.groups.groups if (g.desc or g.name) == family]
    if ref.collective_seq_id is not None:
        wanted = Wanted(units=frozenset((uid, ref.collective_seq_id) for uid in uids))
    elif ref.p2p_seq_id is not None:
        wanted = Wanted(p2p=frozenset((uid, ref.p2p_seq_id) for uid in uids))
    else:
        return analysis.table, analysis.groups, ref
    held = analysis.calls.held(wanted)
    h = held.table
    mine = (h.rank == ref.rank) & (held.groups.entry_group == ref.group.uid)
    if ref.collective_seq_id is not None:
        mine &= h.coll_seq == ref.collective_seq_id
    else:
        mine &= h.p2p_seq == ref.p2p_seq_id
    at = np.flatnonzero(mine)
    if not len(at):
        return analysis.table, analysis.groups, ref
    named = [int(r) for r in at if h.ops[int(h.op[r])] == ref.op]
    return h, held.groups, dataclasses.replace(ref, row=named[0] if named else int(at[0]))
