"""The `fr-analyze` app: the typer app every command registers on, and the errors and answers
it turns into exit codes.

`run(argv)` is the whole command as a function (the tests call it in this process); `main()`
is the console script; `SectionedHelp` groups the main command's `--help` by sections
(`HELP_SECTIONS`). Exit codes (also in `--help`):

- 0: the answer is `ok`;
- 1: any other answer (desync, hung, slow, incomplete);
- 2: bad usage, no readable dump, or an output that cannot be written (every error, click's
  usage errors too, is two lines on stderr: `fr-analyze: error: ...` and `hint: ...`);
- 3: an internal error, a bug in fr-analyze (one line; `--debug` or `FR_ANALYZE_DEBUG=1`
  prints its traceback).

An output that fails after the analysis (see `outputs`) keeps the verdict's code when it found
a problem (1) and is 2 when the verdict was `ok`: a failed run never exits 0, and a hang is
never hidden behind a 2. When the JSON report (or the database) goes to standard output, the
text report goes to stderr, so that standard output holds that output alone. On a terminal,
stderr shows progress bars (rate and ETA) while loading, matching and writing.

Heavy modules (numpy, the pipeline, rich, tabulate) are imported by the functions that use
them: `fr-analyze --version` and `--help` start in about 0.1 s. The commands are registered by
importing their modules (`cli/__init__.py`), in the order `--help` lists them.
"""

from __future__ import annotations

import contextvars
import gc
import os
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import typer

from .. import __version__
from ..errors import FrAnalyzerError
from . import compat
from .terminal import error

if TYPE_CHECKING:
    from ..pipeline import Analysis

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERNAL = 0, 1, 2, 3

DEBUG_ENV = "FR_ANALYZE_DEBUG"
show_traceback: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "fr_analyze_debug", default=False
)
"""Whether an internal error prints its traceback (`--debug`, or FR_ANALYZE_DEBUG=1)."""

EXAMPLES = """\b
Examples:
  fr-analyze dumps/                     which rank, group and op hung the job
  fr-analyze dumps/ --html report.html  the same, and the incident as one page
  fr-analyze dumps/ -q                  the answer alone, in 1 to 3 lines
  fr-analyze dumps/ --out-dir incident/ every output of one run, in one folder
  fr-analyze dumps/ --json - | jq .verdict
  fr-analyze dumps/ -o db.sqlite        every entry and finding, as SQLite
  fr-analyze dumps/ -j                  the entries around the root cause
  fr-analyze dumps/ -j --last 5 --pg-filters tp
  fr-analyze timeline dumps/ -o tl.json a trace for https://ui.perfetto.dev
  fr-analyze live http://host:25999     snapshots of a running job

\b
Exit codes:
  0  the answer is ok
  1  a problem was found: desync, hung, slow or incomplete (-j, timeline too)
  2  bad usage, no readable dump, or an output that cannot be written
  3  an internal error, a bug in fr-analyze (--debug prints its traceback)
  every command's: docs/cli.md
"""

HELP_SECTIONS: dict[str, str] = {}
"""Sections of the main command's `--help`, by option (parameter name: section title): the
options not named here are the common ones, listed first under "Options", then the commands,
then each section in the order first named here. Filled by the command modules (`analyze`),
beside the options they declare."""


class SectionedHelp(typer.core.TyperGroup):
    """The main command, whose `--help` lists its common options first, then the commands,
    then the rest of its options under `HELP_SECTIONS`' titles (click's plain formatter:
    rich's boxes at 80 columns would double the help's length)."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Options, grouped: the common ones and the commands first."""
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for title in HELP_SECTIONS.values():
            sections.setdefault(title, [])
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                sections[HELP_SECTIONS.get(param.name or "", "Options")].append(record)
        with formatter.section("Options"):
            formatter.write_dl(sections.pop("Options"))
        self.format_commands(ctx, formatter)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)


app = typer.Typer(
    cls=SectionedHelp,
    add_completion=True,
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


def show_version(value: bool) -> None:
    """`--version`: print it and exit."""
    if value:
        typer.echo(f"fr-analyze {__version__}")
        raise typer.Exit(EXIT_OK)


def debug_on(value: bool) -> None:
    """`--debug`: an internal error prints its traceback."""
    if value:
        show_traceback.set(True)


def verdict_code(analysis: Analysis) -> int:
    """0 when the answer is `ok`, else 1."""
    from ..model.records import Status

    return EXIT_OK if analysis.conclusion.status == Status.OK else EXIT_FINDINGS


def after_outputs(analysis: Analysis, written: bool) -> int:
    """The exit code once the outputs are written (see the module docstring)."""
    code = verdict_code(analysis)
    return code if written or code == EXIT_FINDINGS else EXIT_ERROR


def run(argv: Sequence[str]) -> int:
    """The whole command on `argv` (without the program name): prints what it prints and
    returns the exit code. Errors are one line on stderr; an internal error (any exception
    that is not the package's `FrAnalyzerError`) prints its traceback only with `--debug` or
    FR_ANALYZE_DEBUG=1, and exits 3."""
    token = show_traceback.set(os.environ.get(DEBUG_ENV, "") not in ("", "0"))
    try:
        return _run(argv)
    finally:
        show_traceback.reset(token)


def _run(argv: Sequence[str]) -> int:
    try:
        # the command with the completion options typer adds (`--install-completion`)
        group = cast("compat.Command", typer.main.get_command(app))
        args = compat.translate(argv, group)
        code = app(args=args, standalone_mode=False, prog_name="fr-analyze")
    except typer.Exit as exc:
        return int(exc.exit_code)
    except FrAnalyzerError as exc:
        error(str(exc), exc.hint)
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write("fr-analyze: interrupted\n")
        return EXIT_ERROR
    except Exception as exc:  # click's usage errors, and anything unexpected
        if type(exc).__name__ == "NoArgsIsHelpError":  # a command run bare prints its help
            exc.show()  # type: ignore[attr-defined]
            return EXIT_ERROR
        if callable(getattr(exc, "format_message", None)):  # click's (vendored by typer)
            error(*usage_error(exc))
            return EXIT_ERROR
        _internal_error(exc)
        return EXIT_INTERNAL
    return code if isinstance(code, int) else EXIT_OK


def usage_error(exc: Any) -> tuple[str, str]:
    """A usage error of click's (an unknown option, a bad value, a missing argument; typer
    vendors click, so they are told by their attributes) as the message and hint of
    `terminal.error`: an unknown option with the ones it is close to."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "fr-analyze"
    help_hint = f"{where} --help lists every option"
    if hasattr(exc, "option_name") and hasattr(exc, "possibilities"):  # no such option
        close = list(exc.possibilities or ())
        if not close and ctx is not None:
            close = compat.closest_options(exc.option_name, ctx.command)
        if close:
            return (
                f"no such option: {exc.option_name}",
                f"did you mean {' or '.join(close)}? ({help_hint})",
            )
        return f"no such option: {exc.option_name}", help_hint
    message = exc.format_message()
    return message.rstrip("."), help_hint


def _internal_error(exc: Exception) -> None:
    """A bug in fr-analyze: one line, or with `--debug` the traceback first."""
    if show_traceback.get():
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
    code = run(sys.argv[1:])
    # The process ends here: what it made is frozen, so that the interpreter's last collection
    # does not walk every object of the analysis only to let the process go (0.1 s of a run at
    # 1,024 ranks; `atexit` and each module's teardown still run).
    gc.freeze()
    sys.exit(code)
