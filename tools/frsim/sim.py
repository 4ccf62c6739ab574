"""One simulated job end to end: spec -> programs -> execution -> dump times -> dumps (and
their files' times).

    sim = simulate(SimSpec(layout=Layout(tp=2, pp=2, dp=2), fault=crash(5, 40)))
    sim.dump(0)          # rank 0's RankDump (None for a rank that crashed)
    sim.truth            # what a correct analyzer concludes (truth.py)

A `Job` holds the layout and the programs: one shared program per pipeline stage (a free-form
`custom.CustomJob`: one per rank, as written), and a private copy for the rank a fault edits;
`Job.program(rank)` is a pure function of (spec, rank), so a worker process can rebuild any
rank's program from the spec alone. `Simulation` runs the engine once for all ranks, then
computes each rank's dump lazily and independently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from . import engine
from .custom import CustomJob
from .dating import Dating, FileTimes, file_times_ns
from .faults import EngineFault, Fault, abort_site, apply, engine_fault, swap_kills_culprit
from .layout import Layout, Topology
from .program import Backend, Catalog, Program, ProgramSpec, build_program
from .recorder import DumpKind, RankDump, Settings, dump_times, record

if TYPE_CHECKING:
    from .truth import Truth


@dataclass(frozen=True)
class SimSpec:
    """Everything that determines a simulated job and its dumps."""

    layout: Topology = field(default_factory=Layout)
    """A TP x PP x DP grid whose ranks run `program`, or a free-form `CustomJob` whose ranks
    run their own programs (then `program` gives only the backend and the `Timing`)."""
    program: ProgramSpec = field(default_factory=ProgramSpec)
    fault: Fault | None = None
    timing: bool = False
    """NCCL timing (TORCH_NCCL_ENABLE_TIMING): entries can be "started", have duration_ms."""
    capacity: int = 2000
    """Ring buffer entries per rank (TORCH_FR_BUFFER_SIZE)."""
    timeout_ms: int = 600_000
    queue_limit: int = 64
    """Most enqueued-but-incomplete ops a host has before it waits for the oldest."""
    dump: DumpKind = "end"
    """end: at the hang (watchdog timeout) or after the last op; mid: inside a healthy run."""
    skew_s: float = 1.0
    """Dumps of the other ranks land within this many seconds after the first."""
    seed: int = 0
    stack_traces: bool = True
    poll_ms: int = 100
    version: str = "2.10"
    comm_lib_version: str = "2.21.5"
    max_clock_offset_ms: float = 4.0
    gloo_abort: bool = False
    """gloo: at the faulted collective, when the members' byte counts differ, the rank that
    receives more bytes than it posted aborts (SIGABRT, no dump), as real gloo does, and the
    members that got all they expected complete it (`engine`). Off: none of them completes it
    (the 3D campaign's model)."""
    file_times: FileTimes | None = None
    """The files' modification times (`dating.py`): each rank's snapshot plus the dump's
    latency, or a copy's time days later; None: each file keeps the time it is written."""

    @property
    def backend(self) -> Backend:
        """The program's backend: "nccl" or "gloo"."""
        return self.program.backend

    @property
    def dating(self) -> Dating:
        """What the files' times are: not set, the dumps' own (with or without stack traces),
        or a copy's."""
        if self.file_times is None:
            return Dating.NONE
        return self.file_times.dating(self.stack_traces)

    def settings(self) -> Settings:
        """The recorder's settings for this spec (timing only on NCCL)."""
        return Settings(
            layout=self.layout,
            backend=self.backend,
            timing=self.timing and self.backend == "nccl",
            capacity=self.capacity,
            timeout_ms=self.timeout_ms,
            poll_ms=self.poll_ms,
            version=self.version,
            comm_lib_version=self.comm_lib_version,
            stack_traces=self.stack_traces,
            entry_gap_ns=self.program.timing.entry_us * 1_000,
            seed=self.seed,
            max_clock_offset_ns=round(self.max_clock_offset_ms * 1e6),
        )


class Job:
    """The layout and every rank's program."""

    def __init__(self, spec: SimSpec) -> None:
        self.spec = spec
        self.layout = spec.layout
        self.catalog = Catalog()
        self._stages: dict[int, Program] = {}
        self._faulty: Program | None = None

    def clean_program(self, rank: int) -> Program:
        """The fault-free program of `rank` (shared by its pipeline stage)."""
        layout = self.layout
        key = rank if isinstance(layout, CustomJob) else layout.coords(rank).stage
        program = self._stages.get(key)
        if program is None:
            spec = self.spec.program
            if isinstance(layout, CustomJob):
                program = layout.program(rank, self.catalog, spec.backend, spec.timing)
            else:
                program = build_program(spec, layout, key, self.catalog)
            self._stages[key] = program
        return program

    def program(self, rank: int) -> Program:
        """What `rank` actually runs (its fault applied)."""
        fault = self.spec.fault
        if fault is None or fault.rank != rank:
            return self.clean_program(rank)
        if self._faulty is None:
            self._faulty = apply(fault, self.clean_program(rank))
        return self._faulty

    def engine_faults(self) -> dict[int, EngineFault]:
        """By rank, the faults the engine applies as it runs (the others edit a program)."""
        fault = self.spec.fault
        if fault is None:
            return {}
        found = engine_fault(fault)
        return {} if found is None else {fault.rank: found}

    def abort_instance(self) -> tuple[int, int] | None:
        """(gid, seq) of the collective instance where gloo may abort a rank
        (`SimSpec.gloo_abort`), or None."""
        fault = self.spec.fault
        if fault is None or not (self.spec.gloo_abort and self.spec.backend == "gloo"):
            return None
        site = abort_site(fault, self.clean_program(fault.rank))
        if site is None:
            return None
        slot, seq = site
        return self.layout.binding(fault.rank)[slot], seq

    def abort_also(self) -> int:
        """A rank gloo aborts besides the one at `abort_instance` (a swap's culprit), or -1."""
        fault = self.spec.fault
        if self.abort_instance() is None or fault is None:
            return -1
        return fault.rank if swap_kills_culprit(fault, self.clean_program(fault.rank)) else -1


class Simulation:
    """A job executed once; dumps and truth computed on demand."""

    def __init__(self, spec: SimSpec) -> None:
        if spec.fault is not None and not 0 <= spec.fault.rank < spec.layout.world_size:
            raise ValueError(f"fault rank {spec.fault.rank} outside the world")
        self.spec = spec
        self.job = Job(spec)
        self.settings = spec.settings()
        world = spec.layout.world_size
        self.programs = [self.job.program(r) for r in range(world)]
        self.times = engine.run(
            spec.layout,
            self.programs,
            self.job.engine_faults(),
            queue_limit=spec.queue_limit,
            gloo=spec.backend == "gloo",
            seed=spec.seed,
            abort=self.job.abort_instance(),
            abort_also=self.job.abort_also(),
        )
        self.dump_times, self.first_dumper = dump_times(
            self.settings, self.programs, self.times, spec.dump, round(spec.skew_s * 1e9)
        )

    @property
    def world_size(self) -> int:
        """The number of ranks in the job."""
        return self.spec.layout.world_size

    @property
    def hung(self) -> bool:
        """Some live rank has an enqueued op that never completes."""
        return self.first_dumper >= 0

    @cached_property
    def file_times(self) -> list[int | None]:
        """Each rank's file modification time in ns since the epoch (`dating.py`); None where
        it wrote no dump or the spec leaves file times unset."""
        if self.spec.file_times is None:
            return [None] * self.world_size
        return file_times_ns(self.settings, self.spec.file_times, self.dump_times)

    def file_time_ns(self, rank: int) -> int | None:
        """The time `write_files` sets on rank `rank`'s dump file, or None (leave it)."""
        return self.file_times[rank]

    def dump(self, rank: int) -> RankDump | None:
        """Rank `rank`'s dump; None if it wrote none (it crashed)."""
        when = self.dump_times[rank]
        if when is None:
            return None
        return record(self.settings, rank, self.programs[rank], self.times[rank], when)

    @cached_property
    def truth(self) -> Truth:
        """What a correct analyzer concludes about this run."""
        from .truth import compute_truth

        return compute_truth(self)


def simulate(spec: SimSpec) -> Simulation:
    """Run the job of `spec` once; dumps and truth are computed on demand."""
    return Simulation(spec)
