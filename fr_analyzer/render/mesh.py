"""The job's mesh, read from its process groups: which families of groups split the ranks into
evenly spaced runs that nest like a mixed-radix number (Megatron's tp inside dp inside pp). The
HTML report lays its picture of the ranks out on it, or, past a few hundred ranks, folds
neighbours that stand alike into one cell (`fold_runs`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..model.groups import GroupTable
from ..model.records import Group

UNSPANNED = "rest"
"""The name of a mesh dimension that no process group spans."""


@dataclass(frozen=True)
class MeshDim:
    """One dimension of the job's mesh: rank = sum(coordinate * stride) over the dimensions."""

    name: str  # the process groups' description ("tp"), or UNSPANNED
    size: int
    stride: int


def infer_mesh(groups: GroupTable, world: int) -> tuple[MeshDim, ...] | None:
    """The job's mesh, innermost dimension first, when its process groups reveal one: at least
    two families of groups (groups sharing a description) that each split the whole job into
    equal runs of evenly spaced ranks, the runs nesting like a mixed-radix number (Megatron's
    tp inside dp inside pp). A stretch of ranks no family spans becomes a dimension `UNSPANNED`
    (gloo records no send/recv, so its pipeline stages have no groups). None: no mesh."""
    if world < 4:
        return None
    by_family: dict[str, list[Group]] = {}
    for g in groups.groups:
        if 1 < g.size < world:
            by_family.setdefault(g.desc or g.name, []).append(g)
    found: dict[tuple[int, int], str] = {}  # (stride, size) -> family
    for name, members in by_family.items():
        shape = _evenly_split(members, world)
        if shape is not None:
            found.setdefault(shape, name)
    if len(found) < 2:
        return None
    dims: list[MeshDim] = []
    expected = 1  # the stride the next dimension must have: the product of the sizes inside
    for (stride, size), name in sorted(found.items()):
        if stride < expected or stride % expected:
            return None  # two families overlap, or do not nest
        if stride > expected:
            dims.append(MeshDim(UNSPANNED, stride // expected, expected))
        dims.append(MeshDim(name, size, stride))
        expected = stride * size
    if world % expected:
        return None
    if world > expected:
        dims.append(MeshDim(UNSPANNED, world // expected, expected))
    return tuple(dims)


def _evenly_split(members: Sequence[Group], world: int) -> tuple[int, int] | None:
    """(stride, size) when the groups split ranks 0..world-1 into disjoint runs of `size` ranks
    `stride` apart, each starting at coordinate 0 of its dimension; else None."""
    size = members[0].size
    if size * len(members) != world:
        return None
    first = members[0].ranks
    stride = first[1] - first[0]
    if stride < 1:
        return None
    starts = set()
    for g in members:
        start = g.ranks[0]
        if g.size != size or start % (stride * size) >= stride:
            return None
        if g.ranks != tuple(range(start, start + stride * size, stride)):
            return None
        if g.ranks[-1] >= world:
            return None
        starts.add(start)
    return (stride, size) if len(starts) == len(members) else None


FOLD_RANKS = 256
"""Past this many ranks the picture folds neighbours that stand alike into one cell..."""
FOLD_GAIN = 4
"""...where that makes at least this many times fewer cells (else the mesh says more)."""


def fold_runs(ranks: dict[str, Any], world: int) -> list[list[int]] | None:
    """Runs `[first, last]` of neighbouring ranks that stand alike (the same spot, blocked in
    the same op, the same newest op, waiting for the same ranks), which the picture draws as
    one cell each; None when the job is small enough for a cell per rank (`FOLD_RANKS`), or
    when its ranks stand too unlike their neighbours for folding to pay (`FOLD_GAIN`)."""
    if world <= FOLD_RANKS:
        return None
    columns = (ranks["spot"], ranks["blocked"], ranks["newest"], ranks["waits"])
    runs: list[list[int]] = []
    previous: tuple[int, ...] | None = None
    for rank in range(world):
        key = tuple(column[rank] for column in columns)
        if key == previous:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
        previous = key
    return runs if len(runs) * FOLD_GAIN <= world else None
