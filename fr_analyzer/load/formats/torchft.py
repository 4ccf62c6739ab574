"""Dumps of torchft jobs in global ranks (`--transform-ft --group-world-size N`).

A torchft job is several replica groups, each an ordinary job of N ranks with its own default
group. Its dump files are named by global rank (`replica * N + rank in the replica`), but each
replica's `default_pg` lists the replica's local ranks 0..N-1 under the same name in every
replica. Rewritten here, as PyTorch's analyzer does: the default group's ranks become global
(`replica * N + r`), and since every replica's default group is a group of its own, its name
gets the replica (`0` becomes `0@replica1`). torchft's own groups already carry global ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .values import parse_ranks

DEFAULT_DESC = "default_pg"


def replica_name(name: str, rank: int, group_world_size: int) -> str:
    """The group name torchft gives replica `rank // group_world_size` of group `name`."""
    return f"{name}@replica{rank // group_world_size}"


def global_pg_config(header: dict[str, Any], rank: int, group_world_size: int) -> None:
    """Rewrite the default group of `header["pg_config"]` (in place: the header was parsed by
    this process) into global ranks and a name of its replica."""
    config = header.get("pg_config")
    if not isinstance(config, dict):
        return
    first = rank // group_world_size * group_world_size
    rewritten: dict[Any, Any] = {}
    for key, conf in config.items():
        if isinstance(conf, dict) and conf.get("desc") == DEFAULT_DESC:
            ranks = parse_ranks(conf.get("ranks"))
            name = conf.get("name", key)
            if ranks is not None and isinstance(name, str) and isinstance(key, str):
                new = replica_name(name, rank, group_world_size)
                conf = {**conf, "name": new, "ranks": str([first + r for r in ranks])}
                key = replica_name(key, rank, group_world_size)
        rewritten[key] = conf
    header["pg_config"] = rewritten


def global_groups(
    groups: Sequence[tuple[str, str]], rank: int, group_world_size: int
) -> list[tuple[str, str]]:
    """The entries' (name, desc) of each group code, the default group named by replica."""
    return [
        (replica_name(name, rank, group_world_size), desc) if desc == DEFAULT_DESC else (name, desc)
        for name, desc in groups
    ]
