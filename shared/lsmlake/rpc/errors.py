"""The one place where lsmlake errors become gRPC status codes, and status codes errors again.

Every RPC of every lsmlake service is wrapped by `guarded`: a `LakeError` becomes the status its
subclass calls for with its (human-readable) message; anything else is logged and answered INTERNAL
with a generic message, so no stack detail leaks to clients.

Many more error classes than status codes share them, so a code alone cannot say which error a service raised. A
`LakeError` therefore also travels as its class and fields in the status's trailing metadata
(`lsmlake.rpc.error_detail`), and `error_for` rebuilds the same class on the caller's side; a status without
that detail (from a foreign server, an interceptor, or gRPC itself) maps by its code alone.

A caller of a service turns a failed call back into an lsmlake error with `error_for`, or decides by
`NO_ANSWER` and `UNDECIDED` whether to ask again: a call that changes state and got no definite answer
may have been applied, so it is never reported as "nothing was applied".
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from lsmlake.errors import (
    AlreadyExistsError,
    BackPressureError,
    CommitConflictError,
    CommitRetryExhaustedError,
    CommitStateUnknownError,
    InvalidInputError,
    LakeError,
    NotFoundError,
    PermissionDeniedError,
    ServiceUnavailableError,
    StaleTableError,
    StorageError,
    UnsupportedOperationError,
)
from lsmlake.metastore.errors import PlanConflictError, PlanStateError
from lsmlake.rpc.error_detail import ERROR_DETAIL_KEY, detail_of, detail_of_error, error_from_detail
from lsmlake.runtime.log_limit import LogLimiter, peer_host

_log = logging.getLogger(__name__)
_undecodable_log = LogLimiter(_log, "refused undecodable requests")


class UnimplementedError(UnsupportedOperationError):
    """An RPC this version of the service does not implement yet."""


# Most specific first: CommitRetryExhaustedError is a CommitConflictError, the input errors share a root, a
# MetaStoreUnavailableError is a ServiceUnavailableError.
_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (UnsupportedOperationError, grpc.StatusCode.UNIMPLEMENTED),  # incl. UnimplementedError
    (BackPressureError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StorageError, grpc.StatusCode.RESOURCE_EXHAUSTED),  # disk full: retry once there is space
    (ServiceUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (InvalidInputError, grpc.StatusCode.INVALID_ARGUMENT),  # incl. SchemaMismatchError, UnknownOptionError
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (CommitRetryExhaustedError, grpc.StatusCode.ABORTED),
    (CommitConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (StaleTableError, grpc.StatusCode.FAILED_PRECONDITION),
    (PlanConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (PlanStateError, grpc.StatusCode.FAILED_PRECONDITION),
    (CommitStateUnknownError, grpc.StatusCode.UNAVAILABLE),
)

INTERNAL_MESSAGE = "internal error in the service; see its log"
#: the attribute through which an error rebuilt by `error_for` keeps its status when a service raises it again
RELAYED_STATUS = "relayed_status"
#: a status message travels in a gRPC trailer (8 KiB by default): a reason that echoes a huge input is cut
MAX_MESSAGE_CHARS = 2_000


def _short(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return f"{message[:MAX_MESSAGE_CHARS - 40]}... ({len(message)} chars in all)"


def status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message a client gets for `error`.

    An error that carries a `grpc.StatusCode` as its `relayed_status` (a refusal relayed from another service,
    see `error_for`) keeps it.
    """
    code = getattr(error, RELAYED_STATUS, None)
    if isinstance(error, LakeError) and isinstance(code, grpc.StatusCode):
        return code, _short(str(error) or type(error).__name__)
    for cls, code in _CODES:
        if isinstance(error, cls):
            return code, _short(str(error) or cls.__name__)
    return grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE


#: the call got no answer: the service was not reached, or its reply did not come back in time. Asking again
#: may succeed; a call that changes state may have been applied all the same.
NO_ANSWER: frozenset[grpc.StatusCode] = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
#: every status that is not a definite refusal: besides no answer, a call cut short (CANCELLED) or failing
#: inside the service (INTERNAL, UNKNOWN) may have got as far as applying its change
UNDECIDED: frozenset[grpc.StatusCode] = NO_ANSWER | {
    grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}

# The refusals a caller handles, by the error a service raised for them (the inverse of `_CODES`), for a status
# that carries no error detail.
_ERRORS: dict[grpc.StatusCode, type[LakeError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidInputError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidInputError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: BackPressureError,
    grpc.StatusCode.FAILED_PRECONDITION: CommitConflictError,
    grpc.StatusCode.ABORTED: CommitRetryExhaustedError,
    grpc.StatusCode.UNAVAILABLE: ServiceUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: ServiceUnavailableError,
    grpc.StatusCode.UNIMPLEMENTED: UnsupportedOperationError,
}
#: classes too general to say what went wrong: their message starts with the status name (docs/security.md)
_NAMING_THE_STATUS: tuple[type[LakeError], ...] = (LakeError, PermissionDeniedError)


def error_for(e: grpc.RpcError, *, changes_state: bool = True, refused: str | None = None) -> LakeError:
    """The lsmlake error for a failed call, carrying the server's message.

    A status with an error detail is rebuilt as the class (and fields) the service raised; one without it maps
    by its code. `refused` (say "the catalog refused the commit") starts the message of a definite refusal.

    `changes_state`: the call writes, commits or changes a table. Unless the service definitely refused it
    (a status outside `UNDECIDED`), its outcome is then unknown: CommitStateUnknownError, whose message says
    to send it again as it was (a write with the same request id). A read without an answer is plainly
    ServiceUnavailableError: nothing to undo, ask again. UNIMPLEMENTED is UnsupportedOperationError.
    Statuses with no error of their own (UNAUTHENTICATED, ...) are a LakeError naming the status, as are
    refusals by PERMISSION_DENIED (docs/security.md).

    The error keeps the status it came with (`RELAYED_STATUS`), so that a service raising it again answers its
    own caller with the same status (`status_for`).
    """
    code = e.code() if hasattr(e, "code") else None
    details = (e.details() if hasattr(e, "details") else None) or str(e)
    if not isinstance(code, grpc.StatusCode):
        return LakeError(details)
    message = f"{refused}: {details}" if refused else details
    detail = _detail(e)
    if changes_state and code in UNDECIDED and not (detail is not None and detail[0] is CommitStateUnknownError):
        return CommitStateUnknownError(f"{code.name}: {details}; the outcome is unknown, the change may have been "
                                       "applied: send it again as it was (a write with the same request id)")
    cls, fields = detail if detail is not None else (_ERRORS.get(code, LakeError), {})
    if cls in _NAMING_THE_STATUS and not refused:
        message = f"{code.name}: {message}"
    error = error_from_detail(cls, message, fields)
    setattr(error, RELAYED_STATUS, code)
    return error


def relayed(error: BaseException) -> bool:
    """Whether `error` is another service's, rebuilt by `error_for` (not one this process raised)."""
    return isinstance(getattr(error, RELAYED_STATUS, None), grpc.StatusCode)


def _detail(e: grpc.RpcError) -> tuple[type[LakeError], dict[str, Any]] | None:
    """The class and fields of the error the service raised, from the call's trailing metadata (None: not sent)."""
    trailing = e.trailing_metadata() if hasattr(e, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == ERROR_DETAIL_KEY and isinstance(value, bytes):
            return detail_of(value)
    return None


F = TypeVar("F", bound=Callable[..., Any])


def _abort(method: str, e: Exception, context: grpc.ServicerContext) -> None:
    """End the call (`context.abort` raises) with the status `e` maps to; what is not a refusal is logged with its
    traceback."""
    code, message = status_for(e)
    if code == grpc.StatusCode.INTERNAL or not isinstance(e, LakeError):
        _log.exception("%s failed", method)
    else:
        _log.info("%s: %s: %s", method, code.name, message)
    if isinstance(e, LakeError):
        context.set_trailing_metadata(((ERROR_DETAIL_KEY, detail_of_error(e)),))
    context.abort(code, message)


def guarded(method: F) -> F:
    """Wrap a servicer method `(self, request, context)` so that raised errors become gRPC statuses.

    Methods raise errors and never call `context.abort` themselves (an abort is a plain Exception
    that this wrapper would turn into INTERNAL).
    """

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as e:
            _abort(method.__name__, e, context)

    return wrapper  # type: ignore[return-value]


def guarded_stream(method: F) -> F:
    """`guarded` for a server-streaming method (a generator): errors raised while streaming end the stream."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            yield from method(self, request, context)
        except Exception as e:
            _abort(method.__name__, e, context)

    return wrapper  # type: ignore[return-value]


class _Undecodable:
    """Stands for a request whose bytes are not a message of the method's request type."""

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason


def _lenient(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    owner = getattr(deserializer, "__self__", None)
    type_name = getattr(getattr(owner, "DESCRIPTOR", None), "full_name", "request message")

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as e:  # protobuf's DecodeError, whatever the implementation
            return _Undecodable(type_name, f"the request is not a valid {type_name} ({len(data)} bytes): {e}")

    return parse


#: what makes gRPC run a behaviour otherwise than "one pool thread returns or iterates its result"
_MODE_ATTRIBUTES = ("experimental_non_blocking", "experimental_thread_pool")


def same_mode(behavior: Callable[..., Any], wrapper: F) -> F:
    """`wrapper` (of `behavior`) served the way gRPC serves `behavior`: a non-blocking stream (the health
    service's Watch, fed from callbacks on no thread) stays non-blocking, and the wrapper must then pass on
    the `send_response_callback` gRPC gives it. A wrapper without this would hold a pool thread for as long
    as the stream is open."""
    for name in _MODE_ATTRIBUTES:
        value = getattr(behavior, name, None)
        if value is not None:
            setattr(wrapper, name, value)
    return wrapper


def _refuse_unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    def handle(request: Any, context: grpc.ServicerContext, *callback: Any) -> Any:
        if isinstance(request, _Undecodable):
            peer = context.peer()
            _undecodable_log.log(logging.INFO, (request.type_name, peer_host(peer)), "refused from %s: %s", peer,
                                 request.reason)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, _short(request.reason))
        return behavior(request, context, *callback)

    return same_mode(behavior, handle)


def _checked_stream(requests: Any) -> Any:
    for r in requests:
        if isinstance(r, _Undecodable):
            raise InvalidInputError(r.reason)  # inside the servicer, so `guarded` answers INVALID_ARGUMENT
        yield r


def _refuse_stream(behavior: Callable[..., Any]) -> Callable[..., Any]:
    def handle(requests: Any, context: grpc.ServicerContext, *callback: Any) -> Any:
        return behavior(_checked_stream(requests), context, *callback)

    return same_mode(behavior, handle)


class UndecodableRequests(grpc.ServerInterceptor):
    """Answers INVALID_ARGUMENT, naming the expected message type, to a request whose bytes do not decode.

    Without it gRPC answers such a request INTERNAL ("Exception deserializing request!"), which reads as a
    fault of the service. Install it on every server: `grpc.server(..., interceptors=[UndecodableRequests()])`.
    A wrapped behaviour keeps its mode (`same_mode`): a non-blocking stream stays one. Refusals are logged at
    INFO, the first of each (message type, peer host) at once and the repeats summed up (`LogLimiter`).
    """

    def intercept_service(self, continuation: Callable[[Any], Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None or not hasattr(handler, "_replace"):
            return handler
        lenient = _lenient(handler.request_deserializer)
        if handler.unary_unary is not None:
            return handler._replace(request_deserializer=lenient, unary_unary=_refuse_unary(handler.unary_unary))
        if handler.unary_stream is not None:
            return handler._replace(request_deserializer=lenient, unary_stream=_refuse_unary(handler.unary_stream))
        if handler.stream_unary is not None:
            return handler._replace(request_deserializer=lenient, stream_unary=_refuse_stream(handler.stream_unary))
        return handler._replace(request_deserializer=lenient, stream_stream=_refuse_stream(handler.stream_stream))
