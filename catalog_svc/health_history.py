"""The last hour of each table's health, sampled by the catalog's maintenance thread, for the console's charts."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from lsmlake.catalog.health import TableHealth

KEEP_MS = 3_600_000


@dataclass(frozen=True)
class Sample:
    """One table at one moment."""

    time_ms: int
    lag_s: float  # how long a due compaction had waited (0: nothing due)
    level0_files: int
    plans: int  # REQUESTED + INFLIGHT
    score: int
    severity: str = "good"  # the score's band: good, warning or bad (`lsmlake.catalog.health_score.band`)
    due_buckets: int = 0  # buckets with a compaction due


class HealthHistory:
    """Per table, the samples of the last hour (thread-safe: the maintenance thread adds, pages read)."""

    def __init__(self, keep_ms: int = KEEP_MS) -> None:
        self.keep_ms = keep_ms
        self._lock = threading.Lock()
        self._samples: dict[str, deque[Sample]] = {}

    def add(self, h: TableHealth) -> None:
        s = Sample(h.now_ms, h.lag_ms / 1000, h.level0_files, h.pending_plans + h.inflight_plans, h.score,
                   h.severity, h.due_buckets)
        with self._lock:
            q = self._samples.setdefault(h.table, deque())
            q.append(s)
            while q and q[0].time_ms < s.time_ms - self.keep_ms:
                q.popleft()

    def of(self, table: str) -> list[Sample]:
        with self._lock:
            return list(self._samples.get(table, ()))

    def forget(self, table: str) -> None:
        with self._lock:
            self._samples.pop(table, None)
