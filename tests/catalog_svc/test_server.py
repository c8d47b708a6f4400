"""The catalog service as a real process: gRPC on loopback, SQLite metastore, embedded Kafka broker.

One server serves the whole module; the tests run in file order and the last one stops it with SIGTERM.
Asynchronous outcomes (health, Kafka events, shutdown) are polled with deadlines, never slept for.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pypaimon import CatalogFactory

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.data_file_meta import FILE_SOURCE_COMPACT
from lsmlake.kafka.broker import EmbeddedBroker, free_port
from lsmlake.kafka.client import consumer
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, events_pb2
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.table.write import CommitMessage

pytestmark = pytest.mark.integration

DB, TABLE = "db", "t"
IDENT = common_pb2.TableIdentifier(database=DB, table=TABLE)
TIMEOUT_S = 30.0
SERVICE = "lsmlake.v1.CatalogService"


@dataclasses.dataclass
class Server:
    proc: subprocess.Popen[str]
    port: int
    warehouse: str
    bootstrap: str
    stub: catalog_pb2_grpc.CatalogServiceStub
    channel: grpc.Channel
    stdout: list[str]


def _wait_serving(channel: grpc.Channel, proc: subprocess.Popen[str], deadline: float) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    while True:
        assert proc.poll() is None, f"catalog_svc exited with {proc.returncode}"
        try:
            if health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=1.0).status == \
                    health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        assert time.monotonic() < deadline, "catalog_svc never reported SERVING"
        time.sleep(0.1)  # polling interval, bounded by the deadline


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="module")
def server(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    warehouse = str(tmp_path_factory.mktemp("warehouse"))
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(Path(warehouse).parent / "catalog_svc.log", "w") as log:  # the child keeps its own copy
        proc = subprocess.Popen(
            [sys.executable, "-m", "catalog_svc", "--warehouse", warehouse, "--port", str(port),
             "--kafka", broker.bootstrap],
            stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        _wait_serving(channel, proc, time.monotonic() + TIMEOUT_S)
        yield Server(proc, port, warehouse, broker.bootstrap, catalog_pb2_grpc.CatalogServiceStub(channel),
                     channel, lines)
    finally:
        channel.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _code(call: Any, request: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=TIMEOUT_S)
    return info.value.code()


def _write(warehouse: str, rows: dict[str, list[Any]]) -> list[CommitMessage]:
    """Level-0 files written with the library, not committed."""
    w = FileSystemCatalog(warehouse).get_table(f"{DB}.{TABLE}").new_write()
    w.write(pa.table(rows))
    return w.prepare_commit()


def _commit(s: Server, user: str, number: int, kind: common_pb2.CommitKind.ValueType,
            messages: list[CommitMessage]) -> Any:
    return s.stub.Commit(catalog_pb2.CommitRequest(
        table=IDENT, commit_user=user, commit_identifier=number, kind=kind,
        changes=[changes_to_proto(m) for m in messages]), timeout=TIMEOUT_S)


def _snapshot_ids(s: Server) -> list[int]:
    return [x.id for x in s.stub.ListSnapshots(catalog_pb2.ListSnapshotsRequest(table=IDENT),
                                               timeout=TIMEOUT_S).snapshots]


def test_prints_its_address_once_ready(server: Server) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not server.stdout:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert server.stdout[0].strip() == f"catalog_svc listening on 127.0.0.1:{server.port}"


def test_databases_and_tables(server: Server) -> None:
    stub = server.stub
    assert stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name=DB), timeout=TIMEOUT_S).created
    assert _code(stub.CreateDatabase, catalog_pb2.CreateDatabaseRequest(name=DB)) == grpc.StatusCode.ALREADY_EXISTS
    assert DB in stub.ListDatabases(catalog_pb2.ListDatabasesRequest(), timeout=TIMEOUT_S).databases
    created = stub.CreateTable(catalog_pb2.CreateTableRequest(
        table=IDENT, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                              catalog_pb2.Column(name="v", type="STRING", comment="a value")],
        primary_keys=["id"], options={"bucket": "1"}), timeout=TIMEOUT_S)
    assert created.created and [c.name for c in created.table.columns] == ["id", "v"]
    assert created.table.columns[1].comment == "a value" and not created.table.HasField("latest_snapshot_id")
    got = stub.GetTable(catalog_pb2.GetTableRequest(table=IDENT), timeout=TIMEOUT_S).table
    assert list(got.primary_keys) == ["id"] and got.options["bucket"] == "1"
    assert list(stub.ListTables(catalog_pb2.ListTablesRequest(database=DB), timeout=TIMEOUT_S).tables) == [TABLE]
    assert stub.LatestSnapshot(catalog_pb2.LatestSnapshotRequest(table=IDENT),
                               timeout=TIMEOUT_S).HasField("snapshot") is False


def test_bad_names_unknown_tables_and_empty_changes(server: Server) -> None:
    stub = server.stub
    bad = common_pb2.TableIdentifier(database=DB, table="../x")
    assert _code(stub.CreateDatabase, catalog_pb2.CreateDatabaseRequest(name="../x")) == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert _code(stub.GetTable, catalog_pb2.GetTableRequest(table=bad)) == grpc.StatusCode.INVALID_ARGUMENT
    assert _code(stub.CreateTable, catalog_pb2.CreateTableRequest(
        table=bad, columns=[catalog_pb2.Column(name="a", type="INT")])) == grpc.StatusCode.INVALID_ARGUMENT
    assert not any(p.name == "x" for p in Path(server.warehouse).parent.iterdir())
    missing = common_pb2.TableIdentifier(database=DB, table="missing")
    assert _code(stub.GetTable, catalog_pb2.GetTableRequest(table=missing)) == grpc.StatusCode.NOT_FOUND
    assert _code(stub.Commit, catalog_pb2.CommitRequest(
        table=missing, commit_user="u", commit_identifier=1, kind=common_pb2.COMMIT_KIND_APPEND)) == \
        grpc.StatusCode.NOT_FOUND
    assert _code(stub.Commit, catalog_pb2.CommitRequest(table=IDENT, commit_user="u", commit_identifier=1)) == \
        grpc.StatusCode.INVALID_ARGUMENT  # kind missing
    assert _code(stub.ListTables, catalog_pb2.ListTablesRequest(database="nodb")) == grpc.StatusCode.NOT_FOUND
    assert _code(stub.CreateTable, catalog_pb2.CreateTableRequest(
        table=common_pb2.TableIdentifier(database=DB, table="t2"), columns=[catalog_pb2.Column(name="a", type="INT")],
        options={"no.such.option": "1"})) == grpc.StatusCode.INVALID_ARGUMENT
    assert _code(stub.AlterTable, catalog_pb2.AlterTableRequest(table=IDENT)) == grpc.StatusCode.INVALID_ARGUMENT


def test_commits_are_idempotent_conflict_cleanly_and_pypaimon_reads_them(server: Server) -> None:
    stub = server.stub
    first = _write(server.warehouse, {"id": [1, 2, 3], "v": ["a", "b", "c"]})
    r1 = _commit(server, "writer-1", 1, common_pb2.COMMIT_KIND_APPEND, first)
    assert (r1.snapshot_id, r1.already_committed) == (1, False)
    second = _write(server.warehouse, {"id": [3, 4], "v": ["c2", "d"]})
    r2 = _commit(server, "writer-1", 2, common_pb2.COMMIT_KIND_APPEND, second)
    assert (r2.snapshot_id, r2.already_committed) == (2, False)

    retry = _commit(server, "writer-1", 2, common_pb2.COMMIT_KIND_APPEND, second)  # the reply was "lost"
    assert (retry.snapshot_id, retry.already_committed) == (2, True)
    assert _snapshot_ids(server) == [1, 2]

    # a compaction that moves the first file up to the top level without rewriting it
    [msg] = first
    [f] = msg.new_files
    up = dataclasses.replace(f.upgrade(5), file_source=FILE_SOURCE_COMPACT)
    compact = [CommitMessage(msg.partition, msg.bucket, msg.total_buckets, new_files=[up], deleted_files=[f])]
    r3 = _commit(server, "compactor-1", 1, common_pb2.COMMIT_KIND_COMPACT, compact)
    assert (r3.snapshot_id, r3.already_committed) == (3, False)
    # the same compaction again (another compactor): its input is gone
    assert _code(stub.Commit, catalog_pb2.CommitRequest(
        table=IDENT, commit_user="compactor-2", commit_identifier=1, kind=common_pb2.COMMIT_KIND_COMPACT,
        changes=[changes_to_proto(m) for m in compact])) == grpc.StatusCode.FAILED_PRECONDITION
    assert _snapshot_ids(server) == [1, 2, 3]

    snaps = stub.ListSnapshots(catalog_pb2.ListSnapshotsRequest(table=IDENT), timeout=TIMEOUT_S).snapshots
    assert [s.commit_kind for s in snaps] == [common_pb2.COMMIT_KIND_APPEND] * 2 + [common_pb2.COMMIT_KIND_COMPACT]
    assert [(s.commit_user, s.commit_identifier) for s in snaps] == \
        [("writer-1", 1), ("writer-1", 2), ("compactor-1", 1)]
    latest = stub.LatestSnapshot(catalog_pb2.LatestSnapshotRequest(table=IDENT), timeout=TIMEOUT_S).snapshot
    assert latest.id == 3 and latest.total_record_count == 5
    at = stub.SnapshotAtTime(catalog_pb2.SnapshotAtTimeRequest(table=IDENT, time_millis=snaps[1].time_millis),
                             timeout=TIMEOUT_S).snapshot
    assert at.id in (2, 3) and at.time_millis <= snaps[1].time_millis
    assert _code(stub.GetSnapshot, catalog_pb2.GetSnapshotRequest(table=IDENT, snapshot_id=99)) == \
        grpc.StatusCode.NOT_FOUND

    plan = stub.PlanScan(catalog_pb2.PlanScanRequest(table=IDENT), timeout=TIMEOUT_S)
    assert plan.snapshot_id == 3 and len(plan.splits) == 1
    assert sorted((x.file_name, x.level) for x in plan.splits[0].files) == \
        sorted([(f.file_name, 5), (second[0].new_files[0].file_name, 0)])
    assert plan.splits[0].bucket_path == "bucket-0"
    pruned = stub.PlanScan(catalog_pb2.PlanScanRequest(table=IDENT, key_filter=[catalog_pb2.PredicateTerm(
        column="id", op=catalog_pb2.PREDICATE_OP_GT, value="3")]), timeout=TIMEOUT_S)
    assert [x.file_name for x in pruned.splits[0].files] == [second[0].new_files[0].file_name]

    pt = CatalogFactory.create({"warehouse": server.warehouse}).get_table(f"{DB}.{TABLE}")
    rb = pt.new_read_builder()
    rows = rb.new_read().to_arrow(rb.new_scan().plan().splits()).sort_by("id").to_pylist()
    assert rows == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c2"}, {"id": 4, "v": "d"}]


def test_every_snapshot_has_an_event_on_kafka(server: Server) -> None:
    snapshots = {s.id: s for s in server.stub.ListSnapshots(
        catalog_pb2.ListSnapshotsRequest(table=IDENT), timeout=TIMEOUT_S).snapshots}
    assert sorted(snapshots) == [1, 2, 3]
    c = consumer(server.bootstrap, f"test-{uuid.uuid4().hex[:8]}", ["data-files", "compaction-results"])
    seen: dict[int, list[tuple[str, Any]]] = {}
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while set(seen) != set(snapshots):
            assert time.monotonic() < deadline, f"events seen for snapshots {sorted(seen)} only"
            for records in c.poll(timeout_ms=200).values():
                for r in records:
                    env = events_pb2.Envelope.FromString(r.value)
                    which = env.WhichOneof("event")
                    assert which is not None
                    event = getattr(env, which)
                    assert event.table == IDENT and event.snapshot_id in snapshots, event
                    assert r.key == f"{DB}.{TABLE}/{event.partition.hex()}/{event.bucket}".encode()
                    seen.setdefault(event.snapshot_id, []).append((r.topic, event))
    finally:
        c.close()
    for sid, events in seen.items():  # duplicates allowed; each one describes its snapshot
        for topic, event in events:
            assert event.commit_kind == snapshots[sid].commit_kind
            assert event.commit_time_millis == snapshots[sid].time_millis
            assert topic == ("compaction-results" if sid == 3 else "data-files")
    [(_, compaction)] = seen[3][:1]
    assert [f.level for f in compaction.before] == [0] and [f.level for f in compaction.after] == [5]


def test_sigterm_stops_the_server_cleanly(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=TIMEOUT_S) == 0
