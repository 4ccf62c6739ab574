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


BACKENDS: dict[str, Backend] = {
    "nccl": Backend(exact_layout=True),
    "ncclx": Backend(exact_layout=True),
    "nccl2": Backend(exact_layout=True),
    "rccl": Backend(exact_layout=True),
    "rcclx": Backend(exact_layout=True),
    "xccl": Backend(exact_layout=True, marks_completion=False),
    "gloo": Backend(records_states=False, records_p2p=False),
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
