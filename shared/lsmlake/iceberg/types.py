"""Paimon types as Iceberg v2 types, and the checks that refuse what Iceberg readers would not read back equal.

lsmlake's Parquet files carry no field ids, so the Iceberg schema's ids are Paimon's, and list elements, map keys
and map values (which have no id in Paimon) get Paimon's derived ids (`SpecialFields`): readers match the file's
columns by the name mapping (`name_mapping`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from lsmlake.errors import InvalidInputError
from lsmlake.format import types as t
from lsmlake.format.schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND, TableSchema

_NESTED_ID_BASE = 536870911  # Paimon's base for the ids of list elements and map keys/values
_NESTED_ID_STRIDE = 1024
# A primary-key table's files also hold its key copies and system columns. Iceberg readers that match columns by
# name (pyiceberg) refuse a file column the name mapping does not name, so they are mapped to ids that no Iceberg
# schema holds (never projected): Paimon's key ids, and two below them (clear of Iceberg's reserved ids).
_KEY_ID_START = 1073741823
_SYSTEM_IDS = {SEQUENCE_NUMBER: _KEY_ID_START - 2, VALUE_KIND: _KEY_ID_START - 3}

_ATOMIC = {t.BOOLEAN: "boolean", t.INT: "int", t.BIGINT: "long", t.FLOAT: "float", t.DOUBLE: "double",
           t.CHAR: "string", t.VARCHAR: "string", t.BINARY: "binary", t.VARBINARY: "binary", t.DATE: "date"}


def element_id(field_id: int, depth: int) -> int:
    """The id of a list's element (or a map's value) `depth` levels below the field `field_id`."""
    return _NESTED_ID_BASE + _NESTED_ID_STRIDE * field_id + depth


def key_id(field_id: int, depth: int) -> int:
    return _NESTED_ID_BASE - _NESTED_ID_STRIDE * field_id - depth


def refusal(ty: t.AnyType) -> str | None:
    """Why a Paimon type has no Iceberg v2 type that readers read back equal from lsmlake's files; None if it has."""
    if isinstance(ty, t.ArrayType):
        return refusal(ty.element)
    if isinstance(ty, t.MapType):
        return refusal(ty.key) or refusal(ty.value)
    if isinstance(ty, t.RowType):
        return next((r for f in ty.fields if (r := refusal(f.type)) is not None), None)
    k = ty.kind
    if k in (t.TINYINT, t.SMALLINT):
        return None
    if k in _ATOMIC or k == t.DECIMAL:
        return None
    if k == t.TIME:
        return ("lsmlake stores TIME as milliseconds of the day and Iceberg's time is microseconds; readers would "
                "read other values (store it as INT or BIGINT)")
    if k in (t.TIMESTAMP, t.TIMESTAMP_LTZ):
        if ty.precision > 6:
            return ("nanosecond timestamps need Iceberg format version 3 (timestamp_ns), which this publication "
                    "does not write; use a precision of 6 or less")
        return None
    return f"Iceberg has no type for {k}"


def iceberg_type(ty: t.AnyType, field_id: int, depth: int = 1) -> Any:
    """The Iceberg JSON type of a Paimon type; `field_id`: the nearest enclosing field's id (for nested ids)."""
    if isinstance(ty, t.ArrayType):
        return {"type": "list", "element-id": element_id(field_id, depth),
                "element": iceberg_type(ty.element, field_id, depth + 1), "element-required": not ty.element.nullable}
    if isinstance(ty, t.MapType):
        return {"type": "map", "key-id": key_id(field_id, depth), "key": iceberg_type(ty.key, field_id, depth + 1),
                "value-id": element_id(field_id, depth), "value": iceberg_type(ty.value, field_id, depth + 1),
                "value-required": not ty.value.nullable}
    if isinstance(ty, t.RowType):
        return {"type": "struct", "fields": [iceberg_field(f) for f in ty.fields]}
    k = ty.kind
    if k in (t.TINYINT, t.SMALLINT):
        return "int"  # Parquet stores them as annotated int32, which readers read as int
    if k == t.DECIMAL:
        return f"decimal({ty.precision}, {ty.scale})"
    if k == t.TIMESTAMP:
        return "timestamp"
    if k == t.TIMESTAMP_LTZ:
        return "timestamptz"
    if k in _ATOMIC:
        return _ATOMIC[k]
    raise InvalidInputError(f"type {ty.sql()} has no Iceberg type")


def iceberg_field(f: t.DataField) -> dict[str, Any]:
    d: dict[str, Any] = {"id": f.id, "name": f.name, "required": not f.type.nullable,
                         "type": iceberg_type(f.type, f.id)}
    if f.description:
        d["doc"] = f.description
    return d


def iceberg_schema(schema: TableSchema) -> dict[str, Any]:
    """The Iceberg schema of a Paimon schema (same id, same field ids)."""
    s: dict[str, Any] = {"type": "struct", "schema-id": schema.id, "fields": [iceberg_field(f) for f in schema.fields]}
    ids = [schema.field(k).id for k in schema.primary_keys]
    if ids:
        s["identifier-field-ids"] = ids
    return s


def check_types(schema: TableSchema) -> None:
    """InvalidInputError naming the first column whose type Iceberg readers would not read back equal."""
    for f in schema.fields:
        why = refusal(f.type)
        if why is not None:
            raise InvalidInputError(f"column `{f.name}` {f.type.sql()} cannot be published as Iceberg: {why}")


def max_field_id(schemas: Iterable[TableSchema]) -> int:
    """The highest id of any field, nested ids included (Iceberg's `last-column-id`)."""
    best = 0
    for s in schemas:
        for fid in _ids(iceberg_schema(s)["fields"]):
            best = max(best, fid)
    return best


def _ids(fields: list[dict[str, Any]]) -> Iterator[int]:
    for f in fields:
        yield f["id"]
        yield from _type_ids(f["type"])


def _type_ids(ty: Any) -> Iterator[int]:
    if not isinstance(ty, dict):
        return
    if ty["type"] == "struct":
        yield from _ids(ty["fields"])
    elif ty["type"] == "list":
        yield ty["element-id"]
        yield from _type_ids(ty["element"])
    elif ty["type"] == "map":
        yield ty["key-id"]
        yield ty["value-id"]
        yield from _type_ids(ty["key"])
        yield from _type_ids(ty["value"])


def name_mapping(schemas: Iterable[TableSchema]) -> list[dict[str, Any]]:
    """Iceberg's name mapping over every schema: each field id with all the names it had, so files written before
    a rename resolve by their old name and files without an added column read it as null."""
    merged: dict[int, dict[str, Any]] = {}
    for s in schemas:
        _merge(merged, iceberg_schema(s)["fields"])
        if s.is_primary_key_table:
            for k in s.trimmed_primary_keys:
                _merge_one(merged, _KEY_ID_START + s.field(k).id, KEY_PREFIX + k, None)
            for name, fid in _SYSTEM_IDS.items():
                _merge_one(merged, fid, name, None)
    _check_unambiguous(merged)
    return _emit(merged)


def _check_unambiguous(nodes: dict[int, dict[str, Any]]) -> None:
    """InvalidInputError when one name stood for two columns over the schemas (a column renamed, another given its
    old name): lsmlake's files carry no field ids, so a reader could not tell which column a file's values are."""
    owner: dict[str, int] = {}
    for fid, node in nodes.items():
        for name in node["names"]:
            other = owner.setdefault(name, fid)
            if other != fid:
                raise InvalidInputError(
                    f"column name `{name}` stood for two columns over the table's schemas (field ids {other} and "
                    f"{fid}: one was renamed and the other given its old name); Iceberg readers find the columns of "
                    "lsmlake's files by name, so they would read one column's values as the other's; give the new "
                    "column another name")
        _check_unambiguous(node["fields"])


def _merge(into: dict[int, dict[str, Any]], fields: list[dict[str, Any]]) -> None:
    for f in fields:
        _merge_one(into, f["id"], f["name"], f["type"])


def _merge_one(into: dict[int, dict[str, Any]], fid: int, name: str, ty: Any) -> None:
    node = into.setdefault(fid, {"names": [], "fields": {}})
    if name not in node["names"]:
        node["names"].append(name)
    if not isinstance(ty, dict):
        return
    if ty["type"] == "struct":
        _merge(node["fields"], ty["fields"])
    elif ty["type"] == "list":
        _merge_one(node["fields"], ty["element-id"], "element", ty["element"])
    elif ty["type"] == "map":
        _merge_one(node["fields"], ty["key-id"], "key", ty["key"])
        _merge_one(node["fields"], ty["value-id"], "value", ty["value"])


def _emit(nodes: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for fid, node in nodes.items():
        d: dict[str, Any] = {"field-id": fid, "names": node["names"]}
        if node["fields"]:
            d["fields"] = _emit(node["fields"])
        out.append(d)
    return out
