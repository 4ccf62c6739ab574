"""Find one dump file per rank in a source (a directory tree, an archive, a URL), whatever the
naming scheme."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from ...errors import DiscoveryError
from ...model.numbers import decimal
from ...model.ranks import MAX_RANK
from ..common import printable
from ..safety.decoders.opcodes import CODES
from ..safety.reading import wide_json
from .archives import TarArchive, ZipArchive
from .base import Directory, DumpFile, Listed, Source

# ---------------------------------------------------------------------------------------------
# Discovery

_PROTO = bytes((CODES["PROTO"],))  # a pickle's first byte


@dataclass(frozen=True)
class Discovery:
    """The rank files found in a source, what was passed over, and why."""

    files: tuple[DumpFile, ...]
    ignored: tuple[str, ...]  # files that look like rank dumps but are not of the chosen set
    source: Source
    warnings: tuple[str, ...] = ()  # members passed over: a link beside the real file, ...


_NAME_RE = re.compile(
    r"(?P<stem>.*?)(?P<rank>[0-9]+)(?P<suffix>\.(?:pkl|pickle|json|et\.json))?(?:\.gz)?",
    re.DOTALL | re.ASCII,
)
KNOWN_PREFIXES = (
    "comm_lib_trace_rank_",
    "nccl_trace_rank_",
    "hccl_trace_rank_",
    "fr_trace_rank_",
    "rank_",
    "rank-",  # Execution Traces, as PARAM and Chakra name them (rank-N.json, rank-N.et.json)
)
"""File name prefixes of the recorders and tools; what follows is the rank, or `<host>_<rank>`."""


# The debug server's periodic text dumps: `<handler>_<YYYYmmdd>_<HHMMSS>.txt`
# (torch/distributed/debug/_frontend.py), e.g. fr_trace_20261123_031502.txt.
_SERVER_REPORT = re.compile(
    r"(?:torchcomms_)?(?:fr_trace|stacks|torchcomms_health_check|wait_counters|tcpstore|"
    r"pyspy_dump)_[0-9]{8}_[0-9]{6}\.txt",
    re.ASCII,
)


def _family(stem: str) -> str:
    """Files of one dump set share a family: a known prefix, or the stem with digits folded."""
    for known in KNOWN_PREFIXES:
        if stem.startswith(known):
            return known
    return re.sub(r"[0-9]+", "#", stem)


def _rank_of(digits: str) -> int | None:
    """The rank a file name's trailing digits give; None when absurd (beyond MAX_RANK)."""
    return decimal(digits.lstrip("0") or "0", MAX_RANK)


def _looks_like_dump(head: bytes) -> bool:
    """Whether a file starts like a pickle (protocol 2+), a JSON object (in UTF-16 or UTF-32
    too, or after whitespace that fills the head) or gzip data."""
    body = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if head and not body:
        return True  # only whitespace so far: JSON's, as no pickle starts so
    return body[:1] in (_PROTO, b"{") or body[:2] == b"\x1f\x8b" or wide_json(head) is not None


def discover(where: Path | Source, prefix: str | None = None) -> Discovery:
    """One file per rank in a source (a directory, recursively; an archive; a URL). A rank
    with several files reads one (see `_preference`) and names the others in a warning; a
    file that can never be read (no regular file, a link out of the source) reads nothing."""
    source = Directory(where) if isinstance(where, Path) else where
    if isinstance(source, Directory) and not source.path.is_dir():
        raise DiscoveryError(f"{source.label}: not a directory")
    label = source.label
    candidates: dict[str, list[tuple[int, Listed]]] = {}
    ignored: list[str] = []
    reports: list[str] = []
    kineto: dict[int, Listed] = {}
    for item in source.listing(ignored):
        name = item.name.rsplit("/", 1)[-1]
        if _SERVER_REPORT.fullmatch(name):
            reports.append(name)
            continue
        if isinstance(source, Directory) and (head := _kineto_head(source, item, name)):
            found_rank = _kineto_rank(head, name)
            if found_rank is not None:
                kineto.setdefault(found_rank, item)
            continue  # a profiler trace is no rank dump: read beside the rank's trace
        if prefix is not None:
            if not name.startswith(prefix):
                ignored.append(item.where)
                continue
            match = _NAME_RE.fullmatch(name[len(prefix) :])
            if match is None or match["stem"]:
                ignored.append(item.where)
                continue
            family = prefix
        else:
            match = _NAME_RE.fullmatch(name)
            if match is None:
                continue  # no rank number: notes, logs and the like are not candidates
            family = _family(match["stem"])
        rank = _rank_of(match["rank"])
        if rank is None:
            ignored.append(item.where)  # a "rank" beyond any job: not a rank file
            continue
        candidates.setdefault(family, []).append((rank, item))
    if not candidates and reports:
        raise DiscoveryError(
            f"{label}: holds the torch.distributed debug server's text reports "
            f"({reports[0]}{' and more' if len(reports) > 1 else ''}), not per-rank dumps: "
            "pass the directory of the raw dumps instead (its per_rank/ folder, or where "
            "TORCH_FR_DUMP_TEMP_FILE or TORCHCOMM_FR_DUMP_TEMP_FILE point), or ask the "
            "running job: fr-analyze live http://<rank 0's host>:25999 --save DIR"
        )
    if not candidates:
        hint = f" starting with {prefix!r}" if prefix else ""
        also = "".join(f" ({note})" for note in source.notes())
        raise DiscoveryError(f"{label}: no rank dump files{hint} found{also}")
    family, files = _choose_family(candidates, source)
    companions, dumps = _traces_beside(candidates, source)
    if companions and _traces_only(files):  # the dumps lead; the traces go with them
        family, files = _choose_family(dumps, source)
    for other, rest in candidates.items():
        if other != family:
            ignored.extend(item.where for _, item in rest if item not in companions.values())
    by_rank: dict[int, list[tuple[int, Listed]]] = {}
    for position, (rank, item) in enumerate(files):
        by_rank.setdefault(rank, []).append((position, item))
    chosen: dict[int, Listed] = {}
    passed_over: list[str] = []
    for rank, found in by_rank.items():
        ranked = sorted(found, key=lambda pair: _preference(source, *pair), reverse=True)
        chosen[rank] = keep = ranked[0][1]
        passed_over += [_passed_over(source, rank, item, keep) for _, item in ranked[1:]]
    alone = {r: item for r, item in companions.items() if r not in chosen}
    dump_files = tuple(
        _with_kineto(
            source,
            source.dump_file(r, alone[r])  # a rank with a trace and no dump: read from its trace
            if r in alone
            else _with_trace(source, source.dump_file(r, chosen[r]), companions.get(r)),
            kineto.get(r),
        )
        for r in sorted({*chosen, *alone})
    )
    return Discovery(
        dump_files,
        tuple(sorted(ignored)),
        source,
        tuple(printable(note) for note in source.notes() + passed_over),
    )


_TRACE_NAME = re.compile(r"(?:.*\.et\.json|rank-[0-9]+\.json)(?:\.gz)?", re.DOTALL | re.ASCII)


def is_trace(name: str) -> bool:
    """Whether a file is named like an Execution Trace (`rank-3.et.json`, PARAM's
    `rank-3.json`), not like a Flight Recorder dump."""
    return _TRACE_NAME.fullmatch(name.rsplit("/", 1)[-1]) is not None


def _traces_only(found: _Candidates) -> bool:
    return all(is_trace(item.name) for _, item in found)


def _traces_beside(
    candidates: dict[str, _Candidates], source: Source
) -> tuple[dict[int, Listed], dict[str, _Candidates]]:
    """Execution Traces to read with the dumps, by rank, and the families of dumps: in a
    directory that holds both, the largest family of traces, when some other family's files
    start like dumps. Nothing when the dumps or the traces are alone."""
    if not isinstance(source, Directory):
        return {}, {}
    traces = {f: found for f, found in candidates.items() if _traces_only(found)}
    dumps = {
        f: found
        for f, found in candidates.items()
        if f not in traces and any(_looks_like_fr(source, item) for _, item in found[:3])
    }
    if not traces or not dumps:
        return {}, {}
    _, found = _choose_family(traces, source)
    return {rank: item for rank, item in sorted(found, key=lambda r: -_depth(r[1]))}, dumps


_KINETO_NAME = re.compile(
    r"(?:.*\.pt\.trace\.json|.*kineto.*\.json)(?:\.gz)?", re.DOTALL | re.ASCII
)
_KINETO_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"')
_KINETO_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*([0-9]{1,9})')


def _kineto_head(source: Directory, item: Listed, name: str) -> bytes:
    """The head of a PyTorch profiler (Kineto) trace (`*.pt.trace.json`, `kineto_rank0.json`,
    or JSON whose first keys are Kineto's), b"" for any other file. Gzip copies are taken by
    their name alone."""
    by_name = _KINETO_NAME.fullmatch(name) is not None
    if not name.endswith((".json", ".json.gz")):
        return b""
    if not by_name and (name.startswith(KNOWN_PREFIXES) or is_trace(name)):
        return b""  # a dump's or a trace's name: not opened here (thousands of them)
    if name.endswith(".gz"):
        return name.encode() if by_name else b""
    head = source.head(item, 4096)
    if head.lstrip()[:1] != b"{" or b'"nodes"' in head or b'"entries"' in head:
        return b""
    if by_name or any(key in head for key in _KINETO_KEYS):
        return head or name.encode()
    return b""


def _kineto_rank(head: bytes, name: str) -> int | None:
    """A Kineto trace's rank: its `distributedInfo`'s, else its name's trailing number."""
    found = _KINETO_RANK.search(head)
    if found is not None:
        return _rank_of(found[1].decode())
    digits = re.search(r"([0-9]+)(?:\.pt\.trace)?\.json(?:\.gz)?$", name)
    return _rank_of(digits[1]) if digits else None


def _with_kineto(source: Source, dump: DumpFile, kineto: Listed | None) -> DumpFile:
    """A rank's file with its Kineto trace beside it: its times are joined to the rank's
    Execution Trace (`traces.kineto`)."""
    if kineto is None:
        return dump
    return replace(dump, kineto=source.dump_file(dump.rank, kineto))


_FR_KEYS = (b'"entries"', b'"pg_config"', b'"version"', b'"comm_lib_version"', b'"pg_status"')


def _looks_like_fr(source: Directory, item: Listed) -> bool:
    """Whether a file beside Execution Traces is a Flight Recorder dump: a pickle or gzip
    data, or JSON whose head names a dump's keys (not a meta file of Chakra's or PARAM's
    layout, which is JSON too)."""
    head = source.head(item, 4096)
    if not _looks_like_dump(head[:16]):
        return False
    body = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if body[:1] != b"{" or wide_json(head) is not None:
        return True
    return any(key in head for key in _FR_KEYS)


def _with_trace(source: Source, dump: DumpFile, trace: Listed | None) -> DumpFile:
    """A rank's dump with its Execution Trace beside it (dumps and traces in one directory
    are read together: the dump gives states and times, the trace the older ops)."""
    if trace is None:
        return dump
    return replace(dump, trace=source.dump_file(dump.rank, trace))


def _depth(item: Listed) -> int:
    """How deep in the source a file lies: 0 at its top."""
    return len(PurePosixPath(item.name).parts) - 1


def _preference(source: Source, position: int, item: Listed) -> tuple[bool, int, float, int]:
    """Which of a rank's files is read (the largest): one that can be read, then the one
    nearest the top of the tree, then the newest (a directory's modification time), then the
    last listed (an archive's last member, as extracting it would leave it; in a directory,
    the path sorting last)."""
    recency = source.recency(item) if isinstance(source, Directory) else 0.0
    return (not item.problem, -_depth(item), recency, position)


def _passed_over(source: Source, rank: int, item: Listed, keep: Listed) -> str:
    """The warning for a file of `rank` that is not read because `keep` is."""
    if item.problem:
        return f"{item.where} (rank {rank}) passed over: {item.problem}"
    if _depth(keep) != _depth(item):
        why = "nearer the top"
    elif isinstance(source, Directory) and source.recency(keep) != source.recency(item):
        why = "modified more recently"
    elif isinstance(source, TarArchive | ZipArchive):
        why = "later in the archive, as extracting it would leave it"
    else:
        why = "its path sorts later"
    return f"{item.where} (rank {rank}) passed over: rank {rank} is read from {keep.where} ({why})"


_Candidates = list[tuple[int, Listed]]


def _choose_family(candidates: dict[str, _Candidates], source: Source) -> tuple[str, _Candidates]:
    """The dump set: a known prefix first, then a family whose files start like dumps (so that
    thousands of unrelated numbered files do not win), then the largest family."""

    def base(item: tuple[str, _Candidates]) -> tuple[bool, int, str]:
        return (item[0] in KNOWN_PREFIXES, len(item[1]), item[0])

    ordered = sorted(candidates.items(), key=base, reverse=True)
    if len(ordered) == 1:
        return ordered[0]
    sniffed = {
        family: any(_looks_like_dump(source.head(item)) for _, item in files[:3])
        for family, files in ordered[:20]
    }
    return max(
        ordered,
        key=lambda item: (base(item)[0], sniffed.get(item[0], False), base(item)),
    )
