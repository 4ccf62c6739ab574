"""The `fr-analyze` command: parse options, call one function, map errors to exit codes.

Exit codes: 0 when the answer is `ok`, 1 for any other answer (desync, hung, slow,
incomplete), 2 bad usage or no readable dump. Errors print one line
on stderr, never a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from tabulate import tabulate

from . import (
    __version__,
    cli_compat,
    database,
    database_sqlite,
    entries_view,
    live,
    pipeline,
    ranks,
    report,
    report_json,
    timeline,
    traces,
)
from .diagnosis import Thresholds
from .dumps import DEFAULT_MAX_FILE_BYTES, parse_size
from .dumps.opening import open_source
from .dumps.sources import Source
from .errors import FrAnalyzerError, UsageError
from .model import Status
from .output import check_output_path, destination, is_stdout, write_atomic

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Find the process group, collective and ranks that desynced a distributed PyTorch "
    "job, from its per-rank Flight Recorder dumps.\n\n"
    "Reads the dumps of PyTorch's recorder (NCCL, gloo, XCCL, ...), of torchcomms and of HCCL "
    "(torch_npu): pickle or JSON, optionally gzip-compressed. Takes torchfrtrace's command "
    "line too: fr-analyze DIR -j --selected-ranks 0 1 --pg-filters tp --mismatch_cap 5.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fr-analyze {__version__}")
        raise typer.Exit(EXIT_OK)


def _progress(done: int, total: int) -> None:
    if done == total or done % 64 == 0:
        sys.stderr.write(f"\rloading dumps: {done}/{total}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _file_size(text: str | int) -> int:
    if isinstance(text, int):  # the default
        return text
    try:
        return parse_size(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.callback(invoke_without_command=True)
def analyze(
    ctx: typer.Context,
    dump_dirs: Annotated[
        list[str] | None,
        typer.Option(
            "-d",
            "--dump-dir",
            metavar="DIR|ARCHIVE|URL",
            help="Where the Flight Recorder dumps are, one per rank (pickle or JSON, "
            "optionally .gz): a directory (searched recursively), a .tar, .tar.gz, .tgz or "
            ".zip archive (read member by member, never extracted), or a URL such as "
            "s3://bucket/job/fr/ (needs: pip install 'fr-analyze[remote]'). Required; may "
            "also be given as the first argument, as torchfrtrace takes it. Given several "
            "times (snapshots of one job taken at different times), or a folder whose "
            "sub-folders are snapshots (as `fr-analyze live --save` writes them), the "
            "snapshots are compared: what moved was in flight, what stayed the same is stuck.",
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Write the flat database here: SQLite when the name ends in .sqlite, "
            ".sqlite3 or .db, else a pickle of builtin types.",
        ),
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write the report as JSON (schema fr-analyze.report/1) here (- for stdout).",
        ),
    ] = None,
    just_print_entries: Annotated[
        bool,
        typer.Option(
            "-j",
            "--just-print-entries",
            "--just_print_entries",
            help="Print every rank's entries side by side per "
            "process group, aligned by sequence id, and stop.",
        ),
    ] = False,
    selected_ranks: Annotated[
        str | None,
        typer.Option(
            "--selected-ranks", help="With -j: only these ranks, e.g. 0,3-5 (or 0 3 4 5)."
        ),
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
        typer.Option(
            "-p",
            "--prefix",
            help="File name prefix before the rank number (default: detected, "
            "e.g. rank_, nccl_trace_rank_, comm_lib_trace_rank_).",
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option("-v", "--verbose", help="Also print the process-group and membership tables."),
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
        typer.Option(
            "--workers",
            min=1,
            help="Processes that load dumps (default: every core; 8 for a URL).",
        ),
    ] = None,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option",
            metavar="KEY=VALUE",
            help="For a URL: an fsspec storage option, e.g. endpoint_url=http://host:9000 or "
            "anon=true (repeatable; VALUE read as JSON when it parses).",
        ),
    ] = None,
    max_file_size: Annotated[
        int,
        typer.Option(
            "--max-file-size",
            parser=_file_size,
            metavar="<size>",
            show_default=False,
            help="Largest dump file to read, counted after gunzip: bytes, or e.g. 512M, 2G "
            "(default: 1G). A bigger file is reported unreadable; the others are analyzed.",
        ),
    ] = DEFAULT_MAX_FILE_BYTES,
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
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Analyze a directory of per-rank Flight Recorder dumps and name the desync.

    Other commands: `fr-analyze timeline --help`, `fr-analyze merge-traces --help`.
    """
    if ctx.invoked_subcommand is not None:
        return
    if not dump_dirs:
        raise UsageError("missing option -d/--dump-dir (see fr-analyze --help)")
    if transform_ft and group_world_size is None:
        raise UsageError("--transform-ft needs --group-world-size (ranks per replica group)")
    if group_world_size is not None and not transform_ft:
        raise UsageError("--group-world-size goes with --transform-ft")
    thresholds = Thresholds(
        dead_after_s=dead_after,
        straggler_ms=straggler_ms,
        stall_ms=stall_ms,
        stack_depth=stack_depth,
    )
    options = pipeline.Options(
        prefix=prefix,
        workers=workers,
        thresholds=thresholds,
        max_file_bytes=max_file_size,
        ft_group_world_size=group_world_size,
        file_times=not ignore_file_times,
    )
    progress = _progress if sys.stderr.isatty() else None
    sources = [open_source(d, _storage_options(storage_option)) for d in dump_dirs]
    source = sources[-1]
    if just_print_entries and len(sources) > 1:
        raise UsageError("-j prints one dump set: give one -d")
    if just_print_entries:
        chosen = ranks.parse(selected_ranks) if selected_ranks else None
        filters = [p for item in (pg_filters or []) for p in item.split(",") if p]
        table, groups = pipeline.entries(source, options, progress)
        typer.echo(
            entries_view.render_entries(
                table, groups, ranks=chosen, pg_filters=filters, stack=print_stack_trace
            ),
            nl=False,
        )
        return
    if selected_ranks or pg_filters or print_stack_trace:
        raise UsageError("--selected-ranks, --pg-filters and --print-stack-trace go with -j")
    for path in (output, json_out):
        if path is not None:
            check_output_path(path, source)
    result = (
        pipeline.analyze_series(sources, options, progress)
        if len(sources) > 1
        else pipeline.analyze(source, options, progress)
    )
    _report(result, verbose, mismatch_cap, ranks_table, json_out, output)


def _report(
    result: pipeline.Analysis,
    verbose: bool,
    mismatch_cap: int,
    ranks_table: bool,
    json_out: Path | None,
    output: Path | None,
) -> None:
    """Print the text report, write the JSON and the database, exit with the answer's code."""
    try:
        text = report.render_text(result, verbose=verbose, cap=mismatch_cap, ranks=ranks_table)
    except Exception as exc:  # the answer still reaches the reader
        text = (
            f"{result.conclusion.answer}\n(the report could not be rendered: "
            f"{type(exc).__name__}: {exc})\n"
        )
    # an output on standard output (`--json -`) keeps it for itself: the text goes to stderr
    typer.echo(text, nl=False, err=is_stdout(json_out) or is_stdout(output))
    if json_out is not None:
        write_atomic(json_out, report_json.render_json(result, cap=mismatch_cap).encode())
    if output is not None:
        if database_sqlite.wanted(output):
            database_sqlite.write(result, output)
        else:
            database.write(result, output)
    raise typer.Exit(EXIT_OK if result.conclusion.status == Status.OK else EXIT_FINDINGS)


@app.command("live")
def live_cmd(
    urls: Annotated[
        list[str],
        typer.Argument(
            metavar="URL...",
            help="The debug server's frontend (http://host:25999, started on rank 0 by "
            "torch.distributed.debug.start_debug_server), or every rank's worker address "
            "in rank order (http://host:port ...).",
        ),
    ],
    snapshots: Annotated[
        int, typer.Option("--snapshots", min=1, help="Snapshots to take and compare.")
    ] = 2,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.0, help="Seconds from one snapshot to the next."),
    ] = 10.0,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            min=0.1,
            help="Seconds a rank has to answer; one that does not is named in the report.",
        ),
    ] = 30.0,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Ranks asked at the same time.")
    ] = 128,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            help="Keep what was fetched here: one folder per snapshot (rank_<N>.json, "
            "stacks.txt, fetch.json), which fr-analyze -d reads again.",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the flat database here.")
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the report as JSON here (- for stdout).")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Also print the group tables.")
    ] = False,
) -> None:
    """Ask a running job's debug server for every rank's Flight Recorder and stacks, a few
    times, and analyze the snapshots: what moved was in flight, what did not is stuck."""
    for path in (output, json_out):
        if path is not None:
            check_output_path(path, save) if save is not None else destination(path)
    settings = live.Settings(snapshots, interval, timeout, concurrency)
    fleet = live.workers(urls, timeout)
    with contextlib.ExitStack() as stack:
        into = save or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fr-live-")))
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
        taken = live.take(fleet, into, settings, _snapshot_line(snapshots, len(fleet)))
        if all(not any(a.size for a in snap.answers) for snap in taken):
            first = taken[-1].answers[0]
            raise UsageError(
                f"no rank of {len(fleet)} answered with a Flight Recorder "
                f"(rank {first.rank}: {first.error})"
            )
        folders: list[Path | Source] = [snap.folder for snap in taken]
        result = pipeline.analyze_series(folders)
        if save is None:  # the folders are gone once the report is out: name the job instead
            where = f"{' '.join(urls[:2])}{' ...' if len(urls) > 2 else ''} (not saved: --save)"
            result = dataclasses.replace(
                result, summary=dataclasses.replace(result.summary, directory=where)
            )
        _report(result, verbose, 10, False, json_out, output)


def _snapshot_line(count: int, world: int) -> Callable[[live.Snapshot], None]:
    def show(snap: live.Snapshot) -> None:
        index = show.done = show.done + 1  # type: ignore[attr-defined]
        answered = world - len(snap.unanswered)
        seconds = (snap.finished_ns - snap.started_ns) / 1e9
        sys.stderr.write(
            f"snapshot {index} of {count}: {answered} of {world} ranks answered in "
            f"{seconds:.2f} s ({snap.chosen}) -> {snap.folder}\n"
        )
        sys.stderr.flush()

    show.done = 0  # type: ignore[attr-defined]
    return show


def _analysis(source: Source, prefix: str | None, workers: int | None) -> pipeline.Analysis:
    progress = _progress if sys.stderr.isatty() else None
    return pipeline.analyze(source, pipeline.Options(prefix=prefix, workers=workers), progress)


def _storage_options(items: list[str] | None) -> dict[str, Any]:
    """`--storage-option KEY=VALUE` as fsspec's keyword arguments (VALUE as JSON if it is)."""
    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--storage-option {item!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


@app.command("timeline")
def timeline_cmd(
    dump_dir: Annotated[
        str,
        typer.Option(
            "-d",
            "--dump-dir",
            metavar="DIR|ARCHIVE|URL",
            help="Per-rank dumps: a directory, an archive or a URL (as for the analysis).",
        ),
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Write the Chrome trace JSON here.")
    ],
    align: Annotated[
        bool,
        typer.Option(
            "--align",
            help="Shift each rank's clock so that the completions of "
            "collectives every member completed line up (least squares).",
        ),
    ] = False,
    last: Annotated[
        int | None, typer.Option("--last", min=1, help="Only each rank's newest N ops.")
    ] = None,
    seq: Annotated[
        str | None,
        typer.Option("--seq", help="Only collective sequence ids A:B (inclusive)."),
    ] = None,
    start: Annotated[
        float | None,
        typer.Option("--start", help="Window start, µs from the trace's origin."),
    ] = None,
    end: Annotated[
        float | None, typer.Option("--end", help="Window end, µs from the trace's origin.")
    ] = None,
    selected_ranks: Annotated[
        str | None, typer.Option("--selected-ranks", help="Only these ranks, e.g. 0,3-5.")
    ] = None,
    no_flows: Annotated[
        bool, typer.Option("--no-flows", help="Leave out the flow arrows between ranks.")
    ] = False,
    prefix: Annotated[
        str | None, typer.Option("-p", "--prefix", help="Dump file name prefix.")
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", min=1, help="Processes that load dumps.")
    ] = None,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option", metavar="KEY=VALUE", help="For a URL: an fsspec storage option."
        ),
    ] = None,
) -> None:
    """Write the dumps as a Chrome trace (Perfetto, chrome://tracing): one process per rank,
    one thread per process group, findings and the root cause marked."""
    source = open_source(dump_dir, _storage_options(storage_option))
    check_output_path(output, source)
    options = timeline.TimelineOptions(
        align=align,
        last=last,
        seq=_seq_range(seq),
        start_us=start,
        end_us=end,
        ranks=ranks.parse(selected_ranks) if selected_ranks else None,
        flows=not no_flows,
    )
    trace = timeline.build(_analysis(source, prefix, workers), options)
    write_atomic(output, json.dumps(trace).encode())
    n = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    typer.echo(
        f"wrote {output}: {n} op slices, {len(trace['traceEvents'])} events", err=is_stdout(output)
    )


def _seq_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        return timeline.parse_seq(text)
    except ValueError as exc:
        raise UsageError(f"--seq: {exc}") from None


@app.command("merge-traces")
def merge_traces_cmd(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="Per-rank trace files (.json or .json.gz) or directories of them."),
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Write the merged Chrome trace here.")
    ],
    start: Annotated[
        float | None, typer.Option("--start", help="Keep events from this time (µs).")
    ] = None,
    end: Annotated[
        float | None, typer.Option("--end", help="Keep events up to this time (µs).")
    ] = None,
    steps: Annotated[
        str | None,
        typer.Option("--steps", help="Keep only ProfilerStep#A..#B of each rank, e.g. 3:9."),
    ] = None,
    fr_dir: Annotated[
        str | None,
        typer.Option(
            "--fr",
            metavar="DIR|ARCHIVE|URL",
            help="Overlay the Flight Recorder timeline of these dumps.",
        ),
    ] = None,
) -> None:
    """Merge per-rank profiler traces into one trace: pid = rank, clocks synced."""
    step_range = None
    if steps is not None:
        try:
            step_range = timeline.parse_seq(steps)
        except ValueError as exc:
            raise UsageError(f"--steps: {exc}") from None
    files = traces.expand_inputs(inputs)
    if output.resolve() in {f.resolve() for f in files}:
        raise UsageError(f"{output}: is one of the input traces")
    infos = [traces.inspect(f) for f in files]
    overlay = None
    if fr_dir is not None:
        source = open_source(fr_dir)
        check_output_path(output, source)
        overlay = traces.fr_overlay(_analysis(source, None, None), infos)
    report_ = traces.merge(
        files, output, traces.MergeOptions(start, end, step_range), overlay, infos
    )
    rows = [
        [
            r.rank,
            r.file,
            r.rank_source,
            f"{r.offset_us:.1f}",
            r.events_in,
            r.events_out,
            "; ".join(r.warnings),
        ]
        for r in report_.ranks
    ]
    typer.echo(
        tabulate(
            rows,
            headers=[
                "rank",
                "file",
                "rank from",
                "offset µs",
                "events in",
                "events out",
                "warnings",
            ],
            tablefmt="simple",
        )
    )
    typer.echo(f"clock sync: {report_.clock_source}; wrote {output}")


def main() -> None:
    """Console-script entry point."""
    try:
        argv = cli_compat.translate(sys.argv[1:], typer.main.get_group(app))
        code = app(args=argv, standalone_mode=False, prog_name="fr-analyze")
    except typer.Exit as exc:
        code = exc.exit_code
    except FrAnalyzerError as exc:
        sys.stderr.write(f"fr-analyze: error: {exc}\n")
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        sys.stderr.write("fr-analyze: interrupted\n")
        sys.exit(EXIT_ERROR)
    except Exception as exc:  # usage errors and anything unexpected: one line, no traceback
        show = getattr(exc, "show", None)
        if callable(show):  # click's usage errors (vendored by typer): "Usage: ... Error: ..."
            show()
            sys.exit(EXIT_ERROR)
        sys.stderr.write(f"fr-analyze: internal error: {type(exc).__name__}: {exc}\n")
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
