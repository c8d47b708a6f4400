"""The catalog's idempotent commit: file changes become one snapshot, recorded with its events, exactly once.

For one `CommitRequest`, under the table's commit lock (shared by catalog replicas), in one metadata-store
transaction:
1. snapshots published without a record (a crash, an outside writer) are recorded first, with events;
2. a recorded (user, identifier, kind) of the caller's namespace answers `already_committed` with its
   snapshot, when the resend carries the same files (`identity`);
3. the file changes are checked against the table as it is under the lock (a drop, a rollback or a
   compaction cannot remove a checked file before the snapshot names it), and the client writes it holds
   must be new to the table;
4. `plan_check` (a timeline completion) checks the plan, then lsmlake's FileStoreCommit publishes the
   snapshot in the warehouse; the commit record, the client writes, the outbox events and the plan's
   completion are recorded; any failure rolls the transaction back.
The request's shape and the caller's rights are checked before the lock is taken.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from lsmlake.auth.principal import current_principal
from lsmlake.catalog.commit.checks import check_changes
from lsmlake.catalog.commit.identity import DIGEST_PROPERTY, CommitIdentity, check_rights
from lsmlake.catalog.commit.request import CommitRequest, check_request
from lsmlake.catalog.reconcile import WRITES_PROPERTY, reconcile_table
from lsmlake.catalog.snapshot_events import EventEncoder, SnapshotEvent, record_events
from lsmlake.errors import AlreadyExistsError, StaleTableError
from lsmlake.format.snapshot import OVERWRITE
from lsmlake.metastore import CompactionPlan, MetaStore, now_ms
from lsmlake.table.commit import CommitResult
from lsmlake.table.file_store_table import FileStoreTable

_log = logging.getLogger(__name__)

#: the points where `CatalogCommits`' `fault_point` hook is called (the service's crash injection)
AFTER_SNAPSHOT, AFTER_COMMIT = "after-snapshot", "after-commit"


@dataclass(frozen=True)
class CommitOutcome:
    """The snapshot of a commit, whether an earlier attempt made it, and the plan it completed (if any)."""

    snapshot_id: int
    already_committed: bool
    plan: CompactionPlan | None = None


def check_table_identity(table: FileStoreTable, table_uuid: str) -> None:
    """StaleTableError when the caller names another table than the one now under this name (none named: fine)."""
    if table_uuid and table_uuid != table.table_uuid:
        raise StaleTableError(f"table {table.identifier} was dropped and created again (it is {table.table_uuid}, "
                              f"the request was for {table_uuid}): reload the table; nothing was applied")


class Tables(Protocol):
    """Where the commits read a table as it is now: a `FileSystemCatalog` (which runs the same file-change
    checks for its own commits, so it imports this package and this package cannot import it)."""

    def get_table(self, identifier: str) -> FileStoreTable: ...


def _ignore(_: object) -> None:
    pass


class CatalogCommits:
    """The commits of one catalog (a warehouse and its metadata store).

    `encode_events` writes a snapshot's outbox rows (see `snapshot_events`); `on_reconciled` hears of the snapshots
    recorded by step 1; `fault_point` is called at AFTER_SNAPSHOT (published, not yet recorded) and
    AFTER_COMMIT (recorded, lock released), where the recovery tests crash the service; `on_committed` hears of
    each commit after that (a resend too), with the table as the commit read it (the Iceberg publication: no read
    of its own). `clock` (epoch milliseconds) dates the snapshots the catalog publishes as a client built them
    (`snapshot`).
    """

    def __init__(self, catalog: Tables, store: MetaStore, encode_events: EventEncoder,
                 on_reconciled: Callable[[list[int]], None] = _ignore,
                 fault_point: Callable[[str], None] = _ignore, clock: Callable[[], int] = now_ms,
                 on_committed: Callable[[FileStoreTable], object] = _ignore) -> None:
        self.catalog = catalog
        self.committed = on_committed  # after each commit, lock released, with the table as read under the lock
        self.store = store
        self.encode_events = encode_events
        self.clock = clock
        self._on_reconciled = on_reconciled
        self._fault_point = fault_point

    def reconcile(self, tid: str, table: FileStoreTable) -> list[int]:
        """Record the table's snapshots published without a record; call under the table's commit lock."""
        found = reconcile_table(self.store, table, tid, self.encode_events)
        if found:
            self._on_reconciled(found)
        return found

    def commit(self, request: CommitRequest,
               plan_check: Callable[[], CompactionPlan] | None = None) -> CommitOutcome:
        """Commit `request` as one snapshot, or answer the snapshot an earlier attempt made (see the module).

        `plan_check` makes it a planned COMPACT (the timeline's completion): run under the lock before
        publishing, it returns the plan to mark COMPLETED.
        """
        principal = current_principal()
        check_request(request, principal)
        check_rights(request.kind, request.properties, principal, planned=plan_check is not None,
                     index_added=[e for m in request.changes for e in m.new_index_files],
                     index_removed=[e for m in request.changes for e in m.deleted_index_files])
        tid, kind, number = request.table_id, request.kind, request.identifier
        me = CommitIdentity.of(kind, request.commit_user, request.request_ids, request.changes,
                               request.overwrite_all, request.overwrite_partitions)
        writes = me.request_ids
        with self.store.commit_lock(tid):
            table = self.catalog.get_table(tid)  # the current schema, read under the lock
            check_table_identity(table, request.table_uuid)
            self.reconcile(tid, table)
            done = self.store.commits.find_commit(tid, me.user, number, kind)
            if done is not None:  # a resend: its files may be compacted away by now, so not checked again
                me.check_same_files(table, done, number)
            else:
                check_changes(table, request.changes, request.overwrite_partitions)
                found = self.store.commits.find_writes(tid, writes) if writes else {}
                if found:
                    shown = ", ".join(f"{r!r} (snapshot {s})" for r, s in sorted(found.items())[:5])
                    raise AlreadyExistsError(f"the table committed these writes before: {shown}"
                                             f"{' and more' if len(found) > 5 else ''}; nothing was committed")
                plan = plan_check() if plan_check is not None else None
                result = self._apply(table, request, me)
                if result.already_committed:  # published before, without a record (a crash): same files?
                    me.check_same_files(table, result.snapshot_id, number)
                self._fault_point(AFTER_SNAPSHOT)
                # also when lsmlake found the snapshot already published (a crash before the record): record it now
                self.store.commits.record_commit(tid, me.user, number, kind, result.snapshot_id)
                self.store.commits.record_writes(tid, writes, result.snapshot_id)
                commit_time = (result.time_millis if result.time_millis is not None  # a GET spared
                               else table.snapshots.snapshot(result.snapshot_id).time_millis)
                record_events(self.store, self.encode_events, SnapshotEvent(
                    tid, result.snapshot_id, kind, commit_time, request.changes,
                    str(plan.plan_id) if plan is not None else ""))
                if plan is not None:
                    plan = self.store.plans.complete_plan(plan.plan_id, result.snapshot_id)
        if done is not None:
            self.committed(table)  # its publication may be what a crash before the reply left undone
            return CommitOutcome(done, True)
        self._fault_point(AFTER_COMMIT)
        self.committed(table)
        _log.info("committed %s snapshot %d of %s", kind, result.snapshot_id, tid,
                  extra={"table": tid, "snapshot_id": result.snapshot_id, "commit_kind": kind,
                         "commit_user": me.user, "files": sum(len(m.new_files) for m in request.changes)})
        return CommitOutcome(result.snapshot_id, result.already_committed, plan)

    @staticmethod
    def _apply(table: FileStoreTable, request: CommitRequest, me: CommitIdentity) -> CommitResult:
        commit = table.new_commit(me.user)
        props = dict(request.properties)
        if me.request_ids:  # kept with the snapshot, so that reconcile finds them
            props[WRITES_PROPERTY] = json.dumps(me.request_ids)
        props[DIGEST_PROPERTY] = me.digest
        messages, number = list(request.changes), request.identifier
        if request.kind == OVERWRITE and request.overwrite_all:
            return commit.overwrite(messages, None, identifier=number, properties=props)
        if request.kind == OVERWRITE and request.overwrite_partitions:
            return commit.overwrite(messages, list(request.overwrite_partitions), identifier=number,
                                    properties=props)
        return commit.commit(messages, kind=request.kind, identifier=number, properties=props)
