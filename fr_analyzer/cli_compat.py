"""torchfrtrace's spellings on fr-analyze's command line.

Runbooks call `torchfrtrace <dir> -j --selected-ranks 0 1 --pg-filters tp dp --mismatch_cap 5`.
Underscore spellings are declared on the options themselves (`--mismatch_cap`); what click
cannot declare is rewritten here, before parsing, with the same meaning torchfrtrace's argparse
gives it:

- the dump directory as a positional argument (`fr-analyze dumps/` is `fr-analyze -d dumps/`);
- space-separated lists (`--selected-ranks 0 1 2`, `--pg-filters tp dp`), which argparse reads
  with `nargs="+"`: the following words up to the next option, as one comma-separated value.

Only the main command is rewritten; `timeline` and `merge-traces` are fr-analyze's own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class Command(Protocol):
    """What is read of the main command (click's group, as typer builds it)."""

    @property
    def params(self) -> Sequence[Any]: ...

    @property
    def commands(self) -> Mapping[str, Any]: ...


LISTS = ("--selected-ranks", "--pg-filters")
"""Options torchfrtrace reads as space-separated lists."""


def translate(argv: Sequence[str], command: Command) -> list[str]:
    """`argv` with torchfrtrace's positional directory and space-separated lists rewritten into
    fr-analyze's spellings; anything else is left for click to parse (and refuse)."""
    takes_value = _options_with_values(command)
    out: list[str] = []
    directory: str | None = None
    given_dir = False
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            out.extend(argv[i:])
            break
        name, eq, _ = word.partition("=")
        if word.startswith("-") and word != "-":
            if name in ("-d", "--dump-dir"):
                given_dir = True
            if name in LISTS and not eq:
                values, i = _list_after(argv, i + 1)
                if not values:  # click says what is missing
                    out.append(word)
                    continue
                if directory is None and not given_dir:
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
        if directory is None and not given_dir:
            directory = word
        else:
            out.append(word)  # click refuses it, naming it
        i += 1
    if directory is not None:
        out = ["-d", directory, *out]
    return out


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
