"""The catalog's metadata store: per-table commit locks, commit records, an event outbox and compaction timelines.

One interface, two backends chosen by URL (`open_store`):
- `sqlite:///abs/path/meta.db` (or `sqlite:relative/meta.db`): the embedded default, one file in WAL mode;
  a commit lock is the database-wide write lock (BEGIN IMMEDIATE), so commits of all tables take turns;
- `postgresql://user@host:port/db?schema=name`: shared by several catalog replicas; a commit lock is a
  transaction-scoped advisory lock on a hash of the table id, so only commits of one table take turns.

Transactions. `commit_lock(table_id)` opens a transaction on the calling thread and holds the table's lock
until the block ends; every store method called on that thread inside the block joins this transaction,
so a commit record, its outbox events and the completion of its compaction plan commit together with
whatever the catalog does under the lock (it runs lsmlake's FileStoreCommit there), or not at all.
Outside a `commit_lock` block every method runs in a short transaction of its own.

Outbox. Events are delivered at least once: a relay reads `pending_events`, publishes them, then calls
`mark_delivered`; a crash in between publishes them again. Within one table, event ids grow in commit order.
Retention is the caller's: `purge_delivered` and `purge_undelivered` delete old events in bounded batches.

Timeline (Hudi style). `request_plan` REQUESTED -> `start_plan` INFLIGHT -> `complete_plan` COMPLETED;
`rollback_plan` returns an INFLIGHT plan of a dead compactor to REQUESTED (the caller deletes its
uncommitted outputs), `abandon_plan` ends a plan whose inputs are gone. The input files of a pending
(REQUESTED or INFLIGHT) plan cannot be in another pending plan: a unique key enforces this across replicas.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lsmlake.errors import InvalidInputError, InvariantError, NotFoundError
from lsmlake.format.snapshot import BATCH_COMMIT_IDENTIFIER, COMMIT_KINDS
from lsmlake.metastore.errors import MetaStoreUnavailableError, PlanConflictError, PlanStateError, SchemaVersionError
from lsmlake.metastore.model import (
    ABANDONED,
    COMPLETED,
    INFLIGHT,
    PENDING_STATES,
    PLAN_STATES,
    REQUESTED,
    ROLLED_BACK,
    CompactionPlan,
    OutboxEvent,
)
from lsmlake.metastore.request_ids import MAX_STORED_REQUEST_ID, check_request_ids

SCHEMA_VERSION = 1
_CHUNK = 500  # ids or names per IN (...) list
PURGE_BATCH = 1000  # outbox events deleted per purge transaction
_PLAN_COLUMNS = ("plan_id, table_id, partition_bytes, bucket, input_files, output_level, state, owner, attempts, "
                 "snapshot_id, reason, created_ms, updated_ms, started_ms, detail")
_EVENT_COLUMNS = "event_id, table_id, snapshot_id, topic, event_key, payload, created_ms, delivered_ms"


def now_ms() -> int:
    """The current time in epoch milliseconds, as the store records it."""
    return int(time.time() * 1000)


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i:i + _CHUNK]


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _check_table_id(table_id: str) -> str:
    if not isinstance(table_id, str) or not table_id:
        raise InvalidInputError(f"table id {table_id!r} must be a non-empty string")
    return table_id


def _check_int(value: int, what: str, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInputError(f"{what} {value!r} must be an integer")
    if minimum is not None and value < minimum:
        raise InvalidInputError(f"{what} {value} must be at least {minimum}")
    return value


def _check_bytes(value: bytes, what: str) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidInputError(f"{what} must be bytes, not {type(value).__name__}")
    return bytes(value)


class Transaction:
    """The transaction of a `commit_lock` block: the locked table and raw SQL for rows the caller keeps itself."""

    def __init__(self, store: MetaStore, conn: Any, table_id: str) -> None:
        self.store = store
        self.table_id = table_id
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one SQL statement (with `?` placeholders on both backends) in this transaction; its rows, if any."""
        cur = self.store._run(self._conn, sql, params)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


class MetaStore(ABC):
    """The metadata store interface; `open_store(url)` picks the backend."""

    url: str
    busy_timeout: float
    _operational_errors: tuple[type[BaseException], ...] = ()
    _integrity_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, url: str, busy_timeout: float, max_idle: int) -> None:
        self.url = url
        self.busy_timeout = busy_timeout
        self._max_idle = max_idle
        self._idle: list[Any] = []
        self._pool_lock = threading.Lock()
        self._closed = False
        self._local = threading.local()  # .txn: the connection of this thread's commit_lock block

    # -- backend hooks ---------------------------------------------------------------------------

    @abstractmethod
    def _connect(self) -> Any:
        """A new configured DB-API connection in autocommit mode."""

    @abstractmethod
    def _begin(self, conn: Any, write: bool) -> None:
        """Start a transaction (a write one takes the SQLite write lock at once)."""

    @abstractmethod
    def _lock_table(self, conn: Any, table_id: str) -> None:
        """Take the commit lock of one table in the open transaction, until it ends."""

    @abstractmethod
    def _reusable(self, conn: Any) -> bool:
        """Whether a connection is healthy and idle, so it can go back to the pool."""

    @abstractmethod
    def _schema_ddl(self) -> list[str]:
        """The CREATE ... IF NOT EXISTS statements of the current schema."""

    def _paramstyle(self, sql: str) -> str:
        """The statement with the backend's placeholders instead of `?`."""
        return sql

    @abstractmethod
    def _bootstrap_lock(self, conn: Any) -> None:
        """Serialise schema creation across processes (inside the bootstrap transaction)."""

    @staticmethod
    def _returning_id(cur: Any) -> int:
        """The id an INSERT ... RETURNING produced (all rows fetched, so that the statement is finished)."""
        return int(cur.fetchall()[0][0])

    # -- connections and transactions ------------------------------------------------------------

    def _acquire(self) -> Any:
        with self._pool_lock:
            if self._closed:
                raise MetaStoreUnavailableError(f"metadata store {self._safe_url()} is closed")
            if self._idle:
                return self._idle.pop()
        try:
            return self._connect()
        except self._operational_errors as e:
            raise MetaStoreUnavailableError(f"cannot connect to metadata store {self._safe_url()}: {e}") from e

    def _release(self, conn: Any, ok: bool) -> None:
        reuse = ok and self._reusable(conn)
        if reuse:
            with self._pool_lock:
                if not self._closed and len(self._idle) < self._max_idle:
                    self._idle.append(conn)
                    return
        try:
            conn.close()
        except Exception:
            pass

    def _safe_url(self) -> str:
        """The URL without a password, for messages."""
        head, sep, tail = self.url.rpartition("@")
        if sep and ":" in head.split("//", 1)[-1]:
            scheme, _, creds = head.partition("//")
            return f"{scheme}//{creds.split(':', 1)[0]}:***@{tail}"
        return self.url

    def _run(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        """Execute one statement; a lock timeout or lost connection becomes MetaStoreUnavailableError."""
        try:
            return conn.execute(self._paramstyle(sql), tuple(params))
        except self._operational_errors as e:
            raise MetaStoreUnavailableError(f"metadata store {self._safe_url()}: {e}") from e

    @contextmanager
    def _tx(self, write: bool) -> Iterator[Any]:
        """This thread's open transaction if there is one (calls nest), else a new one committed at the end."""
        joined = getattr(self._local, "txn", None)
        if joined is not None:
            yield joined
            return
        conn = self._acquire()
        ok = False
        self._local.txn = conn
        try:
            try:
                self._begin(conn, write)
            except self._operational_errors as e:
                raise MetaStoreUnavailableError(f"metadata store {self._safe_url()}: {e}") from e
            try:
                yield conn
            except BaseException:
                ok = self._rollback(conn)
                raise
            self._run(conn, "COMMIT")
            ok = True
        finally:
            self._local.txn = None
            self._release(conn, ok)

    @staticmethod
    def _rollback(conn: Any) -> bool:
        """Roll back; False when the connection is broken (then it is not reused)."""
        try:
            conn.execute("ROLLBACK")
            return True
        except Exception:
            return False

    def _bootstrap(self) -> None:
        """Create the schema if needed and check its version (idempotent, safe to race from many processes)."""
        with self._tx(write=True) as conn:
            self._bootstrap_lock(conn)
            for stmt in self._schema_ddl():
                self._run(conn, stmt)
            row = self._run(conn, "SELECT version FROM lsmlake_schema_version WHERE id = 1").fetchone()
            if row is None:
                self._run(conn, "INSERT INTO lsmlake_schema_version (id, version, updated_ms) VALUES (1, ?, ?)",
                          (SCHEMA_VERSION, now_ms()))
            elif int(row[0]) > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"metadata store {self._safe_url()} has schema version {row[0]}, newer than the "
                    f"{SCHEMA_VERSION} this lsmlake knows: upgrade lsmlake")

    def schema_version(self) -> int:
        """The schema version recorded in the store."""
        with self._tx(write=False) as conn:
            return int(self._run(conn, "SELECT version FROM lsmlake_schema_version WHERE id = 1").fetchone()[0])

    def close(self) -> None:
        """Close the pooled connections; the store cannot be used afterwards."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            try:
                conn.close()
            except Exception:
                pass

    def __enter__(self) -> MetaStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- 1. commit lock --------------------------------------------------------------------------

    @contextmanager
    def commit_lock(self, table_id: str) -> Iterator[Transaction]:
        """Hold the commit lock of a table (across processes and replicas) for a transaction that commits at the end.

        Store calls on this thread inside the block join the transaction; an exception rolls it back.
        Nested blocks join the outer transaction (on PostgreSQL they also take the inner table's lock).
        """
        _check_table_id(table_id)
        with self._tx(write=True) as conn:
            self._lock_table(conn, table_id)
            yield Transaction(self, conn, table_id)

    # -- 2. commit records -----------------------------------------------------------------------

    def record_commit(self, table_id: str, commit_user: str, commit_identifier: int, kind: str,
                      snapshot_id: int) -> None:
        """Record that a commit produced a snapshot (idempotent; call it inside the table's `commit_lock`)."""
        _check_table_id(table_id)
        if not isinstance(commit_user, str) or not commit_user:
            raise InvalidInputError(f"commit user {commit_user!r} must be a non-empty string")
        _check_int(commit_identifier, "commit identifier")
        if kind not in COMMIT_KINDS:
            raise InvalidInputError(f"commit kind {kind!r} must be one of {', '.join(COMMIT_KINDS)}")
        _check_int(snapshot_id, "snapshot id", 1)
        with self._tx(write=True) as conn:
            row = self._run(conn, "SELECT commit_user, commit_identifier, commit_kind FROM lsmlake_commits "
                                  "WHERE table_id = ? AND snapshot_id = ?", (table_id, snapshot_id)).fetchone()
            if row is not None:
                if tuple(row) == (commit_user, commit_identifier, kind):
                    return
                raise InvariantError(f"snapshot {snapshot_id} of table {table_id!r} is already recorded for commit "
                                     f"{tuple(row)}, not ({commit_user!r}, {commit_identifier}, {kind!r})")
            existing = self.find_commit(table_id, commit_user, commit_identifier, kind)
            if existing is not None:
                raise InvariantError(f"commit ({commit_user!r}, {commit_identifier}, {kind!r}) of table {table_id!r} "
                                     f"is already recorded as snapshot {existing}, not {snapshot_id}")
            try:
                self._run(conn, "INSERT INTO lsmlake_commits (table_id, snapshot_id, commit_user, commit_identifier, "
                                "commit_kind, created_ms) VALUES (?, ?, ?, ?, ?, ?)",
                          (table_id, snapshot_id, commit_user, commit_identifier, kind, now_ms()))
            except self._integrity_errors as e:
                raise InvariantError(f"commit of snapshot {snapshot_id} of table {table_id!r} was recorded "
                                     "concurrently: record commits inside the table's commit_lock") from e

    def find_commit(self, table_id: str, user: str, identifier: int, kind: str) -> int | None:
        """The snapshot an earlier commit with this user, identifier and kind made, if any (batch ids never match)."""
        _check_table_id(table_id)
        if identifier == BATCH_COMMIT_IDENTIFIER:
            return None
        with self._tx(write=False) as conn:
            row = self._run(conn, "SELECT snapshot_id FROM lsmlake_commits WHERE table_id = ? AND commit_user = ? "
                                  "AND commit_identifier = ? AND commit_kind = ? "
                                  f"AND commit_identifier <> {BATCH_COMMIT_IDENTIFIER}",
                            (table_id, user, identifier, kind)).fetchone()
        return None if row is None else int(row[0])

    def last_recorded_snapshot(self, table_id: str) -> int | None:
        """The highest snapshot id recorded for a table, to find snapshots published without a record after a crash."""
        _check_table_id(table_id)
        with self._tx(write=False) as conn:
            row = self._run(conn, "SELECT MAX(snapshot_id) FROM lsmlake_commits WHERE table_id = ?",
                            (table_id,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    # -- client writes -----------------------------------------------------------------------------

    def record_writes(self, table_id: str, request_ids: Sequence[str], snapshot_id: int) -> None:
        """Record the client writes a snapshot committed (inside the table's `commit_lock`); InvariantError
        when one was recorded already (a commit must be refused first, see `find_writes`)."""
        _check_table_id(table_id)
        _check_int(snapshot_id, "snapshot id", 1)
        ids = check_request_ids(request_ids, MAX_STORED_REQUEST_ID)
        if not ids:
            return
        ts = now_ms()
        with self._tx(write=True) as conn:
            try:
                for rid in ids:
                    self._run(conn, "INSERT INTO lsmlake_writes (table_id, request_id, snapshot_id, created_ms) "
                                    "VALUES (?, ?, ?, ?)", (table_id, rid, snapshot_id, ts))
            except self._integrity_errors as e:
                raise InvariantError(f"a write of snapshot {snapshot_id} of table {table_id!r} was committed "
                                     "before: refuse commits whose writes find_writes finds") from e

    def find_writes(self, table_id: str, request_ids: Sequence[str]) -> dict[str, int]:
        """The snapshot of each of these client writes the table committed (and has not forgotten)."""
        _check_table_id(table_id)
        ids = check_request_ids(request_ids, MAX_STORED_REQUEST_ID)
        out: dict[str, int] = {}
        with self._tx(write=False) as conn:
            for chunk in _chunks(ids):
                rows = self._run(conn, "SELECT request_id, snapshot_id FROM lsmlake_writes WHERE table_id = ? "
                                       f"AND request_id IN ({_marks(len(chunk))})", (table_id, *chunk)).fetchall()
                out.update((r[0], int(r[1])) for r in rows)
        return out

    def forget_writes(self, recorded_before_ms: int) -> int:
        """Forget the client writes recorded before a time (of every table); how many were forgotten."""
        _check_int(recorded_before_ms, "time")
        with self._tx(write=True) as conn:
            return int(self._run(conn, "DELETE FROM lsmlake_writes WHERE created_ms < ?",
                                 (recorded_before_ms,)).rowcount)

    # -- sequence numbers --------------------------------------------------------------------------

    def sequences_synced_to(self, table_id: str) -> int | None:
        """The newest snapshot whose files the table's sequence counters are known to be above (None: never synced)."""
        _check_table_id(table_id)
        with self._tx(write=False) as conn:
            row = self._run(conn, "SELECT snapshot_id FROM lsmlake_sequence_sync WHERE table_id = ?",
                            (table_id,)).fetchone()
        return None if row is None else int(row[0])

    def allocate_sequences(self, table_id: str, counts: Mapping[tuple[bytes, int], int],
                           floors: Mapping[tuple[bytes, int], int],
                           synced_to: int | None) -> dict[tuple[bytes, int], int]:
        """Hand out `counts[key]` consecutive sequence numbers per (partition, bucket); the first of each range.

        Call it inside the table's `commit_lock`. Every counter is first raised to its `floor` (one above the
        highest number the table's snapshots up to `synced_to` hold), so ranges are monotone per bucket,
        never overlap and never fall below a committed row. `synced_to` is recorded for the next call.
        """
        _check_table_id(table_id)
        for (partition, bucket), n in {**floors, **counts}.items():
            _check_bytes(partition, "partition")
            _check_int(bucket, "bucket")
            _check_int(n, "sequence count", 0)
        with self._tx(write=True) as conn:
            current = {(bytes(r[0]), int(r[1])): int(r[2]) for r in self._run(
                conn, "SELECT partition_bytes, bucket, next_sequence FROM lsmlake_sequences WHERE table_id = ?",
                (table_id,)).fetchall()}
            wanted = {k: max(current.get(k, 0), floors.get(k, 0)) for k in {*current, *floors, *counts}}
            first = {k: wanted[k] for k in counts}
            for k, n in counts.items():
                wanted[k] += n
            for (partition, bucket), value in wanted.items():
                if current.get((partition, bucket)) != value:
                    self._run(conn, "INSERT INTO lsmlake_sequences (table_id, partition_bytes, bucket, next_sequence) "
                                    "VALUES (?, ?, ?, ?) ON CONFLICT (table_id, partition_bytes, bucket) "
                                    "DO UPDATE SET next_sequence = excluded.next_sequence",
                              (table_id, partition, bucket, value))
            if synced_to is not None:
                self._run(conn, "INSERT INTO lsmlake_sequence_sync (table_id, snapshot_id) VALUES (?, ?) "
                                "ON CONFLICT (table_id) DO UPDATE SET snapshot_id = excluded.snapshot_id",
                          (table_id, synced_to))
        return first

    def forget_table(self, table_id: str) -> None:
        """Drop what the store keeps of a table (commits, plans, sequence counters); undelivered events are still sent.

        Call it inside the table's `commit_lock` when the table is dropped, so that a new table of the same
        name starts with no history.
        """
        _check_table_id(table_id)
        with self._tx(write=True) as conn:
            self._run(conn, "DELETE FROM lsmlake_commits WHERE table_id = ?", (table_id,))
            self._run(conn, "DELETE FROM lsmlake_writes WHERE table_id = ?", (table_id,))
            self._run(conn, "DELETE FROM lsmlake_sequences WHERE table_id = ?", (table_id,))
            self._run(conn, "DELETE FROM lsmlake_sequence_sync WHERE table_id = ?", (table_id,))
            self._run(conn, "DELETE FROM lsmlake_plan_files WHERE table_id = ?", (table_id,))
            self._run(conn, "DELETE FROM lsmlake_plans WHERE table_id = ?", (table_id,))

    def outbox_lag(self) -> tuple[int, int | None]:
        """How many events wait for delivery, and when the oldest of them was recorded (epoch ms)."""
        with self._tx(write=False) as conn:
            row = self._run(conn, "SELECT COUNT(*), MIN(created_ms) FROM lsmlake_outbox "
                                  "WHERE delivered_ms IS NULL").fetchone()
        return int(row[0]), None if row[1] is None else int(row[1])

    # -- 3. outbox -------------------------------------------------------------------------------

    def add_event(self, table_id: str, snapshot_id: int, topic: str, key: bytes, payload: bytes) -> int:
        """Record an event to publish (inside the commit's `commit_lock` block, so it commits with it); its id."""
        _check_table_id(table_id)
        _check_int(snapshot_id, "snapshot id", 1)
        if not isinstance(topic, str) or not topic:
            raise InvalidInputError(f"topic {topic!r} must be a non-empty string")
        key, payload = _check_bytes(key, "event key"), _check_bytes(payload, "event payload")
        with self._tx(write=True) as conn:
            cur = self._run(conn, "INSERT INTO lsmlake_outbox (table_id, snapshot_id, topic, event_key, payload, "
                                  "created_ms) VALUES (?, ?, ?, ?, ?, ?) RETURNING event_id",
                            (table_id, snapshot_id, topic, key, payload, now_ms()))
            return self._returning_id(cur)

    def pending_events(self, limit: int = 100) -> list[OutboxEvent]:
        """The oldest undelivered events, at most `limit`, in event-id order (commit order within a table)."""
        _check_int(limit, "limit", 1)
        with self._tx(write=False) as conn:
            rows = self._run(conn, f"SELECT {_EVENT_COLUMNS} FROM lsmlake_outbox WHERE delivered_ms IS NULL "
                                   "ORDER BY event_id LIMIT ?", (limit,)).fetchall()
        return [OutboxEvent(int(r[0]), r[1], int(r[2]), r[3], bytes(r[4]), bytes(r[5]), int(r[6]), r[7])
                for r in rows]

    def mark_delivered(self, event_ids: Iterable[int]) -> int:
        """Mark events as delivered; how many were pending (ids already delivered or unknown are ignored)."""
        ids = sorted({_check_int(i, "event id") for i in event_ids})
        if not ids:
            return 0
        marked = 0
        with self._tx(write=True) as conn:
            ts = now_ms()
            for chunk in _chunks(ids):
                cur = self._run(conn, f"UPDATE lsmlake_outbox SET delivered_ms = ? WHERE delivered_ms IS NULL "
                                      f"AND event_id IN ({_marks(len(chunk))})", (ts, *chunk))
                marked += cur.rowcount
        return marked

    def purge_delivered(self, delivered_before_ms: int, limit: int = PURGE_BATCH) -> int:
        """Delete at most `limit` events delivered before a time, oldest delivery first; how many were deleted.

        One short transaction per call, so that a large backlog is purged in bounded steps between
        commits: call it again while it returns `limit`.
        """
        _check_int(delivered_before_ms, "time")
        _check_int(limit, "limit", 1)
        with self._tx(write=True) as conn:
            return int(self._run(conn, "DELETE FROM lsmlake_outbox WHERE event_id IN (SELECT event_id FROM "
                                       "lsmlake_outbox WHERE delivered_ms IS NOT NULL AND delivered_ms < ? "
                                       "ORDER BY delivered_ms LIMIT ?)", (delivered_before_ms, limit)).rowcount)

    def purge_undelivered(self, created_before_ms: int, limit: int = PURGE_BATCH) -> int:
        """Delete at most `limit` events never delivered and recorded before a time, oldest first; how many.

        These events are never published: for an outbox nobody relays (no Kafka) or a broker down for
        longer than the retention. One short transaction per call, like `purge_delivered`.
        """
        _check_int(created_before_ms, "time")
        _check_int(limit, "limit", 1)
        with self._tx(write=True) as conn:
            return int(self._run(conn, "DELETE FROM lsmlake_outbox WHERE event_id IN (SELECT event_id FROM "
                                       "lsmlake_outbox WHERE delivered_ms IS NULL AND created_ms < ? "
                                       "ORDER BY event_id LIMIT ?)", (created_before_ms, limit)).rowcount)

    def outbox_size(self) -> int:
        """How many events the outbox holds, delivered or not."""
        with self._tx(write=False) as conn:
            return int(self._run(conn, "SELECT COUNT(*) FROM lsmlake_outbox").fetchone()[0])

    # -- 4. compaction timeline ------------------------------------------------------------------

    def request_plan(self, table_id: str, partition: bytes, bucket: int, input_files: Sequence[str],
                     output_level: int, detail: bytes = b"") -> int:
        """Add a REQUESTED plan; PlanConflictError (nothing added) when an input file is in a pending plan.

        `detail` is kept as given and handed back on the plan (the store does not read it).
        """
        _check_table_id(table_id)
        detail = _check_bytes(detail, "plan detail")
        partition = _check_bytes(partition, "partition")
        _check_int(bucket, "bucket")
        _check_int(output_level, "output level", 0)
        if isinstance(input_files, str) or not input_files:
            raise InvalidInputError("input files must be a non-empty list of file names")
        files = list(input_files)
        if not all(isinstance(f, str) and f for f in files):
            raise InvalidInputError("input files must be non-empty strings")
        if len(set(files)) != len(files):
            raise InvalidInputError("input files name a file more than once")
        with self._tx(write=True) as conn:
            taken = self._pending_holders(conn, table_id, files)
            if taken:
                raise self._conflict(table_id, taken)
            ts = now_ms()
            self._run(conn, "SAVEPOINT lsmlake_plan")
            try:
                cur = self._run(conn, "INSERT INTO lsmlake_plans (table_id, partition_bytes, bucket, input_files, "
                                      "output_level, state, attempts, created_ms, updated_ms, detail) "
                                      "VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?) RETURNING plan_id",
                                (table_id, partition, bucket, json.dumps(files), output_level, REQUESTED, ts, ts,
                                 detail))
                plan_id = self._returning_id(cur)
                for f in files:
                    self._run(conn, "INSERT INTO lsmlake_plan_files (table_id, file_name, plan_id) VALUES (?, ?, ?)",
                              (table_id, f, plan_id))
            except self._integrity_errors as e:
                self._run(conn, "ROLLBACK TO SAVEPOINT lsmlake_plan")
                raise PlanConflictError(f"input files of the new plan for table {table_id!r} were planned by "
                                        "another plan at the same moment; nothing was added") from e
            self._run(conn, "RELEASE SAVEPOINT lsmlake_plan")
            return plan_id

    def _pending_holders(self, conn: Any, table_id: str, files: Sequence[str]) -> dict[str, int]:
        held: dict[str, int] = {}
        for chunk in _chunks(files):
            for name, plan_id in self._run(conn, f"SELECT file_name, plan_id FROM lsmlake_plan_files WHERE "
                                                 f"table_id = ? AND file_name IN ({_marks(len(chunk))})",
                                           (table_id, *chunk)).fetchall():
                held[name] = int(plan_id)
        return held

    @staticmethod
    def _conflict(table_id: str, taken: dict[str, int]) -> PlanConflictError:
        shown = ", ".join(f"{f} (plan {p})" for f, p in sorted(taken.items())[:5])
        more = f" and {len(taken) - 5} more" if len(taken) > 5 else ""
        return PlanConflictError(f"{len(taken)} input file(s) of table {table_id!r} are already in a pending "
                                 f"compaction plan: {shown}{more}; nothing was added", taken)

    def start_plan(self, plan_id: int, owner: str) -> CompactionPlan:
        """REQUESTED -> INFLIGHT, run by `owner` (a compactor id); the plan as started."""
        if not isinstance(owner, str) or not owner:
            raise InvalidInputError(f"owner {owner!r} must be a non-empty string")
        return self._transition(plan_id, (REQUESTED,), INFLIGHT, "start",
                                "owner = ?, attempts = attempts + 1, started_ms = ?", (owner, now_ms()))

    def complete_plan(self, plan_id: int, snapshot_id: int) -> CompactionPlan:
        """INFLIGHT -> COMPLETED by the COMPACT snapshot that committed its outputs (repeating it is a no-op)."""
        _check_int(snapshot_id, "snapshot id", 1)
        with self._tx(write=True) as conn:
            plan = self._get_plan(conn, plan_id)
            if plan.state == COMPLETED and plan.snapshot_id == snapshot_id:
                return plan
            return self._transition(plan_id, (INFLIGHT,), COMPLETED, "complete", "snapshot_id = ?", (snapshot_id,))

    def rollback_plan(self, plan_id: int, reason: str | None = None) -> CompactionPlan:
        """INFLIGHT -> REQUESTED, to run again (the caller deletes the outputs the failed run left behind).

        The owner stays recorded as the one that last ran the plan.
        """
        return self._transition(plan_id, (INFLIGHT,), REQUESTED, "roll back", "reason = ?", (reason,))

    def end_plan(self, plan_id: int, reason: str) -> CompactionPlan:
        """INFLIGHT -> ROLLED_BACK: undone and not to run again, releasing its input files (repeating is a no-op)."""
        if not isinstance(reason, str) or not reason:
            raise InvalidInputError("a rolled-back plan needs a reason")
        with self._tx(write=True) as conn:
            plan = self._get_plan(conn, plan_id)
            if plan.state == ROLLED_BACK:
                return plan
            return self._transition(plan_id, (INFLIGHT,), ROLLED_BACK, "roll back", "reason = ?", (reason,))

    def abandon_plan(self, plan_id: int, reason: str) -> CompactionPlan:
        """REQUESTED or INFLIGHT -> ABANDONED (for example: its inputs are gone), releasing its input files."""
        if not isinstance(reason, str) or not reason:
            raise InvalidInputError("an abandoned plan needs a reason")
        with self._tx(write=True) as conn:
            plan = self._get_plan(conn, plan_id)
            if plan.state == ABANDONED:
                return plan
            return self._transition(plan_id, PENDING_STATES, ABANDONED, "abandon", "reason = ?", (reason,))

    def _transition(self, plan_id: int, sources: tuple[str, ...], target: str, verb: str, sets: str,
                    params: tuple[Any, ...]) -> CompactionPlan:
        _check_int(plan_id, "plan id")
        with self._tx(write=True) as conn:
            cur = self._run(conn, f"UPDATE lsmlake_plans SET state = ?, updated_ms = ?, {sets} "
                                  f"WHERE plan_id = ? AND state IN ({_marks(len(sources))})",
                            (target, now_ms(), *params, plan_id, *sources))
            if cur.rowcount != 1:
                plan = self._get_plan(conn, plan_id)  # NotFoundError for an unknown id
                raise PlanStateError(f"cannot {verb} compaction plan {plan_id} of table {plan.table_id!r}: it is "
                                     f"{plan.state}, and only a {' or '.join(sources)} plan can become {target}",
                                     plan_id, plan.state)
            if target not in PENDING_STATES:
                self._run(conn, "DELETE FROM lsmlake_plan_files WHERE plan_id = ?", (plan_id,))
            return self._get_plan(conn, plan_id)

    def get_plan(self, plan_id: int) -> CompactionPlan:
        """One plan by id (NotFoundError when unknown)."""
        _check_int(plan_id, "plan id")
        with self._tx(write=False) as conn:
            return self._get_plan(conn, plan_id)

    def _get_plan(self, conn: Any, plan_id: int) -> CompactionPlan:
        row = self._run(conn, f"SELECT {_PLAN_COLUMNS} FROM lsmlake_plans WHERE plan_id = ?", (plan_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"compaction plan {plan_id} does not exist")
        return self._plan(row)

    def list_plans(self, table_id: str, states: Iterable[str] | None = None) -> list[CompactionPlan]:
        """The plans of a table in creation order, optionally only those in the given states."""
        _check_table_id(table_id)
        wanted = None if states is None else sorted(set(states))
        if wanted is not None:
            bad = [s for s in wanted if s not in PLAN_STATES]
            if bad:
                raise InvalidInputError(f"unknown plan state(s) {bad}: use {', '.join(PLAN_STATES)}")
            if not wanted:
                return []
        sql = f"SELECT {_PLAN_COLUMNS} FROM lsmlake_plans WHERE table_id = ?"
        params: list[Any] = [table_id]
        if wanted is not None:
            sql += f" AND state IN ({_marks(len(wanted))})"
            params += wanted
        with self._tx(write=False) as conn:
            rows = self._run(conn, sql + " ORDER BY plan_id", params).fetchall()
        return [self._plan(r) for r in rows]

    @staticmethod
    def _plan(r: Sequence[Any]) -> CompactionPlan:
        return CompactionPlan(plan_id=int(r[0]), table_id=r[1], partition=bytes(r[2]), bucket=int(r[3]),
                              input_files=tuple(json.loads(r[4])), output_level=int(r[5]), state=r[6], owner=r[7],
                              attempts=int(r[8]), snapshot_id=None if r[9] is None else int(r[9]), reason=r[10],
                              created_ms=int(r[11]), updated_ms=int(r[12]),
                              started_ms=None if r[13] is None else int(r[13]), detail=bytes(r[14]))


def open_store(url: str, busy_timeout: float = 30.0, max_idle: int = 8) -> MetaStore:
    """Open (creating its schema if needed) the store at `sqlite:///path.db` or `postgresql://...`.

    `busy_timeout` bounds, in seconds, every wait for a lock (a commit lock included) before
    MetaStoreUnavailableError; `max_idle` is how many connections the store keeps open for reuse.
    """
    if not isinstance(url, str):
        raise InvalidInputError(f"metadata store URL {url!r} must be a string")
    if busy_timeout <= 0:
        raise InvalidInputError(f"busy timeout {busy_timeout} must be positive")
    if url.startswith("sqlite:"):
        from lsmlake.metastore.sqlite_store import SqliteStore
        store: MetaStore = SqliteStore(url, busy_timeout, max_idle)
    elif url.startswith(("postgresql://", "postgres://")):
        from lsmlake.metastore.postgres_store import PostgresStore
        store = PostgresStore(url, busy_timeout, max_idle)
    else:
        raise InvalidInputError(f"unsupported metadata store URL {url.split('://')[0]!r}: use "
                                "sqlite:///path/to/file.db or postgresql://user@host:port/database")
    try:
        store._bootstrap()
    except BaseException:
        store.close()
        raise
    return store
