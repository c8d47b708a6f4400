"""The writer service's Prometheus metrics: rows, bytes, buffers, spills, commits, stalls, consumer lag."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lsmlake.table.write_buffer import WriteBufferStats


class WriterMetrics:
    """One registry per server."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.rows = Counter("lsmlake_writer_rows", "Rows committed, by table.", ["table"], registry=r)
        self.bytes_in = Counter("lsmlake_writer_bytes_received", "Bytes of row data received, by source.",
                                ["source"], registry=r)
        self.requests = Counter("lsmlake_writer_requests", "Write requests by RPC and outcome.", ["rpc", "outcome"],
                                registry=r)
        self.commits = Counter("lsmlake_writer_commits", "Group commits by table and outcome "
                               "(committed, refused, unknown).", ["table", "outcome"], registry=r)
        self.commit_seconds = Histogram("lsmlake_writer_commit_seconds", "Catalog commit latency.", ["table"],
                                        registry=r, buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.buffer_bytes = Gauge("lsmlake_writer_buffer_bytes", "Bytes held in write buffers.", ["table"],
                                  registry=r)
        self.buffer_disk_bytes = Gauge("lsmlake_writer_buffer_disk_bytes", "Bytes of spilled sorted runs on disk.",
                                       ["table"], registry=r)
        self.spills = Gauge("lsmlake_writer_spills", "Sorted runs spilled by the table's current buffers.",
                            ["table"], registry=r)
        self.stalls = Counter("lsmlake_writer_stalls", "Writes that waited for compaction (too many sorted runs).",
                              ["table"], registry=r)
        self.stall_seconds = Counter("lsmlake_writer_stall_seconds", "Time writes waited for compaction.",
                                     ["table"], registry=r)
        self.consumer_lag = Gauge("lsmlake_writer_consumer_lag", "Kafka records behind the partition's end, by "
                                  "topic (as far as the broker reports it).", ["topic"], registry=r)
        self.messages = Counter("lsmlake_writer_kafka_messages", "Kafka messages consumed, by topic and outcome "
                                "(rows, dead_letter, tombstone).", ["topic", "outcome"], registry=r)

    def observe_buffer(self, table: str, stats: WriteBufferStats) -> None:
        self.buffer_bytes.labels(table).set(stats.memory_bytes)
        self.buffer_disk_bytes.labels(table).set(stats.disk_bytes)
        self.spills.labels(table).set(stats.spill_count)
