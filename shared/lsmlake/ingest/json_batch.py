"""Plain JSON messages decoded together: one pyarrow JSON read, then column-wise conversions.

`read_rows` reads a chunk of messages (each one JSON object on one line) with an explicit schema
from `read_plan`: a column whose sampled values are text is read as text, one whose values are
numbers as numbers. A field the plan does not have (not a column, not `_row_kind`) fails the read:
`unknown_field_rows` then finds the messages that hold one (the caller rejects them, see
`known_fields`), so a clean chunk pays nothing for the check.
Conversions to the table's types run over whole columns with the patterns of `values`; a row
whose value they cannot vouch for (a pattern miss, a value out of range, a NULL key, an unknown
row kind) is flagged, and the caller decodes it again with the reference conversion for its
reason. A chunk the reader refuses raises ChunkFailed (see `decode._decode_plain` for how the
culprits are found); forms this path does not handle raise NotVectorised (the caller decodes each
message).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pjson

from lsmlake.format import types as T
from lsmlake.format.row_kind import INSERT, ROW_KIND_COLUMN, SHORT_NAMES
from lsmlake.format.types import DataType
from lsmlake.ingest.values import (
    DATE_TEXT,
    FLOAT_TEXT,
    INT_RANGES,
    INT_TEXT,
    MILLIS_PER_DAY,
    TIMESTAMP_TEXT,
    UNITS_PER_SECOND,
    Column,
)


class ChunkFailed(Exception):
    """The reader refused the chunk: a malformed message, a value of another JSON kind, a number that
    does not fit, a field the plan does not have (`unknown_field`: the parser does not name its row).
    `row` is the failing row when the parser names it (a one-block read)."""

    def __init__(self, row: int | None = None, unknown_field: bool = False) -> None:
        super().__init__(row)
        self.row = row
        self.unknown_field = unknown_field


class NotVectorised(Exception):
    """The chunk holds values in a form only the per-message path converts (nested types, TIME text)."""


@dataclass(frozen=True)
class BatchRows:
    """The columns of a chunk in the table's types, the row kinds, and the rows to decode again."""

    arrays: list[pa.Array]
    kinds: np.ndarray
    recheck: np.ndarray  # bool: this path could not vouch for the row


_DATE_DAYS_LIMIT = 106_751  # |days| * 86400 s in nanoseconds stays inside int64
_ROW_IN_ERROR = re.compile(r"in row (\d+)")
_UNKNOWN_FIELD_ERROR = "unexpected field"  # pyarrow's parse error for a field outside the explicit schema


def read_plan(columns: tuple[Column, ...], messages: list[bytes]) -> pa.Schema:
    """The explicit schema to read a chunk with: each column as the JSON kind most of nine sampled
    messages (three at the start, middle and end) give it (text or number). Raises NotVectorised."""
    n = len(messages)
    picks = sorted({j for base in (0, n // 2, n - 3) for j in range(base, base + 3) if 0 <= j < n})
    samples = []
    for m in (messages[j] for j in picks):
        try:
            doc = json.loads(m)
        except (ValueError, RecursionError):  # a message nested too deeply is rejected later, on its own
            continue
        if isinstance(doc, dict):
            samples.append(doc)

    def first(name: str) -> Any:
        kinds = Counter(_json_kind(d.get(name)) for d in samples)
        kinds.pop("null", None)
        if not kinds:
            return None
        kind = kinds.most_common(1)[0][0]
        return next(d[name] for d in samples if _json_kind(d.get(name)) == kind)

    fields = [(c.name, _read_type(c, first(c.name))) for c in columns]
    fields.append((ROW_KIND_COLUMN, pa.int64() if type(first(ROW_KIND_COLUMN)) is int else pa.string()))
    return pa.schema(fields)


def fits_plan(message: bytes, plan: pa.Schema, names: frozenset[str]) -> bool:
    """Whether the reader can read this message with the plan (checked in Python, per message); `names`
    are the plan's field names (the caller makes the set once)."""
    try:
        doc = json.loads(message)
    except (ValueError, RecursionError):
        return False
    if not isinstance(doc, dict) or not doc.keys() <= names:
        return False
    for f in plan:
        v = doc.get(f.name)
        if v is None:
            continue
        t = f.type
        if pa.types.is_string(t):
            ok = isinstance(v, str)
        elif pa.types.is_boolean(t):
            ok = isinstance(v, bool)
        elif pa.types.is_integer(t):
            ok = type(v) is int
        elif pa.types.is_floating(t):
            ok = type(v) in (int, float)
        elif pa.types.is_decimal(t):
            ok = type(v) in (int, float, str)
        else:
            ok = False
        if not ok:
            return False
    return True


def read_rows(data: pa.Buffer, num_rows: int, plan: pa.Schema, one_block: bool) -> pa.Table:
    """Read newline-separated messages; raises ChunkFailed. A one-block read stops at the first
    parse error and names its row (a threaded read is faster but its rows are per block)."""
    parse = pjson.ParseOptions(explicit_schema=plan, unexpected_field_behavior="error")
    if one_block:
        options = pjson.ReadOptions(use_threads=False, block_size=max(data.size + 1, 1 << 20))
    else:
        options = pjson.ReadOptions(use_threads=num_rows > 50_000)
    try:
        table = pjson.read_json(pa.BufferReader(data), read_options=options, parse_options=parse)
    except (pa.ArrowException, UnicodeDecodeError, ValueError) as e:
        row = _ROW_IN_ERROR.search(str(e)) if one_block else None
        raise ChunkFailed(int(row.group(1)) if row else None, _UNKNOWN_FIELD_ERROR in str(e)) from None
    if table.num_rows != num_rows:  # a message held more than one object
        raise ChunkFailed
    return table


def unknown_field_rows(data: pa.Buffer, messages: list[bytes], plan: pa.Schema) -> np.ndarray:
    """Which messages hold a field the plan does not have (bool per message), once a read refused them.

    A read that infers the other fields names them. A message is taken when it holds a value for one,
    or its text holds the name in quotes (a null value leaves no trace in the read). The mask may take
    a message too many (the name as a string value: its own decoding accepts it) and misses only a key
    written with escapes (`"col\\u006fur"` holding null), which the caller's later reads still refuse.
    All False when the read fails for another reason as well: the caller's search finds every culprit.
    """
    taken = np.zeros(len(messages), dtype=bool)
    parse = pjson.ParseOptions(explicit_schema=plan, unexpected_field_behavior="infer")
    options = pjson.ReadOptions(use_threads=len(messages) > 50_000)
    try:
        table = pjson.read_json(pa.BufferReader(data), read_options=options, parse_options=parse)
    except (pa.ArrowException, UnicodeDecodeError, ValueError):
        return taken
    if table.num_rows != len(messages):
        return taken
    known = set(plan.names)
    unknown = [name for name in table.column_names if name not in known]
    if not unknown:
        return taken
    text = pa.array(messages, pa.binary())
    for name in unknown:  # one pass over the column (or the bytes) per unknown field, not per message
        taken |= pc.is_valid(table.column(name)).to_numpy(zero_copy_only=False)
        quoted = json.dumps(name, ensure_ascii=False)
        taken |= pc.match_substring(text, quoted).to_numpy(zero_copy_only=False)
    return taken


def to_rows(table: pa.Table, columns: tuple[Column, ...], rowkind_field: str | None,
            append_only: bool) -> BatchRows:
    """Convert a read chunk to the table's types; raises ChunkFailed when a conversion fails whole."""
    n = table.num_rows
    try:
        recheck = np.zeros(n, dtype=bool)
        arrays = []
        for c in columns:
            arr, bad = _convert(table.column(c.name).combine_chunks(), c)
            if not c.nullable:
                bad = bad | arr.is_null().to_numpy(zero_copy_only=False)
            recheck |= bad
            arrays.append(arr)
        by_name = dict(zip([c.name for c in columns], arrays, strict=True))
        kinds, bad = _kinds(table.column(ROW_KIND_COLUMN).combine_chunks(),
                            by_name.get(rowkind_field) if rowkind_field else None)
        recheck |= bad
        if append_only:
            recheck |= kinds != INSERT
    except (pa.ArrowException, ValueError, OverflowError):
        raise ChunkFailed from None
    return BatchRows(arrays, kinds, recheck)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "nested"


def _read_type(c: Column, first: Any) -> pa.DataType:
    """The type the reader parses a column as, chosen by the JSON kind of its first value."""
    t = c.type
    if not isinstance(t, DataType):
        raise NotVectorised
    kind = _json_kind(first)
    k = t.kind
    if k in INT_RANGES or k in (T.FLOAT, T.DOUBLE):
        if kind == "string":
            return pa.string()
        return pa.float64() if k == T.FLOAT else c.arrow_type  # FLOAT rounds from a double, as per message
    if k == T.BOOLEAN:
        return pa.int64() if kind == "number" else pa.bool_()
    if k == T.DECIMAL:
        # the reader takes numbers and number text exactly, but does not hold values to the precision
        return pa.decimal128(38, t.scale)
    if k in (T.DATE, T.TIMESTAMP, T.TIMESTAMP_LTZ):
        return pa.int64() if kind == "number" else pa.string()
    if k == T.TIME:
        if kind == "string":
            raise NotVectorised
        return pa.int64()
    return pa.string()  # CHAR, VARCHAR, and base64 BINARY


def _no_recheck(arr: pa.Array) -> np.ndarray:
    return np.zeros(len(arr), dtype=bool)


def _matches(arr: pa.Array, pattern: str) -> tuple[pa.Array, np.ndarray]:
    """(does each non-null value match, the non-null values that do not)."""
    ok = pc.fill_null(pc.match_substring_regex(arr, f"^(?:{pattern})$"), False)
    miss = pc.and_(pc.invert(ok), arr.is_valid())
    return ok, miss.to_numpy(zero_copy_only=False)


def _convert(arr: pa.Array, c: Column) -> tuple[pa.Array, np.ndarray]:
    """The column in the table's type, and the rows to recheck."""
    t = c.type
    assert isinstance(t, DataType)
    target, k = c.arrow_type, t.kind
    if arr.type.equals(target):
        return arr, _no_recheck(arr)
    if k in INT_RANGES:  # read as text
        wide_type = pa.decimal128(20, 0)  # holds every 19-digit text, so the range check sees it whole
        ok, _ = _matches(arr, INT_TEXT)
        ok = pc.fill_null(pc.and_(ok, pc.less_equal(pc.utf8_length(arr), 20)), False)
        wide = pc.cast(pc.if_else(ok, arr, pa.scalar(None, pa.string())), wide_type)
        bits = INT_RANGES[k]
        fits = pc.fill_null(pc.and_(pc.greater_equal(wide, pa.scalar(-(2 ** (bits - 1)), wide_type)),
                                    pc.less(wide, pa.scalar(2 ** (bits - 1), wide_type))), False)
        miss = pc.and_(pc.invert(fits), arr.is_valid()).to_numpy(zero_copy_only=False)
        return pc.cast(pc.if_else(fits, wide, pa.scalar(None, wide_type)), target), miss
    if k in (T.FLOAT, T.DOUBLE):
        miss = _no_recheck(arr)
        if pa.types.is_string(arr.type):
            ok, miss = _matches(arr, FLOAT_TEXT)
            arr = pc.cast(pc.if_else(ok, arr, pa.scalar(None, pa.string())), pa.float64())
            # "inf" text, or a number beyond a double: the reference conversion tells them apart
            miss |= pc.fill_null(pc.is_inf(arr), False).to_numpy(zero_copy_only=False)
        if k == T.FLOAT:
            too_big = pc.fill_null(pc.and_(pc.is_finite(arr), pc.greater(pc.abs(arr), 3.4028234663852886e38)), False)
            miss |= too_big.to_numpy(zero_copy_only=False)
            arr = pc.cast(arr, pa.float32(), safe=False)
        return arr, miss
    if k == T.BOOLEAN:  # read as a number: 0 or 1
        ok = pc.fill_null(pc.is_in(arr, value_set=pa.array([0, 1], pa.int64())), False)
        miss = pc.and_(pc.invert(ok), arr.is_valid()).to_numpy(zero_copy_only=False)
        return pc.cast(pc.if_else(ok, arr, pa.scalar(None, pa.int64())), pa.bool_()), miss
    if k in T.BINARY_KINDS:
        return _base64_column(arr)
    if k == T.DECIMAL:  # read at precision 38
        limit = pa.scalar(Decimal(10) ** (t.precision - t.scale), pa.decimal128(38, t.scale))
        fits = pc.fill_null(pc.less(pc.abs(arr), limit), False)
        miss = pc.and_(pc.invert(fits), arr.is_valid()).to_numpy(zero_copy_only=False)
        return pc.cast(pc.if_else(fits, arr, pa.scalar(None, arr.type)), target, safe=False), miss
    if k == T.DATE:
        if pa.types.is_integer(arr.type):
            ok = pc.fill_null(pc.and_(pc.greater_equal(arr, -(2**31)), pc.less(arr, 2**31)), False)
            miss = pc.and_(pc.invert(ok), arr.is_valid()).to_numpy(zero_copy_only=False)
            days = pc.cast(pc.if_else(ok, arr, pa.scalar(None, pa.int64())), pa.int32())
            return pc.cast(days, pa.date32()), miss
        days64, miss = _days_from_text(arr, DATE_TEXT)
        return _with_nulls(days64, arr, miss, pa.int32()).cast(pa.date32()), miss
    if k == T.TIME:  # millis of day
        ok = pc.fill_null(pc.and_(pc.greater_equal(arr, 0), pc.less(arr, MILLIS_PER_DAY)), False)
        miss = pc.and_(pc.invert(ok), arr.is_valid()).to_numpy(zero_copy_only=False)
        return pc.cast(pc.cast(pc.if_else(ok, arr, pa.scalar(None, pa.int64())), pa.int32()), target), miss
    if k in (T.TIMESTAMP, T.TIMESTAMP_LTZ):
        unit = target.unit
        if pa.types.is_integer(arr.type):  # epoch millis
            factor = UNITS_PER_SECOND[unit] // 1000
            values = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
            miss = np.abs(values) > (2**63 - 1) // factor
            out = np.where(miss, 0, values) * factor
            return _with_nulls(out, arr, miss, pa.int64()).cast(target), miss
        return _timestamps_from_text(arr, target)
    return arr.cast(target), _no_recheck(arr)


def _with_nulls(values: np.ndarray, source: pa.Array, recheck: np.ndarray, storage: pa.DataType) -> pa.Array:
    mask = source.is_null().to_numpy(zero_copy_only=False) | recheck
    return pa.array(np.where(mask, 0, values).astype(storage.to_pandas_dtype()), storage, mask=mask)


def _base64_column(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Base64 text -> bytes. Python per value: Arrow has no base64 kernel (binary columns are rare)."""
    import base64
    import binascii

    out: list[bytes | None] = []
    miss = _no_recheck(arr)
    for i, text in enumerate(arr.to_pylist()):
        if text is None:
            out.append(None)
            continue
        try:
            out.append(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            out.append(None)
            miss[i] = True
    return pa.array(out, pa.binary()), miss


def _parts(arr: pa.Array, pattern: str) -> tuple[pa.StructArray, np.ndarray]:
    """The named groups of a pattern (every row matches: misses get a stand-in), and the misses."""
    ok, miss = _matches(arr, pattern)
    filled = pc.if_else(ok, arr, pa.scalar("1970-01-01", pa.string()))
    return pc.extract_regex(filled, f"^(?:{pattern})$"), miss


def _ints(parts: pa.StructArray, name: str, width: int = 2) -> np.ndarray:
    """A group as int64 (an absent optional group is 0)."""
    text = pc.utf8_lpad(parts.field(name), width, "0")
    return pc.cast(text, pa.int64()).to_numpy(zero_copy_only=False)


def _civil_days(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Days since 1970-01-01 of proleptic Gregorian dates, and which dates do not exist."""
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    month_days = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)
    mm = np.clip(m, 0, 12)
    last = month_days[mm] + ((mm == 2) & leap)
    invalid = (y < 1) | (m < 1) | (m > 12) | (d < 1) | (d > last)
    yy = y - (m <= 2)
    era = np.floor_divide(yy, 400)
    yoe = yy - era * 400
    doy = (153 * np.where(m > 2, m - 3, m + 9) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468, invalid


def _days_from_text(arr: pa.Array, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    parts, miss = _parts(arr, pattern)
    days, invalid = _civil_days(_ints(parts, "y", 4), _ints(parts, "mo"), _ints(parts, "d"))
    return days, miss | invalid


def _timestamps_from_text(arr: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    parts, miss = _parts(arr, TIMESTAMP_TEXT)
    days, invalid = _civil_days(_ints(parts, "y", 4), _ints(parts, "mo"), _ints(parts, "d"))
    h, mi, s = _ints(parts, "h"), _ints(parts, "mi"), _ints(parts, "s")
    frac = pc.cast(pc.utf8_rpad(parts.field("f"), 9, "0"), pa.int64()).to_numpy(zero_copy_only=False)
    z = pc.utf8_rpad(pc.replace_substring(parts.field("z"), ":", ""), 5, "0")  # "", Z, +02, +0200
    off_h = pc.cast(pc.utf8_slice_codeunits(z, 1, 3), pa.int64()).to_numpy(zero_copy_only=False)
    off_m = pc.cast(pc.utf8_slice_codeunits(z, 3, 5), pa.int64()).to_numpy(zero_copy_only=False)
    sign = np.where(pc.starts_with(parts.field("z"), "-").to_numpy(zero_copy_only=False), -1, 1)
    miss = miss | invalid | (h > 23) | (mi > 59) | (s > 59) | (np.abs(days) >= _DATE_DAYS_LIMIT)
    days = np.where(miss, 0, days)
    per_second = UNITS_PER_SECOND[target.unit]
    seconds = days * 86_400 + h * 3600 + mi * 60 + s - sign * (off_h * 3600 + off_m * 60)
    values = seconds * per_second + frac // (1_000_000_000 // per_second)
    return _with_nulls(values, arr, miss, pa.int64()).cast(target), miss


def _kinds(column: pa.Array, rowkind_values: pa.Array | None) -> tuple[np.ndarray, np.ndarray]:
    """`_VALUE_KIND` bytes of `_row_kind` (NULL: the `rowkind.field` column's kind, else +I), and the
    rows to recheck: a kind that is not one of +I, -U, +U, -D (or 0..3)."""
    recheck = np.zeros(len(column), dtype=bool)
    if rowkind_values is not None and rowkind_values.null_count < len(rowkind_values):
        fallback = pc.and_(column.is_null(), rowkind_values.is_valid())
        if pa.types.is_string(column.type) and pa.types.is_string(rowkind_values.type):
            column = pc.if_else(fallback, rowkind_values, column)
        else:
            recheck |= fallback.to_numpy(zero_copy_only=False)
    if pa.types.is_integer(column.type):
        ok = pc.fill_null(pc.and_(pc.greater_equal(column, 0), pc.less_equal(column, 3)), True)
        codes = pc.fill_null(pc.if_else(ok, column, 0), 0)
    else:
        idx = pc.index_in(column, value_set=pa.array(SHORT_NAMES))
        ok = pc.or_(column.is_null(), idx.is_valid())
        codes = pc.fill_null(idx, 0)
    kinds = codes.to_numpy(zero_copy_only=False).astype(np.int8)
    return kinds, recheck | ~ok.to_numpy(zero_copy_only=False)
