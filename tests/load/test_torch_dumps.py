"""Dumps written by torch 2.13 itself (a real 4-rank gloo job, tests/data/torch213/, made by
tools/make_torch_fixtures.py): they take the fast decoder and give what the unpickler gives, the
JSON of a moment gives the pickle's entries, and the CLI gives the answer each NOTE.md expects.

Each set's NOTE.md says what the job did and what gloo's recorder wrote, and ends with one
`EXPECTED:` line written by the generator, never by fr-analyze.
"""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer.load import DumpFile, build_rank, discover, load_rank
from fr_analyzer.load.safety.decoders.columns import Decoded
from fr_analyzer.load.safety.decoders.decode import decode_torch
from fr_analyzer.load.safety.decoders.decode_json import decode_json_layout
from fr_analyzer.model.dump import RankDump, Reader
from fr_analyzer.model.records import State
from tests.builders import or_why
from tests.load.safety.test_decode import by_decoder, by_unpickler, same_rank

DATA = Path(__file__).resolve().parents[1] / "data" / "torch213"
PICKLE_SETS = ("healthy_pickle", "stuck_pickle", "coalesced_all_gather_pickle")
WORLD_SIZE = 4

# Each known gap between what fr-analyze answers and what the set's NOTE.md expects, with the
# reason; strict, so that the fix turns the test red until its mark is removed. (None now: the
# coalesced all_gather set, read as a size mismatch of every rank until the recorder's layouts
# were learned from the evidence, is answered right.)
KNOWN_WRONG: dict[str, str] = {}


def rank_files(name: str) -> list[DumpFile]:
    files = list(discover(DATA / name).files)
    assert sorted(f.rank for f in files) == list(range(WORLD_SIZE)), name
    return files


def loaded(file: DumpFile) -> RankDump:
    dump = load_rank(file)
    assert isinstance(dump, RankDump), dump
    return dump


def entry_rows(dump: RankDump) -> list[tuple[Any, ...]]:
    """Every entry as fr-analyze read it, its codes resolved to names, shapes and dtypes."""
    c, t = dump.columns, dump.tables
    assert c is not None and t is not None
    return [
        (
            int(c.record_id[i]),
            dump.groups[c.group[i]],
            t.ops[c.op[i]],
            t.profiling_names[c.pname[i]],
            int(c.coll_seq[i]),
            int(c.p2p_seq[i]),
            int(c.op_id[i]),
            State(int(c.state[i])),
            bool(c.retired[i]),
            t.shapes[c.in_shape[i]],
            t.shapes[c.out_shape[i]],
            t.dtypes[c.in_dtype[i]],
            t.dtypes[c.out_dtype[i]],
            int(c.t_created[i]),
            int(c.t_started[i]),
            int(c.t_completed[i]),
            int(c.timeout_ms[i]),
        )
        for i in range(c.n)
    ]


def expected(name: str) -> dict[str, str]:
    """The fields of the set's `EXPECTED:` line ("-" for none)."""
    (line,) = re.findall(r"^EXPECTED: (.*)$", (DATA / name / "NOTE.md").read_text(), re.M)
    return dict(item.split("=", 1) for item in line.split())


def fr_json(dump_dir: Path, tmp_path: Path) -> tuple[int, dict[str, Any], str]:
    """Run the CLI on a dump directory: exit code, JSON report, stderr."""
    out = tmp_path / "report.json"
    args = ["-d", str(dump_dir), "--json", str(out), "--workers", "1"]
    result = subprocess.run(
        [sys.executable, "-m", "fr_analyzer", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(out.read_text()) if out.exists() else {}
    return result.returncode, report, result.stderr


def test_every_set_holds_one_dump_per_rank_and_a_note_with_its_expected_answer() -> None:
    sets = sorted(p.name for p in DATA.iterdir() if p.is_dir())
    assert sets == sorted([*PICKLE_SETS, "healthy_json"])
    for name in sets:
        rank_files(name)
        assert set(expected(name)) == {"status", "root", "culprits", "group", "desc", "seq", "op"}


@pytest.mark.parametrize("name", PICKLE_SETS)
def test_torch_written_pickles_take_the_decoder_and_give_what_the_unpickler_gives(
    name: str,
) -> None:
    for file in rank_files(name):
        data = file.path.read_bytes()
        assert isinstance(or_why(decode_torch)(data), Decoded), file.path.name
        same_rank(by_decoder(data, file.rank), by_unpickler(data, file.rank))
        assert pickle.loads(data)["entries"], file.path.name


def test_torch_written_json_takes_the_decoder_and_gives_what_json_loads_gives() -> None:
    for file in rank_files("healthy_json"):
        data = file.path.read_bytes()
        decoded = or_why(decode_json_layout)(data)
        assert isinstance(decoded, Decoded), decoded
        by_json = build_rank(json.loads(data), file.rank, "f", nbytes=len(data))
        same_rank(build_rank(decoded, file.rank, "f", nbytes=len(data)), by_json)
        assert json.loads(data)["entries"], file.path.name


def test_torch_written_dumps_are_read_by_the_decoder() -> None:
    for name in [*PICKLE_SETS, "healthy_json"]:
        for file in rank_files(name):
            dump = loaded(file)
            assert dump.reader is Reader.DECODER, (file.path, dump.fallback)


def test_the_json_of_a_moment_gives_the_entries_of_the_pickle_of_that_moment() -> None:
    # GIVEN each rank's pickle and the JSON it wrote right after it, nothing running between
    pickles = {f.rank: loaded(f) for f in rank_files("healthy_pickle")}
    jsons = {f.rank: loaded(f) for f in rank_files("healthy_json")}
    for rank in range(WORLD_SIZE):
        # THEN every entry reads the same: ids, groups, ops, seq ids, states, retired, shapes,
        # dtypes, and timestamps (JSON's 0 for an unset discovery time reads as the pickle's None)
        rows = entry_rows(pickles[rank])
        assert len(rows) == 26
        assert entry_rows(jsons[rank]) == rows
        assert (pickles[rank].version, pickles[rank].comm_lib_version) == ("2.10", "")
        assert (jsons[rank].version, jsons[rank].comm_lib_version) == ("2.10", "")
        assert jsons[rank].pg_status == pickles[rank].pg_status
        assert jsons[rank].groups == pickles[rank].groups


def test_gloo_entries_read_as_scheduled_collectives_retired_when_done() -> None:
    """What the generator checked gloo writes, as fr-analyze reads it: collectives only, state
    always scheduled, no p2p seq ids, the pair subgroups on their two ranks only."""
    for file in rank_files("healthy_pickle"):
        rows = entry_rows(loaded(file))
        assert {r[7] for r in rows} == {State.SCHEDULED}
        assert all(r[8] for r in rows)  # retired
        assert {r[5] for r in rows} == {0}  # p2p seq ids
        assert {r[3].split(":")[0] for r in rows} == {"gloo"}
        ops = {r[2] for r in rows}
        assert ops == {
            "all_reduce", "broadcast", "all_gather", "reduce", "gather", "scatter",
            "all_to_all", "barrier",
        }  # fmt: skip
        pair = ("1", "pair_0_1") if file.rank < 2 else ("2", "pair_2_3")
        assert {r[1] for r in rows} == {("0", "default_pg"), pair}
        world = [r[4] for r in rows if r[1][0] == "0"]
        assert world == list(range(1, 25))


def test_gloo_pg_status_counts_op_ids_and_is_read_as_seq_ids() -> None:
    """gloo's pg_status counts op ids, which the send/recv it does not record advance too:
    rank 2 stopped before world all_reduce #25 after enqueuing op id 30 (seq 24)."""
    dump = loaded(next(f for f in rank_files("stuck_pickle") if f.rank == 2))
    world = dump.groups.index(("0", "default_pg"))
    assert dump.pg_status[world][0] == 24


def _answer_cases() -> list[Any]:
    cases = []
    for name in ("healthy_pickle", "healthy_json", "stuck_pickle", "coalesced_all_gather_pickle"):
        marks = []
        if name in KNOWN_WRONG:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[name]))
        cases.append(pytest.param(name, marks=marks, id=name))
    return cases


@pytest.mark.parametrize("name", _answer_cases())
def test_cli_gives_the_answer_the_note_expects(name: str, tmp_path: Path) -> None:
    want = expected(name)
    code, report, stderr = fr_json(DATA / name, tmp_path)
    assert [line for line in stderr.splitlines() if not line.startswith("wrote ")] == []
    verdict = report["verdict"]
    assert verdict["status"] == want["status"], verdict["summary"]
    assert code == (0 if want["status"] == "ok" else 1)
    assert report["dumps"]["ranks_loaded"] == list(range(WORLD_SIZE))
    if want["status"] == "ok":
        return
    assert verdict["root_cause"] == want["root"], verdict["summary"]
    assert verdict["culprit_ranks"] == [int(r) for r in want["culprits"].split(",")]
    assert (verdict["group"], verdict["group_desc"]) == (want["group"], want["desc"])
    assert verdict["collective_seq_id"] == int(want["seq"])
    assert verdict["op"] == want["op"]


def test_stuck_set_names_rank_2_hung_in_the_world_all_reduce() -> None:
    """The stuck set's expectation, spelled out: rank 2 never issued all_reduce #25 of the world
    group, and ranks 0, 1, 3 did (and timed out in it)."""
    assert expected("stuck_pickle") == {
        "status": "hung",
        "root": "not_joined",
        "culprits": "2",
        "group": "0",
        "desc": "default_pg",
        "seq": "25",
        "op": "all_reduce",
    }
    last = {f.rank: entry_rows(loaded(f))[-1] for f in rank_files("stuck_pickle")}
    assert {rank: (row[1][0], row[2], row[4]) for rank, row in last.items()} == {
        0: ("0", "all_reduce", 25),
        1: ("0", "all_reduce", 25),
        2: ("0", "barrier", 24),
        3: ("0", "all_reduce", 25),
    }
