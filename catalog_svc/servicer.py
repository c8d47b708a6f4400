"""`CatalogService`: translates gRPC requests into calls on lsmlake's catalog, commit and scan, and back.

Every method is wrapped by `rpc_errors.guarded`, so methods raise lsmlake errors and never set statuses.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from catalog_svc.metrics import CatalogMetrics
from lsmlake.auth.principal import current_principal
from lsmlake.catalog.commit_checks import check_changes
from lsmlake.catalog.commit_identity import (
    DIGEST_PROPERTY,
    CommitIdentity,
    check_rights,
    request_id_limit,
    request_ids_of,
)
from lsmlake.catalog.expire import expire_snapshots, remove_orphan_files
from lsmlake.catalog.filesystem import FileSystemCatalog, check_name
from lsmlake.catalog.reconcile import WRITES_PROPERTY, reconcile_table
from lsmlake.catalog.timeline import Timeline, parse_plan_id, plan_to_proto
from lsmlake.errors import (
    AlreadyExistsError,
    CommitConflictError,
    InvalidInputError,
    LakeError,
    NotFoundError,
    StaleTableError,
)
from lsmlake.format.predicate import Predicate
from lsmlake.format.snapshot import APPEND, COMPACT, OVERWRITE
from lsmlake.format.types import parse_schema_fields
from lsmlake.metastore import CompactionPlan as StoredPlan
from lsmlake.metastore import MetaStore, now_ms
from lsmlake.metastore.errors import PlanStateError
from lsmlake.metastore.request_ids import check_request_ids
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rpc import convert
from lsmlake.rpc.errors import guarded, guarded_stream
from lsmlake.rpc.events import snapshot_events
from lsmlake.table.commit import CommitResult
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.schema_change import AddColumn, RemoveOption, RenameColumn, SchemaChange, SetOption
from lsmlake.table.sequence_numbers import committed_floors
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)

# Bounds on one commit request (gRPC's message size limit bounds the bytes; these bound the work).
MAX_CHANGES_PER_COMMIT = 10_000
MAX_FILES_PER_COMMIT = 100_000
MAX_PROPERTIES = 1_000
MAX_PROPERTY_CHARS = 64 * 1024
_COMMIT_KINDS = (APPEND, COMPACT, OVERWRITE)
POSTPONE_BUCKET = -2  # Paimon's bucket of files written in postpone-bucket mode
# Bounds on a column definition: the type parser recurses per nesting level, and names are quoted in `...`
MAX_COLUMNS = 10_000
MAX_COLUMN_NAME_CHARS = 255
MAX_TYPE_CHARS = 4_096
MAX_TYPE_NESTING = 32


_ident = convert.table_id
FAULTS = (None, "exit-after-snapshot", "exit-after-commit")
MAX_REQUEST_IDS = 100_000  # client writes in one commit
MAX_SEQUENCES_PER_RANGE = 1 << 40  # far above any flush; keeps 2^62 (the commit checks' bound) out of reach
KEEP_WRITES_MS = 24 * 3_600_000  # default of how long a committed client write id answers a resend
FORGET_WRITES_EVERY_S = 60.0


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
    if request.request_ids:
        if kind != APPEND:
            raise InvalidInputError("request_ids are for APPEND commits only")
        if WRITES_PROPERTY in request.properties:
            raise InvalidInputError(f"property {WRITES_PROPERTY!r} is the catalog's: pass request_ids instead")
        if len(request.request_ids) > MAX_REQUEST_IDS:
            raise InvalidInputError(f"request_ids has {len(request.request_ids)} entries; at most {MAX_REQUEST_IDS}")
        check_request_ids(request.request_ids, request_id_limit(current_principal()))
    return kind


def _check_identity(table: FileStoreTable, table_uuid: str) -> None:
    """StaleTableError when the caller names another table than the one now under this name (none named: fine)."""
    if table_uuid and table_uuid != table.table_uuid:
        raise StaleTableError(f"table {table.identifier} was dropped and created again (it is {table.table_uuid}, "
                              f"the request was for {table_uuid}): reload the table; nothing was applied")


def _check_ranges(ranges: Sequence[catalog_pb2.SequenceRange]) -> dict[tuple[bytes, int], int]:
    """The count per (partition, bucket) of an AllocateSequences request; InvalidInputError naming the entry."""
    if not ranges:
        raise InvalidInputError("ranges must not be empty")
    if len(ranges) > MAX_CHANGES_PER_COMMIT:
        raise InvalidInputError(f"ranges has {len(ranges)} entries; at most {MAX_CHANGES_PER_COMMIT}")
    counts: dict[tuple[bytes, int], int] = {}
    for i, r in enumerate(ranges):
        if r.bucket < 0:
            raise InvalidInputError(f"ranges[{i}]: bucket {r.bucket} is invalid (numbers are for real buckets)")
        if not 1 <= r.count <= MAX_SEQUENCES_PER_RANGE:
            raise InvalidInputError(f"ranges[{i}]: count {r.count} must be 1 to {MAX_SEQUENCES_PER_RANGE}")
        key = (bytes(r.partition), r.bucket)
        if key in counts:
            raise InvalidInputError(f"ranges[{i}]: bucket {r.bucket} of that partition is named twice")
        counts[key] = r.count
    return counts


def _check_column(where: str, name: str, type_text: str) -> None:
    """InvalidInputError naming `where` for a column name or type text the schema parser must not see."""
    if not name or len(name) > MAX_COLUMN_NAME_CHARS or "`" in name or "\x00" in name:
        shown = name if len(name) <= 60 else f"{name[:40]}... ({len(name)} chars)"
        raise InvalidInputError(f"{where}: column name {shown!r} is invalid: 1 to {MAX_COLUMN_NAME_CHARS} characters, "
                                "no backtick or NUL")
    if len(type_text) > MAX_TYPE_CHARS:
        raise InvalidInputError(f"{where}: the type of column {name!r} is {len(type_text)} characters long; "
                                f"at most {MAX_TYPE_CHARS}")
    depth = deepest = 0
    for ch in type_text:
        depth += (ch in "<(") - (ch in ">)")
        deepest = max(deepest, depth)
    if deepest > MAX_TYPE_NESTING:
        raise InvalidInputError(f"{where}: the type of column {name!r} is nested {deepest} levels deep; "
                                f"at most {MAX_TYPE_NESTING}")


def _check_columns(columns: Sequence[Any]) -> None:
    if not columns:
        raise InvalidInputError("columns must not be empty")
    if len(columns) > MAX_COLUMNS:
        raise InvalidInputError(f"columns has {len(columns)} entries; at most {MAX_COLUMNS}")
    for i, c in enumerate(columns):
        _check_column(f"columns[{i}]", c.name, c.type)


def _schema_change(i: int, c: Any) -> SchemaChange:
    which = c.WhichOneof("change")
    if which == "add_column":
        _check_column(f"changes[{i}].add_column", c.add_column.name, c.add_column.type)
        return AddColumn(c.add_column.name, c.add_column.type, c.add_column.comment or None)
    if which == "rename_column":
        return RenameColumn(c.rename_column.old_name, c.rename_column.new_name)
    if which == "set_option":
        return SetOption(c.set_option.key, c.set_option.value)
    if which == "remove_option":
        return RemoveOption(c.remove_option.key)
    raise InvalidInputError(f"changes[{i}] names no change")


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
        self.timeline = Timeline(catalog, store)
        self.stopping = threading.Event()  # set at shutdown: open WatchSnapshots streams end
        self._on_commit = on_commit or (lambda: None)
        self._fault = fault
        self._watch_poll_s = watch_poll_s
        if keep_writes_ms <= 0:
            raise InvalidInputError(f"the retention of request ids must be positive, got {keep_writes_ms} ms")
        self._keep_writes_ms = keep_writes_ms
        self._changed = threading.Condition()  # notified after every commit through this replica
        self._forget_writes_at = 0.0  # monotonic time of the next purge of old client write ids

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
        name = check_name(request.name, "database")
        try:
            tables = self.catalog.list_tables(name) if request.cascade else []
            for t in tables:  # forget each table's history, under its lock, before its files go
                with self.store.commit_lock(f"{name}.{t}"):
                    self.store.forget_table(f"{name}.{t}")
            self.catalog.drop_database(name, cascade=request.cascade)
        except NotFoundError:
            if request.ignore_if_not_exists:
                return catalog_pb2.DropDatabaseResponse(dropped=False)
            raise
        return catalog_pb2.DropDatabaseResponse(dropped=True)

    # -- tables --------------------------------------------------------------------------------

    @guarded
    def CreateTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        tid = _ident(request.table)
        _check_columns(request.columns)
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
                self.store.forget_table(tid)  # a new table of that name starts without history
        except NotFoundError:
            if request.ignore_if_not_exists:
                return catalog_pb2.DropTableResponse(dropped=False)
            raise
        return catalog_pb2.DropTableResponse(dropped=True)

    @guarded
    def AlterTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Apply the changes as the table's next schema, all or none, serialized with the table's commits."""
        tid = _ident(request.table)
        if not request.changes:
            raise InvalidInputError("changes must not be empty")
        changes = [_schema_change(i, c) for i, c in enumerate(request.changes)]
        with self.store.commit_lock(tid):
            table = self.catalog.alter_table(tid, changes)
        _log.info("altered %s: schema %d", tid, table.schema.id)
        return catalog_pb2.AlterTableResponse(
            table=convert.table_to_proto(table, request.table.database, request.table.table))

    # -- commits -------------------------------------------------------------------------------

    @guarded
    def Commit(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Commit file changes as one snapshot (see `_commit`)."""
        kind = _check_commit(request)
        check_rights(kind, request.properties, current_principal())
        tid = _ident(request.table)
        snapshot_id, again, _ = self._commit(tid, request.table, kind, request, request.changes)
        return catalog_pb2.CommitResponse(snapshot_id=snapshot_id, already_committed=again)

    def _commit(self, tid: str, ident: common_pb2.TableIdentifier, kind: str, request: Any,
                changes: Sequence[common_pb2.FileChanges],
                plan_check: Callable[[], StoredPlan] | None = None) -> tuple[int, bool, StoredPlan | None]:
        """Commit under the table's lock, in one metadata-store transaction; (snapshot id, already committed, plan).

        1. snapshots published without a record (a crash, an outside writer) are recorded first, with events;
        2. a recorded (user, identifier, kind) of the caller's namespace answers `already_committed` with its
           snapshot, when the resend carries the same files (`commit_identity`);
        2b. the file changes are checked against the table as it is under the lock (a drop, a rollback or a
           compaction cannot remove a checked file before the snapshot names it);
        3. `plan_check` (a timeline completion) checks the plan, then lsmlake's FileStoreCommit publishes the
           snapshot in the warehouse; the commit record, one outbox event per changed bucket and the plan's
           completion are recorded; any failure rolls the transaction back;
        4. wake the outbox relay and the snapshot watchers.
        """
        overwrite_partitions = list(getattr(request, "overwrite_partitions", ()))
        me = CommitIdentity.of(kind, request.commit_user, list(getattr(request, "request_ids", ())), changes,
                               bool(getattr(request, "overwrite_all_partitions", False)), overwrite_partitions)
        user, number, writes = me.user, request.commit_identifier, me.request_ids
        started = time.perf_counter()
        outcome = "error"
        try:
            with self.store.commit_lock(tid):
                table = self.catalog.get_table(tid)  # the current schema, read under the lock
                _check_identity(table, getattr(request, "table_uuid", ""))
                self._reconcile(tid, table)
                done = self.store.find_commit(tid, user, number, kind)
                if done is not None:  # a resend: its files may be compacted away by now, so not checked again
                    me.check_same_files(table, done, number)
                    outcome = "already_committed"
                    return done, True, None
                check_changes(table, changes, overwrite_partitions)
                messages = [convert.changes_from_proto(c) for c in changes]
                found = self.store.find_writes(tid, writes) if writes else {}
                if found:
                    shown = ", ".join(f"{r!r} (snapshot {s})" for r, s in sorted(found.items())[:5])
                    raise AlreadyExistsError(f"the table committed these writes before: {shown}"
                                             f"{' and more' if len(found) > 5 else ''}; nothing was committed")
                plan = plan_check() if plan_check is not None else None
                result = self._apply(table, kind, messages, request, me)
                if result.already_committed:  # published before, without a record (a crash): same files?
                    me.check_same_files(table, result.snapshot_id, number)
                self._crash_if("exit-after-snapshot")
                # also when lsmlake found the snapshot already published (a crash before the record): record it now
                self.store.record_commit(tid, user, number, kind, result.snapshot_id)
                self.store.record_writes(tid, writes, result.snapshot_id)
                commit_time = table.snapshots.snapshot(result.snapshot_id).time_millis
                plan_id = str(plan.plan_id) if plan is not None else ""
                for e in snapshot_events(tid, ident, convert.KIND_TO_PROTO[kind], result.snapshot_id, commit_time,
                                         changes, plan_id):
                    self.store.add_event(tid, result.snapshot_id, e.topic, e.key, e.payload)
                if plan is not None:
                    plan = self.store.complete_plan(plan.plan_id, result.snapshot_id)
            self._crash_if("exit-after-commit")
            outcome = "already_committed" if result.already_committed else "committed"
            _log.info("committed %s snapshot %d of %s", kind, result.snapshot_id, tid,
                      extra={"table": tid, "snapshot_id": result.snapshot_id, "commit_kind": kind,
                             "commit_user": user, "files": sum(len(m.new_files) for m in messages)})
            return result.snapshot_id, result.already_committed, plan
        except CommitConflictError:
            outcome = "conflict"
            self.metrics.conflicts.labels(kind).inc()
            raise
        except LakeError:
            outcome = "rejected" if outcome == "error" else outcome
            raise
        finally:
            self.metrics.commits.labels(kind, outcome).inc()
            if outcome in ("committed", "already_committed"):
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
            self.store.forget_writes(now_ms() - self._keep_writes_ms)
        except LakeError as e:  # retried a minute later; until then old ids only answer resends a little longer
            _log.warning("forgetting old write ids failed: %s", e)

    @guarded
    def FindWrites(self, request: Any, context: grpc.ServicerContext) -> Any:
        """The snapshot of each client write (by request id) the table committed."""
        tid = _ident(request.table)
        self.catalog.get_table(tid)  # NotFoundError for an unknown table
        asked = check_request_ids(request.request_ids, request_id_limit(current_principal()))
        stored = request_ids_of(asked, current_principal())  # only the caller's own writes are found
        found = self.store.find_writes(tid, stored)
        return catalog_pb2.FindWritesResponse(snapshot_ids={a: found[s] for a, s in zip(asked, stored, strict=True)
                                                            if s in found})

    @guarded
    def AllocateSequences(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Ranges of sequence numbers per bucket, monotone and above every number the table holds.

        Under the table's commit lock (shared by catalog replicas): the counters are raised to the floors
        of the snapshots committed since the last call (another engine's commits among them), then the
        ranges are taken, in one metadata-store transaction.
        """
        tid = _ident(request.table)
        counts = _check_ranges(request.ranges)
        with self.store.commit_lock(tid):
            table = self.catalog.get_table(tid)
            _check_identity(table, request.table_uuid)
            floors, latest = committed_floors(table, self.store.sequences_synced_to(tid))
            first = self.store.allocate_sequences(tid, counts, floors, latest)
        self.metrics.sequences.inc(sum(counts.values()))
        return catalog_pb2.AllocateSequencesResponse(first=[first[k] for k in counts])

    def _reconcile(self, tid: str, table: FileStoreTable) -> None:
        found = reconcile_table(self.store, table, tid)
        if found:
            self.metrics.reconciled.inc(len(found))

    def _crash_if(self, point: str) -> None:
        if self._fault == point:
            _log.error("fault injection: exiting at %s", point)
            logging.shutdown()
            os._exit(137)

    @staticmethod
    def _apply(table: FileStoreTable, kind: str, messages: list[CommitMessage], request: Any,
               me: CommitIdentity) -> CommitResult:
        commit = table.new_commit(me.user)
        props = dict(request.properties)
        if me.request_ids:  # kept with the snapshot, so that reconcile finds them
            props[WRITES_PROPERTY] = json.dumps(me.request_ids)
        props[DIGEST_PROPERTY] = me.digest
        number = request.commit_identifier
        if kind == OVERWRITE and request.overwrite_all_partitions:
            return commit.overwrite(messages, None, identifier=number, properties=props or None)
        if kind == OVERWRITE and request.overwrite_partitions:
            return commit.overwrite(messages, list(request.overwrite_partitions), identifier=number,
                                    properties=props or None)
        return commit.commit(messages, kind=kind, identifier=number, properties=props or None)

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

    @guarded_stream
    def WatchSnapshots(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Send each kept snapshot after `after_snapshot_id`, then each new one, until the client or server stops.

        Commits through this replica wake the stream at once; those through other replicas (or outside
        writers) are found by polling the warehouse every `watch_poll_s`.
        """
        tid = _ident(request.table)
        table = self.catalog.get_table(tid)
        after = request.after_snapshot_id if request.HasField("after_snapshot_id") else \
            (table.snapshots.latest_id() or 0)
        self.metrics.watchers.inc()
        try:
            while context.is_active() and not self.stopping.is_set():
                if not self.catalog.table_exists(tid):
                    raise NotFoundError(f"table {tid} was dropped")
                latest = table.snapshots.latest_id() or 0
                if latest > after:
                    earliest = table.snapshots.earliest_id() or 1
                    for sid in range(max(after + 1, earliest), latest + 1):
                        try:
                            snap = table.snapshots.snapshot(sid)
                        except NotFoundError:  # expired meanwhile
                            continue
                        yield catalog_pb2.WatchSnapshotsResponse(table=request.table,
                                                                 snapshot=convert.snapshot_to_proto(snap))
                    after = latest
                    continue
                with self._changed:
                    self._changed.wait(self._watch_poll_s)
        finally:
            self.metrics.watchers.dec()

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
        splits = table.new_scan(Predicate(tuple(terms)), snap, all_levels=request.all_levels).plan()
        if request.buckets:
            wanted = set(request.buckets)
            bad = sorted(b for b in wanted if b < 0 and b != POSTPONE_BUCKET)
            if bad:
                raise InvalidInputError(f"buckets {bad} are not bucket numbers (0 and up, or {POSTPONE_BUCKET} for "
                                        "postponed files)")
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

    # -- compaction timeline -------------------------------------------------------------------

    @guarded
    def RequestCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        plan = self.timeline.request(request)
        self.metrics.plans.labels("REQUESTED").inc()
        return catalog_pb2.RequestCompactionResponse(plan=plan)

    @guarded
    def StartCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        plan = self.timeline.start(request)
        self.metrics.plans.labels("INFLIGHT").inc()
        return catalog_pb2.StartCompactionResponse(plan=plan)

    @guarded
    def CompleteCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Commit a plan's result as a COMPACT snapshot and mark the plan COMPLETED in the same transaction."""
        tid = _ident(request.table)
        plan_id = parse_plan_id(request.plan_id)
        commit = catalog_pb2.CommitRequest(table=request.table, commit_user=request.commit_user,
                                           commit_identifier=request.commit_identifier,
                                           kind=common_pb2.COMMIT_KIND_COMPACT, changes=request.changes,
                                           properties=request.properties)
        _check_commit(commit)
        check_rights(COMPACT, request.properties, current_principal(), planned=True)
        snapshot_id, again, _ = self._commit(tid, request.table, COMPACT, commit, request.changes,
                                             plan_check=lambda: self.timeline.check_completion(tid, request))
        plan = self.store.get_plan(plan_id)
        if again and plan.snapshot_id != snapshot_id:
            raise PlanStateError(f"commit ({request.commit_user!r}, {request.commit_identifier}) was already "
                                 f"committed as snapshot {snapshot_id}, which did not complete plan {plan_id}",
                                 plan_id, plan.state)
        self.metrics.plans.labels("COMPLETED").inc()
        return catalog_pb2.CompleteCompactionResponse(snapshot_id=snapshot_id, already_committed=again,
                                                      plan=plan_to_proto(plan, request.table))

    @guarded
    def RollbackCompaction(self, request: Any, context: grpc.ServicerContext) -> Any:
        plan, deleted = self.timeline.rollback(request)
        self.metrics.plans.labels(catalog_pb2.CompactionPlanState.Name(plan.state).removeprefix(
            "COMPACTION_PLAN_STATE_")).inc()
        return catalog_pb2.RollbackCompactionResponse(plan=plan, deleted_paths=deleted)

    @guarded
    def ListCompactionPlans(self, request: Any, context: grpc.ServicerContext) -> Any:
        return catalog_pb2.ListCompactionPlansResponse(plans=self.timeline.list(request))
