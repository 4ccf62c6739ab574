"""A command line that never silently does the wrong thing: each misuse is one line on stderr,
exit 2, and nothing written (issue 34, part 7)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from fr_analyzer import cli
from tests.builders import make_dump, make_entry

GROUPS = {
    "0": ("default_pg", [0, 1]),
    "1": ("mesh_tp", [0, 1]),
    "2": ("mesh_dp", [0, 1]),
}


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FORCE_COLOR", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def dumps(tmp_path: Path) -> Path:
    d = tmp_path / "dumps"
    d.mkdir()
    for rank in (0, 1):
        entries = [
            make_entry("all_reduce", s, record_id=s, group=("0", "default_pg")) for s in (1, 2)
        ]
        (d / f"rank_{rank}").write_bytes(pickle.dumps(make_dump(entries, GROUPS)))
    return d


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory: where a misuse must leave nothing."""
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    return here


def misuse(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run `fr-analyze *args`; it must exit 2 with one error line and its hint line on stderr
    and nothing on stdout. Returns the error line."""
    capsys.readouterr()
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == ""
    assert len(err.splitlines()) == 2 and err.splitlines()[1].startswith("hint: "), err
    return err.splitlines()[0]


def test_a_misspelt_command_is_refused_with_the_closest_one(
    capsys: pytest.CaptureFixture[str], dumps: Path, workdir: Path
) -> None:
    """GIVEN `timline` (a typo of `timeline`) WHEN run THEN no analysis and no tl.json."""
    line = misuse(capsys, "timline", "-d", str(dumps), "-o", "tl.json")
    assert (
        line == "fr-analyze: error: no such command or directory 'timline' (did you mean timeline?)"
    )
    assert list(workdir.iterdir()) == []


def test_a_word_like_no_command_is_refused_without_a_guess(
    capsys: pytest.CaptureFixture[str], workdir: Path
) -> None:
    line = misuse(capsys, "zzz")
    assert line == "fr-analyze: error: no such command or directory 'zzz'"


def test_a_positional_directory_and_d_together_are_refused(
    capsys: pytest.CaptureFixture[str], dumps: Path, tmp_path: Path, workdir: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    line = misuse(capsys, str(elsewhere), "-d", str(dumps))
    assert line == (
        f"fr-analyze: error: a dump directory given twice: '{elsewhere}' as an argument and "
        f"-d '{dumps}': give one (to compare snapshots, repeat -d)"
    )
    assert misuse(capsys, "-d", str(dumps), str(elsewhere)) == line


def test_timeline_with_both_a_directory_and_d_is_refused(
    capsys: pytest.CaptureFixture[str], dumps: Path, workdir: Path
) -> None:
    line = misuse(capsys, "timeline", str(dumps), "-d", str(dumps), "-o", "tl.json")
    assert line.startswith("fr-analyze: error: timeline: a dump directory given twice")
    assert misuse(capsys, "timeline", "-o", "tl.json") == (
        "fr-analyze: error: timeline: missing the dump directory (DIR or -d DIR)"
    )
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "hint"),
    [("report.json", "--json report.json"), ("report.html", "--html report.html")],
)
def test_o_with_a_report_name_is_refused_with_a_hint(
    capsys: pytest.CaptureFixture[str], dumps: Path, workdir: Path, name: str, hint: str
) -> None:
    line = misuse(capsys, str(dumps), "-o", name)
    what = "JSON" if name.endswith(".json") else "HTML"
    assert line == (
        f"fr-analyze: error: -o {name}: -o writes the database (.pkl, .sqlite, .parquet); "
        f"for the {what} report use {hint}"
    )
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("option", ["-o", "--json", "--html"])
def test_an_output_in_a_missing_folder_is_refused_before_the_analysis(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    dumps: Path,
    workdir: Path,
    option: str,
) -> None:
    from fr_analyzer import pipeline

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the analysis ran")

    monkeypatch.setattr(pipeline, "analyze", never)
    line = misuse(capsys, str(dumps), option, "no/such/out.x")
    assert line == "fr-analyze: error: no/such/out.x: cannot write: no such directory no/such"


def test_timeline_output_is_checked_before_the_analysis(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    dumps: Path,
    workdir: Path,
) -> None:
    from fr_analyzer import pipeline

    monkeypatch.setattr(pipeline, "analyze", None)
    line = misuse(capsys, "timeline", str(dumps), "-o", "no/such/tl.json")
    assert line == "fr-analyze: error: no/such/tl.json: cannot write: no such directory no/such"


def test_two_outputs_to_one_file_are_refused(
    capsys: pytest.CaptureFixture[str], dumps: Path, workdir: Path
) -> None:
    line = misuse(capsys, str(dumps), "--json", "same", "-o", "same")
    assert line == "fr-analyze: error: same and same: two outputs to one file"
    line = misuse(capsys, str(dumps), "--json", "-", "-o", "-")
    assert line == "fr-analyze: error: only one output can go to standard output (-)"


def test_pg_filters_that_match_nothing_list_the_groups(
    capsys: pytest.CaptureFixture[str], dumps: Path
) -> None:
    line = misuse(capsys, str(dumps), "-j", "--pg-filters", "tp")
    assert line == (
        "fr-analyze: error: --pg-filters tp: no process group has that name or description; "
        "the job's groups are 0 (default_pg), 1 (mesh_tp), 2 (mesh_dp); descriptions: "
        "default_pg, mesh_dp, mesh_tp"
    )


def test_pg_filters_name_at_most_a_dozen_groups() -> None:
    from fr_analyzer.errors import UsageError
    from fr_analyzer.model.groups import GroupTable
    from fr_analyzer.model.records import Group, MembershipSource
    from fr_analyzer.render.entries_view import GROUPS_NAMED, _filtered

    many = tuple(Group(i, str(i), "mesh_dp", (i,), MembershipSource.PG_CONFIG) for i in range(1000))
    table = GroupTable(many, None, (), (), 1000, (), None)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as caught:
        _filtered(table, ["tp"])
    text = str(caught.value)
    assert text.count("(mesh_dp)") == GROUPS_NAMED
    assert f"... ({1000 - GROUPS_NAMED} more)" in text and len(text) < 400


def test_j_with_outputs_is_refused(capsys: pytest.CaptureFixture[str], dumps: Path) -> None:
    line = misuse(capsys, str(dumps), "-j", "--json", "r.json")
    assert (
        line == "fr-analyze: error: -j prints the entries only: -o, --json and --html go without -j"
    )


def test_entries_options_without_j_are_refused(
    capsys: pytest.CaptureFixture[str], dumps: Path
) -> None:
    line = misuse(capsys, str(dumps), "--last", "3")
    assert line.endswith("go with -j")
