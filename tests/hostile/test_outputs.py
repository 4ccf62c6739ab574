"""Output paths that are not regular files: nothing the user has is ever replaced. A device or
a FIFO is written in place, `-` and `/dev/stdout` join standard output's stream, a symlink
keeps being a link (its target gets the output), and what can take no output is refused
with one line and exit 2."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_dumps"
HEALTHY = SAMPLES / "gloo_healthy"
HUNG = SAMPLES / "gloo_skip_collective"


def fr(*args: str, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fr_analyzer", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


def test_dev_null_stays_a_character_device() -> None:
    before = os.stat("/dev/null")
    done = fr("-d", str(HEALTHY), "-o", "/dev/null", "--json", "/dev/null")
    assert done.returncode == 0, done.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode)
    assert (after.st_ino, after.st_rdev, after.st_mode) == (
        before.st_ino,
        before.st_rdev,
        before.st_mode,
    )


def test_json_to_dev_stdout_joins_the_stream(tmp_path: Path) -> None:
    """`>> file` then `--json /dev/stdout`: the JSON is added to the file's stream (the text
    report goes to stderr); the file is not replaced, and /dev/stdout stays a link."""
    out = tmp_path / "out.txt"
    out.write_text("earlier\n")
    with open(out, "a") as stream:
        done = fr("-d", str(HUNG), "--json", "/dev/stdout", stdout=stream.fileno())
    assert done.returncode == 1, done.stderr
    first, _, rest = out.read_text().partition("\n")
    assert first == "earlier"
    assert json.loads(rest)["schema"] == "fr-analyze.report/1"
    assert done.stderr.strip()  # the text report
    assert os.path.islink("/dev/stdout")


def test_json_dash_is_stdout_and_the_text_goes_to_stderr(tmp_path: Path) -> None:
    done = fr("-d", str(HUNG), "--json", "-", stdout=subprocess.PIPE)
    assert done.returncode == 1
    assert json.loads(done.stdout)["schema"] == "fr-analyze.report/1"
    assert done.stderr.strip()  # the text report
    assert not (Path.cwd() / "-").exists()


def test_a_fifo_with_a_reader_gets_the_whole_output(tmp_path: Path) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as stream:
            got.append(stream.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    done = fr("-d", str(HEALTHY), "--json", str(fifo))
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(got[0])["schema"] == "fr-analyze.report/1"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_fifo_no_one_reads_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "nobody.fifo"
    os.mkfifo(fifo)
    done = fr("-d", str(HEALTHY), "--json", str(fifo))
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-2]
        .endswith("nobody.fifo: a FIFO that no process is reading: nothing written")
    )
    assert "Traceback" not in done.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_symlink_stays_a_link_and_its_target_gets_the_output(tmp_path: Path) -> None:
    target = tmp_path / "runs" / "42.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    done = fr("-d", str(HEALTHY), "--json", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and link.resolve() == target
    assert json.loads(target.read_text())["schema"] == "fr-analyze.report/1"
    assert [p.name for p in target.parent.iterdir()] == ["42.json"]  # no temporary left


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "db.pkl"
    link.symlink_to(tmp_path / "made.pkl")
    done = fr("-d", str(HEALTHY), "-o", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and (tmp_path / "made.pkl").stat().st_size > 0


def test_a_socket_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        done = fr("-d", str(HEALTHY), "-o", str(path))
    finally:
        server.close()
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].endswith("s.sock: is a socket: refusing to write there")
    assert stat.S_ISSOCK(os.stat(path).st_mode)


def _block_device() -> str | None:
    for name in ("/dev/loop0", "/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/ram0"):
        try:
            if stat.S_ISBLK(os.stat(name).st_mode):
                return name
        except OSError:
            continue
    return None


@pytest.mark.skipif(_block_device() is None, reason="no block device here")
def test_a_block_device_is_refused_before_the_analysis() -> None:
    device = _block_device()
    assert device is not None
    done = fr("-d", str(HEALTHY), "-o", device)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].endswith(
        f"{device}: is a block device: refusing to write there"
    )
    assert not done.stdout  # refused before any analysis


def test_a_directory_is_refused(tmp_path: Path) -> None:
    done = fr("-d", str(HEALTHY), "--json", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].endswith("is a directory: refusing to write there")


def test_timeline_to_dev_null(tmp_path: Path) -> None:
    done = fr("timeline", "-d", str(HEALTHY), "-o", "/dev/null")
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
