"""`fr-analyze merge-traces`: merge per-rank profiler traces into one Chrome trace
(`render.traces`), optionally with the Flight Recorder timeline of a dump set overlaid, and
print what it did (`traces.summary`). Given a folder of Flight Recorder dumps instead of
profiler traces, its error points to `timeline`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from ..errors import FrAnalyzerError, UsageError
from .app import app
from .options import DUMPS_METAVAR, no_cache_option, output_option, rank_cache, seq_range
from .outputs import check_output
from .terminal import analyzed


@app.command(
    "merge-traces",
    short_help="Merge per-rank profiler traces into one trace, clocks synced.",
)
def merge_traces_cmd(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="Per-rank trace files (.json or .json.gz) or directories of them."),
    ],
    output: Annotated[Path, output_option("Write the merged Chrome trace here.")],
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
            metavar=DUMPS_METAVAR,
            help="Overlay the Flight Recorder timeline of these dumps.",
        ),
    ] = None,
    no_cache: Annotated[
        bool,
        no_cache_option(
            "With --fr: read every dump again and keep nothing (by default the ranks read "
            "are taken from, and kept in, the user's cache, as the main command does)."
        ),
    ] = False,
) -> None:
    """Merge per-rank profiler traces into one trace: pid = rank, clocks synced."""
    from ..load import open_source
    from ..pipeline import Options
    from ..render import timeline, traces

    step_range = seq_range(steps, "--steps")
    try:
        files = traces.expand_inputs(inputs)
        if output.resolve() in {f.resolve() for f in files}:
            raise UsageError(f"{output}: is one of the input traces")
        source = open_source(fr_dir) if fr_dir is not None else None
        check_output(output, source)
        infos = [traces.inspect(f) for f in files]
    except traces.TraceError as exc:
        raise _dumps_instead(exc, inputs, output) from None
    overlay = None
    if source is not None:
        overlay = timeline.overlay(
            analyzed(source, Options(cache=rank_cache(no_cache))), traces.fr_shift_ns(infos)
        )
    merged = traces.merge(
        files, output, traces.MergeOptions(start, end, step_range), overlay, infos
    )
    typer.echo(traces.summary(merged), nl=False)


def _dumps_instead(exc: FrAnalyzerError, inputs: list[Path], output: Path) -> FrAnalyzerError:
    """A merge that failed on a folder of Flight Recorder dumps, not of profiler traces:
    the same error, with a hint that points to `timeline`, which draws dumps."""
    from ..load import discover

    for item in inputs:
        if not item.is_dir():
            continue
        try:
            found = discover(item).files
        except FrAnalyzerError:
            continue
        if found:
            command = (
                f"fr-analyze timeline -d {shlex.quote(str(item))} -o {shlex.quote(str(output))}"
            )
            return type(exc)(
                f"{exc} ({item} holds Flight Recorder dumps, not profiler traces)",
                hint=f"timeline draws dumps as a trace: {command}; merge-traces --fr {item} "
                "overlays them on profiler traces",
            )
    return exc
