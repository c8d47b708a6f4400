"""The embedded Tansu broker and the kafka-python helpers, against a real broker process.

Completeness is proven with sentinels, not with timed drains or ``end_offsets`` (Tansu's ListOffsets
lags): after the data, one sentinel per partition is produced; once a consumer has seen every
sentinel it has seen everything stored before them.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata, TopicPartition

from lsmlake.kafka.broker import (
    BrokerBinaryNotFoundError,
    BrokerStartError,
    EmbeddedBroker,
    TopicMismatchError,
    ensure_topics,
)
from lsmlake.kafka.client import Publisher, PublishError, consumer, producer, publish_and_wait

PARTITIONS = 4
TIMEOUT_S = 30.0
KEYS = 20  # murmur2 puts at least two of k0..k19 on each of the 4 partitions


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _event(key: str, seq: int) -> bytes:
    return json.dumps({"key": key, "seq": seq}).encode()


def _publish_sentinels(p: KafkaProducer, topic: str, tag: str) -> None:
    for part in range(PARTITIONS):
        p.send(topic, value=f"end:{tag}".encode(), partition=part).get(timeout=TIMEOUT_S)


def _consume_through_sentinels(c: KafkaConsumer, tag: str) -> list[Any]:
    """Data records polled until the sentinel ``tag`` was seen on every partition (bounded)."""
    deadline = time.monotonic() + TIMEOUT_S
    data: list[Any] = []
    seen: set[int] = set()
    while len(seen) < PARTITIONS:
        assert time.monotonic() < deadline, f"sentinels seen on {sorted(seen)} only, {len(data)} records"
        for records in c.poll(timeout_ms=200).values():
            for r in records:
                if not r.value.startswith(b"end:"):
                    data.append(r)
                elif r.value == f"end:{tag}".encode():
                    seen.add(r.partition)
    return data


@pytest.mark.integration
def test_keyed_messages_arrive_once_in_key_order_and_the_group_resumes_from_its_commit(
    broker: EmbeddedBroker,
) -> None:
    topic, group = _name("events"), _name("group")
    ensure_topics(broker.bootstrap, [topic], PARTITIONS)
    ensure_topics(broker.bootstrap, [topic], PARTITIONS)  # idempotent
    p = producer(broker.bootstrap)
    try:
        acked = {}
        for seq in range(200):
            md = publish_and_wait(p, topic, f"k{seq % KEYS}".encode(), _event(f"k{seq % KEYS}", seq))
            acked[seq] = (md.partition, md.offset)
        _publish_sentinels(p, topic, "1")

        c1 = consumer(broker.bootstrap, group, [topic])
        try:
            first = _consume_through_sentinels(c1, "1")
            # exactly once, where the broker acknowledged it
            seqs = [json.loads(r.value)["seq"] for r in first]
            assert sorted(seqs) == list(range(200))
            assert {json.loads(r.value)["seq"]: (r.partition, r.offset) for r in first} == acked
            # one key, one partition, in publish order
            by_key: dict[str, list[Any]] = defaultdict(list)
            for r in first:
                by_key[r.key.decode()].append(r)
            for key, records in by_key.items():
                assert len({r.partition for r in records}) == 1, key
                in_offset_order = [json.loads(r.value)["seq"] for r in sorted(records, key=lambda r: r.offset)]
                assert in_offset_order == sorted(in_offset_order), key
            # commit halfway through each partition: the rest must come again
            commit_at = {}
            for part in range(PARTITIONS):
                offsets = sorted(r.offset for r in first if r.partition == part)
                assert offsets, f"partition {part} got no key"
                commit_at[part] = offsets[len(offsets) // 2]
            c1.commit({TopicPartition(topic, part): OffsetAndMetadata(o, "", -1) for part, o in commit_at.items()})
            for part, o in commit_at.items():
                assert c1.committed(TopicPartition(topic, part)) == o
        finally:
            c1.close(autocommit=False)

        more = {}
        for seq in range(200, 220):
            md = publish_and_wait(p, topic, f"k{seq % KEYS}".encode(), _event(f"k{seq % KEYS}", seq))
            more[seq] = (md.partition, md.offset)
        _publish_sentinels(p, topic, "2")
    finally:
        p.close(timeout=5)

    c2 = consumer(broker.bootstrap, group, [topic])
    try:
        second = _consume_through_sentinels(c2, "2")
    finally:
        c2.close(autocommit=False)
    got = [(r.partition, r.offset) for r in second]
    expected = {po for po in acked.values() if po[1] >= commit_at[po[0]]} | set(more.values())
    assert len(got) == len(set(got)), "a record came twice"
    assert set(got) == expected
    for part, o in commit_at.items():
        assert min(off for pa, off in got if pa == part) == o


@pytest.mark.integration
def test_idempotent_producer_stores_a_resent_batch_once(broker: EmbeddedBroker) -> None:
    topic = _name("dup")
    ensure_topics(broker.bootstrap, [topic], PARTITIONS)
    p = producer(broker.bootstrap)
    client = getattr(getattr(p, "_sender", None), "_client", None)
    if client is None:
        p.close(timeout=0)
        pytest.skip("kafka-python internals changed; cannot inject a resend")
    send = client.send

    def send_twice(node_id: Any, request: Any, **kw: Any) -> Any:
        # a retry after a lost reply: the same batch (same producer id and sequence) arrives twice
        if type(request).__name__.startswith("ProduceRequest"):
            send(node_id, request, **kw)
        return send(node_id, request, **kw)

    client.send = send_twice
    try:
        for seq in range(10):
            publish_and_wait(p, topic, b"one-key", _event("one-key", seq))
    finally:
        client.send = send
    _publish_sentinels(p, topic, "1")
    p.close(timeout=5)

    c = consumer(broker.bootstrap, _name("group"), [topic])
    try:
        stored = [json.loads(r.value)["seq"] for r in _consume_through_sentinels(c, "1")]
    finally:
        c.close(autocommit=False)
    assert stored == list(range(10))


@pytest.mark.integration
def test_a_killed_broker_comes_back_empty_and_the_helpers_recover() -> None:
    topic, canary, group = _name("events"), _name("canary"), _name("group")
    with EmbeddedBroker() as b, Publisher(b.bootstrap) as pub:
        ensure_topics(b.bootstrap, [topic, canary], PARTITIONS)
        for seq in range(10):
            pub.publish(topic, f"k{seq}".encode(), _event(f"k{seq}", seq))
        c = consumer(b.bootstrap, group, [topic])
        try:
            p = producer(b.bootstrap)
            _publish_sentinels(p, topic, "before")
            p.close(timeout=5)
            assert len(_consume_through_sentinels(c, "before")) == 10
            c.commit()
        finally:
            c.close(autocommit=False)

        port, pid = b.port, b.pid
        b.kill()
        assert not b.running
        b.start()
        assert (b.port, b.bootstrap) == (port, f"127.0.0.1:{port}") and b.pid != pid

        # Memory storage: topics are gone. (Only the canary proves it: a client that still knows
        # `topic` may already have re-created it through a metadata request.)
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        try:
            assert canary not in admin.list_topics()
        finally:
            admin.close()

        ensure_topics(b.bootstrap, [topic], PARTITIONS)
        # The Publisher's old idempotent producer is unknown to the new broker; its next attempt
        # fails and the one after that runs on a fresh producer.
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                pub.publish(topic, b"k0", _event("k0", 100), timeout_s=5)
                break
            except PublishError:
                assert time.monotonic() < deadline, "publishing never recovered after the restart"
        for seq in range(101, 110):
            pub.publish(topic, f"k{seq % 10}".encode(), _event(f"k{seq % 10}", seq))
        p = producer(b.bootstrap)
        _publish_sentinels(p, topic, "after")
        p.close(timeout=5)

        # The group's committed offsets went with the memory: it starts from the earliest again.
        c = consumer(b.bootstrap, group, [topic])
        try:
            seqs = [json.loads(r.value)["seq"] for r in _consume_through_sentinels(c, "after")]
        finally:
            c.close(autocommit=False)
        assert sorted(seqs) == list(range(100, 110))


@pytest.mark.integration
def test_ensure_topics_refuses_a_topic_with_another_partition_count(broker: EmbeddedBroker) -> None:
    topic = _name("sized")
    ensure_topics(broker.bootstrap, [topic], PARTITIONS)
    with pytest.raises(TopicMismatchError, match="has 4 partitions, expected 8"):
        ensure_topics(broker.bootstrap, [topic], 8)


@pytest.mark.integration
def test_stop_is_graceful_and_restart_keeps_the_port() -> None:
    with EmbeddedBroker() as b:
        port = b.port
        assert b.stop() == 0  # SIGTERM is enough; no SIGKILL needed
        assert not b.running
        b.restart()
        assert b.running and b.port == port
        ensure_topics(b.bootstrap, [_name("after-restart")], PARTITIONS)
    assert not b.running and not b.log_dir.exists()


@pytest.mark.integration
def test_a_taken_port_is_refused_not_mistaken_for_our_broker() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        b = EmbeddedBroker(port=taken.getsockname()[1])
        with pytest.raises(BrokerStartError, match="already in use"):
            b.start()
        assert not b.running
        b.close()


def test_a_missing_binary_is_a_clear_error(tmp_path: Any) -> None:
    with pytest.raises(BrokerBinaryNotFoundError, match="not an executable file"):
        EmbeddedBroker(binary=str(tmp_path / "tansu"))
