"""Which ops finished: what the recorder says (`recorded`), and what tells it where the
recorder does not say (`silent`, `judged_by_issue`).

PyTorch's recorder says it with the op's state (NCCL: `completed`) or, on gloo, `retired`. Some
recorders say neither:

- torchcomms retires an op when its call returns: on NCCL and the other GPU backends the op is
  only enqueued then, and its state is read once, at that moment (`load.dialects`); on gloo the
  call ran the op, so there `retired` tells, as PyTorch's gloo recorder's does;
- some XCCL builds never mark an op completed (intel/torch-xpu-ops#5381: states stay
  `scheduled`/`started`, `last_completed_collective` stays -1);
- backends without a completion signal of their own retire ops when they are enqueued (every op
  retired, none completed).

"Nothing completed" on such a recorder is not a hang. A backend is taken as silent only on
evidence across every rank: not one of its ops completed anywhere, and it is XCCL or every one
of its ops is retired (an op that failed is retired without completing, but not every op of a
backend on every rank). Its ops are then judged by what still tells progress: a collective
every member issued is taken as passed, a send/recv the rank issued something after on the same
group too, and `retired` (which meant "enqueued") is cleared. A rank that never issued what its
peers issued still stands out; ranks that all stopped at the same op show no hang, and the
report says why it cannot see one there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..model.arrays import distinct
from ..model.backends import NO_COMPLETION_BACKENDS, NO_STATE_BACKENDS
from ..model.dump import RankDump
from ..model.groups import GroupTable
from ..model.profile import BackendFacts, Profiles
from ..model.ranks import agree, compact
from ..model.recorders import Dialect, reports_completion
from ..model.records import P2PKind, State
from ..model.table import EntryTable
from .records import COLLECTIVE_UNITS, of_kinds, stateless

B = npt.NDArray[np.bool_]


def recorded(t: EntryTable) -> npt.NDArray[np.bool_]:
    """Whether each row finished, as its recorder says: the end marker's state for block
    members; gloo records no states (always `scheduled`), so there `retired` is the only
    completion signal."""
    if not t.n:
        return np.zeros(0, dtype=bool)
    head = t.marker.copy()  # plain ops are their own marker; -1 only for orphans
    orphans = np.flatnonzero(head < 0)
    head[orphans] = orphans
    state = t.state[head]
    retired = t.retired[head]
    done: npt.NDArray[np.bool_] = np.where(stateless(t), retired, state == State.COMPLETED)
    return done


@dataclass(frozen=True)
class Quiet:
    """Where the recorders do not say whether an op finished, decided over every rank (`quiet`):
    the recorders of the ranks that are not PyTorch's (by rank), the backends that never said it
    on any rank, and what the report says. A part of the job judges its own rows by it
    (`silent_rows`)."""

    dialects: Mapping[int, str]  # rank -> its recorder, where it is not PyTorch's
    backends: frozenset[str]
    notes: tuple[str, ...] = ()

    def silent(self, rank: int, backend: str) -> bool:
        """Whether the recorder of `rank` does not say when its ops on `backend` finish."""
        dialect = self.dialects.get(rank, Dialect.PYTORCH)
        if not reports_completion(dialect, backend):
            return True
        return backend in self.backends and backend not in NO_STATE_BACKENDS

    def busy(self, p: Profiles) -> frozenset[int]:
        """The ranks holding an op not retired, once the silent ops' `retired` is cleared."""
        return frozenset(f.rank for f in p.by_backend() if self._unretired(f))

    def looked_at(self, p: Profiles) -> frozenset[int]:
        """The ranks with an op of a backend that records states, not retired (once the
        silent ops' `retired` is cleared), seen started or completed: the recorder looked at
        it during the dump."""
        return frozenset(
            f.rank
            for f in p.by_backend()
            if f.backend not in NO_STATE_BACKENDS
            and (f.seen if self.silent(f.rank, f.backend) else f.unretired_seen)
        )

    def _unretired(self, f: BackendFacts) -> bool:
        return f.unretired or self.silent(f.rank, f.backend)


def quiet(p: Profiles, dumps: Sequence[RankDump]) -> Quiet:
    """Where the recorders do not say whether an op finished, from the ranks' profiles: the
    backends a rank's recorder does not say it of (torchcomms on a GPU backend), and the
    backends that never reported an op completed on any rank, XCCL or with every op retired
    (backends that record no state, gloo, aside)."""
    dialects = {d.rank: d.dialect for d in dumps if d.dialect != Dialect.PYTORCH}
    told = Quiet(dialects, frozenset())
    notes: list[str] = []
    silent: set[str] = set()
    said: dict[str, list[BackendFacts]] = {}  # by backend: where the recorder says it
    for f in p.by_backend():
        if f.backend not in NO_STATE_BACKENDS and not told.silent(f.rank, f.backend):
            said.setdefault(f.backend, []).append(f)
    for name in p.backends:  # in the order the job first names them
        mine = said.get(name)
        if not mine or any(f.completed for f in mine):
            continue
        every_retired = not any(f.unretired for f in mine)
        if name not in NO_COMPLETION_BACKENDS and not every_retired:
            continue
        silent.add(name)
        ranks = sorted(f.rank for f in mine)
        why = (
            "every op is retired and none completed: it retires ops when they are enqueued"
            if every_retired
            else "known in some XCCL builds, intel/torch-xpu-ops#5381"
        )
        notes.append(
            f"backend {name} never reported an op completed on {agree(ranks, 'rank', 'ranks')} "
            f"{compact(ranks)} ({why})"
        )
    told = Quiet(dialects, frozenset(silent))
    any_silent = any(told.silent(f.rank, f.backend) for f in p.by_backend())
    if any_silent:
        notes.append(
            "where the recorder does not say whether an op finished, progress is judged by what "
            "every rank issued: a collective every member issued counts as passed, so a hang "
            "inside the newest collective all members issued cannot be seen"
        )
    return Quiet(dialects, frozenset(silent), tuple(notes))


def silent_rows(t: EntryTable, q: Quiet) -> B:
    """The rows (of the job's table, or a part's) whose recorder does not say whether they
    finished (`Quiet.silent`): one pass per (recorder, backend), not per rank."""
    rows = np.zeros(t.n, dtype=bool)
    if not t.n:
        return rows
    by_dialect: dict[str, list[int]] = {}
    for rank, dialect in q.dialects.items():
        by_dialect.setdefault(dialect, []).append(rank)
    for dialect, ranks in by_dialect.items():
        unsaid = [
            code for code, name in enumerate(t.backends) if not reports_completion(dialect, name)
        ]
        if unsaid:
            rows |= np.isin(t.rank, np.array(ranks, dtype=np.int32)) & np.isin(t.backend, unsaid)
    every = [
        code
        for code, name in enumerate(t.backends)
        if name in q.backends and name not in NO_STATE_BACKENDS
    ]
    if every:
        rows |= np.isin(t.backend, every)
    return rows


def judged(t: EntryTable, groups: GroupTable, q: Quiet) -> B:
    """Whether each row finished: as its recorder says (`recorded`), and the silent rows
    (`silent_rows`) judged by what was issued (`judged_by_issue`, which clears their
    `retired`)."""
    done = recorded(t)
    rows = silent_rows(t, q)
    if rows.any():
        done = judged_by_issue(t, groups, done, rows, collective_rows(t))
    return done


def judged_by_issue(t: EntryTable, groups: GroupTable, done: B, silent_rows: B, collective: B) -> B:
    """`done` with the silent rows judged by what was issued: a collective (`collective`
    rows) when every member of its group issued its sequence id, a send/recv when its peer
    issued the other half or its rank issued something after it on the same group. Clears
    `retired` on the silent rows (in the table: downstream stages read it as "finished")."""
    out = done.copy()
    t.retired[silent_rows] = False
    uid = groups.entry_group.astype(np.int64)
    sizes = np.array([g.size for g in groups.groups] + [0], dtype=np.int64)
    coll = np.flatnonzero(silent_rows & collective)
    if len(coll):
        # Distinct (group, seq, rank) per collective row, then members per (group, seq).
        every = np.flatnonzero(collective & np.isin(uid, distinct(uid[coll])))
        seq = t.coll_seq[every].astype(np.int64)
        low = int(seq.min())
        span = int(seq.max()) - low + 1
        unit = uid[every] * span + (seq - low)
        pairs = np.unique(np.stack([unit, t.rank[every].astype(np.int64)]), axis=1)
        units, members = np.unique(pairs[0], return_counts=True)
        full = units[members >= sizes[units // span]]
        # a member whose recorder says it did not finish (a dump beside traces) outweighs
        # the issue: the traced ranks' ops did not pass either
        unfinished = ~silent_rows[every] & ~done[every]
        full = np.setdiff1d(full, unit[unfinished])
        mine = uid[coll] * span + (t.coll_seq[coll].astype(np.int64) - low)
        out[coll] = np.isin(mine, full) | done[coll]
    other = np.flatnonzero(silent_rows & ~collective)
    if len(other):
        pair = t.pair.astype(np.int64)
        last = np.full(int(pair.max()) + 1, -1, dtype=np.int64)
        last[pair] = np.arange(t.n)  # rows in order: the last write is the pair's newest row
        out[other] = (last[pair[other]] != other) | done[other] | _both_sides(t, groups, other)
    return out


def _both_sides(t: EntryTable, groups: GroupTable, rows: npt.NDArray[np.int64]) -> B:
    """Whether each send/recv's other half was issued: the n-th send from a to b on a group
    counts as issued by both when b issued at least n receives from a there."""
    ends: list[tuple[int, int, int, bool]] = []  # (group uid, sender, receiver, is send)
    for row in rows.tolist():
        kind = int(t.p2p_kind[row])
        group = groups.groups[int(groups.entry_group[row])]
        local = int(t.peer_dst[row] if kind == P2PKind.SEND else t.peer_src[row])
        me = int(t.rank[row])
        if kind == P2PKind.NONE or not 0 <= local < group.size:
            ends.append((-1, -1, -1, False))  # no known peer: judged by what came after
            continue
        peer = group.ranks[local]
        sending = kind == P2PKind.SEND
        ends.append((group.uid, me, peer, True) if sending else (group.uid, peer, me, False))
    counts: dict[tuple[int, int, int, bool], int] = {}
    for end in ends:
        counts[end] = counts.get(end, 0) + 1
    seen: dict[tuple[int, int, int, bool], int] = {}
    out = np.zeros(len(ends), dtype=bool)
    for i, end in enumerate(ends):  # rows in table order: each rank's in the order issued
        if end[0] < 0:
            continue
        seen[end] = seen.get(end, 0) + 1
        other = (end[0], end[1], end[2], not end[3])
        out[i] = seen[end] <= counts.get(other, 0)
    return out


def collective_rows(t: EntryTable) -> B:
    """Rows that belong to a collective (plain, or a coalesced block's member or marker)."""
    return of_kinds(t.unit, COLLECTIVE_UNITS) if t.n else np.zeros(0, dtype=bool)
