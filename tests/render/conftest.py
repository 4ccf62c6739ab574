"""Fixtures the HTML report's browser tests share: one headless Chromium per module, or a
skip in one line saying what is missing (playwright, or Debian's chromium)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = ("chromium", "chromium-browser", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install -e '.[html-test]'")
    executable = next((p for p in map(shutil.which, CHROMIUM) if p), None)
    if executable is None:
        pytest.skip("chromium is not installed: apt-get install -y chromium")
    with sync_playwright() as p:
        try:
            launched = p.chromium.launch(executable_path=executable)
        except Error as exc:
            pytest.skip(f"chromium at {executable} does not start: {str(exc).splitlines()[0]}")
        yield launched
        launched.close()
