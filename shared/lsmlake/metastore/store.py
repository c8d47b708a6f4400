"""Opening a metadata store by URL, and the names a caller of the store needs."""

from __future__ import annotations

from lsmlake.errors import InvalidInputError
from lsmlake.metastore.base import MetaStore
from lsmlake.metastore.outbox import PURGE_BATCH
from lsmlake.metastore.transactions import SCHEMA_VERSION, Transaction, now_ms

__all__ = ["PURGE_BATCH", "SCHEMA_VERSION", "MetaStore", "Transaction", "now_ms", "open_store"]


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
