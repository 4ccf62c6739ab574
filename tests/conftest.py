"""Shared fixtures: run the whole pipeline over dumps built in a temporary directory."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from fr_analyzer import Analysis, analyze
from fr_analyzer.pipeline import Options
from tests.builders import write_dumps

Run = Callable[..., Analysis]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """`run({0: dump0, 1: dump1})` writes the dumps and returns the Analysis."""
    counter = iter(range(1_000_000))

    def _run(dumps: Mapping[int, dict[str, Any]], **kwargs: Any) -> Analysis:
        directory = write_dumps(tmp_path / f"dumps{next(counter)}", dumps, **kwargs)
        return analyze(directory, Options(workers=1))

    return _run


@pytest.fixture(autouse=True)
def unwrapped_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal wide enough that no sentence of a report is wrapped, in this process and the
    fr-analyze processes tests start: tests look for whole phrases. The tests of wrapping set
    their own width (or remove this one to get a pipe's 80 columns)."""
    monkeypatch.setenv("COLUMNS", "4000")


@pytest.fixture(autouse=True)
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each test's fr-analyze keeps the ranks it reads in the test's own cache folder, beside
    (not in) its `tmp_path` (the user's home is never written; no test reads another's
    ranks)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/golden/*.txt from the current reports",
    )
