"""What a reader raises when it does not read a file (or its entries), shared by every reader
of the loader: one exception, `NotDecoded`, whose `reason` (a `Fallback`) every decision is
made on; its words are what a rank records as its fallback, for people.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator

from ...model.dump import Fallback, Writer

MALFORMED_BYTES: tuple[type[Exception], ...] = (
    IndexError,
    UnicodeDecodeError,
    struct.error,
    RecursionError,
)
"""What a reader's own walk raises on malformed bytes (past the end, bad UTF-8, a short
number, nesting too deep)."""


class NotDecoded(Exception):
    """A reader did not read the bytes: why (`reason`), in which writer's layout it found them
    (`writer`, None for none), and the words a report shows."""

    def __init__(self, reason: Fallback, text: str, writer: Writer | None = None) -> None:
        """Why (`reason`), in words (`text`), and in whose layout (`writer`)."""
        super().__init__(text)
        self.reason = reason
        self.text = text
        self.writer = writer

    def __str__(self) -> str:
        """The words a report shows."""
        return self.text

    def within(self, writer: Writer, layout: str) -> NotDecoded:
        """The same reason, found in `writer`'s layout: "`layout`, but <the words>"."""
        return NotDecoded(self.reason, f"{layout}, but {self.text}", writer)


def outside(text: str) -> NotDecoded:
    """The bytes leave the reader's grammar (`text` says where): a slower reader takes them."""
    return NotDecoded(Fallback.OUTSIDE_GRAMMAR, text)


def past_limit(text: str) -> NotDecoded:
    """The bytes pass one of the reader's limits (`text` says which): a slower reader takes
    them."""
    return NotDecoded(Fallback.OUTSIDE_LIMITS, text)


def slower(text: str) -> NotDecoded:
    """Entries that only a slower reader takes (`text` says what): read again, as dicts."""
    return NotDecoded(Fallback.SLOWER_READER_NEEDED, text)


@contextlib.contextmanager
def reading_layout(
    writer: Writer, layout: str, malformed: tuple[type[Exception], ...] = MALFORMED_BYTES
) -> Iterator[None]:
    """Within it, bytes found in `writer`'s `layout`: a `NotDecoded` is said of that layout
    ("`layout`, but <why>"), and one of `malformed` is a MALFORMED `NotDecoded`."""
    try:
        yield
    except NotDecoded as exc:
        raise exc.within(writer, layout) from None
    except malformed as exc:
        raise NotDecoded(
            Fallback.MALFORMED, f"{layout}, but malformed ({type(exc).__name__})", writer
        ) from None
