"""What a part of the job asks of the groups it does not hold, and what those answer.

Two rules of matching read groups other than the one they judge, and only where the group's
own members do not settle it: the groups alike vote on a collective whose ranks tie or whose
lost member left the rest agreeing (`match.reference.sibling_votes`), and the groups of the
same description say what a disagreeing send/recv should carry (`match.p2p`). A part that
holds only some of those groups (`match.partitions`: a family too large for one task, cut
into groups) cannot read the others; it asks (`Elsewhere.knows` records a `Question` and the
rule goes on as if no group answered), its result is held back, the parts that hold the
groups asked about answer (`answer`, after matching their own rows), and the asking part is
matched again with the answers: the same result as the whole table gives, at the cost of a
second match of the few parts involved (`match.partitions.rounds`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .context import MatchContext
from .p2p import transfer_values
from .records import P2PPairs
from .reference import uniform_value
from .values import Read, ValueKind, reader

Question = tuple[int, int, ValueKind]
"""(group uid, collective sequence id, the value asked); the sequence id -1 for TRANSFERS."""
Transfers = tuple[tuple[tuple[int, int], int], ...]
"""A group's agreed send/recv transfers: ((shape code, dtype code), how many), by value."""


@dataclass
class Elsewhere:
    """A part's view of the groups it does not hold: the answers it was given, and the
    questions it could not answer (a result that asked is not final)."""

    local: frozenset[int]  # the group uids whose rows the part holds
    answers: Mapping[Question, Any]
    asked: set[Question] = field(default_factory=set)

    def holds(self, uid: int) -> bool:
        """Whether the part holds group `uid`'s rows."""
        return uid in self.local

    def knows(self, questions: Iterable[Question]) -> bool:
        """Whether every one of `questions` has its answer; those that have none are asked."""
        missing = [q for q in questions if q not in self.answers]
        self.asked.update(missing)
        return not missing


def answer(
    ctx: MatchContext, pairs: P2PPairs, questions: Iterable[Question]
) -> dict[Question, Any]:
    """The answers of a matched part (`ctx` after matching, `pairs` its send/recv pairs) to the
    questions about groups it holds: a unit's uniform value (None: the unit is not held, or
    its members differ), or a group's agreed transfers."""
    out: dict[Question, Any] = {}
    readers: dict[ValueKind, Any] = {}
    by_group: dict[int, Transfers] | None = None
    for q in questions:
        uid, seq, kind = q
        if ctx.elsewhere is not None and not ctx.elsewhere.holds(uid):
            continue
        if kind.read is Read.TRANSFERS:
            if by_group is None:
                by_group = agreed_transfers(ctx, pairs)
            out[q] = by_group.get(uid, ())
        else:
            if kind not in readers:
                readers[kind] = reader(ctx.table, kind)
            out[q] = uniform_value(ctx, uid, seq, readers[kind])
    return out


def unheld(questions: Iterable[Question]) -> dict[Question, Any]:
    """The answers about groups no part holds (no rows): no unit, no transfer."""
    return {q: () if q[2].read is Read.TRANSFERS else None for q in questions}


def agreed_transfers(ctx: MatchContext, pairs: P2PPairs) -> dict[int, Transfers]:
    """Each group's agreed transfers, of the pairs matched: one count per (group, shape,
    dtype), by columns."""
    send_value, _, agree = transfer_values(ctx.table, pairs.send_row, pairs.recv_row)
    uid = ctx.groups.entry_group[pairs.send_row].astype(np.int64)
    keys = np.column_stack([uid[agree], send_value[agree]]).reshape(-1, 3)
    found, counts = np.unique(keys, axis=0, return_counts=True)
    out: dict[int, list[tuple[tuple[int, int], int]]] = {}
    for (u, shape, dtype), n in zip(found.tolist(), counts.tolist(), strict=True):
        out.setdefault(u, []).append(((shape, dtype), n))
    return {u: tuple(held) for u, held in out.items()}
