"""The recorders that write Flight Recorder dumps, and what each one's dumps say: whether an op's
completion is reported, when discovery times are stamped, and what the report says of them.

One place for these facts: `load.formats.dialects` rewrites each recorder's dumps into PyTorch's
form, and match (`match.completion`) and diagnosis (`diagnosis.ages`) read what the recorder
could and could not tell.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Dialect(enum.StrEnum):
    """Which recorder wrote a dump: PyTorch's, torchcomms' or HCCL's (torch_npu); or an
    Execution Trace (`traces`) read in its place."""

    PYTORCH = "pytorch"
    TORCHCOMMS = "torchcomms"
    HCCL = "hccl"
    EXECUTION_TRACE = "execution_trace"


CALL_RUNS_OP = frozenset({"gloo"})
"""torchcomms backends whose call runs the op on the calling thread and returns once it
finished (gloo, on the CPU); every other backend's call only enqueues it (NCCL, on a GPU)."""

DESCRIPTION = {
    Dialect.HCCL: "HCCL dumps (torch_npu): each op named by its innermost frame",
    Dialect.EXECUTION_TRACE: "Execution Traces (Chakra), not Flight Recorder dumps: they tell "
    "what each rank issued, in order, and nothing of states or times; disagreements, missing "
    "and extra ops and their order are found, not whether an op finished or how long it took",
}
"""What the report says of ranks written by each other recorder (torchcomms: `description`,
which depends on the backends)."""


def description(dialect: str, backends: Iterable[str]) -> str | None:
    """What the report says of a rank that `dialect` wrote with ops on `backends` (None for
    PyTorch's recorder)."""
    if dialect != Dialect.TORCHCOMMS:
        return DESCRIPTION.get(Dialect(dialect)) if dialect in set(Dialect) else None
    running = sorted(set(backends) & CALL_RUNS_OP)
    queued = sorted(set(backends) - CALL_RUNS_OP)
    parts = ["torchcomms dumps: sequence ids counted per communicator"]
    if running:
        parts.append(
            f"on {', '.join(running)} an op is retired when its call returned, so it finished "
            "(an unretired one: a call that never returned; one issued with async_op: only "
            "handed to a thread)"
        )
    if queued:
        parts.append(
            f"on {', '.join(queued)} the recorder does not say whether an op finished (it "
            "retires ops when they are enqueued)"
        )
    parts.append("no timeout kept (its timeout_ms is a constant, not the communicator's)")
    return "; ".join(parts)


def reports_completion(dialect: str, backend: str) -> bool:
    """Whether the recorder says when an op of `backend` finished: PyTorch's and HCCL's do (a
    state, or gloo's `retired`); torchcomms only where the call runs the op (gloo: `retired`
    means the call returned); Execution Traces never."""
    if dialect == Dialect.TORCHCOMMS:
        return backend in CALL_RUNS_OP
    return dialect != Dialect.EXECUTION_TRACE


def dumps_look_at_ops(dialect: str) -> bool:
    """Whether the recorder stamps an unretired op's discovery times when it dumps (so they
    are the dump time): PyTorch's and HCCL's do; torchcomms stamps them when the call returns,
    and an Execution Trace keeps no times."""
    return dialect not in (Dialect.TORCHCOMMS, Dialect.EXECUTION_TRACE)
