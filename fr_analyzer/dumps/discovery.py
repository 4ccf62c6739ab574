"""Find one dump file per rank in a source (a directory tree, an archive, a URL), whatever the
naming scheme."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import DiscoveryError
from ..ranks import MAX_RANK
from .sources import Directory, DumpFile, Listed, Source

# ---------------------------------------------------------------------------------------------
# Discovery


@dataclass(frozen=True)
class Discovery:
    files: tuple[DumpFile, ...]
    ignored: tuple[str, ...]  # files that look like rank dumps but are not of the chosen set
    source: Source
    warnings: tuple[str, ...] = ()  # members passed over: a link beside the real file, ...


_NAME_RE = re.compile(
    r"(?P<stem>.*?)(?P<rank>[0-9]+)(?P<suffix>\.(?:pkl|pickle|json))?(?:\.gz)?",
    re.DOTALL | re.ASCII,
)
_KNOWN_PREFIXES = (
    "comm_lib_trace_rank_",
    "nccl_trace_rank_",
    "hccl_trace_rank_",
    "fr_trace_rank_",
    "rank_",
)


# The debug server's periodic text dumps: `<handler>_<YYYYmmdd>_<HHMMSS>.txt`
# (torch/distributed/debug/_frontend.py), e.g. fr_trace_20261123_031502.txt.
_SERVER_REPORT = re.compile(
    r"(?:torchcomms_)?(?:fr_trace|stacks|torchcomms_health_check|wait_counters|tcpstore|"
    r"pyspy_dump)_[0-9]{8}_[0-9]{6}\.txt",
    re.ASCII,
)


def _family(stem: str) -> str:
    """Files of one dump set share a family: a known prefix, or the stem with digits folded."""
    for known in _KNOWN_PREFIXES:
        if stem.startswith(known):
            return known
    return re.sub(r"[0-9]+", "#", stem)


def _rank_of(digits: str) -> int | None:
    """The rank a file name's trailing digits give; None when absurd (beyond MAX_RANK)."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(MAX_RANK)):
        return None
    value = int(significant or "0")
    return value if value <= MAX_RANK else None


def _looks_like_dump(head: bytes) -> bool:
    """Whether a file starts like a pickle (protocol 2+), a JSON object or gzip data."""
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return head[:1] in (b"\x80", b"{") or head[:2] == b"\x1f\x8b"


def discover(where: Path | Source, prefix: str | None = None) -> Discovery:
    """One file per rank in a source (a directory, recursively; an archive; a URL); a second
    file for a rank is an error, unless one of the two can never be read (a link in an
    archive, say), which is then passed over with a warning."""
    source = Directory(where) if isinstance(where, Path) else where
    if isinstance(source, Directory) and not source.path.is_dir():
        raise DiscoveryError(f"{source.label}: not a directory")
    label = source.label
    candidates: dict[str, list[tuple[int, Listed]]] = {}
    ignored: list[str] = []
    reports: list[str] = []
    for item in source.listing(ignored):
        name = item.name.rsplit("/", 1)[-1]
        if _SERVER_REPORT.fullmatch(name):
            reports.append(name)
            continue
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
            "TORCH_FR_DUMP_TEMP_FILE or TORCHCOMM_FR_DUMP_TEMP_FILE point)"
        )
    if not candidates:
        hint = f" starting with {prefix!r}" if prefix else ""
        also = "".join(f" ({note})" for note in source.notes())
        raise DiscoveryError(f"{label}: no rank dump files{hint} found{also}")
    notes = source.notes()
    family, files = _choose_family(candidates, source)
    for other, rest in candidates.items():
        if other != family:
            ignored.extend(item.where for _, item in rest)
    by_rank: dict[int, Listed] = {}
    passed_over: list[str] = []
    for rank, item in files:
        seen = by_rank.get(rank)
        if seen is None:
            by_rank[rank] = item
        elif bool(seen.problem) != bool(item.problem):  # keep the one that can be read
            bad, by_rank[rank] = (seen, item) if seen.problem else (item, seen)
            passed_over.append(f"{bad.where} (rank {rank}) passed over: {bad.problem}")
        else:
            raise DiscoveryError(
                f"two dump files for rank {rank}: {seen.where} and {item.where}"
                " (remove one, or choose with -p/--prefix)"
            )
    return Discovery(
        tuple(source.dump_file(r, by_rank[r]) for r in sorted(by_rank)),
        tuple(sorted(ignored)),
        source,
        tuple(notes + passed_over),
    )


_Candidates = list[tuple[int, Listed]]


def _choose_family(candidates: dict[str, _Candidates], source: Source) -> tuple[str, _Candidates]:
    """The dump set: a known prefix first, then a family whose files start like dumps (so that
    thousands of unrelated numbered files do not win), then the largest family."""

    def base(item: tuple[str, _Candidates]) -> tuple[bool, int, str]:
        return (item[0] in _KNOWN_PREFIXES, len(item[1]), item[0])

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
