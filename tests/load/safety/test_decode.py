"""The decoder that reads torch-written dumps straight into columns: it gives exactly what the
unpickler path gives, and it leaves every file outside its grammar to that path."""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import os
import pickle
import pickletools
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from benchmarks.gen import Spec, simulation, torch_pickle
from fr_analyzer.load import DumpFile, build_rank, discover, load_rank
from fr_analyzer.load.common import MAX_SEQ_ID
from fr_analyzer.load.formats.outcomes import NotDecoded
from fr_analyzer.load.safety.decoders.columns import Decoded, run_ints
from fr_analyzer.load.safety.decoders.decode import decode_torch
from fr_analyzer.load.safety.decoders.decode_python import _implicit_puts, decode_python
from fr_analyzer.load.safety.door import decode_pickle
from fr_analyzer.model.dump import Fallback, RankDump, Reader, Writer
from fr_analyzer.model.records import UnreadableDump
from tests.builders import make_dump, make_entry, or_why
from tools.frsim.writers import TorchPickleWriter, python_pickle

decode_any = or_why(decode_pickle)
decode_python_or_why = or_why(decode_python)


def decode(data: bytes) -> Decoded | None:
    """The dump torch's decoder reads from `data`, or None when it does not."""
    found = or_why(decode_torch)(data)
    return found if isinstance(found, Decoded) else None


SAMPLES = Path(__file__).resolve().parents[3] / "sample_dumps"


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


def pure_python_dumps(obj: object, protocol: int | None = None) -> bytes:
    """`pickle.dumps` by the pure-Python pickler, as `pickle._dumps` (not in the stubs) does."""
    out = io.BytesIO()
    pickle._Pickler(out, protocol).dump(obj)
    return out.getvalue()


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
    a = replace(a, reader=b.reader, fallback=b.fallback, fallback_reason=b.fallback_reason)
    a = replace(a, fallback_writer=b.fallback_writer, columns=None, tables=None)
    assert a == replace(b, columns=None, tables=None)


def by_unpickler(data: bytes, rank: int = 0) -> RankDump:
    return build_rank(pickle.loads(data), rank, "f", nbytes=len(data))


def by_decoder(data: bytes, rank: int = 0) -> RankDump:
    """The rank read by the decoder of its pickler's layout (torch's, or Python's)."""
    decoded = decode_any(data)
    assert isinstance(decoded, Decoded), decoded
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


@pytest.mark.parametrize("fault", ["none", "size_mismatch"])
def test_benchmark_dumps_written_by_pythons_pickler_are_decoded_exactly(fault: str) -> None:
    """The same job written by `pickle.dumps(protocol=4)`: frames, MEMOIZE, batches of a
    thousand entries, strings written again in entries that are not their first."""
    spec = Spec(world_size=64, fault=fault, steps=14, capacity=1500)
    for rank in (0, 13, spec.culprit or 37, 63):
        dump = simulation(spec).dump(rank)
        assert dump is not None
        data = python_pickle(dump)
        assert data[:3] == b"\x80\x04\x95" and len(dump.entries) > 1000  # framed, batched
        same_rank(by_decoder(data, rank), by_unpickler(data, rank))
        for protocol in (2, 3, 4, 5):
            again = pickle.dumps(pickle.loads(data), protocol=protocol)  # a re-saved dump
            same_rank(by_decoder(again, rank), by_unpickler(data, rank))


@pytest.mark.parametrize("count", [999, 1000, 1001, 1002, 2001])
@pytest.mark.parametrize("dumps", [pickle.dumps, pure_python_dumps], ids=["C", "pure Python"])
def test_pythons_batch_boundaries_are_read_between_expression_read_entries(
    count: int, dumps: Callable[..., bytes]
) -> None:
    """Python's pickler appends a thousand entries at a time: `e(` between two batches; its
    pure-Python version writes a last batch of one alone, `e` then the entry then `a`. The
    entry expression does not read the boundaries; the reader of what lies between two of its
    matches does, and the file stays decoded."""
    rows = entries(count)
    stacks: dict[int, Any] = {}
    for i, row in enumerate(rows):
        row["frames"] = stacks.setdefault(i // 400, row["frames"])  # few first definitions
    data = dumps(make_dump(rows), protocol=4)
    same_rank(by_decoder(data), by_unpickler(data))


def test_pythons_pickle_of_a_stack_per_entry_is_decoded_exactly(tmp_path: Path) -> None:
    """Frame dicts of their own in every entry (a dump converted from JSON, say): every entry
    writes its frames anew, and the expression reads them as it reads references."""
    spec = Spec(world_size=64, steps=14, capacity=1500)
    dump = simulation(spec).dump(5)
    assert dump is not None
    data = python_pickle(dump, shared_frames=False)
    result = load_rank(file_of(tmp_path, data))
    assert isinstance(result, RankDump) and result.reader is Reader.DECODER
    assert result.fallback == ""
    same_rank(result, build_rank(pickle.loads(data), 0, result.file, nbytes=len(data)))


def test_pythons_first_definitions_inside_entries_are_read_by_the_expression() -> None:
    """Python's pickler writes each new frame, string and group pair where it is first met,
    inside the entry. The expression reads such entries too (600 of them, past the exact
    reader's 256), with the frame met twice in one stack, a file name defined by one frame and
    referred to by the next, and strings of up to 255 bytes."""
    rows = entries(2000)
    for i in range(0, 1800, 3):
        deep = "x" * (180 + i % 50)
        stack = frames("step", f"new{i}", deep)
        stack[2]["filename"] = stack[1]["filename"] = f"/src/{deep}{i}.py"
        rows[i]["frames"] = [stack[0], stack[1], stack[1], stack[2]]  # a recursive frame
        rows[i]["profiling_name"] = f"nccl:all_reduce{i % 7}"
        rows[i]["process_group"] = (f"pg{i % 11}", "tp")
        rows[i]["input_dtypes"] = [f"Float{i % 5}"]
    data = pickle.dumps(make_dump(rows), protocol=4)
    same_rank(by_decoder(data), by_unpickler(data))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("dumps", [pickle.dumps, pure_python_dumps], ids=["C", "pure Python"])
def test_pythons_pickle_of_a_world_of_16384_ranks_is_decoded(
    protocol: int, dumps: Callable[..., bytes]
) -> None:
    """The world group's member list of 16,384 ranks is a string over 64 KiB: Python's
    pickler writes it between two frames, not in one."""
    rows = entries(300)
    data = dumps(make_dump(rows, {"0": ("default_pg", list(range(16384)))}), protocol=protocol)
    assert len(str(list(range(16384)))) >= 64 * 1024
    same_rank(by_decoder(data), by_unpickler(data))


def test_a_string_written_again_in_every_entry_is_read_by_the_expression() -> None:
    """Some writers build the op name anew for each entry: Python's pickler then writes it
    again (another object) instead of referring to it; more such entries than the exact
    reader takes (256) are read by the entry expression."""
    rows = entries(600)
    stacks: dict[int, Any] = {}
    for i, row in enumerate(rows):
        row["profiling_name"] = "".join(["nccl:", "all_reduce"])  # a new object each time
        row["frames"] = stacks.setdefault(i // 5, row["frames"])  # as torch's dumps load
    data = pickle.dumps(make_dump(rows), protocol=4)
    assert data.count(b"nccl:all_reduce") == 600
    same_rank(by_decoder(data), by_unpickler(data))


@pytest.mark.parametrize("protocol", [2, 3])
def test_pythons_protocols_2_and_3_are_decoded_their_puts_made_implicit(protocol: int) -> None:
    """An older script re-saves a dump in protocol 2: every put carries its slot (`r` and four
    bytes past slot 255), so no two entries have equal bytes. The puts made MEMOIZE, the
    entries read as protocol 4's are, strings written again (BINUNICODE) included."""
    rows = entries(2500)
    for row in rows:
        row["profiling_name"] = "".join(["nccl:", "all_reduce"])  # a new object each time
    data = pickle.dumps(make_dump(rows), protocol=protocol)
    assert data[:4] == bytes((0x80, protocol)) + b"}q"
    found = decode_any(data)
    assert isinstance(found, Decoded)
    same_rank(by_decoder(data), by_unpickler(data))


def test_an_r_inside_a_string_that_reads_as_a_slot_sends_the_file_the_general_way() -> None:
    """A string holding `r` and the bytes of a slot in range: the puts are not numbered as
    Python numbers them, and the file is read by the unpickler, rightly."""
    rows = entries(400)
    rows[300]["profiling_name"] = "nccl:all_reduce" + "r\x00\x01\x00\x00"  # slot 256
    data = pickle.dumps(make_dump(rows), protocol=2)
    found = decode_any(data)
    assert not isinstance(found, Decoded) and "numbered" in found
    assert by_unpickler(data).entries == 400


def test_damaged_protocol_2_bytes_are_read_as_the_unpickler_reads_them_or_left_to_it() -> None:
    """Cut short, bytes changed, or an `r` and a slot in range put anywhere: the decoder of
    Python's protocol 2 refuses (`NotDecoded`, the file then goes the general way) or reads
    what the unpickler reads; it never raises anything else."""
    data = pickle.dumps(make_dump(entries(400)), protocol=2)
    rng = random.Random(49)
    decoded = 0
    for trial in range(600):
        damaged = bytearray(data)
        if trial % 3 == 0:
            damaged = damaged[: rng.randrange(4, len(damaged))]
        elif trial % 3 == 1:
            for _ in range(rng.randrange(1, 5)):
                damaged[rng.randrange(4, len(damaged))] = rng.randrange(256)
        else:
            at = rng.randrange(4, len(damaged))
            damaged[at:at] = b"r" + (256 + rng.randrange(2000)).to_bytes(4, "little")
        decoded += read_alike_or_refused(bytes(damaged))
    assert decoded > 0  # some damage is read (a changed digit, a value): compared, not refused


def test_a_stray_memoize_after_slot_256_is_read_as_the_unpickler_reads_it_or_refused() -> None:
    """A MEMOIZE opcode put after a long put of a protocol 2 file (Python's pickler never
    writes one there; the unpickler memoizes at the memo's size, and the next put writes that
    slot again): the puts made MEMOIZE number their slots one on from it, so the decoder
    refuses, or reads what the unpickler reads, never another value."""
    rows = entries(400)
    later = "".join(["nccl:", "reduce_scatter"])  # first put past slot 256, then fetched
    for row in rows[200:]:
        row["profiling_name"] = later
    data = pickle.dumps(make_dump(rows), protocol=2)
    ends = [(pos or 0) + 5 for op, _, pos in pickletools.genops(data) if op.name == "LONG_BINPUT"]
    decoded = sum(
        read_alike_or_refused(data[:at] + bytes((pickle.MEMOIZE[0],)) + data[at:])
        for at in ends[::37]
    )
    assert decoded > 0


def read_alike_or_refused(damaged: bytes) -> int:
    """Damaged bytes are refused by the decoder (`NotDecoded`, then the general path) or read
    as the unpickler reads them; nothing else is raised. 1 where the decoder read them."""
    found = decode_any(damaged)
    if not isinstance(found, Decoded):
        return 0
    unpickled = pickle.loads(damaged)  # what the decoder read, the unpickler reads
    with contextlib.suppress(NotDecoded):  # an odd value: the careful reader's
        decoded = build_rank(found, 0, "f", nbytes=len(damaged))
        same_rank(decoded, build_rank(unpickled, 0, "f", nbytes=len(damaged)))
    return 1


def test_every_protocol_2_put_is_made_memoize_and_the_body_unpickles_alike() -> None:
    """The 256 short puts (`q` and a byte) and the long ones after (`r` and four bytes) are
    all made MEMOIZE, so the entries before slot 256 are read by the expression too; read as
    protocol 4, the body unpickles to what the file does."""
    data = pickle.dumps(make_dump(entries(400)), protocol=2)
    body = b"\x80\x04" + _implicit_puts(data)
    names = [op.name for op, _, _ in pickletools.genops(body)]
    assert "BINPUT" not in names and "LONG_BINPUT" not in names
    assert names.count("MEMOIZE") == sum(n in ("BINPUT", "LONG_BINPUT") for n in ops_of(data))
    assert pickle.loads(body) == pickle.loads(data)
    same_rank(by_decoder(data), by_unpickler(data))


def ops_of(data: bytes) -> list[str]:
    return [op.name for op, _, _ in pickletools.genops(data)]


def test_a_q_inside_a_string_before_slot_256_is_not_taken_for_a_put() -> None:
    """The first entries' frames hold `q` and each printable byte, which reads as the short
    put of slots 32 to 126: the short puts are found by reading the opcodes, not by their
    bytes, and the file is decoded to what the unpickler gives."""
    rows = entries(400)
    for i, row in enumerate(rows[:30]):
        row["frames"] = frames("step", f"L{i}" + "".join("q" + chr(k) for k in range(32, 127)))
    data = pickle.dumps(make_dump(rows), protocol=2)
    same_rank(by_decoder(data), by_unpickler(data))


def test_damaged_protocol_2_bytes_before_slot_256_are_read_as_the_unpickler_reads_them() -> None:
    """Where the puts are short (`q` and a byte), damage (a byte changed, a `q` and a byte
    put anywhere, bytes cut out) is refused (`NotDecoded`) or read as the unpickler reads it;
    nothing else is raised."""
    data = pickle.dumps(make_dump(entries(400)), protocol=2)
    first_long = data.index(b"r" + (256).to_bytes(4, "little"))
    rng = random.Random(256)
    decoded = 0
    for trial in range(600):
        damaged = bytearray(data)
        at = rng.randrange(4, first_long)
        if trial % 3 == 0:
            damaged[at] = rng.randrange(256)
        elif trial % 3 == 1:
            damaged[at:at] = b"q" + bytes((rng.randrange(256),))
        else:
            del damaged[at : at + rng.randrange(1, 4)]
        decoded += read_alike_or_refused(bytes(damaged))
    assert decoded > 0  # some damage is read (a changed digit, a value): compared, not refused


def test_real_torch_dumps_saved_again_by_python_are_decoded_exactly() -> None:
    files = [f.path for d in sorted(SAMPLES.glob("gloo_*")) for f in discover(d).files]
    pickles = [f for f in files if ".json" not in f.name and f.suffix != ".gz"]
    for file in pickles[:12]:
        data = pickle.dumps(pickle.loads(file.read_bytes()), protocol=4)
        same_rank(by_decoder(data), by_unpickler(data))


def test_every_sample_pickle_saved_again_in_protocol_2_or_3_is_decoded_exactly() -> None:
    """Every pickle of the sample sets, re-saved by an older script (protocol 2 or 3, each put
    with its slot), is decoded, to what the unpickler gives (but where the careful reader
    takes the decoded dump over)."""
    pickles = [
        p for p in sorted(SAMPLES.rglob("*")) if p.is_file() and p.read_bytes()[:2] == b"\x80\x02"
    ]
    assert len(pickles) >= 400
    for path, protocol in itertools.product(pickles, (2, 3)):
        data = pickle.dumps(pickle.loads(path.read_bytes()), protocol=protocol)
        found = decode_any(data)
        assert isinstance(found, Decoded), (path, protocol, found)
        with contextlib.suppress(NotDecoded):  # an odd value: the careful reader's
            decoded = build_rank(found, 0, "f", nbytes=len(data))
            same_rank(decoded, by_unpickler(data))


def py4(body: bytes) -> bytes:
    """A protocol-4 pickle of these opcodes, unframed (as Python writes a small one)."""
    return b"\x80\x04" + body + b"."


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # {"a": L} where L appends itself: a cycle
        (b"}\x94(\x8c\x01a\x94]\x94h\x02au", "a container changed after it is referred to"),
        # a list placed in the dict, then changed through the memo
        (b"}\x94(\x8c\x01a\x94]\x94\x8c\x01b\x94h\x02uh\x02K\x01a", "changed after"),
        # lists nested 70 deep through memo references, each holding the one before
        (
            b"}\x94(\x8c\x01a\x94]\x94"
            + b"".join(b"]\x94h" + bytes([2 + k]) + b"a" for k in range(70))
            + b"u",
            "nested too deeply",
        ),
        (b"}\x94(\x8c\x01a\x94]\x94\x8c\x01b\x94\x86\x94u", "a tuple holding a container"),
        (b"}\x94(K\x01K\x02\x86\x94K\x03u", "a dict key that is not a string"),
        (b"}\x94(\x8c\x01a\x94\x8c\x08builtins\x8c\x04eval\x93u", "an opcode"),
        (b"}\x94(\x8c\x01a\x94j\xff\xff\xff\x7fu", "malformed"),  # a memo index far away
        (b"}\x94(" + b"(" * 100, "nested too deeply"),
    ],
)
def test_pythons_layout_holds_no_bomb(tmp_path: Path, body: bytes, reason: str) -> None:
    """The decoder of Python's layout builds only plain values: what could loop, nest without
    end, run code or hash forever is left to the general path, which explains it."""
    found = decode_python_or_why(py4(body))
    assert isinstance(found, str) and reason in found, found
    result = load_rank(file_of(tmp_path, py4(body)))
    assert isinstance(result, UnreadableDump)


def test_entries_holding_first_definitions_anywhere_are_read_exactly() -> None:
    rows = entries(40)
    rows[17]["profiling_name"] = "nccl:broadcast"  # a new string mid-list
    rows[39]["input_dtypes"] = ["Half"]  # and in the last entry
    data = torch_bytes(make_dump(rows))
    same_rank(by_decoder(data), by_unpickler(data))


def test_torch_first_definitions_inside_entries_are_read_by_the_expression() -> None:
    """torch writes each new string and frame where it is first met, inside the entry, with
    the next memo slot. The expression reads such entries (600 of them, past the exact
    reader's 256) and decodes them in file order, so every slot is written in turn."""
    rows = entries(2000)
    for i in range(0, 1800, 3):
        stack = frames("step", f"new{i}", "x" * (180 + i % 50))
        rows[i]["frames"] = [stack[0], stack[1], stack[1], stack[2]]  # a recursive frame
        rows[i]["profiling_name"] = f"nccl:all_reduce{i % 7}"
        rows[i]["process_group"] = (f"pg{i % 11}", "tp")
        rows[i]["input_dtypes"] = [f"Float{i % 5}"]
    data = torch_bytes(make_dump(rows))
    same_rank(by_decoder(data), by_unpickler(data))


@pytest.mark.parametrize("writer", ["torch", "python"])
def test_dimensions_past_2_to_the_31_are_read_by_the_expression(writer: str) -> None:
    """A dimension of 2**31 or more is pickled as LONG1 (large embeddings, flat buffers): the
    expression reads such shapes (in every entry here, past the exact reader's 256)."""
    rows = entries(600)
    for i, row in enumerate(rows):
        row["input_sizes"] = [[(1 << 31) + i % 3, 4]]
        row["output_sizes"] = [[1 << 40]]
    dump = make_dump(rows)
    data = torch_bytes(dump) if writer == "torch" else pickle.dumps(dump, protocol=4)
    same_rank(by_decoder(data), by_unpickler(data))


def test_an_entry_writing_a_memo_slot_twice_is_left_to_the_unpickler(tmp_path: Path) -> None:
    """The same bytes twice, writing the same memo slot twice: torch never writes that, and
    the unpickler overwrites the slot, so the decoder leaves the file to it."""
    rows = entries(40)
    rows[17]["profiling_name"] = "nccl:broadcast"  # written, with its slot, in entry 17
    data = torch_bytes(make_dump(rows))
    start = data.index(b"X\x0e\x00\x00\x00nccl:broadcast")
    begin = data.rindex(b"}(", 0, start)
    end = data.index(b"}(", start)
    forged = data[:end] + data[begin:end] + data[end:]  # entry 17 twice
    assert decode(forged) is None
    result = load_rank(file_of(tmp_path, forged))
    assert isinstance(result, RankDump) and result.reader is not Reader.DECODER
    same_rank(result, build_rank(pickle.loads(forged), 0, result.file, nbytes=len(forged)))


def test_integers_of_every_pickled_width_decode_exactly() -> None:
    rng = random.Random(7)
    values = [0, 1, 255, 256, 65535, 65536, -1, -(1 << 31), (1 << 31) - 1, 1 << 31]
    values += [(1 << 63) - 1, -(1 << 63), -(1 << 40), 1 << 47, -129, -32769]
    values += [rng.randrange(-(1 << 63), 1 << 63) >> rng.randrange(64) for _ in range(500)]
    caps = [pickle.dumps(v, protocol=2)[2:-1] for v in values]  # the opcode and its argument
    caps.append(b"N")
    values.append(-1)
    ((column,),) = run_ints([(caps, ())])
    assert column.tolist() == values
    # Runs of three, with a short and a long key reference between them.
    third = len(caps) // 3
    triples = zip(
        caps[0 : 3 * third : 3], caps[1 : 3 * third : 3], caps[2 : 3 * third : 3], strict=True
    )
    run = [a + b"h\x05" + b + b"j\x00\x01\x00\x00" + c for a, b, c in triples]
    (columns, (alone,)) = run_ints([(run, (2, 5)), (caps[::-1], ())])
    assert [c.tolist() for c in columns] == [values[i : 3 * third : 3] for i in range(3)]
    assert alone.tolist() == values[::-1]


def file_of(tmp_path: Path, data: bytes) -> DumpFile:
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data)
    return DumpFile(0, path)


def slot_of(data: bytes, text: str) -> int:
    for (op, arg, _), (put, slot, _) in itertools.pairwise(pickletools.genops(data)):
        if op.name == "BINUNICODE" and arg == text and put.name == "BINPUT":
            assert isinstance(slot, int)  # BINPUT's argument: the memo slot
            return slot
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
    with pytest.raises(NotDecoded):
        build_rank(decoded, 0, "f", nbytes=len(data))
    result = load_rank(file_of(tmp_path, data))
    assert isinstance(result, RankDump)
    assert result.entries == 29 and [i for i, _ in result.entry_errors] == [20]
    assert result.reader is Reader.PER_ENTRY and result.fallback.startswith("decoder: ")
    same_rank(result, build_rank(pickle.loads(data), 0, result.file, nbytes=len(data)))


# ---------------------------------------------------------------------------------------------
# Properties over generated dumps: whatever torch's layout can hold, the decoder reads to the
# columns the unpickler path gives, or leaves to that path; never to other columns.

# CI runs a fixed set of examples; FR_DECODE_EXAMPLES=5000 explores new random ones instead.
EXPLORE = int(os.environ.get("FR_DECODE_EXAMPLES", "0"))
PROPERTY = settings(
    max_examples=EXPLORE or 50,
    deadline=None,
    derandomize=not EXPLORE,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

PROFILING_NAMES = [
    "nccl:all_reduce",
    "nccl:broadcast",
    "nccl:_all_gather_base",
    "nccl:_reduce_scatter_base",
    "nccl:all_gather",
    "nccl:reduce_scatter",
    "nccl:all_to_all",
    "nccl:allreduce_coalesced",
    "nccl:_broadcast_oop",
    "nccl:_reduce_oop",
    "nccl:all_reduce_barrier",
    "nccl:send 0->1",
    "nccl:recv 1<-0",
    "nccl:send 3->0",
    "nccl:recv 0<-3",
    "nccl:recv 1<-?",
    "nccl:coalesced",
    "nccl:ALLGATHER_coalesced",
    "nccl:REDUCE_SCATTER_coalesced",
    "gloo:broadcast",
    "gloo:all_reduce",
    "gloo:all_gather",
    "xccl:all_reduce",
    "ncclx:reduce_scatter_tensor_coalesced",
    "c10d:all_reduce",
    "nccl:all_gather_single",  # an op fr-analyze does not know: a warning
    "mybackend:all_reduce",  # an unknown backend: a warning
]
# Names the careful reader reads (naming the entry): no backend, no peer, a bad peer, long.
ODD_PROFILING_NAMES = ["nonsense", "nccl:send", "nccl:recv 1<-x", "nccl:", "nccl:" + "x" * 70]
GROUPS = [
    ("0", "default_pg"),
    ("1", "tp:0"),
    ("2", "dp_replicate"),
    ("3", "pipeline stage 1"),
    ("17", "cp"),
    ("", ""),  # gloo
    ("grüppe", "désc ✓"),
]
DTYPES = ["Float", "BFloat16", "Half", "Long", "Int", "Bool", "Float8_e4m3fn", "ComplexFloat"]
VERSIONS = ["2.10", "2.9", "2.8", "2.4", "2.2", ""]
INT64_MAX = (1 << 63) - 1

# Integers of every width torch's pickler writes (BININT1, BININT2, BININT, 8-byte LONG1) and
# the edges between them. Not int64's minimum: the decoder leaves it to the general path when
# an entry it reads itself holds it (the normalizer refuses it as out of range anyway), so
# `decode` could give None.
sized_ints = st.one_of(
    st.integers(-1, 300),
    st.integers(0, 1 << 16),
    st.integers(-(1 << 31), 1 << 32),
    st.integers(-INT64_MAX, INT64_MAX),
    st.sampled_from([255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, INT64_MAX]),
)
printable_text = st.text(
    st.characters(codec="utf-8", categories=["L", "M", "N", "P", "S"]) | st.just(" "),
    min_size=1,
    max_size=30,
)
frame_texts = st.one_of(
    st.sampled_from(["forward", "backward", "step", "<module>", "/src/train.py", "nn.py"]),
    printable_text,
    st.text(st.sampled_from("aé✓_/"), min_size=200, max_size=256),  # long, but plain
)
# Beyond the column-wise readers (too long, or unprintable): the careful reader reads the rank.
odd_frame_texts = st.text(min_size=257, max_size=400) | st.text(max_size=20)


@st.composite
def frame_dicts(draw: st.DrawFn, odd: bool) -> dict[str, Any]:
    texts = frame_texts | odd_frame_texts if odd else frame_texts
    return {"name": draw(texts), "filename": draw(texts), "line": draw(sized_ints)}


def shape_lists(odd: bool) -> st.SearchStrategy[list[list[int]]]:
    shapes = st.one_of(
        st.lists(st.integers(0, 64), max_size=6),  # [] is a scalar's shape
        st.lists(st.integers(0, 1 << 20), max_size=2),
        st.integers(0, 1 << 40).map(lambda d: [d]),  # up to the numel bound
    )
    if odd:  # beyond the numel bound: the careful reader names the entry
        shapes |= st.lists(st.integers(1 << 21, 1 << 40), min_size=2, max_size=4)
    # Over 16 shapes per entry: the column-wise reader of unpickled entries leaves those to
    # the careful reader, while the decoder's columns are read column-wise.
    return st.lists(shapes, max_size=20 if odd else 4)


@st.composite
def fr_dumps(draw: st.DrawFn) -> dict[str, Any]:
    """A dump with the keys torch writes, in its order (FlightRecorderDetail.hpp). Values
    repeat through small per-dump pools, as in real dumps (and so that 60 entries stay cheap
    to draw). A quarter of the dumps also hold values that only the careful reader reads."""
    odd = draw(st.sampled_from([False, False, False, True]))
    groups = draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=4, unique=True))
    names = draw(st.lists(st.sampled_from(PROFILING_NAMES), min_size=1, max_size=6))
    if odd:
        names += draw(st.lists(st.sampled_from(ODD_PROFILING_NAMES), max_size=1))
    frame_pool = draw(st.lists(frame_dicts(odd), min_size=1, max_size=20))
    # Stacks share frames, and hold frames of their own.
    stack = st.lists(st.sampled_from(frame_pool) | frame_dicts(odd), max_size=10)
    stack_pool = draw(st.lists(stack, min_size=1, max_size=6))
    shape_pool = draw(st.lists(shape_lists(odd), min_size=1, max_size=5))
    dtype_pool = draw(
        st.lists(st.lists(st.sampled_from(DTYPES), max_size=3), min_size=1, max_size=4)
    )
    int_pool = draw(st.lists(sized_ints, min_size=1, max_size=8))
    ints = st.sampled_from(int_pool)
    highest_seq = INT64_MAX if odd else MAX_SEQ_ID  # beyond 2**62: refused per entry
    seq_ids = st.integers(-1, 3) | ints.map(lambda v: v if -1 <= v <= highest_seq else -1)
    threads = st.sampled_from(
        draw(
            st.lists(
                st.tuples(printable_text, st.integers(0, INT64_MAX).map(str)),
                min_size=1,
                max_size=2,
            )
        )
    )
    # Torch writes "frames" in every entry, or (stacks not included) in none. Always here:
    # the decoder refuses entries without it (test_a_torch_dump_without_stacks_is_decoded).
    with_duration = draw(st.sampled_from(["all", "none", "some"]))  # "some": two layouts
    durations = st.none() | st.floats() | st.sampled_from([0.0, 1.5, 1e10, 1e11])
    states = st.sampled_from(["scheduled", "started", "completed"] + ["timed out"] * odd)
    first_record = draw(st.sampled_from([0, 1, 1000, INT64_MAX - 100]))  # not 0: wrapped
    entries = []
    for i in range(draw(st.integers(1, 60))):
        name = draw(st.sampled_from(names))
        frames = draw(st.sampled_from(stack_pool))
        thread_name, thread_id = draw(threads)
        entry: dict[str, Any] = {
            # Equal frames as other dicts: one shared dict in torch's file, not in Python's.
            "frames": [dict(f) for f in frames] if draw(st.booleans()) else frames,
            "record_id": first_record + i if draw(st.booleans()) else draw(ints),
            "pg_id": draw(st.sampled_from([0, 1, 2, 1 << 40])),
            "process_group": draw(st.sampled_from(groups)),
            "thread_name": thread_name,
            "thread_id": thread_id,
            "collective_seq_id": draw(seq_ids),
            "p2p_seq_id": draw(seq_ids),
            "op_id": draw(ints),
            "profiling_name": name,
            "time_created_ns": draw(ints.map(abs)),
        }
        if with_duration == "all" or (with_duration == "some" and draw(st.booleans())):
            entry["duration_ms"] = draw(durations)
        entry |= {
            "input_sizes": draw(st.sampled_from(shape_pool)),
            "input_dtypes": draw(st.sampled_from(dtype_pool)),
            # A list of its own: Python's pickle would share one list object between input
            # and output sizes (test_a_shapes_list_shared_by_input_and_output_sizes_...).
            "output_sizes": list(draw(st.sampled_from(shape_pool))),
            "output_dtypes": draw(st.sampled_from(dtype_pool)),
            "state": draw(states),
            "time_discovered_started_ns": draw(st.none() | ints),
            "time_discovered_completed_ns": draw(st.none() | st.just(0) | ints),
            "retired": draw(st.booleans()),
            "timeout_ms": draw(st.sampled_from([600000, 0, -1, 1 << 33])),
            # is_p2p on an op that is neither send, recv nor a marker: refused per entry
            "is_p2p": draw(st.booleans()) if odd else name.split(":")[-1][:4] in ("send", "recv"),
        }
        entries.append(entry)
    header = draw(fr_headers(groups))
    at = draw(st.integers(0, len(header)))  # torch writes "entries" last; any place reads
    items = list(header.items())
    return dict([*items[:at], ("entries", entries), *items[at:]])


@st.composite
def fr_headers(draw: st.DrawFn, groups: list[tuple[str, str]]) -> dict[str, Any]:
    ranks = st.sampled_from(["[0, 1]", "[0]", "[0, 1, 2, 3]", "[1, 2]", "[]"])
    if draw(st.booleans()):
        config = {n: {"name": n, "desc": d, "ranks": draw(ranks)} for n, d in groups if n}
    else:  # as gloo writes it: every group keyed by ''
        config = {"": {"name": "", "desc": "", "ranks": "[]"}}
    # Many groups (a big job): over 256 strings before the entries, whose keys then all sit
    # in memo slots past 255 (LONG_BINGET).
    for k in range(draw(st.sampled_from([0, 0, 130]))):
        config[f"g{k}"] = {"name": f"g{k}", "desc": f"desc {k}", "ranks": f"[0, {k + 1}]"}
    counters = st.integers(-1, 1 << 40)
    status = {
        str(pg_id): {
            "last_enqueued_collective": draw(counters),
            "last_started_collective": draw(counters),
            "last_completed_collective": draw(counters),
        }
        for pg_id in draw(st.lists(st.sampled_from([0, 1, 2, 1 << 40]), unique=True))
    }
    header = {
        "version": draw(st.sampled_from(VERSIONS)),
        "pg_config": config,
        "pg_status": status,
        draw(st.sampled_from(["comm_lib_version", "nccl_version"])): draw(
            st.sampled_from(["2.21.5", ""])
        ),
    }
    if draw(st.booleans()):
        header["nccl_comm_state"] = {}
    return dict(draw(st.permutations(list(header.items()))))


@pytest.mark.slow
@PROPERTY
@given(dump=fr_dumps())
def test_the_decoder_and_the_unpickler_give_the_same_columns(dump: dict[str, Any]) -> None:
    data = torch_bytes(dump)
    assert decode(data) is not None  # everything torch's layout holds is in the grammar
    expected = by_unpickler(data)
    try:
        decoded = by_decoder(data)
    except NotDecoded:
        # A value only the careful reader takes: the loader reads the file again as dicts.
        # The column-wise reader must leave the unpickled entries to it as well.
        event("left to the careful reader")
        assert expected.reader is Reader.PER_ENTRY
        return
    same_rank(decoded, expected)


@pytest.mark.slow
@PROPERTY
@given(dump=fr_dumps())
def test_pythons_pickler_is_decoded_alike_or_left_to_the_unpickler(dump: dict[str, Any]) -> None:
    """Python's pickler writes the same objects other ways (memo puts for every container,
    batches of items, frames shared only when they are one object, protocols 2 to 5). Each
    protocol it decodes is decoded to what the unpickler gives; what the decoder leaves (a
    list shared within an entry, a protocol-2 file whose memo slots stay below 256) goes to
    the unpickler, which gives what torch's bytes give."""
    expected = by_unpickler(torch_bytes(dump))
    for protocol in range(2, 6):
        data = pickle.dumps(dump, protocol=protocol)
        unpickled = by_unpickler(data)
        same_rank(unpickled, expected)
        found = decode_any(data)
        if isinstance(found, Decoded):
            event(f"Python's protocol {protocol}: decoded")
            with contextlib.suppress(NotDecoded):
                same_rank(build_rank(found, 0, "f", nbytes=len(data)), unpickled)
        elif protocol >= 4:
            event(f"Python's protocol {protocol}: {found.split(' (')[0]}")


def test_a_torch_dump_without_stacks_is_decoded() -> None:
    rows = entries(3)
    for row in rows:
        del row["frames"]
    data = torch_bytes(make_dump(rows))
    assert decode(data) is not None
    same_rank(by_decoder(data), by_unpickler(data))


@pytest.mark.xfail(
    strict=True,
    reason="the careful reader caches a list of more than 8 shapes by its identity, with the"
    " error worded for the key it was first met under: an entry whose input_sizes is the same"
    " list object as an earlier entry's output_sizes is said to have an absurd output_sizes",
)
def test_a_shapes_list_shared_by_input_and_output_sizes_names_the_right_key() -> None:
    shared: list[list[int]] = [[]] * 8 + [
        [1 << 21, 1 << 21]
    ]  # 9 shapes (the cache's size), one absurd
    rows = entries(2)
    rows[0]["output_sizes"] = shared
    rows[1]["input_sizes"] = shared
    dump = make_dump(rows)  # Python's pickle keeps `shared` one list; torch's writes it twice
    same_rank(by_unpickler(pickle.dumps(dump, protocol=4)), by_unpickler(torch_bytes(dump)))


def test_a_decoder_says_why_not_as_a_reason_and_the_writer_whose_layout_it_found() -> None:
    # GIVEN a dump in torch's layout, cut short, and a dump Python's pickler wrote
    data = torch_bytes(make_dump(entries(4)))
    cut, other = data[: len(data) // 2], pickle.dumps(make_dump(entries(4)), protocol=4)
    # WHEN torch's decoder reads them
    with pytest.raises(NotDecoded) as in_torch:
        decode_torch(cut)
    with pytest.raises(NotDecoded) as not_torch:
        decode_torch(other)
    # THEN each says why as a reason (the words unchanged), and in whose layout it found them
    assert in_torch.value.reason is Fallback.OUTSIDE_GRAMMAR
    assert in_torch.value.writer is Writer.TORCH_PICKLE
    assert str(in_torch.value) == "torch's pickle layout, but a string runs past the end"
    assert not_torch.value.reason is Fallback.NOT_THIS_LAYOUT and not_torch.value.writer is None
    assert str(not_torch.value) == "pickle protocol 4: not torch's pickle layout (protocol 2)"
    # AND Python's decoder finds the second in Python's layout
    assert isinstance(decode_any(other), Decoded)
