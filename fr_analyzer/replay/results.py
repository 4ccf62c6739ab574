"""What a replay measured: per rank and op the wall times' min, median and max over the timed
iterations; per op (a group's sequence id) the same over every member; the latency table and
the JSON file (`fr-analyze.replay/1`) built from them. Returns text; never prints."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..model.ranks import agree, compact
from .plan import Kind, ReplayPlan
from .runner import RunOutcome
from .worker import RankResult

if TYPE_CHECKING:
    from .session import ReplayReport

SCHEMA = "fr-analyze.replay/1"
P2P_KINDS = frozenset({Kind.SEND, Kind.RECV, Kind.BATCH_P2P})


@dataclass(frozen=True)
class Stats:
    """Wall times of one op, in milliseconds."""

    min_ms: float
    median_ms: float
    max_ms: float
    samples: int


@dataclass(frozen=True)
class RankOpTime:
    """One op of one rank and its wall times over the iterations."""

    rank: int
    index: int  # in the rank's ops
    group: str
    desc: str
    seq: int
    p2p: bool  # seq is a p2p sequence id
    op: str
    kind: str
    numel: int
    dtype: str
    recorded: str
    stats: Stats


@dataclass(frozen=True)
class OpTime:
    """One op of a group (its sequence id), over every rank that replayed it."""

    group: str
    desc: str
    seq: int
    p2p: bool
    op: str
    replayed: str  # elements and dtype as replayed, e.g. "16 float32"
    ranks: tuple[int, ...]
    stats: Stats
    slowest_rank: int  # the rank of the largest median


def stats(seconds: Sequence[float]) -> Stats:
    """Min, median and max of `seconds`, in milliseconds (zeros when there is none)."""
    if not seconds:
        return Stats(0.0, 0.0, 0.0, 0)
    ms = [s * 1000 for s in seconds]
    return Stats(min(ms), statistics.median(ms), max(ms), len(ms))


def per_rank(plan: ReplayPlan, outcome: RunOutcome) -> list[RankOpTime]:
    """Every rank's ops with their times, rank by rank, in each rank's order."""
    rows = []
    for exit_ in outcome.exits:
        if exit_.result is None:
            continue
        ops = plan.ranks[exit_.rank].ops
        for index, (op, times) in enumerate(zip(ops, exit_.result.times, strict=False)):
            group = plan.group(op.group)
            rows.append(
                RankOpTime(
                    exit_.rank,
                    index,
                    group.name,
                    group.desc,
                    op.seq,
                    op.kind in P2P_KINDS,
                    op.op,
                    op.kind.value,
                    op.numel,
                    op.dtype,
                    op.recorded,
                    stats(times),
                )
            )
    return rows


def per_op(plan: ReplayPlan, outcome: RunOutcome) -> list[OpTime]:
    """Every op once (group, sequence id, op name), over the ranks that replayed it, in the
    order rank 0 (else the first rank) replayed them."""
    samples: dict[tuple[str, bool, int, str], dict[int, list[float]]] = {}
    meta: dict[tuple[str, bool, int, str], tuple[str, str]] = {}
    for exit_ in outcome.exits:
        if exit_.result is None:
            continue
        for op, times in zip(plan.ranks[exit_.rank].ops, exit_.result.times, strict=False):
            group = plan.group(op.group)
            key = (group.name, op.kind in P2P_KINDS, op.seq, op.op)
            samples.setdefault(key, {})[exit_.rank] = list(times)
            replayed = "-" if op.kind == Kind.BARRIER else f"{op.numel} {op.dtype}"
            meta.setdefault(key, (group.desc, replayed))
    found = []
    for key, by_rank in samples.items():
        everything = [t for times in by_rank.values() for t in times]
        slowest = max(by_rank, key=lambda r: statistics.median(by_rank[r] or [0.0]))
        desc, replayed = meta[key]
        found.append(
            OpTime(
                key[0],
                desc,
                key[2],
                key[1],
                key[3],
                replayed,
                tuple(sorted(by_rank)),
                stats(everything),
                slowest,
            )
        )
    return found


def table(ops: Sequence[OpTime]) -> str:
    """The latency table: one line per op, times in milliseconds over every rank and
    iteration."""
    from tabulate import tabulate

    rows = [
        [
            f"{o.group} ({o.desc})" if o.desc else o.group,
            f"{'p' if o.p2p else ''}{o.seq}",
            o.op,
            o.replayed,
            compact(list(o.ranks)),
            *_times(o.stats),
            o.slowest_rank if o.stats.samples else "-",
        ]
        for o in ops
    ]
    headers = [
        "group",
        "seq",
        "op",
        "replayed",
        "ranks",
        "min ms",
        "median ms",
        "max ms",
        "slowest",
    ]
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


def _times(s: Stats) -> list[str]:
    """The three times of a line; dashes for an op no rank timed (the replay stopped first)."""
    if not s.samples:
        return ["-", "-", "-"]
    return [f"{s.min_ms:.3f}", f"{s.median_ms:.3f}", f"{s.max_ms:.3f}"]


def header(plan: ReplayPlan, outcome: RunOutcome) -> list[str]:
    """The first lines: what was replayed, how, and what the replay changed (its notes)."""
    return [
        f"replay of {plan.source}: {plan.world_size} ranks, {plan.backend}, "
        f"{plan.op_count()} ops in all, scale {plan.scale:g}, {outcome.elapsed_s:.1f} s",
        *(f"note: {note}" for note in plan.notes),
    ]


def endings(plan: ReplayPlan, outcome: RunOutcome) -> list[str]:
    """How each rank of a replay that stopped ended: where (op, group, round) and why, and
    which ranks ran every op of the round while others stopped in one."""
    lines = ["", "REPLAY STOPPED. How each rank ended:"]
    for e in outcome.exits:
        lines.append(f"  rank {e.rank}: {e.how}{_where(plan, e.result)}")
        if e.result is None and e.log_tail:  # it wrote no result: its own last words
            lines.append(f"    {e.log_tail[-1]}")
    through = [
        e.rank
        for e in outcome.exits
        if e.result
        and e.result.failed_op is None
        and (e.result.ok or e.result.failed_iteration is not None)
    ]
    stuck = [e.rank for e in outcome.exits if e.result and e.result.failed_op is not None]
    if through and stuck:
        lines.append(
            f"  {agree(through, 'rank', 'ranks')} {compact(through)} ran every op of the round; "
            f"{agree(stuck, 'rank', 'ranks')} {compact(stuck)} stopped in one"
        )
    return lines


def own_line(outcome: RunOutcome) -> str:
    """One rank's own end in one line (a rank of torchrun or srun other than 0)."""
    mine = next((e for e in outcome.exits if e.returncode is not None), None)
    if mine is None:
        return "replay: this rank wrote no result"
    return f"replay: rank {mine.rank}: {mine.how}"


def opening(report: ReplayReport) -> str:
    """What a replay prints first: the header, its notes and the latency table (a rank of
    torchrun or srun other than 0: its own end, and nothing else)."""
    plan, outcome = report.plan, report.outcome
    if not report.reporter:
        return own_line(outcome)
    return "\n".join([*header(plan, outcome), table(per_op(plan, outcome))])


def closing(report: ReplayReport, kept: bool) -> str:
    """What it prints last: that every op completed, or how each rank ended and the line that
    introduces fr-analyze's answer on the replay's dumps (`kept`: they stay in --out)."""
    outcome = report.outcome
    if outcome.ok:
        return "replay: every op of every rank completed"
    lines = endings(report.plan, outcome)
    if report.told:
        lines += ["", *report.told]
    elif report.analysis is None:
        lines.append("no rank wrote a Flight Recorder dump")
    else:
        kept_note = "" if kept else ", removed at exit: --out keeps them"
        lines.append(
            f"\nfr-analyze on the replay's Flight Recorder dumps ({outcome.fr_dir}{kept_note}):\n"
        )
    return "\n".join(lines)


def _where(plan: ReplayPlan, result: RankResult | None) -> str:
    if result is None or not result.error or result.failed_iteration is None:
        return ""  # it ran, or it stopped before its first op
    round_ = (result.failed_iteration or 0) + 1
    if result.failed_op is None:
        return f" in the barrier after round {round_}: it had run every op it recorded"
    op = plan.ranks[result.rank].ops[result.failed_op]
    group = plan.group(op.group).name
    return f" in {op.op} #{op.seq} of group '{group}' (round {round_}, the warm-up counted)"


def to_json(plan: ReplayPlan, outcome: RunOutcome, verdict: Mapping[str, Any] | None = None) -> str:
    """The replay as JSON: the plan's facts, how every rank ended, per rank and op the wall
    times (min, median, max over the iterations, ms), and per op the same over the ranks;
    on a stop, `verdict`: the answer of the analysis the text prints (the JSON report's)."""
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "source": plan.source,
        "world_size": plan.world_size,
        "backend": plan.backend,
        "scale": plan.scale,
        "ok": outcome.ok,
        "elapsed_s": round(outcome.elapsed_s, 3),
        "notes": list(plan.notes),
        "ranks": [
            {
                "rank": e.rank,
                "ended": e.how,
                "returncode": e.returncode,
                "failed_op": None if e.result is None else e.result.failed_op,
            }
            for e in outcome.exits
        ],
        "rank_ops": [asdict(r) for r in per_rank(plan, outcome)],
        "ops": [asdict(o) for o in per_op(plan, outcome)],
        "cut_ranks": list(plan.cut),
    }
    if verdict is not None:
        data["verdict"] = dict(verdict)
    return json.dumps(data, indent=1)
