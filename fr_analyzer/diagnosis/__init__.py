"""Hang diagnosis: from who waits for whom (`waits`) to the root everything waits for.

The rules, in the order they are applied:

1. A disagreement (op type, size or dtype; a send/recv pair that disagrees) is a program bug
   and the root: the causally first one wins.
2. Unfinished ops are a hang only when they are old (`ages`): a dump taken while ops were in
   flight has no root cause.
3. Ranks that wait for each other in a cycle issued ops in different orders. The order the
   other ranks follow (the same groups, or groups alike, at the same sequence ids) decides who
   deviated: that rank skipped the op the others wait for it in. With no such reference it is
   a deadlock.
4. Otherwise the root is what the most ranks (transitively) wait for: a rank with no usable
   dump (dead), a rank that never issued the op (not joined: it stopped, or it skipped the op
   and went on, which the same reference order tells), or ranks stuck on their own in an op
   that their peers completed or started (stuck collective), or that every member issued and
   none completed (a communication-level hang). A rank blocked in an earlier op of its own is
   never the root of a later op it has not reached: edges lead through it.
5. On a backend that records no send/recv (gloo), a rank blocked in one looks idle; of the
   idle ranks the others wait for, the root is a rank with no dump (its peers stopped past
   their last recorded collective), else the one that stopped where its peers went straight on
   to the op they wait for it in (else the one whose activity stopped first), and the others
   (stages starved of their input, peers of the dead rank) are taken to wait for it. Nor does
   gloo record a monitored_barrier: a rank waiting alone in the op the program issues after
   one, for ranks that stopped right before it, skipped it (`barriers`).
6. With nothing hung and no disagreement, a rank that made the others wait (`stragglers`).

One module per rule family: `mismatch` (1), `cycles` (3), `stuck` (4's roots), `idle` (5, and
the op an idle rank was due to issue), `barriers` (5's skipped monitored_barrier), `p2p`
(send/recv that left the schedule), `hang` (3 to 5 weighed against each other), `stragglers`
(6); `sentences` words them, `aftermath` says what the root explains, `context` is what they
all read, and the order the other ranks follow comes from `match.reference`. `frontier` holds
the rows the rules read when they are made on each rank's frontier rather than on the whole
table (off by default: `FRONTIER_FROM`), with the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..load import TRACE_CUT_NOTE as TRACE_CUT
from ..load import WatchdogTimeout
from ..match import MatchResult
from ..match.frontier import WINDOW, Wanted
from ..model.dump import RankDump
from ..model.groups import GroupTable
from ..model.profile import Profiles, profiles_of
from ..model.recorders import Dialect
from ..model.records import Finding
from ..model.table import EntryTable
from . import aftermath, frontier, stragglers, waits
from .ages import DumpTime, dump_time
from .context import Context
from .hang import Candidate, hang_root
from .mismatch import first_mismatch, mismatch_root, skipped_root
from .positions import Refs, last_per_rank, positions, stacks
from .records import (
    Alternative,
    Confidence,
    Diagnosis,
    RankState,
    RootCause,
    RootKind,
    RootTime,
    Thresholds,
    Timing,
    WaitStep,
)
from .series import Series
from .timing import judge_timing

DEFAULT_THRESHOLDS = Thresholds()

__all__ = [
    "Alternative",
    "Candidate",
    "Confidence",
    "Diagnosis",
    "RankState",
    "RootCause",
    "RootKind",
    "RootTime",
    "Thresholds",
    "Timing",
    "WaitStep",
    "diagnose",
]


def killed_ranks(dumps: Sequence[RankDump]) -> frozenset[int]:
    """Ranks read from an Execution Trace cut where they were killed, beside other ranks'
    Flight Recorder dumps: dead, as a rank with no dump is (`waits.build`). Where every rank
    is a trace, progress is judged by what each issued instead."""
    if all(d.dialect == Dialect.EXECUTION_TRACE for d in dumps):
        return frozenset()
    return frozenset(
        d.rank
        for d in dumps
        if d.dialect == Dialect.EXECUTION_TRACE and any(TRACE_CUT in w for w in d.warnings)
    )


@dataclass(frozen=True)
class Whole:
    """What the diagnosis decides over every row of the job, not over the rows it holds
    (`frontier`): each rank's newest timestamp, the dump's time, and the straggler rule
    (it weighs every completed collective), computed only when asked."""

    newest_ns: dict[int, int]
    when: DumpTime
    slowness: Callable[[], stragglers.Slowness | None]


FRONTIER_FROM: int | None = None
"""Rows from which the diagnosis reads each rank's frontier rather than the whole table; None:
never. Off while the driver builds the whole table anyway: there reading the frontier costs
more than it saves (the rules run twice where they ask for whole programs, and the rows held
are a copy): at 16,384 ranks 4.0 s against 3.0 s; at 65,536 ranks on Ray the driver's CPU
rose from 109 s to 133 s (docs/scale.md). It is the diagnosis for a driver that holds no
table."""


def reads_frontier(rows: int) -> bool:
    """Whether the diagnosis of a table of `rows` rows reads only the frontier."""
    return FRONTIER_FROM is not None and rows >= FRONTIER_FROM


MOST_PASSES = 4
"""Diagnoses made on part of the table, each with the whole programs the last one asked for;
past them (or once the rows asked for are most of the table) the whole table is read."""
MOST_SHARE = 0.5
"""Held rows past this share of the table: the whole table is read (a copy saves nothing)."""


def diagnose(
    dumps: Sequence[RankDump],
    table: EntryTable,
    groups: GroupTable,
    matches: MatchResult,
    findings: Sequence[Finding],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    series: Series | None = None,
    timed_out: Sequence[WatchdogTimeout] = (),
    *,
    window: int = WINDOW,
    most_share: float | None = None,
    frontier_from: int | None = None,
    profiles: Profiles | None = None,
    reads: frontier.Reads | None = None,
    slowness: Callable[[], stragglers.Slowness | None] | None = None,
) -> Diagnosis:
    """Where every rank stands, the root cause (if any), and whether the job is hung
    (`timed_out`: the ops the job's log says the watchdog timed out).

    On a table of `frontier_from` rows or more (None: as `FRONTIER_FROM` says), made on each
    rank's frontier (`frontier`: `window` ops per group before its first op not completed),
    and again with the whole programs of the ranks the rules read, until they read no rank
    they lack; on the whole table where that is most of it (`most_share`). Either way the
    same diagnosis (tests/diagnosis/test_frontier.py). `reads`: where those rows come from
    (the table by default; `match.pieces.Pieces`: the parts that matched it, then the frontier
    is read whatever the table's size). Each rank's newest timestamp and the dump's time come
    from the ranks' profiles (`model.profile`: made from the table when not given). The
    straggler rule (only where nothing is hung) weighs every completed op of `table`, or
    is asked of `slowness` where given (a driver that holds no table)."""
    t = table
    if profiles is None:
        profiles = profiles_of(t)
    most_share = MOST_SHARE if most_share is None else most_share
    slow: list[stragglers.Slowness | None] = []

    def slowest() -> stragglers.Slowness | None:
        if not slow:
            slow.append(
                slowness()
                if slowness is not None
                else stragglers.find(
                    t, groups, matches, thresholds.straggler_ms, thresholds.stall_ms
                )
            )
        return slow[0]

    whole = Whole(profiles.newest(), dump_time(profiles, dumps), slowest)
    args = (dumps, findings, thresholds, series, timed_out, whole)
    if reads is None:
        if not (reads_frontier(t.n) if frontier_from is None else t.n >= frontier_from):
            return _diagnose(t, groups, matches, *args)[0]
        reads = frontier.Frontier(t, groups, matches, findings, window)
    wanted = Wanted()
    rows = reads.select(wanted)
    for _ in range(MOST_PASSES):
        if len(rows) > most_share * reads.n:
            break
        part = reads.held(rows)
        found, read = _diagnose(part.table, part.groups, part.matches, *args)
        wanted = Wanted(
            wanted.units | set(read.units), wanted.ranks | (read.ranks - part.whole_ranks)
        )
        more = reads.select(wanted)
        if len(more) == len(rows):
            return frontier.to_table(found, part.rows)
        rows = more
    every = reads.whole()
    found = _diagnose(every.table, every.groups, every.matches, *args)[0]
    return frontier.to_table(found, every.rows)


@dataclass(frozen=True)
class _Read:
    """What a diagnosis read beyond each rank's frontier: whole programs, and the root's op."""

    ranks: frozenset[int]
    units: tuple[tuple[int, int], ...]  # (group uid, collective seq id)


def _diagnose(
    t: EntryTable,
    groups: GroupTable,
    matches: MatchResult,
    dumps: Sequence[RankDump],
    findings: Sequence[Finding],
    thresholds: Thresholds,
    series: Series | None,
    timed_out: Sequence[WatchdogTimeout],
    whole: Whole,
) -> tuple[Diagnosis, _Read]:
    """The diagnosis made on the rows `t` holds (every row, or part, `frontier.held`)."""
    newest_ns = whole.newest_ns
    graph = waits.build(t, groups, matches, killed_ranks(dumps))
    # A rank's frontier did not complete, whatever the row's flags say (`waits`: gloo retires
    # a collective that failed with a dead rank as one that completed).
    incomplete = graph.incomplete.copy()
    incomplete[list(graph.frontier.values())] = True
    refs = Refs(t, groups, newest_ns, incomplete)
    blocked = dict(zip(graph.frontier, refs.refs(list(graph.frontier.values())), strict=True))
    last_row = last_per_rank(t)
    newest = dict(zip(last_row, refs.refs(list(last_row.values())), strict=True))
    states = {
        rank: RankState(rank, blocked.get(rank), newest.get(rank), graph.waits_for(rank))
        for rank in groups.loaded_ranks
    }
    timing = judge_timing(t, graph, dumps, series, timed_out, whole.when)
    ctx = Context(
        table=t,
        groups=groups,
        matches=matches,
        graph=graph,
        newest_ns=newest_ns,
        last_row=last_row,
        refs=refs,
        thresholds=thresholds,
        wrapped=frozenset(d.rank for d in dumps if d.wrapped),
    )
    root: RootCause | None = None
    read_on = graph  # the wait graph the root was read on (the hang rules resolve cycles)
    first = first_mismatch(ctx, findings)
    if first is not None:
        root = mismatch_root(ctx, first)
    elif matches.skipped:
        root = skipped_root(ctx, matches.skipped[0])
    elif graph.frontier and timing.hung:
        hang = hang_root(ctx)
        root, read_on = hang.root, hang.view.graph
    if root is None and not (graph.frontier and timing.hung):
        slow = whole.slowness()
        if slow is not None:
            root = stragglers.straggler_root(slow)
    behind = frozenset(aftermath.behind(ctx, root, read_on)) if root is not None else frozenset()
    if root is not None:
        root = replace(root, time=aftermath.root_time(ctx, root))
    shown = {r: s.blocked or s.newest for r, s in states.items() if s.blocked or s.newest}
    units: tuple[tuple[int, int], ...] = ()
    if root is not None and root.group is not None and root.collective_seq_id is not None:
        units = ((root.group.uid, root.collective_seq_id),)
    found = Diagnosis(
        positions(refs, incomplete),
        tuple(states[r] for r in sorted(states)),
        stacks(
            t,
            {r: ref for r, ref in shown.items() if ref is not None},
            thresholds.stack_depth,
            groups,
        ),
        root,
        timing,
        behind,
        {d.rank: d.host for d in dumps if d.host},
    )
    return found, _Read(frozenset(ctx.peers.programs_read), units)
