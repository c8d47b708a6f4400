"""Databases and tables through the catalog: create, describe, list, alter and drop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lsmlake.client.connection import Connection
from lsmlake.errors import InvalidInputError
from lsmlake.format.types import from_arrow_type, parse_schema_fields, parse_type, to_arrow_type
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.rpc.catalog_client import table_ident
from lsmlake.rpc.convert import schema_change_to_proto
from lsmlake.table.schema_change import AddColumn, RemoveOption, RenameColumn, SchemaChange, SetOption


@dataclass(frozen=True)
class TableInfo:
    """A table as the catalog describes it."""

    identifier: str
    columns: tuple[tuple[str, str], ...]  # (name, Paimon SQL type)
    primary_keys: tuple[str, ...]
    partition_keys: tuple[str, ...]
    options: Mapping[str, str]
    schema_id: int
    latest_snapshot_id: int | None
    location: str

    @staticmethod
    def from_proto(p: catalog_pb2.TableInfo) -> TableInfo:
        return TableInfo(f"{p.table.database}.{p.table.table}", tuple((c.name, c.type) for c in p.columns),
                         tuple(p.primary_keys), tuple(p.partition_keys), dict(p.options), p.schema_id,
                         p.latest_snapshot_id if p.HasField("latest_snapshot_id") else None, p.location)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The columns in the Arrow types lsmlake stores them as."""
        return pa.schema([pa.field(n, to_arrow_type(parse_type(t))) for n, t in self.columns])


def _columns(schema: str | pa.Schema) -> list[catalog_pb2.Column]:
    if isinstance(schema, pa.Schema):
        return [catalog_pb2.Column(name=f.name, type=from_arrow_type(f.type, f.nullable).sql()) for f in schema]
    if not isinstance(schema, str):
        raise InvalidInputError(f"schema must be a column list such as 'id BIGINT NOT NULL, v STRING' or a "
                                f"pyarrow.Schema, not {type(schema).__name__}")
    return [catalog_pb2.Column(name=f.name, type=f.type.sql()) for f in parse_schema_fields(schema)]


class Tables:
    """The catalog's databases and tables (a part of `Client`)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def create_database(self, name: str, ignore_if_exists: bool = True) -> bool:
        """Create a database; False when it already existed."""
        req = catalog_pb2.CreateDatabaseRequest(name=name, ignore_if_exists=ignore_if_exists)
        return self._conn.call(self._conn.catalog.CreateDatabase, req, changes_state=True).created

    def list_databases(self) -> list[str]:
        reply = self._conn.call(self._conn.catalog.ListDatabases, catalog_pb2.ListDatabasesRequest(),
                                changes_state=False)
        return list(reply.databases)

    def drop_database(self, name: str, cascade: bool = False, ignore_if_not_exists: bool = False) -> bool:
        """Drop a database (with `cascade`, its tables too); False when it did not exist."""
        req = catalog_pb2.DropDatabaseRequest(name=name, cascade=cascade, ignore_if_not_exists=ignore_if_not_exists)
        return self._conn.call(self._conn.catalog.DropDatabase, req, changes_state=True).dropped

    def create_table(self, identifier: str, schema: str | pa.Schema, primary_keys: Sequence[str] = (),
                     partition_keys: Sequence[str] = (), options: Mapping[str, Any] | None = None,
                     ignore_if_exists: bool = False) -> TableInfo:
        """Create table `db.t` from a column list (`"id BIGINT NOT NULL, v STRING"`) or a pyarrow.Schema; option
        values are sent as text (`{"bucket": 2}` as "2")."""
        req = catalog_pb2.CreateTableRequest(
            table=table_ident(identifier), columns=_columns(schema), primary_keys=list(primary_keys),
            partition_keys=list(partition_keys), options={k: str(v) for k, v in (options or {}).items()},
            ignore_if_exists=ignore_if_exists)
        return TableInfo.from_proto(self._conn.call(self._conn.catalog.CreateTable, req, changes_state=True).table)

    def table(self, identifier: str) -> TableInfo:
        """Describe a table; NotFoundError when there is none."""
        req = catalog_pb2.GetTableRequest(table=table_ident(identifier))
        return TableInfo.from_proto(self._conn.call(self._conn.catalog.GetTable, req, changes_state=False).table)

    def list_tables(self, database: str) -> list[str]:
        req = catalog_pb2.ListTablesRequest(database=database)
        return list(self._conn.call(self._conn.catalog.ListTables, req, changes_state=False).tables)

    def drop_table(self, identifier: str, ignore_if_not_exists: bool = False) -> bool:
        """Drop a table and its files; False when it did not exist."""
        req = catalog_pb2.DropTableRequest(table=table_ident(identifier), ignore_if_not_exists=ignore_if_not_exists)
        return self._conn.call(self._conn.catalog.DropTable, req, changes_state=True).dropped

    def alter_table(self, identifier: str, *, add_columns: str | Sequence[tuple[str, str]] = (),
                    rename_columns: Mapping[str, str] | None = None, set_options: Mapping[str, Any] | None = None,
                    remove_options: Sequence[str] = ()) -> TableInfo:
        """Change a table as one new schema, all changes or none: added columns (nullable), then renames
        (old -> new), then options set and removed."""
        if isinstance(add_columns, str):
            added = [(f.name, f.type.sql()) for f in parse_schema_fields(add_columns)]
        else:
            added = list(add_columns)
        changes: list[SchemaChange] = [AddColumn(n, t) for n, t in added]
        changes += [RenameColumn(o, n) for o, n in (rename_columns or {}).items()]
        changes += [SetOption(k, str(v)) for k, v in (set_options or {}).items()]
        changes += [RemoveOption(k) for k in remove_options]
        return self.apply_schema_changes(identifier, changes)

    def apply_schema_changes(self, identifier: str, changes: Sequence[SchemaChange],
                             timeout_s: float | None = None) -> TableInfo:
        """Apply `changes` in their order as one new schema, all or none (`lake table alter` keeps the order
        of its command line this way)."""
        req = catalog_pb2.AlterTableRequest(table=table_ident(identifier),
                                            changes=[schema_change_to_proto(c) for c in changes])
        reply = self._conn.call(self._conn.catalog.AlterTable, req, timeout_s, changes_state=True)
        return TableInfo.from_proto(reply.table)
