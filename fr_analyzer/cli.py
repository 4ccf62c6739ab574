"""The `fr-analyze` command: parse options, call one function, map errors to exit codes.

`run(argv)` is the whole command as a function (the tests call it in this process); `main()`
is the console script. Exit codes (also in `--help`):

- 0: the answer is `ok`;
- 1: any other answer (desync, hung, slow, incomplete);
- 2: bad usage, no readable dump, or an output that cannot be written;
- 3: an internal error, a bug in fr-analyze (one line; `--debug` or `FR_ANALYZE_DEBUG=1`
  prints its traceback).

Every output path (`-o`, `--json`, `--html`, `timeline -o`) is checked before the analysis
starts, so a path that cannot take the output costs nothing but a one-line error (exit 2). If
writing still fails afterwards (a full disk, a FIFO no one reads), the report has been printed,
the other outputs are still written, the error is one line on stderr, and the exit code keeps
the verdict's when it found a problem (1) and is 2 when the verdict was `ok`: a failed run never
exits 0, and a hang is never hidden behind a 2.

When the JSON report (or the database) goes to standard output, the text report goes to stderr,
so that standard output holds that output alone. What was written, and its size, is one line
on stderr per output. On a terminal, stderr shows progress bars (rate and ETA) while loading,
matching and writing.

Heavy modules (numpy, the pipeline, rich, tabulate) are imported by the functions that use
them: `fr-analyze --version` and `--help` start in about 0.1 s.

It is over 600 lines because every option is declared here with its help text (typer reads
both from the signature) for each subcommand (analyze, timeline, merge-traces, live, the
torchfrtrace-compatible form); each command's body only calls a tested function.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import __version__, cli_compat
from .errors import FrAnalyzerError, OutputError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from .load import live
    from .load.sources import Source
    from .pipeline import Analysis, Options, Progress
    from .render.entries_view import EntriesView
    from .replay.session import ReplayReport

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3

DEBUG_ENV = "FR_ANALYZE_DEBUG"
_debug: contextvars.ContextVar[bool] = contextvars.ContextVar("fr_analyze_debug", default=False)
"""Whether an internal error prints its traceback (`--debug`, or FR_ANALYZE_DEBUG=1)."""

EXAMPLES = """\b
Examples:
  fr-analyze dumps/                     which rank, group and op hung the job
  fr-analyze dumps/ --html report.html  the same, and the incident as one page
  fr-analyze dumps/ --json - | jq .verdict
  fr-analyze dumps/ -o db.sqlite        every entry and finding, as SQLite
  fr-analyze dumps/ -j                  the entries around the root cause
  fr-analyze dumps/ -j --last 5 --pg-filters tp
  fr-analyze timeline dumps/ -o tl.json a trace for https://ui.perfetto.dev
  fr-analyze live http://host:25999     snapshots of a running job

\b
Exit codes:
  0  the answer is ok
  1  a problem was found: desync, hung, slow or incomplete (also with -j)
  2  bad usage, no readable dump, or an output that cannot be written
     (outputs are checked before the analysis; if writing fails after
     it, the report is still printed and the code stays 1 if a problem
     was found)
  3  an internal error: a bug in fr-analyze, not in the dumps (one
     line; --debug or FR_ANALYZE_DEBUG=1 prints its traceback)
"""

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
    epilog=EXAMPLES,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fr-analyze {__version__}")
        raise typer.Exit(EXIT_OK)


def _debug_on(value: bool) -> None:
    if value:
        _debug.set(True)


def _file_size(text: str | int) -> int:
    if isinstance(text, int):
        return text
    from .load import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


# --- outputs --------------------------------------------------------------------------------

DATABASE_SUFFIXES = ".pkl, .sqlite, .parquet"
"""What `-o` writes, as its hint says."""


@dataclass(frozen=True)
class Outputs:
    """The files an analysis writes besides the text report."""

    database: Path | None = None  # -o: pickle, SQLite or Parquet by the name's ending
    json: Path | None = None  # --json
    html: Path | None = None  # --html

    def paths(self) -> list[Path]:
        """The files asked for, in the order they are written."""
        """The files asked for, in the order they are written."""
        return [p for p in (self.json, self.html, self.database) if p is not None]

    def to_stdout(self) -> bool:
        """Whether one of them goes to standard output (the text report then goes to stderr)."""
        from .render.output import is_stdout

        return any(is_stdout(p) for p in self.paths())

    def check(self, source: Path | Source | None) -> None:
        """Refuse, before any analysis, every output that cannot be written: a database with a
        report's name, two outputs to one file or to standard output, a path inside the dumps
        (`source`), a folder that does not exist or cannot be written."""
        if self.database is not None:
            _check_database_name(self.database)
        from .render.output import is_stdout

        if sum(is_stdout(p) for p in self.paths()) > 1:
            raise UsageError("only one output can go to standard output (-)")
        replaced: dict[Path, Path] = {}
        for path in self.paths():
            folder = path is self.database and _is_parquet(path)
            where = check_output(path, source, folder=folder)
            if where is not None:
                same = replaced.setdefault(where.absolute(), path)
                if same is not path:
                    raise UsageError(f"{same} and {path}: two outputs to one file")
        if self.database is not None and _is_parquet(self.database):
            from .render import database_parquet

            database_parquet.require()  # pyarrow, an optional extra


def _check_database_name(path: Path) -> None:
    name = path.name.lower()
    for ending, option in ((".json", "--json"), (".html", "--html"), (".htm", "--html")):
        if name.endswith(ending):
            report = "JSON" if option == "--json" else "HTML"
            raise UsageError(
                f"-o {path}: -o writes the database ({DATABASE_SUFFIXES}); for the {report} "
                f"report use {option} {path}"
            )


def _is_parquet(path: Path) -> bool:
    return path.name.lower().endswith(".parquet")


def check_output(path: Path, source: Path | Source | None, *, folder: bool = False) -> Path | None:
    """One output path, before the analysis: not inside the dumps, not a directory (unless the
    output is a `folder`, such as a Parquet database), in a folder that exists and can be
    written. Raises `OutputError` (exit 2) naming the path. Returns the file (or folder) that
    will be replaced, None for an output written in place (stdout, a device, a FIFO)."""
    from .render.output import How, check_output_path, destination

    probe = path / "probe" if folder and path.is_dir() else path
    if source is not None:
        check_output_path(probe, source)
    where = destination(probe)
    if where.how is not How.REPLACE:
        return None
    target = where.path.parent if probe is not path else where.path
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{path}: cannot write: no such directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write: permission denied in {parent}")
    return target


def write_outputs(analysis: Analysis, outputs: Outputs, cap: int) -> bool:
    """Write each output (each after the one before failed, too); one line on stderr for each
    (what was written and its size, or why not). False if one failed."""
    ok = True
    for what, path, write in _writers(analysis, outputs, cap):
        try:
            with progress_bars() as progress:
                size = _step(progress, f"writing {path}", write)
        except (FrAnalyzerError, OSError) as exc:
            _error(str(exc) if isinstance(exc, FrAnalyzerError) else f"{path}: cannot write: {exc}")
            ok = False
            continue
        wrote(path, what, size)
    return ok


def _writers(
    analysis: Analysis, outputs: Outputs, cap: int
) -> list[tuple[str, Path, Callable[[], int | None]]]:
    """(what, where, write) for each output; `write` returns the bytes written when known."""
    from .render.output import write_atomic

    found: list[tuple[str, Path, Callable[[], int | None]]] = []
    if outputs.json is not None:
        path = outputs.json

        def json_report() -> int:
            from .render import report_json

            data = report_json.render_json(analysis, cap=cap).encode()
            write_atomic(path, data)
            return len(data)

        found.append(("the JSON report", path, json_report))
    if outputs.html is not None:
        page = outputs.html

        def html_report() -> int:
            from .render import report_html

            data = report_html.render_html(analysis).encode()
            write_atomic(page, data)
            return len(data)

        found.append(("the HTML report", page, html_report))
    if outputs.database is not None:
        db = outputs.database
        found.append(("the database", db, lambda: write_database(analysis, db)))
    return found


def write_database(analysis: Analysis, path: Path) -> None:
    """`-o`: SQLite for .sqlite, .sqlite3 and .db; a folder of Parquet tables for .parquet;
    else a pickle of builtin types."""
    from .render import database_sqlite

    if database_sqlite.wanted(path):
        database_sqlite.write(analysis, path)
    elif _is_parquet(path):
        from .render import database_parquet

        database_parquet.write(analysis, path)
    else:
        from .render import database

        database.write(analysis, path)


def wrote(path: Path, what: str, size: int | None = None, extra: str = "") -> None:
    """One line on stderr: what was written where, and its size (on disk when it is a file or
    a folder, else the bytes written)."""
    from .render.output import is_stdout

    if is_stdout(path):
        where = f"{what} to standard output"
    else:
        where = str(path)
        size = _size_on_disk(path) or size
    shown = f" ({human_size(size)})" if size is not None else ""
    sys.stderr.write(f"wrote {where}{shown}{extra}\n")
    sys.stderr.flush()


def _size_on_disk(path: Path) -> int | None:
    """A file's size, or a folder's (its files'); None for a device or a FIFO."""
    try:
        if path.is_file():
            return path.stat().st_size
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        pass
    return None


def human_size(size: int) -> str:
    """`12.3 MB`: decimal units, one decimal; bytes below 1 kB."""
    if size < 1000:
        return f"{size} {'byte' if size == 1 else 'bytes'}"
    value = float(size)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 999.95 or unit == "TB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


# --- terminal -------------------------------------------------------------------------------


def _console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that wraps nothing itself: the renderers fit lines to
    its width (80 when not a terminal); colour only on a terminal (NO_COLOR, FORCE_COLOR)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, stderr=stderr, emoji=False, markup=False)


@contextlib.contextmanager
def progress_bars(console: Console | None = None) -> Iterator[Progress | None]:
    """A `pipeline.Progress` callback drawing one bar per phase on stderr (description, bar,
    count, rate, ETA), or None when stderr is not a terminal; the bars vanish when done."""
    if console is None:
        if not sys.stderr.isatty():
            yield None
            return
        console = _console(stderr=True)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        Task,
        TaskID,
        TextColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.0f}/s", style="progress.data.speed")

    bars = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        Rate(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    tasks: dict[str, TaskID] = {}

    def report(phase: str, done: int, total: int) -> None:
        task = tasks.get(phase)
        if task is None:
            tasks[phase] = bars.add_task(phase, total=total, completed=done)
        elif done < bars.tasks[task].completed:  # the phase again (the next snapshot)
            bars.reset(task, total=total, completed=done)
        else:
            bars.update(task, total=total, completed=done)

    with bars:
        yield report


def _step(progress: Progress | None, phase: str, work: Callable[[], Any]) -> Any:
    """`work()` shown as one step of `phase`."""
    if progress is not None:
        progress(phase, 0, 1)
    result = work()
    if progress is not None:
        progress(phase, 1, 1)
    return result


def print_report(
    analysis: Analysis, verbose: bool, cap: int, ranks: bool, to_stderr: bool = False
) -> None:
    """The text report on stdout (stderr when an output takes stdout), fit to its width."""
    from rich.text import Text

    from .render import report

    console = _console(stderr=to_stderr)
    styled = getattr(report, "render_styled", None)
    try:
        if styled is not None:
            text = styled(analysis, verbose=verbose, cap=cap, ranks=ranks, width=console.width)
        else:
            text = Text(
                report.render_text(
                    analysis, verbose=verbose, cap=cap, ranks=ranks, width=console.width
                )
            )
    except Exception as exc:  # the answer still reaches the reader
        text = Text(
            f"{analysis.conclusion.answer}\n(the report could not be rendered: "
            f"{type(exc).__name__}: {exc})\n"
        )
    console.print(text, end="")


def verdict_code(analysis: Analysis) -> int:
    """0 when the answer is `ok`, else 1."""
    from .model.records import Status

    return EXIT_OK if analysis.conclusion.status == Status.OK else EXIT_FINDINGS


def _after_outputs(analysis: Analysis, written: bool) -> int:
    """The exit code once the outputs are written (see the module docstring)."""
    code = verdict_code(analysis)
    return code if written or code == EXIT_FINDINGS else EXIT_ERROR


def _error(message: str) -> None:
    sys.stderr.write(f"fr-analyze: error: {message}\n")
    sys.stderr.flush()


# --- the main command ------------------------------------------------------------------------


def analyze_dumps(
    sources: Sequence[Source],
    options: Options,
    outputs: Outputs,
    *,
    verbose: bool = False,
    cap: int = 10,
    ranks: bool = False,
) -> int:
    """The main command: check the outputs, analyze, print the report, write the outputs;
    returns the exit code."""
    from . import pipeline

    outputs.check(sources[-1])
    with progress_bars() as progress:
        if len(sources) > 1:
            analysis = pipeline.analyze_series(sources, options, progress)
        else:
            analysis = pipeline.analyze(sources[0], options, progress)
    print_report(analysis, verbose, cap, ranks, to_stderr=outputs.to_stdout())
    return _after_outputs(analysis, write_outputs(analysis, outputs, cap))


def print_entries(source: Source, options: Options, view: EntriesView) -> int:
    """`-j`: analyze (for the root cause and the exit code), print the entries; returns the
    same exit code as the main command."""
    from . import pipeline
    from .render import entries_view

    with progress_bars() as progress:
        analysis = pipeline.analyze(source, options, progress)
    console = _console()
    view = dataclasses.replace(view, width=console.width)
    root = analysis.conclusion.root
    console.print(entries_view.render_styled(analysis.table, analysis.groups, view, root), end="")
    return verdict_code(analysis)


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
            "also be given as the first argument, as torchfrtrace takes it (not both). Given "
            "several times (snapshots of one job taken at different times), or a folder whose "
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
            ".sqlite3 or .db, a folder of Parquet tables for .parquet, else a pickle of "
            "builtin types (a .json or .html name is refused: see --json, --html).",
        ),
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write the report as JSON (schema fr-analyze.report/1) here; - for stdout "
            "(the text report then goes to stderr).",
        ),
    ] = None,
    html_out: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Write the report as one self-contained web page here.",
        ),
    ] = None,
    just_print_entries: Annotated[
        bool,
        typer.Option(
            "-j",
            "--just-print-entries",
            "--just_print_entries",
            help="Print the ranks' entries side by side, aligned by sequence id, cells that "
            "deviate marked with '!', and stop (exit code as without -j). By default around "
            "the root cause when there is one (--around-root).",
        ),
    ] = False,
    around_root: Annotated[
        bool,
        typer.Option(
            "--around-root",
            help="With -j: only the root cause's group, --context sequence ids either side, "
            "its culprit and some of its peers (the default when there is a root cause and "
            "no --pg-filters, --last or --all-entries).",
        ),
    ] = False,
    all_entries: Annotated[
        bool,
        typer.Option("--all-entries", help="With -j: every group, every entry, every rank."),
    ] = False,
    last: Annotated[
        int | None,
        typer.Option("--last", min=1, help="With -j: only each group's newest N sequence ids."),
    ] = None,
    context: Annotated[
        int,
        typer.Option("--context", min=0, help="With -j --around-root: sequence ids either side."),
    ] = 3,
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
        int | None,
        typer.Option(
            "--max-file-size",
            parser=_file_size,
            metavar="<size>",
            show_default=False,
            help="Largest dump file to read, counted after gunzip: bytes, or e.g. 512M, 2G "
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
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            callback=_debug_on,
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
        raise UsageError("missing option -d/--dump-dir (see fr-analyze --help)")
    if transform_ft and group_world_size is None:
        raise UsageError("--transform-ft needs --group-world-size (ranks per replica group)")
    if group_world_size is not None and not transform_ft:
        raise UsageError("--group-world-size goes with --transform-ft")
    from .diagnosis import Thresholds
    from .load import DEFAULT_MAX_FILE_BYTES
    from .load.opening import open_source
    from .pipeline import Options

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
    )
    outputs = Outputs(database=output, json=json_out, html=html_out)
    sources = [open_source(d, _storage_options(storage_option)) for d in dump_dirs]
    entries_only = (around_root, all_entries, last is not None, context != 3)
    if just_print_entries:
        if len(sources) > 1:
            raise UsageError("-j prints one dump set: give one -d")
        if outputs.paths():
            raise UsageError("-j prints the entries only: -o, --json and --html go without -j")
        if around_root and (all_entries or last is not None):
            raise UsageError("--around-root goes without --all-entries and --last")
        from .model.ranks import parse
        from .render.entries_view import EntriesView

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
        raise typer.Exit(print_entries(sources[0], options, view))
    if selected_ranks or pg_filters or print_stack_trace or any(entries_only):
        raise UsageError(
            "--selected-ranks, --pg-filters, --print-stack-trace, --around-root, "
            "--all-entries, --last and --context go with -j"
        )
    raise typer.Exit(
        analyze_dumps(
            sources, options, outputs, verbose=verbose, cap=mismatch_cap, ranks=ranks_table
        )
    )


# --- live ------------------------------------------------------------------------------------


@app.command(
    "live",
    short_help="Analyze a running job, through its debug server.",
)
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
    html_out: Annotated[
        Path | None, typer.Option("--html", help="Write the report as one web page here.")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Also print the group tables.")
    ] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="HOST",
            help="Also ask workers on HOST, which the frontend's page names (repeatable; '*' "
            "for any host). By default only the frontend's own host is asked.",
        ),
    ] = None,
) -> None:
    """Ask a running job's debug server for every rank's Flight Recorder and stacks, a few
    times, and analyze the snapshots: what moved was in flight, what did not is stuck."""
    import tempfile

    from . import pipeline
    from .load import live

    outputs = Outputs(database=output, json=json_out, html=html_out)
    outputs.check(save)
    settings = live.Settings(snapshots, interval, timeout, concurrency)
    fleet = live.workers(urls, timeout, frozenset(allow_host or ()))
    fleet, note = live.within_job(fleet, timeout)
    if note is not None:
        sys.stderr.write(f"warning: {note}\n")
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
        with progress_bars() as progress:
            result = pipeline.analyze_series(folders, progress=progress)
        if save is None:  # the folders are gone once the report is out: name the job instead
            where = f"{' '.join(urls[:2])}{' ...' if len(urls) > 2 else ''} (not saved: --save)"
            result = dataclasses.replace(
                result, summary=dataclasses.replace(result.summary, directory=where)
            )
        print_report(result, verbose, 10, False, to_stderr=outputs.to_stdout())
        raise typer.Exit(_after_outputs(result, write_outputs(result, outputs, 10)))


def _snapshot_line(count: int, world: int) -> Callable[[live.Snapshot], None]:
    done = [0]

    def show(snap: live.Snapshot) -> None:
        done[0] += 1
        answered = world - len(snap.unanswered)
        seconds = (snap.finished_ns - snap.started_ns) / 1e9
        sys.stderr.write(
            f"snapshot {done[0]} of {count}: {answered} of {world} ranks answered in "
            f"{seconds:.2f} s ({snap.chosen}) -> {snap.folder}\n"
        )
        sys.stderr.flush()

    return show


def _analysis(source: Source, prefix: str | None, workers: int | None) -> Analysis:
    from . import pipeline

    with progress_bars() as progress:
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


def _one_dump_dir(positional: str | None, option: str | None, command: str) -> str:
    """The dump directory of a subcommand: its first argument or -d, exactly one of them."""
    if positional is not None and option is not None:
        raise UsageError(
            f"{command}: a dump directory given twice: {positional!r} as the argument and "
            f"-d {option!r}: give one"
        )
    found = positional if positional is not None else option
    if found is None:
        raise UsageError(f"{command}: missing the dump directory (DIR or -d DIR)")
    return found


# --- timeline ------------------------------------------------------------------------------


@app.command("timeline", short_help="Write the dumps as a Chrome trace (open it in Perfetto).")
def timeline_cmd(
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Write the Chrome trace JSON here.")
    ],
    dump_dir: Annotated[
        str | None,
        typer.Argument(
            metavar="DIR|ARCHIVE|URL",
            show_default=False,
            help="Per-rank dumps: a directory, an archive or a URL (as for the analysis).",
        ),
    ] = None,
    dump_dir_option: Annotated[
        str | None,
        typer.Option(
            "-d",
            "--dump-dir",
            metavar="DIR|ARCHIVE|URL",
            help="The dumps, as the argument (give one or the other).",
        ),
    ] = None,
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
    all_: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every rank and op, even past 256 ranks (where the default is a window "
            "around the root cause).",
        ),
    ] = False,
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
    from .load.opening import open_source
    from .model.ranks import parse
    from .render import timeline
    from .render.output import write_atomic

    where = _one_dump_dir(dump_dir, dump_dir_option, "timeline")
    source = open_source(where, _storage_options(storage_option))
    check_output(output, source)
    options = timeline.TimelineOptions(
        align=align,
        last=last,
        seq=_seq_range(seq),
        start_us=start,
        end_us=end,
        ranks=parse(selected_ranks) if selected_ranks else None,
        flows=not no_flows,
        all_ranks=all_,
    )
    analysis = _analysis(source, prefix, workers)
    with progress_bars() as progress:
        trace = _step(progress, "building the trace", lambda: timeline.build(analysis, options))
        data = _step(progress, "encoding the trace", lambda: timeline.encode(trace))
        for note in timeline.notes(trace):
            sys.stderr.write(f"note: {note}\n")
        warning = timeline.size_warning(len(data))
        if warning is not None:
            sys.stderr.write(f"warning: {warning}\n")
        sys.stderr.flush()
        _step(progress, f"writing {output}", lambda: write_atomic(output, data))
    n = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    wrote(output, "the trace", len(data), f": {n} op slices, {len(trace['traceEvents'])} events")


def _seq_range(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    from .render import timeline

    try:
        return timeline.parse_seq(text)
    except ValueError as exc:
        raise UsageError(f"--seq: {exc}") from None


# --- merge-traces ----------------------------------------------------------------------------


@app.command(
    "merge-traces",
    short_help="Merge per-rank profiler traces into one trace, clocks synced.",
)
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
    from tabulate import tabulate

    from .load.opening import open_source
    from .render import timeline, traces

    step_range = None
    if steps is not None:
        try:
            step_range = timeline.parse_seq(steps)
        except ValueError as exc:
            raise UsageError(f"--steps: {exc}") from None
    files = traces.expand_inputs(inputs)
    if output.resolve() in {f.resolve() for f in files}:
        raise UsageError(f"{output}: is one of the input traces")
    source = open_source(fr_dir) if fr_dir is not None else None
    check_output(output, source)
    infos = [traces.inspect(f) for f in files]
    overlay = None
    if source is not None:
        from .render import timeline

        overlay = timeline.overlay(_analysis(source, None, None), traces.fr_shift_ns(infos))
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


# --- replay ----------------------------------------------------------------------------------


@app.command(
    "replay",
    short_help="Run the recorded collectives again, to tell a program bug from a host fault.",
)
def replay_cmd(
    dump_dir: Annotated[
        str | None,
        typer.Argument(
            metavar="DIR|ARCHIVE|URL",
            show_default=False,
            help="Per-rank dumps: a directory, an archive or a URL (as for the analysis).",
        ),
    ] = None,
    dump_dir_option: Annotated[
        str | None,
        typer.Option(
            "-d",
            "--dump-dir",
            metavar="DIR|ARCHIVE|URL",
            help="The dumps, as the argument (give one or the other).",
        ),
    ] = None,
    backend: Annotated[
        str,
        typer.Option("--backend", help="gloo (CPU) or nccl (one process per GPU)."),
    ] = "gloo",
    launcher: Annotated[
        str,
        typer.Option(
            "--launcher",
            help="spawn: start one local process per rank; env: this process is one rank "
            "of torchrun or srun (RANK/WORLD_SIZE/LOCAL_RANK or SLURM_PROCID/SLURM_NTASKS/"
            "SLURM_LOCALID, MASTER_ADDR/MASTER_PORT).",
        ),
    ] = "spawn",
    ranks: Annotated[
        int | None,
        typer.Option("--ranks", min=1, help="Ranks to spawn (default: the job's world size)."),
    ] = None,
    scale: Annotated[
        float,
        typer.Option(
            "--scale",
            help="Shrink every tensor alike (0 < F <= 1): n elements become ceil(n*F), "
            "sizes that differ stay different.",
        ),
    ] = 1.0,
    last: Annotated[
        int | None,
        typer.Option("--last", min=1, help="Only each group's newest N sequence ids."),
    ] = None,
    seq: Annotated[
        str | None,
        typer.Option("--seq", help="Only each group's sequence ids A:B (inclusive)."),
    ] = None,
    iterations: Annotated[
        int,
        typer.Option("--iterations", min=1, help="Timed rounds of every op, after the warm-up."),
    ] = 3,
    warmup: Annotated[
        int, typer.Option("--warmup", min=0, help="Untimed rounds before the timed ones.")
    ] = 1,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=0.5, help="Seconds an op may take (the group timeout)."),
    ] = 30.0,
    deadline: Annotated[
        float | None,
        typer.Option(
            "--deadline",
            min=1.0,
            help="Seconds after which every rank still running is killed "
            "(default: 60 + 4 x --timeout).",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Keep the plan, logs, timings and Flight Recorder dumps here "
            "(default: a temporary folder; with --launcher env, give a shared one).",
        ),
    ] = None,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Write per rank and op the wall times here (- for stdout)."),
    ] = None,
) -> None:
    """Replay the recorded collective sequence with torch.distributed (gloo on CPU, or nccl)
    and time every op. A replay that stops (an op times out, a rank crashes) dumps every
    surviving rank's Flight Recorder and prints fr-analyze's answer on them: a stop that
    reproduces here is a program bug; one that does not points at the machine or network."""
    import tempfile

    from .load.opening import open_source
    from .replay import session
    from .replay.plan import PlanOptions, Window
    from .replay.runner import RunOptions

    if backend not in ("gloo", "nccl"):
        raise UsageError(f"--backend {backend!r}: gloo or nccl")
    if launcher not in ("spawn", "env"):
        raise UsageError(f"--launcher {launcher!r}: spawn or env")
    if last is not None and seq is not None:
        raise UsageError("--last and --seq choose the window two ways: give one")
    if not 0 < scale <= 1:
        raise UsageError(f"--scale {scale:g}: must be above 0 and at most 1")
    if json_out is not None and str(json_out) != "-":
        check_output(json_out, None)
    if not session.torch_available():
        raise UsageError(session.INSTALL_HINT)
    source = open_source(_one_dump_dir(dump_dir, dump_dir_option, "replay"))
    with contextlib.ExitStack() as stack:
        folder = out or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fr-replay-")))
        options = session.ReplayOptions(
            plan=PlanOptions(backend, scale, Window(last, _seq_range(seq))),
            run=RunOptions(folder, backend, timeout, deadline, iterations, warmup),
            launcher=session.Launcher(launcher),
            world_size=ranks,
        )
        report = session.replay(source, options, os.environ)
        raise typer.Exit(print_replay(report, json_out, kept=out is not None))


def print_replay(report: ReplayReport, json_out: Path | None, kept: bool) -> int:
    """Print a replay's header, notes and latency table, and, when it stopped, how each rank
    ended and fr-analyze's answer on its dumps; write the JSON; returns the exit code (0: every
    op completed; 1: it stopped). A rank of torchrun or srun other than 0 prints one line."""
    from .replay import results

    plan, outcome = report.plan, report.outcome
    to_stdout = json_out is not None and str(json_out) == "-"
    console = _console(stderr=to_stdout)

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    if not report.reporter:
        say(results.own_line(outcome))
        return EXIT_OK if outcome.ok else EXIT_FINDINGS
    for line in results.header(plan, outcome):
        say(line)
    say(results.table(results.per_op(plan, outcome)))
    if json_out is not None:
        from .render.output import write_atomic

        data = results.to_json(plan, outcome)
        if to_stdout:
            sys.stdout.write(data + "\n")
        else:
            write_atomic(json_out, data.encode())
            wrote(json_out, "the timings", len(data))
    if outcome.ok:
        say("replay: every op of every rank completed")
        return EXIT_OK
    for line in results.endings(plan, outcome):
        say(line)
    if report.analysis is None:
        say("no rank wrote a Flight Recorder dump")
        return EXIT_FINDINGS
    kept_note = "" if kept else ", removed at exit: --out keeps them"
    say(f"\nfr-analyze on the replay's Flight Recorder dumps ({outcome.fr_dir}{kept_note}):\n")
    print_report(report.analysis, False, 10, False, to_stderr=to_stdout)
    return EXIT_FINDINGS  # it stopped: whatever the dumps show, the replay did not complete


# --- entry points ----------------------------------------------------------------------------


def run(argv: Sequence[str]) -> int:
    """The whole command on `argv` (without the program name): prints what it prints and
    returns the exit code. Errors are one line on stderr; an internal error (any exception
    that is not the package's `FrAnalyzerError`) prints its traceback only with `--debug` or
    FR_ANALYZE_DEBUG=1, and exits 3."""
    token = _debug.set(os.environ.get(DEBUG_ENV, "") not in ("", "0"))
    try:
        return _run(argv)
    finally:
        _debug.reset(token)


def _run(argv: Sequence[str]) -> int:
    try:
        group = typer.main.get_group(app)
        args = cli_compat.translate(argv, group)
        code = app(args=args, standalone_mode=False, prog_name="fr-analyze")
    except typer.Exit as exc:
        return int(exc.exit_code)
    except FrAnalyzerError as exc:
        _error(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("fr-analyze: interrupted\n")
        return EXIT_ERROR
    except Exception as exc:  # usage errors and anything unexpected
        show = getattr(exc, "show", None)
        if callable(show):  # click's usage errors (vendored by typer): "Usage: ... Error: ..."
            show()
            return EXIT_ERROR
        _internal_error(exc)
        return EXIT_INTERNAL
    return code if isinstance(code, int) else EXIT_OK


def _internal_error(exc: Exception) -> None:
    """A bug in fr-analyze: one line, or with `--debug` the traceback first."""
    if _debug.get():
        traceback.print_exception(exc, file=sys.stderr)
        hint = ""
    else:
        hint = "; run with --debug for the traceback"
    sys.stderr.write(
        "fr-analyze: internal error (a bug in fr-analyze, not your dumps): "
        f"{type(exc).__name__}: {exc}{hint}\n"
    )
    sys.stderr.flush()


def main() -> None:
    """Console-script entry point."""
    sys.exit(run(sys.argv[1:]))
