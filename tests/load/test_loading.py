"""Loader: file discovery, safe unpickling, JSON/pickle normalization, unreadable files."""

from __future__ import annotations

import copy
import gc
import gzip
import json
import multiprocessing
import os
import pickle
from pathlib import Path
from typing import NoReturn

import numpy as np
import pytest

from fr_analyzer import analyze
from fr_analyzer.errors import DiscoveryError, DumpError
from fr_analyzer.load import TableBuilder, build_rank, discover, load_rank, read_raw
from fr_analyzer.load.loading import _pack_arrays, _unpack_arrays
from fr_analyzer.load.sources import hosts
from fr_analyzer.model.dump import RankDump, Reader
from fr_analyzer.model.records import FindingKind, UnreadableDump
from fr_analyzer.pipeline import Options
from tests.builders import make_dump, make_entry, renumber, write_dumps

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"

TWO = {"0": ("default_pg", [0, 1])}


def dump_bytes() -> bytes:
    return pickle.dumps(make_dump([make_entry()], TWO))


@pytest.mark.parametrize(
    "names",
    [
        ["rank_0", "rank_1"],
        ["rank_0.pkl", "rank_1.pkl"],
        ["rank_0.pickle", "rank_1.pickle"],
        ["nccl_trace_rank_0", "nccl_trace_rank_1"],
        ["comm_lib_trace_rank_0", "comm_lib_trace_rank_1"],
        ["nccl_trace_rank_container-node07_0", "nccl_trace_rank_container-node08_1"],
        ["rank_0.pkl.gz", "rank_1.pkl.gz"],
    ],
)
def test_discovery_finds_one_file_per_rank_whatever_the_naming(
    tmp_path: Path, names: list[str]
) -> None:
    for name in names:
        data = dump_bytes()
        (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (tmp_path / "NOTE.md").write_text("not a dump")
    found = discover(tmp_path)
    assert [f.rank for f in found.files] == [0, 1]
    assert found.ignored == ()


def test_discovery_is_recursive(tmp_path: Path) -> None:
    (tmp_path / "host_a").mkdir()
    (tmp_path / "host_b").mkdir()
    (tmp_path / "host_a" / "rank_0").write_bytes(dump_bytes())
    (tmp_path / "host_b" / "rank_1").write_bytes(dump_bytes())
    assert [f.rank for f in discover(tmp_path).files] == [0, 1]


def test_two_files_for_one_rank_at_one_depth_read_the_newest_naming_the_other(
    tmp_path: Path,
) -> None:
    (tmp_path / "rank_3.pkl").write_bytes(dump_bytes())
    (tmp_path / "rank_3.json").write_text("{}")
    os.utime(tmp_path / "rank_3.json", (1_000_000_000, 1_000_000_000))
    found = discover(tmp_path)
    assert [f.path.name for f in found.files] == ["rank_3.pkl"]
    assert any(
        "rank_3.json (rank 3) passed over: rank 3 is read from" in warning
        for warning in found.warnings
    ), found.warnings


def test_prefix_option_chooses_the_files(tmp_path: Path) -> None:
    (tmp_path / "rank_0.pkl").write_bytes(dump_bytes())
    (tmp_path / "trace_0.pkl").write_bytes(dump_bytes())
    (tmp_path / "trace_1.pkl").write_bytes(dump_bytes())
    found = discover(tmp_path, prefix="trace_")
    assert [f.path.name for f in found.files] == ["trace_0.pkl", "trace_1.pkl"]


def test_empty_directory_is_a_discovery_error(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="no rank dump files"):
        discover(tmp_path)


def test_symlink_loops_do_not_hang_discovery(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(dump_bytes())
    os.symlink(tmp_path, tmp_path / "loop")
    assert [f.rank for f in discover(tmp_path).files] == [0]


class Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch MARKER",))


def test_pickle_with_a_global_is_refused_without_running_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "rank_0"
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": [Boom()]}))
    result = load_rank(discover(tmp_path).files[0])
    assert isinstance(result, UnreadableDump)
    assert "refused to load global" in result.reason
    assert "system" in result.reason
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file"),
        (dump_bytes()[:40], "truncated"),
        (b"hello world, not a dump", "not a valid dump pickle"),
        (b"{not json", "malformed JSON"),
        (pickle.dumps([1, 2, 3]), "not a Flight Recorder dump"),
        (pickle.dumps({"something": "else"}), "not a Flight Recorder dump"),
        (gzip.compress(b"", mtime=0)[:10], "bad gzip data"),
    ],
)
def test_bad_files_are_reported_with_their_reason(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    (tmp_path / "rank_0").write_bytes(dump_bytes())
    (tmp_path / "rank_1").write_bytes(content)
    analysis = analyze(tmp_path, Options(workers=1))
    assert analysis.summary.ranks_loaded == (0,)
    (bad,) = analysis.summary.unreadable
    assert bad.rank == 1 and bad.file.endswith("rank_1")
    assert reason in bad.reason
    unreadable = [f for f in analysis.findings if f.kind == FindingKind.UNREADABLE_DUMP]
    assert unreadable[0].culprit_ranks == (1,)


def test_no_readable_dump_at_all_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(b"")
    with pytest.raises(DiscoveryError, match="no readable rank dump"):
        analyze(tmp_path, Options(workers=1))


def test_read_errors_name_the_file_and_rank(tmp_path: Path) -> None:
    path = tmp_path / "rank_7"
    path.write_bytes(b"\x80\x04")
    with pytest.raises(DumpError) as err:
        read_raw(path, 7)
    assert str(err.value).startswith(f"{path} (rank 7): ")


def test_garbage_collector_is_never_left_disabled(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(dump_bytes())
    (tmp_path / "rank_1").write_bytes(dump_bytes()[:30])
    assert gc.isenabled()
    analyze(tmp_path, Options(workers=1))
    assert gc.isenabled()
    with pytest.raises(DumpError):
        read_raw(tmp_path / "rank_1", 1)
    assert gc.isenabled()


def test_json_and_pickle_flavours_normalize_to_the_same_analysis(tmp_path: Path) -> None:
    entries = [
        make_entry("all_reduce", 0),
        make_entry("all_reduce", 1, state="scheduled", retired=False),
    ]
    pkl = tmp_path / "pkl"
    js = tmp_path / "json"
    pkl.mkdir()
    js.mkdir()
    for rank in (0, 1):
        dump = make_dump([dict(e) for e in entries], TWO)
        (pkl / f"rank_{rank}.pkl").write_bytes(pickle.dumps(dump))
        # JSON flavour: lists for tuples, 0 for unset times, string seq ids and pg_status.
        jdump = json.loads(json.dumps(dump))
        for e in jdump["entries"]:
            e["collective_seq_id"] = str(e["collective_seq_id"])
            e["time_discovered_started_ns"] = 0
            if e["time_discovered_completed_ns"] is None:
                e["time_discovered_completed_ns"] = 0
        jdump["nccl_version"] = jdump.pop("comm_lib_version")
        (js / f"rank_{rank}.json").write_text(json.dumps(jdump))
    a = analyze(pkl, Options(workers=1))
    b = analyze(js, Options(workers=1))
    assert a.findings == b.findings == ()
    assert list(a.table.t_completed) == list(b.table.t_completed)
    assert a.summary.comm_lib_versions == b.summary.comm_lib_versions == ("2.21.5",)


def test_dtype_given_as_a_bare_string_or_a_list_is_the_same(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(pickle.dumps(make_dump([make_entry(in_dtypes="Float")], TWO)))
    (tmp_path / "rank_1").write_bytes(
        pickle.dumps(make_dump([make_entry(in_dtypes=["Float"])], TWO))
    )
    assert analyze(tmp_path, Options(workers=1)).findings == ()


def test_different_format_versions_are_reported_and_analysis_proceeds(tmp_path: Path) -> None:
    (tmp_path / "rank_0").write_bytes(pickle.dumps(make_dump([make_entry()], TWO, version="2.8")))
    (tmp_path / "rank_1").write_bytes(dump_bytes())
    analysis = analyze(tmp_path, Options(workers=1))
    assert analysis.summary.versions == {"2.10": (1,), "2.8": (0,)}
    assert "different dump format versions" in analysis.summary.warnings[0]
    assert analysis.findings == ()


def test_workers_give_the_same_result_as_in_process_loading(tmp_path: Path) -> None:
    group = {"0": ("default_pg", list(range(8)))}
    for rank in range(8):
        (tmp_path / f"rank_{rank}").write_bytes(
            pickle.dumps(
                make_dump(
                    [
                        make_entry("all_reduce", s, time_created_ns=1_700_000_000_000_000_000 + s)
                        for s in range(20)
                    ],
                    group,
                )
            )
        )
    a = analyze(tmp_path, Options(workers=1))
    b = analyze(tmp_path, Options(workers=2))
    assert a.findings == b.findings == ()
    assert list(a.table.rank) == list(b.table.rank)
    # Columns travel from the workers narrowed where their values allow (sequence ids and
    # codes in 8 or 16 bits, timestamps not) and come back in their own types.
    assert a.table.arrays().keys() == b.table.arrays().keys()
    for name, column in a.table.arrays().items():
        other = b.table.arrays()[name]
        assert column.dtype == other.dtype, name
        np.testing.assert_array_equal(column, other, err_msg=name)  # NaN equals NaN here
    assert int(a.table.t_created.max()) > 2**32


@pytest.mark.slow
def test_fast_and_careful_normalization_agree_on_every_sample_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fr_analyzer.load.formats import normalize
    from fr_analyzer.load.formats.outcomes import slower

    def refuse(*args: object) -> NoReturn:
        raise slower("forced by the test")

    samples = Path(__file__).resolve().parents[2] / "sample_dumps"
    files = [f for d in sorted(samples.iterdir()) for f in discover(d).files]
    fast = [load_rank(f) for f in files]
    monkeypatch.setattr(normalize, "fast_columns", refuse)
    careful = [load_rank(f) for f in files]
    for a, b in zip(fast, careful, strict=True):
        assert isinstance(a, RankDump) and isinstance(b, RankDump)
        assert a.reader in (Reader.DECODER, Reader.COLUMNS) and b.reader is Reader.PER_ENTRY
        assert "forced by the test" in b.fallback
        assert a.columns is not None and b.columns is not None
        for column, values in a.columns.arrays().items():
            other = getattr(b.columns, column)
            np.testing.assert_array_equal(values, other, err_msg=f"{a.file}: {column}")
        assert a.tables is not None and b.tables is not None
        assert (a.tables.shapes, a.tables.dtypes) == (b.tables.shapes, b.tables.dtypes)
        assert a.tables.stacks == b.tables.stacks
        assert a.groups == b.groups and a.pg_status == b.pg_status


def test_worker_processes_send_long_member_lists_once_and_get_them_right(tmp_path: Path) -> None:
    """Every rank lists the world group; worker processes send a long list whole once and then
    only its digest. The parent must rebuild every rank's claims exactly, share one tuple per
    distinct list, and still see a rank that lists a different world."""
    world, low, high = list(range(100)), list(range(70)), list(range(30, 100))
    dumps = {}
    for rank in world:
        groups = {"0": ("default_pg", world if rank != 7 else [r for r in world if r != 5])}
        if rank in low:
            groups["1"] = ("low", low)
        if rank in high:
            groups["2"] = ("high", high)
        dumps[rank] = make_dump([make_entry(group=("0", "default_pg"))], groups)
    write_dumps(tmp_path, dumps)

    pooled = analyze(tmp_path, Options(workers=2))
    alone = analyze(tmp_path, Options(workers=1))
    claims = {d.rank: d.claims for d in pooled.dumps}
    assert claims == {d.rank: d.claims for d in alone.dumps}
    assert claims[7]["0"].ranks == tuple(r for r in world if r != 5)
    assert claims[3]["1"].ranks == tuple(low) and claims[99]["2"].ranks == tuple(high)
    assert len({id(c["0"].ranks) for r, c in claims.items() if r != 7}) == 1  # one shared copy
    assert [g.ranks for g in pooled.groups.groups] == [g.ranks for g in alone.groups.groups]
    (conflict,) = [f for f in pooled.findings if f.kind == FindingKind.GROUP_CONFLICT]
    assert conflict.culprit_ranks == (7,)


def test_table_builder_orders_ranks_and_leaves_out_the_ones_asked(tmp_path: Path) -> None:
    """Ranks may arrive out of order and some may be dropped after loading (a stray rank
    outside the job): the table is still in rank order, block markers still point at their
    own rank's rows, and every (rank, group) pair is numbered densely."""
    block = [
        make_entry("all_reduce", 0, group=("0", "default_pg")),
        make_entry("all_reduce", 0, group=("0", "default_pg")),
        make_entry("coalesced", 0, group=("0", "default_pg")),
        make_entry("all_reduce", 0, group=("1", "tp")),
    ]
    groups = {"0": ("default_pg", [0, 1, 2]), "1": ("tp", [0, 1, 2])}
    write_dumps(tmp_path, {r: make_dump(renumber(copy.deepcopy(block)), groups) for r in range(3)})
    dumps = [load_rank(f) for f in discover(tmp_path).files]
    builder = TableBuilder(ranks_hint=3)
    for dump in (dumps[2], dumps[0], dumps[1]):
        assert isinstance(dump, RankDump)
        builder.add(dump)
    table = builder.build([0, 2])

    assert table.rank.tolist() == [0] * 4 + [2] * 4
    assert table.row_in_rank.tolist() == [0, 1, 2, 3] * 2
    assert table.marker.tolist() == [2, 2, 2, 3, 6, 6, 6, 7]
    assert table.pair_rank.tolist() == [2, 2, 0, 0]  # in the order the ranks were added
    assert [table.pair_rank[p] for p in table.pair.tolist()] == table.rank.tolist()
    names = [table.group_names[table.pair_group[p]][0] for p in table.pair.tolist()]
    assert names == [table.group_names[g][0] for g in table.group.tolist()]


def test_columns_that_travel_narrow_build_the_table_their_own_types_build(
    tmp_path: Path,
) -> None:
    """A worker sends each integer column in the narrowest type that holds its values (block
    markers and group codes in int8): the table is the same as from the columns in their
    own types, though its markers point past row 127 and its (rank, group) pairs past 127."""
    block = [
        make_entry("all_reduce", 0, group=("0", "default_pg")),
        make_entry("all_reduce", 0, group=("0", "default_pg")),
        make_entry("coalesced", 0, group=("0", "default_pg")),
    ]
    groups = {str(g): (f"g{g}", [0, 1]) for g in range(70)}
    rows = [make_entry("all_reduce", 1, group=(str(g), f"g{g}")) for g in range(70)]
    write_dumps(
        tmp_path,
        {r: make_dump(renumber(copy.deepcopy(block) + rows), groups) for r in range(2)},
    )
    dumps = [load_rank(f) for f in discover(tmp_path).files]
    wide, narrow = TableBuilder(ranks_hint=2), TableBuilder(ranks_hint=2)
    for dump in dumps * 2:  # four ranks' worth of rows: 292, in 140 (rank, group) pairs
        assert isinstance(dump, RankDump) and dump.columns is not None
        wide.add(dump)
        layout, data = _pack_arrays(dump.columns)
        assert dict((name, dtype) for name, dtype, _ in layout)["marker"] == "|i1"
        narrow.add(dump, _unpack_arrays((layout, data)))
    a, b = wide.build(), narrow.build()
    for name, column in a.arrays().items():
        other = getattr(b, name)
        same = np.array_equal(column, other, equal_nan=column.dtype.kind == "f")
        assert column.dtype == other.dtype and same, name
    assert a.marker.max() > 127 and a.pair.max() > 127


def test_a_global_hidden_after_a_plain_looking_start_is_still_refused(tmp_path: Path) -> None:
    body = pickle.dumps([make_dump([make_entry()], TWO), os.system], protocol=2)
    (tmp_path / "rank_0").write_bytes(body)
    with pytest.raises(DumpError, match="refused to load global"):
        read_raw(tmp_path / "rank_0", 0)


def test_table_builder_grows_when_the_first_ranks_are_small(tmp_path: Path) -> None:
    """Room is reserved from the ranks seen so far; a small first rank must not lose rows."""
    sizes = {0: 1, 1: 40, 2: 300, 3: 7}
    write_dumps(
        tmp_path,
        {
            r: make_dump(renumber([make_entry("all_reduce", s) for s in range(k)]), TWO)
            for r, k in sizes.items()
        },
    )
    builder = TableBuilder(ranks_hint=len(sizes))
    for found in discover(tmp_path).files:
        dump = load_rank(found)
        assert isinstance(dump, RankDump)
        builder.add(dump)
    table = builder.build()
    assert table.rank.tolist() == [r for r, k in sizes.items() for _ in range(k)]
    assert table.coll_seq.tolist() == [s for k in sizes.values() for s in range(k)]


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("profiling_name", ["nccl:all_reduce"], "bad profiling_name"),
        ("process_group", ("0", ["default"]), "bad process_group"),
        ("input_sizes", [[[4]]], "input_sizes is not an integer"),
        ("input_dtypes", [["Float"]], "dtypes hold a list"),
    ],
)
def test_an_unhashable_value_is_named_on_its_entry(key: str, value: object, reason: str) -> None:
    """A list where a name, group, dimension or dtype goes: the entry is named, and the
    other entries of the rank still load."""
    entries = [make_entry("all_reduce", i, record_id=i) for i in range(3)]
    entries[1][key] = value
    dump = build_rank(make_dump(entries), 0, "rank0.pkl")
    assert dump.entries == 2
    assert [(i, text.startswith(reason)) for i, text in dump.entry_errors] == [(1, True)]


def _ranks_loaded_in_a_pool_worker(directory: str) -> tuple[int, ...]:
    return analyze(Path(directory), Options(workers=2)).summary.ranks_loaded


def test_analysis_runs_inside_a_pool_worker_that_may_not_fork_children() -> None:
    """A daemonic process (a multiprocessing.Pool worker) may have no children: the dumps are
    read in that process, every pickle scanned first."""
    samples = Path(__file__).resolve().parents[2] / "sample_dumps"
    with multiprocessing.get_context("fork").Pool(1) as pool:
        ranks = pool.apply(_ranks_loaded_in_a_pool_worker, (str(samples / "nccl_healthy"),))
    assert ranks == tuple(range(8))


def test_small_pages_turn_numpys_huge_page_request_off_while_they_last() -> None:
    from fr_analyzer import memory

    toggle = memory._HUGE_PAGES
    if toggle is None:
        pytest.skip("this numpy has no huge page request to turn off")
    before = toggle(True)
    try:
        with memory.small_pages():
            assert toggle(False) is False  # off inside (the call returns the setting it finds)
            with memory.small_pages():  # nested: still off after the inner one ends
                pass
            assert toggle(False) is False
        assert toggle(True) is True  # back on after
    finally:
        toggle(before)


# --- the host a rank ran on -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("nccl_trace_rank_container-node07_40", "container-node07"),
        ("nccl_trace_rank_node-3.cluster_7.json.gz", "node-3.cluster"),
        ("rank_10.0.0.3_5.pkl", "10.0.0.3"),
        ("nccl_trace_rank_40", None),  # the prefix alone names no host
        ("rank_3.pkl", None),
        ("rank_00_3", None),  # digits alone are not a host
        ("nccl_trace_rank__3", None),
        ("nccl_trace_rank_a\x1bb_3", None),  # a control character: not a host name
        ("trace_node07_3", None),  # an unknown prefix: no way to tell the host from it
    ],
)
def test_the_host_a_file_name_carries_after_a_known_prefix(name: str, host: str | None) -> None:
    assert hosts.host_in_name(name) == host


def test_the_host_a_dump_names_is_kept_printable_and_bounded() -> None:
    assert hosts.host_in_header({"host_name": "node07"}) == "node07"
    assert hosts.host_in_header({"hostname": b"gpu-3"}) == "gpu-3"
    assert hosts.host_in_header({"host_name": 7, "host": "n1"}) == "n1"
    assert hosts.host_in_header({"host_name": "  "}) is None
    assert hosts.host_in_header({"host_name": "a\x1b[31mb"}) == "a\\x1b[31mb"
    long = hosts.host_in_header({"host_name": "x" * 100_000})
    assert long is not None and len(long) == hosts.HOST_CHARS and long.endswith("...")


def test_each_rank_has_the_host_of_its_file_name_or_of_its_dump(tmp_path: Path) -> None:
    # GIVEN two ranks named after their hosts, and one whose dump names its own host
    world = {"0": ("default_pg", [0, 1, 2])}
    for name in ("nccl_trace_rank_node07_0", "nccl_trace_rank_node08_1"):
        dump = make_dump([make_entry("all_reduce", 1)], world)
        (tmp_path / name).write_bytes(pickle.dumps(dump))
    dump = make_dump([make_entry("all_reduce", 1)], world, host_name="from-the-dump")
    (tmp_path / "nccl_trace_rank_node09_2").write_bytes(pickle.dumps(dump))
    # WHEN it is analyzed
    analysis = analyze(tmp_path, Options(workers=1))
    # THEN every rank has its host, the dump's own first
    assert {d.rank: d.host for d in analysis.dumps} == {
        0: "node07",
        1: "node08",
        2: "from-the-dump",
    }
    assert analysis.diagnosis.hosts == {0: "node07", 1: "node08", 2: "from-the-dump"}


def test_the_culprits_host_comes_from_the_sample_sets_file_names() -> None:
    c = analyze(SAMPLES / "gloo_subgroup_desync", Options(workers=1)).conclusion
    assert c.root is not None and c.root.ranks == (3,)
    assert c.culprit_hosts == ((3, "container-node08"),)
    assert c.hosts[0] == "container-node07"
