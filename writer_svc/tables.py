"""The tables a writer serves over gRPC, each with its group-commit thread.

A table is opened on its first write (from the warehouse, which the writer shares with the catalog) and
gets a committer thread. It commits the table's group as soon as no write of the table is in progress
(every client that sent rows is waiting for its reply, so waiting longer only adds latency; writes that
arrive during a commit form the next group), and at the latest `commit_interval_s` after the group's first
write while writes keep arriving, or when the buffered rows reach `commit_rows`, or when a request asks
for it. The number of snapshots is thus bounded by the commit rate the catalog sustains, not by the
number of clients.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError, ServiceUnavailableError
from lsmlake.format.schema import TableSchema
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.runtime.background import BackgroundLoop
from writer_svc.group_commit import Group
from writer_svc.metrics import WriterMetrics
from writer_svc.table_ingest import TableIngest, TableReplacedError

_log = logging.getLogger(__name__)

LOOK_S = 0.5  # the longest a committer waits before it looks at its table's group again
T = TypeVar("T")


class ShutdownError(ServiceUnavailableError):
    """The writer stopped before the rows could be committed; they were not (retry on another writer)."""


class _Committer:
    """The group-commit loop of one table: a group is committed when `ask()`ed (`commit=now`); when no write of it
    is in progress (`idle()`), right after the commit that ran while its writes arrived, or else once the table's
    previous commit began at least `interval_s` ago; `interval_s` after its first write; or at `commit_rows` rows.
    So a write after a quiet moment commits at once, writes that keep arriving during commits are committed back
    to back, and writers that each wait for their reply get about one snapshot per interval rather than one per
    write: every snapshot makes the table's history longer, and an optimistic committer (an engine through the
    REST catalog) cannot win against a table that changes every few milliseconds."""

    def __init__(self, ingest: TableIngest, interval_s: float, commit_rows: int) -> None:
        self.ingest = ingest
        self.interval_s = interval_s
        self.commit_rows = commit_rows
        # The group each kind of ask was for, by when its first row arrived: an ask belongs to the rows buffered
        # when it was made, so a later group is not committed early because of it, and no step in between can let
        # go of it (a flag cleared after an idle step dropped the ask of the first write after a quiet moment).
        self._asked_for: float | None = None
        self._idle_for: float | None = None
        self._asked_lock = threading.Lock()
        self._last_commit = -math.inf  # when the previous commit began (monotonic)
        self._committing = False
        self._loop = BackgroundLoop(f"commit-{ingest.table_id}", self._step, LOOK_S, error_wait_s=0.0,
                                    on_error=self._failed, what=f"group commit of {ingest.table_id}",
                                    logger=_log).start()

    def ask(self) -> None:
        """Commit the rows buffered now at once."""
        self._note(now=True)

    def idle(self) -> None:
        """No write of the table is in progress: commit the rows buffered now once the interval allows."""
        self._note(now=False)

    def _note(self, now: bool) -> None:
        since = self.ingest.pending_since()
        if since is None:
            return  # nothing buffered: what the ask was for is committed already
        with self._asked_lock:
            # rows that arrived while a commit ran: writes keep coming, and the next commit follows at once
            if now or self._committing:
                self._asked_for = since if self._asked_for is None else max(self._asked_for, since)
            else:
                self._idle_for = since if self._idle_for is None else max(self._idle_for, since)
        self._loop.wake()

    def request_stop(self) -> None:
        self._loop.request_stop()

    def stop(self, timeout_s: float) -> None:
        self._loop.stop(timeout_s)

    def _step(self) -> float:
        since = self.ingest.pending_since()
        if since is None:
            return LOOK_S
        with self._asked_lock:
            asked = self._asked_for is not None and self._asked_for >= since
            idle = self._idle_for is not None and self._idle_for >= since
        due = since + self.interval_s
        if idle:
            due = min(due, self._last_commit + self.interval_s)
        now = time.monotonic()
        if not asked and now < due and self.ingest.pending_rows() < self.commit_rows:
            return min(due - now, LOOK_S)  # look again: asked, due, or still waiting
        self._last_commit = now
        self._committing = True
        try:
            self.ingest.commit()
        finally:
            self._committing = False
        return 0.0

    def _failed(self, e: Exception) -> None:  # the group's requests get the error; keep serving
        _log.warning("group commit of %s failed: %s", self.ingest.table_id, e)


class Tables:
    """The writer's open tables."""

    def __init__(self, warehouse: str, client: CatalogClient, metrics: WriterMetrics, writer_id: str,
                 commit_interval_s: float, commit_rows: int, spill_root: str | None) -> None:
        self.catalog = FileSystemCatalog(warehouse)
        self.client = client
        self.metrics = metrics
        # a new commit user per process: commit identifiers restart at 1 without matching older commits
        self.commit_user = f"{writer_id}-{uuid.uuid4().hex[:8]}"
        self.commit_interval_s = commit_interval_s
        self.commit_rows = commit_rows
        self.spill_root = spill_root
        self._lock = threading.Lock()
        self._tables: dict[str, tuple[TableIngest, _Committer]] = {}
        self._opened: set[str] = set()
        self._closed = False

    def get(self, table_id: str) -> TableIngest:
        with self._lock:
            if self._closed:
                raise ShutdownError("the writer is shutting down")
            entry = self._tables.get(table_id)
            if entry is not None and entry[0].stale:  # dropped and created again: its group has failed
                stale, committer = entry
                committer.request_stop()
                stale.discard(ShutdownError(f"table {table_id} was dropped and created again; resend the write"))
                stale.close()
                entry = None
            if entry is None:
                table = self.catalog.get_table(table_id)  # NotFoundError for an unknown table
                # a reopened table gets a commit user of its own: its identifiers start again at 1
                user = f"{self.commit_user}-{uuid.uuid4().hex[:4]}" if table_id in self._opened else self.commit_user
                self._opened.add(table_id)
                ingest = TableIngest(table, self.client, user, self.metrics, self.spill_root)
                committer = _Committer(ingest, self.commit_interval_s, self.commit_rows)
                ingest.on_idle = committer.idle
                entry = self._tables[table_id] = (ingest, committer)
            return entry[0]

    def decode(self, table_id: str, decode: Callable[[TableSchema], T]) -> T:
        """`decode(schema)` with the schema of the table the writer holds; when that refuses the input
        (InvalidInputError) and the table has changed since the writer loaded it (altered, or dropped and
        created again), once more with the table's current schema. Only then is the refusal final: a client
        takes INVALID_ARGUMENT as final, so it must not come from the writer's out-of-date copy of the table."""
        ingest = self.get(table_id)
        schema = ingest.table.schema
        try:
            return decode(schema)
        except InvalidInputError:
            ingest.catch_up()
            fresh = self.get(table_id)  # a new TableIngest when the table was dropped and created again
            if fresh is ingest and fresh.table.schema.id == schema.id:
                raise  # the table is as it was: the input is at fault
        return decode(fresh.table.schema)

    def write(self, table_id: str, data: pa.Table, deadline: float, request_id: str) -> tuple[Group, bool]:
        """Buffer the rows in the table's group: (the group, whether an attempt of `request_id` was committed
        before, see `TableIngest.write_once`; no id: always False). Rows that did not fit the table the writer
        held because it was dropped and created again are written to the new table."""
        try:
            return self._write_to(self.get(table_id), data, deadline, request_id)
        except TableReplacedError:
            return self._write_to(self.get(table_id), data, deadline, request_id)

    @staticmethod
    def _write_to(ingest: TableIngest, data: pa.Table, deadline: float, request_id: str) -> tuple[Group, bool]:
        if request_id:
            return ingest.write_once(data, deadline, request_id)
        return ingest.write(data, deadline), False

    def commit_soon(self, table_id: str) -> None:
        entry = self._tables.get(table_id)
        if entry is not None:
            entry[1].ask()

    def close(self) -> None:
        """Commit what every table holds, stop the committers; rows that cannot be committed are rejected."""
        with self._lock:
            self._closed = True
            entries = list(self._tables.values())
        for ingest, committer in entries:
            committer.stop(30)
            try:
                ingest.commit()
            except Exception as e:
                _log.error("final commit of %s failed: %s; its rows were rejected", ingest.table_id, e)
            ingest.discard(ShutdownError("the writer stopped before the rows were committed"))
            ingest.close()
