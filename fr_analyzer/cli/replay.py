"""`fr-analyze replay`: run the recorded collectives again with torch (`replay.session`), print
what the replay says (`replay.results`: its table, and when it stopped, how each rank ended)
and fr-analyze's answer on the replay's own dumps; the timings as JSON on request.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import UsageError
from ..render.renderer import ReportOptions
from .app import EXIT_FINDINGS, EXIT_OK, app
from .options import (
    DumpDirArgument,
    DumpDirOption,
    json_option,
    last_option,
    one_dump_dir,
    seq_option,
    seq_range,
    size_option,
)
from .outputs import check_output, print_report
from .terminal import console, wrote

if TYPE_CHECKING:
    from ..replay.session import ReplayReport


@app.command(
    "replay",
    short_help="Run the recorded collectives again, to tell a program bug from a host fault.",
)
def replay_cmd(
    dump_dir: DumpDirArgument = None,
    dump_dir_option: DumpDirOption = None,
    backend: Annotated[
        str,
        typer.Option("--backend", help="gloo (CPU) or nccl (one process per GPU)."),
    ] = "gloo",
    launcher: Annotated[
        str,
        typer.Option(
            "--launcher",
            help="spawn: start one local process per rank; env: this process is one rank "
            "of torchrun or srun (RANK/WORLD_SIZE/LOCAL_RANK or SLURM_PROCID/SLURM_NTASKS/"
            "SLURM_LOCALID, MASTER_ADDR/MASTER_PORT).",
        ),
    ] = "spawn",
    ranks: Annotated[
        int | None,
        typer.Option("--ranks", min=1, help="Ranks to spawn (default: the job's world size)."),
    ] = None,
    scale: Annotated[
        float,
        typer.Option(
            "--scale",
            help="Shrink every tensor alike (0 < F <= 1): n elements become ceil(n*F), "
            "sizes that differ stay different.",
        ),
    ] = 1.0,
    last: Annotated[
        int | None,
        last_option("Only each group's newest N sequence ids."),
    ] = None,
    seq: Annotated[
        str | None,
        seq_option("Only each group's sequence ids A:B (inclusive)."),
    ] = None,
    iterations: Annotated[
        int,
        typer.Option("--iterations", min=1, help="Timed rounds of every op, after the warm-up."),
    ] = 3,
    warmup: Annotated[
        int, typer.Option("--warmup", min=0, help="Untimed rounds before the timed ones.")
    ] = 1,
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=0.5, help="Seconds an op may take (the group timeout)."),
    ] = 30.0,
    deadline: Annotated[
        float | None,
        typer.Option(
            "--deadline",
            min=1.0,
            help="Seconds after which every rank still running is killed "
            "(default: 60 + 4 x --timeout).",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Keep the plan, logs, timings and Flight Recorder dumps here "
            "(default: a temporary folder; with --launcher env, give a shared one).",
        ),
    ] = None,
    json_out: Annotated[
        Path | None,
        json_option("Write per rank and op the wall times here (- for stdout)."),
    ] = None,
    max_ranks: Annotated[
        int | None,
        typer.Option(
            "--max-ranks",
            min=1,
            show_default=False,
            help="Most ranks spawned on this host (default: from its CPUs, memory and process "
            "limits); a bigger world is refused before any starts.",
        ),
    ] = None,
    max_bytes: Annotated[
        int | None,
        size_option(
            "--max-bytes",
            "Most tensor bytes the ranks hold at once, after --scale: bytes, or e.g. 512M, "
            "4G (default: half this host's memory; with nccl, per GPU).",
        ),
    ] = None,
) -> None:
    """Replay the recorded collective sequence with torch.distributed (gloo on CPU, or nccl)
    and time every op. A replay that stops (an op times out, a rank crashes) dumps every
    surviving rank's Flight Recorder and prints fr-analyze's answer on them: a stop that
    reproduces here is a program bug; one that does not points at the machine or network."""
    import tempfile

    from ..load import open_source
    from ..replay import session
    from ..replay.plan import PlanOptions, ReplayBackend, Window
    from ..replay.runner import RunOptions

    if backend not in set(ReplayBackend):
        raise UsageError(f"--backend {backend!r}: gloo or nccl")
    if launcher not in ("spawn", "env"):
        raise UsageError(f"--launcher {launcher!r}: spawn or env")
    if last is not None and seq is not None:
        raise UsageError("--last and --seq choose the window two ways: give one")
    if not 0 < scale <= 1:
        raise UsageError(f"--scale {scale:g}: must be above 0 and at most 1")
    if json_out is not None and str(json_out) != "-":
        check_output(json_out, None)
    if not session.torch_available():
        raise UsageError(session.INSTALL_HINT)
    source = open_source(one_dump_dir(dump_dir, dump_dir_option, "replay"))
    with contextlib.ExitStack() as stack:
        folder = out or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fr-replay-")))
        options = session.ReplayOptions(
            plan=PlanOptions(ReplayBackend(backend), scale, Window(last, seq_range(seq))),
            run=RunOptions(folder, ReplayBackend(backend), timeout, deadline, iterations, warmup),
            launcher=session.Launcher(launcher),
            world_size=ranks,
            max_ranks=max_ranks,
            max_bytes=max_bytes,
        )
        report = session.replay(source, options, os.environ)
        raise typer.Exit(print_replay(report, json_out, kept=out is not None))


def print_replay(report: ReplayReport, json_out: Path | None, kept: bool) -> int:
    """Print what the replay says (`results.opening`), write the timings as JSON, then how it
    ended (`results.closing`) and, when it stopped, fr-analyze's answer on its dumps; returns
    the exit code (0: every op completed; 1: it stopped). A rank of torchrun or srun other
    than 0 prints one line."""
    from ..replay import results

    plan, outcome = report.plan, report.outcome
    to_stdout = json_out is not None and str(json_out) == "-"
    screen = console(stderr=to_stdout)
    screen.print(results.opening(report), markup=False, highlight=False)
    if not report.reporter:
        return EXIT_OK if outcome.ok else EXIT_FINDINGS
    if json_out is not None:
        from ..render.output import write_atomic

        verdict = None
        if not outcome.ok and report.analysis is not None:
            from ..render.presentation import verdict_record

            verdict = verdict_record(report.analysis.conclusion)
        data = results.to_json(plan, outcome, verdict)
        if to_stdout:
            sys.stdout.write(data + "\n")
        else:
            write_atomic(json_out, data.encode())
            wrote(json_out, "the timings", len(data))
    screen.print(results.closing(report, kept), markup=False, highlight=False)
    if outcome.ok:
        return EXIT_OK
    if report.analysis is not None:
        print_report(report.analysis, ReportOptions(cap=10), to_stderr=to_stdout)
    return EXIT_FINDINGS  # it stopped: whatever the dumps show, the replay did not complete
