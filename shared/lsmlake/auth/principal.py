"""The principal a call is served for, where the servicer can see it.

The interceptor authenticates the token before the servicer runs; what a caller's identity decides
inside a method (whose commit user this is, whose request ids, whose plan) needs it there too. gRPC's
sync server runs a call's behaviour, and iterates a streamed response, on one pool thread, so the
principal is set in a context variable around exactly that and reset when the call ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import grpc

from .tokens import Principal

_current: ContextVar[Principal | None] = ContextVar("lsmlake_principal", default=None)

#: joins a principal's name to the names it owns (commit users, request ids, plan owners); never in a name
SEPARATOR = "/"


def current_principal() -> Principal | None:
    """The principal of the call on this thread; None when the service checks no tokens."""
    return _current.get()


def owned(name: str, principal: Principal | None) -> str:
    """`name` in the principal's namespace: `<principal>/<name>` (unchanged without tokens or when already there).

    Two principals can never name the same thing, so one cannot claim, answer or undo another's.
    """
    if principal is None:
        return name
    prefix = principal.name + SEPARATOR
    return name if name.startswith(prefix) else prefix + name


def unowned(name: str, principal: Principal | None) -> str:
    """The name a principal gave, without its namespace (inverse of `owned`)."""
    if principal is None:
        return name
    prefix = principal.name + SEPARATOR
    return name[len(prefix):] if name.startswith(prefix) else name


def serving(handler: grpc.RpcMethodHandler, principal: Principal) -> grpc.RpcMethodHandler:
    """A handler like `handler` whose behaviour runs with `principal` as the current principal."""

    def unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
        def run(request: Any, context: grpc.ServicerContext) -> Any:
            token = _current.set(principal)
            try:
                return behavior(request, context)
            finally:
                _current.reset(token)
        return run

    def streamed(behavior: Callable[..., Any]) -> Callable[..., Iterator[Any]]:
        def run(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            token = _current.set(principal)
            try:
                yield from behavior(request, context)
            finally:
                _current.reset(token)
        return run

    kw = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streamed(handler.stream_stream), **kw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **kw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(streamed(handler.unary_stream), **kw)
    return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **kw)
