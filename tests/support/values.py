"""Canonical, hashable forms of the values pypaimon and lsmlake return, for comparing rows."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)


def norm_value(v: Any) -> Any:
    """A canonical form of one value: equal data gives equal (and equally ordered) forms.

    Timestamps become (epoch nanoseconds, has-time-zone) whether they come back as datetime or
    pandas Timestamp (nanosecond units); bools, floats and decimals are tagged so that they never
    compare equal to ints; NaN compares equal to NaN.
    """
    if v is None:
        return None
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int | str):
        return v
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else v)
    if isinstance(v, Decimal):
        return ("dec", str(v))
    if isinstance(v, dt.datetime):
        if type(v).__name__ == "Timestamp":  # pandas, for nanosecond units
            return ("ts", int(v.value), v.tzinfo is not None)
        if v.tzinfo is not None:
            return ("ts", (v - _EPOCH_UTC) // _US * 1000, True)
        return ("ts", (v - _EPOCH) // _US * 1000, False)
    if isinstance(v, dt.date):
        return ("date", v.toordinal())
    if isinstance(v, dt.time):
        return ("time", v.isoformat())
    if isinstance(v, bytes):
        return ("bytes", v.hex())
    if isinstance(v, list):
        return ("list", tuple(norm_value(x) for x in v))
    if isinstance(v, tuple):  # map entries
        return tuple(norm_value(x) for x in v)
    if isinstance(v, dict):  # ROW
        return ("row", tuple((k, norm_value(x)) for k, x in v.items()))
    raise TypeError(f"cannot normalise {type(v)}: {v!r}")
