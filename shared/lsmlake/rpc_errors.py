"""The one place where lsmlake errors become gRPC status codes.

Every RPC of every lsmlake service is wrapped by `guarded`: a `LakeError` becomes the status its
subclass calls for with its (human-readable) message; anything else is logged and answered INTERNAL
with a generic message, so no stack detail leaks to clients.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from .errors import (
    AlreadyExistsError,
    BackPressureError,
    CommitConflictError,
    CommitRetryExhaustedError,
    CommitStateUnknownError,
    InvalidInputError,
    LakeError,
    NotFoundError,
    ServiceUnavailableError,
)
from .metastore.errors import MetaStoreUnavailableError, PlanConflictError, PlanStateError

_log = logging.getLogger(__name__)

class UnimplementedError(LakeError):
    """An RPC this version of the service does not implement yet."""


# Most specific first: CommitRetryExhaustedError is a CommitConflictError, the input errors share a root.
_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (UnimplementedError, grpc.StatusCode.UNIMPLEMENTED),
    (BackPressureError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ServiceUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (InvalidInputError, grpc.StatusCode.INVALID_ARGUMENT),  # incl. SchemaMismatchError, UnknownOptionError
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (CommitRetryExhaustedError, grpc.StatusCode.ABORTED),
    (CommitConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (PlanConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (PlanStateError, grpc.StatusCode.FAILED_PRECONDITION),
    (CommitStateUnknownError, grpc.StatusCode.UNAVAILABLE),
    (MetaStoreUnavailableError, grpc.StatusCode.UNAVAILABLE),
)



INTERNAL_MESSAGE = "internal error in the service; see its log"


def status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message a client gets for `error`.

    An error that carries a `grpc.StatusCode` as its `code` (a refusal relayed from another service) keeps it.
    """
    code = getattr(error, "code", None)
    if isinstance(error, LakeError) and isinstance(code, grpc.StatusCode):
        return code, str(error) or type(error).__name__
    for cls, code in _CODES:
        if isinstance(error, cls):
            return code, str(error) or cls.__name__
    return grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE


F = TypeVar("F", bound=Callable[..., Any])


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
            code, message = status_for(e)
            if code == grpc.StatusCode.INTERNAL or not isinstance(e, LakeError):
                _log.exception("%s failed", method.__name__)
            else:
                _log.info("%s: %s: %s", method.__name__, code.name, message)
            context.abort(code, message)

    return wrapper  # type: ignore[return-value]


def guarded_stream(method: F) -> F:
    """`guarded` for a server-streaming method (a generator): errors raised while streaming end the stream."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            yield from method(self, request, context)
        except Exception as e:
            code, message = status_for(e)
            if code == grpc.StatusCode.INTERNAL or not isinstance(e, LakeError):
                _log.exception("%s failed", method.__name__)
            else:
                _log.info("%s: %s: %s", method.__name__, code.name, message)
            context.abort(code, message)

    return wrapper  # type: ignore[return-value]
