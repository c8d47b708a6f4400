"""The outbox relay: publishes the events recorded with commits to Kafka, at least once.

One loop on its own thread:
1. make sure the topics exist (retried until it works or the relay stops);
2. read the oldest pending events from the metadata store;
3. publish them one by one, waiting for each acknowledgement (acks=all);
4. mark delivered only the events the broker acknowledged; a failure backs off and retries,
   so a crash or a broker outage re-publishes (duplicates are allowed, losses are not).
Every wait is bounded and ends early when `stop()` sets the stop event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..kafka.broker import ensure_topics
from ..kafka.client import Publisher
from ..metastore import MetaStore, now_ms
from .events import TOPICS

_log = logging.getLogger(__name__)

KEEP_DELIVERED_MS = 3_600_000
PURGE_EVERY_S = 60.0


class OutboxRelay:
    """Relays the metadata store's pending outbox events to Kafka on a background thread."""

    def __init__(self, store: MetaStore, bootstrap: str | None, *, topic_partitions: int = 4,
                 batch: int = 100, idle_wait_s: float = 0.5, backoff_s: float = 1.0,
                 publish_timeout_s: float = 10.0, on_published: Callable[[int], None] | None = None) -> None:
        self.store = store
        self._on_published = on_published or (lambda n: None)
        self.bootstrap = bootstrap
        self.topic_partitions = topic_partitions
        self.batch = batch
        self.idle_wait_s = idle_wait_s
        self.backoff_s = backoff_s
        self.publish_timeout_s = publish_timeout_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> OutboxRelay:
        """Start the relay thread; without a Kafka bootstrap the relay does nothing (events stay pending)."""
        if self.bootstrap is None:
            _log.info("no Kafka configured: outbox events stay pending")
            return self
        self._thread = threading.Thread(target=self._run, name="outbox-relay", daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        """Look for new events now instead of at the next poll."""
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop and wait up to `timeout_s` for it to finish its current publish."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                _log.warning("outbox relay did not stop within %.1f s", timeout_s)

    def _wait(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _run(self) -> None:
        assert self.bootstrap is not None
        publisher = Publisher(self.bootstrap)
        try:
            while not self._stop.is_set():
                try:
                    ensure_topics(self.bootstrap, TOPICS, self.topic_partitions, timeout_s=self.publish_timeout_s)
                    break
                except Exception as e:  # broker not up yet: retry until stopped
                    _log.warning("cannot ensure topics on %s: %s", self.bootstrap, e)
                    self._stop.wait(self.backoff_s)
            next_purge = 0.0
            while not self._stop.is_set():
                if time.monotonic() >= next_purge:  # delivered events are kept an hour for inspection, then go
                    next_purge = time.monotonic() + PURGE_EVERY_S
                    try:
                        self.store.purge_delivered(now_ms() - KEEP_DELIVERED_MS)
                    except Exception as e:
                        _log.info("outbox purge failed: %s", e)
                try:
                    sent = self.relay_once(publisher)
                except Exception as e:
                    _log.warning("outbox relay: %s; retrying in %.1f s", e, self.backoff_s)
                    self._stop.wait(self.backoff_s)
                    continue
                if sent == 0:
                    self._wait(self.idle_wait_s)
        finally:
            publisher.close(timeout_s=2.0)

    def relay_once(self, publisher: Publisher) -> int:
        """Publish one batch of pending events; how many were delivered. Raises on the first failure."""
        events = self.store.pending_events(self.batch)
        acked: list[int] = []
        try:
            for e in events:
                if self._stop.is_set():
                    break
                publisher.publish(e.topic, e.key, e.payload, timeout_s=self.publish_timeout_s)
                acked.append(e.event_id)
        finally:
            # only what the broker acknowledged; the rest is published again later
            if acked:
                self.store.mark_delivered(acked)
                self._on_published(len(acked))
        return len(acked)
