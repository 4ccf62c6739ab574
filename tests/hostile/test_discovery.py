"""Hostile and messy input, round two: discovery, directories and archives.

Each test plays one attack on where the dumps live, built in tmp_path (a second file for a
rank, a FIFO or a link named like a dump, a compression bomb first in a tarball, names holding
terminal controls, JSON in UTF-16), runs the whole CLI in process, and pins the outcome: every
good rank analyzed, the exit code the verdict's (0 or 1, never 2), what was passed over named
in a warning with its reason, nothing from outside the source in any output, every name
escaped, and bounded time.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import lzma
import os
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from fr_analyzer.load.safety import limits
from tests.hostile.test_damaged_dumps import Outcome, run_cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
SECRET = "AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
MIB = 1 << 20


def run(capsys: pytest.CaptureFixture[str], where: Path, tmp_path: Path) -> Outcome:
    """`fr-analyze -d where --json report` through `cli.main` in this process."""
    outcome = run_cli(capsys, ["-d", str(where), "--workers", "1"], tmp_path / "report.json")
    assert outcome.code in (0, 1), outcome  # the verdict's code: never 2, nothing lost
    for text in (outcome.out, outcome.err):
        assert "Traceback" not in text and "internal error" not in text, text[-2000:]
    return outcome


def healthy(tmp_path: Path, name: str = "gloo_healthy") -> Path:
    """A copy of a healthy 4-rank sample set (rank_0.pkl ... rank_3.pkl)."""
    directory = tmp_path / "dumps"
    shutil.copytree(SAMPLES / name, directory)
    return directory


# ---------------------------------------------------------------------------------------------
# A second file for a rank: passed over by a stated rule, never the end of the run


def test_a_file_that_is_no_regular_file_never_competes_and_never_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO named rank_3.json beside the real rank_3.pkl: never opened (so nothing waits on
    it), passed over with its reason, and all four ranks are analyzed."""
    directory = healthy(tmp_path)
    os.mkfifo(directory / "rank_3.json")
    got = run(capsys, directory, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3]
    assert (
        f"{directory}/rank_3.json (rank 3) passed over: not a regular file (a FIFO)" in got.warnings
    )
    assert got.seconds < 10


def test_a_lone_fifo_for_a_rank_is_that_ranks_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy(tmp_path)
    (directory / "rank_3.pkl").unlink()
    os.mkfifo(directory / "rank_3.pkl")
    got = run(capsys, directory, tmp_path)
    assert got.code == 1 and got.loaded == [0, 1, 2]
    assert got.unreadable == {3: "not a regular file (a FIFO)"}


def test_at_one_depth_the_newest_file_is_read_and_the_other_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rank_3.json (stale, not even a dump) and rank_3.pkl (newer) in one folder."""
    directory = healthy(tmp_path)
    stale = directory / "rank_3.json"
    stale.write_text('{"junk": true}')
    os.utime(stale, (1_000_000, 1_000_000))
    got = run(capsys, directory, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3]
    assert got.warnings[0] == (
        f"{stale} (rank 3) passed over: rank 3 is read from {directory}/rank_3.pkl"
        " (modified more recently)"
    )


def test_at_one_depth_and_time_the_path_sorting_last_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy(tmp_path)
    other = directory / "rank_3.json"
    other.write_text('{"junk": true}')
    when = (directory / "rank_3.pkl").stat().st_mtime
    for path in (other, directory / "rank_3.pkl"):
        os.utime(path, (when, when))
    got = run(capsys, directory, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3]
    assert f"{other} (rank 3) passed over: rank 3 is read from" in got.warnings[0]
    assert got.warnings[0].endswith("(its path sorts later)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_file_that_cannot_be_read_never_competes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy(tmp_path)
    (directory / "top").mkdir()
    shutil.copyfile(directory / "rank_3.pkl", directory / "top" / "rank_3.pkl")
    (directory / "rank_3.pkl").chmod(0)
    got = run(capsys, directory, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3]
    assert f"{directory}/rank_3.pkl (rank 3) passed over: cannot read" in got.warnings[0]


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_a_duplicated_archive_member_reads_the_last_as_extracting_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """An archive holding d/rank_3.pkl twice: the first junk, the last the real dump."""
    members = [(f"d/rank_{r}.pkl", _sample(r)) for r in range(3)]
    members += [("d/rank_3.pkl", b"\x80\x02junk"), ("d/rank_3.pkl", _sample(3))]
    archive = tmp_path / f"dumps.{kind}"
    if kind == "tar":
        with tarfile.open(archive, "w") as t:
            for name, data in members:
                _tar_add(t, name, data)
    else:
        with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(archive, "w") as z:
            for name, data in members:
                z.writestr(name, data)
    got = run(capsys, archive, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3]
    assert got.warnings[0] == (
        f"{archive}:d/rank_3.pkl (rank 3) passed over: rank 3 is read from"
        f" {archive}:d/rank_3.pkl (later in the archive, as extracting it would leave it)"
    )


# ---------------------------------------------------------------------------------------------
# A compression bomb in a tarball costs only its member


def _sample(rank: int) -> bytes:
    return (SAMPLES / "gloo_healthy" / f"rank_{rank}.pkl").read_bytes()


def _tar_add(t: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))


_COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gz": lambda data: gzip.compress(data, 9, mtime=0),
    "bz2": bz2.compress,
    "xz": lambda data: lzma.compress(data, preset=0),
}


def bomb_tarball(
    path: Path,
    bomb: str,
    mib: int,
    before: list[tuple[str, bytes]],
    after: list[tuple[str, bytes]],
) -> Path:
    """A compressed tar (its kind from `path`'s suffix): the members `before`, then `bomb`
    (`mib` MiB of zeros, inflating over 1000x), then the members `after`. Built in
    milliseconds from one compressed MiB repeated: concatenated streams are one stream."""
    compress = _COMPRESS[path.name.rsplit(".", 1)[1]]

    def plain(members: list[tuple[str, bytes]], end: bool) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as t:
            for name, data in members:
                _tar_add(t, name, data)
            size = t.offset  # where the end-of-archive blocks begin
        return buffer.getvalue() if end else buffer.getvalue()[:size]

    head = tarfile.TarInfo(bomb)
    head.size = mib * MIB
    zeros = compress(bytes(MIB))
    path.write_bytes(
        compress(plain(before, end=False) + head.tobuf())
        + zeros * mib
        + compress(plain(after, end=True))
    )
    return path


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_a_bomb_first_in_a_compressed_tar_costs_only_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """128 MiB of zeros as the first member (over 1000x): skipped by inflating it, then every
    rank after it is read; the bomb is named with its reason."""
    ranks = [(f"d/rank_{r}.pkl", _sample(r)) for r in range(4)]
    archive = bomb_tarball(tmp_path / f"dumps.tar.{kind}", "d/core.bin", 128, [], ranks)
    got = run(capsys, archive, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3]
    assert got.warnings[0] == (
        f"{archive}:d/core.bin skipped: compression bomb: inflates more than 500x, to"
        f" {128 * MIB} bytes"
    )
    assert "read stopped" not in got.out
    assert got.seconds < 15


def test_a_bomb_named_like_a_rank_is_that_ranks_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ranks = [(f"d/rank_{r}.pkl", _sample(r)) for r in (0, 2, 3)]
    archive = bomb_tarball(tmp_path / "dumps.tar.gz", "d/rank_1.pkl", 128, ranks[:1], ranks[1:])
    got = run(capsys, archive, tmp_path)
    assert got.code == 1 and got.loaded == [0, 2, 3]
    assert got.unreadable == {1: f"compression bomb: inflates more than 500x, to {128 * MIB} bytes"}
    assert not [w for w in got.warnings if "skipped" in w]  # named once, as rank 1's reason


def test_bombs_past_their_limit_stop_the_reading_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipping a bomb costs inflating it: past `tar_bomb_max_bytes` of bombs (here lowered to
    64 MiB) the archive is read no further; what was read before is analyzed."""
    lowered = dataclasses.replace(limits.LIMITS, tar_bomb_max_bytes=64 * MIB)
    monkeypatch.setattr(limits, "LIMITS", lowered)
    ranks = [(f"d/rank_{r}.pkl", _sample(r)) for r in range(4)]
    archive = bomb_tarball(tmp_path / "dumps.tar.gz", "d/core.bin", 128, ranks[:2], ranks[2:])
    got = run(capsys, archive, tmp_path)
    assert got.code == 1 and got.loaded == [0, 1]
    assert got.warnings[:1] == [
        f"{archive}: read stopped at member d/core.bin (members after it are not read):"
        f" compression bomb: inflates more than 500x, to {128 * MIB} bytes; skipping it would"
        f" inflate bombs past the {64 * MIB}-byte limit of a compressed tar"
        " (tar_bomb_max_bytes)",
    ]


# ---------------------------------------------------------------------------------------------
# Nothing from outside the source reaches a report


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "credentials"
    secret.write_text(SECRET + "\n")
    return secret


def test_a_link_out_of_the_directory_is_never_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy(tmp_path)
    (directory / "rank_3.pkl").unlink()
    (directory / "rank_3.pkl").symlink_to(_secret(tmp_path))
    got = run(capsys, directory, tmp_path)
    assert got.code == 1 and got.loaded == [0, 1, 2]
    assert got.unreadable == {3: "a link to outside the dump directory: not read"}
    assert "AKIA" not in got.everything


def test_a_link_out_beside_the_real_file_is_passed_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy(tmp_path)
    (directory / "rank_3.json").symlink_to(_secret(tmp_path))
    got = run(capsys, directory, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3]
    assert (
        f"{directory}/rank_3.json (rank 3) passed over: a link to outside the dump directory:"
        " not read"
    ) in got.warnings
    assert "AKIA" not in got.everything


def test_a_link_inside_the_directory_is_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy(tmp_path)
    (directory / "store").mkdir()
    (directory / "rank_3.pkl").rename(directory / "store" / "three.bin")
    (directory / "rank_3.pkl").symlink_to(Path("store") / "three.bin")
    got = run(capsys, directory, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3] and not got.unreadable


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (SECRET.encode() + b"\n", "not a valid dump pickle: looks like text, not a pickle"),
        (b"[" + SECRET.encode() + b"] log\n", "malformed JSON: looks like text, not JSON"),
        (
            b"\x7fELF\x02\x01\x01\x00" + SECRET.encode(),
            "not a valid dump pickle: looks like an ELF binary, not a pickle",
        ),
    ],
    ids=["text", "text-starting-like-json", "elf"],
)
def test_a_file_that_is_no_dump_is_described_never_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, reason: str
) -> None:
    directory = healthy(tmp_path)
    (directory / "rank_3.pkl").write_bytes(content)
    got = run(capsys, directory, tmp_path)
    assert got.code == 1 and got.loaded == [0, 1, 2]
    assert got.unreadable == {3: reason}
    assert "AKIA" not in got.everything


# ---------------------------------------------------------------------------------------------
# Every name printed is escaped


def test_names_holding_terminal_controls_are_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder named with ESC, BEL and a newline holds a second rank_2.pkl and a FIFO
    rank_3.json: both are passed over, and no control character reaches the terminal."""
    directory = healthy(tmp_path)
    folder = directory / "old\x1b]0;pwned\x07\n\x1b[2J"
    folder.mkdir()
    shutil.copyfile(directory / "rank_2.pkl", folder / "rank_2.pkl")
    os.mkfifo(folder / "rank_3.json")
    got = run(capsys, directory, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3]
    shown = f"{directory}/old\\x1b]0;pwned\\x07\\x0a\\x1b[2J"
    assert f"warning: {shown}/rank_2.pkl (rank 2) passed over: rank 2 is read from" in got.out
    fifo = f"warning: {shown}/rank_3.json (rank 3) passed over: not a regular file (a FIFO)"
    assert fifo in got.out
    for control in "\x1b\x07":
        assert control not in got.out + got.err
    named = [line for line in got.out.splitlines() if "pwned" in line or "[2J" in line]
    assert len(named) == 2 and all(line.startswith("warning: ") for line in named)  # unbroken


# ---------------------------------------------------------------------------------------------
# JSON in other encodings, or after long whitespace, is JSON


def test_json_in_utf16_utf32_or_after_long_whitespace_is_read_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy(tmp_path, "gloo_healthy_json")
    text = {r: (directory / f"rank_{r}.json").read_text() for r in range(4)}
    (directory / "rank_0.json").write_text(" \n\t" * 100 + text[0])
    (directory / "rank_1.json").write_bytes(text[1].encode("utf-16"))  # with a BOM
    (directory / "rank_2.json").write_bytes(text[2].encode("utf-16-be"))  # without
    (directory / "rank_3.json").write_bytes(text[3].encode("utf-32-le"))
    got = run(capsys, directory, tmp_path)
    assert got.code == 0 and got.loaded == [0, 1, 2, 3] and not got.unreadable


def test_utf16_json_that_does_not_decode_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = healthy(tmp_path, "gloo_healthy_json")
    data = (directory / "rank_3.json").read_text().encode("utf-16")
    (directory / "rank_3.json").write_bytes(data[:-1])  # an odd byte count
    got = run(capsys, directory, tmp_path)
    assert got.code == 1 and got.loaded == [0, 1, 2]
    assert got.unreadable[3].startswith("malformed UTF-16 JSON: does not decode at byte")
