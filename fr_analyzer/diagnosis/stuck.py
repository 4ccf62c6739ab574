"""Rule 4's roots, once the hang rules picked the ranks most others wait for: a rank with no
usable dump or that stopped recording long ago (dead), a rank that never issued the op it is
waited for in (not joined: it stopped, or it skipped the op and went on, which the others'
order tells), and ranks stuck on their own in an op their peers completed or started, or that
every member issued and none completed (a stuck collective).
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from ..model.ranks import agree, by_count, counted, label
from ..model.records import STATE_NAMES, State
from . import sentences
from .context import Context, Resolved, chain, code
from .idle import (
    first_missing,
    first_waited,
    in_unrecorded_p2p,
    stopped_with_group,
    went_past,
)
from .mismatch import extra_op
from .positions import OpRef
from .records import RootCause, RootKind
from .sentences import StuckHow, where
from .timing import timing_on


def not_joined_root(ctx: Context, roots: tuple[int, ...], view: Resolved) -> RootCause:
    """Ranks waited for in an op they never issued: dead (no usable dump, or their buffer
    ends long before their peers started waiting), gone past it (skipped), or elsewhere; or
    the op is an extra one only a minority of its group issued (`mismatch.extra_op`)."""
    t, g = ctx.table, view.graph
    root_set = set(roots)
    waited, direct = first_waited(ctx, root_set, g)
    ref = ctx.ref(waited.row) if waited is not None else None
    ahead = None  # the later op the peers wait in, when the root op is an earlier one
    if ref is not None and not root_set & g.unavailable:
        # The root op is the first op they never issued, not the later one the peers wait in.
        first = ctx.ref(first_missing(ctx, root_set, ref.row))
        if first.row != ref.row:
            ahead, ref = ref, first
    evidence = []
    for w in direct[:4]:
        wref = ctx.ref(w.row)
        evidence.append(
            f"{label(w.waiters)} {agree(w.waiters, 'waits', 'wait')} in {where(wref)} "
            f"for {label(root_set & set(w.waits_for))}"
        )
    if ahead is not None and ref is not None and ref.collective_seq_id is not None:
        seq = ref.collective_seq_id
        evidence.append(
            f"{label(roots)} recorded nothing of group {ref.group.name!r} after #{seq - 1}; "
            f"the others issued #{seq} to #{ahead.collective_seq_id} (gloo runs async ops "
            "ahead and retires a copy that timed out as one that completed): "
            f"#{seq} is the first op {agree(roots, 'it', 'they')} never issued"
        )
    if len(direct) > 4:
        evidence.append(
            f"... and {counted(len(direct) - 4, 'more op')} "
            f"{by_count(len(direct) - 4, 'waits', 'wait')} for them"
        )
    extra = extra_op(ctx, ref, root_set, g)
    if extra is not None:
        return extra
    dead = [r for r in roots if r in g.unavailable]
    dead_set = set(dead)  # a world of many ranks without a dump: asked once per root
    frozen = []
    if waited is not None:
        since = min(
            (int(t.t_created[g.frontier[w]]) for w in waited.waiters if w in g.frontier),
            default=-1,
        )
        for r in roots:
            newest = ctx.newest_ns.get(r, -1)
            if r not in dead_set and newest >= 0 and since >= 0:
                gap = (since - newest) / 1e9
                if gap > ctx.thresholds.dead_after_s:
                    frozen.append(r)
                    evidence.append(
                        f"rank {r}'s buffer ends {gap:.0f} s before its peers started "
                        "waiting for it"
                    )
    skipped: dict[int, OpRef] = {}
    for r in roots:
        if r in dead_set and r in ctx.last_row:  # read from a trace cut where it was killed
            evidence.append(
                f"rank {r} left no dump and its Execution Trace ends in the middle (it was "
                f"killed): its newest op is {where(ctx.ref(ctx.last_row[r]))}"
            )
            continue
        if r in dead_set:
            evidence.append(f"rank {r} has no usable dump")
            continue
        newest_ref = ctx.ref(ctx.last_row[r]) if r in ctx.last_row else None
        if newest_ref is None:
            continue
        if ref is not None and went_past(ctx, ref.row, newest_ref.row, root_set):
            skipped[r] = newest_ref
            evidence.append(
                f"rank {r} went on to {where(newest_ref)} ({newest_ref.state}), which "
                f"the other ranks issue after {where(ref)}: it skipped it"
            )
        else:
            hint = (
                "; most likely it is blocked in a send/recv with its pipeline peer (gloo "
                "does not record send/recv)"
                if in_unrecorded_p2p(ctx, r, view.implicit)
                else ""
            )
            evidence.append(
                f"rank {r} never issued it; its newest op is {where(newest_ref)} "
                f"({newest_ref.flags}): it is doing something else (compute, data loading, "
                f"another code path) or is hung outside any collective{hint}"
            )
    at = where(ref) if ref is not None else "the op its peers wait in"
    waiters = waited.waiters if waited is not None else ()
    # Ranks taken to wait for a dead root in a send/recv no dump records (not stages starved
    # with their whole group, which wait behind others): they wait for it directly.
    quiet = (
        sorted(
            r
            for r, to in view.implicit.items()
            if root_set & set(to) and r not in waiters and not stopped_with_group(ctx, r, ctx.graph)
        )
        if dead
        else []
    )
    more = sentences.more_behind(
        others=len(g.waiting_for(root_set)) - len(waiters) - len(quiet), waiters=waiters
    )
    for last, ranks in _last_ops(ctx, quiet).items():
        evidence.append(
            f"{label(ranks)} completed {where(ctx.ref(last))} and recorded nothing since: "
            f"{agree(ranks, 'it is', 'they are')} blocked where the recorder keeps nothing, "
            f"most likely a send/recv with {label(dead)} (gloo does not record send/recv)"
        )
    own = code(ctx, ctx.last_row.get(roots[0]), [g.frontier[w] for w in waiters if w in g.frontier])
    if dead or frozen:
        gone = sorted(set(dead) | set(frozen))
        sentence = sentences.dead(
            gone=gone,
            waiters=waiters,
            at=at,
            more=more,
            no_dump=bool(dead),
            quiet=quiet,
            killed=bool(dead) and all(r in ctx.last_row for r in dead),
        )
        kind = RootKind.DEAD_RANK
    elif skipped and len(skipped) == len(roots):
        sentence = sentences.skipped_op(roots=roots, waiters=waiters, at=at, more=more)
        kind = RootKind.NOT_JOINED
    else:
        p2p = ref is not None and ref.p2p_seq_id is not None
        sentence = sentences.never_joined(
            roots=roots,
            waiters=waiters,
            at=at,
            more=more,
            p2p=p2p,
            ahead=where(ahead) if ahead is not None else "",
        )
        kind = RootKind.NOT_JOINED
    return RootCause(
        kind=kind,
        ranks=roots,
        group=ref.group if ref else None,
        collective_seq_id=ref.collective_seq_id if ref else None,
        p2p_seq_id=ref.p2p_seq_id if ref else None,
        op=ref.op if ref else "",
        sentence=sentence,
        evidence=tuple(evidence),
        wait_chain=chain(ctx, root_set, g),
        deviates=bool(skipped) and len(skipped) == len(roots) and kind != RootKind.DEAD_RANK,
        code=own,
    )


def _last_ops(ctx: Context, ranks: Sequence[int]) -> dict[int, list[int]]:
    """Ranks grouped by their newest op (the row of the lowest rank's copy of it): the ranks
    at one collective unit share one row."""
    units = ctx.matches.collectives
    out: dict[int, list[int]] = {}
    first: dict[tuple[int, int], int] = {}
    for r in ranks:
        row = ctx.last_row.get(r)
        if row is None:
            continue
        unit = int(units.entry_unit[row])
        key = (0, unit) if unit >= 0 else (1, row)
        out.setdefault(first.setdefault(key, row), []).append(r)
    return out


def stuck_root(
    ctx: Context, *, ranks: tuple[int, ...], node: int, behind: Set[int], graph: Resolved
) -> RootCause:
    """Ranks blocked in wait node `node` that wait for nobody, with `behind` waiting for
    them: stuck there while peers completed or started it (their device), or with every
    member in it and none done (communication)."""
    g = graph.graph
    wait = g.waits[node]
    ref = ctx.ref(wait.row)
    t, m = ctx.table, ctx.matches
    unit = wait.unit
    completed: list[int] = []
    members: set[int] = set(ranks)
    states: dict[str, list[int]] = {}
    if unit >= 0:
        rows = m.collectives.unit_rows(unit)
        heads = {int(t.rank[r]): r for r in rows.tolist()}
        completed = sorted(r for r, row in heads.items() if bool(m.done[row]))
        members = set(ref.group.ranks)
        for r, row in sorted(heads.items()):
            if r in completed:
                continue
            head = int(t.marker[row]) if int(t.marker[row]) >= 0 else row
            states.setdefault(STATE_NAMES[State(int(t.state[head]))], []).append(r)
    stuck = list(ranks)
    evidence = []
    if unit >= 0:
        evidence.append(f"every member of group {ref.group.name!r} issued {where(ref)}")
    if completed:
        evidence.append(f"{label(completed)} completed it; {label(stuck)} did not")
    for state, rs in states.items():
        evidence.append(f"{label(rs)}: {state}")
    if completed or len(states) > 1:
        how = StuckHow.LAGGARDS
    elif states and set(states) == {"scheduled"} and timing_on(t, stuck):
        how = StuckHow.NEVER_STARTED
    else:
        how = StuckHow.COMMUNICATION
    sentence = sentences.stuck(
        how=how,
        stuck=stuck,
        ref=ref,
        completed=completed,
        started=members - set(stuck),
        behind=len(behind),
    )
    # in the set's own order, as the rules always took it (the code line is the most common)
    peers = [g.frontier[w] for w in behind if w in g.frontier]
    return RootCause(
        kind=RootKind.STUCK_COLLECTIVE,
        ranks=tuple(stuck),
        group=ref.group,
        collective_seq_id=ref.collective_seq_id,
        p2p_seq_id=ref.p2p_seq_id,
        op=ref.op,
        sentence=sentence,
        evidence=tuple(evidence),
        wait_chain=chain(ctx, set(stuck), g),
        code=code(ctx, wait.row, peers[:64]),
    )
