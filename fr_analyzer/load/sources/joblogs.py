"""The job's own log, where the watchdog says which op timed out: the recorder's proof that an
op was stuck, which no dump's times can give (a file is written after its snapshot, so its
time only bounds an op's age from above).

ProcessGroupNCCL's watchdog writes, on the rank whose op ran past its timeout:

    [rank0]:[E1126 00:19:44 ...] [Rank 0] Watchdog caught collective operation timeout:
        WorkNCCL(SeqNum=10, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=6000)
        ran for 6075 milliseconds before timing out.
    [rank0]:[E1126 00:19:44 ...] [PG ID 1 PG GUID 1(mesh_tp) Rank 0]  failure detected by
        watchdog at work sequence id: 10 PG status: last enqueued work: 11, ...

(each on one line). The first names the rank, the op's sequence id and how long it ran; the
second the process group (its GUID is the group's name in the dumps). A log is read as
untrusted text: bounded in bytes and per line, numbers bounded, nothing else believed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import FrAnalyzerError

MAX_LOG_BYTES = 256 * 1024 * 1024
"""Most bytes read of one log (its head): a job's log past that is read no further."""
MAX_LINE_BYTES = 64 * 1024
"""Longest line looked at: a longer one is cut there (a stack or a tensor's repr)."""

_TIMEOUT = re.compile(
    rb"Watchdog caught collective operation timeout: Work\w*\(SeqNum=(\d{1,12}), "
    rb"OpType=(\w{1,64})[^)]{0,400}?Timeout\(ms\)=(\d{1,12})\) ran for (\d{1,12}) milliseconds"
)
_RANK = re.compile(rb"\[[Rr]ank ?(\d{1,12})\]")
_DETECTED = re.compile(
    rb"\[PG ID \d{1,12} PG GUID ([^\s()\]]{1,256})(?:\([^)\]]{0,256}\))? Rank (\d{1,12})\]\s+"
    rb"failure detected by watchdog at work sequence id: (\d{1,12})"
)


@dataclass(frozen=True)
class WatchdogTimeout:
    """One op the watchdog timed out, as the job's log says."""

    rank: int
    group: str | None  # the group's name (its GUID), where the log names it
    seq: int  # the op's collective sequence id in its group
    op: str  # as the watchdog names it (ALLREDUCE)
    ran_ms: int
    timeout_ms: int
    log: str  # the log's path, for the report


def read_job_logs(paths: Sequence[Path]) -> tuple[WatchdogTimeout, ...]:
    """Every watchdog timeout the logs at `paths` report, once each (a log that cannot be read
    is the user's to fix: `FrAnalyzerError` naming it)."""
    found: dict[tuple[int, str | None, int], WatchdogTimeout] = {}
    for path in paths:
        try:
            with path.open("rb") as handle:
                head = handle.read(MAX_LOG_BYTES)
        except OSError as exc:
            raise FrAnalyzerError(f"{path}: cannot read the job's log: {exc.strerror}") from exc
        for timeout in parse_job_log(head, str(path)):
            found.setdefault((timeout.rank, timeout.group, timeout.seq), timeout)
    # a timeout whose group a later line named replaces the one without
    named = {(t.rank, t.seq) for t in found.values() if t.group is not None}
    return tuple(t for t in found.values() if t.group is not None or (t.rank, t.seq) not in named)


def job_logs_identity(paths: Sequence[Path]) -> str | None:
    """What `read_job_logs` would read of these logs, as a digest: each one's path, size and
    modification time, and a hash of its head (the bytes read); None where one cannot be read
    (then `read_job_logs` says so)."""
    digest = hashlib.sha256(b"job logs\0")
    for path in paths:
        try:
            with path.open("rb") as handle:
                info = os.fstat(handle.fileno())
                head = handle.read(MAX_LOG_BYTES)
        except OSError:
            return None
        name = os.path.abspath(path).encode("utf-8", "surrogateescape")
        digest.update(b"%s\0%d\0%d\0" % (name, info.st_size, info.st_mtime_ns))
        digest.update(hashlib.sha256(head).digest())
    return digest.hexdigest()


def parse_job_log(text: bytes, name: str) -> list[WatchdogTimeout]:
    """The watchdog timeouts in one log's bytes, each with its group where a "failure detected
    by watchdog" line of the same rank and sequence id names it."""
    timeouts: list[tuple[int, int, str, int, int]] = []
    groups: dict[tuple[int, int], str] = {}
    for raw in text.splitlines():
        line = raw[:MAX_LINE_BYTES]
        hit = _TIMEOUT.search(line)
        if hit is not None:
            rank = _RANK.search(line)
            if rank is not None:
                seq, op, limit, ran = hit.groups()
                timeouts.append(
                    (int(rank[1]), int(seq), op.decode("ascii", "replace"), int(ran), int(limit))
                )
            continue
        detected = _DETECTED.search(line)
        if detected is not None:
            guid, rank_text, seq_text = detected.groups()
            groups[(int(rank_text), int(seq_text))] = guid.decode("utf-8", "replace")
    return [
        WatchdogTimeout(rank, groups.get((rank, seq)), seq, op, ran, limit, name)
        for rank, seq, op, ran, limit in timeouts
    ]
