"""The parts' results put back together (`merge`): one `MatchResult` over the table, equal to
matching the whole table, in the order one process makes it; or, for a driver that holds no
table, the parts' pieces (`partitions.piece`: each part's result over its closed frontier alone) put
together over the rows they hold (`merge_held`), equal to the whole result taken over those
rows (`match.frontier.held_matches`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ..model.groups import GroupTable
from ..model.records import Finding
from ..model.table import EntryTable
from .conventions import Signature, convention_notes
from .frontier import joined
from .partitions import PartMatch, Shared
from .records import CollectiveUnits, MatchResult, P2PPairs, id_type

I64 = npt.NDArray[np.int64]


def merge(job: Shared, t: EntryTable, groups: GroupTable, got: Iterable[PartMatch]) -> MatchResult:
    """The parts' results as one, in the order matching the whole table makes them: units
    by (group, sequence id), pairs by channel with the any-source ones last, findings by
    group (the pipeline orders them further, `match.findings.collect`)."""
    n = t.n
    return _merged(job, t, n, got, lambda p: _rows(p, n), lambda rows: groups.entry_group[rows])


def merge_held(
    job: Shared, t: EntryTable, got: Sequence[PartMatch]
) -> tuple[I64, npt.NDArray[np.int32], MatchResult]:
    """The parts' pieces (`partitions.piece`: each part's result over its frontier alone) as one:
    the rows of the table they hold (ascending), the group of each, and their matches
    renumbered to them, as `match.frontier.held_matches` makes them of the whole result
    (every unit, each with its rows held; the pairs of the rows held). `t` gives the job's
    lists of distinct values only: no row of it is read."""
    pieces = [_piece(p) for p in got]
    rows = np.concatenate([np.zeros(0, np.int64), *(r for r, _ in pieces)])
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    group = np.concatenate([np.zeros(0, np.int32), *(g for _, g in pieces)])[order]
    at = {
        id(p): np.searchsorted(rows, r).astype(np.int64)
        for p, (r, _) in zip(got, pieces, strict=True)
    }
    merged = _merged(job, t, len(rows), got, lambda p: at[id(p)], lambda i: group[i])
    pairs = sum(p.result.pairs_matched for p in got)
    return rows, group.astype(np.int32), replace(merged, pairs_in_job=pairs)


def _piece(p: PartMatch) -> tuple[I64, npt.NDArray[np.int32]]:
    """A piece's rows in the table and the group of each."""
    if p.rows is None or p.entry_group is None:
        raise ValueError(f"part {p.index} was matched whole, not as a piece (`partitions.piece`)")
    return p.rows, p.entry_group


def _merged(
    job: Shared,
    t: EntryTable,
    n: int,
    got: Iterable[PartMatch],
    rows_of: Callable[[PartMatch], I64],
    group_of: Callable[[I64], npt.NDArray[np.int32]],
) -> MatchResult:
    """`merge` over `n` rows: `rows_of(part)` numbers a part's rows among them, `group_of`
    gives the group of rows so numbered."""
    results = in_merge_order(got, _first_group)
    done = np.zeros(n, dtype=bool)  # every row lies in one part
    ids = id_type(n)
    entry_unit = np.full(n, -1, dtype=ids)
    entry_pair = np.full(n, -1, dtype=ids)

    # Collective units: each part's are by (uid, seq) and no two parts share a group, so
    # the parts taken in order of their groups give one order by (uid, seq) once sorted.
    blocks: list[tuple[I64, PartMatch]] = []
    for got_part in results:
        rows = rows_of(got_part)
        done[rows] = got_part.result.done
        blocks.append((rows, got_part))
    group = np.concatenate([p.result.collectives.group for _, p in blocks]).astype(np.int32)
    order, new_id = unit_ids(group)
    unit_rows: list[I64] = []
    lengths: list[I64] = []
    not_joined: dict[int, tuple[int, ...]] = {}
    ops: list[str] = []
    offset = 0
    for rows, p in blocks:
        units = p.result.collectives
        local = units.entry_unit
        has = local >= 0
        entry_unit[rows[has]] = new_id[offset + local[has].astype(np.int64)]
        unit_rows.append(rows[units.rows])
        lengths.append(np.diff(units.starts, append=len(units.rows)))
        for u, members in units.not_joined.items():
            not_joined[int(new_id[offset + u])] = members
        ops += units.op
        offset += len(units.group)
    length = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    old_start = np.concatenate([[0], np.cumsum(length)[:-1]]).astype(np.int64)
    flat = np.concatenate(unit_rows) if unit_rows else np.zeros(0, np.int64)
    new_length = length[order]
    new_start = np.concatenate([[0], np.cumsum(new_length)[:-1]]).astype(np.int64)
    gather = np.repeat(old_start[order] - new_start, new_length) + np.arange(int(new_length.sum()))
    collectives = CollectiveUnits(
        group[order],
        np.concatenate([p.result.collectives.seq for _, p in blocks])[order],
        [ops[i] for i in order.tolist()],
        np.concatenate([p.result.collectives.ranks_present for _, p in blocks])[order],
        np.concatenate([p.result.collectives.ranks_expected for _, p in blocks])[order],
        np.concatenate([p.result.collectives.passed for _, p in blocks])[order],
        entry_unit,
        dict(sorted(not_joined.items())),
        flat[gather].astype(np.int64),
        new_start,
    )

    # Pairs: by channel (group first) for those matched in order, the any-source ones after.
    in_order: list[tuple[I64, I64]] = []
    wild: list[tuple[I64, I64]] = []
    for rows, p in blocks:
        pairs, cut = p.result.p2p, len(p.result.p2p.send_row) - p.wild_pairs
        send, recv = rows[pairs.send_row], rows[pairs.recv_row]
        in_order.append((send[:cut], recv[:cut]))
        wild.append((send[cut:], recv[cut:]))
    send_row = np.concatenate([s for s, _ in in_order] + [np.zeros(0, np.int64)])
    recv_row = np.concatenate([r for _, r in in_order] + [np.zeros(0, np.int64)])
    wild_send = np.concatenate([s for s, _ in wild] + [np.zeros(0, np.int64)])
    wild_recv = np.concatenate([r for _, r in wild] + [np.zeros(0, np.int64)])
    by, wild_by = pair_orders(group_of(send_row), wild_recv)
    send_row = np.concatenate([send_row[by], wild_send[wild_by]]).astype(np.int64)
    recv_row = np.concatenate([recv_row[by], wild_recv[wild_by]]).astype(np.int64)
    entry_pair[send_row] = np.arange(len(send_row))
    entry_pair[recv_row] = np.arange(len(recv_row))

    findings = [f for _, p in blocks for f in p.result.findings]
    skipped = [f for _, p in blocks for f in p.result.skipped]
    proven: dict[int, int] = {}
    for _, p in blocks:
        proven.update(p.result.proven)
    return MatchResult(
        collectives,
        P2PPairs(send_row, recv_row, entry_pair),
        done,
        tuple(sorted(findings, key=_group_key)),
        dict(sorted(proven.items())),
        job.notes
        + convention_notes(t, frozenset[Signature]().union(*(p.learned for _, p in blocks)))
        + tuple(note for _, p in blocks for note in p.result.notes),
        tuple(sorted(skipped, key=_unit_key)),
        joined([(rows, p.result.frontier) for rows, p in blocks]),
    )


_P = TypeVar("_P")


def in_merge_order(parts: Iterable[_P], first_group: Callable[[_P], int]) -> list[_P]:
    """The parts in the order their results are put together: by the first group of their
    units (`first_group`; a part with no unit, last)."""
    return sorted(parts, key=first_group)


def unit_ids(group: npt.NDArray[np.integer[Any]]) -> tuple[I64, I64]:
    """The units of the parts (in merge order, each part's in its own order: by (group,
    sequence id)), `group` the group of each: the order that sorts them as the whole result
    numbers them, and the id each gets there (no two parts share a group)."""
    order = np.argsort(group, kind="stable").astype(np.int64)
    new_id = np.empty(len(order), dtype=np.int64)
    new_id[order] = np.arange(len(order))
    return order, new_id


def pair_orders(
    group: npt.NDArray[np.integer[Any]], wild_recv: npt.NDArray[np.integer[Any]]
) -> tuple[I64, I64]:
    """The pairs of the parts (in merge order): of those matched in order (`group`: the group
    of each send), the order that sorts them by channel, group first; of those that took a
    recv from any source (`wild_recv`: each recv's row in the table), the order by recv.
    The whole result numbers the first, then the second, in those orders."""
    return (
        np.argsort(group, kind="stable").astype(np.int64),
        np.argsort(wild_recv, kind="stable").astype(np.int64),
    )


def first_unit_group(group: npt.NDArray[np.integer[Any]]) -> int:
    """A part's key in merge order, by the groups of its units."""
    return int(group[0]) if len(group) else 1 << 40


def _rows(p: PartMatch, n: int) -> I64:
    return np.arange(n, dtype=np.int64) if p.rows is None else p.rows


def _first_group(p: PartMatch) -> int:
    return first_unit_group(p.result.collectives.group)


def _group_key(f: Finding) -> int:
    return f.group.uid if f.group is not None else -1


def _unit_key(f: Finding) -> tuple[int, int]:
    return (_group_key(f), f.collective_seq_id if f.collective_seq_id is not None else -1)
