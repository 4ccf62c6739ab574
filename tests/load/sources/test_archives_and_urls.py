"""Dumps from where they live: archives read member by member, hostile archives, and URLs
served by real servers on 127.0.0.1 (http.server; moto's S3 server), each giving the same
report as the local directory."""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.server
import io
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from fr_analyzer import analyze
from fr_analyzer.load import open_source
from fr_analyzer.pipeline import Options
from fr_analyzer.render.report import render_text

SAMPLES = Path(__file__).resolve().parents[3] / "sample_dumps"
SET_NAMES = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


def fr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fr_analyzer", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def pack(folder: Path, archive: Path) -> Path:
    """`folder` packed under its own name, as `tar czf x.tar.gz folder` or `zip -r` would."""
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    z.write(path, path.relative_to(folder.parent).as_posix())
    else:
        mode: Literal["w:gz", "w"] = "w:gz" if archive.name.endswith((".tar.gz", ".tgz")) else "w"
        with tarfile.open(archive, mode) as t:
            t.add(folder, folder.name)
    return archive


def report(where: str, *, relative_to: str) -> str:
    """The text report without its first line (which names the source), with file names made
        relative to the set, so that a directory and an archive of it compare equal (without the
        files' times, which a zip does not keep and a checkout sets at will), and the source itself
    named `SOURCE` where the report's commands give it."""
    text = render_text(analyze(open_source(where), Options(workers=2, file_times=False)))
    # the next steps name the source too: `fr-analyze -d SOURCE -j --around-root`
    text = "\n".join(li for li in text.splitlines() if not li.startswith("fr-analyze 1.0.0: "))
    return text.replace(relative_to, "").replace(where, "SOURCE")


# ---------------------------------------------------------------------------------------------
# Archives


@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_every_sample_set_packed_gives_the_directorys_report(tmp_path: Path, suffix: str) -> None:
    for name in SET_NAMES:
        archive = pack(SAMPLES / name, tmp_path / f"{name}{suffix}")
        expected = report(str(SAMPLES / name), relative_to=f"{SAMPLES / name}/")
        got = report(str(archive), relative_to=f"{archive}:{name}/")
        assert got == expected, name


def test_a_plain_tar_is_read_in_place_and_gives_the_same_report(tmp_path: Path) -> None:
    name = "nccl_not_joined"
    archive = pack(SAMPLES / name, tmp_path / "dumps.tar")
    assert report(str(archive), relative_to=f"{archive}:{name}/") == report(
        str(SAMPLES / name), relative_to=f"{SAMPLES / name}/"
    )


def test_the_header_says_where_the_dumps_came_from(tmp_path: Path) -> None:
    archive = pack(SAMPLES / "nccl_not_joined", tmp_path / "fr_dumps.tgz")
    result = fr("-d", str(archive), "--json", str(tmp_path / "r.json"))
    assert result.returncode == 1
    assert f"fr-analyze 1.0.0: {archive} (tar.gz archive, read member by member)" in (
        result.stdout.splitlines()
    )
    assert "rank 5 never joined all_reduce #5" in result.stdout
    source = json.loads((tmp_path / "r.json").read_text())["dumps"]["source"]
    assert source == {"kind": "tar.gz", "location": str(archive)}


def test_an_output_may_not_overwrite_the_archive(tmp_path: Path) -> None:
    archive = pack(SAMPLES / "nccl_healthy", tmp_path / "d.zip")
    before = archive.read_bytes()
    result = fr("-d", str(archive), "-o", str(archive))
    assert result.returncode == 2
    assert "refusing to overwrite the archive" in result.stderr
    assert archive.read_bytes() == before


def test_a_file_that_is_not_an_archive_is_a_clear_error(tmp_path: Path) -> None:
    one = tmp_path / "rank_0.pkl"
    one.write_bytes((SAMPLES / "nccl_healthy" / "nccl_trace_rank_0").read_bytes())
    result = fr("-d", str(one))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 2
    assert "not a directory, nor a .tar, .tar.gz, .tgz or .zip archive" in result.stderr


def _bomb() -> bytes:
    """gzip data that inflates 1000x, past the 32 MB floor: refused as a bomb."""
    return gzip.compress(b"\0" * (64 << 20), compresslevel=9)


def _tar_add(t: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))


def test_hostile_tar_members_are_reported_and_the_rest_analyzed(tmp_path: Path) -> None:
    """Rank 3 is a gzip bomb, rank 7 only a symlink, a second rank 5 sits at '../': the bomb
    and the link are unreadable ranks, the '..' member is passed over (the real rank 5 is
    read), and after the dumps a member that inflates 1000x is skipped, costing only itself."""
    source = SAMPLES / "nccl_healthy"
    archive = tmp_path / "hostile.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        for rank in (0, 1, 2, 4, 5, 6):
            _tar_add(
                t, f"d/nccl_trace_rank_{rank}", (source / f"nccl_trace_rank_{rank}").read_bytes()
            )
        _tar_add(t, "d/nccl_trace_rank_3.gz", _bomb())
        link = tarfile.TarInfo("d/nccl_trace_rank_7")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        t.addfile(link)
        _tar_add(t, "../nccl_trace_rank_5", b"\x80\x02junk")
        _tar_add(t, "d/zeros.bin", b"\0" * (100 << 20))
        _tar_add(t, "d/notes.txt", b"after the bomb")
    result = fr("-d", str(archive), "-v")
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "ranks loaded: 6 (0-2,4-6)" in out
    assert f"unreadable: {archive}:d/nccl_trace_rank_3.gz (rank 3): gzip bomb" in out
    link_line = f"unreadable: {archive}:d/nccl_trace_rank_7 (rank 7): a link in the archive"
    assert f"{link_line} (to /etc/passwd): not followed" in out
    assert f"{archive}:../nccl_trace_rank_5 (rank 5) passed over: a member path with '..'" in out
    assert (
        f"{archive}:d/zeros.bin skipped: compression bomb: inflates more than 500x,"
        f" to {100 << 20} bytes"
    ) in out
    assert "read stopped" not in out
    assert "Traceback" not in result.stderr


def test_hostile_zip_members_are_reported_and_the_rest_analyzed(tmp_path: Path) -> None:
    source = SAMPLES / "nccl_healthy"
    archive = tmp_path / "hostile.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for rank in (0, 1, 2, 4, 5, 6):
            z.writestr(
                f"d/nccl_trace_rank_{rank}", (source / f"nccl_trace_rank_{rank}").read_bytes()
            )
        z.writestr("d/nccl_trace_rank_3", b"\0" * (64 << 20))  # deflate inflating 1000x
        link = zipfile.ZipInfo("d/nccl_trace_rank_7")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(link, "/etc/passwd")
        z.writestr("../nccl_trace_rank_5", b"junk")
    result = fr("-d", str(archive))
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "ranks loaded: 6 (0-2,4-6)" in out
    assert f"unreadable: {archive}:d/nccl_trace_rank_3 (rank 3): compression bomb" in out
    assert f"unreadable: {archive}:d/nccl_trace_rank_7 (rank 7): a link in the archive" in out
    assert f"{archive}:../nccl_trace_rank_5 (rank 5) passed over: a member path with '..'" in out


def test_a_member_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    source = SAMPLES / "nccl_healthy"
    archive = pack(source, tmp_path / "d.tar.gz")
    size = (source / "nccl_trace_rank_2").stat().st_size
    limit = size - 1
    result = fr("-d", str(archive), "--max-file-size", str(limit))
    assert f"over the {limit}-byte limit" in result.stdout


# ---------------------------------------------------------------------------------------------
# URLs: fsspec over real servers on loopback

fsspec = pytest.importorskip("fsspec", reason="the remote extra is not installed")


@contextlib.contextmanager
def http_server(root: Path) -> Iterator[str]:
    """Python's http.server serving `root` on 127.0.0.1, stopped on exit."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_http_url_gives_the_directorys_report() -> None:
    pytest.importorskip("aiohttp")
    name = "nccl_not_joined"
    with http_server(SAMPLES) as base:
        got = fr("-d", f"{base}/{name}/")
    # a checkout's files carry the checkout's times (a copy's, named so); http.server gives none
    local = fr("-d", str(SAMPLES / name), "--ignore-file-times")
    assert got.returncode == local.returncode == 1, got.stderr
    assert any(li.endswith("(http URL, fetched file by file)") for li in got.stdout.splitlines())
    assert body(got.stdout, f"{base}/{name}/") == body(local.stdout, str(SAMPLES / name))


def body(text: str, source: str) -> str:
    """A text report without its line that names the source, the source named `SOURCE` where
    its commands give it."""
    text = "\n".join(li for li in text.splitlines() if not li.startswith("fr-analyze 1.0.0: "))
    return text.replace(source, "SOURCE")


def test_a_tarball_at_a_url_is_streamed(tmp_path: Path) -> None:
    """http.server answers no range requests: a .tar.gz is read once from its start."""
    pytest.importorskip("aiohttp")
    pack(SAMPLES / "nccl_not_joined", tmp_path / "fr.tar.gz")
    with http_server(tmp_path) as base:
        got = fr("-d", f"{base}/fr.tar.gz")
    assert got.returncode == 1, got.stderr
    assert "rank 5 never joined all_reduce #5" in got.stdout


def test_file_url_needs_no_extra(tmp_path: Path) -> None:
    got = fr("-d", f"file://{SAMPLES / 'nccl_healthy'}")
    assert got.returncode == 0, got.stderr


def test_without_the_extra_a_url_is_one_clear_line(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['fsspec'] = None; sys.argv = ['fr-analyze', '-d', "
        "'s3://bucket/job/fr/']; from fr_analyzer.cli import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] + "\n" == (
        "fr-analyze: error: s3://bucket/job/fr/: reading dumps from a URL needs the remote"
        " extra (pip install 'fr-analyze[remote]')\n"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, with a bucket; its endpoint URL."""
    server_mod = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    pytest.importorskip("boto3")
    port = _free_port()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _client(endpoint).create_bucket(Bucket="fr-dumps")
        yield endpoint
    finally:
        server.stop()


def _client(endpoint: str) -> Any:
    """A boto3 S3 client of the test server, with moto's dummy credentials."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def _upload(endpoint: str, folder: Path, prefix: str) -> None:
    client = _client(endpoint)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(folder).as_posix()}"
            client.put_object(Bucket="fr-dumps", Key=key, Body=path.read_bytes())


def _aws_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    env.update(AWS_DEFAULT_REGION="us-east-1", **extra)
    return env


def test_s3_sample_set_gives_the_directorys_report(s3: str) -> None:
    name = "nccl_not_joined"
    _upload(s3, SAMPLES / name, f"jobs/{name}")
    url = f"s3://fr-dumps/jobs/{name}/"
    got = fr("-d", url, "--storage-option", f"endpoint_url={s3}", env=_aws_env())
    local = fr("-d", str(SAMPLES / name))
    assert got.returncode == local.returncode == 1, got.stderr
    assert f"fr-analyze 1.0.0: {url} (s3 URL, fetched file by file)" in got.stdout.splitlines()
    assert body(got.stdout, url) == body(local.stdout, str(SAMPLES / name))


def _peak_rss_kib(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run fr-analyze; the largest resident size of any of its processes (KiB)."""
    code = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stdout.write(r.stdout); sys.stderr.write(r.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(r.returncode)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-m", "fr_analyzer", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    return result, int(result.stderr.strip().splitlines()[-1])


@pytest.mark.slow
def test_s3_1024_ranks_same_report_and_bounded_memory(s3: str, tmp_path: Path) -> None:
    """A generated 1,024-rank job (40 MB) from the bucket gives the local directory's report,
    and fetching adds no memory that grows with the job: from 8 ranks to 1,024, the peak of
    the run's largest process grows by what the local run's grows by (the tables), not by the
    40 MB fetched (files are parsed as they arrive, never held together)."""
    from benchmarks.gen import Spec, generate

    manifest, _ = generate(Spec(1024, fault="not_joined", capacity=300, steps=2), tmp_path)
    big = Path(manifest.dumps_dir)
    small = SAMPLES / "nccl_not_joined"
    _upload(s3, big, "jobs/big")
    _upload(s3, small, "jobs/small")
    env = _aws_env()
    endpoint = f"endpoint_url={s3}"
    got, remote_big = _peak_rss_kib(
        "-d", "s3://fr-dumps/jobs/big", "--storage-option", endpoint, env=env
    )
    local, local_big = _peak_rss_kib("-d", str(big), env=env)
    _, remote_small = _peak_rss_kib(
        "-d", "s3://fr-dumps/jobs/small", "--storage-option", endpoint, env=env
    )
    _, local_small = _peak_rss_kib("-d", str(small), env=env)
    assert got.returncode == local.returncode == 1, got.stderr
    assert "rank 517 never joined all_reduce #7" in got.stdout
    assert body(got.stdout, "s3://fr-dumps/jobs/big") == body(local.stdout, str(big))
    remote_growth = (remote_big - remote_small) * 1024
    local_growth = (local_big - local_small) * 1024
    assert remote_growth < local_growth + manifest.bytes // 3, (remote_growth, local_growth)


def test_s3_without_credentials_is_one_clear_line(s3: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        AWS_DEFAULT_REGION="us-east-1",
    )
    url = "s3://fr-dumps/jobs/"
    result = fr("-d", url, "--storage-option", f"endpoint_url={s3}", env=env)
    assert result.returncode == 2
    assert result.stderr.startswith(f"fr-analyze: error: {url}: no credentials for s3://")
    assert result.stderr.count("\n") == 2


def test_timeline_reads_an_archive(tmp_path: Path) -> None:
    archive = pack(SAMPLES / "nccl_not_joined", tmp_path / "d.zip")
    result = fr("timeline", "-d", str(archive), "-o", str(tmp_path / "t.json"))
    assert result.returncode == 1, result.stderr  # the analysis' code: rank 5 never joined
    trace = json.loads((tmp_path / "t.json").read_text())
    assert {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"} == set(range(8))


def test_a_tarball_read_without_worker_processes_gives_the_same_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no worker can be forked the parent reads each member itself, in archive order,
    holding one member's bytes at a time."""
    from fr_analyzer.load import discover, load_all
    from fr_analyzer.load.safety import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: False)
    archive = pack(SAMPLES / "nccl_not_joined", tmp_path / "d.tar.gz")
    found = discover(open_source(str(archive)))
    tasks = found.source.tasks(found.files, 1 << 30)
    loaded, unreadable = load_all(tasks)
    assert sorted(d.rank for d in loaded) == list(range(8)) and not unreadable
    assert not tasks._held  # type: ignore[attr-defined]


def test_torchfrtrace_spelling_takes_an_archive_after_a_rank_list(tmp_path: Path) -> None:
    archive = pack(SAMPLES / "nccl_healthy", tmp_path / "d.tar.gz")
    spelled = fr("-j", "--selected-ranks", "0", "1", str(archive))
    assert spelled.returncode == 0, spelled.stderr
    assert spelled.stdout == fr("-j", "--selected-ranks", "0,1", "-d", str(archive)).stdout
