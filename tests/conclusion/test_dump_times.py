"""When was each dump taken? The files' modification times date the real NCCL dumps that the
entries alone cannot tell apart (a healthy step in flight against a watchdog's dump at a
timeout), every recorder's own rules for its `retired` flag hold, and the report says what
dated each dump.

The real dumps are `tests/data/real_nccl/`, copied from `../shared/real_nccl/` (PyTorch 2.11,
NCCL 2.28.9, one GPU; its README gives the files' modification times, which git does not keep:
the tests restore them on a copy)."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.builders import fr_json, make_dump, make_entry, write_dumps

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "data" / "real_nccl"
SAMPLES = ROOT / "sample_dumps"

MTIMES_NS = {  # ../shared/real_nccl/README.md (and tests/data/real_nccl/README.md)
    "healthy_timing": 1795652353870238300,
    "healthy_no_timing": 1795652362916532800,
    "inflight": 1795652371898341400,
    "stuck_timeout": 1795652388308192300,
    "stuck_timeout_no_timing": 1795652461524196600,
}


fr = fr_json


def real_set(tmp_path: Path, name: str, mtime_ns: int | None) -> Path:
    """A copy of a real NCCL set, its file's modification time restored (or left as the copy
    made it, when None)."""
    folder = tmp_path / name / "dumps"
    shutil.copytree(REAL / name, folder)
    if mtime_ns is not None:
        for path in folder.iterdir():
            os.utime(path, ns=(mtime_ns, mtime_ns))
    return folder


@pytest.mark.parametrize("name", ["healthy_timing", "healthy_no_timing"])
def test_real_healthy_nccl_dumps_are_ok(tmp_path: Path, name: str) -> None:
    code, text, _ = fr("-d", str(real_set(tmp_path, name, MTIMES_NS[name])))
    assert code == 0 and text.startswith("OK. ")


def test_a_real_dump_taken_in_flight_is_dated_by_its_file_and_ok(tmp_path: Path) -> None:
    """Three ops queued behind a 2 s kernel, dumped 3.5 s after the newest (timeout 120 s)."""
    code, text, report = fr("-d", str(real_set(tmp_path, "inflight", MTIMES_NS["inflight"])))
    assert code == 0, text
    assert "at most 3.5 s old" in text
    assert "dated by the file's modification time of rank 0" in text
    timing = report["verdict"]["timing"]
    assert timing["age"] == "young" and timing["stuck"] is False
    assert timing["dump_time_evidence"] == {"file_time": "0"}
    assert timing["file_times_ns"] == [MTIMES_NS["inflight"]] * 2


WATCHDOG_LOG = REAL / "stuck_timeout_watchdog_log.txt"  # what the rank printed as it aborted


@pytest.mark.parametrize("name", ["stuck_timeout", "stuck_timeout_no_timing"])
def test_a_real_watchdog_dump_alone_is_hung_but_ambiguous_its_file_time_proves_nothing(
    tmp_path: Path, name: str
) -> None:
    """The file was written 10 s after the op (timeout 6 s), but a file is written after its
    snapshot (the in-flight dump took 3.5 s): its time bounds the age from above only. The
    verdict stays the likelier one (a watchdog dumps at a timeout) and says the other."""
    code, text, report = fr("-d", str(real_set(tmp_path, name, MTIMES_NS[name])))
    assert code == 1, text
    verdict = report["verdict"]
    assert verdict["status"] == "hung"
    assert verdict["culprit_ranks"] == [0]
    assert (verdict["group"], verdict["group_desc"]) == ("1", "mesh_tp")
    assert (verdict["op"], verdict["collective_seq_id"]) == ("all_reduce", 10)
    assert verdict["timing"]["age"] == "unknown"
    assert verdict["confidence"] == "ambiguous"
    (other,) = verdict["alternatives"]
    assert other["status"] == "ok" and "in flight" in other["reading"]
    assert "watchdog timeout line in the job's log" in other["decide"]
    assert "s old when dumped" in " ".join(text.split())
    assert "confidence: ambiguous; or OK: the job's ops were in flight" in " ".join(text.split())
    if name == "stuck_timeout":  # timing on, and it stayed scheduled
        assert "the GPU never started it" in verdict["summary"]
    else:  # timing off: scheduled is all NCCL ever says
        assert "the GPU never started it" not in verdict["summary"]


def test_the_watchdogs_log_line_proves_the_real_dump_stuck(tmp_path: Path) -> None:
    """The job's log says the watchdog timed out SeqNum=10 of PG GUID 1 on rank 0: the
    recorder's own word, which no file time can give."""
    folder = real_set(tmp_path, "stuck_timeout", MTIMES_NS["stuck_timeout"])
    code, text, report = fr("-d", str(folder), "--job-log", str(WATCHDOG_LOG))
    assert code == 1, text
    verdict = report["verdict"]
    assert (verdict["status"], verdict["culprit_ranks"]) == ("hung", [0])
    assert (verdict["group"], verdict["collective_seq_id"]) == ("1", 10)
    assert verdict["timing"]["age"] == "old"
    assert verdict["confidence"] == "high" and verdict["alternatives"] == []
    assert "the job's log says the watchdog timed out rank 0's ALLREDUCE #10 after 6075 ms" in (
        " ".join(text.split())
    )


def test_a_job_log_that_is_missing_is_one_line_naming_it(tmp_path: Path) -> None:
    folder = real_set(tmp_path, "stuck_timeout", MTIMES_NS["stuck_timeout"])
    done = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", "-d", str(folder), "--job-log", "nope.log"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "nope.log" in done.stderr


def test_the_in_flight_dump_copied_without_its_time_is_unknown_and_says_so(
    tmp_path: Path,
) -> None:
    """A copy made long after (its time set far past the entries) dates nothing: the age is
    unknown, never young, the copy's time is named, and the answer says the other reading."""
    late = MTIMES_NS["inflight"] + 86_400 * 10**9
    code, _, report = fr("-d", str(real_set(tmp_path, "inflight", late)))
    assert code == 1
    verdict = report["verdict"]
    timing = verdict["timing"]
    assert timing["age"] == "unknown" and timing["dump_time_evidence"] == {"copied": "0"}
    assert "far past every entry (a copy that kept no times), not used" in timing["dump_time_basis"]
    assert verdict["confidence"] == "ambiguous"
    (other,) = verdict["alternatives"]
    assert other["status"] == "ok" and "cp -p" in other["decide"]


def test_a_copy_in_a_folder_named_by_its_time_is_dated_by_the_name(tmp_path: Path) -> None:
    """The debug server and `fr-analyze live` name snapshots by their (local) time: a copy
    that lost its file times is still dated by its folder's name."""
    import time

    late = MTIMES_NS["inflight"] + 86_400 * 10**9
    folder = real_set(tmp_path, "inflight", late)
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(MTIMES_NS["inflight"] / 1e9))
    named = folder.with_name(f"snapshot_{stamp}")
    folder.rename(named)
    code, text, report = fr("-d", str(named))
    assert code == 0, text
    timing = report["verdict"]["timing"]
    assert timing["age"] == "young" and timing["dump_time_evidence"] == {"name": "0"}
    assert "dated by the time in the file's or folder's name of rank 0" in text


def test_ignore_file_times_judges_from_the_entries_alone(tmp_path: Path) -> None:
    folder = real_set(tmp_path, "inflight", MTIMES_NS["inflight"])
    code, _, report = fr("-d", str(folder), "--ignore-file-times")
    assert code == 1 and report["verdict"]["timing"]["age"] == "unknown"


def test_a_tar_keeps_the_member_times_that_date_the_dumps(tmp_path: Path) -> None:
    folder = real_set(tmp_path, "stuck_timeout", MTIMES_NS["stuck_timeout"])
    archive = tmp_path / "stuck.tar.gz"
    subprocess.run(["tar", "czf", str(archive), "-C", str(folder.parent), "dumps"], check=True)
    code, _, report = fr("-d", str(archive))
    # dated by its member's time, an upper bound past the timeout: hung, but not proven
    assert code == 1 and report["verdict"]["timing"]["age"] == "unknown"
    assert report["verdict"]["timing"]["dump_time_evidence"] == {"file_time": "0"}


def test_a_zip_keeps_the_member_times_that_date_the_dumps(tmp_path: Path) -> None:
    """zip keeps each member's time: its extended (UTC) timestamp when the archiver writes
    one (Info-ZIP does), else its DOS time, local and cut to even seconds."""
    import struct
    import zipfile

    folder = real_set(tmp_path, "inflight", MTIMES_NS["inflight"])
    archive = tmp_path / "inflight.zip"
    seconds = -(-MTIMES_NS["inflight"] // 10**9)  # Info-ZIP keeps whole seconds
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted(folder.iterdir()):
            info = zipfile.ZipInfo(f"dumps/{path.name}", (1999, 1, 1, 0, 0, 0))  # DOS: wrong
            info.extra = struct.pack("<HHBi", 0x5455, 5, 1, seconds)  # "UT": mtime, UTC
            out.writestr(info, path.read_bytes())
    code, text, report = fr("-d", str(archive))
    assert code == 0, text
    assert report["verdict"]["timing"]["dump_time_evidence"] == {"file_time": "0"}


def test_a_zip_with_only_dos_times_dates_its_members_as_late_as_they_can_mean(
    tmp_path: Path,
) -> None:
    """Python's zipfile writes DOS times only: read as local time, rounded up (later errs
    towards "in flight" never), they still date the watchdog's dump inside its window."""
    import time
    import zipfile

    folder = real_set(tmp_path, "stuck_timeout", MTIMES_NS["stuck_timeout"])
    archive = tmp_path / "stuck.zip"
    local = time.localtime(MTIMES_NS["stuck_timeout"] / 1e9)[:6]
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted(folder.iterdir()):
            out.writestr(zipfile.ZipInfo(f"dumps/{path.name}", local), path.read_bytes())
    code, _, report = fr("-d", str(archive))
    # dated by its member's time, an upper bound past the timeout: hung, but not proven
    assert code == 1 and report["verdict"]["timing"]["age"] == "unknown"
    assert report["verdict"]["timing"]["dump_time_evidence"] == {"file_time": "0"}


def test_object_storage_listings_give_each_object_its_time() -> None:
    from datetime import UTC, datetime

    from fr_analyzer.load.sources.remote import info_time_ns

    when = datetime(2026, 11, 23, 3, 15, 2, tzinfo=UTC)
    ns = int(when.timestamp()) * 10**9
    assert info_time_ns({"LastModified": when}) == ns  # S3
    assert info_time_ns({"mtime": when.timestamp()}) == ns  # local, most others
    assert info_time_ns({"updated": "2026-11-23T03:15:02Z"}) == ns  # GCS
    assert info_time_ns({"size": 3}) is None


def _as_gloo(source: Path, target: Path, waiting: set[int]) -> None:
    """The torchcomms sample rewritten as torchcomms on gloo writes it: the same entries,
    backend gloo, every call returned (retired) but the newest of each rank in `waiting`."""
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        dump = pickle.loads(path.read_bytes())
        for config in dump["pg_config"].values():
            config["desc"] = "gloo"
        for entry in dump["entries"]:
            entry["profiling_name"] = entry["profiling_name"].replace("nccl:", "gloo:")
            entry["process_group"] = (entry["process_group"][0], "gloo")
            entry["retired"] = True
        if int(path.name.split("_")[-1]) in waiting:
            dump["entries"][-1]["retired"] = False
        (target / path.name).write_bytes(pickle.dumps(dump, protocol=2))


def test_torchcomms_on_gloo_is_not_taken_for_pytorchs_gloo_recorder(tmp_path: Path) -> None:
    """Rank 5 never issued all_reduce #5. PyTorch's gloo recorder retires an op that times
    out, so an unretired gloo op is young there; torchcomms never does (an op whose call
    raised is never retired), so nothing says its ops are young: the rank is named."""
    folder = tmp_path / "dumps" / "per_rank"
    _as_gloo(SAMPLES / "torchcomms_not_joined" / "per_rank", folder, {0, 1, 2, 3, 4, 6, 7})
    code, text, report = fr("-d", str(folder.parent))
    assert code == 1, text
    verdict = report["verdict"]
    assert verdict["status"] == "hung" and verdict["culprit_ranks"] == [5]
    assert "gloo retires" not in text


def test_pytorchs_gloo_recorder_still_tells_unretired_ops_are_young() -> None:
    code, text, report = fr("-d", str(SAMPLES / "gloo3d_mid_step"), "--ignore-file-times")
    assert code == 0, text
    assert "below their timeout (gloo retires an op that times out)" in text
    assert report["verdict"]["timing"]["dump_time_evidence"] == {"lower_bound": "0-15"}


def test_the_html_page_says_the_other_reading_in_one_line(tmp_path: Path) -> None:
    late = MTIMES_NS["inflight"] + 86_400 * 10**9
    page = tmp_path / "report.html"
    fr("-d", str(real_set(tmp_path, "inflight", late)), "--html", str(page))
    html = page.read_text()
    assert html.count('id="confidence"') == 1
    assert "confidence: ambiguous; or OK: the job&#x27;s ops were in flight" in html


def test_a_proven_hang_says_no_other_reading(tmp_path: Path) -> None:
    code, text, report = fr("-d", str(SAMPLES / "nccl3d_cascade_started"))
    assert code == 1 and report["verdict"]["confidence"] == "high"
    assert report["verdict"]["alternatives"] == [] and "confidence:" not in text


def _gloo_peers_timed_out(tmp_path: Path, late_s: float) -> Path:
    """A 4-rank gloo job (timeout 3 s) dumped with no file times: ranks 0, 1 and 3 hold
    all_reduce #1, issued at 0 s and not yet retired (each dumped from its own exception
    handler, before gloo's recorder retired the op that timed out); rank 2 issued it
    `late_s` seconds later, and it is its newest timestamp."""
    world = {"0": ("default_pg", [0, 1, 2, 3])}
    start_ns = 1_000_000_000_000

    def ops(rank: int) -> list[dict[str, Any]]:
        first = make_entry(
            "all_reduce", 0, backend="gloo", group=("0", "default_pg"), timeout_ms=3000
        )
        first["time_created_ns"] = start_ns - 10**9
        issued = start_ns + (int(late_s * 1e9) if rank == 2 else 0)
        last = make_entry(
            "all_reduce",
            1,
            backend="gloo",
            group=("0", "default_pg"),
            state="scheduled",
            retired=False,
            timeout_ms=3000,
            record_id=1,
        )
        last["time_created_ns"] = issued
        return [first, last]

    return write_dumps(tmp_path / "dumps", {r: make_dump(ops(r), world) for r in range(4)})


def test_an_unretired_gloo_op_past_its_timeout_by_the_clocks_spread_is_old(
    tmp_path: Path,
) -> None:
    """Rank 2 issued the op 6 s after its peers (timeout 3 s, clocks within 2 s): their
    unretired copies had outlived their timeout. gloo's recorder had not yet retired them;
    the timestamps win."""
    code, text, report = fr("-d", str(_gloo_peers_timed_out(tmp_path, 6.0)), "--ignore-file-times")
    assert code == 1, text
    verdict = report["verdict"]
    assert verdict["status"] == "hung" and verdict["confidence"] == "high", text
    # every member issued it and none completed it: the hang is in the op, on all of them
    assert verdict["culprit_ranks"] == [0, 1, 2, 3]
    assert "waited at least 6 s (timeout 3 s)" in text


def test_an_unretired_gloo_op_near_its_timeout_is_of_unknown_age(tmp_path: Path) -> None:
    """4 s after (timeout 3 s), within the clocks' spread of it: neither the recorder nor the
    timestamps decide; taken as stuck, with the in-flight reading beside it."""
    code, text, report = fr("-d", str(_gloo_peers_timed_out(tmp_path, 4.0)), "--ignore-file-times")
    assert code == 1, text
    assert report["verdict"]["status"] == "hung"
    assert report["verdict"]["confidence"] == "ambiguous"
    assert report["verdict"]["culprit_ranks"] == [0, 1, 2, 3]
    assert "gloo's recorder had not retired them" in text


def test_an_unretired_gloo_op_well_below_its_timeout_is_in_flight(tmp_path: Path) -> None:
    code, text, report = fr("-d", str(_gloo_peers_timed_out(tmp_path, 0.5)), "--ignore-file-times")
    assert code == 0, text
    assert report["verdict"]["status"] == "ok"
    assert report["verdict"]["culprit_ranks"] == []
    assert "gloo retires an op that times out" in text
