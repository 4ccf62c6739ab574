"""Compact rank lists: `0-6,8-15` for humans, and parsing the same syntax from options."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import UsageError


def compact(ranks: Iterable[int]) -> str:
    """`[0, 1, 2, 3, 5]` → `"0-3,5"`; an empty list is `"-"`."""
    values = sorted(set(ranks))
    if not values:
        return "-"
    parts = []
    start = prev = values[0]
    for value in values[1:]:
        if value == prev + 1:
            prev = value
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = value
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


MAX_RANK = (1 << 20) - 1
"""Largest rank accepted anywhere (file names, pg_config, options): far above real jobs."""

_PART = re.compile(r"^([0-9]+)(?:-([0-9]+))?$", re.ASCII)


def parse(text: str) -> tuple[int, ...]:
    """`"0,3-5"` → `(0, 3, 4, 5)`; spaces are allowed; anything else is a UsageError."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        found = _PART.match(part)
        if found is None:
            raise UsageError(f"bad rank list {text!r}: expected e.g. 0,3-5")
        low, high = found.group(1), found.group(2) or found.group(1)
        if len(high) > 8 or int(high) > MAX_RANK:
            raise UsageError(f"rank {high} in {text!r} is beyond the largest rank {MAX_RANK}")
        first, last = int(low), int(high)
        if last < first:
            raise UsageError(f"bad rank range {part!r} in {text!r}")
        out.update(range(first, last + 1))
    if not out:
        raise UsageError(f"empty rank list {text!r}")
    return tuple(sorted(out))


LABEL_CHARS = 48
"""Longest rank list spelled out in a sentence; longer ones are shortened (tables and JSON keep
every rank)."""


def label(ranks: Iterable[int]) -> str:
    """`"rank 3"` or `"ranks 0-2,5"`, for sentences; a long list becomes
    `"39 ranks (0,8,16,24,...,312)"`."""
    values = sorted(set(ranks))
    if len(values) == 1:
        return f"rank {values[0]}"
    text = compact(values)
    if len(text) <= LABEL_CHARS:
        return f"ranks {text}"
    parts = text.split(",")
    head: list[str] = []
    for part in parts[:-1]:
        if len(",".join([*head, part])) > LABEL_CHARS - 12:
            break
        head.append(part)
    return f"{len(values)} ranks ({','.join(head)},...,{parts[-1]})"


def agree(ranks: Iterable[int], singular: str, plural: str) -> str:
    """The verb form for a rank list: `agree(r, "waits", "wait")`."""
    return singular if len(set(ranks)) == 1 else plural


def by_count(n: int, singular: str, plural: str) -> str:
    """The verb form for a count: `by_count(n, "has", "have")`."""
    return singular if n == 1 else plural


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """`counted(1, "rank")` → `"1 rank"`, `counted(3, "rank")` → `"3 ranks"`;
    `counted(2, "entry", "entries")` → `"2 entries"`."""
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"
