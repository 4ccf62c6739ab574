"""Hostile and messy input: nothing crashes, nothing runs, nothing is lost.

Two halves. A property-based suite takes the real sample dump sets, damages one or more rank
files (structure: keys deleted, values of the wrong type or absurd, entries duplicated,
shuffled or dropped; bytes: truncated, flipped, spliced, replaced) and runs the whole CLI in
process; whatever the damage, the exit code is 0, 1 or 2, nothing prints a traceback, and
every undamaged rank is still loaded. Then a fixed corpus of nasty files (tests/nasty/, see its
README) pins the exact reason each one is refused with.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import multiprocessing
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fr_analyzer import cli, load
from fr_analyzer.model.records import UnreadableDump

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_dumps"
NASTY_DIR = Path(__file__).resolve().parents[1] / "nasty"

# ---------------------------------------------------------------------------------------------
# Running the CLI in process


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    report: dict[str, Any] | None
    seconds: float

    @property
    def everything(self) -> str:
        """Every byte the run showed: stdout, stderr and the JSON report's text."""
        return self.out + self.err + json.dumps(self.report, ensure_ascii=False)

    @property
    def warnings(self) -> list[str]:
        assert self.report is not None, self
        return list(self.report["dumps"]["warnings"])

    @property
    def unreadable(self) -> dict[int, str]:
        assert self.report is not None, self
        return {u["rank"]: u["reason"] for u in self.report["dumps"]["unreadable"]}

    @property
    def loaded(self) -> list[int]:
        assert self.report is not None, self
        return list(self.report["dumps"]["ranks_loaded"])


def run_cli(
    capsys: pytest.CaptureFixture[str], args: list[str], report: Path | None = None
) -> Outcome:
    """`fr-analyze *args` through `cli.main` in this process; SystemExit gives the code."""
    capsys.readouterr()  # drop whatever an earlier example left
    argv = ["fr-analyze", *args]
    if report is not None:
        report.unlink(missing_ok=True)
        argv += ["--json", str(report)]
    saved = sys.argv
    sys.argv = argv
    start = time.perf_counter()
    try:
        cli.main()
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = saved
    seconds = time.perf_counter() - start
    captured = capsys.readouterr()
    data = json.loads(report.read_text()) if report is not None and report.exists() else None
    assert isinstance(code, int), f"exit code {code!r}"
    return Outcome(code, captured.out, captured.err, data, seconds)


def assert_sane(outcome: Outcome) -> None:
    """The rules every run obeys, whatever the input."""
    assert outcome.code in (0, 1, 2), outcome
    for text in (outcome.out, outcome.err):
        assert "Traceback" not in text, text[-2000:]
        assert "internal error" not in text, text[-2000:]
    assert outcome.seconds < 20, f"took {outcome.seconds:.1f} s"


# ---------------------------------------------------------------------------------------------
# Reading and writing sample rank files in their own format


def _codec(path: Path) -> tuple[str, bool]:
    name = path.name
    gz = name.endswith(".gz")
    if gz:
        name = name[:-3]
    return ("json" if name.endswith(".json") else "pickle"), gz


def read_sample(path: Path) -> Any:
    data = path.read_bytes()
    fmt, gz = _codec(path)
    if gz:
        data = gzip.decompress(data)
    # Trusted, bundled sample files: plain loads is fine here.
    return json.loads(data) if fmt == "json" else pickle.loads(data)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, set | frozenset):
        return sorted(map(repr, value))
    return repr(value)


def encode(path: Path, obj: Any, protocol: int) -> bytes:
    fmt, gz = _codec(path)
    if fmt == "json":
        data = json.dumps(obj, default=_jsonable, skipkeys=True).encode("utf-8", "surrogatepass")
    else:
        data = pickle.dumps(obj, protocol=protocol)
    return gzip.compress(data, mtime=0) if gz else data


# ---------------------------------------------------------------------------------------------
# Strategies: absurd values and damage


ENTRY_KEYS = [
    "record_id",
    "pg_id",
    "process_group",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "profiling_name",
    "time_created_ns",
    "duration_ms",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "retired",
    "timeout_ms",
    "is_p2p",
    "thread_id",
    "thread_name",
    "frames",
]
TOP_KEYS = ["version", "pg_config", "pg_status", "comm_lib_version", "nccl_version", "entries"]
FRAME_KEYS = ["name", "filename", "line"]
PG_CONFIG_KEYS = ["name", "desc", "ranks"]
PG_STATUS_KEYS = [
    "last_enqueued_collective",
    "last_started_collective",
    "last_completed_collective",
]

NAMES = [
    "nccl:all_reduce",
    "nccl:frobnicate",
    "warp:all_reduce",
    "nccl:",
    ":",
    "",
    "all_reduce",
    "nccl:send",
    "nccl:send 0->",
    "nccl:send 0->1",
    "nccl:recv 1<-0",
    "nccl:recv 1<-?",
    "nccl:send 0->99999999999999999999",
    "nccl:recv 3<--1",
    "nccl:send 2147483648->0",
    "nccl:coalesced",
    "nccl:ALLGATHER_coalesced",
    "gloo:all_gather",
    "nccl:all_reduce \udcff",
    "nccl:all_reduce\x00\n\t",
]
UNCLEAN = [
    "lone \udcff surrogate",
    "\ud800",
    "\x1b[31mred\x1b[0m",
    "two\nlines",
    "nul\x00",
    "\u202eevil",
]
OPS = ["all_reduce", "send", "recv", "coalesced", "all_gather", "_reduce_oop", "broadcast", "x"]

big_ints = st.sampled_from([-1, -2, 0, 1, 2**31, 2**63 - 1, 2**63, 2**64, 10**18, -(10**18)])
ints = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), big_ints)
huge = st.builds(lambda: 10**5000)  # more digits than int() may convert to text
odd_floats = st.floats(allow_nan=True, allow_infinity=True)
odd_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(NAMES),
    st.sampled_from(["scheduled", "started", "completed", "exploded", "1", "-5", "1e3", "007"]),
    st.sampled_from(["[]", "[0, 1, 2, 3]", "[-1]", "[0, 0]", "[99999999999]", "[1,", "0, 1"]),
    st.builds(lambda: "nccl:" + "x" * 5000),
    st.sampled_from(UNCLEAN),
)
odd_bytes = st.one_of(st.binary(max_size=12), st.sampled_from([b"\xff\xfe\x80", b"\xc3\x28"]))
scalars = st.one_of(st.none(), st.booleans(), ints, huge, odd_floats, odd_text, odd_bytes)
absurd = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=3),
    ),
    max_leaves=8,
)
dims = st.one_of(st.integers(min_value=-3, max_value=10), big_ints, huge, st.sampled_from(["4"]))
shapes = st.lists(st.lists(dims, max_size=4), max_size=3)
p2p_names = st.builds(
    lambda backend, op, a, arrow, b: f"{backend}:{op} {a}{arrow}{b}",
    st.sampled_from(["nccl", "gloo", "zzz", ""]),
    st.sampled_from(["send", "recv"]),
    st.one_of(st.integers(min_value=-2, max_value=12), big_ints, st.just("?")),
    st.sampled_from(["->", "<-", "=>"]),
    st.one_of(st.integers(min_value=-2, max_value=12), big_ints, st.just("?")),
)
names = st.one_of(
    st.sampled_from(NAMES),
    p2p_names,
    st.builds(
        lambda b, op: f"{b}:{op}", st.sampled_from(["nccl", "gloo", "q"]), st.sampled_from(OPS)
    ),
)
dtypes = st.one_of(
    st.lists(st.one_of(st.sampled_from(["Float", "Half", ""]), odd_text, odd_bytes), max_size=3),
    st.sampled_from(["Float", "float32"]),
    odd_bytes,
)
frames = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(odd_text, odd_bytes, st.none()),
            "filename": st.one_of(odd_text, odd_bytes, ints),
            "line": st.one_of(ints, huge, odd_text, odd_floats),
        },
    ),
    max_size=4,
)
pg_ranks = st.one_of(
    st.lists(st.one_of(st.integers(min_value=-2, max_value=9), big_ints), max_size=5).map(str),
    odd_text,
    st.lists(st.integers(min_value=0, max_value=9), max_size=5),
)
process_groups = st.one_of(
    st.tuples(st.sampled_from(["0", "1", "", "zz", *UNCLEAN]), st.one_of(odd_text, odd_bytes)),
    st.tuples(st.one_of(ints, odd_bytes, st.none()), st.sampled_from(["default_pg", "tp"])),
    st.lists(st.text(max_size=3), max_size=3),
)
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "collective_seq_id": st.one_of(ints, st.sampled_from(["1", " 2", "-7", "0x10", "1.0"])),
    "p2p_seq_id": st.one_of(ints, st.sampled_from(["1", "-1", "99999999999999999999"])),
    "record_id": ints,
    "op_id": ints,
    "pg_id": ints,
    "profiling_name": names,
    "input_sizes": shapes,
    "output_sizes": shapes,
    "input_dtypes": dtypes,
    "output_dtypes": dtypes,
    "state": st.one_of(st.sampled_from(["scheduled", "started", "completed", "lost"]), odd_text),
    "time_created_ns": st.one_of(ints, odd_floats, huge),
    "time_discovered_started_ns": st.one_of(ints, odd_floats, st.none()),
    "time_discovered_completed_ns": st.one_of(ints, odd_floats, st.none()),
    "duration_ms": st.one_of(odd_floats, ints, odd_text),
    "timeout_ms": st.one_of(ints, odd_floats),
    "retired": st.one_of(st.booleans(), st.none(), st.sampled_from(["True", 1, 0])),
    "is_p2p": st.one_of(st.booleans(), st.none(), st.sampled_from(["True", 1, 0])),
    "process_group": process_groups,
    "frames": frames,
    "ranks": pg_ranks,
    "name": st.one_of(odd_text, odd_bytes),
    "desc": st.one_of(odd_text, odd_bytes),
    "line": st.one_of(ints, huge, odd_floats),
    "version": st.one_of(odd_text, odd_bytes, ints),
}


def value_for(key: str) -> st.SearchStrategy[Any]:
    """Mostly a value of the right shape but absurd content; sometimes anything at all."""
    typed = FIELD_VALUES.get(key)
    return absurd if typed is None else st.one_of(typed, typed, typed, absurd)


@dataclass(frozen=True)
class Edit:
    """One structural edit: `where` picks the container, `op` says what to do to it."""

    where: str  # top | entry | all_entries | frame | pg_config | pg_status | entries
    op: str  # delete | set | dup | shuffle | drop | reverse | insert | clear
    key: Any
    value: Any
    pick: int


def _keyed_edit(where: st.SearchStrategy[str], keys: list[str]) -> st.SearchStrategy[Edit]:
    return st.sampled_from(keys).flatmap(
        lambda key: st.builds(
            Edit,
            where=where,
            op=st.sampled_from(["delete", "set", "set", "set"]),
            key=st.just(key),
            value=value_for(key),
            pick=st.integers(min_value=0, max_value=10_000),
        )
    )


edits = st.one_of(
    _keyed_edit(st.sampled_from(["entry", "entry", "all_entries"]), ENTRY_KEYS),
    _keyed_edit(st.just("top"), TOP_KEYS),
    _keyed_edit(st.just("frame"), FRAME_KEYS),
    _keyed_edit(st.just("pg_config"), PG_CONFIG_KEYS),
    _keyed_edit(st.just("pg_status"), PG_STATUS_KEYS),
    st.builds(
        Edit,
        where=st.just("entry"),
        op=st.just("set"),
        key=st.text(max_size=5),
        value=absurd,
        pick=st.integers(min_value=0, max_value=10_000),
    ),
    st.builds(
        Edit,
        where=st.just("entries"),
        op=st.sampled_from(["dup", "shuffle", "drop", "reverse", "insert", "clear"]),
        key=st.none(),
        value=absurd,
        pick=st.integers(min_value=0, max_value=10_000),
    ),
)


def _pick_dict(container: Any, pick: int) -> dict[Any, Any] | None:
    if isinstance(container, dict) and container:
        values = [v for v in container.values() if isinstance(v, dict)]
        return values[pick % len(values)] if values else None
    if isinstance(container, list) and container:
        item = container[pick % len(container)]
        return item if isinstance(item, dict) else None
    return None


def apply_edit(dump: Any, edit: Edit) -> None:
    if not isinstance(dump, dict):
        return
    entries = dump.get("entries")
    target: Any
    if edit.where == "top":
        target = dump
    elif edit.where == "all_entries":
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict):
                apply_edit({"entries": [entry]}, Edit("entry", edit.op, edit.key, edit.value, 0))
        return
    elif edit.where == "entry":
        target = _pick_dict(entries, edit.pick)
    elif edit.where == "frame":
        entry = _pick_dict(entries, edit.pick)
        target = _pick_dict(entry.get("frames") if entry else None, edit.pick // 7)
    elif edit.where in ("pg_config", "pg_status"):
        target = _pick_dict(dump.get(edit.where), edit.pick)
    else:
        if not isinstance(entries, list):
            return
        rnd = random.Random(edit.pick)
        n = len(entries)
        if edit.op == "dup" and n:
            i = edit.pick % n
            entries.insert(i, entries[i])  # the same object twice, as a memo reference
        elif edit.op == "shuffle":
            rnd.shuffle(entries)
        elif edit.op == "drop" and n:
            del entries[edit.pick % n]
        elif edit.op == "reverse":
            entries.reverse()
        elif edit.op == "insert":
            entries.insert(edit.pick % (n + 1), edit.value)
        elif edit.op == "clear":
            entries.clear()
        return
    if not isinstance(target, dict):
        return
    if edit.op == "delete":
        target.pop(edit.key, None)
    else:
        with contextlib.suppress(TypeError):  # an unhashable key drawn by hypothesis
            target[edit.key] = edit.value


@dataclass(frozen=True)
class ByteEdit:
    op: str  # truncate | flip | splice | zero | replace
    pos: float  # where, as a fraction of the file
    data: bytes


byte_edits = st.builds(
    ByteEdit,
    op=st.sampled_from(["truncate", "flip", "splice", "zero", "replace"]),
    pos=st.floats(min_value=0, max_value=1),
    data=st.binary(min_size=1, max_size=16),
)


def apply_byte_edit(data: bytes, edit: ByteEdit) -> bytes:
    at = min(int(edit.pos * len(data)), max(len(data) - 1, 0))
    if edit.op == "truncate":
        return data[:at]
    if edit.op == "flip":
        out = bytearray(data)
        for k, b in enumerate(edit.data):
            if at + k < len(out):
                out[at + k] ^= b or 0xFF
        return bytes(out)
    if edit.op == "splice":
        return data[:at] + edit.data + data[at:]
    if edit.op == "zero":
        return data[:at] + bytes(len(edit.data)) + data[at + len(edit.data) :]
    return edit.data


@dataclass(frozen=True)
class Damage:
    """What happens to one rank file: structural edits, re-encoding, then byte edits."""

    edits: tuple[Edit, ...]
    protocol: int
    byte_edits: tuple[ByteEdit, ...]


damage = st.builds(
    Damage,
    edits=st.lists(edits, max_size=4).map(tuple),
    protocol=st.integers(min_value=0, max_value=pickle.HIGHEST_PROTOCOL),
    byte_edits=st.lists(byte_edits, max_size=2).map(tuple),
)

BASES = {
    "nccl_healthy": 8,
    "gloo_healthy": 4,
    "gloo_healthy_json": 4,
    "gloo_op_mismatch": 4,
    "nccl_p2p_pipeline": 4,
    "nccl_coalesced": 4,
}
OUTPUT_FLAGS: list[list[str]] = [
    [],
    ["-v", "--ranks"],
    ["-j", "--print-stack-trace"],
    ["-o", "OUT"],
    ["timeline", "--align"],
]


@contextmanager
def copy_of(base: str) -> Iterator[tuple[Path, dict[int, Path]]]:
    """A private copy of a sample dump set, and its rank files by rank."""
    with tempfile.TemporaryDirectory(prefix="fr-hostile-") as tmp:
        directory = Path(tmp) / "dumps"
        shutil.copytree(SAMPLES / base, directory)
        files = {}
        for path in directory.iterdir():
            digits = path.name.split(".")[0].rsplit("_", 1)[-1]
            if digits.isdigit():
                files[int(digits)] = path
        yield directory, files


def check_damaged_run(
    capsys: pytest.CaptureFixture[str],
    base: str,
    damaged: dict[int, Damage],
    flags: list[str],
) -> None:
    with copy_of(base) as (directory, files):
        assert len(files) == BASES[base]
        mutated = set()
        chosen: dict[int, Damage] = {}
        for rank, what in damaged.items():
            chosen.setdefault(rank % len(files), what)
        for rank, what in chosen.items():
            path = files[rank]
            obj = read_sample(path)
            for edit in what.edits:
                apply_edit(obj, edit)
            try:
                data = encode(path, obj, what.protocol)
            except (RecursionError, ValueError, TypeError, OverflowError):
                data = path.read_bytes()  # hypothesis made something the encoder refuses
            for byte_edit in what.byte_edits:
                data = apply_byte_edit(data, byte_edit)
            if data != path.read_bytes():
                path.write_bytes(data)
                mutated.add(rank)
        report = directory.parent / "report.json"
        out = str(directory.parent / "out")
        args = ["-d", str(directory), "--workers", "1"]
        args += [out if a == "OUT" else a for a in flags if a != "timeline"]
        if "timeline" in flags:
            args = ["timeline", *args, "-o", out]
        plain = not {"-j", "timeline"} & set(flags)
        outcome = run_cli(capsys, args, report if plain else None)
        assert_sane(outcome)
        intact = set(files) - mutated
        if not intact:
            return
        assert outcome.code in (0, 1), outcome.err
        if outcome.report is None:
            return
        loaded = set(outcome.report["dumps"]["ranks_loaded"])
        unreadable = {u["rank"] for u in outcome.report["dumps"]["unreadable"]}
        assert intact <= loaded, (intact, loaded, outcome.report["dumps"]["unreadable"])
        assert loaded | unreadable == set(files), "a rank file was lost"
        assert not loaded & unreadable


# CI runs a fixed set of examples; FR_HOSTILE_EXAMPLES=5000 explores new random ones instead.
EXPLORE = int(os.environ.get("FR_HOSTILE_EXAMPLES", "0"))
HOSTILE = settings(
    max_examples=EXPLORE or 120,
    deadline=None,
    derandomize=not EXPLORE,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.slow
@HOSTILE
@given(
    base=st.sampled_from(sorted(BASES)),
    damaged=st.dictionaries(st.integers(min_value=0, max_value=7), damage, min_size=1, max_size=3),
    flags=st.sampled_from(OUTPUT_FLAGS),
)
def test_damaged_rank_files_never_crash_and_intact_ranks_are_analyzed(
    capsys: pytest.CaptureFixture[str],
    base: str,
    damaged: dict[int, Damage],
    flags: list[str],
) -> None:
    check_damaged_run(capsys, base, damaged, flags)


@pytest.mark.slow
@HOSTILE
@given(
    base=st.sampled_from(sorted(BASES)),
    rank=st.integers(min_value=0, max_value=7),
    edits=st.lists(edits, min_size=1, max_size=6).map(tuple),
    protocol=st.integers(min_value=2, max_value=pickle.HIGHEST_PROTOCOL),
    flags=st.sampled_from(OUTPUT_FLAGS),
)
def test_structural_damage_to_one_rank(
    capsys: pytest.CaptureFixture[str],
    base: str,
    rank: int,
    edits: tuple[Edit, ...],
    protocol: int,
    flags: list[str],
) -> None:
    check_damaged_run(capsys, base, {rank: Damage(edits, protocol, ())}, flags)


@pytest.mark.slow
@HOSTILE
@given(
    base=st.sampled_from(sorted(BASES)),
    damaged=st.dictionaries(
        st.integers(min_value=0, max_value=7),
        st.builds(
            Damage,
            edits=st.just(()),
            protocol=st.just(4),
            byte_edits=st.lists(byte_edits, min_size=1, max_size=3).map(tuple),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_byte_damage(
    capsys: pytest.CaptureFixture[str], base: str, damaged: dict[int, Damage]
) -> None:
    check_damaged_run(capsys, base, damaged, [])


# ---------------------------------------------------------------------------------------------
# The nasty corpus: the exact reason for each file

MARKER = "fr_analyze_pwned"
UNREADABLE, MALFORMED, WARNING, LOADED = "unreadable", "malformed", "warning", "loaded"
NASTY: dict[str, tuple[str, str, int]] = {
    # file: (what happens to rank 1, text that says so, exit code)
    "global_os_system.pkl": (
        UNREADABLE,
        "not a valid dump pickle: refused to load global os.system",
        1,
    ),
    "global_posix_system_proto0.pkl": (
        UNREADABLE,
        "not a valid dump pickle: refused to load global posix.system",
        1,
    ),
    "inst_os_system.pkl": (
        UNREADABLE,
        "not a valid dump pickle: refused to load global os.system",
        1,
    ),
    "stack_global_builtins_eval.pkl": (
        UNREADABLE,
        "not a valid dump pickle: refused to load global builtins.eval",
        1,
    ),
    "numpy_reconstruct.pkl": (
        UNREADABLE,
        "not a valid dump pickle: refused to load global numpy.core.multiarray._reconstruct",
        1,
    ),
    "persistent_id.pkl": (UNREADABLE, "not a valid dump pickle: refused persistent id", 1),
    "ext_opcode.pkl": (UNREADABLE, "not a valid dump pickle: unregistered extension code 1", 1),
    "memo_index_bomb.pkl": (
        UNREADABLE,
        "refused: pickle memo index 2147483647 at byte 3 is beyond anything the file holds",
        1,
    ),
    "deep_tuple_key.pkl.gz": (
        UNREADABLE,
        "refused: pickle builds a tuple of over 10000 nested or repeated tuples",
        1,
    ),
    "tuple_hash_bomb.pkl": (
        UNREADABLE,
        "refused: pickle builds a tuple of over 10000 nested or repeated tuples",
        1,
    ),
    "memo_repeat_bomb.pkl": (
        UNREADABLE,
        "refused: its entries expand to over 1086264 items (shape dimensions, dtypes, frames)"
        " from 9422 bytes: a pickle that repeats references to big lists (a memo bomb)",
        1,
    ),
    "dense_entries.pkl.gz": (
        UNREADABLE,
        "refused: 1000000 entries in 2003298 bytes are too many to be real",
        1,
    ),
    "deep_list.pkl.gz": (
        MALFORMED,
        "1 malformed entries skipped: entry 0: entry is not a mapping",
        1,
    ),
    "deep_nesting.json": (UNREADABLE, "malformed JSON: nested too deeply", 1),
    "gzip_bomb.pkl.gz": (
        UNREADABLE,
        "gzip bomb: 36756 compressed bytes inflate to over 34603008 bytes (more than 500x)",
        1,
    ),
    "empty.pkl": (UNREADABLE, "empty file", 1),
    "truncated_87_bytes.pkl": (UNREADABLE, "pickle data was truncated", 1),
    "text_named_like_dump.pkl": (
        UNREADABLE,
        "malformed JSON: looks like text, not JSON",
        1,
    ),
    "json_array.json": (UNREADABLE, "not a Flight Recorder dump (top level is list)", 1),
    "entries_is_dict.json": (UNREADABLE, "'entries' is not a list", 1),
    "gzip_truncated.pkl.gz": (
        UNREADABLE,
        "bad gzip data: Compressed file ended before the end-of-stream marker was reached",
        1,
    ),
    "gzip_in_gzip.pkl.gz": (UNREADABLE, "gzip data inside gzip data: decompress it first", 1),
    "xz_compressed.pkl": (UNREADABLE, "xz-compressed data, not a dump (only gzip is read)", 1),
    "invalid_utf8_string.pkl": (
        UNREADABLE,
        "not a valid dump pickle: 'utf-8' codec can't decode byte 0xff in position 2",
        1,
    ),
    "huge_int.json": (UNREADABLE, "malformed JSON: Exceeds the limit (4300 digits)", 1),
    "non_utf8_names.pkl": (
        MALFORMED,
        "1 malformed entries skipped: entry 1: bad profiling_name b'gloo:all_reduce\\xff'",
        1,
    ),
    "non_utf8_names.json": (WARNING, "rank 1: bytes that are not UTF-8 were replaced", 0),
    "nan_duration.pkl": (LOADED, "", 0),
    "huge_sizes.pkl": (
        MALFORMED,
        "entry 3: input_sizes has an absurd shape [1000000000000000000]",
        1,
    ),
    "negative_seq_ids.pkl": (MALFORMED, "entry 4: negative sequence id", 1),
    "unknown_state_and_op.pkl": (
        WARNING,
        "rank 1: unknown op(s) frobnicate|rank 1: 1 entry with an unknown state ('exploded')",
        1,
    ),
    "peer_out_of_range.pkl": (
        MALFORMED,
        "entry 25: bad peer rank '99999999999999999999'",
        1,
    ),
}


def nasty_set(tmp_path: Path, name: str) -> Path:
    """sample_dumps/gloo_healthy with rank 1 replaced by the nasty file `name`."""
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "gloo_healthy", directory)
    (directory / "rank_1.pkl").unlink()
    suffix = name[name.index(".") :] if "." in name else ""
    shutil.copyfile(NASTY_DIR / name, directory / f"rank_1{suffix}")
    return directory


@pytest.mark.parametrize("name", sorted(NASTY))
def test_nasty_file_gives_its_exact_reason(
    name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # where a file that ran code would leave its marker
    directory = nasty_set(tmp_path, name)
    args = ["-d", str(directory), "--workers", "1", "-v", "--ranks"]
    outcome = run_cli(capsys, args, tmp_path / "report.json")
    assert_sane(outcome)
    kind, text, code = NASTY[name]
    assert outcome.code == code, outcome
    assert outcome.report is not None
    dumps = outcome.report["dumps"]
    reasons = {u["rank"]: u["reason"] for u in dumps["unreadable"]}
    malformed = [f["detail"] for f in outcome.report["findings"] if f["kind"] == "malformed_entry"]
    if kind == UNREADABLE:
        assert dumps["ranks_loaded"] == [0, 2, 3]
        assert text in reasons[1], reasons
        assert f"rank_1{name[name.index('.') :]} (rank 1): {text}" in outcome.out
    else:
        assert dumps["ranks_loaded"] == [0, 1, 2, 3] and not reasons
        if kind == MALFORMED:
            assert any(text in detail for detail in malformed), malformed
        elif kind == WARNING:
            for part in text.split("|"):
                assert part in dumps["warnings"], dumps["warnings"]
        else:
            assert not malformed and not dumps["warnings"]
    assert not (tmp_path / MARKER).exists()


def test_unclean_text_is_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lone surrogate and a terminal escape in a frame name reach the output escaped (capsys
    encodes strictly as UTF-8, as a terminal would, so a raw surrogate would crash the run)."""
    directory = nasty_set(tmp_path, "non_utf8_names.pkl")
    args = ["-d", str(directory), "--workers", "1", "-j", "--print-stack-trace"]
    outcome = run_cli(capsys, args)
    assert_sane(outcome)
    assert outcome.code in (0, 1)  # -j exits with the verdict's code
    assert "forward\\udcff\\x1b[31m" in outcome.out
    assert "/work/tr\ufffdin.py" in outcome.out
    assert "\x1b" not in outcome.out


def test_the_corpus_readme_lists_exactly_the_corpus() -> None:
    listed = re.findall(r"^\| `([^`]+)` \| .+ \|$", (NASTY_DIR / "README.md").read_text(), re.M)
    present = sorted(
        p.name for p in NASTY_DIR.iterdir() if p.name not in ("README.md", "make_corpus.py")
    )
    assert sorted(listed) == present
    assert sorted(NASTY) == present


def test_the_corpus_is_regenerated_byte_for_byte(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_corpus", NASTY_DIR / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in [*module.write(tmp_path), "README.md"]:
        assert (tmp_path / name).read_bytes() == (NASTY_DIR / name).read_bytes(), name


def test_malicious_pickles_never_run_even_in_worker_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "nccl_healthy", directory)
    malicious = [
        "global_os_system.pkl",
        "global_posix_system_proto0.pkl",
        "inst_os_system.pkl",
        "stack_global_builtins_eval.pkl",
        "numpy_reconstruct.pkl",
        "persistent_id.pkl",
    ]
    for rank, name in enumerate(malicious, start=8):
        shutil.copyfile(NASTY_DIR / name, directory / f"nccl_trace_rank_{rank}")
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "2"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.report is not None
    assert outcome.report["dumps"]["ranks_loaded"] == list(range(8))
    reasons = {u["rank"]: u["reason"] for u in outcome.report["dumps"]["unreadable"]}
    assert sorted(reasons) == list(range(8, 14))
    assert all("refused" in reason for reason in reasons.values()), reasons
    assert not (tmp_path / MARKER).exists()


# ---------------------------------------------------------------------------------------------
# Limits


def test_a_1_gib_gzip_bomb_is_refused_quickly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = nasty_set(tmp_path, "empty.pkl")
    (directory / "rank_1.pkl").unlink()
    member = gzip.compress(bytes(16 << 20), compresslevel=9, mtime=0)
    (directory / "rank_1.pkl.gz").write_bytes(member * 64)  # 1 GiB of zeros in about 1 MB
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "1"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.seconds < 10
    assert outcome.report is not None
    (bad,) = outcome.report["dumps"]["unreadable"]
    assert bad["rank"] == 1 and bad["reason"].startswith("gzip bomb: ")


def test_a_file_over_the_size_limit_is_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = nasty_set(tmp_path, "empty.pkl")
    with (directory / "rank_1.pkl").open("wb") as stream:
        stream.truncate(2 << 30)  # sparse: 2 GiB that take no disk
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "1"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.report is not None
    (bad,) = outcome.report["dumps"]["unreadable"]
    assert bad["reason"] == (
        "file is 2147483648 bytes, over the 1073741824-byte limit (see --max-file-size)"
    )


def test_max_file_size_applies_after_gunzip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "gloo_op_mismatch", directory)  # ~900-byte .pkl.gz files
    outcome = run_cli(capsys, ["-d", str(directory), "--max-file-size", "1K"])
    assert_sane(outcome)
    assert outcome.code == 2
    assert "gzip data inflates to over the 1024-byte limit (see --max-file-size)" in outcome.err


@pytest.mark.parametrize(
    ("text", "limit"),
    [("1048576", 1 << 20), ("512M", 512 << 20), ("2G", 2 << 30), ("1.5K", 1536), ("64kib", 65536)],
)
def test_max_file_size_takes_bytes_or_units(
    text: str, limit: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fr_analyzer import pipeline

    seen: list[int] = []
    real = pipeline.analyze

    def spy(directory: Path, options: pipeline.Options, *rest: Any) -> pipeline.Analysis:
        seen.append(options.max_file_bytes)
        return real(directory, options, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "analyze", spy)
        outcome = run_cli(capsys, ["-d", str(SAMPLES / "gloo_healthy"), "--max-file-size", text])
    assert_sane(outcome)
    assert seen == [limit]


@pytest.mark.parametrize("text", ["bogus", "0", "-1", "1Q", "1.5.5G", ""])
def test_a_bad_max_file_size_is_a_usage_error(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = run_cli(capsys, ["-d", str(SAMPLES / "gloo_healthy"), "--max-file-size", text])
    assert_sane(outcome)
    assert outcome.code == 2
    assert "Invalid value for '--max-file-size'" in outcome.err


_REAL_LOAD_RANK = load.load_rank


def _load_rank_or_die(dump_file: load.DumpFile, max_bytes: int, **options: Any) -> Any:
    """load_rank, except that the process reading rank 5 is killed (as the OOM killer would)."""
    if dump_file.rank == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return _REAL_LOAD_RANK(dump_file, max_bytes, **options)


@pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork", reason="the patch reaches workers by fork"
)
def test_a_loader_process_that_dies_costs_only_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load.loading, "load_rank", _load_rank_or_die)
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "nccl_healthy", directory)
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "2"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.report is not None
    assert outcome.report["dumps"]["ranks_loaded"] == [0, 1, 2, 3, 4, 6, 7]
    assert outcome.report["dumps"]["unreadable"] == [
        {
            "file": str(directory / "nccl_trace_rank_5"),
            "rank": 5,
            "reason": "the process reading it was killed (out of memory?)"
            " (read 2 times, each in a fresh process)",
        }
    ]


# ---------------------------------------------------------------------------------------------
# Directory problems


def test_files_that_cannot_be_opened_are_reported_and_never_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO (opening it would block forever), a dangling symlink, a symlink loop, a device
    (reading /dev/zero never ends), and a directory symlink loop. Tests run as root, which
    chmod 000 does not stop: these are the entries that cannot be opened."""
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "nccl_healthy", directory)
    for rank in (1, 2, 3, 4):
        (directory / f"nccl_trace_rank_{rank}").unlink()
    os.mkfifo(directory / "nccl_trace_rank_1")
    (directory / "nccl_trace_rank_2").symlink_to(tmp_path / "gone")
    (directory / "nccl_trace_rank_3").symlink_to(directory / "nccl_trace_rank_3")
    (directory / "nccl_trace_rank_4").symlink_to("/dev/zero")
    (directory / "loop").symlink_to(directory)
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "1"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.report is not None
    reasons = {u["rank"]: u["reason"] for u in outcome.report["dumps"]["unreadable"]}
    assert reasons == {
        1: "not a regular file (a FIFO)",
        2: "cannot read: No such file or directory",
        3: "cannot read: Too many levels of symbolic links",
        4: "not a regular file (a character device)",
    }
    assert outcome.report["dumps"]["ranks_loaded"] == [0, 5, 6, 7]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files and lists such dirs")
def test_unreadable_files_and_directories_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "gloo_healthy", directory)
    (directory / "rank_1.pkl").chmod(0)
    hidden = directory / "more"
    hidden.mkdir()
    hidden.chmod(0)
    try:
        outcome = run_cli(capsys, ["-d", str(directory), "--workers", "1"], tmp_path / "r.json")
    finally:
        hidden.chmod(0o755)
    assert_sane(outcome)
    assert outcome.report is not None
    (bad,) = outcome.report["dumps"]["unreadable"]
    assert bad["reason"] == "cannot read: Permission denied"
    assert f"{hidden} (cannot list: Permission denied)" in outcome.report["dumps"]["ignored_files"]


def test_thousands_of_unrelated_numbered_files_do_not_hide_the_dumps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "run"
    shutil.copytree(SAMPLES / "gloo_healthy", directory / "fr")
    (directory / "ckpt").mkdir()
    for i in range(1500):
        (directory / f"events.out.tfevents.{i}").write_text("tensorboard\n")
        (directory / "ckpt" / f"step_{i}").write_bytes(b"\x00" * 8)
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "1"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.code == 0 and outcome.report is not None
    assert outcome.report["dumps"]["ranks_loaded"] == [0, 1, 2, 3]
    assert len(outcome.report["dumps"]["ignored_files"]) == 3000


def test_nested_folders_are_searched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "dumps"
    for rank in range(4):
        folder = directory.joinpath(*[f"n{i}" for i in range(rank)])
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLES / "gloo_healthy" / f"rank_{rank}.pkl", folder / f"rank_{rank}.pkl")
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "1"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.code == 0 and outcome.report is not None
    assert outcome.report["dumps"]["ranks_loaded"] == [0, 1, 2, 3]


def test_two_files_for_one_rank_read_the_one_nearest_the_top_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rank_2.pkl left in old/ by an earlier run: the top folder's is read, the other is
    named in a warning, and the run goes on (README: "Two files for one rank")."""
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "gloo_healthy", directory)
    (directory / "old").mkdir()
    shutil.copyfile(directory / "rank_3.pkl", directory / "old" / "rank_2.pkl")  # not rank 2's
    outcome = run_cli(capsys, ["-d", str(directory)], tmp_path / "r.json")
    assert_sane(outcome)
    said = [line for line in outcome.err.splitlines() if not line.startswith("wrote ")]
    assert outcome.code == 0 and said == []  # nothing on stderr but what was written
    assert outcome.report is not None
    assert outcome.report["dumps"]["ranks_loaded"] == [0, 1, 2, 3]
    assert (
        f"warning: {directory}/old/rank_2.pkl (rank 2) passed over: rank 2 is read from"
        f" {directory}/rank_2.pkl (nearer the top)\n"
    ) in outcome.out


def test_a_rank_beyond_the_world_is_set_aside_not_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "nccl_healthy", directory)
    shutil.copyfile(directory / "nccl_trace_rank_0", directory / "nccl_trace_rank_12")
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "1"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.report is not None
    dumps = outcome.report["dumps"]
    assert dumps["ranks_loaded"] == list(range(8)) and dumps["ranks_missing"] == []
    assert dumps["unreadable"] == [
        {
            "file": str(directory / "nccl_trace_rank_12"),
            "rank": 12,
            "reason": "rank 12 (from the file name) is outside the job: the other ranks'"
            " process groups hold ranks up to 7; not analyzed",
        }
    ]
    kinds = {f["kind"] for f in outcome.report["findings"]}
    assert kinds == {"unreadable_dump"}


def test_an_absurd_rank_number_in_a_file_name_is_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "gloo_healthy", directory)
    for name in ("rank_99999999999999999999.pkl", "rank_" + "7" * 200):
        shutil.copyfile(directory / "rank_0.pkl", directory / name)
    outcome = run_cli(capsys, ["-d", str(directory), "--workers", "1"], tmp_path / "r.json")
    assert_sane(outcome)
    assert outcome.code == 0 and outcome.report is not None
    assert outcome.report["dumps"]["ranks_loaded"] == [0, 1, 2, 3]
    assert len(outcome.report["dumps"]["ignored_files"]) == 2


# ---------------------------------------------------------------------------------------------
# Outputs


def test_outputs_never_touch_the_dumps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inside the dump directory, equal to an input, or the input a symlink in the dump
    directory points to: refused before anything is read or written."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / "gloo_healthy", directory)
    real = elsewhere / "rank_0.pkl"
    (directory / "rank_0.pkl").rename(real)
    (directory / "rank_0.pkl").symlink_to(real)
    before = {p: p.read_bytes() for p in [real, *sorted(directory.glob("rank_[123].pkl"))]}
    cases = {
        directory / "db.pkl": "refusing to write inside the dump directory",
        directory / "rank_1.pkl": "refusing to write inside the dump directory",
        real: f"refusing to overwrite an input dump ({directory / 'rank_0.pkl'} points to it)",
        directory: "refusing to write inside the dump directory",
    }
    for target, message in cases.items():
        for flag in ("-o", "--json"):
            outcome = run_cli(capsys, ["-d", str(directory), flag, str(target)])
            assert_sane(outcome)
            assert outcome.code == 2 and message in outcome.err, (flag, target, outcome.err)
    assert {p: p.read_bytes() for p in before} == before


def test_an_existing_output_is_replaced_only_by_a_complete_new_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    report.write_text("previous report\n")
    report.chmod(0o640)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "rank_0.pkl").write_bytes(b"")
    failed = run_cli(capsys, ["-d", str(broken), "--json", str(report)])
    assert failed.code == 2 and report.read_text() == "previous report\n"
    done = run_cli(capsys, ["-d", str(SAMPLES / "gloo_healthy"), "--json", str(report)])
    assert done.code == 0
    assert json.loads(report.read_text())["schema"] == "fr-analyze.report/1"
    assert report.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "report.json"]


# ---------------------------------------------------------------------------------------------
# Rank lists given on the command line


def test_a_non_ascii_digit_in_selected_ranks_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["-d", str(SAMPLES / "gloo_healthy"), "-j", "--selected-ranks", "²"]
    outcome = run_cli(capsys, args)
    assert_sane(outcome)


def test_an_absurd_rank_range_is_refused_quickly() -> None:
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_DATA, (512 << 20, 512 << 20))\n"
        "sys.argv = ['fr-analyze', '-d', sys.argv[1], '-j', '--selected-ranks', '0-99999999999']\n"
        "from fr_analyzer.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(SAMPLES / "gloo_healthy")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode in (0, 1, 2)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
@HOSTILE
@given(
    base=st.sampled_from(sorted(BASES)),
    edits=st.lists(edits, min_size=1, max_size=4).map(tuple),
    flags=st.sampled_from(OUTPUT_FLAGS),
)
def test_the_same_absurdity_on_every_rank(
    capsys: pytest.CaptureFixture[str],
    base: str,
    edits: tuple[Edit, ...],
    flags: list[str],
) -> None:
    """Consistent nonsense (every rank agrees on the absurd value) reaches the matcher and the
    reports instead of being caught as a disagreement."""
    damage_all = Damage(edits, 4, ())
    check_damaged_run(capsys, base, dict.fromkeys(range(BASES[base]), damage_all), flags)


OPCODE_PIECES = [
    b"N",  # NONE
    b"K\x01",  # BININT1
    b"X\x01\x00\x00\x00x",  # BINUNICODE 'x'
    b"2",  # DUP
    b"0",  # POP
    b"1",  # POP_MARK
    b"(",  # MARK
    b")",  # EMPTY_TUPLE
    b"\x85",  # TUPLE1
    b"\x86",  # TUPLE2
    b"\x87",  # TUPLE3
    b"t",  # TUPLE
    b"]",  # EMPTY_LIST
    b"a",  # APPEND
    b"e",  # APPENDS
    b"}",  # EMPTY_DICT
    b"s",  # SETITEM
    b"u",  # SETITEMS
    b"\x8f",  # EMPTY_SET
    b"\x90",  # ADDITEMS
    b"\x91",  # FROZENSET
    b"\x94",  # MEMOIZE
    b"q\x00",  # BINPUT 0
    b"h\x00",  # BINGET 0
    b"h\x01",  # BINGET 1
    b"r\xff\xff\xff\x7f",  # LONG_BINPUT 2**31-1: the memo allocation bomb
    b"j\x00\x00\x00\x01",  # LONG_BINGET of a slot that is not there
]


@settings(max_examples=EXPLORE or 300, deadline=None, derandomize=not EXPLORE, database=None)
@given(
    st.lists(st.sampled_from(OPCODE_PIECES), max_size=400),
    st.sampled_from([b"\x80\x02", b"\x80\x04", b""]),
)
def test_random_opcode_streams_are_refused_or_loaded_never_crash(
    pieces: list[bytes], proto: bytes
) -> None:
    """The unpickler itself under attack: any opcode soup (DUP-doubled tuples as dict keys,
    memo allocation bombs, deep nesting) is loaded or refused quickly; none crashes the
    process, which is what would happen to pytest here."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank_0"
        path.write_bytes(proto + b"".join(pieces) + b".")
        start = time.perf_counter()
        result = load.load_rank(load.DumpFile(0, path))
        assert time.perf_counter() - start < 5
    assert isinstance(result, load.RankDump | UnreadableDump)
