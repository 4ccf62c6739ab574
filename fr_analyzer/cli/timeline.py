"""`fr-analyze timeline`: analyze one dump set and write it as a Chrome trace for Perfetto
through the timeline renderer (`render.timeline`); its notes and warnings go to stderr. Its
exit code is the analysis' as the main command's (0 ok, 1 a problem found), so that a script
that draws a timeline still learns the job hung; a trace that cannot be written is an error
line, and the code is then 2 unless a problem was found (`app.after_outputs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import FrAnalyzerError
from .app import after_outputs, app
from .options import (
    DumpDirArgument,
    DumpDirOption,
    check_selected_ranks,
    fsspec_option,
    last_option,
    no_cache_option,
    one_dump_dir,
    output_option,
    prefix_option,
    rank_cache,
    selected_ranks_option,
    seq_option,
    seq_range,
    storage_options,
    workers_option,
)
from .outputs import check_output
from .terminal import analyzed, failed, progress_bars, say, step, wrote


@app.command("timeline", short_help="Write the dumps as a Chrome trace (open it in Perfetto).")
def timeline_cmd(
    output: Annotated[Path, output_option("Write the Chrome trace JSON here.")],
    dump_dir: DumpDirArgument = None,
    dump_dir_option: DumpDirOption = None,
    align: Annotated[
        bool,
        typer.Option(
            "--align",
            help="Shift each rank's clock so that the completions of "
            "collectives every member completed line up (least squares).",
        ),
    ] = False,
    last: Annotated[int | None, last_option("Only each rank's newest N ops.")] = None,
    seq: Annotated[str | None, seq_option("Only collective sequence ids A:B (inclusive).")] = None,
    start: Annotated[
        float | None,
        typer.Option("--start", help="Window start, µs from the trace's origin."),
    ] = None,
    end: Annotated[
        float | None, typer.Option("--end", help="Window end, µs from the trace's origin.")
    ] = None,
    selected_ranks: Annotated[
        str | None, selected_ranks_option("Only these ranks, e.g. 0,3-5.")
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
    prefix: Annotated[str | None, prefix_option("Dump file name prefix.")] = None,
    workers: Annotated[int | None, workers_option("Processes that load dumps.")] = None,
    storage_option: Annotated[
        list[str] | None, fsspec_option("For a URL: an fsspec storage option.")
    ] = None,
    no_cache: Annotated[
        bool,
        no_cache_option(
            "Read every dump again and keep nothing (by default the ranks read and their "
            "analysis are taken from, and kept in, the user's cache, as the main command does)."
        ),
    ] = False,
) -> None:
    """Write the dumps as a Chrome trace (Perfetto, chrome://tracing): one process per rank,
    one thread per process group, findings and the root cause marked. Exit code: the
    analysis', as the main command's (0 ok, 1 a problem found, 2 bad usage)."""
    from ..load import open_source
    from ..model.ranks import parse
    from ..pipeline import Options
    from ..render.renderer import TIMELINE
    from ..render.timeline import TimelineOptions

    where = one_dump_dir(dump_dir, dump_dir_option, "timeline")
    source = open_source(where, storage_options(storage_option))
    check_output(output, source)
    options = TimelineOptions(
        align=align,
        last=last,
        seq=seq_range(seq),
        start_us=start,
        end_us=end,
        ranks=parse(selected_ranks) if selected_ranks else None,
        flows=not no_flows,
        all_ranks=all_,
    )
    analysis = analyzed(source, Options(prefix=prefix, workers=workers, cache=rank_cache(no_cache)))
    check_selected_ranks("--selected-ranks", options.ranks, analysis.groups.world_size)
    try:
        with progress_bars() as progress:
            rendered = step(
                progress, f"writing {output}", lambda: TIMELINE.render(analysis, output, options)
            )
    except (FrAnalyzerError, OSError) as exc:
        failed(exc, output)
        raise typer.Exit(after_outputs(analysis, written=False)) from None
    say(rendered.notes, "note: ")
    say(rendered.warnings, "warning: ")
    wrote(output, TIMELINE.what, rendered.size, rendered.detail)
    raise typer.Exit(after_outputs(analysis, written=True))
