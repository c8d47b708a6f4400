"""The one mapping of lsmlake errors to gRPC status codes, and of status codes back to errors."""

from __future__ import annotations

import grpc
import pytest

from lsmlake import errors
from lsmlake.metastore import MetaStoreUnavailableError
from lsmlake.rpc.errors import INTERNAL_MESSAGE, UnimplementedError, error_for, status_for


@pytest.mark.parametrize(("error", "code"), [
    (errors.InvalidInputError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (errors.SchemaMismatchError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (errors.UnknownOptionError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFoundError("bad"), grpc.StatusCode.NOT_FOUND),
    (errors.AlreadyExistsError("bad"), grpc.StatusCode.ALREADY_EXISTS),
    (errors.CommitConflictError("bad"), grpc.StatusCode.FAILED_PRECONDITION),
    (errors.CommitRetryExhaustedError("bad"), grpc.StatusCode.ABORTED),
    (errors.CommitStateUnknownError("bad"), grpc.StatusCode.UNAVAILABLE),
    (MetaStoreUnavailableError("bad"), grpc.StatusCode.UNAVAILABLE),
    (UnimplementedError("bad"), grpc.StatusCode.UNIMPLEMENTED),
    (errors.UnsupportedOperationError("bad"), grpc.StatusCode.UNIMPLEMENTED),
])
def test_lake_errors_keep_their_message(error: Exception, code: grpc.StatusCode) -> None:
    assert status_for(error) == (code, "bad")


@pytest.mark.parametrize("error", [RuntimeError("secret path /x"), errors.CorruptMetadataError("x"), KeyError("k")])
def test_anything_else_is_internal_with_a_generic_message(error: Exception) -> None:
    assert status_for(error) == (grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)


class _Failed(grpc.RpcError):
    """A failed call as a gRPC stub raises it."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                  grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED])
def test_a_change_without_a_definite_answer_has_an_unknown_outcome(code: grpc.StatusCode) -> None:
    error = error_for(_Failed(code, "no reply"), changes_state=True)
    assert type(error) is errors.CommitStateUnknownError  # never "nothing was applied"
    assert not isinstance(error, errors.ServiceUnavailableError)
    assert "no reply" in str(error) and code.name in str(error) and "same request id" in str(error)
    assert error_for(_Failed(code, "no reply")).__class__ is errors.CommitStateUnknownError  # the safe default


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
def test_a_read_without_an_answer_is_plainly_unavailable(code: grpc.StatusCode) -> None:
    error = error_for(_Failed(code, "no reply"), changes_state=False)
    assert type(error) is errors.ServiceUnavailableError and str(error) == "no reply"


@pytest.mark.parametrize("error", [
    errors.InvalidInputError("bad"), errors.NotFoundError("bad"), errors.AlreadyExistsError("bad"),
    errors.CommitConflictError("bad"), errors.CommitRetryExhaustedError("bad"), errors.BackPressureError("bad"),
])
@pytest.mark.parametrize("changes_state", [True, False])
def test_a_definite_refusal_comes_back_as_the_error_the_service_raised(error: errors.LakeError,
                                                                     changes_state: bool) -> None:
    back = error_for(_Failed(*status_for(error)), changes_state=changes_state)
    assert type(back) is type(error) and str(back) == "bad"


def test_refusals_without_an_error_of_their_own_name_their_status() -> None:
    for code, cls in ((grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDeniedError),
                      (grpc.StatusCode.UNAUTHENTICATED, errors.LakeError)):
        back = error_for(_Failed(code, "no"), changes_state=True)
        assert type(back) is cls and str(back) == f"{code.name}: no"


def test_unimplemented_without_the_detail_is_an_unsupported_operation() -> None:
    """The class says what the status did (a definite refusal that asking again will not change)."""
    back = error_for(_Failed(grpc.StatusCode.UNIMPLEMENTED, "no"), changes_state=True)
    assert type(back) is errors.UnsupportedOperationError and str(back) == "no"
