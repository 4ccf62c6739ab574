"""The analysis of a job whose rows the engine keeps where it read them (`pipeline.KeptRows`:
a Ray cluster's store), the driver holding no table: the same stages as
`pipeline.analyze_loaded`, each over what it needs of the rows.

- Groups and parts: from the ranks' headers, the job's lists of values (the table of no
  rows) and the ranks' profiles, made where the rows were read.
- Matching: the parts matched where their rows are, by the same rounds of questions
  (`match.partitions.rounds`); their results stay there.
- Findings and diagnosis: each part's piece (`match.partitions.piece`: its frontier, the
  collectives its findings are about, the rows the rules ask for), merged, and only the
  rows they hold fetched (`match.pieces.Pieces`); the findings are collected over the first
  rows held (every unit of the job, each with its rows of the frontier: a finding's
  collective is held whole).
- The straggler rule, asked only where nothing is hung, weighs every completed op: its
  passes (`diagnosis.lateness`) run as tasks where the parts and the shards lie
  (`cluster.lateness`), and the rule decides on their summary, reading the rows of the few
  ranks it names (`_decided`); every row is fetched only where a pass's task failed past
  its retries.
- Where a group is larger than a task takes (or the questions do not settle), every row is
  fetched and the job analyzed as one process analyzes it.

The answer is the one the whole table gives (tests/cluster/test_ray_engine.py, every sample
set); the report says how many entries the job has (`Analysis.rows_in_job`), the table it
carries holds the rows the diagnosis read.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from .conclusion import conclude
from .diagnosis import Diagnosis, diagnose, lateness, stragglers
from .diagnosis import series as series_mod
from .load import read_job_logs
from .match import PartMatch, completion, partitions
from .match.cutting import cut_sets
from .match.findings import collect
from .match.frontier import Held, Wanted
from .match.outcomes import CallChunk, JobUnits, Outcomes, chunk_bounds
from .match.pieces import Pieces
from .memory import collector_paused, small_pages
from .model.groups import build_groups, grouped
from .model.records import Finding
from .model.shown import Showing, Shown, joined
from .model.table import EntryTable
from .pipeline import (
    Analysis,
    KeptRows,
    Loaded,
    Options,
    Progress,
    ShardFn,
    T,
    analyze_loaded,
    stages,
    summary_of,
)


def analyze_kept(
    got: Loaded,
    options: Options,
    compared: series_mod.Series | None = None,
    progress: Progress | None = None,
) -> Analysis:
    """`pipeline.analyze_loaded` of `got`, whose rows its engine keeps (`got.rows`)."""
    rows, engine = got.rows, options.engine
    assert rows is not None and engine is not None
    kept = False
    try:
        found = _analyze_kept(got, options, compared, progress)
        kept = found.calls is not None
        return found
    finally:
        if not kept:  # else the analysis' calls hold the rows until it goes
            rows.release()


def _analyze_kept(
    got: Loaded,
    options: Options,
    compared: series_mod.Series | None,
    progress: Progress | None,
) -> Analysis:
    kept, engine = got.rows, options.engine
    assert kept is not None and engine is not None
    loaded, unreadable, lists = got.dumps, got.unreadable, got.table
    step = stages(progress)
    with collector_paused(), small_pages():
        if got.profiles is None:
            raise AssertionError("an engine that keeps the rows makes the profiles")
        profiles = got.profiles.only([d.rank for d in loaded])
        by_rank = profiles.ranks
        n = sum(by_rank.values())
        groups = build_groups(loaded, lists, unreadable, profiles)
        shape = grouped(lists, groups, profiles)
        step()
        runner = engine.match_runner(kept)
        assert runner is not None
        job = partitions.shared(loaded, lists, groups, shape, frontier=True)
        sets = cut_sets(shape, groups, runner.most_rows)
        final = None
        if sets is not None:
            final = partitions.rounds(runner, job, lists, groups, sets, shape)
        if final is None:  # a group larger than a task takes: matched whole, here
            every = _fetched(kept.fetch, lists, job.quiet, np.arange(n, dtype=np.int64))
            whole = replace(got, table=every, rows=None, profiles=profiles)
            return analyze_loaded(whole, replace(options, engine=None), compared, progress)
        step()
        fetch = functools.partial(_fetched, kept.fetch, lists, job.quiet)
        take = functools.partial(kept.take, final)
        first = Pieces(job, lists, groups, take, fetch, by_rank)
        held = first.held(first.select(Wanted()))
        findings = collect(loaded, unreadable, held.table, held.groups, held.matches)
        summary = summary_of(got, groups, held.matches.notes)
        step()
        reads = Pieces(job, lists, groups, take, fetch, by_rank, findings)
        thresholds = options.thresholds

        def slowness() -> stragglers.Slowness | None:
            summed = kept.lateness(final, thresholds.stall_ms, thresholds.straggler_ms)
            if summed is None:  # a task failed past its retries: every row, here
                every = reads.whole()
                return stragglers.find(
                    every.table,
                    every.groups,
                    every.matches,
                    thresholds.straggler_ms,
                    thresholds.stall_ms,
                )
            return _decided(summed, reads, thresholds.straggler_ms)

        diagnosis = diagnose(
            loaded,
            held.table,
            held.groups,
            held.matches,
            findings,
            thresholds,
            compared,
            read_job_logs(options.job_logs),
            profiles=profiles,
            reads=reads,
            slowness=slowness,
        )
        step()
        diagnosis = _stated_by(diagnosis, findings)
        conclusion = conclude(summary, findings, diagnosis, held.matches, groups)
        step()
        calls = None
        if options.keep_rows:
            calls = KeptCalls(kept, final, chunk_bounds(n, CHUNK_ROWS), fetch, reads)
    return Analysis(
        summary,
        tuple(loaded),
        held.table,
        held.groups,
        held.matches,
        tuple(findings),
        diagnosis,
        conclusion,
        compared,
        got.python_stacks,
        rows_in_job=n,
        calls=calls,
    )


CHUNK_ROWS = 1 << 17
"""The rows of the job a database takes at a time where the driver holds no table
(`KeptCalls`): one Parquet row group. The driver holds about 1 KB a row of a chunk while it
writes it (its columns fetched, recoded, then as Arrow's); at 1,024 ranks, 1 M rows a chunk
took the driver from 0.30 to 1.17 GiB, 256 K rows to 0.61, 128 K rows to 0.49, as fast."""


class KeptCalls:
    """Every entry of the job, a chunk of rows at a time, with its outcome of matching
    (`pipeline.JobCalls`): each chunk's rows fetched from where they lie, its outcome taken
    of the parts' final results (`match.outcomes`). The driver holds one chunk at a time."""

    def __init__(
        self,
        rows: KeptRows,
        final: Sequence[PartMatch],
        bounds: npt.NDArray[np.int64],
        fetch: Callable[[npt.NDArray[np.int64]], EntryTable],
        reads: Pieces,
    ) -> None:
        # `bounds`: the chunks' first rows, then the job's end (`chunk_bounds`)
        self._rows, self._final, self._bounds = rows, final, bounds
        self._fetch, self._reads = fetch, reads
        self._outcomes: Outcomes | None = None

    @property
    def outcomes(self) -> Outcomes:
        """The parts' outcomes of matching, asked of them the first time they are needed
        (a view of a few rows needs none)."""
        if self._outcomes is None:
            self._outcomes = self._rows.outcomes(self._final, self._bounds)
        return self._outcomes

    @property
    def units(self) -> JobUnits:
        """The job's collective units and send/recv pairs, as one process numbers them."""
        return self.outcomes.units

    def chunks(self) -> Iterator[CallChunk]:
        """The job's rows in order, a chunk at a time, each with its outcome (once)."""
        outcomes = self.outcomes
        bounds = outcomes.bounds
        for c in range(outcomes.chunks):
            start, stop = int(bounds[c]), int(bounds[c + 1])
            table = self._fetch(np.arange(start, stop, dtype=np.int64))
            yield CallChunk(start, table, outcomes.chunk(c))

    def held(self, wanted: Wanted) -> Held:
        """The job's rows `wanted` (with each rank's frontier), fetched from the pieces."""
        return self._reads.held(self._reads.select(wanted))

    def reduced(self, fn: ShardFn[T]) -> list[T]:
        """`fn` of the rows of each shard of the job's ranks, where they lie."""
        return self._rows.reduced(fn)

    def shown(self, showing: Showing) -> tuple[EntryTable, Shown]:
        """The rows `showing` asks for, chosen of each part where it lies, then fetched."""
        got = joined(self._rows.shown(self._final, showing))
        table = self._fetch(got.rows)
        return table, Shown(np.arange(table.n, dtype=np.int64), got.groups, got.firsts)


def _decided(
    got: stragglers.Summary, reads: Pieces, straggler_ms: float
) -> stragglers.Slowness | None:
    """The straggler rule's decision on the job's summary (`got`), reading only the rows of
    the ranks it names (`RankLateness.named`: whole programs, with every row their ops are
    matched with), fetched from the pieces."""
    if got.ops < 2 or got.kept < 2:
        return None
    held = reads.held(reads.select(Wanted(ranks=got.ranks.named())))
    rows = held.rows
    assert rows is not None
    ranks = got.ranks.renumbered(lambda row: int(np.searchsorted(rows, row)))
    made = lateness.arrivals(held.table, held.matches)
    mine = made.rows[made.kept & made.collective]
    table = held.table

    def collectives_of(rank: int) -> npt.NDArray[np.int64]:
        found: npt.NDArray[np.int64] = mine[table.rank[mine] == rank]
        return found

    resolution = stragglers.WATCHDOG_POLL_MS if got.recorded else 0.0
    return stragglers.decide(
        table,
        held.groups,
        held.matches,
        ranks,
        (got.ops, got.kept),
        resolution,
        straggler_ms,
        collectives_of,
    )


def _stated_by(found: Diagnosis, findings: Sequence[Finding]) -> Diagnosis:
    """`found` with its root's finding the very one of `findings` it equals: the diagnosis
    read it of a later merge of the pieces (each pass merges them anew), and the conclusion
    knows the root's finding by identity."""
    root = found.root_cause
    if root is None or root.finding is None or any(f is root.finding for f in findings):
        return found
    same = next((f for f in findings if f == root.finding), None)
    if same is None:
        return found
    return replace(found, root_cause=replace(root, finding=same))


def _fetched(
    fetch: Callable[[EntryTable, npt.NDArray[np.int64]], EntryTable],
    lists: EntryTable,
    quiet: completion.Quiet,
    rows: npt.NDArray[np.int64],
) -> EntryTable:
    """The job's `rows` fetched, their `retired` cleared where the recorder does not say
    whether an op finished, as matching clears it in a table (`match.completion`)."""
    t = fetch(lists, rows)
    t.retired[completion.silent_rows(t, quiet)] = False
    return t
