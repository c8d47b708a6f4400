"""`lsmlake.Client` against a real catalog and writer in the test process (gRPC on loopback ports)."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pyarrow as pa
import pytest

from lsmlake import Client
from lsmlake.catalog.health import table_health
from lsmlake.client.compaction import BucketCompaction, NotCompacted
from lsmlake.client.health import BucketHealthInfo
from lsmlake.client.tables import TableInfo
from lsmlake.client.writes import CHUNK_BYTES, WriteResult, _ipc_chunks
from lsmlake.errors import CommitStateUnknownError, InvalidInputError, NotFoundError, ServiceUnavailableError
from lsmlake.proto_gen.lsmlake.v1 import compactor_pb2, compactor_pb2_grpc, writer_pb2_grpc
from tests.support.local_server import local_server
from writer_svc.server import Settings, WriterServer


@pytest.fixture(scope="module")
def catalog_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(catalog, writer) addresses of servers shared by the tests of this module (each uses its own tables)."""
    warehouse = str(tmp_path_factory.mktemp("wh"))
    with local_server(warehouse) as cat:
        writer = WriterServer(Settings(warehouse=warehouse, catalog=f"127.0.0.1:{cat.server.port}",
                                       commit_interval_s=0.1, metrics_port=None))
        writer.start()
        try:
            yield f"127.0.0.1:{cat.server.port}", f"127.0.0.1:{writer.port}"
        finally:
            writer.stop()


@pytest.fixture
def client(catalog_address: tuple[str, str]) -> Iterator[Client]:
    with Client(catalog_address[0], writer=catalog_address[1], timeout_s=30) as c:
        c.create_database("db")
        yield c


def _ids(t: pa.Table) -> list[Any]:
    return sorted(t.column("id").to_pylist())


def test_tables_are_created_described_altered_and_dropped(client: Client) -> None:
    info = client.create_table("db.t1", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                               options={"bucket": 2})
    assert isinstance(info, TableInfo) and info.identifier == "db.t1"
    assert info.columns == (("id", "BIGINT NOT NULL"), ("v", "STRING")) and info.primary_keys == ("id",)
    assert info.options["bucket"] == "2" and info.latest_snapshot_id is None and info.location
    assert client.create_table("db.t1", "x INT", ignore_if_exists=True).columns == info.columns
    arrow = client.create_table("db.t2", pa.schema([pa.field("k", pa.int32(), nullable=False),
                                                    pa.field("d", pa.date32()), pa.field("p", pa.string())]),
                                partition_keys=["p"])
    assert arrow.columns == (("k", "INT NOT NULL"), ("d", "DATE"), ("p", "STRING"))
    assert arrow.partition_keys == ("p",) and arrow.primary_keys == ()
    assert {"t1", "t2"} <= set(client.list_tables("db")) and "db" in client.list_databases()
    assert client.create_database("db") is False

    altered = client.alter_table("db.t1", add_columns="n INT, c DECIMAL(10, 2)", rename_columns={"v": "value"},
                                 set_options={"snapshot.num-retained.min": "2"})
    assert altered.columns == (("id", "BIGINT NOT NULL"), ("value", "STRING"), ("n", "INT"),
                               ("c", "DECIMAL(10, 2)"))
    assert altered.schema_id == info.schema_id + 1 and altered.options["snapshot.num-retained.min"] == "2"
    removed = client.alter_table("db.t1", remove_options=["snapshot.num-retained.min"])
    assert "snapshot.num-retained.min" not in removed.options
    assert client.table("db.t1") == removed

    assert client.drop_table("db.t2") is True
    assert client.drop_table("db.t2", ignore_if_not_exists=True) is False
    with pytest.raises(NotFoundError, match="t2"):
        client.table("db.t2")


def test_writes_in_every_form_and_scans(client: Client) -> None:
    client.create_table("db.w", "id BIGINT NOT NULL, v STRING, d DATE, amount DECIMAL(10, 2), b BYTES, "
                        "ts TIMESTAMP(6), p STRING NOT NULL",
                        primary_keys=["id", "p"], partition_keys=["p"], options={"bucket": "2"})
    r1 = client.write("db.w", pa.table({"id": pa.array(range(10), pa.int64()), "v": [f"a{i}" for i in range(10)],
                                        "p": ["x"] * 5 + ["y"] * 5}))
    assert r1.rows == 10 and r1.snapshot_id >= 1
    # a list of dicts, typed by the table's columns
    r2 = client.write("db.w", [{"id": 10, "v": "dict", "d": dt.date(2024, 1, 31), "amount": decimal.Decimal("1.50"),
                                "b": b"\x00\xff", "ts": dt.datetime(2024, 1, 31, 12, 30, 0, 500000), "p": "x"}],
                      commit_now=True)
    assert r2.rows == 1 and r2.snapshot_id > r1.snapshot_id
    # JSON rows: dates, decimals, bytes and timestamps in the writer's text forms
    r3 = client.write_rows("db.w", [{"id": 11, "v": "json", "d": dt.date(2024, 2, 1),
                                     "amount": decimal.Decimal("-2.25"), "b": b"\x01",
                                     "ts": dt.datetime(2024, 2, 1, 0, 0, 1), "p": "y"}], commit_now=True)
    assert r3.rows == 1 and r3.snapshot_id > r2.snapshot_id
    try:
        import pandas as pd
    except ImportError:
        print("pandas is not installed: the DataFrame write is not tested")
    else:
        r4 = client.write("db.w", pd.DataFrame({"id": [12, 13], "v": ["pd", "pd"], "p": ["y", "y"]}))
        assert r4.rows == 2

    rows = {r["id"]: r for r in client.scan("db.w").to_pylist()}
    assert rows[10]["d"] == dt.date(2024, 1, 31) and rows[10]["amount"] == decimal.Decimal("1.50")
    assert rows[10]["b"] == b"\x00\xff" and rows[10]["ts"] == dt.datetime(2024, 1, 31, 12, 30, 0, 500000)
    assert rows[11]["v"] == "json" and rows[11]["d"] == dt.date(2024, 2, 1)
    assert rows[11]["amount"] == decimal.Decimal("-2.25") and rows[11]["b"] == b"\x01"

    # updates and deletes through a row-kind column (not stored)
    client.write("db.w", pa.table({"id": pa.array([0, 1], pa.int64()), "v": ["new", None], "p": ["x", "x"],
                                   "op": ["+U", "-D"]}), row_kind_column="op", commit_now=True)
    client.write_rows("db.w", [{"id": 2, "p": "x", "kind": "-D"}], row_kind_column="kind", commit_now=True)
    after = client.scan("db.w")
    assert "op" not in after.column_names and 1 not in _ids(after) and 2 not in _ids(after)
    assert client.scan("db.w", where={"id": 0}).to_pylist()[0]["v"] == "new"

    # where (partition and other columns), columns, snapshot
    x = client.scan("db.w", where={"p": "x"}, columns=["id", "v"])
    assert x.column_names == ["id", "v"] and _ids(x) == [0, 3, 4, 10]
    assert client.scan("db.w", where={"p": "y", "v": "json"}, columns=["id"]).to_pylist() == [{"id": 11}]
    assert _ids(client.scan("db.w", where={"d": "2024-01-31"})) == [10]  # text cast to the column's type
    assert _ids(client.scan("db.w", where={"amount": None, "p": "x"})) == [0, 3, 4]
    assert _ids(client.scan("db.w", snapshot_id=r1.snapshot_id)) == list(range(10))
    assert client.scan("db.w", where={"id": 999}).num_rows == 0


def test_scan_of_an_empty_table_and_after_an_alter(client: Client, catalog_address: tuple[str, str]) -> None:
    info = client.create_table("db.e", "id INT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": "1"})
    empty = client.scan("db.e")
    assert empty.num_rows == 0 and empty.column_names == ["id", "v"]
    assert client.write("db.e", pa.table({"id": pa.array([], pa.int32())})) == WriteResult(0, 0)
    batch = pa.record_batch({"id": pa.array([1, 2], pa.int32()), "v": ["a", "b"]})
    assert client.write("db.e", batch, commit_now=True).rows == 2
    # a client that reads the warehouse under its own path
    warehouse = info.location.rsplit("/", 2)[0]
    with Client(catalog_address[0], warehouse=warehouse) as reader:
        assert _ids(reader.scan("db.e")) == [1, 2]
    client.alter_table("db.e", add_columns=[("extra", "STRING")], rename_columns={"v": "value"})
    # files written before the alter are read with the new schema
    assert sorted(client.scan("db.e").to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "value": "a", "extra": None}, {"id": 2, "value": "b", "extra": None}]
    assert client.scan("db.e", where={"value": "b"}, columns=["id"]).to_pylist() == [{"id": 2}]


def test_errors_are_lsmlake_errors_with_the_servers_message(client: Client, catalog_address: tuple[str, str]) -> None:
    client.create_table("db.err", "id BIGINT NOT NULL, v INT", primary_keys=["id"], options={"bucket": "1"})
    for call in (lambda: client.table("db.nope"), lambda: client.scan("db.nope"),
                 lambda: client.write("db.nope", pa.table({"id": [1]})), lambda: client.snapshots("db.nope"),
                 lambda: client.write_rows("db.nope", [{"id": 1}]), lambda: client.list_tables("nodb")):
        with pytest.raises(NotFoundError, match="nope|nodb"):
            call()
    with pytest.raises(InvalidInputError):
        client.create_table("db.bad", "id BIGNUM")  # refused by the schema parser
    with pytest.raises(InvalidInputError, match="zzz"):  # refused by the catalog
        client.create_table("db.bad", "id BIGINT", primary_keys=["zzz"])
    with pytest.raises(InvalidInputError, match="bogus"):
        client.create_table("db.bad", "id BIGINT", options={"bogus": "1"})
    with pytest.raises(InvalidInputError, match="zzz"):  # refused by the writer
        client.write("db.err", pa.table({"id": pa.array([1], pa.int64()), "zzz": [1]}))
    with pytest.raises(InvalidInputError, match=r"rows_json\[0\]"):
        client.write_rows("db.err", [{"id": "not a number"}])
    with pytest.raises(InvalidInputError, match="not a column"):
        client.scan("db.err", where={"nope": 1})
    with pytest.raises(InvalidInputError, match="is not a valid int"):
        client.scan("db.err", where={"v": "x"})
    with pytest.raises(InvalidInputError, match="DATABASE.TABLE"):
        client.table("no_dot")
    with pytest.raises(InvalidInputError, match="list of dicts"):
        client.write("db.err", 42)
    with pytest.raises(NotFoundError, match="snapshot 99"):
        client.scan("db.err", snapshot_id=99)
    with Client(catalog_address[0]) as catalog_only:
        with pytest.raises(InvalidInputError, match="writer"):
            catalog_only.write("db.err", [{"id": 1}])
        with pytest.raises(InvalidInputError, match="compactor"):
            catalog_only.compact("db.err")
    assert client.scan("db.err").num_rows == 0


def test_a_large_write_goes_in_several_requests(client: Client) -> None:
    client.create_table("db.big", "id BIGINT NOT NULL, s STRING", primary_keys=["id"], options={"bucket": "2"})
    n = 25_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "s": ["x" * 500] * n})  # ~12.7 MB
    chunks = list(_ipc_chunks(data.slice(0, 10_000), CHUNK_BYTES))  # a request's stream, in messages
    assert len(chunks) == 2 and max(len(c) for c in chunks) <= CHUNK_BYTES == 4 << 20
    before = len(client.snapshots("db.big"))
    result = client.write("db.big", data, max_rows_per_request=10_000, commit_now=True)
    assert result.rows == n
    # each request is committed before the next is sent: one snapshot per request
    assert len(client.snapshots("db.big")) - before == 3
    scanned = client.scan("db.big", columns=["id"])
    assert _ids(scanned) == list(range(n))
    # a byte budget splits too
    client.write("db.big", data.slice(0, 2_000), max_bytes_per_request=300_000, commit_now=True)
    assert len(client.snapshots("db.big")) - before >= 3 + 4


def test_snapshots_expire_and_timeline(client: Client) -> None:
    client.create_table("db.s", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "1"})
    assert client.latest_snapshot("db.s") is None and client.snapshots("db.s") == []
    for i in range(3):
        client.write("db.s", [{"id": i}], commit_now=True)
    snaps = client.snapshots("db.s")
    assert [s.id for s in snaps] == [1, 2, 3] and all(s.commit_kind == "APPEND" for s in snaps)
    latest = client.latest_snapshot("db.s")
    assert latest is not None and latest.id == 3 and latest.total_record_count == 3
    expired = client.expire("db.s", retain_min=1, retain_max=1)
    assert expired.expired_snapshot_ids == (1, 2)
    assert [s.id for s in client.snapshots("db.s")] == [3] and _ids(client.scan("db.s")) == [0, 1, 2]
    assert client.timeline("db.s") == [] and client.timeline("db.s", states=["inflight"]) == []
    with pytest.raises(InvalidInputError, match="REQUESTED"):
        client.timeline("db.s", states=["SOON"])


def test_table_health_ranks_the_tables_by_their_files(client: Client) -> None:
    """ListTableHealth through the client: figures of the tables' real files (three level-0 files in one bucket,
    one, none), the catalog's ranking, each bucket with its partition values, and the refusals."""
    client.create_database("health")
    for name in ("busy", "quiet", "empty"):
        client.create_table(f"health.{name}", "id BIGINT NOT NULL, v STRING", primary_keys=["id"],
                            options={"bucket": "1"})
    for i in range(3):  # one level-0 file per commit, each its own sorted run: nothing compacts them here
        client.write("health.busy", [{"id": i, "v": "a"}, {"id": 10 + i, "v": "b"}], commit_now=True)
    client.write("health.quiet", [{"id": 1, "v": "a"}], commit_now=True)

    ranked = client.list_table_health(database="health")
    assert [h.identifier for h in ranked] == ["health.busy", "health.quiet", "health.empty"]
    busy, quiet, empty = ranked
    stop = client.open_table("health.busy").options.stop_trigger()
    assert (busy.max_sorted_runs, busy.level0_files, busy.stop_trigger, busy.stalled) == (3, 3, stop, False)
    # 3 runs, below the compaction trigger: no compaction is due, so nothing has waited (catalog/health_score.py)
    assert busy.snapshot_id == 3 and busy.lag_ms == 0 and busy.buckets == ()  # buckets only when asked
    assert busy.pending_plans == busy.inflight_plans == busy.oldest_plan_age_ms == 0
    assert busy.score == round(100 - sum(busy.penalties.values()))  # the score is what the penalties leave
    assert (quiet.max_sorted_runs, quiet.level0_files, quiet.snapshot_id) == (1, 1, 1)
    assert busy.score <= quiet.score <= empty.score == 100
    assert (empty.snapshot_id, empty.max_sorted_runs, empty.level0_files, empty.lag_ms) == (0, 0, 0, 0)
    # the same figures as the library computes from the table's files
    local = table_health(client.open_table("health.busy"), [], 0)
    assert (local.max_sorted_runs, local.level0_files, local.snapshot_id) == (3, 3, 3)
    assert (busy.penalties, busy.score, busy.stalled) == (local.penalties, local.score, local.stalled)

    [one] = client.list_table_health("health.busy", with_buckets=True)
    assert one.identifier == "health.busy" and one.max_sorted_runs == 3
    [bucket] = one.buckets
    assert (bucket.partition_values, bucket.bucket, bucket.sorted_runs, bucket.level0_files, bucket.files,
            bucket.small_files, bucket.rows, bucket.deleted_rows) == (
        (), 0, 3, 3, 3, local.buckets[0].small_files, 6, 0)
    assert bucket.size_bytes > 0 and bucket.lag_ms == one.lag_ms == 0
    assert {h.identifier for h in client.list_table_health()} >= {"health.busy", "health.quiet", "health.empty"}

    # partitioned, with a null partition value: each bucket names its partition by directory text
    client.create_table("health.events", "day STRING, n INT", partition_keys=["day"],
                        options={"bucket": "1", "bucket-key": "n"})
    client.write("health.events", [{"day": "2024-05-01", "n": 1}, {"day": None, "n": 2}, {"day": None, "n": 3}],
                 commit_now=True)
    [events] = client.list_table_health("health.events", with_buckets=True)
    assert sorted(((b.partition_values, b.rows) for b in events.buckets), key=repr) == [
        (("2024-05-01",), 1), ((None,), 2)]
    assert all(isinstance(b, BucketHealthInfo) and b.level0_files == 1 for b in events.buckets)

    with pytest.raises(NotFoundError, match="nope"):
        client.list_table_health("health.nope")
    with pytest.raises(NotFoundError, match="nodb"):
        client.list_table_health(database="nodb")
    with pytest.raises(InvalidInputError, match="not both"):
        client.list_table_health("health.busy", database="health")


class _Compactor(compactor_pb2_grpc.CompactorServiceServicer):
    """A stand-in compactor that records the triggers it gets."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def TriggerCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        if request.table.table == "missing":
            context.abort(grpc.StatusCode.NOT_FOUND, "table 'db.missing' does not exist")
        return compactor_pb2.TriggerCompactionResponse(
            buckets_queued=2, buckets_elsewhere=1, plan_ids=["7"], snapshot_ids=[9], request_snapshot_id=5,
            compacted=[compactor_pb2.BucketCompacted(partition_values={"p": "1"}, bucket=0, plan_id="7", snapshot_id=9),
                       compactor_pb2.BucketCompacted(partition_values={"p": "1"}, bucket=1, snapshot_id=6)],
            not_compacted=[compactor_pb2.BucketNotCompacted(partition_values={"p": "2"}, bucket=0,
                                                            reason="owned by another compactor replica")],
            wait_limit_ms=8_000 if request.wait else 0, timed_out=False)


def test_compact_triggers_the_compactor_service(catalog_address: tuple[str, str]) -> None:
    fake = _Compactor()  # type: ignore[abstract]  # serves TriggerCompaction only
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    compactor_pb2_grpc.add_CompactorServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with Client(catalog_address[0], compactor=f"127.0.0.1:{port}", timeout_s=10) as c:
            result = c.compact("db.s", full=True, partition={"p": 1}, bucket=0)
            assert (result.buckets_queued, result.plan_ids, result.snapshot_ids) == (2, ("7",), (9,))
            assert result.request_snapshot_id == 5 and result.wait_limit_s == 8.0 and not result.timed_out
            assert result.compacted == (BucketCompaction({"p": "1"}, 0, "7", 9),
                                        BucketCompaction({"p": "1"}, 1, None, 6))
            assert result.not_compacted == (NotCompacted({"p": "2"}, 0, "owned by another compactor replica"),)
            assert not result.complete
            req = fake.requests[-1]
            assert req.full and req.wait and dict(req.partition) == {"p": "1"} and req.bucket == 0
            # the wait is bounded by the call's deadline: the client's timeout_s, or the one given
            unwaited = c.compact("db.s", wait=False, timeout_s=5)
            assert unwaited.wait_limit_s is None and not fake.requests[-1].wait
            with pytest.raises(NotFoundError, match="db.missing"):
                c.compact("db.missing")
    finally:
        server.stop(None)


class _SilentWriter(writer_pb2_grpc.WriterServiceServicer):
    """A writer whose answer never reaches the client: UNAVAILABLE, or nothing before the call's deadline."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def Write(self, request_iterator: Any, context: grpc.ServicerContext) -> Any:
        header = next(request_iterator).header
        for _ in request_iterator:
            pass
        if header.table.table == "silent":
            self.released.wait(10)  # past the client's deadline
        context.abort(grpc.StatusCode.UNAVAILABLE, "the writer went away")

    def WriteRows(self, request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAVAILABLE, "the writer went away")


def test_a_write_without_an_answer_has_an_unknown_outcome(catalog_address: tuple[str, str]) -> None:
    """UNAVAILABLE or a passed deadline on a write does not mean nothing was written: resend with the request id."""
    fake = _SilentWriter()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    writer_pb2_grpc.add_WriterServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with Client(catalog_address[0], writer=f"127.0.0.1:{port}", timeout_s=1) as c:
            rows = pa.table({"id": pa.array([1], pa.int64())})
            for call in (lambda: c.write("db.gone", rows, request_id="w-1"),
                         lambda: c.write_rows("db.gone", [{"id": 1}], request_id="w-1"),
                         lambda: c.write("db.silent", rows, request_id="w-1")):
                with pytest.raises(CommitStateUnknownError, match="same request id") as e:
                    call()
                assert not isinstance(e.value, ServiceUnavailableError)
            fake.released.set()
    finally:
        server.stop(None)


def test_no_answer_to_a_read_is_unavailable_and_to_a_change_unknown() -> None:
    with Client("127.0.0.1:1", timeout_s=2) as c:  # nothing listens there
        with pytest.raises(ServiceUnavailableError):
            c.list_databases()
        with pytest.raises(CommitStateUnknownError):
            c.create_database("db")
