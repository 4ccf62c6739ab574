"""The `fr-analyze` app: the typer app every command registers on, and the errors and answers
it turns into exit codes.

`run(argv)` is the whole command as a function (the tests call it in this process); `main()`
is the console script. Exit codes (also in `--help`):

- 0: the answer is `ok`;
- 1: any other answer (desync, hung, slow, incomplete);
- 2: bad usage, no readable dump, or an output that cannot be written;
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
import os
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

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
        group = typer.main.get_group(app)
        args = compat.translate(argv, group)
        code = app(args=args, standalone_mode=False, prog_name="fr-analyze")
    except typer.Exit as exc:
        return int(exc.exit_code)
    except FrAnalyzerError as exc:
        error(str(exc))
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
    sys.exit(run(sys.argv[1:]))
