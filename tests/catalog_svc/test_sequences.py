"""The catalog as the sequence-number authority, and the table identity that commits name (real gRPC, in process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.binary_row import serialize_row
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.table.sequence_numbers import RestoredSequences
from tests.integration.interop.test_interop_pypaimon import pypaimon_write
from tests.support.local_server import TIMEOUT_S, Local, local_server

EMPTY = serialize_row([], [])  # the partition of an unpartitioned table


@pytest.fixture
def cat(tmp_path: Path) -> Iterator[Local]:
    with local_server(str(tmp_path)) as c:
        yield c


def _allocate(cat: Local, ident: common_pb2.TableIdentifier, ranges: list[tuple[bytes, int, int]],
              table_uuid: str = "") -> list[int]:
    return list(cat.stub.AllocateSequences(catalog_pb2.AllocateSequencesRequest(
        table=ident, table_uuid=table_uuid,
        ranges=[catalog_pb2.SequenceRange(partition=p, bucket=b, count=n) for p, b, n in ranges]),
        timeout=TIMEOUT_S).first)


def _max_seq(warehouse: str, table_id: str) -> dict[int, int]:
    t = FileSystemCatalog(warehouse).get_table(table_id)
    snap = t.snapshots.latest()
    assert snap is not None
    out: dict[int, int] = {}
    for e in t.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values():
        out[e.bucket] = max(out.get(e.bucket, -1), e.file.max_sequence_number)
    return out


def test_ranges_are_monotone_and_disjoint_per_bucket(cat: Local) -> None:
    ident = cat.create_table("db", "t", [("k", "BIGINT NOT NULL"), ("v", "STRING")], ["k"], {"bucket": "2"})
    first = _allocate(cat, ident, [(EMPTY, 0, 10), (EMPTY, 1, 3)])
    second = _allocate(cat, ident, [(EMPTY, 1, 5), (EMPTY, 0, 1)])
    assert first == [0, 0] and second == [3, 10]


def test_numbering_resumes_above_what_another_engine_committed(cat: Local) -> None:
    ident = cat.create_table("db", "t", [("k", "BIGINT NOT NULL"), ("v", "STRING")], ["k"], {"bucket": "1"})
    _allocate(cat, ident, [(EMPTY, 0, 5)])  # the counter is at 5 before the other engines write
    pypaimon_write(cat.warehouse, "db.t", pa.table({"k": pa.array(range(100), pa.int64()), "v": ["p"] * 100}))
    assert _allocate(cat, ident, [(EMPTY, 0, 1)])[0] > _max_seq(cat.warehouse, "db.t")[0]
    # a writer committing straight into the warehouse with numbers far above the counter
    table = FileSystemCatalog(cat.warehouse).get_table("db.t")
    w = table.new_write(RestoredSequences(lambda p, b: 1_000_000))
    w.write(pa.table({"k": pa.array([1], pa.int64()), "v": ["far"]}))
    table.new_commit("other-engine").commit(w.prepare_commit())
    assert _allocate(cat, ident, [(EMPTY, 0, 1)]) == [1_000_002]


def test_a_table_never_synced_starts_above_its_existing_files(cat: Local, tmp_path: Path) -> None:
    ident = cat.create_table("db", "t", [("k", "BIGINT NOT NULL"), ("v", "STRING")], ["k"], {"bucket": "1"})
    for i in range(3):  # several snapshots written by pypaimon before lsmlake ever numbers a row
        pypaimon_write(cat.warehouse, "db.t", pa.table({"k": pa.array(range(50), pa.int64()), "v": [f"{i}"] * 50}))
    assert _allocate(cat, ident, [(EMPTY, 0, 1)]) == [_max_seq(cat.warehouse, "db.t")[0] + 1]


@pytest.mark.parametrize("ranges, message", [
    ([], "ranges must not be empty"),
    ([(EMPTY, 0, 0)], "count 0"),
    ([(EMPTY, -1, 1)], "bucket -1"),
    ([(EMPTY, 0, 1 << 41)], "count"),
    ([(EMPTY, 0, 1), (EMPTY, 0, 2)], "named twice"),
])
def test_bad_requests_are_refused_and_hand_out_nothing(cat: Local, ranges: list[tuple[bytes, int, int]],
                                                        message: str) -> None:
    ident = cat.create_table("db", "t", [("k", "BIGINT NOT NULL")], ["k"], {"bucket": "1"})
    with pytest.raises(grpc.RpcError) as e:
        _allocate(cat, ident, ranges)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in e.value.details()
    assert _allocate(cat, ident, [(EMPTY, 0, 1)]) == [0]


def test_a_dropped_and_recreated_table_refuses_the_old_identity(cat: Local) -> None:
    ident = cat.create_table("db", "t", [("k", "BIGINT NOT NULL"), ("v", "STRING")], ["k"], {"bucket": "1"})
    old = cat.stub.GetTable(catalog_pb2.GetTableRequest(table=ident), timeout=TIMEOUT_S).table.table_uuid
    cat.stub.AlterTable(catalog_pb2.AlterTableRequest(table=ident, changes=[catalog_pb2.SchemaChange(
        set_option=catalog_pb2.SetOption(key="snapshot.num-retained.max", value="50"))]), timeout=TIMEOUT_S)
    assert cat.stub.GetTable(catalog_pb2.GetTableRequest(table=ident), timeout=TIMEOUT_S).table.table_uuid == old
    assert _allocate(cat, ident, [(EMPTY, 0, 1)], old) == [0]
    cat.stub.DropTable(catalog_pb2.DropTableRequest(table=ident), timeout=TIMEOUT_S)
    cat.create_table("db", "t", [("k", "BIGINT NOT NULL"), ("v", "STRING"), ("w", "STRING")], ["k"], {"bucket": "1"})
    new = cat.stub.GetTable(catalog_pb2.GetTableRequest(table=ident), timeout=TIMEOUT_S).table.table_uuid
    assert new and new != old
    messages = cat.write(ident, {"k": pa.array([1], pa.int64()), "v": ["x"], "w": ["y"]})
    for call in (lambda: _allocate(cat, ident, [(EMPTY, 0, 1)], old),
                 lambda: cat.stub.Commit(catalog_pb2.CommitRequest(
                     table=ident, commit_user="u", commit_identifier=1, kind=common_pb2.COMMIT_KIND_APPEND,
                     table_uuid=old, changes=[]), timeout=TIMEOUT_S)):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "dropped and created again" in e.value.details()
    assert FileSystemCatalog(cat.warehouse).get_table("db.t").snapshots.latest_id() is None  # nothing applied
    assert _allocate(cat, ident, [(EMPTY, 0, 1)], new) == [0]  # the new table's counters start afresh
    cat.stub.Commit(catalog_pb2.CommitRequest(table=ident, commit_user="u", commit_identifier=1, table_uuid=new,
                                              kind=common_pb2.COMMIT_KIND_APPEND,
                                              changes=[changes_to_proto(m) for m in messages]), timeout=TIMEOUT_S)
