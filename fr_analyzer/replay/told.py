"""What the answer on a stopped replay is told, and which analysis gives it: a replay of records
that are cut (a rank's Execution Trace ends where it was killed) stops where they were cut, and
a gloo abort after a disagreement the records hold is that disagreement. In both, the records'
own analysis answers, after a line that says why; else the analysis of the replay's dumps."""

from __future__ import annotations

from collections.abc import Sequence

from ..load import TRACE_CUT_NOTE
from ..model.dump import RankDump
from ..model.ranks import agree, compact
from ..model.records import FindingKind
from ..pipeline import Analysis
from .plan import ReplayPlan
from .runner import RunOutcome


def cut_ranks(dumps: Sequence[RankDump]) -> tuple[int, ...]:
    """The ranks whose record is cut: an Execution Trace that ends in the middle."""
    return tuple(sorted(d.rank for d in dumps if any(TRACE_CUT_NOTE in w for w in d.warnings)))


_DISAGREEMENTS = frozenset(
    {
        FindingKind.SIZE_MISMATCH,
        FindingKind.DTYPE_MISMATCH,
        FindingKind.P2P_SIZE_MISMATCH,
        FindingKind.P2P_DTYPE_MISMATCH,
    }
)
"""What makes gloo abort a rank: bytes that differ from what it posted (a size or a count)."""


def tell(
    plan: ReplayPlan, outcome: RunOutcome, recorded: Analysis, replayed: Analysis | None
) -> tuple[list[str], Analysis | None]:
    """What the answer on a stopped replay is told, and which analysis answers: where the
    records are cut, or gloo aborted ranks and the records hold a disagreement (a size or count
    that differs across ranks), the records' own analysis, which the replay reproduced; else
    the analysis of the replay's dumps."""
    lines: list[str] = []
    root = recorded.conclusion.root
    finding = root.finding if root is not None else None
    aborted = outcome.aborted()
    if aborted and finding is not None and finding.kind in _DISAGREEMENTS:
        what = finding.kind.value.replace("p2p_", "").replace("_", " ")
        group = f" of group '{finding.group.name}'" if finding.group is not None else ""
        seq = finding.collective_seq_id if finding.p2p_seq_id is None else finding.p2p_seq_id
        odd = finding.culprit_ranks
        deviate = (
            f"{agree(odd, 'rank', 'ranks')} {compact(odd)} {agree(odd, 'deviates', 'deviate')}"
        )
        lines.append(
            f"gloo aborted {agree(aborted, 'rank', 'ranks')} {compact(aborted)} on the {what} "
            f"the records hold at {finding.op} #{seq}{group} ({deviate}): a program bug, not "
            "the host. "
            "The records' answer:"
        )
        return lines, recorded
    if plan.cut:
        cut = list(plan.cut)
        lines.append(
            f"the record of {agree(cut, 'rank', 'ranks')} {compact(cut)} is cut ("
            + agree(cut, "its Execution Trace ends", "their Execution Traces end")
            + " where the rank was killed): the replay ran "
            + agree(cut, "it", "them")
            + " to where the record ends and stopped there, as the job did; the answer is "
            "where the record was cut, not a shorter program. The records' answer:"
        )
        return lines, recorded
    return lines, replayed
