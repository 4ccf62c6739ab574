"""`fr-analyze timeline`: a valid Chrome trace with every rank, op, flow and finding."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from fr_analyzer import analyze
from fr_analyzer.pipeline import Options
from fr_analyzer.render import timeline
from fr_analyzer.render.timeline import TimelineOptions, build, clock_offsets
from tests.render.test_database_streamed import SHOWN, streamed
from tests.trace_format import problems

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"


def load(name: str):  # type: ignore[no-untyped-def]
    return analyze(SAMPLES / name, Options(workers=1))


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()))
def test_every_sample_set_gives_a_valid_trace(name: str) -> None:
    for align in (False, True):
        trace = build(load(name), TimelineOptions(align=align))
        assert problems(trace) == []
        json.dumps(trace)


def test_one_process_per_rank_sorted_and_one_thread_per_group() -> None:
    trace = build(load("nccl_healthy"))
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    names = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert names == {r: f"rank {r}" for r in range(8)}
    order = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert order == {r: r for r in range(8)}
    threads = {e["args"]["name"] for e in meta if e["name"] == "thread_name" and e["pid"] == 0}
    assert "group 0 (default_pg)" in threads
    assert any(t.endswith("send/recv") for t in threads)


def test_every_op_is_one_slice_with_seq_ids_sizes_and_dtypes() -> None:
    analysis = load("nccl_not_joined")
    trace = build(analysis)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    heads = sum(1 for u in analysis.table.unit.tolist() if u in (0, 2, 3, 5))
    assert len(slices) == heads
    args = slices[0]["args"]
    assert {
        "collective_seq_id",
        "p2p_seq_id",
        "input_sizes",
        "output_sizes",
        "input_dtypes",
        "state",
        "retired",
    } <= set(args)


def test_ops_that_never_completed_run_to_the_dump_time_and_are_marked() -> None:
    trace = build(load("nccl_not_joined"))
    stuck = [e for e in trace["traceEvents"] if e["ph"] == "X" and not e["args"]["completed"]]
    assert {e["pid"] for e in stuck} == {0, 1, 2, 3, 4, 6, 7}
    assert all(e["cname"] == "terrible" and "(not completed)" in e["name"] for e in stuck)


def test_flows_join_collectives_across_ranks_and_sends_to_recvs() -> None:
    trace = build(load("nccl_p2p_pipeline"))
    flows = Counter((e["cat"], e["ph"]) for e in trace["traceEvents"] if e["ph"] in "stf")
    assert flows[("fr.p2p", "s")] == flows[("fr.p2p", "f")] > 0
    assert flows[("fr.collective", "s")] == flows[("fr.collective", "f")] > 0


def test_findings_and_root_cause_are_instant_events_on_the_culprit_ranks() -> None:
    analysis = load("nccl_wait_chain")
    trace = build(analysis)
    marks = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    root = [e for e in marks if e["name"].startswith("ROOT CAUSE")]
    assert [e["pid"] for e in root] == [3]
    assert "rank 3 never posted its half of" in root[0]["args"]["root_cause"]
    assert root[0]["args"]["status"] == "hung"
    culprits = Counter((r, f.kind.value) for f in analysis.findings for r in f.culprit_ranks)
    shown = Counter((e["pid"], e["name"]) for e in marks if e["cat"] == "fr.finding")
    assert shown == culprits and {r for r, _ in culprits} == {3}


def test_align_recovers_the_simulators_host_clock_offsets(tmp_path: Path) -> None:
    from tools.frsim import Layout, Output, ProgramSpec, SimSpec, simulate, write_dumps
    from tools.frsim.recorder import clock_offset

    # Hosts seconds apart, against completions the watchdog discovers up to 100 ms late: the
    # least-squares offsets come within a few tens of ms.
    spec = SimSpec(
        layout=Layout(tp=2, pp=1, dp=2, gpus_per_host=2),
        program=ProgramSpec(steps=6, micro_batches=2),
        max_clock_offset_ms=3000,
    )
    sim = simulate(spec)
    write_dumps(sim, tmp_path, Output(fmt="pickle", pattern="rank_{rank}.pkl"))
    analysis = analyze(tmp_path, Options(workers=1))
    truth = {r: clock_offset(sim.settings, r) for r in range(4)}
    offsets = clock_offsets(analysis)
    assert max(abs(v - truth[0]) for v in truth.values()) > 100_000_000  # hosts far apart
    assert set(offsets) == set(truth)
    for rank, offset in offsets.items():
        assert abs(offset - (truth[rank] - truth[0])) < 40_000_000, (rank, offset)
    trace = build(analysis, TimelineOptions(align=True))
    assert trace["otherData"]["clock_offsets_ns"]["0"] == 0


@pytest.mark.parametrize("last", [1, 3])
def test_last_n_ops_per_rank(last: int) -> None:
    trace = build(load("nccl_healthy"), TimelineOptions(last=last))
    per_rank = Counter(e["pid"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert set(per_rank.values()) == {last}
    assert problems(trace) == []


def test_seq_window_keeps_only_those_collectives() -> None:
    trace = build(load("nccl_healthy"), TimelineOptions(seq=(2, 3)))
    seqs = {e["args"]["collective_seq_id"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert seqs <= {2, 3} and seqs


def test_time_window() -> None:
    full = build(load("nccl_healthy"))
    xs = sorted(e["ts"] for e in full["traceEvents"] if e["ph"] == "X")
    mid = xs[len(xs) // 2]
    part = build(load("nccl_healthy"), TimelineOptions(end_us=mid))
    kept = [e for e in part["traceEvents"] if e["ph"] == "X"]
    assert 0 < len(kept) < len(xs)
    assert problems(part) == []


def test_cli_writes_the_trace(tmp_path: Path) -> None:
    from tests.cli.test_cli import fr_process as fr

    out = tmp_path / "timeline.json"
    result = fr(
        "timeline",
        "-d",
        str(SAMPLES / "nccl_stuck_started"),
        "-o",
        str(out),
        "--align",
        "--last",
        "5",
        "--selected-ranks",
        "0-2",
    )
    assert result.returncode == 1, result.stderr  # the analysis' code: a stuck rank
    trace = json.loads(out.read_text())
    assert problems(trace) == []
    assert {e["pid"] for e in trace["traceEvents"]} == {0, 1, 2}
    bad = fr("timeline", "-d", str(SAMPLES / "nccl_stuck_started"), "-o", str(out), "--seq", "9:3")
    assert bad.returncode == 2 and "--seq" in bad.stderr


# --- the default window past `window_past` ranks ----------------------------------------------


def test_past_the_threshold_the_trace_is_a_window_around_the_root_and_says_so() -> None:
    # GIVEN a 3D job of 16 ranks whose root cause is one rank, drawn as if 8 were many
    analysis = load("nccl3d_stall")
    root = analysis.conclusion.root
    assert root is not None and root.group is not None
    # WHEN the trace is built with no choice of what to draw
    trace = build(analysis, TimelineOptions(window_past=8))
    # THEN it keeps the culprit and the members of its groups, not the world
    drawn = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    world = len(analysis.groups.loaded_ranks)
    near = set(root.ranks)
    for g in analysis.groups.groups:
        if g.size < world and set(g.ranks) & set(root.ranks):
            near.update(g.ranks)
    assert set(root.ranks) <= drawn <= near < set(range(world))
    # AND on its peers, the root group's ops end a few sequence ids past the root's (the
    # culprit's newest ops are kept whatever they are)
    seq = root.collective_seq_id
    assert seq is not None
    in_root_group = [
        e["args"]["collective_seq_id"]
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["args"]["group"] == root.group.name and e["pid"] not in root.ranks
    ]
    assert in_root_group and max(in_root_group) <= seq + timeline.WINDOW_SEQ
    full = build(analysis, TimelineOptions(all_ranks=True))
    assert len(trace["traceEvents"]) < len(full["traceEvents"]) / 2
    # AND it says what it drew, for the CLI to print
    [note] = timeline.notes(trace)
    assert "window around the root cause" in note and "--all" in note
    assert problems(trace) == []


def test_all_ranks_draws_everything_past_the_threshold() -> None:
    analysis = load("nccl3d_stall")
    everything = build(analysis, TimelineOptions(window_past=1_000_000))
    forced = build(analysis, TimelineOptions(window_past=8, all_ranks=True))
    assert forced["traceEvents"] == everything["traceEvents"]
    assert timeline.notes(forced) == () == timeline.notes(everything)


def test_a_choice_of_what_to_draw_turns_the_window_off() -> None:
    analysis = load("nccl3d_stall")
    chosen = build(analysis, TimelineOptions(window_past=8, ranks=(0, 15)))
    assert {e["pid"] for e in chosen["traceEvents"] if e["ph"] == "X"} == {0, 15}
    assert timeline.notes(chosen) == ()


def test_without_a_root_the_window_is_the_newest_ops_of_the_first_ranks() -> None:
    analysis = load("nccl_healthy")
    trace = build(analysis, TimelineOptions(window_past=4))
    per_rank = Counter(e["pid"] for e in trace["traceEvents"] if e["ph"] == "X")
    assert set(per_rank) == {0, 1, 2, 3}
    assert max(per_rank.values()) <= timeline.WINDOW_NO_ROOT_OPS
    assert "no root cause" in timeline.notes(trace)[0]


def test_up_to_the_threshold_nothing_is_left_out() -> None:
    trace = build(load("nccl3d_stall"))
    assert timeline.notes(trace) == ()


def test_size_estimate_and_warning() -> None:
    trace = build(load("nccl3d_stall"))
    exact = len(timeline.encode(trace))
    assert timeline.estimate_bytes(trace) == exact  # small: measured whole
    assert abs(timeline.estimate_bytes(trace, sample=50) - exact) < exact * 0.3
    assert timeline.size_warning(exact) is None
    warning = timeline.size_warning(150 * 2**20)
    assert warning is not None and "150 MiB" in warning


def test_a_trace_too_big_for_a_browser_is_a_window_whatever_the_job_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a 16-rank job (fewer than 256) whose trace would pass the size a browser opens well
    analysis = load("nccl3d_stall")
    monkeypatch.setattr(timeline, "LARGE_BYTES", 10_000)
    # WHEN the trace is built with no choice of what to draw
    trace = build(analysis, TimelineOptions())
    # THEN it is the window around the root, and says why
    (note,) = timeline.notes(trace)
    assert note.startswith("about ") and "more than a browser opens well" in note
    assert "--all" in note
    # AND --all draws everything anyway
    everything = build(analysis, TimelineOptions(all_ranks=True))
    assert timeline.notes(everything) == ()
    assert len(everything["traceEvents"]) > len(trace["traceEvents"])


# --- where the engine keeps the rows ------------------------------------------------------------


@pytest.mark.parametrize("name", SHOWN)
def test_the_trace_of_the_ranks_fetched_from_where_an_engine_keeps_the_rows_is_the_tables(
    name: str,
) -> None:
    # `Analysis.calls` (a Ray cluster's rows): the job's extent summed up where the rows lie,
    # then the whole programs of the ranks drawn fetched (the window's, or every rank's)
    whole, cut = streamed(name, 37)
    assert cut.calls is not None
    chosen = (
        TimelineOptions(),
        TimelineOptions(window_past=2),  # a window around the root (or the first ranks)
        TimelineOptions(ranks=(1, 3), last=4),
        TimelineOptions(align=True),
    )
    for options in chosen:
        assert build(cut, options) == build(whole, options), options
