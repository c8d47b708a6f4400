"""The HTTP server in process, on loopback: routing, tokens and roles, Paimon's error body, body limits, shutdown.

The catalog's ports are tested through the catalog service (tests/catalog_svc/test_http_limits.py,
tests/integration/fuzz/test_http_abuse.py); these tests hold the server's own promises, with routes of their own.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from lsmlake.auth.roles import Role
from lsmlake.errors import NotFoundError
from lsmlake.rest.errors import INTERNAL_MESSAGE
from lsmlake.rest.http_server import HttpSettings, JsonHttpServer, Request, Response, Route
from tests.support.security import Tokens

SECRET = "the handler's own words, never sent"


class Calls:
    """What the handlers saw."""

    def __init__(self) -> None:
        self.seen: list[Request] = []

    def echo(self, r: Request) -> Response:
        self.seen.append(r)
        return Response({"params": dict(r.params), "query": dict(r.query), "body": r.body,
                         "principal": r.principal.name if r.principal else None})

    def missing(self, r: Request) -> Response:
        self.seen.append(r)
        raise NotFoundError("table db.t does not exist")

    def broken(self, r: Request) -> Response:
        self.seen.append(r)
        raise RuntimeError(SECRET)


@pytest.fixture
def served(tokens: Tokens) -> Iterator[tuple[JsonHttpServer, Calls]]:
    calls = Calls()
    routes = [Route("GET", "/v1/{db}/tables/{table}", Role.READER, calls.echo, resource="table"),
              Route("POST", "/v1/{db}/tables", Role.ADMIN, calls.echo, max_body=64),
              Route("GET", "/v1/missing", Role.READER, calls.missing, resource="table"),
              Route("GET", "/v1/broken", Role.READER, calls.broken)]
    server = JsonHttpServer(routes, HttpSettings(auth_tokens=tokens.file, workers=2))
    server.start()
    try:
        yield server, calls
    finally:
        server.stop(grace_s=2)


def call(server: JsonHttpServer, method: str, path: str, token: str | None = None,
         body: bytes | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=body, headers=headers)
        answer = conn.getresponse()
        raw = answer.read()
        return answer.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def test_a_route_gets_its_decoded_path_parts_query_and_caller(served: tuple[JsonHttpServer, Calls],
                                                            tokens: Tokens) -> None:
    server, _ = served
    status, body = call(server, "GET", "/v1/my%20db/tables/t1?snapshot=3", tokens.reader)
    assert status == 200
    assert body == {"params": {"db": "my db", "table": "t1"}, "query": {"snapshot": "3"}, "body": None,
                    "principal": "alice-reader"}


def test_a_call_without_a_valid_token_or_role_reaches_no_handler(served: tuple[JsonHttpServer, Calls],
                                                                tokens: Tokens) -> None:
    server, calls = served
    assert call(server, "GET", "/v1/db/tables/t")[0] == 401
    assert call(server, "GET", "/v1/db/tables/t", tokens.unknown)[0] == 401
    status, body = call(server, "POST", "/v1/db/tables", tokens.writer, b'{"name": "t"}')
    assert status == 403 and body["code"] == 403
    assert calls.seen == []
    status, body = call(server, "POST", "/v1/db/tables", tokens.admin, b'{"name": "t"}')
    assert status == 200 and body["body"] == {"name": "t"} and body["principal"] == "root"


def test_unknown_paths_and_methods_get_paimons_error_body(served: tuple[JsonHttpServer, Calls],
                                                          tokens: Tokens) -> None:
    server, calls = served
    status, body = call(server, "GET", "/v1/nowhere", tokens.admin)
    assert status == 404 and body["code"] == 404 and body["message"]
    assert call(server, "DELETE", "/v1/db/tables/t", tokens.admin)[0] == 405
    assert calls.seen == []


def test_a_refusal_names_its_resource_and_a_failure_says_nothing_of_itself(served: tuple[JsonHttpServer, Calls],
                                                                          tokens: Tokens) -> None:
    server, _ = served
    status, body = call(server, "GET", "/v1/missing", tokens.reader)
    assert status == 404
    assert body["resourceType"] == "table"  # the route's `resource`
    assert "db.t does not exist" in body["message"]
    status, body = call(server, "GET", "/v1/broken", tokens.reader)
    assert status == 500 and body["message"] == INTERNAL_MESSAGE and SECRET not in json.dumps(body)


def test_a_body_over_the_routes_limit_is_refused_unread(served: tuple[JsonHttpServer, Calls],
                                                        tokens: Tokens) -> None:
    server, calls = served
    status, body = call(server, "POST", "/v1/db/tables", tokens.admin, b'{"name": "' + b"x" * 100 + b'"}')
    assert status == 413 and body["code"] == 413
    assert calls.seen == []
    status, _ = call(server, "POST", "/v1/db/tables", tokens.admin, b"{not json")
    assert status == 400 and calls.seen == []


def test_after_stop_the_port_is_closed(tokens: Tokens) -> None:
    server = JsonHttpServer([Route("GET", "/v1/ping", Role.READER, lambda _r: Response({}))],
                            HttpSettings(auth_tokens=tokens.file))
    port = server.start()
    assert call(server, "GET", "/v1/ping", tokens.reader)[0] == 200
    server.stop(grace_s=2)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
