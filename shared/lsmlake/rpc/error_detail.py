"""An lsmlake error's class and fields as bytes that travel with a failed call, and the error rebuilt from them.

The detail rides in the status's trailing metadata under a `-bin` key, as JSON: `{"class": "lsmlake.errors.
StorageError", "lineage": [...], "fields": {"errno": 28}}`. The richer `google.rpc.Status` details would need
grpcio-status and googleapis-common-protos, which this project does not install, and a `-bin` trailer is what
that mechanism uses underneath anyway; the status message stays the human-readable text it always was, so a
foreign client that knows nothing of the key loses nothing.

The receiving side only ever builds classes already loaded in its process (subclasses of `LakeError`), never
imports a module a peer names: a class it does not know (a service's own error) is rebuilt as the nearest
ancestor it knows, from the lineage.
"""

from __future__ import annotations

import json
from typing import Any

from lsmlake.errors import LakeError

ERROR_DETAIL_KEY = "lsmlake-error-bin"
#: fields beyond this many bytes of JSON are left out: trailers share gRPC's 8 KiB metadata limit with the message
MAX_FIELD_BYTES = 1024
_OS_ERROR_FIELDS = ("errno", "strerror", "filename")


def class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _fields(error: LakeError) -> dict[str, Any]:
    """The public attributes of `error` that are JSON values, within `MAX_FIELD_BYTES`; `errno` of an OSError."""
    attributes = dict(vars(error))
    if isinstance(error, OSError) and error.errno is not None:
        attributes["errno"] = error.errno
    out: dict[str, Any] = {}
    size = 0
    for name, value in attributes.items():
        if name.startswith("_") or not name.isidentifier():
            continue
        try:
            encoded = json.dumps(value)
        except (TypeError, ValueError):
            continue  # not a JSON value (a status code relayed from another service, say): it does not travel
        if size + len(encoded) + len(name) > MAX_FIELD_BYTES:
            continue
        size += len(encoded) + len(name)
        out[name] = value
    return out


def detail_of_error(error: LakeError) -> bytes:
    """The detail that lets the caller rebuild `error` (its message travels as the status message)."""
    lineage = [class_name(c) for c in type(error).__mro__ if issubclass(c, LakeError)]
    return json.dumps({"class": lineage[0], "lineage": lineage, "fields": _fields(error)}).encode()


def _known() -> dict[str, type[LakeError]]:
    """Every subclass of LakeError loaded in this process, by module and qualified name."""
    out: dict[str, type[LakeError]] = {}
    pending: list[type[LakeError]] = [LakeError]
    while pending:
        cls = pending.pop()
        out[class_name(cls)] = cls
        pending.extend(cls.__subclasses__())
    return out


def detail_of(data: bytes) -> tuple[type[LakeError], dict[str, Any]] | None:
    """The class (the nearest this process knows) and fields a detail names; None for bytes that are no detail."""
    try:
        doc = json.loads(data)
        lineage = [str(name) for name in doc["lineage"]]
        fields = doc.get("fields") or {}
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(fields, dict):
        fields = {}
    known = _known()
    for name in lineage:
        if name in known:
            return known[name], {k: v for k, v in fields.items() if isinstance(k, str) and k.isidentifier()
                                 and not k.startswith("_")}
    return None


def error_from_detail(cls: type[LakeError], message: str, fields: dict[str, Any]) -> LakeError:
    """An instance of `cls` with `message` and `fields`, without calling its `__init__`: a class whose constructor
    takes more than a message (PlanStateError's plan id and state) gets those as the fields they were stored in."""
    error = cls.__new__(cls, message)
    if not error.args:
        error.args = (message,)
    for name, value in fields.items():
        # only the error's own fields: a name the class already has (`args`, a method) is the class's to
        # define, not a peer's; an OSError's errno is set by the exception machinery, so named explicitly
        if not hasattr(cls, name) or (issubclass(cls, OSError) and name in _OS_ERROR_FIELDS):
            setattr(error, name, value)
    return error
