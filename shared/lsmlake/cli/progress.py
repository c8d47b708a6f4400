"""Progress on stderr while rows stream, for people at a terminal only."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator

import pyarrow as pa


class Progress:
    """A one-line progress display on stderr, only when stderr is a terminal (pipes and logs stay clean)."""

    def __init__(self, what: str, total: int | None) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self.enabled = sys.stderr.isatty() and os.environ.get("LAKE_NO_PROGRESS") is None
        self._last = 0.0

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self._last >= 0.1:
            self._last = now
            if self.total:
                frac = min(1.0, self.done / self.total)
                bar = "#" * int(frac * 30)
                sys.stderr.write(f"\r{self.what} [{bar:<30}] {self.done:,}/{self.total:,} rows")
            else:
                sys.stderr.write(f"\r{self.what} {self.done:,} rows")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 78 + "\r")
            sys.stderr.flush()


def with_progress(tables: Iterable[pa.Table], progress: Progress) -> Iterator[pa.Table]:
    try:
        for t in tables:
            progress.add(t.num_rows)
            yield t
    finally:
        progress.close()


def limited(tables: Iterable[pa.Table], limit: int | None) -> Iterator[pa.Table]:
    """The first `limit` rows of the batches (all of them when None)."""
    if limit is None:
        yield from tables
        return
    left = limit
    if left <= 0:
        return
    for t in tables:
        if t.num_rows >= left:
            yield t.slice(0, left)
            return
        left -= t.num_rows
        yield t
