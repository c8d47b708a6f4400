"""Iceberg's REST catalog API, read-only, under `/iceberg` on the catalog's REST port (beside Paimon's `/v1`).

An Iceberg engine configured with `uri=http://host:port/iceberg` loads the tables whose Iceberg metadata lsmlake
publishes after each Paimon commit (`metadata.iceberg.storage`, `lsmlake.iceberg`): a namespace is a database,
and a table is listed and loaded only once it has Iceberg metadata. Loading answers the current metadata file's
location and its JSON, read from the warehouse. Every write of the Iceberg protocol is refused (406, the spec's
unsupported operation) saying why: the metadata is derived from Paimon snapshots, so an Iceberg commit would be
overwritten by the next publication; writes go through Paimon. The config lists the endpoints served, so
clients use the HEAD ones and hear the refusals' reason rather than a missing endpoint.

The tokens and roles are those of the Paimon API (every route needs `reader`); the storage settings of an object
store warehouse go in a table's `config` under the keys of Iceberg's file IOs, to the callers the data token
policy gives them to (`lsmlake.catalog.data_tokens`), and to nobody else. Errors are Iceberg's ErrorResponse
(`lsmlake.rest.iceberg_json`), rendered by the HTTP server for every path under the prefix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from lsmlake.auth.roles import Role
from lsmlake.auth.tokens import Principal
from lsmlake.catalog.data_tokens import DataTokenVendor
from lsmlake.catalog.filesystem import check_name
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.errors import NotFoundError, PermissionDeniedError, UnsupportedOperationError
from lsmlake.fs.file_io import FileIO
from lsmlake.fs.storage_settings import StorageSettings
from lsmlake.iceberg import current_metadata_location
from lsmlake.rest.errors import NoSuchResourceError, RestError
from lsmlake.rest.http_server import Request, Response, Route
from lsmlake.rest.iceberg_json import (
    ICEBERG_PREFIX,
    UNSUPPORTED_STATUS,
    endpoint,
    error_body,
    file_io_config,
    page_of,
)
from lsmlake.table.file_store_table import FileStoreTable

_V1 = ICEBERG_PREFIX + "/v1"
_NS = _V1 + "/namespaces/{namespace}"
_T = _NS + "/tables/{table}"
_VIEW = _NS + "/views/{view}"
#: Iceberg's default separator of a namespace's levels in a path; lsmlake's namespaces have one level
_LEVELS = "\x1f"
#: a metadata file replaced and deleted between reading its location and reading it: read the new one
_READ_ATTEMPTS = 3


class IcebergRestApi:
    """The read-only Iceberg REST catalog over the catalog's operations."""

    def __init__(self, operations: CatalogOperations, data_tokens: DataTokenVendor | None = None) -> None:
        """`data_tokens`: who gets which table's storage settings (None: nobody)."""
        self.operations = operations
        self.data_tokens = data_tokens

    def routes(self) -> list[Route]:
        R = Role.READER
        served = [
            Route("GET", _V1 + "/namespaces", R, self.list_namespaces, "NAMESPACE"),
            Route("GET", _NS, R, self.load_namespace, "NAMESPACE"),
            Route("HEAD", _NS, R, self.namespace_exists, "NAMESPACE"),
            Route("GET", _NS + "/tables", R, self.list_tables, "NAMESPACE"),
            Route("GET", _T, R, self.load_table, "TABLE"),
            Route("HEAD", _T, R, self.table_exists, "TABLE"),
            Route("GET", _T + "/credentials", R, self.load_credentials, "TABLE"),
            # engines report scan metrics after reading; nothing here keeps them, and the body is not read
            Route("POST", _T + "/metrics", R, self.report_metrics, "TABLE", max_body=0),
            Route("GET", _NS + "/views", R, self.list_views, "NAMESPACE"),
            Route("GET", _VIEW, R, self.load_view, "VIEW"),
            Route("HEAD", _VIEW, R, self.load_view, "VIEW"),
            *_refused_writes(),
        ]
        endpoints = [endpoint(r.method, r.pattern.removeprefix(_V1 + "/")) for r in served]
        return [Route("GET", _V1 + "/config", R, lambda r: self.config(r, endpoints)), *served]

    # -- config and namespaces -----------------------------------------------------------------

    def config(self, r: Request, endpoints: list[str]) -> Response:
        # one warehouse: a `warehouse` parameter names it whatever it says; no prefix, so paths are /v1/...
        return Response({"defaults": {}, "overrides": {}, "endpoints": endpoints})

    def list_namespaces(self, r: Request) -> Response:
        parent = r.query.get("parent")
        if parent:
            self._database(parent)  # 404 when it is not there; nothing is below a database
            return Response({"namespaces": []})
        names, token = page_of(self.operations.list_databases(), r.query)
        return Response({"namespaces": [[n] for n in names], "next-page-token": token})

    def load_namespace(self, r: Request) -> Response:
        db = self._database(r.params["namespace"])
        return Response({"namespace": [db], "properties": {"location": self.operations.database_location(db)}})

    def namespace_exists(self, r: Request) -> Response:
        self._database(r.params["namespace"])
        return Response(None, 204)

    # -- tables --------------------------------------------------------------------------------

    def list_tables(self, r: Request) -> Response:
        db = self._database(r.params["namespace"])
        names, token = page_of(self._published(db), r.query)
        return Response({"identifiers": [{"namespace": [db], "name": n} for n in names], "next-page-token": token})

    def load_table(self, r: Request) -> Response:
        tid, table = self._table(r)
        location, metadata = self._metadata(tid, table)
        return Response({"metadata-location": location, "metadata": metadata,
                         "config": self._storage_config(tid, table, r.principal)})

    def table_exists(self, r: Request) -> Response:
        tid, table = self._table(r)
        self._location(tid, table)
        return Response(None, 204)

    def load_credentials(self, r: Request) -> Response:
        tid, table = self._table(r)
        self._location(tid, table)
        config = self._storage_config(tid, table, r.principal)
        prefix = self.operations.location(table.path)
        return Response({"storage-credentials": [{"prefix": prefix, "config": config}] if config else []})

    def report_metrics(self, r: Request) -> Response:
        self._table(r)
        return Response(None, 204)

    # -- views: there are none -----------------------------------------------------------------

    def list_views(self, r: Request) -> Response:
        self._database(r.params["namespace"])
        return Response({"identifiers": [], "next-page-token": None})

    def load_view(self, r: Request) -> Response:
        db = self._database(r.params["namespace"])
        raise NoSuchResourceError(f"view {db}.{r.params['view'][:200]} does not exist: lsmlake has no views",
                                  "VIEW")

    # -- helpers -------------------------------------------------------------------------------

    def _database(self, namespace: str) -> str:
        """The database a namespace names; 404 (NoSuchNamespace) when there is none."""
        if _LEVELS in namespace:
            raise NoSuchResourceError(f"namespace {namespace.replace(_LEVELS, '.')[:200]!r} does not exist: "
                                      "lsmlake's namespaces are its databases, one level", "NAMESPACE")
        db = check_name(namespace, "namespace")
        try:
            self.operations.database_location(db)
        except NotFoundError:
            raise NoSuchResourceError(f"namespace {db!r} does not exist", "NAMESPACE") from None
        return db

    def _table(self, r: Request) -> tuple[str, FileStoreTable]:
        db = self._database(r.params["namespace"])
        tid = f"{db}.{check_name(r.params['table'], 'table')}"
        try:
            return tid, self.operations.get_table(tid)
        except NotFoundError:
            raise NoSuchResourceError(f"table {tid} does not exist", "TABLE") from None

    def _location(self, tid: str, table: FileStoreTable) -> str:
        location = current_metadata_location(table)
        if location is None:
            raise NoSuchResourceError(f"table {tid} has no Iceberg metadata: lsmlake publishes it for tables with "
                                      "the option metadata.iceberg.storage=table-location", "TABLE")
        return location

    def _metadata(self, tid: str, table: FileStoreTable) -> tuple[str, Any]:
        """The current metadata file's location and its JSON document."""
        for attempt in range(_READ_ATTEMPTS):
            location = self._location(tid, table)
            try:
                return location, json.loads(table.io.read_bytes(_io_path(table.io, location)))
            except NotFoundError:
                if attempt == _READ_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _published(self, db: str) -> Iterator[str]:
        """The database's tables that have Iceberg metadata, in name order; looked at one by one as a page needs."""
        for name in self.operations.list_tables(db):
            try:
                if current_metadata_location(self.operations.get_table(f"{db}.{name}")) is not None:
                    yield name
            except NotFoundError:  # dropped while the list is read
                continue

    def _storage_config(self, tid: str, table: FileStoreTable, principal: Principal | None) -> dict[str, str]:
        """The table's storage settings under Iceberg's keys, for a caller the data token policy gives them to;
        empty for the others (and on a local warehouse)."""
        vendor = self.data_tokens
        if vendor is None or not vendor.vends:
            return {}
        try:
            token = vendor.token(tid, self.operations.location(table.path), principal)
        except (PermissionDeniedError, UnsupportedOperationError):
            return {}
        return file_io_config(StorageSettings.from_options(token.options), token.expires_at_ms)


def _io_path(io: FileIO, location: str) -> str:
    """A location as reported (`s3://bucket/key`, a local path, `file:/path`) as `io` opens it."""
    if "://" in location:
        rest = location.split("://", 1)[1]
        return "/" + rest.lstrip("/") if io.local else rest
    return location.removeprefix("file:")


_WRITES = (
    ("POST", _V1 + "/namespaces", "creating a namespace"),
    ("DELETE", _NS, "dropping a namespace"),
    ("POST", _NS + "/properties", "changing a namespace's properties"),
    ("POST", _NS + "/tables", "creating a table"),
    ("POST", _NS + "/register", "registering a table"),
    ("POST", _T, "committing to a table"),
    ("DELETE", _T, "dropping a table"),
    ("POST", _V1 + "/tables/rename", "renaming a table"),
    ("POST", _V1 + "/transactions/commit", "committing a transaction"),
    ("POST", _NS + "/views", "creating a view"),
    ("POST", _NS + "/register-view", "registering a view"),
    ("POST", _VIEW, "replacing a view"),
    ("DELETE", _VIEW, "dropping a view"),
    ("POST", _V1 + "/views/rename", "renaming a view"),
)


def read_only_message(what: str) -> str:
    return (f"{what} is not possible here: lsmlake serves Iceberg read-only, publishing these tables' Iceberg "
            "metadata from their Paimon commits; write through Paimon (lsmlake's writers, or a Paimon engine on "
            "this catalog's Paimon REST API)")


def _refused_writes() -> list[Route]:
    """Every write of the protocol, refused with the reason; the request body is not read."""
    def refuse(what: str) -> Callable[[Request], Response]:
        def handler(_: Request) -> Response:
            return Response(error_body(RestError(UNSUPPORTED_STATUS, read_only_message(what))), UNSUPPORTED_STATUS)
        return handler
    return [Route(method, path, Role.READER, refuse(what), max_body=0) for method, path, what in _WRITES]
