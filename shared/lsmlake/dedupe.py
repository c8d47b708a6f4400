"""Finding the newest row of each key, vectorised: the core of the write-side fold and of merge-on-read."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def newest_per_key(keys: Sequence[pa.Array | pa.ChunkedArray], seq: np.ndarray,
                   group: np.ndarray | None = None) -> np.ndarray:
    """Indices of the newest row (highest `seq`) of every distinct (group, key), in (group, key) order.

    Rows are sorted by group, key columns ascending (nulls first, as Paimon orders keys) and sequence
    ascending; the last row of each run of equal (group, key) is the newest.
    """
    n = len(seq)
    cols: list[pa.Array | pa.ChunkedArray] = []
    if group is not None:
        cols.append(pa.array(group))
    cols.extend(keys)
    cols.append(pa.array(seq))
    names = [f"c{i}" for i in range(len(cols))]
    idx = pc.sort_indices(pa.table(cols, names=names), sort_keys=[(c, "ascending") for c in names],
                          null_placement="at_start").to_numpy()
    if n <= 1:
        return idx
    differs = np.zeros(n - 1, dtype=bool)
    if group is not None:
        sg = group[idx]
        differs |= sg[1:] != sg[:-1]
    take = pa.array(idx)
    for k in keys:
        col = k.take(take)
        ne = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        # not_equal is null where either side is null: equal keys only when both are null
        both_null = pc.and_(pc.is_null(col.slice(1)), pc.is_null(col.slice(0, n - 1)))
        ne = pc.if_else(pc.is_null(ne), pc.invert(both_null), ne)
        differs |= _to_bool(ne)
    last = np.empty(n, dtype=bool)
    last[:-1] = differs
    last[-1] = True
    return idx[last]


def _to_bool(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
