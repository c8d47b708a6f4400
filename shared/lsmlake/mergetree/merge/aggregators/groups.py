"""The column of one field split into groups (one per primary key), and the segmented-array helpers
every aggregate function builds on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format.types import AnyType
from lsmlake.mergetree.merge.aggregators.functions import FieldAggOptions


@dataclass
class Compact:
    """The rows of a mask, with their groups: `starts`/`counts` index into the compacted rows."""

    idx: np.ndarray  # row numbers
    g: np.ndarray  # group of each compacted row (non-decreasing)
    counts: np.ndarray  # compacted rows per group
    starts: np.ndarray  # first compacted row of each group

    @property
    def present(self) -> np.ndarray:
        return self.counts > 0

    def first_rows(self) -> np.ndarray:
        """Compacted position of the first row of each present group."""
        return self.starts[self.present]

    def last_rows(self) -> np.ndarray:
        p = self.present
        return self.starts[p] + self.counts[p] - 1


class AggContext:
    def __init__(self, function: str, values: pa.Array, retract: np.ndarray, starts: np.ndarray,
                 field_type: AnyType, options: FieldAggOptions) -> None:
        self.function = function
        self.values = values
        self.type = values.type
        self.field_type = field_type
        self.options = options
        self.n = len(values)
        self.G = len(starts)
        lengths = np.diff(np.append(starts, self.n))
        self.gid = np.repeat(np.arange(self.G, dtype=np.int64), lengths)
        if options.ignore_retract:
            self.use = ~retract
            self.retract = np.zeros(self.n, dtype=bool)
        else:
            self.use = np.ones(self.n, dtype=bool)
            self.retract = retract
        if values.null_count:
            self.valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        else:
            self.valid = np.ones(self.n, dtype=bool)

    def compact(self, mask: np.ndarray) -> Compact:
        idx = np.flatnonzero(mask)
        g = self.gid[idx]
        counts = np.bincount(g, minlength=self.G).astype(np.int64)
        starts = np.zeros(self.G, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        return Compact(idx, g, counts, starts)

    def take(self, rows: np.ndarray) -> pa.Array:
        return self.values.take(pa.array(rows, pa.int64()))

    def error(self, what: str) -> InvalidInputError:
        return InvalidInputError(f"aggregate function {self.function!r} of field "
                                 f"{self.options.field_name!r}: {what}")


def scatter(G: int, typ: pa.DataType, parts: list[tuple[np.ndarray, pa.Array]]) -> pa.Array:
    """Assemble one value per group from (groups, values) parts; groups in no part get null."""
    pos = np.full(G, -1, dtype=np.int64)
    arrays = []
    offset = 0
    for groups, arr in parts:
        if len(groups) == 0:
            continue
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if arr.type != typ:
            arr = arr.cast(typ)
        pos[groups] = offset + np.arange(len(groups))
        arrays.append(arr)
        offset += len(arr)
    if not arrays:
        return pa.nulls(G, typ)
    combined = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    missing = pos < 0
    return combined.take(pa.array(np.where(missing, 0, pos), pa.int64(), mask=missing))


def to_numpy(arr: pa.Array) -> np.ndarray:
    """Numpy values of an array without nulls."""
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def first_of_run(g: np.ndarray) -> np.ndarray:
    return np.r_[True, g[1:] != g[:-1]] if len(g) else np.zeros(0, dtype=bool)


def last_of_run(g: np.ndarray) -> np.ndarray:
    return np.r_[g[1:] != g[:-1], True] if len(g) else np.zeros(0, dtype=bool)


def segment_base(C: np.ndarray, c: Compact) -> np.ndarray:
    """For prefix sums C over compacted rows: the value before each group starts (0 at the front)."""
    base = np.zeros(len(c.counts), dtype=C.dtype)
    inner = c.present & (c.starts > 0)
    base[inner] = C[c.starts[inner] - 1]
    return base
