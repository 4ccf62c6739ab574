"""`analyze()`: the stages in order (load → groups → match → findings → diagnosis →
conclusion), with no logic of its own; or, where the cache kept the analysis of the very
table loaded with the same options, that analysis (`Kept`).

It is over 600 lines because what is kept of an analysis, and under which key, must see
every option and every stage's result at once, as only the pipeline does."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from . import diagnosis as diagnosis_mod
from . import load as dumps_mod
from .conclusion import Conclusion, conclude, with_other_reading
from .diagnosis import Diagnosis, Thresholds, diagnose, stragglers
from .diagnosis import series as series_mod
from .errors import DiscoveryError, UsageError
from .load import (
    DEFAULT_MAX_FILE_BYTES,
    LIMITS,
    MANIFEST,
    ROW_BYTES,
    Directory,
    Discovery,
    DumpFile,
    Kinds,
    PythonStacks,
    RankCache,
    RankSink,
    Remote,
    Source,
    TableBuilder,
    Unkeepable,
    decode_kept,
    encode_kept,
    find_python_stacks,
    job_logs_identity,
    kinds_of,
    name_time_ns,
    read_job_logs,
    read_manifest,
)
from .match import MatchResult, PartMatch, PartRunner, match
from .match.findings import collect
from .match.frontier import Held, Wanted
from .match.outcomes import CallChunk, JobUnits, Outcomes
from .memory import collector_paused, small_pages
from .model.dump import RankDump, Reader, Writer
from .model.groups import GroupTable, build_groups, grouped
from .model.profile import Profiles, profiles_of
from .model.ranks import agree, compact
from .model.recorders import description
from .model.records import DumpSummary, Finding, UnreadableDump
from .model.shown import Showing, Shown
from .model.table import EntryTable, rank_starts

Progress = Callable[[str, int, int], None]

T = TypeVar("T")
ShardFn = Callable[
    [Sequence[int], npt.NDArray[np.int64], Mapping[str, np.ndarray], Sequence[int] | None], T
]
"""A sum over some ranks' rows: `fn(ranks, starts, columns, only)` (rank i's rows from
`starts[i]` to `starts[i + 1]` of each column by name; only the ranks `only` names, None:
all), of a table or of a shard of a cluster's (`KeptRows.reduced`)."""
"""`progress(phase, done, total)`: how far a phase has got. The caller draws it (the CLI, as
bars on a terminal); the pipeline only counts. Called once per rank while loading and once per
stage while analyzing, so it may be called often and should be cheap."""

LOADING = "loading dumps"
"""The phase that reads every rank's dump: `done` and `total` count rank files."""
ANALYZING = "matching and diagnosing"
"""The phase after loading: `done` and `total` count its stages (`ANALYSIS_STAGES`)."""
ANALYSIS_STAGES = 5
"""Groups, matching, findings, diagnosis, conclusion."""

REMOTE_WORKERS = 8
"""Worker processes that fetch and read remote files (each waits on the network part of the
time), unless `Options.workers` says otherwise."""


class Engine(Protocol):
    """Where the ranks' files are read: this process and its workers (`InProcess`), or a
    cluster (`fr_analyzer.cluster`). Every engine reads each file with the same loader and
    limits (`load.load_all`) and hands each rank read to the sink in file order; what is
    decided over every rank at once (`load.within_the_job`), the table and the cache are the
    pipeline's, the same for every engine."""

    @property
    def label(self) -> str:
        """Where the ranks were read, for the report's header ("" for this process)."""
        ...

    def refuses(self, source: Source) -> str | None:
        """Why this engine cannot read `source` (None: it can)."""
        ...

    def read(
        self,
        files: Sequence[DumpFile],
        options: Options,
        progress: Callable[[int, int], None] | None,
        sink: RankSink,
    ) -> tuple[list[RankDump], list[UnreadableDump]]:
        """Read every file (`progress(done, total)` counts ranks): the ranks read (headers,
        in file order) and those that could not be."""
        ...

    def match_runner(self, rows: KeptRows | None = None) -> PartRunner | None:
        """Where the parts of the job are matched (`match.partitions`); None: the whole
        table at once, in this process. `rows`: the rows kept of the read analyzed, where
        the driver holds no table (None: the last read's)."""
        ...

    def profiles(self) -> Profiles | None:
        """The profiles (`model.profile`) of the ranks of the last read, made where their
        rows were read; None: made from the table."""
        ...

    def kept_rows(self) -> KeptRows | None:
        """Where the rows of the last read are kept, the driver holding no table (None: they
        went into the table, through the sink)."""
        ...


class KeptRows(Protocol):
    """The rows of a job kept where an engine read them (`cluster.kept`), for a driver that
    holds no table: only the job's lists of values come to it (`build`), and of the rows
    only those a diagnosis holds (`fetch`), by the parts' pieces (`take`). The analysis
    over them is `kept`'s."""

    def build(self, ranks: Sequence[int]) -> EntryTable:
        """The table of no rows of the ranks kept in the job: every list of values."""
        ...

    def fetch(self, lists: EntryTable, rows: npt.NDArray[np.int64]) -> EntryTable:
        """The job's `rows` (ascending) as a table of their own (`lists`: `build`'s)."""
        ...

    def take(self, final: Sequence[PartMatch], wanted: Wanted) -> list[PartMatch]:
        """Each part's piece of its final result (`final`: the rounds' briefs of them)."""
        ...

    def lateness(
        self, final: Sequence[PartMatch], stall_ms: float, straggler_ms: float
    ) -> stragglers.Summary | None:
        """The straggler rule's summary of the job (`diagnosis.lateness`'s passes), made
        where the rows are (None: it could not be; the rule then reads every row)."""
        ...

    def outcomes(self, final: Sequence[PartMatch], bounds: npt.NDArray[np.int64]) -> Outcomes:
        """The job's units and pairs and each chunk's outcome of matching (`bounds`: the
        chunks' first rows, then the job's end), taken of the parts' final results where
        they lie (`final`: the rounds' briefs of them)."""
        ...

    def shown(self, final: Sequence[PartMatch], showing: Showing) -> list[Shown]:
        """The rows `showing` asks for, chosen of each part where it lies (in the job's
        rows; `final`: the rounds' briefs of the parts)."""
        ...

    def reduced(self, fn: ShardFn[T]) -> list[T]:
        """`fn` of the rows of each part of the ranks kept, where they lie (a shard of a
        cluster's, in a task): a sum over every row that needs none of them in the driver
        (`series.summed_ranks`, `render.timeline.extent`)."""
        ...

    def step_rows(self, lists: EntryTable) -> EntryTable:
        """The rows of the ranks that measure the job's step (`series.step_ranks`), as a
        table of their own (`lists`: `build`'s)."""
        ...

    def release(self) -> None:
        """The analysis is over: what is kept may go."""
        ...


class JobCalls(Protocol):
    """Every entry of a job whose rows its engine keeps, with its outcome of matching, a
    chunk of rows at a time: what the database's `collectives` and `nccl_calls` tables show
    (`render.tables`) where the driver holds no table (`Options.keep_rows`)."""

    @property
    def units(self) -> JobUnits:
        """The job's collective units and send/recv pairs, as one process numbers them."""
        ...

    def chunks(self) -> Iterator[CallChunk]:
        """The job's rows in order, a chunk at a time, each with its outcome."""
        ...

    def held(self, wanted: Wanted) -> Held:
        """The job's rows `wanted` (with each rank's frontier), fetched from where they lie:
        for an output that shows a few of them (`render.report_html`)."""
        ...

    def shown(self, showing: Showing) -> tuple[EntryTable, Shown]:
        """The rows `showing` asks for (`-j`), chosen where they lie, then fetched: the
        table of them, and them in it."""
        ...

    def reduced(self, fn: ShardFn[T]) -> list[T]:
        """`fn` of the rows of each part of the job's ranks, where they lie
        (`KeptRows.reduced`)."""
        ...


class InProcess:
    """The default engine: this process reads, its forked workers decode (`load.load_all`)."""

    label = ""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers

    def refuses(self, source: Source) -> str | None:
        """This process reads every kind of source."""
        return None

    def match_runner(self, rows: KeptRows | None = None) -> PartRunner | None:
        """The whole table matched at once, here."""
        return None

    def profiles(self) -> Profiles | None:
        """Made from the table, here."""
        return None

    def kept_rows(self) -> KeptRows | None:
        """Every row goes into the table."""
        return None

    def read(
        self,
        files: Sequence[DumpFile],
        options: Options,
        progress: Callable[[int, int], None] | None,
        sink: RankSink,
    ) -> tuple[list[RankDump], list[UnreadableDump]]:
        """Read every file in this process's workers."""
        return dumps_mod.load_all(
            files,
            self.workers,
            options.max_file_bytes,
            progress,
            sink=sink,
            ft_group_world_size=options.ft_group_world_size,
            job_wide=False,
        )


@dataclass(frozen=True)
class Options:
    """How to find and load the dumps."""

    prefix: str | None = None
    workers: int | None = None  # None: every core
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    thresholds: Thresholds = field(default_factory=Thresholds)
    ft_group_world_size: int | None = None  # a torchft job: default groups made global
    file_times: bool = True  # date each dump by its file's modification time (`ages`)
    job_logs: tuple[Path, ...] = ()  # the job's logs: the watchdog's timeouts (`joblogs`)
    engine: Engine | None = None  # where the files are read; None: this process (`InProcess`)
    cache: RankCache | None = None  # ranks read before, kept by their files' identity
    # the entry table's columns kept as files in this folder, mapped (out of core: a job
    # larger than memory); None: in memory
    table_dir: Path | None = None
    # with table_dir: the table kept in memory while it takes at most this many bytes, moved
    # to table_dir past it; None: in table_dir from the start
    table_memory_bytes: int | None = None
    # an engine that keeps the rows keeps them past the analysis, for the outputs that take
    # entries from where they lie (`Analysis.calls`): the database, the HTML report
    keep_rows: bool = False


@dataclass(frozen=True)
class Analysis:
    """Everything the reporters and the database writer need."""

    summary: DumpSummary
    dumps: tuple[RankDump, ...]
    table: EntryTable
    groups: GroupTable
    matches: MatchResult
    findings: tuple[Finding, ...]
    diagnosis: Diagnosis
    conclusion: Conclusion
    series: series_mod.Series | None = None  # several snapshots compared: the newest is analyzed
    python_stacks: PythonStacks | None = None  # each rank's Python threads at the snapshot
    rows_in_job: int | None = None  # the job's rows, where `table` holds some only (`kept`)
    calls: JobCalls | None = None  # every entry, from where its engine keeps the rows

    @property
    def entries(self) -> int:
        """The job's entries (rows), whether or not `table` holds them all."""
        return self.table.n if self.rows_in_job is None else self.rows_in_job


@dataclass(frozen=True)
class Loaded:
    """The ranks read, those that could not be, and where they came from."""

    dumps: list[RankDump]
    unreadable: list[UnreadableDump]
    table: EntryTable
    found: Discovery
    answered: dict[int, int] = field(default_factory=dict)  # rank -> when it answered (live)
    python_stacks: PythonStacks | None = None  # the debug server's (or py-spy's) stacks file
    notes: tuple[str, ...] = ()  # warnings about where the dumps came from
    # gloo traces: the same files with another assignment of their ops to groups that fits
    # as well (`load.Settled.other`); None: there is none
    other_files: Sequence[DumpFile] | None = None
    engine: str = ""  # where the files were read (`Engine.label`; "" for this process)
    profiles: Profiles | None = None  # the ranks' profiles, where the engine made them
    # the rows, where the engine keeps them (`table` then has none: `KeptRows.build`)
    rows: KeptRows | None = None


def load(where: Path | Source, options: Options, progress: Progress | None = None) -> Loaded:
    """Load every rank; each rank's columns go into the table as soon as it arrives (the
    collector paused: its passes over the ranks kept are a cost that grows with the job;
    numpy's large arrays in small pages, see `small_pages`; the figures are in
    benchmarks/README.md, "Measured in the code")."""
    with collector_paused(), small_pages():
        return _load(where, options, progress)


def _load(where: Path | Source, options: Options, progress: Progress | None) -> Loaded:
    found = dumps_mod.discover(where, options.prefix)
    files: Sequence[DumpFile] = dumps_mod.with_shown(found.files)
    if not isinstance(found.source, Directory):
        return _load_files(found, files, options, progress)
    # gloo traces: each op's group, from every rank's trace
    settled = dumps_mod.with_settled_groups(files, options.max_file_bytes)
    got = _load_files(found, settled.files, options, progress)
    return replace(got, notes=settled.notes + got.notes, other_files=settled.other)


def _load_files(
    found: Discovery, files: Sequence[DumpFile], options: Options, progress: Progress | None
) -> Loaded:
    source = found.source
    engine = options.engine
    if engine is None:
        workers = options.workers
        if workers is None and isinstance(source, Remote):
            workers = REMOTE_WORKERS  # fetching waits on the network: more files in flight
        engine = InProcess(workers)
    refused = engine.refuses(source)
    if refused is not None:
        raise UsageError(refused)
    builder = TableBuilder(
        ranks_hint=len(files), on_disk=options.table_dir, in_memory_up_to=options.table_memory_bytes
    )
    loaded, unreadable, table = _read(
        engine,
        source.tasks(files, options.max_file_bytes),
        options,
        None if progress is None else functools.partial(progress, LOADING),
        builder,
    )
    if not loaded:
        reasons = "; ".join(f"{u.file}: {u.reason}" for u in unreadable[:3])
        raise DiscoveryError(f"{source.label}: no readable rank dump ({reasons})")
    if not options.file_times:
        loaded = [replace(d, file_time_ns=None, name_time_ns=None) for d in loaded]
    answered: dict[int, int] = {}
    notes: list[str] = list(options.cache.notes) if options.cache is not None else []
    if options.table_memory_bytes is not None and builder.out_of_core is not None:
        notes.append(
            f"the entry table ({table.n:,} entries, {table.n * ROW_BYTES / 2**30:.1f} GiB) was"
            f" kept out of core in {builder.out_of_core}: past the memory left for it"
            " (--table-dir chooses the folder)"
        )
    manifest = read_manifest(source.path) if isinstance(source, Directory) else None
    shown = files[0].shown if files else 0
    if manifest is not None and manifest.world_size > LIMITS.claimed_world_factor * shown:
        notes.append(
            f"{MANIFEST} claims a job of {manifest.world_size:,} ranks, past"
            f" {LIMITS.claimed_world_factor}x the ranks the files show: not read"
        )
        manifest = None
    if manifest is not None:  # saved by `fr-analyze live`: who did not answer, and why
        answered = manifest.times
        have = {d.rank for d in loaded} | {u.rank for u in unreadable}
        unreadable += [
            UnreadableDump(
                f"{source.label}/rank_{rank}", rank, f"the debug server's worker {why}", True
            )
            for rank, why in sorted(manifest.errors.items())
            if rank not in have
        ]
        notes += [
            f"the job also serves {name} ({count} entries in all), not analyzed: "
            f"{manifest.handler} has more"
            for name, count in sorted(manifest.others.items())
            if count
        ]
    unreadable.sort(key=lambda u: -1 if u.rank is None else u.rank)
    python = find_python_stacks(source.path) if isinstance(source, Directory) else None
    return Loaded(
        loaded,
        unreadable,
        table,
        found,
        answered,
        python,
        tuple(notes),
        engine=engine.label,
        profiles=engine.profiles(),
        rows=engine.kept_rows(),
    )


def _read(
    engine: Engine,
    files: Sequence[DumpFile],
    options: Options,
    progress: Callable[[int, int], None] | None,
    builder: TableBuilder,
) -> tuple[list[RankDump], list[UnreadableDump], EntryTable]:
    """Every rank read by `engine` (or taken from the cache), its columns into `builder` as
    it arrives, then what is decided over every rank at once (or the whole answer, taken
    from the cache: `RankCache.read_table`)."""

    def read(
        some: Sequence[DumpFile], progress: Callable[[int, int], None] | None, sink: RankSink
    ) -> tuple[list[RankDump], list[UnreadableDump]]:
        return engine.read(some, options, progress, sink)

    def finish(
        loaded: list[RankDump], unreadable: list[UnreadableDump]
    ) -> tuple[list[RankDump], list[UnreadableDump], EntryTable]:
        loaded, unreadable = dumps_mod.within_the_job(
            loaded, unreadable, options.ft_group_world_size
        )
        loaded.sort(key=lambda d: d.rank)
        ranks = [d.rank for d in loaded]
        kept = engine.kept_rows()
        return loaded, unreadable, builder.build(ranks) if kept is None else kept.build(ranks)

    if options.cache is not None:
        salt = f"{options.max_file_bytes}:{options.ft_group_world_size}"
        return options.cache.read_table(read, files, progress, builder.add, salt, finish)
    return finish(*read(files, progress, builder.add))


def entries(
    where: Path | Source, options: Options, progress: Progress | None = None
) -> tuple[EntryTable, GroupTable]:
    """Load and group only: what `--just-print-entries` shows."""
    try:
        got = load(where, options, progress)
        return got.table, build_groups(got.dumps, got.table, got.unreadable)
    finally:
        _cache_written(options)


def analyze(
    where: Path | Source,
    options: Options = Options(),
    progress: Progress | None = None,
) -> Analysis:
    """The analysis of one dump folder; of a series when `where` is a folder of snapshots."""
    if isinstance(where, Directory):
        folders = series_mod.snapshot_folders(where.path)
        if folders is not None:
            return analyze_series([Directory(f) for f in folders], options, progress)
    try:
        got = load(where, options, progress)
        if got.other_files is not None:
            return _with_other_reading(
                analyze_loaded(got, options, progress=progress), got, options
            )
        return _analyzed(got, options, progress)
    finally:
        _cache_written(options)


def _cache_written(options: Options) -> None:
    """Wait for the cache to finish keeping what was loaded (it writes beside the analysis,
    `RankCache.read_table`): nothing of a call goes on after it returns."""
    if options.cache is not None:
        options.cache.wait()


def _with_other_reading(done: Analysis, got: Loaded, options: Options) -> Analysis:
    """Where gloo traces fit another assignment of their ops to groups as well
    (`Loaded.other_files`), that assignment analyzed too: its verdict is named beside the
    answer when it differs (`conclusion.with_other_reading`)."""
    if got.other_files is None:
        return done
    with collector_paused(), small_pages():
        other = _load_files(got.found, got.other_files, options, None)
    found = analyze_loaded(other, options)
    return replace(done, conclusion=with_other_reading(done.conclusion, found.conclusion))


def analyze_series(
    snapshots: Sequence[Path | Source],
    options: Options = Options(),
    progress: Progress | None = None,
) -> Analysis:
    """Several snapshots of one job: each is loaded and summed up (`series.taken`), the
    newest is analyzed, and its ranks are compared with the older snapshots'. Where the
    engine keeps the rows, each is summed up there, and the rows of all but the newest let
    go once it has been."""
    if len(snapshots) == 1:
        return analyze(snapshots[0], options, progress)
    summed: list[series_mod.Taken] = []
    newest: tuple[series_mod.Taken, Loaded] | None = None
    for where in snapshots:
        if isinstance(where, Path):
            where = Directory(where)
        got = load(where, options, progress)
        label = got.found.source.label
        name = Path(where.path).name if isinstance(where, Directory) else label
        # where the engine keeps the rows, summed up there (each rank's mark)
        rows: EntryTable | series_mod.Summed = got.table
        if got.rows is not None:
            rows = series_mod.joined(got.rows.reduced(series_mod.summed_ranks))
        one = series_mod.taken(label, rows, got.dumps, got.answered, name_time_ns(name))
        summed.append(one)
        older: Loaded | None = got
        if newest is None or series_mod.ordered([newest[0], one])[-1] is one:
            older = newest[1] if newest is not None else None
            newest = (one, got)
        if older is not None and older.rows is not None:  # kept for the newest only
            older.rows.release()
        del got, older
    assert newest is not None
    ordered = series_mod.ordered(summed)
    last = newest[1]
    step = last.table if last.rows is None else last.rows.step_rows(last.table)
    compared = series_mod.compare(ordered, step)
    try:
        return analyze_loaded(last, options, compared, progress)
    finally:
        _cache_written(options)


def analyze_loaded(
    got: Loaded,
    options: Options,
    compared: series_mod.Series | None = None,
    progress: Progress | None = None,
) -> Analysis:
    """The stages after loading, over what was loaded (`fr_analyzer.kept`'s, where the
    engine keeps the rows)."""
    if got.rows is not None:  # the driver holds no table
        from .kept import analyze_kept

        return analyze_kept(got, options, compared, progress)
    loaded, unreadable, table = got.dumps, got.unreadable, got.table
    step = stages(progress)
    with collector_paused(), small_pages():
        profiles = _profiles(got)
        groups = build_groups(loaded, table, unreadable, profiles)
        shape = grouped(table, groups, profiles)
        step()
        runner = options.engine.match_runner() if options.engine is not None else None
        frontier = diagnosis_mod.reads_frontier(table.n)
        matches = match(loaded, table, groups, runner, frontier, shape)
        step()
        findings = collect(loaded, unreadable, table, groups, matches)
        summary = summary_of(got, groups, matches.notes)
        step()
        timed_out = read_job_logs(options.job_logs)
        diagnosis = diagnose(
            loaded,
            table,
            groups,
            matches,
            findings,
            options.thresholds,
            compared,
            timed_out,
            profiles=profiles,
        )
        step()
        conclusion = conclude(summary, findings, diagnosis, matches, groups)
        step()
    return Analysis(
        summary,
        tuple(loaded),
        table,
        groups,
        matches,
        tuple(findings),
        diagnosis,
        conclusion,
        compared,
        got.python_stacks,
    )


def _profiles(got: Loaded) -> Profiles:
    """The ranks' profiles (`model.profile`): those the engine made where the rows were read,
    where they are the table's ranks with as many rows each; else made from the table."""
    made = got.profiles
    if made is not None:
        made = made.only([d.rank for d in got.dumps])
        if made.ranks == _rows_by_rank(got.table):
            return made
    return profiles_of(got.table)


def _rows_by_rank(t: EntryTable) -> dict[int, int]:
    """Each rank's rows in the table."""
    if not t.n:
        return {}
    starts = rank_starts(t.rank)
    rows = np.diff(np.append(starts, t.n))
    return dict(zip(t.rank[starts].tolist(), rows.tolist(), strict=True))


KEPT_FORMAT = 1
"""Bump when what is kept of an analysis (`Kept`) changes meaning but not shape."""


@dataclass(frozen=True)
class Kept:
    """What the cache keeps of an analysis beside the whole table it was made from: the
    analysis but its table and ranks (the kept table's own), and the rows whose `retired` the
    analysis changed in the table (`match.completion` clears it where the recorder does not
    say whether an op finished), changed again in the table taken back."""

    summary: DumpSummary
    groups: GroupTable
    matches: MatchResult
    findings: tuple[Finding, ...]
    diagnosis: Diagnosis
    conclusion: Conclusion
    retired_rows: npt.NDArray[np.int64]
    retired: npt.NDArray[np.bool_]  # each of those rows' `retired` after the analysis

    @classmethod
    def of(
        cls,
        done: Analysis,
        retired_rows: npt.NDArray[np.int64],
        retired: npt.NDArray[np.bool_],
    ) -> Kept:
        """What is kept of `done`, with the rows whose `retired` it changed."""
        return cls(
            done.summary,
            done.groups,
            done.matches,
            done.findings,
            done.diagnosis,
            done.conclusion,
            retired_rows,
            retired,
        )


@functools.cache
def kept_kinds() -> Kinds:
    """The classes a kept analysis may hold: those `Kept`'s fields reach (made once, on first
    use), never the table or a rank."""
    return kinds_of(Kept, stops=(EntryTable, RankDump))


def _analyzed(got: Loaded, options: Options, progress: Progress | None) -> Analysis:
    """`analyze_loaded`, or, where the table came whole from the cache and the cache kept the
    analysis of the same table with the same options, that analysis (`Kept`); an analysis of
    a table kept whole is kept beside it."""
    cache = options.cache
    key = None if cache is None or cache.whole is None else _kept_key(got, options)
    if cache is None or key is None:
        return analyze_loaded(got, options, progress=progress)
    table = got.table

    def decode(data: npt.NDArray[np.uint8]) -> Kept | None:
        kept = decode_kept(data, kept_kinds(), key)
        if not isinstance(kept, Kept) or len(kept.retired_rows) != len(kept.retired):
            return None
        rows = kept.retired_rows
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= table.n):
            return None
        return kept

    kept = cache.read_kept(key, decode)
    if kept is not None:
        table.retired[kept.retired_rows] = kept.retired
        if progress is not None:  # nothing left to do: the bar shows it done
            progress(ANALYZING, ANALYSIS_STAGES, ANALYSIS_STAGES)
        return Analysis(
            kept.summary,
            tuple(got.dumps),
            table,
            kept.groups,
            kept.matches,
            kept.findings,
            kept.diagnosis,
            kept.conclusion,
            None,
            got.python_stacks,
        )
    before = table.retired.copy()
    done = analyze_loaded(got, options, progress=progress)
    rows = np.flatnonzero(before != table.retired)
    made = Kept.of(done, rows, table.retired[rows])
    try:
        pieces = encode_kept(made, kept_kinds(), key)
    except Unkeepable:
        return done
    cache.keep(key, pieces)
    return done


def _kept_key(got: Loaded, options: Options) -> str | None:
    """Everything but the table (the cache keys by that) that changes the analysis of a whole
    table: the thresholds, the job's logs (`job_logs_identity`), the options that change how
    the files are read and dated, and what `Loaded` holds beside the table; None where a job
    log cannot be read (then not kept)."""
    logs = job_logs_identity(options.job_logs)
    if logs is None:
        return None
    source = got.found.source
    thresholds = options.thresholds
    key: list[Any] = [
        KEPT_FORMAT,
        [[f.name, getattr(thresholds, f.name)] for f in fields(thresholds)],
        logs,
        options.file_times,
        options.prefix,
        options.ft_group_world_size,
        options.max_file_bytes,
        [source.label, source.kind, source.what, got.engine],
        [got.found.ignored, got.found.warnings, got.notes],
        [[u.file, u.rank, u.reason, u.job_named] for u in got.unreadable],
        sorted(got.answered.items()),
    ]
    return json.dumps(key, separators=(",", ":"))


def stages(progress: Progress | None) -> Callable[[], None]:
    """A function to call after each stage of the analysis: reports `ANALYZING` (first at 0)."""
    if progress is None:
        return lambda: None
    done = [0]
    progress(ANALYZING, 0, ANALYSIS_STAGES)

    def step() -> None:
        done[0] += 1
        progress(ANALYZING, done[0], ANALYSIS_STAGES)

    return step


def summary_of(got: Loaded, groups: GroupTable, notes: tuple[str, ...] = ()) -> DumpSummary:
    """What was loaded, and the warnings about it (`notes`: matching's)."""
    loaded, unreadable, table, found = got.dumps, got.unreadable, got.table, got.found
    versions: dict[str, list[int]] = {}
    for dump in loaded:
        versions.setdefault(dump.version, []).append(dump.rank)
    warnings = list(found.warnings) + list(got.notes) + _dialects(loaded) + list(notes)
    warnings += _folded([w for d in loaded for w in d.warnings])
    warnings += _slow_readers(loaded)
    readers: dict[str, list[int]] = {}
    for dump in loaded:
        readers.setdefault(dump.reader.value, []).append(dump.rank)
    if len(versions) > 1:
        warnings.insert(
            0,
            "ranks wrote different dump format versions: "
            + ", ".join(f"{v} on {len(r)} rank(s)" for v, r in sorted(versions.items())),
        )
    return DumpSummary(
        directory=found.source.label,
        source_kind=found.source.kind,
        source_what=found.source.what,
        engine=got.engine,
        ranks_loaded=tuple(d.rank for d in loaded),
        ranks_missing=groups.missing_ranks,
        unreadable=tuple(unreadable),
        versions={v: tuple(r) for v, r in sorted(versions.items())},
        backends=tuple(sorted({b for b in table.backends})),
        comm_lib_versions=tuple(sorted({d.comm_lib_version for d in loaded if d.comm_lib_version})),
        ignored_files=found.ignored,
        warnings=tuple(warnings),
        readers={name: tuple(ranks) for name, ranks in sorted(readers.items())},
    )


_RANK_WARNING = re.compile(r"rank ([0-9]+): (.*)", re.DOTALL)


def _folded(warnings: list[str]) -> list[str]:
    """The ranks' own warnings, those saying the same of several ranks ("rank 3: ...") made
    one ("ranks 0-3: ..."), in the order each was first given."""
    ranks: dict[str, list[int]] = {}
    out: list[str | tuple[str]] = []
    for warning in warnings:
        found = _RANK_WARNING.fullmatch(warning)
        if found is None:
            out.append(warning)
            continue
        text = found[2]
        if text not in ranks:
            ranks[text] = []
            out.append((text,))
        ranks[text].append(int(found[1]))
    return [
        item
        if isinstance(item, str)
        else f"{agree(ranks[item[0]], 'rank', 'ranks')} {compact(ranks[item[0]])}: {item[0]}"
        for item in out
    ]


def _dialects(loaded: list[RankDump]) -> list[str]:
    """One line per other recorder that wrote some of the ranks."""
    by_text: dict[str, list[int]] = {}
    for dump in loaded:
        text = description(dump.dialect, {desc for _, desc in dump.groups})
        if text is not None:
            by_text.setdefault(text, []).append(dump.rank)
    return [
        f"{agree(ranks, 'rank', 'ranks')} {compact(ranks)}: {text}"
        for text, ranks in sorted(by_text.items())
    ]


_TORCH_WRITERS = frozenset({Writer.TORCH_PICKLE, Writer.TORCH_JSON})
"""A rank in torch's own layout that the decoder did not read is worth a warning."""


def _slow_readers(loaded: list[RankDump]) -> list[str]:
    """Warnings for ranks read slower than their format allows: by the careful per-entry
    reader, or in torch's pickle or JSON layout but not by the decoder; grouped by the reason."""
    by_reason: dict[tuple[str, str], list[int]] = {}
    for dump in loaded:
        if dump.reader is Reader.PER_ENTRY:
            by_reason.setdefault(("read entry by entry (slower)", dump.fallback), []).append(
                dump.rank
            )
        elif dump.fallback_writer in _TORCH_WRITERS:
            by_reason.setdefault(("not decoded", dump.fallback), []).append(dump.rank)
    return [
        f"{agree(ranks, 'rank', 'ranks')} {compact(ranks)} {how}: {reason}"
        for (how, reason), ranks in sorted(by_reason.items())
    ]
