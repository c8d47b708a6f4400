"""The store's transactional core: connection pool, transactions, schema bootstrap and the per-table commit lock.

A backend (`sqlite_store`, `postgres_store`) supplies the hooks: how to connect, begin, lock a table and
create the schema. Everything else the store does runs in a `session`, which joins this thread's open
`commit_lock` transaction if there is one.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, Self

from lsmlake.metastore.checks import check_table_id
from lsmlake.metastore.errors import MetaStoreUnavailableError, SchemaVersionError

SCHEMA_VERSION = 1


def now_ms() -> int:
    """The current time in epoch milliseconds, as the store records it."""
    return int(time.time() * 1000)



class Cursor(Protocol):
    """What the store reads of a DB-API cursor (sqlite3's and psycopg's alike)."""

    @property
    def description(self) -> Any: ...

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Session:
    """An open transaction of the store: statements with `?` placeholders, backend errors already translated."""

    def __init__(self, store: TransactionalStore, conn: Any) -> None:
        self.store = store
        self._conn = conn

    @property
    def integrity_errors(self) -> tuple[type[BaseException], ...]:
        """The backend's exceptions for a violated key or constraint."""
        return self.store._integrity_errors

    def run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement in this transaction (MetaStoreUnavailableError on a lock timeout or lost connection)."""
        cur: Cursor = self.store._run(self._conn, sql, params)
        return cur

    def insert_returning_id(self, sql: str, params: Sequence[Any]) -> int:
        """Run an INSERT ... RETURNING of one id column; the id it produced."""
        # every row fetched, so that the statement is finished before the next one
        return int(self.run(sql, params).fetchall()[0][0])


class Transaction(Session):
    """The transaction of a `commit_lock` block: the locked table and raw SQL for rows the caller keeps itself."""

    def __init__(self, session: Session, table_id: str) -> None:
        super().__init__(session.store, session._conn)
        self.table_id = table_id

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one SQL statement (with `?` placeholders on both backends) in this transaction; its rows, if any."""
        cur = self.run(sql, params)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


class StoreTables:
    """A group of the store's tables; each of its methods runs in the store's transactions (`session`)."""

    def __init__(self, store: TransactionalStore) -> None:
        self._store = store

    def _tx(self, write: bool) -> AbstractContextManager[Session]:
        return self._store.session(write)


class TransactionalStore(ABC):
    """Connections and transactions of a metadata store; `MetaStore` adds what it stores, as `StoreTables`."""

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
        self._local = threading.local()  # .txn: the Session of this thread's open transaction

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
    def session(self, write: bool) -> Iterator[Session]:
        """This thread's open transaction if there is one (calls nest), else a new one committed at the end."""
        joined: Session | None = getattr(self._local, "txn", None)
        if joined is not None:
            yield joined
            return
        conn = self._acquire()
        ok = False
        session = self._local.txn = Session(self, conn)
        try:
            try:
                self._begin(conn, write)
            except self._operational_errors as e:
                raise MetaStoreUnavailableError(f"metadata store {self._safe_url()}: {e}") from e
            try:
                yield session
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
        with self.session(write=True) as s:
            self._bootstrap_lock(s._conn)
            for stmt in self._schema_ddl():
                s.run(stmt)
            row = s.run("SELECT version FROM lsmlake_schema_version WHERE id = 1").fetchone()
            if row is None:
                s.run("INSERT INTO lsmlake_schema_version (id, version, updated_ms) VALUES (1, ?, ?)",
                          (SCHEMA_VERSION, now_ms()))
            elif int(row[0]) > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"metadata store {self._safe_url()} has schema version {row[0]}, newer than the "
                    f"{SCHEMA_VERSION} this lsmlake knows: upgrade lsmlake")

    def schema_version(self) -> int:
        """The schema version recorded in the store."""
        with self.session(write=False) as s:
            return int(s.run("SELECT version FROM lsmlake_schema_version WHERE id = 1").fetchone()[0])

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

    def __enter__(self) -> Self:
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
        check_table_id(table_id)
        with self.session(write=True) as s:
            self._lock_table(s._conn, table_id)
            yield Transaction(s, table_id)
