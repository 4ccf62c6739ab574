"""Hostile input aimed at the fast decoders: they read the entry list the unpickler or
`json.loads` reads, or leave the file to them; and a value they do not expect hands the rank
to the general path, which keeps it.

Each attack is built from a real sample dump set and checked three ways: the decoders never
read other entries than the general path (`pickle.loads` / `json.loads`, then normalization),
the rank is loaded, and the job's answer is the one its genuine entries give (the sample's
`EXPECTED` line, and the answer with the decoders switched off).
"""

from __future__ import annotations

import copy
import json
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fr_analyzer import analyze
from fr_analyzer.errors import DumpError
from fr_analyzer.load import DumpFile, build_rank, discover, load_rank
from fr_analyzer.load.formats import columnar
from fr_analyzer.load.formats.outcomes import NotDecoded
from fr_analyzer.load.safety import reading
from fr_analyzer.load.safety.decoders.columns import Decoded
from fr_analyzer.load.safety.decoders.opcodes import BINGET
from fr_analyzer.load.safety.door import decode_pickle
from fr_analyzer.model.dump import Fallback, RankDump, Reader
from fr_analyzer.pipeline import Options
from tests.builders import or_why
from tests.end_to_end.test_scenarios import Expected
from tests.load.safety.test_decode import by_unpickler, same_rank, slot_of, torch_bytes
from tests.load.safety.test_decode_json import outcome, torch_json

decode_any = or_why(decode_pickle)

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
HEALTHY = "gloo_healthy"  # EXPECTED: ok
SKIPPED = "gloo_skip_collective"  # EXPECTED: hung, rank 2 never issued seq 4

# ---------------------------------------------------------------------------------------------
# Reading sample sets and comparing the two paths


def sample_files(name: str) -> dict[int, Path]:
    """The rank files of a bundled sample set, by rank."""
    return {f.rank: f.path for f in discover(SAMPLES / name).files}


def sample(name: str, rank: int) -> dict[str, Any]:
    """A bundled (trusted) rank dump, as `pickle.loads` or `json.loads` gives it."""
    data = sample_files(name)[rank].read_bytes()
    found: dict[str, Any] = json.loads(data) if data[:1] == b"{" else pickle.loads(data)
    return found


def as_json(dump: dict[str, Any]) -> dict[str, Any]:
    """`dump` as torch's JSON writer gives it (tuples as lists, unset times as 0)."""
    found: dict[str, Any] = json.loads(json.dumps(dump))
    for entry in found["entries"]:
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            entry[key] = entry[key] or 0
    return found


def job_with(tmp_path: Path, name: str, rank: int, data: bytes, suffix: str = "") -> Path:
    """The sample set `name` in `tmp_path`, rank `rank`'s file replaced by `data`; with a
    `suffix` (".json"), every rank is written again as torch's JSON, as rank_<N>.json."""
    job = tmp_path / name
    job.mkdir()
    for other, path in sample_files(name).items():
        if suffix:
            text = torch_json(as_json(sample(name, other)))
            (job / f"rank_{other}{suffix}").write_bytes(data if other == rank else text)
        elif other == rank:
            (job / path.name).write_bytes(data)
        else:
            shutil.copy(path, job / path.name)
    return job


def rank_file(job: Path, rank: int) -> Path:
    """The file the loader reads for `rank` in `job`."""
    return next(f.path for f in discover(job).files if f.rank == rank)


def general(data: bytes, file: str, rank: int) -> RankDump:
    """The rank as `pickle.loads` or `json.loads` and the general path give it."""
    raw = json.loads(data) if data[:1] == b"{" else pickle.loads(data)
    return build_rank(raw, rank, file, nbytes=len(data))


def loaded_as_by_the_general_path(path: Path, rank: int) -> RankDump:
    """Rank `rank` loaded from `path` (the decoders first), asserted kept and equal to what
    the general path gives from the same bytes."""
    found = load_rank(DumpFile(rank, path))
    assert isinstance(found, RankDump), found
    same_rank(found, general(path.read_bytes(), str(path), rank))
    return found


def answer(job: Path, decoders: bool = True) -> tuple[str, str]:
    """The job's status and answer; every rank loaded."""
    analysis = analyze(job, Options(workers=1))
    assert analysis.summary.unreadable == (), analysis.summary.unreadable
    assert decoders or Reader.DECODER.value not in analysis.summary.readers
    return analysis.conclusion.status.value, analysis.conclusion.answer


def _switched_off(data: bytes) -> NoReturn:
    """A decoder that reads nothing."""
    raise NotDecoded(Fallback.NOT_THIS_LAYOUT, "decoders switched off")


def decoders_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file read the general way (the loader's workers fork, and inherit this)."""
    for name in ("decode_pickle", "decode_json"):  # the door's decoders, as `reading` calls them
        monkeypatch.setattr(reading, name, _switched_off)


def assert_genuine_answer(job: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's answer is its sample's `EXPECTED` status (and culprit), and the answer the
    general path alone gives."""
    status, text = answer(job)
    want = Expected.of(name)
    assert status == want.status, text
    assert all(f"rank {r}" in text or f"Rank {r}" in text for r in want.culprits), text
    with monkeypatch.context() as patch:
        decoders_off(patch)
        assert answer(job, decoders=False) == (status, text)


# ---------------------------------------------------------------------------------------------
# 6. Python's pickler: a nested {"entries": [...]} is not the entry list


def with_decoy(dump: dict[str, Any], decoy: list[dict[str, Any]]) -> dict[str, Any]:
    """`dump` with a nested `{"entries": decoy}` before its own entries, which are also kept
    under another key first: Python's pickler writes them there and refers to them after."""
    out = {k: v for k, v in dump.items() if k != "entries"}
    out["decoy"] = {"entries": decoy}
    out["backup"] = dump["entries"]
    out["entries"] = dump["entries"]
    return out


@pytest.mark.parametrize(
    ("name", "rank", "decoy_from"),
    [(HEALTHY, 0, (HEALTHY, 1, 5)), (SKIPPED, 2, (SKIPPED, 0, 4))],
    ids=["healthy, a short decoy", "hung, a decoy that issued the missing op"],
)
def test_a_nested_entries_dict_in_pythons_pickle_is_not_taken_for_the_entry_list(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    rank: int,
    decoy_from: tuple[str, int, int],
) -> None:
    # GIVEN a rank re-saved by Python's pickler with a decoy entry list nested before its own
    other, other_rank, count = decoy_from
    decoy = sample(other, other_rank)["entries"][:count]
    data = pickle.dumps(with_decoy(sample(name, rank), decoy), protocol=4)
    assert len(pickle.loads(data)["entries"]) != count
    job = job_with(tmp_path, name, rank, data)
    # THEN the decoder leaves the file, the rank is the unpickler's, the answer the genuine one
    why = decode_any(data)
    assert isinstance(why, str) and "not the top-level dict's entries" in why, why
    found = loaded_as_by_the_general_path(rank_file(job, rank), rank)
    assert found.entries == len(sample(name, rank)["entries"])
    assert_genuine_answer(job, name, monkeypatch)


def test_an_entry_list_written_once_after_a_decoy_is_read_by_the_unpickler() -> None:
    # GIVEN a decoy {"entries": [...]} first, then the real list (of one entry: `]\x94}`)
    dump = sample(HEALTHY, 0)
    reals: list[list[dict[str, Any]]] = [[], dump["entries"][:1], dump["entries"][:3]]
    for real in reals:
        data = pickle.dumps({"decoy": {"entries": dump["entries"][3:6]}, **dump, "entries": real})
        # THEN the decoder never reads the decoy's entries for the rank's
        found = decode_any(data)
        assert isinstance(found, str), len(found.entries)
        assert general(data, "f", 0).entries == len(real)


# ---------------------------------------------------------------------------------------------
# 7. JSON: the entries key compared once unescaped

ESCAPED = b'"\\u0065ntries"'  # the key `entries` to json.loads


@pytest.mark.parametrize("name", [HEALTHY, SKIPPED])
def test_a_json_entries_key_spelled_with_escapes_is_the_one_json_loads_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # GIVEN a rank of torch's JSON whose top-level key is spelled `"\u0065ntries"`, and a
    # nested {"entries": [...]} after it (another rank's entries, one more than its own)
    rank = 2
    dump = as_json(sample(name, rank))
    decoy = as_json(sample(name, 0))["entries"][: len(dump["entries"]) + 1]
    dump["zdecoy"] = {"entries": decoy}
    data = torch_json(dump)
    assert data.count(b'"entries"') == 2
    data = data.replace(b'"entries"', ESCAPED, 1)  # keys sorted: the top-level one first
    job = job_with(tmp_path, name, rank, data, ".json")
    # THEN the decoder leaves it, the rank is json.loads's, the answer the genuine one
    assert outcome(data) == "declined"
    found = loaded_as_by_the_general_path(rank_file(job, rank), rank)
    assert found.entries == len(dump["entries"])
    assert_genuine_answer(job, name, monkeypatch)


def test_a_later_escaped_entries_key_wins_as_json_loads_has_it(tmp_path: Path) -> None:
    # GIVEN a torch JSON rank whose `"entries"` holds a decoy (another layout: a key more),
    # and a later top-level `"\u0065ntries"` the real entries (json.loads keeps the last)
    dump = as_json(sample(SKIPPED, 2))
    real = dump.pop("entries")
    decoy = [dict(e, zz=0) for e in as_json(sample(SKIPPED, 0))["entries"]]
    text = torch_json({**dump, "entries": decoy})
    data = text[:-1] + b"," + ESCAPED + b":" + json.dumps(real, separators=(",", ":")).encode()
    data += b"}"
    assert json.loads(data)["entries"] == real
    # THEN the decoder leaves it, and the loaded rank holds the real entries
    assert outcome(data) == "declined"
    path = tmp_path / "rank_2.json"
    path.write_bytes(data)
    assert loaded_as_by_the_general_path(path, 2).entries == len(real)


# ---------------------------------------------------------------------------------------------
# 8. A decoded value the column-wise reader does not take: the rank is read again, and kept


def odd_profiling_name(dump: dict[str, Any], at: int) -> bytes:
    """A profiling_name that is a memo reference to a dict (shared with the header)."""
    shared = {"odd": 1}
    dump = copy.deepcopy(dump)
    dump["shared"] = shared
    dump["entries"][at]["profiling_name"] = shared
    return pickle.dumps(dump, protocol=4)


def odd_dtypes(dump: dict[str, Any], at: int) -> bytes:
    """An input_dtypes list holding a list."""
    dump = copy.deepcopy(dump)
    dump["entries"][at]["input_dtypes"] = [["Float"]]
    return pickle.dumps(dump, protocol=4)


def flipped_dtype_byte(data: bytes) -> bytes:
    """Torch's own bytes with one byte flipped: the last `input_dtypes: [Float]`, a memo
    reference to the string, made to refer to a container (the first slot holding one)."""
    ref = bytes([BINGET, slot_of(data, "input_dtypes")]) + b"](h"
    ref += bytes([slot_of(data, "Float")]) + b"e"
    where = data.rindex(ref) + 5
    for slot in range(256):
        flipped = data[:where] + bytes([slot]) + data[where + 1 :]
        try:  # trusted: a bundled sample with one memo slot changed
            entries = pickle.loads(flipped)["entries"]
        except Exception:  # a slot not written yet there
            continue
        if any(isinstance(d, dict | list) for e in entries for d in e["input_dtypes"]):
            return flipped
    raise AssertionError("no container to refer to")


@pytest.mark.parametrize(
    "attack",
    [
        lambda data: odd_profiling_name(pickle.loads(data), 3),
        lambda data: odd_dtypes(pickle.loads(data), 3),
        flipped_dtype_byte,
    ],
    ids=["profiling_name a memo reference to a dict", "input_dtypes holding a list", "flip"],
)
def test_an_unhashable_decoded_value_hands_the_rank_to_the_general_path_which_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attack: Callable[[bytes], bytes]
) -> None:
    # GIVEN a healthy job's rank 0 where one entry holds a value that cannot be hashed
    data = attack(sample_files(HEALTHY)[0].read_bytes())
    pairs = zip(sample(HEALTHY, 0)["entries"], pickle.loads(data)["entries"], strict=True)
    odd = [i for i, (genuine, changed) in enumerate(pairs) if genuine != changed]
    assert len(odd) == 1
    assert isinstance(decode_any(data), Decoded)  # in the decoders' grammar
    job = job_with(tmp_path, HEALTHY, 0, data)
    # THEN the decoded columns are refused as such, not as a malformed dump
    with pytest.raises(NotDecoded, match="of an odd type"):
        build_rank(decode_any(data), 0, "f", nbytes=len(data))
    # AND the rank is read again and kept, the odd entry skipped with its reason
    found = loaded_as_by_the_general_path(rank_file(job, 0), 0)
    assert found.reader is Reader.PER_ENTRY and found.fallback.startswith("decoder: ")
    assert [index for index, _ in found.entry_errors] == odd, found.entry_errors
    # AND the job's answer names the skipped entry, as the general path alone has it
    status, text = answer(job)
    assert status == "incomplete" and f"entry {odd[0]}:" in text, text
    with monkeypatch.context() as patch:
        decoders_off(patch)
        assert answer(job, decoders=False) == (status, text)


def test_an_unforeseen_type_error_on_decoded_columns_is_a_reread_not_a_lost_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the check of decoded dtypes gone (as an odd value nobody foresaw would pass it)
    monkeypatch.setattr(columnar, "_texts_key", tuple)
    data = odd_dtypes(sample(HEALTHY, 0), 3)
    path = tmp_path / "rank_0.pkl"
    path.write_bytes(data)
    # THEN the TypeError met on the decoded columns hands the rank to the general path
    with pytest.raises(NotDecoded, match="TypeError: unhashable type"):
        build_rank(decode_any(data), 0, "f", nbytes=len(data))
    found = loaded_as_by_the_general_path(path, 0)
    assert "does not take (TypeError: unhashable type" in found.fallback, found.fallback


# ---------------------------------------------------------------------------------------------
# Properties: decoys anywhere, keys spelled any way, odd values anywhere

HOSTILE_DECODERS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
BASE = as_json(sample(HEALTHY, 0))
OTHER = as_json(sample(HEALTHY, 1))["entries"]  # decoys: another rank's entries
PLAIN = b'"entries"'


def spellings() -> st.SearchStrategy[bytes]:
    """The key `entries` as JSON bytes: plain (half the time), or some of its letters as
    `\\u` escapes, in lower or upper case hex."""

    def spell(ways: list[int]) -> bytes:
        forms = ("{0}", "\\u{1:04x}", "\\u{1:04X}")  # n, \u006e, \u006E
        text = "".join(forms[way].format(c, ord(c)) for c, way in zip("entries", ways, strict=True))
        return f'"{text}"'.encode()

    ways = st.lists(st.sampled_from([0, 1, 2]), min_size=7, max_size=7)
    return st.one_of(st.just(PLAIN), ways.map(spell))


@st.composite
def decoyed(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, bytes]]:
    """`BASE` with decoy `{"entries": [...]}` objects nested at random places (top level,
    before or after the entries; a group of pg_config, pg_status, an entry; inside each
    other), maybe a second top-level key for the entries, every such key a placeholder, and
    how each placeholder is spelled."""
    dump = copy.deepcopy(BASE)
    spelled: dict[str, bytes] = {}

    def key() -> str:
        name = f"@key{len(spelled)}@"
        spelled[name] = draw(spellings())
        return name

    def decoy() -> dict[str, Any]:
        start = draw(st.integers(0, len(OTHER) - 1))
        inner: Any = copy.deepcopy(OTHER[start : start + draw(st.integers(1, 4))])
        if draw(st.booleans()) and inner:
            inner = [*inner[:-1], decoy()]  # nested inside another
        return {key(): inner}

    real = dump.pop("entries")
    items = list(dump.items())
    items.insert(draw(st.integers(0, len(items))), (key(), real))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["top", "pg_config", "pg_status", "entry"]))
        if where == "top":
            items.insert(draw(st.integers(0, len(items))), (f"decoy{len(spelled)}", decoy()))
        elif where == "entry":
            entry = real[draw(st.integers(0, len(real) - 1))]
            entry["decoy"] = decoy()  # one name: few layouts to compile
        else:
            found = dict(items)[where]
            found[f"decoy{len(spelled)}"] = decoy()
    if draw(st.booleans()):  # a second top-level key: json.loads keeps the last
        items.insert(draw(st.integers(0, len(items))), (key(), copy.deepcopy(OTHER[:3])))
    return dict(items), spelled


def spell(text: bytes, spelled: dict[str, bytes]) -> bytes:
    """`text` with each placeholder key spelled as drawn."""
    for name, how in spelled.items():
        text = text.replace(json.dumps(name).encode(), how)
    return text


@HOSTILE_DECODERS
@given(decoyed(), st.booleans())
def test_json_decoys_and_escaped_keys_never_make_the_decoder_read_other_entries(
    found: tuple[dict[str, Any], dict[str, bytes]], compact: bool
) -> None:
    """Whatever decoys a file holds and however its keys are spelled, the decoder reads the
    entries `json.loads` reads (`outcome` compares the columns) or leaves the file."""
    dump, spelled = found
    text = json.dumps(dump, separators=(",", ":") if compact else None).encode()
    data = spell(text, spelled)
    assert b"@key" not in data
    plain = sum(how == PLAIN for how in spelled.values())
    event(f"{outcome(data)}, {len(spelled)} keys, {plain} plain")


@pytest.mark.slow
@HOSTILE_DECODERS
@given(decoyed(), st.sampled_from(["torch", "python"]), st.booleans())
def test_pickled_decoys_never_make_the_decoder_read_other_entries(
    found: tuple[dict[str, Any], dict[str, bytes]], writer: str, shared: bool
) -> None:
    """The same decoys pickled by torch's writer or Python's (keys spelled plainly: a pickle
    has no escapes); `shared`: the real list is also kept under another key first, so
    Python's pickler refers to it where it is the entry list."""
    dump, spelled = found
    dump = json.loads(spell(json.dumps(dump).encode(), spelled))  # every key unescaped
    if shared and "entries" in dump:
        dump = {"backup": dump["entries"], **dump}
    data = torch_bytes(dump) if writer == "torch" and "entries" in dump else pickle.dumps(dump)
    event(pickle_outcome(data))


def pickle_outcome(data: bytes) -> str:
    """`decoded` (then the columns are the unpickler's), `declined`, or `refused` (by both)."""
    try:
        expected: RankDump | str = by_unpickler(data)
    except DumpError as exc:
        expected = exc.reason
    found = decode_any(data)
    if not isinstance(found, Decoded):
        return "declined"
    try:
        decoded = build_rank(found, 0, "f", nbytes=len(data))
    except NotDecoded:
        assert isinstance(expected, RankDump) and expected.reader is Reader.PER_ENTRY
        return "decoded, left to the careful reader"
    except DumpError as exc:
        assert exc.reason == expected
        return "refused"
    assert isinstance(expected, RankDump), expected
    same_rank(decoded, expected)
    return "decoded"


ODD_VALUES: list[Callable[[dict[str, Any]], Any]] = [
    lambda shared: shared,  # a memo reference to a dict
    lambda shared: [shared],
    lambda shared: [[shared]],
    lambda shared: [["Float"]],
    lambda shared: [[1, [2]]],
    lambda shared: [[1, "2"]],
    lambda shared: ["Float", ["Float"]],
    lambda shared: ("a", ("b",)),
    lambda shared: "",
    lambda shared: 0,
    lambda shared: None,
    lambda shared: [],
    lambda shared: [None],
]
SIGNATURE_KEYS = [*columnar._SIGNATURE_KEYS, "state", "is_p2p", "retired"]


@HOSTILE_DECODERS
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(BASE["entries"]) - 1),
            st.sampled_from(SIGNATURE_KEYS),
            st.sampled_from(ODD_VALUES),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_odd_values_the_decoders_take_never_lose_the_rank(
    changes: list[tuple[int, str, Callable[[dict[str, Any]], Any]]],
) -> None:
    """Values of odd types anywhere an entry's coded columns come from (shared objects, as
    Python's pickler writes them by memo reference): the loader (decoder, then the general
    path on `NotDecoded`) gives what the unpickler and the general path give."""
    dump = sample(HEALTHY, 0)
    shared = {"name": "x", "filename": "y", "line": 1}
    dump["shared"] = shared
    for at, key, odd in changes:
        dump["entries"][at][key] = odd(shared)
    data = pickle.dumps(dump, protocol=4)
    expected = by_unpickler(data)
    found = decode_any(data)
    if not isinstance(found, Decoded):  # outside the grammar: the general path reads it
        event("declined")
        return
    try:
        decoded = build_rank(found, 0, "f", nbytes=len(data))
        event("decoded")
    except NotDecoded:
        decoded = expected  # the loader reads the file again: the general path's
        event("read again")
    same_rank(decoded, expected)
