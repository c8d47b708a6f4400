"""Kafka ingestion when the catalog answers back pressure while a full write buffer is flushed.

Flushing a full buffer asks the catalog for sequence numbers; when the catalog refuses (RESOURCE_EXHAUSTED:
its own back pressure, or gRPC's limit of concurrent calls, which carries no error detail), the writer fails
the whole group: every row buffered since the last commit is dropped, from every partition. Pausing only the
partition being read, as for the writer's own back pressure (a bucket over its stop trigger, refused before
anything is buffered), would leave the other partitions' offsets advanced past rows that are gone, and the
next commit would record them: rows lost without a trace. The catalog and the broker are real; only one
reply of the catalog is replaced by a refusal.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import BackPressureError
from lsmlake.kafka.broker import EmbeddedBroker, ensure_topics
from lsmlake.kafka.client import producer
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.errors import error_for
from tests.support.local_server import local_server
from writer_svc.kafka_ingest import KafkaIngest, parse_ingest
from writer_svc.metrics import WriterMetrics

pytestmark = pytest.mark.integration

ROWS = 4000


class _Exhausted(grpc.RpcError):
    """What gRPC raises when a server is over its limit of concurrent calls: a status without lsmlake's detail."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.RESOURCE_EXHAUSTED

    def details(self) -> str:
        return "Concurrent RPC limit exceeded!"

    def trailing_metadata(self) -> tuple[()]:
        return ()


class RefusesOnce(CatalogClient):
    """The first request for sequence numbers after `after` successful ones is refused with back pressure."""

    def __init__(self, target: str, after: int) -> None:
        super().__init__(target)
        self.after = after
        self.calls = 0
        self.refused: BackPressureError | None = None
        self._lock = threading.Lock()

    def allocate_sequences(self, table_id: str, counts: Mapping[tuple[bytes, int], int],
                           table_uuid: str = "") -> dict[tuple[bytes, int], int]:
        with self._lock:
            self.calls += 1
            refuse = self.refused is None and self.calls > self.after
            if refuse:
                error = error_for(_Exhausted(), changes_state=True, refused="the catalog refused sequence numbers")
                assert isinstance(error, BackPressureError), error
                self.refused = error
        if refuse:
            assert self.refused is not None
            raise self.refused
        return super().allocate_sequences(table_id, counts, table_uuid)


def test_back_pressure_from_the_catalog_mid_flush_loses_no_kafka_row(tmp_path: Path) -> None:
    warehouse = str(tmp_path)
    with EmbeddedBroker() as broker, local_server(warehouse) as cat:
        cat.create_table("db", "t", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"],
                         {"bucket": "2", "write-buffer-size": "64 kb", "write-buffer-spillable": "false"})
        topic = "lake.ingest.db.t"
        ensure_topics(broker.bootstrap, [topic, "lake.deadletter.db.t"], 4, timeout_s=30)
        p = producer(broker.bootstrap)
        for i in range(ROWS):
            p.send(topic, key=str(i).encode(), value=json.dumps({"id": i, "v": f"{i:08d}" * 12}).encode())
        p.flush(timeout=30)
        p.close(timeout=5)
        client = RefusesOnce(f"127.0.0.1:{cat.server.port}", after=2)
        ingest = KafkaIngest(broker.bootstrap, [parse_ingest("db.t:json")], warehouse, client, WriterMetrics(),
                             "w", commit_interval_s=5.0, spill_root=str(tmp_path / "spill")).start()
        try:
            table = FileSystemCatalog(warehouse).get_table("db.t")
            deadline = time.monotonic() + 120
            ids: list[int] = []
            while time.monotonic() < deadline:
                time.sleep(0.5)  # polling interval, bounded by the deadline
                if table.snapshots.latest_id() is None:
                    continue
                ids = table.to_arrow()["id"].to_pylist()
                if len(set(ids)) >= ROWS and client.refused is not None:
                    break
            assert client.refused is not None, "the catalog's refusal was never exercised: the buffer never filled"
            time.sleep(6.0)  # one more commit interval: offsets committed past lost rows would show now
            ids = table.to_arrow()["id"].to_pylist()
            assert sorted(ids) == list(range(ROWS)), f"{ROWS - len(set(ids))} of {ROWS} Kafka rows lost"
        finally:
            ingest.stop()
            client.close()
