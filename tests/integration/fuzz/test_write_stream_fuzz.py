"""Huge chunked writes, fuzzed: `Write` streams of very many tiny or empty chunks, of too many bytes, and streams
sent while another stream holds part of the writer's budget, against a model of the three stream limits
(messages per stream, bytes per stream, bytes of all streams at once).

The writer runs with small limits. The oracle: a stream the model says passes a limit is refused with
RESOURCE_EXHAUSTED naming that limit, and any other stream is not; every call is OK or a clear refusal that
changed no file and no metadata row (`lake.fuzz_call`); a valid stream within the limits is written whole;
when the streams end the writer holds no byte of them; the writer stays SERVING.
"""

from __future__ import annotations

import functools
import io
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import example, given
from hypothesis import strategies as st

import tests.support.fuzz.lake as lake_module
from lsmlake.proto_gen.lsmlake.v1 import common_pb2, writer_pb2
from tests.support.fuzz.hostile import FUZZ
from tests.support.fuzz.lake import CALL_TIMEOUT_S, Lake, fuzz_call, running_lake
from tests.writer_svc.test_write_stream_bounds import capturing_servicer
from writer_svc.server import Settings as WriterSettings
from writer_svc.servicer import WriterService

MAX_MESSAGES = 500
MAX_STREAM_BYTES = 64 << 10
BUDGET = 96 << 10  # above the per-stream limit: only a stream sent while another holds bytes reaches it
LIMIT_WORDS = {"messages": "--max-write-messages", "stream bytes": "bytes; split it into several requests",
               "budget": "--max-buffered-write-bytes"}
METHOD = "/lsmlake.v1.WriterService/Write"


@dataclass
class Bounded:
    lake: Lake
    writer: WriterService  # the servicer, for its budget's bookkeeping


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bounded]:
    """The fuzzed services of `lake.running_lake`, the writer with small stream limits."""
    settings = functools.partial(WriterSettings, max_write_messages=MAX_MESSAGES, max_request_bytes=MAX_STREAM_BYTES,
                                 max_buffered_write_bytes=BUDGET)
    with ExitStack() as stack:
        with capturing_servicer() as built, mock.patch.object(lake_module, "WriterSettings", settings):
            lake = stack.enter_context(running_lake(Path(tmp_path_factory.mktemp("stream-fuzz"))))
        yield Bounded(lake, built[-1])


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _log_payload(n: int, width: int, start: int = 0) -> bytes:
    return _ipc(pa.table({"id": pa.array(range(start, start + n), pa.int64()), "v": ["x" * width] * n}))


@st.composite
def log_rows(draw: Any) -> tuple[bytes, int]:
    """A valid Arrow IPC stream for db.log (an append table: no back-pressure however many commits the fuzz makes),
    from a few bytes to well past the per-stream limit, and its row count."""
    n = draw(st.sampled_from((1, 10, 700, 1_000, 3_000)))  # 12 to 52 bytes a row: up to 36, 52 or 156 KB
    return _log_payload(n, draw(st.sampled_from((0, 5, 40))), draw(st.integers(0, 10**9))), n


@dataclass(frozen=True)
class Stream:
    table: str
    payload: bytes
    rows: int | None  # rows of a valid payload, None for garbage
    chunk: int  # bytes per message
    repeat: int  # the payload sent this many times in one stream (2,000,000 two-byte copies: the case)
    empty: int  # empty chunk messages before the payload
    hog: int  # bytes another stream holds while this one is sent

    def chunks(self) -> Iterator[bytes]:
        for _ in range(self.empty):
            yield b""
        for _ in range(self.repeat):
            for i in range(0, len(self.payload), self.chunk):
                yield self.payload[i:i + self.chunk]

    def messages(self) -> Iterator[writer_pb2.WriteRequest]:
        """Lazily: a refused stream is never produced whole."""
        yield writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(
            table=common_pb2.TableIdentifier(database="db", table=self.table), options={"commit": "now"}))
        for c in self.chunks():
            yield writer_pb2.WriteRequest(arrow_ipc_chunk=c)

    def limit(self) -> str | None:
        """The model: the first limit a chunk passes, checked as the writer reads the stream."""
        size = 0
        for count, c in enumerate(self.chunks(), 1):
            if count > MAX_MESSAGES:
                return "messages"
            if size + len(c) > MAX_STREAM_BYTES:
                return "stream bytes"
            if self.hog + size + len(c) > BUDGET:
                return "budget"
            size += len(c)
        return None


@st.composite
def streams(draw: Any) -> Stream:
    """Plain streams, floods of tiny or empty chunks (around the message cap, and the issue's 2 million), streams
    of large chunks (around the per-stream limit), and streams sent while another holds part of the budget."""
    garbage = st.one_of(st.binary(max_size=64), st.just(b"ab"), log_rows().map(lambda p: p[0][:-9]))  # truncated
    payload, rows = draw(st.one_of(log_rows(), log_rows(), garbage.map(lambda g: (g, None))))
    table = draw(st.sampled_from(("log", "log", "pk", "nope")))
    kind = draw(st.sampled_from(("plain", "flood", "cap", "budget")))
    chunk, repeat, empty, hog = draw(st.sampled_from((4096, 1 << 20, 100))), 1, draw(st.sampled_from((0, 10))), 0
    if kind == "flood":
        chunk = draw(st.sampled_from((1, 2, 7)))
        repeat = draw(st.sampled_from((1, 2_000_000)))
        empty = draw(st.sampled_from((0, MAX_MESSAGES + 1, 1_000_000)))
    elif kind == "cap":  # exactly at the message cap, one below, one above
        chunk = draw(st.sampled_from((4096, 100)))
        empty = max(0, MAX_MESSAGES - -(-len(payload) // chunk) + draw(st.sampled_from((-1, 0, 1))))
    elif kind == "budget":
        payload, rows = draw(log_rows())
        hog = draw(st.sampled_from((40_000, 60_000)))
    return Stream(table, payload, rows, chunk, repeat, empty, hog)


def _wait_buffered(writer: WriterService, n: int) -> None:
    deadline = time.monotonic() + CALL_TIMEOUT_S
    while writer.stream_budget.in_use != n:
        assert time.monotonic() < deadline, f"the writer buffers {writer.stream_budget.in_use} bytes, not {n}"
        time.sleep(0.01)


def test_huge_chunked_writes(bounded: Bounded) -> None:
    lake, writer = bounded.lake, bounded.writer
    seen: Counter[str] = Counter()  # model's verdict -> outcome, printed (run with -s to see what the fuzz reached)

    small = _log_payload(10, 5, 10**10)
    at_cap = MAX_MESSAGES - -(-len(small) // 100)

    @FUZZ
    @given(stream=streams())
    # every run reaches each limit, whatever the profile draws: the 2 million 2-byte chunks, a stream
    # past the per-stream bytes, one that fits alone but not beside another's 60 KB, and exactly the cap
    @example(stream=Stream("log", b"ab", None, 2, 2_000_000, 0, 0))
    @example(stream=Stream("log", _log_payload(3_000, 40, 10**10), 3_000, 4096, 1, 0, 0))
    @example(stream=Stream("log", _log_payload(1_000, 40, 10**10), 1_000, 4096, 1, 0, 60_000))
    @example(stream=Stream("log", small, 10, 100, 1, at_cap, 0))
    @example(stream=Stream("log", small, 10, 100, 1, at_cap + 1, 0))
    def run(stream: Stream) -> None:
        go = threading.Event()
        hog = None
        if stream.hog:  # another client's stream, open and read, holding part of the budget
            hog = lake.writer.Write.future(_held(b"h" * stream.hog, go), timeout=CALL_TIMEOUT_S)
            _wait_buffered(writer, stream.hog)
        expected = stream.limit()
        failure: list[grpc.RpcError] = []

        def call() -> Any:
            try:
                return lake.writer.Write(stream.messages(), timeout=CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                failure.append(e)
                raise

        try:
            reply = fuzz_call(lake, METHOD, call)
        finally:
            go.set()
        if hog is not None:
            with pytest.raises(grpc.RpcError) as e:
                hog.result(CALL_TIMEOUT_S)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # not Arrow: never written
        assert writer.stream_budget.in_use == 0, "a stream that ended still holds bytes of the budget"
        details = failure[0].details() if failure else ""
        seen[f"{expected or 'within limits'} -> {failure[0].code().name if failure else 'OK'}"] += 1
        if expected is not None:
            assert failure and failure[0].code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (expected, details)
            assert LIMIT_WORDS[expected] in details, (expected, details)
        else:
            assert not any(w in details for w in LIMIT_WORDS.values()), details
            if stream.table == "log" and stream.rows is not None and stream.repeat == 1:
                assert reply is not None and reply.rows_written == stream.rows, details

    run()
    print("\nWrite streams:", dict(seen.most_common()))
    status = health_pb2_grpc.HealthStub(lake.channels["lsmlake.v1.WriterService"]).Check(
        health_pb2.HealthCheckRequest(), timeout=30).status
    assert status == health_pb2.HealthCheckResponse.SERVING


def _held(payload: bytes, go: threading.Event) -> Iterator[writer_pb2.WriteRequest]:
    yield writer_pb2.WriteRequest(header=writer_pb2.WriteHeader(
        table=common_pb2.TableIdentifier(database="db", table="log")))  # garbage: refused once released
    for i in range(0, len(payload), 4096):
        yield writer_pb2.WriteRequest(arrow_ipc_chunk=payload[i:i + 4096])
    go.wait(CALL_TIMEOUT_S)
