"""The catalog forgets the HASH index it holds for a dynamic-bucket table when the table is dropped.

`AssignBuckets` keeps each table's key hashes in memory between calls; a dropped table's hashes used to stay
there until the catalog restarted. The catalog here is real (gRPC on loopback, in the test process).
"""

from __future__ import annotations

from pathlib import Path

from catalog_svc.servicer import CatalogService
from lsmlake.format.binary_row import EMPTY_ROW
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from tests.support.local_server import TIMEOUT_S, Local, local_server

COLUMNS = [("id", "BIGINT NOT NULL"), ("v", "STRING")]


def _assign(cat: Local, ident: common_pb2.TableIdentifier, hashes: list[int]) -> list[int]:
    reply = cat.stub.AssignBuckets(catalog_pb2.AssignBucketsRequest(
        table=ident, partitions=[catalog_pb2.PartitionKeys(partition=EMPTY_ROW, key_hashes=hashes)]),
        timeout=TIMEOUT_S)
    return list(reply.partitions[0].buckets)


def _servicer(cat: Local) -> CatalogService:
    servicer = cat.server._servicer
    assert servicer is not None
    return servicer


def test_a_dropped_tables_key_hashes_are_forgotten(tmp_path: Path) -> None:
    with local_server(str(tmp_path)) as cat:
        a = cat.create_table("db", "a", COLUMNS, ["id"], {"bucket": "-1"})
        b = cat.create_table("db", "b", COLUMNS, ["id"], {"bucket": "-1"})
        cat.create_table("other", "c", COLUMNS, ["id"], {"bucket": "-1"})
        for ident in (a, b, common_pb2.TableIdentifier(database="other", table="c")):
            assert _assign(cat, ident, [1, 2, 3]) == [0, 0, 0]
            assert _assign(cat, ident, [3, 4]) == [0, 0]  # the second call reads the index held in memory
        held = _servicer(cat).operations.writes._hash_files
        assert len(held) == 3
        cat.stub.DropTable(catalog_pb2.DropTableRequest(table=a), timeout=TIMEOUT_S)
        assert len(held) == 2, "the dropped table's key hashes are still held"
        cat.stub.DropDatabase(catalog_pb2.DropDatabaseRequest(name="other", cascade=True), timeout=TIMEOUT_S)
        assert len(held) == 1, "the key hashes of a table dropped with its database are still held"
        # a table created again under the name of a dropped one starts from its own (empty) index
        cat.stub.DropTable(catalog_pb2.DropTableRequest(table=b), timeout=TIMEOUT_S)
        assert len(held) == 0
        b = cat.create_table("db", "b", COLUMNS, ["id"], {"bucket": "-1", "dynamic-bucket.target-row-num": "1"})
        assert _assign(cat, b, [4, 5]) == [0, 1]
