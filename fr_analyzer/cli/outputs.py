"""The outputs an analysis writes besides the text report, picked from the renderers of
`render.renderer` by flag (`--json`, `--html`) or by the name's ending (`-o`), and with
`--out-dir DIR` every output at once (`renderer.OUT_DIR`: report.txt, report.json,
report.html, db.pkl, timeline.json) written into a new folder that replaces DIR whole; checked
before the analysis, written after it from the one analysis, one line on stderr for each.

Every output path is checked before the analysis starts, so a path that cannot take the output
costs nothing but a one-line error (exit 2). If writing still fails afterwards (a full disk, a
FIFO no one reads), the other outputs are still written and the error is one line on stderr;
`write_outputs` says whether all went well, and `app.after_outputs` makes the exit code of it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import FrAnalyzerError, OutputError, UsageError
from ..render.renderer import (
    HTML,
    JSON,
    OUT_DIR,
    TEXT,
    TIMELINE,
    Entries,
    Renderer,
    ReportOptions,
    for_database,
)
from .terminal import console, failed, progress_bars, say, step, wrote

if TYPE_CHECKING:
    from ..load import Source
    from ..pipeline import Analysis

DATABASE_SUFFIXES = ".pkl, .sqlite, .parquet"
"""What `-o` writes, as its hint says."""


@dataclass(frozen=True)
class Outputs:
    """The files an analysis writes besides the text report."""

    database: Path | None = None  # -o: pickle, SQLite or Parquet by the name's ending
    json: Path | None = None  # --json
    html: Path | None = None  # --html
    out_dir: Path | None = None  # --out-dir: every output, in one folder (`OUT_DIR`)

    def renderers(self) -> list[tuple[Renderer, Path]]:
        """The renderer of each file asked for, and the file, in the order they are written."""
        found = [(JSON, self.json), (HTML, self.html)]
        if self.database is not None:
            found.append((for_database(self.database), self.database))
        return [(renderer, path) for renderer, path in found if path is not None]

    def entries_taken(self) -> bool:
        """Whether an output asked for takes entries from where an engine keeps them, after
        the analysis (the HTML report, the databases; `--out-dir`'s timeline too): the text
        and JSON reports read none."""
        taken = (Entries.FETCHED, Entries.STREAMED)
        return self.out_dir is not None or any(r.entries in taken for r, _ in self.renderers())

    def paths(self) -> list[Path]:
        """The files asked for, in the order they are written (`--out-dir` apart)."""
        return [path for _, path in self.renderers()]

    def to_stdout(self) -> bool:
        """Whether one of them goes to standard output (the text report then goes to stderr)."""
        from ..render.output import is_stdout

        return any(is_stdout(p) for p in self.paths())

    def check(self, source: Path | Source | None) -> None:
        """Refuse, before any analysis, every output that cannot be written: a database with a
        report's name, two outputs to one file or to standard output, a path inside the dumps
        (`source`), a folder that does not exist or cannot be written."""
        if self.database is not None:
            _check_database_name(self.database)
        if self.out_dir is not None:  # before the others' folders are checked: say why
            inside = {self.out_dir.absolute() / name for name, _ in OUT_DIR}
            for path in self.paths():
                if path.absolute() in inside:
                    raise UsageError(f"{path}: --out-dir {self.out_dir} writes that file too")
        from ..render.output import is_stdout

        if sum(is_stdout(p) for p in self.paths()) > 1:
            raise UsageError("only one output can go to standard output (-)")
        replaced: dict[Path, Path] = {}
        for renderer, path in self.renderers():
            where = check_output(path, source, folder=renderer.folder)
            if where is not None:
                same = replaced.setdefault(where.absolute(), path)
                if same is not path:
                    raise UsageError(f"{same} and {path}: two outputs to one file")
        if self.out_dir is not None:
            self._check_out_dir(self.out_dir, source)
        if self.database is not None and for_database(self.database).folder:
            from ..render import database_parquet

            database_parquet.require()  # pyarrow, an optional extra

    @staticmethod
    def _check_out_dir(out_dir: Path, source: Path | Source | None) -> None:
        """`--out-dir`: not standard output, not inside the dumps, a folder that is new, empty
        or a previous run's (`output.check_folder`)."""
        from ..render.output import check_folder, check_output_path, is_stdout

        if is_stdout(out_dir):
            raise UsageError("--out-dir takes a folder, not standard output (-)")
        if source is not None:
            check_output_path(out_dir / OUT_DIR[0][0], source)
        check_folder(out_dir, [name for name, _ in OUT_DIR])


def _check_database_name(path: Path) -> None:
    for report in (JSON, HTML):
        if report.matches(path):
            kind = report.name.upper()
            raise UsageError(
                f"-o {path}: -o writes the database ({DATABASE_SUFFIXES}); for the {kind} "
                f"report use {report.flag} {path}"
            )


def check_output(path: Path, source: Path | Source | None, *, folder: bool = False) -> Path | None:
    """One output path, before the analysis: not inside the dumps, not a directory (unless the
    output is a `folder`, such as a Parquet database), in a folder that exists and can be
    written. Raises `OutputError` (exit 2) naming the path. Returns the file (or folder) that
    will be replaced, None for an output written in place (stdout, a device, a FIFO)."""
    from ..render.output import How, check_output_path, destination

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


def write_outputs(analysis: Analysis, outputs: Outputs, options: ReportOptions) -> bool:
    """Write each output (each after the one before failed, too); one line on stderr for each
    (what was written and its size, or why not). False if one failed."""
    ok = True
    for renderer, path in outputs.renderers():
        try:
            with progress_bars() as progress:
                rendered = step(
                    progress,
                    f"writing {path}",
                    functools.partial(renderer.render, analysis, path, options),
                )
        except (FrAnalyzerError, OSError) as exc:
            failed(exc, path)
            ok = False
            continue
        wrote(path, renderer.what, rendered.size)
    if outputs.out_dir is not None:
        try:
            write_out_dir(analysis, outputs.out_dir, options)
        except (FrAnalyzerError, OSError) as exc:
            failed(exc, outputs.out_dir)
            ok = False
    return ok


def write_out_dir(analysis: Analysis, out_dir: Path, options: ReportOptions) -> None:
    """`--out-dir`: every output of `analysis` (`OUT_DIR`) into a new folder that then
    replaces `out_dir` whole (`output.atomic_folder`): the text report as `-v` prints it, the
    JSON report with every finding, the HTML page, the database, the timeline (a window past
    256 ranks, as `timeline` draws by default). One line on stderr, the timeline's notes too."""
    from ..render.output import atomic_folder
    from ..render.timeline import TimelineOptions

    whole = ReportOptions(cap=None, verbose=True, ranks=options.ranks)
    notes: tuple[str, ...] = ()
    with progress_bars() as progress, atomic_folder(out_dir) as staging:
        for name, renderer in OUT_DIR:
            chosen = TimelineOptions() if renderer is TIMELINE else whole
            rendered = step(
                progress,
                f"writing {out_dir / name}",
                functools.partial(renderer.render, analysis, staging / name, chosen),
            )
            if renderer is TIMELINE:
                notes = rendered.notes + rendered.warnings
    say([f"{out_dir / 'timeline.json'}: {note}" for note in notes], "note: ")
    wrote(out_dir, "the outputs", extra=f": {', '.join(name for name, _ in OUT_DIR)}")


def write_database(analysis: Analysis, path: Path) -> None:
    """`-o`: SQLite for .sqlite, .sqlite3 and .db; a folder of Parquet tables for .parquet;
    else a pickle of builtin types."""
    for_database(path).render(analysis, path)


def print_report(analysis: Analysis, options: ReportOptions, to_stderr: bool = False) -> None:
    """The text report on stdout (stderr when an output takes stdout), fit to its width."""
    TEXT.render(analysis, console(stderr=to_stderr), options)
