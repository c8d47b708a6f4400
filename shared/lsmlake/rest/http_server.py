"""A small JSON-over-HTTP server: routes, bearer tokens and roles, TLS, bounded work, graceful shutdown.

It serves the Paimon REST catalog API beside the catalog's gRPC port. Each route names the least role that
may call it (there is no route without one); a call runs as its token's principal (`acting_as`), so the
library's checks see the caller as they do under gRPC. What bounds a caller: the request body
(`max_body_bytes`, refused with 413 before it is read), the number of requests served at once (`workers`;
one more waits up to `queue_timeout_s`, then gets 503, which clients retry on reads), and idle or slow
connections (`idle_timeout_s` per socket read). Errors are Paimon's error body (`rest.errors`); a failure
that is not a lsmlake refusal is logged with its traceback and answered 500 with a generic message.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlsplit

from lsmlake.auth.principal import acting_as
from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal, TokenStore
from lsmlake.errors import InvalidInputError, PermissionDeniedError, ServiceUnavailableError
from lsmlake.rest.errors import (
    BodyTooLargeError,
    MethodNotAllowedError,
    UnauthenticatedError,
    UnknownPathError,
    internal_error,
    rest_error_for,
)
from lsmlake.runtime.log_limit import LogLimiter

_log = logging.getLogger(__name__)
_refusals = LogLimiter(_log, "refused REST calls")

MAX_BODY_BYTES = 16 << 20
_SCHEME = "bearer "


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
    """`pattern` is a path with `{name}` parts (one path segment each); `resource` names what a 404 is about."""

    method: str
    pattern: str
    role: Role
    handler: Handler
    resource: str | None = None
    name: str = ""
    public: bool = False  # answered without a token (a login page); `role` is then not checked
    regex: re.Pattern[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        parts = re.split(r"\{(\w+)\}", self.pattern)
        text = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[^/]+)" for i, p in enumerate(parts))
        object.__setattr__(self, "regex", re.compile(text))
        if not self.name:
            object.__setattr__(self, "name", f"{self.method} {self.pattern}")


@dataclass(frozen=True)
class HttpSettings:
    """Where and how the server listens; TLS when `tls_cert` is set, tokens checked when `auth_tokens` is."""

    host: str = "127.0.0.1"
    port: int = 0
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    auth_tokens: str | None = None
    workers: int = 16
    queue_timeout_s: float = 5.0
    idle_timeout_s: float = 60.0
    max_body_bytes: int = MAX_BODY_BYTES


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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    app: JsonHttpServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a failed TLS handshake (plain HTTP to the TLS port), a reset or an idle timeout: the caller's problem
        _log.debug("REST connection from %s ended with an error", client_address, exc_info=True)


class JsonHttpServer:
    """Serves `routes` on `settings.host:settings.port` from `start` until `stop`.

    `observe(route_name, status, seconds)` hears of every answered call (metrics); `path_prefixes` are path
    prefixes removed before matching (a regex with no groups, e.g. Paimon's optional catalog prefix).
    """

    def __init__(self, routes: Sequence[Route], settings: HttpSettings,
                 observe: Callable[[str, int, float], None] | None = None, server_name: str = "lsmlake",
                 session_cookie: str | None = None,
                 session_principal: Callable[[str], Principal | None] | None = None,
                 error_page: Callable[[int, str], Response] | None = None, accept_forms: bool = False) -> None:
        """`session_cookie` names a cookie that carries a session (browsers), which `session_principal` turns into
        its principal (None: no such session, or expired); a request with an `Authorization` header is
        authenticated by its token instead. `error_page` renders a refusal (status, message) instead of Paimon's
        JSON error body; `accept_forms`: HTML form bodies are read too."""
        self.session_cookie = session_cookie
        self.session_principal = session_principal
        self.accept_forms = accept_forms
        self.error_page = error_page
        self.routes = list(routes)
        self.settings = settings
        self._observe = observe or (lambda _r, _s, _t: None)
        self._tokens = TokenStore(settings.auth_tokens) if settings.auth_tokens else None
        self._ssl = ssl_context(settings.tls_cert, settings.tls_key, settings.tls_client_ca) \
            if settings.tls_cert and settings.tls_key else None
        if settings.tls_cert and not settings.tls_key:
            raise InvalidInputError("--tls-cert and --tls-key go together")
        self._slots = threading.BoundedSemaphore(max(1, settings.workers))
        self._active = 0
        self._idle = threading.Condition()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.server_name = server_name
        if self._tokens is not None and self._ssl is None:
            _log.warning("REST bearer tokens are checked on a plaintext port: they travel unencrypted")

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.server_address[1])

    @property
    def tls(self) -> bool:
        return self._ssl is not None

    def start(self) -> int:
        """Bind and serve in a background thread; the bound port."""
        server = _Server((self.settings.host, self.settings.port), _handler_class(self.settings.idle_timeout_s),
                         bind_and_activate=False)
        server.app = self
        try:
            server.server_bind()
            server.server_activate()
        except OSError:
            server.server_close()
            raise
        if self._ssl is not None:
            server.socket = self._ssl.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="rest-server", daemon=True)
        self._thread.start()
        _log.info("REST catalog API on %s:%d (%s)", self.settings.host, self.port, "TLS" if self._ssl else "plaintext")
        return self.port

    def refuse(self) -> None:
        """From now on answer 503 (shutting down) to new calls."""
        self._stopping.set()

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop accepting, give calls in flight up to `grace_s`, close the socket."""
        self._stopping.set()
        if self._server is None:
            return
        self._server.shutdown()
        deadline = time.monotonic() + grace_s
        with self._idle:
            while self._active and time.monotonic() < deadline:
                self._idle.wait(max(0.0, min(0.2, deadline - time.monotonic())))
            if self._active:
                _log.warning("REST: %d call(s) still running at shutdown", self._active)
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = None

    # -- one call ------------------------------------------------------------------------------

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

    def serve(self, method: str, target: str, headers: Mapping[str, str], read_body: Callable[[int], bytes],
              peer: str) -> Response:
        """The answer to one call; never raises."""
        started = time.perf_counter()
        route: Route | None = None
        url = urlsplit(target)
        try:
            if self._stopping.is_set():
                raise ServiceUnavailableError("the catalog is shutting down; ask another replica or retry")
            public = any(r.public and r.method == method and r.regex.fullmatch(url.path) for r in self.routes)
            principal = None if public else self._principal(headers)
            found = self.match(method, url.path)
            if found is None:
                raise UnknownPathError(f"no such REST resource: {method} {url.path[:200]}")
            route, params = found
            if principal is not None and principal.role < route.role:
                raise PermissionDeniedError(f"{principal.name} (role {principal.role.name.lower()}) may not call "
                                            f"{route.name}: it needs role {route.role.name.lower()}")
            body = self._read_body(headers, read_body)
            query = {k: v for k, v in parse_qsl(url.query, keep_blank_values=True)}
            answer = self._run(route, Request(method, url.path, params, query, body, principal, headers))
        except Exception as e:
            err = rest_error_for(e, route.resource if route is not None else None)
            if err is None:
                _log.exception("REST %s %s failed", method, url.path[:200])
                err = internal_error()
            elif err.status in (401, 403):
                _refusals.log(logging.WARNING, (err.status, peer), "refused REST %s %s from %s: %s", method,
                              url.path[:200], peer, err.message)
            else:
                _log.info("REST %s %s: %d %s", method, url.path[:200], err.status, err.message)
            answer = self.error_page(err.status, err.message) if self.error_page is not None \
                else Response(err.body(), err.status)
        self._observe(route.name if route is not None else "unmatched", answer.status, time.perf_counter() - started)
        return answer

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

    @property
    def tokens(self) -> TokenStore | None:
        """The tokens this server checks (None: it checks none)."""
        return self._tokens

    def _run(self, route: Route, request: Request) -> Response:
        """Run a handler in one of `workers` slots, as the caller's principal."""
        if not self._slots.acquire(timeout=self.settings.queue_timeout_s):
            raise ServiceUnavailableError(f"the catalog serves {self.settings.workers} REST calls at once; retry")
        with self._idle:
            self._active += 1
        try:
            with acting_as(request.principal) if request.principal is not None else nullcontext():
                return route.handler(request)
        finally:
            self._slots.release()
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def _read_body(self, headers: Mapping[str, str], read_body: Callable[[int], bytes]) -> Any:
        text = headers.get("content-length")
        if text is None:
            if headers.get("transfer-encoding"):
                raise InvalidInputError("send the request body with a Content-Length (chunked bodies are not read)")
            return None
        if not text.isdigit():
            raise InvalidInputError(f"Content-Length {text[:40]!r} is not a number")
        size = int(text)
        if size > self.settings.max_body_bytes:
            raise BodyTooLargeError(f"the request body has {size} bytes; at most {self.settings.max_body_bytes}")
        if size == 0:
            return None
        raw = read_body(size)
        if len(raw) != size:
            raise InvalidInputError(f"the request body ended after {len(raw)} of {size} bytes")
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


def _handler_class(idle_timeout_s: float) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = idle_timeout_s
        server_version = "lsmlake"
        sys_version = ""

        def _handle(self) -> None:
            app = self.server.app  # type: ignore[attr-defined]
            headers = {k.lower(): v for k, v in self.headers.items()}
            read: list[int] = []

            def read_body(n: int) -> bytes:
                read.append(n)
                return self.rfile.read(n)

            answer = app.serve(self.command, self.path, headers, read_body, f"{self.client_address[0]}")
            body = answer.body
            if answer.content_type == JSON:
                data = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
            else:
                data = body.encode() if isinstance(body, str) else bytes(body or b"")
            self.send_response(answer.status)
            if body is not None:
                self.send_header("Content-Type", answer.content_type)
            for name, value in answer.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            if not read and headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
                self.send_header("Connection", "close")  # an unread body would be taken for the next request
                self.close_connection = True
            self.end_headers()
            if data:
                self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            _log.debug("REST %s: " + format, self.client_address[0], *args)

    return _Handler
