"""The one place where lsmlake errors become HTTP statuses with Paimon's REST error body.

Paimon's REST clients decide by the status: 404 is "no such resource" (pypaimon raises it as "table not
exist" on a table's path), 409 "already exists", 403 "forbidden", 401 "not authorized", 400 "bad request";
they retry 503 (and 429) on reads. The body is `{"message", "resourceType", "resourceName", "code"}`.
Anything that is not a lsmlake refusal is logged with its traceback and answered 500 with a generic message:
no stack detail reaches a client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsmlake.errors import (
    AlreadyExistsError,
    BackPressureError,
    CommitConflictError,
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

INTERNAL_MESSAGE = "internal error in the service; see its log"
MAX_MESSAGE_CHARS = 2_000


class NotImplementedRestError(UnsupportedOperationError):
    """A part of Paimon's REST API this catalog does not serve."""


class UnauthenticatedError(LakeError):
    """No bearer token, or one the service does not know."""


class NoSuchResourceError(NotFoundError):
    """A missing resource of another type than the route's (a table's path asking for its snapshot: SNAPSHOT)."""

    def __init__(self, message: str, resource_type: str) -> None:
        super().__init__(message)
        self.resource_type = resource_type


class UnknownPathError(NotFoundError):
    """A path the API does not have: 404, as clients expect of a missing resource."""


class MethodNotAllowedError(LakeError):
    """A path the API has, with another method."""


class BodyTooLargeError(InvalidInputError):
    """A request body over the server's limit (refused before it is read)."""


@dataclass(frozen=True)
class RestError:
    """An HTTP status and the Paimon error body that goes with it."""

    status: int
    message: str
    resource_type: str | None = None
    resource_name: str | None = None

    def body(self) -> dict[str, Any]:
        return {"message": self.message, "resourceType": self.resource_type, "resourceName": self.resource_name,
                "code": self.status}


# Most specific first: StaleTableError and CommitConflictError are plain LakeErrors. A MetaStoreUnavailableError
# is a ServiceUnavailableError.
_STATUSES: tuple[tuple[type[BaseException], int], ...] = (
    (UnsupportedOperationError, 501),  # incl. NotImplementedRestError
    (UnauthenticatedError, 401),
    (MethodNotAllowedError, 405),
    (BodyTooLargeError, 413),
    (PermissionDeniedError, 403),
    (InvalidInputError, 400),
    (NotFoundError, 404),
    (AlreadyExistsError, 409),
    (StaleTableError, 409),
    (CommitConflictError, 409),
    (BackPressureError, 503),
    (StorageError, 503),
    (ServiceUnavailableError, 503),
    (CommitStateUnknownError, 503),
)


def _short(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return f"{message[:MAX_MESSAGE_CHARS - 40]}... ({len(message)} chars in all)"


def rest_error_for(error: BaseException, resource_type: str | None = None,
                   resource_name: str | None = None) -> RestError | None:
    """The answer for a lsmlake refusal; None for anything else (a bug or a failure: answer 500, log it)."""
    if not isinstance(error, LakeError):
        return None
    resource_type = getattr(error, "resource_type", None) or resource_type
    for cls, status in _STATUSES:
        if isinstance(error, cls):
            return RestError(status, _short(str(error) or cls.__name__), resource_type, resource_name)
    return None


def internal_error() -> RestError:
    return RestError(500, INTERNAL_MESSAGE)
