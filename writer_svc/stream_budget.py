"""Memory bounds of `Write` streams: messages and bytes per stream, and bytes buffered by all streams at once.

A `Write` stream is read whole before its rows are decoded, so its bytes sit in the writer's memory
until the request ends. Three limits keep that memory bounded:

- at most `max_messages` chunk messages per stream (each received message costs CPU and a Python object
  while it is read, whatever its size);
- at most `max_bytes` bytes per stream;
- at most the `StreamBudget`'s limit of bytes for all streams of the process at once. Each chunk reserves
  its size before it is kept; a chunk that would pass the limit ends its stream with RESOURCE_EXHAUSTED at
  once (the writer never waits for room while holding a worker thread). A stream releases all it reserved
  when it ends, however it ends (reply, refusal, cancellation, deadline).

The chunks are appended into one growing `bytearray`, so a stream holds its bytes once, not a Python
object per chunk plus a joined copy.
"""

from __future__ import annotations

import argparse
import threading
from types import TracebackType

from lsmlake.errors import BackPressureError

DEFAULT_MAX_MESSAGES = 100_000  # 256 MiB takes chunks of 2.7 KiB or more; the client sends 4 MiB chunks
DEFAULT_BUDGET_BYTES = 1 << 30  # four streams of the 256 MiB per-stream limit at once


def positive_int(text: str) -> int:
    """argparse type of a limit: an integer above 0."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


class StreamBudget:
    """Bytes that the `Write` streams of one process may buffer at once."""

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError(f"the stream budget must be positive, not {limit}")
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def in_use(self) -> int:
        """Bytes reserved by the streams being read now."""
        with self._lock:
            return self._used

    def reserve(self, n: int) -> None:
        """Take `n` bytes of the budget; BackPressureError (RESOURCE_EXHAUSTED), taking nothing, when they
        would pass the limit."""
        with self._lock:
            used = self._used
            if used + n > self.limit:
                raise BackPressureError(
                    f"the writer is buffering {used} bytes of Write streams and a chunk of {n} bytes would pass "
                    f"its limit of {self.limit} bytes for all streams at once (--max-buffered-write-bytes); "
                    "retry later or send smaller requests")
            self._used = used + n

    def release(self, n: int) -> None:
        with self._lock:
            assert 0 <= n <= self._used, (n, self._used)
            self._used -= n


class StreamBuffer:
    """The bytes of one `Write` stream, checked against the limits as each chunk arrives; a context manager
    that releases the stream's reservation on exit."""

    def __init__(self, budget: StreamBudget, max_bytes: int, max_messages: int) -> None:
        self.budget = budget
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self.data = bytearray()
        self.messages = 0
        self._reserved = 0

    def add(self, chunk: bytes) -> None:
        """Append one chunk; BackPressureError (RESOURCE_EXHAUSTED) naming the limit it would pass."""
        self.messages += 1
        if self.messages > self.max_messages:
            raise BackPressureError(
                f"the Write stream has more than {self.max_messages} messages, the writer's limit per stream "
                "(--max-write-messages); send the Arrow IPC bytes in larger chunks or split them into several "
                "requests")
        n = len(chunk)
        if len(self.data) + n > self.max_bytes:
            raise BackPressureError(f"the Write stream is larger than {self.max_bytes} bytes; "
                                    "split it into several requests")
        self.budget.reserve(n)
        self._reserved += n
        self.data += chunk

    def __len__(self) -> int:
        return len(self.data)

    def __enter__(self) -> StreamBuffer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        reserved, self._reserved = self._reserved, 0
        self.budget.release(reserved)
