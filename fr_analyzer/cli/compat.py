"""torchfrtrace's spellings on fr-analyze's command line.

Runbooks call `torchfrtrace <dir> -j --selected-ranks 0 1 --pg-filters tp dp --mismatch_cap 5`.
Underscore spellings are declared on the options themselves (`--mismatch_cap`); what click
cannot declare is rewritten here, before parsing, with the same meaning torchfrtrace's argparse
gives it:

- the dump directory as a positional argument (`fr-analyze dumps/` is `fr-analyze -d dumps/`);
- space-separated lists (`--selected-ranks 0 1 2`, `--pg-filters tp dp`), which argparse reads
  with `nargs="+"`: the following words up to the next option, as one comma-separated value.

Only the main command is rewritten; `timeline` and `merge-traces` are fr-analyze's own.

A mistyped option is refused here, naming the options it is closest to (`--jsn x.json` would
otherwise leave `x.json` to be read as a dump directory).

A first word is never guessed at: one that is neither a command nor a path that exists (nor a
URL) is refused, naming the command it is closest to (`timline` would otherwise be read as a
dump directory); a positional directory and `-d` together are refused too, rather than one of
them being dropped.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..errors import UsageError


class Command(Protocol):
    """What is read of the main command (click's group, as typer builds it)."""

    @property
    def params(self) -> Sequence[Any]:
        """The command's parameters (click's `Command.params`)."""

    @property
    def commands(self) -> Mapping[str, Any]:
        """The group's subcommands by name (click's `Group.commands`)."""


LISTS = ("--selected-ranks", "--pg-filters")
"""Options torchfrtrace reads as space-separated lists."""


def translate(argv: Sequence[str], command: Command) -> list[str]:
    """`argv` with torchfrtrace's positional directory and space-separated lists rewritten into
    fr-analyze's spellings; anything else is left for click to parse (and refuse)."""
    takes_value = _options_with_values(command)
    known = _option_names(command)
    out: list[str] = []
    directory: str | None = None
    given_dir: list[str] = []  # the values of -d/--dump-dir
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            out.extend(argv[i:])
            break
        name, eq, _ = word.partition("=")
        if name.startswith("--") and name not in known:
            close = closest_options(name, command)
            raise UsageError(
                f"no such option: {name}",
                hint=(f"did you mean {' or '.join(close)}? " if close else "")
                + "(fr-analyze --help lists every option)",
            )
        if word.startswith("-") and word != "-":
            if name in ("-d", "--dump-dir"):
                given_dir.append(word.partition("=")[2] if eq else _at(argv, i + 1))
            if name in LISTS and not eq:
                values, i = _list_after(argv, i + 1)
                if not values:  # click says what is missing
                    out.append(word)
                    continue
                if directory is None:
                    values, directory = _trailing_directory(values)
                out += [word, ",".join(values)]
                continue
            out.append(word)
            if name in takes_value and not eq and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 2
                continue
            i += 1
            continue
        if directory is None and word in command.commands:
            return [*out, *argv[i:]]  # a subcommand: its own options, untouched
        if not _names_a_source(word):
            raise UsageError(unknown_word(word, command.commands))
        if directory is not None:
            raise UsageError(
                f"two dump directories given as arguments, {_shown(directory)} and "
                f"{_shown(word)}: give one (to compare snapshots, give -d for each)"
            )
        directory = word
        i += 1
    if directory is not None:
        if given_dir:
            raise UsageError(
                f"a dump directory given twice: {_shown(directory)} as an argument and "
                f"-d {_shown(given_dir[0])}: give one (to compare snapshots, repeat -d)"
            )
        out = ["-d", directory, *out]
    return out


def unknown_word(word: str, commands: Sequence[str] | Mapping[str, Any]) -> str:
    """The message for a first word that is neither a command nor a dump directory, with the
    command it is closest to, if any."""
    close = difflib.get_close_matches(word, list(commands), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"no such command or directory {_shown(word)}{hint}"


def closest_options(name: str, command: Command) -> list[str]:
    """The long options of `command` closest to a mistyped `name` (`--jsn`: `--json`)."""
    longs = sorted(n for n in _option_names(command) if n.startswith("--"))
    return difflib.get_close_matches(name, longs, n=2, cutoff=0.6)


def _option_names(command: Command) -> set[str]:
    """Every spelling of the command's options, `--help` too."""
    found = {"-h", "--help"}
    for param in command.params:
        if param.param_type_name == "option":
            found.update(param.opts)
            found.update(param.secondary_opts)
    return found


def _names_a_source(word: str) -> bool:
    """Whether a positional word can name dumps: a path that exists, or a URL."""
    return "://" in word or os.path.exists(word)


def _shown(word: str) -> str:
    """A word of the command line, quoted, with control characters escaped."""
    return "'" + "".join(c if c.isprintable() else repr(c)[1:-1] for c in word) + "'"


def _at(argv: Sequence[str], i: int) -> str:
    return argv[i] if i < len(argv) else ""


def _options_with_values(command: Command) -> set[str]:
    """Every spelling of the main command's options that takes a value."""
    found: set[str] = set()
    for param in command.params:
        if param.param_type_name == "option" and not param.is_flag and not param.count:
            found.update(param.opts)
            found.update(param.secondary_opts)
    return found


def _list_after(argv: Sequence[str], i: int) -> tuple[list[str], int]:
    """The words from `i` up to the next option (argparse's `nargs="+"`), and where it stops."""
    values: list[str] = []
    while i < len(argv) and not (argv[i].startswith("-") and argv[i] != "-"):
        values.append(argv[i])
        i += 1
    return values, i


def _trailing_directory(values: list[str]) -> tuple[list[str], str | None]:
    """`--selected-ranks 0 1 dumps/`: argparse would take `dumps/` for one more value and then
    miss the directory; the last of several words is the directory when it is one (and not a
    rank number)."""
    last = values[-1] if values else ""
    where = os.path.isdir(last) or "://" in last or last.lower().endswith(_ARCHIVES)
    if len(values) > 1 and not last.isdigit() and where:
        return values[:-1], values[-1]
    return values, None


_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".zip")
