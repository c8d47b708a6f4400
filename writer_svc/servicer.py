"""`WriterService`: Arrow IPC streams and JSON rows in, a reply once the rows are in a committed snapshot."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping

import grpc
import pyarrow as pa

from lsmlake.errors import BackPressureError, InvalidInputError
from lsmlake.format.row_kind import ROW_KIND_COLUMN
from lsmlake.ingest.json_rows import rows_from_json
from lsmlake.metastore.request_ids import check_request_ids
from lsmlake.proto_gen.lsmlake.v1 import common_pb2, writer_pb2, writer_pb2_grpc
from lsmlake.rpc.errors import guarded
from writer_svc.metrics import WriterMetrics
from writer_svc.stream_budget import DEFAULT_BUDGET_BYTES, DEFAULT_MAX_MESSAGES, StreamBudget, StreamBuffer
from writer_svc.tables import Tables

_log = logging.getLogger(__name__)

DEFAULT_DEADLINE_S = 60.0
_OPTIONS = {"commit": ("now", "interval")}  # per-request settings and their accepted values


def _check_options(options: Mapping[str, str]) -> bool:
    """Whether the request asks to commit now; InvalidInputError naming an unknown key or value."""
    for k, v in options.items():
        if k not in _OPTIONS:
            raise InvalidInputError(f"unknown write option {k!r}; known: {', '.join(sorted(_OPTIONS))}")
        if v not in _OPTIONS[k]:
            raise InvalidInputError(f"write option {k}={v!r}: use one of {', '.join(_OPTIONS[k])}")
    return options.get("commit") == "now"


def _check_request_id(request_id: str) -> None:
    if request_id:  # empty: the write has no id
        check_request_ids([request_id])


def _table_id(t: common_pb2.TableIdentifier) -> str:
    from lsmlake.rpc.convert import table_id

    return table_id(t)


class WriterService(writer_pb2_grpc.WriterServiceServicer):
    def __init__(self, tables: Tables, metrics: WriterMetrics, max_request_bytes: int,
                 max_write_messages: int = DEFAULT_MAX_MESSAGES,
                 max_buffered_write_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.tables = tables
        self.metrics = metrics
        self.max_request_bytes = max_request_bytes
        if max_write_messages <= 0:
            raise ValueError(f"max_write_messages must be positive, not {max_write_messages}")
        self.max_write_messages = max_write_messages
        self.stream_budget = StreamBudget(max_buffered_write_bytes)  # shared by every Write stream of the server

    def _deadline(self, context: grpc.ServicerContext) -> float:
        remaining = context.time_remaining()
        return time.monotonic() + (DEFAULT_DEADLINE_S if remaining is None else max(0.0, remaining))

    def _write(self, rpc: str, table_id: str, data: pa.Table, now: bool, request_id: str,
               context: grpc.ServicerContext) -> writer_pb2.WriteResponse:
        deadline = self._deadline(context)
        try:
            group, again = self.tables.write(table_id, data, deadline, request_id)
        except BackPressureError:
            self.metrics.requests.labels(rpc, "stalled").inc()
            raise
        except Exception:
            self.metrics.requests.labels(rpc, "rejected").inc()
            raise
        if now and not again:
            self.tables.commit_soon(table_id)
        sid = group.wait(max(0.0, deadline - time.monotonic()) + 1.0)
        self.metrics.requests.labels(rpc, "already_written" if again else "ok").inc()
        return writer_pb2.WriteResponse(snapshot_id=sid, rows_written=data.num_rows, already_written=again)

    @guarded
    def Write(self, request_iterator: Iterator[writer_pb2.WriteRequest],
              context: grpc.ServicerContext) -> writer_pb2.WriteResponse:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("payload") != "header":
            raise InvalidInputError("the first message of a Write stream must be a header naming the table")
        header = first.header
        table_id = _table_id(header.table)
        now = _check_options(header.options)
        _check_request_id(header.request_id)
        # the stream's bytes count against the process's budget until the request ends, however it ends
        with StreamBuffer(self.stream_budget, self.max_request_bytes, self.max_write_messages) as stream:
            try:
                for msg in request_iterator:
                    if msg.WhichOneof("payload") != "arrow_ipc_chunk":
                        raise InvalidInputError("only the first message of a Write stream may be a header")
                    stream.add(msg.arrow_ipc_chunk)
            except BackPressureError:
                self.metrics.requests.labels("Write", "rejected").inc()
                raise
            self.metrics.bytes_in.labels("grpc").inc(len(stream))
            try:  # zero-copy: the decoded columns may point into the stream's buffer
                data = pa.ipc.open_stream(pa.py_buffer(stream.data)).read_all()
            except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
                raise InvalidInputError(f"the Write stream is not a valid Arrow IPC stream: {e}") from e
            kind_col = header.row_kind_column or ROW_KIND_COLUMN
            if kind_col != ROW_KIND_COLUMN:
                if kind_col not in data.column_names:
                    raise InvalidInputError(f"row_kind_column {kind_col!r} is not a column of the stream")
                if ROW_KIND_COLUMN in data.column_names:
                    raise InvalidInputError(
                        f"the stream has both {ROW_KIND_COLUMN!r} and row_kind_column {kind_col!r}")
                data = data.rename_columns([ROW_KIND_COLUMN if c == kind_col else c for c in data.column_names])
            return self._write("Write", table_id, data, now, header.request_id, context)

    @guarded
    def WriteRows(self, request: writer_pb2.WriteRowsRequest,
                  context: grpc.ServicerContext) -> writer_pb2.WriteResponse:
        table_id = _table_id(request.table)
        now = _check_options(request.options)
        _check_request_id(request.request_id)
        size = sum(len(r) for r in request.rows_json)
        self.metrics.bytes_in.labels("grpc").inc(size)
        if not request.rows_json:
            raise InvalidInputError("rows_json must not be empty")
        rows_json = list(request.rows_json)
        data = self.tables.decode(table_id, lambda schema: rows_from_json(schema, rows_json, table_id))
        return self._write("WriteRows", table_id, data, now, request.request_id, context)
