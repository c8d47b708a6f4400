"""Column statistics of a data file (min, max, null count) as Paimon's `SimpleStats`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.format.binary_row import EMPTY_ROW, serialize_row
from lsmlake.format.data_file_meta import SimpleStats
from lsmlake.format.types import AnyType, DataType

EMPTY_STATS = SimpleStats(EMPTY_ROW, EMPTY_ROW, ())


def scalar_to_py(scalar: pa.Scalar) -> Any:
    """A Python value of an Arrow scalar that the BinaryRow encoder accepts (nanoseconds kept)."""
    if not scalar.is_valid:
        return None
    if pa.types.is_timestamp(scalar.type) and scalar.type.unit == "ns":
        return _nano_timestamp(scalar)
    return scalar.as_py()


def _nano_timestamp(scalar: pa.Scalar) -> Any:
    """A nanosecond timestamp as pandas.Timestamp (the encoder reads its `.nanosecond`), else a datetime."""
    import datetime as dt

    nanos = scalar.cast(pa.int64()).as_py()
    base = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=nanos // 1000)
    if scalar.type.tz is not None:
        base = base.replace(tzinfo=dt.UTC)
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is present wherever pypaimon is
        return base
    return pd.Timestamp(base) + pd.Timedelta(nanoseconds=nanos % 1000)


def column_stats(columns: Sequence[pa.Array | pa.ChunkedArray], types: Sequence[AnyType]) -> SimpleStats:
    """Min, max and null count of each column; nested columns get null min/max."""
    mins: list[Any] = []
    maxs: list[Any] = []
    nulls: list[int | None] = []
    enc_types: list[AnyType] = []
    for col, t in zip(columns, types, strict=True):
        nulls.append(col.null_count)
        if not isinstance(t, DataType) or len(col) == col.null_count:
            mins.append(None)
            maxs.append(None)
        else:
            mm = pc.min_max(col)
            mins.append(scalar_to_py(mm["min"]))
            maxs.append(scalar_to_py(mm["max"]))
        enc_types.append(t if isinstance(t, DataType) else DataType("INT"))  # nested: always null
    return SimpleStats(serialize_row(mins, enc_types), serialize_row(maxs, enc_types), tuple(nulls))
