"""`Client`: lsmlake's services from Python — tables through the catalog, rows through the writer.

The client is composed of one part per concept, each in its module of `lsmlake.client`, sharing one
`connection` (channels, and every call's failure as an lsmlake error): `tables` (databases and tables, their
typed `schema`), `writes` (rows through the writer, files committed through the catalog), `scans` (planned
reads: a `Scan`, and the changes between two snapshots), `snapshots` (listing, time travel, expiration), `tags`
(named snapshots), `compaction` (triggering it, the plan timeline) and `health` (tables ranked by how far
compaction is behind).

gRPC failures come back as lsmlake errors (`NotFoundError`, `InvalidInputError`, ...) carrying the
server's message (`lsmlake.rpc.errors.error_for`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import pyarrow as pa

from lsmlake.client.compaction import Compaction, CompactionPlanInfo, CompactResult
from lsmlake.client.connection import Connection
from lsmlake.client.health import Health, TableHealthInfo
from lsmlake.client.iceberg import Iceberg, IcebergSync
from lsmlake.client.scan import Scan
from lsmlake.client.scans import Scans
from lsmlake.client.schema import TableSchemaInfo
from lsmlake.client.snapshots import ExpireResult, SnapshotInfo, Snapshots
from lsmlake.client.tables import TableInfo, Tables
from lsmlake.client.tags import Tags
from lsmlake.client.writes import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_ROWS, WriteResult, Writes
from lsmlake.format.predicate import Predicate, Spec
from lsmlake.fs import StorageSettings
from lsmlake.table.commit import CommitResult
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split
from lsmlake.table.schema_change import SchemaChange
from lsmlake.table.write import CommitMessage

__all__ = ["Client"]


class Client:
    """A connection to lsmlake's catalog, and optionally its writer and compactor services.

    Args:
        catalog: `host:port` of the catalog service.
        writer: `host:port` of a writer service; needed by `write` and `write_rows`.
        compactor: `host:port` of a compactor service; needed by `compact`.
        warehouse: the warehouse folder or URI as this process sees it; when None, scans read each
            table at the location the catalog reports (which must then be reachable from here).
        storage: the object-store settings this process opens table files with, as `StorageSettings` or as
            options under Paimon's keys (`s3.endpoint`, `s3.region`, `s3.access-key`, `s3.secret-key`,
            `s3.session-token`, `s3.path.style.access`) or pypaimon's (`fs.s3.*`); they override the AWS
            environment, and a `warehouse` URI's own parameters override them (docs/storage.md).
        timeout_s: deadline of each call.
        token: bearer token sent with every call, for services that check tokens (docs/security.md).
        tls_ca: connect over TLS, trusting this CA certificate (PEM file).
        tls_cert, tls_key: client certificate and key (PEM files), for services that require mutual TLS.
        tls: connect over TLS trusting the system's root certificates (implied by `tls_ca` and `tls_cert`).

    Besides reading and writing rows, a job that reads and writes a table's files itself (lsmlake's Spark
    source) plans and commits through the client: `open_table` gives the table's files, `plan_splits` the
    catalog's plan of a scan, `snapshot_at` the snapshot for a time, and `commit` commits files written
    into the table as one snapshot.

    A call that changes state (a write, a commit, a table change) and gets no definite answer raises
    CommitStateUnknownError: it may have been applied; send it again as it was (a write with the same
    `request_id`). A read without an answer raises ServiceUnavailableError.
    """

    def __init__(self, catalog: str = "127.0.0.1:50051", writer: str | None = None, compactor: str | None = None,
                 warehouse: str | None = None, timeout_s: float = 60, *, token: str | None = None,
                 tls_ca: str | None = None, tls_cert: str | None = None, tls_key: str | None = None,
                 tls: bool = False, storage: StorageSettings | Mapping[str, str] | None = None) -> None:
        self._conn = Connection(catalog, writer, compactor, warehouse, timeout_s, token=token, tls_ca=tls_ca,
                                tls_cert=tls_cert, tls_key=tls_key, tls=tls, storage=storage)
        self._tables = Tables(self._conn)
        self._writes = Writes(self._conn, self._tables)
        self._snapshots = Snapshots(self._conn)
        self._iceberg = Iceberg(self._conn)
        self._scans = Scans(self._conn, self._tables, self._snapshots)
        self._tags = Tags(self._conn)
        self._compaction = Compaction(self._conn)
        self._health = Health(self._conn)

    @property
    def timeout_s(self) -> float:
        """The deadline of every call, in seconds (settable, as before the client was split into parts)."""
        return self._conn.timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self._conn.timeout_s = value
        self._conn.catalog_client.timeout_s = value

    @property
    def warehouse(self) -> str | None:
        """Where the client reads planned files from (None: the location the catalog reports)."""
        return self._conn.warehouse

    @warehouse.setter
    def warehouse(self, value: str | None) -> None:
        self._conn.warehouse = value

    @property
    def storage(self) -> StorageSettings:
        """The object-store settings given to this client (over the AWS environment); shown with secrets hidden."""
        return self._conn.storage

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- databases and tables (`Tables`) -----------------------------------------------------------

    def create_database(self, name: str, ignore_if_exists: bool = True) -> bool:
        return self._tables.create_database(name, ignore_if_exists)

    def list_databases(self) -> list[str]:
        return self._tables.list_databases()

    def drop_database(self, name: str, cascade: bool = False, ignore_if_not_exists: bool = False) -> bool:
        return self._tables.drop_database(name, cascade, ignore_if_not_exists)

    def create_table(self, identifier: str, schema: str | pa.Schema, primary_keys: str | Sequence[str] = (),
                     partition_keys: str | Sequence[str] = (), options: Mapping[str, Any] | None = None,
                     ignore_if_exists: bool = False, *, comment: str | None = None) -> TableInfo:
        return self._tables.create_table(identifier, schema, primary_keys, partition_keys, options, ignore_if_exists,
                                         comment=comment)

    def table(self, identifier: str) -> TableInfo:
        return self._tables.table(identifier)

    def schema(self, identifier: str) -> TableSchemaInfo:
        return self._tables.schema(identifier)

    def rename_table(self, identifier: str, new_identifier: str) -> TableInfo:
        return self._tables.rename_table(identifier, new_identifier)

    def list_tables(self, database: str) -> list[str]:
        return self._tables.list_tables(database)

    def drop_table(self, identifier: str, ignore_if_not_exists: bool = False) -> bool:
        return self._tables.drop_table(identifier, ignore_if_not_exists)

    def alter_table(self, identifier: str, *, add_columns: str | Sequence[tuple[str, str]] = (),
                    rename_columns: Mapping[str, str] | None = None, set_options: Mapping[str, Any] | None = None,
                    remove_options: Sequence[str] = ()) -> TableInfo:
        return self._tables.alter_table(identifier, add_columns=add_columns, rename_columns=rename_columns,
                                        set_options=set_options, remove_options=remove_options)

    def apply_schema_changes(self, identifier: str, changes: Sequence[SchemaChange],
                             timeout_s: float | None = None) -> TableInfo:
        return self._tables.apply_schema_changes(identifier, changes, timeout_s)

    # -- rows and commits (`Writes`) ---------------------------------------------------------------

    def write(self, identifier: str, data: Any, *, row_kind_column: str | None = None, commit_now: bool = False,
              request_id: str | None = None, max_rows_per_request: int = DEFAULT_MAX_ROWS,
              max_bytes_per_request: int = DEFAULT_MAX_REQUEST_BYTES) -> WriteResult:
        return self._writes.write(identifier, data, row_kind_column=row_kind_column, commit_now=commit_now,
                                  request_id=request_id, max_rows_per_request=max_rows_per_request,
                                  max_bytes_per_request=max_bytes_per_request)

    def write_rows(self, identifier: str, rows: Sequence[Mapping[str, Any]], *, row_kind_column: str | None = None,
                   commit_now: bool = False, request_id: str | None = None) -> WriteResult:
        return self._writes.write_rows(identifier, rows, row_kind_column=row_kind_column, commit_now=commit_now,
                                       request_id=request_id)

    def commit(self, identifier: str, messages: Sequence[CommitMessage], *, commit_user: str,
               commit_identifier: int = 1, overwrite: bool = False,
               partitions: Sequence[bytes] | None = None) -> CommitResult:
        return self._writes.commit(identifier, messages, commit_user=commit_user,
                                   commit_identifier=commit_identifier, overwrite=overwrite, partitions=partitions)

    # -- reads (`Scans`) ---------------------------------------------------------------------------

    def open_table(self, table: str | TableInfo) -> FileStoreTable:
        return self._scans.open_table(table)

    def plan_splits(self, table: FileStoreTable, *, snapshot_id: int | None = None,
                    predicate: Predicate | None = None) -> list[Split]:
        return self._scans.plan_splits(table, snapshot_id=snapshot_id, predicate=predicate)

    def new_scan(self, identifier: str, *, where: Spec = None, columns: Sequence[str] | None = None,
                 limit: int | None = None, snapshot_id: int | None = None, as_of: dt.datetime | int | None = None,
                 tag: str | None = None) -> Scan:
        return self._scans.new_scan(identifier, where=where, columns=columns, limit=limit, snapshot_id=snapshot_id,
                                    as_of=as_of, tag=tag)

    def scan(self, identifier: str, *, snapshot_id: int | None = None, where: Spec = None,
             columns: Sequence[str] | None = None, limit: int | None = None, as_of: dt.datetime | int | None = None,
             tag: str | None = None) -> pa.Table:
        return self._scans.scan(identifier, snapshot_id=snapshot_id, where=where, columns=columns, limit=limit,
                                as_of=as_of, tag=tag)

    def read_changes(self, identifier: str, start_snapshot: int, end_snapshot: int | None = None, *,
                     where: Spec = None, columns: Sequence[str] | None = None) -> pa.Table:
        return self._scans.read_changes(identifier, start_snapshot, end_snapshot, where=where, columns=columns)

    # -- snapshots (`Snapshots`) -------------------------------------------------------------------

    def snapshots(self, identifier: str) -> list[SnapshotInfo]:
        return self._snapshots.snapshots(identifier)

    def latest_snapshot(self, identifier: str) -> SnapshotInfo | None:
        return self._snapshots.latest_snapshot(identifier)

    def snapshot_at(self, identifier: str, time_millis: int) -> SnapshotInfo | None:
        return self._snapshots.snapshot_at(identifier, time_millis)

    def expire(self, identifier: str, *, retain_min: int | None = None, retain_max: int | None = None,
               older_than_ms: int | None = None, max_deletes: int | None = None) -> ExpireResult:
        return self._snapshots.expire(identifier, retain_min=retain_min, retain_max=retain_max,
                                      older_than_ms=older_than_ms, max_deletes=max_deletes)

    def sync_iceberg(self, identifier: str) -> IcebergSync:
        return self._iceberg.sync_iceberg(identifier)

    # -- tags (`Tags`) -----------------------------------------------------------------------------

    def create_tag(self, identifier: str, tag: str, snapshot_id: int | None = None) -> SnapshotInfo:
        return self._tags.create_tag(identifier, tag, snapshot_id)

    def list_tags(self, identifier: str) -> list[str]:
        return self._tags.list_tags(identifier)

    def tag(self, identifier: str, tag: str) -> SnapshotInfo:
        return self._tags.tag(identifier, tag)

    def delete_tag(self, identifier: str, tag: str) -> None:
        self._tags.delete_tag(identifier, tag)

    # -- compaction (`Compaction`, `Health`) ---------------------------------------------------------

    def compact(self, identifier: str, full: bool = False, wait: bool = True, *,
                partition: Mapping[str, Any] | None = None, bucket: int | None = None,
                timeout_s: float | None = None) -> CompactResult:
        return self._compaction.compact(identifier, full, wait, partition=partition, bucket=bucket,
                                        timeout_s=timeout_s)

    def timeline(self, identifier: str, states: Sequence[str] = ()) -> list[CompactionPlanInfo]:
        return self._compaction.timeline(identifier, states)

    def list_table_health(self, identifier: str | None = None, *, database: str | None = None,
                          with_buckets: bool = False) -> list[TableHealthInfo]:
        return self._health.list_table_health(identifier, database=database, with_buckets=with_buckets)


# each method is documented where it is implemented: help(Client.scan) shows Scans.scan's text
for _part in (Tables, Writes, Scans, Snapshots, Iceberg, Tags, Compaction, Health):
    for _name, _method in vars(_part).items():
        if not _name.startswith("_") and callable(_method) and hasattr(Client, _name):
            getattr(Client, _name).__doc__ = _method.__doc__
