"""Sorting rows into groups of equal keys, vectorised: the core of every merge.

Rows are ordered by (group, key columns, order columns); keys sort ascending with nulls first, as
Paimon orders them. The result is the row permutation and the start of each key's run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def sort_and_group(keys: Sequence[pa.Array | pa.ChunkedArray],
                   order: Sequence[tuple[pa.Array | pa.ChunkedArray | np.ndarray, str]],
                   group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(permutation, start index of each distinct (group, key) in the permuted order).

    `order` lists (column, "ascending" | "descending") that order rows inside a key.
    """
    cols: list[pa.Array | pa.ChunkedArray] = []
    directions: list[str] = []
    if group is not None:
        cols.append(pa.array(group))
        directions.append("ascending")
    for k in keys:
        cols.append(k)
        directions.append("ascending")
    for col, direction in order:
        cols.append(pa.array(col) if isinstance(col, np.ndarray) else col)
        directions.append(direction)
    names = [f"c{i}" for i in range(len(cols))]
    n = len(cols[0]) if cols else 0
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    idx = pc.sort_indices(pa.table(cols, names=names), sort_keys=list(zip(names, directions, strict=True)),
                          null_placement="at_start").to_numpy().astype(np.int64)
    differs = np.zeros(n - 1, dtype=bool)
    if group is not None:
        sg = group[idx]
        differs |= sg[1:] != sg[:-1]
    take = pa.array(idx)
    for k in keys:
        col = k.take(take)
        a, b = col.slice(1), col.slice(0, n - 1)
        ne = pc.not_equal(a, b)
        # not_equal is null where either side is null: equal keys only when both are null
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        ne = pc.if_else(pc.is_null(ne), pc.invert(both_null), ne)
        differs |= _to_bool(ne)
    starts = np.flatnonzero(np.r_[True, differs])
    return idx, starts


def group_ends(starts: np.ndarray, n: int) -> np.ndarray:
    """Index one past the last row of each group."""
    if len(starts) == 0:
        return np.zeros(0, np.int64)
    return np.r_[starts[1:], n].astype(np.int64)


def newest_per_key(keys: Sequence[pa.Array | pa.ChunkedArray], seq: np.ndarray,
                   group: np.ndarray | None = None) -> np.ndarray:
    """Indices of the newest row (highest `seq`) of every distinct (group, key), in (group, key) order."""
    idx, starts = sort_and_group(keys, [(seq, "ascending")], group)
    if len(idx) == 0:
        return idx
    return idx[group_ends(starts, len(idx)) - 1]


def _to_bool(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
