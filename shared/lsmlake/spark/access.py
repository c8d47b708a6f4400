"""Where a Spark job finds a table: the catalog service (`catalog=host:port`) or a warehouse folder.

The driver plans, resolves time travel and commits through a `TableAccess`; executors only get a
`TableRef` (plain values, picklable) and open the table's files from its location, with the storage settings
the driver resolved for it (its AWS environment, overridden by the job's `s3.*` options): so executors on
other machines reach the object store without any setting of their own (docs/storage.md).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lsmlake.catalog.filesystem import FileSystemCatalog, split_identifier
from lsmlake.client.connection import storage_settings
from lsmlake.errors import CommitStateUnknownError, InvalidInputError, NotFoundError
from lsmlake.format.predicate import Predicate
from lsmlake.format.schema import SchemaManager
from lsmlake.format.snapshot import Snapshot
from lsmlake.fs import StorageSettings, open_path
from lsmlake.fs.storage_settings import join_uri
from lsmlake.table.commit import CommitResult
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)
_COMMIT_ATTEMPTS = 5  # a commit RPC whose outcome is unknown is sent again, idempotently
_RETRY_PAUSE_S = 1.0


@dataclass(frozen=True)
class TableRef:
    """How an executor opens a table: its files' location, the schema version the driver planned with, and the
    storage settings the driver resolved for the location (None on a local disk; repr hides the secrets)."""

    identifier: str
    location: str
    schema_id: int
    storage: StorageSettings | None = None

    def open(self) -> FileStoreTable:
        """The table at `location`, read with schema `schema_id` (files of other versions are mapped by field id)."""
        fio, path = open_path(self.location, storage=self.storage)
        manager = SchemaManager(fio, path)
        try:
            schema = manager.schema(self.schema_id)
        except NotFoundError:
            raise NotFoundError(f"table {self.identifier}: schema {self.schema_id} not found at "
                                f"{shown_uri(self.location)}; executors must see the same warehouse as the "
                                "driver") from None
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
    storage: StorageSettings | None = None  # what executors open `location` with (see `executor_storage`)

    def ref(self) -> TableRef:
        return TableRef(self.identifier, self.location, self.table.schema.id, self.storage)

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

    def __init__(self, warehouse: str, identifier: str, storage: Mapping[str, str] | None = None) -> None:
        """`storage`: storage options (`s3.endpoint`, ...) over this process's AWS environment; InvalidInputError
        naming an unknown key, as the Client and the data source's options refuse it."""
        self.identifier = identifier
        given = storage_settings(storage or {})
        if is_s3(warehouse) and given != StorageSettings():
            # FileSystemCatalog opens a URI with the environment's settings only: it gets the filesystem opened
            # with the options instead, and the warehouse as a path in it
            fio, root = open_path(warehouse, storage=given)
            self.catalog = FileSystemCatalog(root, fio.fs)
        else:
            self.catalog = FileSystemCatalog(warehouse)
        self.table = self.catalog.get_table(identifier)
        self.location = table_location(warehouse, identifier, self.table.path)
        self.storage = executor_storage(self.location, warehouse, storage)

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

    def __init__(self, target: str, identifier: str, warehouse: str | None = None,
                 storage: Mapping[str, str] | None = None) -> None:
        """`warehouse`: the warehouse as this process (and the executors) see it, when not at the reported location;
        `storage`: storage options (`s3.endpoint`, ...) over this process's AWS environment."""
        from lsmlake.client.client import Client

        self.identifier = identifier
        self.client = Client(target, warehouse=warehouse, storage=dict(storage or {}))
        try:
            self.info = self.client.table(identifier)
            self.table = self.client.open_table(self.info)
        except BaseException:
            self.client.close()
            raise
        self.location = (table_location(warehouse, identifier, self.table.path) if warehouse is not None
                         else self.info.location)
        self.storage = executor_storage(self.location, warehouse if warehouse is not None else self.location,
                                        storage)

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
    """The table folder as executors can open it: the local path, or the URI under an object-store warehouse
    (the table's path goes before the URI's query string).

    An S3 location drops the warehouse URI's user info and query: they may hold the secret key and a session
    token, and the location shows in repr(TableRef) and in messages; what they say reaches the executors in
    `TableRef.storage` (`executor_storage` reads them from the warehouse URI)."""
    if "://" not in warehouse:
        return local_path
    db, name = split_identifier(identifier)
    joined = join_uri(warehouse, f"{db}.db", name)
    if not is_s3(joined):
        return joined
    split = urllib.parse.urlsplit(joined)
    return urllib.parse.urlunsplit((split.scheme, split.netloc.rpartition("@")[2], split.path, "", ""))


def is_s3(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


def executor_storage(location: str, source: str, storage: Mapping[str, str] | None) -> StorageSettings | None:
    """The settings executors open `location` with: this driver's environment, overridden by the job's storage
    options, overridden by the parameters of `source`, the URI the driver opened (the warehouse's, whose
    credentials `location` leaves out); None when `location` is not S3."""
    if not is_s3(location):
        return None
    return StorageSettings.resolve(source, storage or {})


def shown_uri(uri: str) -> str:
    """`uri` for a message: without user info (credentials) or query string (which may hold a session token)."""
    if "://" not in uri:
        return uri
    split = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit((split.scheme, split.hostname or "", split.path, "", ""))


def open_access(options: Mapping[str, str], identifier: str,
                storage: Mapping[str, str] | None = None) -> TableAccess:
    """`catalog` (with an optional `warehouse` override of the table location) or `warehouse` alone; `storage`:
    the job's storage options (`s3.*`)."""
    catalog, warehouse = options.get("catalog"), options.get("warehouse")
    if catalog:
        return CatalogAccess(catalog, identifier, warehouse or None, storage)
    if warehouse:
        return WarehouseAccess(warehouse, identifier, storage)
    raise InvalidInputError("lsmlake needs option('catalog', 'host:port') or option('warehouse', DIR)")
