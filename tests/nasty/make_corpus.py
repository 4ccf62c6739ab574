"""Write the nasty-file corpus (tests/nasty/) and its README, byte for byte the same each run.

    .venv/bin/python tests/nasty/make_corpus.py

Every file stands in for rank 1 of `sample_dumps/gloo_healthy`; the field-level ones are that
real dump with one thing spoiled. The exact reason each must produce is pinned in
tests/hostile/test_damaged_dumps.py (NASTY). Files meant to run code would create a file named
`fr_analyze_pwned` in the working directory.
"""

from __future__ import annotations

import copy
import gzip
import json
import lzma
import pickle
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BASE = HERE.parent.parent / "sample_dumps" / "gloo_healthy" / "rank_1.pkl"
MARKER = "fr_analyze_pwned"


def base() -> dict[str, Any]:
    """The real gloo dump of rank 1 (a trusted, bundled file: plain pickle is fine)."""
    with BASE.open("rb") as stream:
        dump: dict[str, Any] = pickle.load(stream)
    return copy.deepcopy(dump)


def base_json() -> dict[str, Any]:
    """The same dump as its JSON flavour holds it: no stack frames."""
    dump = base()
    for entry in dump["entries"]:
        entry.pop("frames", None)
    return dump


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def binunicode(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def with_placeholder(dump: dict[str, Any], opcodes: bytes) -> bytes:
    """`dump` pickled (protocol 2) with the string "@@HERE@@" replaced by `opcodes`, which
    must push exactly one object (as the string did)."""
    data = pickle.dumps(dump, protocol=2)
    placeholder = binunicode("@@HERE@@")
    assert data.count(placeholder) == 1
    return data.replace(placeholder, opcodes)


def nested_global() -> bytes:
    """A real dump whose first entry's first frame is os.system(...): what a __reduce__
    returning (os.system, (cmd,)) writes, nested deep inside genuine data."""
    dump = base()
    dump["entries"][0]["frames"][0] = "@@HERE@@"
    call = b"cos\nsystem\n" + binunicode(f"touch {MARKER}") + b"\x85R"
    return with_placeholder(dump, call)


def posix_system_proto0() -> bytes:
    """Protocol 0: the GLOBAL opcode as text, then REDUCE."""
    return f"cposix\nsystem\n(S'touch {MARKER}'\ntR.".encode()


def inst_os_system() -> bytes:
    """Protocol 0 INST: look up os.system and call it in one opcode."""
    return f"(S'touch {MARKER}'\nios\nsystem\n.".encode()


def stack_global_eval() -> bytes:
    """Protocol 4 STACK_GLOBAL: builtins.eval from two strings on the stack, then REDUCE."""
    source = f"open({MARKER!r}, 'w')".encode()
    return (
        b"\x80\x04\x8c\x08builtins\x94\x8c\x04eval\x94\x93"
        + b"\x8c"
        + bytes([len(source)])
        + source
        + b"\x94\x85R."
    )


def numpy_reconstruct() -> bytes:
    """How a numpy array pickles: numpy.core.multiarray._reconstruct(ndarray, (0,), b'b')."""
    return (
        b"\x80\x02cnumpy.core.multiarray\n_reconstruct\nq\x00cnumpy\nndarray\nq\x01"
        b"K\x00\x85q\x02C\x01b\x87q\x03Rq\x04."
    )


def memo_index_bomb() -> bytes:
    """Nine bytes: LONG_BINPUT at index 2**31 - 1 makes CPython's unpickler allocate and zero a
    16 GiB memo table."""
    return b"\x80\x02N" + b"r" + struct.pack("<I", 2**31 - 1) + b"."


def deep_tuple_key() -> bytes:
    """{((...(('x',),)...),): 1} nested 200,000 deep: hashing the key overflows the C stack
    (a segfault) in an unguarded unpickler."""
    return gz(b"\x80\x02}" + binunicode("x") + b"\x85" * 200_000 + b"K\x01s.")


def tuple_hash_bomb() -> bytes:
    """t = (t, t) a hundred times via DUP, used as a dict key: hashing visits 2**100 tuples."""
    return b"\x80\x02}K\x01" + b"2\x86" * 100 + b"K\x01s."


def memo_repeat_bomb() -> bytes:
    """2,000 references to one entry whose input_sizes holds 2,000 references to one 60-dim
    shape: 2.4e8 dimensions from a few KB."""
    dump = base()
    entry = dump["entries"][0]
    entry["input_sizes"] = [[1] * 60] * 2_000
    dump["entries"] = [entry] * 2_000
    return pickle.dumps(dump, protocol=2)


def dense_entries() -> bytes:
    """1,000,000 references to one entry (two bytes each)."""
    dump = base()
    dump["entries"] = [dump["entries"][0]] * 1_000_000
    return gz(pickle.dumps(dump, protocol=2))


def deep_list() -> bytes:
    """entries[0] is a list nested 500,000 deep (harmless: the entry is skipped)."""
    dump = base()
    dump["entries"][0] = "@@HERE@@"
    return gz(with_placeholder(dump, b"]" * 500_000 + b"a" * 499_999))


def deep_json() -> bytes:
    dump = base_json()
    del dump["entries"]
    text = json.dumps(dump)
    return (text[:-1] + ', "entries": ' + "[" * 5_000 + "]" * 5_000 + "}").encode()


def gzip_bomb() -> bytes:
    """36 MiB of zeros in three gzip members (about 36 KB): inflates over 1000x."""
    member = gz(bytes(12 << 20))
    return member * 3


def truncated_87() -> bytes:
    return BASE.read_bytes()[:87]


def json_array() -> bytes:
    return b"[1, 2, 3]\n"


def entries_is_dict() -> bytes:
    dump = base_json()
    dump["entries"] = {str(i): e for i, e in enumerate(dump["entries"])}
    return json.dumps(dump).encode()


def gzip_truncated() -> bytes:
    data = gz(BASE.read_bytes())
    return data[: len(data) // 2]


def invalid_utf8_string() -> bytes:
    """A BINUNICODE string holding bytes that are not UTF-8: the unpickler refuses the file."""
    dump = base()
    dump["version"] = "@@HERE@@"
    return with_placeholder(dump, b"X\x04\x00\x00\x002.\xff\xfe")


def non_utf8_names() -> bytes:
    """Text that is not clean: bytes where strings belong, a lone surrogate and a terminal
    escape sequence in a frame name, a profiling_name given as bytes."""
    dump = base()
    entries = dump["entries"]
    for entry in entries:
        entry["thread_name"] = b"pt_main\xff\xfe"
    entries[0]["frames"][0]["name"] = "forward\udcff\x1b[31m"
    entries[0]["frames"][0]["filename"] = b"/work/tr\xe4in.py"
    entries[1]["profiling_name"] = entries[1]["profiling_name"].encode() + b"\xff"
    return pickle.dumps(dump, protocol=4)  # protocol 2 would pickle bytes through a global


def non_utf8_json() -> bytes:
    """A JSON dump with a raw 0xff byte inside a string."""
    dump = base_json()
    dump["entries"][0]["thread_name"] = "@@HERE@@"
    return json.dumps(dump).encode().replace(b"@@HERE@@", b"main\xff")


def nan_duration() -> bytes:
    dump = base()
    for entry in dump["entries"]:
        entry["duration_ms"] = float("nan")
    dump["entries"][1]["duration_ms"] = float("inf")
    dump["entries"][2]["duration_ms"] = "fast"
    return pickle.dumps(dump, protocol=2)


def huge_sizes() -> bytes:
    dump = base()
    dump["entries"][3]["input_sizes"] = [[10**18]]
    return pickle.dumps(dump, protocol=2)


def negative_seq_ids() -> bytes:
    dump = base()
    dump["entries"][4]["collective_seq_id"] = -5
    return pickle.dumps(dump, protocol=2)


def unknown_state_and_op() -> bytes:
    dump = base()
    dump["entries"][5]["state"] = "exploded"
    dump["entries"][6]["profiling_name"] = "gloo:frobnicate"
    return pickle.dumps(dump, protocol=2)


def peer_out_of_range() -> bytes:
    dump = base()
    extra = copy.deepcopy(dump["entries"][-1])
    extra["profiling_name"] = "gloo:send 0->99999999999999999999"
    dump["entries"].append(extra)
    return pickle.dumps(dump, protocol=2)


def huge_int_json() -> bytes:
    dump = base_json()
    dump["entries"][0]["time_created_ns"] = "@@HERE@@"
    return json.dumps(dump).encode().replace(b'"@@HERE@@"', b"9" * 5_000)


CORPUS: list[tuple[str, str, Callable[[], bytes]]] = [
    # name, one-line note, maker
    (
        "global_os_system.pkl",
        "real dump with os.system('touch fr_analyze_pwned') nested in a frame (GLOBAL+REDUCE)",
        nested_global,
    ),
    (
        "global_posix_system_proto0.pkl",
        "protocol 0 text pickle: GLOBAL posix.system, REDUCE",
        posix_system_proto0,
    ),
    ("inst_os_system.pkl", "protocol 0 INST opcode calling os.system", inst_os_system),
    (
        "stack_global_builtins_eval.pkl",
        "protocol 4 STACK_GLOBAL builtins.eval of code that creates the marker file",
        stack_global_eval,
    ),
    (
        "numpy_reconstruct.pkl",
        "what a numpy array pickles to: numpy.core.multiarray._reconstruct",
        numpy_reconstruct,
    ),
    ("persistent_id.pkl", "BINPERSID opcode (persistent id)", lambda: b"\x80\x02K\x01Q."),
    ("ext_opcode.pkl", "EXT1 opcode (copyreg extension registry)", lambda: b"\x80\x02\x82\x01."),
    (
        "memo_index_bomb.pkl",
        "9 bytes: LONG_BINPUT 2**31-1 (the unpickler would zero a 16 GiB memo table)",
        memo_index_bomb,
    ),
    (
        "deep_tuple_key.pkl.gz",
        "dict key nested 200,000 tuples deep (segfaults an unguarded unpickler)",
        deep_tuple_key,
    ),
    (
        "tuple_hash_bomb.pkl",
        "t = (t, t) doubled 100 times with DUP, used as a dict key (2**100 to hash)",
        tuple_hash_bomb,
    ),
    (
        "memo_repeat_bomb.pkl",
        "2,000 references to one entry holding 2,000 references to one shape (2.4e8 dims)",
        memo_repeat_bomb,
    ),
    (
        "dense_entries.pkl.gz",
        "1,000,000 references to one entry, two bytes each",
        dense_entries,
    ),
    (
        "deep_list.pkl.gz",
        "entries[0] is a list nested 500,000 deep (harmless: that entry is skipped)",
        deep_list,
    ),
    ("deep_nesting.json", "entries nested 5,000 lists deep", deep_json),
    (
        "gzip_bomb.pkl.gz",
        "36 MiB of zeros in 3 gzip members (over 1000x); a 1 GiB one is made in the test",
        gzip_bomb,
    ),
    ("empty.pkl", "empty file", lambda: b""),
    ("truncated_87_bytes.pkl", "the first 87 bytes of a real dump", truncated_87),
    (
        "text_named_like_dump.pkl",
        "a log file named like a dump",
        lambda: b"[rank1]: Watchdog caught collective operation timeout\nretrying...\n",
    ),
    ("json_array.json", "valid JSON, but an array", json_array),
    ("entries_is_dict.json", "a dump whose entries is a dict", entries_is_dict),
    ("gzip_truncated.pkl.gz", "gzip copy of a real dump cut in half", gzip_truncated),
    ("gzip_in_gzip.pkl.gz", "a real dump gzipped twice", lambda: gz(gz(BASE.read_bytes()))),
    (
        "xz_compressed.pkl",
        "a real dump compressed with xz",
        lambda: lzma.compress(BASE.read_bytes()),
    ),
    (
        "invalid_utf8_string.pkl",
        "a pickled string holding bytes that are not UTF-8",
        invalid_utf8_string,
    ),
    (
        "non_utf8_names.pkl",
        "bytes for names, a lone surrogate and an escape sequence in a frame, bytes pname",
        non_utf8_names,
    ),
    ("non_utf8_names.json", "a JSON dump with a raw 0xff byte in a string", non_utf8_json),
    ("huge_int.json", "a timestamp of 5,000 digits", huge_int_json),
    ("nan_duration.pkl", "durations NaN, inf and a string", nan_duration),
    ("huge_sizes.pkl", "an entry with input_sizes [[10**18]]", huge_sizes),
    ("negative_seq_ids.pkl", "an entry with collective_seq_id -5", negative_seq_ids),
    (
        "unknown_state_and_op.pkl",
        "an entry in state 'exploded', another running 'gloo:frobnicate'",
        unknown_state_and_op,
    ),
    (
        "peer_out_of_range.pkl",
        "an extra entry 'gloo:send 0->99999999999999999999'",
        peer_out_of_range,
    ),
]

README_HEAD = """# Nasty files

Hostile and broken rank files, each standing in for rank 1 of `sample_dumps/gloo_healthy`.
`tests/hostile/test_damaged_dumps.py` (`NASTY`) pins the exact reason fr-analyze gives for
each; files meant to run code would create `fr_analyze_pwned` in the working directory, and the
tests check that it never appears. Regenerate (byte for byte the same) with

    .venv/bin/python tests/nasty/make_corpus.py

| file | what it is |
|---|---|
"""


def write(out: Path) -> list[str]:
    """Write every corpus file and the README into `out`; the names written."""
    for name, _note, make in CORPUS:
        (out / name).write_bytes(make())
    rows = "".join(f"| `{name}` | {note} |\n" for name, note, _make in CORPUS)
    (out / "README.md").write_text(README_HEAD + rows)
    return [name for name, _note, _make in CORPUS]


def main() -> int:
    names = set(write(HERE)) | {"README.md", "make_corpus.py", "__pycache__"}
    stale = sorted(p.name for p in HERE.iterdir() if p.name not in names)
    for name in stale:
        print(f"not in the corpus (remove it?): {name}", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
