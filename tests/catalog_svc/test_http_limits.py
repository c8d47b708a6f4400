"""The limits of the catalog's HTTP ports (the Paimon REST API and the console), on a catalog-svc process with
TLS and a token file, as a hostile caller without a token meets them (issue 31, item 2).

The acceptance: with 200 unauthenticated slow connections open on each HTTP port (from 200 loopback peers each,
so no per-peer cap refuses them), an authorised gRPC commit and an authorised REST read each answer within 1 s,
and the catalog's memory grows by less than 100 MiB. Then the regressions, each of which the old server
(`http.server.ThreadingHTTPServer`, a thread per connection reading whatever the caller announced) failed: a GET
announcing a body is answered without reading it; a body on it is not taken into memory; a head sent a byte at
a time is cut at the head deadline; the connection over the per-peer cap is refused at accept; the public login
refuses a large body before reading it. Last, each bound on its own, on an in-process server with small limits
(keep-alive idleness, the body deadline, a body waiting unread for a worker, per-route body limits, 100-continue
only after authentication, the TLS handshake under the head deadline, mutual TLS, graceful stop).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lsmlake.auth.roles import Role
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.kafka.broker import free_port
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc, common_pb2
from lsmlake.rest.http_server import PUBLIC_BODY_BYTES, HttpSettings, JsonHttpServer, Request, Response, Route
from lsmlake.rpc.convert import changes_to_proto
from lsmlake.rpc.security import ChannelSecurity
from tests.support.catalog_http import (
    CatalogProcess,
    RssPeak,
    answer,
    catalog_process,
    close_all,
    closed_within,
    connect,
    is_open,
    peer,
)
from tests.support.certs import Certs
from tests.support.paimon_rest import call
from tests.support.security import Tokens

pytestmark = pytest.mark.integration

# the server's defaults (`lsmlake.rest.http_settings.HttpSettings`), which catalog-svc uses
HEAD_TIMEOUT_S = 10.0
PER_PEER = 64
SLOW_PER_PORT = 200  # the acceptance: 200 slow connections on each HTTP port
ANSWER_WITHIN_S = 1.0  # ... while an authorised commit and an authorised read each answer within this
GROWTH_LIMIT_MIB = 100  # ... and the catalog's memory grows by less than this
CALL_TIMEOUT_S = 30.0
NO_BODY_WAIT_S = 3.0  # an answer that needs no body comes at once; a server reading the body waits for ever
ANNOUNCED = (16 << 20) - 1  # a body size under the old server's only limit (16 MiB), which it would read
FORM = b"application/x-www-form-urlencoded"


# the token file and certificates of the security tests (one per session)


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory, certs: Certs, tokens: Tokens) -> Iterator[CatalogProcess]:
    with catalog_process(Path(tmp_path_factory.mktemp("http-limits")), tokens.file, certs.server_cert,
                         certs.server_key, certs.ca) as c:
        yield c


class Lake:
    """An authorised gRPC client of the catalog process and a table to commit to."""

    def __init__(self, cat: CatalogProcess, certs: Certs, tokens: Tokens) -> None:
        self.cat = cat
        self.warehouse = str(Path(cat.log).parent / "wh")
        self.admin = ChannelSecurity(tls_ca=certs.ca, token=tokens.admin).open_channel(f"127.0.0.1:{cat.port}")
        self.writer = ChannelSecurity(tls_ca=certs.ca, token=tokens.writer).open_channel(f"127.0.0.1:{cat.port}")
        self.ident = common_pb2.TableIdentifier(database="db", table="t")
        self.number = 0
        stub = catalog_pb2_grpc.CatalogServiceStub(self.admin)
        stub.CreateDatabase(catalog_pb2.CreateDatabaseRequest(name="db", ignore_if_exists=True),
                            timeout=CALL_TIMEOUT_S)
        stub.CreateTable(catalog_pb2.CreateTableRequest(
            table=self.ident, columns=[catalog_pb2.Column(name="id", type="BIGINT NOT NULL"),
                                       catalog_pb2.Column(name="v", type="STRING")],
            primary_keys=["id"], options={"bucket": "1"}), timeout=CALL_TIMEOUT_S)

    def commit(self) -> None:
        """Write a level-0 file with the library and commit it through gRPC as the writer."""
        self.number += 1
        w = FileSystemCatalog(self.warehouse).get_table("db.t").new_write()
        w.write(pa.table({"id": pa.array([self.number], pa.int64()), "v": ["x"]}))
        changes = [changes_to_proto(m) for m in w.prepare_commit()]
        reply = catalog_pb2_grpc.CatalogServiceStub(self.writer).Commit(catalog_pb2.CommitRequest(
            table=self.ident, commit_user="http-limits", commit_identifier=self.number,
            kind=common_pb2.COMMIT_KIND_APPEND, changes=changes), timeout=CALL_TIMEOUT_S)
        assert reply.snapshot_id > 0, reply

    def close(self) -> None:
        self.admin.close()
        self.writer.close()


def timed(f: Callable[[], object]) -> float:
    started = time.perf_counter()
    f()
    return time.perf_counter() - started


def _slow_head(filler: int) -> bytes:
    """The start of a request head that never ends, with `filler` bytes of header (no token: unauthenticated)."""
    return b"GET /v1/config HTTP/1.1\r\nHost: catalog\r\nX-Filler: " + b"a" * filler


def test_200_slow_connections_per_port_leave_commits_and_reads_fast(cat: CatalogProcess, certs: Certs,
                                                                     tokens: Tokens) -> None:
    lake = Lake(cat, certs, tokens)
    slow: list[socket.socket] = []
    try:
        lake.commit()  # warm up: the first commit and read load code and caches
        assert call(cat.rest_port, "GET", "/v1/databases/db/tables/t", token=tokens.reader, tls=cat.tls).status == 200
        rss_before, sockets_before = cat.rss_mib(), cat.sockets()
        started = time.monotonic()
        # each: TLS handshake done, then 8 KiB of a head that never ends (the most a head may hold, about)
        for port, block in ((cat.rest_port, 1), (cat.ui_port, 2)):
            for i in range(SLOW_PER_PORT):
                s = connect(port, peer(i, block), tls=cat.tls)
                slow.append(s)
                s.sendall(_slow_head(8000))
        opened_s = time.monotonic() - started
        held = cat.sockets() - sockets_before
        commit_s = timed(lake.commit)
        read = call(cat.rest_port, "GET", "/v1/databases/db/tables/t", token=tokens.reader, tls=cat.tls)
        read_s = timed(lambda: call(cat.rest_port, "GET", "/v1/databases/db/tables/t", token=tokens.reader,
                                    tls=cat.tls))
        page_s = timed(lambda: call(cat.ui_port, "GET", "/", token=tokens.reader, tls=cat.tls))
        rss_after = cat.rss_mib()
        still_open = sum(is_open(s) for s in slow)
        elapsed_s = time.monotonic() - started
        print(f"\n{len(slow)} slow TLS connections opened in {opened_s:.2f} s ({held} sockets more in the catalog, "
              f"{still_open} still open after {elapsed_s:.2f} s); commit {commit_s * 1000:.0f} ms, REST read "
              f"{read_s * 1000:.0f} ms, console page {page_s * 1000:.0f} ms; catalog RSS {rss_before:.0f} MiB -> "
              f"{rss_after:.0f} MiB (+{rss_after - rss_before:.1f} MiB)")
        assert elapsed_s < HEAD_TIMEOUT_S, f"the test took {elapsed_s:.1f} s: the head deadline closed the slow " \
                                          "connections before the measurement ended; rerun on a less loaded machine"
        # the slow connections were accepted and held by the catalog, not left in the kernel's backlog (a few
        # sockets of the warm-up calls may have closed meanwhile)
        assert held >= 2 * SLOW_PER_PORT - 4, f"the catalog holds {held} more sockets, not {2 * SLOW_PER_PORT}"
        assert still_open == len(slow), f"{len(slow) - still_open} slow connections were closed"
        assert read.status == 200, read.text
        assert commit_s < ANSWER_WITHIN_S, f"the commit took {commit_s:.2f} s"
        assert read_s < ANSWER_WITHIN_S, f"the REST read took {read_s:.2f} s"
        assert rss_after - rss_before < GROWTH_LIMIT_MIB, f"RSS {rss_before:.0f} -> {rss_after:.0f} MiB"
    finally:
        close_all(slow)
        lake.close()
    assert cat.alive(), cat.tail()


# -- regressions: each failed on the old server --------------------------------------------------

def _head(method: str, path: str, token: str | None, length: int, content_type: str = "application/json") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: catalog\r\n{auth}Content-Type: {content_type}\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def test_a_get_announcing_a_body_is_answered_without_reading_it(cat: CatalogProcess, tokens: Tokens) -> None:
    s = connect(cat.rest_port, tls=cat.tls)
    try:
        s.sendall(_head("GET", "/v1/config?warehouse=lake", tokens.reader, ANNOUNCED))  # and no body
        status, raw = answer(s, NO_BODY_WAIT_S)
    finally:
        s.close()
    assert status == 200, f"no answer within {NO_BODY_WAIT_S} s to a GET announcing {ANNOUNCED} bytes: {raw[:300]!r}"
    assert b"\r\nconnection: close\r\n" in raw.lower(), "an unread body must close the connection"


def _send_quietly(s: socket.socket, data: bytes) -> None:
    with suppress(OSError):  # stops when the server closes the connection
        s.sendall(data)


def test_a_body_on_a_get_is_not_taken_into_memory(cat: CatalogProcess, tokens: Tokens) -> None:
    body = b"[" + b",".join([b'"0123456"'] * ((ANNOUNCED - 2) // 10)) + b"]"  # 1.6 million strings of JSON
    s = connect(cat.rest_port, tls=cat.tls)
    # the old server read and parsed such a body (+136 MiB at its peak here; +426 MiB for the body of the issue's
    # measurement). The new one reads none of it and drops what arrives while it closes; 32 MiB leaves room for
    # the process's own noise.
    with RssPeak(cat.pid) as rss:
        try:
            s.sendall(_head("GET", "/v1/config?warehouse=lake", tokens.reader, len(body)))
            # the whole body first, then the answer, on this one thread: a TLS socket written by one thread while
            # another reads it is not safe in OpenSSL (this test once got no answer at all in CI that way); the
            # server drops the body while it keeps coming, so the answer waits for us
            _send_quietly(s, body)
            status, raw = answer(s, 20.0)
        finally:
            s.close()
        time.sleep(0.5)  # a window for the sampler to see what a parse after the answer would take
    print(f"\nGET with a {len(body) >> 20} MiB JSON body: status {status}, catalog RSS {rss.before:.0f} MiB, "
          f"peak {rss.peak:.0f} MiB (+{rss.growth:.1f})")
    assert status == 200, raw[:300]
    assert rss.growth < 32, f"the catalog grew by {rss.growth:.0f} MiB for a body it should not read"


def test_a_client_sending_its_body_slowly_before_reading_gets_the_answer(cat: CatalogProcess, tokens: Tokens) -> None:
    """A plain client (urllib's way: the whole body first, then the answer) on a slow link: the catalog drops the
    body it does not read for as long as bytes keep coming, rather than for a fixed time. Closing while the client
    still sends resets the connection, and the reset destroys the answer the client has not read yet."""
    chunk, chunks, pace_s = 64 << 10, 64, 4.0 / 64  # 4 MiB over about 4 s, longer than any fixed linger of old
    s = connect(cat.rest_port, tls=cat.tls)
    try:
        s.sendall(_head("GET", "/v1/config?warehouse=lake", tokens.reader, chunk * chunks))
        sent = 0
        with suppress(OSError):  # the old server closed after 2 s: the client's sends failed with a reset
            for _ in range(chunks):
                s.sendall(b" " * chunk)
                sent += chunk
                time.sleep(pace_s)
        status, raw = answer(s, 10.0)
    finally:
        s.close()
    assert sent == chunk * chunks, f"the catalog cut the connection after {sent} of {chunk * chunks} body bytes"
    assert status == 200, raw[:300]


def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_head_deadline(cat: CatalogProcess) -> None:
    s = connect(cat.rest_port, tls=cat.tls)
    started = time.monotonic()
    closed = False
    try:
        s.sendall(b"GET /v1/config HTTP/1.1\r\nHost: catalog\r\nX-Slow: ")
        # a byte every 0.5 s: each read of the old server came well within its 60 s timeout, so it never closed
        while not closed and time.monotonic() - started < HEAD_TIMEOUT_S + 3:
            try:
                s.sendall(b"a")
            except OSError:
                closed = True
                break
            closed, _ = closed_within(s, 0.5)
    finally:
        s.close()
    took = time.monotonic() - started
    assert closed, f"a head trickling for {took:.1f} s was not cut (head deadline {HEAD_TIMEOUT_S} s)"
    assert took > HEAD_TIMEOUT_S - 1, f"cut after {took:.1f} s, before the head deadline"


def test_the_connection_over_the_per_peer_cap_is_refused_at_accept(cat: CatalogProcess) -> None:
    held: list[socket.socket] = []
    try:
        for _ in range(PER_PEER):
            held.append(connect(cat.rest_port, "127.0.3.1"))  # plain TCP to the TLS port: not a byte sent
        one_more = connect(cat.rest_port, "127.0.3.1")
        held.append(one_more)
        refused, _ = closed_within(one_more, 2.0)
        open_ = sum(is_open(s) for s in held[:PER_PEER])
        other = connect(cat.rest_port, "127.0.3.2")  # another peer is not refused
        held.append(other)
        other_open = not closed_within(other, 0.5)[0]
    finally:
        close_all(held)
    assert refused, f"connection {PER_PEER + 1} from one peer was not refused"
    assert open_ == PER_PEER, f"only {open_} of the first {PER_PEER} connections are open"
    assert other_open, "a connection from another peer was refused"


def test_the_public_login_refuses_a_large_body_before_reading_it(cat: CatalogProcess) -> None:
    s = connect(cat.ui_port, tls=cat.tls)
    try:
        s.sendall(_head("POST", "/login", None, 1 << 20, "application/x-www-form-urlencoded"))  # and no body
        status, raw = answer(s, NO_BODY_WAIT_S)
    finally:
        s.close()
    assert status == 413, f"the login answered {status} within {NO_BODY_WAIT_S} s to 1 MiB announced: {raw[:300]!r}"


# -- the bounds one by one, on an in-process server with small limits -------------------------------

class Echo:
    """Routes that answer at once, echo a body, or wait until released (a call in flight)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def routes(self) -> list[Route]:
        def wait(_: Request) -> Response:
            self.entered.set()
            self.release.wait(10)
            return Response({"waited": True})
        return [Route("GET", "/ok", Role.READER, lambda r: Response({"ok": True})),
                Route("GET", "/wait", Role.READER, wait),
                Route("POST", "/echo", Role.READER, lambda r: Response({"body": r.body})),
                Route("POST", "/small", Role.READER, lambda r: Response({"body": r.body}), max_body=10),
                Route("POST", "/login", Role.READER, lambda r: Response({"form": r.body}), public=True)]


@contextmanager
def small_server(tokens: Tokens, echo: Echo, **limits: Any) -> Iterator[JsonHttpServer]:
    settings = {"auth_tokens": tokens.file, "workers": 1, "queue_timeout_s": 0.5, "idle_timeout_s": 0.5,
                "head_timeout_s": 1.0, "body_timeout_s": 0.5, **limits}
    server = JsonHttpServer(echo.routes(), HttpSettings(**settings), accept_forms=True)
    server.start()
    try:
        yield server
    finally:
        echo.release.set()
        server.stop(grace_s=2)


def _request(method: str, path: str, token: str | None = None, body: bytes = b"", *extra: str,
             length: int | None = None) -> bytes:
    """A request's bytes; `length`: the Content-Length it announces, when not the body's."""
    lines = [f"{method} {path} HTTP/1.1", "Host: t", *extra]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if body or method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {len(body) if length is None else length}"]
    return "\r\n".join([*lines, "", ""]).encode() + body


def test_a_kept_alive_connection_serves_requests_in_turn_and_closes_when_idle(tokens: Tokens) -> None:
    with small_server(tokens, Echo()) as server:
        s = connect(server.port)
        try:
            s.sendall(_request("GET", "/ok", tokens.reader) + _request("POST", "/echo", tokens.reader, b"[1]"))
            raw = b""
            deadline = time.monotonic() + 3
            while raw.count(b"HTTP/1.1 ") < 2 and time.monotonic() < deadline:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                raw += s.recv(65536)
            first, second = raw.split(b"HTTP/1.1 ")[1:]  # the pipelined one answered after the first
            assert first.startswith(b"200") and first.endswith(b'{"ok":true}'), raw
            assert second.startswith(b"200") and second.endswith(b'{"body":[1]}'), raw
            s.sendall(_request("GET", "/ok", tokens.reader))
            assert answer(s, 2)[0] == 200
            started = time.monotonic()
            closed, got = closed_within(s, 3)
            idle = time.monotonic() - started
        finally:
            s.close()
    assert closed and not got, f"an idle kept-alive connection was not closed: {got!r}"
    assert 0.3 < idle < 2, f"closed after {idle:.2f} s of idleness (idle timeout 0.5 s)"


def test_a_body_sent_slowly_after_authentication_is_cut_at_the_body_deadline(tokens: Tokens) -> None:
    with small_server(tokens, Echo()) as server:
        s = connect(server.port)
        try:
            s.sendall(_request("POST", "/echo", tokens.reader, b"[1, 2")[:-1])  # a byte short, and never sent
            started = time.monotonic()
            status, raw = answer(s, 3)
            took = time.monotonic() - started
            closed = closed_within(s, 2)[0]
        finally:
            s.close()
    assert status == 408 and closed, raw
    assert 0.3 < took < 2, f"answered after {took:.2f} s (body deadline 0.5 s)"


def test_a_body_waits_for_a_worker_unread_and_is_refused_when_none_frees(tokens: Tokens) -> None:
    echo = Echo()
    with small_server(tokens, echo) as server:
        busy, s = connect(server.port), connect(server.port)
        try:
            busy.sendall(_request("GET", "/wait", tokens.reader))
            assert echo.entered.wait(5)
            # the only worker is busy: a 1000-byte body announced, none sent; answered 503 without waiting for it
            s.sendall(_request("POST", "/echo", tokens.reader, length=1000))
            status, raw = answer(s, 3)
            echo.release.set()
            assert answer(busy, 3)[0] == 200
        finally:
            close_all([busy, s])
    assert status == 503 and b"connection: close" in raw.lower(), raw


def test_each_route_reads_at_most_its_body_limit(tokens: Tokens) -> None:
    with small_server(tokens, Echo()) as server:
        port = server.port
        assert _one(port, _request("POST", "/small", tokens.reader, b"[1,2,3,4]"))[0] == 200
        status, raw = _one(port, _request("POST", "/small", tokens.reader, b"[1,2,3,4,5]"))
        assert status == 413 and b"at most 10" in raw, raw
        form = b"token=" + b"t" * (PUBLIC_BODY_BYTES - 6)
        login = _request("POST", "/login", None, form).replace(b"application/json", FORM)
        assert _one(port, login)[0] == 200
        assert _one(port, login.replace(b"Content-Length: 8192", b"Content-Length: 8193") + b"t")[0] == 413
        status, raw = _one(port, _request("POST", "/echo", tokens.reader, b"[" + b"1," * 20000 + b"1]"))
        assert status == 200, raw[:200]  # an authenticated POST takes up to max_body_bytes


def test_expect_100_continue_comes_only_after_authentication(tokens: Tokens) -> None:
    with small_server(tokens, Echo()) as server:
        s = connect(server.port)
        try:
            s.sendall(_request("POST", "/echo", tokens.reader, b"", "Expect: 100-continue", length=3))
            status, _ = answer(s, 2)
            assert status == 100
            s.sendall(b"[7]")
            status, raw = answer(s, 2)
            assert status == 200 and b'{"body":[7]}' in raw, raw
        finally:
            s.close()
        status, raw = _one(server.port, _request("POST", "/echo", None, b"", "Expect: 100-continue", length=3))
        assert status == 401, raw


def test_a_tls_handshake_not_begun_is_cut_at_the_head_deadline(tokens: Tokens, certs: Certs) -> None:
    with small_server(tokens, Echo(), tls_cert=certs.server_cert, tls_key=certs.server_key) as server:
        s = connect(server.port)  # plain TCP: no ClientHello ever
        try:
            started = time.monotonic()
            closed = closed_within(s, 3)[0]
            took = time.monotonic() - started
        finally:
            s.close()
        assert closed and 0.7 < took < 2.5, f"closed {closed} after {took:.2f} s (head deadline 1 s)"
        assert call(server.port, "GET", "/ok", token=tokens.reader, tls=ssl.create_default_context(
            cafile=certs.ca)).status == 200


def test_mutual_tls_wants_the_client_certificate(tokens: Tokens, certs: Certs) -> None:
    with small_server(tokens, Echo(), tls_cert=certs.server_cert, tls_key=certs.server_key,
                      tls_client_ca=certs.ca) as server:
        trusted = ssl.create_default_context(cafile=certs.ca)
        with pytest.raises((ssl.SSLError, OSError)):
            call(server.port, "GET", "/ok", token=tokens.reader, tls=trusted)
        trusted.load_cert_chain(certs.client_cert, certs.client_key)
        assert call(server.port, "GET", "/ok", token=tokens.reader, tls=trusted).status == 200


def test_stop_lets_the_call_in_flight_answer_then_closes_everything(tokens: Tokens) -> None:
    echo = Echo()
    with small_server(tokens, echo, idle_timeout_s=30) as server:
        busy, idle = connect(server.port), connect(server.port)
        try:
            idle.sendall(_request("GET", "/ok", tokens.reader))
            assert answer(idle, 2)[0] == 200  # and then kept alive, idle
            busy.sendall(_request("GET", "/wait", tokens.reader))
            assert echo.entered.wait(5)
            threading.Timer(0.3, echo.release.set).start()
            started = time.monotonic()
            server.stop(grace_s=5)
            took = time.monotonic() - started
            status, raw = answer(busy, 2)
            idle_closed = closed_within(idle, 1)[0]
        finally:
            close_all([busy, idle])
        assert status == 200 and b'"waited":true' in raw and b"connection: close" in raw.lower(), raw
        assert idle_closed, "an idle connection outlived the server"
        assert took < 3, f"stop took {took:.1f} s"
        with pytest.raises(OSError):
            connect(server.port, timeout_s=2).close()


def test_refuse_answers_503(tokens: Tokens) -> None:
    with small_server(tokens, Echo()) as server:
        server.refuse()
        assert _one(server.port, _request("GET", "/ok", tokens.reader))[0] == 503


def _one(port: int, data: bytes) -> tuple[int | None, bytes]:
    s = connect(port)
    try:
        s.sendall(data)
        return answer(s, 3)
    finally:
        s.close()


def _metric(port: int, line_start: str) -> float:
    """The value of the exposition line of the catalog's metrics that starts with `line_start`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=CALL_TIMEOUT_S) as r:
        text = r.read().decode()
    [value] = [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(line_start)]
    return float(value)


def test_the_connection_caps_are_flags_and_the_connections_are_metrics(tmp_path: Path, tokens: Tokens) -> None:
    """`--http-max-connections-per-peer` caps each HTTP port; open and refused connections are exported."""
    metrics = free_port()
    held: list[socket.socket] = []
    with catalog_process(tmp_path, tokens.file, extra_args=("--http-max-connections", "8",
                                                            "--http-max-connections-per-peer", "3",
                                                            "--metrics-port", str(metrics))) as cat:
        try:
            # the readiness probe's connections count until the server has read their close: start from none
            deadline = time.monotonic() + 10
            while (n := _metric(metrics, 'lsmlake_catalog_http_connections{port="ui"}')) != 0:
                assert time.monotonic() < deadline, f"the ui port still counts {n:g} connections nobody holds"
                time.sleep(0.05)  # polling interval, bounded by the deadline
            held = [connect(cat.ui_port, "127.0.4.1") for _ in range(3)]
            one_more = connect(cat.ui_port, "127.0.4.1")
            held.append(one_more)
            refused, _ = closed_within(one_more, 2.0)
            assert refused, "the 4th connection of one peer was not refused with --http-max-connections-per-peer 3"
            assert all(is_open(s) for s in held[:3])
            others = [connect(cat.ui_port, peer(i, block=5)) for i in range(1, 7)]
            held += others
            # connections are admitted in the order they arrive: once the 9th is refused, the 8 before it are in
            refused, _ = closed_within(others[-1], 5.0)
            over = [not is_open(s) for s in others[:-1]] + [refused]
            assert over == [False] * 5 + [True], f"the 9th open connection was not the one refused: {over}"
            assert _metric(metrics, 'lsmlake_catalog_http_connections{port="ui"}') == 8
            assert _metric(metrics, 'lsmlake_catalog_http_connections{port="rest"}') == 0
            assert _metric(metrics, 'lsmlake_catalog_http_connections_refused_total{port="ui"}') == 2
        finally:
            close_all(held)
