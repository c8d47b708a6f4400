"""`lake table create | list | describe | alter | drop`."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from lsmlake.catalog.filesystem import split_identifier
from lsmlake.cli.arguments import names
from lsmlake.cli.backend import NewTable
from lsmlake.cli.errors import UsageError
from lsmlake.cli.records import out, print_records, print_table
from lsmlake.cli.warehouse import open_backend, open_catalog
from lsmlake.format.types import parse_schema_fields

if TYPE_CHECKING:  # `table list` loads no table layer
    from lsmlake.table.file_store_table import FileStoreTable


def cmd_table_create(args: argparse.Namespace) -> int:
    catalog = open_catalog(args, create=True)
    db, _ = split_identifier(args.table)
    fields = parse_schema_fields(args.schema)
    table = NewTable(args.table, args.schema, fields, names(args.partition_key), names(args.primary_key),
                     dict(args.option), args.comment)
    # Validate the whole definition before the database folder is created.
    from lsmlake.table.definition import define_table

    define_table(fields, table.partition_keys, table.primary_keys, table.options, table.comment)
    if args.if_not_exists and catalog.table_exists(args.table):
        out(f"table {args.table} already exists")
        return 0
    catalog.create_database(db, ignore_if_exists=True)
    open_backend(args).create_table(table, args.if_not_exists)
    out(f"created table {args.table}")
    return 0


def cmd_table_list(args: argparse.Namespace) -> int:
    tables = open_catalog(args).list_tables(args.database)
    print_records([{"table": n} for n in tables], ("table",), args.format)
    return 0


def describe(table: FileStoreTable) -> dict[str, Any]:
    s = table.schema
    return {
        "table": table.identifier,
        "schema_id": s.id,
        "columns": [{"id": f.id, "name": f.name, "type": f.type.sql(), "nullable": f.type.nullable}
                    | ({"description": f.description} if f.description is not None else {})
                    for f in s.fields],
        "partition_keys": list(s.partition_keys),
        "primary_keys": list(s.primary_keys),
        "options": dict(s.options),
        "comment": s.comment,
    }


def cmd_table_describe(args: argparse.Namespace) -> int:
    d = describe(open_catalog(args).get_table(args.table))
    if args.format == "json":
        out(json.dumps(d, indent=2, ensure_ascii=False))
        return 0
    if args.format == "jsonl":
        out(json.dumps(d, ensure_ascii=False))
        return 0
    out(f"table: {d['table']} (schema {d['schema_id']})")
    if d["comment"]:
        out(f"comment: {d['comment']}")
    out()
    rows = []
    for c in d["columns"]:
        key = ", ".join(k for k, on in (("primary key", c["name"] in d["primary_keys"]),
                                         ("partition", c["name"] in d["partition_keys"])) if on)
        rows.append([c["name"], c["type"], key])
    print_table(["column", "type", "key"], rows)
    out()
    out(f"primary key:    {', '.join(d['primary_keys']) or '(none)'}")
    out(f"partition keys: {', '.join(d['partition_keys']) or '(none)'}")
    out("options:" if d["options"] else "options:        (none)")
    for k in sorted(d["options"]):
        out(f"  {k} = {d['options'][k]}")
    return 0


def cmd_table_alter(args: argparse.Namespace) -> int:
    if not args.changes:
        raise UsageError("nothing to alter: give --add-column, --rename-column, --set or --remove")
    schema_id = open_backend(args).alter_table(args.table, args.changes)
    out(f"altered table {args.table} (schema {schema_id})")
    return 0


def cmd_table_drop(args: argparse.Namespace) -> int:
    dropped = open_backend(args).drop_table(args.table, args.if_exists)
    out(f"dropped table {args.table}" if dropped else f"table {args.table} does not exist")
    return 0
