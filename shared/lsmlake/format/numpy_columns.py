"""Fixed-width Arrow columns as numpy arrays and back, by their value buffers.

Arrow's own conversions (`to_numpy`, `pa.array` of a numpy array) import pandas on first use when pandas is
installed: half a second of a short command such as `lake compact`, for conversions that are views of one buffer.
These do not.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_NUMPY_TO_ARROW = {np.dtype(np.int8): pa.int8(), np.dtype(np.int16): pa.int16(), np.dtype(np.int32): pa.int32(),
                   np.dtype(np.int64): pa.int64(), np.dtype(np.uint8): pa.uint8(), np.dtype(np.uint16): pa.uint16(),
                   np.dtype(np.uint32): pa.uint32(), np.dtype(np.uint64): pa.uint64(),
                   np.dtype(np.float32): pa.float32(), np.dtype(np.float64): pa.float64()}


def one_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The column as one array (no copy when it has one chunk)."""
    if isinstance(col, pa.Array):
        return col
    if col.num_chunks == 1:
        return col.chunk(0)
    return pa.concat_arrays(col.chunks) if col.num_chunks else pa.array([], col.type)


def fixed_numpy(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an integer or floating-point column without nulls (no copy for one chunk; read-only then)."""
    col = one_array(col)
    t = col.type
    if col.null_count or not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise TypeError(f"fixed_numpy takes integers or floats without nulls, not {t} with {col.null_count} nulls")
    kind = "f" if pa.types.is_floating(t) else ("i" if pa.types.is_signed_integer(t) else "u")
    dtype = np.dtype(f"<{kind}{t.bit_width // 8}")
    data = col.buffers()[1]
    if data is None or len(col) == 0:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype, count=len(col), offset=col.offset * dtype.itemsize)


def arrow_of(values: np.ndarray, typ: pa.DataType | None = None) -> pa.Array:
    """A one-dimensional numpy array of integers or floats as an Arrow array without nulls (no copy when it is
    contiguous), typed `typ` (of the same width) or after its dtype."""
    values = np.ascontiguousarray(values)
    if not values.dtype.isnative:
        values = values.astype(values.dtype.newbyteorder("="))
    natural = _NUMPY_TO_ARROW.get(values.dtype)
    if natural is None or values.ndim != 1:
        raise TypeError(f"arrow_of takes a one-dimensional numpy array of integers or floats, not {values.dtype}")
    typ = typ or natural
    if typ.bit_width != natural.bit_width:
        raise TypeError(f"arrow_of: {values.dtype} values cannot be viewed as {typ}")
    return pa.Array.from_buffers(typ, len(values), [None, pa.py_buffer(values)])


def mask_of(keep: np.ndarray) -> pa.Array:
    """A numpy bool array as an Arrow boolean array without nulls (for `filter`)."""
    keep = np.asarray(keep, dtype=bool)
    return pa.Array.from_buffers(pa.bool_(), len(keep), [None, pa.py_buffer(np.packbits(keep, bitorder="little"))])
