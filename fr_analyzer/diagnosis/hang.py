"""Rules 3 to 5 together: a hang's root among the candidates. Cycles are resolved first
(`cycles`: a deviant, else a deadlock); with none, a rank waiting alone past a gloo
monitored_barrier that the ranks it waits for are in skipped it (`barriers`); else dead, idle
and stuck ranks and the deviants are weighed by how many ranks (transitively) wait for them,
ties broken by the kind's preference (`Candidate`), by who stopped first and by rank. An idle
or stuck winner whose send/recv left the schedule is that instead (`p2p`).
"""

from __future__ import annotations

import enum
from collections.abc import Set
from dataclasses import dataclass, replace

from . import barriers, cycles, p2p
from .context import Context, Resolved
from .idle import implicit_edges
from .records import RootCause
from .stuck import not_joined_root, stuck_root


class Candidate(enum.Enum):
    """What kind of rank a hang's root may be; their order breaks ties between candidates
    that hold up as many ranks (the first is preferred)."""

    DEVIANT = "deviant"  # issued ops in another order than the others wait for
    DEAD = "dead"  # no usable dump, or stopped recording long ago
    STUCK = "stuck"  # blocked in an op nobody else holds up
    IDLE = "idle"  # waited for, but in no op at all
    DEADLOCK = "deadlock"  # ranks waiting for each other in a cycle

    @property
    def preference(self) -> int:
        """Its place in the order of preference: lower wins a tie."""
        return list(Candidate).index(self)


@dataclass(frozen=True)
class Suspect:
    """One candidate root: its kind, its ranks, and the ranks that wait for them."""

    kind: Candidate
    ranks: tuple[int, ...]
    behind: Set[int] = frozenset()
    node: int = -1  # stuck: the wait node they are blocked in
    waited_row: int = -1  # deviant: the row of the op the others wait for it in


@dataclass(frozen=True)
class Hang:
    """A hang's root (None when no rank is a candidate) and the wait graph it was read on."""

    root: RootCause | None
    view: Resolved


def hang_root(ctx: Context) -> Hang:
    """The root of a hang: what the most ranks (transitively) wait for."""
    graph = ctx.graph
    deviants: dict[int, int] = {}  # rank → row of the op the others wait for it in
    deadlocks: list[list[int]] = []
    for cycle in graph.cycles():
        found = cycles.culprit(ctx, cycle)
        if found is None:
            deadlocks.append(cycle)
        else:
            deviants[found.rank] = found.waited_row
    g = graph.without_edges_from(set(deviants))
    if not deviants:
        skip = barriers.skipped_barrier(ctx, g)
        if skip is not None:
            inside = barriers.edges(skip)
            g = g.without_edges_from({skip.rank}).with_edges(inside)
            view = Resolved(graph=g, implicit=inside)
            return Hang(root=barriers.barrier_root(ctx, skip, g), view=view)
    implicit = implicit_edges(ctx, g)
    g = g.with_edges(implicit)
    view = Resolved(graph=g, implicit=implicit)
    waited = g.waited_on()
    found_suspects: list[Suspect] = []
    for rank in sorted(waited):
        if rank in deviants:
            continue
        if rank in g.unavailable:
            found_suspects.append(Suspect(kind=Candidate.DEAD, ranks=(rank,)))
        elif rank not in g.node_of:
            found_suspects.append(Suspect(kind=Candidate.IDLE, ranks=(rank,)))
    stuck: dict[int, list[int]] = {}
    for rank, node in g.node_of.items():
        if rank in graph.frontier and not g.waits[node].waits_for and rank not in deviants:
            stuck.setdefault(node, []).append(rank)
    for node, ranks in sorted(stuck.items()):
        found_suspects.append(Suspect(kind=Candidate.STUCK, ranks=tuple(sorted(ranks)), node=node))
    for rank, row in sorted(deviants.items()):
        found_suspects.append(Suspect(kind=Candidate.DEVIANT, ranks=(rank,), waited_row=row))
    for cycle in deadlocks:
        found_suspects.append(Suspect(kind=Candidate.DEADLOCK, ranks=tuple(cycle)))
    if not found_suspects:
        return Hang(root=None, view=view)
    reach: dict[tuple[object, ...], set[int]] = {}
    suspects: list[Suspect] = []
    for c in found_suspects:
        if c.kind in (Candidate.IDLE, Candidate.DEAD):
            key: tuple[object, ...] = ("w", *sorted(g.nodes_waiting_for(c.ranks[0])))
        else:
            key = ("r", *c.ranks)
        if key not in reach:
            reach[key] = g.waiting_for(c.ranks)
        suspects.append(replace(c, behind=reach[key]))
    best = max(
        suspects,
        key=lambda c: (len(c.behind), -c.kind.preference, -ctx.stopped(c.ranks), -c.ranks[0]),
    )
    return Hang(root=_root_of(ctx, best, suspects, view), view=view)


def _root_of(ctx: Context, best: Suspect, suspects: list[Suspect], view: Resolved) -> RootCause:
    """The root cause the winning candidate tells."""
    if best.kind in (Candidate.IDLE, Candidate.STUCK):
        for rank in best.ranks:
            divergence = p2p.divergence_any(ctx, rank)
            if divergence is not None:
                return p2p.deviant_root(ctx, rank, divergence, view.graph)
    if best.kind in (Candidate.IDLE, Candidate.DEAD):
        # Ranks that never joined the same op are one root (two ranks that both stopped).
        same = [
            c
            for c in suspects
            if c.kind in (Candidate.IDLE, Candidate.DEAD)
            and c.behind == best.behind
            and c is not best
        ]
        merged = tuple(sorted({*best.ranks, *(r for c in same for r in c.ranks)}))
        return not_joined_root(ctx, merged, view)
    if best.kind is Candidate.STUCK:
        return stuck_root(ctx, ranks=best.ranks, node=best.node, behind=best.behind, graph=view)
    if best.kind is Candidate.DEVIANT:
        deviant = cycles.Deviant(rank=best.ranks[0], waited_row=best.waited_row)
        return cycles.deviant_root(ctx, deviant, view.graph)
    return cycles.deadlock_root(ctx, list(best.ranks), view.graph)
