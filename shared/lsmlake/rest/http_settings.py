"""Where an HTTP port listens and what bounds its callers: one frozen settings object per port."""

from __future__ import annotations

from dataclasses import dataclass

MAX_BODY_BYTES = 16 << 20
PUBLIC_BODY_BYTES = 8 << 10  # a route answered without a token (a login form) reads at most this by default


@dataclass(frozen=True)
class HttpSettings:
    """Where and how the server listens; TLS when `tls_cert` is set, tokens checked when `auth_tokens` is.

    The bounds, in the order a request meets them: at accept, `max_connections` open connections in all and
    `max_connections_per_peer` from one IP address (over either: closed at once); the TLS handshake and the request
    head together within `head_timeout_s` of the accept, the head at most `max_head_bytes`; between requests on a
    kept-alive connection at most `idle_timeout_s` of silence; `workers` requests served at once (one more waits
    up to `queue_timeout_s` for a worker, then gets 503); a body only on a route that takes one, read once a
    worker is free, of at most the route's limit (`max_body_bytes` for an authenticated POST), within
    `body_timeout_s`; the answer too must be taken within `body_timeout_s`.
    """

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
    max_connections: int = 512
    max_connections_per_peer: int = 64
    head_timeout_s: float = 10.0
    max_head_bytes: int = 16 << 10
    body_timeout_s: float = 30.0
