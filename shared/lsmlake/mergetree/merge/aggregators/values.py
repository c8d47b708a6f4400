"""first_value, first_non_null_value, last_value and last_non_null_value: each group's value is one of
its rows, picked by position.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lsmlake.mergetree.merge.aggregators.groups import AggContext, first_of_run, last_of_run, scatter


def _pick(ctx: AggContext, mask: np.ndarray, last: bool) -> tuple[np.ndarray, np.ndarray]:
    """(groups, row) of the first/last row of each group within mask."""
    pos = np.flatnonzero(mask)
    g = ctx.gid[pos]
    sel = last_of_run(g) if last else first_of_run(g)
    return g[sel], pos[sel]


def agg_first_value(ctx: AggContext) -> pa.Array:
    groups, rows = _pick(ctx, ctx.use, last=False)
    return scatter(ctx.G, ctx.type, [(groups, ctx.take(rows))])


def agg_first_non_null_value(ctx: AggContext) -> pa.Array:
    groups, rows = _pick(ctx, ctx.use & ctx.valid, last=False)
    return scatter(ctx.G, ctx.type, [(groups, ctx.take(rows))])


def agg_last_value(ctx: AggContext) -> pa.Array:
    # agg returns the input (null included), retract returns null
    groups, rows = _pick(ctx, ctx.use, last=True)
    keep = ~ctx.retract[rows]
    return scatter(ctx.G, ctx.type, [(groups[keep], ctx.take(rows[keep]))])


def agg_last_non_null_value(ctx: AggContext) -> pa.Array:
    # a null input changes nothing either way; a non-null retraction sets null
    groups, rows = _pick(ctx, ctx.use & ctx.valid, last=True)
    keep = ~ctx.retract[rows]
    return scatter(ctx.G, ctx.type, [(groups[keep], ctx.take(rows[keep]))])
