"""One JSON value -> the stored form of a table column: the reference conversion.

The vectorised plain-JSON path (`json_batch`) must give the same value or flag the row; a flagged
row comes back here for its reason. Stored forms are what `pa.array(values, arrow_type)` takes:
int for integers, DATE (days), TIME (millis of day) and TIMESTAMP (in the column's Arrow unit),
float, bool, str, bytes, Decimal, and lists/dicts/pairs for nested types.

Text forms (shared with the vectorised path through the patterns below): DATE `2024-01-31`,
TIME `12:30:00.5`, TIMESTAMP `2024-01-31T12:30:00.123456789` with an optional `Z`/`+02:00` (a
value with an offset is stored in UTC; a TIMESTAMP_LTZ without one is taken as UTC), integers and
decimals as plain number text. Digits finer than the column's precision are truncated (floor).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from lsmlake.format import types as T
from lsmlake.format.schema import TableSchema
from lsmlake.format.types import AnyType, ArrayType, DataType, MapType, RowType

INT_TEXT = r"-?[0-9]+"
FLOAT_TEXT = r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:nan|inf|infinity))"
DECIMAL_TEXT = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
DATE_TEXT = r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})"
_CLOCK = r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2})(?::(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]{1,9}))?)?"
TIME_TEXT = _CLOCK
TIMESTAMP_TEXT = DATE_TEXT + r"(?:[T ]" + _CLOCK + r")?(?P<z>Z|[+-][0-9]{2}(?::?[0-9]{2})?)?"

_INT_RE = re.compile(INT_TEXT)
_FLOAT_RE = re.compile(FLOAT_TEXT)
_DECIMAL_RE = re.compile(DECIMAL_TEXT)
_TIME_RE = re.compile(TIME_TEXT)
_TIMESTAMP_RE = re.compile(TIMESTAMP_TEXT)
_BASE64_RE = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")

INT_RANGES = {T.TINYINT: 8, T.SMALLINT: 16, T.INT: 32, T.BIGINT: 64}
UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
MILLIS_PER_DAY = 86_400_000
EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
INT64_MAX = 2**63 - 1
_WIDE = decimal.Context(prec=200)


class BadValue(Exception):
    """A value that does not fit its column; the message says why, without the column name."""


class BadMessage(Exception):
    """A message that cannot be decoded; the message is the reason a person reads in the dead letter.

    `column` names the table column the reason is about, when it is about one (a caller outside Kafka, the
    CLI, names it in its own words)."""

    def __init__(self, reason: str, column: str | None = None) -> None:
        super().__init__(reason)
        self.column = column


@dataclass(frozen=True)
class Column:
    """One table column as the decoders see it."""

    name: str
    type: AnyType
    arrow_type: pa.DataType
    is_key: bool

    @property
    def nullable(self) -> bool:
        return self.type.nullable

    @property
    def null_reason(self) -> str:
        return f'NULL in primary key "{self.name}"' if self.is_key else f'NULL in NOT NULL column "{self.name}"'

    @property
    def missing_reason(self) -> str:
        return f'missing key column "{self.name}"' if self.is_key else f'missing NOT NULL column "{self.name}"'


def columns_of(schema: TableSchema) -> tuple[Column, ...]:
    keys = set(schema.primary_keys)
    return tuple(Column(f.name, f.type, af.type, f.name in keys)
                 for f, af in zip(schema.fields, schema.arrow_schema, strict=True))


@dataclass(frozen=True)
class Hint:
    """What a Debezium (Kafka Connect) schema says about a field: its type, logical name and scale."""

    type: str | None = None  # int32, int64, string, bytes, ...
    name: str | None = None  # io.debezium.time.MicroTimestamp, org.apache.kafka.connect.data.Decimal, ...
    scale: int | None = None


#: logical names of epoch-based temporal values, and their unit
EPOCH_UNITS = {
    "io.debezium.time.Timestamp": "ms", "org.apache.kafka.connect.data.Timestamp": "ms",
    "io.debezium.time.MicroTimestamp": "us", "io.debezium.time.NanoTimestamp": "ns",
    "io.debezium.time.Time": "ms", "org.apache.kafka.connect.data.Time": "ms",
    "io.debezium.time.MicroTime": "us", "io.debezium.time.NanoTime": "ns",
}
DECIMAL_NAMES = ("org.apache.kafka.connect.data.Decimal",)


def type_name(t: AnyType) -> str:
    return t.with_nullable(True).sql()


def show(value: Any) -> str:
    """A value as it appeared in the message, shortened for a reason text."""
    if isinstance(value, Decimal):
        return str(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def precision_unit(precision: int) -> str:
    """The unit Debezium sends a temporal value of this precision in (when no schema says so)."""
    return "ms" if precision <= 3 else "us" if precision <= 6 else "ns"


def convert(value: Any, t: AnyType, debezium: bool = False, hint: Hint | None = None) -> Any:
    """The stored form of one non-null JSON value for a column of type `t`; raises BadValue."""
    if isinstance(t, ArrayType | MapType | RowType):
        return _nested(value, t, debezium)
    k = t.kind
    if k in INT_RANGES:
        return _integer(value, t)
    if k in (T.FLOAT, T.DOUBLE):
        return _float(value, t)
    if k == T.BOOLEAN:
        if isinstance(value, bool):
            return value
        if type(value) is int and value in (0, 1):  # MySQL TINYINT(1) as Debezium sends it
            return bool(value)
        raise _expected(t, value)
    if k in T.STRING_KINDS:
        if isinstance(value, str):
            return value
        raise _expected(t, value)
    if k in T.BINARY_KINDS:
        if isinstance(value, str):
            return _base64(value, t)
        raise _expected(t, value)
    if k == T.DECIMAL:
        return _decimal(value, t, debezium, hint)
    if k == T.DATE:
        return _date(value, t)
    if k == T.TIME:
        return _time(value, t, debezium, hint)
    if k in (T.TIMESTAMP, T.TIMESTAMP_LTZ):
        return _timestamp(value, t, debezium, hint)
    raise BadValue(f"type {type_name(t)} is not supported by the ingestion decoder")


def _expected(t: AnyType, value: Any) -> BadValue:
    return BadValue(f"expected {type_name(t)} got {show(value)}")


def _is_int(value: Any) -> bool:
    return type(value) is int


def _integer(value: Any, t: DataType) -> int:
    if _is_int(value):
        n = value
    elif isinstance(value, str) and _INT_RE.fullmatch(value):
        n = int(value)
    else:
        raise _expected(t, value)
    bits = INT_RANGES[t.kind]
    if not -(2 ** (bits - 1)) <= n < 2 ** (bits - 1):
        raise BadValue(f"{show(value)} is out of range for {type_name(t)}")
    return n


def _float(value: Any, t: DataType) -> float:
    if _is_int(value):
        f, finite_input = float(value), True
    elif isinstance(value, Decimal):
        f, finite_input = float(value), value.is_finite()
    elif isinstance(value, float):  # NaN, Infinity
        f, finite_input = value, math.isfinite(value)
    elif isinstance(value, str) and _FLOAT_RE.fullmatch(value):
        f = float(value)
        finite_input = value.lower().lstrip("+-") not in ("nan", "inf", "infinity")
    else:
        raise _expected(t, value)
    limit = 3.4028234663852886e38 if t.kind == T.FLOAT else 1.7976931348623157e308
    if finite_input and not -limit <= f <= limit:
        raise BadValue(f"{show(value)} is out of range for {type_name(t)}")
    return f


def _base64(text: str, t: DataType) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadValue(f"expected {type_name(t)} as base64 text, got {show(text)}") from None


def _decimal(value: Any, t: DataType, debezium: bool, hint: Hint | None) -> Decimal:
    if debezium and isinstance(value, dict) and "value" in value and "scale" in value:
        # io.debezium.data.VariableScaleDecimal: {"scale": 2, "value": base64 of the unscaled integer}
        scale = value["scale"]
        if not _is_int(scale) or not isinstance(value["value"], str):
            raise _expected(t, value)
        d = _unscaled(value["value"], scale, t)
    elif _is_int(value) or isinstance(value, Decimal | float):
        d = Decimal(value)
    elif isinstance(value, str):
        if debezium and _base64_decimal(value, hint):
            scale = hint.scale if hint is not None and hint.scale is not None else t.scale
            d = _unscaled(value, scale, t)
        elif _DECIMAL_RE.fullmatch(value):
            d = Decimal(value)
        else:
            raise _expected(t, value)
    else:
        raise _expected(t, value)
    if not d.is_finite():
        raise _expected(t, value)
    quantum = Decimal(1).scaleb(-t.scale)
    q = d.quantize(quantum, context=_WIDE)
    if q != d:
        raise BadValue(f"{show(value)} has more than {t.scale} decimal places for {type_name(t)}")
    if abs(q) >= Decimal(10) ** (t.precision - t.scale):
        raise BadValue(f"{show(value)} does not fit {type_name(t)}")
    return q


def _base64_decimal(text: str, hint: Hint | None) -> bool:
    """Whether a Debezium decimal string is base64 bytes (precise mode) rather than number text.

    The schema says so when it is there; without it, text that is valid base64 is read as bytes
    (Debezium's default `decimal.handling.mode=precise`). Only integral numbers in string mode whose
    length is a multiple of 4 ("1234") are ambiguous; they are read as bytes.
    """
    if hint is not None and (hint.name in DECIMAL_NAMES or hint.type == "bytes"):
        return True
    if hint is not None and hint.type == "string":
        return False
    return bool(text) and _BASE64_RE.fullmatch(text) is not None


def _unscaled(text: str, scale: int, t: DataType) -> Decimal:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadValue(f"expected {type_name(t)} as base64 bytes, got {show(text)}") from None
    return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale, context=_WIDE)


def _date(value: Any, t: DataType) -> int:
    if _is_int(value):
        if not -(2**31) <= value < 2**31:
            raise BadValue(f"{show(value)} days is out of range for DATE")
        return value
    if isinstance(value, str):
        m = re.fullmatch(DATE_TEXT, value)
        if m:
            try:
                return dt.date(int(m["y"]), int(m["mo"]), int(m["d"])).toordinal() - EPOCH_ORDINAL
            except ValueError:
                pass
    raise _expected(t, value)


def _clock_nanos(m: re.Match[str]) -> int:
    """Nanoseconds since midnight of a matched clock text; raises ValueError when out of range."""
    if m["h"] is None:
        return 0
    h, mi, s = int(m["h"]), int(m["mi"]), int(m["s"] or 0)
    if h > 23 or mi > 59 or s > 59:
        raise ValueError("clock out of range")
    return ((h * 60 + mi) * 60 + s) * 1_000_000_000 + int((m["f"] or "").ljust(9, "0"))


def _epoch_unit(t: DataType, debezium: bool, hint: Hint | None) -> str:
    """The unit of an epoch number: the schema's logical type; else millis for plain JSON and,
    for Debezium without a schema, the unit Debezium picks for the column's precision."""
    if hint is not None and hint.name in EPOCH_UNITS:
        return EPOCH_UNITS[hint.name]
    return precision_unit(t.precision) if debezium else "ms"


def rescale(n: int, from_unit: str, to_unit: str) -> int:
    """An epoch count from one unit to another, flooring; raises BadValue beyond int64."""
    a, b = UNITS_PER_SECOND[from_unit], UNITS_PER_SECOND[to_unit]
    out = n * (b // a) if b >= a else n // (a // b)
    if not -INT64_MAX - 1 <= out <= INT64_MAX:
        raise BadValue(f"{n} is out of range")
    return out


def _time(value: Any, t: DataType, debezium: bool, hint: Hint | None) -> int:
    if _is_int(value):
        ms = rescale(value, _epoch_unit(t, debezium, hint), "ms")
    elif isinstance(value, str) and (m := _TIME_RE.fullmatch(value)):
        try:
            ms = _clock_nanos(m) // 1_000_000
        except ValueError:
            raise _expected(t, value) from None
    else:
        raise _expected(t, value)
    if not 0 <= ms < MILLIS_PER_DAY:
        raise BadValue(f"{show(value)} is not a time of day")
    return ms


def _timestamp(value: Any, t: DataType, debezium: bool, hint: Hint | None) -> int:
    unit: str = T.to_arrow_type(t).unit
    if _is_int(value):
        try:
            return rescale(value, _epoch_unit(t, debezium, hint), unit)
        except BadValue:
            raise BadValue(f"{show(value)} is out of range for {type_name(t)}") from None
    if isinstance(value, str) and (m := _TIMESTAMP_RE.fullmatch(value)):
        try:
            days = dt.date(int(m["y"]), int(m["mo"]), int(m["d"])).toordinal() - EPOCH_ORDINAL
            nanos = days * 86_400 * 1_000_000_000 + _clock_nanos(m) - offset_minutes(m["z"]) * 60_000_000_000
        except ValueError:
            raise _expected(t, value) from None
        try:
            return rescale(nanos, "ns", unit)
        except BadValue:
            raise BadValue(f"{show(value)} is out of range for {type_name(t)}") from None
    raise _expected(t, value)


def offset_minutes(z: str | None) -> int:
    """Minutes east of UTC of an offset text (`Z`, `+02`, `+0200`, `-02:00`); none is UTC."""
    if not z or z == "Z":
        return 0
    digits = z[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + int(digits[2:] or 0)
    return -minutes if z[0] == "-" else minutes


def _nested(value: Any, t: ArrayType | MapType | RowType, debezium: bool) -> Any:
    if isinstance(t, ArrayType):
        if not isinstance(value, list):
            raise _expected(t, value)
        return [None if v is None else convert(v, t.element, debezium) for v in value]
    if isinstance(t, RowType):
        if not isinstance(value, dict):
            raise _expected(t, value)
        unknown = sorted(set(value) - {f.name for f in t.fields})
        if unknown:  # as for the table's own columns: a value never silently turns into a NULL
            names = ", ".join(f'"{n}"' for n in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
            raise BadValue(f"{names} {'is not a field' if len(unknown) == 1 else 'are not fields'} of {type_name(t)}")
        return {f.name: None if value.get(f.name) is None else convert(value[f.name], f.type, debezium)
                for f in t.fields}
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
        pairs = [(p[0], p[1]) for p in value]
    else:
        raise _expected(t, value)
    out = []
    for k, v in pairs:
        if k is None:
            raise BadValue(f"a {type_name(t)} key is null")
        # a JSON object's keys are text: numeric key types take number text (see _integer, _float)
        out.append((convert(k, t.key, debezium), None if v is None else convert(v, t.value, debezium)))
    return out
