"""A running writer takes the rows of a table's new schema on the first try, after the table was dropped and
created again with more columns (or altered): it loads the table again before refusing a field it does not know.

Clients treat INVALID_ARGUMENT as final, and a Kafka message refused for an unknown field goes to the dead-letter
topic for good; neither may come from the writer's own out-of-date view of the table. The writer and the catalog
are real (gRPC on loopback, in the test process), and so is the broker of the Kafka test.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.kafka.broker import EmbeddedBroker, ensure_topics
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2, writer_pb2, writer_pb2_grpc
from lsmlake.rpc.catalog_client import CatalogClient
from tests.support.local_server import Local, local_server
from tests.writer_svc.test_writer_local import TIMEOUT_S, write_requests
from tests.writer_svc.test_writer_process import produce
from writer_svc.kafka_ingest import KafkaIngest, parse_ingest
from writer_svc.metrics import WriterMetrics
from writer_svc.server import Settings, WriterServer

OLD = [("id", "BIGINT NOT NULL"), ("a", "STRING")]
NEW = [*OLD, ("b", "STRING")]
SETTLE_S = 60.0


class Cluster:
    def __init__(self, catalog: Local, writer: WriterServer) -> None:
        self.catalog = catalog
        self.channel = grpc.insecure_channel(f"127.0.0.1:{writer.port}")
        self.stub = writer_pb2_grpc.WriterServiceStub(self.channel)

    def rows(self, table_id: str) -> list[dict[str, Any]]:
        return sorted(FileSystemCatalog(self.catalog.warehouse).get_table(table_id).to_arrow().to_pylist(),
                      key=lambda r: r["id"])

    def recreate(self, ident: common_pb2.TableIdentifier) -> None:
        """Drop the table and create it again under the same name with column `b` added."""
        self.catalog.stub.DropTable(catalog_pb2.DropTableRequest(table=ident), timeout=TIMEOUT_S)
        self.catalog.create_table(ident.database, ident.table, NEW, ["id"], {"bucket": "1"})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with local_server(str(tmp_path)) as cat:
        writer = WriterServer(Settings(warehouse=str(tmp_path), catalog=f"127.0.0.1:{cat.server.port}",
                                       commit_interval_s=0.2, metrics_port=0))
        writer.start()
        c = Cluster(cat, writer)
        try:
            yield c
        finally:
            c.channel.close()
            writer.stop()


def _rows(stub: writer_pb2_grpc.WriterServiceStub, ident: common_pb2.TableIdentifier, *rows: dict[str, Any]) -> None:
    stub.WriteRows(writer_pb2.WriteRowsRequest(table=ident, rows_json=[json.dumps(r) for r in rows],
                                               options={"commit": "now"}), timeout=TIMEOUT_S)


def _arrow(stub: writer_pb2_grpc.WriterServiceStub, ident: common_pb2.TableIdentifier, *rows: dict[str, Any]) -> None:
    table = pa.Table.from_pylist(list(rows)).cast(pa.schema(
        [pa.field("id", pa.int64(), nullable=False), *(pa.field(n, pa.string()) for n in list(rows[0])[1:])]))
    stub.Write(write_requests(ident, table, options={"commit": "now"}), timeout=TIMEOUT_S)


Send = Callable[[writer_pb2_grpc.WriterServiceStub, common_pb2.TableIdentifier, dict[str, Any]], None]


@pytest.mark.parametrize("send", [_rows, _arrow], ids=["WriteRows", "Write"])
def test_rows_of_a_table_created_again_with_a_new_column_are_taken_at_once(cluster: Cluster, send: Send) -> None:
    ident = cluster.catalog.create_table("db", "t", OLD, ["id"], {"bucket": "1"})
    send(cluster.stub, ident, {"id": 1, "a": "old"})  # the writer now holds t(id, a)
    cluster.recreate(ident)
    send(cluster.stub, ident, {"id": 2, "a": "new", "b": "kept"})  # the first try
    assert cluster.rows("db.t") == [{"id": 2, "a": "new", "b": "kept"}]
    send(cluster.stub, ident, {"id": 3, "a": "x"})  # rows that the old schema took go to the new table too
    assert cluster.rows("db.t")[-1] == {"id": 3, "a": "x", "b": None}


def test_rows_of_an_altered_table_are_taken_at_once(cluster: Cluster) -> None:
    ident = cluster.catalog.create_table("db", "alt", OLD, ["id"], {"bucket": "1"})
    _rows(cluster.stub, ident, {"id": 1, "a": "before"})
    cluster.catalog.stub.AlterTable(catalog_pb2.AlterTableRequest(table=ident, changes=[
        catalog_pb2.SchemaChange(add_column=catalog_pb2.AddColumn(name="b", type="STRING"))]), timeout=TIMEOUT_S)
    _rows(cluster.stub, ident, {"id": 2, "a": "after", "b": "new"})
    assert cluster.rows("db.alt") == [{"id": 1, "a": "before", "b": None}, {"id": 2, "a": "after", "b": "new"}]


def test_a_field_no_schema_has_is_still_refused_after_the_writer_looked_again(cluster: Cluster) -> None:
    ident = cluster.catalog.create_table("db", "r", OLD, ["id"], {"bucket": "1"})
    _rows(cluster.stub, ident, {"id": 1, "a": "x"})
    cluster.recreate(ident)
    with pytest.raises(grpc.RpcError) as e:
        _rows(cluster.stub, ident, {"id": 2, "a": "y", "colour": "red"})
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert 'field "colour" is not a column of db.r (columns: id, a, b)' in e.value.details()
    assert cluster.rows("db.r") == []


@pytest.mark.integration
def test_kafka_messages_of_a_table_created_again_are_rows_not_dead_letters(tmp_path: Path) -> None:
    warehouse = str(tmp_path)
    topic = "lake.ingest.db.k"
    with EmbeddedBroker() as broker, local_server(warehouse) as cat:
        ident = cat.create_table("db", "k", OLD, ["id"], {"bucket": "1"})
        ensure_topics(broker.bootstrap, [topic, "lake.deadletter.db.k"], 2, timeout_s=30)
        client = CatalogClient(f"127.0.0.1:{cat.server.port}")
        metrics = WriterMetrics()
        ingest = KafkaIngest(broker.bootstrap, [parse_ingest("db.k:json")], warehouse, client, metrics, "w",
                             commit_interval_s=0.2, spill_root=str(tmp_path / "spill"), topic_partitions=2).start()
        try:
            produce(broker.bootstrap, topic, [(b"1", json.dumps({"id": 1, "a": "old"}).encode())])
            _wait_for(warehouse, "db.k", [{"id": 1, "a": "old"}])
            cat.stub.DropTable(catalog_pb2.DropTableRequest(table=ident), timeout=TIMEOUT_S)
            cat.create_table("db", "k", NEW, ["id"], {"bucket": "1"})
            produce(broker.bootstrap, topic, [(b"2", json.dumps({"id": 2, "a": "new", "b": "kept"}).encode())])
            _wait_for(warehouse, "db.k", [{"id": 2, "a": "new", "b": "kept"}])
            dead = metrics.registry.get_sample_value("lsmlake_writer_kafka_messages_total",
                                                     {"topic": topic, "outcome": "dead_letter"})
            assert not dead, f"{dead} message(s) went to the dead-letter topic"
        finally:
            ingest.stop()
            client.close()


def _wait_for(warehouse: str, table_id: str, rows: list[dict[str, Any]]) -> None:
    deadline = time.monotonic() + SETTLE_S
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        table = FileSystemCatalog(warehouse).get_table(table_id)
        got = sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"]) if table.snapshots.latest_id() else []
        if got == rows:
            return
        time.sleep(0.2)  # polling, bounded by the deadline
    raise AssertionError(f"{table_id} holds {got}, not {rows}, after {SETTLE_S} s")
