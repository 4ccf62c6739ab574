"""`--just-print-entries` (`-j`): ranks' entries side by side, one column per rank and one row
per op aligned by sequence ids, readable at any scale.

By default (when the analysis names a root cause) only the root's process group is shown, a
few sequence ids either side of the root's, and only the culprit and some of its peers (the
first and last few members, and any rank whose cell deviates). Every cell names ranks by their
global rank (`send ->r5`, `recv <-r2`), never by the group-local numbers the recorder writes.
A cell that deviates from the most common one at its sequence id (another op, other sizes,
another state) or an op a rank never issued is marked with `MARK` (and coloured on a
terminal); columns come in blocks that fit the width.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from rich.text import Text

from ..diagnosis import RootCause
from ..errors import UsageError
from ..match.findings import describe_group
from ..model.groups import GroupTable
from ..model.ranks import compact
from ..model.records import ANY_SOURCE, STATE_NAMES, Group, P2PKind, State, UnitKind, seq_id
from ..model.table import EntryTable
from .presentation import names_cut

MARK = "!"
"""Prefix of a cell that deviates at its sequence id, or of an op a rank never issued."""
NEVER = "(none)"
"""The cell of an op a rank did not issue although it issued ops of the group before it."""
LEGEND = (
    f"{MARK} marks a cell that differs from the most common one at its sequence id (op, sizes "
    f"or state); {MARK} {NEVER}: the rank issued earlier ops of the group but not this one."
)
CONTEXT = 3
"""Sequence ids shown either side of the root's, by default."""
PEERS = 3
"""Around the root: members shown from each end of the group besides the culprit."""
DEVIATING_SHOWN = 8
"""Around the root: most ranks shown because one of their cells deviates."""
GROUPS_NAMED = 12
"""Groups listed by name when `--pg-filters` matches none."""
SHOWN_FRAMES = 6
"""Frames of each entry's stack shown (innermost first)."""
SHOWN_FRAME_TEXT = 240
"""Characters of a frame's name or file name shown; longer ones are cut short. A stack is
counted once however many entries share it (`load.formats.normalize.text_held`), but this view shows
it in every entry's cell."""
GAP = "  "

_P2P_UNITS = (UnitKind.P2P, UnitKind.BATCH_MEMBER, UnitKind.BATCH_MARKER)


@dataclass(frozen=True)
class EntriesView:
    """What `-j` shows."""

    # the root's group and seq ids, its culprit and peers: None when there is a root (else
    # every entry), True when asked for (a note says so when there is no root), False never
    around_root: bool | None = None
    context: int = CONTEXT  # seq ids either side of the root's
    last: int | None = None  # each group's newest N sequence ids only
    ranks: tuple[int, ...] | None = None  # only these ranks' columns
    pg_filters: tuple[str, ...] = ()  # only groups with one of these names or descriptions
    stack: bool = False  # each entry's innermost frames in its cell
    width: int = 80  # columns come in blocks at most this wide


@dataclass(frozen=True)
class _Cell:
    text: str
    deviates: bool


Key = tuple[int, int, int, int]
"""A row of the view: (collective seq id, p2p seq id, is p2p, position among equal keys)."""


def render_entries(
    table: EntryTable, groups: GroupTable, view: EntriesView, root: RootCause | None = None
) -> str:
    """The view as plain text (deviating cells marked with `MARK`)."""
    return render_styled(table, groups, view, root).plain


def render_styled(
    table: EntryTable, groups: GroupTable, view: EntriesView, root: RootCause | None = None
) -> Text:
    """The view as `rich` text: deviating cells and the culprit's column header coloured."""
    if not table.n:
        return Text("no entries\n")
    culprits = set(root.ranks) if root is not None else set()
    out = Text()
    around = view.around_root is not False and root is not None and root.group is not None
    if view.around_root and not around:
        out.append("no root cause found: every entry is shown\n\n")
    chosen = [root.group] if around and root is not None and root.group is not None else None
    if chosen is None:
        chosen = list(_filtered(groups, view.pg_filters))
    p2p_like = np.isin(table.unit, _P2P_UNITS)
    marked = False
    for group in chosen:
        rows = np.flatnonzero(groups.entry_group == group.uid)
        firsts = _firsts(table, rows, p2p_like)
        if around and root is not None:
            rows = _window(table, rows, root, view.context)
        cells = _cells(table, rows, group, p2p_like, view.stack, culprits)
        if view.last is not None:
            cells = _newest(cells, view.last)
        columns = _columns(group, cells, firsts, view, culprits if around else None)
        if not columns or not cells:
            continue
        grid = _grid(cells, columns, firsts)
        marked |= any(c.deviates for row in grid.values() for c in row)
        out.append(f"== {describe_group(group)} (membership from {group.source.value})", "bold")
        out.append("\n")
        if around and root is not None:
            out.append(_wrapped(_around_line(group, root, columns, view.context), view.width))
        out.append_text(_blocks(grid, columns, culprits, view.width))
        out.append("\n")
    if not out.plain.strip():
        return Text("no entries match the filters\n")
    if marked:
        out.append(_wrapped(LEGEND, view.width), "dim")
    return out


def _filtered(groups: GroupTable, filters: Sequence[str]) -> list[Group]:
    """The groups named by `--pg-filters` (all without filters); none is a usage error that
    lists the groups there are."""
    if not filters:
        return list(groups.groups)
    found = [g for g in groups.groups if any(p in (g.name, g.desc) for p in filters)]
    if found:
        return found
    named = ", ".join(
        f"{g.name} ({g.desc})" if g.desc else g.name for g in groups.groups[:GROUPS_NAMED]
    )
    more = len(groups.groups) - GROUPS_NAMED
    if more > 0:
        named += f", ... ({more} more)"
    descs = sorted({g.desc for g in groups.groups if g.desc})
    by_desc = f"; descriptions: {', '.join(descs[:GROUPS_NAMED])}" if len(descs) > 1 else ""
    wanted = " ".join(filters)
    raise UsageError(
        f"--pg-filters {wanted}: no process group has that name or description; the job's "
        f"groups are {named}{by_desc}"
    )


def _firsts(
    table: EntryTable, rows: npt.NDArray[np.intp], p2p_like: npt.NDArray[np.bool_]
) -> dict[int, Key]:
    """Each rank's first row of the group: a rank with no cell at a later row never issued
    that op, while one with no cell at an earlier row had it pushed out of its ring buffer."""
    if not len(rows):
        return {}
    rank, coll, p2p = table.rank[rows], table.coll_seq[rows], table.p2p_seq[rows]
    is_p2p = p2p_like[rows].astype(np.int64)
    order = np.lexsort((is_p2p, p2p, coll, rank))
    ranks = rank[order]
    starts = np.flatnonzero(np.r_[True, ranks[1:] != ranks[:-1]])
    at = order[starts]
    return {
        int(r): (int(c), int(p), int(i), 0)
        for r, c, p, i in zip(
            rank[at].tolist(), coll[at].tolist(), p2p[at].tolist(), is_p2p[at].tolist(), strict=True
        )
    }


def _window(
    table: EntryTable, rows: npt.NDArray[np.intp], root: RootCause, context: int
) -> npt.NDArray[np.intp]:
    """The rows within `context` sequence ids of the root's (p2p ids for a p2p root)."""
    if root.collective_seq_id is None and root.p2p_seq_id is not None:
        seq, at = table.p2p_seq[rows], root.p2p_seq_id
    elif root.collective_seq_id is not None:
        seq, at = table.coll_seq[rows], root.collective_seq_id
    else:
        return rows
    return rows[(seq >= at - context) & (seq <= at + context)]


def _cells(
    table: EntryTable,
    rows: npt.NDArray[np.intp],
    group: Group,
    p2p_like: npt.NDArray[np.bool_],
    stack: bool,
    culprits: set[int],
) -> dict[Key, dict[int, _Cell]]:
    """Every row's cells by rank, marked where they deviate from the row's most common cell."""
    texts: dict[Key, dict[int, tuple[str, tuple[int, ...]]]] = {}
    position: Counter[tuple[int, int, int, int]] = Counter()
    for r in rows.tolist():
        rank = int(table.rank[r])
        is_p2p = int(p2p_like[r])
        base = (int(table.coll_seq[r]), int(table.p2p_seq[r]), is_p2p)
        pos = position[(rank, *base)]
        position[(rank, *base)] += 1
        key = (*base, pos)
        # p2p: the two ends of a transfer are a send and a recv; they agree on sizes and state
        what = -1 if is_p2p else int(table.op[r])
        signature = (what, int(table.in_shape[r]), int(table.state[r]), int(table.retired[r]))
        texts.setdefault(key, {})[rank] = (_cell(table, r, group, stack), signature)
    cells: dict[Key, dict[int, _Cell]] = {}
    for key in sorted(texts):
        row = texts[key]
        common = _most_common([sig for _, sig in row.values()], row, culprits)
        cells[key] = {rank: _Cell(text, sig != common) for rank, (text, sig) in row.items()}
    return cells


def _most_common(
    signatures: list[tuple[int, ...]],
    row: dict[int, tuple[str, tuple[int, ...]]],
    culprits: set[int],
) -> tuple[int, ...]:
    """The row's most common cell; on a tie, one no culprit holds (the culprit deviates)."""
    counts = Counter(signatures)
    held = {sig for rank, (_, sig) in row.items() if rank in culprits}
    return max(counts, key=lambda sig: (counts[sig], sig not in held))


def _newest(cells: dict[Key, dict[int, _Cell]], last: int) -> dict[Key, dict[int, _Cell]]:
    """The rows of the newest `last` sequence ids (collective and p2p ids counted apart)."""
    labels = list(dict.fromkeys(_label(k) for k in cells))
    kept = set(labels[-last:]) if last > 0 else set()
    return {k: v for k, v in cells.items() if _label(k) in kept}


def _label(key: Key) -> str:
    coll, p2p, is_p2p, _ = key
    return seq_id(p2p, p2p=True) if is_p2p else seq_id(coll)


def _columns(
    group: Group,
    cells: dict[Key, dict[int, _Cell]],
    firsts: dict[int, Key],
    view: EntriesView,
    culprits: set[int] | None,
) -> list[int]:
    """The ranks shown, in order. Around the root (`culprits` given): the culprits, the first
    and last few other members and up to `DEVIATING_SHOWN` ranks with a deviating cell; else
    every rank with entries. `--selected-ranks` overrides both."""
    present = {rank for row in cells.values() for rank in row} | set(firsts)
    if view.ranks is not None:
        wanted = set(view.ranks)
        return sorted(r for r in present | (set(group.ranks) & (culprits or set())) if r in wanted)
    if culprits is None:
        return sorted(present)
    members = [r for r in group.ranks if r not in culprits]
    shown = set(group.ranks) & culprits
    shown |= set(members[:PEERS]) | set(members[-PEERS:])
    odd = {r for row in cells.values() for r, c in row.items() if c.deviates}
    odd |= {r for r in group.ranks if any(_never(k, r, cells, firsts) for k in cells)}
    deviating = sorted(odd)
    shown |= set([r for r in deviating if r not in shown][:DEVIATING_SHOWN])
    return sorted(shown)


def _never(key: Key, rank: int, cells: dict[Key, dict[int, _Cell]], firsts: dict[int, Key]) -> bool:
    """Whether `rank` never issued the op at `key` although it issued earlier ones of the
    group (an earlier row missing is only the ring buffer's start)."""
    first = firsts.get(rank)
    return first is not None and first < key and rank not in cells[key]


def _grid(
    cells: dict[Key, dict[int, _Cell]], columns: list[int], firsts: dict[int, Key]
) -> dict[Key, list[_Cell]]:
    """Each row's cell in each shown column (`NEVER`, marked, where the rank skipped it)."""
    blank = _Cell("", False)
    never = _Cell(NEVER, True)
    return {
        key: [
            row.get(rank) or (never if _never(key, rank, cells, firsts) else blank)
            for rank in columns
        ]
        for key, row in cells.items()
    }


def _around_line(group: Group, root: RootCause, columns: list[int], context: int) -> str:
    """What part of the group is shown around the root."""
    if root.collective_seq_id is None and root.p2p_seq_id is not None:
        seq = f"p2p #{root.p2p_seq_id}"
    else:
        seq = f"collective #{root.collective_seq_id}"
    hidden = group.size - len(columns)
    others = (
        f"; {hidden} other {'rank' if hidden == 1 else 'ranks'} of the group not shown "
        "(--selected-ranks, or --all-entries for everything)"
        if hidden > 0
        else ""
    )
    return (
        f"around the root cause: {seq} and {context} sequence ids either side; "
        f"ranks {compact(columns)}{others}"
    )


def _blocks(
    grid: dict[Key, list[_Cell]], columns: list[int], culprits: set[int], width: int
) -> Text:
    """The table in blocks of columns, each at most `width` wide where a column fits."""
    headers = [f"rank {r} (culprit)" if r in culprits else f"rank {r}" for r in columns]
    shown = {key: [_shown(c) for c in row] for key, row in grid.items()}
    labels = {key: _label(key) for key in grid}
    seq_w = max([3, *(len(s) for s in labels.values())])
    widths = [
        max([len(h), *(len(line) for row in shown.values() for line in row[i].splitlines())])
        for i, h in enumerate(headers)
    ]
    blocks: list[list[int]] = [[]]
    used = seq_w
    for i, w in enumerate(widths):
        if blocks[-1] and used + len(GAP) + w > width:
            blocks.append([])
            used = seq_w
        blocks[-1].append(i)
        used += len(GAP) + w
    out = Text()
    for n, block in enumerate(blocks):
        if len(blocks) > 1:
            out.append(f"-- ranks {compact([columns[i] for i in block])}", "dim")
            out.append(f" ({n + 1} of {len(blocks)})\n", "dim")
        line = Text("seq".ljust(seq_w))
        for i in block:
            style = "bold yellow" if columns[i] in culprits else ""
            line.append(GAP + headers[i].ljust(widths[i]), style)
        out.append_text(_ended(line))
        dashes = "-" * seq_w + "".join(GAP + "-" * widths[i] for i in block)
        out.append(dashes + "\n")
        for key, row in grid.items():
            parts = [shown[key][i].splitlines() or [""] for i in block]
            for k in range(max(len(p) for p in parts)):
                line = Text((labels[key] if k == 0 else "").ljust(seq_w))
                for i, lines in zip(block, parts, strict=True):
                    text = lines[k] if k < len(lines) else ""
                    line.append(GAP + text.ljust(widths[i]), "bold red" if row[i].deviates else "")
                out.append_text(_ended(line))
        if n + 1 < len(blocks):
            out.append("\n")
    return out


def _wrapped(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(names_cut(text), max(width, 20), break_on_hyphens=False)) + "\n"


def _ended(line: Text) -> Text:
    line.rstrip()
    line.append("\n")
    return line


def _shown(cell: _Cell) -> str:
    return f"{MARK} {cell.text}" if cell.deviates else cell.text


def _cut(text: str) -> str:
    if len(text) <= SHOWN_FRAME_TEXT:
        return text
    return f"{text[: SHOWN_FRAME_TEXT - 20]}... ({len(text):,} chars)"


def _cell(table: EntryTable, row: int, group: Group, stack: bool) -> str:
    name = table.profiling_names[int(table.pname[row])]
    op = names_cut(_op_text(table, row, group, name.partition(":")[2] or name))
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


def _op_text(table: EntryTable, row: int, group: Group, op: str) -> str:
    """The op's name, with a send's or recv's peer as a global rank (`send ->r5`): the
    recorder writes group-local numbers (`send 0->1`)."""
    kind = int(table.p2p_kind[row])
    if kind == P2PKind.SEND:
        return f"send ->{_peer(int(table.peer_dst[row]), group)}"
    if kind == P2PKind.RECV:
        return f"recv <-{_peer(int(table.peer_src[row]), group)}"
    return op


def _peer(local: int, group: Group) -> str:
    if local == ANY_SOURCE:
        return "?"
    if 0 <= local < group.size:
        return f"r{group.ranks[local]}"
    return f"(group rank {local})"
