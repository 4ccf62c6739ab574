"""Records and enums shared by the pipeline stages (load → groups → match → findings → report).

Glossary (also in the README): a *rank* is a global rank of the job; a *process group* is
identified by its name *and* its member set (split groups can share a name); the *collective
sequence id* counts a group's collectives (a coalesced block counts once) and the *p2p sequence
id* counts its point-to-point ops; the two are separate namespaces. A *coalesced block* is a run
of members closed by an *end marker* entry that carries the block's state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple


class State(enum.IntEnum):
    """Work state as the recorder reports it."""

    SCHEDULED = 0
    STARTED = 1
    COMPLETED = 2
    UNKNOWN = 3


def seq_id(seq: int, p2p: bool = False) -> str:
    """A sequence id as every output writes it: `#12` for a collective sequence id (`all_reduce
    #12`), `p2p #3` for a p2p one (`send p2p #3`)."""
    return f"p2p #{seq}" if p2p else f"#{seq}"


def seq_id_span(first: str, last: str) -> str:
    """Two sequence ids as `seq_id` writes them, as one span: `#4-#9`, `p2p #4-#5`."""
    if first == last:
        return first
    p2p = "p2p "
    if first.startswith(p2p) and last.startswith(p2p):
        last = last.removeprefix(p2p)
    return f"{first}-{last}"


STATE_NAMES = {
    State.SCHEDULED: "scheduled",
    State.STARTED: "started",
    State.COMPLETED: "completed",
    State.UNKNOWN: "unknown",
}


class UnitKind(enum.IntEnum):
    """What an entry is once coalesced blocks are recognised (computed per rank at load)."""

    COLLECTIVE = 0  # a plain collective: one entry is the whole unit
    BLOCK_MEMBER = 1  # member of a coalesced collective block
    BLOCK_MARKER = 2  # end marker of a coalesced collective block (holds the state)
    P2P = 3  # an unbatched send or recv
    BATCH_MEMBER = 4  # a send or recv inside a batched p2p block
    BATCH_MARKER = 5  # end marker of a batched p2p block (is_p2p False in the dump)
    ORPHAN_MARKER = 6  # an end marker whose members fell out of the ring buffer


class P2PKind(enum.IntEnum):
    """Whether a row is a send, a recv, or no point-to-point op."""

    NONE = 0
    SEND = 1
    RECV = 2


ANY_SOURCE = -2
"""Peer value of a receive from any source (`recv 1<-?`)."""
UNKNOWN_PEER = -4
"""Peer value of a send or recv whose recorder keeps no peer (torchcomms, HCCL): never paired."""


class MembershipSource(enum.StrEnum):
    """Where a group's member list came from."""

    PG_CONFIG = "pg_config"
    ENTRIES = "entries"
    WORLD = "world"  # the default group of a dump set whose pg_config is unusable
    # rebuilt from the entries, plus members with no dump that the size rules reveal (an
    # all_gather's output is its input times the group size)
    INFERRED = "inferred"


class FindingKind(enum.StrEnum):
    """The kinds of problem a finding states; `KIND_ORDER` orders them in reports."""

    NOT_JOINED = "not_joined"
    OP_TYPE_MISMATCH = "op_type_mismatch"
    SIZE_MISMATCH = "size_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    STATE_MISMATCH = "state_mismatch"
    P2P_UNMATCHED = "p2p_unmatched"
    P2P_SIZE_MISMATCH = "p2p_size_mismatch"
    P2P_DTYPE_MISMATCH = "p2p_dtype_mismatch"
    MISSING_DUMP = "missing_dump"
    UNREADABLE_DUMP = "unreadable_dump"
    GROUP_CONFLICT = "group_conflict"
    MALFORMED_ENTRY = "malformed_entry"


# Order of findings at one sequence id of one group: disagreements first.
KIND_ORDER: tuple[FindingKind, ...] = (
    FindingKind.OP_TYPE_MISMATCH,
    FindingKind.SIZE_MISMATCH,
    FindingKind.DTYPE_MISMATCH,
    FindingKind.NOT_JOINED,
    FindingKind.P2P_UNMATCHED,
    FindingKind.P2P_SIZE_MISMATCH,
    FindingKind.P2P_DTYPE_MISMATCH,
    FindingKind.STATE_MISMATCH,
    FindingKind.MISSING_DUMP,
    FindingKind.UNREADABLE_DUMP,
    FindingKind.GROUP_CONFLICT,
    FindingKind.MALFORMED_ENTRY,
)


# Kinds that say ranks disagree on what to do: a program bug, the root before any hang.
MISMATCH_KINDS = frozenset(
    {
        FindingKind.OP_TYPE_MISMATCH,
        FindingKind.SIZE_MISMATCH,
        FindingKind.DTYPE_MISMATCH,
        FindingKind.P2P_SIZE_MISMATCH,
        FindingKind.P2P_DTYPE_MISMATCH,
    }
)

# Kinds that say something about the dumps rather than about the job's behaviour.
INPUT_KINDS = frozenset(
    {FindingKind.MISSING_DUMP, FindingKind.UNREADABLE_DUMP, FindingKind.MALFORMED_ENTRY}
)


class Frame(NamedTuple):
    """One stack frame as recorded (innermost first in a stack). A named tuple, not a
    dataclass: stacks of frames are hashed by the million when ranks are merged, and a tuple
    hashes in C."""

    name: str
    filename: str
    line: int


Stack = tuple[Frame, ...]


@dataclass(frozen=True)
class UnreadableDump:
    """A rank file that could not be used, and why."""

    file: str
    rank: int | None
    reason: str
    job_named: bool = False  # the job itself names the rank (a live fetch's manifest), not a file


@dataclass(frozen=True)
class Group:
    """A process group: name plus member set. `uid` is fr-analyze's own id, stable per run."""

    uid: int
    name: str
    desc: str
    ranks: tuple[int, ...]
    source: MembershipSource

    @property
    def size(self) -> int:
        """The number of member ranks."""
        return len(self.ranks)


@dataclass(frozen=True)
class Finding:
    """One problem, with everything needed to act on it."""

    kind: FindingKind
    group: Group | None
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op: str
    ranks: tuple[int, ...]
    culprit_ranks: tuple[int, ...]
    detail: str


class Status(enum.StrEnum):
    """The one answer about the job (see `conclusion`)."""

    OK = "ok"  # nothing wrong: every op matched, nothing stuck (ops may be in flight)
    DESYNC = "desync"  # ranks disagree on what to do: a program bug
    HUNG = "hung"  # ranks agree, but something stopped: a rank, a device, the network
    SLOW = "slow"  # everything completed, but one rank held the others up
    INCOMPLETE = "incomplete"  # only problems with the dumps themselves


@dataclass(frozen=True)
class DumpSummary:
    """What was loaded: the header of every report."""

    directory: str
    ranks_loaded: tuple[int, ...]
    ranks_missing: tuple[int, ...]
    unreadable: tuple[UnreadableDump, ...]
    versions: dict[str, tuple[int, ...]]
    backends: tuple[str, ...]
    comm_lib_versions: tuple[str, ...]
    ignored_files: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())
    readers: dict[str, tuple[int, ...]] = field(default_factory=dict)  # reader -> ranks read
    source_kind: str = "directory"  # where the dumps came from: tar.gz, zip, url, ...
    source_what: str = ""  # said in the report's header ("" for a plain directory)
    engine: str = ""  # where the files were read, said in the header ("" for this process)
