"""Find per-rank dump files, load them safely, and turn each into compact columns.

This module is the face of `load`: every other stage imports `fr_analyzer.load` and nothing
under it (tests/project/test_layout.py keeps it so). Behind the face, three wings:

- `sources/`: where the bytes come from (a directory, an archive, a URL, a live job's debug
  server) and the files beside the dumps (job logs, stamps in names, hosts, Python stacks);
- `safety/`: the only door from bytes to objects (`door`, the `decoders`), one file read within
  the limits and its opcode scan (`reading`), the `sandbox` and the one table of `limits`;
  safety-critical, its README.md says what a change there must show;
- `formats/`: what the objects mean: `normalize`, the column readers, the entry `schema`, the
  table builder, and dumps of other recorders, torchft jobs and Execution Traces rewritten into
  PyTorch's form.

`loading` (beside the face) drives the three over every rank; `common` holds what they share.

The stages, in the order a file meets them: `opening` picks the source a path or URL names,
and `base` (a directory), `archives` (a tar or zip archive) or `remote` (an fsspec URL) lists
it and says how each file is read, within `limits` (the table of every limit); `discovery`
finds the rank files in it; `sandbox` runs the reading in worker processes that a hostile file
can only kill; `reading` loads one file (gzip, JSON, pickle), every object built through
`door`, the one door where bytes become objects; `normalize` turns its header and entries into
a `RankDump` (`model.dump`), its entries read by the fastest reader that takes them; `loading`
runs that over every rank; `table` merges the ranks into one `EntryTable`. `schema` is the
one table of an entry's keys that every reader follows.

Three readers, fastest first, and each rank records which one read it (`Reader`) and why a
faster one did not: the decoders read a dump laid out the way its writer lays it out straight
into columns, with no unpickler or JSON parser over the entries and no dict per entry
(`decoders`: one reader per format, `decode` for torch's pickler, `decode_python` for Python's,
`decode_json` for torch's JSON or Python's `json`, over the `opcodes`, `grammar`, `machine`
(the one exact stack machine) and `columns` they share); a reader that does not read a file
raises `outcomes.NotDecoded`, whose `Fallback` reason every decision is made on; `columnar`
reads unpickled or parsed JSON entries one key at a time, each distinct value validated once;
`careful` reads anything else entry by entry and names every problem. The report's warnings
name ranks that fell to the careful reader, and why.

Hostile input is expected. Only regular files are opened; a file over `max_bytes` (or gzip
data that inflates past it, or past `GZIP_MAX_RATIO` times its compressed size) is refused.
The decoder's grammar has no global, no memo put out of order and no tuple of containers, so
no bomb. Every other pickle, whatever a scan says of it, is unpickled by `door`'s
`NoGlobalsUnpickler`, which refuses every global and persistent id,
in a worker process limited in CPU time and address space: a tuple that takes forever to
hash, one nested deep enough to crash, or a memo index that allocates gigabytes costs that
worker its file, and an opcode scan (`reading.explain_pickle`) then says which bomb it was.
In a process that must survive any file (no fork, or `load_rank` called directly) the scan
runs before unpickling instead. Normalization checks a value's type before it hashes it,
reads each list once however often a pickle refers to it, counts the items it would expand
to, and refuses a file whose entries expand far beyond its size. Every string taken from a
dump is made printable. A problem with one entry skips that entry; a problem with the file
makes the rank unreadable, with a reason; nothing raises past `load_rank`.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from ..model.dump import COLUMNS, GroupClaim, RankColumns, RankDump, RankTables, Reader
from ..model.ops import MARKER_OPS
from ..model.table import EntryTable, rank_starts
from .cache import RankCache, RankSink
from .common import DEFAULT_MAX_FILE_BYTES, NO_TIME, file_kind, parse_size, printable
from .formats.lists import Lists
from .formats.normalize import build_rank
from .formats.table import RECODED, ROW_BYTES, TableBuilder, rank_maps, recode
from .formats.traces import CUT_NOTE as TRACE_CUT_NOTE
from .kept import Kinds, Unkeepable, kinds_of
from .kept import decode as decode_kept
from .kept import encode as encode_kept
from .loading import (
    Settled,
    load_all,
    load_rank,
    with_settled_groups,
    with_shown,
    within_the_job,
)
from .safety.door import NoGlobalsUnpickler, parse_json, unpickle
from .safety.limits import LIMITS, Limits
from .safety.reading import read_raw
from .sources.base import Directory, DumpFile, Source
from .sources.discovery import Discovery, discover
from .sources.joblogs import WatchdogTimeout, job_logs_identity, read_job_logs
from .sources.manifest import MANIFEST, read_manifest
from .sources.opening import open_source
from .sources.pystacks import PythonStacks
from .sources.pystacks import find as find_python_stacks
from .sources.remote import Remote
from .sources.stamps import name_time_ns

if TYPE_CHECKING:
    from .sources import live


def __getattr__(name: str) -> ModuleType:
    """`live` (the client of a running job's debug server, with asyncio) on first use: the
    analysis of a folder reads its manifest (`sources.manifest`) and never needs the client."""
    if name == "live":
        from .sources import live

        return live
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COLUMNS",
    "DEFAULT_MAX_FILE_BYTES",
    "LIMITS",
    "MANIFEST",
    "MARKER_OPS",
    "NO_TIME",
    "RECODED",
    "ROW_BYTES",
    "TRACE_CUT_NOTE",
    "Directory",
    "Discovery",
    "DumpFile",
    "EntryTable",
    "GroupClaim",
    "Kinds",
    "Limits",
    "Lists",
    "NoGlobalsUnpickler",
    "PythonStacks",
    "RankCache",
    "RankColumns",
    "RankDump",
    "RankSink",
    "RankTables",
    "Reader",
    "Remote",
    "Settled",
    "Source",
    "TableBuilder",
    "Unkeepable",
    "WatchdogTimeout",
    "build_rank",
    "decode_kept",
    "discover",
    "encode_kept",
    "file_kind",
    "find_python_stacks",
    "job_logs_identity",
    "kinds_of",
    "live",
    "load_all",
    "load_rank",
    "name_time_ns",
    "open_source",
    "parse_json",
    "parse_size",
    "printable",
    "rank_maps",
    "rank_starts",
    "read_job_logs",
    "read_manifest",
    "read_raw",
    "recode",
    "unpickle",
    "with_settled_groups",
    "with_shown",
    "within_the_job",
]
