"""`fr-analyze` (the main command, `fr-analyze DIR`): analyze one dump set, or snapshots of one
job, print the report and write the outputs asked for; with `-j`, print the ranks' entries
side by side instead. The options become a `pipeline.Options`, an `Outputs` and a
`ReportOptions` (or an `EntriesView`), and the body calls `analyze_dumps` (or `print_entries`).

Most of it is the options, each declared with its help text in the signature (typer reads
both from there); the ones other commands take too are declared once in `options`.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import UsageError
from ..render.renderer import ReportOptions
from .app import (
    DEBUG_ENV,
    HELP_SECTIONS,
    after_outputs,
    app,
    debug_on,
    show_version,
    verdict_code,
)
from .options import (
    CACHE_HELP,
    check_selected_ranks,
    fsspec_option,
    html_option,
    json_option,
    last_option,
    no_cache_option,
    out_dir_option,
    output_option,
    prefix_option,
    rank_cache,
    selected_ranks_option,
    size_option,
    storage_options,
    workers_option,
)
from .outputs import Outputs, print_report, write_outputs
from .terminal import console, progress_bars

if TYPE_CHECKING:
    from ..load import Source
    from ..pipeline import Options
    from ..render.entries_view import EntriesView


class EngineKind(StrEnum):
    """`--engine`: where the dumps are read."""

    PROCESS = "process"  # this process and its forked workers
    RAY = "ray"  # a Ray cluster (`fr_analyzer.cluster`)


TABLE_SHARE_OF_MEMORY = 0.6
"""The share of the memory available at the start the entry table may take before it moves
out of core (the stages after loading need about 100 bytes an entry beside its 150)."""


def table_placement(table_dir: Path | None) -> dict[str, Any]:
    """`Options`' table_dir and table_memory_bytes: the folder given (the table there from the
    start), else the system's temp folder once the table would take more than its share of
    the memory available now (Linux's MemAvailable; elsewhere the table stays in memory)."""
    if table_dir is not None:
        return {"table_dir": table_dir, "table_memory_bytes": None}
    available = _memory_available()
    if available is None:
        return {"table_dir": None, "table_memory_bytes": None}
    return {
        "table_dir": Path(tempfile.gettempdir()),
        "table_memory_bytes": int(available * TABLE_SHARE_OF_MEMORY),
    }


def _memory_available() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as stream:
            for line in stream:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


RAY_ADDRESS_ENV = "RAY_ADDRESS"
"""The variable Ray's own tools read for the cluster's address."""


@contextmanager
def engine_options(options: Options, kind: EngineKind, address: str | None) -> Iterator[Options]:
    """`options` with the engine asked for, for the time of the `with` block: on Ray, the
    cluster joined (or started) before it and left after it, the rows left in the cluster's
    store (the driver holds no table: `fr_analyzer.kept`, nor a cache of the ranks, which
    keeps the table), and where a job must be matched whole in the driver (a group larger
    than a task takes), its table out of core from the start (in `--table-dir`, else the
    system's temp folder)."""
    if kind is EngineKind.PROCESS:
        if address is not None:
            raise UsageError("--ray-address goes with --engine ray")
        yield options
        return
    from ..cluster import RayEngine, connect

    if options.workers is not None:
        raise UsageError("--workers sets this process's readers: with --engine ray, Ray's CPUs")
    with connect(address or os.environ.get(RAY_ADDRESS_ENV) or None) as cluster:
        yield dataclasses.replace(
            options,
            engine=RayEngine(cluster, rows_in_driver=False),
            cache=None,
            # the driver is the one process that does not scale out: its entry table out of
            # core from the start (the kernel's to page), however large the job
            table_dir=options.table_dir or Path(tempfile.gettempdir()),
            table_memory_bytes=None,
        )


def analyze_dumps(
    sources: Sequence[Source],
    options: Options,
    outputs: Outputs,
    *,
    verbose: bool = False,
    cap: int = 10,
    ranks: bool = False,
    quiet: bool = False,
) -> int:
    """The main command: check the outputs, analyze, print the report, write the outputs;
    returns the exit code."""
    from .. import pipeline

    outputs.check(sources[-1])
    with progress_bars() as progress:
        if len(sources) > 1:
            analysis = pipeline.analyze_series(sources, options, progress)
        else:
            analysis = pipeline.analyze(sources[0], options, progress)
    report = ReportOptions(cap=cap, verbose=verbose, ranks=ranks, quiet=quiet)
    print_report(analysis, report, to_stderr=outputs.to_stdout())
    return after_outputs(analysis, write_outputs(analysis, outputs, report))


def print_entries(source: Source, options: Options, view: EntriesView) -> int:
    """`-j`: analyze (for the root cause and the exit code), print the entries; returns the
    same exit code as the main command."""
    from .. import pipeline
    from ..render import entries_view

    with progress_bars() as progress:
        analysis = pipeline.analyze(source, options, progress)
    check_selected_ranks("--selected-ranks", view.ranks, analysis.groups.world_size)
    screen = console()
    view = dataclasses.replace(view, width=screen.width)
    screen.print(entries_view.render_analysis(analysis, view), end="")
    return verdict_code(analysis)


HELP_SECTIONS.update(
    dict.fromkeys(
        (
            "around_root",
            "all_entries",
            "last",
            "context",
            "selected_ranks",
            "pg_filters",
            "print_stack_trace",
        ),
        "Entries side by side (-j)",
    )
    | dict.fromkeys(("mismatch_cap", "ranks_table", "stack_depth"), "The text report")
    | dict.fromkeys(
        ("dead_after", "straggler_ms", "stall_ms", "ignore_file_times", "job_log"),
        "Judging stuck, dead and slow",
    )
    | dict.fromkeys(
        (
            "prefix",
            "workers",
            "no_cache",
            "storage_option",
            "max_file_size",
            "transform_ft",
            "group_world_size",
            "allow_incomplete_ranks",
        ),
        "Reading the dumps",
    )
    | dict.fromkeys(("engine", "ray_address", "table_dir"), "Where the analysis runs")
)
"""`--help`'s sections: the options not named here (-d, the outputs, -q, -v, -j) come first."""


@app.callback(invoke_without_command=True)
def analyze(
    ctx: typer.Context,
    dump_dirs: Annotated[
        list[str] | None,
        typer.Option(
            "-d",
            "--dump-dir",
            metavar="DIR|ARCHIVE|URL",
            help="The Flight Recorder dumps, one per rank: a directory (searched "
            "recursively), a .tar, .tar.gz, .tgz or .zip archive, or a URL such as "
            "s3://bucket/job/fr/ (pip install 'fr-analyze[remote]'); or the first argument "
            "(fr-analyze DIR). Given several times, or a folder of snapshot folders: the "
            "snapshots are compared (what moved was in flight, what did not is stuck).",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        output_option(
            "Write the flat database here: SQLite when the name ends in .sqlite, "
            ".sqlite3 or .db, a folder of Parquet tables for .parquet, else a pickle of "
            "builtin types (a .json or .html name is refused: see --json, --html).",
        ),
    ] = None,
    json_out: Annotated[
        Path | None,
        json_option(
            "Write the report as JSON (schema fr-analyze.report/1) here; - for stdout "
            "(the text report then goes to stderr).",
        ),
    ] = None,
    html_out: Annotated[
        Path | None,
        html_option("Write the report as one self-contained web page here."),
    ] = None,
    out_dir: Annotated[
        Path | None,
        out_dir_option(
            "Write every output of this one analysis into DIR (new, empty or a previous "
            "run's; replaced whole): report.txt, report.json, report.html, db.pkl, "
            "timeline.json.",
        ),
    ] = None,
    just_print_entries: Annotated[
        bool,
        typer.Option(
            "-j",
            "--just-print-entries",
            "--just_print_entries",
            help="Print the ranks' entries side by side, aligned by sequence id, cells that "
            "deviate marked with '!', ranks with identical cells in one column, and stop (exit "
            "code as without -j). By default around the root cause (--around-root); with none, "
            "each group's newest 5 sequence ids.",
        ),
    ] = False,
    around_root: Annotated[
        bool,
        typer.Option(
            "--around-root",
            help="With -j: only the root cause's group, --context sequence ids either side, "
            "every member (the default when there is a root cause and no --pg-filters, --last "
            "or --all-entries).",
        ),
    ] = False,
    all_entries: Annotated[
        bool,
        typer.Option("--all-entries", help="With -j: every group, every entry, every rank."),
    ] = False,
    last: Annotated[
        int | None,
        last_option("With -j: only each group's newest N sequence ids."),
    ] = None,
    context: Annotated[
        int,
        typer.Option("--context", min=0, help="With -j --around-root: sequence ids either side."),
    ] = 3,
    selected_ranks: Annotated[
        str | None,
        selected_ranks_option("With -j: only these ranks, e.g. 0,3-5 (or 0 3 4 5)."),
    ] = None,
    pg_filters: Annotated[
        list[str] | None,
        typer.Option(
            "--pg-filters",
            help="With -j: only groups with this name or desc (repeatable, comma- or "
            "space-separated).",
        ),
    ] = None,
    print_stack_trace: Annotated[
        bool,
        typer.Option(
            "--print-stack-trace",
            "--print_stack_trace",
            help="With -j: show each entry's stack (innermost first).",
        ),
    ] = False,
    prefix: Annotated[
        str | None,
        prefix_option(
            "File name prefix before the rank number (default: detected, "
            "e.g. rank_, nccl_trace_rank_, comm_lib_trace_rank_).",
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option(
            "-v",
            "--verbose",
            help="The whole text report: every next step, symptom and finding, the stacks, "
            "where every rank stands, the process groups (by default: at most 22 lines).",
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("-q", "--quiet", help="Only the answer, in one to three lines."),
    ] = False,
    mismatch_cap: Annotated[
        int,
        typer.Option(
            "--mismatch-cap",
            "--mismatch_cap",
            min=1,
            help="Show at most this many findings per process group.",
        ),
    ] = 10,
    ranks_table: Annotated[
        bool,
        typer.Option(
            "--ranks",
            help="Print where every rank stands in every group (ranks in the same position "
            "share a row), who is blocked waiting for whom, and the grouped stacks.",
        ),
    ] = False,
    stack_depth: Annotated[
        int,
        typer.Option(
            "--stack-depth", min=1, help="Innermost frames compared when grouping ranks by stack."
        ),
    ] = 8,
    dead_after: Annotated[
        float,
        typer.Option(
            "--dead-after",
            min=0,
            help="Seconds an idle rank's buffer may end before "
            "its peers start waiting for it until it is called dead.",
        ),
    ] = 60.0,
    straggler_ms: Annotated[
        float,
        typer.Option(
            "--straggler-ms",
            min=0,
            help="Median lateness (ms) at collectives that makes a rank a straggler.",
        ),
    ] = 50.0,
    stall_ms: Annotated[
        float,
        typer.Option(
            "--stall-ms",
            min=0,
            help="Lateness (ms) at one collective that makes a rank the cause of a slow job, "
            "when its own previous op does not explain it.",
        ),
    ] = 2000.0,
    workers: Annotated[
        int | None,
        workers_option("Processes that load dumps (default: every core; 8 for a URL)."),
    ] = None,
    engine: Annotated[
        EngineKind,
        typer.Option(
            "--engine",
            case_sensitive=False,
            help="Where the dumps are read and matched: this process and its workers, or a Ray "
            "cluster (needs: pip install 'fr-analyze[ray]'): the one at --ray-address or "
            f"${RAY_ADDRESS_ENV}, else one running on this machine, else a local one started "
            "for the run. Every worker reads its own ranks' files, and each family of process "
            "groups (or some groups of a family too large for a task) is matched in a task of "
            "its own, its rows gathered from the workers; the report is the same. For the text "
            "and JSON reports the rows stay on the cluster: this process fetches only those the "
            "diagnosis reads; --html the few it shows; the database (-o) takes them from "
            "there a chunk at a time.",
        ),
    ] = EngineKind.PROCESS,
    no_cache: Annotated[
        bool,
        no_cache_option(
            "Read every dump again, and keep nothing: by default the ranks read are kept, as "
            "one table with the analysis made of it, in the user's cache "
            f"({CACHE_HELP}, owner-only, at most 2 GiB, the least recently used dropped), so "
            "the next command on the same dumps (-j, --html, timeline, another flag) reads "
            "them from there, and analyzes again only where a threshold or a job log changed; "
            "a changed dump is read again, the others taken from the table."
        ),
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            metavar="HOST:PORT",
            help=f"With --engine ray: the cluster to join (default: ${RAY_ADDRESS_ENV}).",
        ),
    ] = None,
    table_dir: Annotated[
        Path | None,
        typer.Option(
            "--table-dir",
            metavar="DIR",
            exists=True,
            file_okay=False,
            help="Keep the entry table out of core from the start: its columns as files in DIR "
            "(removed as soon as they are mapped), paged in and out by the kernel (about 140 "
            "bytes of disk per entry). Without it the table moves to the system's temp folder "
            "by itself once it would take more than 60% of the memory available (the report "
            "says so); with --engine ray it is there from the start. Either engine.",
        ),
    ] = None,
    storage_option: Annotated[
        list[str] | None,
        fsspec_option(
            "For a URL: an fsspec storage option, e.g. endpoint_url=http://host:9000 or "
            "anon=true (repeatable; VALUE read as JSON when it parses).",
        ),
    ] = None,
    max_file_size: Annotated[
        int | None,
        size_option(
            "--max-file-size",
            "Largest dump file to read, counted after gunzip: bytes, or e.g. 512M, 2G "
            "(default: 1G). A bigger file is reported unreadable; the others are analyzed.",
        ),
    ] = None,
    transform_ft: Annotated[
        bool,
        typer.Option(
            "--transform-ft",
            help="A torchft job: rewrite each replica's default group (desc default_pg) to "
            "global ranks, replica = rank // --group-world-size.",
        ),
    ] = False,
    group_world_size: Annotated[
        int | None,
        typer.Option("--group-world-size", min=1, help="Ranks in one torchft replica group."),
    ] = None,
    ignore_file_times: Annotated[
        bool,
        typer.Option(
            "--ignore-file-times",
            help="The dump files were copied without their modification times, or renamed: "
            "do not date the dumps by their files' times or the times in their names (stuck "
            "or in flight is then judged from the entries alone).",
        ),
    ] = False,
    job_log: Annotated[
        list[Path] | None,
        typer.Option(
            "--job-log",
            help="The job's log (stderr of the ranks; repeat for several): the watchdog's "
            "'collective operation timeout' lines prove those ops stuck, which no dump's "
            "times can.",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    allow_incomplete_ranks: Annotated[
        bool,
        typer.Option(
            "--allow-incomplete-ranks",
            help="Accepted for torchfrtrace's command line; changes nothing: fr-analyze "
            "always analyzes the ranks it can read and names the ones missing.",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            callback=debug_on,
            is_eager=True,
            help=f"On an internal error (exit code 3), print its traceback (or {DEBUG_ENV}=1).",
        ),
    ] = False,
) -> None:
    """Analyze a directory of per-rank Flight Recorder dumps and name the desync.

    Other commands: `fr-analyze timeline --help`, `fr-analyze merge-traces --help`,
    `fr-analyze live --help`, `fr-analyze replay --help`.
    """
    if ctx.invoked_subcommand is not None:
        return
    if not dump_dirs:
        raise UsageError(
            "missing option -d/--dump-dir (see fr-analyze --help)",
            hint="fr-analyze -d DIR (or fr-analyze DIR): the folder of the job's per-rank dumps",
        )
    if quiet and (verbose or ranks_table or just_print_entries):
        given = "-v" if verbose else "--ranks" if ranks_table else "-j"
        raise UsageError(
            f"-q and {given} contradict each other",
            hint="-q prints the answer alone; -v the whole report; -j the entries",
        )
    if transform_ft and group_world_size is None:
        raise UsageError("--transform-ft needs --group-world-size (ranks per replica group)")
    if group_world_size is not None and not transform_ft:
        raise UsageError("--group-world-size goes with --transform-ft")
    from ..diagnosis import Thresholds
    from ..load import DEFAULT_MAX_FILE_BYTES, open_source
    from ..pipeline import Options

    options = Options(
        prefix=prefix,
        workers=workers,
        thresholds=Thresholds(
            dead_after_s=dead_after,
            straggler_ms=straggler_ms,
            stall_ms=stall_ms,
            stack_depth=stack_depth,
        ),
        max_file_bytes=DEFAULT_MAX_FILE_BYTES if max_file_size is None else max_file_size,
        ft_group_world_size=group_world_size,
        file_times=not ignore_file_times,
        job_logs=tuple(job_log or ()),
        cache=rank_cache(no_cache),
        **table_placement(table_dir),
    )
    outputs = Outputs(database=output, json=json_out, html=html_out, out_dir=out_dir)
    sources = [open_source(d, storage_options(storage_option)) for d in dump_dirs]
    entries_only = (around_root, all_entries, last is not None, context != 3)
    if just_print_entries:
        if len(sources) > 1:
            raise UsageError("-j prints one dump set: give one -d")
        if outputs.paths():
            raise UsageError("-j prints the entries only: -o, --json and --html go without -j")
        if outputs.out_dir is not None:
            raise UsageError("-j prints the entries only: --out-dir goes without -j")
        if around_root and (all_entries or last is not None):
            raise UsageError("--around-root goes without --all-entries and --last")
        if all_entries and last is not None:
            raise UsageError(
                f"--last {last} and --all-entries contradict each other",
                hint="--last N for each group's newest N sequence ids, --all-entries for all",
            )
        from ..model.ranks import parse
        from ..render.entries_view import EntriesView

        filters = tuple(p for item in (pg_filters or []) for p in item.split(",") if p)
        elsewhere = all_entries or last is not None or bool(filters)
        view = EntriesView(
            around_root=True if around_root else (False if elsewhere else None),
            context=context,
            last=last,
            ranks=parse(selected_ranks) if selected_ranks else None,
            pg_filters=filters,
            stack=print_stack_trace,
        )
        # on Ray, the rows shown are chosen where they lie: the driver holds no table
        options = dataclasses.replace(options, keep_rows=True)
        with engine_options(options, engine, ray_address) as options:
            raise typer.Exit(print_entries(sources[0], options, view))
    if selected_ranks or pg_filters or print_stack_trace or any(entries_only):
        raise UsageError(
            "--selected-ranks, --pg-filters, --print-stack-trace, --around-root, "
            "--all-entries, --last and --context go with -j"
        )
    # the text and JSON reports read no entry, the HTML report and the timeline fetch those
    # they show, the databases take them a chunk at a time, snapshots are summed up where
    # they lie: on Ray, the driver holds no table
    options = dataclasses.replace(options, keep_rows=outputs.entries_taken())
    with engine_options(options, engine, ray_address) as options:
        code = analyze_dumps(
            sources,
            options,
            outputs,
            verbose=verbose,
            cap=mismatch_cap,
            ranks=ranks_table,
            quiet=quiet,
        )
    raise typer.Exit(code)
