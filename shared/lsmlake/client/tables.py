"""Databases and tables through the catalog: create, describe, list, alter and drop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lsmlake.catalog.column_limits import check_columns
from lsmlake.catalog.filesystem import split_identifier
from lsmlake.client.connection import Connection
from lsmlake.client.schema import TableSchemaInfo, shown
from lsmlake.errors import InvalidInputError
from lsmlake.format.types import from_arrow_type, parse_schema_fields, parse_type, to_arrow_type
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.rpc.catalog_client import table_ident
from lsmlake.rpc.convert import schema_change_to_proto
from lsmlake.table.definition import define_table
from lsmlake.table.schema_change import AddColumn, RemoveOption, RenameColumn, SchemaChange, SetOption


@dataclass(frozen=True, repr=False)
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

    def __repr__(self) -> str:
        keys = f", primary_keys={self.primary_keys}" if self.primary_keys else ""
        parts = f", partition_keys={self.partition_keys}" if self.partition_keys else ""
        return (f"TableInfo({self.identifier}: {shown([f'{n} {t}' for n, t in self.columns])}{keys}{parts}, "
                f"schema_id={self.schema_id}, latest_snapshot_id={self.latest_snapshot_id})")


def key_names(keys: str | Sequence[str]) -> list[str]:
    """Key columns as a list, or as comma-separated text (`"id, dt"`, as `lake table create --primary-key` takes
    them; a text is not a list of one-letter names)."""
    if isinstance(keys, str):
        return [k.strip() for k in keys.split(",") if k.strip()]
    return [str(k) for k in keys]


def option_text(value: Any) -> str:
    """An option value as Paimon writes it: booleans as `true`/`false` (as `lake table create --option` takes
    them), everything else by `str`."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


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

    def create_table(self, identifier: str, schema: str | pa.Schema, primary_keys: str | Sequence[str] = (),
                     partition_keys: str | Sequence[str] = (), options: Mapping[str, Any] | None = None,
                     ignore_if_exists: bool = False, *, comment: str | None = None) -> TableInfo:
        """Create table `db.t` from a column list (`"id BIGINT NOT NULL, v STRING"`) or a pyarrow.Schema, and its
        database when missing (as `lake table create` does). Option values are sent as text (`{"bucket": 2}` as
        "2", True as "true"); options not given take Paimon's defaults, as with `lake table create`.

        The definition is checked before anything is created: a bad one raises InvalidInputError naming the
        problem and creates neither the database nor the table."""
        columns = _columns(schema)
        check_columns([(c.name, c.type) for c in columns])  # the catalog's bounds, checked before its parser's
        primary_keys, partition_keys = key_names(primary_keys), key_names(partition_keys)
        opts = {str(k): option_text(v) for k, v in (options or {}).items()}
        db, _ = split_identifier(identifier)
        # the catalog's own reading of the columns (`catalog_svc.requests.table_fields`)
        fields = parse_schema_fields(", ".join(f"`{c.name}` {c.type}" for c in columns))
        define_table(fields, tuple(partition_keys), tuple(primary_keys), opts, comment)
        self.create_database(db, ignore_if_exists=True)
        req = catalog_pb2.CreateTableRequest(
            table=table_ident(identifier), columns=columns, primary_keys=list(primary_keys),
            partition_keys=list(partition_keys), options=opts, comment=comment or "",
            ignore_if_exists=ignore_if_exists)
        return TableInfo.from_proto(self._conn.call(self._conn.catalog.CreateTable, req, changes_state=True).table)

    def schema(self, identifier: str) -> TableSchemaInfo:
        """The table's current schema, typed: fields with their Paimon types, keys, options, comment."""
        req = catalog_pb2.GetTableRequest(table=table_ident(identifier))
        return TableSchemaInfo.from_proto(self._conn.call(self._conn.catalog.GetTable, req,
                                                          changes_state=False).table)

    def rename_table(self, identifier: str, new_identifier: str) -> TableInfo:
        """Rename table `db.t` to `db2.t2` (the database must exist; the catalog's warehouse must be on a file
        system: UnsupportedOperationError on an object store, which has no atomic rename). Its snapshots, files and
        tags move with it. The table under its new name."""
        return TableInfo.from_proto(self._conn.catalog_client.rename_table(identifier, new_identifier))

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
