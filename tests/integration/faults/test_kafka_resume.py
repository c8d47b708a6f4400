"""A partition paused for back-pressure is fetched again once resumed, also after a broker restart.

Found by the fault harness: after the broker lost its storage, the writer paused a partition whose table
was full and never read it again (kafka-python 3.0.12 kept the records it had parked for the paused
partition; see `kafka_ingest.resume`).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from lsmlake.kafka.broker import EmbeddedBroker, ensure_topics
from lsmlake.kafka.client import consumer, producer
from writer_svc.kafka_ingest import free_parked_records, resume

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, n: int, partitions: int) -> None:
    p = producer(bootstrap)
    try:
        for i in range(n):
            p.send("t", partition=i % partitions, value=b"%d" % i)
        p.flush(timeout=30)
    finally:
        p.close(timeout=5)


def test_a_paused_partition_is_read_again_after_a_broker_restart() -> None:
    with EmbeddedBroker() as broker:
        ensure_topics(broker.bootstrap, ["t"], 1, timeout_s=30)
        _produce(broker.bootstrap, 300, 1)
        # metadata every second: the new broker's partitions are learnt from a metadata refresh, which would
        # otherwise come after kafka-python's default 5 minutes
        c = consumer(broker.bootstrap, "g", ["t"], max_poll_records=500, metadata_max_age_ms=1_000)
        try:
            seen, deadline = 0, time.monotonic() + 60
            while seen < 300:
                assert time.monotonic() < deadline, f"read {seen} of the first 300 records"
                seen += sum(len(r) for r in c.poll(timeout_ms=200).values())
            broker.kill()
            broker.start()  # memory storage: a new, empty log
            _produce(broker.bootstrap, 6000, 2)  # two partitions of the 4 the new broker creates
            # the consumer learns of the new partitions at its next metadata refresh and rebalance, which a
            # loaded machine can delay past the reading loop's deadline: wait for them first (bounded)
            deadline = time.monotonic() + 120
            while not {0, 1} <= {tp.partition for tp in c.assignment()}:
                assert time.monotonic() < deadline, \
                    f"partitions 0 and 1 never assigned: {c.assignment()}, known: {c.partitions_for_topic('t')}"
                c.poll(timeout_ms=200)
            for tp in c.assignment():
                c.seek_to_beginning(tp)
            got: dict[int, list[int]] = {0: [], 1: []}
            paused: set[Any] = set()
            deadline = time.monotonic() + 60
            while sum(map(len, got.values())) < 6000:
                assert time.monotonic() < deadline, f"read {[len(v) for v in got.values()]} of 3000 records each"
                for tp, records in c.poll(timeout_ms=200).items():
                    if tp not in paused and records[0].offset >= 500:
                        # what the writer does when a table refuses the rows: back to the first, pause, resume
                        # later; both partitions at once
                        paused.add(tp)
                        c.seek(tp, records[0].offset)
                        c.pause(tp)
                        continue
                    got[tp.partition] += [r.offset for r in records]
                if len(paused) == 2 and c.paused():
                    for _ in range(5):
                        c.poll(timeout_ms=200)
                    for tp in paused:
                        resume(c, tp)
                free_parked_records(c)  # as the writer does before every poll
            assert len(paused) == 2 and got == {0: list(range(3000)), 1: list(range(3000))}
        finally:
            c.close(autocommit=False)
