"""The `fr-analyze` command line (the front door): `app` holds the typer app, `run` and `main`.

`main` is the console script (`fr-analyze = "fr_analyzer.cli:main"`); `run(argv)` is the whole
command as a function, as the tests call it.
"""

from __future__ import annotations

from .app import (
    DEBUG_ENV,
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_INTERNAL,
    EXIT_OK,
    app,
    human_size,
    main,
    progress_bars,
    run,
    write_database,
)

__all__ = [
    "DEBUG_ENV",
    "EXIT_ERROR",
    "EXIT_FINDINGS",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "app",
    "human_size",
    "main",
    "progress_bars",
    "run",
    "write_database",
]
