"""`--just-print-entries` (`-j`): ranks' entries side by side, one column per rank and one row
per op aligned by sequence ids, readable at any scale.

By default (when the analysis names a root cause) only the root's process group is shown, a
few sequence ids either side of the root's, and every member of that group; with no root
cause, each group's newest `NEWEST` sequence ids (a one-line note says how to see every entry).
Ranks whose cells are all identical share one column headed by their ranks (`ranks 0-516,
518-1023`), so that a job of any size fits the width when its ranks agree; a culprit keeps a
column of its own. Every cell names ranks by their global rank (`send ->r5`, `recv <-r2`), never
by the group-local numbers the recorder writes. A cell that deviates from the most common one at
its sequence id (another op, other sizes, another state) or an op a rank never issued is marked
with `MARK` (and coloured on a terminal); columns come in blocks that fit the width.

It is over 600 lines because choosing the rows (root, newest, filters), making and marking the
cells, folding identical ranks and laying out the blocks are one view, each step reading the
one before's types; none of them is used elsewhere.
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
from ..model.records import ANY_SOURCE, STATE_NAMES, Group, P2PKind, State, seq_id
from ..model.shown import P2P_LIKE, Around, Key, Showing, Shown, rows_by_group, shown_rows
from ..model.table import EntryTable
from ..pipeline import Analysis
from .presentation import names_cut
from .rows import shown_of

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
NEWEST = 5
"""With no root cause and no `--all-entries` or `--last`: each group's newest sequence ids shown."""
FOLDED_SHOWN = 12
"""Most columns (after folding identical ranks) shown of a group: past it, the culprits' columns,
the columns of the most ranks and those with a deviating cell come first, and a line says how
many ranks are left out."""
HEADER_CHARS = 32
"""A folded column's header lists its ranks up to this length; a longer list is a footnote."""
WRAPPED_CHARS = 20
"""Narrowest a column's cells are wrapped to so that every column fits the width side by side."""
GROUPS_NAMED = 12
"""Groups listed by name when `--pg-filters` matches none."""
SHOWN_FRAMES = 6
"""Frames of each entry's stack shown (innermost first)."""
SHOWN_FRAME_TEXT = 240
"""Characters of a frame's name or file name shown; longer ones are cut short. A stack is
counted once however many entries share it (`load.formats.normalize.text_held`), but this view shows
it in every entry's cell."""
GAP = "  "


@dataclass(frozen=True)
class EntriesView:
    """What `-j` shows."""

    # the root's group and seq ids, every member: None or True when there is a root; with none
    # (and no `last`), each group's newest `NEWEST` seq ids under a note; False: never (every
    # entry, or `last`)
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


@dataclass(frozen=True)
class _Column:
    """Ranks whose cells are identical in every row shown, as one column."""

    ranks: tuple[int, ...]  # sorted
    cells: tuple[_Cell, ...]  # one per row, in the rows' order
    culprit: bool  # the culprit's column (culprits never fold with their peers)


def render_entries(
    table: EntryTable, groups: GroupTable, view: EntriesView, root: RootCause | None = None
) -> str:
    """The view as plain text (deviating cells marked with `MARK`)."""
    return render_styled(table, groups, view, root).plain


def render_styled(
    table: EntryTable, groups: GroupTable, view: EntriesView, root: RootCause | None = None
) -> Text:
    """The view of a table of the job's every row as `rich` text: deviating cells and the
    culprit's column header coloured."""
    if not table.n:
        return Text("no entries\n")
    chosen = showing(groups, view, root)
    shown = shown_rows(table, groups.entry_group, chosen)
    return render_shown(table, shown, chosen, groups, view, root)


def render_analysis(analysis: Analysis, view: EntriesView) -> Text:
    """The view of an analysis' rows, wherever its engine keeps them (`rows.shown_of`)."""
    if not analysis.entries:
        return Text("no entries\n")
    root = analysis.conclusion.root
    chosen = showing(analysis.groups, view, root)
    table, shown = shown_of(analysis, chosen)
    return render_shown(table, shown, chosen, analysis.groups, view, root)


def showing(groups: GroupTable, view: EntriesView, root: RootCause | None) -> Showing:
    """The rows the view shows, of which groups: the root's group around the root's sequence
    id; else the groups `--pg-filters` names (all without), each whole or its newest ids."""
    if _around(view, root):
        assert root is not None and root.group is not None
        return Showing((root.group.uid,), _root_window(root, view.context), view.last)
    uids = tuple(g.uid for g in _filtered(groups, view.pg_filters))
    last = NEWEST if view.around_root is not False and view.last is None else view.last
    return Showing(uids, None, last)


def render_shown(
    table: EntryTable,
    shown: Shown,
    chosen: Showing,
    groups: GroupTable,
    view: EntriesView,
    root: RootCause | None = None,
) -> Text:
    """The view of the rows `chosen` (`showing`'s) gave (`shown`, rows of `table`) as `rich`
    text."""
    culprits = set(root.ranks) if root is not None else set()
    out = Text()
    around = _around(view, root)
    if view.around_root is not False and not around and view.last is None:
        # a healthy job of 1,024 ranks has millions of entries: its newest few are what one reads
        out.append(_wrapped(_newest_note(root), view.width), "dim")
        out.append("\n")
    uids = chosen.uids
    by_uid = {g.uid: g for g in groups.groups}
    p2p_like = np.isin(table.unit, P2P_LIKE)
    rows_of = rows_by_group(shown.groups, list(uids))
    marked = False
    for uid in uids:
        group = by_uid[uid]
        rows = shown.rows[rows_of[uid]]
        firsts = shown.firsts.get(uid, {})
        cells = _cells(table, rows, group, p2p_like, view.stack, culprits)
        ranks = _columns(group, cells, firsts, view, culprits if around else None)
        if not ranks or not cells:
            continue
        folded = _fold(_grid(cells, ranks, firsts), ranks, culprits)
        columns = _capped(folded)
        marked |= any(c.deviates for column in columns for c in column.cells)
        title = f"== {describe_group(group)} (membership from {group.source.value})"
        out.append(_wrapped(title, view.width), "bold")
        if around and root is not None:
            line = _around_line(group, root, ranks, columns, view.context)
            out.append(_wrapped(line, view.width))
        elif len(columns) < len(folded):
            out.append(_wrapped(_left_out(ranks, columns), view.width))
        out.append_text(_blocks(list(cells), columns, view.width, wrap=not view.stack))
        out.append("\n")
    if not out.plain.strip():
        return Text("no entries match the filters\n")
    if marked:
        out.append(_wrapped(LEGEND, view.width), "dim")
    return out


def _around(view: EntriesView, root: RootCause | None) -> bool:
    """Whether the view shows the root's group around the root."""
    return view.around_root is not False and root is not None and root.group is not None


def _root_window(root: RootCause, context: int) -> Around | None:
    """The sequence ids within `context` of the root's (p2p ids for a p2p root)."""
    if root.collective_seq_id is None and root.p2p_seq_id is not None:
        return Around(root.p2p_seq_id, context, p2p=True)
    if root.collective_seq_id is not None:
        return Around(root.collective_seq_id, context)
    return None


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


def _newest_note(root: RootCause | None) -> str:
    what = "no root cause" if root is None else "no group at the root cause"
    return f"{what}: each group's newest {NEWEST} sequence ids; every entry: --all-entries"


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
    """The ranks shown, in order, before identical ones fold: around the root (`culprits`
    given), every member of the root's group and any other rank with entries there; else every
    rank with entries. `--selected-ranks` keeps only its ranks of either."""
    present = {rank for row in cells.values() for rank in row} | set(firsts)
    if culprits is not None:
        present |= set(group.ranks)
    if view.ranks is not None:
        wanted = set(view.ranks)
        return sorted(r for r in present if r in wanted)
    return sorted(present)


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


def _fold(grid: dict[Key, list[_Cell]], ranks: list[int], culprits: set[int]) -> list[_Column]:
    """One column per set of ranks whose cells are identical in every row (a culprit's only
    with other culprits'), in the order of their first ranks."""
    folded: dict[tuple[bool, tuple[_Cell, ...]], list[int]] = {}
    for i, rank in enumerate(ranks):
        cells = tuple(row[i] for row in grid.values())
        folded.setdefault((rank in culprits, cells), []).append(rank)
    return [
        _Column(tuple(members), cells, culprit)
        for (culprit, cells), members in sorted(folded.items(), key=lambda kv: kv[1][0])
    ]


def _capped(columns: list[_Column]) -> list[_Column]:
    """At most `FOLDED_SHOWN` columns: the culprits', then the one of the most ranks (what
    most ranks did), then those with a deviating cell, then the rest; the most ranks first."""
    if len(columns) <= FOLDED_SHOWN:
        return columns
    most = max(columns, key=lambda c: len(c.ranks))

    def priority(column: _Column) -> tuple[bool, bool, bool, int]:
        deviates = any(c.deviates for c in column.cells)
        return (not column.culprit, column is not most, not deviates, -len(column.ranks))

    kept = {id(c) for c in sorted(columns, key=priority)[:FOLDED_SHOWN]}
    return [c for c in columns if id(c) in kept]


def _left_out(ranks: list[int], columns: list[_Column]) -> str:
    """Which ranks the columns show when `_capped` left some out, and how to see the rest."""
    shown = {r for c in columns for r in c.ranks}
    hidden = [r for r in ranks if r not in shown]
    some = "rank" if len(hidden) == 1 else "ranks"
    return (
        f"ranks {_listed(compact(shown))} shown; {len(hidden):,} other {some} with other cells "
        f"not shown (--selected-ranks {_listed(compact(hidden))})"
    )


def _around_line(
    group: Group, root: RootCause, ranks: list[int], columns: list[_Column], context: int
) -> str:
    """What part of the group is shown around the root."""
    if root.collective_seq_id is None and root.p2p_seq_id is not None:
        seq = f"p2p #{root.p2p_seq_id}"
    else:
        seq = f"collective #{root.collective_seq_id}"
    shown = sum(len(c.ranks) for c in columns)
    if shown < len(ranks):
        which = _left_out(ranks, columns)
    elif set(group.ranks) <= set(ranks):
        folded = ", identical ones in one column" if len(columns) < len(ranks) else ""
        which = f"all {len(ranks):,} ranks{folded}"
    else:
        hidden = group.size - len(set(group.ranks) & set(ranks))
        which = (
            f"ranks {_listed(compact(ranks))}; {hidden} other {'rank' if hidden == 1 else 'ranks'} "
            "of the group not selected"
        )
    return f"around the root cause: {seq} and {context} sequence ids either side; {which}"


def _header(column: _Column, notes: list[str]) -> str:
    """`rank 5`, `ranks 0-4,6-7` or, for a list longer than `HEADER_CHARS`, `512 ranks [a]`
    with the list added to `notes` (printed under the table)."""
    ranks = compact(column.ranks)
    many = len(column.ranks) > 1
    header = f"ranks {ranks}" if many else f"rank {ranks}"
    if len(header) > HEADER_CHARS:
        mark = f"[{_letters(len(notes))}]"
        notes.append(f"{mark} ranks {ranks.replace(',', ', ')}")
        header = f"{len(column.ranks):,} ranks {mark}"
    if column.culprit:
        header += " (culprits)" if many else " (culprit)"
    return header


def _letters(n: int) -> str:
    """0 → a, 25 → z, 26 → aa: footnote marks."""
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(ord("a") + r) + out
    return out


def _blocks(keys: list[Key], columns: list[_Column], width: int, wrap: bool) -> Text:
    """The table in blocks of columns, each at most `width` wide where a column fits; with
    `wrap`, cells are wrapped (down to `WRAPPED_CHARS`) so that as many columns as can share a
    block do, all of them where they fit."""
    notes: list[str] = []
    headers = [_header(c, notes) for c in columns]
    shown = {key: [_shown(c.cells[k]) for c in columns] for k, key in enumerate(keys)}
    grid = {key: [c.cells[k] for c in columns] for k, key in enumerate(keys)}
    culprit = [c.culprit for c in columns]
    labels = {key: _label(key) for key in keys}
    seq_w = max([3, *(len(s) for s in labels.values())])
    widths = _widths([[h] for h in headers], shown)
    floors = [max([WRAPPED_CHARS, *(len(w) for w in h.split())]) for h in headers]
    blocks = _packed(widths, floors if wrap else widths, width - seq_w)
    if wrap:
        room = width - seq_w
        for block in blocks:
            fitted = _fitted(
                [widths[i] for i in block],
                [floors[i] for i in block],
                room - len(GAP) * len(block),
            )
            for i, w in zip(block, fitted or [], strict=False):
                widths[i] = w
        shown = {
            key: [_wrap_cell(text, w) for text, w in zip(row, widths, strict=True)]
            for key, row in shown.items()
        }
    head = [
        textwrap.wrap(h, w, break_long_words=False) for h, w in zip(headers, widths, strict=True)
    ]
    widths = _widths(head, shown)  # as wide as what the wrapped cells hold
    out = Text()
    for n, block in enumerate(blocks):
        if len(blocks) > 1:
            out.append(f"-- ranks {_block_ranks([columns[i] for i in block])}", "dim")
            out.append(f" ({n + 1} of {len(blocks)})\n", "dim")
        for k in range(max(len(head[i]) for i in block)):
            line = Text(("seq" if k == 0 else "").ljust(seq_w))
            for i in block:
                text = head[i][k] if k < len(head[i]) else ""
                line.append(GAP + text.ljust(widths[i]), "bold yellow" if culprit[i] else "")
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
    for note in notes:
        out.append(_wrapped(note, width), "dim")
    return out


def _widths(head: list[list[str]], shown: dict[Key, list[str]]) -> list[int]:
    return [
        max([*map(len, lines), *(len(ln) for row in shown.values() for ln in row[i].splitlines())])
        for i, lines in enumerate(head)
    ]


def _packed(widths: list[int], floors: list[int], room: int) -> list[list[int]]:
    """Columns in blocks, in order: each block as many columns as fit `room` at their floors
    (at least one)."""
    blocks: list[list[int]] = [[]]
    used = 0
    for i, floor in enumerate(floors):
        need = len(GAP) + min(widths[i], floor)
        if blocks[-1] and used + need > room:
            blocks.append([])
            used = 0
        blocks[-1].append(i)
        used += need
    return blocks


def _fitted(widths: list[int], floors: list[int], room: int) -> list[int] | None:
    """Column widths no wider than `widths` nor narrower than `floors` that sum to at most
    `room`, the widest cut first; None where even the floors do not fit."""
    if sum(min(w, f) for w, f in zip(widths, floors, strict=True)) > room:
        return None
    for cap in range(max(widths), 0, -1):
        fitted = [min(w, max(cap, f)) for w, f in zip(widths, floors, strict=True)]
        if sum(fitted) <= room:
            return fitted
    return None


def _wrap_cell(text: str, width: int) -> str:
    return "\n".join(
        part
        for line in text.splitlines()
        for part in (textwrap.wrap(line, width, break_on_hyphens=False) or [""])
    )


def _block_ranks(columns: list[_Column]) -> str:
    return _listed(compact(r for c in columns for r in c.ranks))


def _listed(ranks: str) -> str:
    """A compact rank list cut after `HEADER_CHARS` characters, at a comma."""
    if len(ranks) <= HEADER_CHARS:
        return ranks
    return f"{ranks[:HEADER_CHARS].rpartition(',')[0]},..."


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
