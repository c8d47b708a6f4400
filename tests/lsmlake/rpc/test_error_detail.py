"""The error detail a peer sends is data, never code: it can name a class this process knows and set that
error's own fields, nothing else (not its message's arguments, not its methods)."""

from __future__ import annotations

import errno
import json

from lsmlake.errors import NotFoundError, StorageError
from lsmlake.metastore.errors import PlanStateError
from lsmlake.rpc.error_detail import detail_of, error_from_detail


def _detail(cls: type, fields: dict[str, object]) -> bytes:
    name = f"{cls.__module__}.{cls.__qualname__}"
    return json.dumps({"class": name, "lineage": [name], "fields": fields}).encode()


def test_a_peer_cannot_replace_the_message_or_the_methods_of_the_error() -> None:
    forged = {"args": ["forged message"], "with_traceback": 1, "add_note": "x", "__str__": "y", "message": "kept"}
    found = detail_of(_detail(NotFoundError, forged))
    assert found is not None
    cls, fields = found
    error = error_from_detail(cls, "table db.t does not exist", fields)
    assert type(error) is NotFoundError
    assert str(error) == "table db.t does not exist" and error.args == ("table db.t does not exist",)
    assert callable(error.with_traceback) and callable(error.add_note)
    assert error.message == "kept"  # a field of the error's own, as the service set it


def test_the_fields_of_the_error_travel() -> None:
    found = detail_of(_detail(PlanStateError, {"plan_id": 7, "state": "COMPLETED"}))
    assert found is not None
    error = error_from_detail(*found[:1], "plan 7 is COMPLETED", found[1])
    assert isinstance(error, PlanStateError) and (error.plan_id, error.state) == (7, "COMPLETED")
    found = detail_of(_detail(StorageError, {"errno": errno.ENOSPC}))
    assert found is not None
    error = error_from_detail(found[0], "No space left on device", found[1])
    assert isinstance(error, StorageError) and error.errno == errno.ENOSPC
