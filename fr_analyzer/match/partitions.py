"""Matching in parts: the job's rows cut by process-group family, each part matched alone, the
parts' results put back together as one `MatchResult` (`match.merging`), equal to matching
the whole table.

A part is every row of a set of groups: the groups of one description (`group.desc`: the
tensor-parallel groups, the pipeline groups, the world), since the rules that vote across
groups (`match.reference.sibling_votes`, `match.p2p`'s reference transfer) ask groups of the
same description, and parts are joined where a coalesced block's end marker lies in another
group (`match.cutting` decides). A family larger than a task takes is cut into parts of some
of its groups; those ask each other what those rules read of the groups they do not hold, and
are matched again once answered (`rounds`, `match.elsewhere`). What a part's rules read of
other groups beside that is computed once over the whole job first (`Shared`) and handed to
every part: completion (`match.completion`, and the recorder conventions learned over every
group), the ranks with an op in flight (`match.missing`), each rank's pipeline positions
(`match.reference.group_stage`) and each rank's last row (the gloo proof in
`match.collectives.proof`). A part carries its own rows of the table (numbered from 0) and
the job's lists of distinct values, so it can be matched in another process: an engine runs
the parts where it likes (`PartRunner`; the Ray engine, one task each) and the results are
merged in the order one process would have made them (`match.merging`). A part's result
taken over the rows of its closed frontier only (`piece`) is what a driver that holds no
table reads of it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..model.dump import RankDump
from ..model.groups import GroupTable
from ..model.profile import Grouped, Profiles
from ..model.records import Finding
from ..model.table import TABLE_COLUMNS, EntryTable
from . import completion
from .collectives import match_collectives
from .context import MatchContext
from .conventions import (
    Signature,
    intrinsic_size_errors,
    recorder_conventions,
)
from .cutting import sizes
from .elsewhere import Elsewhere, Question, answer, unheld
from .frontier import Closure, Wanted, about, closed_window, held_matches
from .p2p import match_p2p
from .records import MatchResult, id_type
from .reference import pipeline_stages

B = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]
Stages = dict[int, set[tuple[str, int, int]]]


@dataclass(frozen=True)
class Shared:
    """What every part needs to know of the whole job, computed once from the ranks' headers
    and profiles (`model.profile`), never from the rows: where the recorders do not say
    whether an op finished, the ranks with an op in flight, the pipeline stages, each rank's
    last row; and the layouts learned as the recorder's anywhere in the job (`accepted`, once
    every part has been matched: `rounds`)."""

    quiet: completion.Quiet
    notes: tuple[str, ...]
    last_enqueued: dict[tuple[int, int], int]
    wrapped: dict[int, bool]
    unavailable: frozenset[int]
    busy: frozenset[int]  # ranks holding an op they have not retired
    stages: Stages  # rank -> its (desc, size, local rank) in each group carrying send/recv
    rank_ends: I64  # each rank's last row, ascending
    frontier: bool = False  # each part finds and closes its groups' frontier (`match.frontier`)
    accepted: frozenset[Signature] = frozenset()


def shared(
    dumps: Sequence[RankDump],
    t: EntryTable,
    groups: GroupTable,
    shape: Grouped,
    frontier: bool = False,
) -> Shared:
    """What the parts share, from the ranks' headers and profiles (`shape`)."""
    quiet = completion.quiet(shape.profiles, dumps)
    return Shared(
        quiet=quiet,
        notes=quiet.notes,
        last_enqueued=_last_enqueued(dumps, t, groups),
        wrapped={d.rank: d.wrapped for d in dumps},
        unavailable=frozenset(
            set(groups.missing_ranks) | (set(range(groups.world_size)) - set(groups.loaded_ranks))
        ),
        busy=quiet.busy(shape.profiles),
        stages=pipeline_stages(shape, groups),
        rank_ends=_rank_ends(shape.profiles),
        frontier=frontier,
    )


@dataclass(frozen=True)
class Part:
    """One part to match: its rows of the table (renumbered from 0) and what it needs of the
    rest of the job. `rows` are the part's rows in the whole table, ascending (None: every
    row, the table itself). `local`: the groups whose rows it holds (None: every group);
    `answers`: what the groups it does not hold answered to what it asked before;
    `questions`: what it is asked about its own groups (`match.elsewhere`)."""

    rows: I64 | None
    table: EntryTable
    groups: GroupTable
    quiet: completion.Quiet
    rank_ends: I64  # the part's rows that are their rank's last, ascending
    last_enqueued: dict[tuple[int, int], int]
    wrapped: dict[int, bool]
    unavailable: frozenset[int]
    busy: frozenset[int]
    stages: Stages
    index: int = 0  # the part's place among the job's parts
    local: frozenset[int] | None = None
    answers: Mapping[Question, Any] = field(default_factory=dict)
    questions: frozenset[Question] = frozenset()
    frontier: bool = False  # find its groups' frontier too, closed (`match.frontier`)
    accepted: frozenset[Signature] = frozenset()  # layouts other parts learned


@dataclass(frozen=True)
class PartMatch:
    """A part's result, in the part's own row numbers; `rows` maps them to the table's. A
    result that `asked` about groups it does not hold is not final: the part is matched
    again with their answers (`rounds`)."""

    rows: I64 | None
    result: MatchResult
    wild_pairs: int  # of the part's pairs, how many (the last) took a recv from any source
    index: int = 0
    asked: frozenset[Question] = frozenset()
    answered: Mapping[Question, Any] = field(default_factory=dict)  # to its `questions`
    learned: frozenset[Signature] = frozenset()  # the recorder's layouts its rows show
    left: frozenset[Signature] = frozenset()  # layouts of rows still wrong, maybe learned elsewhere
    # a piece (`piece`): its result is over the rows of its frontier, closed, alone
    # (`rows`: those rows in the table); this is the group of each
    entry_group: npt.NDArray[np.int32] | None = None


@dataclass(frozen=True)
class PartRunner:
    """Where parts are matched: `run` matches each part (`match_part` of `Cut.part`, or
    `match_columns`), anywhere, and yields the results in any order; it is called again for
    the parts of a later round (`rounds`). It takes parts of at most `most_rows` rows (None:
    any): a family of groups larger than that is cut into parts of some of its groups
    (`match.cutting.cut_sets`), and a job with a group larger than that is matched whole by
    the caller (where one process has matched it: out of core if its table is)."""

    run: Callable[[Iterable[Cut]], Iterator[PartMatch]]
    most_rows: int | None = None
    whole: Callable[[], None] | None = None  # told the job is matched whole instead
    # told the rounds are over (`rounds` returned or failed): what it kept for the parts of
    # later rounds may go
    end: Callable[[], None] | None = None


def match_part(part: Part) -> PartMatch:
    """Match one part: its collectives and its send/recv pairs, with their findings."""
    away = None if part.local is None else Elsewhere(part.local, part.answers)
    t, groups = part.table, part.groups
    done = completion.judged(t, groups, part.quiet)
    sizes = recorder_conventions(t, groups, intrinsic_size_errors(t, groups), part.accepted)
    ctx = MatchContext(
        table=t,
        groups=groups,
        done=done,
        size_bad=sizes.size_bad,
        last_enqueued=part.last_enqueued,
        wrapped=part.wrapped,
        unavailable=part.unavailable,
        busy=part.busy,
        stages=part.stages,
        rank_ends=part.rank_ends,
        elsewhere=away,
    )
    findings: list[Finding] = []
    units = match_collectives(ctx, findings)
    pairs = match_p2p(ctx, findings)
    skipped = tuple(f for f in findings if id(f) in ctx.skipped)
    result = MatchResult(units, pairs, ctx.done, tuple(findings), dict(ctx.proof), (), skipped)
    if part.frontier:
        result = replace(result, frontier=closed_window(part.table, result))
    answered = answer(ctx, pairs, part.questions) if part.questions else {}
    asked = frozenset(away.asked) if away is not None else frozenset()
    got = PartMatch(
        part.rows,
        result,
        ctx.wild_pairs,
        part.index,
        asked,
        answered,
        sizes.learned,
        sizes.left,
    )
    return got


def piece(part: Part, done: PartMatch, wanted: Wanted | None = None) -> PartMatch:
    """The part's result (`done`, matched with its frontier: `Part.frontier`) over the rows of
    its frontier alone, with the rows of the collectives its findings are about and those
    `wanted` (closed), renumbered to them (`match.frontier.held_matches`): what a driver that
    holds no table takes of a part (`match.merging.merge_held` puts them together)."""
    frontier = done.result.frontier
    if frontier is None:
        raise ValueError(f"part {done.index} was matched without its frontier")
    wanted = Wanted() if wanted is None else wanted
    t, groups, m = part.table, part.groups, done.result
    closure = Closure(t, m)
    asked = replace(wanted, units=wanted.units | about((*m.findings, *m.skipped)))
    closed = closure.closed(frontier, asked.rows(t, m, closure, groups.entry_group))
    result = held_matches(m, closed)
    pairs = len(done.result.p2p.send_row)
    kept = np.unique(done.result.p2p.entry_pair[closed])
    wild = int((kept >= pairs - done.wild_pairs).sum())
    return replace(
        done,
        rows=closed if done.rows is None else done.rows[closed],
        result=replace(result, frontier=np.arange(len(closed), dtype=np.int64)),
        wild_pairs=wild,
        entry_group=groups.entry_group[closed],
    )


def in_turn(cuts: Iterable[Cut]) -> Iterator[PartMatch]:
    """The runner that matches each part here, one after the other."""
    for cut in cuts:
        yield match_part(cut.part())


def whole(job: Shared, t: EntryTable, groups: GroupTable) -> Part:
    """The whole table as one part (one process matches it so: nothing is copied)."""
    return Part(
        None,
        t,
        groups,
        job.quiet,
        job.rank_ends,
        job.last_enqueued,
        job.wrapped,
        job.unavailable,
        job.busy,
        job.stages,
    )


UNREAD = ("index", "record_id", "group", "op_id", "t_started", "duration_ms", "stack", "timeout_ms")
"""The table's columns no rule of matching reads: a part holds them as a constant (-1), no
copy (`tests/match/test_partitions.py` fills them with noise and gets the same answer)."""
COLUMNS = tuple(
    name for name in (*(n for n, _ in TABLE_COLUMNS), "rank", "row_in_rank") if name not in UNREAD
)
"""The table's columns a part copies."""


class PartRows:
    """The rows of each part (ascending), found on first asking: one stable sort of every row
    by its part (a radix sort where the part fits 16 bits), not a scan of the table per part.
    A cluster that gathers the parts from its shards never asks (`Cut.shell`)."""

    def __init__(self, groups: GroupTable, uid_sets: list[list[int]]) -> None:
        self._groups, self._uid_sets = groups, uid_sets
        self._by_part: I64 | None = None
        self._ends: I64 | None = None

    def of(self, index: int) -> I64:
        """The rows of part `index`."""
        if self._by_part is None or self._ends is None:
            lookup = np.full(len(self._groups.groups) + 1, -1, dtype=np.int32)
            for i, uids in enumerate(self._uid_sets):
                lookup[uids] = i
            which = lookup[self._groups.entry_group]
            parts = len(self._uid_sets)
            narrow = which.astype(np.int16) if parts < np.iinfo(np.int16).max else which
            self._by_part = np.argsort(narrow, kind="stable").astype(id_type(len(which)))
            del narrow
            self._ends = np.cumsum(np.bincount(which + 1, minlength=parts + 1))  # -1: none
        return self._by_part[self._ends[index] : self._ends[index + 1]].astype(np.int64)


@dataclass(frozen=True)
class Cut:
    """A part before its rows are copied: its rows of the whole table (`rows`, found when
    asked for), taken one column at a time (`column`), so that one who ships the part
    elsewhere holds one column's copy at a time, never the part's whole copy beside the
    table."""

    found: PartRows
    size: int  # its rows
    job: Shared
    table: EntryTable
    groups: GroupTable
    uids: tuple[int, ...]  # the groups whose rows these are
    index: int = 0  # the part's place among the job's parts
    answers: Mapping[Question, Any] = field(default_factory=dict)
    questions: frozenset[Question] = frozenset()

    @functools.cached_property
    def rows(self) -> I64:
        """The part's rows of the table, ascending."""
        return self.found.of(self.index)

    def column(self, name: str) -> npt.NDArray[Any]:
        """The part's copy of one column; block markers renumbered to the part's rows."""
        values: npt.NDArray[Any] = getattr(self.table, name)[self.rows]
        if name == "marker":
            inside = values >= 0
            values[inside] = np.searchsorted(self.rows, values[inside]).astype(values.dtype)
        return values

    def frame(self) -> Part:
        """The part with every column of its table empty (`filled` puts them in): what
        matching needs of the job beside the columns, small."""
        return replace(
            self.shell(),
            rows=self.rows,
            groups=replace(self.groups, entry_group=self.groups.entry_group[self.rows]),
            rank_ends=found_among(self.rows, self.job.rank_ends),
        )

    def shell(self) -> Part:
        """The frame without its rows (`rows` None, no group of any row, and `rank_ends` every
        rank's last row of the table): for a task that gathers the part's rows from the
        shards and numbers them itself (`cluster.shuffle`), the driver never sorting the
        table's rows by part."""
        empty: dict[str, Any] = {
            name: getattr(self.table, name)[:0] for name in (*COLUMNS, *UNREAD)
        }
        return Part(
            None,
            replace(self.table, **empty),
            replace(self.groups, entry_group=np.zeros(0, np.int32)),
            self.job.quiet,
            self.job.rank_ends,
            self.job.last_enqueued,
            self.job.wrapped,
            self.job.unavailable,
            self.job.busy,
            self.job.stages,
            self.index,
            frozenset(self.uids),
            self.answers,
            self.questions,
            self.job.frontier,
            self.job.accepted,
        )

    def part(self) -> Part:
        """The whole part, every column copied."""
        return filled(self.frame(), *(self.column(name) for name in COLUMNS))


def filled(frame: Part, *columns: npt.NDArray[Any]) -> Part:
    """The part `frame` with its table's columns (`COLUMNS`, in that order; `UNREAD` ones
    a constant -1)."""
    named: dict[str, Any] = dict(zip(COLUMNS, columns, strict=True))
    n = len(named["rank"])
    for name in UNREAD:
        named[name] = np.broadcast_to(np.array(-1, dtype=getattr(frame.table, name).dtype), (n,))
    table = replace(frame.table, **named)
    return replace(frame, table=table)


def match_columns(frame: Part, *columns: npt.NDArray[Any]) -> PartMatch:
    """`match_part` of the part `frame` with its columns (a task's arguments, each one of
    them its own object in a cluster's store)."""
    return match_part(filled(frame, *columns))


def parts(
    job: Shared,
    t: EntryTable,
    groups: GroupTable,
    uid_sets: list[list[int]],
    rows: list[int],
    only: Mapping[int, frozenset[Question]] | None = None,
    answers: Mapping[Question, Any] | None = None,
) -> Iterator[Cut]:
    """Each set of groups with rows (`rows`: each set's) as a part, its rows found when asked
    for; with `only`, those parts, each with the questions it is asked; every part with
    `answers`."""
    found = PartRows(groups, uid_sets)
    for i in sorted(only) if only is not None else range(len(uid_sets)):
        if rows[i]:
            asked = only[i] if only is not None else frozenset()
            yield Cut(found, rows[i], job, t, groups, tuple(uid_sets[i]), i, answers or {}, asked)


MOST_ROUNDS = 64
"""Rounds of questions (`match.elsewhere`) a job's parts may take before it is matched whole:
each round answers every question asked in the one before, so it takes one round per group
alike whose vote was asked for after another's (`reference.ASK_AT_ONCE` groups at a time)."""


def rounds(
    runner: PartRunner,
    job: Shared,
    t: EntryTable,
    groups: GroupTable,
    uid_sets: list[list[int]],
    shape: Grouped,
) -> list[PartMatch] | None:
    """Every part matched by `runner`, to its final result: a part that asked about groups
    it does not hold is matched again once the parts that hold them have answered (they are
    matched again to answer); a part with rows whose layout another part learned as the
    recorder's (`match.conventions`) is matched again with it, as is every part matched after
    the first run. None after `MOST_ROUNDS` rounds still asking."""
    part_of = np.full(len(groups.groups) + 1, -1, dtype=np.int64)
    for i, uids in enumerate(uid_sets):
        part_of[uids] = i
    # a part with no rows is never matched (`parts`): its groups answer as no part's do
    counts = sizes(shape, groups, uid_sets)
    held = np.array(counts, dtype=np.int64) > 0
    matched = part_of >= 0
    matched[matched] = held[part_of[matched]]
    part_of[~matched] = -1
    final: list[PartMatch] = []
    answers: dict[Question, Any] = {}
    waiting: dict[int, frozenset[Question]] = {}

    def settle(got: Iterator[PartMatch]) -> None:
        for one in got:
            if one.asked:
                waiting[one.index] = one.asked
            else:
                final.append(one)

    first = list(runner.run(parts(job, t, groups, uid_sets, counts)))
    # the layouts learned anywhere: each part learns from its own rows, so all of them are
    # known once every part has been matched
    learned = frozenset[Signature]().union(*(one.learned for one in first))
    job = replace(job, accepted=learned)
    for one in first:
        if one.left & learned:
            waiting[one.index] = frozenset()
        elif one.asked:
            waiting[one.index] = one.asked
        else:
            final.append(one)
    del first
    for _ in range(MOST_ROUNDS):
        if not waiting:
            return final
        unanswered = {q for asked in waiting.values() for q in asked} - answers.keys()
        ask: dict[int, set[Question]] = {}
        for q in unanswered:
            holder = int(part_of[q[0]])
            if holder < 0:
                answers.update(unheld([q]))
            else:
                ask.setdefault(holder, set()).add(q)
        if ask:
            only = {i: frozenset(qs) for i, qs in ask.items()}
            for one in runner.run(parts(job, t, groups, uid_sets, counts, only)):
                answers.update(one.answered)
        if not unanswered <= answers.keys():
            raise AssertionError("a part holding a group asked about gave no answer")
        again = {i: frozenset[Question]() for i in waiting}
        waiting.clear()
        settle(runner.run(parts(job, t, groups, uid_sets, counts, again, answers)))
    return None if waiting else final


def found_among(rows: I64, wanted: I64) -> I64:
    """Where the rows of `wanted` (ascending) are among `rows` (ascending), those present."""
    at = np.searchsorted(rows, wanted)
    hit = at < len(rows)
    hit[hit] = rows[at[hit]] == wanted[hit]
    return at[hit].astype(np.int64)


def _rank_ends(profiles: Profiles) -> I64:
    """Each rank's last row (the table's rows come by rank, a rank's as many as its profile
    says)."""
    return (np.cumsum(profiles.rows) - 1).astype(np.int64)


def _last_enqueued(
    dumps: Sequence[RankDump], t: EntryTable, groups: GroupTable
) -> dict[tuple[int, int], int]:
    """pg_status's last enqueued collective per (rank, group uid)."""
    out: dict[tuple[int, int], int] = {}
    if not t.n:
        return out
    code_to_uid = dict(
        zip(
            zip(t.pair_rank.tolist(), t.pair_group.tolist(), strict=True),
            groups.pair_uid.tolist(),
            strict=True,
        )
    )
    global_codes = {name: code for code, name in enumerate(t.group_names)}
    for dump in dumps:
        for code, (enqueued, _, _) in dump.pg_status.items():
            name = dump.groups[code] if code < len(dump.groups) else None
            if name is None:
                continue
            uid = code_to_uid.get((dump.rank, global_codes.get(name, -1)))
            if uid is not None and enqueued >= 0:
                out[(dump.rank, uid)] = enqueued
    return out
