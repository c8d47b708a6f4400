"""Writing rows through the writer service, and committing files written directly into a table.

`write` sends Arrow IPC (`WriterService.Write`), `write_rows` JSON (`WriteRows`); both commit before they
return. `commit` commits data files a caller wrote into the table's folder itself (as Spark's executors
do) through the catalog's `Commit`.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lsmlake.client.connection import Connection
from lsmlake.client.tables import TableInfo, Tables, table_ident
from lsmlake.errors import InvalidInputError
from lsmlake.metastore.request_ids import part_request_id
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2, writer_pb2
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.table.commit import CommitResult
from lsmlake.table.write import CommitMessage

CHUNK_BYTES = 4 << 20  # bytes of Arrow IPC per Write message, well under gRPC's message limit
DEFAULT_MAX_ROWS = 500_000  # rows per Write request
DEFAULT_MAX_REQUEST_BYTES = 64 << 20  # Arrow bytes per Write request (the writer refuses more than 256 MiB)
JSON_BATCH_BYTES = 8 << 20  # JSON text per WriteRows request


@dataclass(frozen=True, repr=False)
class WriteResult:
    """What a write committed: the newest snapshot holding its rows, and how many rows it sent.

    `already_written`: the write's request id had been committed before (by an earlier attempt), so
    this call wrote nothing; `snapshot_id` is then the earlier attempt's snapshot."""

    snapshot_id: int
    rows: int
    already_written: bool = False

    def __repr__(self) -> str:
        again = ", already_written=True" if self.already_written else ""
        return f"WriteResult(snapshot_id={self.snapshot_id}, rows={self.rows}{again})"


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



class Writes:
    """Rows through the writer service, files through the catalog (a part of `Client`)."""

    def __init__(self, conn: Connection, tables: Tables) -> None:
        self._conn = conn
        self._tables = tables

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
        after an error whose outcome is unknown (CommitStateUnknownError: the writer did not answer in time or
        could not be reached) and the rows land once (the catalog remembers ids for its
        `--request-id-retention`, a day by default). Parts of a split write are named `<request_id>/<n>`.
        """
        stub = self._conn.writer_stub()
        ident = table_ident(identifier)
        table = _to_arrow(data, lambda: self._tables.table(identifier))
        if table.num_rows == 0:  # nothing to commit: the table's newest snapshot, without a request
            return WriteResult(self._tables.table(identifier).latest_snapshot_id or 0, 0)
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
            reply = self._conn.call(stub.Write, requests(n, table.slice(offset, step)), changes_state=True)
            snapshot_id, rows = max(snapshot_id, reply.snapshot_id), rows + reply.rows_written
            again = again and reply.already_written
        return WriteResult(snapshot_id, rows, again)

    def write_rows(self, identifier: str, rows: Sequence[Mapping[str, Any]], *, row_kind_column: str | None = None,
                   commit_now: bool = False, request_id: str | None = None) -> WriteResult:
        """Write rows as JSON (`WriteRows`): dates, times and timestamps as ISO text, decimals as number text,
        bytes as base64. The writer ignores fields the table does not have. Large lists go in several requests
        (named `<request_id>/<n>` when there are several). `request_id` as for `write`."""
        stub = self._conn.writer_stub()
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
            req = writer_pb2.WriteRowsRequest(table=table_ident(identifier), rows_json=batch, options=options,
                                              request_id=part_request_id(request_id, n, len(batches)))
            reply = self._conn.call(stub.WriteRows, req, changes_state=True)
            snapshot_id, written = max(snapshot_id, reply.snapshot_id), written + reply.rows_written
            again = again and reply.already_written
        return WriteResult(snapshot_id, written, again)

    def commit(self, identifier: str, messages: Sequence[CommitMessage], *, commit_user: str,
               commit_identifier: int = 1, overwrite: bool = False,
               partitions: Sequence[bytes] | None = None) -> CommitResult:
        """Commit data files already written into the table's folder (by lsmlake's table writer on a table from
        `open_table`, as Spark's executors do) as one snapshot, through the catalog.

        APPEND by default; with `overwrite`, an OVERWRITE replacing `partitions` (BinaryRow bytes, as in
        `CommitMessage.partition`), or every partition when None. After CommitStateUnknownError the snapshot
        may exist and the files must stay: commit again with the same `commit_user` and `commit_identifier`,
        which the catalog answers with the first attempt's snapshot (`already_committed`) rather than
        applying it twice. Any other error means nothing was committed.
        """
        req = catalog_pb2.CommitRequest(
            table=table_ident(identifier), commit_user=commit_user, commit_identifier=commit_identifier,
            kind=common_pb2.COMMIT_KIND_OVERWRITE if overwrite else common_pb2.COMMIT_KIND_APPEND,
            changes=[changes_to_proto(m) for m in messages])
        if overwrite and partitions is None:
            req.overwrite_all_partitions = True
        elif overwrite and partitions is not None:
            req.overwrite_partitions.extend(partitions)
        reply = self._conn.call(self._conn.catalog.Commit, req, changes_state=True)
        return CommitResult(int(reply.snapshot_id), bool(reply.already_committed))
