"""The entry point: `aggregate` checks its input and hands the column to the function's implementation."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lsmlake.errors import InvalidInputError
from lsmlake.format.row_kind import is_retract
from lsmlake.format.types import AnyType
from lsmlake.mergetree.merge.aggregators.bitmaps import agg_rbm
from lsmlake.mergetree.merge.aggregators.collections import agg_collect, agg_listagg, agg_merge_map, agg_nested_update
from lsmlake.mergetree.merge.aggregators.extremes import agg_bool, agg_min_max
from lsmlake.mergetree.merge.aggregators.functions import RETRACTABLE, FieldAggOptions, validate
from lsmlake.mergetree.merge.aggregators.groups import AggContext
from lsmlake.mergetree.merge.aggregators.numeric import agg_count, agg_product, agg_sum
from lsmlake.mergetree.merge.aggregators.values import (
    agg_first_non_null_value,
    agg_first_value,
    agg_last_non_null_value,
    agg_last_value,
)

_IMPLS: dict[str, Callable[[AggContext], pa.Array]] = {
    "sum": agg_sum,
    "product": agg_product,
    "count": agg_count,
    "min": lambda ctx: agg_min_max(ctx, is_max=False),
    "max": lambda ctx: agg_min_max(ctx, is_max=True),
    "last_value": agg_last_value,
    "last_non_null_value": agg_last_non_null_value,
    "first_value": agg_first_value,
    "first_non_null_value": agg_first_non_null_value,
    "listagg": agg_listagg,
    "bool_and": lambda ctx: agg_bool(ctx, is_and=True),
    "bool_or": lambda ctx: agg_bool(ctx, is_and=False),
    "collect": agg_collect,
    "merge_map": agg_merge_map,
    "nested_update": agg_nested_update,
    "rbm32": lambda ctx: agg_rbm(ctx, 32),
    "rbm64": lambda ctx: agg_rbm(ctx, 64),
}


def aggregate(function: str, values: pa.Array, kinds: np.ndarray, starts: np.ndarray, field_type: AnyType,
              options: FieldAggOptions) -> pa.Array:
    """Fold each group of rows into one value of the column's type.

    `values`: the column, rows sorted by (key, sequence number); `kinds`: the row kind (0 +I, 1 -U,
    2 +U, 3 -D) of each row; `starts`: the first row of each group, ascending, starting at 0 (a group
    ends where the next starts; an empty group gives null). Returns `len(starts)` values.
    """
    validate(function, field_type, options)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    kinds_np = np.asarray(kinds)
    if kinds_np.shape != (n,):
        raise InvalidInputError(f"field {options.field_name!r}: {len(kinds_np)} row kinds for {n} values")
    if n and ((kinds_np < 0) | (kinds_np > 3)).any():
        raise InvalidInputError(f"field {options.field_name!r}: a row kind outside 0..3")
    starts_np = np.asarray(starts, dtype=np.int64)
    if starts_np.ndim != 1:
        raise InvalidInputError("starts must be one-dimensional")
    if len(starts_np) == 0:
        if n:
            raise InvalidInputError(f"field {options.field_name!r}: {n} rows but no group starts")
        return pa.array([], type=values.type)
    if starts_np[0] != 0 or starts_np[-1] > n or (np.diff(starts_np) < 0).any():
        raise InvalidInputError("starts must ascend from 0 and stay within the rows")
    retract = is_retract(kinds_np.astype(np.int8))
    if not options.ignore_retract and function not in RETRACTABLE and retract.any():
        raise InvalidInputError(
            f"aggregate function {function!r} of field {options.field_name!r} does not support retraction "
            f"(-U/-D rows); set 'fields.{options.field_name}.ignore-retract' = 'true' to skip them")
    ctx = AggContext(function, values, retract, starts_np, field_type, options)
    out = _IMPLS[function](ctx)
    assert len(out) == ctx.G
    return out
