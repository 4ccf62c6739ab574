"""Specs for `load.safety.door`, the one door where bytes become objects: no other module of the
package unpickles or parses, and every pickle goes through the unpickler that refuses globals."""

from __future__ import annotations

import ast
import copyreg
import io
import json
import pickle
import pickletools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from fr_analyzer import analyze
from fr_analyzer.load.safety import door, sandbox
from fr_analyzer.pipeline import Analysis, Options
from fr_analyzer.render.report import render_text

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_dumps"
PACKAGE = ROOT / "fr_analyzer"

# Where the package may turn bytes into objects without the door, and why.
EXEMPT = {
    # `--storage-option KEY=VALUE`: the user's own command line, parsed as JSON; no dump.
    ("cli/options.py", "json.loads"),
    # `replay`: the plan and each rank's timings, JSON that fr-analyze's own processes write
    # into the folder the replay made (plain values, read back field by field); no dump.
    ("replay/plan.py", "json.loads"),
    ("replay/worker.py", "json.loads"),
}
OPENERS = {"load", "loads", "Unpickler", "JSONDecoder", "raw_decode"}
MODULES = {"pickle", "_pickle", "json", "marshal", "shelve", "yaml", "dill", "cloudpickle"}


def _openers(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Where a module's code reaches for an unpickler or a parser: `pickle.loads(...)`,
    `json.load`, `Unpickler`, `raw_decode`, or an import of one (docstrings are not code)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            if (owner in MODULES and node.attr in OPENERS) or node.attr == "raw_decode":
                yield node.lineno, f"{owner}.{node.attr}"
        elif isinstance(node, ast.Name) and node.id in {"Unpickler", "JSONDecoder"}:
            yield node.lineno, node.id
        elif isinstance(node, ast.ImportFrom) and node.module in MODULES:
            yield node.lineno, f"from {node.module} import"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES - {"pickle", "json"}:
                    yield node.lineno, f"import {alias.name}"


# --- one door ----------------------------------------------------------------------------------


def test_no_module_but_the_door_turns_bytes_into_objects() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name == "load/safety/door.py":
            continue
        for line, what in _openers(ast.parse(path.read_text(), str(path))):
            if (name, what) not in EXEMPT:
                found.append(f"fr_analyzer/{name}:{line}: {what}")
    assert found == []


def test_the_check_for_openers_finds_each_kind_and_not_prose() -> None:
    code = (
        "import pickle, json, marshal\nfrom pickle import Unpickler\npickle.loads(b'')\n"
        "json.load(f)\nx.raw_decode(s)\nclass U(pickle.Unpickler): pass\n"
        '"""pickle.loads and json.load in prose"""\n'
    )
    whats = sorted(what for _, what in _openers(ast.parse(code)))
    assert whats == sorted(
        [
            "import marshal",
            "from pickle import",
            "pickle.loads",
            "json.load",
            "x.raw_decode",
            "pickle.Unpickler",
        ]
    )


@pytest.mark.parametrize(
    "opener",
    [
        pickle.dumps({"version": "2.10", "x": Path("a")}, protocol=2),  # GLOBAL, REDUCE
        pickle.dumps({"x": Path("a")}, protocol=4),  # STACK_GLOBAL
        pickle.dumps({"x": Path("a")}, protocol=0),  # GLOBAL as text
        b"(S'os'\nS'system'\ni__builtin__\nsystem\n.",  # INST
        b"\x80\x02\x82\x01.",  # EXT1: an extension is a global by number
        b"\x80\x02\x83\x01\x00.",  # EXT2
        b"\x80\x02\x84\x01\x00\x00\x00.",  # EXT4
        b"\x80\x02X\x01\x00\x00\x00aQ.",  # BINPERSID
        b"Pa\n.",  # PERSID
    ],
)
def test_the_door_refuses_every_global_extension_and_persistent_id(opener: bytes) -> None:
    copyreg.add_extension("os", "system", 1)  # an extension code names a global
    try:
        with pytest.raises(pickle.UnpicklingError, match="refused"):
            door.unpickle(opener)
    finally:
        copyreg.remove_extension("os", "system", 1)


def test_every_opcode_that_reaches_outside_builtins_is_refused_by_the_door() -> None:
    """Every opcode pickletools knows is either one that builds builtin containers and
    scalars, or one the door's unpickler refuses when it meets it."""
    reaching = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "REDUCE"}
    reaching |= {"BUILD", "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"}
    known = {op.name for op in pickletools.opcodes}
    assert reaching <= known
    # A callable for REDUCE, OBJ, NEWOBJ and BUILD can only come from a global (or an
    # extension, or a persistent id): the door refuses each of those before it is reached.
    stack_global = b"\x8c\x02os\x8c\x06system\x93"
    for tail in (b"\x8c\x02id\x85R.", b"(o.", b")\x81.", b")}\x92.", b"}b."):
        with pytest.raises(pickle.UnpicklingError, match="refused to load global"):
            door.unpickle(b"\x80\x04" + stack_global + tail)


def test_a_pickle_of_builtins_only_comes_back_whole_through_the_door() -> None:
    torch_like = {"version": "2.10", "entries": [{"a": (1, 2.5, None, True, "x")}]}
    assert door.unpickle(pickle.dumps(torch_like, protocol=2)) == torch_like
    newer = {"entries": [{"a": (1, b"x")}], "s": {1}, "f": frozenset({2})}  # no global at 4
    assert door.unpickle(pickle.dumps(newer, protocol=4)) == newer
    assert door.parse_json(b'{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    assert door.parse_json_prefix('{"a": 1} tail') == ({"a": 1}, 8)


# --- the analysis with every other opener refusing ---------------------------------------------


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("bytes became objects outside the door (fr_analyzer.load.safety.door)")


class _RefusingUnpickler(pickle.Unpickler):
    def load(self) -> Any:
        _refuse()


def _python_pickled(tmp_path: Path, name: str, protocol: int) -> Path:
    """A sample set rewritten by Python's pickler at `protocol` (0: the decoders refuse it,
    so the door's unpickler reads it; 4: `decode_python` does)."""
    out = tmp_path / f"{name}-p{protocol}"
    out.mkdir()
    for path in (SAMPLES / name).iterdir():
        data = path.read_bytes()
        if path.is_file() and data[:2] == b"\x80\x02":
            obj = pickle.load(io.BytesIO(data))  # the test's own, trusted sample
            (out / path.name).write_bytes(pickle.dumps(obj, protocol=protocol))
    return out


def _answer(where: Path) -> tuple[str, str, dict[str, tuple[int, ...]], int]:
    found: Analysis = analyze(where, Options(workers=2, file_times=False))
    summary = found.summary
    return (
        found.conclusion.answer,
        render_text(found, width=100),
        summary.readers,
        len(summary.unreadable),
    )


SETS = [
    "nccl_not_joined",  # torch's pickles: the decoder
    "gloo_op_mismatch",  # gzip
    "gloo_healthy_json",  # JSON
    "nccl_op_mismatch_json",  # JSON
    "gloo_subgroup_desync",  # gloo
    "torchcomms_not_joined",  # torchcomms
]


@pytest.mark.parametrize("forked", [True, False], ids=["sandboxed", "in_process"])
def test_the_answers_are_unchanged_when_only_the_door_may_open_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked: bool
) -> None:
    # GIVEN sample sets of every format, and two of them rewritten by Python's pickler
    sets = [SAMPLES / name for name in SETS]
    sets += [_python_pickled(tmp_path, "nccl_not_joined", p) for p in (0, 4)]
    if not forked:  # a process with no workers: every pickle scanned, then read here
        monkeypatch.setattr(sandbox, "available", lambda: False)
    before = [_answer(where) for where in sets]
    # WHEN every opener but the door's raises
    with monkeypatch.context() as patched:
        patched.setattr(pickle, "load", _refuse)
        patched.setattr(pickle, "loads", _refuse)
        patched.setattr(pickle, "Unpickler", _RefusingUnpickler)
        patched.setattr(json, "load", _refuse)
        patched.setattr(json, "loads", _refuse)
        after = [_answer(where) for where in sets]
    # THEN every answer, report and reader is the same, and no rank was unreadable
    assert after == before
    assert [unreadable for *_, unreadable in after] == [0] * len(sets)
    # the protocol-0 set was read by the door's unpickler, not a decoder
    assert "decoder" not in after[-2][2] and "decoder" in after[-1][2]
