"""The host a rank ran on, from its dump or its file's name, for "where to look".

PyTorch's recorder writes no host into a dump; the debug server's JSON dumps carry
`host_name` (torch.distributed.debug), and people name copies after the host
(`nccl_trace_rank_container-node07_40`: a known prefix, then `<host>_<rank>`). Both come from
files, so both are hostile: a host is kept only when it is printable, short and not a plain
number (`nccl_trace_rank_00_3` names no host).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..common import printable
from .discovery import KNOWN_PREFIXES

HOST_CHARS = 253
"""Longest host kept (a DNS name's longest); a longer value is cut and marked."""

HOST_KEYS = ("host_name", "hostname", "host")
"""Top-level keys that name the host in a dump, first found wins."""

# `<prefix><host>_<rank>[.pkl|.pickle|.json][.gz]`: a host is letters, digits, dots, dashes
# and underscores, and not digits alone.
_NAMED = re.compile(
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*?)_(?P<rank>[0-9]+)(?:\.(?:pkl|pickle|json))?(?:\.gz)?",
    re.ASCII,
)


def host_in_header(header: Mapping[str, Any]) -> str | None:
    """The host a dump's header names (`host_name`, `hostname` or `host`), if it is text."""
    for key in HOST_KEYS:
        value = header.get(key)
        if isinstance(value, bytes | bytearray):
            value = bytes(value[: HOST_CHARS * 4]).decode("utf-8", "replace")
        if isinstance(value, str):
            found = clean_host(value)
            if found is not None:
                return found
    return None


def host_in_name(name: str) -> str | None:
    """The host a dump file's name carries after a known prefix: `nccl_trace_rank_node07_40`
    → `node07`; None for `nccl_trace_rank_40`, `rank_3.pkl` or a number alone."""
    base = name.rsplit("/", 1)[-1]
    for prefix in KNOWN_PREFIXES:
        if base.startswith(prefix):
            found = _NAMED.fullmatch(base[len(prefix) :])
            if found is None or found["host"].isdigit():
                return None  # `rank_00_3`: digits alone name no host (an IP has dots: kept)
            return clean_host(found["host"])
    return None


def clean_host(value: str) -> str | None:
    """`value` stripped, printable and at most `HOST_CHARS` long (cut with `...`); None when
    empty."""
    text = printable(value[: HOST_CHARS * 4].strip())
    if not text:
        return None
    return text if len(text) <= HOST_CHARS else text[: HOST_CHARS - 3] + "..."
