"""`--just-print-entries`: every rank's entries side by side per process group, one column per
rank, one row per op, aligned by sequence ids."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
from tabulate import tabulate

from .arrays import distinct
from .dumps import EntryTable
from .findings import describe_group
from .groups import GroupTable
from .model import STATE_NAMES, State, UnitKind


def render_entries(
    table: EntryTable,
    groups: GroupTable,
    *,
    ranks: Sequence[int] | None = None,
    pg_filters: Sequence[str] = (),
    stack: bool = False,
) -> str:
    """Each group's entries, one column per rank, one row per op aligned by sequence ids."""
    out: list[str] = []
    if not table.n:
        return "no entries\n"
    wanted = set(ranks) if ranks is not None else None
    p2p_like = np.isin(table.unit, (UnitKind.P2P, UnitKind.BATCH_MEMBER, UnitKind.BATCH_MARKER))
    for group in groups.groups:
        if pg_filters and not any(p in (group.name, group.desc) for p in pg_filters):
            continue
        rows = np.flatnonzero(groups.entry_group == group.uid)
        if wanted is not None:
            rows = rows[np.isin(table.rank[rows], list(wanted))]
        if not len(rows):
            continue
        cells: dict[tuple[int, int, int, int], dict[int, str]] = defaultdict(dict)
        position: Counter[tuple[int, int, int, int]] = Counter()
        for r in rows.tolist():
            rank = int(table.rank[r])
            base = (int(table.coll_seq[r]), int(table.p2p_seq[r]), int(p2p_like[r]))
            pos = position[(rank, *base)]
            position[(rank, *base)] += 1
            cells[(*base, pos)][rank] = _cell(table, r, stack)
        shown = sorted({int(x) for x in distinct(table.rank[rows])})
        body = []
        for key in sorted(cells):
            coll, p2p, is_p2p, _ = key
            label = f"p{p2p}" if is_p2p else f"c{coll}"
            body.append([label] + [cells[key].get(rank, "") for rank in shown])
        out.append(f"== {describe_group(group)} (membership from {group.source.value})")
        out.append(
            tabulate(
                body,
                headers=["seq"] + [f"rank {r}" for r in shown],
                tablefmt="simple",
                disable_numparse=True,
            )
        )
        out.append("")
    if not out:
        return "no entries match the filters\n"
    return "\n".join(out)


SHOWN_FRAMES = 6
"""Frames of each entry's stack shown (innermost first)."""
SHOWN_FRAME_TEXT = 240
"""Characters of a frame's name or file name shown; longer ones are cut short. A stack is
counted once however many entries share it (`dumps.normalize.text_held`), but this view shows
it in every entry's cell."""


def _cut(text: str) -> str:
    if len(text) <= SHOWN_FRAME_TEXT:
        return text
    return f"{text[: SHOWN_FRAME_TEXT - 20]}... ({len(text):,} chars)"


def _cell(table: EntryTable, row: int, stack: bool) -> str:
    name = table.profiling_names[int(table.pname[row])]
    op = name.partition(":")[2] or name
    state = STATE_NAMES[State(int(table.state[row]))]
    if bool(table.retired[row]):
        state += ",retired"
    shapes = table.shapes[int(table.in_shape[row])]
    sizes = str([list(s) for s in shapes]).replace(" ", "") if shapes else ""
    text = f"{op} {sizes} {state}".replace("  ", " ")
    if stack:
        code = int(table.stack[row])
        if code >= 0:
            for frame in table.stacks[code][:SHOWN_FRAMES]:
                text += f"\n  {_cut(frame.name)} {_cut(frame.filename)}:{frame.line}"
        else:
            text += "\n  (no stack in dump)"
    return text
