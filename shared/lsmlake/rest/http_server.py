"""A small JSON-over-HTTP server: routes, bearer tokens and roles, TLS, bounded connections and work, graceful
shutdown.

It serves the Paimon REST catalog API and the web console beside the catalog's gRPC port, in the same process:
memory a caller makes it take is memory every commit lacks, so what a caller without a token can make it hold
is bounded (`HttpSettings` lists the bounds in the order a request meets them). Each route names the least role
that may call it (there is no route without one, `public` routes aside); a call runs as its token's principal
(`acting_as`), so the library's checks see the caller as they do under gRPC. Errors are Paimon's error body
(`rest.errors`), or under a path prefix another protocol's (`error_bodies`: Iceberg's); a failure that is not a
lsmlake refusal is logged with its traceback and answered 500 with a generic message.

How, and why so. The connections live on an asyncio event loop in one background thread
(`rest.connections`): hundreds of idle or slow sockets cost a few tens of KiB each there, where
`http.server.ThreadingHTTPServer` spent a thread on each, read up to 100 header lines of 64 KiB, and read and
parsed a 16 MiB body on every route before any worker slot: 50 unauthenticated logins holding bodies took the
catalog from 144 MiB to 948 MiB. HTTP/1.1 is parsed by h11, the maintained sans-I/O parser under httpx and
uvicorn, whose `max_incomplete_event_size` is the head limit. A whole server (uvicorn, waitress, aiohttp) was
not taken: none bounds connections per peer or gives the request head a total deadline (their timeouts are per
read, so a byte a second keeps a connection), and waitress reads whole bodies before the application, that is
before authentication. The order here (`rest.exchange`): head within its deadline and size; authentication,
route and role from the head alone (`admit`, on the loop); a worker slot; only then the body, only on a route
that takes one, up to the route's limit (`Route.max_body`) within its deadline; the handler, synchronous, in
one of `workers` threads. Memory is so bounded by `workers` times the largest route limit (and what the JSON
of such a body parses into) plus the per-connection cost times `max_connections`. One change to the plan of
plain TCP accepted then `StreamWriter.start_tls`: TLS runs through OpenSSL's memory BIOs (`rest.channel`),
because asyncio's TLS transport allocates a 256 KiB buffer per connection (128 MiB for 512 of them).
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlsplit

from lsmlake.auth.principal import acting_as
from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal, TokenStore
from lsmlake.errors import InvalidInputError, PermissionDeniedError, ServiceUnavailableError
from lsmlake.rest.connections import ConnectionServer
from lsmlake.rest.errors import (
    BodyTooLargeError,
    MethodNotAllowedError,
    RestError,
    UnauthenticatedError,
    UnknownPathError,
    internal_error,
    rest_error_for,
)
from lsmlake.rest.exchange import Admission, Head, Reply
from lsmlake.rest.http_settings import MAX_BODY_BYTES, PUBLIC_BODY_BYTES, HttpSettings
from lsmlake.runtime.log_limit import LogLimiter

__all__ = ["FORM", "JSON", "MAX_BODY_BYTES", "PUBLIC_BODY_BYTES", "Handler", "HttpSettings", "JsonHttpServer",
           "Request", "Response", "Route", "ssl_context"]

_log = logging.getLogger(__name__)
_refusals = LogLimiter(_log, "refused REST calls")

_SCHEME = "bearer "
_NO_BODY = ("GET", "HEAD", "DELETE")  # methods whose routes read no body unless they say otherwise
_MAX_ECHO = 300  # characters of a malformed request quoted back in its refusal


@dataclass(frozen=True)
class Request:
    """One call as a handler sees it: the path's named parts (decoded), the query, the parsed JSON body (or an HTML
    form's fields, as a dict of strings)."""

    method: str
    path: str
    params: Mapping[str, str]
    query: Mapping[str, str]
    body: Any
    principal: Principal | None
    headers: Mapping[str, str] = field(default_factory=dict)  # the request's headers, names in lower case


JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True)
class Response:
    """A handler's answer: a status and a JSON body (None: no body); with another `content_type`, the body is the
    text to send as it is (a page); `headers` are added to the answer."""

    body: Any = None
    status: int = 200
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Response]


@dataclass(frozen=True)
class Route:
    """`pattern` is a path with `{name}` parts (one path segment each); `resource` names what a 404 is about.

    `max_body`: the most body bytes the route reads; None: none on GET, HEAD and DELETE, `PUBLIC_BODY_BYTES` on a
    `public` route (a login form), the server's `max_body_bytes` otherwise. A body the route does not read is
    not read at all: the call is served without it and the connection closed after the answer."""

    method: str
    pattern: str
    role: Role
    handler: Handler
    resource: str | None = None
    name: str = ""
    public: bool = False  # answered without a token (a login page); `role` is then not checked
    max_body: int | None = None
    regex: re.Pattern[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        parts = re.split(r"\{(\w+)\}", self.pattern)
        text = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[^/]+)" for i, p in enumerate(parts))
        object.__setattr__(self, "regex", re.compile(text))
        if not self.name:
            object.__setattr__(self, "name", f"{self.method} {self.pattern}")

    def body_limit(self, server_limit: int) -> int:
        """The most body bytes this route reads on a server whose limit is `server_limit`."""
        if self.max_body is not None:
            return self.max_body
        if self.method in _NO_BODY:
            return 0
        return min(PUBLIC_BODY_BYTES, server_limit) if self.public else server_limit


def ssl_context(cert: str, key: str, client_ca: str | None) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or newer); with `client_ca`, clients must present a certificate it signed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
        if client_ca:
            ctx.load_verify_locations(client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as e:
        raise InvalidInputError(f"cannot use the TLS certificate {cert} and key {key}: {e}") from None
    return ctx


@dataclass(frozen=True)
class _Call:
    """An admitted request, waiting for its body."""

    route: Route
    request: Request  # its body still None
    started: float


class JsonHttpServer:
    """Serves `routes` on `settings.host:settings.port` from `start` until `stop`.

    `observe(route_name, status, seconds)` hears of every answered call (metrics).
    """

    def __init__(self, routes: Sequence[Route], settings: HttpSettings,
                 observe: Callable[[str, int, float], None] | None = None, server_name: str = "lsmlake",
                 session_cookie: str | None = None,
                 session_principal: Callable[[str], Principal | None] | None = None,
                 error_page: Callable[[int, str], Response] | None = None, accept_forms: bool = False,
                 error_bodies: Sequence[tuple[str, Callable[[RestError], Any]]] = ()) -> None:
        """`session_cookie` names a cookie that carries a session (browsers), which `session_principal` turns into
        its principal (None: no such session, or expired); a request with an `Authorization` header is
        authenticated by its token instead. `error_page` renders a refusal (status, message) instead of Paimon's
        JSON error body; `accept_forms`: HTML form bodies are read too. `error_bodies`: (path prefix, renderer)
        pairs; a refusal of a request whose path is the prefix or below it gets the renderer's JSON body instead
        of Paimon's (another protocol served on the same port: Iceberg's REST API under `/iceberg`), also when no
        route matched or the token was refused."""
        self.error_bodies = tuple(error_bodies)
        self.session_cookie = session_cookie
        self.session_principal = session_principal
        self.accept_forms = accept_forms
        self.error_page = error_page
        self.routes = list(routes)
        self.settings = settings
        self._observe = observe or (lambda _r, _s, _t: None)
        self._tokens = TokenStore(settings.auth_tokens) if settings.auth_tokens else None
        if settings.tls_cert and not settings.tls_key:
            raise InvalidInputError("--tls-cert and --tls-key go together")
        self._ssl = ssl_context(settings.tls_cert, settings.tls_key, settings.tls_client_ca) \
            if settings.tls_cert and settings.tls_key else None
        self._stopping = False
        self.server_name = server_name
        self._connections = ConnectionServer(self, settings, self._ssl, server_name)
        if self._tokens is not None and self._ssl is None:
            _log.warning("REST bearer tokens are checked on a plaintext port: they travel unencrypted")

    @property
    def port(self) -> int:
        return self._connections.port

    @property
    def tls(self) -> bool:
        return self._ssl is not None

    @property
    def open_connections(self) -> int:
        """Connections open now."""
        return self._connections.open_connections

    @property
    def refused_connections(self) -> int:
        """Connections refused at accept (over a cap) since the start."""
        return self._connections.refused_connections

    def start(self) -> int:
        """Bind and serve in a background thread; the bound port."""
        self._stopping = False
        port = self._connections.start()
        _log.info("HTTP (%s) on %s:%d (%s)", self.server_name, self.settings.host, port,
                  "TLS" if self._ssl else "plaintext")
        return port

    def refuse(self) -> None:
        """From now on answer 503 (shutting down) to new calls."""
        self._stopping = True

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop accepting, give calls in flight up to `grace_s`, close every connection."""
        self._stopping = True
        self._connections.stop(grace_s)

    @property
    def tokens(self) -> TokenStore | None:
        """The tokens this server checks (None: it checks none)."""
        return self._tokens

    # -- one call: from its head (on the event loop) ------------------------------------------------

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | None:
        allowed = False
        for route in self.routes:
            m = route.regex.fullmatch(path)
            if m is None:
                continue
            if route.method == method:
                return route, {k: unquote_plus(v) for k, v in m.groupdict().items()}
            allowed = True
        if allowed:
            raise MethodNotAllowedError(f"{method} is not allowed on {path[:200]}")
        return None

    def authenticate(self, header: str | None) -> Principal | None:
        if self._tokens is None:
            return None
        if not header or header[:len(_SCHEME)].lower() != _SCHEME:
            raise UnauthenticatedError("this catalog needs a bearer token (Authorization: Bearer <token>)")
        principal = self._tokens.authenticate(header[len(_SCHEME):].strip())
        if principal is None:
            raise UnauthenticatedError("the bearer token is not valid")
        return principal

    def admit(self, head: Head) -> Reply | Admission:
        """Authenticate, route and check the role of a request from its head alone; the refusal to answer, or the
        admission that reads its body (at most the route's limit) and runs it. Never raises."""
        started = time.perf_counter()
        route: Route | None = None
        url = urlsplit(head.target)
        try:
            if self._stopping:
                raise ServiceUnavailableError("the catalog is shutting down; ask another replica or retry")
            public = any(r.public and r.method == head.method and r.regex.fullmatch(url.path) for r in self.routes)
            principal = None if public else self._principal(head.headers)
            found = self.match(head.method, url.path)
            if found is None:
                raise UnknownPathError(f"no such REST resource: {head.method} {url.path[:200]}")
            route, params = found
            if principal is not None and principal.role < route.role:
                raise PermissionDeniedError(f"{principal.name} (role {principal.role.name.lower()}) may not call "
                                            f"{route.name}: it needs role {route.role.name.lower()}")
            limit = route.body_limit(self.settings.max_body_bytes)
            _check_body_size(head.headers, limit)
            query = {k: v for k, v in parse_qsl(url.query, keep_blank_values=True)}
            call = _Call(route, Request(head.method, url.path, params, query, None, principal, head.headers), started)
        except Exception as e:
            return self._encode(self._refusal(e, route, head.method, url.path, head.peer), route, started)
        return Admission(limit, lambda body: self._run(call, body, head.peer),
                         lambda status, message: self._refused_later(call, status, message, head.peer))

    def refusal(self, status: int, message: str, peer: str) -> Reply:
        """The answer to a request refused before its head was read whole (too large, too slow, malformed)."""
        message = message if len(message) <= _MAX_ECHO else f"{message[:_MAX_ECHO]}..."  # h11 quotes what it read
        _refusals.log(logging.INFO, (status, peer), "refused an HTTP request from %s: %d %s", peer, status, message)
        return self._encode(self._error(RestError(status, message)), None, time.perf_counter())

    def _refused_later(self, call: _Call, status: int, message: str, peer: str) -> Reply:
        """The answer to an admitted call the connection could not serve (no worker free, its body too slow)."""
        _refusals.log(logging.INFO, (status, peer), "refused REST %s %s from %s: %d %s", call.request.method,
                      call.request.path[:200], peer, status, message)
        return self._encode(self._error(RestError(status, message), call.request.path), call.route, call.started)

    def _principal(self, headers: Mapping[str, str]) -> Principal | None:
        """Who calls: the bearer token's principal, else the session cookie's (when the server takes one)."""
        if self._tokens is None or headers.get("authorization") or self.session_principal is None:
            return self.authenticate(headers.get("authorization"))
        session = self._cookie(headers)
        if session is None:
            return self.authenticate(None)
        principal = self.session_principal(session)
        if principal is None:
            raise UnauthenticatedError("the console session is not valid or has expired; log in again")
        return principal

    def _cookie(self, headers: Mapping[str, str]) -> str | None:
        """The session cookie's value, when the request has it."""
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.session_cookie and value:
                return unquote_plus(value)
        return None

    # -- one call: its body and handler (in a worker thread) -----------------------------------------

    def _run(self, call: _Call, raw: bytearray, peer: str) -> Reply:
        """Parse the body and run the handler as the caller's principal; the encoded answer. Never raises."""
        request = call.request
        try:
            body = self._parse_body(request.headers, raw) if raw else None
            with acting_as(request.principal) if request.principal is not None else nullcontext():
                answer = call.route.handler(Request(request.method, request.path, request.params, request.query,
                                                    body, request.principal, request.headers))
        except Exception as e:
            answer = self._refusal(e, call.route, request.method, request.path, peer)
        try:
            return self._encode(answer, call.route, call.started)
        except Exception as e:  # a handler's answer that is not JSON: a bug, answered like one
            return self._encode(self._refusal(e, call.route, request.method, request.path, peer), call.route,
                                call.started)

    def _parse_body(self, headers: Mapping[str, str], raw: bytearray) -> Any:
        if self.accept_forms and headers.get("content-type", "").split(";")[0].strip().lower() == FORM:
            try:  # an HTML form (the console's login): its fields, the last of a repeated name winning
                return dict(parse_qsl(raw.decode(), keep_blank_values=True, strict_parsing=False))
            except UnicodeDecodeError as e:
                raise InvalidInputError(f"the form is not UTF-8: {e}") from None
        try:
            return json.loads(raw)
        except RecursionError:
            raise InvalidInputError("the request body nests JSON too deeply") from None
        except (UnicodeDecodeError, ValueError) as e:
            raise InvalidInputError(f"the request body is not JSON: {e}") from None

    # -- answers ------------------------------------------------------------------------------------

    def _refusal(self, e: Exception, route: Route | None, method: str, path: str, peer: str) -> Response:
        """The answer to a call that raised `e`, logged as it deserves (401 and 403 rate-limited per peer)."""
        err = rest_error_for(e, route.resource if route is not None else None)
        if err is None:
            _log.error("REST %s %s failed", method, path[:200], exc_info=e)
            err = internal_error()
        elif err.status in (401, 403):
            _refusals.log(logging.WARNING, (err.status, peer), "refused REST %s %s from %s: %s", method, path[:200],
                          peer, err.message)
        else:
            _log.info("REST %s %s: %d %s", method, path[:200], err.status, err.message)
        return self._error(err, path)

    def _error(self, err: RestError, path: str | None = None) -> Response:
        """The refusal as answered on `path` (None: a request without a usable head)."""
        if self.error_page is not None:
            return self.error_page(err.status, err.message)
        for prefix, render in self.error_bodies:
            if path is not None and (path == prefix or path.startswith(prefix + "/")):
                return Response(render(err), err.status)
        return Response(err.body(), err.status)

    def _encode(self, answer: Response, route: Route | None, started: float) -> Reply:
        """The answer as it goes on the wire; the call is observed (metrics) here."""
        body = answer.body
        if answer.content_type == JSON:
            data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        else:
            data = body.encode() if isinstance(body, str) else bytes(body or b"")
        headers = [("Server", self.server_name)]
        if body is not None:
            headers.append(("Content-Type", answer.content_type))
        headers += answer.headers
        if answer.status not in (204, 304):
            headers.append(("Content-Length", str(len(data))))
        self._observe(route.name if route is not None else "unmatched", answer.status, time.perf_counter() - started)
        return Reply(answer.status, headers, data)


def _check_body_size(headers: Mapping[str, str], limit: int) -> None:
    """Refuse a body the route would not take in full, before any of it is read (a route that takes none ignores
    it: the call is served and the connection closed)."""
    if "transfer-encoding" in headers:
        raise InvalidInputError("send the request body with a Content-Length (chunked bodies are not read)")
    size = int(headers.get("content-length") or 0)  # h11 has checked it is a number
    if limit and size > limit:
        raise BodyTooLargeError(f"the request body has {size} bytes; at most {limit}")
