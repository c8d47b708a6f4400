"""A writer and a catalog (real processes) on a warehouse whose storage fails for a while, then recovers.

Both services run with the storage faults of `@<control file>` (`tests.support.faulty_service`); the
test rewrites the control file to fill the "disk", to fill it only for the commit's metadata (so the
catalog refuses commits that the writer must retry), to make it slow, and to free it. Meanwhile gRPC
writes and Kafka messages keep coming. Both tables sum a `cnt` of 1 per row, so a row applied twice
shows as 2. Checked at the end: every acknowledged gRPC row exactly once, no row of a refused write,
every Kafka message exactly once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.client.client import Client
from lsmlake.errors import StorageError
from lsmlake.kafka.broker import EmbeddedBroker
from lsmlake.kafka.client import close_producer, producer
from tests.integration.interop.test_interop_pypaimon import pypaimon_read

# no compactor runs here: level 0 may grow without stalling the writes
OPTIONS = {"bucket": "2", "merge-engine": "aggregation", "fields.cnt.aggregate-function": "sum",
           "num-sorted-run.stop-trigger": "1000"}
TOPIC = "lake.ingest.db.k"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(log_dir=tmp_path) as b:
        yield b


class Producer:
    """Sends `{"id", "cnt": 1}` messages at a steady pace on a thread; counts the acknowledged ones per key."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[int, int] = {}
        self.failed = 0
        self._stop = threading.Event()
        self._p = producer(bootstrap, linger_ms=10)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(0.05):  # about 20 batches a second, bounded by stop()
            futures = []
            for _ in range(10):
                k = n % 500
                n += 1
                futures.append((k, self._p.send(TOPIC, key=str(k).encode(),
                                                value=json.dumps({"id": k, "cnt": 1}).encode())))
            for k, f in futures:
                try:
                    f.get(timeout=30)
                    self.acked[k] = self.acked.get(k, 0) + 1
                except Exception:
                    self.failed += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        close_producer(self._p, 10)


def _batch(ids: np.ndarray) -> pa.Table:
    return pa.table({"id": ids, "cnt": np.ones(len(ids), np.int64)})


def test_writes_fail_cleanly_while_the_disk_is_full_and_nothing_acknowledged_is_lost(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    control = tmp_path / "faults"
    control.write_text("")
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    cat = procs.catalog(warehouse, broker.bootstrap, faults=f"@{control}")
    writer = None
    prod = None
    try:
        writer = procs.writer(warehouse, cat.port, "--kafka", broker.bootstrap, "--ingest", "db.k:json",
                              "--commit-interval", "0.3", faults=f"@{control}")
        client = Client(f"127.0.0.1:{cat.port}", writer=f"127.0.0.1:{writer.port}", timeout_s=40)
        client.create_database("db")
        client.create_table("db.g", "id BIGINT NOT NULL, cnt BIGINT", primary_keys=["id"], options=OPTIONS)
        client.create_table("db.k", "id BIGINT NOT NULL, cnt BIGINT", primary_keys=["id"], options=OPTIONS)
        prod = Producer(broker.bootstrap)
        acked: list[np.ndarray] = []
        refused: list[np.ndarray] = []
        next_id = iter(range(0, 10**9, 100))

        impatient = Client(f"127.0.0.1:{cat.port}", writer=f"127.0.0.1:{writer.port}", timeout_s=8)

        def write_batch(c: Client = client) -> StorageError | None:
            start = next(next_id)
            ids = np.arange(start, start + 100, dtype=np.int64)
            try:
                c.write("db.g", _batch(ids), commit_now=True)
            except StorageError as e:  # the writer's full disk, by its own class (not guessed from the code)
                refused.append(ids)
                return e
            acked.append(ids)
            return None

        # 1. healthy storage
        for _ in range(3):
            assert write_batch() is None
        g = FileSystemCatalog(str(warehouse)).get_table("db.g")

        # 2. the disk stays full: the writer retries its flush until shortly before the client's deadline (8 s),
        #    then the Write fails with a StorageError naming the problem, and changes nothing
        control.write_text("enospc-after-bytes=0")
        before = g.snapshots.latest_id()
        for _ in range(2):
            e = write_batch(impatient)
            assert e is not None, "a write succeeded on a full disk"
            assert "No space left on device" in str(e), str(e)
        assert g.snapshots.latest_id() == before, "a snapshot was published on a full disk"

        # 3. the disk is full for a moment: the writer retries its flush and the Write succeeds once space is back
        flush_retries = "table db.g: flushing the group failed"
        seen = writer.tail(10**7).count(flush_retries)
        results: list[StorageError | None] = []
        t = threading.Thread(target=lambda: results.append(write_batch()))
        t.start()
        deadline = time.monotonic() + 30
        while writer.tail(10**7).count(flush_retries) < seen + 3:
            assert time.monotonic() < deadline, f"the writer never retried its flush: {writer.tail()}"
            time.sleep(0.2)  # polling interval, bounded by the deadline
        assert t.is_alive(), "the write returned while the disk was full"
        control.write_text("")
        t.join(60)
        assert results == [None], f"the retried flush did not succeed: {results}"
        assert g.snapshots.latest_id() > before

        # 4. only the commit's metadata cannot be written: the catalog refuses, the writer retries the same
        #    commit, and the write is acknowledged once the space comes back
        control.write_text("only=/manifest/,enospc-after-bytes=0")
        commit_retries = "of db.g refused"
        seen = writer.tail(10**7).count(commit_retries)
        results = []
        t = threading.Thread(target=lambda: results.append(write_batch()))
        t.start()
        deadline = time.monotonic() + 30
        while writer.tail(10**7).count(commit_retries) <= seen:
            assert time.monotonic() < deadline, f"the writer never retried a refused commit: {writer.tail()}"
            time.sleep(0.2)  # polling interval, bounded by the deadline
        assert t.is_alive(), "the write returned while the catalog could not commit"
        control.write_text("")
        t.join(60)
        assert results == [None], f"the retried commit did not succeed: {results}"

        # 5. slow storage: everything works, only slower
        control.write_text("latency-ms=40,read-latency-ms=2")
        for _ in range(3):
            assert write_batch() is None
        time.sleep(2.0)

        # 6. healthy again; the Kafka messages of every phase must all arrive, exactly once
        control.write_text("")
        for _ in range(2):
            assert write_batch() is None
        prod.stop()
        expected_kafka = dict(prod.acked)
        assert prod.failed == 0
        k_table = FileSystemCatalog(str(warehouse)).get_table("db.k")
        deadline = time.monotonic() + 120
        while True:
            got = {r["id"]: r["cnt"] for r in k_table.to_arrow().to_pylist()}
            if sum(got.values()) >= sum(expected_kafka.values()):
                break
            assert time.monotonic() < deadline, f"Kafka rows missing: {sum(got.values())} of " \
                                                f"{sum(expected_kafka.values())}: {writer.tail()}"
            time.sleep(0.5)  # polling interval, bounded by the deadline
        assert got == expected_kafka, "a Kafka message was lost or applied twice"

        rows = {r["id"]: r["cnt"] for r in g.to_arrow().to_pylist()}
        acked_ids = set(np.concatenate(acked).tolist())
        refused_ids = set(np.concatenate(refused).tolist())
        assert set(rows) == acked_ids, "an acknowledged row is missing or a refused one is present"
        assert set(rows.values()) == {1}, "a row was applied twice"
        assert not refused_ids & set(rows)
        theirs = {r["id"]: r["cnt"] for r in pypaimon_read(str(warehouse), "db.g").to_pylist()}
        assert theirs == rows
        client.close()
        impatient.close()
        assert writer.stop() == 0, writer.tail()
        writer = None
    finally:
        if prod is not None and not prod._stop.is_set():
            prod.stop()
        if writer is not None:
            writer.stop()
        cat.stop()
