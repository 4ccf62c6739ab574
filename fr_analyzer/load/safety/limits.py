"""Every limit fr-analyze puts on what it reads, in one table: genuine dumps are far inside
each of them, and each one bounds what a hostile or broken input can cost.

The README's "Limits" section is this table; `tests/project/test_readme.py` checks that it
lists every field. A limit that scales with a file's size also has an absolute ceiling, and a
file's size counts by its content (a sparse file of 200 MB holding 8 bytes is 8 bytes, see
`content_bytes`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class Limits:
    """The limits on reading dumps. Each field's docstring is the README's description."""

    # --- one rank file ------------------------------------------------------------------
    max_file_bytes: int = GIB
    """Largest rank file read, counted after decompression (`--max-file-size`)."""
    gzip_max_ratio: int = 500
    """Compressed data may inflate at most this many times (dumps compress about 5-30x)..."""
    gzip_ratio_floor: int = 32 * MIB
    """...once it has produced this many bytes."""
    tar_bomb_max_bytes: int = 2 * GIB
    """A compressed tar is read in order, so a member that inflates past that ratio (a bomb)
    is skipped only by inflating it: at most this many bytes of such members in all, then
    the archive is read no further."""

    # --- one file's entries -----------------------------------------------------------------
    min_entry_bytes: int = 16
    """A file holds at most one entry per this many bytes..."""
    dense_floor: int = 10_000
    """...or this many entries, when that is more: more cannot be real entries."""
    max_seq_id: int = 1 << 62
    """Largest sequence id: a per-group counter never gets near it."""
    max_numel: int = 1 << 40
    """Most elements in one tensor shape (2**40 elements is terabytes)."""
    max_dims: int = 64
    """Most dimensions in one tensor shape."""
    max_duration_ms: float = 1e10
    """Longest duration believed (115 days); longer, negative or NaN durations count as
    unknown."""

    # --- reading a pickle ---------------------------------------------------------------
    fast_scan_tuples: int = 20_000
    """Pickles with more tuples than this (a genuine one has one per entry) get the exact
    check..."""
    max_tuple_nodes: int = 10_000
    """...that no tuple holds more than this many tuples, counted through nesting and repeats
    (hashing visits each)."""
    max_nesting: int = 64
    """Containers (or marks) nested deeper than this are left by the decoders to the general
    path, which unpickles in a worker."""
    max_entries_outside_layout: int = 256
    """Entries a decoder reads one at a time, outside the layout its expression reads: past
    this many, the unpickler is cheaper and the file is read the general way."""

    # --- a worker reading one file ------------------------------------------------------
    cpu_base_s: float = 3.0
    """CPU seconds one file may take: this much..."""
    cpu_per_mib_s: float = 0.25
    """...plus this much per MiB of content (a genuine dump needs under 0.1 s per MiB)..."""
    cpu_ceiling_s: float = 30.0
    """...and never more than this, whatever its size."""
    memory_base: int = 2 * GIB
    """Memory one file may add to its worker: this much..."""
    memory_per_byte: int = 40
    """...plus this many times its content..."""
    memory_ceiling: int = 8 * GIB
    """...and never more than this (or half the machine's memory, when that is less)."""
    unforked_expansion: int = 16
    """Where no worker can be forked (the library's `read_raw`, a daemonic process), a file
    is read in the calling process: a pickle may grow to this many times its size when
    unpickled, and one whose worst case exceeds half the memory available is refused."""
    retries: int = 1
    """A file whose worker dies (a limit, a crash) is read again this many times, each in a
    fresh worker, before it is called unreadable (its first attempt may have shared a worker
    with a file that left it short)."""

    # --- what one file may expand to ----------------------------------------------------
    expansion_factor: int = 4
    """A file's entries may expand to at most this many items (entries, shapes, dimensions,
    dtypes, frames) per byte of the file..."""
    expansion_floor: int = MIB
    """...plus this many: only a memo bomb (one list referred to many times) gets near it."""
    text_expansion_factor: int = 8
    """The text a file's entries hold as the outputs write it (names, dtypes and groups once
    per entry, each distinct stack once), in characters, may be at most this many per byte
    of the file..."""
    text_expansion_floor: int = 64 * MIB
    """...plus this many: one long string shared by every entry through memo references would
    otherwise multiply in every output (the rank is refused, with its reason)."""

    # --- a live job ----------------------------------------------------------------------
    claimed_world_factor: int = 2
    """An Execution Trace's group given by a size alone (`[]` and `group_size`, or a record's
    strided ranks), or a `fetch.json`'s world, is believed up to this many times the ranks the
    files show (their highest rank + 1); past that the job is what the files show."""
    live_max_body_bytes: int = GIB
    """Largest response read from a live job's debug server."""
    live_memory_budget: int = 2 * GIB
    """Bytes of responses one live snapshot holds in memory, across ranks and handlers; past
    it, each body goes to a file in the snapshot's folder as it arrives."""
    manifest_max_bytes: int = 16 * MIB
    """A `fetch.json` (the snapshot's manifest `live --save` writes: about 100 bytes a rank)
    larger than this is not read; one that lists ranks past its own world is not believed."""
    stacks_max_bytes: int = 64 * MIB
    """A Python stacks file larger than this is not read (the debug server's are kilobytes per
    rank)."""

    # --- URLs ---------------------------------------------------------------------------
    url_connect_timeout_s: float = 10.0
    """Seconds to connect to a URL source's server."""
    url_read_timeout_s: float = 30.0
    """Seconds a URL source's server may stay silent while sending one response."""
    listing_max_bytes: int = 16 * MIB
    """Largest directory listing (an HTML index, an object store's page) read from a URL."""
    url_min_rate: int = 32 * 1024
    """Bytes per second a URL response must average once connect and read timeouts have
    passed: a response may take those two plus its size at this rate (a 100 MB dump 50
    minutes, a 1 GiB one 9 hours), so a server dripping bytes is cut after about them."""
    listing_max_pages: int = 1000
    """Most index pages (its directory and each subdirectory) read to list an http(s) URL."""
    url_max_redirects: int = 10
    """Most redirects followed for one request to a URL source (each within its origin)."""

    # --- a replay (`fr-analyze replay`, checked before any rank starts) ------------------
    replay_ranks_per_cpu: int = 16
    """A replay spawns at most this many ranks per CPU of its host (`--max-ranks`)..."""
    replay_rank_memory: int = 512 * MIB
    """...and one per this much of its memory..."""
    replay_rank_files: int = 8
    """...and one per this many of the open-file limit (`ulimit -n`). A world claimed only by
    an unreadable file's name, beyond every rank the dumps read show, is named in the refusal
    and not believed."""
    replay_rank_threads: int = 16
    """The ranks started on one host count this many threads each..."""
    replay_group_threads: int = 4
    """...and this many more per process group each is a member of (gloo starts 3 a group):
    together at most half the user's process limit (`ulimit -u`; threads count)."""
    replay_memory_share: int = 2
    """The tensors of the ranks spawned on one host hold at most 1/this of its memory at once,
    counted after `--scale` (`--max-bytes`; with nccl, each rank's on its own GPU)."""


LIMITS = Limits()
"""The limits in force."""


def limit_names() -> tuple[str, ...]:
    """The fields of `Limits`, in order (the README's table lists each)."""
    return tuple(field.name for field in fields(Limits))


def content_bytes(path: str | os.PathLike[str]) -> int:
    """A file's size counted by its content: a sparse file's holes hold nothing, so a file
    whose blocks cover less than its length counts only the extents that hold data (found
    with SEEK_DATA/SEEK_HOLE; a filesystem that compresses also reports fewer blocks, and its
    extents still count whole). 0 for a file that cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return 0
    try:
        info = os.fstat(fd)
        blocks: int | None = getattr(info, "st_blocks", None)
        seek_data = getattr(os, "SEEK_DATA", None)
        if blocks is None or blocks * 512 >= info.st_size or seek_data is None:
            return info.st_size
        total, offset = 0, 0
        for _ in range(_MOST_EXTENTS):
            try:
                start = os.lseek(fd, offset, seek_data)
            except OSError:  # ENXIO: no data after offset
                return total
            offset = os.lseek(fd, start, os.SEEK_HOLE)
            total += offset - start
        return total + info.st_size - offset  # past that many extents, the rest counts
    except OSError:
        return 0
    finally:
        os.close(fd)


_MOST_EXTENTS = 4096


def memory_available() -> int | None:
    """Bytes of memory this machine has available now (Linux's MemAvailable), if known."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_ceiling(limits: Limits = LIMITS) -> int:
    """The absolute memory ceiling of one worker: the table's, or half this machine's
    memory when that is less."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return limits.memory_ceiling
    return min(limits.memory_ceiling, max(physical // 2, limits.memory_base))
