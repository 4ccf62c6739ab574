"""The sentences of the collective matcher's findings: facts in (ranks, ops, shapes, sequence
ids), one `Finding.detail` out. No table, no numpy, no decision: the rules in `units`, `missing`
and `sizes` decide who deviates and how; this module only says it.

The words live here, not beside the diagnosis' sentences (`diagnosis.sentences`) or the
renderers': a finding's detail is made when the matcher finds it (`Finding` is frozen, detail
included, and every output renders that same text), and matching may not import the stages
after it. Kept together and free of the table, they can follow the diagnosis' sentences to a
later stage once a finding carries its facts instead of its text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..model.ranks import agree, counted, label
from ..model.records import STATE_NAMES, State, seq_id

Shape = tuple[tuple[int, ...], ...]
"""The shapes one op records for its input or output (the table's `shapes` entries)."""


# -- ops and shapes as a person reads them ----------------------------------------------------


def shape(shapes: Shape) -> str:
    """`[[4, 8]]`: every tensor's shape."""
    return str([list(s) for s in shapes])


def block_name(ops: tuple[str, ...]) -> str:
    """An op, or a coalesced block as its end marker with its members: `coalesced[all_reduce×2]`."""
    if len(ops) == 1:
        return ops[0]
    members = Counter(ops[:-1])
    inner = "+".join(f"{op}×{n}" if n > 1 else op for op, n in members.items())
    return f"{ops[-1]}[{inner}]"


def first_difference(
    ops_of: Mapping[int, tuple[str, ...]], culprits: set[int], reference: tuple[str, ...]
) -> tuple[str, str]:
    """Where the lowest culprit's ops first differ from `reference` (` (member 2 of the
    block)`, or nothing for single ops), and what it issued there."""
    culprit = min(culprits)
    theirs = ops_of[culprit]
    if len(theirs) == 1 and len(reference) == 1:
        return "", theirs[0]
    for pos, (a, b) in enumerate(zip(theirs, reference, strict=False)):
        if a != b:
            return f" (member {pos + 1} of the block)", a
    return " (block lengths differ)", block_name(theirs)


def state_name(state: State, retired: bool) -> str:
    """An op's recorded state, and whether it was retired without completing."""
    name = STATE_NAMES[state]
    if retired:
        return f"{name}, retired without completing (timed out or failed)"
    return name


def member(op: str, pos: int, block: str) -> str:
    """`all_reduce (member 2 of coalesced[all_reduce×2])`: one member of a block."""
    return f"{op} (member {pos + 1} of {block})"


# -- who never joined -------------------------------------------------------------------------


def unrecorded(width: int, barrier: bool) -> tuple[str, str]:
    """What a gap of `width` unrecorded sequence ids is (its name as the finding's op), and
    why it left no entry."""
    if barrier:
        why = "gloo records no monitored_barrier, which takes two sequence ids"
        return "monitored_barrier", why
    return f"unrecorded collective ({width} ids)", "it leaves no entry but takes sequence ids"


def skipped_unrecorded(
    not_joined: Iterable[int],
    present: Iterable[int],
    op: str,
    seq: int,
    gap: tuple[int, int],
    what: tuple[str, str],
) -> str:
    """The ranks in an unrecorded collective, and the fewer that issued the next op instead."""
    (first, after), (name, why) = gap, what
    return (
        f"{label(not_joined)} stopped after #{seq - 1}, where every member went from "
        f"#{first} to #{after} before, after the same op: an unrecorded collective ({why}) "
        f"they are in now; {label(present)} issued {op} #{seq} instead, inside that gap: "
        f"{agree(present, 'it', 'they')} skipped the {name}"
    )


def never_joined(
    present: Iterable[int],
    not_joined: Iterable[int],
    op: str,
    seq: int,
    last: Mapping[int, int | None],
) -> str:
    """Who issued the collective, who never did, and the last collective each of those (the
    first eight) recorded on the group."""
    lasts = ", ".join(
        f"rank {m}: {'none' if s is None else seq_id(s)}" for m, s in sorted(last.items())[:8]
    )
    return (
        f"{label(present)} issued {op} #{seq}; {label(not_joined)} never "
        f"did (last collective on this group: {lasts})"
    )


# -- ops and completion -----------------------------------------------------------------------


def other_op(
    culprits: set[int], theirs: str, where: str, agreed: tuple[str, ...] | None, note: str
) -> str:
    """What the culprits issued where the others (`agreed`, None: no two agree) issued
    another op."""
    others = f"the others issued {block_name(agreed)}" if agreed is not None else "they disagree"
    return f"{label(culprits)} issued {theirs} where {others}{where}{note}"


def not_completed(
    completed: Iterable[int],
    lagging: Iterable[int],
    op: str,
    seq: int,
    states: Mapping[str, list[int]],
) -> str:
    """Who completed the collective, who did not, and in which state each of those is."""
    return (
        f"{label(completed)} completed {op} #{seq}; {label(lagging)} did not ("
        + "; ".join(f"{label(rs)}: {state}" for state, rs in states.items())
        + ")"
    )


def skipped_and_went_on(
    detail: str, culprits: set[int], op: str, seq: int, before: int, count: int
) -> str:
    """A disagreement told as a skip: the culprits' ops from `seq` on are the group's program
    one op ahead, as the `count` ops after the same op at `before` show."""
    return (
        f"{detail}; {label(culprits)} skipped {op} #{seq} and went on: "
        f"{agree(culprits, 'its', 'their')} ops from #{seq} on are the group's program "
        f"one op ahead ({count} match what every member issued after the same op at "
        f"#{before}, from #{before + 1})"
    )


def skipped_beside(
    detail: str, culprits: set[int], other: int, op: str, seq: int, count: int
) -> str:
    """A disagreement of two members told as a skip: the culprit's ops from `seq` on are
    the other member's from `seq + 1` on (`count` of them, by name)."""
    return (
        f"{detail}; {label(culprits)} skipped {op} #{seq} and went on: "
        f"{agree(culprits, 'its', 'their')} ops from #{seq} on are rank {other}'s from "
        f"#{seq + 1} on ({count} of them, by name)"
    )


# -- sizes and dtypes -------------------------------------------------------------------------


def inconsistent_sizes(
    what: str, ranks: Iterable[int], inputs: Shape, outputs: Shape, op: str, size: int
) -> str:
    """Ranks whose own input and output sizes contradict their op on a group of `size`."""
    return (
        f"{what} on {label(ranks)}: input {shape(inputs)} and "
        f"output {shape(outputs)}, inconsistent for {op} on {size} ranks"
    )


def totals_differ(what: str, total_in: int, total_out: int, odd: set[int], which: str) -> str:
    """An all_to_all whose members send more or fewer elements in all than they receive, and
    the minority whose `which` (input or output) is unlike the others', if one."""
    return f"{what}: the group sends {total_in} elements in all but receives {total_out}" + (
        f" ({label(odd)}: the only {which} unlike the others')" if odd else ""
    )


def contrast(values: Mapping[int, Any], culprits: set[int], text: Callable[[Any], str]) -> str:
    """`ranks 1,5: <theirs>; rank 0: <reference>`, both sides named; values are (op, value)."""
    by_value: dict[Any, list[int]] = {}
    for rank, value in sorted(values.items()):
        by_value.setdefault(value, []).append(rank)
    deviating = [v for v, rs in by_value.items() if set(rs) <= culprits]
    reference = [v for v, rs in by_value.items() if not set(rs) & culprits]
    parts = [f"{label(by_value[v])}: {text(v[1])}" for v in deviating + reference]
    return "; ".join(parts)


def sizes(inputs: Shape | None, outputs: Shape | None) -> str:
    """`in [[4]] out [[4]]`; a side not compared is `-`."""
    return (
        f"in {'-' if inputs is None else shape(inputs)} "
        f"out {'-' if outputs is None else shape(outputs)}"
    )


def dtypes(d: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """`dtypes in Float out Float`; a side not compared is `-`."""
    return f"dtypes in {','.join(d[0]) or '-'} out {','.join(d[1]) or '-'}"


def unlike_inputs(
    what: str, theirs: Iterable[tuple[list[int], Shape]], reference: Shape, basis: str
) -> str:
    """The all_to_all members that passed another input than the one the others hold, and
    what says the others' is right."""
    culprits = "; ".join(f"{label(ranks)}: input {shape(s)}" for ranks, s in theirs)
    return (
        f"{what}: {culprits}; the others: input {shape(reference)} ({basis}; output totals "
        "may differ, input totals may not)"
    )


def alike_hold_it(count: int, desc: str) -> str:
    """The basis of a judgement: the groups alike."""
    return f"every member of {counted(count, 'group')} {desc!r} alike holds it"


def passed_before(seq: int) -> str:
    """The basis of a judgement: the group's own last exchange of the same kind."""
    return f"every member passed it at #{seq}, the same exchange"


Signature = tuple[tuple[str, Shape, Shape | None, tuple[str, ...]], ...]
"""A rank's ops at one unit, as words need them: (op, input shapes, output shapes or None
where they are left out, input dtypes)."""


def signature(ops: Signature) -> str:
    """`all_reduce in [[4]] out [[4]] Float`, per op of a block."""
    return "; ".join(
        f"{op} in {shape(i)} out {shape(o) if o is not None else '-'} "
        f"{','.join(d for d in di if d) or '-'}"
        for op, i, o, di in ops
    )


def unlike_alike(
    present: tuple[int, ...],
    mine: Signature,
    theirs: Signature,
    alike: tuple[int, str, int],
    seq: int,
    lost: list[int],
    what: str,
    aborts: bool,
) -> str:
    """Members left that agree, against what `alike` = (how many, description, size) groups
    alike issued at the same seq id, while `lost` members left no dump."""
    count, desc, size = alike
    why = (
        " (gloo aborts, with no dump, a rank that receives more bytes than it posted)"
        if aborts
        else ""
    )
    return (
        f"{label(present)} issued {signature(mine)} where {counted(count, 'group')} "
        f"{desc!r} of {size} alike issued {signature(theirs)} at #{seq}; "
        f"{label(lost)} left no dump{why}: the {what} differ"
    )
