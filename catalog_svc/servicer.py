"""`CatalogService`: translates gRPC requests into calls on lsmlake's catalog, commits, timeline and scan, and back.

Every method is wrapped by `rpc_errors.guarded`, so methods raise lsmlake errors and never set statuses.
The rules (the idempotent commit, its checks, the compaction timeline) are the library's
(`lsmlake.catalog`); this module reads requests, calls them, and counts what happened.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc

from catalog_svc.metrics import CatalogMetrics
from catalog_svc.requests import (
    bucket_numbers,
    expire_options,
    partition_keys,
    schema_change,
    sequence_counts,
    table_fields,
)
from catalog_svc.watch import follow_snapshots
from lsmlake.auth.principal import current_principal
from lsmlake.catalog.commit.catalog_commits import (
    AFTER_COMMIT,
    AFTER_SNAPSHOT,
    CatalogCommits,
    CommitOutcome,
    check_table_identity,
)
from lsmlake.catalog.commit.checks import check_partition
from lsmlake.catalog.commit.identity import request_id_limit, request_ids_of
from lsmlake.catalog.commit.request import CommitRequest
from lsmlake.catalog.commit.snapshot import SnapshotCommitRequest, commit_snapshot
from lsmlake.catalog.expire import expire_snapshots, remove_orphan_files
from lsmlake.catalog.filesystem import FileSystemCatalog, check_name
from lsmlake.catalog.health import read_healths
from lsmlake.catalog.timeline import Timeline, parse_plan_id
from lsmlake.errors import CommitConflictError, InvalidInputError, LakeError, NotFoundError
from lsmlake.format.predicate import Predicate
from lsmlake.format.snapshot import APPEND, BATCH_COMMIT_IDENTIFIER
from lsmlake.metastore import CompactionPlan, MetaStore, now_ms
from lsmlake.metastore.request_ids import check_request_ids
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc import convert
from lsmlake.rpc.errors import guarded, guarded_stream
from lsmlake.rpc.events import snapshot_events
from lsmlake.table import features
from lsmlake.table.dynamic_bucket import CommittingAssigner, HashFiles, is_dynamic
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.hash_file_cache import HashFileCache
from lsmlake.table.sequence_numbers import committed_floors
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)

_ident = convert.table_id
FAULTS = (None, "exit-after-snapshot", "exit-after-commit")
_FAULT_POINTS = {AFTER_SNAPSHOT: "exit-after-snapshot", AFTER_COMMIT: "exit-after-commit"}
KEEP_WRITES_MS = 24 * 3_600_000  # default of how long a committed client write id answers a resend
BUCKET_ASSIGNER_USER = "lsmlake-bucket-assigner"  # the commit user of AssignBuckets' index commits
FORGET_WRITES_EVERY_S = 60.0


class CatalogService(catalog_pb2_grpc.CatalogServiceServicer):
    """The catalog and snapshot service of one warehouse and metadata store.

    `fault` injects a crash for the recovery tests: "exit-after-snapshot" kills the process after the
    snapshot is published and before the metadata store commits, "exit-after-commit" after the store
    commits and before the relay publishes the events.
    """

    def __init__(self, catalog: FileSystemCatalog, store: MetaStore,
                 on_commit: Callable[[], None] | None = None, metrics: CatalogMetrics | None = None,
                 fault: str | None = None, watch_poll_s: float = 0.5, keep_writes_ms: int = KEEP_WRITES_MS) -> None:
        if fault not in FAULTS:
            raise InvalidInputError(f"fault {fault!r} is not one of {', '.join(f for f in FAULTS if f)}")
        self.catalog = catalog
        self.store = store
        self.metrics = metrics or CatalogMetrics()
        self.commits = CatalogCommits(catalog, store, snapshot_events, on_reconciled=self._count_reconciled,
                                      fault_point=self._crash_if)
        self.timeline = Timeline(catalog, store, convert.ProtoPlanCodec())
        self.stopping = threading.Event()  # set at shutdown: open WatchSnapshots streams end
        self._on_commit = on_commit or (lambda: None)
        self._fault = fault
        self._watch_poll_s = watch_poll_s
        if keep_writes_ms <= 0:
            raise InvalidInputError(f"the retention of request ids must be positive, got {keep_writes_ms} ms")
        self._keep_writes_ms = keep_writes_ms
        self._changed = threading.Condition()  # notified after every commit through this replica
        self._hash_files = HashFileCache()  # the HASH index files read for AssignBuckets, per table
        self._forget_writes_at = 0.0  # monotonic time of the next purge of old client write ids

    def _table(self, t: common_pb2.TableIdentifier) -> FileStoreTable:
        return self.catalog.get_table(_ident(t))

    # -- databases -----------------------------------------------------------------------------

    @guarded
    def CreateDatabase(self, request: catalog_pb2.CreateDatabaseRequest,
                       context: grpc.ServicerContext) -> catalog_pb2.CreateDatabaseResponse:
        existed = self.catalog.io.exists(self.catalog.database_path(request.name))
        self.catalog.create_database(request.name, ignore_if_exists=request.ignore_if_exists)
        return catalog_pb2.CreateDatabaseResponse(created=not existed)

    @guarded
    def ListDatabases(self, request: catalog_pb2.ListDatabasesRequest,
                      context: grpc.ServicerContext) -> catalog_pb2.ListDatabasesResponse:
        return catalog_pb2.ListDatabasesResponse(databases=self.catalog.list_databases())

    @guarded
    def DropDatabase(self, request: catalog_pb2.DropDatabaseRequest,
                     context: grpc.ServicerContext) -> catalog_pb2.DropDatabaseResponse:
        try:
            self.drop_database(request.name, request.cascade)
        except NotFoundError:
            if request.ignore_if_not_exists:
                return catalog_pb2.DropDatabaseResponse(dropped=False)
            raise
        return catalog_pb2.DropDatabaseResponse(dropped=True)

    def drop_database(self, name: str, cascade: bool) -> None:
        """Drop a database (with `cascade`, its tables and their history); NotFoundError when there is none."""
        name = check_name(name, "database")
        tables = self.catalog.list_tables(name) if cascade else []
        for t in tables:  # forget each table's history, under its lock, before its files go
            with self.store.commit_lock(f"{name}.{t}"):
                self.store.forget_table(f"{name}.{t}")
                self._hash_files.forget(f"{name}.{t}")
        self.catalog.drop_database(name, cascade=cascade)

    def drop_table(self, tid: str) -> None:
        """Drop a table and forget its history; NotFoundError when there is none."""
        with self.store.commit_lock(tid):  # not in the middle of a commit of that table
            self.catalog.drop_table(tid)
            self.store.forget_table(tid)  # a new table of that name starts without history
            self._hash_files.forget(tid)

    # -- tables --------------------------------------------------------------------------------

    @guarded
    def CreateTable(self, request: catalog_pb2.CreateTableRequest,
                    context: grpc.ServicerContext) -> catalog_pb2.CreateTableResponse:
        tid = _ident(request.table)
        fields = table_fields(request.columns)
        existed = self.catalog.table_exists(tid)
        table = self.catalog.create_table(tid, fields, list(request.partition_keys), list(request.primary_keys),
                                          dict(request.options), request.comment or None,
                                          ignore_if_exists=request.ignore_if_exists)
        return catalog_pb2.CreateTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table), created=not existed)

    @guarded
    def GetTable(self, request: catalog_pb2.GetTableRequest,
                 context: grpc.ServicerContext) -> catalog_pb2.GetTableResponse:
        table = self._table(request.table)
        return catalog_pb2.GetTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table))

    @guarded
    def ListTables(self, request: catalog_pb2.ListTablesRequest,
                   context: grpc.ServicerContext) -> catalog_pb2.ListTablesResponse:
        return catalog_pb2.ListTablesResponse(tables=self.catalog.list_tables(request.database))

    @guarded
    def DropTable(self, request: catalog_pb2.DropTableRequest,
                  context: grpc.ServicerContext) -> catalog_pb2.DropTableResponse:
        try:
            self.drop_table(_ident(request.table))
        except NotFoundError:
            if request.ignore_if_not_exists:
                return catalog_pb2.DropTableResponse(dropped=False)
            raise
        return catalog_pb2.DropTableResponse(dropped=True)

    @guarded
    def AlterTable(self, request: catalog_pb2.AlterTableRequest,
                   context: grpc.ServicerContext) -> catalog_pb2.AlterTableResponse:
        """Apply the changes as the table's next schema, all or none, serialized with the table's commits."""
        tid = _ident(request.table)
        if not request.changes:
            raise InvalidInputError("changes must not be empty")
        changes = [schema_change(i, c) for i, c in enumerate(request.changes)]
        with self.store.commit_lock(tid):
            table = self.catalog.alter_table(tid, changes)
        _log.info("altered %s: schema %d", tid, table.schema.id)
        return catalog_pb2.AlterTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table))

    # -- commits -------------------------------------------------------------------------------

    @guarded
    def Commit(self, request: catalog_pb2.CommitRequest,
               context: grpc.ServicerContext) -> catalog_pb2.CommitResponse:
        """Commit file changes as one snapshot (see `lsmlake.catalog.commit.catalog_commits`)."""
        outcome = self._run_commit(convert.commit_from_proto(request))
        return catalog_pb2.CommitResponse(snapshot_id=outcome.snapshot_id,
                                          already_committed=outcome.already_committed)

    def _run_commit(self, commit: CommitRequest,
                    plan_check: Callable[[], CompactionPlan] | None = None) -> CommitOutcome:
        """Run a commit, counting its outcome; after a success, wake the relay and the snapshot watchers."""
        with self._counted(commit.kind) as outcome:
            result = self.commits.commit(commit, plan_check)
            outcome.append("already_committed" if result.already_committed else "committed")
            return result

    def commit_snapshot(self, request: SnapshotCommitRequest) -> bool:
        """Publish a snapshot a Paimon engine built (the REST `commit`, see `lsmlake.catalog.commit.snapshot`);
        False when another commit took its id."""
        with self._counted(request.snapshot.commit_kind) as outcome:
            published = commit_snapshot(self.commits, request, self._crash_if)
            if not published:
                self.metrics.conflicts.labels(request.snapshot.commit_kind).inc()
            outcome.append("committed" if published else "conflict")
            return published

    @contextmanager
    def _counted(self, kind: str) -> Iterator[list[str]]:
        """Count a commit by kind and outcome (the block appends it; an exception is a conflict, a refusal or an
        error); after a success, wake the relay and the snapshot watchers."""
        started = time.perf_counter()
        outcome: list[str] = []
        try:
            yield outcome
        except CommitConflictError:
            outcome.append("conflict")
            self.metrics.conflicts.labels(kind).inc()
            raise
        except LakeError:
            outcome.append("rejected")
            raise
        finally:
            result = outcome[-1] if outcome else "error"
            self.metrics.commits.labels(kind, result).inc()
            if result in ("committed", "already_committed"):
                self.metrics.commit_seconds.labels(kind).observe(time.perf_counter() - started)
                self._forget_old_writes()
                self._on_commit()
                with self._changed:
                    self._changed.notify_all()

    def _forget_old_writes(self) -> None:
        """Forget client write ids older than their retention, at most once a minute (every table at once)."""
        if time.monotonic() < self._forget_writes_at:
            return
        self._forget_writes_at = time.monotonic() + FORGET_WRITES_EVERY_S
        try:
            self.store.commits.forget_writes(now_ms() - self._keep_writes_ms)
        except LakeError as e:  # retried a minute later; until then old ids only answer resends a little longer
            _log.warning("forgetting old write ids failed: %s", e)

    def _count_reconciled(self, found: list[int]) -> None:
        self.metrics.reconciled.inc(len(found))

    def _crash_if(self, point: str) -> None:
        if self._fault is not None and self._fault == _FAULT_POINTS.get(point):
            _log.error("fault injection: exiting at %s", self._fault)
            logging.shutdown()
            os._exit(137)

    @guarded
    def FindWrites(self, request: catalog_pb2.FindWritesRequest,
                   context: grpc.ServicerContext) -> catalog_pb2.FindWritesResponse:
        """The snapshot of each client write (by request id) the table committed."""
        tid = _ident(request.table)
        self.catalog.get_table(tid)  # NotFoundError for an unknown table
        asked = check_request_ids(request.request_ids, request_id_limit(current_principal()))
        stored = request_ids_of(asked, current_principal())  # only the caller's own writes are found
        found = self.store.commits.find_writes(tid, stored)
        return catalog_pb2.FindWritesResponse(snapshot_ids={a: found[s] for a, s in zip(asked, stored, strict=True)
                                                            if s in found})

    @guarded
    def AllocateSequences(self, request: catalog_pb2.AllocateSequencesRequest,
                          context: grpc.ServicerContext) -> catalog_pb2.AllocateSequencesResponse:
        """Ranges of sequence numbers per bucket, monotone and above every number the table holds.

        Under the table's commit lock (shared by catalog replicas): the counters are raised to the floors
        of the snapshots committed since the last call (another engine's commits among them), then the
        ranges are taken, in one metadata-store transaction.
        """
        tid = _ident(request.table)
        counts = sequence_counts(request.ranges)
        with self.store.commit_lock(tid):
            table = self.catalog.get_table(tid)
            check_table_identity(table, request.table_uuid)
            floors, latest = committed_floors(table, self.store.commits.sequences_synced_to(tid))
            first = self.store.commits.allocate_sequences(tid, counts, floors, latest)
        self.metrics.sequences.inc(sum(counts.values()))
        return catalog_pb2.AllocateSequencesResponse(first=[first[k] for k in counts])

    @guarded
    def AssignBuckets(self, request: catalog_pb2.AssignBucketsRequest,
                      context: grpc.ServicerContext) -> catalog_pb2.AssignBucketsResponse:
        """The bucket of each key of a dynamic-bucket table, per partition (see `lsmlake.table.dynamic_bucket`).

        Under the table's commit lock, so that catalog replicas take turns: known keys are looked up in the
        latest snapshot's HASH index, new ones assigned and committed through the ordinary commit path (one
        APPEND of the replaced buckets' index files, recorded and announced like any commit) before the answer.
        """
        tid = _ident(request.table)
        keys = partition_keys(request)
        committed: list[int] = []
        with self.store.commit_lock(tid):
            table = self.catalog.get_table(tid)
            check_table_identity(table, request.table_uuid)
            if not is_dynamic(table.schema):
                raise InvalidInputError(f"table {tid} does not have dynamic buckets (bucket = -1 on a primary-key "
                                        "table): its rows are routed by hash")
            features.check(table.schema, tid, for_write=True)
            for i, (partition, _) in enumerate(keys):
                check_partition(table, partition, f"partitions[{i}].partition")
            self.commits.reconcile(tid, table)

            def commit(messages: list[CommitMessage]) -> None:
                committed.append(self._run_commit(CommitRequest(
                    tid, APPEND, BUCKET_ASSIGNER_USER, BATCH_COMMIT_IDENTIFIER, messages,
                    table_uuid=table.table_uuid)).snapshot_id)

            with self._hash_files.use(tid, table.table_uuid, lambda: HashFiles(table.indexes)) as files:
                answers = CommittingAssigner(table, commit, files=files).assign(keys)
        return catalog_pb2.AssignBucketsResponse(
            snapshot_id=committed[-1] if committed else 0,
            partitions=[catalog_pb2.PartitionBuckets(
                buckets=a.buckets.tolist(), elsewhere_positions=a.elsewhere.positions.tolist(),
                elsewhere_buckets=a.elsewhere.buckets.tolist(),
                elsewhere_partitions=[a.elsewhere.partitions[i] for i in a.elsewhere.partition_ids.tolist()])
                for a in answers])

    # -- snapshots -----------------------------------------------------------------------------

    @guarded
    def GetSnapshot(self, request: catalog_pb2.GetSnapshotRequest,
                    context: grpc.ServicerContext) -> catalog_pb2.GetSnapshotResponse:
        snap = self._table(request.table).snapshots.snapshot(request.snapshot_id)
        return catalog_pb2.GetSnapshotResponse(snapshot=convert.snapshot_to_proto(snap))

    @guarded
    def ListSnapshots(self, request: catalog_pb2.ListSnapshotsRequest,
                      context: grpc.ServicerContext) -> catalog_pb2.ListSnapshotsResponse:
        if request.limit < 0:
            raise InvalidInputError(f"limit {request.limit} must not be negative")
        snaps = self._table(request.table).snapshots.snapshots()
        if request.HasField("after_snapshot_id"):
            snaps = [s for s in snaps if s.id > request.after_snapshot_id]
        if request.limit:
            snaps = snaps[:request.limit]
        return catalog_pb2.ListSnapshotsResponse(snapshots=[convert.snapshot_to_proto(s) for s in snaps])

    @guarded
    def LatestSnapshot(self, request: catalog_pb2.LatestSnapshotRequest,
                       context: grpc.ServicerContext) -> catalog_pb2.LatestSnapshotResponse:
        snap = self._table(request.table).snapshots.latest()
        out = catalog_pb2.LatestSnapshotResponse()
        if snap is not None:
            out.snapshot.CopyFrom(convert.snapshot_to_proto(snap))
        return out

    @guarded
    def SnapshotAtTime(self, request: catalog_pb2.SnapshotAtTimeRequest,
                       context: grpc.ServicerContext) -> catalog_pb2.SnapshotAtTimeResponse:
        snaps = self._table(request.table).snapshots.snapshots()
        out = catalog_pb2.SnapshotAtTimeResponse()
        older = [s for s in snaps if s.time_millis <= request.time_millis]
        if older:
            out.snapshot.CopyFrom(convert.snapshot_to_proto(older[-1]))
        return out

    @guarded_stream
    def WatchSnapshots(self, request: catalog_pb2.WatchSnapshotsRequest,
                       context: grpc.ServicerContext) -> Iterator[catalog_pb2.WatchSnapshotsResponse]:
        """Send each kept snapshot after `after_snapshot_id`, then each new one, until the client or server stops.

        Commits through this replica wake the stream at once; those through other replicas (or outside
        writers) are found by polling the warehouse every `watch_poll_s`.
        """
        tid = _ident(request.table)
        after = request.after_snapshot_id if request.HasField("after_snapshot_id") else None
        snapshots = follow_snapshots(self.catalog, tid, after,
                                     lambda: context.is_active() and not self.stopping.is_set(), self._wait_commit)
        self.metrics.watchers.inc()
        try:
            for snap in snapshots:
                yield catalog_pb2.WatchSnapshotsResponse(table=request.table, snapshot=convert.snapshot_to_proto(snap))
        finally:
            self.metrics.watchers.dec()

    def _wait_commit(self) -> None:
        with self._changed:
            self._changed.wait(self._watch_poll_s)

    # -- scans ---------------------------------------------------------------------------------

    @guarded
    def PlanScan(self, request: catalog_pb2.PlanScanRequest,
                 context: grpc.ServicerContext) -> catalog_pb2.PlanScanResponse:
        table = self._table(request.table)
        part_terms = convert.terms_from_proto(table, request.partition_filter)
        for t in part_terms:
            if t.column not in table.schema.partition_keys:
                raise InvalidInputError(f"partition_filter column {t.column!r} is not a partition key")
        terms = part_terms + convert.terms_from_proto(table, request.key_filter)
        snap = table.snapshots.snapshot(request.snapshot_id) if request.HasField("snapshot_id") \
            else table.snapshots.latest()
        if snap is None:
            return catalog_pb2.PlanScanResponse(snapshot_id=0, schema_id=table.schema.id)
        splits = table.new_scan(Predicate(tuple(terms)), snap, all_levels=request.all_levels).plan()
        if request.buckets:
            wanted = bucket_numbers(request.buckets)
            splits = [s for s in splits if s.bucket in wanted]
        return catalog_pb2.PlanScanResponse(snapshot_id=snap.id, schema_id=snap.schema_id,
                                            splits=[convert.split_to_proto(table, s) for s in splits])

    # -- maintenance ---------------------------------------------------------------------------

    @guarded
    def ExpireSnapshots(self, request: catalog_pb2.ExpireSnapshotsRequest,
                        context: grpc.ServicerContext) -> catalog_pb2.ExpireSnapshotsResponse:
        tid = _ident(request.table)
        opt = expire_options(request)
        with self.store.commit_lock(tid):  # serialized with commits of the table
            table = self.catalog.get_table(tid)
            result = expire_snapshots(table, retain_min=opt["retain_min"], retain_max=opt["retain_max"],
                                      time_retained_ms=opt["time_retained_ms"], limit=opt["max_deletes"])
        return catalog_pb2.ExpireSnapshotsResponse(expired_snapshot_ids=result.expired_snapshots,
                                                   deleted_data_files=result.deleted_data_files,
                                                   deleted_metadata_files=result.deleted_metadata_files)

    @guarded
    def RemoveOrphanFiles(self, request: catalog_pb2.RemoveOrphanFilesRequest,
                          context: grpc.ServicerContext) -> catalog_pb2.RemoveOrphanFilesResponse:
        if request.older_than_ms < 0:
            raise InvalidInputError(f"older_than_ms {request.older_than_ms} must not be negative")
        table = self._table(request.table)
        # no commit lock: the age guard keeps the files of commits in progress
        result = remove_orphan_files(table, older_than_ms=request.older_than_ms or 86_400_000,
                                     dry_run=request.dry_run)
        return catalog_pb2.RemoveOrphanFilesResponse(deleted_paths=result.deleted)

    # -- compaction timeline -------------------------------------------------------------------

    @guarded
    def RequestCompaction(self, request: catalog_pb2.RequestCompactionRequest,
                          context: grpc.ServicerContext) -> catalog_pb2.RequestCompactionResponse:
        tid = _ident(request.table)
        plan = self.timeline.request(tid, [convert.unit_from_proto(u) for u in request.units], request.full)
        self.metrics.plans.labels("REQUESTED").inc()
        return catalog_pb2.RequestCompactionResponse(plan=convert.plan_to_proto(plan, request.table))

    @guarded
    def StartCompaction(self, request: catalog_pb2.StartCompactionRequest,
                        context: grpc.ServicerContext) -> catalog_pb2.StartCompactionResponse:
        tid = _ident(request.table)
        plan = self.timeline.start(tid, parse_plan_id(request.plan_id), request.owner)
        self.metrics.plans.labels("INFLIGHT").inc()
        return catalog_pb2.StartCompactionResponse(plan=convert.plan_to_proto(plan, request.table))

    @guarded
    def CompleteCompaction(self, request: catalog_pb2.CompleteCompactionRequest,
                           context: grpc.ServicerContext) -> catalog_pb2.CompleteCompactionResponse:
        """Commit a plan's result as a COMPACT snapshot and mark the plan COMPLETED in the same transaction."""
        _ident(request.table)
        plan_id = parse_plan_id(request.plan_id)
        outcome, plan = self.timeline.complete(self._run_commit, convert.completion_from_proto(request), plan_id,
                                               request.owner)
        self.metrics.plans.labels("COMPLETED").inc()
        return catalog_pb2.CompleteCompactionResponse(snapshot_id=outcome.snapshot_id,
                                                      already_committed=outcome.already_committed,
                                                      plan=convert.plan_to_proto(plan, request.table))

    @guarded
    def RollbackCompaction(self, request: catalog_pb2.RollbackCompactionRequest,
                           context: grpc.ServicerContext) -> catalog_pb2.RollbackCompactionResponse:
        tid = _ident(request.table)
        plan, deleted = self.timeline.rollback(tid, parse_plan_id(request.plan_id), request.reason, request.requeue,
                                               list(request.output_files))
        self.metrics.plans.labels(plan.state).inc()
        return catalog_pb2.RollbackCompactionResponse(plan=convert.plan_to_proto(plan, request.table),
                                                      deleted_paths=deleted)

    @guarded
    def ListTableHealth(self, request: catalog_pb2.ListTableHealthRequest,
                        context: grpc.ServicerContext) -> catalog_pb2.ListTableHealthResponse:
        """The health of one table, a database's tables or all (see `lsmlake.catalog.health`), ranked."""
        if request.HasField("table"):
            tids = [_ident(request.table)]
        else:
            tids = self.catalog.table_ids(check_name(request.database, "database") if request.database else None)
        # an unreadable table is answered with its error, ranked first; the others are answered all the same
        healths = read_healths(self.catalog, self.store, tids, now_ms())
        if request.HasField("table") and not healths:
            raise NotFoundError(f"table {tids[0]} does not exist")
        return catalog_pb2.ListTableHealthResponse(tables=[convert.health_to_proto(h, request.with_buckets)
                                                           for h in healths])

    @guarded
    def ListCompactionPlans(self, request: catalog_pb2.ListCompactionPlansRequest,
                            context: grpc.ServicerContext) -> catalog_pb2.ListCompactionPlansResponse:
        tid = _ident(request.table)
        states = [convert.state_from_proto(s) for s in request.states]
        return catalog_pb2.ListCompactionPlansResponse(
            plans=[convert.plan_to_proto(p, request.table) for p in self.timeline.list(tid, states)])
