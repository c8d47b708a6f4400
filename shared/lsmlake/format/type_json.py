"""Types and field ids in the JSON form of Paimon's schema files (`schema/schema-<id>`)."""

from __future__ import annotations

from typing import Any

from lsmlake.errors import InvalidInputError
from lsmlake.format.types import AnyType, ArrayType, DataField, MapType, RowType, parse_type


def type_from_json(value: Any) -> AnyType:
    """Read a type in the schema-file JSON form (a string, or an object for ARRAY/MAP/ROW)."""
    if isinstance(value, str):
        return parse_type(value)
    if not isinstance(value, dict) or "type" not in value:
        raise InvalidInputError(f"bad type in schema JSON: {value!r}")
    head = str(value["type"]).upper().split()
    nullable = not (len(head) >= 3 and head[1:3] == ["NOT", "NULL"])
    kind = head[0]
    if kind == "ARRAY":
        return ArrayType(type_from_json(value["element"]), nullable)
    if kind == "MAP":
        return MapType(type_from_json(value["key"]), type_from_json(value["value"]), nullable)
    if kind == "ROW":
        return RowType(tuple(field_from_json(f) for f in value["fields"]), nullable)
    raise InvalidInputError(f"unsupported type in schema JSON: {value!r}")


def field_from_json(value: dict[str, Any]) -> DataField:
    return DataField(int(value["id"]), str(value["name"]), type_from_json(value["type"]),
                     value.get("description"))


def max_field_id(fields: tuple[DataField, ...]) -> int:
    """The highest field id used, nested ROW fields included."""
    best = -1
    for f in fields:
        best = max(best, f.id, _max_nested_id(f.type))
    return best


def _max_nested_id(t: AnyType) -> int:
    if isinstance(t, RowType):
        return max_field_id(t.fields)
    if isinstance(t, ArrayType):
        return _max_nested_id(t.element)
    if isinstance(t, MapType):
        return max(_max_nested_id(t.key), _max_nested_id(t.value))
    return -1
