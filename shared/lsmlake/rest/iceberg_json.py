"""The JSON of Iceberg's REST catalog protocol that lsmlake answers: its error body, its endpoint names, its pages,
and storage settings under the keys of Iceberg's file IOs.

Iceberg clients decide by the status and, on a 404, by the error's `type` (a missing namespace and a missing
table are both 404): the body is `{"error": {"message", "type", "code"}}`, `type` named after the Iceberg
exception the client raises. A write to a read-only catalog is 406, the spec's "unsupported operation".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lsmlake.errors import InvalidInputError
from lsmlake.fs.storage_settings import StorageSettings
from lsmlake.rest.errors import RestError

#: the path prefix of the Iceberg REST API on the catalog's REST port (Paimon's API holds `/v1/...`)
ICEBERG_PREFIX = "/iceberg"
#: the status the Iceberg REST spec gives an operation the server does not support
UNSUPPORTED_STATUS = 406
MAX_PAGE = 1_000

# 404s by what is missing (the route's resource, or the error's own)
_NOT_FOUND_TYPES = {"NAMESPACE": "NoSuchNamespaceException", "TABLE": "NoSuchTableException",
                    "VIEW": "NoSuchViewException"}
_TYPES = {400: "BadRequestException", 401: "NotAuthorizedException", 403: "ForbiddenException",
          404: "NotFoundException", 406: "UnsupportedOperationException", 409: "AlreadyExistsException",
          413: "BadRequestException", 500: "ServiceFailureException", 501: "UnsupportedOperationException",
          503: "ServiceUnavailableException"}


def error_type(status: int, resource_type: str | None = None) -> str:
    """The Iceberg exception name an error of this status (about this resource) is answered with."""
    if status == 404 and resource_type in _NOT_FOUND_TYPES:
        return _NOT_FOUND_TYPES[resource_type]
    return _TYPES.get(status, "RESTException")


def error_body(err: RestError) -> dict[str, Any]:
    """Iceberg's ErrorResponse for a refusal."""
    return {"error": {"message": err.message, "type": error_type(err.status, err.resource_type),
                      "code": err.status}}


def endpoint(method: str, path: str) -> str:
    """An endpoint as a config response lists it: `GET /v1/{prefix}/namespaces` (the `{prefix}` placeholder is
    written even though this catalog has no prefix: clients compare the strings)."""
    return f"{method} /v1/{{prefix}}/{path}"


def page_of(names: Iterable[str], query: Mapping[str, str]) -> tuple[list[str], str | None]:
    """One page of the sorted `names` after `pageToken` (the last name of the previous page), at most `pageSize`
    (default and cap MAX_PAGE), and the next page's token (None on the last page). `names` is consumed lazily, so a
    filter behind it runs for a page's worth of names and one more."""
    size_text = query.get("pageSize") or str(MAX_PAGE)
    if not size_text.isdigit() or int(size_text) < 1:
        raise InvalidInputError(f"pageSize {size_text[:20]!r} must be a positive integer")
    size = min(int(size_text), MAX_PAGE)
    token = query.get("pageToken") or None
    shown: list[str] = []
    for name in names:
        if token is not None and name <= token:
            continue
        if len(shown) == size:
            return shown, shown[-1]
        shown.append(name)
    return shown, None


def file_io_config(settings: StorageSettings, expires_at_ms: int | None = None) -> dict[str, str]:
    """S3 settings under the keys pyiceberg's and Iceberg Java's S3 file IOs read (empty for empty settings)."""
    out: dict[str, str] = {}
    for key, value in (("s3.endpoint", settings.endpoint), ("s3.region", settings.region),
                       ("client.region", settings.region), ("s3.access-key-id", settings.access_key_id),
                       ("s3.secret-access-key", settings.secret_access_key),
                       ("s3.session-token", settings.session_token)):
        if value:
            out[key] = value
    # a custom endpoint is addressed by path unless told otherwise (as lsmlake's own clients do)
    path_style = settings.path_style if settings.path_style is not None else \
        (True if settings.endpoint is not None else None)
    if path_style is not None:
        out["s3.path-style-access"] = str(path_style).lower()  # Iceberg Java
        out["s3.force-virtual-addressing"] = str(not path_style).lower()  # pyiceberg
    if settings.access_key_id and expires_at_ms is not None:
        out["s3.session-token-expires-at-ms"] = str(expires_at_ms)
    return out
