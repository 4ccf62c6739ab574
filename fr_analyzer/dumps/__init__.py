"""Find per-rank dump files, load them safely, and turn each into compact columns.

The package, stage by stage: `discovery` finds the files, `reading` loads one safely (a
torch-written pickle through `decode`, straight into entry columns), `normalize` turns it into
columns, `loading` runs that over every rank (in worker processes) and `table` merges the ranks.

Each rank's file is read (pickle, or JSON), its format quirks normalized (tuple vs list, `0` vs
None timestamps, string sequence ids, dtype as a bare string, `nccl_version` vs
`comm_lib_version`), and its entries turned into numpy columns of integer codes with small
per-rank string/shape/stack tables. Ranks load in worker processes that send back only the
columns (a long member list crosses once per worker, then by digest). As each rank arrives, a
`TableBuilder` re-codes its tables into global ones and writes its columns straight into the
`EntryTable` that the matcher joins on, so the parent holds one table, never a second copy.

Hostile input is expected. Only regular files are opened; a file over `max_bytes` (or gzip data
that inflates past it, or past `GZIP_MAX_RATIO` times its compressed size) is refused. A pickle
in the form torch's pickler writes is read by `decode`, whose grammar has no global, no memo
put out of order and no tuple of containers, so no bomb; its entries come back as columns, with
no unpickler and no dict per entry. Any other pickle takes the general path: before it is
unpickled, `_scan_pickle` walks its opcodes (runs of plain opcodes are skipped by one
regular expression) and refuses memo indices that would make the unpickler allocate gigabytes
from a few bytes; tuples that could be nested deeply or shared (a deep or exponential hash when
used as a dict key) are checked exactly by `_check_tuples`. A pickle whose walk reaches STOP
without any opcode that reaches for a global, an extension or a persistent id is loaded by the
plain C unpickler; any other through `NoGlobalsUnpickler`, which refuses every global.
Normalization reads each list once however often a pickle refers to it, counts the items it
would expand to and refuses a file whose entries expand far beyond its size. Every string
taken from a dump is made printable (control characters, lone surrogates). A problem with one
entry skips that entry; a problem with the file makes the rank unreadable, with a reason;
nothing raises past `load_rank`.
"""

from __future__ import annotations

from .common import DEFAULT_MAX_FILE_BYTES, MARKER_OPS, NO_TIME, parse_size, printable
from .discovery import Discovery, DumpFile, discover
from .loading import load_all, load_rank
from .normalize import GroupClaim, RankDump, build_rank
from .reading import NoGlobalsUnpickler, read_raw
from .table import EntryTable, TableBuilder, rank_starts

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
    "parse_size",
    "printable",
    "rank_starts",
    "read_raw",
]
