"""Changelog rows: the difference between a key's state before and after a change, in Paimon's row kinds.

Both sides hold at most one row per key. A key only after is +I, only before is -D, changed is a
-U (old row) immediately followed by a +U (new row); an unchanged key produces nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.format.row_kind import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, without_retractions
from lsmlake.format.schema import VALUE_KIND

_SIDE = "__lsmlake_side"



def live(rows: pa.Table) -> pa.Table:
    """Rows whose kind is not a retraction."""
    return without_retractions(rows)


def diff(before: pa.Table, after: pa.Table, keys: Sequence[str], values: Sequence[str]) -> pa.Table:
    """Changelog rows (same columns as the inputs) turning `before` into `after`, in key order."""
    before, after = live(before), live(after)
    b = pa.table([before.column(k) for k in keys] + [pa.array(np.arange(before.num_rows), pa.int64())],
                 names=[f"k{i}" for i in range(len(keys))] + ["b_row"])
    a = pa.table([after.column(k) for k in keys] + [pa.array(np.arange(after.num_rows), pa.int64())],
                 names=[f"k{i}" for i in range(len(keys))] + ["a_row"])
    joined = b.join(a, keys=[f"k{i}" for i in range(len(keys))], join_type="full outer")
    b_row = joined.column("b_row").to_numpy(zero_copy_only=False)
    a_row = joined.column("a_row").to_numpy(zero_copy_only=False)
    has_b = np.asarray(pc.is_valid(joined.column("b_row")).to_numpy(zero_copy_only=False), bool)
    has_a = np.asarray(pc.is_valid(joined.column("a_row")).to_numpy(zero_copy_only=False), bool)
    bi = np.where(has_b, np.nan_to_num(b_row.astype(np.float64), nan=-1), -1).astype(np.int64)
    ai = np.where(has_a, np.nan_to_num(a_row.astype(np.float64), nan=-1), -1).astype(np.int64)
    both = has_b & has_a
    changed = np.zeros(len(bi), dtype=bool)
    if both.any():
        bb = before.take(pa.array(bi[both]))
        aa = after.take(pa.array(ai[both]))
        differs = np.zeros(int(both.sum()), dtype=bool)
        for v in values:
            differs |= _differs(bb.column(v), aa.column(v))
        changed[np.flatnonzero(both)] = differs
    old_sel = has_b & (~has_a | changed)
    new_sel = has_a & (~has_b | changed)
    old = before.take(pa.array(bi[old_sel], pa.int64()))
    new = after.take(pa.array(ai[new_sel], pa.int64()))
    old_kind = np.where(has_a[old_sel], UPDATE_BEFORE, DELETE).astype(np.int8)
    new_kind = np.where(has_b[new_sel], UPDATE_AFTER, INSERT).astype(np.int8)
    cols = list(before.column_names)
    old = _set_kind(old.select(cols), old_kind).append_column(_SIDE, pa.array(np.zeros(old.num_rows, np.int8)))
    new = _set_kind(new.select(cols), new_kind).append_column(_SIDE, pa.array(np.ones(new.num_rows, np.int8)))
    out = pa.concat_tables([old, new])
    if out.num_rows == 0:
        return out.drop_columns([_SIDE])
    order = pc.sort_indices(out, sort_keys=[(k, "ascending") for k in keys] + [(_SIDE, "ascending")],
                            null_placement="at_start")
    return out.take(order).drop_columns([_SIDE])


def _set_kind(rows: pa.Table, kinds: np.ndarray) -> pa.Table:
    i = rows.schema.get_field_index(VALUE_KIND)
    return rows.set_column(i, rows.schema.field(i), pa.array(kinds, pa.int8()))


def _differs(a: pa.ChunkedArray | pa.Array, b: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Row-wise 'not the same value' (two nulls are the same)."""
    try:
        ne = pc.not_equal(a, b)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        # nested types have no comparison kernel: compare their Python values
        return np.array([x != y for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True)], dtype=bool)
    va, vb = pc.is_valid(a), pc.is_valid(b)
    one_null = pc.xor(va, vb)
    res = pc.if_else(pc.and_(va, vb), ne, one_null)
    return np.asarray(res.to_numpy(zero_copy_only=False), dtype=bool)
