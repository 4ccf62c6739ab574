"""The root cause's sentence, in English, from facts the rules already settled: who, which
op, who waits, and which variant of the story holds. Nothing here decides anything; each
function is one sentence (or the clause several share).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from ..model.ranks import agree, by_count, counted, label
from ..model.records import Finding, Group
from .positions import OpRef

if TYPE_CHECKING:  # stragglers builds its root cause with these sentences
    from .stragglers import Slowness


class StuckHow(enum.Enum):
    """Which story a stuck collective tells."""

    LAGGARDS = "laggards"  # some members completed or started it: the stuck ones' device
    NEVER_STARTED = "never_started"  # every member issued it, timing on, it stayed scheduled
    COMMUNICATION = "communication"  # every member issued it and none completed it


def where(ref: OpRef) -> str:
    """An op as the sentences name it: `all_reduce #8 of group '2' (tp)`."""
    g = ref.group
    if ref.p2p_seq_id is None:
        return f"{ref.op} #{ref.collective_seq_id} of group {g.name!r} ({g.desc})"
    return f"{ref.op} (p2p #{ref.p2p_seq_id} on rank {ref.rank}) of group {g.name!r} ({g.desc})"


def _group_of(f: Finding) -> str:
    return f"group {f.group.name!r} ({f.group.desc})" if f.group else "the job"


def _bug(ranks: Collection[int], why: str) -> str:
    return f"A program bug on {agree(ranks, 'that rank', 'those ranks')} ({why})."


def mismatch(*, roots: Collection[int], f: Finding, went_on: bool) -> str:
    """Ranks that disagree with the rest of their group at one op; `went_on`: they skipped it
    and their next op sits at its seq id."""
    seq = f.collective_seq_id if f.collective_seq_id is not None else f.p2p_seq_id
    where_ = _group_of(f)
    how = f.kind.value.replace("_", " ")
    if went_on:
        others = sorted(set(f.ranks) - set(roots))
        rest = label(others) if len(others) == 1 else "the rest of the group"
        return (
            f"{label(roots)} skipped {f.op} #{seq} of {where_} and went on: "
            f"{agree(roots, 'its', 'their')} next op sits at #{seq}, where {rest} "
            f"issued {f.op} ({how}). {_bug(roots, 'a rank-dependent branch')}"
        )
    what = "collective" if f.collective_seq_id is not None else "p2p"
    return (
        f"{label(roots)} {agree(roots, 'disagrees', 'disagree')} with the rest of {where_} "
        f"at {what} #{seq} {f.op}: {how}. {_bug(roots, 'another code path, shape or dtype')}"
    )


def skipped_collective(*, roots: Collection[int], others: Sequence[int], f: Finding) -> str:
    """Ranks that skipped a collective the others issued, and block in later ops of its group."""
    return (
        f"{label(roots)} skipped {f.op} #{f.collective_seq_id} of {_group_of(f)}, which "
        f"{label(others)} issued, and went on to later ops of that group, where "
        f"{agree(roots, 'it blocks', 'they block')}. {_bug(roots, 'a rank-dependent branch')}"
    )


def skipped_barrier(*, rank: int, inside: Sequence[int], at: str, ref: OpRef) -> str:
    """A rank that went past a monitored_barrier (no entry) the others are in."""
    return (
        f"rank {rank} skipped {at}, which {label(inside)} "
        f"{agree(inside, 'is', 'are')} in, and went on to {where(ref)}, where it blocks. "
        f"{_bug([rank], 'a rank-dependent branch')}"
    )


def more_behind(*, others: int, waiters: Collection[int]) -> str:
    """The clause on the ranks that wait behind the direct waiters (empty when none do)."""
    if others <= 0:
        return ""
    return (
        f", and {counted(others, 'more rank')} {by_count(others, 'waits', 'wait')} behind "
        f"{agree(waiters, 'that rank', 'those ranks')}"
    )


def dead(
    *,
    gone: Sequence[int],
    waiters: Collection[int],
    at: str,
    more: str,
    no_dump: bool,
    quiet: Collection[int] = (),
    killed: bool = False,
) -> str:
    """Ranks that look dead: no usable dump (`no_dump`; `killed`: their record is an Execution
    Trace cut where they were killed), or stopped recording long before
    their peers started waiting for them in `at`; `quiet` ranks stopped past their last
    recorded collective (a send/recv with them, where the recorder keeps nothing)."""
    how = (
        agree(gone, "it was killed", "they were killed")
        + " (no dump; "
        + agree(gone, "its Execution Trace ends", "their Execution Traces end")
        + " in the middle)"
        if killed
        else agree(gone, "it has no usable dump", "they have no usable dumps")
        if no_dump
        else agree(gone, "it stopped", "they stopped")
        + " recording long before they started waiting"
    )
    hosts = agree(gone, "that host's", "those hosts'")
    peers = (
        f"; {label(quiet)} stopped past {agree(quiet, 'its', 'their')} last recorded "
        f"collective, most likely in a send/recv with {agree(gone, 'it', 'them')}"
        if quiet
        else ""
    )
    return (
        f"{label(gone)} {agree(gone, 'looks', 'look')} dead: {label(waiters)} "
        f"{agree(waiters, 'waits', 'wait')} for {agree(gone, 'it', 'them')} in "
        f"{at}{more}{peers}, and {how}; check {hosts} logs (OOM, crash, preemption, "
        "hardware)."
    )


def skipped_op(*, roots: Collection[int], waiters: Collection[int], at: str, more: str) -> str:
    """Ranks that went past the op their peers wait for them in."""
    return (
        f"{label(roots)} skipped {at}: {label(waiters)} "
        f"{agree(waiters, 'waits', 'wait')} in it{more}, but "
        f"{agree(roots, 'it', 'they')} went on to later ops. "
        f"{_bug(roots, 'a rank-dependent branch')}"
    )


def never_joined(
    *,
    roots: Collection[int],
    waiters: Collection[int],
    at: str,
    more: str,
    p2p: bool,
    ahead: str = "",
) -> str:
    """Ranks that never joined (or, `p2p`, never posted their half of) the op others wait in;
    with `ahead`, the others issued it and wait in that later op."""
    joined = "posted its half of" if p2p else "joined"
    wait = (
        f"{agree(waiters, 'issued it and waits', 'issued it and wait')} in {ahead}"
        if ahead
        else f"{agree(waiters, 'waits', 'wait')} in it"
    )
    return (
        f"{label(roots)} never {joined} {at}: {label(waiters)} {wait}{more}. Look at what "
        f"{agree(roots, 'it', 'they')} did instead: newest op and code below."
    )


def extra_op(*, issuers: Collection[int], ref: OpRef, group: Group) -> str:
    """A collective only a minority of its group issued."""
    return (
        f"{label(issuers)} issued an extra {ref.op} #{ref.collective_seq_id} on group "
        f"{group.name!r} ({group.desc}) that no other member issued; "
        f"{agree(issuers, 'it waits', 'they wait')} in it. "
        f"{_bug(issuers, 'a rank-dependent branch')}"
    )


def p2p_deviant(*, rank: int, at: OpRef, waiters: Sequence[int]) -> str:
    """A rank whose send/recv sequence left its pipeline position's schedule at `at`."""
    who = label(waiters) if waiters else "its peers"
    return (
        f"rank {rank} issued {where(at)} where the ranks in its pipeline position "
        "issue another send/recv: it left the schedule (a skipped or extra send/recv), "
        f"and {who} now wait for it. A program bug on that rank."
    )


def deviant(*, rank: int, skipped: OpRef) -> str:
    """A rank of a cycle that skipped the op the others wait for it in."""
    return (
        f"rank {rank} skipped {where(skipped)} and went on to a later op, where it blocks; "
        "the ranks waiting in the skipped op wait for it. A program bug on that rank "
        "(a rank-dependent branch)."
    )


def stuck(
    *,
    how: StuckHow,
    stuck: Sequence[int],
    ref: OpRef,
    completed: Sequence[int],
    started: Iterable[int],
    behind: int,
) -> str:
    """Ranks stuck on their own in a collective, told the way `how` says."""
    is_ = agree(stuck, "is", "are")
    if how is StuckHow.LAGGARDS:
        return (
            f"{label(stuck)} {is_} stuck in {where(ref)}"
            + (
                f", which {label(completed)} completed"
                if completed
                else f" while {label(started)} started it and wait"
            )
            + f"; {counted(behind, 'rank')} {by_count(behind, 'waits', 'wait')} behind "
            f"{agree(stuck, 'it', 'them')}. {agree(stuck, 'Its GPU', 'Their GPUs')} or "
            "NCCL stopped there (a device hang, a kernel that never finished, a network "
            f"fault on {agree(stuck, 'that host', 'those hosts')}), not a program bug."
        )
    if how is StuckHow.NEVER_STARTED:
        return (
            f"{label(stuck)} {is_} stuck in {where(ref)} although "
            "every member issued it and none completed it. NCCL timing was on and it stayed "
            "scheduled: the GPU never started it, so something before it on that GPU did "
            "not finish (a kernel, or a wait on another stream), not the network nor a "
            "program bug."
        )
    return (
        f"{label(stuck)} {is_} stuck in {where(ref)} although "
        "every member issued it and none completed it: a communication-level hang "
        "(network, NCCL, GPU), not a program bug."
    )


def deadlock(*, cycle: Sequence[int]) -> str:
    """Ranks that wait for each other in a cycle no other rank's order resolves."""
    return (
        f"Cross-group deadlock: {label(cycle)} wait for each other in a cycle; they issued "
        "collectives of different groups in different orders, and no other rank shows "
        "which order is right. Make every rank issue these groups' collectives in the "
        "same order."
    )


def straggler(slow: Slowness) -> str:
    """A rank that made the others wait: one stall, a repeated lateness, or a slow rank."""
    if slow.stall:
        seq = (
            f"#{slow.collective_seq_id}"
            if slow.p2p_seq_id is None
            else f"(p2p #{slow.p2p_seq_id} on rank {slow.rank})"
        )
        return (
            f"rank {slow.rank} stalled {slow.lateness_s:.1f} s before {slow.op} "
            f"{seq} of group {slow.group.name!r} ({slow.group.desc}); its "
            "peers waited for it there, and the delay cascaded to the ranks that waited for "
            "them. Look at that host at that moment (compute, data loading, I/O, a pause)."
        )
    if slow.collective_seq_id is not None:
        return (
            f"rank {slow.rank} keeps arriving late on its own, about "
            f"{slow.lateness_s * 1e3:.0f} ms after its peers, first at {slow.op} "
            f"#{slow.collective_seq_id} of group {slow.group.name!r} ({slow.group.desc}); they "
            "wait for it each time. Look at that host (a periodic pause: data loading, garbage "
            "collection, logging, CPU contention)."
        )
    return (
        f"rank {slow.rank} is a straggler: it reaches collectives about "
        f"{slow.lateness_s * 1e3:.0f} ms after its peers, who wait for it every time; "
        "look at that host (slow GPU, data loading, CPU contention, thermal throttling)."
    )
