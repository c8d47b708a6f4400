"""The catalog service's Prometheus metrics: commits, their latency and conflicts, the outbox lag, maintenance."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from lsmlake.catalog.health import TableHealth
from lsmlake.metastore import INFLIGHT, PENDING_STATES, REQUESTED, MetaStore


class HttpPort(Protocol):
    """What an HTTP port tells of its connections (`lsmlake.rest.http_server.JsonHttpServer`)."""

    @property
    def open_connections(self) -> int: ...

    @property
    def refused_connections(self) -> int: ...


class _RefusedConnections(Collector):
    """Connections each HTTP port closed at accept, read from the ports at each scrape (a counter)."""

    def __init__(self) -> None:
        self.ports: dict[str, HttpPort] = {}

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("lsmlake_catalog_http_connections_refused", "Connections an HTTP port (rest, "
                                     "ui) closed at accept: over its total or per-peer cap.", labels=["port"])
        for name, port in self.ports.items():
            family.add_metric([name], port.refused_connections)
        yield family


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
        self.http_connections = Gauge("lsmlake_catalog_http_connections", "Open connections of an HTTP port "
                                      "(rest, ui).", ["port"], registry=r)
        self._refused = _RefusedConnections()
        r.register(self._refused)
        self.watchers = Gauge("lsmlake_catalog_snapshot_watchers", "Open WatchSnapshots streams.", registry=r)
        self.outbox_pending = Gauge("lsmlake_catalog_outbox_pending", "Events recorded but not yet on Kafka.",
                                    registry=r)
        self.outbox_lag = Gauge("lsmlake_catalog_outbox_lag_seconds", "Age of the oldest undelivered event.",
                                registry=r)
        self.outbox_events = Gauge("lsmlake_catalog_outbox_events", "Events in the outbox, delivered or not "
                                   "(bounded by the outbox retentions).", registry=r)
        self.outbox_purged = Counter("lsmlake_catalog_outbox_purged", "Outbox events deleted by retention: "
                                     "delivered, or undelivered (dropped, never published).", ["state"], registry=r)

        # per table, set by the maintenance thread every --health-interval (docs/operating-tables.md)
        self.table_lag = Gauge("lsmlake_table_compaction_lag_seconds", "How long the compaction now due has "
                               "waited, the table's worst bucket (0: none is due).", ["table"], registry=r)
        self.table_runs = Gauge("lsmlake_table_sorted_runs_max", "Sorted runs of the table's worst bucket.",
                                ["table"], registry=r)
        self.table_level0 = Gauge("lsmlake_table_level0_files", "Level-0 (and postponed) files of the table.",
                                  ["table"], registry=r)
        self.table_score = Gauge("lsmlake_table_health_score", "Health score, 0 (worst) to 100.", ["table"],
                                 registry=r)
        self.table_stalled = Gauge("lsmlake_table_stalled", "1 when a bucket is past num-sorted-run.stop-trigger "
                                   "(writers wait).", ["table"], registry=r)
        self.table_unreadable = Gauge("lsmlake_table_unreadable", "1 when the table could not be read at the last "
                                      "health check (the other gauges keep their last values).", ["table"],
                                      registry=r)
        self.table_plans = Gauge("lsmlake_table_compaction_plans", "Pending compaction plans by state.",
                                 ["table", "state"], registry=r)
        self.table_plan_age = Gauge("lsmlake_table_oldest_plan_age_seconds", "Age of the oldest pending plan.",
                                    ["table"], registry=r)

        self.rest_requests = Counter("lsmlake_catalog_rest_requests", "Calls of the Paimon REST catalog API by "
                                     "route and HTTP status.", ["route", "status"], registry=r)
        self.rest_seconds = Histogram("lsmlake_catalog_rest_seconds", "Time to answer a REST catalog call.",
                                      ["route"], registry=r,
                                      buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30))

    def table_health(self, h: TableHealth) -> None:
        """Set the gauges of one table's health (see `lsmlake.catalog.health`)."""
        t = h.table
        self.table_unreadable.labels(t).set(int(h.error is not None))
        if h.error is not None:
            return
        self.table_lag.labels(t).set(h.lag_ms / 1000)
        self.table_runs.labels(t).set(h.max_sorted_runs)
        self.table_level0.labels(t).set(h.level0_files)
        self.table_score.labels(t).set(h.score)
        self.table_stalled.labels(t).set(int(h.stalled))
        self.table_plans.labels(t, REQUESTED).set(h.pending_plans)
        self.table_plans.labels(t, INFLIGHT).set(h.inflight_plans)
        self.table_plan_age.labels(t).set(h.oldest_plan_age_ms / 1000)

    def forget_table(self, table: str) -> None:
        """Drop the gauges of a table that is gone."""
        for g in (self.table_lag, self.table_runs, self.table_level0, self.table_score, self.table_stalled,
                  self.table_plan_age, self.table_unreadable):
            g.remove(table)
        for state in PENDING_STATES:
            self.table_plans.remove(table, state)

    def rest_call(self, route: str, status: int, seconds: float) -> None:
        """Count one answered REST call."""
        self.rest_requests.labels(route, str(status)).inc()
        self.rest_seconds.labels(route).observe(seconds)

    def watch_http(self, name: str, port: HttpPort) -> None:
        """Read an HTTP port's open and refused connections at each scrape."""
        self.http_connections.labels(name).set_function(lambda: float(port.open_connections))
        self._refused.ports[name] = port

    def purged(self, state: str, count: int) -> None:
        """Count `count` events of `state` (delivered or undelivered) deleted by the outbox retention."""
        self.outbox_purged.labels(state).inc(count)

    def watch_outbox(self, store: MetaStore) -> None:
        """Read the outbox gauges from the store at each scrape (a failing store reads as -1)."""
        def pending() -> float:
            try:
                return float(store.outbox.outbox_lag()[0])
            except Exception:
                return -1.0

        def lag() -> float:
            try:
                oldest = store.outbox.outbox_lag()[1]
            except Exception:
                return -1.0
            return 0.0 if oldest is None else max(0.0, time.time() - oldest / 1000)

        def size() -> float:
            try:
                return float(store.outbox.outbox_size())
            except Exception:
                return -1.0

        self.outbox_pending.set_function(pending)
        self.outbox_lag.set_function(lag)
        self.outbox_events.set_function(size)
