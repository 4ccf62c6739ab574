"""The `fr-analyze` command line, the front door: parse options, call one function per
command, turn the answer and the package's errors into exit codes.

`app` holds the typer app, `run(argv)` (the whole command as a function, as the tests call it)
and `main` (the console script, `fr-analyze = "fr_analyzer.cli:main"`); `options` the options
several commands share; `outputs` the outputs picked from the renderers (`render.renderer`),
checked and written; `terminal` the console, progress bars and `wrote` lines; `compat`
torchfrtrace's command line. Then one module per command, each registered on `app` when it is
imported below, in the order `--help` lists them: `analyze` (the main command), `live`,
`timeline`, `merge_traces`, `replay`. A command module imports none of the others.
"""

from __future__ import annotations

# isort: off
from . import analyze, live, timeline, merge_traces, replay  # registers them, in this order
from .app import DEBUG_ENV, EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, app, main, run

# isort: on
from .outputs import write_database
from .terminal import human_size, progress_bars

__all__ = [
    "DEBUG_ENV",
    "EXIT_ERROR",
    "EXIT_FINDINGS",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "analyze",
    "app",
    "human_size",
    "live",
    "main",
    "merge_traces",
    "progress_bars",
    "replay",
    "run",
    "timeline",
    "write_database",
]
