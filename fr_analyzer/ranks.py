"""Compact rank lists: `0-6,8-15` for humans, and parsing the same syntax from options."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import UsageError


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


def parse(text: str) -> tuple[int, ...]:
    """`"0,3-5"` → `(0, 3, 4, 5)`; spaces are allowed; anything else is a UsageError."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UsageError(f"bad rank list {text!r}: expected e.g. 0,3-5")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise UsageError(f"bad rank range {part!r} in {text!r}")
        out.update(range(first, last + 1))
    if not out:
        raise UsageError(f"empty rank list {text!r}")
    return tuple(sorted(out))


def label(ranks: Iterable[int]) -> str:
    """`"rank 3"` or `"ranks 0-2,5"`, for sentences."""
    values = sorted(set(ranks))
    return f"rank {values[0]}" if len(values) == 1 else f"ranks {compact(values)}"


def agree(ranks: Iterable[int], singular: str, plural: str) -> str:
    """The verb form for a rank list: `agree(r, "waits", "wait")`."""
    return singular if len(set(ranks)) == 1 else plural
