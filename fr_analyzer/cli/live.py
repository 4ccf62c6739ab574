"""`fr-analyze live URL`: ask a running job's debug server for every rank's Flight Recorder
and stacks a few times (`load.live`), then analyze the snapshots as a series and print and
write the report as the main command does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UsageError
from ..render.renderer import ReportOptions
from .app import after_outputs, app
from .options import html_option, json_option, output_option
from .outputs import Outputs, print_report, write_outputs
from .terminal import progress_bars

if TYPE_CHECKING:
    from ..load import Source, live


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
    output: Annotated[Path | None, output_option("Write the flat database here.")] = None,
    json_out: Annotated[
        Path | None, json_option("Write the report as JSON here (- for stdout).")
    ] = None,
    html_out: Annotated[Path | None, html_option("Write the report as one web page here.")] = None,
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

    from .. import pipeline
    from ..load import live

    for url in urls:
        if "://" not in url and Path(url).exists():
            raise UsageError(
                f"{url}: a folder or file, not a running job's URL",
                hint=f"to analyze dumps already taken, run: fr-analyze -d {shlex.quote(url)}",
            )
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
        taken = live.take(fleet, into, settings, snapshot_line(snapshots, len(fleet)))
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
        report = ReportOptions(cap=10, verbose=verbose)
        print_report(result, report, to_stderr=outputs.to_stdout())
        raise typer.Exit(after_outputs(result, write_outputs(result, outputs, report)))


def snapshot_line(count: int, world: int) -> Callable[[live.Snapshot], None]:
    """What `live.take` calls after each snapshot: one line on stderr, who answered and where
    the snapshot went."""
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
