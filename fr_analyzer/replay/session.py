"""A replay from start to end: load the job through the pipeline, plan it, run it, and, when
it stopped, analyze the Flight Recorder dumps its surviving ranks wrote, with fr-analyze's own
analysis. No logic of its own beyond the order of those steps."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ..errors import UsageError
from ..load.sources import Directory, Source
from ..model.groups import build_groups
from ..pipeline import Analysis, Options, analyze, load
from .plan import PlanOptions, ReplayPlan, build
from .runner import RunOptions, RunOutcome, in_process, launch_from, spawn

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


@dataclass(frozen=True)
class ReplayReport:
    """A replay's plan, how it ran, and the analysis of its dumps when it stopped."""

    plan: ReplayPlan
    outcome: RunOutcome
    analysis: Analysis | None  # None: it ran to the end, or no rank could dump
    reporter: bool = True  # False: a rank of torchrun or srun other than 0 (one line of its own)


def torch_available() -> bool:
    """Whether torch can be imported here (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def make_plan(where: Source, options: ReplayOptions) -> ReplayPlan:
    """The plan of the job at `where`, through the project's loader."""
    got = load(where, options.load)
    groups = build_groups(got.dumps, got.table, got.unreadable)
    plan = build(got.table, groups, got.found.source.label, options.plan)
    if options.world_size is not None and options.world_size != plan.world_size:
        raise UsageError(
            f"--ranks {options.world_size}: the dumps are of a {plan.world_size}-rank job; "
            "a replay runs every rank"
        )
    return plan


def replay(where: Source, options: ReplayOptions, env: Mapping[str, str]) -> ReplayReport:
    """Plan, run and (when it stopped) analyze; `env` is the environment the ranks get (and,
    with `Launcher.ENV`, where this rank's place in the job is read)."""
    if not torch_available():
        raise UsageError(INSTALL_HINT)
    plan = make_plan(where, options)
    reporter = True
    if options.launcher == Launcher.ENV:
        launch = launch_from(env)
        outcome = in_process(plan, options.run, launch)
        reporter = launch.rank == 0
    else:
        outcome = spawn(plan, options.run, env)
    analysis = None
    if reporter and not outcome.ok and outcome.dumps():
        analysis = analyze(Directory(outcome.fr_dir), Options(file_times=False))
    return ReplayReport(plan, outcome, analysis, reporter)
