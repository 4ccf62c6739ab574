"""Numbers read from input text: rank numbers in file names and pages, group names, sizes and
HTTP framing. Every such text becomes a number here, once, with bounds.

`str.isdigit()` accepts what `int()` refuses (`"²"`) or takes seconds over (5,000 digits:
past Python's limit, a ValueError), and `int()` accepts what no input means (`"٣"`, `" 7"`,
`"+7"`, `"1_000"`): the parsers below take ASCII digits only, at most as many as their bound
has, and give None for anything else, so an odd value costs only the rank or request that
holds it.
"""

from __future__ import annotations

import re

INT64_MAX = (1 << 63) - 1

_DECIMAL = re.compile(r"[0-9]{1,19}", re.ASCII)
_DECIMAL_BYTES = re.compile(rb"[0-9]{1,19}")
_HEX_BYTES = re.compile(rb"[0-9A-Fa-f]{1,16}")


def decimal(text: str | bytes, most: int = INT64_MAX) -> int | None:
    """The non-negative number `text` spells in ASCII decimal digits (`"12"`, `b"0042"`), if
    it is at most `most`; None for anything else (a sign, a space, `"²"`, 5,000 digits).
    Leading zeros count among the digits: more than 19 are refused, whatever they spell."""
    if len(text) > 19:
        return None
    if isinstance(text, bytes):
        if _DECIMAL_BYTES.fullmatch(text) is None:
            return None
    elif _DECIMAL.fullmatch(text) is None:
        return None
    value = int(text)
    return value if value <= most else None


def hex_size(text: bytes, most: int) -> int | None:
    """An HTTP chunk's size from its size line (`b"1a2b;name=value\\r\\n"`: hex digits, then
    extensions), if it is at most `most`; None for anything else."""
    digits = text.split(b";", 1)[0].strip()
    if _HEX_BYTES.fullmatch(digits) is None:
        return None
    value = int(digits, 16)
    return value if value <= most else None


def name_order(name: str) -> tuple[int, int, str]:
    """A key that sorts group names as numbers where they are ones (`"2"` before `"10"`),
    then every other name by its text (`"²"`, a 5,000-digit name)."""
    number = decimal(name)
    return (0, number, "") if number is not None else (1, 0, name)
