"""Partition directory names (fact sheet section 1.3): Hive-style escaping and the value strings Paimon
writes with the default `partition.legacy-name=true` (Java `toString()` of the internal value)."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np

from lsmlake.errors import InvalidInputError
from lsmlake.format import types as T
from lsmlake.format.binary_row import date_days, decimal_from_unscaled, decimal_unscaled, time_millis, timestamp_parts
from lsmlake.format.types import AnyType, DataType

DEFAULT_PARTITION_NAME = "__DEFAULT_PARTITION__"

# Java PartitionPathUtils escapes control characters, DEL and these; space and non-ASCII stay.
_ESCAPED = frozenset('"#%\'*/:=?\\{}[]^')
_UNESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def _needs_escape(c: str) -> bool:
    return ord(c) < 0x20 or ord(c) == 0x7F or c in _ESCAPED


def escape_path_name(s: str) -> str:
    """Hive-style escaping of one partition key or value (`a/b c=d%` -> `a%2Fb c%3Dd%25`)."""
    return "".join(f"%{ord(c):02X}" if _needs_escape(c) else c for c in s)


def unescape_path_name(s: str) -> str:
    """Undo escape_path_name: every `%XX` (two hex digits) becomes its character."""
    return _UNESCAPE.sub(lambda m: chr(int(m.group(1), 16)), s)


def _java_is_whitespace(c: str) -> bool:
    # Character.isWhitespace: space separators except no-break spaces, plus a few controls.
    if c in "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f":
        return True
    return unicodedata.category(c) in ("Zs", "Zl", "Zp") and c not in "\u00a0\u2007\u202f"


def _java_floating(value: float, single: bool) -> str:
    """Java's Double.toString / Float.toString (shortest round-trip digits, Java's layout)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    # Shortest digits that read back as the same float32/float64.
    text = np.format_float_scientific(np.float32(value), unique=True) if single else repr(float(value))
    d = Decimal(text).normalize()
    sign, digits, exponent = d.as_tuple()
    assert isinstance(exponent, int)
    prefix = "-" if sign else ""
    if Decimal("0.001") <= abs(d) < Decimal("10000000"):
        plain = format(abs(d), "f")
        return prefix + (plain if "." in plain else plain + ".0")
    ds = "".join(map(str, digits))
    mantissa = ds[0] + "." + (ds[1:] or "0")
    return f"{prefix}{mantissa}E{len(ds) - 1 + exponent}"


def _local_date_time_string(millis: int, nano: int) -> str:
    """java.time.LocalDateTime.toString() of the UTC wall clock of (epoch millis, nano-of-millisecond)."""
    days, ms_of_day = divmod(millis, 86_400_000)
    y, mo, d = _civil_from_days(days)
    nano_of_second = ms_of_day % 1000 * 1_000_000 + nano
    seconds = ms_of_day // 1000
    hh, mm, ss = seconds // 3600, seconds // 60 % 60, seconds % 60
    year = f"{'-' if y < 0 else ''}{abs(y):04d}" if abs(y) < 10000 else f"{'+' if y > 0 else '-'}{abs(y)}"
    out = f"{year}-{mo:02d}-{d:02d}T{hh:02d}:{mm:02d}"
    if ss or nano_of_second:
        out += f":{ss:02d}"
    if nano_of_second:
        if nano_of_second % 1_000_000 == 0:
            out += f".{nano_of_second // 1_000_000:03d}"
        elif nano_of_second % 1000 == 0:
            out += f".{nano_of_second // 1000:06d}"
        else:
            out += f".{nano_of_second:09d}"
    return out


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """Proleptic Gregorian (year, month, day) of days since 1970-01-01, for any year (not just 1..9999)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (1 if m <= 2 else 0), m, d


def partition_value_string(value: Any, t: AnyType) -> str | None:
    """The directory value string of a partition value (Java legacy `toString()`), None for null."""
    if value is None:
        return None
    if not isinstance(t, DataType):
        raise InvalidInputError(f"{t.sql()} cannot be a partition type")
    k = t.kind
    if k == T.BOOLEAN:
        return "true" if value else "false"
    if k in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT):
        return str(int(value))
    if k in (T.FLOAT, T.DOUBLE):
        return _java_floating(float(value), k == T.FLOAT)
    if k == T.DECIMAL:
        # BigDecimal.toPlainString at the type's scale; BigDecimal has no negative zero.
        return format(decimal_from_unscaled(decimal_unscaled(value, t), t.scale), "f")
    if k in T.STRING_KINDS:
        return str(value)
    if k in T.BINARY_KINDS:
        # Java would print a JVM object id; pypaimon's Python repr is the only stable form.
        return repr(bytes(value))
    if k == T.DATE:
        return str(date_days(value))  # Java's internal DATE is an int of days
    if k == T.TIME:
        return str(time_millis(value))  # Java's internal TIME is an int of millis of day
    if k in (T.TIMESTAMP, T.TIMESTAMP_LTZ):
        millis, nano = timestamp_parts(value)
        if t.precision <= 3:
            nano = 0  # a compact timestamp keeps only millis
        return _local_date_time_string(millis, nano)
    raise InvalidInputError(f"{t.sql()} cannot be a partition type")


def is_default_partition_value(s: str | None) -> bool:
    """True when a value string is null, empty or whitespace-only (it then goes to the default partition)."""
    return s is None or all(_java_is_whitespace(c) for c in s)


def partition_path(values: Sequence[Any], names: Sequence[str], types: Sequence[AnyType],
                   default_name: str = DEFAULT_PARTITION_NAME) -> str:
    """The relative partition directory, e.g. `dt=2024-01-01/h=3` (no leading or trailing slash)."""
    if not len(values) == len(names) == len(types):
        raise InvalidInputError(f"{len(values)} values, {len(names)} names and {len(types)} types differ")
    parts = []
    for v, name, t in zip(values, names, types, strict=True):
        s = partition_value_string(v, t)
        text = default_name if is_default_partition_value(s) else s
        assert text is not None
        parts.append(f"{escape_path_name(name)}={escape_path_name(text)}")
    return "/".join(parts)
