"""The statuses of the REST API's refusals (`lsmlake.rest.errors`)."""

from __future__ import annotations

import pytest

from lsmlake import errors
from lsmlake.metastore import MetaStoreUnavailableError
from lsmlake.rest.errors import NotImplementedRestError, rest_error_for


@pytest.mark.parametrize(("error", "status"), [
    (errors.UnsupportedOperationError("no"), 501),
    (NotImplementedRestError("no"), 501),
    (errors.ServiceUnavailableError("no"), 503),
    (MetaStoreUnavailableError("no"), 503),
    (errors.NotFoundError("no"), 404),
])
def test_a_refusal_gets_its_status_and_message(error: errors.LakeError, status: int) -> None:
    answer = rest_error_for(error, "TABLE", "db.t")
    assert answer is not None and (answer.status, answer.message) == (status, "no")
    assert answer.body() == {"message": "no", "resourceType": "TABLE", "resourceName": "db.t", "code": status}
