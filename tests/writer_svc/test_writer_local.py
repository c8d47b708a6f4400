"""The writer service in the test process against an in-process catalog: real gRPC on loopback ports."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import common_pb2, writer_pb2, writer_pb2_grpc
from tests.support.local_server import Local, local_server
from writer_svc.server import Settings, WriterServer

TIMEOUT_S = 60.0


def arrow_stream(table: pa.Table, chunk: int = 1 << 20) -> list[bytes]:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    data = sink.getvalue()
    return [data[i:i + chunk] for i in range(0, len(data), chunk)]


def write_requests(ident: common_pb2.TableIdentifier, table: pa.Table, **header: Any) -> Iterator[Any]:
    yield writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(table=ident, **header))
    for c in arrow_stream(table):
        yield writer_pb2.WriteRequest(arrow_ipc_chunk=c)


class Cluster:
    def __init__(self, catalog: Local, writer: WriterServer) -> None:
        self.catalog = catalog
        self.writer = writer
        self.channel = grpc.insecure_channel(f"127.0.0.1:{writer.port}")
        self.stub = writer_pb2_grpc.WriterServiceStub(self.channel)

    def rows(self, ident: common_pb2.TableIdentifier) -> list[dict[str, Any]]:
        t = FileSystemCatalog(self.catalog.warehouse).get_table(f"{ident.database}.{ident.table}")
        return sorted(t.to_arrow().to_pylist(), key=lambda r: tuple(r.values()))


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


def test_concurrent_requests_are_group_committed(cluster: Cluster) -> None:
    ident = cluster.catalog.create_table("db", "t", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"],
                                         {"bucket": "2"})
    replies: list[Any] = []

    def client(i: int) -> None:
        rows = pa.table({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64()),
                         "v": [f"c{i}"] * 100})
        replies.append(cluster.stub.Write(write_requests(ident, rows), timeout=TIMEOUT_S))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(replies) == 16 and all(r.rows_written == 100 for r in replies)
    snapshots = {r.snapshot_id for r in replies}
    assert len(snapshots) < 16  # shared commits
    rows = cluster.rows(ident)
    assert [r["id"] for r in rows] == list(range(1600))
    assert all(r["v"] == f"c{r['id'] // 100}" for r in rows)
    # updates and deletes through the row-kind column, and the JSON row form
    kinds = pa.table({"id": pa.array([0, 1], pa.int64()), "v": ["new", None], "op": ["+U", "-D"]})
    cluster.stub.Write(write_requests(ident, kinds, row_kind_column="op", options={"commit": "now"}),
                       timeout=TIMEOUT_S)
    r = cluster.stub.WriteRows(writer_pb2.WriteRowsRequest(table=ident, rows_json=[
        '{"id": 5000, "v": "json"}', '{"id": 2, "_row_kind": "-D"}']), timeout=TIMEOUT_S)
    assert r.rows_written == 2 and r.snapshot_id > max(snapshots)
    rows = {x["id"]: x["v"] for x in cluster.rows(ident)}
    assert rows[0] == "new" and 1 not in rows and 2 not in rows and rows[5000] == "json" and len(rows) == 1599


def _code(call: Any, request: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=TIMEOUT_S)
    return info.value.code(), info.value.details()


def test_bad_input_changes_nothing(cluster: Cluster) -> None:
    ident = cluster.catalog.create_table("db", "b", [("id", "BIGINT NOT NULL"), ("v", "INT")], ["id"],
                                         {"bucket": "1"})
    good = pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([1], pa.int32())})
    cluster.stub.Write(write_requests(ident, good), timeout=TIMEOUT_S)
    before = cluster.rows(ident)
    cases = [
        (write_requests(ident, pa.table({"id": pa.array([2], pa.int64()), "zzz": [1]})),
         grpc.StatusCode.INVALID_ARGUMENT, "zzz"),
        (write_requests(ident, pa.table({"id": pa.array([None, 3], pa.int64())})),
         grpc.StatusCode.INVALID_ARGUMENT, "id"),
        (write_requests(ident, pa.table({"id": ["x"]})), grpc.StatusCode.INVALID_ARGUMENT, "id"),
        (write_requests(common_pb2.TableIdentifier(database="db", table="nope"), good),
         grpc.StatusCode.NOT_FOUND, "nope"),
        (write_requests(common_pb2.TableIdentifier(database="..", table="x"), good),
         grpc.StatusCode.INVALID_ARGUMENT, "database"),
        (iter([writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(table=ident)),
               writer_pb2.WriteRequest(arrow_ipc_chunk=b"\x00garbage\xff" * 10)]),
         grpc.StatusCode.INVALID_ARGUMENT, "Arrow IPC"),
        (iter([writer_pb2.WriteRequest(arrow_ipc_chunk=b"x")]), grpc.StatusCode.INVALID_ARGUMENT, "header"),
        (write_requests(ident, good, options={"bogus": "1"}), grpc.StatusCode.INVALID_ARGUMENT, "bogus"),
    ]
    for requests, code, word in cases:
        got, msg = _code(cluster.stub.Write, requests)
        assert got == code and word in msg, (got, msg)
    got, msg = _code(cluster.stub.WriteRows, writer_pb2.WriteRowsRequest(
        table=ident, rows_json=['{"id": 9}', "not json", '{"v": 1}']))
    assert got == grpc.StatusCode.INVALID_ARGUMENT and "rows_json[1]" in msg and "rows_json[2]" in msg
    # bigger than gRPC's message limit, and a stream bigger than the writer accepts
    got, _ = _code(cluster.stub.WriteRows, writer_pb2.WriteRowsRequest(table=ident, rows_json=["x" * (65 << 20)]))
    assert got == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert cluster.rows(ident) == before


def test_write_rows_refuses_a_field_the_table_does_not_have(cluster: Cluster) -> None:
    """A JSON field that is not a column: INVALID_ARGUMENT naming the row and the field, and no row is written
    (a stale schema must not turn the producer's values into NULLs)."""
    ident = cluster.catalog.create_table("db", "orders", [("id", "BIGINT NOT NULL"), ("amount", "DOUBLE")], ["id"],
                                         {"bucket": "1"})
    cluster.stub.WriteRows(writer_pb2.WriteRowsRequest(table=ident, rows_json=['{"id": 1, "amount": 1.5}'],
                                                       options={"commit": "now"}), timeout=TIMEOUT_S)
    table = FileSystemCatalog(cluster.catalog.warehouse).get_table("db.orders")
    snapshots = table.snapshots.ids()
    rows_json = [json.dumps({"id": i, "amount": i / 2}) for i in range(10, 15)]
    rows_json[3] = '{"id": 13, "amount": 2.0, "colour": "red"}'
    got, msg = _code(cluster.stub.WriteRows, writer_pb2.WriteRowsRequest(table=ident, rows_json=rows_json,
                                                                          options={"commit": "now"}))
    assert got == grpc.StatusCode.INVALID_ARGUMENT, msg
    assert 'rows_json[3]: field "colour" is not a column of db.orders (columns: id, amount)' in msg, msg
    assert "1 row(s) are invalid, nothing was written" in msg and "rows_json[0]" not in msg, msg
    assert table.snapshots.ids() == snapshots
    # the row-kind field is not an unknown field; the next commit holds this row alone (nothing was buffered)
    cluster.stub.WriteRows(writer_pb2.WriteRowsRequest(table=ident, rows_json=[
        '{"id": 2, "amount": 3.0, "_row_kind": "+U"}'], options={"commit": "now"}), timeout=TIMEOUT_S)
    assert cluster.rows(ident) == [{"id": 1, "amount": 1.5}, {"id": 2, "amount": 3.0}]


def test_writes_stall_when_a_bucket_has_too_many_runs(cluster: Cluster) -> None:
    ident = cluster.catalog.create_table("db", "s", [("id", "BIGINT NOT NULL")], ["id"],
                                         {"bucket": "1", "num-sorted-run.stop-trigger": "2"})
    for i in range(3):
        cluster.stub.Write(write_requests(ident, pa.table({"id": pa.array([i], pa.int64())}),
                                          options={"commit": "now"}), timeout=TIMEOUT_S)
    got, msg = _code(lambda r, timeout: cluster.stub.Write(r, timeout=3.0),
                     write_requests(ident, pa.table({"id": pa.array([9], pa.int64())})))
    assert got == grpc.StatusCode.RESOURCE_EXHAUSTED and "bucket 0" in msg and "3 sorted runs" in msg
    assert [r["id"] for r in cluster.rows(ident)] == [0, 1, 2]
    # the compactor catches up: writes go on
    from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
    from lsmlake.rpc.convert import changes_to_proto
    from lsmlake.table.compact import compact_buckets

    table = FileSystemCatalog(cluster.catalog.warehouse).get_table("db.s")
    _, messages = compact_buckets(table, full=True)
    cluster.catalog.stub.Commit(catalog_pb2.CommitRequest(
        table=ident, commit_user="compactor", commit_identifier=1, kind=common_pb2.COMMIT_KIND_COMPACT,
        changes=[changes_to_proto(m) for m in messages]), timeout=TIMEOUT_S)
    cluster.stub.Write(write_requests(ident, pa.table({"id": pa.array([9], pa.int64())})), timeout=TIMEOUT_S)
    assert [r["id"] for r in cluster.rows(ident)] == [0, 1, 2, 9]


def test_metrics_and_graceful_shutdown_answers_every_request(tmp_path: Path) -> None:
    import urllib.request

    with local_server(str(tmp_path)) as cat:
        ident = cat.create_table("db", "g", [("id", "BIGINT NOT NULL")], ["id"], {"bucket": "2"})
        writer = WriterServer(Settings(warehouse=str(tmp_path), catalog=f"127.0.0.1:{cat.server.port}",
                                       commit_interval_s=0.2, metrics_port=0, grace_s=20))
        writer.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{writer.port}")
        stub = writer_pb2_grpc.WriterServiceStub(channel)
        acked: list[range] = []
        failed: list[grpc.StatusCode] = []
        stop = threading.Event()

        def client(k: int) -> None:
            n = 0
            while not stop.is_set() and n < 200:  # bounded
                ids = range((k * 1000 + n) * 100, (k * 1000 + n) * 100 + 100)
                try:
                    stub.Write(write_requests(ident, pa.table({"id": pa.array(ids, pa.int64())})), timeout=30)
                    acked.append(ids)
                except grpc.RpcError as e:
                    failed.append(e.code())
                    return
                n += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        import time

        deadline = time.monotonic() + 30
        while len(acked) < 20:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        body = urllib.request.urlopen(f"http://127.0.0.1:{writer.metrics_port}/metrics", timeout=10).read().decode()
        assert 'lsmlake_writer_commits_total{outcome="committed",table="db.g"}' in body
        assert 'lsmlake_writer_requests_total{outcome="ok",rpc="Write"}' in body
        assert "lsmlake_writer_bytes_received_total" in body
        writer.stop()  # while the clients keep writing
        stop.set()
        for t in threads:
            t.join(60)
            assert not t.is_alive(), "a request was left hanging by the shutdown"
        channel.close()
        table_ids = set(FileSystemCatalog(str(tmp_path)).get_table("db.g").to_arrow().column("id").to_pylist())
        for ids in acked:  # every acknowledged write is in the table
            assert set(ids) <= table_ids
        assert all(c in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) for c in failed), failed


def test_writes_follow_an_alter_and_empty_writes_answer(cluster: Cluster) -> None:
    from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2

    ident = cluster.catalog.create_table("db", "alt", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"],
                                         {"bucket": "1"})
    empty = cluster.stub.Write(write_requests(ident, pa.table({"id": pa.array([], pa.int64())})), timeout=TIMEOUT_S)
    assert (empty.snapshot_id, empty.rows_written) == (0, 0)
    cluster.stub.Write(write_requests(ident, pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]})),
                       timeout=TIMEOUT_S)
    cluster.catalog.stub.AlterTable(catalog_pb2.AlterTableRequest(table=ident, changes=[
        catalog_pb2.SchemaChange(add_column=catalog_pb2.AddColumn(name="n", type="INT")),
        catalog_pb2.SchemaChange(rename_column=catalog_pb2.RenameColumn(old_name="v", new_name="label"))]),
        timeout=TIMEOUT_S)
    cluster.stub.Write(write_requests(ident, pa.table({"id": pa.array([2], pa.int64()), "label": ["b"],
                                                       "n": pa.array([7], pa.int32())})), timeout=TIMEOUT_S)
    assert cluster.rows(ident) == [{"id": 1, "label": "a", "n": None}, {"id": 2, "label": "b", "n": 7}]


def test_a_table_dropped_and_created_again_is_reopened_not_written_with_the_old_schema(cluster: Cluster) -> None:
    from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2

    ident = cluster.catalog.create_table("db", "re", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"],
                                         {"bucket": "1"})
    cluster.stub.Write(write_requests(ident, pa.table({"id": pa.array([1], pa.int64()), "v": ["old"]})),
                       timeout=TIMEOUT_S)  # the writer now holds the table and its schema
    cluster.catalog.stub.DropTable(catalog_pb2.DropTableRequest(table=ident), timeout=TIMEOUT_S)
    cluster.catalog.create_table("db", "re", [("id", "BIGINT NOT NULL"), ("v", "STRING"), ("w", "STRING")], ["id"],
                                 {"bucket": "1"})
    new_rows = pa.table({"id": pa.array([2], pa.int64()), "v": ["new"], "w": ["kept"]})
    # the writer finds out on this write and writes it to the new table (tests/writer_svc/test_recreated_table.py)
    cluster.stub.Write(write_requests(ident, new_rows), timeout=TIMEOUT_S)
    assert cluster.rows(ident) == [{"id": 2, "v": "new", "w": "kept"}]
    # rows without the new column, which the old schema would have taken, go to the new table too
    cluster.stub.Write(write_requests(ident, pa.table({"id": pa.array([3], pa.int64()), "v": ["x"]})),
                       timeout=TIMEOUT_S)
    assert cluster.rows(ident)[-1] == {"id": 3, "v": "x", "w": None}


def test_a_writer_holding_a_dropped_table_has_its_commit_refused(cluster: Cluster) -> None:
    """Rows that fit the old schema reach the commit: the catalog refuses the old identity, nothing lands."""
    from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2

    ident = cluster.catalog.create_table("db", "re2", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"],
                                         {"bucket": "1"})
    rows = pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]})
    cluster.stub.Write(write_requests(ident, rows), timeout=TIMEOUT_S)
    cluster.catalog.stub.DropTable(catalog_pb2.DropTableRequest(table=ident), timeout=TIMEOUT_S)
    cluster.catalog.create_table("db", "re2", [("id", "BIGINT NOT NULL"), ("v", "STRING"), ("w", "STRING")], ["id"],
                                 {"bucket": "1"})
    with pytest.raises(grpc.RpcError) as e:
        cluster.stub.Write(write_requests(ident, rows), timeout=TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "dropped and created again" in e.value.details()
    assert cluster.rows(ident) == []
    cluster.stub.Write(write_requests(ident, rows), timeout=TIMEOUT_S)
    assert cluster.rows(ident) == [{"id": 1, "v": "a", "w": None}]


def test_a_write_commits_at_once_when_asked_or_after_a_quiet_moment_else_once_per_interval(tmp_path: Path) -> None:
    """With a 60 s commit interval: the first write of a quiet table, and each write asked to commit now, are
    committed before the interval's timer could fire (each call answers within a third of it, with a snapshot of
    its own); a plain write right after a commit waits for the interval, and joins the group of the next write
    that asks for a commit now. (The committer used to let go of the ask of the first write after an idle moment,
    so such a write, `commit=now` included, waited for the whole interval.)"""
    with local_server(str(tmp_path)) as cat:
        writer = WriterServer(Settings(warehouse=str(tmp_path), catalog=f"127.0.0.1:{cat.server.port}",
                                       commit_interval_s=60.0, metrics_port=0))
        writer.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{writer.port}")
        try:
            stub = writer_pb2_grpc.WriterServiceStub(channel)
            ident = cat.create_table("db", "t", [("id", "BIGINT NOT NULL"), ("v", "STRING")], ["id"], {"bucket": "1"})
            table = FileSystemCatalog(str(tmp_path)).get_table("db.t")

            def write(i: int, now: bool, timeout_s: float = 20) -> Any:  # a third of the interval
                rows = pa.table({"id": pa.array([i], pa.int64()), "v": [f"v{i}"]})
                return stub.Write(write_requests(ident, rows, options={"commit": "now"} if now else {}),
                                  timeout=timeout_s)

            snapshots = [write(0, now=False).snapshot_id] + [write(i, now=True).snapshot_id for i in (1, 2)]
            assert snapshots == sorted(set(snapshots)), f"one snapshot per write, in order: {snapshots}"
            late: list[Any] = []
            plain = threading.Thread(target=lambda: late.append(write(3, now=False, timeout_s=50)))
            plain.start()
            plain.join(3)
            assert plain.is_alive() and table.snapshots.latest_id() == snapshots[-1], "committed before its interval"
            asked = write(4, now=True)
            plain.join(20)
            assert late and late[0].snapshot_id == asked.snapshot_id > snapshots[-1], (late, asked)
            assert sorted(table.to_arrow().column("id").to_pylist()) == list(range(5))
        finally:
            channel.close()
            writer.stop()
