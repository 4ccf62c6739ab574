"""How the process treats its memory while the big tables are built and written: the cycle
collector paused, and numpy's request for huge pages off. Used by the loader, the pipeline
and the database writers alike."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import numpy as np


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off for a while (and back on after, if it was). A dump is ~100k small
    containers, and a loaded job millions of objects that hold no cycles and live until the end;
    each collector pass would walk all of them again. Reference counting frees the rest."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """numpy's large arrays allocated without its request for huge pages, for a while.

    numpy asks the kernel for 2 MiB pages for each array of 4 MiB or more. Where the kernel
    answers that request by compacting memory at the first write (transparent huge pages'
    `defrag` set to `madvise`, as many distributions have it), and memory is full of page
    cache (as it is once the dumps are read), each fresh array stalls on its first pages, and
    filling the table a rank at a time and the stages after loading spend much of their CPU
    so (the figures: benchmarks/README.md, "Measured in the code")."""
    if _HUGE_PAGES is None:  # not in this numpy: nothing to turn off
        yield
        return
    before = _HUGE_PAGES(False)
    try:
        yield
    finally:
        _HUGE_PAGES(before)


_HUGE_PAGES = getattr(
    getattr(getattr(np, "_core", None) or getattr(np, "core", None), "multiarray", None),
    "_set_madvise_hugepage",
    None,
)
