"""Work the catalog does by itself: announce unrecorded snapshots at start-up, expire snapshots, remove
orphan files, publish the Iceberg metadata a crash left behind and update the tables' health gauges on a
schedule.

Each job is an operation of the catalog (`lsmlake.catalog.operations`), which takes the table's commit lock:
an expiration batch runs under it, so replicas sharing a metadata store take turns and never expire a
snapshot a commit is building on, and lets it go between batches. A failure on one table is logged and the
others go on.
"""

from __future__ import annotations

import logging
import time

from catalog_svc.health_history import HealthHistory
from catalog_svc.metrics import CatalogMetrics
from lsmlake.catalog.expire import PASS_BUDGET_S, ExpirePass
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.runtime.background import BackgroundLoop

_log = logging.getLogger(__name__)

ORPHAN_MIN_AGE_MS = 86_400_000  # a file younger than a day may belong to a commit in progress
TICK_S = 0.5  # how often the thread looks whether a job is due


def reconcile_all(operations: CatalogOperations, metrics: CatalogMetrics) -> int:
    """Record, with their events, the snapshots of every table that have no record yet; how many."""
    total = 0
    for tid in operations.table_ids():
        try:
            total += operations.reconcile(tid)
        except Exception:
            _log.exception("cannot reconcile table %s", tid)
    metrics.reconciled.inc(total)
    return total


class Maintenance:
    """A daemon thread that expires snapshots every `expire_interval_s` (table options decide how many stay),
    removes orphan files every `orphan_interval_s` and announces snapshots written by outside engines every
    `reconcile_interval_s`; an interval of 0 turns that job off. An expiration pass works on each table until
    it is caught up or `expire_budget_s` is spent on it."""

    def __init__(self, operations: CatalogOperations, metrics: CatalogMetrics,
                 expire_interval_s: float, orphan_interval_s: float, reconcile_interval_s: float = 0.0,
                 expire_budget_s: float = PASS_BUDGET_S, health_interval_s: float = 0.0,
                 history: HealthHistory | None = None, iceberg_interval_s: float = 0.0) -> None:
        self.operations = operations
        self.metrics = metrics
        self.expire_interval_s = expire_interval_s
        self.expire_budget_s = expire_budget_s
        self.orphan_interval_s = orphan_interval_s
        self.reconcile_interval_s = reconcile_interval_s
        self.health_interval_s = health_interval_s
        self.iceberg_interval_s = iceberg_interval_s
        self.history = history  # the console's charts, fed with each health update
        self._health_tables: set[str] = set()  # tables with gauges, to drop those of dropped tables
        self._loop = BackgroundLoop("catalog-maintenance", self._step, TICK_S, initial_delay_s=TICK_S,
                                    what="catalog maintenance", logger=_log)
        self._next_expire = self._next_orphans = self._next_reconcile = self._next_health = 0.0
        self._next_iceberg = 0.0

    def start(self) -> Maintenance:
        if (self.expire_interval_s > 0 or self.orphan_interval_s > 0 or self.reconcile_interval_s > 0
                or self.health_interval_s > 0 or self.iceberg_interval_s > 0):
            now = time.monotonic()
            self._next_expire = now + self.expire_interval_s
            self._next_orphans = now + self.orphan_interval_s
            self._next_reconcile = now + self.reconcile_interval_s
            self._loop.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._loop.stop(timeout_s)

    def _step(self) -> None:
        # a job that fails is due again a whole interval later, not at the next tick
        now = time.monotonic()
        if self.reconcile_interval_s > 0 and now >= self._next_reconcile:
            try:
                reconcile_all(self.operations, self.metrics)
            finally:
                self._next_reconcile = time.monotonic() + self.reconcile_interval_s
        if self.expire_interval_s > 0 and now >= self._next_expire:
            try:
                self.expire_once()
            finally:
                self._next_expire = time.monotonic() + self.expire_interval_s
        if self.iceberg_interval_s > 0 and now >= self._next_iceberg:
            try:
                self.publish_iceberg_once()
            finally:
                self._next_iceberg = time.monotonic() + self.iceberg_interval_s
        if self.health_interval_s > 0 and now >= self._next_health:
            try:
                self.update_health()
            finally:
                self._next_health = time.monotonic() + self.health_interval_s
        if self.orphan_interval_s > 0 and now >= self._next_orphans:
            try:
                self.remove_orphans_once()
            finally:
                self._next_orphans = time.monotonic() + self.orphan_interval_s

    def update_health(self) -> int:
        """Set the per-table compaction lag and health gauges (`lsmlake.catalog.health`); how many tables.

        A table that cannot be read keeps its last figures and history, flagged by `lsmlake_table_unreadable`:
        only a table that is gone loses them (an alert must not clear itself when the table breaks)."""
        seen: set[str] = set()
        for tid in self.operations.table_ids():
            if self._loop.is_stopping():
                return len(seen)
            health = self.operations.table_health(tid)
            if health is None:
                continue
            seen.add(tid)
            self.metrics.table_health(health)
            if self.history is not None and health.error is None:
                self.history.add(health)
        for gone in self._health_tables - seen:
            self.metrics.forget_table(gone)
            if self.history is not None:
                self.history.forget(gone)
        self._health_tables = seen
        return len(seen)

    def expire_once(self) -> int:
        """Expire snapshots of every table by its `snapshot.*` options, each until caught up (in batches of
        `snapshot.expire.limit`, within `expire_budget_s`); how many were expired."""
        total = 0
        for tid in self.operations.table_ids():
            if self._loop.is_stopping():
                break
            total += self._expire_table(tid)
        return total

    def _expire_table(self, tid: str) -> int:
        """One pass over one table; how many snapshots it expired (those of batches before a failure too)."""
        expire: ExpirePass | None = None
        failed = False
        try:
            expire = self.operations.expire_pass(tid, self.expire_budget_s, self._loop.is_stopping)
            expire.run()
        except Exception:
            _log.exception("scheduled expiration of %s failed", tid)
            failed = True
        if expire is None:
            return 0
        n = len(expire.result.expired_snapshots)
        self.metrics.expired.inc(n)  # per table, as soon as its pass ends, not after every table
        if n:
            _log.info("expired %d snapshot(s) of %s in %d batch(es)", n, tid, expire.batches)
        if not (expire.caught_up or failed or self._loop.is_stopping()):
            # The pass's bound stopped it: a long backlog, or a table that gains snapshots faster than
            # one pass per interval removes them.
            _log.warning("expiration of %s is not caught up after %d snapshot(s) in %d batch(es); the next "
                         "pass goes on", tid, n, expire.batches)
        return n

    def publish_iceberg_once(self) -> int:
        """Publish what the Iceberg metadata of the tables with `metadata.iceberg.storage` misses (a crash between a
        commit and its publication); how many snapshots were published."""
        total = 0
        for tid in self.operations.table_ids():
            if self._loop.is_stopping():
                break
            try:
                published = self.operations.catch_up_iceberg(tid)
            except Exception:
                _log.exception("publishing the Iceberg metadata of %s failed", tid)
                continue
            if published is not None and published.published:
                _log.info("published the Iceberg metadata of %s up to snapshot %d (%d snapshot(s) behind)", tid,
                          published.snapshot_id, published.published)
                total += published.published
        return total

    def remove_orphans_once(self) -> int:
        """Delete files older than a day that no snapshot or tag of their table references; how many."""
        total = 0
        for tid in self.operations.table_ids():
            if self._loop.is_stopping():
                break
            try:
                result = self.operations.remove_orphan_files(tid, ORPHAN_MIN_AGE_MS)
            except Exception:
                _log.exception("scheduled orphan cleanup of %s failed", tid)
                continue
            total += len(result.deleted)
        self.metrics.orphans.inc(total)
        return total
