"""Table schemas: the schema-N files, validation of a new table, and the derived key layouts."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pyarrow as pa

from . import options as opts
from .errors import AlreadyExistsError, CorruptMetadataError, InvalidInputError, NotFoundError
from .fileio import FileIO
from .types import (
    AnyType,
    DataField,
    DataType,
    max_field_id,
    to_arrow_field,
    to_arrow_schema,
    type_from_json,
)

KEY_PREFIX = "_KEY_"
SEQUENCE_NUMBER = "_SEQUENCE_NUMBER"
VALUE_KIND = "_VALUE_KIND"
SYSTEM_FIELDS = (SEQUENCE_NUMBER, VALUE_KIND)


@dataclass(frozen=True)
class TableSchema:
    """One version of a table's schema, as stored in `schema/schema-<id>`."""

    id: int
    fields: tuple[DataField, ...]
    partition_keys: tuple[str, ...] = ()
    primary_keys: tuple[str, ...] = ()
    options: dict[str, str] = field(default_factory=dict)
    comment: str | None = None
    time_millis: int = 0
    highest_field_id: int = -1

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self) -> str:
        d: dict[str, Any] = {
            "version": 3,
            "id": self.id,
            "fields": [f.to_json() for f in self.fields],
            "highestFieldId": max(self.highest_field_id, max_field_id(self.fields)),
            "partitionKeys": list(self.partition_keys),
            "primaryKeys": list(self.primary_keys),
            "options": dict(self.options),
            "timeMillis": self.time_millis,
        }
        if self.comment is not None:
            d["comment"] = self.comment
        return json.dumps(d, indent=2)

    @staticmethod
    def from_json(text: str | bytes) -> TableSchema:
        try:
            d = json.loads(text)
            fields = tuple(DataField(int(f["id"]), f["name"], type_from_json(f["type"]), f.get("description"))
                           for f in d["fields"])
            options = {str(k): str(v) for k, v in (d.get("options") or {}).items()}
            version = int(d.get("version", 1))
            if version <= 1 and "bucket" not in options:
                options["bucket"] = "1"
            if version <= 2 and "file.format" not in options:
                options["file.format"] = "orc"
            return TableSchema(
                id=int(d["id"]), fields=fields, partition_keys=tuple(d.get("partitionKeys") or ()),
                primary_keys=tuple(d.get("primaryKeys") or ()), options=options,
                comment=d.get("comment"), time_millis=int(d.get("timeMillis") or 0),
                highest_field_id=int(d.get("highestFieldId", max_field_id(fields))))
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptMetadataError(f"cannot parse schema JSON: {e}") from None

    # -- derived layouts -----------------------------------------------------------------------

    @cached_property
    def table_options(self) -> opts.TableOptions:
        return opts.TableOptions(self.options)

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]

    @cached_property
    def _by_name(self) -> dict[str, DataField]:
        return {f.name: f for f in self.fields}

    def field(self, name: str) -> DataField:
        try:
            return self._by_name[name]
        except KeyError:
            raise InvalidInputError(f"unknown column {name!r}; the table has {self.field_names}") from None

    def types_of(self, names: tuple[str, ...] | list[str]) -> list[AnyType]:
        return [self.field(n).type for n in names]

    @property
    def is_primary_key_table(self) -> bool:
        return bool(self.primary_keys)

    @cached_property
    def trimmed_primary_keys(self) -> tuple[str, ...]:
        """Primary keys without the partition keys: the `_KEY_` columns of data files."""
        return tuple(k for k in self.primary_keys if k not in self.partition_keys)

    @cached_property
    def bucket_keys(self) -> tuple[str, ...]:
        """Columns hashed for the bucket: option `bucket-key`, else the trimmed primary key."""
        bk = self.table_options.get(opts.BUCKET_KEY)
        if bk:
            return tuple(k.strip() for k in bk.split(",") if k.strip())
        return self.trimmed_primary_keys

    @property
    def num_buckets(self) -> int:
        return self.table_options.bucket()

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        """The user-facing columns of the table."""
        return to_arrow_schema(self.fields)

    @cached_property
    def data_file_schema(self) -> pa.Schema:
        """The columns of a data file: `_KEY_*`, `_SEQUENCE_NUMBER`, `_VALUE_KIND`, then the table's."""
        if not self.is_primary_key_table:
            return self.arrow_schema
        key_fields = [to_arrow_field(KEY_PREFIX + k, self.field(k).type) for k in self.trimmed_primary_keys]
        system = [pa.field(SEQUENCE_NUMBER, pa.int64(), nullable=False),
                  pa.field(VALUE_KIND, pa.int8(), nullable=False)]
        return pa.schema(key_fields + system + list(self.arrow_schema))

    def partition_dir(self, values: Sequence[Any]) -> str:
        """The partition directory of partition values (`k=v/...`, empty for unpartitioned tables)."""
        if not self.partition_keys:
            return ""
        from .partition import partition_path

        default = self.table_options.get(opts.PARTITION_DEFAULT_NAME) or "__DEFAULT_PARTITION__"
        return partition_path(list(values), list(self.partition_keys), self.types_of(self.partition_keys), default)

    def with_id(self, schema_id: int) -> TableSchema:
        return replace(self, id=schema_id)


def new_table_schema(fields: tuple[DataField, ...], partition_keys: list[str] | tuple[str, ...] = (),
                     primary_keys: list[str] | tuple[str, ...] = (),
                     options: dict[str, str] | None = None, comment: str | None = None) -> TableSchema:
    """Validate the definition of a new table and return its schema-0.

    Primary-key columns are made NOT NULL, as Paimon does. Raises InvalidInputError naming the
    problem; nothing is written.
    """
    options = dict(options or {})
    partition_keys = tuple(partition_keys)
    primary_keys = tuple(primary_keys)
    opts.validate(options)
    names = [f.name for f in fields]
    if not fields:
        raise InvalidInputError("a table needs at least one column")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise InvalidInputError(f"duplicate column names {dup}")
    for n in names:
        if n.startswith(KEY_PREFIX) or n in SYSTEM_FIELDS:
            raise InvalidInputError(f"column name {n!r} is reserved by the Paimon file layout")
        if not n or "/" in n or "=" in n:
            raise InvalidInputError(f"column name {n!r} is not allowed (empty, or contains '/' or '=')")
    for what, keys in (("partition key", partition_keys), ("primary key", primary_keys)):
        if len(set(keys)) != len(keys):
            raise InvalidInputError(f"duplicate {what} columns in {list(keys)}")
        for k in keys:
            if k not in names:
                raise InvalidInputError(f"{what} {k!r} is not a column; columns are {names}")
            t = fields[names.index(k)].type
            if not isinstance(t, DataType):
                raise InvalidInputError(f"{what} {k!r} has nested type {t.sql()}; only atomic types are allowed")
    table_opts = opts.TableOptions(options)
    bucket = table_opts.get(opts.BUCKET)
    if primary_keys:
        missing = [p for p in partition_keys if p not in primary_keys]
        if missing:
            raise InvalidInputError(f"the primary key {list(primary_keys)} must include the partition keys {missing}")
        if set(primary_keys) == set(partition_keys):
            raise InvalidInputError("the primary key must have a column that is not a partition key")
        if bucket is None or bucket == -1:
            raise InvalidInputError(
                "primary-key tables need a fixed bucket count: set the option bucket=N with N > 0 "
                "(dynamic buckets, bucket=-1, are not supported yet)")
        if bucket <= 0:
            raise InvalidInputError(f"option 'bucket' must be a positive number for primary-key tables, got {bucket}")
        fields = tuple(replace(f, type=f.type.with_nullable(False)) if f.name in primary_keys else f
                       for f in fields)
    else:
        if bucket is not None and bucket != -1 and bucket <= 0:
            raise InvalidInputError(f"option 'bucket' must be -1 or a positive number, got {bucket}")
        if bucket is not None and bucket > 0 and not table_opts.get(opts.BUCKET_KEY):
            raise InvalidInputError("append tables with a fixed bucket count need the option bucket-key")
    bk = table_opts.get(opts.BUCKET_KEY)
    if bk:
        for k in (k.strip() for k in bk.split(",")):
            if k not in names:
                raise InvalidInputError(f"bucket-key {k!r} is not a column; columns are {names}")
            if primary_keys and k not in primary_keys:
                raise InvalidInputError(f"bucket-key {k!r} must be part of the primary key {list(primary_keys)}")
    producer = table_opts.get(opts.CHANGELOG_PRODUCER) or "none"
    if producer not in opts.CHANGELOG_PRODUCERS:
        raise InvalidInputError(f"changelog-producer must be one of {', '.join(opts.CHANGELOG_PRODUCERS)}, "
                                f"not {producer!r}")
    if producer != "none" and not primary_keys:
        raise InvalidInputError("changelog-producer applies to primary-key tables only")
    rk = table_opts.get(opts.ROWKIND_FIELD)
    if rk and rk not in names:
        raise InvalidInputError(f"rowkind.field {rk!r} is not a column")
    schema = TableSchema(id=0, fields=fields, partition_keys=partition_keys, primary_keys=primary_keys,
                         options=options, comment=comment, time_millis=int(time.time() * 1000),
                         highest_field_id=max_field_id(fields))
    if primary_keys:
        from .merge.factory import merge_function_for

        merge_function_for(schema)  # validates merge-engine, sequence fields, aggregate functions
    elif table_opts.get(opts.MERGE_ENGINE) != "deduplicate":
        raise InvalidInputError("merge-engine applies to primary-key tables only")
    return schema


class SchemaManager:
    """Reads and writes the `schema/schema-<id>` files of one table."""

    def __init__(self, io: FileIO, table_path: str) -> None:
        self.io = io
        self.dir = f"{table_path}/schema"

    def path(self, schema_id: int) -> str:
        return f"{self.dir}/schema-{schema_id}"

    def ids(self) -> list[int]:
        out = []
        for info in self.io.list(self.dir):
            if info.name.startswith("schema-") and info.name[7:].isdigit():
                out.append(int(info.name[7:]))
        return sorted(out)

    def schema(self, schema_id: int) -> TableSchema:
        try:
            return TableSchema.from_json(self.io.read_bytes(self.path(schema_id)))
        except NotFoundError:
            raise NotFoundError(f"schema {schema_id} not found in {self.dir}") from None

    def latest(self) -> TableSchema | None:
        ids = self.ids()
        return self.schema(ids[-1]) if ids else None

    def commit(self, schema: TableSchema) -> None:
        """Publish a schema version; fails if that id exists (another writer got there first)."""
        if not self.io.write_if_absent(self.path(schema.id), schema.to_json().encode()):
            raise AlreadyExistsError(f"schema {schema.id} already exists in {self.dir}")
