"""HTML report benchmark: how long `render_html` takes, how big the page is, and how long
headless Chromium takes to draw it, for one dump set (issue 34: at 16,384 ranks at most 10 MB
and drawn in under 5 s).

The analysis runs once in this process (its time is printed, not judged); then `render_html`
is timed, the page written, and Chromium (Debian's `chromium`, driven by playwright) opens it
`--repeat` times in fresh pages: the time is from navigation start to the first frame painted
after the page's script has drawn everything. `--screenshot PNG` saves the page from its top
to the end of the rank picture (the answer and every rank).

Usage: `python -m benchmarks.html_bench DIR [--out report.html] [--screenshot shot.png]
[--repeat 3]`; generate DIR with `python -m benchmarks.gen --ranks 16384 --fault not_joined`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

from fr_analyzer import analyze
from fr_analyzer.render.report_html import render_html

PAINTED = (
    "new Promise(r => requestAnimationFrame(() => requestAnimationFrame("
    "() => r(performance.now()))))"
)
"""Milliseconds from navigation start to the second animation frame: the page is painted."""


class Clip(TypedDict):
    """A screenshot's rectangle, in CSS pixels (playwright's `Clip`)."""

    x: float
    y: float
    width: float
    height: float


def top_to_picture(page: Any) -> Clip:
    """The page from its top to the end of the rank picture: the answer and every rank."""
    bottom = page.evaluate("document.getElementById('picture').getBoundingClientRect().bottom")
    return {"x": 0, "y": 0, "width": 1320, "height": bottom + 8}


def browser_times(page_path: Path, repeat: int, screenshot: Path | None) -> list[float]:
    """Seconds from navigation start until the drawn page is painted, once per fresh page."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or "/usr/bin/chromium"
    times: list[float] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable)
        for i in range(repeat):
            page = browser.new_page(viewport={"width": 1320, "height": 1000})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_path.resolve().as_uri(), timeout=120_000)
            page.wait_for_selector("body[data-rendered=yes]", timeout=120_000)
            times.append(page.evaluate(PAINTED) / 1000)
            if errors:
                raise SystemExit(f"the page failed: {errors[0]}")
            if i == 0 and screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True, clip=top_to_picture(page))
            page.close()
        browser.close()
    return times


def main(argv: list[str] | None = None) -> int:
    """Time `render_html` and Chromium's drawing of one dump set's page; print it as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "dumps", type=Path, help="a dump folder (e.g. /tmp/frb/16384-not_joined/dumps)"
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results/report.html"))
    parser.add_argument("--screenshot", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    analysis = analyze(args.dumps)
    analyzed = time.perf_counter() - started
    started = time.perf_counter()
    page = render_html(analysis)
    rendered = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page, encoding="utf-8")
    size = args.out.stat().st_size
    drawn = browser_times(args.out, args.repeat, args.screenshot)
    result: dict[str, Any] = {
        "dumps": str(args.dumps),
        "ranks": len(analysis.summary.ranks_loaded),
        "analysis_s": round(analyzed, 2),
        "render_html_s": round(rendered, 3),
        "file_bytes": size,
        "chromium_drawn_s": [round(t, 3) for t in drawn],
        "verdict": analysis.conclusion.answer[:160],
    }
    print(json.dumps(result, indent=2))
    ok = size <= 10_000_000 and max(drawn) < 5.0
    print("within target (<= 10 MB, < 5 s)" if ok else "OVER TARGET", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
