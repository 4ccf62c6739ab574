"""The job's shape: world size, TP x PP x DP, and its process groups in creation order.

Global rank = (pp_stage * DP + dp_index) * TP + tp_index: tensor-parallel ranks are contiguous
(one TP group fills a host), then data-parallel replicas, then pipeline stages.

Every rank creates every process group in the same order, as `torch.distributed.new_group`
requires, so the names PyTorch gives them ("0", "1", "2", ...) agree across ranks: "0" is the
default group (desc "default_pg"), then all TP groups, all DP groups, all PP groups (descs
"tp", "dp", "pp"). A dimension of size 1 gets no groups (Megatron issues no communication on
it). A rank's backend ids (`pg_id`) number only the groups it belongs to, in creation order,
which is the role order world, tp, dp, pp.

Groups are computed from their id on demand, so a 16,384-rank layout costs nothing until a
group is asked for.

The engine, the recorder and the truth see a job's shape only through `Topology`: a grid
`Layout`, or a free-form `custom.CustomJob` (explicit groups). A rank's *binding* is the gid of
its group in each *slot* (-1 where it has none); a program names a group by its slot. A grid has
the four slots of `Role`; a free-form job has one slot per group (slot = gid).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from .custom import CustomJob


class Role(IntEnum):
    """Which of a rank's groups an op runs on."""

    WORLD = 0
    TP = 1
    DP = 2
    PP = 3


ROLE_DESCS: tuple[str, ...] = ("default_pg", "tp", "dp", "pp")
"""Group desc per role, as `new_group(group_desc=...)` sets it."""


@dataclass(frozen=True)
class Coords:
    """Where a global rank sits in the 3D grid."""

    stage: int
    dp_index: int
    tp_index: int


@dataclass(frozen=True)
class Group:
    """A process group: its name (identity across ranks), desc, kind and sorted global ranks."""

    gid: int
    """Creation index; the name is str(gid)."""
    role: int
    """A grid group's `Role`; a free-form group's kind (groups of one desc share it)."""
    ranks: tuple[int, ...]
    desc: str = ""
    """`new_group(group_desc=...)`; a grid group's is its role's (ROLE_DESCS)."""

    @property
    def name(self) -> str:
        """The group's name in the dumps: its creation index as text."""
        return str(self.gid)

    @property
    def size(self) -> int:
        """The number of ranks in the group."""
        return len(self.ranks)

    def local_rank(self, rank: int) -> int:
        """Group-local rank of global `rank` (its index in the sorted member list)."""
        return self.ranks.index(rank)


@dataclass(frozen=True)
class Layout:
    """TP x PP x DP; `gpus_per_host` ranks share a host (and its clock)."""

    tp: int = 2
    pp: int = 2
    dp: int = 2
    gpus_per_host: int = 8
    _first: tuple[int, int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if min(self.tp, self.pp, self.dp, self.gpus_per_host) < 1:
            raise ValueError("tp, pp, dp and gpus_per_host must be >= 1")
        world = self.tp * self.pp * self.dp
        tp_groups = world // self.tp if self.tp > 1 else 0
        dp_groups = world // self.dp if self.dp > 1 else 0
        # First gid of each role's groups; -1 when the role has none.
        first_tp = 1 if tp_groups else -1
        first_dp = 1 + tp_groups if dp_groups else -1
        first_pp = 1 + tp_groups + dp_groups if self.pp > 1 else -1
        object.__setattr__(self, "_first", (0, first_tp, first_dp, first_pp))

    @property
    def world_size(self) -> int:
        """The number of ranks: TP x PP x DP."""
        return self.tp * self.pp * self.dp

    def role_size(self, role: Role) -> int:
        """The number of ranks in one group of `role` (the world's for Role.WORLD)."""
        return (self.world_size, self.tp, self.dp, self.pp)[role]

    def has_role(self, role: Role) -> bool:
        """Whether the layout has groups of `role` (a TP, DP or PP of 1 has none)."""
        return self._first[role] >= 0

    @property
    def group_count(self) -> int:
        """How many groups every rank creates: the world, then every TP, DP and PP group."""
        w = self.world_size
        return 1 + sum(
            w // self.role_size(r) for r in (Role.TP, Role.DP, Role.PP) if self.has_role(r)
        )

    def coords(self, rank: int) -> Coords:
        """`rank`'s (pipeline stage, DP index, TP index)."""
        stage, rest = divmod(rank, self.dp * self.tp)
        dp_index, tp_index = divmod(rest, self.tp)
        return Coords(stage, dp_index, tp_index)

    def rank_of(self, stage: int, dp_index: int, tp_index: int) -> int:
        """The global rank at (pipeline stage, DP index, TP index)."""
        return (stage * self.dp + dp_index) * self.tp + tp_index

    def host_of(self, rank: int) -> int:
        """The host `rank` runs on (`gpus_per_host` consecutive ranks per host)."""
        return rank // self.gpus_per_host

    def binding(self, rank: int) -> tuple[int, int, int, int]:
        """The gid of `rank`'s group for each role (world, tp, dp, pp); -1 where none."""
        c = self.coords(rank)
        first = self._first
        tp = first[Role.TP] + rank // self.tp if first[Role.TP] >= 0 else -1
        dp = first[Role.DP] + c.stage * self.tp + c.tp_index if first[Role.DP] >= 0 else -1
        pp = first[Role.PP] + c.dp_index * self.tp + c.tp_index if first[Role.PP] >= 0 else -1
        return (0, tp, dp, pp)

    def local_rank(self, role: int, rank: int) -> int:
        """`rank`'s group-local rank in its group of `role`."""
        c = self.coords(rank)
        return (rank, c.tp_index, c.dp_index, c.stage)[role]

    def group_size(self, gid: int) -> int:
        """The number of ranks in group `gid`."""
        return self.role_size(self.role_of(gid))

    def role_of(self, gid: int) -> Role:
        """The role of group `gid`, from its place in the creation order."""
        for role in (Role.PP, Role.DP, Role.TP):
            if 0 <= self._first[role] <= gid:
                return role
        return Role.WORLD

    def group(self, gid: int) -> Group:
        """The group with creation index `gid`."""
        return _group(self, gid)

    def groups(self) -> list[Group]:
        """Every group of the job in creation order (fine for small layouts)."""
        return [self.group(gid) for gid in range(self.group_count)]

    def member_gids(self, rank: int) -> list[int]:
        """The groups `rank` belongs to, in creation order: index = the rank's pg_id."""
        return [gid for gid in self.binding(rank) if gid >= 0]

    def ranks_text(self, gid: int) -> str:
        """pg_config's `ranks` value: the member list as a string, e.g. "[0, 1, 2]"."""
        return _ranks_text(self, gid)


@lru_cache(maxsize=4096)
def _group(layout: Layout, gid: int) -> Group:
    if not 0 <= gid < layout.group_count:
        raise ValueError(f"no group {gid} in {layout}")
    role = layout.role_of(gid)
    index = gid - layout._first[role]
    tp, dp, pp = layout.tp, layout.dp, layout.pp
    if role == Role.WORLD:
        ranks = tuple(range(layout.world_size))
    elif role == Role.TP:
        ranks = tuple(range(index * tp, index * tp + tp))
    elif role == Role.DP:
        stage, tp_index = divmod(index, tp)
        ranks = tuple(layout.rank_of(stage, d, tp_index) for d in range(dp))
    else:
        dp_index, tp_index = divmod(index, tp)
        ranks = tuple(layout.rank_of(s, dp_index, tp_index) for s in range(pp))
    return Group(gid, role, ranks, ROLE_DESCS[role])


@lru_cache(maxsize=4096)
def _ranks_text(layout: Layout, gid: int) -> str:
    return str(list(layout.group(gid).ranks))


Topology: TypeAlias = "Layout | CustomJob"
"""A job's shape as the engine, recorder and truth see it: binding, groups, hosts."""
