"""Where every rank stands, for people: per group, the last op each rank completed and its
first op that did not complete (ranks in the same position share one row), and the stacks of the
ops ranks are blocked in (ranks with the same innermost frames share one entry; torch's own
frames collapsed, and a stack marked odd only where it differs from most of its groups').

An op retired without completing (gloo retires one that timed out, or failed, as it retires one
that completed) reads "timed out", and has no age: the rank's newest timestamp is then the op's
own, which would make it look 0 s old although it waited for its whole timeout.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..match import stateless
from ..model.groups import GroupTable
from ..model.records import STATE_NAMES, Frame, Group, Stack, State, UnitKind, seq_id
from ..model.table import EntryTable, rank_starts


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
    # How long before the rank's newest timestamp it was enqueued (a lower bound of its age at
    # the dump); None when unknown, or when it timed out (its age is then its timeout or more).
    age_s: float | None
    timed_out: bool = False  # retired without completing: timed out (or failed)
    timeout_s: float | None = None  # its timeout, where the dump records one
    stateless: bool = False  # its backend records no state (gloo): the state says nothing

    @property
    def flags(self) -> str:
        """What is known of how it ended: `completed, retired`, `scheduled, timed out`; on a
        backend that records no state, `retired`, `timed out` or `not retired`."""
        end = "timed out" if self.timed_out else "retired" if self.retired else ""
        if self.stateless:
            return end or "not retired"
        return self.state + (f", {end}" if end else "")

    def describe(self) -> str:
        """The op in a few words: `all_reduce #8 (completed, retired)`."""
        if self.p2p_seq_id is not None:
            seq = seq_id(self.p2p_seq_id, p2p=True)
        else:
            seq = "-" if self.collective_seq_id is None else seq_id(self.collective_seq_id)
        return f"{self.op} {seq} ({self.flags})"


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
class StackGroup:
    """Ranks whose blocking (or, when idle, newest) op has the same innermost frames."""

    stack: Stack | None  # None: the dump has no frames for that op; torch's frames collapsed
    ranks: tuple[int, ...]
    odd: bool  # the odd one out: some of its ranks' stacks differ from most of their peers'
    odd_ranks: tuple[int, ...] = ()  # those ranks
    hidden: int = 0  # framework frames collapsed out of the lowest rank's stack (`collapse`)


class Refs:
    """Makes OpRefs for rows; sizes and op names are formatted once per distinct code."""

    def __init__(
        self,
        table: EntryTable,
        groups: GroupTable,
        newest_ns: dict[int, int],
        incomplete: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        self.t = table
        self.groups = groups
        self.newest_ns = newest_ns
        self._sizes: dict[int, str] = {}
        self._ops: dict[int, str] = {}
        self._states: dict[int, str] = {}
        self.stateless = stateless(table)
        # rows that ended without completing: retired, yet not complete (see the module doc)
        self.timed_out = timed_out_rows(table, incomplete)

    def refs(self, rows: Sequence[int]) -> list[OpRef]:
        """OpRefs of many rows, their columns read in one step each."""
        t = self.t
        at = np.asarray(rows, dtype=np.int64)
        unit = t.unit[at]
        p2p = (unit == UnitKind.P2P) | (unit == UnitKind.BATCH_MEMBER)
        p2p |= unit == UnitKind.BATCH_MARKER
        out = []
        for (
            row,
            rank,
            p2p_,
            created,
            shape,
            pname,
            uid,
            coll,
            p2p_seq,
            state,
            retired,
            timed_out,
            no_state,
            timeout_ms,
        ) in zip(
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
            self.timed_out[at].tolist(),
            self.stateless[at].tolist(),
            t.timeout_ms[at].tolist(),
            strict=True,
        ):
            newest = self.newest_ns.get(rank, -1)
            age = (newest - created) / 1e9 if created >= 0 and newest >= created else None
            if timed_out:
                age = None
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
                    state=self._state_name(state),
                    retired=retired,
                    sizes=sizes,
                    age_s=age,
                    timed_out=timed_out,
                    timeout_s=timeout_ms / 1e3 if timeout_ms > 0 else None,
                    stateless=no_state,
                )
            )
        return out

    def _state_name(self, code: int) -> str:
        """A state code's name, looked up once per code."""
        name = self._states.get(code)
        if name is None:
            name = self._states[code] = STATE_NAMES[State(code)]
        return name


def timed_out_rows(
    t: EntryTable, incomplete: npt.NDArray[np.bool_] | None
) -> npt.NDArray[np.bool_]:
    """Rows retired without completing (`incomplete`: rows that did not complete): timed out or
    failed. On a backend that records no state, retired and not complete is that; elsewhere the
    state must not be `completed` too."""
    if incomplete is None or not t.n:
        return np.zeros(t.n, dtype=bool)
    ended = t.retired & incomplete & (stateless(t) | (t.state != State.COMPLETED))
    return np.asarray(ended, dtype=np.bool_)


def last_per_rank(t: EntryTable) -> dict[int, int]:
    """Each rank's last row."""
    if not t.n:
        return {}
    starts = rank_starts(t.rank)
    last = np.append(starts[1:], t.n) - 1
    return dict(zip(t.rank[starts].tolist(), last.tolist(), strict=True))


def positions(refs: Refs, incomplete: npt.NDArray[np.bool_]) -> tuple[Position, ...]:
    """One position per group and pair of ops as shown. Each (rank, group) gets its last
    completed row and first row not completed; (rank, group) pairs whose two rows read alike
    (same op, sequence id, state, flags and sizes) are collapsed on their codes first, so
    OpRefs are made only for the few distinct positions, not for every rank."""
    t, groups = refs.t, refs.groups
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

    p2p_kinds = (UnitKind.P2P, UnitKind.BATCH_MEMBER, UnitKind.BATCH_MARKER)

    def shown(rows: npt.NDArray[np.int64], sizes: bool) -> list[npt.NDArray[np.int64]]:
        """What `OpRef.describe` (and the sizes) read from each row, as codes; -1 if none."""
        has = rows >= 0
        at = np.where(has, rows, 0)
        p2p = np.isin(t.unit[at], p2p_kinds)  # of the rows shown only, not of every row
        seq = np.where(p2p, t.p2p_seq[at], t.coll_seq[at])
        fields = [t.pname[at], p2p, seq, t.state[at], t.retired[at]]
        if sizes:
            fields.append(t.in_shape[at])
        return [np.where(has, f.astype(np.int64), -1) for f in [has, *fields]]

    columns = [uid, *shown(last_done, False), *shown(first_inc, True)]
    _, position_of = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    position_of = position_of.reshape(-1)
    # Age in the first op not completed, as `OpRef.age_s` has it.
    newest_ns = refs.newest_ns
    newest = np.array([newest_ns.get(r, -1) for r in rank.tolist()], dtype=np.int64)
    created = np.where(first_inc >= 0, t.t_created[np.maximum(first_inc, 0)], -1)
    aged = (first_inc >= 0) & (created >= 0) & (newest >= created)
    aged &= ~refs.timed_out[np.maximum(first_inc, 0)]  # a timed-out op's age is not known here
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
    lc_refs = iter(refs.refs(lc_rows[lc_rows >= 0].tolist()))
    fi_refs = iter(refs.refs(fi_rows[fi_rows >= 0].tolist()))
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


def stacks(
    t: EntryTable,
    shown: dict[int, OpRef],
    depth: int,
    groups: GroupTable | None = None,
) -> tuple[StackGroup, ...]:
    """Ranks grouped by the innermost `depth` frames, framework frames collapsed (`collapse`),
    of the op `shown` for each rank (the op it is blocked in, else its newest), most ranks
    first. A group is the odd one out where some of its ranks' stacks differ from the stack
    most members of one of their groups share (`odd_ranks`); without `groups`, every shown
    rank is one group."""
    collapsed: dict[int, tuple[Stack, int]] = {}  # stack code → (collapsed stack, hidden)
    by_stack: dict[Stack | None, list[int]] = defaultdict(list)
    hidden_of: dict[Stack | None, int] = {}
    stack_of: dict[int, Stack] = {}
    for rank, ref in sorted(shown.items()):
        code = int(t.stack[ref.row])
        stack: Stack | None = None
        if code >= 0:
            found = collapsed.get(code)
            if found is None:
                found = collapsed[code] = collapse(t.stacks[code])
            stack = found[0][:depth]
            stack_of[rank] = stack
            hidden_of.setdefault(stack, found[1])
        by_stack[stack].append(rank)
    if not by_stack:
        return ()
    odd = _odd_ranks(stack_of, groups)
    ordered = sorted(by_stack.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    out = []
    for stack, ranks in ordered:
        strange = tuple(r for r in ranks if r in odd)
        out.append(StackGroup(stack, tuple(ranks), bool(strange), strange, hidden_of.get(stack, 0)))
    return tuple(out)


def same_op_stacks(
    t: EntryTable, groups: GroupTable, ref: OpRef, depth: int
) -> tuple[StackGroup, ...]:
    """Other ranks' stacks of the op `ref` is, most ranks first: their rows of the same op
    with the same sequence id (the p2p one for send/recv) in a group of the same family (the
    same description), each rank in its own group of that family; framework frames collapsed
    and the innermost `depth` kept, as `stacks` does. Ranks whose row has no frames are left
    out. What the culprit's stack is set against: its peers at the same op, not at another."""
    if not t.n:
        return ()
    family = ref.group.desc or ref.group.name
    uids = [g.uid for g in groups.groups if (g.desc or g.name) == family]
    row = ref.row
    hit = np.isin(groups.entry_group, uids) & (t.op == t.op[row]) & (t.rank != t.rank[row])
    if ref.p2p_seq_id is not None:
        hit &= t.p2p_seq == t.p2p_seq[row]
    else:
        hit &= t.coll_seq == t.coll_seq[row]
    hit &= t.stack >= 0
    rows = np.flatnonzero(hit)
    place = _place(ref.group, ref.rank)
    if ref.p2p_seq_id is not None and place is not None:
        # a send/recv's code depends on where the rank is in its group (a pipeline's stage):
        # its peers are the ranks at the same place in theirs
        pairs = zip(groups.entry_group[rows].tolist(), t.rank[rows].tolist(), strict=True)
        rows = rows[[_place(groups.groups[u], r) == place for u, r in pairs]]
    by_stack: dict[Stack, set[int]] = defaultdict(set)
    collapsed: dict[int, Stack] = {}
    hidden: dict[Stack, int] = {}
    for code, rank in zip(t.stack[rows].tolist(), t.rank[rows].tolist(), strict=True):
        stack = collapsed.get(code)
        if stack is None:
            whole, gone = collapse(t.stacks[code])
            stack = collapsed[code] = whole[:depth]
            hidden.setdefault(stack, gone)
        by_stack[stack].add(rank)
    ordered = sorted(by_stack.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
    return tuple(
        StackGroup(stack, tuple(sorted(ranks)), False, (), hidden[stack])
        for stack, ranks in ordered
    )


def _place(group: Group, rank: int) -> int | None:
    """`rank`'s place in `group` (its group rank), or None when not a member."""
    return group.ranks.index(rank) if rank in group.ranks else None


_FRAMEWORK_DIRS = ("torch/distributed/",)
_WRAPPER_FILES = ("functools.py", "typing_extensions.py", "c10d_logger.py", "_contextlib.py")
_MODULE_CALLS = frozenset({"_call_impl", "_wrapped_call_impl"})


def is_framework(frame: Frame) -> bool:
    """A frame of torch.distributed, or of a wrapper around calls (c10d's logger, functools,
    typing_extensions' deprecation wrapper, torch's module call and context decorators)."""
    path = frame.filename.replace("\\", "/")
    if any(f"/{d}" in path or path.startswith(d) for d in _FRAMEWORK_DIRS):
        return True
    if path.endswith("torch/nn/modules/module.py") and frame.name in _MODULE_CALLS:
        return True
    return _is_wrapper(path)


def _is_wrapper(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return base in _WRAPPER_FILES


def collapse(stack: Stack) -> tuple[Stack, int]:
    """`stack` (innermost first) with framework frames (`is_framework`) collapsed, and how many
    were taken out. Of the innermost run of them, the call the program made stays: the
    outermost frame of that run that is not a wrapper (`all_gather_into_tensor`, not the
    `all_gather_single` it calls, nor c10d's logging wrapper around it); every other framework
    frame goes. A stack of framework frames alone is kept whole."""
    kept: list[Frame] = []
    run: list[Frame] = []
    for frame in stack:
        if is_framework(frame):
            if not kept:
                run.append(frame)  # still the innermost run
            continue
        if run and not kept:
            calls = [f for f in run if not _is_wrapper(f.filename.replace("\\", "/"))]
            kept.append(calls[-1] if calls else run[0])
        kept.append(frame)
    if not kept:
        return stack, 0
    return tuple(kept), len(stack) - len(kept)


def _odd_ranks(stack_of: dict[int, Stack], groups: GroupTable | None) -> set[int]:
    """Ranks whose stack differs from one that a strict majority of the members (with a stack)
    of one of their groups share. A rank's groups here: those of three members or more that
    are not the whole job, else the whole job (pairs have no majority; stages of a pipeline
    run different code, so the world's majority says nothing of a rank that has smaller
    groups)."""
    if not stack_of:
        return set()
    ids: dict[Stack, int] = {}
    code = {r: ids.setdefault(s, len(ids)) for r, s in stack_of.items()}
    if len(ids) < 2:
        return set()
    world = max(groups.world_size, len(stack_of)) if groups is not None else len(stack_of)
    sets: list[tuple[int, ...]]
    if groups is None:
        sets = [tuple(sorted(stack_of))]
    else:
        sets = [g.ranks for g in groups.groups if g.size >= 3]
    in_small = {r for m in sets if len(m) < world for r in m}
    odd: set[int] = set()
    for members in sets:
        whole = len(members) >= world
        counts: dict[int, int] = defaultdict(int)
        with_stack = [r for r in members if r in code and (not whole or r not in in_small)]
        for r in with_stack:
            counts[code[r]] += 1
        if len(counts) < 2:
            continue
        top, top_count = max(counts.items(), key=lambda kv: kv[1])
        if top_count * 2 <= len(with_stack):
            continue  # no stack is held by most of them
        odd.update(r for r in with_stack if code[r] != top)
    return odd
