"""frsim: a recorder simulator for PyTorch Flight Recorder dumps of a TP/PP/DP training job.

The dumps emerge from a discrete-event execution of every rank's program (host enqueues,
one in-order device stream, collectives and p2p pairs completing when every participant
arrived), with a fault injected into it; the ground truth comes from the simulation itself.
See README.md in this directory. Modules:

- layout: TP x PP x DP and the process groups, in creation order; the `Topology` the rest sees;
- custom: free-form jobs (explicit groups, per-rank programs) run by the same machinery;
- shapes: the common non-3D training shapes as free-form jobs (FSDP2, HSDP, MoE, DDP,
  new_subgroups, monitored barriers), for NCCL and gloo;
- sites: call-site stack frames;
- program: the per-rank op lists (Megatron-style 1F1B step);
- faults: fault kinds and how they edit a program or the execution;
- engine: the discrete-event execution (enqueue, start, completion times);
- recorder: dump times, watchdog, ring buffer: each rank's dump;
- dating: each dump file's time: its snapshot plus the dump's latency, or a copy's;
- writers: torch-layout pickle, Python pickle, JSON, gzip, file names;
- truth: what a correct analyzer concludes;
- sim: the spec and the simulation tying them together;
- campaign: `draw_case(seed[, shapes])` for randomized fault campaigns.
"""

from .campaign import Case, draw_case
from .custom import CustomJob
from .dating import Dating, FileTimes
from .faults import ExtraOp, Fault
from .layout import Layout, Role
from .program import ProgramSpec, Timing
from .recorder import RankDump
from .sim import SimSpec, Simulation, simulate
from .truth import Truth
from .writers import Output, write_dumps

__all__ = [
    "Case",
    "CustomJob",
    "Dating",
    "ExtraOp",
    "Fault",
    "FileTimes",
    "Layout",
    "Output",
    "ProgramSpec",
    "RankDump",
    "Role",
    "SimSpec",
    "Simulation",
    "Timing",
    "Truth",
    "draw_case",
    "simulate",
    "write_dumps",
]
