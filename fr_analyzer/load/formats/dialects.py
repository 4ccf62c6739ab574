"""Flight Recorder dumps written by other recorders, rewritten into PyTorch's form.

PyTorch's recorder (NCCL, gloo, XCCL, ...) is the form the rest of fr-analyze reads. Two other
recorders write the same top-level keys with other meanings (facts from their sources, see
`sample_dumps/*/NOTE.md`):

- **torchcomms** (meta-pytorch/torchcomms, `comms/torchcomms/hooks/fr/FlightRecorder.cpp`,
  `TorchComm.cpp`): `pg_config` keyed by communicator name with the backend as desc,
  `pg_status` empty. One 0-based `collective_seq_id` counter is shared by every communicator
  and by send/recv; `p2p_seq_id` is 0 and `is_p2p` False; `nccl:send`/`nccl:recv` name no peer;
  a batch of p2p ops is one `batch_op_issue` entry. An op is retired in the hook that runs when
  its call returns (`TorchComm::all_reduce` calls the backend, then `postHook` -> `retire_id`),
  so what `retired` means depends on the communicator's backend. On gloo (CPU) the call runs the
  op: retired means it finished; an unretired op is a call that never returned (a hang, or a
  call that raised: its hook never ran). With `async_op` the op runs on a thread and the call
  returns at once: retired then, not finished. On NCCL and the other GPU backends the call only
  enqueues the op: every issued op is retired, its state and discovery times are read once, at
  that moment (not at the dump), and nothing tells whether it finished; an unretired one (a call
  still inside the backend) is read at the dump, where its end event, never recorded, reads as
  completed. `timeout_ms` is a constant 600000 on every op, not the communicator's timeout.
- **HCCL** (Ascend torch_npu, `torch_npu/csrc/distributed/TraceUtils.h`, version "2.4"):
  `profiling_name` is empty for every plain op and for send/recv (only `_coalescing_manager`
  blocks get `hccl:coalesced`); the op is the innermost frame's function (`all_reduce`,
  `send`). Send/recv name no peer.

Rewritten here: per-communicator collective and p2p sequence ids (torchcomms), op names from
frames (HCCL), and peers where the group has two members (the other one); elsewhere the peer is
left unknown and the op is never paired. torchcomms ops keep no timeout; on gloo `retired` is
kept (it is PyTorch's gloo signal too: the op finished); on GPU backends `retired`, the
discovery times and the retire-time duration are cleared and the state is the one frozen at
enqueue. Where a recorder does not report completion (`reports_completion`, per backend),
progress is judged by what every rank issued (`match.completion`). What each recorder says
(`Dialect`, `reports_completion`, ...) is a fact of the model (`model.recorders`), read by match
and diagnosis too; only the rewriting is here.
"""

from __future__ import annotations

import operator
from typing import Any

from ...model.backends import KNOWN_BACKENDS
from ...model.ops import BATCH_OPS
from ...model.recorders import CALL_RUNS_OP, Dialect
from .values import parse_ranks

_P2P_FRAMES = {"send": "send", "isend": "send", "recv": "recv", "irecv": "recv"}


def detect(raw: dict[str, Any]) -> Dialect:
    """Which recorder wrote a loaded dump (its header, and its entries when they are dicts)."""
    config = raw.get("pg_config")
    status = raw.get("pg_status")
    if (
        isinstance(config, dict)
        and config
        and not status
        and all(
            isinstance(conf, dict) and conf.get("desc") in KNOWN_BACKENDS
            for conf in config.values()
        )
    ):
        return Dialect.TORCHCOMMS
    entries = raw.get("entries")
    if isinstance(entries, list) and _some_name_empty(entries):
        return Dialect.HCCL
    return Dialect.PYTORCH


_NAME = operator.methodcaller("get", "profiling_name")


def _some_name_empty(entries: list[Any]) -> bool:
    """Whether an entry's profiling_name is the empty string: in one C-level pass when every
    entry is a dict (as good as always)."""
    if set(map(type, entries)) <= {dict}:
        return "" in map(_NAME, entries)
    return any(isinstance(e, dict) and e.get("profiling_name") == "" for e in entries)


def needs_entries(header: dict[str, Any]) -> bool:
    """Whether a dump whose entries were decoded as columns must be read again as dicts to be
    rewritten (an HCCL dump is found by its entries; the column reader refuses their names)."""
    return detect(header) != Dialect.PYTORCH  # a decoded dump's header holds no entries


def rewrite(raw: dict[str, Any], rank: int, dialect: Dialect) -> list[str]:
    """Rewrite `raw` (parsed by this process) into PyTorch's form in place; notes for the
    report."""
    entries = raw.get("entries")
    if not isinstance(entries, list):
        return []
    sizes = _group_sizes(raw.get("pg_config"), rank)
    if dialect == Dialect.TORCHCOMMS:
        return _torchcomms(entries, sizes, _group_backends(raw.get("pg_config")), rank)
    if dialect == Dialect.HCCL:
        return _hccl(entries, sizes, rank)
    return []


def _group_sizes(config: Any, rank: int) -> dict[str, tuple[int, ...]]:
    """Each group's members, from pg_config, when it lists this rank."""
    out: dict[str, tuple[int, ...]] = {}
    if isinstance(config, dict):
        for key, conf in config.items():
            if isinstance(conf, dict):
                ranks = parse_ranks(conf.get("ranks"))
                name = conf.get("name", key)
                if ranks is not None and rank in ranks and isinstance(name, str):
                    out[name] = tuple(sorted(ranks))
    return out


def _group_backends(config: Any) -> dict[str, str]:
    """Each communicator's backend: torchcomms writes it as the group's desc."""
    out: dict[str, str] = {}
    if isinstance(config, dict):
        for key, conf in config.items():
            if isinstance(conf, dict):
                name, desc = conf.get("name", key), conf.get("desc")
                if isinstance(name, str) and isinstance(desc, str):
                    out[name] = desc
    return out


def _peer_name(backend: str, op: str, members: tuple[int, ...] | None, rank: int) -> str:
    """`backend:send a->b` with group-local ranks when the group has two members (the peer is
    the other one), else `backend:send` (no peer: never paired)."""
    if members is not None and len(members) == 2 and rank in members:
        me = members.index(rank)
        other = 1 - me
        return f"{backend}:send {me}->{other}" if op == "send" else f"{backend}:recv {me}<-{other}"
    return f"{backend}:{op}"


def _group_of(entry: dict[str, Any]) -> str | None:
    group = entry.get("process_group")
    if isinstance(group, list | tuple) and group and isinstance(group[0], str):
        return group[0]
    return None


def _torchcomms(
    entries: list[Any], sizes: dict[str, tuple[int, ...]], backends: dict[str, str], rank: int
) -> list[str]:
    collectives: dict[str | None, int] = {}
    p2p: dict[str | None, int] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        name = entry.get("profiling_name")
        if not isinstance(name, str):
            continue
        backend, _, op = name.partition(":")
        group = _group_of(entry)
        op = op.strip()
        _retirement(entry, backends.get(group, backend) if group is not None else backend)
        entry["timeout_ms"] = _NO_TIMEOUT
        if op in ("send", "recv") or op in BATCH_OPS:
            p2p[group] = p2p.get(group, 0) + 1
            entry["p2p_seq_id"] = p2p[group]
            entry["collective_seq_id"] = collectives.get(group, 0)
            entry["is_p2p"] = True
            if op not in BATCH_OPS:  # a batch names neither peers nor directions
                members = sizes.get(group) if group is not None else None
                entry["profiling_name"] = _peer_name(backend, op, members, rank)
        else:
            collectives[group] = collectives.get(group, 0) + 1
            entry["collective_seq_id"] = collectives[group]
            entry["p2p_seq_id"] = p2p.get(group, 0)
            entry["is_p2p"] = False
    notes = []
    records = [e.get("record_id") for e in entries if isinstance(e, dict)]
    if records and isinstance(records[0], int) and records[0] > 0:
        notes.append(
            "torchcomms buffer wrapped: sequence ids counted from the oldest op it kept, so "
            "they may not line up with other ranks'"
        )
    return notes


_NO_TIMEOUT = -1
"""torchcomms' `timeout_ms` (a constant 600000 on every op, not the communicator's timeout),
rewritten as unset (both entry readers read -1 so) rather than None, which only the slower
careful reader takes."""


def _retirement(entry: dict[str, Any], backend: str) -> None:
    """Rewrite one torchcomms entry's `retired`, state and times into what they tell. On gloo
    the call ran the op, so `retired` (the call returned) is kept: PyTorch's gloo recorder
    means the same by it. On a GPU backend the call only enqueued the op: `retired` says
    nothing of its end and is cleared; the discovery times were stamped then, not at the dump,
    and are cleared; the state stays as read at enqueue. An unretired op's end event was never
    recorded, so the dump read it as completed: only its start is kept. The duration is the
    events' only when the op had completed at enqueue, else the call's wall-clock time."""
    if backend in CALL_RUNS_OP:
        return
    if entry.get("retired") is not True and entry.get("state") == "completed":
        started = entry.get("time_discovered_started_ns") is not None
        entry["state"] = "started" if started else "scheduled"
    if entry.get("state") != "completed":
        entry.pop("duration_ms", None)
    entry["retired"] = False
    entry["time_discovered_started_ns"] = None
    entry["time_discovered_completed_ns"] = None


# Inside a coalescing block, torch's `all_gather` of uneven sizes issues a broadcast per
# member, and `reduce_scatter` a reduce: their frames name the outer call.
_IN_BLOCK = {"all_gather": "_broadcast_oop", "reduce_scatter": "_reduce_oop"}


def _hccl(entries: list[Any], sizes: dict[str, tuple[int, ...]], rank: int) -> list[str]:
    unnamed = 0
    blocks = {
        (_group_of(e), e.get("collective_seq_id"))
        for e in entries
        if isinstance(e, dict) and e.get("profiling_name") == "hccl:coalesced"
    }
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("profiling_name") != "":
            continue
        frames = entry.get("frames")
        op = None
        if isinstance(frames, list) and frames and isinstance(frames[0], dict):
            found = frames[0].get("name")
            op = found if isinstance(found, str) and found else None
        if op is None:
            unnamed += 1
            op = "unknown"
        if entry.get("is_p2p") is True and op in _P2P_FRAMES:  # a batch's members: its name
            group = _group_of(entry)
            members = sizes.get(group) if group is not None else None
            entry["profiling_name"] = _peer_name("hccl", _P2P_FRAMES[op], members, rank)
        else:
            if (_group_of(entry), entry.get("collective_seq_id")) in blocks:
                op = _IN_BLOCK.get(op, op)
            entry["profiling_name"] = f"hccl:{op}"
    notes = []
    if unnamed:
        plural = "y" if unnamed == 1 else "ies"
        notes.append(f"{unnamed} HCCL entr{plural} with no frames: op unknown")
    return notes
