"""What the command line shows on the terminal besides the outputs: the console the reports
print on, progress bars on stderr, the one line per output written (`wrote ... (12.3 MB)`),
error lines, and the analysis run under progress bars.

rich is imported by the functions that use it: `fr-analyze --help` does without it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from ..load import Source
    from ..pipeline import Analysis, Options, Progress


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that wraps nothing itself: the renderers fit lines to
    its width (80 when not a terminal); colour only on a terminal (NO_COLOR, FORCE_COLOR)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, stderr=stderr, emoji=False, markup=False)


@contextlib.contextmanager
def progress_bars(on: Console | None = None) -> Iterator[Progress | None]:
    """A `pipeline.Progress` callback drawing one bar per phase on stderr (description, bar,
    count, rate, ETA), or None when stderr is not a terminal; the bars vanish when done."""
    if on is None:
        if not sys.stderr.isatty():
            yield None
            return
        on = console(stderr=True)
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
        console=on,
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


def step(progress: Progress | None, phase: str, work: Callable[[], Any]) -> Any:
    """`work()` shown as one step of `phase`."""
    if progress is not None:
        progress(phase, 0, 1)
    result = work()
    if progress is not None:
        progress(phase, 1, 1)
    return result


def analyzed(source: Source, options: Options) -> Analysis:
    """`pipeline.analyze` of one dump set, with progress bars."""
    from .. import pipeline

    with progress_bars() as progress:
        return pipeline.analyze(source, options, progress)


def wrote(path: Path, what: str, size: int | None = None, extra: str = "") -> None:
    """One line on stderr: what was written where, and its size (on disk when it is a file or
    a folder, else the bytes written)."""
    from ..render.output import is_stdout

    if is_stdout(path):
        where = f"{what} to standard output"
    else:
        where = str(path)
        size = size_on_disk(path) or size
    shown = f" ({human_size(size)})" if size is not None else ""
    sys.stderr.write(f"wrote {where}{shown}{extra}\n")
    sys.stderr.flush()


def size_on_disk(path: Path) -> int | None:
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


def say(lines: Sequence[str], prefix: str) -> None:
    """Lines on stderr, each after `prefix` (`note: `, `warning: `)."""
    for line in lines:
        sys.stderr.write(f"{prefix}{line}\n")
    sys.stderr.flush()


def error(message: str, hint: str) -> None:
    """An error on stderr, the one format of every command: `fr-analyze: error: ...`, then
    `hint: ...`, what to do about it."""
    sys.stderr.write(f"fr-analyze: error: {message}\nhint: {hint}\n")
    sys.stderr.flush()


def failed(exc: Exception, path: Path) -> None:
    """An output that could not be written (`exc`: the package's error, or the system's), as
    `error` says it."""
    from ..errors import FrAnalyzerError, OutputError

    if isinstance(exc, FrAnalyzerError):
        error(str(exc), exc.hint)
    else:
        error(f"{path}: cannot write: {exc}", OutputError.default_hint)
