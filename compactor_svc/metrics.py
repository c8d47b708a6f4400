"""The compactor's Prometheus metrics: what shows a compactor falling behind before queries slow down."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_RUNS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50)


class CompactorMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.sorted_runs = Histogram("lsmlake_compactor_bucket_sorted_runs", "Sorted runs per bucket, observed "
                                     "whenever the compactor looks at a bucket.", buckets=_RUNS, registry=r)
        self.level0_files = Histogram("lsmlake_compactor_bucket_level0_files", "Level-0 files per bucket, observed "
                                      "whenever the compactor looks at a bucket.", buckets=_RUNS, registry=r)
        self.max_sorted_runs = Gauge("lsmlake_compactor_max_sorted_runs", "The most sorted runs of any owned "
                                     "bucket at the last look.", registry=r)
        self.pending_buckets = Gauge("lsmlake_compactor_pending_buckets", "Buckets waiting to be looked at.",
                                     registry=r)
        self.pending_plans = Gauge("lsmlake_compactor_pending_plans", "Plans queued or running.", registry=r)
        self.oldest_plan_age = Gauge("lsmlake_compactor_oldest_plan_age_seconds", "Age of the oldest plan queued "
                                     "or running.", registry=r)
        self.plan_seconds = Histogram("lsmlake_compactor_plan_seconds", "From plan request to commit.",
                                      buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300), registry=r)
        self.plans = Counter("lsmlake_compactor_plans", "Plans by outcome (completed, conflict, failed, empty, "
                             "expired: cancelled at its deadline).", ["outcome"], registry=r)
        self.running_plans = Gauge("lsmlake_compactor_running_plans", "Plans running on Spark now.", registry=r)
        self.plan_tasks_finished = Counter("lsmlake_compactor_plan_tasks_finished", "Spark tasks of plans that "
                                           "finished: the plans' heartbeat.", registry=r)
        self.tasks_running = Gauge("lsmlake_compactor_plan_tasks_running", "Spark tasks of running plans that "
                                   "run now.", registry=r)
        self.heartbeat_age = Gauge("lsmlake_compactor_plan_heartbeat_age_seconds", "Seconds since a running plan "
                                   "last saw a task finish, the longest of them (0: none runs).", registry=r)
        self.bytes_read = Counter("lsmlake_compactor_bytes_read", "Bytes of input files compacted.", registry=r)
        self.bytes_written = Counter("lsmlake_compactor_bytes_written", "Bytes of files compaction wrote.",
                                     registry=r)
        self.bytes_ingested = Counter("lsmlake_compactor_bytes_ingested", "Bytes of level-0 files writers added "
                                      "to owned buckets (from data-files events).", registry=r)
        self.write_amplification = Gauge("lsmlake_compactor_write_amplification", "(ingested + compaction-written) "
                                         "/ ingested bytes since start.", registry=r)
        self.task_failures = Counter("lsmlake_compactor_spark_task_failures", "Bucket tasks that failed on Spark "
                                     "after their retries.", registry=r)
        self.events = Counter("lsmlake_compactor_events", "Events consumed by topic.", ["topic"], registry=r)

    def update_amplification(self) -> None:
        ingested = self.bytes_ingested._value.get()
        if ingested > 0:
            self.write_amplification.set((ingested + self.bytes_written._value.get()) / ingested)
