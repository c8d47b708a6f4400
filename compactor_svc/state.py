"""What the compactor's threads share (the planning thread, the event feed and the RPC threads), under one lock.

`CompactorState` owns that lock. It is a condition: a waited trigger waits on it for the outcomes of its
buckets, and the end of a plan wakes it. The bucket states (`buckets.Buckets`) are kept under it, and so are
the plans launched and running now (several run at once, each with its deadline and heartbeat), the plan counts,
whether plans others left are to be recovered, and how this compactor made its recent plans.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

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
    """A plan running on Spark: its deadline (seconds after `started`) and its heartbeat (tasks finishing)."""

    table_id: str
    plan_id: str
    buckets: int
    full: bool
    started: float
    keys: tuple[BucketKey, ...]
    deadline_s: float | None = None
    tasks_done: int = 0
    tasks_active: int = 0
    tasks_total: int = 0
    last_beat: float = field(default=0.0)  # monotonic time of the last progress (the start before any)

    def __post_init__(self) -> None:
        self.last_beat = self.last_beat or self.started


class CompactorState:
    """The compactor's shared state; `lock` guards it and the bucket states."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self._running: dict[str, RunningPlan] = {}  # plan id -> the plan running now
        self._launched: set[str] = set()  # plan ids handed to a plan slot and not ended yet (queued or running)
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

    @property
    def running(self) -> list[RunningPlan]:
        """The plans running now, oldest first."""
        with self.lock:
            return sorted(self._running.values(), key=lambda r: r.started)

    def launched(self, plan_id: str) -> bool:
        """Record that a plan is handed to a plan slot; False when it already was (so it is not run twice)."""
        with self.lock:
            if plan_id in self._launched:
                return False
            self._launched.add(plan_id)
            return True

    def is_launched(self, plan_id: str) -> bool:
        with self.lock:
            return plan_id in self._launched

    def launched_count(self) -> int:
        with self.lock:
            return len(self._launched)

    def plan_started(self, running: RunningPlan) -> None:
        with self.lock:
            self._launched.add(running.plan_id)
            self._running[running.plan_id] = running

    def heartbeat(self, plan_id: str, done: int, active: int, total: int) -> int:
        """A running plan's tasks progressed: how many more finished since the last beat."""
        with self.lock:
            r = self._running.get(plan_id)
            if r is None:
                return 0
            more = max(0, done - r.tasks_done)
            if more or total != r.tasks_total:
                r.last_beat = time.monotonic()
            r.tasks_done, r.tasks_active, r.tasks_total = max(done, r.tasks_done), active, total
            return more

    def tasks_running(self) -> int:
        """The Spark tasks of running plans that run now."""
        with self.lock:
            return sum(r.tasks_active for r in self._running.values())

    def plan_ended(self, plan_id: str | None = None) -> None:
        """A plan ended (or was never started): wakes the waited triggers to look at their buckets."""
        with self.lock:
            if plan_id is not None:
                self._running.pop(plan_id, None)
                self._launched.discard(plan_id)
            self.lock.notify_all()

    def oldest_age(self) -> float:
        """Seconds since the oldest running plan started (0: none runs)."""
        with self.lock:
            return max((time.monotonic() - r.started for r in self._running.values()), default=0.0)

    def heartbeat_age(self) -> float:
        """Seconds since a running plan last progressed, the longest of them (0: none runs)."""
        with self.lock:
            return max((time.monotonic() - r.last_beat for r in self._running.values()), default=0.0)

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
