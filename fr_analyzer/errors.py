"""The one error hierarchy of fr-analyze; the CLI turns these into one-line messages and exit 2."""

from __future__ import annotations


class FrAnalyzerError(Exception):
    """A problem the user can fix: bad input, bad options, an unwritable output."""


class DumpError(FrAnalyzerError):
    """One rank's dump file cannot be used; the message names the file and the rank."""

    def __init__(self, path: str, rank: int | None, reason: str) -> None:
        self.path = path
        self.rank = rank
        self.reason = reason
        where = f"{path} (rank {rank})" if rank is not None else path
        super().__init__(f"{where}: {reason}")


class DiscoveryError(FrAnalyzerError):
    """The dump directory holds no usable set of rank files (or an ambiguous one)."""


class OutputError(FrAnalyzerError):
    """An output file cannot be written where the user asked."""


class UsageError(FrAnalyzerError):
    """Options that contradict each other or name things that do not exist."""
