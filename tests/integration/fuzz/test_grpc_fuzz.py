"""Every RPC of every lsmlake service, fuzzed with hostile messages and with undecodable bytes.

The oracle of each call (see `lake.fuzz_call`): OK, or a clear refusal (INVALID_ARGUMENT, NOT_FOUND, ...)
with a short reason, never UNKNOWN/INTERNAL or a hang; a refused call changes no file and no row of the
metadata store; nothing is ever written outside the warehouse; the services stay SERVING.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import grpc
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import given
from hypothesis import strategies as st

from lsmlake.proto_gen.lsmlake.v1 import (
    catalog_pb2,
    common_pb2,
    compactor_pb2,
    writer_pb2,
)
from tests.support.fuzz.hostile import COLUMNS, FUZZ, SQL_TYPES, TABLES, garbage_bytes, identifiers, message_of, texts
from tests.support.fuzz.lake import CALL_TIMEOUT_S, OUTCOMES, Lake, check_refusal, fuzz_call

SERVICES = {f.services_by_name[name] for f, name in ((catalog_pb2.DESCRIPTOR, "CatalogService"),
                                                      (writer_pb2.DESCRIPTOR, "WriterService"),
                                                      (compactor_pb2.DESCRIPTOR, "CompactorService"))}
WATCH_S = 3.0  # a valid WatchSnapshots streams until its deadline; a refusal comes before

plan_ids = st.one_of(st.sampled_from(("1", "2", "3", "0", "-1", "01", " 1", "1e3", "99999999999999999999")), texts)
not_seeded_db = texts.filter(lambda n: n != "db")  # dropping the seeded tables would leave nothing to fuzz
tag_names = st.one_of(st.sampled_from(("t1", "", "../t", "t/1", "x" * 300, "tag-")), texts)
not_seeded_table = st.builds(lambda d, t: {"database": d, "table": t}, st.sampled_from(("db", "gone", "../db")),
                             texts.filter(lambda n: n not in TABLES))
columns = st.lists(st.fixed_dictionaries({"name": st.one_of(st.sampled_from(COLUMNS), texts),
                                          "type": st.one_of(st.sampled_from(SQL_TYPES), texts)},
                                         optional={"comment": texts, "field_id": st.integers(-5, 5)}), max_size=4)
many_columns = st.integers(1_000, 5_000).map(lambda n: [{"name": f"c{i}", "type": "INT"} for i in range(n)])
duplicate_columns = st.just([{"name": "a", "type": "INT"}, {"name": "a", "type": "STRING"}])
json_rows = st.one_of(
    st.sampled_from(('{"id": 1, "dt": "2024-01-01", "v": "ok"}', '{"id": "x", "dt": "d"}', '{"id": 1}', "", "null",
                     "[]", "{", '{"id": 1e400, "dt": "d"}', '{"id": 99999999999999999999, "dt": "d"}',
                     '{"id": 1, "dt": "d", "_row_kind": "+X"}', '{"id": 1, "dt": "d", "_row_kind": 7}',
                     '{"id": 1, "dt": null}', '{"id": 1, "dt": "d", "v": {"deep": [1, 2]}}', "\\ud800",
                     '{"id": 1, "dt": "d", "v": "' + "x" * 100_000 + '"}', "[" * 5_000 + "]" * 5_000,
                     '{"a":' * 3_000 + "1" + "}" * 3_000)),
    texts)


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _deep_list(depth: int) -> pa.Table:
    t: pa.DataType = pa.int64()
    for _ in range(depth):
        t = pa.list_(t)
    return pa.table({"id": pa.array([None], t)})


VALID_PK = pa.table({"id": pa.array([1, 2], pa.int64()), "dt": ["2024-01-01", "2024-01-03"], "v": ["a", "b"],
                     "n": pa.array([1, 2], pa.int32())})
arrow_payloads = st.one_of(
    garbage_bytes,
    st.sampled_from((
        _ipc(VALID_PK), _ipc(VALID_PK)[:-7], _ipc(VALID_PK)[:40],
        _ipc(pa.table({"id": ["x", "y"], "dt": ["a", "b"]})),  # wrong type
        _ipc(pa.table({"id": pa.array([None], pa.int64()), "dt": ["a"]})),  # NULL key
        _ipc(pa.table({"nope": [1]})),
        _ipc(pa.table({"id": pa.array([1], pa.int64()), "dt": ["a"], "_row_kind": ["+X"]})),
        _ipc(pa.table({"id": pa.array([1], pa.int64()), "dt": ["a"], "_row_kind": pa.array([9], pa.int8())})),
        _ipc(_deep_list(60)),
        _ipc(pa.table({f"c{i}": [i] for i in range(3_000)})),
        _ipc(pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["id", "id"])),  # duplicate names
    )),
    st.builds(lambda head, junk: head + junk, st.just(_ipc(VALID_PK)[:200]), garbage_bytes),
)


def _write_streams() -> st.SearchStrategy[list[writer_pb2.WriteRequest]]:
    """A header (or not), then chunks cut from one payload, sometimes with a stray second header."""
    header = message_of(writer_pb2.WriteHeader, lsmlake__v1__WriteHeader__options=st.one_of(
        st.just({}), st.dictionaries(st.sampled_from(("commit", "colour", "")), st.sampled_from(("now", "x", "")),
                                     max_size=2)))

    def cut(payload: bytes, size: int) -> list[writer_pb2.WriteRequest]:
        return [writer_pb2.WriteRequest(arrow_ipc_chunk=payload[i:i + size]) for i in range(0, len(payload), size)]

    body = st.builds(cut, arrow_payloads, st.sampled_from((7, 1_000, 1 << 20)))
    first = header.map(lambda h: [writer_pb2.WriteRequest(header=h)])
    return st.one_of(
        st.builds(lambda h, b: h + b, first, body),
        st.builds(lambda h, b, h2: h + b[:1] + h2 + b[1:], first, body, first),  # a second header
        body,  # no header
        st.just([]),  # an empty stream
    )


#: full method name -> strategy of requests (for Write: the list of stream messages)
REQUESTS: dict[str, st.SearchStrategy[Any]] = {
    "/lsmlake.v1.CatalogService/CreateDatabase": message_of(catalog_pb2.CreateDatabaseRequest),
    "/lsmlake.v1.CatalogService/ListDatabases": message_of(catalog_pb2.ListDatabasesRequest),
    "/lsmlake.v1.CatalogService/DropDatabase": message_of(
        catalog_pb2.DropDatabaseRequest, lsmlake__v1__DropDatabaseRequest__name=not_seeded_db),
    "/lsmlake.v1.CatalogService/CreateTable": message_of(
        catalog_pb2.CreateTableRequest, lsmlake__v1__CreateTableRequest__columns=st.one_of(
            columns, columns, many_columns, duplicate_columns),
        lsmlake__v1__CreateTableRequest__options=st.dictionaries(
            st.one_of(st.sampled_from(("bucket", "merge-engine", "bucket-key", "sequence.field", "file.format")),
                      texts), st.one_of(st.sampled_from(("1", "-1", "-2", "0", "99999999999", "x")), texts),
            max_size=3)),
    "/lsmlake.v1.CatalogService/GetTable": message_of(catalog_pb2.GetTableRequest),
    "/lsmlake.v1.CatalogService/ListTables": message_of(catalog_pb2.ListTablesRequest),
    "/lsmlake.v1.CatalogService/DropTable": message_of(
        catalog_pb2.DropTableRequest, lsmlake__v1__DropTableRequest__table=not_seeded_table),
    "/lsmlake.v1.CatalogService/AlterTable": message_of(
        catalog_pb2.AlterTableRequest, lsmlake__v1__AlterTableRequest__table=st.one_of(
            st.just({"database": "db", "table": "alt"}), identifiers())),
    "/lsmlake.v1.CatalogService/RenameTable": message_of(
        catalog_pb2.RenameTableRequest, lsmlake__v1__RenameTableRequest__table=not_seeded_table),
    "/lsmlake.v1.CatalogService/ListTags": message_of(catalog_pb2.ListTagsRequest),
    "/lsmlake.v1.CatalogService/GetTag": message_of(
        catalog_pb2.GetTagRequest, lsmlake__v1__GetTagRequest__tag=tag_names),
    "/lsmlake.v1.CatalogService/CreateTag": message_of(
        catalog_pb2.CreateTagRequest, lsmlake__v1__CreateTagRequest__tag=tag_names),
    "/lsmlake.v1.CatalogService/DeleteTag": message_of(
        catalog_pb2.DeleteTagRequest, lsmlake__v1__DeleteTagRequest__tag=tag_names),
    "/lsmlake.v1.CatalogService/Commit": message_of(catalog_pb2.CommitRequest, depth=5),
    "/lsmlake.v1.CatalogService/GetSnapshot": message_of(catalog_pb2.GetSnapshotRequest),
    "/lsmlake.v1.CatalogService/ListSnapshots": message_of(catalog_pb2.ListSnapshotsRequest),
    "/lsmlake.v1.CatalogService/LatestSnapshot": message_of(catalog_pb2.LatestSnapshotRequest),
    "/lsmlake.v1.CatalogService/SnapshotAtTime": message_of(catalog_pb2.SnapshotAtTimeRequest),
    "/lsmlake.v1.CatalogService/PlanScan": message_of(
        catalog_pb2.PlanScanRequest, lsmlake__v1__PredicateTerm__column=st.one_of(st.sampled_from(COLUMNS), texts),
        lsmlake__v1__PlanScanRequest__filter=st.one_of(st.sampled_from((
            "id = 1 OR (dt < '2024-01-02' AND v IS NOT NULL)", "id IN (1, 2", "(((", "nope = 1", "id = 'x'", "v >",
            "id = 1 AND", "dt = X'ff'")), texts)),
    "/lsmlake.v1.CatalogService/ExpireSnapshots": message_of(catalog_pb2.ExpireSnapshotsRequest),
    "/lsmlake.v1.CatalogService/RemoveOrphanFiles": message_of(catalog_pb2.RemoveOrphanFilesRequest),
    "/lsmlake.v1.CatalogService/SyncIceberg": message_of(catalog_pb2.SyncIcebergRequest),
    "/lsmlake.v1.CatalogService/WatchSnapshots": message_of(catalog_pb2.WatchSnapshotsRequest),
    "/lsmlake.v1.CatalogService/RequestCompaction": message_of(catalog_pb2.RequestCompactionRequest, depth=5),
    "/lsmlake.v1.CatalogService/StartCompaction": message_of(
        catalog_pb2.StartCompactionRequest, lsmlake__v1__StartCompactionRequest__plan_id=plan_ids),
    "/lsmlake.v1.CatalogService/CompleteCompaction": message_of(
        catalog_pb2.CompleteCompactionRequest, depth=5, lsmlake__v1__CompleteCompactionRequest__plan_id=plan_ids),
    "/lsmlake.v1.CatalogService/RollbackCompaction": message_of(
        catalog_pb2.RollbackCompactionRequest, lsmlake__v1__RollbackCompactionRequest__plan_id=plan_ids),
    "/lsmlake.v1.CatalogService/ListCompactionPlans": message_of(catalog_pb2.ListCompactionPlansRequest),
    "/lsmlake.v1.CatalogService/ListTableHealth": message_of(catalog_pb2.ListTableHealthRequest),
    "/lsmlake.v1.CatalogService/FindWrites": message_of(catalog_pb2.FindWritesRequest),
    "/lsmlake.v1.CatalogService/AllocateSequences": message_of(catalog_pb2.AllocateSequencesRequest),
    "/lsmlake.v1.CatalogService/AssignBuckets": message_of(catalog_pb2.AssignBucketsRequest),
    "/lsmlake.v1.WriterService/Write": _write_streams(),
    "/lsmlake.v1.WriterService/WriteRows": message_of(
        writer_pb2.WriteRowsRequest, lsmlake__v1__WriteRowsRequest__rows_json=st.lists(json_rows, max_size=4),
        lsmlake__v1__WriteRowsRequest__options=st.dictionaries(st.sampled_from(("commit", "x")),
                                                               st.sampled_from(("now", "later")), max_size=2)),
    "/lsmlake.v1.CompactorService/TriggerCompaction": message_of(compactor_pb2.TriggerCompactionRequest),
    "/lsmlake.v1.CompactorService/CompactionStatus": message_of(compactor_pb2.CompactionStatusRequest),
    "/lsmlake.v1.CompactorService/BucketLevels": message_of(compactor_pb2.BucketLevelsRequest),
}


def all_methods() -> dict[str, Any]:
    return {f"/{s.full_name}/{m.name}": m for s in SERVICES for m in s.methods}


def test_every_rpc_has_a_fuzz_strategy() -> None:
    """A new RPC cannot slip by unfuzzed."""
    methods = set(all_methods())
    assert methods - set(REQUESTS) == set(), "RPCs without a fuzz strategy"
    assert set(REQUESTS) - methods == set(), "fuzz strategies of RPCs that no longer exist"


def _invoke(lake: Lake, method: str, request: Any) -> Callable[[], Any]:
    service, name = method.strip("/").split("/")
    stub = {"lsmlake.v1.CatalogService": lake.catalog, "lsmlake.v1.WriterService": lake.writer,
            "lsmlake.v1.CompactorService": lake.compactor}[service]
    rpc = getattr(stub, name)
    if name == "Write":
        return lambda: rpc(iter(request), timeout=CALL_TIMEOUT_S)
    if name == "WatchSnapshots":
        return lambda: _watch(rpc, request)
    return lambda: rpc(request, timeout=CALL_TIMEOUT_S)


def _watch(rpc: Any, request: Any) -> list[Any]:
    """The snapshots streamed until the deadline; a valid request streams until then, a bad one is refused."""
    got = []
    try:
        for r in rpc(request, timeout=WATCH_S):
            got.append(r)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
        t = request.table
        assert t.database == "db" and t.table in (*TABLES, "alt"), f"WatchSnapshots hung on {request}"
    return got


def _check_serving(lake: Lake) -> None:
    for channel in lake.channels.values():
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30).status
        assert status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("method", sorted(REQUESTS))
def test_hostile_messages(lake: Lake, method: str) -> None:
    @FUZZ
    @given(request=REQUESTS[method])
    def run(request: Any) -> None:
        fuzz_call(lake, method, _invoke(lake, method, request))

    run()
    _check_serving(lake)
    print(f"\n{method}:", dict(OUTCOMES.get(method, {}).most_common()))


@pytest.mark.parametrize("method", sorted(REQUESTS))
def test_undecodable_bytes(lake: Lake, method: str) -> None:
    """Raw bytes sent as the serialized request: whatever protobuf makes of them, the answer is clear."""
    kind = all_methods()[method]
    # a field tag with wire type 7 (which does not exist) never decodes
    never = st.builds(lambda b: b"\x0f" + b, st.binary(max_size=16))
    payloads = st.one_of(never, st.binary(max_size=256), st.sampled_from((b"\xff" * 64, b"\x0a\xff\xff\xff\xff\x0f")))

    @FUZZ
    @given(payload=payloads)
    def run(payload: bytes) -> None:
        channel = lake.channels[method.split("/")[1]]
        if kind.client_streaming:
            rpc = channel.stream_unary(method)
            call: Callable[[], Any] = lambda: rpc(iter([payload, payload]), timeout=CALL_TIMEOUT_S)  # noqa: E731
        elif kind.server_streaming:
            rpc = channel.unary_stream(method)
            call = lambda: list(rpc(payload, timeout=WATCH_S))  # noqa: E731
        else:
            rpc = channel.unary_unary(method)
            call = lambda: rpc(payload, timeout=CALL_TIMEOUT_S)  # noqa: E731
        try:
            fuzz_call(lake, method, call)
        except grpc.RpcError as e:  # only a watch of a real table, decoded from the bytes, outlives its deadline
            assert kind.server_streaming and e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e
            request = catalog_pb2.WatchSnapshotsRequest.FromString(payload)
            assert request.table.database == "db", f"WatchSnapshots hung on {request}"

    run()
    _check_serving(lake)


def test_a_refusal_names_the_problem(lake: Lake) -> None:
    """Spot checks that the reasons say what is wrong (the fuzz only checks that there is one)."""
    pk = common_pb2.TableIdentifier(database="db", table="pk")
    cases = [
        (lambda: lake.catalog.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="../x"), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "database name"),
        (lambda: lake.catalog.GetTable(catalog_pb2.GetTableRequest(
            table=common_pb2.TableIdentifier(database="db", table="a/b")), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "table name"),
        (lambda: lake.catalog.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="x" * 100_000), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "database name"),
        (lambda: lake.catalog.ListCompactionPlans(catalog_pb2.ListCompactionPlansRequest(
            table=common_pb2.TableIdentifier(database="db", table="pk"), states=[42]), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "plan state 42"),
        (lambda: lake.compactor.TriggerCompaction(compactor_pb2.TriggerCompactionRequest(
            table=common_pb2.TableIdentifier(database="db", table="pk"), bucket=-1), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "bucket -1"),
        (lambda: lake.catalog.CreateTable(catalog_pb2.CreateTableRequest(
            table=common_pb2.TableIdentifier(database="db", table="deep"),
            columns=[catalog_pb2.Column(name="a", type="ARRAY<" * 100 + "INT" + ">" * 100)]), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "nested"),
        (lambda: lake.catalog.PlanScan(catalog_pb2.PlanScanRequest(table=pk, buckets=[0, -5]), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "buckets [-5]"),
        (lambda: lake.catalog.RollbackCompaction(catalog_pb2.RollbackCompactionRequest(
            table=pk, plan_id="1", output_files=["data-1.parquet", "../data-2.parquet"]), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "output_files[1]"),
        (lambda: lake.catalog.AssignBuckets(catalog_pb2.AssignBucketsRequest(
            table=pk, partitions=[catalog_pb2.PartitionKeys(key_hashes=[1])]), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "does not have dynamic buckets"),
        (lambda: lake.catalog.AssignBuckets(catalog_pb2.AssignBucketsRequest(table=pk), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "the request has 0 key hashes"),
        (lambda: lake.catalog.AssignBuckets(catalog_pb2.AssignBucketsRequest(
            table=pk, partitions=[catalog_pb2.PartitionKeys(key_hashes=[0] * 1_000_001)]), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "the request has 1000001 key hashes"),
        (lambda: lake.catalog.AssignBuckets(catalog_pb2.AssignBucketsRequest(
            table=pk, partitions=[catalog_pb2.PartitionKeys(key_hashes=[1]), catalog_pb2.PartitionKeys(
                key_hashes=[2])]), timeout=30),
         grpc.StatusCode.INVALID_ARGUMENT, "partitions[1]: that partition is named twice"),
        (lambda: lake.channels["lsmlake.v1.CatalogService"].unary_unary("/lsmlake.v1.CatalogService/GetTable")(
            b"\x0f\x00", timeout=30), grpc.StatusCode.INVALID_ARGUMENT, "GetTableRequest"),
    ]
    for call, code, words in cases:
        with pytest.raises(grpc.RpcError) as e:
            call()
        check_refusal("spot check", e.value)
        assert e.value.code() == code and words in e.value.details(), (code, words, e.value.details()[:300])


def test_rollback_takes_output_file_names(lake: Lake) -> None:
    """Output files are named like data files ("data-....parquet"): a rollback naming them is accepted."""
    ident = common_pb2.TableIdentifier(database="db", table="rb")
    lake.catalog.CreateTable(catalog_pb2.CreateTableRequest(
        table=ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL")], primary_keys=["id"],
        options={"bucket": "1"}), timeout=CALL_TIMEOUT_S)
    lake.writer.WriteRows(writer_pb2.WriteRowsRequest(table=ident, rows_json=['{"id": 1}'], options={"commit": "now"}),
                          timeout=CALL_TIMEOUT_S)
    s = lake.catalog.PlanScan(catalog_pb2.PlanScanRequest(table=ident, all_levels=True),
                              timeout=CALL_TIMEOUT_S).splits[0]
    plan = lake.catalog.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=ident, units=[
        catalog_pb2.CompactionUnit(partition=s.partition, bucket=s.bucket, total_buckets=s.total_buckets,
                                   input_files=s.files, output_level=5)]), timeout=CALL_TIMEOUT_S).plan
    lake.catalog.StartCompaction(catalog_pb2.StartCompactionRequest(table=ident, plan_id=plan.plan_id, owner="me"),
                                 timeout=CALL_TIMEOUT_S)
    reply = fuzz_call(lake, "RollbackCompaction", lambda: lake.catalog.RollbackCompaction(
        catalog_pb2.RollbackCompactionRequest(table=ident, plan_id=plan.plan_id, requeue=True,
                                              output_files=[f"{plan.output_file_prefix}0.parquet"]),
        timeout=CALL_TIMEOUT_S))
    assert reply is not None and reply.plan.state == catalog_pb2.COMPACTION_PLAN_STATE_REQUESTED
