"""Find per-rank dump files, load them safely, and turn each into compact columns.

The package, stage by stage: `discovery` finds the files, `reading` loads one safely,
`normalize` turns it into columns, `loading` runs that over every rank (in worker processes)
and `table` merges the ranks.

Each rank's file is read (pickle through an unpickler that refuses every global, or JSON), its
format quirks normalized (tuple vs list, `0` vs None timestamps, string sequence ids, dtype as a
bare string, `nccl_version` vs `comm_lib_version`), and its entries turned into numpy columns of
integer codes with small per-rank string/shape/stack tables. Ranks load in worker processes that
send back only the columns. `merge()` then re-codes every rank's tables into global ones and
concatenates the columns into one `EntryTable` that the matcher joins on.

Hostile input is expected. Only regular files are opened; a file over `max_bytes` (or gzip data
that inflates past it, or past `GZIP_MAX_RATIO` times its compressed size) is refused. Before a
pickle is unpickled, `_scan_pickle` walks its opcodes (runs of plain opcodes are skipped by one
regular expression, so a genuine dump costs a fraction of its load time) and refuses memo
indices that would make the unpickler allocate gigabytes from a few bytes; tuples that could
be nested deeply or shared (a deep or exponential hash when used as a dict key) are checked
exactly by `_check_tuples`. Normalization reads each list once however often a pickle refers
to it, counts the items it would expand to and refuses a file whose entries expand far beyond
its size. Every string taken from a dump is made printable (control characters, lone
surrogates). A problem with one entry skips that entry; a problem with the file makes the rank
unreadable, with a reason; nothing raises past `load_rank`.
"""

from __future__ import annotations

from .common import DEFAULT_MAX_FILE_BYTES, MARKER_OPS, NO_TIME, parse_size, printable
from .discovery import Discovery, DumpFile, discover
from .loading import load_all, load_rank
from .normalize import GroupClaim, RankDump, build_rank
from .reading import NoGlobalsUnpickler, read_raw
from .table import EntryTable, TableBuilder, merge

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "MARKER_OPS",
    "NO_TIME",
    "Discovery",
    "DumpFile",
    "EntryTable",
    "GroupClaim",
    "NoGlobalsUnpickler",
    "RankDump",
    "TableBuilder",
    "build_rank",
    "discover",
    "load_all",
    "load_rank",
    "merge",
    "parse_size",
    "printable",
    "read_raw",
]
