"""The catalog service's Prometheus metrics: commits, their latency and conflicts, the outbox lag, maintenance."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lsmlake.metastore import MetaStore


class CatalogMetrics:
    """One registry per server, so that two servers in one process (the tests) do not share counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.commits = Counter("lsmlake_catalog_commits", "Commit requests by kind and outcome "
                               "(committed, already_committed, conflict, rejected, error).",
                               ["kind", "outcome"], registry=r)
        self.commit_seconds = Histogram("lsmlake_catalog_commit_seconds", "Time to commit a snapshot, lock included.",
                                        ["kind"], registry=r,
                                        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.conflicts = Counter("lsmlake_catalog_commit_conflicts", "Commits refused because they conflict.",
                                 ["kind"], registry=r)
        self.events_published = Counter("lsmlake_catalog_events_published", "Outbox events delivered to Kafka.",
                                        registry=r)
        self.reconciled = Counter("lsmlake_catalog_reconciled_snapshots", "Snapshots found in the warehouse "
                                  "without a record (a crash or an outside writer) and announced late.", registry=r)
        self.sequences = Counter("lsmlake_catalog_sequence_numbers", "Sequence numbers handed out to writers.",
                                 registry=r)
        self.expired = Counter("lsmlake_catalog_expired_snapshots", "Snapshots removed by expiration.", registry=r)
        self.orphans = Counter("lsmlake_catalog_orphan_files_removed", "Orphan files removed.", registry=r)
        self.plans = Counter("lsmlake_catalog_compaction_plans", "Compaction plan transitions by target state.",
                             ["state"], registry=r)
        self.watchers = Gauge("lsmlake_catalog_snapshot_watchers", "Open WatchSnapshots streams.", registry=r)
        self.outbox_pending = Gauge("lsmlake_catalog_outbox_pending", "Events recorded but not yet on Kafka.",
                                    registry=r)
        self.outbox_lag = Gauge("lsmlake_catalog_outbox_lag_seconds", "Age of the oldest undelivered event.",
                                registry=r)
        self.outbox_events = Gauge("lsmlake_catalog_outbox_events", "Events in the outbox, delivered or not "
                                   "(bounded by the outbox retentions).", registry=r)
        self.outbox_purged = Counter("lsmlake_catalog_outbox_purged", "Outbox events deleted by retention: "
                                     "delivered, or undelivered (dropped, never published).", ["state"], registry=r)

        self.rest_requests = Counter("lsmlake_catalog_rest_requests", "Calls of the Paimon REST catalog API by "
                                     "route and HTTP status.", ["route", "status"], registry=r)
        self.rest_seconds = Histogram("lsmlake_catalog_rest_seconds", "Time to answer a REST catalog call.",
                                      ["route"], registry=r,
                                      buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30))

    def rest_call(self, route: str, status: int, seconds: float) -> None:
        """Count one answered REST call."""
        self.rest_requests.labels(route, str(status)).inc()
        self.rest_seconds.labels(route).observe(seconds)

    def purged(self, state: str, count: int) -> None:
        """Count `count` events of `state` (delivered or undelivered) deleted by the outbox retention."""
        self.outbox_purged.labels(state).inc(count)

    def watch_outbox(self, store: MetaStore) -> None:
        """Read the outbox gauges from the store at each scrape (a failing store reads as -1)."""
        def pending() -> float:
            try:
                return float(store.outbox_lag()[0])
            except Exception:
                return -1.0

        def lag() -> float:
            try:
                oldest = store.outbox_lag()[1]
            except Exception:
                return -1.0
            return 0.0 if oldest is None else max(0.0, time.time() - oldest / 1000)

        def size() -> float:
            try:
                return float(store.outbox_size())
            except Exception:
                return -1.0

        self.outbox_pending.set_function(pending)
        self.outbox_lag.set_function(lag)
        self.outbox_events.set_function(size)
