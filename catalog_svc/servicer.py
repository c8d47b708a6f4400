"""`CatalogService`: translates gRPC requests into calls on lsmlake's catalog operations, and back.

Every method is wrapped by `rpc_errors.guarded`, so methods raise lsmlake errors and never set statuses.
What each call does, and the table lock it holds, is the library's (`lsmlake.catalog.operations`): this
module reads requests, calls the operations, and counts what happened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import grpc

from catalog_svc.metrics import CatalogMetrics
from catalog_svc.requests import (
    expire_options,
    partition_keys,
    schema_change,
    sequence_counts,
    table_fields,
)
from catalog_svc.watch import follow_snapshots
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.catalog.tags import check_tag_name
from lsmlake.catalog.timeline import parse_plan_id
from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc import convert
from lsmlake.rpc.errors import guarded, guarded_stream
from lsmlake.table.file_store_table import FileStoreTable

_log = logging.getLogger(__name__)

_ident = convert.table_id


class CatalogService(catalog_pb2_grpc.CatalogServiceServicer):
    """The gRPC catalog and snapshot service over the catalog operations of one warehouse and metadata store.

    The operations count commits (built with the service's `CommitListener`); this adapter counts plans,
    sequences and snapshot watchers.
    """

    def __init__(self, operations: CatalogOperations, metrics: CatalogMetrics | None = None,
                 watch_poll_s: float = 0.5) -> None:
        self.operations = operations
        self.metrics = metrics or CatalogMetrics()
        self.stopping = threading.Event()  # set at shutdown: open WatchSnapshots streams end
        self._watch_poll_s = watch_poll_s

    def _table(self, t: common_pb2.TableIdentifier) -> FileStoreTable:
        return self.operations.get_table(_ident(t))

    # -- databases -----------------------------------------------------------------------------

    @guarded
    def CreateDatabase(self, request: catalog_pb2.CreateDatabaseRequest,
                       context: grpc.ServicerContext) -> catalog_pb2.CreateDatabaseResponse:
        created = self.operations.create_database(request.name, ignore_if_exists=request.ignore_if_exists)
        return catalog_pb2.CreateDatabaseResponse(created=created)

    @guarded
    def ListDatabases(self, request: catalog_pb2.ListDatabasesRequest,
                      context: grpc.ServicerContext) -> catalog_pb2.ListDatabasesResponse:
        return catalog_pb2.ListDatabasesResponse(databases=self.operations.list_databases())

    @guarded
    def DropDatabase(self, request: catalog_pb2.DropDatabaseRequest,
                     context: grpc.ServicerContext) -> catalog_pb2.DropDatabaseResponse:
        try:
            self.operations.drop_database(request.name, request.cascade)
        except NotFoundError:
            if request.ignore_if_not_exists:
                return catalog_pb2.DropDatabaseResponse(dropped=False)
            raise
        return catalog_pb2.DropDatabaseResponse(dropped=True)

    # -- tables --------------------------------------------------------------------------------

    @guarded
    def CreateTable(self, request: catalog_pb2.CreateTableRequest,
                    context: grpc.ServicerContext) -> catalog_pb2.CreateTableResponse:
        tid = _ident(request.table)
        fields = table_fields(request.columns)
        table, created = self.operations.create_table(tid, fields, request.partition_keys, request.primary_keys,
                                                      request.options, request.comment or None,
                                                      ignore_if_exists=request.ignore_if_exists)
        return catalog_pb2.CreateTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table), created=created)

    @guarded
    def GetTable(self, request: catalog_pb2.GetTableRequest,
                 context: grpc.ServicerContext) -> catalog_pb2.GetTableResponse:
        table = self._table(request.table)
        return catalog_pb2.GetTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table))

    @guarded
    def ListTables(self, request: catalog_pb2.ListTablesRequest,
                   context: grpc.ServicerContext) -> catalog_pb2.ListTablesResponse:
        return catalog_pb2.ListTablesResponse(tables=self.operations.list_tables(request.database))

    @guarded
    def DropTable(self, request: catalog_pb2.DropTableRequest,
                  context: grpc.ServicerContext) -> catalog_pb2.DropTableResponse:
        try:
            self.operations.drop_table(_ident(request.table))
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
        table = self.operations.alter_table(tid, changes)
        _log.info("altered %s: schema %d", tid, table.schema.id)
        return catalog_pb2.AlterTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table))

    @guarded
    def RenameTable(self, request: catalog_pb2.RenameTableRequest,
                    context: grpc.ServicerContext) -> catalog_pb2.RenameTableResponse:
        """Move a table to its new name with its files (see `CatalogOperations.rename_table`)."""
        src, dst = _ident(request.table), _ident(request.new_table)
        self.operations.rename_table(src, dst)
        _log.info("renamed %s to %s", src, dst)
        return catalog_pb2.RenameTableResponse(table=convert.table_to_proto(
            self.operations.get_table(dst), request.new_table.database, request.new_table.table))

    # -- tags ----------------------------------------------------------------------------------

    @guarded
    def ListTags(self, request: catalog_pb2.ListTagsRequest,
                 context: grpc.ServicerContext) -> catalog_pb2.ListTagsResponse:
        return catalog_pb2.ListTagsResponse(tags=sorted(self.operations.list_tags(_ident(request.table))))

    @guarded
    def GetTag(self, request: catalog_pb2.GetTagRequest,
               context: grpc.ServicerContext) -> catalog_pb2.GetTagResponse:
        snap = self.operations.get_tag(_ident(request.table), request.tag)
        return catalog_pb2.GetTagResponse(snapshot=convert.snapshot_to_proto(snap))

    @guarded
    def CreateTag(self, request: catalog_pb2.CreateTagRequest,
                  context: grpc.ServicerContext) -> catalog_pb2.CreateTagResponse:
        snapshot_id = request.snapshot_id if request.HasField("snapshot_id") else None
        snap = self.operations.create_tag(_ident(request.table), check_tag_name(request.tag), snapshot_id)
        return catalog_pb2.CreateTagResponse(snapshot=convert.snapshot_to_proto(snap))

    @guarded
    def DeleteTag(self, request: catalog_pb2.DeleteTagRequest,
                  context: grpc.ServicerContext) -> catalog_pb2.DeleteTagResponse:
        self.operations.delete_tag(_ident(request.table), check_tag_name(request.tag))
        return catalog_pb2.DeleteTagResponse()

    # -- commits -------------------------------------------------------------------------------

    @guarded
    def Commit(self, request: catalog_pb2.CommitRequest,
               context: grpc.ServicerContext) -> catalog_pb2.CommitResponse:
        """Commit file changes as one snapshot (see `lsmlake.catalog.commit.catalog_commits`)."""
        outcome = self.operations.writes.commit(convert.commit_from_proto(request))
        return catalog_pb2.CommitResponse(snapshot_id=outcome.snapshot_id,
                                          already_committed=outcome.already_committed)

    @guarded
    def FindWrites(self, request: catalog_pb2.FindWritesRequest,
                   context: grpc.ServicerContext) -> catalog_pb2.FindWritesResponse:
        """The snapshot of each client write (by request id) the table committed."""
        found = self.operations.writes.find_writes(_ident(request.table), request.request_ids)
        return catalog_pb2.FindWritesResponse(snapshot_ids=found)

    @guarded
    def AllocateSequences(self, request: catalog_pb2.AllocateSequencesRequest,
                          context: grpc.ServicerContext) -> catalog_pb2.AllocateSequencesResponse:
        """Ranges of sequence numbers per bucket, monotone and above every number the table holds."""
        tid = _ident(request.table)
        counts = sequence_counts(request.ranges)
        first = self.operations.writes.allocate_sequences(tid, request.table_uuid, counts)
        self.metrics.sequences.inc(sum(counts.values()))
        return catalog_pb2.AllocateSequencesResponse(first=first)

    @guarded
    def AssignBuckets(self, request: catalog_pb2.AssignBucketsRequest,
                      context: grpc.ServicerContext) -> catalog_pb2.AssignBucketsResponse:
        """The bucket of each key of a dynamic-bucket table, per partition (see `lsmlake.table.dynamic_bucket`)."""
        snapshot_id, answers = self.operations.writes.assign_buckets(_ident(request.table), request.table_uuid,
                                                                     partition_keys(request))
        return catalog_pb2.AssignBucketsResponse(
            snapshot_id=snapshot_id,
            partitions=[catalog_pb2.PartitionBuckets(
                buckets=a.buckets.tolist(), elsewhere_positions=a.elsewhere.positions.tolist(),
                elsewhere_buckets=a.elsewhere.buckets.tolist(),
                elsewhere_partitions=[a.elsewhere.partitions[i] for i in a.elsewhere.partition_ids.tolist()])
                for a in answers])

    # -- snapshots -----------------------------------------------------------------------------

    @guarded
    def GetSnapshot(self, request: catalog_pb2.GetSnapshotRequest,
                    context: grpc.ServicerContext) -> catalog_pb2.GetSnapshotResponse:
        snap = self.operations.snapshot(_ident(request.table), request.snapshot_id)
        return catalog_pb2.GetSnapshotResponse(snapshot=convert.snapshot_to_proto(snap))

    @guarded
    def ListSnapshots(self, request: catalog_pb2.ListSnapshotsRequest,
                      context: grpc.ServicerContext) -> catalog_pb2.ListSnapshotsResponse:
        after = request.after_snapshot_id if request.HasField("after_snapshot_id") else None
        snaps = self.operations.snapshots(_ident(request.table), after, request.limit)
        return catalog_pb2.ListSnapshotsResponse(snapshots=[convert.snapshot_to_proto(s) for s in snaps])

    @guarded
    def LatestSnapshot(self, request: catalog_pb2.LatestSnapshotRequest,
                       context: grpc.ServicerContext) -> catalog_pb2.LatestSnapshotResponse:
        snap = self.operations.latest_snapshot(_ident(request.table))
        out = catalog_pb2.LatestSnapshotResponse()
        if snap is not None:
            out.snapshot.CopyFrom(convert.snapshot_to_proto(snap))
        return out

    @guarded
    def SnapshotAtTime(self, request: catalog_pb2.SnapshotAtTimeRequest,
                       context: grpc.ServicerContext) -> catalog_pb2.SnapshotAtTimeResponse:
        snap = self.operations.snapshot_at_time(_ident(request.table), request.time_millis)
        out = catalog_pb2.SnapshotAtTimeResponse()
        if snap is not None:
            out.snapshot.CopyFrom(convert.snapshot_to_proto(snap))
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
        snapshots = follow_snapshots(self.operations, tid, after,
                                     lambda: context.is_active() and not self.stopping.is_set(), self._wait_commit)
        self.metrics.watchers.inc()
        try:
            for snap in snapshots:
                yield catalog_pb2.WatchSnapshotsResponse(table=request.table, snapshot=convert.snapshot_to_proto(snap))
        finally:
            self.metrics.watchers.dec()

    def _wait_commit(self) -> None:
        self.operations.writes.wait_for_commit(self._watch_poll_s)

    # -- scans ---------------------------------------------------------------------------------

    @guarded
    def PlanScan(self, request: catalog_pb2.PlanScanRequest,
                 context: grpc.ServicerContext) -> catalog_pb2.PlanScanResponse:
        table = self._table(request.table)
        snap, splits = self.operations.plan_scan(
            table, convert.terms_from_proto(table, request.partition_filter),
            convert.terms_from_proto(table, request.key_filter),
            request.snapshot_id if request.HasField("snapshot_id") else None, request.all_levels, request.buckets,
            request.filter)
        if snap is None:
            return catalog_pb2.PlanScanResponse(snapshot_id=0, schema_id=table.schema.id)
        return catalog_pb2.PlanScanResponse(snapshot_id=snap.id, schema_id=snap.schema_id,
                                            splits=[convert.split_to_proto(table, s) for s in splits])

    # -- maintenance ---------------------------------------------------------------------------

    @guarded
    def ExpireSnapshots(self, request: catalog_pb2.ExpireSnapshotsRequest,
                        context: grpc.ServicerContext) -> catalog_pb2.ExpireSnapshotsResponse:
        tid = _ident(request.table)
        opt = expire_options(request)
        result = self.operations.expire_snapshots(tid, retain_min=opt["retain_min"], retain_max=opt["retain_max"],
                                                  time_retained_ms=opt["time_retained_ms"], limit=opt["max_deletes"])
        return catalog_pb2.ExpireSnapshotsResponse(expired_snapshot_ids=result.expired_snapshots,
                                                   deleted_data_files=result.deleted_data_files,
                                                   deleted_metadata_files=result.deleted_metadata_files)

    @guarded
    def RemoveOrphanFiles(self, request: catalog_pb2.RemoveOrphanFilesRequest,
                          context: grpc.ServicerContext) -> catalog_pb2.RemoveOrphanFilesResponse:
        result = self.operations.remove_orphan_files(_ident(request.table), request.older_than_ms or 86_400_000,
                                                     dry_run=request.dry_run)
        return catalog_pb2.RemoveOrphanFilesResponse(deleted_paths=result.deleted)

    @guarded
    def SyncIceberg(self, request: catalog_pb2.SyncIcebergRequest,
                    context: grpc.ServicerContext) -> catalog_pb2.SyncIcebergResponse:
        published = self.operations.sync_iceberg(_ident(request.table))
        if published is None:
            return catalog_pb2.SyncIcebergResponse()
        return catalog_pb2.SyncIcebergResponse(snapshot_id=published.snapshot_id,
                                               metadata_location=published.metadata_location,
                                               published=published.published)

    # -- compaction timeline -------------------------------------------------------------------

    @guarded
    def RequestCompaction(self, request: catalog_pb2.RequestCompactionRequest,
                          context: grpc.ServicerContext) -> catalog_pb2.RequestCompactionResponse:
        plan = self.operations.request_compaction(_ident(request.table),
                                                  [convert.unit_from_proto(u) for u in request.units], request.full)
        self.metrics.plans.labels("REQUESTED").inc()
        return catalog_pb2.RequestCompactionResponse(plan=convert.plan_to_proto(plan))

    @guarded
    def StartCompaction(self, request: catalog_pb2.StartCompactionRequest,
                        context: grpc.ServicerContext) -> catalog_pb2.StartCompactionResponse:
        plan = self.operations.start_compaction(_ident(request.table), parse_plan_id(request.plan_id), request.owner)
        self.metrics.plans.labels("INFLIGHT").inc()
        return catalog_pb2.StartCompactionResponse(plan=convert.plan_to_proto(plan))

    @guarded
    def CompleteCompaction(self, request: catalog_pb2.CompleteCompactionRequest,
                           context: grpc.ServicerContext) -> catalog_pb2.CompleteCompactionResponse:
        """Commit a plan's result as a COMPACT snapshot and mark the plan COMPLETED in the same transaction."""
        _ident(request.table)
        plan_id = parse_plan_id(request.plan_id)
        outcome, plan = self.operations.complete_compaction(convert.completion_from_proto(request), plan_id,
                                                            request.owner)
        self.metrics.plans.labels("COMPLETED").inc()
        return catalog_pb2.CompleteCompactionResponse(snapshot_id=outcome.snapshot_id,
                                                      already_committed=outcome.already_committed,
                                                      plan=convert.plan_to_proto(plan))

    @guarded
    def RollbackCompaction(self, request: catalog_pb2.RollbackCompactionRequest,
                           context: grpc.ServicerContext) -> catalog_pb2.RollbackCompactionResponse:
        plan, deleted = self.operations.rollback_compaction(_ident(request.table), parse_plan_id(request.plan_id),
                                                            request.reason, request.requeue, list(request.output_files))
        self.metrics.plans.labels(plan.state).inc()
        return catalog_pb2.RollbackCompactionResponse(plan=convert.plan_to_proto(plan),
                                                      deleted_paths=deleted)

    @guarded
    def ListTableHealth(self, request: catalog_pb2.ListTableHealthRequest,
                        context: grpc.ServicerContext) -> catalog_pb2.ListTableHealthResponse:
        """The health of one table, a database's tables or all (see `lsmlake.catalog.health`), ranked."""
        if request.HasField("table"):
            healths = self.operations.table_healths(_ident(request.table))
        else:
            healths = self.operations.table_healths(database=request.database or None)
        return catalog_pb2.ListTableHealthResponse(tables=[convert.health_to_proto(h, request.with_buckets)
                                                           for h in healths])

    @guarded
    def ListCompactionPlans(self, request: catalog_pb2.ListCompactionPlansRequest,
                            context: grpc.ServicerContext) -> catalog_pb2.ListCompactionPlansResponse:
        """One table's plans, or every table's in the states asked for (the compactors' look for REQUESTED plans)."""
        every = not request.HasField("table") or request.table == common_pb2.TableIdentifier()
        tid = None if every else _ident(request.table)
        states = [convert.state_from_proto(s) for s in request.states]
        plans = self.operations.list_compaction_plans(tid, states)
        return catalog_pb2.ListCompactionPlansResponse(plans=[convert.plan_to_proto(p) for p in plans])
