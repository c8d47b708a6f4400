"""`CatalogService`: translates gRPC requests into calls on lsmlake's catalog, commit and scan, and back.

Every method is wrapped by `errors_map.guarded`, so methods raise lsmlake errors and never set statuses.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import grpc

from ..catalog import FileSystemCatalog, check_name
from ..commit import CommitResult
from ..errors import InvalidInputError, NotFoundError
from ..expire import expire_snapshots, remove_orphan_files
from ..metastore import MetaStore
from ..predicate import Predicate
from ..proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from ..snapshot import APPEND, COMPACT, OVERWRITE
from ..table import FileStoreTable
from ..table_write import CommitMessage
from ..types import parse_schema_fields
from . import convert
from .errors_map import UnimplementedError, guarded
from .events import snapshot_events

_log = logging.getLogger(__name__)

# Bounds on one commit request (gRPC's message size limit bounds the bytes; these bound the work).
MAX_CHANGES_PER_COMMIT = 10_000
MAX_FILES_PER_COMMIT = 100_000
MAX_PROPERTIES = 1_000
MAX_PROPERTY_CHARS = 64 * 1024
_COMMIT_KINDS = (APPEND, COMPACT, OVERWRITE)


def _ident(t: common_pb2.TableIdentifier) -> str:
    """`db.table` after checking both names (a name can never escape the warehouse folder)."""
    return f"{check_name(t.database, 'database')}.{check_name(t.table, 'table')}"


def _check_commit(request: catalog_pb2.CommitRequest) -> str:
    """The lsmlake commit kind of a request whose shape is valid; InvalidInputError naming the field otherwise."""
    kind = convert.KIND_FROM_PROTO.get(request.kind)
    if kind not in _COMMIT_KINDS:
        name = common_pb2.CommitKind.Name(request.kind) if request.kind in common_pb2.CommitKind.values() \
            else str(request.kind)
        raise InvalidInputError(f"kind {name} "
                                "is not accepted: use COMMIT_KIND_APPEND, COMMIT_KIND_COMPACT or COMMIT_KIND_OVERWRITE")
    if not request.commit_user:
        raise InvalidInputError("commit_user must not be empty")
    if len(request.changes) > MAX_CHANGES_PER_COMMIT:
        raise InvalidInputError(f"changes has {len(request.changes)} entries; at most {MAX_CHANGES_PER_COMMIT}")
    files = sum(len(c.new_files) + len(c.deleted_files) + len(c.changelog_files) for c in request.changes)
    if files > MAX_FILES_PER_COMMIT:
        raise InvalidInputError(f"the commit names {files} files; at most {MAX_FILES_PER_COMMIT}")
    if len(request.properties) > MAX_PROPERTIES or any(
            len(k) + len(v) > MAX_PROPERTY_CHARS for k, v in request.properties.items()):
        raise InvalidInputError(f"properties: at most {MAX_PROPERTIES} entries of at most {MAX_PROPERTY_CHARS} chars")
    for i, c in enumerate(request.changes):
        if c.bucket < -2 or c.total_buckets < -2:  # -1 / -2: Paimon's dynamic and postpone bucket modes
            raise InvalidInputError(f"changes[{i}]: bucket {c.bucket} / total_buckets {c.total_buckets} is invalid")
        if kind == APPEND and (c.deleted_files or c.deleted_index_files):
            raise InvalidInputError(f"changes[{i}]: an APPEND commit cannot delete files; use COMPACT or OVERWRITE")
    if kind != OVERWRITE and (request.overwrite_all_partitions or request.overwrite_partitions):
        raise InvalidInputError("overwrite_all_partitions and overwrite_partitions are for OVERWRITE commits only")
    return kind


class CatalogService(catalog_pb2_grpc.CatalogServiceServicer):
    """The catalog and snapshot service of one warehouse and metadata store."""

    def __init__(self, catalog: FileSystemCatalog, store: MetaStore,
                 on_commit: Callable[[], None] | None = None) -> None:
        self.catalog = catalog
        self.store = store
        self._on_commit = on_commit or (lambda: None)

    def _table(self, t: common_pb2.TableIdentifier) -> FileStoreTable:
        return self.catalog.get_table(_ident(t))

    # -- databases -----------------------------------------------------------------------------

    @guarded
    def CreateDatabase(self, request: Any, context: grpc.ServicerContext) -> Any:
        existed = self.catalog.io.exists(self.catalog.database_path(request.name))
        self.catalog.create_database(request.name, ignore_if_exists=request.ignore_if_exists)
        return catalog_pb2.CreateDatabaseResponse(created=not existed)

    @guarded
    def ListDatabases(self, request: Any, context: grpc.ServicerContext) -> Any:
        return catalog_pb2.ListDatabasesResponse(databases=self.catalog.list_databases())

    @guarded
    def DropDatabase(self, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            self.catalog.drop_database(request.name, cascade=request.cascade)
        except NotFoundError:
            if request.ignore_if_not_exists:
                return catalog_pb2.DropDatabaseResponse(dropped=False)
            raise
        return catalog_pb2.DropDatabaseResponse(dropped=True)

    # -- tables --------------------------------------------------------------------------------

    @guarded
    def CreateTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        tid = _ident(request.table)
        if not request.columns:
            raise InvalidInputError("columns must not be empty")
        fields = parse_schema_fields(", ".join(f"`{c.name}` {c.type}" for c in request.columns))
        fields = tuple(dataclasses.replace(f, description=c.comment or None)
                       for f, c in zip(fields, request.columns, strict=True))
        existed = self.catalog.table_exists(tid)
        table = self.catalog.create_table(tid, fields, list(request.partition_keys), list(request.primary_keys),
                                          dict(request.options), request.comment or None,
                                          ignore_if_exists=request.ignore_if_exists)
        return catalog_pb2.CreateTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table), created=not existed)

    @guarded
    def GetTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        table = self._table(request.table)
        return catalog_pb2.GetTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table))

    @guarded
    def ListTables(self, request: Any, context: grpc.ServicerContext) -> Any:
        return catalog_pb2.ListTablesResponse(tables=self.catalog.list_tables(request.database))

    @guarded
    def DropTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        tid = _ident(request.table)
        try:
            with self.store.commit_lock(tid):  # not in the middle of a commit of that table
                self.catalog.drop_table(tid)
        except NotFoundError:
            if request.ignore_if_not_exists:
                return catalog_pb2.DropTableResponse(dropped=False)
            raise
        return catalog_pb2.DropTableResponse(dropped=True)

    @guarded
    def AlterTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        raise UnimplementedError("AlterTable is not implemented yet by this catalog service")

    # -- commits -------------------------------------------------------------------------------

    @guarded
    def Commit(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Commit file changes as one snapshot.

        1. validate: names, kind, sizes; the table must exist;
        2. under the table's commit lock, in one metadata-store transaction: a recorded
           (user, identifier, kind) answers `already_committed`; otherwise lsmlake's FileStoreCommit
           publishes the snapshot in the warehouse, and the commit record and one outbox event per
           changed bucket are recorded; a failure rolls the transaction back;
        3. wake the outbox relay.
        """
        kind = _check_commit(request)
        tid = _ident(request.table)
        table = self.catalog.get_table(tid)
        messages = [convert.changes_from_proto(c) for c in request.changes]
        user, number = request.commit_user, request.commit_identifier
        with self.store.commit_lock(tid):
            done = self.store.find_commit(tid, user, number, kind)
            if done is not None:
                return catalog_pb2.CommitResponse(snapshot_id=done, already_committed=True)
            result = self._apply(table, kind, messages, request)
            # also when lsmlake found the snapshot already published (a crash before the record): record it now
            self.store.record_commit(tid, user, number, kind, result.snapshot_id)
            commit_time = table.snapshots.snapshot(result.snapshot_id).time_millis
            for e in snapshot_events(tid, request.table, request.kind, result.snapshot_id, commit_time,
                                     request.changes):
                self.store.add_event(tid, result.snapshot_id, e.topic, e.key, e.payload)
        self._on_commit()
        return catalog_pb2.CommitResponse(snapshot_id=result.snapshot_id,
                                          already_committed=result.already_committed)

    @staticmethod
    def _apply(table: FileStoreTable, kind: str, messages: list[CommitMessage], request: Any) -> CommitResult:
        commit = table.new_commit(request.commit_user)
        props = dict(request.properties) or None
        number = request.commit_identifier
        if kind == OVERWRITE and request.overwrite_all_partitions:
            return commit.overwrite(messages, None, identifier=number, properties=props)
        if kind == OVERWRITE and request.overwrite_partitions:
            return commit.overwrite(messages, list(request.overwrite_partitions), identifier=number, properties=props)
        return commit.commit(messages, kind=kind, identifier=number, properties=props)

    # -- snapshots -----------------------------------------------------------------------------

    @guarded
    def GetSnapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        snap = self._table(request.table).snapshots.snapshot(request.snapshot_id)
        return catalog_pb2.GetSnapshotResponse(snapshot=convert.snapshot_to_proto(snap))

    @guarded
    def ListSnapshots(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.limit < 0:
            raise InvalidInputError(f"limit {request.limit} must not be negative")
        snaps = self._table(request.table).snapshots.snapshots()
        if request.HasField("after_snapshot_id"):
            snaps = [s for s in snaps if s.id > request.after_snapshot_id]
        if request.limit:
            snaps = snaps[:request.limit]
        return catalog_pb2.ListSnapshotsResponse(snapshots=[convert.snapshot_to_proto(s) for s in snaps])

    @guarded
    def LatestSnapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        snap = self._table(request.table).snapshots.latest()
        out = catalog_pb2.LatestSnapshotResponse()
        if snap is not None:
            out.snapshot.CopyFrom(convert.snapshot_to_proto(snap))
        return out

    @guarded
    def SnapshotAtTime(self, request: Any, context: grpc.ServicerContext) -> Any:
        snaps = self._table(request.table).snapshots.snapshots()
        out = catalog_pb2.SnapshotAtTimeResponse()
        older = [s for s in snaps if s.time_millis <= request.time_millis]
        if older:
            out.snapshot.CopyFrom(convert.snapshot_to_proto(older[-1]))
        return out

    @guarded
    def WatchSnapshots(self, request: Any, context: grpc.ServicerContext) -> Any:
        raise UnimplementedError("WatchSnapshots is not implemented yet; poll LatestSnapshot or consume the "
                                 "data-files and compaction-results topics")

    # -- scans ---------------------------------------------------------------------------------

    @guarded
    def PlanScan(self, request: Any, context: grpc.ServicerContext) -> Any:
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
        splits = table.new_scan(Predicate(tuple(terms)), snap).plan()
        if request.buckets:
            wanted = set(request.buckets)
            splits = [s for s in splits if s.bucket in wanted]
        return catalog_pb2.PlanScanResponse(snapshot_id=snap.id, schema_id=snap.schema_id,
                                            splits=[convert.split_to_proto(table, s) for s in splits])

    # -- maintenance ---------------------------------------------------------------------------

    @guarded
    def ExpireSnapshots(self, request: Any, context: grpc.ServicerContext) -> Any:
        tid = _ident(request.table)
        opt = {name: getattr(request, name) if request.HasField(name) else None
               for name in ("retain_min", "retain_max", "time_retained_ms", "max_deletes")}
        for name, value in opt.items():
            if value is not None and value < 0:
                raise InvalidInputError(f"{name} {value} must not be negative")
        with self.store.commit_lock(tid):  # serialized with commits of the table
            table = self.catalog.get_table(tid)
            result = expire_snapshots(table, retain_min=opt["retain_min"], retain_max=opt["retain_max"],
                                      time_retained_ms=opt["time_retained_ms"], limit=opt["max_deletes"])
        return catalog_pb2.ExpireSnapshotsResponse(expired_snapshot_ids=result.expired_snapshots,
                                                   deleted_data_files=result.deleted_data_files,
                                                   deleted_metadata_files=result.deleted_metadata_files)

    @guarded
    def RemoveOrphanFiles(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.older_than_ms < 0:
            raise InvalidInputError(f"older_than_ms {request.older_than_ms} must not be negative")
        table = self._table(request.table)
        # no commit lock: the age guard keeps the files of commits in progress
        result = remove_orphan_files(table, older_than_ms=request.older_than_ms or 86_400_000,
                                     dry_run=request.dry_run)
        return catalog_pb2.RemoveOrphanFilesResponse(deleted_paths=result.deleted)

    # -- compaction timeline (not yet) ---------------------------------------------------------

    def _timeline(self, rpc: str) -> Any:
        raise UnimplementedError(f"{rpc} is not implemented yet: the compaction timeline RPCs come in a later "
                                 "version; commit compactions with Commit(kind=COMPACT)")

    @guarded
    def RequestCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._timeline("RequestCompaction")

    @guarded
    def StartCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._timeline("StartCompaction")

    @guarded
    def CompleteCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._timeline("CompleteCompaction")

    @guarded
    def RollbackCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._timeline("RollbackCompaction")

    @guarded
    def ListCompactionPlans(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._timeline("ListCompactionPlans")
