"""What the compactor's threads share (the planning thread, the event feed and the RPC threads), under one lock.

`CompactorState` owns that lock. It is a condition: a waited trigger waits on it for the outcomes of its
buckets, and the end of a plan wakes it. The bucket states (`buckets.Buckets`) are kept under it, and so are
the plan running now, the plan counts, whether plans others left are to be recovered, and how this compactor
made its recent plans.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from compactor_svc.waits import BucketKey

MAX_ORIGINS = 1000


@dataclass(frozen=True)
class PlanOrigin:
    """How this compactor made a plan: what the outcomes of its buckets settle."""

    snapshot_id: int  # the snapshot its units were planned on
    full: dict[BucketKey, bool]  # per bucket: planned as a full compaction
    task_full: dict[BucketKey, bool]  # per bucket: `full or unit.file_rewrite`, as its task runs


@dataclass
class RunningPlan:
    table_id: str
    plan_id: str
    buckets: int
    full: bool
    started: float
    keys: tuple[BucketKey, ...]


class CompactorState:
    """The compactor's shared state; `lock` guards it and the bucket states."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.running: RunningPlan | None = None
        self.completed = 0
        self.failed = 0
        self._recover = False
        self._origins: dict[str, PlanOrigin] = {}  # plan id -> how this compactor made it (for requeued plans)

    def origin(self, plan_id: str, made: PlanOrigin | None) -> PlanOrigin | None:
        """Record how this compactor `made` a plan and return it; for None (a plan found on the timeline) the
        origin recorded when this compactor made it, if it did (the oldest are forgotten past `MAX_ORIGINS`)."""
        with self.lock:
            if made is None:
                return self._origins.get(plan_id)
            self._origins[plan_id] = made
            while len(self._origins) > MAX_ORIGINS:
                del self._origins[next(iter(self._origins))]
            return made

    def plan_started(self, running: RunningPlan) -> None:
        with self.lock:
            self.running = running

    def plan_ended(self) -> None:
        """No plan runs any more: wakes the waited triggers to look at their buckets."""
        with self.lock:
            self.running = None
            self.lock.notify_all()

    def count_completed(self) -> None:
        with self.lock:
            self.completed += 1

    def count_failed(self) -> None:
        with self.lock:
            self.failed += 1

    def ask_recovery(self) -> None:
        """Have the next round recover the plans other owners left (or that a lost reply left REQUESTED)."""
        with self.lock:
            self._recover = True

    def take_recovery(self) -> bool:
        """Whether a recovery was asked for since the last call."""
        with self.lock:
            asked, self._recover = self._recover, False
            return asked
