"""Thin kafka-python helpers with the settings every lsmlake service wants.

Producers wait for all in-sync replicas and are idempotent (a retried batch is stored once).
Consumers never auto-commit: a service commits an offset only once the effect is durable.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import KafkaError
from kafka.producer.future import RecordMetadata

from lsmlake.errors import LakeError
from lsmlake.kafka.security import KafkaSecurity

PRODUCER_DEFAULTS: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": 0,
    "request_timeout_ms": 10_000,
    "delivery_timeout_ms": 30_000,
    "bootstrap_timeout_ms": 10_000,  # bound the constructor when no broker answers
    "max_block_ms": 10_000,  # bound send() when the topic's metadata cannot be fetched
    # Declares intent; Tansu auto-creates topics on metadata requests anyway (see broker.py).
    "allow_auto_create_topics": False,
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",  # a trigger must not skip events it never saw
    "allow_auto_create_topics": False,
    "bootstrap_timeout_ms": 10_000,
    # Tansu holds a JoinGroup for about half the session timeout: kafka-python's 45 s default
    # would make every join take ~23 s. 6 s is also Apache Kafka's minimum session timeout.
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 1_000,
}


_FORCE_CLOSE_JOIN_S = 5.0

# The process's Kafka security (SASL, SSL), set once at start-up by the service's settings; every producer
# and consumer made here uses it, so the code that creates them needs no security settings of its own.
_security = KafkaSecurity()


def configure_security(security: KafkaSecurity) -> None:
    """Use `security` for every producer and consumer this process creates from now on."""
    global _security
    _security = security


def client_settings(defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """kafka-python settings of a new client: lsmlake's defaults, the process's security, then `overrides`."""
    return {**defaults, **_security.kwargs(), **overrides}


class PublishError(LakeError):
    """The broker did not acknowledge a record; it may or may not have been stored (retry; duplicates are possible)."""


def producer(bootstrap: str, **overrides: Any) -> KafkaProducer:
    """A KafkaProducer with acks=all and idempotence; ``overrides`` are kafka-python settings."""
    return KafkaProducer(bootstrap_servers=bootstrap, **client_settings(PRODUCER_DEFAULTS, overrides))


def consumer(
    bootstrap: str,
    group_id: str,
    topics: Iterable[str],
    *,
    listener: ConsumerRebalanceListener | None = None,
    **overrides: Any,
) -> KafkaConsumer:
    """A KafkaConsumer in ``group_id`` subscribed to ``topics``, without auto-commit.

    ``listener`` receives partition revocations and assignments (commit on revoke, restore on assign).
    """
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, **client_settings(CONSUMER_DEFAULTS, overrides))
    c.subscribe(topics=list(topics), listener=listener)
    return c


def publish_and_wait(
    producer: KafkaProducer,
    topic: str,
    key: bytes | None,
    value: bytes,
    *,
    headers: list[tuple[str, bytes]] | None = None,
    timeout_s: float = 30.0,
) -> RecordMetadata:
    """Send one record and return only once the broker acknowledged it.

    Records with the same key go to the same partition, in the order they were acknowledged.
    The returned offset is the record's offset, except that Tansu answers -1 for a batch it
    recognised as a duplicate of one already stored.

    Raises:
        PublishError: not acknowledged (broker down, timeout, producer unusable). The record may
            still have been stored; callers retry and consumers drop duplicates.
    """
    try:
        future = producer.send(topic, key=key, value=value, headers=headers)
        return future.get(timeout=timeout_s)
    except KafkaError as e:
        raise PublishError(f"record for topic {topic!r} not acknowledged: {e!r}") from e


def close_producer(producer: KafkaProducer, timeout_s: float) -> None:
    """Close ``producer`` within about ``timeout_s``, aborting records still unacknowledged then."""
    try:
        producer.close(timeout=timeout_s)
    except KafkaError:
        # kafka-python's close() flushes first and raises, leaving its sender thread running,
        # while records are pending; force the sender down (failing those records) and close again.
        sender = getattr(producer, "_sender", None)
        if sender is None:
            raise
        sender.force_close()
        sender.join(_FORCE_CLOSE_JOIN_S)
        producer.close(timeout=0)


class Publisher:
    """Publishes records one at a time and replaces its producer after any failure.

    A failed idempotent producer can be unusable for good: after the broker loses its state
    (Tansu restarted with memory storage) kafka-python fails with UnknownProducerIdError and cannot
    re-initialise. Starting over with a fresh producer on the next call recovers.
    """

    def __init__(self, bootstrap: str, **overrides: Any) -> None:
        self.bootstrap = bootstrap
        self._overrides = overrides
        self._producer: KafkaProducer | None = None

    def publish(self, topic: str, key: bytes | None, value: bytes, *, timeout_s: float = 30.0) -> RecordMetadata:
        """``publish_and_wait`` on the current producer (created on demand); discards it on failure."""
        if self._producer is None:
            try:
                settings = {"bootstrap_timeout_ms": int(timeout_s * 1000), **self._overrides}
                self._producer = producer(self.bootstrap, **settings)
            except KafkaError as e:
                raise PublishError(f"cannot create a producer for {self.bootstrap}: {e!r}") from e
        try:
            return publish_and_wait(self._producer, topic, key, value, timeout_s=timeout_s)
        except PublishError:
            self._discard()
            raise

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush and close the producer; records not acknowledged within ``timeout_s`` are dropped."""
        p, self._producer = self._producer, None
        if p is not None:
            close_producer(p, timeout_s)

    def _discard(self) -> None:
        # records still queued in a failed producer are aborted, not delivered behind our back later
        p, self._producer = self._producer, None
        if p is not None:
            close_producer(p, 0.0)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
