"""fr-analyze: find the rank, process group and collective that desynced a PyTorch job."""

from __future__ import annotations

__version__ = "1.0.0"

from .database import Database, load_db
from .pipeline import Analysis, Options, analyze

__all__ = ["Analysis", "Database", "Options", "__version__", "analyze", "load_db"]
