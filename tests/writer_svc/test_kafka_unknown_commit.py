"""Kafka ingestion after a commit whose outcome is unknown: the same commit is sent again, never the rows twice.

The catalog here is real (gRPC on loopback, in process), and so is the broker. Only the writer's view of
one reply is taken away: its first commit reaches the catalog two seconds late, and the writer is told
the outcome is unknown at once, as when the catalog's reply is lost while the commit is still under way.
Rewinding at that moment (what the writer did before) reads the rows again from the snapshots' offsets
and commits them under a new identifier, and the late first attempt lands too: an append table holds them
twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import CommitStateUnknownError
from lsmlake.kafka.broker import EmbeddedBroker, ensure_topics
from lsmlake.kafka.client import producer
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.table.write import CommitMessage
from tests.support.local_server import local_server
from writer_svc.kafka_ingest import KafkaIngest, parse_ingest
from writer_svc.metrics import WriterMetrics

pytestmark = pytest.mark.integration

ROWS = 200


class LateFirstCommit(CatalogClient):
    """The first commit is delivered to the catalog after `delay_s`, and reported unknown at once."""

    def __init__(self, target: str, delay_s: float) -> None:
        super().__init__(target)
        self.delay_s = delay_s
        self.late: threading.Thread | None = None

    def commit(self, table_id: str, user: str, identifier: int, messages: Sequence[CommitMessage],
               properties: dict[str, str] | None = None, request_ids: Sequence[str] = (), table_uuid: str = "") -> int:
        if self.late is None:
            def deliver() -> None:
                time.sleep(self.delay_s)
                super(LateFirstCommit, self).commit(table_id, user, identifier, messages, properties, request_ids,
                                                    table_uuid)
            self.late = threading.Thread(target=deliver, daemon=True)
            self.late.start()
            raise CommitStateUnknownError(f"commit {identifier}: the reply was lost (test)")
        return super().commit(table_id, user, identifier, messages, properties, request_ids, table_uuid)


def test_an_unknown_commit_is_resent_until_definite_and_its_rows_land_once(tmp_path: Path) -> None:
    warehouse = str(tmp_path)
    with EmbeddedBroker() as broker, local_server(warehouse) as cat:
        cat.create_table("db", "log", [("id", "BIGINT NOT NULL"), ("v", "STRING")], [], {"bucket": "-1"})
        topic = "lake.ingest.db.log"
        ensure_topics(broker.bootstrap, [topic, "lake.deadletter.db.log"], 4, timeout_s=30)
        p = producer(broker.bootstrap)
        for i in range(ROWS):
            p.send(topic, key=str(i).encode(), value=json.dumps({"id": i, "v": f"r{i}"}).encode())
        p.flush(timeout=30)
        p.close(timeout=5)
        client = LateFirstCommit(f"127.0.0.1:{cat.server.port}", delay_s=2.0)
        ingest = KafkaIngest(broker.bootstrap, [parse_ingest("db.log:json")], warehouse, client, WriterMetrics(),
                             "w", commit_interval_s=0.2, spill_root=str(tmp_path / "spill")).start()
        try:
            table = FileSystemCatalog(warehouse).get_table("db.log")
            deadline = time.monotonic() + 90
            rows: list[Any] = []
            while len(rows) < ROWS and time.monotonic() < deadline:
                time.sleep(0.2)
                rows = table.to_arrow()["id"].to_pylist() if table.snapshots.latest_id() else []
            assert client.late is not None
            client.late.join(30)
            time.sleep(2.0)  # the writer's next commits, if it read anything again, land in this time
            ids = table.to_arrow()["id"].to_pylist()
            assert sorted(ids) == list(range(ROWS)), f"{len(ids)} rows for {ROWS} messages"
        finally:
            ingest.stop()
            client.close()
