"""The embedded backend: one SQLite file in WAL mode; a commit lock is the database write lock."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from lsmlake.errors import InvalidInputError
from lsmlake.metastore.base import MetaStore
from lsmlake.metastore.schema import schema_ddl


def sqlite_path(url: str) -> str:
    """`sqlite:///abs/meta.db` -> `/abs/meta.db`; `sqlite:rel/meta.db` or `sqlite://rel/meta.db` -> `rel/meta.db`."""
    path = url[len("sqlite:"):]
    if path.startswith("//"):
        path = path[2:]
    if not path or path == ":memory:" or path.startswith("file:"):
        raise InvalidInputError(f"metadata store URL {url!r} must name a database file, as sqlite:///path/to/file.db")
    return path


class SqliteStore(MetaStore):
    """The metadata store in a SQLite file (several processes on one host may share it)."""

    _operational_errors = (sqlite3.OperationalError,)
    _integrity_errors = (sqlite3.IntegrityError,)

    def __init__(self, url: str, busy_timeout: float, max_idle: int) -> None:
        super().__init__(url, busy_timeout, max_idle)
        self.path = os.path.abspath(sqlite_path(url))
        os.makedirs(os.path.dirname(self.path), exist_ok=True)

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions, the store issues BEGIN/COMMIT itself
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")  # a committed outbox event survives a power cut
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _begin(self, conn: Any, write: bool) -> None:
        # IMMEDIATE takes the write lock at BEGIN (waiting up to the busy timeout) instead of failing later
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def _lock_table(self, conn: Any, table_id: str) -> None:
        """Nothing more to take: BEGIN IMMEDIATE already holds the write lock of the whole database."""

    def _bootstrap_lock(self, conn: Any) -> None:
        """Nothing more to take: the bootstrap transaction holds the write lock."""

    def _reusable(self, conn: Any) -> bool:
        return not conn.in_transaction

    def _schema_ddl(self) -> list[str]:
        return schema_ddl("INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB", "INTEGER")
