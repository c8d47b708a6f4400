"""Checks every call's bearer token and role before the servicer sees it (servers), and attaches the
token to every call (clients)."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from lsmlake.auth.principal import acting_as
from lsmlake.auth.roles import is_open, required_role
from lsmlake.auth.tokens import Principal, TokenStore
from lsmlake.runtime.log_limit import LogLimiter, peer_host

_log = logging.getLogger(__name__)
#: a caller without a token can make refusals at will: the first of each (code, reason, host) is logged, the
#: repeats are summed up once a minute
_refusals = LogLimiter(_log, "refused calls")

AUTHORIZATION = "authorization"
_SCHEME = "bearer "


def bearer_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The token of an `authorization: Bearer <token>` entry; None when there is none."""
    for key, value in metadata or ():
        if key.lower() == AUTHORIZATION and isinstance(value, str) and value[:len(_SCHEME)].lower() == _SCHEME:
            return value[len(_SCHEME):].strip()
    return None


def _refusal(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str,
             method: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that fails the call with `code`."""

    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        peer = context.peer()
        _refusals.log(logging.WARNING, (code.name, peer_host(peer), message), "refused %s from %s: %s", method,
                      peer, message)
        context.abort(code, message)

    kw = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse, **kw)
    return grpc.unary_unary_rpc_method_handler(refuse, **kw)


class AuthInterceptor(grpc.ServerInterceptor):
    """Lets a call through only with a valid token whose role is at least the method's (see `roles`).

    No token or an unknown one: UNAUTHENTICATED. A valid token whose role is too low, or a method that no
    role may call: PERMISSION_DENIED. Health checking and reflection need no token.
    """

    def __init__(self, tokens: TokenStore) -> None:
        self.tokens = tokens

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                          details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method: str = details.method
        handler = continuation(details)
        if handler is None or is_open(method):
            return handler
        token = bearer_token(details.invocation_metadata)
        if not token:
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED,
                            "no bearer token: send the metadata 'authorization: Bearer <token>'", method)
        principal = self.tokens.authenticate(token)
        if principal is None:
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED, "the bearer token is not valid", method)
        needed = required_role(method)
        if needed is None:
            return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED,
                            f"{method} is not open to any role", method)
        if principal.role < needed:
            return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED,
                            f"{principal.name} has role {principal.role.name.lower()}; {method} needs "
                            f"{needed.name.lower()}", method)
        return serving(handler, principal)


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                              "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call of a channel.

    An interceptor rather than gRPC call credentials, which gRPC sends only over TLS: a token on a
    plaintext loopback channel (tests, one machine) works the same way.
    """

    def __init__(self, token: str) -> None:
        self._entry = (AUTHORIZATION, f"Bearer {token}")

    def _with_token(self, d: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [*(d.metadata or ()), self._entry]
        return _CallDetails(d.method, d.timeout, metadata, d.credentials,
                            getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation: Any, details: grpc.ClientCallDetails, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: grpc.ClientCallDetails, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)


def serving(handler: grpc.RpcMethodHandler, principal: Principal) -> grpc.RpcMethodHandler:
    """A handler like `handler` whose behaviour runs with `principal` as the current principal."""

    def unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
        def run(request: Any, context: grpc.ServicerContext) -> Any:
            with acting_as(principal):
                return behavior(request, context)
        return run

    def streamed(behavior: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
        def run(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            with acting_as(principal):
                yield from behavior(request, context)
        return run

    kw = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streamed(handler.stream_stream), **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(streamed(handler.unary_stream), **kw)
    return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **kw)
