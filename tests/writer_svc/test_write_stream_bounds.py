"""Memory bounds of `Write` streams (issue 19 item 5): messages per stream, bytes per stream, and bytes buffered
by all streams of the writer at once. A writer in the test process with small limits, real gRPC on loopback.

The budget's bookkeeping is read from the servicer the server built (`capturing_servicer`), only to know when
the writer holds a stream's bytes; every assertion is on what a client sees or on the table.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.proto_gen.lsmlake.v1 import common_pb2, writer_pb2, writer_pb2_grpc
from tests.support.local_server import Local, local_server
from writer_svc import server as server_module
from writer_svc.server import Settings, WriterServer
from writer_svc.servicer import WriterService

TIMEOUT_S = 60.0
MAX_MESSAGES = 200  # chunk messages per stream
MAX_STREAM_BYTES = 1 << 20  # per stream: far above the budget, so that the budget is what refuses
BUDGET = 100_000  # bytes of all streams at once: two payloads of 5,000 rows (~40 KB each) fit, three do not
CHUNK = 4096


@contextmanager
def capturing_servicer() -> Iterator[list[WriterService]]:
    """The WriterService instances that servers built while inside."""
    built: list[WriterService] = []

    class Capturing(WriterService):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    with mock.patch.object(server_module, "WriterService", Capturing):
        yield built


def ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def ids(lo: int, hi: int) -> bytes:
    return ipc(pa.table({"id": pa.array(range(lo, hi), pa.int64())}))


def requests(ident: common_pb2.TableIdentifier, payload: bytes, chunk: int = CHUNK,
             hold: threading.Event | None = None, sent: list[int] | None = None) -> Iterator[Any]:
    """A Write stream of `payload` in chunks; with `hold`, the stream stays open after its last chunk until the
    event is set; `sent` counts the chunk messages the client produced."""
    yield writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(table=ident, options={"commit": "now"}))
    for i in range(0, len(payload), chunk):
        if sent is not None:
            sent[0] += 1
        yield writer_pb2.WriteRequest(arrow_ipc_chunk=payload[i:i + chunk])
    if hold is not None:
        assert hold.wait(TIMEOUT_S)


class Writer:
    def __init__(self, catalog: Local, server: WriterServer, servicer: WriterService) -> None:
        self.catalog = catalog
        self.server = server
        self.servicer = servicer
        self.channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
        self.stub = writer_pb2_grpc.WriterServiceStub(self.channel)
        self.ident = catalog.create_table("db", "t", [("id", "BIGINT NOT NULL")], ["id"], {"bucket": "1"})

    def buffered(self) -> int:
        return self.servicer.stream_budget.in_use

    def wait_buffered(self, n: int) -> None:
        """Until the writer holds exactly n bytes of streams (a synchronisation, not a timing assertion)."""
        deadline = time.monotonic() + TIMEOUT_S
        while self.buffered() != n:
            assert time.monotonic() < deadline, f"the writer buffers {self.buffered()} bytes, not {n}"
            time.sleep(0.01)

    def table_state(self) -> tuple[list[int], list[int]]:
        t = FileSystemCatalog(self.catalog.warehouse).get_table("db.t")
        return t.snapshots.ids(), sorted(t.to_arrow().column("id").to_pylist())

    def refusal(self, stream: Iterator[Any]) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.RpcError) as e:
            self.stub.Write(stream, timeout=TIMEOUT_S)
        return e.value.code(), e.value.details()


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    with local_server(str(tmp_path)) as cat, capturing_servicer() as built:
        server = WriterServer(Settings(warehouse=str(tmp_path), catalog=f"127.0.0.1:{cat.server.port}",
                                       commit_interval_s=0.2, max_request_bytes=MAX_STREAM_BYTES,
                                       max_write_messages=MAX_MESSAGES, max_buffered_write_bytes=BUDGET))
        server.start()
        w = Writer(cat, server, built[-1])
        try:
            yield w
        finally:
            w.channel.close()
            server.stop()


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_a_stream_of_very_many_tiny_chunks_is_refused_and_memory_stays_bounded(writer: Writer) -> None:
    """The issue's case: 2 million 2-byte chunks (4 MB counted) once grew the writer by 240 MiB, each chunk
    kept as a Python object. The stream is refused at the message cap, and the writer stops reading it."""
    sent = [0]
    before = _rss_mib()
    code, msg = writer.refusal(requests(writer.ident, b"ab" * 2_000_000, chunk=2, sent=sent))
    grown = _rss_mib() - before
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, msg)
    assert f"more than {MAX_MESSAGES} messages" in msg and "--max-write-messages" in msg, msg
    assert sent[0] < 2_000_000, "the client had to send the whole stream"
    assert grown < 100, f"the process grew by {grown:.0f} MiB"
    assert writer.buffered() == 0
    # a stream of exactly the cap is read (and refused only because its bytes are not Arrow)
    code, msg = writer.refusal(requests(writer.ident, b"ab" * MAX_MESSAGES, chunk=2))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "Arrow IPC" in msg, (code, msg)


def test_the_streams_of_the_process_share_one_budget_released_when_they_end(writer: Writer) -> None:
    a, b, c = ids(0, 5_000), ids(5_000, 10_000), ids(10_000, 15_000)
    assert len(a) + len(b) <= BUDGET < len(a) + len(b) + len(c)
    go = threading.Event()
    held = [writer.stub.Write.future(requests(writer.ident, p, hold=go), timeout=TIMEOUT_S) for p in (a, b)]
    try:
        writer.wait_buffered(len(a) + len(b))  # both streams are read, still open
        code, msg = writer.refusal(requests(writer.ident, c))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, msg)
        assert f"limit of {BUDGET} bytes for all streams at once" in msg and "--max-buffered-write-bytes" in msg
        assert writer.buffered() == len(a) + len(b)  # the refused stream gave back what it had reserved
    finally:
        go.set()
    assert [f.result(TIMEOUT_S).rows_written for f in held] == [5_000, 5_000]
    assert writer.buffered() == 0
    assert writer.stub.Write(requests(writer.ident, c), timeout=TIMEOUT_S).rows_written == 5_000
    assert writer.table_state()[1] == list(range(15_000))
    # a stream the client cancels gives its bytes back too: then one stream may take nearly the whole budget
    d, never = ids(15_000, 20_000), threading.Event()
    cancelled = writer.stub.Write.future(requests(writer.ident, d, hold=never), timeout=TIMEOUT_S)
    writer.wait_buffered(len(d))
    cancelled.cancel()
    never.set()  # lets the client's sending thread end
    writer.wait_buffered(0)
    big = ids(15_000, 27_000)
    assert len(d) + len(big) > BUDGET >= len(big)
    assert writer.stub.Write(requests(writer.ident, big), timeout=TIMEOUT_S).rows_written == 12_000
    assert writer.table_state()[1] == list(range(27_000))


def test_refused_streams_change_nothing(writer: Writer) -> None:
    writer.stub.Write(requests(writer.ident, ids(0, 10)), timeout=TIMEOUT_S)
    before = writer.table_state()
    valid = ids(100, 200)
    assert len(valid) > MAX_MESSAGES and 100 < len(valid) < BUDGET
    cases = [
        (requests(writer.ident, valid, chunk=1), "--max-write-messages"),  # valid rows, too many messages
        (requests(writer.ident, ids(100, 20_000)), "--max-buffered-write-bytes"),  # valid rows, too many bytes
    ]
    for stream, word in cases:
        code, msg = writer.refusal(stream)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and word in msg, (code, msg)
        assert writer.buffered() == 0
    go = threading.Event()  # while another stream holds most of the budget, a small valid stream is refused
    hog = writer.stub.Write.future(requests(writer.ident, b"x" * (BUDGET - 100), hold=go), timeout=TIMEOUT_S)
    try:
        writer.wait_buffered(BUDGET - 100)
        code, msg = writer.refusal(requests(writer.ident, valid))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-buffered-write-bytes" in msg, (code, msg)
    finally:
        go.set()
    with pytest.raises(grpc.RpcError) as e:
        hog.result(TIMEOUT_S)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # its bytes are not Arrow: nothing written
    assert writer.table_state() == before
    # nothing of the refused streams was buffered: the next commit holds this row alone
    writer.stub.Write(requests(writer.ident, ids(500, 501)), timeout=TIMEOUT_S)
    snapshots, rows = writer.table_state()
    assert rows == [*range(10), 500] and len(snapshots) == len(before[0]) + 1
