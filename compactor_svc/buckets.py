"""The owned buckets the compactor knows of: what each waits for, which are *dirty* (to be looked at), and
the waited triggers that learn of their outcomes; all under the compactor's one lock (`state.CompactorState`),
which the planning thread, the event feed and the RPC threads share.

A full trigger records that the bucket owes a full compaction (as of the table's snapshot when the trigger
arrived), which survives refused plans, failures and retries until a full unit planned at or after that
snapshot commits (or the bucket fails `MAX_ATTEMPTS` times in a row). A waited trigger
(`waits.CompactionWait`) learns of each named bucket's outcome here, so it ends exactly when its buckets
are settled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.waits import OWNERSHIP_MOVED, BucketKey, CompactionWait
from lsmlake.mergetree.compact.force_up_level0 import TriggerCount
from lsmlake.table.scan import Split

_log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
FAILURE_BACKOFF_S = 5.0


@dataclass
class BucketState:
    commits_since_full: int = 0
    last_full: float = field(default_factory=time.monotonic)
    last_snapshot: int = 0
    retry_after: float = 0.0  # after a failed run, wait before trying the bucket again
    full_owed_at: int = -1  # a trigger asked for a full compaction at this snapshot (-1: none owed)
    failures: int = 0  # failed attempts in a row
    note: str = "queued"  # what the bucket waits for now (a timed-out trigger reports it)
    # lookup-compact=gentle: compaction triggers that found nothing due since level 0 last moved up
    lookup_triggers: TriggerCount = field(default_factory=TriggerCount)
    # dirty again only because a look did not go through (held files, a spent budget, a failure): the next look
    # repeats it, and is no compaction trigger of its own
    retrying: bool = False


def sorted_runs(split: Split) -> tuple[int, int]:
    """(sorted runs, level-0 files) of a bucket."""
    levels = [f.level for f in split.files]
    l0 = levels.count(0)
    return l0 + len({lv for lv in levels if lv > 0}), l0


class Buckets:
    """The states of owned buckets, the dirty ones and the waited triggers; `lock` (the compactor's) guards them."""

    def __init__(self, ownership: Ownership, metrics: CompactorMetrics, lock: threading.Condition) -> None:
        self.ownership = ownership
        self.metrics = metrics
        self.lock = lock
        self._dirty: set[BucketKey] = set()
        self._states: dict[BucketKey, BucketState] = {}
        self._waits: list[CompactionWait] = []

    def state(self, key: BucketKey) -> BucketState:
        b = self._states.get(key)
        if b is None:
            b = self._states[key] = BucketState()
        return b

    def pending(self) -> int:
        return len(self._dirty)

    # -- what marks buckets dirty ----------------------------------------------------------------------

    def on_event(self, key: BucketKey, snapshot_id: int, compaction: bool) -> None:
        """A data-files or compaction-results event of an owned bucket."""
        with self.lock:
            b = self.state(key)
            if snapshot_id > b.last_snapshot:  # replays and duplicates count once
                b.last_snapshot = snapshot_id
                if not compaction:
                    b.commits_since_full += 1
            b.retrying = False
            self._dirty.add(key)
            self.metrics.pending_buckets.set(len(self._dirty))

    def forget_lost(self) -> None:
        """Forget the buckets no longer owned; the triggers waiting for them learn that they moved."""
        with self.lock:
            self._dirty = {k for k in self._dirty if self.ownership.owns(*k)}
            for key in [k for k in self._states if not self.ownership.owns(*k)]:
                del self._states[key]
            for w in self._waits:
                for key in [k for k in w.pending if not self.ownership.owns(*k)]:
                    w.fail(key, OWNERSHIP_MOVED)
            self.lock.notify_all()

    def queue(self, w: CompactionWait, wait: bool) -> None:
        """Mark the buckets a trigger queued dirty, at once (no pause after failures), owing a full compaction
        for a full trigger; with `wait`, `w` learns of their outcomes until `wait` returns."""
        with self.lock:
            for key in w.queued:
                b = self.state(key)
                b.retry_after, b.failures, b.retrying = 0.0, 0, False
                if w.full:
                    b.full_owed_at = max(b.full_owed_at, w.since)
                self._dirty.add(key)
            if wait and w.queued:
                self._waits.append(w)
            self.metrics.pending_buckets.set(len(self._dirty))

    def mark(self, table_id: str, splits: Iterable[Split]) -> int:
        """Mark the owned buckets of `splits` with more than one sorted run (or any level-0 file) dirty; how many
        were not dirty yet."""
        marked = 0
        with self.lock:
            for s in splits:
                key = (table_id, s.partition, s.bucket)
                runs, l0 = sorted_runs(s)
                if (runs > 1 or l0 > 0) and self.ownership.owns(*key) and key not in self._dirty:
                    self.state(key).retrying = False
                    self._dirty.add(key)
                    marked += 1
        return marked

    def retain_tables(self, tables: Collection[str]) -> None:
        """Forget the buckets of tables not in `tables` (dropped), unless dirty: a table created again under a
        dropped one's name starts afresh (no owed full compaction, no gentle count)."""
        with self.lock:
            for key in [k for k in self._states if k[0] not in tables and k not in self._dirty]:
                del self._states[key]

    def wait(self, w: CompactionWait, timeout_s: float) -> None:
        """Wait until every bucket of `w` is settled or failed, at most `timeout_s`; the rest time out."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            try:
                while w.pending:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.lock.wait(min(left, 1.0))
                if w.pending:
                    w.timed_out = True
                    for key in list(w.pending):
                        b = self._states.get(key)
                        w.fail(key, f"timed out after {timeout_s:.1f} s: {b.note if b else 'queued'}")
            finally:
                if w in self._waits:
                    self._waits.remove(w)

    # -- the planning thread's round -------------------------------------------------------------------

    def take_ready(self) -> list[BucketKey]:
        """The dirty buckets whose pause (after a failure) is over, no longer dirty: being planned now."""
        with self.lock:
            now = time.monotonic()
            ready = [k for k in self._dirty if self.state(k).retry_after <= now]
            self._dirty.difference_update(ready)
            for k in ready:
                self.state(k).note = "being planned"
            self.metrics.pending_buckets.set(len(self._dirty))
        return ready

    def is_retry(self, key: BucketKey) -> bool:
        """Whether this look at `key` only repeats one that did not go through (see `BucketState.retrying`)."""
        with self.lock:
            b = self.state(key)
            retry, b.retrying = b.retrying, False
            return retry

    def count_trigger(self, key: BucketKey, triggers: TriggerCount) -> None:
        """A look at `key` was a compaction trigger (its plan was sent, or nothing was due): keep its gentle count."""
        with self.lock:
            b = self._states.get(key)
            if b is not None:
                b.lookup_triggers = TriggerCount(triggers.count)

    def round_done(self) -> bool:
        """Tell the waiting triggers to look; whether a dirty bucket is ready for another round now."""
        with self.lock:
            now = time.monotonic()
            ready = any(self.state(k).retry_after <= now for k in self._dirty)
            self.lock.notify_all()
        return ready

    def note(self, keys: Iterable[BucketKey], text: str) -> None:
        with self.lock:
            for k in keys:
                self.state(k).note = text

    def full_done(self, key: BucketKey, at: float) -> None:
        """A full compaction of `key` ran: the trigger schedule (`triggers.py`) counts from `at` again."""
        with self.lock:
            b = self.state(key)
            b.commits_since_full, b.last_full = 0, at

    # -- outcomes of buckets ---------------------------------------------------------------------------

    def settle(self, key: BucketKey, planned_at: int, full: bool, plan_id: str, snapshot_id: int) -> None:
        """A look at `key` planned at snapshot `planned_at` ended well: its unit committed, or none was due."""
        with self.lock:
            b = self.state(key)
            b.failures = 0
            if full and 0 <= b.full_owed_at <= planned_at:
                b.full_owed_at = -1
            if b.full_owed_at >= 0:  # a newer full trigger arrived while this plan was made
                self._dirty.add(key)
            b.note = "queued"
            for w in self._waits:
                w.settle(key, planned_at, full, plan_id, snapshot_id)
            self.lock.notify_all()

    def attempt_failed(self, key: BucketKey, reason: str) -> None:
        """An attempt at `key` failed: try again after a pause, or after `MAX_ATTEMPTS` in a row give up.

        Giving up fails the waiting triggers and drops an owed full compaction; the bucket is then looked
        at again on its next event or reconciliation, not in a loop.
        """
        with self.lock:
            b = self.state(key)
            b.failures += 1
            if b.failures < MAX_ATTEMPTS:
                b.note = f"attempt {b.failures} failed ({reason}); trying again"
                if self.ownership.owns(*key):
                    b.retry_after, b.retrying = time.monotonic() + FAILURE_BACKOFF_S, True
                    self._dirty.add(key)
                return
            _log.warning("bucket %d of %s failed %d times in a row: %s", key[2], key[0], b.failures, reason)
            b.failures, b.full_owed_at, b.note = 0, -1, f"failed: {reason}"
            for w in self._waits:
                w.fail(key, f"plan failed {MAX_ATTEMPTS} times: {reason}")
            self.lock.notify_all()

    def redo(self, keys: Sequence[BucketKey], backoff_s: float, note: str, looked: bool = True) -> None:
        """Look at the buckets again after `backoff_s` (not a failure of theirs: a plan did not start, ...).

        `looked`: they were looked at, so the next look is a retry; else (a round ran out of time before them)
        the next look is the one they were waiting for.
        """
        now = time.monotonic()
        with self.lock:
            for k in keys:
                if self.ownership.owns(*k):
                    b = self.state(k)
                    b.retry_after, b.note = now + backoff_s, note
                    b.retrying = b.retrying or looked
                    self._dirty.add(k)

    def fail_waits(self, key: BucketKey, reason: str) -> None:
        with self.lock:
            for w in self._waits:
                w.fail(key, reason)
            self.lock.notify_all()
