"""What an on-call engineer sees (issue 48, item 1): `fr-analyze -d DIR` run in a real
pseudo-terminal of 80x24, its bytes fed to a terminal emulator (pyte), and the screen read as
it stands once the command has returned and the shell has printed its prompt. The last lines
on that screen must hold the answer in one line and one command to run next; the whole report
fits on it, at 16 and at 1,024 ranks; `-q` is the answer alone.

The dump sets are simulated (`benchmarks.gen`, faults drawn by tools/frsim) into a temporary
folder, small in entries so that the 1,024-rank set is made and read in seconds.
"""

from __future__ import annotations

import fcntl
import os
import pty
import shlex
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

pyte = pytest.importorskip("pyte")

from benchmarks.gen import Spec, generate  # noqa: E402
from fr_analyzer import analyze  # noqa: E402
from fr_analyzer.pipeline import Options  # noqa: E402
from fr_analyzer.render import report  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COLUMNS, ROWS = 80, 24
PROMPT = "$ "


def small_job(world_size: int, fault: str) -> Spec:
    """A 3D-parallel job of `world_size` ranks, few entries per rank, `fault` on one rank."""
    tp, pp = (8, 4) if world_size >= 32 else (4, 2)
    return Spec(
        world_size=world_size,
        fault=fault,
        tp=tp,
        pp=pp,
        steps=1,
        micro_batches=2,
        eval_micro_batches=1,
        capacity=100,
    )


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Dump sets by world size: a tensor-parallel size mismatch at 16 ranks, a rank that
    never joined the last world all_reduce at 1,024."""
    out = tmp_path_factory.mktemp("screen")
    made = {}
    for world, fault in ((16, "size_mismatch"), (1024, "not_joined")):
        manifest, _ = generate(small_job(world, fault), out, workers=2)
        made[world] = Path(manifest.dumps_dir)
    return made


def on_a_terminal(args: list[str], cwd: Path) -> tuple[list[str], int]:
    """Run `fr-analyze *args` in `cwd` as a person does in an 80x24 terminal: stdout and
    stderr on a pseudo-terminal of that size, the command line typed after a prompt and a
    prompt printed once it returns. The screen as it then stands (trailing spaces dropped),
    and the exit code."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    env |= {"TERM": "xterm-256color", "LINES": str(ROWS), "PYTHONPATH": str(ROOT)}
    command = ["fr-analyze", *args]
    process = subprocess.Popen(
        [sys.executable, "-m", "fr_analyzer", *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=cwd,
        close_fds=True,
    )
    os.close(follower)
    received = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the pseudo-terminal closed: the command has returned
            break
        if not chunk:
            break
        received += chunk
    code = process.wait(timeout=120)
    os.close(leader)
    screen = pyte.Screen(COLUMNS, ROWS)
    stream = pyte.ByteStream(screen)
    typed = PROMPT + " ".join(shlex.quote(a) for a in command)
    stream.feed(typed.encode() + b"\r\n" + bytes(received) + PROMPT.encode())
    return [line.rstrip() for line in screen.display], code


def last_lines(screen: list[str]) -> list[str]:
    """The screen's lines above the prompt that ends it, blank lines at the bottom dropped."""
    lines = list(screen)
    while lines and not lines[-1].strip():
        lines.pop()
    assert lines[-1] == PROMPT.rstrip(), lines
    return lines[:-1]


@pytest.mark.parametrize("world", [16, 1024])
def test_the_screen_after_the_command_ends_with_the_answer_and_the_next_command(
    jobs: dict[int, Path], world: int
) -> None:
    """GIVEN a hung job of `world` ranks WHEN the report is printed in an 80x24 terminal THEN,
    once the command returns, the lines above the prompt are the answer in one line (status,
    culprit, op, group) and a command that zooms in, and the report's first line (the answer)
    is still on the screen: nothing scrolled away."""
    where = jobs[world]
    analysis = analyze(where, Options(workers=2))
    root = analysis.conclusion.root
    assert root is not None and root.group is not None

    screen, code = on_a_terminal(["-d", "dumps", "--workers", "2"], cwd=where.parent)

    assert code == 1
    lines = last_lines(screen)
    status = analysis.conclusion.status.value.upper()
    at = max(i for i, line in enumerate(lines) if line.startswith(f"{status}: "))
    headline, why, command = lines[at], lines[at + 1], lines[at + 2 :]
    assert len(command) <= 3, lines  # what follows the headline: the comment and the command
    assert f"rank {root.ranks[0]}" in headline
    assert f"{root.op} #{root.collective_seq_id}" in headline
    assert f"in group {root.group.name!r} ({root.group.desc})" in headline
    assert why.startswith("  # next: ")
    as_typed = " ".join(line.removesuffix("\\") for line in command)
    assert shlex.split(as_typed) == ["fr-analyze", "-d", "dumps", "-j", "--around-root"]
    assert any(line.startswith(f"{status}. ") for line in screen), screen  # the answer too


@pytest.mark.parametrize("world", [16, 1024])
def test_quiet_is_the_answer_in_one_to_three_lines(jobs: dict[int, Path], world: int) -> None:
    """GIVEN a hung job WHEN run with -q THEN one to three lines: the answer in one line first,
    then at most the confidence."""
    where = jobs[world]
    screen, code = on_a_terminal(["-d", "dumps", "--workers", "2", "-q"], cwd=where.parent)
    assert code == 1
    lines = last_lines(screen)[1:]  # below the command line
    assert 1 <= len(lines) <= report.QUIET_LINES, lines
    status = analyze(where, Options(workers=2)).conclusion.status.value.upper()
    assert lines[0].startswith(f"{status}: rank "), lines


def test_the_default_report_fits_the_screen_at_any_job_size(jobs: dict[int, Path]) -> None:
    """GIVEN hung jobs of 16 and 1,024 ranks and sample sets of every status WHEN rendered at
    80 columns THEN at most `REPORT_LINES` lines, none wider than the terminal; -v has more."""
    samples = ROOT / "sample_dumps"
    sets = [
        *jobs.values(),
        *(samples / name for name in ("nccl_healthy", "nccl_missing_dump", "gloo_op_mismatch")),
    ]
    for where in sets:
        analysis = analyze(where, Options(workers=2))
        text = report.render_text(analysis, width=COLUMNS).splitlines()
        assert len(text) <= report.REPORT_LINES, (where, text)
        assert max(len(line) for line in text) <= COLUMNS, where
        assert len(report.render_text(analysis, width=COLUMNS, verbose=True).splitlines()) > len(
            text
        )


# --- what the report singles out --------------------------------------------------------------


def test_sequence_id_spans_run_from_lowest_to_highest() -> None:
    from fr_analyzer.render.presentation import seq_span

    assert seq_span(["#670", "#538", "#600"]) == "#538-#670"
    assert seq_span(["p2p #9", "p2p #2"]) == "p2p #2-#9"
    assert seq_span(["#5", "-", "p2p #3", "#4"]) == "#4-#5, p2p #3"
    assert seq_span(["-"]) == "-"


def test_only_the_stack_group_of_the_culprit_is_the_odd_one_out() -> None:
    """GIVEN three stack groups whose ranks differ from their peers' (pipeline stages run
    different code) WHEN the root cause's culprit is in one of them THEN that one alone is the
    odd one out; with no culprit among them, none is singled out."""
    from fr_analyzer.diagnosis.positions import StackGroup
    from fr_analyzer.render.presentation import odd_one_out

    groups = [
        StackGroup(None, (0, 1, 2, 3), False),
        StackGroup(None, (4,), True, (4,)),
        StackGroup(None, (5,), True, (5,)),
        StackGroup(None, (6, 7), True, (6,)),
    ]

    class Root:
        ranks = (5,)

    assert odd_one_out(groups, Root()) == 2  # type: ignore[arg-type]
    assert odd_one_out(groups, None) is None
    assert odd_one_out(groups[:2], None) == 1


def test_many_unreadable_dumps_under_a_deep_path_still_fit_the_screen(tmp_path: Path) -> None:
    """GIVEN a dump folder deep in the file system where most rank files are garbage WHEN the
    default report is rendered at 80 columns THEN the unreadable files are counted, not listed
    one by one, and the report stays within `REPORT_LINES` lines, its last line the command."""
    import pickle

    from tests.builders import make_dump, make_entry

    where = tmp_path.joinpath(*(["a-rather-long-folder-name"] * 3), "dumps")
    where.mkdir(parents=True)
    world = {"0": ("default_pg", list(range(16)))}
    for rank in range(16):
        entries = [make_entry("all_reduce", s, group=("0", "default_pg")) for s in (1, 2)]
        data = pickle.dumps(make_dump(entries, world)) if rank < 4 else b"\x80\x04garbage"
        (where / f"rank_{rank}").write_bytes(data)
    analysis = analyze(where, Options(workers=1))
    assert len(analysis.summary.unreadable) == 12
    text = report.render_text(analysis, width=COLUMNS).splitlines()
    assert len(text) <= report.REPORT_LINES, "\n".join(text)
    assert max(len(line) for line in text) <= COLUMNS
    at = max(i for i, line in enumerate(text) if line.startswith("  # next: "))
    command = "\n".join(text[at + 1 :]).replace("\\\n", "")  # as the shell joins it
    assert shlex.split(command) == ["fr-analyze", "-d", str(where), "-v"]
