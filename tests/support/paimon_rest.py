"""Talking to the catalog's Paimon REST API in tests: raw HTTP calls, the error-body oracle, pypaimon as a
client, a recording proxy that captures the commit a client would send, and the table state a refusal
must leave as it was."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pyarrow as pa
from pypaimon import CatalogFactory, Schema

from lsmlake.catalog.filesystem import FileSystemCatalog
from tests.support.pypaimon_io import write as pypaimon_write  # re-exported: the REST tests import it from here

TIMEOUT_S = 30.0
ERROR_KEYS = {"message", "resourceType", "resourceName", "code"}
MAX_MESSAGE_CHARS = 2_000
#: what no answer may show a caller: the text of a Python traceback or the internals it names
LEAKS = ("Traceback", 'File "', "site-packages", ".py\", line")
PK_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
#: a raw-HTTP body: bytes as they are, anything else as JSON
Body = Any


@dataclass(frozen=True)
class Answer:
    status: int
    text: str
    headers: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.text) if self.text else None


def call(port: int, method: str, path: str, body: Body = None, token: str | None = None,
         headers: dict[str, str] | None = None, tls: ssl.SSLContext | None = None) -> Answer:
    """One HTTP request on a fresh connection (a refused body may close it)."""
    conn: http.client.HTTPConnection
    if tls is not None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=TIMEOUT_S, context=tls)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        return Answer(r.status, r.read().decode("utf-8", "replace"), {k.lower(): v for k, v in r.getheaders()})
    finally:
        conn.close()


def check_error(answer: Answer, status: int | tuple[int, ...], resource_type: str | None | bool = False,
                what: str = "") -> dict[str, Any]:
    """The answer is a refusal with this status (one of them) and Paimon's error body; the body.

    `resource_type` False: not checked; otherwise it must be exactly that (None included)."""
    statuses = (status,) if isinstance(status, int) else status
    assert answer.status in statuses, f"{what}: {answer.status} (wanted {statuses}) {answer.text[:500]!r}"
    check_no_leak(answer, what)
    body = answer.json()
    assert isinstance(body, dict) and set(body) == ERROR_KEYS, f"{what}: not a Paimon error body: {answer.text[:500]}"
    assert body["code"] == answer.status, f"{what}: code {body['code']} in a {answer.status} answer"
    assert isinstance(body["message"], str) and body["message"].strip(), f"{what}: no message"
    assert len(body["message"]) <= MAX_MESSAGE_CHARS, f"{what}: a {len(body['message'])}-char message"
    assert body["resourceType"] is None or isinstance(body["resourceType"], str)
    assert body["resourceName"] is None or isinstance(body["resourceName"], str)
    if resource_type is not False:
        assert body["resourceType"] == resource_type, f"{what}: resourceType {body['resourceType']!r}"
    return body


def check_no_leak(answer: Answer, what: str = "") -> None:
    leaked = [w for w in LEAKS if w in answer.text]
    assert not leaked, f"{what}: the answer shows {leaked}: {answer.text[:500]!r}"


def table_path(db: str, table: str) -> str:
    return f"/v1/databases/{db}/tables/{table}"


def pypaimon_catalog(port: int, token: str = "unchecked", scheme: str = "http") -> Any:
    """pypaimon's REST catalog on the server (pypaimon needs a token even when the server checks none)."""
    return CatalogFactory.create({"metastore": "rest", "uri": f"{scheme}://127.0.0.1:{port}", "warehouse": "lake",
                                  "token.provider": "bear", "token": token})


def pk_schema(**options: str) -> Schema:
    return Schema.from_pyarrow_schema(PK_SCHEMA, primary_keys=["id"], options={"bucket": "1", **options})


def rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "v": [f"{tag}{i}" for i in ids]}, schema=PK_SCHEMA)


def no_retries(table: Any) -> Any:
    """The table with pypaimon's commit retries off: a refused commit raises at once, not after ~10 s of
    retries (pypaimon takes any failed commit for an uncertain one and tries again)."""
    return table.copy({"commit.max-retries": "0"})


@dataclass(frozen=True)
class TableState:
    """What a refused call must leave as it was: the snapshots, the latest one, the LATEST hint."""

    ids: list[int]
    latest: str | None  # the latest snapshot's JSON
    hint: bytes | None


def table_state(warehouse: str, tid: str) -> TableState:
    t = FileSystemCatalog(warehouse).get_table(tid)
    latest = t.snapshots.latest()
    try:
        hint: bytes | None = t.io.read_bytes(f"{t.snapshots.dir}/LATEST")
    except Exception:  # no hint written (yet): absent is a state too
        hint = None
    return TableState(t.snapshots.ids(), latest.to_json() if latest is not None else None, hint)


@dataclass
class Recorder:
    """A proxy in front of the REST port: forwards every call, except that commits are kept, not sent on,
    and answered as published; so a client builds a real commit that the catalog never saw."""

    upstream: int
    port: int = 0
    held: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (path, body) of each commit


def _proxy_handler(rec: Recorder) -> type[BaseHTTPRequestHandler]:
    class _Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(size) if size else b""
            if self.command == "POST" and self.path.endswith("/commit"):
                rec.held.append((self.path, json.loads(data)))
                status, reply = 200, json.dumps({"success": True}).encode()
            else:
                conn = http.client.HTTPConnection("127.0.0.1", rec.upstream, timeout=TIMEOUT_S)
                try:
                    conn.request(self.command, self.path, body=data or None,
                                 headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                    r = conn.getresponse()
                    status, reply = r.status, r.read()
                finally:
                    conn.close()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = do_POST = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            pass

    return _Proxy


@contextmanager
def recording_proxy(upstream: int) -> Iterator[Recorder]:
    rec = Recorder(upstream)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _proxy_handler(rec))
    server.daemon_threads = True
    rec.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def capture_commit(port: int, tid: str, data: pa.Table, token: str = "unchecked", overwrite: bool = False,
                   properties: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """(path, body) of the commit pypaimon sends to write `data` into `tid` as its next snapshot; its files
    are written, the snapshot is not published."""
    with recording_proxy(port) as rec:
        pypaimon_write(pypaimon_catalog(rec.port, token).get_table(tid), data, overwrite, properties)
    assert len(rec.held) == 1, f"pypaimon sent {len(rec.held)} commits"
    return rec.held[0]
