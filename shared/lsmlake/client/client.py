"""`Client`: lsmlake's services from Python — tables through the catalog, rows through the writer.

Writes go over gRPC (`WriterService.Write` as Arrow IPC, `WriteRows` as JSON); scans are planned by the
catalog (`PlanScan`) and read straight from the warehouse with lsmlake's own reader, so a scan merges
and filters exactly as `FileStoreTable.to_arrow` does. gRPC failures come back as lsmlake errors
(`NotFoundError`, `InvalidInputError`, ...) carrying the server's message.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import grpc
import pyarrow as pa

from lsmlake.catalog.filesystem import FileSystemCatalog, split_identifier
from lsmlake.errors import (
    AlreadyExistsError,
    BackPressureError,
    CommitConflictError,
    CommitRetryExhaustedError,
    InvalidInputError,
    LakeError,
    NotFoundError,
    PermissionDeniedError,
    ServiceUnavailableError,
)
from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.predicate import Predicate, Term
from lsmlake.format.schema import SchemaManager
from lsmlake.format.types import from_arrow_type, parse_schema_fields, parse_type, to_arrow_type
from lsmlake.fs.file_io import FileIO
from lsmlake.metastore.request_ids import part_request_id
from lsmlake.proto_gen.lsmlake.v1 import (
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    compactor_pb2,
    compactor_pb2_grpc,
    writer_pb2,
    writer_pb2_grpc,
)
from lsmlake.rpc.convert import KIND_FROM_PROTO, file_from_proto, index_from_proto
from lsmlake.rpc.security import ChannelSecurity
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split

CHUNK_BYTES = 4 << 20  # bytes of Arrow IPC per Write message, well under gRPC's message limit
MAX_MESSAGE_BYTES = 64 << 20  # what the services accept per message
DEFAULT_MAX_ROWS = 500_000  # rows per Write request
DEFAULT_MAX_REQUEST_BYTES = 64 << 20  # Arrow bytes per Write request (the writer refuses more than 256 MiB)
JSON_BATCH_BYTES = 8 << 20  # JSON text per WriteRows request

# gRPC status -> the lsmlake error the caller handles (the inverse of `rpc_errors`); others are LakeError.
# DEADLINE_EXCEEDED is "unavailable": retry, knowing that a timed-out write may have been committed.
_ERRORS: dict[grpc.StatusCode, type[LakeError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidInputError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidInputError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: BackPressureError,
    grpc.StatusCode.FAILED_PRECONDITION: CommitConflictError,
    grpc.StatusCode.ABORTED: CommitRetryExhaustedError,
    grpc.StatusCode.UNAVAILABLE: ServiceUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: ServiceUnavailableError,
}

R = TypeVar("R")


def lake_error(e: grpc.RpcError) -> LakeError:
    """The lsmlake error for a failed call, with the server's message."""
    code = e.code() if hasattr(e, "code") else None
    details = (e.details() if hasattr(e, "details") else None) or str(e)
    cls = _ERRORS.get(code, LakeError) if isinstance(code, grpc.StatusCode) else LakeError
    if cls in (LakeError, PermissionDeniedError) and isinstance(code, grpc.StatusCode):
        details = f"{code.name}: {details}"  # refusals name their status (docs/security.md)
    return cls(details)


# -- value types -------------------------------------------------------------------------------

@dataclass(frozen=True)
class TableInfo:
    """A table as the catalog describes it."""

    identifier: str
    columns: tuple[tuple[str, str], ...]  # (name, Paimon SQL type)
    primary_keys: tuple[str, ...]
    partition_keys: tuple[str, ...]
    options: Mapping[str, str]
    schema_id: int
    latest_snapshot_id: int | None
    location: str

    @staticmethod
    def from_proto(p: catalog_pb2.TableInfo) -> TableInfo:
        return TableInfo(f"{p.table.database}.{p.table.table}", tuple((c.name, c.type) for c in p.columns),
                         tuple(p.primary_keys), tuple(p.partition_keys), dict(p.options), p.schema_id,
                         p.latest_snapshot_id if p.HasField("latest_snapshot_id") else None, p.location)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The columns in the Arrow types lsmlake stores them as."""
        return pa.schema([pa.field(n, to_arrow_type(parse_type(t))) for n, t in self.columns])


@dataclass(frozen=True)
class WriteResult:
    """What a write committed: the newest snapshot holding its rows, and how many rows it sent.

    `already_written`: the write's request id had been committed before (by an earlier attempt), so
    this call wrote nothing; `snapshot_id` is then the earlier attempt's snapshot."""

    snapshot_id: int
    rows: int
    already_written: bool = False


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot of a table, without its file lists."""

    id: int
    schema_id: int
    commit_kind: str  # APPEND, COMPACT, OVERWRITE, ANALYZE
    commit_user: str
    commit_identifier: int
    time_millis: int
    total_record_count: int
    delta_record_count: int
    properties: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def from_proto(p: common_pb2.Snapshot) -> SnapshotInfo:
        return SnapshotInfo(p.id, p.schema_id, KIND_FROM_PROTO.get(p.commit_kind, "UNKNOWN"), p.commit_user,
                            p.commit_identifier, p.time_millis, p.total_record_count, p.delta_record_count,
                            dict(p.properties))


@dataclass(frozen=True)
class ExpireResult:
    """What an expiration removed."""

    expired_snapshot_ids: tuple[int, ...]
    deleted_data_files: int
    deleted_metadata_files: int


@dataclass(frozen=True)
class BucketCompaction:
    """A bucket a waited compaction compacted: by plan `plan_id` in COMPACT snapshot `snapshot_id`, or, with
    `plan_id` None, found already compact in snapshot `snapshot_id`."""

    partition: Mapping[str, str]  # partition values as text by column (the form `compact(partition=...)` takes)
    bucket: int
    plan_id: str | None
    snapshot_id: int


@dataclass(frozen=True)
class NotCompacted:
    """A bucket a compaction did not compact, and why (owned by another compactor, plan failed, timed out)."""

    partition: Mapping[str, str]
    bucket: int
    reason: str


@dataclass(frozen=True)
class CompactResult:
    """What a compaction trigger did: buckets queued here or owned elsewhere, and (when waited for) the outcome
    of each bucket.

    `request_snapshot_id` is the table's latest snapshot when the trigger arrived; its buckets are the ones
    named. A waited full compaction lists a bucket in `compacted` only once every file it held in that
    snapshot is rewritten into one sorted run on the highest level (level-0 files committed later may sit
    beside it); every other named bucket is in `not_compacted` with the reason. `wait_limit_s` is how long
    the compactor was prepared to wait (the call's deadline less a margin); `timed_out` says it was reached.
    """

    buckets_queued: int
    buckets_elsewhere: int
    plan_ids: tuple[str, ...]
    snapshot_ids: tuple[int, ...]
    request_snapshot_id: int = 0
    compacted: tuple[BucketCompaction, ...] = ()
    not_compacted: tuple[NotCompacted, ...] = ()
    wait_limit_s: float | None = None
    timed_out: bool = False

    @property
    def complete(self) -> bool:
        """Whether every named bucket was compacted (meaningful for a waited compaction)."""
        return not self.not_compacted


@dataclass(frozen=True)
class CompactionPlanInfo:
    """One compaction plan on a table's timeline."""

    plan_id: str
    state: str  # REQUESTED, INFLIGHT, COMPLETED, ROLLED_BACK, ABANDONED
    full: bool
    buckets: int
    base_snapshot_id: int
    committed_snapshot_id: int | None
    owner: str
    attempts: int
    reason: str
    requested_at_ms: int
    finished_at_ms: int

    @staticmethod
    def from_proto(p: catalog_pb2.CompactionPlan) -> CompactionPlanInfo:
        return CompactionPlanInfo(
            p.plan_id, catalog_pb2.CompactionPlanState.Name(p.state).removeprefix("COMPACTION_PLAN_STATE_"),
            p.full, len(p.units), p.base_snapshot_id,
            p.committed_snapshot_id if p.HasField("committed_snapshot_id") else None,
            p.owner, p.attempts, p.reason, p.requested_at_ms, p.finished_at_ms)


# -- conversions -------------------------------------------------------------------------------

def _ident(identifier: str) -> common_pb2.TableIdentifier:
    db, name = split_identifier(identifier)
    return common_pb2.TableIdentifier(database=db, table=name)


def _columns(schema: str | pa.Schema) -> list[catalog_pb2.Column]:
    if isinstance(schema, pa.Schema):
        return [catalog_pb2.Column(name=f.name, type=from_arrow_type(f.type, f.nullable).sql()) for f in schema]
    if not isinstance(schema, str):
        raise InvalidInputError(f"schema must be a column list such as 'id BIGINT NOT NULL, v STRING' or a "
                                f"pyarrow.Schema, not {type(schema).__name__}")
    return [catalog_pb2.Column(name=f.name, type=f.type.sql()) for f in parse_schema_fields(schema)]


def _from_rows(rows: Sequence[Mapping[str, Any]], info: TableInfo) -> pa.Table:
    """Rows as dicts -> Arrow, typed by the table's columns (unknown columns keep an inferred type)."""
    types = {f.name: f.type for f in info.arrow_schema}
    names = list(dict.fromkeys(k for r in rows for k in r))
    arrays = []
    for n in names:
        values = [r.get(n) for r in rows]
        try:
            arrays.append(pa.array(values, type=types.get(n)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            raise InvalidInputError(f"column {n!r}: {e}") from None
    return pa.Table.from_arrays(arrays, names=names)


def _is_pandas(data: Any) -> bool:
    return type(data).__module__.split(".")[0] == "pandas"


def _to_arrow(data: Any, table_info: Callable[[], TableInfo]) -> pa.Table:
    """A pyarrow Table, RecordBatch, pandas DataFrame or list of dicts as one Arrow table."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if _is_pandas(data):
        try:
            import pandas  # noqa: F401  (pyarrow's conversion needs it)
        except ImportError:
            raise InvalidInputError("writing a pandas DataFrame needs pandas, which is not installed") from None
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, Sequence) and not isinstance(data, str | bytes) and all(isinstance(r, Mapping) for r in data):
        return _from_rows(data, table_info())
    raise InvalidInputError(f"data must be a pyarrow Table or RecordBatch, a pandas DataFrame (needs pandas) or a "
                            f"list of dicts, not {type(data).__name__}")


def _ipc_chunks(data: pa.Table, chunk_bytes: int) -> Iterator[bytes]:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as w:
        w.write_table(data)
    buf = sink.getvalue()
    for offset in range(0, buf.size, chunk_bytes):
        yield buf.slice(offset, min(chunk_bytes, buf.size - offset)).to_pybytes()


def _json_value(v: Any) -> Any:
    """A value in the text form the writer's JSON decoding takes (`ingest/values.py`)."""
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.datetime):
        return v.isoformat()  # an aware value keeps its offset and is stored in UTC
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, Mapping):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_value(x) for x in v]
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def _json_rows(rows: Sequence[Mapping[str, Any]], row_kind_column: str | None) -> list[str]:
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise InvalidInputError(f"rows[{i}] must be a dict, not {type(r).__name__}")
        if row_kind_column and row_kind_column in r:
            r = {("_row_kind" if k == row_kind_column else k): v for k, v in r.items()}
        try:
            out.append(json.dumps(r, default=_json_value, allow_nan=True))
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"rows[{i}]: {e}") from None
    return out


# Arrow types whose literals round-trip through text as the catalog parses them (a cast from string).
def _plannable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
            or pa.types.is_decimal(t) or pa.types.is_date32(t) or (pa.types.is_timestamp(t) and t.tz is None))


def _where_terms(where: Mapping[str, Any], info: TableInfo) -> tuple[list[Term], list[catalog_pb2.PredicateTerm],
                                                                      list[catalog_pb2.PredicateTerm]]:
    """Equality terms with literals typed like their columns; and the (partition, key) filter terms to plan with."""
    types = {f.name: f.type for f in info.arrow_schema}
    terms: list[Term] = []
    part: list[catalog_pb2.PredicateTerm] = []
    keys: list[catalog_pb2.PredicateTerm] = []
    for column, value in where.items():
        if column not in types:
            raise InvalidInputError(f"where column {column!r} is not a column of table {info.identifier}")
        target = part if column in info.partition_keys else keys
        if value is None:
            terms.append(Term(column, "is_null"))
            target.append(catalog_pb2.PredicateTerm(column=column, op=catalog_pb2.PREDICATE_OP_IS_NULL))
            continue
        t = types[column]
        try:
            scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value)
            if not scalar.type.equals(t):
                scalar = scalar.cast(t)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as e:
            raise InvalidInputError(f"where value {value!r} does not fit column {column!r} ({t}): {e}") from None
        terms.append(Term(column, "=", scalar.as_py()))
        if _plannable(t):  # other values only filter rows; planning just prunes less
            text = scalar.cast(pa.string()).as_py()
            target.append(catalog_pb2.PredicateTerm(column=column, op=catalog_pb2.PREDICATE_OP_EQ, value=text))
    return terms, part, keys


def _split_from_proto(p: common_pb2.Split, table: FileStoreTable) -> Split:
    part_types = table.schema.types_of(table.schema.partition_keys)
    dv = index_from_proto(p.deletion_vectors, p.partition, p.bucket) if p.HasField("deletion_vectors") else None
    return Split(p.partition, tuple(deserialize_row(p.partition, part_types)), p.bucket, p.total_buckets,
                 tuple(file_from_proto(f) for f in p.files), p.snapshot_id, p.raw_convertible, dv)


# -- the client --------------------------------------------------------------------------------

class Client:
    """A connection to lsmlake's catalog, and optionally its writer and compactor services.

    Args:
        catalog: `host:port` of the catalog service.
        writer: `host:port` of a writer service; needed by `write` and `write_rows`.
        compactor: `host:port` of a compactor service; needed by `compact`.
        warehouse: the warehouse folder or URI as this process sees it; when None, scans read each
            table at the location the catalog reports (which must then be reachable from here).
        timeout_s: deadline of each call.
        token: bearer token sent with every call, for services that check tokens (docs/security.md).
        tls_ca: connect over TLS, trusting this CA certificate (PEM file).
        tls_cert, tls_key: client certificate and key (PEM files), for services that require mutual TLS.
        tls: connect over TLS trusting the system's root certificates (implied by `tls_ca` and `tls_cert`).
    """

    def __init__(self, catalog: str = "127.0.0.1:50051", writer: str | None = None, compactor: str | None = None,
                 warehouse: str | None = None, timeout_s: float = 60, *, token: str | None = None,
                 tls_ca: str | None = None, tls_cert: str | None = None, tls_key: str | None = None,
                 tls: bool = False) -> None:
        security = ChannelSecurity(tls_ca, tls_cert, tls_key, token, tls)
        options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        self.timeout_s = timeout_s
        self.warehouse = warehouse
        self._channels: list[grpc.Channel] = []

        def channel(target: str) -> grpc.Channel:
            ch = security.open_channel(target, options=options)
            self._channels.append(ch)
            return ch

        self._catalog = catalog_pb2_grpc.CatalogServiceStub(channel(catalog))
        self._writer = writer_pb2_grpc.WriterServiceStub(channel(writer)) if writer else None
        self._compactor = compactor_pb2_grpc.CompactorServiceStub(channel(compactor)) if compactor else None

    def close(self) -> None:
        for ch in self._channels:
            ch.close()
        self._channels.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _call(self, method: Callable[..., R], request: Any, timeout_s: float | None = None) -> R:
        try:
            return method(request, timeout=timeout_s or self.timeout_s)
        except grpc.RpcError as e:
            raise lake_error(e) from e

    # -- databases and tables ------------------------------------------------------------------

    def create_database(self, name: str, ignore_if_exists: bool = True) -> bool:
        """Create a database; False when it already existed."""
        req = catalog_pb2.CreateDatabaseRequest(name=name, ignore_if_exists=ignore_if_exists)
        return self._call(self._catalog.CreateDatabase, req).created

    def list_databases(self) -> list[str]:
        return list(self._call(self._catalog.ListDatabases, catalog_pb2.ListDatabasesRequest()).databases)

    def drop_database(self, name: str, cascade: bool = False, ignore_if_not_exists: bool = False) -> bool:
        """Drop a database (with `cascade`, its tables too); False when it did not exist."""
        req = catalog_pb2.DropDatabaseRequest(name=name, cascade=cascade, ignore_if_not_exists=ignore_if_not_exists)
        return self._call(self._catalog.DropDatabase, req).dropped

    def create_table(self, identifier: str, schema: str | pa.Schema, primary_keys: Sequence[str] = (),
                     partition_keys: Sequence[str] = (), options: Mapping[str, str] | None = None,
                     ignore_if_exists: bool = False) -> TableInfo:
        """Create table `db.t` from a column list (`"id BIGINT NOT NULL, v STRING"`) or a pyarrow.Schema."""
        req = catalog_pb2.CreateTableRequest(
            table=_ident(identifier), columns=_columns(schema), primary_keys=list(primary_keys),
            partition_keys=list(partition_keys), options={k: str(v) for k, v in (options or {}).items()},
            ignore_if_exists=ignore_if_exists)
        return TableInfo.from_proto(self._call(self._catalog.CreateTable, req).table)

    def table(self, identifier: str) -> TableInfo:
        """Describe a table; NotFoundError when there is none."""
        req = catalog_pb2.GetTableRequest(table=_ident(identifier))
        return TableInfo.from_proto(self._call(self._catalog.GetTable, req).table)

    def list_tables(self, database: str) -> list[str]:
        req = catalog_pb2.ListTablesRequest(database=database)
        return list(self._call(self._catalog.ListTables, req).tables)

    def drop_table(self, identifier: str, ignore_if_not_exists: bool = False) -> bool:
        """Drop a table and its files; False when it did not exist."""
        req = catalog_pb2.DropTableRequest(table=_ident(identifier), ignore_if_not_exists=ignore_if_not_exists)
        return self._call(self._catalog.DropTable, req).dropped

    def alter_table(self, identifier: str, *, add_columns: str | Sequence[tuple[str, str]] = (),
                    rename_columns: Mapping[str, str] | None = None, set_options: Mapping[str, str] | None = None,
                    remove_options: Sequence[str] = ()) -> TableInfo:
        """Change a table as one new schema, all changes or none: added columns (nullable), then renames
        (old -> new), then options set and removed."""
        if isinstance(add_columns, str):
            added = [(f.name, f.type.sql()) for f in parse_schema_fields(add_columns)]
        else:
            added = list(add_columns)
        changes = [catalog_pb2.SchemaChange(add_column=catalog_pb2.AddColumn(name=n, type=t)) for n, t in added]
        changes += [catalog_pb2.SchemaChange(rename_column=catalog_pb2.RenameColumn(old_name=o, new_name=n))
                    for o, n in (rename_columns or {}).items()]
        changes += [catalog_pb2.SchemaChange(set_option=catalog_pb2.SetOption(key=k, value=str(v)))
                    for k, v in (set_options or {}).items()]
        changes += [catalog_pb2.SchemaChange(remove_option=catalog_pb2.RemoveOption(key=k)) for k in remove_options]
        req = catalog_pb2.AlterTableRequest(table=_ident(identifier), changes=changes)
        return TableInfo.from_proto(self._call(self._catalog.AlterTable, req).table)

    # -- writes --------------------------------------------------------------------------------

    def _writer_stub(self) -> writer_pb2_grpc.WriterServiceStub:
        if self._writer is None:
            raise InvalidInputError("this Client has no writer service: pass writer='host:port'")
        return self._writer

    def write(self, identifier: str, data: Any, *, row_kind_column: str | None = None, commit_now: bool = False,
              request_id: str | None = None, max_rows_per_request: int = DEFAULT_MAX_ROWS,
              max_bytes_per_request: int = DEFAULT_MAX_REQUEST_BYTES) -> WriteResult:
        """Write rows through the writer service; returns once they are in a committed snapshot.

        `data` is a pyarrow Table or RecordBatch, a pandas DataFrame or a list of dicts. The row-kind column
        (`_row_kind`, or `row_kind_column`) holds `+I`, `-U`, `+U`, `-D` and is not stored. `commit_now`
        commits without waiting for the writer's group-commit interval. Empty data sends nothing and returns
        the table's newest snapshot id (0 when it has none).

        Data larger than `max_rows_per_request` rows or `max_bytes_per_request` Arrow bytes goes in several
        requests, in order, each committed before the next is sent: the write is then not atomic, and
        after a failure the parts sent before it stay committed.

        `request_id` names the write so that it can be resent safely: call again with the same id and data
        after an error whose outcome is unknown (ServiceUnavailableError, a timeout) and the rows land once
        (the catalog remembers ids for its `--request-id-retention`, a day by default). Parts of a split
        write are named `<request_id>/<n>`.
        """
        stub = self._writer_stub()
        ident = _ident(identifier)
        table = _to_arrow(data, lambda: self.table(identifier))
        if table.num_rows == 0:  # nothing to commit: the table's newest snapshot, without a request
            return WriteResult(self.table(identifier).latest_snapshot_id or 0, 0)
        per_row = max(1, table.nbytes // max(1, table.num_rows))
        step = max(1, min(max_rows_per_request, max_bytes_per_request // per_row))
        parts = range(0, table.num_rows, step)

        def requests(n: int, part: pa.Table) -> Iterator[writer_pb2.WriteRequest]:
            yield writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(
                table=ident, row_kind_column=row_kind_column or "", options={"commit": "now"} if commit_now else {},
                request_id=part_request_id(request_id, n, len(parts))))
            for chunk in _ipc_chunks(part, CHUNK_BYTES):
                yield writer_pb2.WriteRequest(arrow_ipc_chunk=chunk)

        snapshot_id, rows, again = 0, 0, True
        for n, offset in enumerate(parts):
            reply = self._call(stub.Write, requests(n, table.slice(offset, step)))
            snapshot_id, rows = max(snapshot_id, reply.snapshot_id), rows + reply.rows_written
            again = again and reply.already_written
        return WriteResult(snapshot_id, rows, again)

    def write_rows(self, identifier: str, rows: Sequence[Mapping[str, Any]], *, row_kind_column: str | None = None,
                   commit_now: bool = False, request_id: str | None = None) -> WriteResult:
        """Write rows as JSON (`WriteRows`): dates, times and timestamps as ISO text, decimals as number text,
        bytes as base64. The writer ignores fields the table does not have. Large lists go in several requests
        (named `<request_id>/<n>` when there are several). `request_id` as for `write`."""
        stub = self._writer_stub()
        if not rows:
            raise InvalidInputError("rows must not be empty")
        texts = _json_rows(rows, row_kind_column)
        options = {"commit": "now"} if commit_now else {}
        batches: list[list[str]] = [[]]
        size = 0
        for text in texts:
            if size >= JSON_BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append(text)
            size += len(text)
        snapshot_id, written, again = 0, 0, True
        for n, batch in enumerate(batches):
            req = writer_pb2.WriteRowsRequest(table=_ident(identifier), rows_json=batch, options=options,
                                              request_id=part_request_id(request_id, n, len(batches)))
            reply = self._call(stub.WriteRows, req)
            snapshot_id, written = max(snapshot_id, reply.snapshot_id), written + reply.rows_written
            again = again and reply.already_written
        return WriteResult(snapshot_id, written, again)

    # -- reads ---------------------------------------------------------------------------------

    def _open(self, info: TableInfo) -> FileStoreTable:
        """The table's files through lsmlake's library: under `warehouse` when given, else at its location."""
        if self.warehouse is not None:
            return FileSystemCatalog(self.warehouse).get_table(info.identifier)
        fio, path = FileIO.for_path(info.location)
        schema = SchemaManager(fio, path).latest()
        if schema is None:
            raise NotFoundError(f"table {info.identifier} has no schema at {info.location}")
        return FileStoreTable(fio, path, info.identifier, schema)

    def scan(self, identifier: str, *, snapshot_id: int | None = None, where: Mapping[str, Any] | None = None,
             columns: Sequence[str] | None = None) -> pa.Table:
        """The table's rows at a snapshot (the newest by default), merged, as an Arrow table.

        1. the catalog plans the splits (`PlanScan`), pruning partitions and files by `where`;
        2. the splits are read from the warehouse with lsmlake's reader (merge-on-read, deletion vectors);
        3. rows are kept where every `where` column equals its value (None: is null), then `columns` selected.
        """
        info = self.table(identifier)
        terms, part, keys = _where_terms(where or {}, info)
        req = catalog_pb2.PlanScanRequest(table=_ident(identifier), partition_filter=part, key_filter=keys)
        if snapshot_id is not None:
            req.snapshot_id = snapshot_id
        plan = self._call(self._catalog.PlanScan, req)
        table = self._open(info)
        splits = [_split_from_proto(s, table) for s in plan.splits]
        return table.new_read(list(columns) if columns is not None else None, Predicate(tuple(terms))).read(splits)

    # -- snapshots and maintenance -------------------------------------------------------------

    def snapshots(self, identifier: str) -> list[SnapshotInfo]:
        """The kept snapshots, oldest first."""
        req = catalog_pb2.ListSnapshotsRequest(table=_ident(identifier))
        return [SnapshotInfo.from_proto(s) for s in self._call(self._catalog.ListSnapshots, req).snapshots]

    def latest_snapshot(self, identifier: str) -> SnapshotInfo | None:
        """The newest snapshot; None while the table has none."""
        reply = self._call(self._catalog.LatestSnapshot, catalog_pb2.LatestSnapshotRequest(table=_ident(identifier)))
        return SnapshotInfo.from_proto(reply.snapshot) if reply.HasField("snapshot") else None

    def expire(self, identifier: str, *, retain_min: int | None = None, retain_max: int | None = None,
               older_than_ms: int | None = None, max_deletes: int | None = None) -> ExpireResult:
        """Expire old snapshots and the files only they reference; unset limits use the table's `snapshot.*` options.
        `older_than_ms` keeps snapshots younger than that (within the two retain limits)."""
        req = catalog_pb2.ExpireSnapshotsRequest(table=_ident(identifier))
        for name, value in (("retain_min", retain_min), ("retain_max", retain_max),
                            ("time_retained_ms", older_than_ms), ("max_deletes", max_deletes)):
            if value is not None:
                setattr(req, name, value)
        reply = self._call(self._catalog.ExpireSnapshots, req)
        return ExpireResult(tuple(reply.expired_snapshot_ids), reply.deleted_data_files, reply.deleted_metadata_files)

    def compact(self, identifier: str, full: bool = False, wait: bool = True, *,
                partition: Mapping[str, Any] | None = None, bucket: int | None = None,
                timeout_s: float | None = None) -> CompactResult:
        """Ask the compactor service to compact the table (or one partition / bucket) now.

        With `wait`, returns once every named bucket the compactor owns is compacted or known not to be:
        for a full compaction, every file a bucket held when the request arrived is then rewritten into one
        sorted run (see `CompactResult`). The wait is bounded by the call's deadline, `timeout_s` (default:
        the client's `timeout_s`): the compactor answers a margin (2 s, or 10% of a shorter deadline) before
        it, listing the unfinished buckets as timed out. Buckets another compactor replica owns are counted
        (`buckets_elsewhere`) and listed in `not_compacted`; trigger them there.
        """
        if self._compactor is None:
            raise InvalidInputError("this Client has no compactor service: pass compactor='host:port'")
        req = compactor_pb2.TriggerCompactionRequest(
            table=_ident(identifier), partition={k: str(v) for k, v in (partition or {}).items()}, full=full,
            wait=wait)
        if bucket is not None:
            req.bucket = bucket
        reply = self._call(self._compactor.TriggerCompaction, req, timeout_s)
        return CompactResult(
            reply.buckets_queued, reply.buckets_elsewhere, tuple(reply.plan_ids), tuple(reply.snapshot_ids),
            reply.request_snapshot_id,
            tuple(BucketCompaction(dict(c.partition_values), c.bucket, c.plan_id or None, c.snapshot_id)
                  for c in reply.compacted),
            tuple(NotCompacted(dict(n.partition_values), n.bucket, n.reason) for n in reply.not_compacted),
            reply.wait_limit_ms / 1000 if wait and reply.buckets_queued else None, reply.timed_out)

    def timeline(self, identifier: str, states: Sequence[str] = ()) -> list[CompactionPlanInfo]:
        """The table's compaction plans, oldest first; `states` (e.g. "INFLIGHT") keeps only those."""
        try:
            wanted = [catalog_pb2.CompactionPlanState.Value(f"COMPACTION_PLAN_STATE_{s.upper()}") for s in states]
        except ValueError:
            raise InvalidInputError(f"states {list(states)}: use REQUESTED, INFLIGHT, COMPLETED, ROLLED_BACK "
                                    "or ABANDONED") from None
        req = catalog_pb2.ListCompactionPlansRequest(table=_ident(identifier), states=wanted)
        return [CompactionPlanInfo.from_proto(p) for p in self._call(self._catalog.ListCompactionPlans, req).plans]
