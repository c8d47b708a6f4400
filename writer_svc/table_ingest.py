"""One table's ingestion: write buffers, group commits through the catalog, and the sorted-run stall.

Writes go into the table's `BufferedTableWrite` (one sorted, locally merged buffer per bucket, spilling
to disk) under a lock. Every write joins the current *group*; a group commit flushes the buffers to
level-0 files, commits them as one APPEND snapshot and wakes every request of the group with the
snapshot id. So a thousand small clients make one snapshot per `commit_interval_s`, not a thousand.

Back-pressure: writers never compact, but a write to a primary-key bucket whose sorted-run count
exceeds `num-sorted-run.stop-trigger` waits for the compactor (the count is re-read from the catalog
while waiting) and fails with BackPressureError (RESOURCE_EXHAUSTED) at its deadline. The level-0
backlog of a bucket thus stays bounded even when the compactor falls behind.

Storage faults (a full disk): when the writer cannot write its level-0 files, the flush keeps the rows
and the group's commit retries it; while it does, new writes are refused at once (StorageError,
RESOURCE_EXHAUSTED, nothing buffered), which bounds the memory held. A catalog commit refused because the
catalog could not write the snapshot's metadata (StorageError) is retried with the same identifier
and files. Both retry until shortly before the earliest deadline of the group's waiting requests (or
`STORAGE_RETRY_S` when nobody waits, as for Kafka ingestion, which then reads the rows again); then the
group fails and its rows and files are dropped. So a request either gets its snapshot id or an error
after which none of its rows is visible.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pyarrow as pa

from lsmlake.auth.principal import current_principal, owned
from lsmlake.errors import (
    AlreadyExistsError,
    BackPressureError,
    CommitConflictError,
    CommitRetryExhaustedError,
    CommitStateUnknownError,
    InvalidInputError,
    LakeError,
    NotFoundError,
    ServiceUnavailableError,
    StaleTableError,
    StorageError,
)
from lsmlake.mergetree.levels import writers_stall
from lsmlake.rpc.catalog_authorities import CatalogBuckets, CatalogSequences
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.table.dynamic_bucket import is_dynamic
from lsmlake.table.file_store import table_identity
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.input_rows import conform
from lsmlake.table.write import CommitMessage
from lsmlake.table.write_buffer import BufferedTableWrite
from writer_svc.group_commit import Group
from writer_svc.metrics import WriterMetrics

_log = logging.getLogger(__name__)

STALL_POLL_S = 0.5
RUNS_REFRESH_S = 10.0
STORAGE_RETRY_S = 10.0  # how long a refused commit is retried when no request waits for the group
RESEND_PAUSE_S = 1.0  # between two rounds of resending a commit whose outcome is unknown
REPLY_MARGIN_S = 3.0  # a group gives up this long before its earliest waiter's deadline, so the error gets there


class TableReplacedError(ServiceUnavailableError):
    """The table was dropped and created again under the writer: nothing was written; its owner opens the new
    table and writes the rows there (`Tables.write`), else the client resends them."""


class TableAlteredError(ServiceUnavailableError):
    """The table was altered under a writer whose buffered rows may be committed only with what they carry (Kafka
    ingestion: their offsets), so it did not adopt the new schema by committing them: nothing was written."""


class TableIngest:
    """Buffers and commits the rows of one table for one writer; thread-safe."""

    def __init__(self, table: FileStoreTable, client: CatalogClient, commit_user: str, metrics: WriterMetrics,
                 spill_root: str | None = None) -> None:
        self.table = table
        self.table_id = table.identifier
        self.client = client
        self.commit_user = commit_user
        self.metrics = metrics
        self._spill_root = spill_root
        self.stale = False  # the table was dropped and created again: its owner opens a new TableIngest
        self._write = self._new_buffers()
        self._lock = threading.Lock()  # buffers and the current group
        self._commit_lock = threading.RLock()  # one commit of this table at a time, in order
        self._group = Group()
        self._identifier = 0
        self._runs: dict[tuple[bytes, int], int] = {}  # committed sorted runs per bucket
        self._inflight: dict[tuple[bytes, int], int] = {}  # level-0 files of commits under way
        self._runs_read = 0.0
        self._stop_trigger = table.options.stop_trigger()
        self._stall_applies = table.schema.is_primary_key_table
        self._writing = 0  # writes in progress
        self._storage_error: StorageError | None = None  # the current group's flush failed with this: retrying
        # request id -> the uncommitted group holding that write; None while a write claims the id (checks it)
        self._requests: dict[str, Group | None] = {}
        self._claims = threading.Condition(self._lock)  # a claim of `_requests` became a group or was dropped
        self.on_idle: Callable[[], None] = lambda: None  # called when the last write in progress has buffered

    def _new_buffers(self) -> BufferedTableWrite:
        """Write buffers numbering their rows with ranges the catalog hands out at each flush: the one
        authority per bucket shared by every writer replica and ingestion path (docs/writer-service.md)."""
        return BufferedTableWrite(self.table, spill_root=self._spill_root,
                                  sequences=CatalogSequences(self.client, self.table_id, self.table.table_uuid),
                                  assigner=self._assigner())

    def _assigner(self) -> CatalogBuckets | None:
        """The catalog as the bucket assigner of a dynamic-bucket table, shared by every writer replica."""
        return CatalogBuckets(self.client, self.table_id, self.table.table_uuid) if is_dynamic(self.table.schema) \
            else None

    def _note_refusal(self, error: BaseException) -> None:
        """After the catalog refused a commit or sequence numbers: is the table this writer holds gone?"""
        if isinstance(error, (CommitConflictError, StaleTableError, NotFoundError)):
            self._check_identity()

    def _check_identity(self) -> None:
        """Mark this writer stale when the table under its name is no longer the one it holds."""
        try:
            self.stale = table_identity(self.table.io, self.table.schemas) != self.table.table_uuid
        except NotFoundError:
            self.stale = True
        if self.stale:
            _log.warning("table %s was dropped (and created again): this writer reopens it", self.table_id)

    def _newer_schema(self) -> bool:
        """Whether the table was altered since this writer loaded its schema (one existence check)."""
        return self.table.io.exists(self.table.schemas.path(self.table.schema.id + 1))

    def outdated(self) -> bool:
        """Whether the table under this name moved on from the schema this writer decodes rows with: altered
        since, or dropped and created again (then `stale` is set). Reads the warehouse: for refusals only."""
        self._check_identity()
        return self.stale or self._newer_schema()

    def catch_up(self) -> None:
        """Bring this writer up to the table under its name before a refusal is final: an altered table's
        newer schema is adopted (the rows buffered under the old one are committed first); a table dropped and
        created again leaves this writer `stale`, and its owner opens the new one."""
        if self.outdated() and not self.stale:
            self._adopt_new_schema()

    # -- writes ------------------------------------------------------------------------------------

    def write_once(self, data: pa.Table, deadline: float, request_id: str) -> tuple[Group, bool]:
        """Write rows that a client may resend under the same `request_id`: (their group, already written).

        An attempt of this id still in an uncommitted group of this writer is waited for (its group is
        returned); one the table committed (by any writer, within the catalog's request-id retention) is
        not written again (a done group with its snapshot id is returned, and True). A failed attempt left
        nothing: write anew.

        With tokens, the id lives in the calling principal's namespace (`<principal>/<id>`): one client
        can neither claim nor answer another's writes by guessing its ids.
        """
        request_id = owned(request_id, current_principal())
        with self._claims:
            while True:
                claimed = request_id in self._requests
                held = self._requests.get(request_id)
                if not claimed or (held is not None and held.done.is_set()):
                    self._requests[request_id] = None  # claimed: a concurrent attempt waits for it
                    break
                if held is not None:
                    return held, True
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"another attempt of write {request_id!r} is still being checked")
                self._claims.wait(left)  # until the other attempt's claim is buffered or dropped
        try:
            found = self.client.find_writes(self.table_id, [request_id])
            if request_id in found:
                done = Group(snapshot_id=found[request_id])
                done.done.set()
                self._release(request_id)
                return done, True
            return self.write(data, deadline, request_id), False
        except BaseException:
            self._release(request_id)
            raise

    def _release(self, request_id: str) -> None:
        """Drop a claim that did not end in a group (under no lock)."""
        with self._claims:
            if request_id in self._requests and self._requests[request_id] is None:
                del self._requests[request_id]
                self._claims.notify_all()

    def write(self, data: pa.Table, deadline: float, request_id: str | None = None, *,
              adopt_by_commit: bool = True) -> Group:
        """Buffer validated rows (nothing is buffered when they are invalid) and return their group.

        Waits, until `deadline` (monotonic), while a bucket the rows go to has too many sorted runs.
        `request_id` (claimed by `write_once`) is recorded with the group, to be committed with it.
        Once the table was altered, the rows buffered under the old schema are committed before the new one is
        adopted; with `adopt_by_commit=False` TableAlteredError is raised instead, for a caller whose commits
        must carry properties this commit would not (Kafka offsets): it drops its buffer, then `catch_up`.
        """
        if self._newer_schema():
            if not adopt_by_commit:
                raise TableAlteredError(f"table {self.table_id} was altered (a schema newer than {self.table.schema.id}"
                                        " exists); nothing was written")
            self._adopt_new_schema()
        with self._lock:
            self._writing += 1
        idle = False
        try:
            keys: set[tuple[bytes, int]] | None = None
            started = None
            while True:
                if self._stall_applies and time.monotonic() - self._runs_read > RUNS_REFRESH_S:
                    self._refresh_runs()
                if self._stall_applies and keys is None and self._near_trigger():
                    keys = self._buckets_of(data)  # routing only when some bucket is near the trigger
                with self._lock:
                    over = self._over(keys) if keys else []
                    if not over:  # checked and buffered under one lock: no write slips past a full bucket
                        if self._storage_error is not None:
                            raise StorageError(f"the writer cannot write to the warehouse ({self._storage_error}); "
                                               "it takes no new rows until its pending commit succeeds. Nothing "
                                               "was written: retry later")
                        try:
                            self._write.write(data)
                        except InvalidInputError as e:  # rows for a newer table of the same name?
                            self._check_identity()
                            if self.stale:
                                raise TableReplacedError(
                                    f"table {self.table_id} was dropped and created again; nothing was written: "
                                    "resend the write") from e
                            raise
                        if self._write.must_flush:
                            self._flush_full_buffer()
                        group = self._group
                        group.rows += data.num_rows
                        if request_id is not None:
                            group.request_ids.append(request_id)
                            self._requests[request_id] = group
                            self._claims.notify_all()
                        if group.first_write is None:
                            group.first_write = time.monotonic()
                        stats = self._write.stats()
                        break
                if started is None:
                    started = time.monotonic()
                    self.metrics.stalls.labels(self.table_id).inc()
                if time.monotonic() + STALL_POLL_S > deadline:
                    self.metrics.stall_seconds.labels(self.table_id).inc(time.monotonic() - started)
                    raise self._stall_error(over, time.monotonic() - started)
                time.sleep(STALL_POLL_S)  # bounded by the deadline
                self._refresh_runs()
            if started is not None:
                self.metrics.stall_seconds.labels(self.table_id).inc(time.monotonic() - started)
        finally:
            with self._lock:
                self._writing -= 1
                idle = self._writing == 0 and self._group.rows > 0
        if idle:
            self.on_idle()
        self.metrics.observe_buffer(self.table_id, stats)
        return group

    def _flush_full_buffer(self) -> None:
        """Flush a full buffer (under `_lock`). On a storage failure the rows stay for the group commit to retry;
        on any other failure the whole group fails, as its rows are dropped."""
        try:
            self._write.flush()
        except StorageError as e:
            _log.warning("table %s: flushing a full write buffer failed: %s", self.table_id, e)
            self._storage_error = e
        except BaseException as e:
            self._note_refusal(e)
            self._write.abort()
            failed, self._group = self._group, Group()
            failed.error = e
            failed.done.set()
            raise

    def _adopt_new_schema(self) -> None:
        """The table was altered: commit what was buffered under the old schema, then write with the new one."""
        with self._commit_lock:
            if not self._newer_schema():
                return  # another write switched already
            try:
                self.commit()
            finally:
                with self._lock:
                    self.table.refresh_schema()
                    self._write.close()
                    self._write = self._new_buffers()
                    self._stall_applies = self.table.schema.is_primary_key_table
                    self._stop_trigger = self.table.options.stop_trigger()
            _log.info("table %s: writing with schema %d", self.table_id, self.table.schema.id)

    def pending_since(self) -> float | None:
        """When the oldest uncommitted write arrived (monotonic), or None when nothing waits."""
        return self._group.first_write

    def pending_rows(self) -> int:
        """Rows written since the last commit."""
        return self._group.rows

    def _buckets_of(self, data: pa.Table) -> set[tuple[bytes, int]]:
        rows, _ = conform(self.table.schema, data)
        return {(t.partition, t.bucket) for t, _ in self.table.new_write(assigner=self._assigner()).route(rows).runs()}

    def _runs_of(self, key: tuple[bytes, int]) -> int:
        """Sorted runs a bucket has once the commits under way land: committed + files being committed."""
        return self._runs.get(key, 0) + self._inflight.get(key, 0)

    def _near_trigger(self) -> bool:
        keys = set(self._runs) | set(self._inflight)
        return any(writers_stall(self._runs_of(k) + 1, self._stop_trigger) for k in keys)

    def _over(self, keys: set[tuple[bytes, int]]) -> list[tuple[tuple[bytes, int], int]]:
        """The buckets that take no more writes: the group this write joins adds a run to each of its buckets,
        so a bucket takes writes while it has at most `stop-trigger` runs and ends with at most one more."""
        return [(k, self._runs_of(k)) for k in sorted(keys) if writers_stall(self._runs_of(k), self._stop_trigger)]

    def _stall_error(self, over: list[tuple[tuple[bytes, int], int]], waited: float) -> BackPressureError:
        (partition, bucket), n = over[0]
        where = f"bucket {bucket}" + (f" of partition {self.table.partition_values(partition)}"
                                      if self.table.schema.partition_keys else "")
        return BackPressureError(
            f"{where} of {self.table_id} has {n} sorted runs, more than num-sorted-run.stop-trigger "
            f"({self._stop_trigger}); waited {waited:.1f} s for compaction. Retry later, or check that the "
            "compactor service runs")

    def _refresh_runs(self) -> None:
        runs = self.client.sorted_runs(self.table_id)
        with self._lock:
            self._runs = runs
            self._runs_read = time.monotonic()

    # -- commits -----------------------------------------------------------------------------------

    def commit(self, properties: dict[str, str] | None = None,
               resend_until: threading.Event | None = None) -> int | None:
        """Commit everything buffered as one snapshot and wake its group; the snapshot id (None: nothing to do).

        A definite refusal deletes the written files and fails the group; an unknown outcome fails the
        group with CommitStateUnknownError and keeps the files (the snapshot may exist). With
        `resend_until`, an unknown outcome is not given up: the same commit (identifier, files, properties)
        is sent again until the catalog answers definitely or the event is set. Kafka ingestion needs
        this: rewinding to the snapshots' offsets while the catalog may still apply the last attempt would
        read those rows again and commit them twice.
        """
        with self._commit_lock:
            prepared = self._prepare(properties)
            if prepared is None:
                return None
            group, messages, adding = prepared
            if not messages and not properties:
                # the rows left nothing to write (deletes of absent keys under ignore-delete, say): they are
                # as durable as they will ever be in the current snapshot
                group.snapshot_id = self.table.snapshots.latest_id() or 0
                group.done.set()
                return group.snapshot_id
            self._identifier += 1
            started = time.perf_counter()
            try:
                sid = self._commit_resending(group, messages, properties, resend_until)
            except BaseException as e:
                # only a definite refusal by the catalog (any lsmlake error but CommitStateUnknownError) says that
                # nothing of the group is in the table; otherwise the snapshot may exist, and it needs the files
                refused = isinstance(e, LakeError) and not isinstance(e, CommitStateUnknownError)
                self._settle(adding, committed=False)
                group.error = e
                if refused:
                    self._note_refusal(e)
                    self._write.delete_files(messages)
                if isinstance(e, AlreadyExistsError):  # a resend raced its first attempt through another writer
                    group.error = CommitRetryExhaustedError(
                        f"this write shared a commit with a write that {self.table_id} had committed before ({e}); "
                        "nothing of it was committed: resend it (with its request id, if it has one)")
                group.done.set()
                self._forget_done_requests()
                self.metrics.commits.labels(self.table_id, "refused" if refused else "unknown").inc()
                raise
            self._settle(adding, committed=True)
            self.metrics.commits.labels(self.table_id, "committed").inc()
            self.metrics.commit_seconds.labels(self.table_id).observe(time.perf_counter() - started)
            self.metrics.rows.labels(self.table_id).inc(group.rows)
            group.snapshot_id = sid
            group.done.set()
            self._forget_done_requests()
            _log.debug("table %s: snapshot %d with %d rows", self.table_id, sid, group.rows)
            return sid

    def _forget_done_requests(self) -> None:
        """Drop request ids whose group has finished: the catalog answers for them from now on."""
        with self._lock:
            self._requests = {r: g for r, g in self._requests.items() if g is None or not g.done.is_set()}

    def _prepare(self, properties: dict[str, str] | None
                 ) -> tuple[Group, list[CommitMessage], dict[tuple[bytes, int], int]] | None:
        """Take the current group and flush its rows (retrying a storage failure while its waiters allow);
        None for an empty group (then already answered)."""
        backoff = 0.2
        first = time.monotonic()
        while True:
            with self._lock:
                group = self._group
                if group.rows == 0 and not properties:
                    self._group, self._storage_error = Group(), None
                    group.snapshot_id = self.table.snapshots.latest_id() or 0  # an empty write is trivially durable
                    group.done.set()
                    return None
                try:
                    messages = self._write.prepare_commit()
                except StorageError as e:
                    self._storage_error = e
                    if time.monotonic() + backoff > self._give_up(group, first):
                        self._fail_group(group, e)
                        raise
                except BaseException as e:
                    self._note_refusal(e)
                    self._fail_group(group, e)
                    raise
                else:
                    self._group, self._storage_error = Group(), None
                    adding = {(m.partition, m.bucket): len(m.new_files) for m in messages}
                    for key, n in adding.items():
                        self._inflight[key] = self._inflight.get(key, 0) + n
                    return group, messages, adding
            _log.warning("table %s: flushing the group failed (%s); retrying in %.1f s", self.table_id,
                         self._storage_error, backoff)
            time.sleep(backoff)  # bounded by the group's deadline; new writes are refused meanwhile
            backoff = min(backoff * 2, 2.0)

    def _fail_group(self, group: Group, error: BaseException) -> None:
        """Drop the group's rows and files and fail its requests (under `_lock`)."""
        self._write.abort()
        self._group, self._storage_error = Group(), None
        group.error = error
        group.done.set()

    @staticmethod
    def _give_up(group: Group, first: float) -> float:
        """When retrying a group's flush or commit stops: before its earliest waiter's deadline."""
        return group.reply_by - REPLY_MARGIN_S if group.reply_by is not None else first + STORAGE_RETRY_S

    def _commit_resending(self, group: Group, messages: list[CommitMessage], properties: dict[str, str] | None,
                          resend_until: threading.Event | None) -> int:
        """`_commit_retrying`, sent again after each unknown outcome until a definite answer or `resend_until`."""
        while True:
            try:
                return self._commit_retrying(group, messages, properties)
            except CommitStateUnknownError as e:
                if resend_until is None or resend_until.is_set():
                    raise
                _log.warning("commit %d of %s: outcome unknown (%s); sending it again until the catalog answers",
                             self._identifier, self.table_id, e)
                resend_until.wait(RESEND_PAUSE_S)

    def _commit_retrying(self, group: Group, messages: list[CommitMessage], properties: dict[str, str] | None) -> int:
        """The catalog commit, retried with the same identifier while the catalog's storage refuses it."""
        backoff = 0.2
        first = time.monotonic()
        while True:
            try:
                return self.client.commit(self.table_id, self.commit_user, self._identifier, messages, properties,
                                          group.request_ids, self.table.table_uuid)
            except (StorageError, BackPressureError) as e:  # the catalog could not store the commit now
                if time.monotonic() + backoff > self._give_up(group, first):
                    raise
                _log.warning("commit %d of %s refused (%s); retrying in %.1f s", self._identifier, self.table_id, e,
                             backoff)
                time.sleep(backoff)  # bounded by the group's deadline
                backoff = min(backoff * 2, 2.0)

    def _settle(self, adding: dict[tuple[bytes, int], int], committed: bool) -> None:
        """Move the files of a finished commit from in flight to committed (or drop them when it failed)."""
        with self._lock:
            for key, n in adding.items():
                self._inflight[key] = self._inflight.get(key, 0) - n
                if committed:
                    self._runs[key] = self._runs.get(key, 0) + n

    def discard(self, reason: BaseException) -> None:
        """Drop what is buffered (a shutdown that cannot commit): its group fails with `reason`."""
        with self._lock:
            group, self._group = self._group, Group()
            self._storage_error = None
            self._write.close()
            self._write = self._new_buffers()
        group.error = reason
        group.done.set()

    def close(self) -> None:
        self._write.close()
