"""Paimon's REST catalog API, served by the catalog service over HTTP beside gRPC (`--rest-port`).

Any Paimon engine configured with `metastore=rest` and this address (pypaimon, paimon-rust, Spark, Flink)
uses lsmlake as its catalog: databases, tables, schema changes, snapshots, partitions and tags, and
`commit`, which publishes the snapshot the engine built after lsmlake's checks and records it with its
events, so the compactor compacts what these engines write (`lsmlake.catalog.commit.snapshot`).
The roles are those of gRPC: reading needs `reader`, committing `writer` (an OVERWRITE or an unplanned
COMPACT `admin`, a change of the HASH index `service`, as under gRPC), definitions and deletions `admin`;
a commit user without a principal's namespace belongs to the first principal that commits under it.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lsmlake.auth.roles import Role
from lsmlake.catalog.commit.snapshot import SnapshotCommitRequest, parse_snapshot
from lsmlake.catalog.filesystem import check_name
from lsmlake.catalog.reachability import TAG_PREFIX
from lsmlake.errors import AlreadyExistsError, InvalidInputError, LakeError, NotFoundError
from lsmlake.format.options import PARTITION_DEFAULT_NAME
from lsmlake.format.partition import partition_value_string
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

if TYPE_CHECKING:
    from catalog_svc.servicer import CatalogService

_DB = "/v1/databases/{db}"
_T = _DB + "/tables/{table}"
MAX_TAG_NAME_CHARS = 200
_STATS_CACHE = 256


def _tid(r: Request) -> str:
    return f"{check_name(r.params['db'], 'database')}.{check_name(r.params['table'], 'table')}"


class RestCatalogApi:
    """The handlers of the REST API over one catalog service (its catalog, store, commits and metrics)."""

    def __init__(self, service: CatalogService) -> None:
        self.service = service
        self.catalog = service.catalog
        self._stats: OrderedDict[tuple[str, str, int], dict[str, int]] = OrderedDict()
        self._stats_lock = threading.Lock()

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
        return Response({"defaults": {}, "overrides": {}})

    def list_databases(self, r: Request) -> Response:
        return Response(page(self.catalog.list_databases(), r.query, "databases"))

    def create_database(self, r: Request) -> Response:
        body = obj(r.body, "request")
        name = check_name(text(body, "name", "request"), "database")
        if string_map(body.get("options"), "request.options"):
            raise InvalidInputError("database options are not kept by this catalog; create it without options")
        self.catalog.create_database(name)  # AlreadyExistsError (409) when it exists
        return Response()

    def get_database(self, r: Request) -> Response:
        name = check_name(r.params["db"], "database")
        path = self.catalog.database_path(name)
        if not self.catalog.io.exists(path):
            raise NotFoundError(f"database {name!r} does not exist")
        return Response({"id": name, "name": name, "location": self.catalog.location(path), "options": {}})

    def drop_database(self, r: Request) -> Response:
        self.service.drop_database(r.params["db"], cascade=True)  # Paimon's server drops the tables with it
        return Response()

    def alter_database(self, r: Request) -> Response:
        self.get_database(r)
        raise InvalidInputError("database options are not kept by this catalog: there is nothing to alter")

    # -- tables --------------------------------------------------------------------------------

    def list_tables(self, r: Request) -> Response:
        return Response(page(self.catalog.list_tables(check_name(r.params["db"], "database")), r.query, "tables"))

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
        if self.catalog.table_exists(tid):
            raise _about(AlreadyExistsError(f"table {tid!r} already exists"), "TABLE")
        self.catalog.create_table(tid, fields, string_list(schema.get("partitionKeys"), "request.schema.partitionKeys"),
                                  string_list(schema.get("primaryKeys"), "request.schema.primaryKeys"), options,
                                  comment)
        return Response()

    def get_table(self, r: Request) -> Response:
        table = self.catalog.get_table(_tid(r))
        return Response({"id": table.table_uuid, "name": r.params["table"], "path": self.catalog.location(table.path),
                         "isExternal": False, "schemaId": table.schema.id, "schema": schema_to_json(table.schema)})

    def alter_table(self, r: Request) -> Response:
        tid = _tid(r)
        raw = obj(r.body, "request").get("changes")
        if not isinstance(raw, list) or not raw:
            raise InvalidInputError("request.changes must be a non-empty list")
        changes = [schema_change_from_json(c, f"request.changes[{i}]") for i, c in enumerate(raw)]
        with self.service.store.commit_lock(tid):
            self.catalog.alter_table(tid, changes)
        return Response()

    def drop_table(self, r: Request) -> Response:
        self.service.drop_table(_tid(r))
        return Response()

    def rename_table(self, r: Request) -> Response:
        body = obj(r.body, "request")
        src = ".".join(identifier_from_json(body.get("source"), "request.source"))
        dst = ".".join(identifier_from_json(body.get("destination"), "request.destination"))
        cat, store = self.catalog, self.service.store
        if not cat.io.local:
            raise NotImplementedRestError("renaming a table needs an atomic folder rename, which object stores "
                                          "do not have; create the table under the new name and copy it")
        first, second = sorted((src, dst))
        with store.commit_lock(first), store.commit_lock(second):
            cat.get_table(src)
            if not cat.io.exists(cat.database_path(dst.split(".")[0])):
                raise NotFoundError(f"database of {dst!r} does not exist")
            if cat.io.exists(cat.table_path(dst)):
                raise AlreadyExistsError(f"table {dst!r} already exists")
            os.rename(cat.table_path(src), cat.table_path(dst))
            # the jobs committing to the table still own their commit users
            store.commit_users.move_commit_users(src, dst)
            store.forget_table(src)  # the history is the old name's; the new name records the snapshots anew
        return Response()

    # -- snapshots and commits -----------------------------------------------------------------

    def latest_snapshot(self, r: Request) -> Response:
        table = self.catalog.get_table(_tid(r))
        snap = table.snapshots.latest()
        if snap is None:
            raise NoSuchResourceError(f"table {table.identifier} has no snapshot yet", "SNAPSHOT")
        stats = self._file_stats(table, snap)
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
        ok = self.service.commit_snapshot(SnapshotCommitRequest(_tid(r), snap, table_uuid or "", base))
        return Response({"success": ok})

    def rollback(self, r: Request) -> Response:
        self.catalog.get_table(_tid(r))
        raise NotImplementedRestError("rollback is not served by this catalog yet: the compaction timeline and the "
                                      "outbox would name snapshots that no longer exist")

    def list_partitions(self, r: Request) -> Response:
        table = self.catalog.get_table(_tid(r))
        snap = table.snapshots.latest()
        parts: dict[bytes, dict[str, Any]] = {}
        if snap is not None:
            for e in table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values():
                p = parts.setdefault(e.partition, {"recordCount": 0, "fileSizeInBytes": 0, "fileCount": 0,
                                                   "lastFileCreationTime": 0, "done": False})
                p["recordCount"] += e.file.row_count
                p["fileSizeInBytes"] += e.file.file_size
                p["fileCount"] += 1
                p["lastFileCreationTime"] = max(p["lastFileCreationTime"], e.file.creation_time_ms or 0)
        specs = {_spec_name(table, k): {"spec": _spec(table, k), **v} for k, v in parts.items()}
        shown = page(list(specs), r.query, "partitions")
        shown["partitions"] = [specs[n] for n in shown["partitions"]]
        return Response(shown)

    def table_token(self, r: Request) -> Response:
        self.catalog.get_table(_tid(r))
        raise NotImplementedRestError("this catalog hands out no storage tokens: leave data-token.enabled off and "
                                      "give the engine its own storage credentials")

    # -- tags and branches ---------------------------------------------------------------------

    def list_tags(self, r: Request) -> Response:
        table = self.catalog.get_table(_tid(r))
        names = [i.name[len(TAG_PREFIX):] for i in table.io.list(f"{table.path}/tag")
                 if not i.is_dir and i.name.startswith(TAG_PREFIX)]
        return Response(page(names, r.query, "tags"))

    def create_tag(self, r: Request) -> Response:
        tid = _tid(r)
        body = obj(r.body, "request")
        name = _tag_name(text(body, "tagName", "request"))
        sid = body.get("snapshotId")
        if sid is not None and (not isinstance(sid, int) or isinstance(sid, bool)):
            raise InvalidInputError("request.snapshotId must be an integer")
        if body.get("timeRetained") is not None:
            raise InvalidInputError("request.timeRetained: tags that expire are not supported; tag without it")
        with self.service.store.commit_lock(tid):  # expiration cannot remove the snapshot while it is tagged
            table = self.catalog.get_table(tid)
            snap = table.snapshots.snapshot(sid) if sid is not None else table.snapshots.latest()
            if snap is None:
                raise NotFoundError(f"table {tid} has no snapshot to tag")
            if not table.io.write_if_absent(f"{table.path}/tag/{TAG_PREFIX}{name}", snap.to_json().encode()):
                raise AlreadyExistsError(f"tag {name!r} of {tid} already exists")
        return Response()

    def get_tag(self, r: Request) -> Response:
        table = self.catalog.get_table(_tid(r))
        name = _tag_name(r.params["tag"])
        try:
            snap = Snapshot.from_json(table.io.read_bytes(f"{table.path}/tag/{TAG_PREFIX}{name}"))
        except NotFoundError:
            raise NotFoundError(f"tag {name!r} of {table.identifier} does not exist") from None
        return Response({"tagName": name, "snapshot": _snapshot_json(snap), "tagCreateTime": None,
                         "tagTimeRetained": None})

    def delete_tag(self, r: Request) -> Response:
        tid = _tid(r)
        name = _tag_name(r.params["tag"])
        with self.service.store.commit_lock(tid):
            table = self.catalog.get_table(tid)
            if not table.io.delete_quietly(f"{table.path}/tag/{TAG_PREFIX}{name}"):
                raise NotFoundError(f"tag {name!r} of {tid} does not exist")
        return Response()

    def list_branches(self, r: Request) -> Response:
        table = self.catalog.get_table(_tid(r))
        names = sorted(i.name[len("branch-"):] for i in table.io.list(f"{table.path}/branch")
                       if i.is_dir and i.name.startswith("branch-"))
        return Response({"branches": names})

    # -- helpers -------------------------------------------------------------------------------

    def _file_stats(self, table: FileStoreTable, snap: Snapshot) -> dict[str, int]:
        """Record count, bytes, files and the newest file's creation time of a snapshot (cached: immutable)."""
        key = (table.path, table.table_uuid, snap.id)
        with self._stats_lock:
            if key in self._stats:
                self._stats.move_to_end(key)
                return self._stats[key]
        live = table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values()
        stats = {"recordCount": snap.total_record_count, "fileSizeInBytes": sum(e.file.file_size for e in live),
                 "fileCount": len(live),
                 "lastFileCreationTime": max((e.file.creation_time_ms or 0 for e in live), default=0)}
        with self._stats_lock:
            self._stats[key] = stats
            while len(self._stats) > _STATS_CACHE:
                self._stats.popitem(last=False)
        return stats


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


def _tag_name(name: str | None) -> str:
    if not name or len(name) > MAX_TAG_NAME_CHARS or any(c in name for c in "/\\\x00") or name in (".", ".."):
        raise InvalidInputError(f"tag name {str(name)[:60]!r} is not a name (1 to {MAX_TAG_NAME_CHARS} characters, "
                                "no '/', '\\' or NUL)")
    return name


def _spec(table: FileStoreTable, partition: bytes) -> dict[str, str]:
    values = table.partition_values(partition)
    types = table.schema.types_of(table.schema.partition_keys)
    default = table.options.get(PARTITION_DEFAULT_NAME)
    out = {}
    for name, v, t in zip(table.schema.partition_keys, values, types, strict=True):
        s = partition_value_string(v, t)
        out[name] = default if s is None or not s.strip() else s
    return out


def _spec_name(table: FileStoreTable, partition: bytes) -> str:
    return "/".join(f"{k}={v}" for k, v in _spec(table, partition).items())
