"""The options more than one command takes, declared once: the dump directory as an argument
or `-d` (timeline, replay), and each flag's spelling and checks (`-o`, `--json`, `--html`,
`--out-dir`, `-p`, `--workers`, `--storage-option`, `--selected-ranks`, `--last`, `--seq`,
`--no-cache`, sizes) with the help text each command gives it, and the user's cache every
command that analyzes shares (`rank_cache`); then the parsers of option values (sizes,
`KEY=VALUE`, `A:B`, the one dump directory of a subcommand).

typer reads an option from its `Annotated` type: a shared type is one declaration for every
command that takes it, word for word, and `--help` prints it the same everywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import UsageError

if TYPE_CHECKING:
    from ..load import RankCache

DUMPS_METAVAR = "DIR|ARCHIVE|URL"

DumpDirArgument = Annotated[
    str | None,
    typer.Argument(
        metavar=DUMPS_METAVAR,
        show_default=False,
        help="Per-rank dumps: a directory, an archive or a URL (as for the analysis).",
    ),
]
"""A subcommand's dumps as its argument (`fr-analyze timeline DIR`)."""

DumpDirOption = Annotated[
    str | None,
    typer.Option(
        "-d",
        "--dump-dir",
        metavar=DUMPS_METAVAR,
        help="The dumps, as the argument (give one or the other).",
    ),
]
"""A subcommand's dumps as `-d DIR`, as the main command takes them."""


def file_size(text: str | int) -> int:
    """A size option's value: bytes, or `512M`, `2G`."""
    if isinstance(text, int):
        return text
    from ..load import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def size_option(name: str, help: str) -> Any:
    """A size in bytes (`512M`, `2G`): `--max-file-size`, `--max-bytes`."""
    return typer.Option(name, parser=file_size, metavar="<size>", show_default=False, help=help)


def output_option(help: str) -> Any:
    """`-o/--output`: the database, or a subcommand's one output."""
    return typer.Option("-o", "--output", help=help)


def json_option(help: str) -> Any:
    """`--json`: the JSON report (or a replay's timings)."""
    return typer.Option("--json", help=help)


def html_option(help: str) -> Any:
    """`--html`: the web page."""
    return typer.Option("--html", help=help)


def out_dir_option(help: str) -> Any:
    """`--out-dir DIR`: every output of one analysis, in one folder."""
    return typer.Option("--out-dir", metavar="DIR", help=help)


def prefix_option(help: str) -> Any:
    """`-p/--prefix`: the dump file name before the rank number."""
    return typer.Option("-p", "--prefix", help=help)


def workers_option(help: str) -> Any:
    """`--workers`: processes that load dumps."""
    return typer.Option("--workers", min=1, help=help)


def fsspec_option(help: str) -> Any:
    """`--storage-option KEY=VALUE`: for a URL (see `storage_options`)."""
    return typer.Option("--storage-option", metavar="KEY=VALUE", help=help)


def selected_ranks_option(help: str) -> Any:
    """`--selected-ranks 0,3-5`."""
    return typer.Option("--selected-ranks", help=help)


def last_option(help: str) -> Any:
    """`--last N`: only the newest N."""
    return typer.Option("--last", min=1, help=help)


def seq_option(help: str) -> Any:
    """`--seq A:B`: a window of sequence ids (see `seq_range`)."""
    return typer.Option("--seq", help=help)


def no_cache_option(help: str) -> Any:
    """`--no-cache`: read every dump again and keep nothing (see `rank_cache`)."""
    return typer.Option("--no-cache", help=help)


CACHE_HELP = "$XDG_CACHE_HOME/fr-analyze/ranks, else ~/.cache/fr-analyze/ranks"


def rank_cache(no_cache: bool = False) -> RankCache | None:
    """The user's cache of ranks read (`load.RankCache`), where the XDG layout puts it, that
    every command analyzing dumps reads and keeps (None with `--no-cache`)."""
    if no_cache:
        return None
    from ..load import RankCache

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return RankCache(Path(base) / "fr-analyze" / "ranks")


def storage_options(items: list[str] | None) -> dict[str, Any]:
    """`--storage-option KEY=VALUE` as fsspec's keyword arguments (VALUE as JSON if it is)."""
    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--storage-option {item!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def one_dump_dir(positional: str | None, option: str | None, command: str) -> str:
    """The dump directory of a subcommand: its first argument or -d, exactly one of them."""
    if positional is not None and option is not None:
        raise UsageError(
            f"{command}: a dump directory given twice: {positional!r} as the argument and "
            f"-d {option!r}: give one"
        )
    found = positional if positional is not None else option
    if found is None:
        raise UsageError(f"{command}: missing the dump directory (DIR or -d DIR)")
    return found


def check_selected_ranks(flag: str, selected: tuple[int, ...] | None, world_size: int) -> None:
    """`--selected-ranks` against the job: none of them in it is an error naming the job's
    ranks (`--selected-ranks 99` on 16 ranks); some outside it, a warning line."""
    if selected is None or world_size <= 0:
        return
    from ..model.ranks import compact

    outside = [r for r in selected if r >= world_size]
    job = f"this job's ranks are 0-{world_size - 1}" if world_size > 1 else "this job has rank 0"
    if len(outside) == len(selected):
        raise UsageError(
            f"{flag} {compact(selected)}: no such rank in this job ({job})",
            hint=f"give ranks from 0 to {world_size - 1}, e.g. {flag} 0-{min(world_size, 4) - 1}",
        )
    if outside:
        import sys

        sys.stderr.write(f"warning: {flag}: {compact(outside)} not in this job ({job}): left out\n")


def seq_range(text: str | None, flag: str = "--seq") -> tuple[int, int] | None:
    """`A:B` as a range of sequence ids (or of profiler steps, for `flag` --steps)."""
    if text is None:
        return None
    from ..render import timeline

    try:
        return timeline.parse_seq(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
