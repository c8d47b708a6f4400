"""min, max, bool_and and bool_or: the least or greatest non-null value of each group (bool_and is
the minimum of booleans, bool_or their maximum).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.format.types import DOUBLE, FLOAT, DataType
from lsmlake.mergetree.merge.aggregators.groups import AggContext, first_of_run, last_of_run, scatter, to_numpy


def _float_keys(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Integers ordered like Java's Float/Double.compare (-0.0 < 0.0, NaN above +inf)."""
    if x.dtype == np.float32:
        bits = x.view(np.int32).astype(np.int64) << 32 >> 32
        nan_bits, width = 0x7FC00000, 32
    else:
        bits = x.view(np.int64).copy()
        nan_bits, width = 0x7FF8000000000000, 64
    bits[np.isnan(x)] = nan_bits
    mag = (1 << (width - 1)) - 1
    return bits ^ ((bits >> (width - 1)) & mag), width


def _float_from_keys(keys: np.ndarray, width: int) -> np.ndarray:
    mag = (1 << (width - 1)) - 1
    bits = keys ^ ((keys >> (width - 1)) & mag)
    if width == 32:
        return bits.astype(np.int32).view(np.float32)
    return bits.view(np.float64)


def agg_min_max(ctx: AggContext, is_max: bool) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    groups = np.flatnonzero(c.present)
    sub = ctx.take(c.idx)
    assert isinstance(ctx.field_type, DataType)
    if ctx.field_type.kind in (FLOAT, DOUBLE):
        keys, width = _float_keys(to_numpy(sub))
        red = np.maximum if is_max else np.minimum
        best = red.reduceat(keys, c.first_rows())
        return scatter(ctx.G, ctx.type, [(groups, pa.array(_float_from_keys(best, width), type=ctx.type))])
    table = pa.table({"g": pa.array(c.g, pa.int64()), "v": sub})
    order = to_numpy(pc.sort_indices(table, sort_keys=[("g", "ascending"), ("v", "ascending")]))
    sorted_g = c.g[order]
    pick = order[last_of_run(sorted_g) if is_max else first_of_run(sorted_g)]
    return scatter(ctx.G, ctx.type, [(groups, sub.take(pa.array(pick, pa.int64())))])


def agg_bool(ctx: AggContext, is_and: bool) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    trues = np.bincount(c.g, weights=to_numpy(ctx.take(c.idx)).astype(np.float64), minlength=ctx.G)
    p = c.present
    out = trues[p] == c.counts[p] if is_and else trues[p] > 0
    return scatter(ctx.G, ctx.type, [(np.flatnonzero(p), pa.array(out, pa.bool_()))])
