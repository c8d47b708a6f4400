"""Work the catalog does by itself: announce unrecorded snapshots at start-up, expire snapshots and remove
orphan files on a schedule.

Each table is handled under its commit lock, so replicas sharing a metadata store take turns and never
expire a snapshot a commit is building on. A failure on one table is logged and the others go on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from ..catalog import FileSystemCatalog
from ..expire import expire_snapshots, remove_orphan_files
from ..metastore import MetaStore
from .metrics import CatalogMetrics
from .reconcile import reconcile_table

_log = logging.getLogger(__name__)

ORPHAN_MIN_AGE_MS = 86_400_000  # a file younger than a day may belong to a commit in progress


def table_ids(catalog: FileSystemCatalog) -> Iterator[str]:
    for db in catalog.list_databases():
        for t in catalog.list_tables(db):
            yield f"{db}.{t}"


def reconcile_all(catalog: FileSystemCatalog, store: MetaStore, metrics: CatalogMetrics) -> int:
    """Record, with their events, the snapshots of every table that have no record yet; how many."""
    total = 0
    for tid in table_ids(catalog):
        try:
            latest = catalog.get_table(tid).snapshots.latest_id()
            if latest is None or (store.last_recorded_snapshot(tid) or 0) >= latest:
                continue  # nothing to do: no lock taken
            with store.commit_lock(tid):
                total += len(reconcile_table(store, catalog.get_table(tid), tid))
        except Exception:
            _log.exception("cannot reconcile table %s", tid)
    metrics.reconciled.inc(total)
    return total


class Maintenance:
    """A daemon thread that expires snapshots every `expire_interval_s` (table options decide how many stay),
    removes orphan files every `orphan_interval_s` and announces snapshots written by outside engines every
    `reconcile_interval_s`; an interval of 0 turns that job off."""

    def __init__(self, catalog: FileSystemCatalog, store: MetaStore, metrics: CatalogMetrics,
                 expire_interval_s: float, orphan_interval_s: float, reconcile_interval_s: float = 0.0) -> None:
        self.catalog = catalog
        self.store = store
        self.metrics = metrics
        self.expire_interval_s = expire_interval_s
        self.orphan_interval_s = orphan_interval_s
        self.reconcile_interval_s = reconcile_interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Maintenance:
        if self.expire_interval_s > 0 or self.orphan_interval_s > 0 or self.reconcile_interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="catalog-maintenance", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        import time

        next_expire = time.monotonic() + self.expire_interval_s
        next_orphans = time.monotonic() + self.orphan_interval_s
        next_reconcile = time.monotonic() + self.reconcile_interval_s
        while not self._stop.wait(0.5):
            now = time.monotonic()
            if self.reconcile_interval_s > 0 and now >= next_reconcile:
                reconcile_all(self.catalog, self.store, self.metrics)
                next_reconcile = time.monotonic() + self.reconcile_interval_s
            if self.expire_interval_s > 0 and now >= next_expire:
                self.expire_once()
                next_expire = time.monotonic() + self.expire_interval_s
            if self.orphan_interval_s > 0 and now >= next_orphans:
                self.remove_orphans_once()
                next_orphans = time.monotonic() + self.orphan_interval_s

    def expire_once(self) -> int:
        """Expire snapshots of every table by its `snapshot.*` options; how many were expired."""
        total = 0
        for tid in table_ids(self.catalog):
            if self._stop.is_set():
                break
            try:
                with self.store.commit_lock(tid):
                    result = expire_snapshots(self.catalog.get_table(tid))
            except Exception:
                _log.exception("scheduled expiration of %s failed", tid)
                continue
            if result.expired_snapshots:
                _log.info("expired %d snapshot(s) of %s", len(result.expired_snapshots), tid)
            total += len(result.expired_snapshots)
        self.metrics.expired.inc(total)
        return total

    def remove_orphans_once(self) -> int:
        """Delete files older than a day that no snapshot of their table references; how many."""
        total = 0
        for tid in table_ids(self.catalog):
            if self._stop.is_set():
                break
            try:
                result = remove_orphan_files(self.catalog.get_table(tid), older_than_ms=ORPHAN_MIN_AGE_MS)
            except Exception:
                _log.exception("scheduled orphan cleanup of %s failed", tid)
                continue
            total += len(result.deleted)
        self.metrics.orphans.inc(total)
        return total
