"""Paimon's REST catalog API, served by the catalog service over HTTP beside gRPC (`--rest-port`).

Any Paimon engine configured with `metastore=rest` and this address (pypaimon, paimon-rust, Spark, Flink)
uses lsmlake as its catalog: databases, tables, schema changes, snapshots, partitions and tags, and
`commit`, which publishes the snapshot the engine built after lsmlake's checks and records it with its
events, so the compactor compacts what these engines write (`lsmlake.catalog.commit.snapshot`).
The roles are those of gRPC: reading needs `reader`, committing `writer` (an OVERWRITE or an unplanned
COMPACT `admin`, a change of the HASH index `service`, as under gRPC), definitions and deletions `admin`;
a commit user without a principal's namespace belongs to the first principal that commits under it.
Storage credentials go to engines through the table token endpoint, per table, as `lsmlake.catalog.data_tokens`
decides (the config's defaults only switch `data-token.enabled` on, for a caller that can get a token):
docs/security.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from lsmlake.auth.roles import Role
from lsmlake.catalog.commit.snapshot import SnapshotCommitRequest, parse_snapshot
from lsmlake.catalog.data_tokens import DataTokenVendor
from lsmlake.catalog.filesystem import check_name
from lsmlake.catalog.operations import CatalogOperations
from lsmlake.catalog.statistics import FileStats, partition_spec
from lsmlake.catalog.tags import check_tag_name
from lsmlake.errors import AlreadyExistsError, InvalidInputError, LakeError
from lsmlake.format.snapshot import Snapshot
from lsmlake.rest.errors import NoSuchResourceError, NotImplementedRestError
from lsmlake.rest.http_server import Request, Response, Route
from lsmlake.rest.paimon_json import (
    fields_from_json,
    identifier_from_json,
    obj,
    page,
    schema_change_from_json,
    schema_to_json,
    string_list,
    string_map,
    text,
)
from lsmlake.table.file_store_table import FileStoreTable

_DB = "/v1/databases/{db}"
_T = _DB + "/tables/{table}"


def _tid(r: Request) -> str:
    return f"{check_name(r.params['db'], 'database')}.{check_name(r.params['table'], 'table')}"


class RestCatalogApi:
    """The handlers of the REST API over the catalog's operations."""

    def __init__(self, operations: CatalogOperations, data_tokens: DataTokenVendor | None = None) -> None:
        """`data_tokens`: who gets which table's storage credentials (None: nobody, the token endpoint answers 501)."""
        self.operations = operations
        self.data_tokens = data_tokens

    def routes(self) -> list[Route]:
        R = Role
        return [
            Route("GET", "/v1/config", R.READER, self.config),
            Route("GET", "/v1/databases", R.READER, self.list_databases),
            Route("POST", "/v1/databases", R.ADMIN, self.create_database, "DATABASE"),
            Route("GET", _DB, R.READER, self.get_database, "DATABASE"),
            Route("DELETE", _DB, R.ADMIN, self.drop_database, "DATABASE"),
            Route("POST", _DB, R.ADMIN, self.alter_database, "DATABASE"),
            Route("GET", _DB + "/tables", R.READER, self.list_tables, "DATABASE"),
            Route("POST", _DB + "/tables", R.ADMIN, self.create_table, "DATABASE"),
            Route("POST", "/v1/tables/rename", R.ADMIN, self.rename_table, "TABLE"),
            Route("GET", _T, R.READER, self.get_table, "TABLE"),
            Route("POST", _T, R.ADMIN, self.alter_table, "TABLE"),
            Route("DELETE", _T, R.ADMIN, self.drop_table, "TABLE"),
            Route("GET", _T + "/snapshot", R.READER, self.latest_snapshot, "TABLE"),
            Route("POST", _T + "/commit", R.WRITER, self.commit, "TABLE"),
            Route("POST", _T + "/rollback", R.ADMIN, self.rollback, "TABLE"),
            Route("GET", _T + "/partitions", R.READER, self.list_partitions, "TABLE"),
            Route("GET", _T + "/tags", R.READER, self.list_tags, "TABLE"),
            Route("POST", _T + "/tags", R.ADMIN, self.create_tag, "TAG"),
            Route("GET", _T + "/tags/{tag}", R.READER, self.get_tag, "TAG"),
            Route("DELETE", _T + "/tags/{tag}", R.ADMIN, self.delete_tag, "TAG"),
            Route("GET", _T + "/branches", R.READER, self.list_branches, "TABLE"),
            Route("GET", _T + "/token", R.READER, self.table_token, "TABLE"),
            *_not_served(),
        ]

    # -- config and databases ------------------------------------------------------------------

    def config(self, r: Request) -> Response:
        # one catalog serves one warehouse: any `warehouse` name selects it; no prefix, so paths are /v1/...
        if not r.query.get("warehouse"):
            raise InvalidInputError("the warehouse query parameter is required (any name: this catalog serves one)")
        defaults = self.data_tokens.config_defaults(r.principal) if self.data_tokens is not None else {}
        return Response({"defaults": defaults, "overrides": {}})

    def list_databases(self, r: Request) -> Response:
        return Response(page(self.operations.list_databases(), r.query, "databases"))

    def create_database(self, r: Request) -> Response:
        body = obj(r.body, "request")
        name = check_name(text(body, "name", "request"), "database")
        if string_map(body.get("options"), "request.options"):
            raise InvalidInputError("database options are not kept by this catalog; create it without options")
        self.operations.create_database(name)  # AlreadyExistsError (409) when it exists
        return Response()

    def get_database(self, r: Request) -> Response:
        name = check_name(r.params["db"], "database")
        return Response({"id": name, "name": name, "location": self.operations.database_location(name),
                         "options": {}})

    def drop_database(self, r: Request) -> Response:
        self.operations.drop_database(r.params["db"], cascade=True)  # Paimon's server drops the tables with it
        return Response()

    def alter_database(self, r: Request) -> Response:
        self.get_database(r)
        raise InvalidInputError("database options are not kept by this catalog: there is nothing to alter")

    # -- tables --------------------------------------------------------------------------------

    def list_tables(self, r: Request) -> Response:
        return Response(page(self.operations.list_tables(check_name(r.params["db"], "database")), r.query,
                             "tables"))

    def create_table(self, r: Request) -> Response:
        body = obj(r.body, "request")
        db, name = identifier_from_json(body.get("identifier"), "request.identifier")
        if db != r.params["db"]:
            raise InvalidInputError(f"request.identifier names database {db!r}, the path {r.params['db']!r}")
        schema = obj(body.get("schema"), "request.schema")
        comment = schema.get("comment")
        if comment is not None and not isinstance(comment, str):
            raise InvalidInputError("request.schema.comment must be a string")
        tid = f"{check_name(db, 'database')}.{check_name(name, 'table')}"
        fields = fields_from_json(schema.get("fields"), "request.schema.fields")
        options = string_map(schema.get("options"), "request.schema.options")
        if "path" in options:
            raise InvalidInputError("request.schema.options: the table's path is the catalog's to choose")
        if self.operations.table_exists(tid):
            raise _about(AlreadyExistsError(f"table {tid!r} already exists"), "TABLE")
        self.operations.create_table(tid, fields,
                                     string_list(schema.get("partitionKeys"), "request.schema.partitionKeys"),
                                     string_list(schema.get("primaryKeys"), "request.schema.primaryKeys"), options,
                                     comment)
        return Response()

    def get_table(self, r: Request) -> Response:
        table = self.operations.get_table(_tid(r))
        return Response({"id": table.table_uuid, "name": r.params["table"],
                         "path": self.operations.location(table.path), "isExternal": False, "schemaId": table.schema.id,
                         "schema": schema_to_json(table.schema)})

    def alter_table(self, r: Request) -> Response:
        tid = _tid(r)
        raw = obj(r.body, "request").get("changes")
        if not isinstance(raw, list) or not raw:
            raise InvalidInputError("request.changes must be a non-empty list")
        changes = [schema_change_from_json(c, f"request.changes[{i}]") for i, c in enumerate(raw)]
        self.operations.alter_table(tid, changes)
        return Response()

    def drop_table(self, r: Request) -> Response:
        self.operations.drop_table(_tid(r))
        return Response()

    def rename_table(self, r: Request) -> Response:
        body = obj(r.body, "request")
        src = ".".join(identifier_from_json(body.get("source"), "request.source"))
        dst = ".".join(identifier_from_json(body.get("destination"), "request.destination"))
        self.operations.rename_table(src, dst)  # 501 on an object store (UnsupportedOperationError)
        return Response()

    # -- snapshots and commits -----------------------------------------------------------------

    def latest_snapshot(self, r: Request) -> Response:
        table = self.operations.get_table(_tid(r))
        snap = table.snapshots.latest()
        if snap is None:
            raise NoSuchResourceError(f"table {table.identifier} has no snapshot yet", "SNAPSHOT")
        stats = _stats_json(self.operations.snapshot_stats(table, snap))
        return Response({"snapshot": {"snapshot": _snapshot_json(snap), **stats}})

    def commit(self, r: Request) -> Response:
        body = obj(r.body, "request")
        table_uuid = body.get("tableId")
        base = body.get("baseSnapshotUuid")
        if table_uuid is not None and not isinstance(table_uuid, str) or base is not None and not isinstance(base, str):
            raise InvalidInputError("request.tableId and request.baseSnapshotUuid must be strings")
        if not isinstance(body.get("statistics", []), list):
            raise InvalidInputError("request.statistics must be a list")
        snap = parse_snapshot(body.get("snapshot"), "request.snapshot")
        ok = self.operations.writes.commit_snapshot(SnapshotCommitRequest(_tid(r), snap, table_uuid or "", base))
        return Response({"success": ok})

    def rollback(self, r: Request) -> Response:
        self.operations.get_table(_tid(r))
        raise NotImplementedRestError("rollback is not served by this catalog yet: the compaction timeline and the "
                                      "outbox would name snapshots that no longer exist")

    def list_partitions(self, r: Request) -> Response:
        table, parts = self.operations.partition_stats(_tid(r))
        specs = {_spec_name(table, k): {"spec": partition_spec(table, k), **_stats_json(v), "done": False}
                 for k, v in parts.items()}
        shown = page(list(specs), r.query, "partitions")
        shown["partitions"] = [specs[n] for n in shown["partitions"]]
        return Response(shown)

    def table_token(self, r: Request) -> Response:
        tid = _tid(r)
        table = self.operations.get_table(tid)  # 404 for a table that is not there, before any grant is looked at
        if self.data_tokens is None:
            raise NotImplementedRestError("this catalog hands out no storage tokens: leave data-token.enabled off and "
                                          "give the engine its own storage credentials")
        # off: UnsupportedOperationError (501); no grant: PermissionDeniedError (403)
        token = self.data_tokens.token(tid, self.operations.location(table.path), r.principal)
        return Response(token.to_json())

    # -- tags and branches ---------------------------------------------------------------------

    def list_tags(self, r: Request) -> Response:
        return Response(page(self.operations.list_tags(_tid(r)), r.query, "tags"))

    def create_tag(self, r: Request) -> Response:
        tid = _tid(r)
        body = obj(r.body, "request")
        name = check_tag_name(text(body, "tagName", "request"))
        sid = body.get("snapshotId")
        if sid is not None and (not isinstance(sid, int) or isinstance(sid, bool)):
            raise InvalidInputError("request.snapshotId must be an integer")
        if body.get("timeRetained") is not None:
            raise InvalidInputError("request.timeRetained: tags that expire are not supported; tag without it")
        self.operations.create_tag(tid, name, sid)
        return Response()

    def get_tag(self, r: Request) -> Response:
        name = r.params["tag"]
        snap = self.operations.get_tag(_tid(r), name)  # the name is checked once the table is found
        return Response({"tagName": name, "snapshot": _snapshot_json(snap), "tagCreateTime": None,
                         "tagTimeRetained": None})

    def delete_tag(self, r: Request) -> Response:
        tid = _tid(r)
        self.operations.delete_tag(tid, check_tag_name(r.params["tag"]))
        return Response()

    def list_branches(self, r: Request) -> Response:
        return Response({"branches": self.operations.list_branches(_tid(r))})


_NOT_SERVED = (
    ("POST", _T + "/branches", "creating branches"), ("DELETE", _T + "/branches/{branch}", "dropping branches"),
    ("POST", _T + "/branches/{branch}/rename", "renaming branches"),
    ("POST", _T + "/branches/{branch}/forward", "fast-forwarding branches"),
    ("GET", _DB + "/views", "views"), ("POST", _DB + "/views", "views"), ("GET", _DB + "/functions", "functions"),
    ("POST", _DB + "/functions", "functions"), ("GET", "/v1/functions", "functions"),
    ("GET", "/v1/permissions", "permissions"),
)


def _not_served() -> list[Route]:
    """Parts of Paimon's API this catalog does not serve: 501 with the reason, rather than a bare 404."""
    def refuse(what: str) -> Callable[[Request], Response]:
        def handler(_: Request) -> Response:
            raise NotImplementedRestError(f"{what}: not served by this catalog")
        return handler
    return [Route(method, path, Role.READER, refuse(what)) for method, path, what in _NOT_SERVED]


def _about(error: LakeError, resource_type: str) -> LakeError:
    """`error` answered with this resource type rather than the route's (see `rest.errors`)."""
    error.resource_type = resource_type  # type: ignore[attr-defined]
    return error


def _snapshot_json(snap: Snapshot) -> Any:
    return json.loads(snap.to_json())


def _stats_json(stats: FileStats) -> dict[str, int]:
    return {"recordCount": stats.record_count, "fileSizeInBytes": stats.file_size, "fileCount": stats.file_count,
            "lastFileCreationTime": stats.last_file_creation_ms}


def _spec_name(table: FileStoreTable, partition: bytes) -> str:
    return "/".join(f"{k}={v}" for k, v in partition_spec(table, partition).items())
