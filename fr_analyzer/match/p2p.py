"""Send/recv matched per channel (group, sender, receiver): the n-th send a→b with the n-th
recv on b from a; `recv x<-?` takes any sender. Mismatches and unmatched ops found."""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt

from ..model.arrays import distinct
from ..model.groups import GroupTable
from ..model.ranks import counted
from ..model.records import (
    ANY_SOURCE,
    UNKNOWN_PEER,
    Finding,
    FindingKind,
    P2PKind,
    UnitKind,
    seq_id,
)
from ..model.table import EntryTable
from .collectives import segments
from .context import MatchContext
from .records import P2P_UNITS, P2PPairs, id_type, of_kinds
from .values import TRANSFERS

I64 = npt.NDArray[np.int64]


def match_p2p(ctx: MatchContext, findings: list[Finding]) -> P2PPairs:
    """Pair the n-th send a→b with the n-th recv on b from a, per group; findings for the rest."""
    t, groups = ctx.table, ctx.groups
    entry_pair = np.full(t.n, -1, dtype=id_type(t.n))
    if not t.n:
        empty = np.zeros(0, np.int64)
        return P2PPairs(empty, empty, entry_pair)
    rows = np.flatnonzero(of_kinds(t.unit, P2P_UNITS))
    uid = groups.entry_group[rows].astype(np.int64)
    offsets = np.zeros(len(groups.groups) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([g.size for g in groups.groups])
    flat = np.array([r for g in groups.groups for r in g.ranks], dtype=np.int64)
    size = offsets[uid + 1] - offsets[uid]

    def to_global(local: I64) -> I64:
        valid = (local >= 0) & (local < size)
        out = np.where(valid, flat[offsets[uid] + np.where(valid, local, 0)], -3)
        return np.where((local == ANY_SOURCE) | (local == UNKNOWN_PEER), local, out)

    kind = t.p2p_kind[rows]
    me = t.rank[rows].astype(np.int64)
    src = to_global(t.peer_src[rows].astype(np.int64))
    dst = to_global(t.peer_dst[rows].astype(np.int64))
    send = kind == P2PKind.SEND
    # The op's own end must be the rank that recorded it; the peer must be a group member.
    src = np.where(send, me, src)
    dst = np.where(send, dst, me)
    unknown = (src == UNKNOWN_PEER) | (dst == UNKNOWN_PEER)  # the recorder keeps no peer
    bad_peer = ~unknown & ((send & (dst < 0)) | (~send & (src == -3)))
    for r in rows[bad_peer].tolist():
        g = groups.groups[int(groups.entry_group[r])]
        findings.append(
            Finding(
                FindingKind.MALFORMED_ENTRY,
                g,
                None,
                int(t.p2p_seq[r]),
                t.ops[int(t.op[r])],
                (int(t.rank[r]),),
                (int(t.rank[r]),),
                f"{t.profiling_names[int(t.pname[r])]} names a peer outside group "
                f"{g.name} of size {g.size}",
            )
        )
    world = max(groups.world_size, 1) + 1
    channel = (uid * world + np.where(src >= 0, src, world - 1)) * world + np.where(
        dst >= 0, dst, world - 1
    )
    wild = ~send & (src == ANY_SOURCE)
    usable = ~bad_peer & ~unknown
    is_wrapped = np.zeros(world, dtype=bool)
    is_wrapped[[r for r, w in ctx.wrapped.items() if w and 0 <= r < world]] = True
    sides = {}
    for name, mask in (("send", send & usable), ("recv", ~send & usable & ~wild)):
        side_rows = rows[mask]  # ascending
        side_chan = channel[mask]
        order = np.argsort(side_chan, kind="stable")  # by channel, then row
        side_rows, side_chan = side_rows[order], side_chan[order]
        starts, run = segments(side_chan)
        ordinal = np.arange(len(side_rows)) - starts[run] if len(side_rows) else run
        sides[name] = (side_rows, side_chan[starts], ordinal, starts, run)
    # Dense channel ids (over the channels, not the rows) keep the join keys below 2**63
    # whatever the world size.
    channels = distinct(np.concatenate([side[1] for side in sides.values()]))

    # Align: from the start when neither end's buffer wrapped, else by the completed ops
    # (every completed send has a completed recv; ops that fell off one buffer are not in the
    # window).
    keys = {}
    for name, (side_rows, chans, ordinal, starts, run) in sides.items():
        wrapped = is_wrapped[(chans // world) % world] | is_wrapped[chans % world]
        done = ctx.done[side_rows]
        n_done = (
            np.bincount(run, weights=done, minlength=len(starts)).astype(np.int64)
            if len(run)
            else np.zeros(0, np.int64)
        )
        shift = np.where(wrapped, n_done, 0)[run] if len(run) else run
        dense = np.searchsorted(channels, chans)[run] if len(run) else run
        # Ascending: by channel, then (within a channel) by ordinal.
        keys[name] = dense * (1 << 32) + (ordinal - shift + (1 << 31))
    s_rows, r_rows = sides["send"][0], sides["recv"][0]
    s_idx, r_idx = _sorted_intersection(keys["send"], keys["recv"])
    send_row = s_rows[s_idx]
    recv_row = r_rows[r_idx]
    _later_pairs_prove_earlier(ctx, keys["send"], s_rows, keys["recv"], r_rows)
    matched = np.zeros(t.n, dtype=bool)
    matched[send_row] = True
    matched[recv_row] = True

    # Receives from any source take the leftover sends to that rank, oldest first.
    extra_s: list[int] = []
    extra_r: list[int] = []
    wild_rows = rows[wild & usable]
    if len(wild_rows):
        leftover = [r for r in s_rows.tolist() if not matched[r]]
        for r in wild_rows.tolist():
            target, gid = int(t.rank[r]), int(groups.entry_group[r])
            candidates = [
                s
                for s in leftover
                if int(groups.entry_group[s]) == gid and _dst_of(t, groups, s) == target
            ]
            if candidates:
                s = min(candidates, key=lambda x: int(t.t_created[x]))
                leftover.remove(s)
                extra_s.append(s)
                extra_r.append(r)
                matched[s] = matched[r] = True
    ctx.wild_pairs = len(extra_s)
    send_row = np.concatenate([send_row, np.array(extra_s, np.int64)]).astype(np.int64)
    recv_row = np.concatenate([recv_row, np.array(extra_r, np.int64)]).astype(np.int64)
    entry_pair[send_row] = np.arange(len(send_row))
    entry_pair[recv_row] = np.arange(len(recv_row))

    _p2p_mismatches(ctx, send_row, recv_row, findings)
    left = usable & ~matched[rows]
    _p2p_unmatched(ctx, rows[left], src[left], dst[left], findings)
    return P2PPairs(send_row, recv_row, entry_pair)


def _later_pairs_prove_earlier(
    ctx: MatchContext, send_keys: I64, send_rows: I64, recv_keys: I64, recv_rows: I64
) -> None:
    """A channel carries its transfers in order: once a later send or recv of a channel
    completed, every earlier one on it completed too, on both sides; a side that is not done
    was dumped before it finished, a moment before its peer's dump."""
    # Per channel, the highest key with a completed op on either side.
    done_keys = np.sort(
        np.concatenate([send_keys[ctx.done[send_rows]], recv_keys[ctx.done[recv_rows]]])
    )
    if not len(done_keys):
        return
    last = np.append(np.flatnonzero(np.diff(done_keys >> 32)), len(done_keys) - 1)
    chans, highest = done_keys[last] >> 32, done_keys[last]
    for keys, rows in ((send_keys, send_rows), (recv_keys, recv_rows)):
        if not len(keys):
            continue
        channel = keys >> 32
        # One search per run of a channel (keys come by channel): thousands, not every op.
        new_run = np.ones(len(channel), dtype=bool)
        new_run[1:] = channel[1:] != channel[:-1]
        at = np.searchsorted(chans, channel[new_run])[np.cumsum(new_run) - 1]
        found = at < len(chans)
        found[found] = chans[at[found]] == channel[found]
        behind = found & (keys < np.where(found, highest[np.minimum(at, len(chans) - 1)], 0))
        ctx.done[rows[behind]] = True
    # A batched block is done when its sends and receives are: its end marker too.
    t = ctx.table
    members = np.flatnonzero((t.unit == UnitKind.BATCH_MEMBER) & (t.marker >= 0))
    if len(members):
        all_done = np.ones(t.n, dtype=bool)
        all_done[t.marker[members[~ctx.done[members]]]] = False  # not `logical_and.at`: slow
        markers = distinct(t.marker[members])
        ctx.done[markers] |= all_done[markers]


def _sorted_intersection(a: I64, b: I64) -> tuple[I64, I64]:
    """Indices of the values two ascending arrays of distinct values share, in `a` and `b`."""
    at = np.searchsorted(b, a)
    hit = at < len(b)
    hit[hit] = b[at[hit]] == a[hit]
    return np.flatnonzero(hit), at[hit]


def _dst_of(t: EntryTable, groups: GroupTable, row: int) -> int:
    g = groups.groups[int(groups.entry_group[row])]
    local = int(t.peer_dst[row])
    return g.ranks[local] if 0 <= local < g.size else -1


def _p2p_mismatches(
    ctx: MatchContext, send_row: I64, recv_row: I64, findings: list[Finding]
) -> None:
    """A matched send/recv that disagrees on shape or dtype. The side that deviates from what
    the channel carried before (earlier micro-batches), else from what channels of groups like
    this one carry, is the culprit; the detail names both ends."""
    t, groups = ctx.table, ctx.groups
    if not len(send_row):
        return
    send_value, recv_value, agree = transfer_values(t, send_row, recv_row)
    bad_size = send_value[:, 0] != recv_value[:, 0]
    bad = np.flatnonzero(~agree)
    if not len(bad):
        return
    uid = groups.entry_group[send_row].astype(np.int64)
    src, dst = t.rank[send_row].astype(np.int64), t.rank[recv_row].astype(np.int64)
    for i in bad.tolist():
        s, r = int(send_row[i]), int(recv_row[i])
        g = groups.groups[int(uid[i])]
        a, b = int(src[i]), int(dst[i])
        sent = (int(send_value[i, 0]), int(send_value[i, 1]))
        received = (int(recv_value[i, 0]), int(recv_value[i, 1]))
        reference, basis = _p2p_reference(ctx, i, uid, src, dst, send_row, send_value, agree)
        culprits: tuple[int, ...] = (a, b)
        if reference is not None and reference == sent:
            culprits = (b,)
        elif reference is not None and reference == received:
            culprits = (a,)
        kind = FindingKind.P2P_SIZE_MISMATCH if bad_size[i] else FindingKind.P2P_DTYPE_MISMATCH
        seq_on = {a: int(t.p2p_seq[s]), b: int(t.p2p_seq[r])}
        judged = (
            f"; {basis}: rank {culprits[0]} deviates"
            if len(culprits) == 1
            else "; nothing earlier tells which side deviates: both are named"
        )
        findings.append(
            Finding(
                kind,
                g,
                None,
                seq_on[culprits[0]] if len(culprits) == 1 else seq_on[a],
                "send/recv",
                (a, b),
                culprits,
                f"send {a}->{b} ({seq_id(seq_on[a], p2p=True)} on rank {a}, "
                f"{seq_id(seq_on[b])} on rank {b}): "
                f"rank {a} sends {_p2p_text(t, sent)}, rank {b} receives "
                f"{_p2p_text(t, received)}{judged}",
            )
        )


def transfer_values(
    t: EntryTable, send_row: I64, recv_row: I64
) -> tuple[I64, I64, npt.NDArray[np.bool_]]:
    """What each pair's send passes and its recv takes, (shape code, dtype code) per pair
    (a recv's output where its input is empty), and whether the two agree."""
    recv_shape = np.where(
        t.shape_numel[t.in_shape[recv_row]] > 0, t.in_shape[recv_row], t.out_shape[recv_row]
    )
    recv_dtype = np.where(
        np.array([bool(d) for d in t.dtypes], dtype=bool)[t.in_dtype[recv_row]],
        t.in_dtype[recv_row],
        t.out_dtype[recv_row],
    )
    send_value = np.stack([t.in_shape[send_row], t.in_dtype[send_row]], axis=1).astype(np.int64)
    recv_value = np.stack([recv_shape, recv_dtype], axis=1).astype(np.int64)
    return send_value, recv_value, (send_value == recv_value).all(axis=1)


def _p2p_text(t: EntryTable, value: tuple[int, int]) -> str:
    shape, dtype = value
    return f"{[list(d) for d in t.shapes[shape]]} {','.join(t.dtypes[dtype]) or '-'}"


def _p2p_reference(
    ctx: MatchContext,
    i: int,
    uid: I64,
    src: I64,
    dst: I64,
    send_row: I64,
    value: I64,
    agree: npt.NDArray[np.bool_],
) -> tuple[tuple[int, int] | None, str]:
    """What pair `i`'s channel carried in earlier transfers that agreed; failing that, the most
    common agreed transfer on groups with the same description."""
    same_channel = agree & (uid == uid[i]) & (src == src[i]) & (dst == dst[i])
    earlier = np.flatnonzero(same_channel & (send_row < send_row[i]))
    if len(earlier):
        last = int(earlier[np.argmax(send_row[earlier])])
        n = len(earlier)
        found = (int(value[last, 0]), int(value[last, 1]))
        carried = _p2p_text(ctx.table, found)
        return found, f"the channel carried {carried} in its {counted(n, 'earlier transfer')}"
    desc = ctx.groups.groups[int(uid[i])].desc
    alike = np.array([g.desc == desc for g in ctx.groups.groups], dtype=bool)[uid] & agree
    counts: Counter[tuple[int, int]] = Counter(
        zip(value[alike, 0].tolist(), value[alike, 1].tolist(), strict=True)
    )
    elsewhere = ctx.elsewhere
    if elsewhere is not None:  # the groups of that description this part does not hold
        asked = [
            (g.uid, -1, TRANSFERS)
            for g in ctx.groups.groups
            if g.desc == desc and not elsewhere.holds(g.uid)
        ]
        if not elsewhere.knows(asked):
            return None, ""
        for q in asked:
            for held, n in elsewhere.answers[q]:
                counts[held] += n
    ranked = counts.most_common(2)
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None, ""
    found, most = ranked[0]
    return found, (
        f"{counted(most, 'other transfer')} on {desc!r} groups carried "
        f"{_p2p_text(ctx.table, found)}"
    )


def _p2p_unmatched(
    ctx: MatchContext,
    rows: I64,
    src: I64,
    dst: I64,
    findings: list[Finding],
) -> None:
    """Findings for the usable p2p rows that found no partner."""
    t, groups = ctx.table, ctx.groups
    is_send = t.p2p_kind[rows] == P2PKind.SEND
    peer = np.where(is_send, dst, src)
    # A peer with no dump is reported as missing or unreadable, not here.
    keep = ~np.isin(peer, np.array(sorted(ctx.unavailable), dtype=np.int64))
    wrapped = np.array(sorted(r for r, w in ctx.wrapped.items() if w), dtype=np.int64)
    # Completed: its partner ran too, and is absent only because the peer's buffer no longer
    # (wrapped) or not yet (dumped a moment earlier) holds it.
    keep &= ~ctx.done[rows]
    del wrapped
    pending: dict[tuple[int, int, int, int], list[int]] = {}
    for row, a, b, sending in zip(
        rows[keep].tolist(),
        src[keep].tolist(),
        dst[keep].tolist(),
        is_send[keep].tolist(),
        strict=True,
    ):
        uid = int(groups.entry_group[row])
        pending.setdefault((uid, a, b, int(sending)), []).append(row)
    for (uid, a, b, sending), rows_ in sorted(pending.items()):
        g = groups.groups[uid]
        first = rows_[0]
        many = len(rows_) > 1
        sends = f"{len(rows_)} sends" if many else "a send"
        recvs = f"{len(rows_)} recvs" if many else "a recv"
        culprit: tuple[int, ...]
        ranks: tuple[int, ...]
        if sending:
            culprit = (b,)
            detail = (
                f"rank {a} posted {sends} to rank {b} ({'first ' if many else ''}at "
                f"{seq_id(int(t.p2p_seq[first]), p2p=True)}) that rank {b} never received"
            )
            ranks = (a,)
        else:
            culprit = (a,) if a >= 0 else tuple(r for r in g.ranks if r != b)
            source = f"rank {a}" if a >= 0 else "any rank"
            detail = (
                f"rank {b} posted {recvs} from {source} ({'first ' if many else ''}at "
                f"{seq_id(int(t.p2p_seq[first]), p2p=True)}) that no send matches"
            )
            ranks = (b,)
        findings.append(
            Finding(
                FindingKind.P2P_UNMATCHED,
                g,
                None,
                int(t.p2p_seq[first]),
                "send" if sending else "recv",
                ranks,
                culprit,
                detail,
            )
        )
