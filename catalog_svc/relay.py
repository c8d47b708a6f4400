"""The outbox relay: publishes the events recorded with commits to Kafka, at least once.

One loop on its own thread:
1. make sure the topics exist (retried until it works or the relay stops);
2. read the oldest pending events from the metadata store;
3. publish them one by one, waiting for each acknowledgement (acks=all);
4. mark delivered only the events the broker acknowledged; a failure backs off and retries,
   so a crash or a broker outage re-publishes (duplicates are allowed, losses are not).
Every wait is bounded and ends early when `stop()` sets the stop event.

Retention (`OutboxPurger`, a second thread that runs with or without Kafka, whatever the broker's state):
delivered events are deleted `keep_delivered_s` after their delivery, and events still undelivered
`keep_undelivered_s` after they were recorded are dropped with a warning that counts them, so the outbox
stays bounded without a broker or with one that stays down. Deletes go in batches of `batch` events, one
short transaction each, at most `batches` of each kind per pass; a pass that leaves more to delete is
followed by another after `busy_wait_s`, otherwise by one after `every_s`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from lsmlake.errors import InvalidInputError
from lsmlake.kafka.broker import ensure_topics
from lsmlake.kafka.client import Publisher
from lsmlake.metastore import MetaStore, now_ms
from lsmlake.metastore.outbox import Outbox
from lsmlake.metastore.store import PURGE_BATCH
from lsmlake.rpc.events import TOPICS
from lsmlake.runtime.background import BackgroundLoop

_log = logging.getLogger(__name__)

KEEP_DELIVERED_S = 3_600.0  # delivered events stay an hour for inspection
KEEP_UNDELIVERED_S = 86_400.0  # undelivered events wait a day for a broker, then are dropped
PURGE_EVERY_S = 60.0
PURGE_BATCHES = 10  # per kind and pass: at most 2 * 10 * PURGE_BATCH deletes before the purge pauses
DELIVERED, UNDELIVERED = "delivered", "undelivered"


class Purged(NamedTuple):
    """What one purge pass deleted, and whether it stopped at its batch limit with more to delete."""

    delivered: int
    undelivered: int
    more: bool


class OutboxPurger:
    """Keeps `lsmlake_outbox` bounded: deletes old delivered events and drops old undelivered ones."""

    def __init__(self, outbox: Outbox, *, keep_delivered_s: float = KEEP_DELIVERED_S,
                 keep_undelivered_s: float = KEEP_UNDELIVERED_S, why_undelivered: str = "",
                 every_s: float = PURGE_EVERY_S, busy_wait_s: float = 0.5, batch: int = PURGE_BATCH,
                 batches: int = PURGE_BATCHES, clock: Callable[[], int] = now_ms,
                 on_purged: Callable[[str, int], None] | None = None) -> None:
        if not keep_delivered_s >= 0 or not keep_undelivered_s > 0:  # also refuses nan
            raise InvalidInputError(f"outbox retentions must be >= 0 (delivered, got {keep_delivered_s}) and > 0 "
                                    f"(undelivered, got {keep_undelivered_s}) seconds")
        if batch < 1 or batches < 1:
            raise InvalidInputError(f"outbox purge batch {batch} and batches {batches} must be at least 1")
        self.outbox = outbox
        self.keep_delivered_ms = round(keep_delivered_s * 1000)
        self.keep_undelivered_ms = round(keep_undelivered_s * 1000)
        self.why_undelivered = why_undelivered or "Kafka did not take them"
        self.every_s = every_s
        self.busy_wait_s = busy_wait_s
        self.batch = batch
        self.batches = batches
        self.clock = clock  # epoch ms; tests move it forward instead of sleeping
        self._on_purged = on_purged or (lambda state, n: None)
        self._loop = BackgroundLoop("outbox-purge", self._step, every_s, error_wait_s=every_s,
                                    on_error=self._failed, what="outbox purge", logger=_log)

    def start(self) -> OutboxPurger:
        """Start the purge thread (the first pass runs at once)."""
        self._loop.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop and wait up to `timeout_s` for its current batch to finish."""
        self._loop.stop(timeout_s)

    def _step(self) -> float:
        return self.busy_wait_s if self.purge_once().more else self.every_s

    def _failed(self, e: Exception) -> None:  # the store is unreachable for now: try again at the next pass
        _log.warning("outbox purge failed: %s; retrying in %.0f s", e, self.every_s)

    def purge_once(self) -> Purged:
        """One bounded pass: at most `batches` batches of each kind of event; what it deleted."""
        now = self.clock()
        dropped, more_undelivered = self._drain(UNDELIVERED, self.outbox.purge_undelivered,
                                                now - self.keep_undelivered_ms)
        deleted, more_delivered = self._drain(DELIVERED, self.outbox.purge_delivered,
                                              now - self.keep_delivered_ms)
        return Purged(deleted, dropped, more_undelivered or more_delivered)

    def _drain(self, state: str, purge: Callable[[int, int], int], before_ms: int) -> tuple[int, bool]:
        """Up to `batches` batches older than `before_ms`: how many went, and whether more are left."""
        total, more = 0, True
        try:
            for _ in range(self.batches):
                if self._loop.is_stopping():
                    more = False
                    break
                n = purge(before_ms, self.batch)
                total += n
                if n < self.batch:
                    more = False
                    break
        finally:  # what the committed batches deleted is counted even when a later batch fails
            if total:
                self._on_purged(state, total)
                if state == UNDELIVERED:
                    _log.warning("dropped %d outbox event(s) still undelivered %.0f s after their commit: %s; "
                                 "they will never be published", total, self.keep_undelivered_ms / 1000,
                                 self.why_undelivered)
                else:
                    _log.debug("purged %d delivered outbox event(s)", total)
        return total, more


class OutboxRelay:
    """Relays the metadata store's pending outbox events to Kafka on a background thread.

    It also owns the outbox's `OutboxPurger`, which runs whether or not Kafka is configured.
    """

    def __init__(self, store: MetaStore, bootstrap: str | None, *, topic_partitions: int = 4,
                 batch: int = 100, idle_wait_s: float = 0.5, backoff_s: float = 1.0,
                 publish_timeout_s: float = 10.0, on_published: Callable[[int], None] | None = None,
                 keep_delivered_s: float = KEEP_DELIVERED_S, keep_undelivered_s: float = KEEP_UNDELIVERED_S,
                 on_purged: Callable[[str, int], None] | None = None) -> None:
        self.store = store
        why = "no Kafka is configured (--kafka)" if bootstrap is None else \
            f"Kafka at {bootstrap} did not take them in time"
        self.purger = OutboxPurger(store.outbox, keep_delivered_s=keep_delivered_s,
                                   keep_undelivered_s=keep_undelivered_s, why_undelivered=why, on_purged=on_purged)
        self._on_published = on_published or (lambda n: None)
        self.bootstrap = bootstrap
        self.topic_partitions = topic_partitions
        self.batch = batch
        self.idle_wait_s = idle_wait_s
        self.backoff_s = backoff_s
        self.publish_timeout_s = publish_timeout_s
        self._publisher: Publisher | None = None
        self._topics_ready = False
        self._loop = BackgroundLoop("outbox-relay", self._step, idle_wait_s, error_wait_s=backoff_s,
                                    on_error=self._failed, on_exit=self._close, what="outbox relay",
                                    logger=_log)

    def start(self) -> OutboxRelay:
        """Start the purge thread and, with a Kafka bootstrap, the relay thread.

        Without Kafka, events stay pending (a catalog with Kafka sharing the store may still publish them)
        until the purge drops them.
        """
        self.purger.start()
        if self.bootstrap is None:
            _log.info("no Kafka configured: outbox events are not published here, and are dropped %.0f s after "
                      "their commit unless a catalog with Kafka on the same metastore publishes them",
                      self.purger.keep_undelivered_ms / 1000)
            return self
        self._publisher = Publisher(self.bootstrap)
        self._loop.start()
        return self

    def wake(self) -> None:
        """Look for new events now instead of at the next poll."""
        self._loop.wake()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop and wait up to `timeout_s` for it to finish its current publish."""
        self._loop.request_stop()
        self.purger.stop(timeout_s)
        self._loop.stop(timeout_s)

    def _step(self) -> float:
        """Make sure the topics exist (once), then publish a batch: at once again after a full one."""
        assert self.bootstrap is not None and self._publisher is not None
        if not self._topics_ready:
            ensure_topics(self.bootstrap, TOPICS, self.topic_partitions, timeout_s=self.publish_timeout_s)
            self._topics_ready = True
        return 0.0 if self.relay_once(self._publisher) else self.idle_wait_s

    def _failed(self, e: Exception) -> None:
        if not self._topics_ready:  # broker not up yet: retry until stopped
            _log.warning("cannot ensure topics on %s: %s", self.bootstrap, e)
        else:
            _log.warning("outbox relay: %s; retrying in %.1f s", e, self.backoff_s)

    def _close(self) -> None:
        if self._publisher is not None:
            self._publisher.close(timeout_s=2.0)

    def relay_once(self, publisher: Publisher) -> int:
        """Publish one batch of pending events; how many were delivered. Raises on the first failure."""
        events = self.store.outbox.pending_events(self.batch)
        acked: list[int] = []
        try:
            for e in events:
                if self._loop.is_stopping():
                    break
                publisher.publish(e.topic, e.key, e.payload, timeout_s=self.publish_timeout_s)
                acked.append(e.event_id)
        finally:
            # only what the broker acknowledged; the rest is published again later
            if acked:
                self.store.outbox.mark_delivered(acked)
                self._on_published(len(acked))
        return len(acked)
