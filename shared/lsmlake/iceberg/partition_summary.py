"""A manifest's partition summary (per partition field: nulls, NaNs, lower and upper bound) in the manifest list.

Readers skip a manifest whose summary excludes their filter; a publication skips reading a manifest whose summary
cannot hold a partition that lost a file. Bounds are Iceberg's single-value serialization: little-endian numbers
(dates as days, timestamps as microseconds), UTF-8 strings, raw binary, big-endian two's complement decimals.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from lsmlake.format import types as t

_EPOCH_DAY = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_FORMATS = {t.BOOLEAN: "<?", t.TINYINT: "<i", t.SMALLINT: "<i", t.INT: "<i", t.BIGINT: "<q", t.FLOAT: "<f",
            t.DOUBLE: "<d"}


def _micros(v: dt.datetime) -> int:
    delta = v - (_EPOCH_UTC if v.tzinfo is not None else _EPOCH)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _key(ty: t.DataType, v: Any) -> Any:
    """A value comparable with the others of its column (timestamps as microseconds: naive and aware alike)."""
    if ty.kind in (t.TIMESTAMP, t.TIMESTAMP_LTZ):
        return _micros(v)
    return v


def encode(ty: t.DataType, v: Any) -> bytes:
    k = ty.kind
    if k in _FORMATS:
        return struct.pack(_FORMATS[k], v)
    if k in t.STRING_KINDS:
        return str(v).encode()
    if k in t.BINARY_KINDS:
        return bytes(v)
    if k == t.DATE:
        return struct.pack("<i", (v - _EPOCH_DAY).days)
    if k in (t.TIMESTAMP, t.TIMESTAMP_LTZ):
        return struct.pack("<q", _micros(v))
    if k == t.DECIMAL:
        unscaled = int(Decimal(v).scaleb(ty.scale))
        size = max(1, (unscaled.bit_length() + 8) // 8)
        return unscaled.to_bytes(size, "big", signed=True)
    raise AssertionError(f"partition type {ty.sql()} was not checked")


def decode(ty: t.DataType, b: bytes) -> Any:
    k = ty.kind
    if k in _FORMATS:
        return struct.unpack(_FORMATS[k], b)[0]
    if k in t.STRING_KINDS:
        return b.decode()
    if k in t.BINARY_KINDS:
        return b
    if k == t.DATE:
        return _EPOCH_DAY + dt.timedelta(days=struct.unpack("<i", b)[0])
    if k in (t.TIMESTAMP, t.TIMESTAMP_LTZ):
        return struct.unpack("<q", b)[0]  # compared as microseconds (`_key`)
    if k == t.DECIMAL:
        return Decimal(int.from_bytes(b, "big", signed=True)).scaleb(-ty.scale)
    raise AssertionError(f"partition type {ty.sql()} was not checked")


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def summaries(types: Sequence[t.AnyType], partitions: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The manifest list's `partitions` of a manifest holding files of these partitions."""
    rows = list(partitions)
    out = []
    for i, ty in enumerate(types):
        assert isinstance(ty, t.DataType)
        values = [r[i] for r in rows]
        present = [v for v in values if v is not None and not _is_nan(v)]
        floating = ty.kind in (t.FLOAT, t.DOUBLE)
        lower = min(present, key=lambda v: _key(ty, v)) if present else None
        upper = max(present, key=lambda v: _key(ty, v)) if present else None
        out.append({"contains_null": any(v is None for v in values),
                    "contains_nan": any(_is_nan(v) for v in values) if floating else None,
                    "lower_bound": None if lower is None else encode(ty, lower),
                    "upper_bound": None if upper is None else encode(ty, upper)})
    return out


def may_hold(types: Sequence[t.AnyType], summary: Sequence[dict[str, Any]] | None,
             partition: tuple[Any, ...]) -> bool:
    """Whether a manifest with this summary can hold a file of `partition` (True without a summary)."""
    if summary is None or len(summary) != len(types):
        return True
    for ty, s, v in zip(types, summary, partition, strict=True):
        assert isinstance(ty, t.DataType)
        if v is None:
            if not s["contains_null"]:
                return False
            continue
        if _is_nan(v):
            if s.get("contains_nan") is False:
                return False
            continue
        if s["lower_bound"] is None or s["upper_bound"] is None:
            return False  # only nulls (or NaNs) in this manifest
        key = _key(ty, v)
        # bounds decode to values comparable with `_key` (timestamps to microseconds)
        if not decode(ty, s["lower_bound"]) <= key <= decode(ty, s["upper_bound"]):
            return False
    return True
