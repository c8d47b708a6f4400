"""Table schemas: the schema-N files, validation of a new table, and the derived key layouts."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pyarrow as pa

from lsmlake.errors import AlreadyExistsError, CorruptMetadataError, InvalidInputError, NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.type_json import max_field_id, type_from_json
from lsmlake.format.types import (
    AnyType,
    DataField,
    DataType,
    to_arrow_field,
    to_arrow_schema,
)
from lsmlake.fs.file_io import FileIO

KEY_PREFIX = "_KEY_"
SEQUENCE_NUMBER = "_SEQUENCE_NUMBER"
VALUE_KIND = "_VALUE_KIND"
SYSTEM_FIELDS = (SEQUENCE_NUMBER, VALUE_KIND)

_log = logging.getLogger(__name__)


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
    # The table's other schema versions, for reading files written before an alter. Not part of the
    # value: the table that loaded this schema attaches it (see FileStoreTable).
    history: SchemaHistory | None = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the history: it holds the table's file access, which stays in this process."""
        state = dict(self.__dict__)
        state["history"] = None
        return state

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
        from lsmlake.format.partition import partition_path

        default = self.table_options.get(opts.PARTITION_DEFAULT_NAME)
        return partition_path(list(values), list(self.partition_keys), self.types_of(self.partition_keys), default)

    def with_id(self, schema_id: int) -> TableSchema:
        return replace(self, id=schema_id)

    @cached_property
    def _by_id(self) -> dict[int, DataField]:
        return {f.id: f for f in self.fields}

    def field_by_id(self, field_id: int) -> DataField | None:
        """The top-level field with this id, or None (a column added after this schema, or dropped)."""
        return self._by_id.get(field_id)

    def names_in(self, file_schema: TableSchema) -> dict[str, str | None]:
        """For each of this schema's columns, its name in a file written under `file_schema` (by field id).

        None means the file has no such column (it was added later): it reads as null.
        """
        if file_schema.id == self.id:
            return {n: n for n in self.field_names}
        out: dict[str, str | None] = {}
        for f in self.fields:
            old = file_schema.field_by_id(f.id)
            out[f.name] = old.name if old is not None else None
        return out


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
        if missing and bucket != -1:
            raise InvalidInputError(f"the primary key {list(primary_keys)} must include the partition keys {missing} "
                                    "(or the table needs dynamic buckets, bucket=-1, for cross-partition upsert)")
        if set(primary_keys) == set(partition_keys):
            raise InvalidInputError("the primary key must have a column that is not a partition key")
        if bucket is None:
            raise InvalidInputError(
                "primary-key tables need a bucket count: set the option bucket=N with N > 0, -1 for dynamic buckets "
                "(a key index assigns them) or -2 to postpone the choice to the compactor")
        if bucket <= 0 and bucket not in (-1, -2):
            raise InvalidInputError(f"option 'bucket' must be a positive number, -1 (dynamic) or -2 (postpone) for "
                                    f"primary-key tables, got {bucket}")
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
    producer = table_opts.get(opts.CHANGELOG_PRODUCER)  # raises naming the allowed values
    if producer != "none" and not primary_keys:
        raise InvalidInputError("changelog-producer applies to primary-key tables only")
    rk = table_opts.get(opts.ROWKIND_FIELD)
    if rk and rk not in names:
        raise InvalidInputError(f"rowkind.field {rk!r} is not a column")
    schema = TableSchema(id=0, fields=fields, partition_keys=partition_keys, primary_keys=primary_keys,
                         options=options, comment=comment, time_millis=int(time.time() * 1000),
                         highest_field_id=max_field_id(fields))
    # the merge engine's own options (sequence fields, aggregate functions) are checked by
    # `lsmlake.table.definition.define_table`, above the merge tree
    if not primary_keys and table_opts.get(opts.MERGE_ENGINE) != "deduplicate":
        raise InvalidInputError("merge-engine applies to primary-key tables only")
    return schema


class SchemaManager:
    """Reads and writes the `schema/schema-<id>` files of one table (parsed files are cached: they never change)."""

    def __init__(self, io: FileIO, table_path: str) -> None:
        self.io = io
        self.dir = f"{table_path}/schema"
        self._cache: dict[int, TableSchema] = {}

    def path(self, schema_id: int) -> str:
        return f"{self.dir}/schema-{schema_id}"

    def ids(self) -> list[int]:
        out = []
        for info in self.io.list(self.dir):
            if info.name.startswith("schema-") and info.name[7:].isdigit():
                out.append(int(info.name[7:]))
        return sorted(out)

    def schema(self, schema_id: int) -> TableSchema:
        cached = self._cache.get(schema_id)
        if cached is not None:
            return cached
        try:
            schema = TableSchema.from_json(self.io.read_bytes(self.path(schema_id)))
        except NotFoundError:
            raise NotFoundError(f"schema {schema_id} not found in {self.dir}") from None
        self._cache[schema_id] = schema
        return schema

    def latest(self) -> TableSchema | None:
        ids = self.ids()
        return self.schema(ids[-1]) if ids else None

    def commit(self, schema: TableSchema) -> None:
        """Publish a schema version; fails if that id exists (another writer got there first)."""
        if not self.io.write_if_absent(self.path(schema.id), schema.to_json().encode()):
            raise AlreadyExistsError(f"schema {schema.id} already exists in {self.dir}")
        self._cache[schema.id] = replace(schema, history=None)


class SchemaHistory:
    """The schema versions of one table and which schema each data file was written with.

    Paimon maps a file's columns to the current schema by field id, using the `schema_id` in the
    file's manifest entry. Readers that hold the `DataFileMeta` pass that schema directly; readers
    that only hold a file path (compaction) ask `for_file`, which knows the files the table's scans
    planned and, failing that, looks the file up in the latest snapshot.
    """

    def __init__(self, manager: SchemaManager,
                 live_files: Callable[[], Iterable[tuple[str, int]]] | None = None) -> None:
        """`live_files` lists (file name, schema id) of the latest snapshot's live data files."""
        self.manager = manager
        self._live_files = live_files
        self._file_schema_ids: dict[str, int] = {}
        self._unknown: set[str] = set()  # looked up in the latest snapshot once, not found there
        self._exact: dict[int, bool] = {}

    def schema(self, schema_id: int) -> TableSchema:
        return self.manager.schema(schema_id)

    def note(self, file_name: str, schema_id: int) -> None:
        """Remember the schema of a planned file written under another schema than the current one."""
        self._file_schema_ids[file_name] = schema_id

    def file_schema(self, schema_id: int, current: TableSchema) -> TableSchema:
        """The schema a file of `schema_id` was written with (`current` itself in the common case)."""
        return current if schema_id == current.id else self.schema(schema_id)

    def for_file(self, file_name: str, current: TableSchema) -> TableSchema | None:
        """The schema a data file was written with, or None to read it by column name.

        Reading by name is exact when no column of the table ever changed its name or id, the only
        case where the file's schema need not be known.
        """
        sid = self._file_schema_ids.get(file_name)
        if sid is None:
            if self.names_are_ids(current) or file_name in self._unknown:
                return None
            if self._live_files is not None:
                self._file_schema_ids.update(self._live_files())
                sid = self._file_schema_ids.get(file_name)
            if sid is None:
                self._unknown.add(file_name)
                _log.warning("schema of data file %s unknown (not live in the latest snapshot); "
                             "reading it by column name", file_name)
                return None
        return self.file_schema(sid, current)

    def names_are_ids(self, current: TableSchema) -> bool:
        """Whether every schema version binds each column name to the same field id as `current`."""
        if current.id not in self._exact:
            ids = {f.name: f.id for f in current.fields}
            names = {f.id: f.name for f in current.fields}
            exact = True
            for sid in self.manager.ids():
                if sid == current.id:
                    continue
                for f in self.schema(sid).fields:
                    if ids.get(f.name, f.id) != f.id or names.get(f.id, f.name) != f.name:
                        exact = False
            self._exact[current.id] = exact
        return self._exact[current.id]
