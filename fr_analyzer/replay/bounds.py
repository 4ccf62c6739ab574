"""What a replay may ask of this host: how many ranks it starts, how many threads they run (a
gloo rank starts threads for every group it is in) and how many tensor bytes they hold at once,
each refused before anything starts, in one line naming the limit and the flag that raises it.

A plan is read from files anyone may have written: a stray file named `rank_1048575` makes a
world of 1,048,576 ranks (the spawn launcher would start a Python and torch process for each),
and an all_reduce recorded as 2**31 floats would be allocated as recorded, on every rank. The
defaults come from the host (CPUs, memory, the process and open-file limits): a replay that
fits in them runs; one that does not is refused before the first process starts, and says which
file made the world that large when no readable dump shows it.
"""

from __future__ import annotations

import enum
import os
import resource
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from ..errors import UsageError
from ..load import LIMITS, Limits
from ..model.dtypes import DTYPES
from ..model.dump import RankDump
from ..model.records import UnreadableDump
from .dtypes import SAME_WIDTH
from .plan import Kind, OpSpec, ReplayPlan

GIB = 1 << 30


class Space(enum.StrEnum):
    """Where the ranks' tensors live, and so what one `--max-bytes` budget covers."""

    HOST = "host"  # gloo: every rank started here allocates in this host's memory
    DEVICE = "device"  # nccl: each rank allocates on its own GPU


@dataclass(frozen=True)
class HostLimits:
    """The most a replay may start here: ranks (`--max-ranks`), tensor bytes (`--max-bytes`:
    held at once by the ranks started here, or by one rank's GPU with nccl) and threads (half
    the user's process limit; None: it has none)."""

    max_ranks: int
    max_bytes: int
    max_threads: int | None


def host_limits(limits: Limits = LIMITS) -> HostLimits:
    """This host's defaults (the `replay_*` rows of docs/limits.md): ranks, the least of so many
    per CPU, one per so much memory, and what the open-file limit and half the process limit
    leave for so many files and threads a rank; bytes, a share of the memory."""
    cpus = os.cpu_count() or 1
    memory = _physical_memory()
    candidates = [limits.replay_ranks_per_cpu * cpus, memory // limits.replay_rank_memory]
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if files != resource.RLIM_INFINITY:
        candidates.append(files // limits.replay_rank_files)
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    threads = None if processes == resource.RLIM_INFINITY else processes // 2
    if threads is not None:
        candidates.append(threads // limits.replay_rank_threads)
    ranks = max(1, min(candidates))
    return HostLimits(ranks, max(1, memory // limits.replay_memory_share), threads)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 8 * GIB


def check_world(
    world_size: int,
    max_ranks: int,
    dumps: Sequence[RankDump],
    unreadable: Sequence[UnreadableDump],
    source: str,
) -> None:
    """Refuse a spawned world larger than `max_ranks`, saying where its size comes from: when
    only the names of unreadable files reach that far, that file is named and not believed."""
    if world_size <= max_ranks:
        return
    shown = max(_shown_by_dumps(dumps), default=-1)
    told = f"{source}: the dumps make a {world_size:,}-rank world"
    named = [u for u in unreadable if u.rank is not None and u.rank > shown]
    if named and shown < world_size - 1:
        highest = max(named, key=lambda u: u.rank or 0)
        read = f"ranks up to {shown}" if shown >= 0 else "no rank"
        told = (
            f"{highest.file}: a {world_size:,}-rank world claimed only by the name of this "
            f"unreadable file (the {len(dumps)} dump(s) read show {read}): not believed"
        )
    raise UsageError(
        f"{told}; a replay starts at most {max_ranks:,} ranks on this host (--max-ranks raises it)"
    )


def check_threads(
    groups: Sequence[tuple[int, ...]],
    here: Collection[int],
    max_threads: int | None,
    source: str,
    limits: Limits = LIMITS,
) -> None:
    """Refuse a plan whose ranks started here (`here`) would start more threads than
    `max_threads`: so many a rank, and so many more per group it is a member of (every rank
    creates every group; gloo starts threads for each group a rank is in)."""
    if max_threads is None:
        return
    memberships = sum(sum(1 for rank in members if rank in here) for members in groups)
    threads = len(here) * limits.replay_rank_threads + memberships * limits.replay_group_threads
    if threads > max_threads:
        raise UsageError(
            f"{source}: {len(groups):,} process groups, {len(here):,} rank(s) started here: "
            f"about {threads:,} threads, above {max_threads:,}, half this user's process "
            "limit (`ulimit -u` raises it)"
        )


def _shown_by_dumps(dumps: Iterable[RankDump]) -> set[int]:
    """The ranks the readable dumps show: their own, and the members their groups claim."""
    shown = set()
    for dump in dumps:
        shown.add(dump.rank)
        for claim in dump.claims.values():
            if claim.ranks:
                shown.add(max(claim.ranks))
    return shown


def width(dtype: str) -> int:
    """Bytes per element of a torch dtype name (as the plan writes it)."""
    for known in DTYPES.values():
        if known.torch_name == dtype:
            return known.width
    for size, name in SAME_WIDTH.items():
        if name == dtype:
            return size
    return 8  # unknown: counted wide, never narrower than it could be


def op_bytes(op: OpSpec, group_size: int, rank: int) -> int:
    """The tensor bytes a rank holds while it runs `op`, as the worker allocates them."""
    n, size = op.numel, group_size
    kind = op.kind
    if kind in (Kind.ALL_GATHER, Kind.REDUCE_SCATTER):
        elements = n + size * n
    elif kind in (Kind.GATHER, Kind.SCATTER):
        elements = n + (size * n if rank == op.root else 0)
    elif kind == Kind.ALL_TO_ALL:
        elements = sum(op.splits_in) + sum(op.splits_out)
    elif kind in (Kind.COALESCED, Kind.BATCH_P2P):  # every member allocated before the first runs
        return sum(op_bytes(m, group_size, rank) for m in op.members)
    elif kind == Kind.BARRIER:
        elements = 0
    else:
        elements = n
    return elements * width(op.dtype)


@dataclass(frozen=True)
class Peak:
    """A rank's largest op: what it holds at most at once."""

    rank: int
    bytes: int
    op: OpSpec | None


def peaks(plan: ReplayPlan) -> list[Peak]:
    """Every rank's largest op, by the bytes it allocates."""
    sizes = {g.uid: len(g.ranks) for g in plan.groups}
    found = []
    for rank in plan.ranks:
        best = Peak(rank.rank, 0, None)
        for op in rank.ops:
            held = op_bytes(op, sizes.get(op.group, 1), rank.rank)
            if held > best.bytes:
                best = Peak(rank.rank, held, op)
        found.append(best)
    return found


def check_bytes(plan: ReplayPlan, max_bytes: int, space: Space, ranks: Iterable[int]) -> None:
    """Refuse a plan whose tensors exceed `max_bytes` (after `--scale`): with `Space.HOST`, the
    largest ops of `ranks` (those started here) together; with `Space.DEVICE`, each rank's own."""
    here = set(ranks)
    mine = [p for p in peaks(plan) if p.rank in here]
    worst = max(mine, key=lambda p: p.bytes, default=None)
    if worst is None or worst.op is None:
        return
    total = sum(p.bytes for p in mine) if space == Space.HOST else worst.bytes
    if total <= max_bytes:
        return
    op = worst.op
    group = plan.group(op.group)
    what = (
        f"rank {worst.rank}'s {op.op} #{op.seq} of group {group.name!r} "
        f"({op.numel:,} x {op.dtype}, scale {plan.scale:g}) holds {_gib(worst.bytes)}"
    )
    if space == Space.HOST and total > worst.bytes:
        what += f"; the {len(mine)} ranks started here, {_gib(total)} at once"
    where = "this host's" if space == Space.HOST else "one GPU's"
    raise UsageError(
        f"{plan.source}: {what}: above the {_gib(max_bytes)} of tensors a replay may hold "
        f"in {where} memory (--max-bytes raises it; --scale shrinks the tensors)"
    )


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB // 10 else f"{n:,} bytes"
