"""The decoder that reads torch-written dumps straight into columns: it gives exactly what the
unpickler path gives, and it leaves every file outside its grammar to that path."""

from __future__ import annotations

import gzip
import itertools
import pickle
import pickletools
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.gen import Spec, torch_pickle
from fr_analyzer.dumps import DumpFile, RankDump, Reader, build_rank, discover, load_rank
from fr_analyzer.dumps.decode import Undecodable, _run_ints, decode
from fr_analyzer.model import UnreadableDump
from tests.builders import make_dump, make_entry
from tools.frsim.writers import TorchPickleWriter

SAMPLES = Path(__file__).resolve().parent.parent / "sample_dumps"


def torch_bytes(dump: dict[str, Any]) -> bytes:
    """`dump` written the way torch's pickler writes it: each distinct frame dict once."""
    w = TorchPickleWriter()
    w.buf += b"}("
    for key, value in dump.items():
        w.value(key)
        if key != "entries":
            w.value(value)
            continue
        w.buf += b"]("
        for entry in value:
            w.buf += b"}("
            for name, item in entry.items():
                w.value(name)
                if name == "frames":
                    w.buf += b"]("
                    for frame in item:
                        w.shared(tuple(frame.items()), frame)
                    w.buf += b"e"
                else:
                    w.value(item)
            w.buf += b"u"
        w.buf += b"e"
    w.buf += b"u"
    return w.finish()


def frames(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "filename": f"/src/{n}.py", "line": 10 + i} for i, n in enumerate(names)]


def entries(count: int, **changes: Any) -> list[dict[str, Any]]:
    """`count` all_reduces with full keys, as torch writes them, every fifth on a new stack."""
    out = []
    for i in range(count):
        entry = make_entry("all_reduce", i, frames=frames("step", f"layer{i // 5}"))
        entry.update(thread_name="pt_main_thread", thread_id="1234", op_id=i, pg_id=0)
        entry.update(changes)
        out.append(entry)
    return out


def same_rank(a: RankDump | UnreadableDump, b: RankDump | UnreadableDump) -> None:
    """The same rank, but for which reader read it and why: every column (type and values),
    every table, every header fact."""
    assert type(a) is type(b)
    if not isinstance(a, RankDump) or not isinstance(b, RankDump):
        assert a == b
        return
    assert a.columns is not None and b.columns is not None
    for name, value in a.columns.arrays().items():
        other = getattr(b.columns, name)
        assert value.dtype == other.dtype and np.array_equal(value, other, equal_nan=True), name
    assert a.tables == b.tables
    assert replace(a, reader=b.reader, fallback=b.fallback, columns=None, tables=None) == replace(
        b, columns=None, tables=None
    )


def by_unpickler(data: bytes, rank: int = 0) -> RankDump:
    return build_rank(pickle.loads(data), rank, "f", nbytes=len(data))


def by_decoder(data: bytes, rank: int = 0) -> RankDump:
    decoded = decode(data)
    assert decoded is not None
    return build_rank(decoded, rank, "f", nbytes=len(data))


def test_real_gloo_dumps_are_decoded_to_exactly_what_the_unpickler_gives() -> None:
    files = [f.path for d in sorted(SAMPLES.glob("gloo_*")) for f in discover(d).files]
    pickles = [f for f in files if ".json" not in f.name]
    assert len(pickles) >= 20
    for file in pickles:
        data = file.read_bytes()
        data = gzip.decompress(data) if file.suffix == ".gz" else data
        same_rank(by_decoder(data), by_unpickler(data))


@pytest.mark.parametrize("fault", ["none", "size_mismatch"])
def test_benchmark_dumps_are_decoded_to_exactly_what_the_unpickler_gives(fault: str) -> None:
    """Ring-buffer wrap, p2p, coalesced blocks, first definitions between ordinary entries."""
    spec = Spec(world_size=64, fault=fault, steps=3, capacity=400)
    for rank in (0, 13, spec.culprit or 37, 63):
        data, _ = torch_pickle(spec, rank)
        same_rank(by_decoder(data, rank), by_unpickler(data, rank))


def test_entries_holding_first_definitions_anywhere_are_read_exactly() -> None:
    rows = entries(40)
    rows[17]["profiling_name"] = "nccl:broadcast"  # a new string mid-list
    rows[39]["input_dtypes"] = ["Half"]  # and in the last entry
    data = torch_bytes(make_dump(rows))
    same_rank(by_decoder(data), by_unpickler(data))


def test_integers_of_every_pickled_width_decode_exactly() -> None:
    rng = random.Random(7)
    values = [0, 1, 255, 256, 65535, 65536, -1, -(1 << 31), (1 << 31) - 1, 1 << 31]
    values += [(1 << 63) - 1, -(1 << 63), -(1 << 40), 1 << 47, -129, -32769]
    values += [rng.randrange(-(1 << 63), 1 << 63) >> rng.randrange(64) for _ in range(500)]
    caps = [pickle.dumps(v, protocol=2)[2:-1] for v in values]  # the opcode and its argument
    caps.append(b"N")
    values.append(-1)
    ((column,),) = _run_ints([(caps, ())])
    assert column.tolist() == values
    # Runs of three, with a short and a long key reference between them.
    third = len(caps) // 3
    triples = zip(
        caps[0 : 3 * third : 3], caps[1 : 3 * third : 3], caps[2 : 3 * third : 3], strict=True
    )
    run = [a + b"h\x05" + b + b"j\x00\x01\x00\x00" + c for a, b, c in triples]
    (columns, (alone,)) = _run_ints([(run, (2, 5)), (caps[::-1], ())])
    assert [c.tolist() for c in columns] == [values[i : 3 * third : 3] for i in range(3)]
    assert alone.tolist() == values[::-1]


def file_of(tmp_path: Path, data: bytes) -> DumpFile:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data)
    return DumpFile(0, path)


def slot_of(data: bytes, text: str) -> int:
    for (op, arg, _), (put, slot, _) in itertools.pairwise(pickletools.genops(data)):
        if op.name == "BINUNICODE" and arg == text and put.name == "BINPUT":
            return int(slot)
    raise AssertionError(text)


def test_a_reference_to_a_memo_slot_written_later_is_left_to_the_unpickler(
    tmp_path: Path,
) -> None:
    """Entry 1 refers to a string that entry 2 writes: the unpickler refuses that, so the
    decoder must not read it as the string."""
    valid = torch_bytes(make_dump(entries(40)))
    same_rank(by_decoder(valid), by_unpickler(valid))
    rows = entries(3)
    rows[2]["profiling_name"] = "nccl:broadcast"
    data = torch_bytes(make_dump(rows))
    key, old, new = (
        slot_of(data, t) for t in ("profiling_name", "nccl:all_reduce", "nccl:broadcast")
    )
    pair = b"h" + bytes([key]) + b"h" + bytes([old])
    assert data.count(pair) == 1  # entry 1 (entry 0 writes the string, entry 2 is another op)
    forged = data.replace(pair, b"h" + bytes([key]) + b"h" + bytes([new]), 1)
    assert decode(forged) is None
    result = load_rank(file_of(tmp_path, forged))
    assert isinstance(result, UnreadableDump) and "pickle" in result.reason


@pytest.mark.parametrize(
    "what",
    [
        "python pickler",
        "memo put out of order",
        "tuple holding a list",
        "dict keyed by a tuple",
        "truncated",
        "bytes after STOP",
        "no entries",
    ],
)
def test_files_outside_the_grammar_take_the_general_path(tmp_path: Path, what: str) -> None:
    dump = make_dump(entries(12))
    data = torch_bytes(dump)
    if what == "python pickler":
        data = pickle.dumps(dump, protocol=2)
    elif what == "memo put out of order":
        slot = slot_of(data, "nccl:all_reduce")
        data = data.replace(b"q" + bytes([slot]), b"q" + bytes([slot + 3]), 1)
    elif what == "tuple holding a list":
        data = torch_bytes({**dump, "extra": ([1, 2], "x")})
    elif what == "dict keyed by a tuple":
        data = torch_bytes({**dump, "extra": {(1, 2): 3}})
    elif what == "truncated":
        data = data[: len(data) // 2]
    elif what == "bytes after STOP":
        data += b"N."
    elif what == "no entries":
        data = torch_bytes({"version": "2.10", "pg_config": {}})
    assert decode(data) is None
    general = tmp_path / "general"
    general.mkdir()
    expected = load_rank(file_of(general, data))
    result = load_rank(file_of(tmp_path, data))
    if isinstance(expected, UnreadableDump):
        assert isinstance(result, UnreadableDump) and result.reason == expected.reason
    else:
        assert isinstance(result, RankDump) and result.entries == expected.entries


def test_odd_values_in_decoded_entries_go_through_the_careful_path(tmp_path: Path) -> None:
    """A value only the careful path reads (here an unparsable profiling name) makes the
    decoded columns unusable; the file is read again as dicts and the entry is named."""
    rows = entries(30)
    rows[20]["profiling_name"] = "nonsense"
    data = torch_bytes(make_dump(rows))
    decoded = decode(data)
    assert decoded is not None
    with pytest.raises(Undecodable):
        build_rank(decoded, 0, "f", nbytes=len(data))
    result = load_rank(file_of(tmp_path, data))
    assert isinstance(result, RankDump)
    assert result.entries == 29 and [i for i, _ in result.entry_errors] == [20]
    assert result.reader is Reader.PER_ENTRY and result.fallback.startswith("decoder: ")
    same_rank(result, build_rank(pickle.loads(data), 0, result.file, nbytes=len(data)))

