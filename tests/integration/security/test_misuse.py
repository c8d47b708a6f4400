"""Callers holding valid tokens who misuse them: what each may do to other callers' data (issue 19).

A real catalog and writer service on loopback ports check tokens; the attackers hold genuine writer or
service tokens and send well-formed requests. Each test names what it reproduced on the old code.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pyarrow as pa
import pytest

from catalog_svc.server import CatalogServer
from catalog_svc.server import Settings as CatalogSettings
from lsmlake import Client
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc.convert import changes_to_proto, file_to_proto, index_to_proto
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from tests.support.dynamic_index import check_index
from writer_svc.server import Settings as WriterSettings
from writer_svc.server import WriterServer

TIMEOUT_S = 30.0
PRINCIPALS = {"root": "admin", "writer-svc": "service", "compactor-a": "service", "compactor-b": "service",
              "bob": "writer", "eve": "writer"}


@dataclass
class Cluster:
    catalog: str
    writer: str
    warehouse: str
    tokens: dict[str, str]

    def client(self, who: str) -> Client:
        return Client(self.catalog, writer=self.writer, token=self.tokens[who], timeout_s=TIMEOUT_S)

    def stub(self, who: str) -> tuple[grpc.Channel, catalog_pb2_grpc.CatalogServiceStub]:
        ch = ChannelSecurity(token=self.tokens[who]).open_channel(self.catalog)
        return ch, catalog_pb2_grpc.CatalogServiceStub(ch)

    def ids(self, table: str) -> list[int]:
        t = FileSystemCatalog(self.warehouse).get_table(table)
        return sorted(t.to_arrow().column("id").to_pylist())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("misuse")
    tokens = {p: secrets.token_urlsafe(24) for p in PRINCIPALS}
    token_file = root / "tokens.json"
    token_file.write_text(json.dumps({"tokens": [{"principal": p, "role": r, "token": tokens[p]}
                                                 for p, r in PRINCIPALS.items()]}))
    warehouse = str(root / "wh")
    security = ServerSecurity(auth_tokens=str(token_file))
    catalog = CatalogServer(CatalogSettings(warehouse=warehouse, metastore=f"sqlite:///{root}/meta.sqlite",
                                            security=security, expire_interval_s=0, orphan_interval_s=0))
    catalog.start()
    try:
        writer = WriterServer(WriterSettings(
            warehouse=warehouse, catalog=f"127.0.0.1:{catalog.port}", commit_interval_s=0.1, security=security,
            catalog_security=ChannelSecurity(token=tokens["writer-svc"])))
        writer.start()
        try:
            yield Cluster(f"127.0.0.1:{catalog.port}", f"127.0.0.1:{writer.port}", warehouse, tokens)
        finally:
            writer.stop()
    finally:
        catalog.stop()


def _table(cluster: Cluster, name: str, options: dict[str, str] | None = None, pk: bool = False) -> str:
    with cluster.client("root") as admin:
        admin.create_database("m", ignore_if_exists=True)
        admin.create_table(f"m.{name}", "id BIGINT NOT NULL, v STRING", primary_keys=["id"] if pk else [],
                           options={"bucket": "1"} | (options or {}) if pk else (options or {}))
    return f"m.{name}"


def _written(cluster: Cluster, table: str, ids: list[int]) -> list[common_pb2.FileChanges]:
    """Level-0 files of these rows in the table's folder, not committed (what a writer-token holder can make)."""
    w = FileSystemCatalog(cluster.warehouse).get_table(table).new_write()
    w.write(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]}))
    return [changes_to_proto(m) for m in w.prepare_commit()]


def _ident(table: str) -> common_pb2.TableIdentifier:
    db, name = table.split(".")
    return common_pb2.TableIdentifier(database=db, table=name)


def _refused(call: object, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as e:
        call()  # type: ignore[operator]
    assert e.value.code() == code, e.value.details()
    return str(e.value.details())


def test_commits_under_another_principals_commit_user_cannot_swallow_its_writes(cluster: Cluster) -> None:
    """Old code: empty commits sent by eve under the writer service's commit user with its next identifiers
    were recorded as that user's; the writer's next commits were answered "already committed" and bob's
    acknowledged rows never landed."""
    table = _table(cluster, "hijack")
    with cluster.client("bob") as bob:
        bob.write(table, pa.table({"id": [1], "v": ["a"]}), commit_now=True)
        snap = bob.latest_snapshot(table)
    assert snap is not None
    ch, eve = cluster.stub("eve")
    with ch:
        for n in range(1, 30):  # the identifiers the writer service uses next
            eve.Commit(catalog_pb2.CommitRequest(table=_ident(table), commit_user=snap.commit_user,
                                                 commit_identifier=snap.commit_identifier + n,
                                                 kind=common_pb2.COMMIT_KIND_APPEND), timeout=TIMEOUT_S)
    with cluster.client("bob") as bob:
        for i in range(2, 12):
            bob.write(table, pa.table({"id": [i], "v": ["b"]}), commit_now=True)
        users = {s.commit_user for s in bob.snapshots(table)}
    assert cluster.ids(table) == list(range(1, 12))
    # every commit user is in its principal's namespace: eve's commits are eve's
    assert {u.split("/", 1)[0] for u in users} == {"writer-svc", "eve"}


def test_a_request_id_claimed_by_another_principal_does_not_answer_for_yours(cluster: Cluster) -> None:
    """Old code: eve committed request id "order-42" first; bob's write with that id was answered as already
    written and its rows never landed. FindWrites also told eve which of bob's ids were committed."""
    table = _table(cluster, "ids")
    ch, eve = cluster.stub("eve")
    with ch:
        eve.Commit(catalog_pb2.CommitRequest(table=_ident(table), commit_user="eve-1", commit_identifier=1,
                                             kind=common_pb2.COMMIT_KIND_APPEND, changes=_written(cluster, table, [0]),
                                             request_ids=["order-42"]), timeout=TIMEOUT_S)
        with cluster.client("bob") as bob:
            first = bob.write(table, pa.table({"id": [42], "v": ["bob"]}), request_id="order-42")
            again = bob.write(table, pa.table({"id": [42], "v": ["bob"]}), request_id="order-42")
        assert not first.already_written and again.already_written and again.snapshot_id == first.snapshot_id
        seen = eve.FindWrites(catalog_pb2.FindWritesRequest(table=_ident(table), request_ids=["order-42"]),
                              timeout=TIMEOUT_S).snapshot_ids
    assert dict(seen) != {"order-42": first.snapshot_id}  # eve sees her own write, not bob's
    assert cluster.ids(table) == [0, 42]


def test_a_resend_with_other_files_is_not_answered_as_committed(cluster: Cluster) -> None:
    """Old code: a second commit with a recorded (user, identifier) was answered "already committed" whatever
    it carried, so its files were dropped while the caller believed them committed."""
    table = _table(cluster, "digest")
    ch, bob = cluster.stub("bob")
    with ch:
        def commit(ids: list[int]) -> catalog_pb2.CommitResponse:
            return bob.Commit(catalog_pb2.CommitRequest(table=_ident(table), commit_user="bob-1", commit_identifier=1,
                                                        kind=common_pb2.COMMIT_KIND_APPEND,
                                                        changes=_written(cluster, table, ids)), timeout=TIMEOUT_S)
        first = commit([1])
        details = _refused(lambda: commit([2]), grpc.StatusCode.ALREADY_EXISTS)
    assert "other files" in details and first.snapshot_id == 1
    assert cluster.ids(table) == [1]


def test_the_writer_role_cannot_remove_data_or_steer_the_services(cluster: Cluster) -> None:
    """Old code: a writer token emptied a table with an OVERWRITE of no files, deleted live files with a COMPACT
    without a plan, and set the Kafka offsets the writer service resumes from."""
    table = _table(cluster, "keep", pk=True)
    with cluster.client("bob") as bob:
        bob.write(table, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), commit_now=True)
    t = FileSystemCatalog(cluster.warehouse).get_table(table)
    live = [e for e in t.manifests.live(t.snapshots.latest().base_manifest_list,
                                        t.snapshots.latest().delta_manifest_list).values()]
    deleting = common_pb2.FileChanges(partition=live[0].partition, bucket=live[0].bucket, total_buckets=1,
                                      deleted_files=[file_to_proto(e.file) for e in live])
    before = t.snapshots.latest_id()
    ch, bob = cluster.stub("bob")
    with ch:
        base = {"table": _ident(table), "commit_user": "bob-2"}
        for n, request in enumerate([
                catalog_pb2.CommitRequest(kind=common_pb2.COMMIT_KIND_OVERWRITE, overwrite_all_partitions=True, **base),
                catalog_pb2.CommitRequest(kind=common_pb2.COMMIT_KIND_COMPACT, changes=[deleting], **base),
                catalog_pb2.CommitRequest(kind=common_pb2.COMMIT_KIND_APPEND,
                                          properties={"lsmlake.kafka-offset.orders.0": "999999"}, **base)]):
            request.commit_identifier = n + 1
            details = _refused(lambda r=request: bob.Commit(r, timeout=TIMEOUT_S), grpc.StatusCode.PERMISSION_DENIED)
            assert "bob has role writer" in details and "nothing was applied" in details
    assert FileSystemCatalog(cluster.warehouse).get_table(table).snapshots.latest_id() == before
    assert cluster.ids(table) == [1, 2, 3]
    ch, root = cluster.stub("root")
    with ch:  # an admin may overwrite
        root.Commit(catalog_pb2.CommitRequest(table=_ident(table), commit_user="root-1", commit_identifier=1,
                                              kind=common_pb2.COMMIT_KIND_OVERWRITE, overwrite_all_partitions=True),
                    timeout=TIMEOUT_S)
    assert cluster.ids(table) == []


def test_another_principal_cannot_roll_back_a_plan_it_does_not_run(cluster: Cluster) -> None:
    """Old code: any writer token could roll back (and so delete the outputs of) any compactor's plan."""
    table = _table(cluster, "plans", pk=True)
    with cluster.client("bob") as bob:
        for i in range(3):
            bob.write(table, pa.table({"id": [i], "v": ["x"]}), commit_now=True)
    t = FileSystemCatalog(cluster.warehouse).get_table(table)
    live = list(t.manifests.live(t.snapshots.latest().base_manifest_list,
                                 t.snapshots.latest().delta_manifest_list).values())
    unit = catalog_pb2.CompactionUnit(partition=live[0].partition, bucket=0, output_level=5,
                                      input_files=[file_to_proto(e.file) for e in live])
    a_ch, a = cluster.stub("compactor-a")
    b_ch, b = cluster.stub("compactor-b")
    r_ch, root = cluster.stub("root")
    with a_ch, b_ch, r_ch:
        plan = a.RequestCompaction(catalog_pb2.RequestCompactionRequest(table=_ident(table), units=[unit]),
                                   timeout=TIMEOUT_S).plan
        started = a.StartCompaction(catalog_pb2.StartCompactionRequest(table=_ident(table), plan_id=plan.plan_id,
                                                                       owner="instance-1"), timeout=TIMEOUT_S).plan
        rollback = catalog_pb2.RollbackCompactionRequest(table=_ident(table), plan_id=plan.plan_id, reason="mine now")
        details = _refused(lambda: b.RollbackCompaction(rollback, timeout=TIMEOUT_S), grpc.StatusCode.PERMISSION_DENIED)
        assert "compactor-b" in details
        assert started.owner == "compactor-a/instance-1"
        # nor complete it under the same owner name
        complete = catalog_pb2.CompleteCompactionRequest(table=_ident(table), plan_id=plan.plan_id, owner="instance-1",
                                                         commit_user="b", commit_identifier=1)
        _refused(lambda: b.CompleteCompaction(complete, timeout=TIMEOUT_S), grpc.StatusCode.FAILED_PRECONDITION)
        # another instance of the same principal (a restarted compactor) and an admin may
        after = root.RollbackCompaction(rollback, timeout=TIMEOUT_S).plan
    assert after.state == catalog_pb2.COMPACTION_PLAN_STATE_ROLLED_BACK


def test_external_paths_outside_the_tables_roots_are_refused(cluster: Cluster, tmp_path: Path) -> None:
    """Old code: an APPEND naming a changelog file whose external_path was any file was accepted, and the
    catalog's expiration later deleted that file; a data file that did not exist was accepted too."""
    outside = tmp_path / "precious.txt"
    outside.write_text("not the table's")
    plain = _table(cluster, "noext")
    stray = _written(cluster, plain, [1])
    stray[0].changelog_files.add().CopyFrom(stray[0].new_files[0])
    stray[0].changelog_files[0].file_name = "changelog-x.parquet"
    stray[0].changelog_files[0].external_path = str(outside)
    stray[0].changelog_files[0].file_size = outside.stat().st_size
    ch, bob = cluster.stub("bob")
    with ch:
        details = _refused(lambda: bob.Commit(catalog_pb2.CommitRequest(
            table=_ident(plain), commit_user="bob-4", commit_identifier=1, kind=common_pb2.COMMIT_KIND_APPEND,
            changes=stray), timeout=TIMEOUT_S), grpc.StatusCode.INVALID_ARGUMENT)
    assert "names no external roots" in details
    assert cluster.ids(plain) == [] and outside.read_text() == "not the table's"
    root = tmp_path / "ext"
    (root / "b").mkdir(parents=True)
    table = _table(cluster, "ext", options={"data-file.external-paths": str(root)})
    changes = _written(cluster, table, [1])
    f = changes[0].new_files[0]
    local = os.path.join(FileSystemCatalog(cluster.warehouse).get_table(table).path, "bucket-0", f.file_name)
    ch, bob = cluster.stub("bob")
    with ch:
        def commit(path: str, n: int) -> catalog_pb2.CommitResponse:
            c = common_pb2.FileChanges()
            c.CopyFrom(changes[0])
            c.new_files[0].external_path = path
            return bob.Commit(catalog_pb2.CommitRequest(table=_ident(table), commit_user="bob-3", commit_identifier=n,
                                                        kind=common_pb2.COMMIT_KIND_APPEND, changes=[c]),
                              timeout=TIMEOUT_S)
        for n, (path, words) in enumerate([(str(outside), "not under an external root"),
                                           (f"{root}/b/../../precious.txt", "normal form"),
                                           (f"{root}/b/missing.parquet", "does not exist"),
                                           ("relative/x.parquet", "normal form")], start=1):
            assert words in _refused(lambda p=path, i=n: commit(p, i), grpc.StatusCode.INVALID_ARGUMENT)
        moved = root / "b" / f.file_name
        os.replace(local, moved)
        assert commit(str(moved), 9).snapshot_id >= 1
    assert outside.read_text() == "not the table's"
    assert cluster.ids(table) == [1]


def test_a_writer_token_cannot_move_keys_of_a_dynamic_bucket_table(cluster: Cluster) -> None:
    """A writer who could assign buckets or replace a bucket's HASH index could put a key in a second bucket
    (two live rows for one key): both are for the services only, and change nothing when a writer tries."""
    table = _table(cluster, "dyn", {"bucket": "-1", "dynamic-bucket.target-row-num": "2"}, pk=True)
    with cluster.client("bob") as bob:
        bob.write(table, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), commit_now=True)
    t = FileSystemCatalog(cluster.warehouse).get_table(table)
    before = t.snapshots.latest_id()
    hash_entry = next(e for e in t.indexes.read(t.snapshots.latest().index_manifest) if e.index_type == "HASH")
    empty = t.indexes.write_index_file(b"")  # a writer can put files in the table's folder
    forged = common_pb2.FileChanges(partition=hash_entry.partition, bucket=hash_entry.bucket, total_buckets=-1,
                                    new_index_files=[index_to_proto(replace(hash_entry, file_name=empty, file_size=0,
                                                                            row_count=0))],
                                    deleted_index_files=[index_to_proto(hash_entry)])
    ch, eve = cluster.stub("eve")
    with ch:
        details = _refused(lambda: eve.Commit(catalog_pb2.CommitRequest(
            table=_ident(table), commit_user="eve-dyn", commit_identifier=1, kind=common_pb2.COMMIT_KIND_APPEND,
            changes=[forged]), timeout=TIMEOUT_S), grpc.StatusCode.PERMISSION_DENIED)
        assert "HASH index" in details and "nothing was applied" in details
        _refused(lambda: eve.AssignBuckets(catalog_pb2.AssignBucketsRequest(
            table=_ident(table), partitions=[catalog_pb2.PartitionKeys(key_hashes=[1, 2, 3])]), timeout=TIMEOUT_S),
            grpc.StatusCode.PERMISSION_DENIED)
    assert FileSystemCatalog(cluster.warehouse).get_table(table).snapshots.latest_id() == before
    with cluster.client("bob") as bob:  # the same keys again, and new ones: each key in one bucket
        bob.write(table, pa.table({"id": [1, 2, 3, 4, 5], "v": ["x"] * 5}), commit_now=True)
    assert cluster.ids(table) == [1, 2, 3, 4, 5]
    assert len(check_index(cluster.warehouse, table)) == 5
