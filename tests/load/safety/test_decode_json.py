"""The decoder of JSON dumps laid out as torch (or Python's `json`) writes them: it gives
exactly what `json.loads` and the column-wise reader give, and it leaves every file it is not
sure of, valid JSON or not, to that path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given

from fr_analyzer.load import DumpFile, build_rank, load_rank
from fr_analyzer.load.formats.outcomes import NotDecoded
from fr_analyzer.load.safety.decoders.columns import Decoded
from fr_analyzer.load.safety.decoders.decode_json import decode_json_layout
from fr_analyzer.model.dump import Reader
from fr_analyzer.model.records import UnreadableDump
from fr_analyzer.pipeline import Options, analyze
from tests.builders import make_dump, or_why
from tests.load.safety.test_decode import PROPERTY, entries, fr_dumps, same_rank


def torch_json(dump: dict[str, Any], ascii_only: bool = False) -> bytes:
    """`dump` as torch's `_dump_fr_trace_json` writes it: compact, keys sorted, UTF-8."""
    text = json.dumps(dump, separators=(",", ":"), sort_keys=True, ensure_ascii=ascii_only)
    return text.encode()


def python_json(dump: dict[str, Any]) -> bytes:
    """`dump` as Python's `json.dump` writes it by default: `, ` and `: `, keys in order."""
    return json.dumps(dump).encode()


def outcome(data: bytes) -> str:
    """`decoded` (and then the columns are exactly json.loads's), `declined` (valid JSON the
    decoder leaves to the general path) or `invalid` (refused by both)."""
    found = or_why(decode_json_layout)(data)
    try:
        expected = json.loads(data)
    except ValueError:
        assert not isinstance(found, Decoded), "the decoder took JSON that json.loads refuses"
        return "invalid"
    if not isinstance(found, Decoded):
        return "declined"
    by_json = build_rank(expected, 0, "f", nbytes=len(data))
    try:
        decoded = build_rank(found, 0, "f", nbytes=len(data))
    except NotDecoded:  # only the careful reader takes it: the loader reads the file again
        assert by_json.reader is Reader.PER_ENTRY
        return "decoded"
    same_rank(decoded, by_json)
    return "decoded"


@pytest.mark.slow
@PROPERTY
@given(dump=fr_dumps())
def test_json_is_decoded_to_exactly_what_json_loads_gives(dump: dict[str, Any]) -> None:
    """Torch's layout is always decoded (but for integers past int64, which it leaves);
    Python's default layout too. A value only the careful reader takes is left to it."""
    for name, data in (
        ("torch", torch_json(dump)),
        ("torch, ASCII", torch_json(dump, ascii_only=True)),
        ("python", python_json(dump)),
    ):
        found = outcome(data)
        event(f"{name}: {found}")
        if found == "declined":
            why = or_why(decode_json_layout)(data)
            assert isinstance(why, str)
            assert "malformed (OverflowError)" in why or "too many entries" in why, why


def test_entries_of_another_layout_are_read_between_the_others() -> None:
    # GIVEN entries of two layouts (some with a duration) and one written with other spacing
    rows = entries(12)
    for row in rows[3:6]:
        row["duration_ms"] = 1.5
    text = torch_json(make_dump(rows))
    spaced = json.dumps(rows[8], separators=(", ", ": "), sort_keys=True).encode()
    compact = json.dumps(rows[8], separators=(",", ":"), sort_keys=True).encode()
    text = text.replace(compact, spaced)
    # THEN they are read exactly, in their places
    assert outcome(text) == "decoded"


BOUNDARY = b'},{"collective_seq_id"'  # between two entries, keys sorted as torch writes them
END = b'}],"pg_config"'  # after the last entry


def third(old: bytes, new: bytes) -> Any:
    """A change at the boundary after the third entry (the expression has read two)."""

    def change(text: bytes) -> bytes:
        at = text.index(old, text.index(old, text.index(old) + 1) + 1)
        return text[:at] + new + text[at + len(old) :]

    return change


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(third(BOUNDARY, b'} ,{"collective_seq_id"'), "decoded", id="space before ,"),
        pytest.param(third(BOUNDARY, b'},\n{"collective_seq_id"'), "declined", id="newline after"),
        pytest.param(third(BOUNDARY, b'},,{"collective_seq_id"'), "invalid", id="empty element"),
        pytest.param(third(BOUNDARY, b'}{"collective_seq_id"'), "invalid", id="no separator"),
        pytest.param(third(b'"op_id":', b'"op_id":1.0,"x":'), "declined", id="a float id"),
        pytest.param(third(b'"op_id":', b'"op_id":1e99,"x":'), "declined", id="a huge float id"),
        pytest.param(
            third(b'"op_id":', b'"op_id":99999999999999999999,"x":'), "declined", id="past int64"
        ),
        pytest.param(third(b'"state":"', b'"state":"\\u00e9'), "decoded", id="an escape"),
        pytest.param(third(b'"state":"', b'"state":"\\x'), "invalid", id="a bad escape"),
        pytest.param(third(b'"state":"', b'"state":"\t'), "invalid", id="a raw tab"),
        pytest.param(lambda t: t.replace(END, b'},],"pg_config"'), "invalid", id="a last ,"),
        pytest.param(lambda t: t.replace(END, b'} ],"pg_config"'), "decoded", id="space at ]"),
        pytest.param(lambda t: t.replace(END, b'},{}],"pg_config"'), "declined", id="not an entry"),
        pytest.param(lambda t: t.replace(END, b"}"), "invalid", id="an open entry list"),
        pytest.param(lambda t: t.replace(b'[{"c', b'[ {"c', 1), "declined", id="space at ["),
        pytest.param(lambda t: t[:-1] + b',"entries":[]}', "declined", id="a second list after"),
        pytest.param(lambda t: b'{"entries":[],' + t[1:], "declined", id="a second list before"),
        pytest.param(lambda t: b'{"x \\"entries":[],' + t[1:], "declined", id="a key ...entries"),
        pytest.param(lambda t: t + b"{}", "invalid", id="data after the end"),
    ],
)
def test_odd_json_is_decoded_alike_left_or_refused(change: Any, expected: str) -> None:
    """Whatever the change, what the decoder gives is exactly what json.loads gives (see
    `outcome`); it takes what it reads exactly, and leaves the rest to the general path."""
    text = torch_json(make_dump(entries(8)))
    changed = change(text)
    assert changed != text
    assert outcome(changed) == expected


def test_invalid_json_is_refused_as_before_naming_the_file(tmp_path: Path) -> None:
    # GIVEN torch's JSON with a separator after the last entry (not JSON)
    text = torch_json(make_dump(entries(6))).replace(END, b'},],"pg_config"')
    path = tmp_path / "rank_0.json"
    path.write_bytes(text)
    # THEN the rank is unreadable, with json's own reason
    found = load_rank(DumpFile(0, path), sandboxed=True)
    assert isinstance(found, UnreadableDump)
    assert found.reason.startswith("malformed JSON: Expecting value"), found.reason


def test_json_the_decoder_leaves_is_read_column_wise_with_the_reason(tmp_path: Path) -> None:
    # GIVEN a dump indented by Python's json (a layout the decoder does not take)
    path = tmp_path / "rank_0.json"
    path.write_text(json.dumps(make_dump(entries(6)), indent=2))
    found = load_rank(DumpFile(0, path), sandboxed=True)
    # THEN the column-wise reader reads it, and says why the decoder did not
    assert not isinstance(found, UnreadableDump)
    assert found.reader is Reader.COLUMNS
    assert found.fallback.startswith("decoder: Python's JSON layout, but"), found.fallback


def test_torch_json_the_decoder_leaves_is_named_in_a_warning(tmp_path: Path) -> None:
    # GIVEN two ranks of torch's JSON, rank 1's first entry written with a space
    groups = {"0": ("default", [0, 1])}
    for rank in (0, 1):
        text = torch_json(make_dump(entries(8), groups))
        if rank == 1:
            text = text.replace(b'"entries":[{"c', b'"entries":[{ "c', 1)
        (tmp_path / f"rank_{rank}.json").write_bytes(text)
    analysis = analyze(tmp_path, Options(workers=1))
    # THEN the rank is read all the same, and a warning says it was not decoded and why
    assert analysis.findings == ()
    slow = [w for w in analysis.summary.warnings if "not decoded" in w]
    assert len(slow) == 1 and slow[0].startswith("rank 1 not decoded"), slow
    assert "torch's JSON layout, but the first entry laid out otherwise" in slow[0]


def test_a_first_entry_longer_than_64_kib_gives_the_layout_all_the_same() -> None:
    rows = entries(4)
    rows[0]["frames"] = [
        {"name": f"f{i}", "filename": "/src/" + "x" * 200 + ".py", "line": i} for i in range(400)
    ]
    text = torch_json(make_dump(rows))
    assert text.index(b"}]", text.index(b'"frames"')) > 1 << 16
    assert isinstance(or_why(decode_json_layout)(text), Decoded)
    assert outcome(text) == "decoded"
