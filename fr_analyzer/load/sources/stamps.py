"""Times written in file and folder names: the debug server names its periodic reports
`<handler>_<YYYYmmdd>_<HHMMSS>.txt` and `fr-analyze live` its snapshot folders
`<YYYYmmdd>_<HHMMSS>_<microseconds>`, both in local time; people name copies likewise
(`fr-20261123-031502/`)."""

from __future__ import annotations

import re
import time
from datetime import datetime

_NAME_TIME = re.compile(
    r"(?<!\d)(\d{4})(\d{2})(\d{2})[_T-]?(\d{2})(\d{2})(\d{2})(?:[_.](\d{1,9}))?(?!\d)"
)


def name_time_ns(name: str) -> int | None:
    """The time written in `name` (`20261123_031502`, `20261123-031502_123456`), read as local
    time; None when it holds none, or no valid date."""
    match = _NAME_TIME.search(name)
    if match is None:
        return None
    y, mo, d, h, mi, s, frac = match.groups()
    try:
        stamp = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s))
        seconds = int(time.mktime(stamp.timetuple()))
    except (ValueError, OverflowError):
        return None
    return seconds * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])
