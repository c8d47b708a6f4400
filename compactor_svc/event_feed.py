"""The compactor's Kafka consumer: events mark buckets dirty, the group's assignment decides ownership.

kafka-python calls rebalance listeners on its IO thread, where no blocking consumer call may run, so the
listener only flags the rebalance; the feed thread reads the new assignment after `poll` returns.
Offsets are committed every few seconds: events are hints (the planner re-reads the tables), so a replay
after a crash costs a look at some buckets, nothing more. A topic whose id changes (a broker that lost its
storage, a topic created again) is read again from its beginning: the positions pointed into a log that is
gone, past the end of the new one, and would skip its events until it grew that long.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from kafka import TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener

from compactor_svc.metrics import CompactorMetrics
from compactor_svc.ownership import Ownership
from compactor_svc.scheduler import Scheduler
from lsmlake.kafka.broker import ensure_topics
from lsmlake.kafka.client import consumer
from lsmlake.proto_gen.lsmlake.v1 import events_pb2
from lsmlake.rpc.events import COMPACTION_RESULTS_TOPIC, DATA_FILES_TOPIC, TOPICS
from lsmlake.runtime.background import BackgroundLoop, StopLoop

_log = logging.getLogger(__name__)

GROUP_ID = "lsmlake-compactor"
COMMIT_EVERY_S = 5.0
RETRY_S = 1.0  # until the topics exist


class _Flag(ConsumerRebalanceListener):
    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        self.event.set()

    def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self.event.set()


class EventFeed:
    def __init__(self, bootstrap: str, ownership: Ownership, scheduler: Scheduler, metrics: CompactorMetrics,
                 topic_partitions: int = 4, group_id: str = GROUP_ID) -> None:
        self.bootstrap = bootstrap
        self.ownership = ownership
        self.scheduler = scheduler
        self.metrics = metrics
        self.topic_partitions = topic_partitions
        self.group_id = group_id
        self.rebalanced = threading.Event()
        self.assigned = threading.Event()  # set after the first assignment
        self._consumer: Any = None  # made once the topics exist; used and closed on the feed's thread only
        self._last_commit = 0.0
        self._topic_ids: dict[str, object] = {}
        self._loop = BackgroundLoop("event-feed", self._step, 0.0, error_wait_s=RETRY_S, on_exit=self._close,
                                    what="event feed", logger=_log)

    def start(self) -> EventFeed:
        self._loop.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self._loop.stop(timeout_s)

    def _step(self) -> float | None:
        """Create the topics and the consumer (once), then one poll; `poll` itself waits for records."""
        if self._consumer is None:
            try:
                ensure_topics(self.bootstrap, TOPICS, self.topic_partitions, timeout_s=10)
            except Exception as e:
                _log.warning("cannot create the event topics on %s: %s", self.bootstrap, e)
                return RETRY_S
            self._consumer = consumer(self.bootstrap, self.group_id, TOPICS, listener=_Flag(self.rebalanced),
                                      client_id=f"compactor-{uuid.uuid4().hex[:6]}")
            self._last_commit = time.monotonic()
            return None
        try:
            self._poll(self._consumer)
        except Exception:
            _log.exception("the event feed stopped")
            raise StopLoop from None
        return None

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close(autocommit=False)

    def _poll(self, c: Any) -> None:
        batches = c.poll(timeout_ms=200)
        if self.rebalanced.is_set():
            self.rebalanced.clear()
            self._on_assignment(c)
        if self._restart_replaced_topics(c, self._topic_ids):
            self._last_commit = 0.0  # commit the new positions now, so a rejoin starts from them
        for tp, records in batches.items():
            self.metrics.events.labels(tp.topic).inc(len(records))
            for r in records:
                self._on_record(tp.topic, r.value)
        if time.monotonic() - self._last_commit > COMMIT_EVERY_S:
            self._last_commit = time.monotonic()
            try:
                c.commit()
            except Exception as e:  # hints only
                _log.debug("offset commit failed: %s", e)

    @staticmethod
    def _restart_replaced_topics(c: Any, known: dict[str, object]) -> bool:
        """Seek the partitions of every topic whose id changed to the beginning; whether any did."""
        cluster = getattr(getattr(c, "_client", None), "cluster", None)  # kafka-python has no public accessor
        if cluster is None or not hasattr(cluster, "topic_id"):
            return False
        replaced = False
        for topic in TOPICS:
            current = cluster.topic_id(topic)
            if current is None:
                continue
            if known.get(topic, current) != current:
                parts = [tp for tp in c.assignment() if tp.topic == topic]
                _log.warning("event topic %s was created again (id %s, was %s): reading it from the beginning",
                             topic, current, known[topic])
                if parts:
                    c.seek_to_beginning(*parts)
                replaced = True
            known[topic] = current
        return replaced

    def _on_assignment(self, c: object) -> None:
        owned = {tp.partition for tp in c.assignment() if tp.topic == DATA_FILES_TOPIC}  # type: ignore[attr-defined]
        parts = c.partitions_for_topic(DATA_FILES_TOPIC) or set()  # type: ignore[attr-defined]
        gained, lost = self.ownership.update(owned, len(parts))
        _log.info("owning event partitions %s of %d (gained %s, lost %s)", sorted(owned), len(parts),
                  sorted(gained), sorted(lost))
        self.scheduler.on_ownership_change(gained, lost)
        self.assigned.set()

    def _on_record(self, topic: str, value: bytes) -> None:
        try:
            env = events_pb2.Envelope.FromString(value)
        except Exception:
            _log.warning("undecodable event on %s skipped", topic)
            return
        which = env.WhichOneof("event")
        if which is None:
            return
        e = getattr(env, which)
        table_id = f"{e.table.database}.{e.table.table}"
        if not self.ownership.owns(table_id, e.partition, e.bucket):
            return
        if topic == DATA_FILES_TOPIC and which == "data_files":
            self.metrics.bytes_ingested.inc(sum(f.file_size for f in e.new_files))
        self.scheduler.on_event((table_id, e.partition, e.bucket), e.snapshot_id,
                                compaction=topic == COMPACTION_RESULTS_TOPIC)
