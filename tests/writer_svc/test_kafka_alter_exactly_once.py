"""Kafka ingestion across an ALTER TABLE and a crash: every message's row lands once.

Exactly once rests on one rule: rows read from Kafka are committed only together with their partitions'
offsets. A writer that adopted an altered table's schema by committing the rows it had buffered under the
old one broke it: that commit carried no offsets, so a writer killed before its next commit rewound, on
restart, to the older offsets the snapshots recorded, read those messages again and appended them twice.

Real processes and broker: a catalog in the test process, the writer as a process killed with SIGKILL, Tansu.
The message sent after the ALTER leaves the new column out: one that names it is refused by the old schema,
which takes another path (the ingestion reads again from the snapshots' offsets, never committing).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import tests.support.writer_procs as procs
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.ingest.kafka_offsets import committed_offsets
from lsmlake.kafka.broker import EmbeddedBroker, ensure_topics, free_port
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from tests.support.local_server import TIMEOUT_S, local_server
from tests.writer_svc.test_writer_process import produce

pytestmark = pytest.mark.integration

TABLE = "db.log"
TOPIC = "lake.ingest.db.log"
COMMITTED = 10  # messages committed (with their offsets) before the writer that is killed starts
BUFFERED = 20  # messages that writer holds, uncommitted, when the table is altered
SETTLE_S = 180.0  # a writer restarted after a kill waits for the dead member to leave the group (6 s)


def _messages(ids: range) -> list[tuple[bytes, bytes | None]]:
    return [(str(i).encode(), json.dumps({"id": i, "v": f"m{i}"}).encode()) for i in ids]


def _rows_consumed(metrics_port: int) -> float:
    """Messages the writer turned into buffered rows since it started (its `rows` outcome counter)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "lsmlake_writer_kafka_messages_total" and s.labels.get("topic") == TOPIC
               and s.labels.get("outcome") == "rows")


def _wait(what: str, done: Callable[[], bool], writer: procs.Service, timeout_s: float = SETTLE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout_s} s: {writer.tail()}"
        time.sleep(0.2)  # polling, bounded by the deadline


def test_rows_buffered_before_an_alter_are_not_committed_twice_after_a_kill(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    with EmbeddedBroker() as broker, local_server(str(warehouse)) as cat:
        ident = cat.create_table("db", "log", [("id", "BIGINT NOT NULL"), ("v", "STRING")], [], {"bucket": "-1"})
        ensure_topics(broker.bootstrap, [TOPIC, "lake.deadletter.db.log"], 4, timeout_s=30)
        ingest = ["--kafka", broker.bootstrap, "--ingest", f"{TABLE}:json"]
        catalog = FileSystemCatalog(str(warehouse))

        sent: dict[int, int] = {}  # the next offset of every partition written to

        def send(ids: range) -> None:
            for p, o in produce(broker.bootstrap, TOPIC, _messages(ids)).items():
                sent[p] = max(o, sent.get(p, 0))

        def settled() -> bool:
            return committed_offsets(catalog, TABLE, TOPIC, list(sent)) == sent

        # 1. offsets in the snapshots, as a writer running for a while leaves them
        writer = procs.writer(warehouse, cat.server.port, *ingest, "--commit-interval", "0.3")
        try:
            send(range(COMMITTED))
            _wait("committing the first messages", settled, writer)
        finally:
            assert writer.stop() == 0, writer.tail()
        before = catalog.get_table(TABLE).snapshots.latest_id()

        # 2. a writer that commits only once an hour holds messages; the table is altered; one more comes
        metrics_port = free_port()
        writer = procs.writer(warehouse, cat.server.port, *ingest, "--commit-interval", "3600",
                              "--metrics-port", str(metrics_port))
        try:
            send(range(COMMITTED, COMMITTED + BUFFERED))
            _wait("buffering the messages", lambda: _rows_consumed(metrics_port) >= BUFFERED, writer)
            assert catalog.get_table(TABLE).snapshots.latest_id() == before, "the rows were committed, not buffered"
            cat.stub.AlterTable(catalog_pb2.AlterTableRequest(table=ident, changes=[
                catalog_pb2.SchemaChange(add_column=catalog_pb2.AddColumn(name="note", type="STRING"))]),
                timeout=TIMEOUT_S)
            last = COMMITTED + BUFFERED
            send(range(last, last + 1))
            _wait("buffering the message sent after the ALTER",
                  lambda: _rows_consumed(metrics_port) >= BUFFERED + 1, writer)
            time.sleep(1.0)  # a poll under way (reading again, say) finishes: the kill finds it at rest
        finally:
            writer.kill()  # SIGKILL: no final commit
        committed_unknowingly = catalog.get_table(TABLE).snapshots.latest_id() != before

        # 3. a restart reads from the offsets in the snapshots and commits every message once
        writer = procs.writer(warehouse, cat.server.port, *ingest, "--commit-interval", "0.3")
        try:
            _wait("committing every message after the restart", settled, writer)
            time.sleep(2.0)  # anything read twice is committed in this time
        finally:
            assert writer.stop() == 0, writer.tail()
        rows = catalog.get_table(TABLE).to_arrow().to_pylist()
        ids = sorted(r["id"] for r in rows)
        twice = sorted({i for i in ids if ids.count(i) > 1})
        assert ids == list(range(last + 1)), (
            f"{len(ids)} rows for {last + 1} messages; read twice: {twice}; the killed writer "
            f"{'committed' if committed_unknowingly else 'did not commit'} before the kill")
        assert all(r["v"] == f"m{r['id']}" and r["note"] is None for r in rows)
