"""The catalog's operations, one method each, over a warehouse and its metadata store.

The gRPC service, the REST catalog API and the web console are adapters over this class (as Paimon's
filesystem catalog, REST catalog and REST server stand on its `Catalog` interface): they read requests and
write answers; what an operation does, and which table lock it holds while doing it, is decided here.
An operation that changes a table's files or history takes that table's commit lock itself (shared by
catalog replicas through the metadata store), so that no commit, expiration or schema change of the same
table runs meanwhile. Commits and whole snapshots, sequence numbers and dynamic buckets are a part of their
own, `writes` (`write_operations.WriteOperations`), which this class holds and the adapters call directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from lsmlake.catalog.commit.catalog_commits import CommitOutcome
from lsmlake.catalog.commit.request import CommitRequest
from lsmlake.catalog.expire import ExpirePass, ExpireResult, OrphanResult, expire_snapshots, remove_orphan_files
from lsmlake.catalog.filesystem import FileSystemCatalog, check_name
from lsmlake.catalog.health import TableHealth, health_of, read_health, read_healths
from lsmlake.catalog.iceberg_publisher import drop_iceberg_metadata
from lsmlake.catalog.reconcile import reconcile_table
from lsmlake.catalog.snapshot_events import EventEncoder
from lsmlake.catalog.statistics import FileStats, SnapshotStats, partition_stats
from lsmlake.catalog.tags import branch_names, create_tag, delete_tag, read_tag, tag_names
from lsmlake.catalog.timeline import PlanCodec, PlanUnit, Timeline
from lsmlake.catalog.write_operations import KEEP_WRITES_MS, CommitListener, WriteOperations
from lsmlake.errors import AlreadyExistsError, InvalidInputError, NotFoundError, UnsupportedOperationError
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.predicate import Predicate, Term
from lsmlake.format.snapshot import Snapshot
from lsmlake.format.types import DataField
from lsmlake.iceberg import IcebergPublication, current_metadata_location, publish_iceberg_now
from lsmlake.metastore import CompactionPlan, MetaStore, now_ms
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split
from lsmlake.table.schema_change import SchemaChange

__all__ = ["KEEP_WRITES_MS", "CatalogOperations", "CommitListener"]


class CatalogOperations:
    """Databases, tables, tags, snapshots, maintenance, the compaction timeline and health of one catalog; its
    commits, sequences and buckets are `writes`.

    `encode_events` writes a snapshot's outbox rows; `plan_codec` the stored form of compaction plans (None:
    this instance serves no timeline). The commit hooks (`listener`, `fault_point`, `keep_writes_ms`) are the
    writes' (see `WriteOperations`).
    """

    def __init__(self, catalog: FileSystemCatalog, store: MetaStore, encode_events: EventEncoder,
                 plan_codec: PlanCodec | None = None, *, listener: CommitListener | None = None,
                 fault_point: Callable[[str], None] | None = None, keep_writes_ms: int = KEEP_WRITES_MS,
                 clock: Callable[[], int] = now_ms) -> None:
        self.catalog = catalog
        self.store = store
        self.encode_events = encode_events
        self.clock = clock
        self.writes = WriteOperations(catalog, store, encode_events, listener=listener, fault_point=fault_point,
                                      keep_writes_ms=keep_writes_ms, clock=clock)
        self._timeline = Timeline(catalog, store, plan_codec) if plan_codec is not None else None
        self._snapshot_stats = SnapshotStats()

    # -- databases -----------------------------------------------------------------------------

    def list_databases(self) -> list[str]:
        return self.catalog.list_databases()

    def create_database(self, name: str, ignore_if_exists: bool = False) -> bool:
        """Create a database; whether it was created (False: it existed); AlreadyExistsError unless ignored."""
        existed = self.catalog.io.exists(self.catalog.database_path(name))
        self.catalog.create_database(name, ignore_if_exists=ignore_if_exists)
        return not existed

    def database_location(self, name: str) -> str:
        """Where the database's folder is; NotFoundError when there is none."""
        path = self.catalog.database_path(check_name(name, "database"))
        if not self.catalog.io.exists(path):
            raise NotFoundError(f"database {name!r} does not exist")
        return self.catalog.location(path)

    def drop_database(self, name: str, cascade: bool) -> None:
        """Drop a database (with `cascade`, its tables and their history); NotFoundError when there is none."""
        name = check_name(name, "database")
        tables = self.catalog.list_tables(name) if cascade else []
        for t in tables:  # forget each table's history, under its lock, before its files go
            with self.store.commit_lock(f"{name}.{t}"):
                self.store.forget_table(f"{name}.{t}")
                self.writes.forget_table(f"{name}.{t}")
        self.catalog.drop_database(name, cascade=cascade)

    # -- tables --------------------------------------------------------------------------------

    def list_tables(self, database: str) -> list[str]:
        return self.catalog.list_tables(database)

    def table_ids(self, database: str | None = None) -> list[str]:
        """`db.table` of every table, or of one database's."""
        return self.catalog.table_ids(check_name(database, "database") if database else None)

    def table_exists(self, tid: str) -> bool:
        return self.catalog.table_exists(tid)

    def get_table(self, tid: str) -> FileStoreTable:
        return self.catalog.get_table(tid)

    def location(self, path: str) -> str:
        """A warehouse path as the engines open it (a URI for an object store)."""
        return self.catalog.location(path)

    def create_table(self, tid: str, fields: Sequence[DataField], partition_keys: Sequence[str],
                     primary_keys: Sequence[str], options: Mapping[str, str], comment: str | None,
                     ignore_if_exists: bool = False) -> tuple[FileStoreTable, bool]:
        """The table (the existing one when ignored) and whether it was created."""
        existed = self.catalog.table_exists(tid)
        table = self.catalog.create_table(tid, fields, list(partition_keys), list(primary_keys), dict(options),
                                          comment, ignore_if_exists=ignore_if_exists)
        return table, not existed

    def alter_table(self, tid: str, changes: Sequence[SchemaChange]) -> FileStoreTable:
        """Apply the changes as the table's next schema, all or none, serialized with the table's commits."""
        with self.store.commit_lock(tid):
            return self.catalog.alter_table(tid, changes)

    def drop_table(self, tid: str) -> None:
        """Drop a table and forget its history; NotFoundError when there is none."""
        with self.store.commit_lock(tid):  # not in the middle of a commit of that table
            table = self.catalog.get_table(tid)
            if current_metadata_location(table) is not None:  # outside the table folder with hadoop-catalog
                drop_iceberg_metadata(table)
            self.catalog.drop_table(tid)
            self.store.forget_table(tid)  # a new table of that name starts without history
            self.writes.forget_table(tid)

    def rename_table(self, src: str, dst: str) -> None:
        """Move table `src` to `dst` with its files; the history stays with the old name, the commit users move.

        UnsupportedOperationError on an object store: it has no atomic rename of a folder."""
        cat, store = self.catalog, self.store
        if not cat.io.local:
            raise UnsupportedOperationError("renaming a table needs an atomic folder rename, which object stores "
                                      "do not have; create the table under the new name and copy it")
        first, second = sorted((src, dst))  # both locks, always in the same order: two renames cannot deadlock
        with store.commit_lock(first), store.commit_lock(second):
            cat.get_table(src)
            if not cat.io.exists(cat.database_path(dst.split(".")[0])):
                raise NotFoundError(f"database of {dst!r} does not exist")
            if cat.io.exists(cat.table_path(dst)):
                raise AlreadyExistsError(f"table {dst!r} already exists")
            before = cat.get_table(src)
            iceberg = current_metadata_location(before) is not None
            if iceberg:  # it names the old paths: published afresh under the new name below
                drop_iceberg_metadata(before)
            cat.io.fs.move(cat.table_path(src), cat.table_path(dst))
            store.commit_users.move_commit_users(src, dst)  # the jobs committing to it still own their users
            store.forget_table(src)  # the history is the old name's; the new name records the snapshots anew
            if iceberg:
                publish_iceberg_now(cat.get_table(dst))

    # -- snapshots and scans -------------------------------------------------------------------

    def snapshot(self, tid: str, snapshot_id: int) -> Snapshot:
        """A snapshot of the table; NotFoundError when it does not exist (or expired)."""
        return self.catalog.get_table(tid).snapshots.snapshot(snapshot_id)

    def snapshots(self, tid: str, after: int | None = None, limit: int = 0) -> list[Snapshot]:
        """The table's kept snapshots in id order, those after snapshot `after` only, at most `limit` (0: all)."""
        if limit < 0:
            raise InvalidInputError(f"limit {limit} must not be negative")
        snaps = self.catalog.get_table(tid).snapshots.snapshots()
        if after is not None:
            snaps = [s for s in snaps if s.id > after]
        return snaps[:limit] if limit else snaps

    def latest_snapshot(self, tid: str) -> Snapshot | None:
        """The table's latest snapshot; None before its first commit."""
        return self.catalog.get_table(tid).snapshots.latest()

    def snapshot_at_time(self, tid: str, time_ms: int) -> Snapshot | None:
        """The newest of the table's snapshots committed at or before `time_ms` (epoch ms); None when every one is
        later."""
        return self.catalog.get_table(tid).snapshots.at_time(time_ms)

    def plan_scan(self, table: FileStoreTable, partition_terms: Sequence[Term], key_terms: Sequence[Term],
                  snapshot_id: int | None = None, all_levels: bool = False,
                  buckets: Sequence[int] = (), filter_text: str = "") -> tuple[Snapshot | None, list[Split]]:
        """The snapshot read (`snapshot_id`, or the latest; None when the table has none) and the splits of its
        files that the filters may match, of the `buckets` asked for (none: all).

        `partition_terms` may name only partition keys; InvalidInputError otherwise, or for a number in
        `buckets` that is no bucket. `all_levels`: every level's files, not only those a reader needs.
        `filter_text`: the whole filter in the predicate language, typed by the table's columns; it prunes too.
        """
        for t in partition_terms:
            if t.column not in table.schema.partition_keys:
                raise InvalidInputError(f"partition_filter column {t.column!r} is not a partition key")
        snap = table.snapshots.snapshot(snapshot_id) if snapshot_id is not None else table.snapshots.latest()
        if snap is None:
            return None, []
        predicate = Predicate((*partition_terms, *key_terms)) & Predicate.of(filter_text, table.schema)
        splits = table.new_scan(predicate, snap, all_levels=all_levels).plan()
        if buckets:
            wanted = _bucket_numbers(buckets)
            splits = [s for s in splits if s.bucket in wanted]
        return snap, splits

    # -- statistics and tags -------------------------------------------------------------------

    def snapshot_stats(self, table: FileStoreTable, snap: Snapshot) -> FileStats:
        """Rows, bytes and files of a snapshot (cached: a snapshot never changes)."""
        return self._snapshot_stats.of(table, snap)

    def partition_stats(self, tid: str) -> tuple[FileStoreTable, dict[bytes, FileStats]]:
        """The table, and the figures of each partition of its latest snapshot."""
        table = self.catalog.get_table(tid)
        return table, partition_stats(table)

    def list_tags(self, tid: str) -> list[str]:
        return tag_names(self.catalog.get_table(tid))

    def get_tag(self, tid: str, name: str) -> Snapshot:
        return read_tag(self.catalog.get_table(tid), name)

    def create_tag(self, tid: str, name: str, snapshot_id: int | None) -> Snapshot:
        """Tag a snapshot (the latest when None) of a table; AlreadyExistsError when the name is taken."""
        with self.store.commit_lock(tid):  # expiration cannot remove the snapshot while it is tagged
            return create_tag(self.catalog.get_table(tid), name, snapshot_id)

    def delete_tag(self, tid: str, name: str) -> None:
        with self.store.commit_lock(tid):
            delete_tag(self.catalog.get_table(tid), name)

    def list_branches(self, tid: str) -> list[str]:
        return branch_names(self.catalog.get_table(tid))

    # -- maintenance ---------------------------------------------------------------------------

    def expire_snapshots(self, tid: str, retain_min: int | None = None, retain_max: int | None = None,
                         time_retained_ms: int | None = None, limit: int | None = None) -> ExpireResult:
        """One expiration of the table's snapshots (None: the table's own option), serialized with its commits."""
        with self.store.commit_lock(tid):
            return expire_snapshots(self.catalog.get_table(tid), retain_min=retain_min, retain_max=retain_max,
                                    time_retained_ms=time_retained_ms, limit=limit)

    def expire_pass(self, tid: str, budget_s: float, should_stop: Callable[[], bool]) -> ExpirePass:
        """An expiration pass over the table, each of its batches under the table's lock, let go between them
        so that commits are not held up while a table far behind catches up."""
        return ExpirePass(self.catalog.get_table(tid), batch_lock=lambda: self.store.commit_lock(tid),
                          budget_s=budget_s, should_stop=should_stop)

    def remove_orphan_files(self, tid: str, older_than_ms: int, dry_run: bool = False) -> OrphanResult:
        """Delete the table's files older than `older_than_ms` that nothing references."""
        if older_than_ms < 0:
            raise InvalidInputError(f"older_than_ms {older_than_ms} must not be negative")
        # no commit lock: the age guard keeps the files of commits in progress
        return remove_orphan_files(self.catalog.get_table(tid), older_than_ms=older_than_ms, dry_run=dry_run)

    def sync_iceberg(self, tid: str) -> IcebergPublication | None:
        """Publish the Iceberg metadata of the table's latest snapshot, with or without the table's option (None:
        the table has no snapshot)."""
        return self.writes.iceberg.sync(tid)

    def catch_up_iceberg(self, tid: str) -> IcebergPublication | None:
        """Publish the snapshots the Iceberg metadata of a table with the option misses (None: option off)."""
        return self.writes.iceberg.catch_up(tid)

    def iceberg_location(self, tid: str) -> str | None:
        """The table's current Iceberg metadata file, None when none was published."""
        return self.writes.iceberg.location(tid)

    def reconcile(self, tid: str) -> int:
        """Record, with their events, the table's snapshots that have no record yet; how many."""
        latest = self.catalog.get_table(tid).snapshots.latest_id()
        if latest is None or (self.store.commits.last_recorded_snapshot(tid) or 0) >= latest:
            return 0  # nothing to do: no lock taken
        with self.store.commit_lock(tid):
            return len(reconcile_table(self.store, self.catalog.get_table(tid), tid, self.encode_events))

    # -- compaction timeline -------------------------------------------------------------------

    @property
    def timeline(self) -> Timeline:
        if self._timeline is None:
            raise RuntimeError("these catalog operations were built without a plan codec: no timeline")
        return self._timeline

    def request_compaction(self, tid: str, units: Sequence[PlanUnit], full: bool) -> CompactionPlan:
        return self.timeline.request(tid, units, full)

    def start_compaction(self, tid: str, plan_id: int, owner: str) -> CompactionPlan:
        return self.timeline.start(tid, plan_id, owner)

    def complete_compaction(self, request: CommitRequest, plan_id: int,
                            owner: str) -> tuple[CommitOutcome, CompactionPlan]:
        """Commit a plan's result as a COMPACT snapshot and mark the plan COMPLETED in the same transaction."""
        return self.timeline.complete(self.writes.commit, request, plan_id, owner)

    def rollback_compaction(self, tid: str, plan_id: int, reason: str, requeue: bool,
                            output_files: Sequence[str]) -> tuple[CompactionPlan, list[str]]:
        return self.timeline.rollback(tid, plan_id, reason, requeue, output_files)

    def list_compaction_plans(self, tid: str | None, states: Sequence[str] | None) -> list[CompactionPlan]:
        """One table's plans, or (`tid` None) every table's in `states`, which are then required."""
        return self.timeline.list(tid, states)

    def plans_changed_since(self, tid: str, since_ms: int) -> list[CompactionPlan]:
        """The table's plans in any state that were requested or changed at or after `since_ms`."""
        return self.store.plans.list_plans(tid, changed_since_ms=since_ms)

    # -- health --------------------------------------------------------------------------------

    def table_healths(self, tid: str | None = None, database: str | None = None,
                      now: int | None = None) -> list[TableHealth]:
        """The health of one table (NotFoundError when there is none), of a database's tables, or of all,
        ranked; an unreadable table is answered with its error, ranked first."""
        tids = [tid] if tid is not None else self.table_ids(database)
        healths = read_healths(self.catalog, self.store, tids, self.clock() if now is None else now)
        if tid is not None and not healths:
            raise NotFoundError(f"table {tid} does not exist")
        return healths

    def table_health(self, tid: str, now: int | None = None) -> TableHealth | None:
        """The table's health; None when it is gone (see `health.read_health`)."""
        return read_health(self.catalog, self.store, tid, self.clock() if now is None else now)

    def health_at(self, table: FileStoreTable, now: int, at: tuple[Snapshot | None, Sequence[Split]]) -> TableHealth:
        """The table's health as of a snapshot and its buckets the caller has read."""
        return health_of(table, self.store, now, at)


def _bucket_numbers(buckets: Sequence[int]) -> set[int]:
    """The buckets a scan asks for; InvalidInputError for a number that is no bucket."""
    wanted = set(buckets)
    bad = sorted(b for b in wanted if b < 0 and b != POSTPONE_BUCKET)
    if bad:
        raise InvalidInputError(f"buckets {bad} are not bucket numbers (0 and up, or {POSTPONE_BUCKET} for "
                                "postponed files)")
    return wanted
