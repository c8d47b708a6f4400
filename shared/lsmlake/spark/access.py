"""Where a Spark job finds a table: the catalog service (`catalog=host:port`) or a warehouse folder.

The driver plans, resolves time travel and commits through a `TableAccess`; executors only get a
`TableRef` (plain values, picklable) and open the table's files from its location.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from lsmlake.catalog.filesystem import FileSystemCatalog, split_identifier
from lsmlake.errors import CommitStateUnknownError, InvalidInputError, NotFoundError
from lsmlake.format.predicate import Predicate
from lsmlake.format.schema import SchemaManager
from lsmlake.format.snapshot import Snapshot
from lsmlake.fs import open_path
from lsmlake.table.commit import CommitResult
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)
_COMMIT_ATTEMPTS = 5  # a commit RPC whose outcome is unknown is sent again, idempotently
_RETRY_PAUSE_S = 1.0


@dataclass(frozen=True)
class TableRef:
    """How an executor opens a table: its files' location and the schema version the driver planned with."""

    identifier: str
    location: str
    schema_id: int

    def open(self) -> FileStoreTable:
        """The table at `location`, read with schema `schema_id` (files of other versions are mapped by field id)."""
        fio, path = open_path(self.location)
        manager = SchemaManager(fio, path)
        try:
            schema = manager.schema(self.schema_id)
        except NotFoundError:
            raise NotFoundError(f"table {self.identifier}: schema {self.schema_id} not found at {self.location}; "
                                "executors must see the same warehouse as the driver") from None
        table = FileStoreTable(fio, path, self.identifier, schema)
        table.refresh_schema = lambda: False  # type: ignore[method-assign]  # keep the planned schema
        return table


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch from digits (milliseconds) or ISO-8601 text (UTC unless it names a zone)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(f"option 'timestamp' = {text!r}: use milliseconds since the epoch or ISO-8601 "
                                "such as 2024-01-01T12:00:00") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


class TableAccess:
    """The driver's view of one table: describe, plan, time travel, commit."""

    identifier: str
    table: FileStoreTable  # the table's files, opened on the driver

    location: str  # the table folder as a path or URI that executors can open

    def ref(self) -> TableRef:
        return TableRef(self.identifier, self.location, self.table.schema.id)

    def latest_snapshot_id(self) -> int | None:
        return self.table.snapshots.latest_id()

    def snapshot_at(self, time_millis: int) -> int:
        """The newest snapshot committed at or before `time_millis`."""
        found = self.table.snapshots.at_time(time_millis)
        if found is None:
            raise NotFoundError(f"table {self.identifier} has no snapshot at or before {time_millis} ms")
        return found.id

    def plan(self, snapshot_id: int | None, predicate: Predicate) -> list[Split]:
        snap: Snapshot | None = self.table.snapshot(snapshot_id)
        return self.table.new_scan(predicate, snap).plan()

    def commit(self, messages: Sequence[CommitMessage], overwrite: bool) -> CommitResult:
        raise NotImplementedError

    def after_write(self) -> None:
        """Work due after a committed write (none unless the table needs it)."""

    def close(self) -> None:
        """Release connections (none for a warehouse)."""


class WarehouseAccess(TableAccess):
    """A table in a warehouse folder, committed to directly (no services)."""

    def __init__(self, warehouse: str, identifier: str) -> None:
        self.identifier = identifier
        self.catalog = FileSystemCatalog(warehouse)
        self.table = self.catalog.get_table(identifier)
        self.location = table_location(warehouse, identifier, self.table.path)

    def commit(self, messages: Sequence[CommitMessage], overwrite: bool) -> CommitResult:
        """One APPEND snapshot, or an OVERWRITE one replacing the partitions the messages touch; the file
        changes are checked as the catalog service checks them (`FileSystemCatalog.commit`)."""
        t = self.table
        partitions = t.overwritten_partitions(messages, None) if overwrite else None
        return self.catalog.commit(t, messages, overwrite=overwrite, partitions=partitions)

    def after_write(self) -> None:
        """Move level 0 of a deletion-vector table up (its readers do not see level 0), as `write_arrow` does.

        Through the catalog this is the compactor service's job: nothing commits around the catalog.
        """
        try:
            self.table.compact_after_write()
        except Exception as e:  # noqa: BLE001 - the write is committed; a compactor can catch up
            _log.warning("compaction after the spark write to %s failed: %s", self.identifier, e)


class CatalogAccess(TableAccess):
    """A table of the catalog service: planned by PlanScan, committed by Commit (through `Client`)."""

    def __init__(self, target: str, identifier: str, warehouse: str | None = None) -> None:
        """`warehouse`: the warehouse as this process (and the executors) see it, when not at the reported location."""
        from lsmlake.client.client import Client

        self.identifier = identifier
        self.client = Client(target, warehouse=warehouse)
        try:
            self.info = self.client.table(identifier)
            self.table = self.client.open_table(self.info)
        except BaseException:
            self.client.close()
            raise
        self.location = (table_location(warehouse, identifier, self.table.path) if warehouse is not None
                         else self.info.location)

    def latest_snapshot_id(self) -> int | None:
        s = self.client.latest_snapshot(self.identifier)
        return s.id if s is not None else None

    def snapshot_at(self, time_millis: int) -> int:
        s = self.client.snapshot_at(self.identifier, time_millis)
        if s is None:
            raise NotFoundError(f"table {self.identifier} has no snapshot at or before {time_millis} ms")
        return s.id

    def plan(self, snapshot_id: int | None, predicate: Predicate) -> list[Split]:
        """The catalog's plan; terms whose literal cannot travel as text only filter rows (they prune less)."""
        return self.client.plan_splits(self.table, snapshot_id=snapshot_id, predicate=predicate)

    def commit(self, messages: Sequence[CommitMessage], overwrite: bool) -> CommitResult:
        """One Commit RPC; sent again while its outcome is unknown, with the same (user, identifier), which the
        catalog applies once.

        Raises CommitStateUnknownError when the last attempt's outcome is unknown (files must stay).
        """
        partitions = sorted({m.partition for m in messages}) if self.table.schema.partition_keys else None
        user = f"spark-{uuid.uuid4()}"
        for attempt in range(1, _COMMIT_ATTEMPTS + 1):
            try:
                return self.client.commit(self.identifier, messages, commit_user=user, commit_identifier=1,
                                          overwrite=overwrite, partitions=partitions)
            except CommitStateUnknownError as e:
                if attempt == _COMMIT_ATTEMPTS:
                    raise CommitStateUnknownError(f"commit to {self.identifier}, {attempt} attempts: {e}") from e
                time.sleep(_RETRY_PAUSE_S * attempt)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.client.close()


def table_location(warehouse: str, identifier: str, local_path: str) -> str:
    """The table folder as executors can open it: the local path, or the URI under an object-store warehouse."""
    if "://" not in warehouse:
        return local_path
    db, name = split_identifier(identifier)
    return f"{warehouse.rstrip('/')}/{db}.db/{name}"


def open_access(options: dict[str, str], identifier: str) -> TableAccess:
    """`catalog` (with an optional `warehouse` override of the table location) or `warehouse` alone."""
    catalog, warehouse = options.get("catalog"), options.get("warehouse")
    if catalog:
        return CatalogAccess(catalog, identifier, warehouse or None)
    if warehouse:
        return WarehouseAccess(warehouse, identifier)
    raise InvalidInputError("lsmlake needs option('catalog', 'host:port') or option('warehouse', DIR)")
