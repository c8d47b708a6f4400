"""Sorting rows into groups of equal keys, vectorised: the core of every merge.

Rows are ordered by (group, key columns, order columns); keys sort ascending with nulls first, as
Paimon orders them. The result is the row permutation and the start of each key's run.

The usual merge has one integer key (after dropping key columns with one value throughout, such as the partition
columns of a bucket) and orders a key's rows by sequence number, over a few files each sorted by key. That case
sorts in numpy: a stable sort of the key alone (a merge of the files' runs, near linear), with the files taken
oldest first, then one check that every key's rows came out in strictly ascending sequence order. When they did,
(key, sequence) sorts in exactly one way, so the permutation is the one the general sort would give; when they
did not (sequence numbers tied or interleaved), the general Arrow sort runs instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.format.numpy_columns import arrow_of, fixed_numpy, one_array
from lsmlake.runtime.thread_pools import SharedPool

_TAKE = SharedPool("lsmlake-take", max(2, os.cpu_count() or 2))
# a table of fewer rows is taken on the calling thread: handing columns to the pool would cost more
PARALLEL_TAKE_ROWS = 100_000
COMBINE_BELOW_BYTES = 1 << 30


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
    if group is None and len(keys) >= 1 and len(order) == 1 and order[0][1] == "ascending":
        fast = _sort_runs_by_key(_varying(keys), order[0][0])
        if fast is not None:
            return fast
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


def _varying(keys: Sequence[pa.Array | pa.ChunkedArray]) -> list[pa.Array | pa.ChunkedArray]:
    """The key columns that hold more than one value (at least one column is kept): a column of one value, no
    nulls, orders nothing. Columns are only looked at when there are several."""
    if len(keys) < 2:
        return list(keys)
    kept = []
    for k in keys:
        if k.null_count == 0 and len(k) and _one_value(k):
            continue
        kept.append(k)
    return kept or [keys[0]]


def _one_value(col: pa.Array | pa.ChunkedArray) -> bool:
    if pa.types.is_floating(col.type):  # min_max passes over NaN: [NaN, 1.0] would look like one value
        return False
    try:
        mm = pc.min_max(col)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    lo, hi = mm["min"], mm["max"]
    return bool(lo.is_valid and hi.is_valid and pc.equal(lo, hi).as_py())


def _integer_view(a: pa.Array) -> np.ndarray | None:
    """An integer-like array without nulls as numpy integers (no copy); None for any other. Temporal values
    order as their integer counts."""
    t = a.type
    if a.null_count:
        return None
    if pa.types.is_integer(t):
        return fixed_numpy(a)
    if pa.types.is_temporal(t) and not pa.types.is_interval(t) and t.bit_width in (32, 64):
        return fixed_numpy(a.view(pa.int64() if t.bit_width == 64 else pa.int32()))
    return None


def _integer_segments(col: pa.Array | pa.ChunkedArray | np.ndarray, lengths: list[int]) -> list[np.ndarray] | None:
    """The column's values cut into segments of `lengths` (its chunks when they are those), as numpy integers."""
    if isinstance(col, np.ndarray):
        if col.dtype.kind not in "iu":
            return None
        bounds = np.cumsum([0, *lengths])
        return [col[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if [len(c) for c in chunks] != lengths:
        whole = one_array(col)
        bounds = np.cumsum([0, *lengths])
        chunks = [whole.slice(int(lo), int(hi - lo)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    out = []
    for c in chunks:
        v = _integer_view(c)
        if v is None:
            return None
        out.append(v)
    return out


def _sort_runs_by_key(keys: Sequence[pa.Array | pa.ChunkedArray],
                      order: pa.Array | pa.ChunkedArray | np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """`sort_and_group` of one integer key ordered by one ascending integer column, in numpy; None when the rows
    are not of that shape or their order values tie or interleave within a key (see the module's note)."""
    if len(keys) != 1:
        return None
    # the key's chunks are the files a section's rows were concatenated from
    lengths = [len(c) for c in keys[0].chunks] if isinstance(keys[0], pa.ChunkedArray) else [len(keys[0])]
    key_parts = _integer_segments(keys[0], lengths)
    seq_parts = _integer_segments(order, lengths) if key_parts is not None else None
    if key_parts is None or seq_parts is None:
        return None
    # the oldest file first, so that each key's versions come out of a stable sort of the key in order
    firsts = [int(p.min()) if len(p) else 0 for p in seq_parts]
    files = sorted(range(len(lengths)), key=firsts.__getitem__)
    perm: np.ndarray | None = None
    if files != list(range(len(lengths))):
        starts_of = np.cumsum([0, *lengths])
        perm = np.concatenate([np.arange(starts_of[c], starts_of[c + 1], dtype=np.int64) for c in files])
    key = np.concatenate([key_parts[c] for c in files]) if len(files) > 1 else key_parts[0]
    seq = np.concatenate([seq_parts[c] for c in files]) if len(files) > 1 else seq_parts[0]
    idx = np.argsort(key, kind="stable")
    ks = key[idx]
    ss = seq[idx]
    same = ks[1:] == ks[:-1]
    if bool(np.any(same & (ss[1:] <= ss[:-1]))):
        return None
    if perm is not None:
        idx = perm[idx]
    starts = np.flatnonzero(np.r_[True, ~same])
    return idx.astype(np.int64, copy=False), starts


def take_rows(rows: pa.Table, indices: np.ndarray) -> pa.Table:
    """`rows.take(indices)`, each column taken as a task of its own on every core (Arrow takes a table's columns
    one after another on the calling thread)."""
    idx = arrow_of(np.asarray(indices, dtype=np.int64))
    if rows.num_columns < 2 or len(idx) < PARALLEL_TAKE_ROWS:
        return rows.take(idx)
    pool = _TAKE.get()
    # largest columns first, so that no long task starts last
    order = sorted(range(rows.num_columns), key=lambda i: -rows.column(i).nbytes)
    futures = {i: pool.submit(_take_column, rows.column(i), idx) for i in order}
    return pa.Table.from_arrays([futures[i].result() for i in range(rows.num_columns)], schema=rows.schema)


def _take_column(col: pa.ChunkedArray, idx: pa.Array) -> pa.Array | pa.ChunkedArray:
    # Arrow's take from a column of many chunks (the files of a section) resolves every index to its chunk; one
    # copy of the column first and a take from one array costs less, for strings about half. Not for a column
    # whose values could overflow one array's 32-bit offsets.
    if col.num_chunks > 1 and col.nbytes < COMBINE_BELOW_BYTES:
        return pc.take(col.combine_chunks(), idx, boundscheck=False)
    return pc.take(col, idx, boundscheck=False)


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
