"""The one mapping of lsmlake errors to gRPC status codes."""

from __future__ import annotations

import grpc
import pytest

from lsmlake import errors
from lsmlake.metastore import MetaStoreUnavailableError
from lsmlake.rpc.errors import INTERNAL_MESSAGE, UnimplementedError, status_for


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
])
def test_lake_errors_keep_their_message(error: Exception, code: grpc.StatusCode) -> None:
    assert status_for(error) == (code, "bad")


@pytest.mark.parametrize("error", [RuntimeError("secret path /x"), errors.CorruptMetadataError("x"), KeyError("k")])
def test_anything_else_is_internal_with_a_generic_message(error: Exception) -> None:
    assert status_for(error) == (grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
