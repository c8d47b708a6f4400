"""The latest snapshot on an object store: a snapshot a manager read or published is checked by its entity tag (two
HEADs at once) instead of read again, and is never returned once the object changed (the table dropped and made
again under the same name, the snapshot replaced) or a newer one exists."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.snapshot import SnapshotManager, settle_hints
from lsmlake.fs.file_io import FileIO
from lsmlake.table.commit import LOOK_REUSE_S, reusable_look_s
from tests.support.pypaimon_io import read
from tests.support.s3_requests import S3RequestLog
from tests.support.s3_server import S3Server, pypaimon_options


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
    settle_hints()  # the commit's LATEST hint, written after it returned
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



def _held_hints(monkeypatch: pytest.MonkeyPatch, io: FileIO) -> threading.Event:
    """Make `io` hold every LATEST hint write until the event returned is set (bounded: 30 s)."""
    release = threading.Event()
    write = io.overwrite_atomic

    def held(path: str, data: bytes) -> None:
        if path.endswith("/LATEST"):
            release.wait(30)
        write(path, data)

    monkeypatch.setattr(io, "overwrite_atomic", held)
    return release


def test_a_commit_returns_before_its_latest_hint_is_written_and_readers_find_it(
        s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint is a round trip the caller does not wait for: the commit is acknowledged while it is held, and a
    reader in another process finds the snapshot anyway (the hint names one that has a successor: it lists)."""
    wh = s3_server.warehouse()
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t.write_arrow(_rows(0))
    settle_hints()
    release = _held_hints(monkeypatch, t.io)
    result = t.write_arrow(_rows(10))  # returns although the hint write is held
    assert result is not None and result.snapshot_id == 2
    hint = t.io.read_bytes(f"{t.snapshots.dir}/LATEST")
    try:
        assert hint == b"1"  # not written yet
        reader = FileSystemCatalog(wh).get_table("db.t")
        assert reader.snapshots.latest().id == 2  # type: ignore[union-attr]
        assert reader.to_arrow().num_rows == 6
        from pypaimon import CatalogFactory

        pypaimon_table = CatalogFactory.create(pypaimon_options(wh, s3_server.endpoint)).get_table("db.t")
        assert read(pypaimon_table).num_rows == 6  # pypaimon checks the hint as Paimon does
    finally:
        release.set()
        settle_hints()
    assert t.io.read_bytes(f"{t.snapshots.dir}/LATEST") == b"2"


def test_a_commit_on_a_stale_look_is_redone_not_lost(s3_server: S3Server) -> None:
    """The commit's first attempt takes its writer's look without a request; another writer committing in between
    takes the id it would publish, so the create is refused and the attempt redone on a fresh look."""
    wh = s3_server.warehouse()
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t.write_arrow(_rows(0))
    w = t.new_write()  # looks at the latest snapshot: 1
    w.write(_rows(10))
    messages = w.prepare_commit()
    FileSystemCatalog(wh).get_table("db.t").write_arrow(_rows(20))  # another writer publishes snapshot 2
    log = S3RequestLog(s3_server.log_path)
    mark = log.mark()
    result = t.new_commit().commit(messages)
    creates = [r for r in log.since(mark) if r.method == "PUT" and r.key.endswith(("/snapshot-2", "/snapshot-3"))]
    assert [r.key.rsplit("/", 1)[1] for r in creates] == ["snapshot-2", "snapshot-3"]  # refused, then published
    assert result.snapshot_id == 3
    got = FileSystemCatalog(wh).get_table("db.t").to_arrow()
    assert sorted(got.column("k").to_pylist()) == [0, 1, 2, 10, 11, 12, 20, 21, 22]


@pytest.mark.parametrize(("options", "trusted"), [
    ({}, LOOK_REUSE_S),
    ({"snapshot.time-retained": "2 h"}, LOOK_REUSE_S),
    ({"snapshot.num-retained.max": "50"}, 0.0),       # expiration by count may take a snapshot made a moment ago
    ({"snapshot.time-retained": "30 s"}, 0.0),        # so may expiration by age, with clocks that differ
])
def test_a_look_is_trusted_only_where_retention_cannot_expire_a_snapshot_made_since(
        tmp_path: Path, options: dict[str, str], trusted: float) -> None:
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1", **options})
    assert reusable_look_s(t.options) == trusted
    assert t.new_commit().look_reuse_s == trusted


def test_a_dropped_table_gets_no_hint_back(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A drop right after a commit waits for the commit's hint, which would otherwise land in the deleted folder."""
    wh = s3_server.warehouse()
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    release = _held_hints(monkeypatch, t.io)
    t.write_arrow(_rows(0))
    timer = threading.Timer(0.3, release.set)  # the hint lands after the drop began
    timer.start()
    try:
        cat.drop_table("db.t")
    finally:
        timer.cancel()
        release.set()
        settle_hints()
    assert t.io.list(t.path, recursive=True) == []


def test_a_drop_waits_for_its_own_tables_hints_not_for_a_table_whose_name_begins_the_same(
        s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping db.t settles the hints under db.t's folder: db.t2's held hint is not among them."""
    cat = FileSystemCatalog(s3_server.warehouse())
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t2 = cat.create_table("db.t2", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    t.write_arrow(_rows(0))
    settle_hints()
    release = _held_hints(monkeypatch, t2.io)
    try:
        t2.write_arrow(_rows(0))  # its hint is held: pending in this process
        dropping = threading.Thread(target=cat.drop_table, args=("db.t",))
        dropping.start()
        dropping.join(10)  # the held hint would keep it 30 s
        assert not dropping.is_alive(), "dropping db.t waited for db.t2's hint"
    finally:
        release.set()
        settle_hints()
    assert not cat.table_exists("db.t") and cat.get_table("db.t2").snapshots.latest() is not None


def test_a_forked_child_does_not_wait_for_its_parents_hints(s3_server: S3Server,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread that writes a hint is not in a forked child (a Spark worker, a multiprocessing fork): the child
    forgets the parent's pending hints instead of waiting for them for ever."""
    cat = FileSystemCatalog(s3_server.warehouse())
    cat.create_database("db")
    t = cat.create_table("db.t", "k BIGINT NOT NULL, v STRING", primary_keys=["k"], options={"bucket": "1"})
    release = _held_hints(monkeypatch, t.io)
    try:
        t.write_arrow(_rows(0))  # its hint is held: pending in this process
        pid = os.fork()
        if pid == 0:  # the child: settles at once, or is killed by the parent's bounded wait
            settle_hints()
            os._exit(0)
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail("the forked child waited for its parent's pending hint")
            time.sleep(0.05)  # polling interval, bounded by the deadline
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        settle_hints()
