"""Schema evolution (ALTER TABLE): the changes lsmlake allows, validated and published as one new schema.

A change list is applied in order to the latest schema and becomes schema `<id + 1>`, written
if-absent like every schema file, so an alter is all or nothing. Data files are never rewritten:
readers map each file's columns to the new schema by field id (see `data_file_read.DataFileRead`).

* add column: nullable only, appended at the end, id = highestFieldId + 1 (old files read it as null);
* rename column: keeps its field id; key columns and columns named by options are refused;
* set / remove option: known options only, and not the ones that fix the table's layout.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lsmlake.errors import AlreadyExistsError, CommitConflictError, InvalidInputError, NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.schema import TableSchema
from lsmlake.format.type_json import max_field_id
from lsmlake.format.types import AnyType, ArrayType, DataField, MapType, RowType, parse_type
from lsmlake.table import features
from lsmlake.table.definition import define_table

if TYPE_CHECKING:
    from lsmlake.table.file_store import FileStore


@dataclass(frozen=True)
class AddColumn:
    """Append a nullable column; rows written before read it as null."""

    name: str
    type_text: str
    comment: str | None = None


@dataclass(frozen=True)
class RenameColumn:
    """Give a column a new name; it keeps its field id, so old files still provide its values."""

    old_name: str
    new_name: str


@dataclass(frozen=True)
class SetOption:
    """Set a table option."""

    key: str
    value: str


@dataclass(frozen=True)
class RemoveOption:
    """Remove a table option (it falls back to its default)."""

    key: str


SchemaChange = AddColumn | RenameColumn | SetOption | RemoveOption

# Options that fix how existing files were laid out or must be merged: Paimon refuses to change them
# once a table has snapshots (CoreOptions' immutable options, plus its bucket and deletion-vector
# checks). Changing `bucket` would orphan rows in the old buckets; turning deletion vectors on would
# expose older row versions that no vector marks, turning them off would hide level-0 rules.
IMMUTABLE_OPTIONS = frozenset({
    opts.BUCKET.key, opts.BUCKET_KEY.key, opts.MERGE_ENGINE.key, opts.DELETION_VECTORS_ENABLED.key,
    opts.ROWKIND_FIELD.key, opts.SEQUENCE_FIELD.key, opts.AGGREGATION_REMOVE_RECORD_ON_DELETE.key,
    opts.PARTIAL_UPDATE_REMOVE_RECORD_ON_DELETE.key, opts.PARTIAL_UPDATE_REMOVE_RECORD_ON_SEQUENCE_GROUP.key,
    "bucket-function.type", "sequence.snapshot-ordering", "primary-key.nullable", "dynamic-bucket.initial-buckets",
    "force-lookup", "row-tracking.enabled", "data-evolution.enabled", "index-file-in-data-file-dir",
})
# Options that describe the table itself rather than tune it: never changed by an alter.
FIXED_OPTIONS = frozenset({opts.TYPE.key, opts.PATH.key, opts.PRIMARY_KEY_OPT.key, opts.PARTITION_OPT.key})
# Options whose value lists column names: renaming such a column is refused (Paimon keeps keys fixed).
_COLUMN_LIST_OPTIONS = (opts.BUCKET_KEY.key, opts.SEQUENCE_FIELD.key, opts.ROWKIND_FIELD.key,
                        opts.PARTIAL_UPDATE_REMOVE_RECORD_ON_SEQUENCE_GROUP.key, opts.PRIMARY_KEY_OPT.key,
                        opts.PARTITION_OPT.key)
_FIELD_OPTION = re.compile(r"fields\.([^.]+)\.(.+)")


def apply_changes(schema: TableSchema, changes: Sequence[SchemaChange], has_snapshots: bool = True) -> TableSchema:
    """The schema after `changes` (applied in order), with id `schema.id + 1`; nothing is written.

    `has_snapshots`: whether the table holds data; options in IMMUTABLE_OPTIONS may change only
    while it does not, as in Paimon.

    Raises:
        InvalidInputError (UnknownOptionError for an unknown option key) naming the first change that
        is not allowed; the table definition after all changes is validated like a new table's.
    """
    if not changes:
        raise InvalidInputError("alter table needs at least one change")
    fields = list(schema.fields)
    options = dict(schema.options)
    highest = max(schema.highest_field_id, max_field_id(schema.fields))
    renamed = False
    for change in changes:
        names = [f.name for f in fields]
        if isinstance(change, AddColumn):
            new_field = _new_column(change, names, highest)
            highest = max(highest, max_field_id((new_field,)))
            fields.append(new_field)
        elif isinstance(change, RenameColumn):
            i = _rename_target(schema, change, names, options)
            fields[i] = replace(fields[i], name=change.new_name)
            renamed = True
        elif isinstance(change, SetOption):
            _check_option_change(change.key, options.get(change.key), change.value, has_snapshots)
            opts.validate({change.key: change.value})
            options[change.key] = change.value
        elif isinstance(change, RemoveOption):
            _check_option_change(change.key, options.get(change.key), None, has_snapshots)
            options.pop(change.key, None)
        else:
            raise InvalidInputError(f"unsupported schema change {change!r}")
    new = replace(schema, id=schema.id + 1, fields=tuple(fields), options=options,
                  time_millis=int(time.time() * 1000), highest_field_id=highest, history=None)
    _validate(schema, new, renamed)
    return new


def _new_column(change: AddColumn, names: list[str], highest: int) -> DataField:
    name = change.name
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError("add column: the column name is empty")
    if name in names:
        raise InvalidInputError(f"add column: column {name!r} already exists")
    try:
        t = parse_type(change.type_text)
    except InvalidInputError as e:
        raise InvalidInputError(f"add column {name!r}: {e}") from None
    if not t.nullable:
        raise InvalidInputError(f"add column {name!r}: a NOT NULL column cannot be added "
                                f"(rows written before have no value for it); drop NOT NULL from {change.type_text!r}")
    counter = [highest + 1]
    field_id = _take(counter)
    return DataField(field_id, name, _renumbered(t, counter), change.comment)


def _take(counter: list[int]) -> int:
    n = counter[0]
    counter[0] += 1
    return n


def _renumbered(t: AnyType, counter: list[int]) -> AnyType:
    """`t` with its nested ROW fields numbered from the table's id counter (ids are never reused).

    A nested field's own children are numbered before it, as Paimon numbers an added column.
    """
    if isinstance(t, RowType):
        out = []
        for f in t.fields:
            inner = _renumbered(f.type, counter)
            out.append(DataField(_take(counter), f.name, inner, f.description))
        return RowType(tuple(out), t.nullable)
    if isinstance(t, ArrayType):
        return ArrayType(_renumbered(t.element, counter), t.nullable)
    if isinstance(t, MapType):
        return MapType(_renumbered(t.key, counter), _renumbered(t.value, counter), t.nullable)
    return t


def _rename_target(schema: TableSchema, change: RenameColumn, names: list[str], options: dict[str, str]) -> int:
    old, new = change.old_name, change.new_name
    if old not in names:
        raise InvalidInputError(f"rename column: column {old!r} does not exist; columns are {names}")
    if not isinstance(new, str) or not new.strip():
        raise InvalidInputError(f"rename column {old!r}: the new name is empty")
    if new in names:
        raise InvalidInputError(f"rename column {old!r}: column {new!r} already exists")
    for what, keys in (("primary key", schema.primary_keys), ("partition key", schema.partition_keys),
                       ("bucket key", schema.bucket_keys)):
        if old in keys:
            raise InvalidInputError(f"rename column: {old!r} is a {what} column; key columns cannot be renamed")
    for key, value in options.items():
        m = _FIELD_OPTION.fullmatch(key)
        listed = key in _COLUMN_LIST_OPTIONS or (m is not None and m.group(2) == "sequence-group")
        if (m is not None and m.group(1) == old) or (listed and old in (v.strip() for v in value.split(","))):
            raise InvalidInputError(f"rename column: {old!r} is named by option {key!r}; "
                                    "change or remove that option first")
    return names.index(old)


def _check_option_change(key: str, old: str | None, new: str | None, has_snapshots: bool) -> None:
    if not isinstance(key, str) or not key:
        raise InvalidInputError("option key is empty")
    if new is not None and not isinstance(new, str):
        raise InvalidInputError(f"option {key!r} must be a string, got {type(new).__name__}")
    if old == new:
        return  # unchanged: allowed whatever the option, as in Paimon
    if key in FIXED_OPTIONS:
        raise InvalidInputError(f"option {key!r} cannot be changed by altering a table")
    if key in IMMUTABLE_OPTIONS and has_snapshots:
        raise InvalidInputError(f"option {key!r} cannot be changed once the table has data "
                                f"(it is {'unset' if old is None else repr(old)})")


def _validate(old: TableSchema, new: TableSchema, renamed: bool) -> None:
    """Check the altered definition as a new table's, skipping what the old one already broke."""
    known = {k: v for k, v in new.options.items() if opts.is_known(k)}  # foreign options pass through
    try:
        define_table(new.fields, new.partition_keys, new.primary_keys, known, new.comment)
    except InvalidInputError as e:
        raise InvalidInputError(f"the table after the changes is not valid: {e}") from None
    before = set(features.unsupported(old, for_write=True))
    added = [r for r in features.unsupported(new, for_write=True) if r not in before]
    if added:
        raise InvalidInputError("the table after the changes cannot be written by lsmlake: " + "; ".join(added))


def alter_table(table: FileStore, changes: Sequence[SchemaChange],
                check: Callable[[TableSchema], None] | None = None) -> TableSchema:
    """Apply `changes` to the table's latest schema and publish the result as the next schema file.

    1. re-read the latest schema (the table object may be stale);
    2. validate and apply every change (nothing is written when one is refused);
    3. write `schema-<id + 1>` if absent; losing that race to another alter raises
       CommitConflictError and changes nothing (re-read and retry);
    4. switch `table` to the new schema.
    The caller serialises alters with commits if it needs to (the catalog service holds its lock).
    """
    current = table.schemas.latest()
    if current is None:
        raise NotFoundError(f"table {table.identifier} has no schema")
    new = apply_changes(current, changes, has_snapshots=table.snapshots.latest_id() is not None)
    if check is not None:  # what the layers above require of a schema (the Iceberg publication's types)
        check(new)
    try:
        table.schemas.commit(new)
    except AlreadyExistsError:
        raise CommitConflictError(f"table {table.identifier} was altered concurrently: schema {new.id} "
                                  "already exists; re-read the table and retry") from None
    table.refresh_schema()
    return new
