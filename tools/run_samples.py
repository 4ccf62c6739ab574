"""`make run`: analyze every bundled sample dump set and end with one table of set, expected
answer, answer got, and whether they agree.

The expected answer is the `EXPECTED:` line that ends each set's NOTE.md (written by whoever
made the set, never by fr-analyze; `tests/end_to_end/test_scenarios.py` checks the same line
in-process).
The answer got is what the real `fr-analyze` command wrote with `--json`: `verdict.status` and
`verdict.culprit_ranks`. Each set's full text report and JSON report are written to the output
folder (`run-reports/` by default); `--verbose` also prints the text reports.

The file times are ignored (`--ignore-file-times`): a checkout sets them, so they say nothing of
when the dumps were taken, and the expected answers are the entries' answer alone.

Exit status: 0 when every set got its expected answer, 1 when one did not, 2 when fr-analyze
failed on a set (exit status over 1, or no JSON report).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
_EXPECTED = re.compile(r"^EXPECTED: (.*)$", re.M)


@dataclass(frozen=True)
class Answer:
    """A verdict reduced to what the table compares: the status and the culprit ranks."""

    status: str
    """`ok`, `desync`, `hung`, `slow` or `incomplete`."""
    culprits: tuple[int, ...]
    """The root cause's ranks, ascending; empty when there is none."""

    def __str__(self) -> str:
        if not self.culprits:
            return self.status
        return f"{self.status} {','.join(str(r) for r in self.culprits)}"


@dataclass(frozen=True)
class Outcome:
    """One set's row: what was expected, what fr-analyze answered, and how it exited."""

    name: str
    """The set's folder name."""
    expected: Answer
    """From the set's NOTE.md."""
    got: Answer | None
    """From the JSON report; None when fr-analyze wrote none."""
    exit_code: int
    """fr-analyze's exit status: 0 ok, 1 another answer, 2 and over an error."""
    error: str = ""
    """The last line fr-analyze wrote on stderr, when it failed."""

    @property
    def failed(self) -> bool:
        """fr-analyze itself failed: a usage or input error, a crash, or no JSON report."""
        return self.got is None or self.exit_code > 1

    @property
    def right(self) -> bool:
        """The answer is the expected one, and the exit status agrees with it."""
        if self.failed or self.got != self.expected:
            return False
        return self.exit_code == (0 if self.got.status == "ok" else 1)

    def row(self) -> list[str]:
        """The set's row of the summary table: name, expected, got, right."""
        if self.got is None or self.exit_code > 1:
            got = f"error (exit {self.exit_code}): {self.error}".rstrip(": ")
            got = got if len(got) <= 60 else got[:59] + "…"
        elif self.got == self.expected and not self.right:
            got = f"{self.got} (exit {self.exit_code})"
        else:
            got = str(self.got)
        return [self.name, str(self.expected), got, "yes" if self.right else "NO"]


def expected_answer(folder: Path) -> Answer:
    """The `EXPECTED:` line of `folder/NOTE.md`: `status=...` and `culprits=...` (`-`: none)."""
    found = _EXPECTED.findall((folder / "NOTE.md").read_text())
    if len(found) != 1:
        raise SystemExit(f"{folder / 'NOTE.md'}: needs exactly one 'EXPECTED:' line")
    fields = dict(item.split("=", 1) for item in found[0].split())
    culprits = fields.get("culprits", "-")
    ranks = () if culprits == "-" else tuple(int(r) for r in culprits.split(","))
    return Answer(fields["status"], ranks)


def answer_of(report: dict[str, Any]) -> Answer:
    """The answer of a JSON report (schema `fr-analyze.report/1`)."""
    verdict = report["verdict"]
    return Answer(str(verdict["status"]), tuple(sorted(int(r) for r in verdict["culprit_ranks"])))


def run_set(folder: Path, expected: Answer, out: Path, fr_analyze: Sequence[str]) -> Outcome:
    """Run fr-analyze on one set; its text report to `out/<set>.txt`, JSON to `out/<set>.json`."""
    text, report = out / f"{folder.name}.txt", out / f"{folder.name}.json"
    report.unlink(missing_ok=True)
    done = subprocess.run(
        [*fr_analyze, "-d", str(folder), "--json", str(report), "--ignore-file-times"],
        capture_output=True,
        text=True,
        check=False,
    )
    text.write_text(done.stdout + done.stderr)
    got = answer_of(json.loads(report.read_text())) if report.exists() else None
    lines = done.stderr.strip().splitlines()
    return Outcome(folder.name, expected, got, done.returncode, lines[-1] if lines else "")


def run_all(
    sets: Sequence[Path], out: Path, fr_analyze: Sequence[str], jobs: int, console: Console
) -> list[Outcome]:
    """Every set, `jobs` at a time, in the order given; progress on `console`."""
    expected = {folder: expected_answer(folder) for folder in sets}
    out.mkdir(parents=True, exist_ok=True)
    columns = (TextColumn("analyzing sample sets"), BarColumn(), MofNCompleteColumn())
    with (
        Progress(*columns, TimeRemainingColumn(), console=console, transient=True) as progress,
        ThreadPoolExecutor(max_workers=jobs) as pool,
    ):
        task = progress.add_task("sets", total=len(sets))

        def one(folder: Path) -> Outcome:
            outcome = run_set(folder, expected[folder], out, fr_analyze)
            progress.advance(task)
            return outcome

        return list(pool.map(one, sets))


def table(outcomes: Sequence[Outcome]) -> str:
    """The closing table: set, expected, got, right."""
    return tabulate(
        [o.row() for o in outcomes], headers=["set", "expected", "got", "right"], tablefmt="simple"
    )


def summary(outcomes: Sequence[Outcome], out: Path) -> str:
    """The closing lines: how many sets got their expected answer, and where the reports are."""
    right = sum(o.right for o in outcomes)
    failed = sum(o.failed for o in outcomes)
    line = f"{right} of {len(outcomes)} sets got their expected answer"
    if failed:
        line += f"; fr-analyze failed on {failed}"
    reports = f"Full reports in {out}/: <set>.txt and <set>.json (make run VERBOSE=1 prints them)."
    return f"{line}.\n{reports}"


def exit_code(outcomes: Sequence[Outcome]) -> int:
    """The exit status: 2 if fr-analyze failed on a set, 1 if a set got another answer, else 0."""
    if any(o.failed for o in outcomes):
        return 2
    return 0 if all(o.right for o in outcomes) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Analyze every sample set (or those named) and compare each answer with its NOTE.md; returns
    the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dumps", type=Path, default=ROOT / "sample_dumps", help="sets folder")
    parser.add_argument("--out", type=Path, default=Path("run-reports"), help="reports folder")
    parser.add_argument("--verbose", action="store_true", help="print every text report too")
    parser.add_argument("--jobs", type=int, default=2, help="sets analyzed at once")
    parser.add_argument("sets", nargs="*", help="only these sets (folder names)")
    args = parser.parse_args(argv)
    folders = sorted(p for p in args.dumps.iterdir() if (p / "NOTE.md").is_file())
    if args.sets:
        folders = [p for p in folders if p.name in args.sets]
        unknown = sorted(set(args.sets) - {p.name for p in folders})
        if unknown:
            parser.error(f"no such sample set: {', '.join(unknown)}")
    fr_analyze = [sys.executable, "-m", "fr_analyzer", "--workers", "1"]
    outcomes = run_all(folders, args.out, fr_analyze, max(1, args.jobs), Console(stderr=True))
    if args.verbose:
        for o in outcomes:
            print(f"=================== {o.name}")
            print((args.out / f"{o.name}.txt").read_text(), end="")
    print(table(outcomes))
    print(summary(outcomes, args.out))
    return exit_code(outcomes)


if __name__ == "__main__":
    sys.exit(main())
