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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.errors import CorruptMetadataError, InvalidInputError
from lsmlake.format import types as T
from lsmlake.format.types import AnyType, DataType

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_NANOS_PER_DAY = 86_400_000_000_000
_INLINE_MAX = 7  # strings/binaries up to 7 bytes live inside their slot
_INLINE_MARK = 0x80  # byte 7 of an inline slot: 0x80 | length
_DEC_CTX = Context(prec=100)  # wide enough for DECIMAL(38, s) arithmetic without rounding

_PACKERS: dict[str, struct.Struct] = {
    T.TINYINT: struct.Struct("<b"), T.SMALLINT: struct.Struct("<h"), T.INT: struct.Struct("<i"),
    T.BIGINT: struct.Struct("<q"), T.FLOAT: struct.Struct("<f"), T.DOUBLE: struct.Struct("<d"),
    T.DATE: struct.Struct("<i"), T.TIME: struct.Struct("<i"),
}
_SLOT = struct.Struct("<Q")
_LONG = struct.Struct("<q")


def null_bits_width(arity: int) -> int:
    """Bytes of the header/null-bit area of a BinaryRow with `arity` fields (8 up to 56 fields)."""
    return ((arity + 63 + 8) // 64) * 8


def _atomic(types: Sequence[AnyType]) -> list[DataType]:
    out = []
    for i, t in enumerate(types):
        if not isinstance(t, DataType):
            raise InvalidInputError(f"field {i}: {t.sql()} cannot be stored in a BinaryRow "
                                    f"(nested types are never keys or partitions)")
        out.append(t)
    return out


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
    atypes = _atomic(types)
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
        if len(data) <= _INLINE_MAX:
            fixed[slot:slot + len(data)] = data
            fixed[slot + 7] = _INLINE_MARK | len(data)
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
    atypes = _atomic(types)
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
        if data[slot + 7] & _INLINE_MARK:
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


# ---------------------------------------------------------------------------------------------
# Vectorised encode of whole columns
# ---------------------------------------------------------------------------------------------

class _Field:
    """One field of encode_rows: its slots, null mask and (optional) variable-part bytes per row."""

    def __init__(self, slot: np.ndarray, valid: np.ndarray | None,
                 var: pa.Array | None = None, var_len: np.ndarray | None = None) -> None:
        self.slot = slot  # uint64 slot per row, offset bits still missing for var-part rows
        self.valid = valid  # bool per row, None when no nulls
        self.var = var  # large_binary, no nulls, already padded to a multiple of 8 (or None)
        self.var_len = var_len  # int64 bytes each row adds to the variable part


def _as_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if isinstance(col, pa.Array):
        return col
    raise InvalidInputError(f"expected a pyarrow Array or ChunkedArray, got {type(col).__name__}")


def _valid_mask(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _numbers(arr: pa.Array, as_type: pa.DataType, dtype: Any) -> np.ndarray:
    """The column's values as a numpy array (nulls as 0), after casting to `as_type`."""
    if arr.type != as_type:
        arr = arr.cast(as_type)
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(False if as_type == pa.bool_() else 0, as_type))
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=dtype)


def _fixed_size_var(blocks: np.ndarray) -> pa.Array:
    """A large_binary array whose row i is the bytes of blocks[i] (an (n, size) uint8 matrix)."""
    n, size = blocks.shape
    offsets = np.arange(n + 1, dtype=np.int64) * size
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets),
                                                         pa.py_buffer(np.ascontiguousarray(blocks))])


def _encode_column(arr: pa.Array, t: DataType) -> _Field:
    k = t.kind
    valid = _valid_mask(arr)
    if k == T.BOOLEAN:
        slot = _numbers(arr, pa.bool_(), bool).astype(np.uint64)
    elif k in (T.TINYINT, T.SMALLINT, T.INT, T.BIGINT, T.DATE, T.TIME):
        target = T.to_arrow_type(t)  # int8..int64, date32 (days) or time32[ms] (millis of day)
        if arr.type != target:
            # TIME drops sub-millisecond digits (a time of day is never negative, so this is floor).
            arr = arr.cast(target, safe=k != T.TIME)
        width = {T.TINYINT: 8, T.SMALLINT: 16, T.BIGINT: 64}.get(k, 32)
        values = _numbers(arr, pa.int64() if width == 64 else pa.int32(), np.int64)
        # Only the type's own bytes are set (a negative INT leaves the upper 4 slot bytes zero).
        slot = values.astype(np.uint64) & np.uint64((1 << width) - 1)
    elif k == T.FLOAT:
        slot = _numbers(arr, pa.float32(), np.float32).view(np.uint32).astype(np.uint64)
    elif k == T.DOUBLE:
        slot = _numbers(arr, pa.float64(), np.float64).view(np.uint64)
    elif k == T.DECIMAL:
        return _encode_decimal(arr, t, valid)
    elif k in (T.TIMESTAMP, T.TIMESTAMP_LTZ):
        return _encode_timestamp(arr, t, valid)
    elif k in T.STRING_KINDS or k in T.BINARY_KINDS:
        return _encode_bytes(arr, valid)
    else:
        raise InvalidInputError(f"unsupported type {t.sql()}")
    if valid is not None:
        slot = np.where(valid, slot, np.uint64(0))  # fill_null already zeroed them; keep it explicit
    return _Field(slot, valid)


def _decimal_le_bytes(arr: pa.Array, t: DataType) -> np.ndarray:
    """The (n, 16) little-endian two's-complement bytes of the unscaled decimal values (nulls as 0)."""
    target = pa.decimal128(t.precision, t.scale)
    if arr.type != target:
        arr = arr.cast(target)  # safe cast: raises when a value would lose digits
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(Decimal(0), target))
    buf = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    return buf[arr.offset * 16:(arr.offset + len(arr)) * 16].reshape(len(arr), 16)


def _encode_decimal(arr: pa.Array, t: DataType, valid: np.ndarray | None) -> _Field:
    le = _decimal_le_bytes(arr, t)
    n = len(arr)
    if t.precision <= 18:
        # The value fits an int64, so the low 8 bytes are its two's complement.
        slot = np.ascontiguousarray(le[:, :8]).view(np.uint64).reshape(n).copy()
        if valid is not None:
            slot[~valid] = 0
        return _Field(slot, valid)
    be = le[:, ::-1]
    negative = be[:, 0] >= 0x80
    # Magnitude bytes as Java's bitLength sees them: ~v for negatives.
    mag = np.where(negative[:, None], be ^ np.uint8(0xFF), be)
    nonzero = mag != 0
    first = np.argmax(nonzero, axis=1)
    any_nonzero = nonzero.any(axis=1)
    significant = np.where(any_nonzero, 16 - first, 0)
    top_bit = (mag[np.arange(n), first] >= 0x80) & any_nonzero
    length = np.maximum(significant + top_bit, 1).astype(np.int64)
    # Row r's output block: its last `length` big-endian bytes, then zeros up to 16.
    cols = np.arange(16)
    src = np.minimum((16 - length)[:, None] + cols, 15)
    blocks = np.where(cols < length[:, None], np.take_along_axis(be, src, axis=1), 0).astype(np.uint8)
    if valid is not None:
        blocks[~valid] = 0
        length[~valid] = 0  # Java: null keeps its 16 bytes, slot = offset << 32 | 0
    return _Field(length.astype(np.uint64), valid, _fixed_size_var(blocks), np.full(n, 16, np.int64))


def _encode_timestamp(arr: pa.Array, t: DataType, valid: np.ndarray | None) -> _Field:
    if pa.types.is_date(arr.type) or not pa.types.is_timestamp(arr.type):
        raise InvalidInputError(f"a {arr.type} column cannot be encoded as {t.sql()}")
    raw = _numbers(arr, pa.int64(), np.int64)
    # Split into (epoch millis, nano-of-millisecond) with floor semantics, as Java's Timestamp.
    per_ms = {"s": 0, "ms": 1, "us": 1000, "ns": 1_000_000}[arr.type.unit]
    if per_ms == 0:
        millis, nano = raw * 1000, np.zeros_like(raw)
    else:
        millis, nano = np.divmod(raw, per_ms)
        nano = nano * (1_000_000 // per_ms)
    if valid is not None:
        millis[~valid] = 0
        nano[~valid] = 0
    if t.precision <= 3:
        return _Field(millis.view(np.uint64), valid)
    blocks = millis.astype("<i8").view(np.uint8).reshape(len(arr), 8)
    return _Field(nano.astype(np.uint64), valid, _fixed_size_var(blocks), np.full(len(arr), 8, np.int64))


def _encode_bytes(arr: pa.Array, valid: np.ndarray | None) -> _Field:
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
            or pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)
            or pa.types.is_fixed_size_binary(arr.type) or pa.types.is_string_view(arr.type)
            or pa.types.is_binary_view(arr.type)):
        raise InvalidInputError(f"a {arr.type} column cannot be encoded as a string/binary field")
    arr = arr.cast(pa.large_binary())
    n = len(arr)
    lengths = np.asarray(pc.fill_null(pc.binary_length(arr), 0).to_numpy(zero_copy_only=False), np.int64)
    is_valid = valid if valid is not None else np.ones(n, dtype=bool)
    slot = np.zeros(n, dtype=np.uint64)
    short = np.flatnonzero(is_valid & (lengths <= _INLINE_MAX))
    if short.size:
        # Gather the first 7 bytes of each short value into the low bytes of its slot.
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
        data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None \
            else np.zeros(0, np.uint8)
        data = np.concatenate([data, np.zeros(_INLINE_MAX, np.uint8)])  # so the gather never overruns
        idx = offsets[short][:, None] + np.arange(_INLINE_MAX)
        block = np.zeros((short.size, 8), dtype=np.uint8)
        block[:, :_INLINE_MAX] = np.where(np.arange(_INLINE_MAX) < lengths[short][:, None], data[idx], 0)
        block[:, 7] = _INLINE_MARK | lengths[short]
        slot[short] = block.view(np.uint64).reshape(short.size)
    long_mask = is_valid & (lengths > _INLINE_MAX)
    if not long_mask.any():
        return _Field(slot, valid)
    slot[long_mask] = lengths[long_mask].astype(np.uint64)
    padding = np.where(long_mask, -lengths % 8, 0)
    pad_offsets = np.concatenate([[0], np.cumsum(padding)]).astype(np.int64)
    zeros = pa.py_buffer(np.zeros(int(pad_offsets[-1]), np.uint8))
    pads = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(pad_offsets), zeros])
    long_values = pc.if_else(pa.array(long_mask), arr, pa.scalar(b"", pa.large_binary()))
    var = pc.binary_join_element_wise(long_values, pads, pa.scalar(b"", pa.large_binary()))
    return _Field(slot, valid, var, np.where(long_mask, lengths + padding, 0))


def encode_rows(columns: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[AnyType],
                num_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The BinaryRow bytes of every row of the columns: (flat uint8 buffer, int64 offsets of length n+1).

    Byte-identical to `encode_row` per row. `num_rows` is needed only when there are no columns.
    """
    atypes = _atomic(types)
    if len(columns) != len(atypes):
        raise InvalidInputError(f"{len(columns)} columns for {len(atypes)} types")
    arrays = [_as_array(c) for c in columns]
    n = len(arrays[0]) if arrays else (num_rows or 0)
    if any(len(a) != n for a in arrays):
        raise InvalidInputError("columns have different lengths")
    width = null_bits_width(len(atypes))
    fixed_size = width + 8 * len(atypes)
    # The fixed part as 64-bit words: header words (row kind 0 + null bits), then one word per slot.
    fixed = np.zeros((n, fixed_size // 8), dtype=np.uint64)
    var_fields: list[_Field] = []
    var_offset = np.full(n, fixed_size, dtype=np.int64)  # where the next var item of each row goes
    for i, (arr, t) in enumerate(zip(arrays, atypes, strict=True)):
        try:
            f = _encode_column(arr, t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise InvalidInputError(f"field {i} ({t.sql()}): {e}") from e
        if f.valid is not None:
            bit = i + 8
            fixed[:, bit // 64] |= (~f.valid).astype(np.uint64) << np.uint64(bit % 64)
        slot = f.slot
        if f.var is not None and f.var_len is not None:
            # Rows that put bytes in the variable part point their slot at them.
            slot = slot | np.where(f.var_len > 0, var_offset.astype(np.uint64) << np.uint64(32), np.uint64(0))
            var_offset += f.var_len
            var_fields.append(f)
        fixed[:, width // 8 + i] = slot
    if not var_fields:
        return fixed.view(np.uint8).reshape(-1), np.arange(n + 1, dtype=np.int64) * fixed_size
    # Concatenate fixed part and variable items row by row in Arrow's C++ kernel (no Python row loop).
    parts = [_fixed_size_var(fixed.view(np.uint8).reshape(n, fixed_size))]
    parts += [f.var for f in var_fields if f.var is not None]
    joined = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)[joined.offset:joined.offset + n + 1]
    data_buf = joined.buffers()[2]
    flat = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return flat[offsets[0]:offsets[-1]], offsets - offsets[0]
