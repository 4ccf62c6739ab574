"""The backend capability table: what each backend's Flight Recorder records, the one table
every stage reads (through the derived sets)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    """What a backend's Flight Recorder records: the one table of backend capabilities that
    every stage reads (through the sets below)."""

    # sizes as the size rules expect (ProcessGroupNCCL and the recorders built on it): a
    # layout every member breaks alike is a disagreement with the op there, never a convention
    # to learn (gloo's coalesced all_gather is one)
    exact_layout: bool = False
    # scheduled/started/completed; gloo writes `scheduled` always, so `retired` is the signal
    records_states: bool = True
    # send/recv entries; gloo records none, so a rank blocked in one looks idle
    records_p2p: bool = True
    # some builds never mark an op completed (xccl)
    marks_completion: bool = True
    # monitored_barrier as an entry; gloo records none, yet it takes two sequence ids
    records_monitored_barrier: bool = True
    # reduce_scatter_tensor recorded as what it runs: gloo records it as an all_reduce whose
    # input is the reduce-scatter's (group size x its output)
    reduce_scatter_as_all_reduce: bool = False
    # a rank that receives more bytes than it posted is aborted with no dump (gloo)
    aborts_on_oversized_receive: bool = False


BACKENDS: dict[str, Backend] = {
    "nccl": Backend(exact_layout=True),
    "ncclx": Backend(exact_layout=True),
    "nccl2": Backend(exact_layout=True),
    "rccl": Backend(exact_layout=True),
    "rcclx": Backend(exact_layout=True),
    "xccl": Backend(exact_layout=True, marks_completion=False),
    "gloo": Backend(
        records_states=False,
        records_p2p=False,
        records_monitored_barrier=False,
        reduce_scatter_as_all_reduce=True,
        aborts_on_oversized_receive=True,
    ),
    "hccl": Backend(),
    "mccl": Backend(),
    "c10d": Backend(),
    "ucc": Backend(),
    "mpi": Backend(),
}
"""Every backend name a dump may carry; an unknown one is reported as such by the loader."""

KNOWN_BACKENDS = frozenset(BACKENDS)
EXACT_LAYOUT_BACKENDS = frozenset(n for n, b in BACKENDS.items() if b.exact_layout)
NO_STATE_BACKENDS = frozenset(n for n, b in BACKENDS.items() if not b.records_states)
NO_P2P_BACKENDS = frozenset(n for n, b in BACKENDS.items() if not b.records_p2p)
NO_COMPLETION_BACKENDS = frozenset(n for n, b in BACKENDS.items() if not b.marks_completion)
NO_MONITORED_BARRIER_BACKENDS = frozenset(
    n for n, b in BACKENDS.items() if not b.records_monitored_barrier
)
REDUCE_SCATTER_AS_ALL_REDUCE_BACKENDS = frozenset(
    n for n, b in BACKENDS.items() if b.reduce_scatter_as_all_reduce
)
ABORTS_ON_OVERSIZED_RECEIVE_BACKENDS = frozenset(
    n for n, b in BACKENDS.items() if b.aborts_on_oversized_receive
)
