"""The latest snapshot on an object store: a snapshot a manager read or published is checked by its entity tag (two
HEADs at once) instead of read again, and is never returned once the object changed (the table dropped and made
again under the same name, the snapshot replaced) or a newer one exists."""

from __future__ import annotations

import dataclasses
import uuid

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.snapshot import SnapshotManager
from tests.support.s3_requests import S3RequestLog
from tests.support.s3_server import S3Server


def _rows(start: int, n: int = 3) -> pa.Table:
    return pa.table({"k": pa.array(range(start, start + n), pa.int64()), "v": ["x"] * n})


def test_a_published_snapshot_is_the_latest_after_two_heads_and_no_get(s3_server: S3Server) -> None:
    prefix = f"wh-{uuid.uuid4().hex[:12]}"
    cat = FileSystemCatalog(s3_server.warehouse(prefix))
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t.write_arrow(_rows(0))
    manager = t.snapshots
    log = S3RequestLog(s3_server.log_path)
    mark = log.mark()
    latest = manager.latest()
    seen = sorted((r.kind, r.key.rsplit("/", 1)[-1]) for r in log.since(mark, prefix + "/"))
    assert latest is not None and latest.id == 1
    # snapshot-1 unchanged (its entity tag), snapshot-2 absent: no read of the LATEST hint or of the snapshot
    assert seen == [("HEAD", "snapshot-1"), ("HEAD 404", "snapshot-2")], seen
    t.write_arrow(_rows(10))
    assert manager.latest().id == 2  # type: ignore[union-attr]


def test_a_snapshot_replaced_under_its_name_is_read_again(s3_server: S3Server) -> None:
    """A table dropped and made again reaches the same snapshot id with other content: the remembered snapshot's
    entity tag no longer matches, so the new one is read."""
    wh = s3_server.warehouse()
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t.write_arrow(_rows(0))
    manager = t.snapshots
    first = manager.latest()
    assert first is not None
    # another process replaces snapshot-1 (as a drop and a create of the table would)
    other = SnapshotManager(FileSystemCatalog(wh).io, t.path)
    other.io.delete(other.path(1))
    replaced = dataclasses.replace(first, uuid=str(uuid.uuid4()), commit_user="someone-else")
    assert other.publish(replaced)
    got = manager.latest()
    assert got is not None and got.uuid == replaced.uuid and got.commit_user == "someone-else"


def test_a_newer_snapshot_of_another_writer_is_found(s3_server: S3Server) -> None:
    wh = s3_server.warehouse()
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t.write_arrow(_rows(0))
    assert t.snapshots.latest().id == 1  # type: ignore[union-attr]
    FileSystemCatalog(wh).get_table("db.t").write_arrow(_rows(10))  # another writer
    got = t.snapshots.latest()
    assert got is not None and got.id == 2

