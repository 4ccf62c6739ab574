"""The diagnosis' records: the root cause, its kinds, its wait chain, the timing verdict, each
rank's state, and the `Diagnosis` every later stage reads."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from ..model.records import Finding, Group, Stack, Status
from .ages import Age, DumpTime, Unknown
from .positions import OpRef, Position, StackGroup


class RootKind(enum.StrEnum):
    """What kind of thing the root cause is."""

    MISMATCH = "mismatch"
    NOT_JOINED = "not_joined"
    DEAD_RANK = "dead_rank"
    STUCK_COLLECTIVE = "stuck_collective"
    DEADLOCK = "deadlock"
    STRAGGLER = "straggler"


@dataclass(frozen=True)
class Thresholds:
    """Tunable limits of the diagnosis."""

    dead_after_s: float = 60.0  # an idle rank whose buffer ends this long before its waiters'
    straggler_ms: float = 50.0  # median lateness that makes a rank a straggler
    stall_ms: float = 2000.0  # one late arrival that makes a rank the cause of a slow step
    stack_depth: int = 8  # innermost frames compared when grouping stacks


@dataclass(frozen=True)
class RankState:
    """One rank's standing: where it is blocked, its newest op, whom it waits for."""

    rank: int
    blocked: OpRef | None  # the oldest op that did not complete
    newest: OpRef | None  # the newest op in its buffer
    waits_for: tuple[int, ...]


class WaitStep(NamedTuple):
    """One step of a wait chain: a rank, and the op it waits in (its group's name and the
    sequence id), or no op for the rank the chain ends at when it waits in none."""

    rank: int
    group: str | None
    seq: int | None


@dataclass(frozen=True, kw_only=True)
class RootCause:
    """The one thing everything else follows from."""

    kind: RootKind
    ranks: tuple[int, ...]
    group: Group | None
    collective_seq_id: int | None
    p2p_seq_id: int | None
    op: str
    sentence: str
    evidence: tuple[str, ...]
    wait_chain: tuple[WaitStep, ...]
    deviates: bool = False  # the culprit issued ops in another order than the others (a bug)
    finding: Finding | None = None  # the matcher's finding that states it, if any
    lateness_s: float | None = None  # stragglers: how late
    code: Stack = ()  # the culprit's innermost frames that differ from its peers'
    time: RootTime | None = None  # when the root op happened, on the culprit's clock
    # other readings the dumps fit as well, each with what would decide (the rule's own)
    alternatives: tuple[Alternative, ...] = ()


@dataclass(frozen=True)
class RootTime:
    """When the root op happened on one rank's clock, to find that moment in its logs."""

    at_ns: int  # ns since the epoch (the entry's `time_created_ns`)
    rank: int  # whose clock: the culprit's, or (a culprit with no dump) a rank waiting for it
    what: str  # what happened then, one clause: "rank 5 enqueued all_reduce #8 of group '2'"


class Confidence(enum.StrEnum):
    """How far the evidence carries the verdict."""

    HIGH = "high"  # no other reading explains the dumps as well
    AMBIGUOUS = "ambiguous"  # another reading does: `Alternative`s name it and what decides


@dataclass(frozen=True)
class Alternative:
    """Another reading of the same dumps, beside the verdict's likelier one."""

    status: Status  # the status this reading gives
    reading: str  # what it says happened, one sentence
    decide: str  # what would decide between the two (a snapshot, a stack, a log line)


@dataclass(frozen=True)
class Timing:
    """Whether the unfinished ops are stuck or in flight, and how that is known."""

    dump: DumpTime
    blocked_ranks: int
    oldest_age_s: float | None  # age of the oldest unfinished op at the dump time
    age: Age  # of the job's unfinished ops: old if any is, young if all are, else unknown
    hung: bool  # treated as stuck: old, or unknown on a backend whose watchdog dumps at timeout
    note: str  # one sentence for the report
    measured: bool = False  # decided by comparing snapshots (`series`), not by one dump
    unknown: Unknown | None = None  # why the age is not known, where it is not


@dataclass(frozen=True)
class Diagnosis:
    """What the diagnosis found: positions, ranks, stacks, the root cause, the timing."""

    positions: tuple[Position, ...]
    ranks: tuple[RankState, ...]
    stacks: tuple[StackGroup, ...]
    root_cause: RootCause | None
    timing: Timing
    behind_root: frozenset[int]  # ranks that wait, directly or not, for the root's ranks
    hosts: Mapping[int, str] = field(default_factory=dict)  # rank → its host, where known
