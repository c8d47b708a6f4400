"""Paimon data types: parsing Paimon's SQL type names, the schema-file JSON form, and Arrow mapping.

A type is a frozen value: `DataType` for atomic types (kind + parameters), `ArrayType`, `MapType` and
`RowType` for nested ones. Every type carries its nullability.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from lsmlake.errors import InvalidInputError

MAX_LENGTH = 2147483647  # Java Integer.MAX_VALUE: STRING = VARCHAR(MAX), BYTES = VARBINARY(MAX)

# Kinds of atomic types, as Paimon names them in schema files.
BOOLEAN = "BOOLEAN"
TINYINT = "TINYINT"
SMALLINT = "SMALLINT"
INT = "INT"
BIGINT = "BIGINT"
FLOAT = "FLOAT"
DOUBLE = "DOUBLE"
DECIMAL = "DECIMAL"
CHAR = "CHAR"
VARCHAR = "VARCHAR"
BINARY = "BINARY"
VARBINARY = "VARBINARY"
DATE = "DATE"
TIME = "TIME"
TIMESTAMP = "TIMESTAMP"
TIMESTAMP_LTZ = "TIMESTAMP_LTZ"
# Paimon's BLOB: large binary values kept in blob files beside the data files (not in Parquet). Parsed so that a
# table with one loads and is refused by name (`lsmlake.table.features`); it has no Arrow mapping.
BLOB = "BLOB"

ATOMIC_KINDS = (BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL, CHAR, VARCHAR,
                BINARY, VARBINARY, DATE, TIME, TIMESTAMP, TIMESTAMP_LTZ)
STRING_KINDS = (CHAR, VARCHAR)
BINARY_KINDS = (BINARY, VARBINARY)


@dataclass(frozen=True)
class DataType:
    """An atomic Paimon type: its kind, parameters (length, precision, scale) and nullability."""

    kind: str
    nullable: bool = True
    length: int = 0  # CHAR/VARCHAR/BINARY/VARBINARY
    precision: int = 0  # DECIMAL, TIME, TIMESTAMP, TIMESTAMP_LTZ
    scale: int = 0  # DECIMAL

    def with_nullable(self, nullable: bool) -> DataType:
        return replace(self, nullable=nullable)

    def sql(self) -> str:
        """The type as Paimon writes it in a schema file (`DECIMAL(10, 2) NOT NULL`)."""
        k = self.kind
        if k == VARCHAR and self.length == MAX_LENGTH:
            s = "STRING"
        elif k == VARBINARY and self.length == MAX_LENGTH:
            s = "BYTES"
        elif k in (CHAR, VARCHAR, BINARY, VARBINARY):
            s = f"{k}({self.length})"
        elif k == DECIMAL:
            s = f"DECIMAL({self.precision}, {self.scale})"
        elif k in (TIME, TIMESTAMP):
            s = f"{k}({self.precision})"
        elif k == TIMESTAMP_LTZ:
            s = f"TIMESTAMP({self.precision}) WITH LOCAL TIME ZONE"
        else:
            s = k
        return s if self.nullable else s + " NOT NULL"

    def to_json(self) -> Any:
        return self.sql()

    def __str__(self) -> str:
        return self.sql()

    @property
    def is_fixed_width(self) -> bool:
        """True when the value fits the 8-byte BinaryRow slot (Paimon's 'compact' types)."""
        if self.kind == DECIMAL:
            return self.precision <= 18
        if self.kind in (TIMESTAMP, TIMESTAMP_LTZ):
            return self.precision <= 3
        return self.kind not in STRING_KINDS + BINARY_KINDS + (BLOB,)


@dataclass(frozen=True)
class ArrayType:
    """ARRAY<element>."""

    element: AnyType
    nullable: bool = True

    def with_nullable(self, nullable: bool) -> ArrayType:
        return replace(self, nullable=nullable)

    def sql(self) -> str:
        return f"ARRAY<{self.element.sql()}>" + ("" if self.nullable else " NOT NULL")

    def to_json(self) -> Any:
        return {"type": "ARRAY" if self.nullable else "ARRAY NOT NULL", "element": self.element.to_json()}

    @property
    def kind(self) -> str:
        return "ARRAY"


@dataclass(frozen=True)
class MapType:
    """MAP<key, value>; Paimon forces the key NOT NULL."""

    key: AnyType
    value: AnyType
    nullable: bool = True

    def with_nullable(self, nullable: bool) -> MapType:
        return replace(self, nullable=nullable)

    def sql(self) -> str:
        return f"MAP<{self.key.sql()}, {self.value.sql()}>" + ("" if self.nullable else " NOT NULL")

    def to_json(self) -> Any:
        return {"type": "MAP" if self.nullable else "MAP NOT NULL",
                "key": self.key.to_json(), "value": self.value.to_json()}

    @property
    def kind(self) -> str:
        return "MAP"


@dataclass(frozen=True)
class DataField:
    """A named, numbered field of a row type (a table column or a nested ROW field)."""

    id: int
    name: str
    type: AnyType
    description: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "name": self.name, "type": self.type.to_json()}
        if self.description is not None:
            d["description"] = self.description
        return d


@dataclass(frozen=True)
class RowType:
    """ROW<fields>."""

    fields: tuple[DataField, ...] = field(default_factory=tuple)
    nullable: bool = True

    def with_nullable(self, nullable: bool) -> RowType:
        return replace(self, nullable=nullable)

    def sql(self) -> str:
        inner = ", ".join(f"{f.name} {f.type.sql()}" for f in self.fields)
        return f"ROW<{inner}>" + ("" if self.nullable else " NOT NULL")

    def to_json(self) -> Any:
        return {"type": "ROW" if self.nullable else "ROW NOT NULL",
                "fields": [f.to_json() for f in self.fields]}

    @property
    def kind(self) -> str:
        return "ROW"


AnyType = DataType | ArrayType | MapType | RowType


def string_type(nullable: bool = True) -> DataType:
    return DataType(VARCHAR, nullable, length=MAX_LENGTH)


def bytes_type(nullable: bool = True) -> DataType:
    return DataType(VARBINARY, nullable, length=MAX_LENGTH)


# ---------------------------------------------------------------------------------------------
# Parsing Paimon's SQL type names
# ---------------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z_0-9]*)|(\d+)|(`[^`]*`)|([<>(),]))")


class _Tokens:
    def __init__(self, text: str) -> None:
        self.text = text
        self.items: list[str] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                raise InvalidInputError(f"cannot parse type {text!r}: unexpected {text[pos:].strip()[:20]!r}")
            tok = next(g for g in m.groups() if g is not None)
            self.items.append(tok)
            pos = m.end()
        self.i = 0

    def peek(self) -> str | None:
        return self.items[self.i] if self.i < len(self.items) else None

    def peek_upper(self) -> str | None:
        p = self.peek()
        return p.upper() if p is not None else None

    def take(self) -> str:
        if self.i >= len(self.items):
            raise InvalidInputError(f"cannot parse type {self.text!r}: unexpected end")
        tok = self.items[self.i]
        self.i += 1
        return tok

    def expect(self, tok: str) -> None:
        got = self.take()
        if got.upper() != tok:
            raise InvalidInputError(f"cannot parse type {self.text!r}: expected {tok!r}, got {got!r}")

    def error(self, what: str) -> InvalidInputError:
        return InvalidInputError(f"cannot parse type {self.text!r}: {what}")


def _int_params(t: _Tokens) -> list[int]:
    if t.peek() != "(":
        return []
    t.take()
    out = []
    while True:
        tok = t.take()
        if not tok.isdigit():
            raise t.error(f"expected a number, got {tok!r}")
        out.append(int(tok))
        nxt = t.take()
        if nxt == ")":
            return out
        if nxt != ",":
            raise t.error(f"expected ',' or ')', got {nxt!r}")


def _nullability(t: _Tokens) -> bool:
    if t.peek_upper() == "NOT":
        t.take()
        t.expect("NULL")
        return False
    if t.peek_upper() == "NULL":
        t.take()
    return True


class _IdCounter:
    """Hands out field ids for nested ROW fields while parsing a whole schema."""

    def __init__(self, start: int) -> None:
        self.next = start

    def take(self) -> int:
        n = self.next
        self.next += 1
        return n


def _parse(t: _Tokens, ids: _IdCounter | None) -> AnyType:
    word = t.take().upper()
    result: AnyType
    if word in ("BOOLEAN", "TINYINT", "SMALLINT", "BIGINT", "FLOAT", "DATE", BLOB):
        result = DataType(word)
    elif word in ("INT", "INTEGER"):
        result = DataType(INT)
    elif word == "DOUBLE":
        if t.peek_upper() == "PRECISION":
            t.take()
        result = DataType(DOUBLE)
    elif word in ("DECIMAL", "NUMERIC", "DEC"):
        p = _int_params(t)
        precision = p[0] if p else 10
        scale = p[1] if len(p) > 1 else 0
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise t.error(f"DECIMAL({precision}, {scale}) is out of range (precision 1..38, scale 0..precision)")
        result = DataType(DECIMAL, precision=precision, scale=scale)
    elif word in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
        p = _int_params(t)
        length = p[0] if p else 1
        if length < 1:
            raise t.error(f"{word} length must be at least 1")
        result = DataType(word, length=length)
    elif word == "STRING":
        result = string_type()
    elif word == "BYTES":
        result = bytes_type()
    elif word == "TIME":
        p = _int_params(t)
        precision = p[0] if p else 0
        if not 0 <= precision <= 9:
            raise t.error("TIME precision must be 0..9")
        if t.peek_upper() == "WITHOUT":
            for w in ("WITHOUT", "TIME", "ZONE"):
                t.expect(w)
        result = DataType(TIME, precision=precision)
    elif word in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        p = _int_params(t)
        precision = p[0] if p else 6
        if not 0 <= precision <= 9:
            raise t.error("TIMESTAMP precision must be 0..9")
        kind = TIMESTAMP_LTZ if word == "TIMESTAMP_LTZ" else TIMESTAMP
        if word == "TIMESTAMP" and t.peek_upper() == "WITH":
            for w in ("WITH", "LOCAL", "TIME", "ZONE"):
                t.expect(w)
            kind = TIMESTAMP_LTZ
        elif word == "TIMESTAMP" and t.peek_upper() == "WITHOUT":
            for w in ("WITHOUT", "TIME", "ZONE"):
                t.expect(w)
        result = DataType(kind, precision=precision)
    elif word == "ARRAY":
        t.expect("<")
        element = _parse(t, ids)
        t.expect(">")
        result = ArrayType(element)
    elif word == "MAP":
        t.expect("<")
        key = _parse(t, ids).with_nullable(False)
        t.expect(",")
        value = _parse(t, ids)
        t.expect(">")
        result = MapType(key, value)
    elif word == "ROW":
        t.expect("<")
        fields: list[DataField] = []
        while True:
            name = t.take()
            if name.startswith("`"):
                name = name[1:-1]
            fid = ids.take() if ids is not None else len(fields)
            ftype = _parse(t, ids)
            fields.append(DataField(fid, name, ftype))
            nxt = t.take()
            if nxt == ">":
                break
            if nxt != ",":
                raise t.error(f"expected ',' or '>' in ROW, got {nxt!r}")
        result = RowType(tuple(fields))
    else:
        raise t.error(f"unknown type {word!r}")
    return result.with_nullable(_nullability(t))


def parse_type(text: str, ids: _IdCounter | None = None) -> AnyType:
    """Parse one Paimon SQL type name such as `DECIMAL(10, 2) NOT NULL` or `MAP<STRING, BIGINT>`."""
    t = _Tokens(text)
    result = _parse(t, ids)
    if t.peek() is not None:
        raise t.error(f"unexpected {t.peek()!r} after the type")
    return result


def _split_top_level(text: str) -> Iterator[str]:
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


def parse_schema_fields(text: str) -> tuple[DataField, ...]:
    """Parse a column list such as `id BIGINT NOT NULL, dt STRING` into fields numbered from 0.

    Nested ROW fields are numbered after all top-level fields, as Paimon numbers them.
    """
    parts = [p.strip() for p in _split_top_level(text) if p.strip()]
    if not parts:
        raise InvalidInputError("the schema has no columns")
    ids = _IdCounter(len(parts))
    fields = []
    seen = set()
    for i, part in enumerate(parts):
        m = re.match(r"(`[^`]+`|[A-Za-z_][A-Za-z_0-9]*)\s+(.+)$", part, re.S)
        if not m:
            raise InvalidInputError(f"column definition {part!r} must be 'name TYPE'")
        name = m.group(1).strip("`")
        if name in seen:
            raise InvalidInputError(f"column {name!r} is defined twice")
        seen.add(name)
        fields.append(DataField(i, name, parse_type(m.group(2), ids)))
    return tuple(fields)


# ---------------------------------------------------------------------------------------------
# Arrow mapping (the physical layout pypaimon and lsmlake write into Parquet)
# ---------------------------------------------------------------------------------------------

def _ts_unit(precision: int) -> str:
    if precision <= 3:
        return "ms"
    if precision <= 6:
        return "us"
    return "ns"


def to_arrow_type(t: AnyType) -> pa.DataType:
    """The Arrow type lsmlake stores a Paimon type as."""
    if isinstance(t, ArrayType):
        return pa.list_(to_arrow_field("element", t.element))
    if isinstance(t, MapType):
        return pa.map_(to_arrow_field("key", t.key.with_nullable(False)), to_arrow_field("value", t.value))
    if isinstance(t, RowType):
        return pa.struct([to_arrow_field(f.name, f.type) for f in t.fields])
    k = t.kind
    simple = {BOOLEAN: pa.bool_(), TINYINT: pa.int8(), SMALLINT: pa.int16(), INT: pa.int32(),
              BIGINT: pa.int64(), FLOAT: pa.float32(), DOUBLE: pa.float64(), DATE: pa.date32()}
    if k in simple:
        return simple[k]
    if k == DECIMAL:
        return pa.decimal128(t.precision, t.scale)
    if k in STRING_KINDS:
        return pa.string()
    if k in BINARY_KINDS:
        return pa.binary()
    if k == TIME:
        return pa.time32("ms")
    if k == TIMESTAMP:
        return pa.timestamp(_ts_unit(t.precision))
    if k == TIMESTAMP_LTZ:
        return pa.timestamp(_ts_unit(t.precision), tz="UTC")
    raise InvalidInputError(f"type {t.sql()} has no Arrow mapping")


def to_arrow_field(name: str, t: AnyType) -> pa.Field:
    return pa.field(name, to_arrow_type(t), nullable=t.nullable)


def to_arrow_schema(fields: tuple[DataField, ...]) -> pa.Schema:
    return pa.schema([to_arrow_field(f.name, f.type) for f in fields])


def from_arrow_type(at: pa.DataType, nullable: bool = True) -> AnyType:
    """Infer the Paimon type of an Arrow type (used when a table is created from Arrow data)."""
    if pa.types.is_boolean(at):
        return DataType(BOOLEAN, nullable)
    ints = {8: TINYINT, 16: SMALLINT, 32: INT, 64: BIGINT}
    if pa.types.is_signed_integer(at):
        return DataType(ints[at.bit_width], nullable)
    if pa.types.is_float32(at):
        return DataType(FLOAT, nullable)
    if pa.types.is_float64(at):
        return DataType(DOUBLE, nullable)
    if pa.types.is_decimal(at):
        return DataType(DECIMAL, nullable, precision=at.precision, scale=at.scale)
    if pa.types.is_string(at) or pa.types.is_large_string(at):
        return string_type(nullable)
    if pa.types.is_fixed_size_binary(at):
        return DataType(BINARY, nullable, length=at.byte_width)
    if pa.types.is_binary(at) or pa.types.is_large_binary(at):
        return bytes_type(nullable)
    if pa.types.is_date32(at):
        return DataType(DATE, nullable)
    if pa.types.is_time(at):
        return DataType(TIME, nullable, precision={"s": 0, "ms": 3, "us": 6, "ns": 9}[at.unit])
    if pa.types.is_timestamp(at):
        p = {"s": 0, "ms": 3, "us": 6, "ns": 9}[at.unit]
        return DataType(TIMESTAMP_LTZ if at.tz else TIMESTAMP, nullable, precision=p)
    if pa.types.is_list(at) or pa.types.is_large_list(at):
        vf = at.value_field
        return ArrayType(from_arrow_type(vf.type, vf.nullable), nullable)
    if pa.types.is_map(at):
        return MapType(from_arrow_type(at.key_type, False), from_arrow_type(at.item_type, True), nullable)
    if pa.types.is_struct(at):
        return RowType(tuple(DataField(i, at.field(i).name, from_arrow_type(at.field(i).type,
                                                                             at.field(i).nullable))
                             for i in range(at.num_fields)), nullable)
    raise InvalidInputError(f"Arrow type {at} has no Paimon equivalent")
