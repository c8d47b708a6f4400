"""A group commit: the writes that share one snapshot, and how each waits for it.

Every write joins the current group of its table (`TableIngest`); the group's commit wakes them all with the
snapshot id, or with the commit's error. A waiter's deadline shortens how long the group retries a refused
commit, so that the error reaches the waiter before its deadline.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class Group:
    """The writes that will share one commit."""

    done: threading.Event = field(default_factory=threading.Event)
    rows: int = 0
    first_write: float | None = None  # monotonic time of the first write
    snapshot_id: int | None = None
    error: BaseException | None = None
    reply_by: float | None = None  # the earliest deadline (monotonic) of a request waiting for the group
    request_ids: list[str] = field(default_factory=list)  # the client writes (with an id) whose rows it holds
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wait(self, timeout_s: float | None) -> int:
        """The snapshot id once committed; raises the commit's error, or TimeoutError."""
        if timeout_s is not None:
            by = time.monotonic() + timeout_s
            with self._lock:
                self.reply_by = by if self.reply_by is None else min(self.reply_by, by)
        if not self.done.wait(timeout_s):
            raise TimeoutError("the group commit did not finish in time")
        if self.error is not None:
            raise self.error
        assert self.snapshot_id is not None
        return self.snapshot_id
