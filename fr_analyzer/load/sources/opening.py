"""The source a command line names: a local directory or archive, or a URL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ...errors import DiscoveryError
from .archives import LocalFile, archive_kind, archive_source
from .base import Directory, Source
from .remote import url_source

# ---------------------------------------------------------------------------------------------
# Choosing the source

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://|[A-Za-z][A-Za-z0-9+.-]*::", re.ASCII)


def open_source(text: str, storage_options: dict[str, Any] | None = None) -> Source:
    """The source `text` names: a local directory or archive, or a URL (fsspec)."""
    if text.startswith("file://") and "::" not in text:
        text = text[len("file://") :] or "/"
    elif _URL.match(text):
        return url_source(text, storage_options or {})
    path = Path(text)
    if path.is_dir():
        return Directory(path)
    if not path.exists():
        raise DiscoveryError(f"{text}: no such directory or archive")
    kind = archive_kind(LocalFile(str(path)), text)
    return archive_source(kind, LocalFile(str(path)), text)
