"""What every root-cause rule reads: the entries, the matches, the wait graph, each rank's
newest op, the peer reference (`match.reference.PeerOrder`), and the few helpers the rule
families share (an op as a person sees it, a wait chain, the culprit's own code, the rows a
finding is about). Nothing here decides a root cause.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..match import MatchResult
from ..match.reference import PeerOrder
from ..model.backends import NO_P2P_BACKENDS
from ..model.groups import GroupTable
from ..model.records import Finding, Frame, P2PKind, Stack, UnitKind
from ..model.table import EntryTable
from .positions import OpRef, Refs
from .records import Thresholds, WaitStep
from .waits import WaitGraph

P2PSequence = dict[int, tuple[int, tuple[object, ...]]]
"""A rank's send/recv ops in one group: p2p seq id → (first row, signature)."""


@dataclass(frozen=True, kw_only=True)
class Context:
    """Everything the root-cause rules read; its caches fill on first demand."""

    table: EntryTable
    groups: GroupTable
    matches: MatchResult
    graph: WaitGraph  # as built: before cycles are resolved and implicit edges added
    newest_ns: Mapping[int, int]  # rank → its newest timestamp
    last_row: Mapping[int, int]  # rank → its newest row
    refs: Refs
    thresholds: Thresholds
    wrapped: frozenset[int] = frozenset()  # ranks whose ring buffer wrapped
    peers: PeerOrder = field(init=False)  # the order the other ranks follow
    # (rank, group uid) → its send/recv sequence (`p2p.sequence`)
    p2p_sequences: dict[tuple[int, int], P2PSequence] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        """Builds the peer reference over the same entries and matches."""
        peers = PeerOrder(self.table, self.groups, self.matches.collectives, self.matches.p2p)
        object.__setattr__(self, "peers", peers)

    def no_p2p_recorded(self) -> bool:
        """Whether every rank's backend records no send/recv (gloo)."""
        backends = set(self.table.backends)
        return bool(backends) and backends <= NO_P2P_BACKENDS

    def ref(self, row: int) -> OpRef:
        """The op at `row` as a person sees it."""
        return self.refs.refs([row])[0]

    def rows_of(self, rank: int) -> range:
        """A rank's rows of the entry table."""
        return self.peers.rows_of(rank)

    def stopped(self, ranks: Sequence[int]) -> float:
        """When the ranks' activity stopped (their newest timestamp; a rank with no dump is
        taken as the first to stop)."""
        return float(min(self.newest_ns.get(r, -1) for r in ranks))


@dataclass(frozen=True)
class Resolved:
    """The wait graph the hang rules settle on: the edges of the ranks that deviated from the
    others' order cut, and, where no send/recv is recorded, idle ranks taken to wait for
    another (`implicit`, see `idle.implicit_edges`)."""

    graph: WaitGraph
    implicit: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def last_seq(ctx: Context, rank: int, uid: int) -> int | None:
    """The newest collective sequence id `rank` recorded on group `uid` (None: none)."""
    units = ctx.matches.collectives
    span = ctx.rows_of(rank)
    for r in range(span.stop - 1, span.start - 1, -1):
        unit = int(units.entry_unit[r])
        if unit >= 0 and int(units.group[unit]) == uid:
            return int(units.seq[unit])
    return None


def chain(ctx: Context, roots: set[int], graph: WaitGraph) -> tuple[WaitStep, ...]:
    """The longest wait chain that ends at one of `roots`, as (rank, group, seq) steps."""
    levels = graph.levels(roots)
    if not levels:
        return ()
    start = max(levels, key=lambda r: (levels[r], -r))
    steps: list[WaitStep] = []
    for rank in graph.path(start, roots):
        row = graph.frontier.get(rank)
        if row is None:
            steps.append(WaitStep(rank=rank, group=None, seq=None))
            continue
        ref = ctx.ref(row)
        seq = ref.collective_seq_id if ref.p2p_seq_id is None else ref.p2p_seq_id
        steps.append(WaitStep(rank=rank, group=ref.group.name, seq=seq))
    return tuple(steps)


def code(ctx: Context, culprit_row: int | None, peer_rows: Sequence[int]) -> Stack:
    """The culprit's innermost frames that its peers' most common stack lacks (its own code
    line); when the stacks are the same, its innermost frames outside torch."""
    t = ctx.table
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


def same_op(ctx: Context, a: int, b: int) -> bool:
    """Whether rows `a` and `b` of one rank are the same op (one coalesced or batched block)."""
    return a == b or (
        int(ctx.table.marker[a]) >= 0 and int(ctx.table.marker[a]) == int(ctx.table.marker[b])
    )


def finding_rows(ctx: Context, f: Finding) -> list[int]:
    """The rows a finding is about: its collective unit's, or its culprits' send/recv."""
    t, m = ctx.table, ctx.matches
    if f.group is None:
        return []
    if f.collective_seq_id is not None:
        unit = m.collectives.find(f.group.uid, f.collective_seq_id)
        return [] if unit is None else m.collectives.unit_rows(unit).tolist()
    if f.p2p_seq_id is None:
        return []
    on = f.culprit_ranks[0] if len(f.culprit_ranks) == 1 else f.ranks[0]
    mine = p2p_rows_in(ctx, on, f.group.uid)
    hit: list[int] = mine[t.p2p_seq[mine] == f.p2p_seq_id].tolist()
    # The other half: the other ranks' unfinished send/recv with `on` on this group (their own
    # p2p seq ids may differ).
    if on in f.group.ranks:
        local = f.group.ranks.index(on)
        for other in sorted(set(f.ranks) - {on}):
            rows = p2p_rows_in(ctx, other, f.group.uid)
            peer = np.where(t.p2p_kind[rows] == P2PKind.SEND, t.peer_dst[rows], t.peer_src[rows])
            hit += rows[(peer == local) & ~m.done[rows]].tolist()
    return hit


def p2p_rows_in(ctx: Context, rank: int, uid: int) -> npt.NDArray[np.int64]:
    """A rank's send/recv rows on one group."""
    t, span = ctx.table, ctx.rows_of(rank)
    at = slice(span.start, span.stop)
    p2p = (t.unit[at] == UnitKind.P2P) | (t.unit[at] == UnitKind.BATCH_MEMBER)
    p2p &= (ctx.groups.entry_group[at] == uid) & (t.p2p_kind[at] != P2PKind.NONE)
    return np.flatnonzero(p2p).astype(np.int64) + span.start
