"""The catalog operations called directly (no service): a local warehouse and a real SQLite metadata store.

Each operation that changes a table takes the table's commit lock itself: the store's `commit_lock` is
wrapped to record which tables each operation locked.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lsmlake.catalog.commit.request import CommitRequest
from lsmlake.catalog.commit.snapshot import SnapshotCommitRequest
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.catalog.statistics import partition_spec
from lsmlake.catalog.timeline import PlanUnit
from lsmlake.errors import (
    AlreadyExistsError,
    InvalidInputError,
    NotFoundError,
    StaleTableError,
    UnsupportedOperationError,
)
from lsmlake.format.binary_row import EMPTY_ROW
from lsmlake.format.predicate import Term
from lsmlake.format.snapshot import APPEND, COMPACT
from lsmlake.metastore import MetaStore, open_store
from lsmlake.rpc.convert import ProtoPlanCodec
from lsmlake.rpc.events import snapshot_events
from lsmlake.table.compact import compact_buckets
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import every_bucket
from lsmlake.table.schema_change import SetOption

T = "db.t"
COLUMNS = "id BIGINT NOT NULL, v STRING"


class Listener:
    """Records what the operations report of their commits."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[str, str]] = []
        self.commits = 0
        self.found: list[int] = []

    def counted(self, kind: str, outcome: str, seconds: float) -> None:
        assert seconds >= 0
        self.outcomes.append((kind, outcome))

    def committed(self) -> None:
        self.commits += 1

    def reconciled(self, snapshot_ids: list[int]) -> None:
        self.found += snapshot_ids


class Lake:
    def __init__(self, root: Path) -> None:
        self.catalog = FileSystemCatalog(str(root / "wh"))
        self.store: MetaStore = open_store(f"sqlite:///{root}/meta.sqlite")
        self.locked: list[str] = []
        real_lock = self.store.commit_lock

        @contextmanager
        def recording_lock(tid: str) -> Iterator[Any]:
            self.locked.append(tid)
            with real_lock(tid) as tx:
                yield tx

        self.store.commit_lock = recording_lock  # type: ignore[method-assign]
        self.listener = Listener()
        self.ops = CatalogOperations(self.catalog, self.store, snapshot_events, ProtoPlanCodec(),
                                     listener=self.listener)

    def table(self, tid: str = T, **options: str) -> FileStoreTable:
        self.ops.create_database(tid.split(".")[0], ignore_if_exists=True)
        table, created = self.ops.create_table(tid, COLUMNS, [], ["id"], {"bucket": "1", **options}, None)
        assert created
        return table

    def commit(self, table: FileStoreTable, ids: list[int], identifier: int, request_ids: tuple[str, ...] = ()) -> int:
        w = table.new_write()
        w.write(pa.table({"id": pa.array(ids, pa.int64()), "v": [str(i) for i in ids]}))
        outcome = self.ops.writes.commit(CommitRequest(table.identifier, APPEND, "writer", identifier,
                                                       w.prepare_commit(), request_ids=request_ids))
        return outcome.snapshot_id


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Lake]:
    lake = Lake(tmp_path)
    try:
        yield lake
    finally:
        lake.store.close()


def test_databases_are_created_listed_located_and_dropped_with_their_tables_history(lake: Lake) -> None:
    assert lake.ops.create_database("db") is True
    assert lake.ops.create_database("db", ignore_if_exists=True) is False
    with pytest.raises(AlreadyExistsError):
        lake.ops.create_database("db")
    assert lake.ops.list_databases() == ["db"]
    assert lake.ops.database_location("db").endswith("db.db")
    with pytest.raises(NotFoundError):
        lake.ops.database_location("nope")
    lake.commit(lake.table(), [1], 1)
    assert lake.store.commits.last_recorded_snapshot(T) == 1
    lake.locked.clear()
    lake.ops.drop_database("db", cascade=True)
    assert lake.locked == [T] and lake.ops.list_databases() == []
    assert lake.store.commits.last_recorded_snapshot(T) is None
    with pytest.raises(NotFoundError):
        lake.ops.drop_database("db", cascade=True)


def test_tables_are_created_altered_renamed_and_dropped_under_their_locks(lake: Lake) -> None:
    table = lake.table()
    _, created = lake.ops.create_table(T, COLUMNS, [], ["id"], {"bucket": "1"}, None, ignore_if_exists=True)
    assert not created and lake.ops.table_exists(T) and lake.ops.list_tables("db") == ["t"]
    assert lake.ops.table_ids() == [T] and lake.ops.table_ids("db") == [T]
    lake.commit(table, [1, 2], 1)
    lake.locked.clear()
    altered = lake.ops.alter_table(T, [SetOption("snapshot.num-retained.min", "2")])
    assert lake.locked == [T] and altered.schema.id == 1
    lake.ops.create_database("other")
    lake.locked.clear()
    lake.ops.rename_table(T, "other.u")
    assert lake.locked == ["db.t", "other.u"]  # both names, in order
    assert not lake.ops.table_exists(T) and lake.ops.get_table("other.u").snapshots.latest_id() == 1
    assert lake.store.commits.last_recorded_snapshot(T) is None  # the history stays with the old name
    with pytest.raises(NotFoundError):
        lake.ops.rename_table(T, "other.w")
    lake.table()
    with pytest.raises(AlreadyExistsError):
        lake.ops.rename_table(T, "other.u")
    with pytest.raises(NotFoundError):
        lake.ops.rename_table(T, "nodb.u")
    lake.locked.clear()
    lake.ops.drop_table("other.u")
    assert lake.locked == ["other.u"] and not lake.ops.table_exists("other.u")
    with pytest.raises(NotFoundError):
        lake.ops.drop_table("other.u")


def test_renaming_on_an_object_store_is_refused_as_unsupported(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """An object store has no atomic rename of a folder: refused before any lock is taken, the table left as it was."""
    lake.table()
    lake.locked.clear()
    monkeypatch.setattr(lake.ops.catalog.io, "local", False)
    with pytest.raises(UnsupportedOperationError, match="atomic folder rename"):
        lake.ops.rename_table(T, "db.u")
    monkeypatch.undo()
    assert lake.locked == [] and lake.ops.table_exists(T) and not lake.ops.table_exists("db.u")


def test_commits_are_counted_found_by_request_id_and_wake_waiters(lake: Lake) -> None:
    table = lake.table()
    w = table.new_write()
    w.write(pa.table({"id": pa.array([1], pa.int64()), "v": ["1"]}))
    request = CommitRequest(T, APPEND, "writer", 1, w.prepare_commit(), request_ids=("w1",))
    assert lake.ops.writes.commit(request).snapshot_id == 1
    woken = threading.Event()

    def wait() -> None:
        lake.ops.writes.wait_for_commit(30)
        woken.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    first = 1
    while not woken.is_set():  # until the waiter has started waiting, a commit may come before it waits
        first = lake.commit(table, [first + 1], first + 1, request_ids=(f"w{first + 1}",))
        woken.wait(0.05)
    waiter.join()
    assert lake.listener.commits == first and set(lake.listener.outcomes) == {(APPEND, "committed")}
    assert lake.ops.writes.find_writes(T, ["w1", "missing"]) == {"w1": 1}
    with pytest.raises(NotFoundError):
        lake.ops.writes.find_writes("db.nope", ["w1"])
    resent = lake.ops.writes.commit(request)
    assert resent.already_committed and resent.snapshot_id == 1
    assert lake.listener.outcomes[-1] == (APPEND, "already_committed")
    with pytest.raises(AlreadyExistsError):  # the same commit with other files
        lake.ops.writes.commit(CommitRequest(T, APPEND, "writer", 1, []))
    assert lake.listener.outcomes[-1] == (APPEND, "rejected") and lake.listener.commits == first + 1


def test_a_whole_snapshot_is_published_once_and_a_taken_id_is_a_lost_race(lake: Lake) -> None:
    table = lake.table()
    lake.commit(table, [1], 1)
    latest = table.snapshots.latest()
    assert latest is not None
    assert lake.ops.writes.commit_snapshot(SnapshotCommitRequest(T, latest)) is True  # a resend of a published snapshot
    other = dataclasses.replace(latest, commit_identifier=latest.commit_identifier + 1)
    assert lake.ops.writes.commit_snapshot(SnapshotCommitRequest(T, other)) is False
    assert lake.listener.outcomes[-2:] == [(APPEND, "committed"), (APPEND, "conflict")]
    with pytest.raises(StaleTableError):
        lake.ops.writes.commit_snapshot(SnapshotCommitRequest(T, latest, table_uuid="another"))


def test_snapshots_are_read_listed_followed_and_scanned(lake: Lake) -> None:
    table = lake.table()
    assert lake.ops.latest_snapshot(T) is None and lake.ops.snapshots(T) == []
    assert lake.ops.plan_scan(table, [], []) == (None, [])
    ids = [lake.commit(table, [i], i) for i in (1, 2, 3)]
    assert [s.id for s in lake.ops.snapshots(T)] == ids == [1, 2, 3]
    assert [s.id for s in lake.ops.snapshots(T, after=1)] == [2, 3]
    assert [s.id for s in lake.ops.snapshots(T, after=1, limit=1)] == [2]
    with pytest.raises(InvalidInputError, match="limit -1"):
        lake.ops.snapshots(T, limit=-1)
    latest = lake.ops.latest_snapshot(T)
    assert latest is not None and latest.id == 3 and lake.ops.snapshot(T, 2).id == 2
    at = lake.ops.snapshot_at_time(T, latest.time_millis)
    assert at is not None and at.id == 3 and lake.ops.snapshot_at_time(T, 0) is None
    with pytest.raises(NotFoundError):
        lake.ops.snapshot(T, 9)
    with pytest.raises(NotFoundError):
        lake.ops.latest_snapshot("db.nope")
    snap, splits = lake.ops.plan_scan(table, [], [Term("id", "=", 2)], snapshot_id=2)
    assert snap is not None and snap.id == 2 and {s.bucket for s in splits} == {0}
    assert lake.ops.plan_scan(table, [], [], buckets=[1])[1] == []  # the table's one bucket is 0
    with pytest.raises(InvalidInputError, match="not a partition key"):
        lake.ops.plan_scan(table, [Term("id", "=", 2)], [])
    with pytest.raises(InvalidInputError, match="not bucket numbers"):
        lake.ops.plan_scan(table, [], [], buckets=[-7])


def test_sequences_are_allocated_above_the_last_range(lake: Lake) -> None:
    table = lake.table()
    lake.locked.clear()
    counts = {(EMPTY_ROW, 0): 5, (EMPTY_ROW, 1): 3}
    first = lake.ops.writes.allocate_sequences(T, table.table_uuid, counts)
    again = lake.ops.writes.allocate_sequences(T, "", {(EMPTY_ROW, 1): 1, (EMPTY_ROW, 0): 1})
    assert lake.locked == [T, T]
    assert again == [first[1] + 3, first[0] + 5]
    with pytest.raises(StaleTableError):
        lake.ops.writes.allocate_sequences(T, "another", counts)


def test_buckets_are_assigned_and_committed_once_per_new_key(lake: Lake) -> None:
    lake.table(bucket="-1")
    keys = [(EMPTY_ROW, np.array([1, 2, 3], np.int32))]
    snapshot_id, answers = lake.ops.writes.assign_buckets(T, "", keys)
    assert snapshot_id == 1 and answers[0].buckets.tolist() == [0, 0, 0]
    assert lake.listener.outcomes == [(APPEND, "committed")]
    assert lake.ops.writes.assign_buckets(T, "", keys)[0] == 0  # nothing new: nothing committed
    lake.table("db.fixed")
    with pytest.raises(InvalidInputError, match="dynamic buckets"):
        lake.ops.writes.assign_buckets("db.fixed", "", keys)


def test_tags_are_created_read_listed_and_deleted(lake: Lake) -> None:
    table = lake.table()
    lake.commit(table, [1], 1)
    lake.commit(table, [2], 2)
    lake.locked.clear()
    assert lake.ops.create_tag(T, "first", 1).id == 1
    assert lake.ops.create_tag(T, "latest", None).id == 2
    assert lake.locked == [T, T]
    with pytest.raises(AlreadyExistsError):
        lake.ops.create_tag(T, "first", 2)
    with pytest.raises(InvalidInputError):
        lake.ops.create_tag(T, "../x", 1)
    assert sorted(lake.ops.list_tags(T)) == ["first", "latest"]
    assert lake.ops.get_tag(T, "first").id == 1
    lake.ops.delete_tag(T, "first")
    with pytest.raises(NotFoundError):
        lake.ops.get_tag(T, "first")
    with pytest.raises(NotFoundError):
        lake.ops.delete_tag(T, "first")
    assert lake.ops.list_tags(T) == ["latest"] and lake.ops.list_branches(T) == []


def test_statistics_of_partitions_and_snapshots(lake: Lake) -> None:
    lake.ops.create_database("db")
    table, _ = lake.ops.create_table(T, "id BIGINT NOT NULL, p STRING NOT NULL", ["p"], ["id", "p"],
                                     {"bucket": "1"}, None)
    w = table.new_write()
    w.write(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "p": ["a", "a", "b"]}))
    lake.ops.writes.commit(CommitRequest(T, APPEND, "writer", 1, w.prepare_commit()))
    table, parts = lake.ops.partition_stats(T)
    by_spec = {partition_spec(table, k)["p"]: (v.record_count, v.file_count) for k, v in parts.items()}
    assert by_spec == {"a": (2, 1), "b": (1, 1)}
    snap = table.snapshots.latest()
    assert snap is not None
    stats = lake.ops.snapshot_stats(table, snap)
    assert (stats.record_count, stats.file_count) == (3, 2) and stats.file_size > 0
    assert lake.ops.snapshot_stats(table, snap) is stats  # cached


def test_expiration_orphans_and_reconciliation(lake: Lake) -> None:
    table = lake.table()
    for i in range(1, 6):
        lake.commit(table, [i], i)
    lake.locked.clear()
    result = lake.ops.expire_snapshots(T, retain_min=2, retain_max=2, time_retained_ms=0)
    assert result.expired_snapshots == [1, 2, 3] and lake.locked == [T]
    lake.locked.clear()
    expire = lake.ops.expire_pass(T, 10.0, lambda: False)
    expire.run()
    assert expire.caught_up and lake.locked == [T] * expire.batches
    assert lake.ops.remove_orphan_files(T, 0, dry_run=True).deleted == []
    table.write_arrow(pa.table({"id": pa.array([9], pa.int64()), "v": ["9"]}))  # an engine outside the catalog
    lake.locked.clear()
    assert lake.ops.reconcile(T) == 1 and lake.locked == [T]
    assert lake.ops.reconcile(T) == 0 and lake.locked == [T]  # nothing to record: no lock taken


def test_the_compaction_timeline_moves_under_the_tables_lock(lake: Lake) -> None:
    table = lake.table()
    lake.commit(table, [1, 2], 1)
    lake.commit(table, [2, 3], 2)
    snap = table.snapshots.latest()
    assert snap is not None
    live = list(table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values())
    top = table.options.num_levels() - 1
    unit = PlanUnit(live[0].partition, live[0].bucket, 1, [e.file for e in live], top)
    lake.locked.clear()
    plan = lake.ops.request_compaction(T, [unit], full=True)
    started = lake.ops.start_compaction(T, plan.plan_id, "compactor-1")
    assert started.state == "INFLIGHT" and lake.locked == [T, T]
    _, messages = compact_buckets(table, full=True)
    outcome, done = lake.ops.complete_compaction(CommitRequest(T, COMPACT, "compactor", 1, messages), plan.plan_id,
                                                 "compactor-1")
    assert done.state == "COMPLETED" and done.snapshot_id == outcome.snapshot_id == 3
    assert [p.plan_id for p in lake.ops.list_compaction_plans(T, ["COMPLETED"])] == [plan.plan_id]
    assert [p.plan_id for p in lake.ops.plans_changed_since(T, 0)] == [plan.plan_id]
    lake.commit(table, [4], 3)
    snap = table.snapshots.latest()
    assert snap is not None
    live = list(table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values())
    again = lake.ops.request_compaction(T, [PlanUnit(live[0].partition, live[0].bucket, 1, [e.file for e in live],
                                                     top)], full=True)
    lake.ops.start_compaction(T, again.plan_id, "compactor-2")
    back, deleted = lake.ops.rollback_compaction(T, again.plan_id, "test", True, [])
    assert back.state == "REQUESTED" and deleted == []


def test_health_of_one_table_a_database_or_all(lake: Lake) -> None:
    table = lake.table()
    lake.commit(table, [1], 1)
    lake.table("db.u")
    assert {h.table for h in lake.ops.table_healths()} == {T, "db.u"}
    assert {h.table for h in lake.ops.table_healths(database="db")} == {T, "db.u"}
    (one,) = lake.ops.table_healths(T)
    assert one.table == T and one.error is None
    with pytest.raises(NotFoundError):
        lake.ops.table_healths("db.nope")
    health = lake.ops.table_health(T, now=0)
    assert health is not None and health.table == T
    assert lake.ops.table_health("db.nope") is None
    snap = table.latest_snapshot()
    assert lake.ops.health_at(table, 0, (snap, every_bucket(table, snap))).snapshot_id == 1
