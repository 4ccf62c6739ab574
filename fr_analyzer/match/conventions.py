"""The recorders' size conventions: which size differences are a recorder's layout rather than
a mismatch, and which sizes contradict their op."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..model.backends import EXACT_LAYOUT_BACKENDS, REDUCE_SCATTER_AS_ALL_REDUCE_BACKENDS
from ..model.groups import GroupTable
from ..model.ops import ALL_GATHER_OPS, REDUCE_SCATTER_OPS, SAME_IN_OUT_OPS
from ..model.table import EntryTable
from .records import COLLECTIVE_UNITS, of_kinds

I64 = npt.NDArray[np.int64]


def intrinsic_size_errors(t: EntryTable, groups: GroupTable) -> npt.NDArray[np.bool_]:
    """Rows whose own input/output sizes contradict their op for the group's size. Element
    counts are looked up only for the rows that can be wrong: all_reduce rows whose shapes
    differ, and all_gather and reduce_scatter rows."""
    bad = np.zeros(t.n, dtype=bool)
    if not t.n:
        return bad
    kind = np.zeros(len(t.ops), dtype=np.int8)
    for code, op in enumerate(t.ops):
        if op in SAME_IN_OUT_OPS:
            kind[code] = 1
        elif op in ALL_GATHER_OPS:
            kind[code] = 2
        elif op in REDUCE_SCATTER_OPS:
            kind[code] = 3
    k = kind[t.op]
    rows = np.flatnonzero(((k == 1) & (t.in_shape != t.out_shape)) | (k >= 2))
    if not len(rows):
        return bad
    k = k[rows]
    sizes = np.array([g.size for g in groups.groups], dtype=np.int64)
    gsize = sizes[groups.entry_group[rows]]
    in_n = t.shape_numel[t.in_shape[rows]]
    out_n = t.shape_numel[t.out_shape[rows]]
    # gloo records reduce_scatter_tensor as all_reduce: accept the reduce-scatter shape there.
    as_rs = np.array([b in REDUCE_SCATTER_AS_ALL_REDUCE_BACKENDS for b in t.backends], dtype=bool)
    bad[rows] = (
        ((k == 1) & ~(as_rs[t.backend[rows]] & (in_n == out_n * gsize)))
        | ((k == 2) & (out_n != in_n * gsize))
        | ((k == 3) & (in_n != out_n * gsize))
    )
    return bad


Signature = tuple[int, int, int, int, int]
"""A layout: (backend, op, input shapes, output shapes) by the table's codes, and the group's
size."""


@dataclass(frozen=True)
class Conventions:
    """The size rules a recorder itself breaks, as the rows of a table (the job's, or a part's)
    show them: the rows still wrong, the layouts learned here, and the layouts of rows still
    wrong that a layout learned elsewhere in the job may yet accept (`left`)."""

    size_bad: npt.NDArray[np.bool_]
    learned: frozenset[Signature]
    left: frozenset[Signature]


def recorder_conventions(
    t: EntryTable,
    groups: GroupTable,
    bad: npt.NDArray[np.bool_],
    accepted: frozenset[Signature] = frozenset(),
) -> Conventions:
    """Size rules that the recorder itself breaks: `bad` without them.

    A layout that every member of a collective records alike is how the recorder writes that
    op, not a disagreement (gloo writes two `all_gather_into_tensor` of a coalescing block as
    one all_gather whose output is `[[2] + shard]`); never on NCCL and its kin, whose layouts
    are exact (`EXACT_LAYOUT_BACKENDS`). Learned from the evidence: an (op, input,
    output, group size) signature that breaks the rule on every member that holds one
    collective, at least two of them, is accepted wherever it appears: here, and (`accepted`)
    where other parts of the job learned it. A member whose sizes differ from its peers' is
    still caught by comparing the members."""
    exact = np.array([b in EXACT_LAYOUT_BACKENDS for b in t.backends], dtype=bool)
    rows = np.flatnonzero(bad & ~exact[t.backend]) if t.n else np.zeros(0, np.int64)
    if not len(rows):
        return Conventions(bad, frozenset(), frozenset())
    uid = groups.entry_group[rows].astype(np.int64)
    sizes = np.array([g.size for g in groups.groups], dtype=np.int64)
    keys = np.stack(
        [t.backend[rows], t.op[rows], t.in_shape[rows], t.out_shape[rows], sizes[uid]], axis=1
    ).astype(np.int64)
    units = np.stack([uid, t.coll_seq[rows]], axis=1)
    # Per (unit, signature): how many distinct ranks hold it; per unit: how many signatures.
    unit_key = np.concatenate([units, keys], axis=1)
    holding = np.unique(
        np.concatenate([unit_key, t.rank[rows, None].astype(np.int64)], axis=1), axis=0
    )
    per_sig, holders = np.unique(holding[:, :-1], axis=0, return_counts=True)
    unit_of_sig, sig_count = np.unique(per_sig[:, :2], axis=0, return_inverse=True)
    n_sigs = np.bincount(sig_count.reshape(-1), minlength=len(unit_of_sig))
    # Every rank that holds the collective at all must hold that layout: members with no
    # dump, or that never issued it (a rank that stopped before it), are no evidence.
    span = int(t.coll_seq.max()) + 1
    wanted = unit_of_sig[:, 0] * span + unit_of_sig[:, 1]
    all_rows = np.flatnonzero(of_kinds(t.unit, COLLECTIVE_UNITS))
    all_keys = groups.entry_group[all_rows].astype(np.int64) * span + t.coll_seq[all_rows]
    keep = np.isin(all_keys, wanted)
    pairs = np.unique(
        np.stack([all_keys[keep], t.rank[all_rows[keep]].astype(np.int64)], axis=1), axis=0
    )
    unit_keys, holding = np.unique(pairs[:, 0], return_counts=True)
    present = dict(zip(unit_keys.tolist(), holding.tolist(), strict=True))
    members = np.array([present.get(k, 0) for k in wanted.tolist()])[sig_count.reshape(-1)]
    learned_here = (n_sigs[sig_count.reshape(-1)] == 1) & (holders == members) & (holders >= 2)
    learned = frozenset(_signature(k) for k in per_sig[learned_here, 2:].tolist())
    signatures = [_signature(k) for k in keys.tolist()]
    wrong = learned | accepted
    keep = np.array([k not in wrong for k in signatures], dtype=bool)
    out = bad.copy()
    out[rows[~keep]] = False
    left = frozenset(k for k, still in zip(signatures, keep.tolist(), strict=True) if still)
    return Conventions(out, learned, left)


def convention_notes(t: EntryTable, learned: frozenset[Signature]) -> tuple[str, ...]:
    """A note for each layout taken as the recorder's (`recorder_conventions`), by the lists
    of `t` (the job's: every part codes by them)."""
    return tuple(
        f"{t.backends[backend]} records {t.ops[op]} on {size} ranks as input "
        f"{[list(x) for x in t.shapes[in_code]]}, output "
        f"{[list(x) for x in t.shapes[out_code]]} on every member alike: taken as the "
        "recorder's layout, not a size mismatch"
        for backend, op, in_code, out_code, size in sorted(learned)
    )


def _signature(key: list[int]) -> Signature:
    backend, op, in_code, out_code, size = key
    return (backend, op, in_code, out_code, size)
