"""Row kinds (+I, -U, +U, -D) and their `_VALUE_KIND` byte values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.errors import InvalidInputError

INSERT = 0
UPDATE_BEFORE = 1
UPDATE_AFTER = 2
DELETE = 3

SHORT_NAMES = ("+I", "-U", "+U", "-D")
ROW_KIND_COLUMN = "_row_kind"  # optional input column of `lake write` and the writer service


def parse_kinds(column: pa.Array | pa.ChunkedArray, what: str = ROW_KIND_COLUMN) -> pa.Array:
    """Map a column of `+I`/`-U`/`+U`/`-D` strings to `_VALUE_KIND` bytes; any other value is an error."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_integer(column.type):
        values = column.cast(pa.int8())
        bad = pc.or_(pc.less(values, 0), pc.greater(values, 3))
        if column.null_count or pc.any(bad).as_py():
            raise InvalidInputError(f"column {what!r} holds a row kind outside 0..3 or a null")
        return values
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise InvalidInputError(f"column {what!r} must hold strings +I, -U, +U or -D, not {column.type}")
    idx = pc.index_in(column, value_set=pa.array(SHORT_NAMES))
    if idx.null_count:
        first_bad = column.filter(pc.is_null(idx))[0]
        raise InvalidInputError(f"column {what!r} holds {first_bad.as_py()!r}; a row kind is one of {SHORT_NAMES}")
    return pa.array(idx.to_numpy(zero_copy_only=False).astype(np.int8))


def is_retract(kinds: np.ndarray) -> np.ndarray:
    """Rows that retract a value (-U, -D)."""
    return (kinds == UPDATE_BEFORE) | (kinds == DELETE)


def without_retractions(rows: pa.Table, column: str = "_VALUE_KIND") -> pa.Table:
    """The rows whose kind is not a retraction (the same table when there is none: no copy)."""
    keep = ~is_retract(rows.column(column).to_numpy())
    return rows if keep.all() else rows.filter(pa.array(keep))
