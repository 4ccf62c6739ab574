"""The one renderer contract: every output is a `Renderer` of the one analysis result.

A renderer takes the `pipeline.Analysis`, its options and a destination, writes the output
there (atomically: through `output`) and says what it wrote (`Rendered`). Each output's code is
one module of `render/` with a `write` function; `RENDERERS` names them, with the flag that asks
for each and the endings of a file name that choose it for `-o`. The CLI picks renderers from
this table (by flag, or `for_database` by suffix) and calls `Renderer.render`, never a module
directly: adding an output is adding its module and its row here.

Two kinds of `write`, one call: a renderer with options (the text report, the JSON report, the
timeline) is `write(analysis, destination, options)`; one that writes the whole analysis and has
no choice to make (the HTML page, the three databases) is `write(analysis, destination)`. The
destination is a path (a file, a folder for Parquet, `-` for standard output), or for the text
report the console it prints on (or a file: the report unwrapped). The modules are imported
when an output is written, so that `fr-analyze --help` imports none of them.
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from ..pipeline import Analysis
    from .timeline import TimelineOptions


@dataclass(frozen=True)
class ReportOptions:
    """What the text and JSON reports show beyond the answer."""

    cap: int | None = None  # findings shown per process group (--mismatch-cap); None: all
    verbose: bool = False  # the text report's group and membership tables (-v)
    ranks: bool = False  # the text report's table of where every rank stands (--ranks)
    quiet: bool = False  # the text report's answer alone, one to three lines (-q)


@dataclass(frozen=True)
class Rendered:
    """What a renderer wrote, for the one line the CLI prints about it."""

    size: int | None = None  # bytes written, when known (the CLI prefers the size on disk)
    notes: tuple[str, ...] = ()  # what the reader should know first, as `note: ...` lines
    warnings: tuple[str, ...] = ()  # what may go wrong with the output, as `warning: ...`
    detail: str = ""  # said after the size: `: 12 op slices, 40 events`


class Entries(enum.Enum):
    """What a renderer reads of the job's entries: none (the answer alone), those it shows
    (fetched where the engine keeps the rows: `Analysis.calls.held`, `shown`), or every one
    a chunk of rows at a time (`Analysis.calls.chunks`: the driver holds one chunk). None of
    them has the driver hold the job's table."""

    NONE = "none"
    FETCHED = "fetched"
    STREAMED = "streamed"


@dataclass(frozen=True)
class Renderer:
    """One output: its name, how it is asked for, and the module that writes it."""

    name: str
    what: str  # what the CLI calls it: "the JSON report"
    flag: str  # the option that asks for it ("" for the text report, always printed)
    suffixes: tuple[str, ...]  # endings of a file name that choose it for `-o`
    module: str  # the module of `render/` whose `write` it calls
    takes_options: bool = True  # False: `write(analysis, destination)`, the whole analysis
    folder: bool = False  # writes a folder, not a file (Parquet)
    entries: Entries = Entries.FETCHED  # what it reads of the job's entries

    def matches(self, path: Path) -> bool:
        """Whether the name of `path` ends in one of this renderer's suffixes."""
        return path.name.lower().endswith(self.suffixes) if self.suffixes else False

    def render(
        self,
        analysis: Analysis,
        destination: Path | Console,
        options: ReportOptions | TimelineOptions | None = None,
    ) -> Rendered:
        """Write the output of `analysis` to `destination` (a path, `-` for standard output, or
        the text report's console) with its `options`; what it wrote."""
        module: Any = importlib.import_module(f"{__package__}.{self.module}")
        if self.takes_options:
            written = module.write(analysis, destination, options)
        else:
            written = module.write(analysis, destination)
        return written if isinstance(written, Rendered) else Rendered(size=written)


TEXT = Renderer("text", "the text report", "", (), "report", entries=Entries.NONE)
JSON = Renderer(
    "json", "the JSON report", "--json", (".json",), "report_json", entries=Entries.NONE
)
HTML = Renderer(
    "html",
    "the HTML report",
    "--html",
    (".html", ".htm"),
    "report_html",
    False,
    entries=Entries.FETCHED,
)
SQLITE = Renderer(
    "sqlite",
    "the database",
    "-o",
    (".sqlite", ".sqlite3", ".db"),
    "database_sqlite",
    False,
    entries=Entries.STREAMED,
)
PARQUET = Renderer(
    "parquet",
    "the database",
    "-o",
    (".parquet",),
    "database_parquet",
    False,
    True,
    entries=Entries.STREAMED,
)
PICKLE = Renderer("pickle", "the database", "-o", (), "database", False, entries=Entries.STREAMED)
TIMELINE = Renderer("timeline", "the trace", "timeline -o", (), "timeline", entries=Entries.FETCHED)

RENDERERS: dict[str, Renderer] = {
    r.name: r for r in (TEXT, JSON, HTML, SQLITE, PARQUET, PICKLE, TIMELINE)
}
"""Every output, by name."""

OUT_DIR: tuple[tuple[str, Renderer], ...] = (
    ("report.txt", TEXT),
    ("report.json", JSON),
    ("report.html", HTML),
    ("db.pkl", PICKLE),
    ("timeline.json", TIMELINE),
)
"""What `--out-dir DIR` writes, by file name: every output of one analysis (the text report
whole, as `-v` prints it; the timeline's default window past 256 ranks)."""

DATABASES = (SQLITE, PARQUET, PICKLE)
"""The formats of `-o`, chosen by the name's ending; the pickle takes any other name."""


def for_database(path: Path) -> Renderer:
    """The database renderer `-o path` asks for: SQLite for .sqlite, .sqlite3 and .db, Parquet
    for .parquet, else the pickle."""
    return next((r for r in DATABASES if r.matches(path)), PICKLE)
