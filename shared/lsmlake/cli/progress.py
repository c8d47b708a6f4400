"""Progress on stderr for people at a terminal (rate and time left), and the summary line every long command prints.

The progress line is drawn only when stderr is a terminal (pipes and logs stay clean) and erased when the work
ends; the summary (`Summary`) is always printed, by the command, on stdout.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType

import pyarrow as pa

ENV_NO_PROGRESS = "LAKE_NO_PROGRESS"
REDRAW_S = 0.1


def _on_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get(ENV_NO_PROGRESS) is None


def duration(seconds: float) -> str:
    """12.3 s, 4m05s, 1h02m."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = int(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def rate(n: float, seconds: float) -> str:
    """Rows per second for people: 1,234/s, 12.3k/s, 4.5M/s."""
    per_s = n / seconds if seconds > 0 else 0.0
    if per_s < 10_000:
        return f"{per_s:,.0f}/s"
    if per_s < 10_000_000:
        return f"{per_s / 1000:,.1f}k/s"
    return f"{per_s / 1_000_000:,.1f}M/s"


class Progress:
    """A one-line progress display of rows on stderr: done/total, a bar, the rate and the time left (ETA)."""

    def __init__(self, what: str, total: int | None) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self.enabled = _on_terminal()
        self.started = time.monotonic()
        self._last = 0.0

    def line(self, now: float) -> str:
        elapsed = now - self.started
        speed = rate(self.done, elapsed)
        if not self.total:
            return f"{self.what} {self.done:,} rows, {speed}, {duration(elapsed)}"
        frac = min(1.0, self.done / self.total)
        left = (elapsed / self.done * (self.total - self.done)) if self.done else None
        eta = f"ETA {duration(left)}" if left is not None else "ETA ?"
        return f"{self.what} [{'#' * int(frac * 30):<30}] {self.done:,}/{self.total:,} rows, {speed}, {eta}"

    def add(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self._last >= REDRAW_S:
            self._last = now
            _draw(self.line(now))

    def close(self) -> None:
        if self.enabled:
            _erase()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


def _draw(text: str) -> None:
    width = 100
    sys.stderr.write("\r" + text[:width].ljust(width))
    sys.stderr.flush()


def _erase() -> None:
    sys.stderr.write("\r" + " " * 100 + "\r")
    sys.stderr.flush()


class Waiting:
    """A progress line for work the command cannot measure (a compaction, a service's answer): what, how long so
    far, and how long it may still take when a deadline is known; redrawn by a thread while the block runs."""

    def __init__(self, what: str, deadline_s: float | None = None) -> None:
        self.what = what
        self.deadline_s = deadline_s
        self.enabled = _on_terminal()
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def line(self, now: float) -> str:
        elapsed = now - self.started
        limit = f" (gives up after {duration(self.deadline_s)})" if self.deadline_s is not None else ""
        return f"{self.what}: {duration(elapsed)}{limit}"

    def _run(self) -> None:
        while not self._stop.wait(REDRAW_S * 5):
            _draw(self.line(time.monotonic()))

    def __enter__(self) -> Waiting:
        if self.enabled:
            _draw(self.line(time.monotonic()))
            self._thread = threading.Thread(target=self._run, name="lake-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            _erase()

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True)
class Summary:
    """The line a long command ends with: what it did, rows, bytes, files and seconds (`lake write`, `compact`,
    `scan --output`)."""

    rows: int
    bytes: int
    files: int
    seconds: float

    def text(self) -> str:
        from lsmlake.cli.records import human_size, plural

        return (f"{plural(self.rows, 'row')}, {human_size(self.bytes)}, {plural(self.files, 'file')}, "
                f"{duration(self.seconds)}")


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
