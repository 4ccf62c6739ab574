"""fr-analyze: find the rank, process group and collective that desynced a PyTorch job.

The public names below are imported on first use, not with the package: `fr-analyze
--version` and `--help` then start without numpy and the pipeline (0.1 s rather than 0.9 s).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "1.0.0"
"""The one place the version is written: pyproject.toml reads it from here (`attr:`), so a
command does not ask `importlib.metadata` for it (about 25 ms of every start)."""

if TYPE_CHECKING:
    from .pipeline import Analysis, Options, analyze
    from .render.database import Database, load_db

_LAZY = {
    "Analysis": "pipeline",
    "Options": "pipeline",
    "analyze": "pipeline",
    "Database": "render.database",
    "load_db": "render.database",
}

__all__ = ["Analysis", "Database", "Options", "__version__", "analyze", "load_db"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # looked up once
    return value
