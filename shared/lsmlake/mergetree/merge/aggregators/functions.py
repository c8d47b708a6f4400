"""The aggregate functions Paimon defines: their names, the column types each accepts, which of them
retract, and the per-field options (`fields.<field_name>.*`) they read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lsmlake.errors import InvalidInputError
from lsmlake.format.types import (
    BIGINT,
    BOOLEAN,
    CHAR,
    DATE,
    DECIMAL,
    DOUBLE,
    FLOAT,
    INT,
    SMALLINT,
    TIME,
    TIMESTAMP,
    TIMESTAMP_LTZ,
    TINYINT,
    VARBINARY,
    VARCHAR,
    AnyType,
    ArrayType,
    DataType,
    MapType,
    RowType,
)

FUNCTIONS = (
    "sum", "product", "count", "min", "max", "last_value", "last_non_null_value", "first_value",
    "first_non_null_value", "listagg", "bool_and", "bool_or", "collect", "merge_map", "nested_update",
    "rbm32", "rbm64",
)
RETRACTABLE = frozenset({"sum", "product", "count", "last_value", "last_non_null_value", "collect",
                         "merge_map", "nested_update"})

_NUMERIC = (TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL)
_ORDERED = (CHAR, VARCHAR, DECIMAL, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DATE, TIME, TIMESTAMP,
            TIMESTAMP_LTZ)


@dataclass(frozen=True)
class FieldAggOptions:
    """Per-field options of an aggregate function (`fields.<field_name>.*` table options)."""

    field_name: str
    ignore_retract: bool = False  # fields.<f>.ignore-retract
    delimiter: str = ","  # fields.<f>.list-agg-delimiter
    distinct: bool = False  # fields.<f>.distinct (collect, listagg)
    nested_keys: tuple[str, ...] = ()  # fields.<f>.nested-key (nested_update)


def supports_retract(function: str) -> bool:
    """Whether the function undoes -U/-D rows (others need `ignore-retract`)."""
    if function not in FUNCTIONS:
        raise InvalidInputError(f"unknown aggregate function {function!r}; known: {', '.join(FUNCTIONS)}")
    return function in RETRACTABLE


def _atomic(t: AnyType, kinds: tuple[str, ...]) -> bool:
    return isinstance(t, DataType) and t.kind in kinds


_TYPE_RULES: dict[str, tuple[Callable[[AnyType], bool], str]] = {
    "sum": (lambda t: _atomic(t, _NUMERIC), "a numeric type"),
    "product": (lambda t: _atomic(t, _NUMERIC), "a numeric type"),
    "count": (lambda t: _atomic(t, (TINYINT, SMALLINT, INT, BIGINT)), "an integer type"),
    "min": (lambda t: _atomic(t, _ORDERED), "a numeric, character or date/time type"),
    "max": (lambda t: _atomic(t, _ORDERED), "a numeric, character or date/time type"),
    "last_value": (lambda t: True, "any type"),
    "last_non_null_value": (lambda t: True, "any type"),
    "first_value": (lambda t: True, "any type"),
    "first_non_null_value": (lambda t: True, "any type"),
    "listagg": (lambda t: _atomic(t, (VARCHAR,)), "VARCHAR/STRING"),
    "bool_and": (lambda t: _atomic(t, (BOOLEAN,)), "BOOLEAN"),
    "bool_or": (lambda t: _atomic(t, (BOOLEAN,)), "BOOLEAN"),
    "collect": (lambda t: isinstance(t, ArrayType), "ARRAY"),
    "merge_map": (lambda t: isinstance(t, MapType), "MAP"),
    "nested_update": (lambda t: isinstance(t, ArrayType) and isinstance(t.element, RowType), "ARRAY<ROW>"),
    "rbm32": (lambda t: _atomic(t, (VARBINARY,)), "VARBINARY/BYTES"),
    "rbm64": (lambda t: _atomic(t, (VARBINARY,)), "VARBINARY/BYTES"),
}


def validate(function: str, field_type: AnyType, field: str | FieldAggOptions | None = None) -> None:
    """Raise `InvalidInputError` unless `function` is known and applies to `field_type`.

    `field` (a field name or the field's options) only improves the message; with options, the
    nested keys of nested_update are checked against the row type too.
    """
    name = field.field_name if isinstance(field, FieldAggOptions) else field
    where = f" of field {name!r}" if name else ""
    if function not in FUNCTIONS:
        raise InvalidInputError(f"unknown aggregate function {function!r}{where}; "
                                f"known: {', '.join(FUNCTIONS)}")
    ok, needs = _TYPE_RULES[function]
    if not ok(field_type):
        raise InvalidInputError(f"aggregate function {function!r}{where} needs {needs}, "
                                f"not {field_type.sql()}")
    if function == "nested_update" and isinstance(field, FieldAggOptions) and field.nested_keys:
        assert isinstance(field_type, ArrayType) and isinstance(field_type.element, RowType)
        names = [f.name for f in field_type.element.fields]
        missing = [k for k in field.nested_keys if k not in names]
        if missing:
            raise InvalidInputError(f"nested-key {missing} of field {name!r} is not a field of "
                                    f"{field_type.element.sql()}")
