"""A replay from start to end: load the job through the pipeline, plan it, run it, and, when
it stopped, analyze the Flight Recorder dumps its surviving ranks wrote, with fr-analyze's own
analysis. No logic of its own beyond the order of those steps."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from ..errors import UsageError
from ..load import Directory, Source
from ..model.groups import build_groups
from ..pipeline import Analysis, Options, analyze, load
from . import bounds, files
from .plan import PlanOptions, ReplayBackend, ReplayPlan, build
from .runner import Launch, RunOptions, RunOutcome, in_process, launch_from, spawn
from .told import cut_ranks, tell

INSTALL_HINT = "fr-analyze replay needs torch: pip install 'fr-analyze[replay]'"


class Launcher(StrEnum):
    """How the ranks are started."""

    SPAWN = "spawn"  # one local process per rank, started here
    ENV = "env"  # this process is one rank of torchrun or srun


@dataclass(frozen=True)
class ReplayOptions:
    """Everything `fr-analyze replay` was asked."""

    plan: PlanOptions
    run: RunOptions
    launcher: Launcher = Launcher.SPAWN
    world_size: int | None = None  # spawn: how many ranks (None: the job's world size)
    load: Options = field(default_factory=Options)
    max_ranks: int | None = None  # spawn: most ranks started here (None: `bounds.host_limits`)
    max_bytes: int | None = None  # most tensor bytes held at once (None: `bounds.host_limits`)


@dataclass(frozen=True)
class ReplayReport:
    """A replay's plan, how it ran, and the analysis of its dumps when it stopped."""

    plan: ReplayPlan
    outcome: RunOutcome
    analysis: Analysis | None  # None: it ran to the end, or no rank could dump
    reporter: bool = True  # False: a rank of torchrun or srun other than 0 (one line of its own)
    # the ranks whose record is cut (their Execution Trace ends inside their last op: the rank
    # was killed there): the replay ran them to where the record ends, no further
    cut: tuple[int, ...] = ()
    # what the analysis printed is told (a record cut short; a gloo abort after a disagreement
    # the records hold): lines printed before it
    told: tuple[str, ...] = ()


def torch_available() -> bool:
    """Whether torch can be imported here (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def make_plan(where: Source, options: ReplayOptions, launch: Launch | None = None) -> ReplayPlan:
    """The plan of the job at `where`, through the project's loader, refused when this host
    cannot run it (`bounds`): `launch` is this process's place under torchrun or srun (None:
    the ranks are spawned here)."""
    got = load(where, options.load)
    groups = build_groups(got.dumps, got.table, got.unreadable)
    source = got.found.source.label
    host = bounds.host_limits()
    if launch is None:
        max_ranks = options.max_ranks or host.max_ranks
        bounds.check_world(groups.world_size, max_ranks, got.dumps, got.unreadable, source)
    elif launch.world_size != groups.world_size:
        raise UsageError(
            f"the job has {launch.world_size} ranks and the dumps {groups.world_size}: "
            "launch as many ranks as the dumps have"
        )
    here = range(groups.world_size) if launch is None else (launch.rank,)
    members = [g.ranks for g in groups.groups]
    bounds.check_threads(members, here, host.max_threads, source)
    if options.world_size is not None and options.world_size != groups.world_size:
        raise UsageError(
            f"--ranks {options.world_size}: the dumps are of a {groups.world_size}-rank job; "
            "a replay runs every rank"
        )
    plan = build(got.table, groups, source, options.plan)
    cut = cut_ranks(got.dumps)
    if cut:
        plan = replace(plan, cut=cut)
    space = bounds.Space.DEVICE if options.run.backend == ReplayBackend.NCCL else bounds.Space.HOST
    bounds.check_bytes(plan, options.max_bytes or host.max_bytes, space, here)
    return plan


def replay(where: Source, options: ReplayOptions, env: Mapping[str, str]) -> ReplayReport:
    """Plan, run and (when it stopped) analyze; `env` is the environment the ranks get (and,
    with `Launcher.ENV`, where this rank's place in the job is read)."""
    if not torch_available():
        raise UsageError(INSTALL_HINT)
    files.check_out(options.run.out)
    launch = launch_from(env) if options.launcher == Launcher.ENV else None
    plan = make_plan(where, options, launch)
    reporter = True
    if launch is not None:
        outcome = in_process(plan, options.run, launch)
        reporter = launch.rank == 0
    else:
        outcome = spawn(plan, options.run, env)
    analysis = None
    told: list[str] = []
    if reporter and not outcome.ok and outcome.dumps():
        analysis = analyze(Directory(outcome.fr_dir), Options(file_times=False))
    if reporter and not outcome.ok and (plan.cut or outcome.aborted()):
        recorded = analyze(where, options.load)
        told, analysis = tell(plan, outcome, recorded, analysis)
    return ReplayReport(plan, outcome, analysis, reporter, plan.cut, tuple(told))
