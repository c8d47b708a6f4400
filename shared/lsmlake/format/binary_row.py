"""Paimon's BinaryRow codec: the bytes of manifest `_PARTITION`/`_MIN_KEY`/`_MAX_KEY`/stats rows and of
bucket-key rows (fact sheet section 5).

A BinaryRow is a fixed part (a header word with the row kind and null bits, then one 8-byte slot per
field) followed by a variable part (long strings/binaries, DECIMAL(p>18), TIMESTAMP(p>3)); numbers
are little-endian. The manifest form prefixes a big-endian int32 arity.

Encoding follows Java (the reference implementation) where pypaimon differs: a null DECIMAL(p>18)
or TIMESTAMP(p>3) keeps its reserved variable-part space, and decimal bytes are minimal
(`BigInteger.toByteArray`). Decoding accepts both Java's and pypaimon's forms.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from datetime import date, datetime, time
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from lsmlake.errors import CorruptMetadataError, InvalidInputError
from lsmlake.format import types as T
from lsmlake.format.binary_row_layout import INLINE_MARK, INLINE_MAX, atomic_types, null_bits_width
from lsmlake.format.types import AnyType, DataType

# the whole-column encoder lives in binary_row_columns; it is named here too, as part of the codec's interface
__all__ = ["EMPTY_ROW", "date_days", "decimal_from_unscaled", "decimal_unscaled", "decode_row", "deserialize_row",
           "encode_row", "java_decimal_bytes", "null_bits_width", "serialize_row", "time_millis",
           "timestamp_parts"]

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_NANOS_PER_DAY = 86_400_000_000_000
_DEC_CTX = Context(prec=100)  # wide enough for DECIMAL(38, s) arithmetic without rounding

_PACKERS: dict[str, struct.Struct] = {
    T.TINYINT: struct.Struct("<b"), T.SMALLINT: struct.Struct("<h"), T.INT: struct.Struct("<i"),
    T.BIGINT: struct.Struct("<q"), T.FLOAT: struct.Struct("<f"), T.DOUBLE: struct.Struct("<d"),
    T.DATE: struct.Struct("<i"), T.TIME: struct.Struct("<i"),
}
_SLOT = struct.Struct("<Q")
_LONG = struct.Struct("<q")


def _var_reserved(t: DataType) -> int:
    """Variable-part bytes a non-compact DECIMAL/TIMESTAMP always occupies (0 for other types)."""
    if t.kind == T.DECIMAL and t.precision > 18:
        return 16
    if t.kind in (T.TIMESTAMP, T.TIMESTAMP_LTZ) and t.precision > 3:
        return 8
    return 0


# ---------------------------------------------------------------------------------------------
# Scalar value conversions (shared by encode_row and the partition module)
# ---------------------------------------------------------------------------------------------

def decimal_unscaled(value: Any, t: DataType) -> int:
    """The unscaled integer of `value` at the type's scale (HALF_UP, as Java's Decimal does)."""
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(value))
        q = d.quantize(Decimal(1).scaleb(-t.scale), rounding=ROUND_HALF_UP, context=_DEC_CTX)
        unscaled = int(q.scaleb(t.scale, context=_DEC_CTX))
    except (InvalidOperation, ValueError, TypeError) as e:
        raise InvalidInputError(f"{value!r} is not a valid {t.sql()} value") from e
    if abs(unscaled) >= 10 ** t.precision:
        raise InvalidInputError(f"{value!r} does not fit {t.sql()}")
    return unscaled


def decimal_from_unscaled(unscaled: int, scale: int) -> Decimal:
    """The Decimal `unscaled * 10**-scale`, exact (no 28-digit context rounding), with exponent -scale."""
    return Decimal(unscaled).scaleb(-scale, context=_DEC_CTX)


def java_decimal_bytes(unscaled: int) -> bytes:
    """Minimal big-endian two's-complement bytes, as Java's `BigInteger.toByteArray()` gives."""
    # Java's bitLength ignores the sign: for negatives it is the bit length of ~n.
    bits = (unscaled if unscaled >= 0 else ~unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def timestamp_parts(value: Any) -> tuple[int, int]:
    """(epoch millis, nano-of-millisecond) of a datetime or pandas.Timestamp (aware ones taken as UTC)."""
    if not isinstance(value, datetime):
        raise InvalidInputError(f"{value!r} is not a timestamp")
    days = value.toordinal() - _EPOCH_ORDINAL
    nanos = (((days * 24 + value.hour) * 60 + value.minute) * 60 + value.second) * 1_000_000_000
    nanos += value.microsecond * 1000 + int(getattr(value, "nanosecond", 0))
    offset = value.utcoffset()
    if offset is not None:
        # Wall-clock fields of an aware value are local: subtract the offset to get UTC.
        nanos -= (offset.days * 86_400 + offset.seconds) * 1_000_000_000 + offset.microseconds * 1000
    millis, nano = divmod(nanos, 1_000_000)  # floor, so nano-of-milli is never negative (as Java)
    return millis, nano


def date_days(value: Any) -> int:
    """Days since 1970-01-01 of a date (or an int that already is that)."""
    if isinstance(value, datetime):
        value = value.date()
    if isinstance(value, date):
        return value.toordinal() - _EPOCH_ORDINAL
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidInputError(f"{value!r} is not a date")


def time_millis(value: Any) -> int:
    """Milliseconds of the day of a time (or an int that already is that)."""
    if isinstance(value, time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InvalidInputError(f"{value!r} is not a time of day")


# ---------------------------------------------------------------------------------------------
# Scalar encode / decode
# ---------------------------------------------------------------------------------------------

def encode_row(values: Sequence[Any], types: Sequence[AnyType]) -> bytes:
    """The BinaryRow bytes (row kind +I, no arity prefix) of one row of Python values."""
    atypes = atomic_types(types)
    if len(values) != len(atypes):
        raise InvalidInputError(f"row has {len(values)} values for {len(atypes)} types")
    width = null_bits_width(len(atypes))
    fixed = bytearray(width + 8 * len(atypes))
    var = bytearray()

    def append_var(data: bytes, reserved: int) -> int:
        """Append data padded to `reserved` bytes; return its offset from the row start."""
        offset = len(fixed) + len(var)
        var.extend(data)
        var.extend(b"\0" * (reserved - len(data)))
        return offset

    for i, (v, t) in enumerate(zip(values, atypes, strict=True)):
        slot = width + 8 * i
        if v is None:
            bit = i + 8
            fixed[bit // 8] |= 1 << (bit % 8)
            reserved = _var_reserved(t)
            if reserved:
                # Java keeps the space of a null non-compact field and points the slot at it.
                _SLOT.pack_into(fixed, slot, append_var(b"", reserved) << 32)
            continue
        try:
            _encode_value(v, t, fixed, slot, append_var)
        except InvalidInputError as e:
            raise InvalidInputError(f"field {i} ({t.sql()}): {e}") from e
        except (struct.error, TypeError, ValueError, OverflowError, AttributeError) as e:
            raise InvalidInputError(f"field {i} ({t.sql()}): cannot encode {v!r}: {e}") from e
    return bytes(fixed) + bytes(var)


def _encode_value(v: Any, t: DataType, fixed: bytearray, slot: int,
                  append_var: Callable[[bytes, int], int]) -> None:
    k = t.kind
    if k == T.BOOLEAN:
        fixed[slot] = 1 if v else 0
    elif k in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.FLOAT, T.DOUBLE):
        _PACKERS[k].pack_into(fixed, slot, v)
    elif k == T.DATE:
        _PACKERS[k].pack_into(fixed, slot, date_days(v))
    elif k == T.TIME:
        _PACKERS[k].pack_into(fixed, slot, time_millis(v))
    elif k == T.DECIMAL:
        unscaled = decimal_unscaled(v, t)
        if t.precision <= 18:
            _LONG.pack_into(fixed, slot, unscaled)
        else:
            data = java_decimal_bytes(unscaled)
            _SLOT.pack_into(fixed, slot, (append_var(data, 16) << 32) | len(data))
    elif k in (T.TIMESTAMP, T.TIMESTAMP_LTZ):
        millis, nano = timestamp_parts(v)
        if t.precision <= 3:
            _LONG.pack_into(fixed, slot, millis)
        else:
            _SLOT.pack_into(fixed, slot, (append_var(_LONG.pack(millis), 8) << 32) | nano)
    elif k in T.STRING_KINDS or k in T.BINARY_KINDS:
        if k in T.STRING_KINDS:
            if not isinstance(v, str):
                raise InvalidInputError(f"{v!r} is not a string")
            data = v.encode("utf-8")
        else:
            data = bytes(v)
        if len(data) <= INLINE_MAX:
            fixed[slot:slot + len(data)] = data
            fixed[slot + 7] = INLINE_MARK | len(data)
        else:
            padded = (len(data) + 7) & ~7
            _SLOT.pack_into(fixed, slot, (append_var(data, padded) << 32) | len(data))
    else:
        raise InvalidInputError(f"unsupported type {t.sql()}")


def serialize_row(values: Sequence[Any], types: Sequence[AnyType]) -> bytes:
    """The manifest form of a row: big-endian int32 arity followed by the BinaryRow bytes."""
    return struct.pack(">i", len(types)) + encode_row(values, types)


EMPTY_ROW = serialize_row([], [])  # arity 0: 4 + 8 bytes, the `_PARTITION` of unpartitioned tables


def deserialize_row(data: bytes, types: Sequence[AnyType]) -> list[Any]:
    """Decode a manifest-form row (arity prefix + BinaryRow) into Python values (inverse of serialize_row)."""
    if len(data) < 4:
        raise CorruptMetadataError(f"BinaryRow of {len(data)} bytes has no arity prefix")
    arity = struct.unpack_from(">i", data)[0]
    if arity != len(types):
        raise CorruptMetadataError(f"BinaryRow has arity {arity}, expected {len(types)} fields")
    return decode_row(bytes(data[4:]), types)


def decode_row(data: bytes, types: Sequence[AnyType]) -> list[Any]:
    """Decode BinaryRow bytes without arity prefix (null non-compact fields in Java or pypaimon form)."""
    atypes = atomic_types(types)
    width = null_bits_width(len(atypes))
    if len(data) < width + 8 * len(atypes):
        raise CorruptMetadataError(f"BinaryRow of {len(data)} bytes is too short for {len(atypes)} fields")
    out: list[Any] = []
    for i, t in enumerate(atypes):
        bit = i + 8
        if data[bit // 8] & (1 << (bit % 8)):
            out.append(None)  # the slot is not read: Java and pypaimon null forms decode alike
            continue
        try:
            out.append(_decode_value(data, width + 8 * i, t))
        except (struct.error, ValueError, OverflowError, IndexError) as e:
            raise CorruptMetadataError(f"BinaryRow field {i} ({t.sql()}) cannot be decoded: {e}") from e
    return out


def _var_slice(data: bytes, slot_value: int) -> tuple[int, int]:
    offset, length = slot_value >> 32, slot_value & 0xFFFFFFFF
    if offset + length > len(data):
        raise ValueError(f"variable part [{offset}, {offset + length}) is outside the {len(data)}-byte row")
    return offset, length


def _decode_value(data: bytes, slot: int, t: DataType) -> Any:
    k = t.kind
    if k == T.BOOLEAN:
        return data[slot] != 0
    if k in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.FLOAT, T.DOUBLE):
        return _PACKERS[k].unpack_from(data, slot)[0]
    if k == T.DATE:
        return date.fromordinal(_EPOCH_ORDINAL + _PACKERS[k].unpack_from(data, slot)[0])
    if k == T.TIME:
        ms = _PACKERS[k].unpack_from(data, slot)[0]
        return time(ms // 3_600_000, ms // 60_000 % 60, ms // 1000 % 60, ms % 1000 * 1000)
    if k == T.DECIMAL:
        if t.precision <= 18:
            unscaled = _LONG.unpack_from(data, slot)[0]
        else:
            # Any byte length is accepted: pypaimon writes one byte more than Java for -2^(8k-1).
            offset, length = _var_slice(data, _SLOT.unpack_from(data, slot)[0])
            unscaled = int.from_bytes(data[offset:offset + length], "big", signed=True)
        return decimal_from_unscaled(unscaled, t.scale)
    if k in (T.TIMESTAMP, T.TIMESTAMP_LTZ):
        if t.precision <= 3:
            return _timestamp_value(_LONG.unpack_from(data, slot)[0], 0, t)
        slot_value = _SLOT.unpack_from(data, slot)[0]
        offset, _ = _var_slice(data, slot_value & ~0xFFFFFFFF | 8)
        return _timestamp_value(_LONG.unpack_from(data, offset)[0], slot_value & 0xFFFFFFFF, t)
    if k in T.STRING_KINDS or k in T.BINARY_KINDS:
        if data[slot + 7] & INLINE_MARK:
            raw = data[slot:slot + (data[slot + 7] & 0x7F)]
        else:
            offset, length = _var_slice(data, _SLOT.unpack_from(data, slot)[0])
            raw = data[offset:offset + length]
        return raw.decode("utf-8") if k in T.STRING_KINDS else bytes(raw)
    raise CorruptMetadataError(f"unsupported type {t.sql()}")


def _timestamp_value(millis: int, nano: int, t: DataType) -> Any:
    """The value pyarrow's `as_py()` gives for this instant in the type's Arrow mapping."""
    arrow_type = T.to_arrow_type(t)
    unit = arrow_type.unit
    if unit == "ms":
        raw = millis
    elif unit == "us":
        raw = millis * 1000 + nano // 1000
    else:
        raw = millis * 1_000_000 + nano
        if not -(2 ** 63) <= raw < 2 ** 63:
            # Outside the nanosecond range: fall back to microseconds (a plain datetime).
            arrow_type = pa.timestamp("us", tz=arrow_type.tz)
            raw = millis * 1000 + nano // 1000
    return pa.scalar(raw, type=arrow_type).as_py()
