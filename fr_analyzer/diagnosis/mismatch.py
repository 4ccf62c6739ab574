"""Rule 1, the first disagreement: a matcher's finding of ranks that disagree (op type, size,
dtype, a send/recv pair), or that skipped a collective and went on, is a program bug and the
root; the causally first one wins. Also the extra collective only a minority of a group
issued, which the idle-rank rule comes upon.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..model.ranks import label
from ..model.records import MISMATCH_KINDS, Finding, Stack
from . import sentences
from .context import Context, chain, code, finding_rows
from .positions import OpRef
from .records import RootCause, RootKind
from .waits import WaitGraph


def first_mismatch(ctx: Context, findings: Sequence[Finding]) -> Finding | None:
    """The causally first disagreement: the one whose op was enqueued first."""
    found = [f for f in findings if f.kind in MISMATCH_KINDS]
    if not found:
        return None

    def first_enqueued(f: Finding) -> int:
        rows = finding_rows(ctx, f)
        created = [int(ctx.table.t_created[r]) for r in rows if int(ctx.table.t_created[r]) >= 0]
        return min(created) if created else 1 << 62

    return min(found, key=first_enqueued)


def mismatch_root(ctx: Context, f: Finding) -> RootCause:
    """The root cause a disagreement states: its culprits, its op, their own code line."""
    roots = set(f.culprit_ranks)
    # matching's own finding, or the same one folded with its later repeats (`findings`)
    went_on = any(f is s or _place(f) == _place(s) for s in ctx.matches.skipped)
    sentence = sentences.mismatch(roots=roots, f=f, went_on=went_on)
    rows = finding_rows(ctx, f)
    mine = [r for r in rows if int(ctx.table.rank[r]) in roots]
    peers = [r for r in rows if int(ctx.table.rank[r]) not in roots]
    return finding_root(
        ctx,
        kind=RootKind.MISMATCH,
        f=f,
        roots=roots,
        sentence=sentence,
        own=code(ctx, mine[0] if mine else None, peers),
    )


def _place(f: Finding) -> tuple[object, ...]:
    """What a finding says of where and of whom: kept when its detail is lengthened."""
    uid = f.group.uid if f.group is not None else None
    return (f.kind, uid, f.collective_seq_id, f.p2p_seq_id, f.culprit_ranks)


def skipped_root(ctx: Context, f: Finding) -> RootCause:
    """Ranks that issued an op inside sequence ids every other member leaves unrecorded
    (a gloo monitored_barrier): they skipped that collective, and the others wait in it.
    (A skip whose next op lands on the skipped seq id is a mismatch: `mismatch_root`.)"""
    roots = set(f.culprit_ranks)
    others = sorted(set(f.ranks) - roots)
    sentence = sentences.skipped_collective(roots=roots, others=others, f=f)
    rows = finding_rows(ctx, f)
    root = finding_root(
        ctx,
        kind=RootKind.NOT_JOINED,
        f=f,
        roots=roots,
        sentence=sentence,
        own=code(ctx, rows[0] if rows else None, []),
    )
    return replace(root, p2p_seq_id=None)


def finding_root(
    ctx: Context, *, kind: RootKind, f: Finding, roots: set[int], sentence: str, own: Stack
) -> RootCause:
    """A program bug stated by one of the matcher's findings: its place, its detail as the
    evidence, the culprits deviating from the others."""
    return RootCause(
        kind=kind,
        ranks=tuple(sorted(roots)),
        group=f.group,
        collective_seq_id=f.collective_seq_id,
        p2p_seq_id=f.p2p_seq_id,
        op=f.op,
        sentence=sentence,
        evidence=(f.detail,),
        wait_chain=chain(ctx, roots, ctx.graph),
        deviates=True,
        finding=f,
        code=own,
    )


def extra_op(ctx: Context, ref: OpRef | None, idle: set[int], graph: WaitGraph) -> RootCause | None:
    """A collective only a minority issued, the rest of its group idle past it and no group
    alike at that seq id: the minority issued an extra op."""
    if ref is None or ref.collective_seq_id is None:
        return None
    units = ctx.matches.collectives
    unit = int(units.entry_unit[ref.row])
    if unit < 0:
        return None
    rows = units.unit_rows(unit)
    issuers = sorted(set(ctx.table.rank[rows].tolist()))
    group = ref.group
    others = set(group.ranks) - set(issuers)
    # Only members with a dump show that they went past: a member with none is no
    # evidence (half a job's dumps lost is not half a job that skipped the op).
    seen = others - graph.unavailable
    if not seen or len(issuers) >= len(seen) or not others <= idle:
        return None
    key = (group.uid, ref.collective_seq_id)
    if len(ctx.peers.first_rows(key)) > len(issuers):
        return None  # groups alike issue an op there: it is not extra
    return RootCause(
        kind=RootKind.MISMATCH,
        ranks=tuple(issuers),
        group=group,
        collective_seq_id=ref.collective_seq_id,
        p2p_seq_id=None,
        op=ref.op,
        sentence=sentences.extra_op(issuers=issuers, ref=ref, group=group),
        evidence=(
            f"{label(issuers)} of {group.size} members issued it; the other "
            f"{len(seen)}{' with a dump' if seen != others else ''} went past that point",
        ),
        wait_chain=chain(ctx, set(issuers), graph),
        deviates=True,
        code=code(ctx, ref.row, []),
    )
