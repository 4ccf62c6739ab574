"""Find one dump file per rank in a directory tree, whatever the naming scheme."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import DiscoveryError
from ..ranks import MAX_RANK
from .common import _O_FLAGS

# ---------------------------------------------------------------------------------------------
# Discovery


@dataclass(frozen=True)
class DumpFile:
    rank: int
    path: Path


@dataclass(frozen=True)
class Discovery:
    files: tuple[DumpFile, ...]
    ignored: tuple[str, ...]  # files that look like rank dumps but are not of the chosen set


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


def _walk(directory: Path, problems: list[str]) -> Iterator[Path]:
    # os.walk does not follow directory symlinks, so symlink loops cannot trap us. Directories
    # that cannot be listed are reported, not silently skipped.
    def onerror(exc: OSError) -> None:
        problems.append(f"{exc.filename} (cannot list: {exc.strerror or exc})")

    for root, dirs, names in os.walk(directory, onerror=onerror):
        dirs.sort()
        for name in sorted(names):
            yield Path(root) / name


def _rank_of(digits: str) -> int | None:
    """The rank a file name's trailing digits give; None when absurd (beyond MAX_RANK)."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(MAX_RANK)):
        return None
    value = int(significant or "0")
    return value if value <= MAX_RANK else None


def _looks_like_dump(path: Path) -> bool:
    """Whether a file starts like a pickle (protocol 2+), a JSON object or gzip data."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        fd = os.open(path, _O_FLAGS)
        try:
            head = os.read(fd, 16)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return head[:1] in (b"\x80", b"{") or head[:2] == b"\x1f\x8b"


def discover(directory: Path, prefix: str | None = None) -> Discovery:
    """One file per rank under `directory` (recursively); a second file for a rank is an error."""
    if not directory.is_dir():
        raise DiscoveryError(f"{directory}: not a directory")
    candidates: dict[str, list[DumpFile]] = {}
    ignored: list[str] = []
    reports: list[str] = []
    for path in _walk(directory, ignored):
        name = path.name
        if _SERVER_REPORT.fullmatch(name):
            reports.append(name)
            continue
        if prefix is not None:
            if not name.startswith(prefix):
                ignored.append(str(path))
                continue
            match = _NAME_RE.fullmatch(name[len(prefix) :])
            if match is None or match["stem"]:
                ignored.append(str(path))
                continue
            family = prefix
        else:
            match = _NAME_RE.fullmatch(name)
            if match is None:
                continue  # no rank number: notes, logs and the like are not candidates
            family = _family(match["stem"])
        rank = _rank_of(match["rank"])
        if rank is None:
            ignored.append(str(path))  # a "rank" beyond any job: not a rank file
            continue
        candidates.setdefault(family, []).append(DumpFile(rank, path))
    if not candidates and reports:
        raise DiscoveryError(
            f"{directory}: holds the torch.distributed debug server's text reports "
            f"({reports[0]}{' and more' if len(reports) > 1 else ''}), not per-rank dumps: "
            "pass the directory of the raw dumps instead (its per_rank/ folder, or where "
            "TORCH_FR_DUMP_TEMP_FILE or TORCHCOMM_FR_DUMP_TEMP_FILE point)"
        )
    if not candidates:
        hint = f" starting with {prefix!r}" if prefix else ""
        raise DiscoveryError(f"{directory}: no rank dump files{hint} found")
    family, files = _choose_family(candidates)
    for other, rest in candidates.items():
        if other != family:
            ignored.extend(str(f.path) for f in rest)
    by_rank: dict[int, DumpFile] = {}
    for dump_file in files:
        seen = by_rank.get(dump_file.rank)
        if seen is not None:
            raise DiscoveryError(
                f"two dump files for rank {dump_file.rank}: {seen.path} and {dump_file.path}"
                " (remove one, or choose with -p/--prefix)"
            )
        by_rank[dump_file.rank] = dump_file
    return Discovery(tuple(by_rank[r] for r in sorted(by_rank)), tuple(sorted(ignored)))


def _choose_family(candidates: dict[str, list[DumpFile]]) -> tuple[str, list[DumpFile]]:
    """The dump set: a known prefix first, then a family whose files start like dumps (so that
    thousands of unrelated numbered files do not win), then the largest family."""

    def base(item: tuple[str, list[DumpFile]]) -> tuple[bool, int, str]:
        return (item[0] in _KNOWN_PREFIXES, len(item[1]), item[0])

    ordered = sorted(candidates.items(), key=base, reverse=True)
    if len(ordered) == 1:
        return ordered[0]
    sniffed = {
        family: any(_looks_like_dump(f.path) for f in files[:3]) for family, files in ordered[:20]
    }
    return max(
        ordered,
        key=lambda item: (base(item)[0], sniffed.get(item[0], False), base(item)),
    )
