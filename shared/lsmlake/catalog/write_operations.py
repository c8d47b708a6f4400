"""The catalog's writing operations: commits, whole snapshots an engine built, sequence numbers and dynamic
buckets, each under the table's commit lock.

Every commit through these operations is counted by its kind and outcome (`CommitListener`); after one
lands, whoever waits for the table's next snapshot is woken (`wait_for_commit`) and client write ids older
than their retention are forgotten (at most once a minute, for every table at once).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Protocol

import numpy as np

from lsmlake.auth.principal import current_principal
from lsmlake.catalog.commit.catalog_commits import CatalogCommits, CommitOutcome, check_table_identity
from lsmlake.catalog.commit.checks import check_partition
from lsmlake.catalog.commit.identity import request_id_limit, request_ids_of
from lsmlake.catalog.commit.request import CommitRequest
from lsmlake.catalog.commit.snapshot import SnapshotCommitRequest, commit_snapshot
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.catalog.iceberg_publisher import IcebergPublisher
from lsmlake.catalog.snapshot_events import EventEncoder
from lsmlake.errors import CommitConflictError, InvalidInputError, LakeError
from lsmlake.format.snapshot import APPEND, BATCH_COMMIT_IDENTIFIER
from lsmlake.metastore import CompactionPlan, MetaStore, now_ms
from lsmlake.metastore.request_ids import check_request_ids
from lsmlake.table import features
from lsmlake.table.dynamic_bucket import Assignment, CommittingAssigner, HashFiles, is_dynamic
from lsmlake.table.hash_file_cache import HashFileCache
from lsmlake.table.sequence_numbers import committed_floors
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)

KEEP_WRITES_MS = 24 * 3_600_000  # default of how long a committed client write id answers a resend
BUCKET_ASSIGNER_USER = "lsmlake-bucket-assigner"  # the commit user of the bucket assigner's index commits
FORGET_WRITES_EVERY_S = 60.0


class CommitListener(Protocol):
    """Hears of every commit through the operations (the service's metrics and its event relay)."""

    def counted(self, kind: str, outcome: str, seconds: float) -> None:
        """A commit of `kind` ended as `outcome`: committed, already_committed, conflict, rejected or error."""

    def committed(self) -> None:
        """A commit landed (after it was counted)."""

    def reconciled(self, snapshot_ids: list[int]) -> None:
        """Snapshots published without a record were recorded before a commit."""


class _Silent:
    def counted(self, kind: str, outcome: str, seconds: float) -> None:
        pass

    def committed(self) -> None:
        pass

    def reconciled(self, snapshot_ids: list[int]) -> None:
        pass


class WriteOperations:
    """Commits, snapshots, sequences and buckets of one catalog (a warehouse and its metadata store): the
    `writes` of its `operations.CatalogOperations`.

    `fault_point` is called where a crash tests recovery (`commit.catalog_commits.AFTER_SNAPSHOT`, `AFTER_COMMIT`);
    `keep_writes_ms` is how long a committed client write id answers a resend.
    """

    def __init__(self, catalog: FileSystemCatalog, store: MetaStore, encode_events: EventEncoder, *,
                 listener: CommitListener | None = None, fault_point: Callable[[str], None] | None = None,
                 keep_writes_ms: int = KEEP_WRITES_MS, clock: Callable[[], int] = now_ms) -> None:
        if keep_writes_ms <= 0:
            raise InvalidInputError(f"the retention of request ids must be positive, got {keep_writes_ms} ms")
        self.catalog = catalog
        self.store = store
        self.encode_events = encode_events
        self.clock = clock
        self.listener: CommitListener = listener or _Silent()
        self._fault_point = fault_point or (lambda _: None)
        self.iceberg = IcebergPublisher(catalog.get_table, store.commit_lock)
        self.commits = CatalogCommits(catalog, store, encode_events, on_reconciled=self._reconciled,
                                      fault_point=self._fault_point, clock=clock,
                                      on_committed=self.iceberg.after_commit)
        self._keep_writes_ms = keep_writes_ms
        self._changed = threading.Condition()  # notified after every commit through these operations
        self._hash_files = HashFileCache()  # the HASH index files read to assign buckets, per table
        self._forget_writes_at = 0.0  # monotonic time of the next purge of old client write ids

    def _reconciled(self, found: list[int]) -> None:
        self.listener.reconciled(found)

    # -- commits -------------------------------------------------------------------------------

    def commit(self, request: CommitRequest,
               plan_check: Callable[[], CompactionPlan] | None = None) -> CommitOutcome:
        """Commit file changes as one snapshot, exactly once (see `commit.catalog_commits`); then its Iceberg
        metadata when the table asks for it (`iceberg_publisher`, called by the commit once its lock is released)."""
        with self._counted(request.kind) as outcome:
            result = self.commits.commit(request, plan_check)
            outcome.append("already_committed" if result.already_committed else "committed")
            return result

    def commit_snapshot(self, request: SnapshotCommitRequest) -> bool:
        """Publish a snapshot a Paimon engine built (see `commit.snapshot`); False when another commit took its id."""
        with self._counted(request.snapshot.commit_kind) as outcome:
            published = commit_snapshot(self.commits, request, self._fault_point)
            outcome.append("committed" if published else "conflict")
            return published

    @contextmanager
    def _counted(self, kind: str) -> Iterator[list[str]]:
        """Count a commit by kind and outcome (the block appends it; an exception is a conflict, a refusal or an
        error); after a success, forget old write ids and wake the listener and the snapshot waiters."""
        started = time.perf_counter()
        outcome: list[str] = []
        try:
            yield outcome
        except CommitConflictError:
            outcome.append("conflict")
            raise
        except LakeError:
            outcome.append("rejected")
            raise
        finally:
            result = outcome[-1] if outcome else "error"
            self.listener.counted(kind, result, time.perf_counter() - started)
            if result in ("committed", "already_committed"):
                self._forget_old_writes()
                self.listener.committed()
                with self._changed:
                    self._changed.notify_all()

    def wait_for_commit(self, timeout_s: float) -> None:
        """Return after the next commit through these operations, or after `timeout_s`."""
        with self._changed:
            self._changed.wait(timeout_s)

    def _forget_old_writes(self) -> None:
        if time.monotonic() < self._forget_writes_at:
            return
        self._forget_writes_at = time.monotonic() + FORGET_WRITES_EVERY_S
        try:
            self.store.commits.forget_writes(self.clock() - self._keep_writes_ms)
        except LakeError as e:  # retried a minute later; until then old ids only answer resends a little longer
            _log.warning("forgetting old write ids failed: %s", e)

    def forget_table(self, tid: str) -> None:
        """Drop what is held of a dropped table (the HASH index files read for its buckets)."""
        self._hash_files.forget(tid)

    def find_writes(self, tid: str, request_ids: Sequence[str]) -> dict[str, int]:
        """The snapshot of each of the caller's own client writes (by request id) the table committed."""
        self.catalog.get_table(tid)  # NotFoundError for an unknown table
        asked = check_request_ids(request_ids, request_id_limit(current_principal()))
        stored = request_ids_of(asked, current_principal())  # only the caller's own writes are found
        found = self.store.commits.find_writes(tid, stored)
        return {a: found[s] for a, s in zip(asked, stored, strict=True) if s in found}

    # -- sequence numbers and buckets ----------------------------------------------------------

    def allocate_sequences(self, tid: str, table_uuid: str, counts: Mapping[tuple[bytes, int], int]) -> list[int]:
        """The first of `count` sequence numbers per (partition, bucket), in the order of `counts`: monotone
        and above every number the table holds.

        Under the table's commit lock: the counters are raised to the floors of the snapshots committed since
        the last call (another engine's commits among them), then the ranges are taken, in one transaction.
        """
        with self.store.commit_lock(tid):
            table = self.catalog.get_table(tid)
            check_table_identity(table, table_uuid)
            floors, latest = committed_floors(table, self.store.commits.sequences_synced_to(tid))
            first = self.store.commits.allocate_sequences(tid, counts, floors, latest)
        return [first[k] for k in counts]

    def assign_buckets(self, tid: str, table_uuid: str,
                       keys: Sequence[tuple[bytes, np.ndarray]]) -> tuple[int, list[Assignment]]:
        """The bucket of each key of a dynamic-bucket table, per partition (see `lsmlake.table.dynamic_bucket`),
        and the snapshot that recorded new ones (0: none were new).

        Under the table's commit lock, so that catalog replicas take turns: known keys are looked up in the
        latest snapshot's HASH index, new ones assigned and committed through the ordinary commit path (one
        APPEND of the replaced buckets' index files, recorded and announced like any commit) before the answer.
        """
        committed: list[int] = []
        with self.store.commit_lock(tid):
            table = self.catalog.get_table(tid)
            check_table_identity(table, table_uuid)
            if not is_dynamic(table.schema):
                raise InvalidInputError(f"table {tid} does not have dynamic buckets (bucket = -1 on a primary-key "
                                        "table): its rows are routed by hash")
            features.check(table.schema, tid, for_write=True)
            for i, (partition, _) in enumerate(keys):
                check_partition(table, partition, f"partitions[{i}].partition")
            self.commits.reconcile(tid, table)

            def commit(messages: list[CommitMessage]) -> None:
                committed.append(self.commit(CommitRequest(
                    tid, APPEND, BUCKET_ASSIGNER_USER, BATCH_COMMIT_IDENTIFIER, messages,
                    table_uuid=table.table_uuid)).snapshot_id)

            with self._hash_files.use(tid, table.table_uuid, lambda: HashFiles(table.indexes)) as files:
                answers = CommittingAssigner(table, commit, files=files).assign(keys)
        return (committed[-1] if committed else 0), answers
