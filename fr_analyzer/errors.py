"""The one error hierarchy of fr-analyze; the CLI turns these into exit 2 and two lines on
stderr: `fr-analyze: error: <message>` and `hint: <hint>`, what to do about it. Each class
carries the hint its errors usually need; a raise site that knows better gives its own
(`UsageError("...", hint="...")`)."""

from __future__ import annotations

from typing import ClassVar


class FrAnalyzerError(Exception):
    """A problem the user can fix: bad input, bad options, an unwritable output."""

    default_hint: ClassVar[str] = "fr-analyze --help lists every option (docs/cli.md)"

    def __init__(self, *args: object, hint: str = "") -> None:
        super().__init__(*args)
        self.hint = hint or self.default_hint


class DumpError(FrAnalyzerError):
    """One rank's dump file cannot be used; the message names the file and the rank."""

    default_hint = (
        "a dump cut short, or of a format fr-analyze does not read: docs/formats.md lists "
        "what it reads"
    )

    def __init__(self, path: str, rank: int | None, reason: str, hint: str = "") -> None:
        self.path = path
        self.rank = rank
        self.reason = reason
        where = f"{path} (rank {rank})" if rank is not None else path
        super().__init__(f"{where}: {reason}", hint=hint)


class DiscoveryError(FrAnalyzerError):
    """The dump directory holds no usable set of rank files (or an ambiguous one)."""

    default_hint = (
        "-d takes a folder of per-rank dumps (rank_0, nccl_trace_rank_0.pkl, ...), an "
        "archive or a URL (docs/sources.md); -p PREFIX names an unusual file prefix"
    )


class OutputError(FrAnalyzerError):
    """An output file cannot be written where the user asked."""

    default_hint = "give a path in a folder you can write, outside the dump directory"


class UsageError(FrAnalyzerError):
    """Options that contradict each other or name things that do not exist."""

    default_hint = "fr-analyze --help lists every option; fr-analyze COMMAND --help a command's"
