"""Dynamic-bucket tables (`bucket = -1`) written by several writer-service replicas at once, over real gRPC.

The catalog service is the one bucket assigner of a table (`AssignBuckets`): two replicas that receive the
same new keys at the same moment, a replica restarted in between, and pypaimon writing the same table
directly all route each key to one bucket. Every key's rows are in the bucket its HASH index names, no key
is in two buckets, and pypaimon reads exactly the model's rows.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, writer_pb2_grpc
from lsmlake.table.compact import compact_table
from tests.support.dynamic_index import check_index
from tests.support.local_server import Local, local_server
from tests.support.pypaimon_io import read as pypaimon_read
from tests.support.pypaimon_io import write as pypaimon_write
from tests.writer_svc.test_writer_local import write_requests
from writer_svc.server import Settings, WriterServer

pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")

TIMEOUT_S = 60.0
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string()),
                    pa.field("pt", pa.string(), nullable=False)])
IDENT = common_pb2.TableIdentifier(database="db", table="t")


def _writer(cat: Local) -> WriterServer:
    w = WriterServer(Settings(warehouse=cat.warehouse, catalog=f"127.0.0.1:{cat.server.port}",
                              commit_interval_s=0.2, metrics_port=0))
    w.start()
    return w


@pytest.fixture
def cat(tmp_path: Path) -> Iterator[Local]:
    with local_server(str(tmp_path)) as c:
        yield c


def _write(writer: WriterServer, rows: list[dict[str, Any]]) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{writer.port}") as ch:
        reply = writer_pb2_grpc.WriterServiceStub(ch).Write(
            write_requests(IDENT, pa.Table.from_pylist(rows, schema=SCHEMA)), timeout=TIMEOUT_S)
    return int(reply.snapshot_id)


def test_writer_replicas_and_pypaimon_share_one_key_index(cat: Local) -> None:
    stub = catalog_pb2_grpc.CatalogServiceStub(grpc.insecure_channel(f"127.0.0.1:{cat.server.port}"))
    stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db"), timeout=TIMEOUT_S)
    stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=IDENT, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                              catalog_pb2.Column(name="v", type="STRING"),
                              catalog_pb2.Column(name="pt", type="STRING NOT NULL")],
        partition_keys=["pt"], primary_keys=["pt", "id"],
        options={"bucket": "-1", "dynamic-bucket.target-row-num": "7", "deletion-vectors.enabled": "true"}),
        timeout=TIMEOUT_S)
    a, b = _writer(cat), _writer(cat)
    model: dict[tuple[str, int], str] = {}
    try:
        for r in range(4):
            # both replicas get the same new keys at the same moment (the same values: which of two concurrent
            # writes wins is not defined, where each key goes is the question)
            batches = {w: [{"id": i, "v": f"r{r}", "pt": f"p{i % 2}"} for i in range(r * 6, r * 6 + 20)]
                       for w in (a, b)}
            snaps: dict[WriterServer, int] = {}
            threads = [threading.Thread(target=lambda w=w, rows=batches[w], out=snaps: out.__setitem__(
                w, _write(w, rows))) for w in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(TIMEOUT_S)
            assert len(snaps) == 2
            model.update({(x["pt"], x["id"]): x["v"] for x in batches[a]})
            if r == 1:  # a replica restarts between writes
                a.stop()
                a = _writer(cat)
        wh = cat.warehouse
        py = pypaimon.CatalogFactory.create({"warehouse": wh})
        rows = [{"id": i, "v": "py", "pt": f"p{i % 2}"} for i in range(20, 40)]
        pypaimon_write(py.get_table("db.t"), pa.Table.from_pylist(rows, schema=SCHEMA))
        model.update({(x["pt"], x["id"]): x["v"] for x in rows})
        _write(b, [{"id": i, "v": "last", "pt": f"p{i % 2}"} for i in range(35, 45)])
        model.update({(f"p{i % 2}", i): "last" for i in range(35, 45)})
    finally:
        a.stop()
        b.stop()
    compact_table(FileSystemCatalog(wh).get_table("db.t"))
    placed = check_index(wh)
    assert set(placed) == {(pt, i) for pt, i in model}
    got = {(x["pt"], x["id"]): x["v"] for x in pypaimon_read(py.get_table("db.t")).to_pylist()}
    assert got == model
    table = FileSystemCatalog(wh).get_table("db.t")
    assert {s.total_buckets for s in table.plan()} == {-1}
    # 7 keys per bucket at most: 23 keys per partition need at least 4 buckets
    assert all(n <= 7 for n in (e.row_count for e in table.indexes.read(table.snapshots.latest().index_manifest)))


def test_keys_move_between_partitions_through_every_writer_replica(cat: Local) -> None:
    """Cross-partition upsert (the primary key leaves out the partition key): replicas in turn move the same
    keys between partitions, one restarts in between; each key is read once, in the partition last written."""
    stub = catalog_pb2_grpc.CatalogServiceStub(grpc.insecure_channel(f"127.0.0.1:{cat.server.port}"))
    stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db"), timeout=TIMEOUT_S)
    stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=IDENT, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                              catalog_pb2.Column(name="v", type="STRING"),
                              catalog_pb2.Column(name="pt", type="STRING NOT NULL")],
        partition_keys=["pt"], primary_keys=["id"],
        options={"bucket": "-1", "dynamic-bucket.target-row-num": "5", "deletion-vectors.enabled": "true"}),
        timeout=TIMEOUT_S)
    a, b = _writer(cat), _writer(cat)
    model: dict[int, tuple[str, str]] = {}
    try:
        for r in range(6):
            writer = (a, b)[r % 2]
            rows = [{"id": i, "v": f"r{r}", "pt": f"p{(i + r) % 3}"} for i in range(r * 3, r * 3 + 12)]
            _write(writer, rows)  # acknowledged before the next is sent: the next one wins
            model.update({x["id"]: (x["v"], x["pt"]) for x in rows})
            if r == 2:
                a.stop()
                a = _writer(cat)
    finally:
        a.stop()
        b.stop()
    wh = cat.warehouse
    compact_table(FileSystemCatalog(wh).get_table("db.t"))
    assert set(check_index(wh)) == {(k,) for k in model}
    py = pypaimon.CatalogFactory.create({"warehouse": wh})
    got = pypaimon_read(py.get_table("db.t")).to_pylist()
    assert len(got) == len(model)
    assert {x["id"]: (x["v"], x["pt"]) for x in got} == model
