"""Kill -9 between commit and publish: after a restart every snapshot's event reaches Kafka.

Two crash points, injected with `--fault` (the process ends with `os._exit`, as a SIGKILL would leave it):
- exit-after-snapshot: the snapshot is in the warehouse, the metadata store never recorded it;
- exit-after-commit: the store recorded the commit and its outbox event, the relay never published it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.kafka.broker import EmbeddedBroker, free_port
from lsmlake.kafka.client import consumer
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2, events_pb2
from lsmlake.rpc.convert import changes_to_proto
from tests.support.health_check import serving

pytestmark = pytest.mark.integration

TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


class Proc:
    """One catalog_svc process on a fixed port, so that a restarted one is found at the same address."""

    def __init__(self, warehouse: Path, port: int, bootstrap: str, fault: str | None, *extra: str) -> None:
        args = [sys.executable, "-m", "catalog_svc", "--warehouse", str(warehouse), "--port", str(port),
                "--kafka", bootstrap, *extra]
        if fault:
            args += ["--fault", fault]
        self.log = warehouse.parent / f"catalog-{uuid.uuid4().hex[:6]}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = catalog_pb2_grpc.CatalogServiceStub(self.channel)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            assert self.proc.poll() is None, f"catalog_svc exited: {self.log.read_text()[-2000:]}"
            if serving(self.channel):
                break
            assert time.monotonic() < deadline, "catalog_svc never became SERVING"
            time.sleep(0.1)

    def close(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _events(bootstrap: str, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], list[Any]]:
    """Events of the `data-files` topic by (table, snapshot id), read from the start until all wanted are seen."""
    c = consumer(bootstrap, f"recovery-{uuid.uuid4().hex[:8]}", ["data-files"])
    seen: dict[tuple[str, int], list[Any]] = {}
    try:
        deadline = time.monotonic() + 60
        while not wanted <= set(seen):
            assert time.monotonic() < deadline, f"events seen for {sorted(seen)}, wanted {sorted(wanted)}"
            for records in c.poll(timeout_ms=200).values():
                for r in records:
                    e = events_pb2.Envelope.FromString(r.value).data_files
                    seen.setdefault((e.table.table, e.snapshot_id), []).append(e)
    finally:
        c.close()
    return seen


@pytest.mark.parametrize("fault", ["exit-after-snapshot", "exit-after-commit"])
def test_event_is_delivered_after_a_crash_between_commit_and_publish(
        fault: str, broker: EmbeddedBroker, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    port = free_port()
    name = fault.replace("-", "_")
    ident = common_pb2.TableIdentifier(database="db", table=name)
    crashing = Proc(warehouse, port, broker.bootstrap, fault)
    try:
        crashing.stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db"), timeout=TIMEOUT_S)
        crashing.stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL")], primary_keys=["id"],
            options={"bucket": "1"}), timeout=TIMEOUT_S)
        w = FileSystemCatalog(str(warehouse)).get_table(f"db.{name}").new_write()
        w.write(pa.table({"id": [1, 2, 3]}))
        request = catalog_pb2.CommitRequest(table=ident, commit_user="writer-1", commit_identifier=7,
                                            kind=common_pb2.COMMIT_KIND_APPEND,
                                            changes=[changes_to_proto(m) for m in w.prepare_commit()])
        with pytest.raises(grpc.RpcError) as info:
            crashing.stub.Commit(request, timeout=TIMEOUT_S)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # the reply was lost
        assert crashing.proc.wait(TIMEOUT_S) == 137
    finally:
        crashing.close()
    assert FileSystemCatalog(str(warehouse)).get_table(f"db.{name}").snapshots.latest_id() == 1

    restarted = Proc(warehouse, port, broker.bootstrap, None)
    try:
        events = _events(broker.bootstrap, {(name, 1)})
        assert [len(e.new_files) for e in events[(name, 1)]][:1] == [1]
        assert {f.file_name for e in events[(name, 1)] for f in e.new_files} == \
            {f.file_name for c in request.changes for f in c.new_files}
        # the writer retries the commit whose reply it lost: it is not applied twice
        again = restarted.stub.Commit(request, timeout=TIMEOUT_S)
        assert (again.snapshot_id, again.already_committed) == (1, True)
        snaps = restarted.stub.ListSnapshots(catalog_pb2.ListSnapshotsRequest(table=ident), timeout=TIMEOUT_S)
        assert [s.id for s in snaps.snapshots] == [1]
    finally:
        restarted.close()
    assert restarted.proc.returncode == 0, restarted.log.read_text()[-2000:]


@pytest.mark.parametrize("catch_up", ["next-commit", "background-pass"])
def test_iceberg_metadata_left_behind_by_a_crash_is_published_after_a_restart(
        catch_up: str, broker: EmbeddedBroker, tmp_path: Path) -> None:
    """The catalog dies after recording a commit and before publishing its Iceberg metadata; once restarted, the
    next commit (here the writer's retry of the commit whose reply it lost) or the background pass publishes it."""
    from pyiceberg.table import StaticTable

    from lsmlake.iceberg import current_metadata_location

    warehouse = tmp_path / "wh"
    port = free_port()
    ident = common_pb2.TableIdentifier(database="db", table="ice")
    crashing = Proc(warehouse, port, broker.bootstrap, "exit-after-commit", "--iceberg-interval", "0")
    try:
        crashing.stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db"), timeout=TIMEOUT_S)
        crashing.stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                                  catalog_pb2.Column(name="v", type="STRING")], primary_keys=["id"],
            options={"bucket": "1", "metadata.iceberg.storage": "table-location",
                     "deletion-vectors.enabled": "true"}), timeout=TIMEOUT_S)
        w = FileSystemCatalog(str(warehouse)).get_table("db.ice").new_write()
        w.write(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}))
        request = catalog_pb2.CommitRequest(table=ident, commit_user="writer-1", commit_identifier=1,
                                            kind=common_pb2.COMMIT_KIND_APPEND,
                                            changes=[changes_to_proto(m) for m in w.prepare_commit()])
        with pytest.raises(grpc.RpcError) as info:
            crashing.stub.Commit(request, timeout=TIMEOUT_S)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert crashing.proc.wait(TIMEOUT_S) == 137
    finally:
        crashing.close()
    table = FileSystemCatalog(str(warehouse)).get_table("db.ice")
    assert table.snapshots.latest_id() == 1 and current_metadata_location(table) is None  # between the two

    interval = "0.2" if catch_up == "background-pass" else "0"
    restarted = Proc(warehouse, port, broker.bootstrap, None, "--iceberg-interval", interval)
    try:
        if catch_up == "next-commit":
            again = restarted.stub.Commit(request, timeout=TIMEOUT_S)
            assert (again.snapshot_id, again.already_committed) == (1, True)
        deadline = time.monotonic() + 60
        while (location := current_metadata_location(table)) is None:
            assert time.monotonic() < deadline, f"no Iceberg metadata: {restarted.log.read_text()[-2000:]}"
            time.sleep(0.1)
        # level 0 is not what an Iceberg reader may see of a primary-key table: compact, through the catalog
        from lsmlake.table.compact import compact_buckets

        base, messages = compact_buckets(table, full=True)
        done = restarted.stub.Commit(catalog_pb2.CommitRequest(
            table=ident, commit_user="compactor-1", commit_identifier=1, kind=common_pb2.COMMIT_KIND_COMPACT,
            changes=[changes_to_proto(m) for m in messages]), timeout=TIMEOUT_S)
        assert done.snapshot_id == 2
        location = current_metadata_location(table)
        assert location is not None
        iceberg = StaticTable.from_metadata(location)
        current = iceberg.current_snapshot()
        assert current is not None and current.snapshot_id == 2
        assert sorted(iceberg.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
            {"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}]
    finally:
        restarted.close()
    assert restarted.proc.returncode == 0, restarted.log.read_text()[-2000:]

