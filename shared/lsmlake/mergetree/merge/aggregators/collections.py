"""listagg, collect, merge_map and nested_update: functions whose result gathers the values of many
rows (a joined string, an array, a map, an array of rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.mergetree.merge.aggregators.groups import AggContext, Compact, first_of_run, scatter, to_numpy


def _list_array(offsets: np.ndarray, flat: pa.Array, typ: pa.DataType) -> pa.Array:
    if pa.types.is_large_list(typ):
        return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), flat, type=typ)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat, type=typ)


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def agg_listagg(ctx: AggContext) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    d = ctx.options.delimiter
    strs = ctx.take(c.idx)
    nonempty = to_numpy(pc.binary_length(strs)) > 0
    ne_rows = np.flatnonzero(nonempty)
    ne_g = c.g[ne_rows]
    ne_strs = strs.take(pa.array(ne_rows, pa.int64()))
    if not ctx.options.distinct:
        elem_g, elems = ne_g, ne_strs
    else:
        head = first_of_run(ne_g)
        if d:
            tokens = pc.split_pattern(ne_strs, d)
            flat = pc.list_flatten(tokens)
            parent = np.repeat(np.arange(len(ne_strs)), to_numpy(pc.list_value_length(tokens)).astype(np.int64))
        else:
            flat, parent = ne_strs, np.arange(len(ne_strs))
        tg = ne_g[parent]
        pos = np.arange(len(flat))
        first = _first_positions(tg, flat, pos)
        keep = np.zeros(len(flat), dtype=bool)
        keep[first] = True
        keep &= ~head[parent] & (to_numpy(pc.binary_length(flat)) > 0)
        # each group: its first non-empty value whole, then the new tokens in order
        cat_g = np.concatenate([ne_g[head], tg[keep]])
        cat_order = np.concatenate([np.full(int(head.sum()), -1, dtype=np.int64), pos[keep]])
        order = np.lexsort((cat_order, cat_g))
        elem_g = cat_g[order]
        elems = pa.concat_arrays([ne_strs.filter(pa.array(head)), flat.filter(pa.array(keep))]).take(
            pa.array(order, pa.int64()))
    p = c.present
    counts = np.bincount(elem_g, minlength=ctx.G)[p]
    lists = _list_array(_offsets(counts), elems, pa.list_(elems.type))
    joined = pc.binary_join(lists, d)  # a group of only empty strings joins to ""
    return scatter(ctx.G, ctx.type, [(np.flatnonzero(p), joined)])


def _first_positions(g: np.ndarray, col: pa.Array, pos: np.ndarray) -> np.ndarray:
    """Positions (ascending) of the first occurrence of each distinct (group, value)."""
    if len(pos) == 0:
        return pos
    t = pa.table({"g": pa.array(g, pa.int64()), "e": col, "p": pa.array(pos, pa.int64())})
    agg = t.group_by(["g", "e"], use_threads=False).aggregate([("p", "min")])
    return np.sort(to_numpy(agg.column("p_min")))


def _groupable(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_null(t))


# ---------------------------------------------------------------------------------------------
# collect / merge_map / nested_update
# ---------------------------------------------------------------------------------------------

def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple((k, _freeze(x)) for k, x in v.items())
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    return v


def _fold_groups(ctx: AggContext, c: Compact, groups_mask: np.ndarray, agg: Callable[[Any, Any], Any],
                 retract: Callable[[Any, Any], Any]) -> tuple[np.ndarray, pa.Array]:
    """Fold the non-null rows of the selected groups in Python, one group at a time."""
    rows = groups_mask[c.g]
    idx = c.idx[rows]
    g = c.g[rows]
    py = ctx.take(idx).to_pylist()
    retr = ctx.retract[idx]
    bounds = np.append(np.flatnonzero(first_of_run(g)), len(g))
    results = []
    for b in range(len(bounds) - 1):  # one iteration per group (see the package docstring)
        acc = None
        for j in range(int(bounds[b]), int(bounds[b + 1])):
            acc = retract(acc, py[j]) if retr[j] else agg(acc, py[j])
        results.append(acc)
    return g[bounds[:-1]], pa.array(results, type=ctx.type)


def _has_retract(ctx: AggContext, c: Compact) -> np.ndarray:
    return np.bincount(c.g, weights=ctx.retract[c.idx], minlength=ctx.G) > 0


def _flatten_lists(arrs: pa.Array, g: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    flat = pc.list_flatten(arrs)
    lens = to_numpy(pc.list_value_length(arrs)).astype(np.int64)
    return flat, np.repeat(g, lens)


def agg_collect(ctx: AggContext) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)  # null arrays change nothing
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    distinct = ctx.options.distinct
    slow = c.present & _has_retract(ctx, c)
    if distinct and not _groupable(ctx.type.value_type):
        slow = c.present.copy()
    fast = c.present & ~slow
    parts = []
    if fast.any():
        rows = fast[c.g]
        flat, eg = _flatten_lists(ctx.take(c.idx[rows]), c.g[rows])
        if distinct:
            keep = _first_positions(eg, flat, np.arange(len(flat)))
            flat = flat.take(pa.array(keep, pa.int64()))
            eg = eg[keep]
        counts = np.bincount(eg, minlength=ctx.G)[fast]
        parts.append((np.flatnonzero(fast), _list_array(_offsets(counts), flat, ctx.type)))
    if slow.any():
        parts.append(_fold_groups(ctx, c, slow, *_collect_fns(distinct)))
    return scatter(ctx.G, ctx.type, parts)


def _dedupe(items: list[Any]) -> list[Any]:
    seen = set()
    out = []
    for e in items:
        k = _freeze(e)
        if k not in seen:
            seen.add(k)
            out.append(e)
    return out


def _collect_fns(distinct: bool) -> tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]:
    def agg(acc: Any, v: Any) -> Any:
        if distinct:
            return _dedupe((acc or []) + v)
        return v if acc is None else acc + v

    def retract(acc: Any, v: Any) -> Any:
        if acc is None:
            return None
        remaining = list(v)
        out = []
        for e in acc:
            for i, r in enumerate(remaining):
                if r == e:
                    del remaining[i]
                    break
            else:
                out.append(e)
        return out
    return agg, retract


def agg_merge_map(ctx: AggContext) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    slow = c.present & _has_retract(ctx, c)
    single = c.present & ~slow & (c.counts == 1)
    multi = c.present & ~slow & (c.counts > 1)
    if not _groupable(ctx.type.key_type):
        slow |= multi
        multi = np.zeros(ctx.G, dtype=bool)
    parts = []
    if single.any():  # agg(null, m) returns m itself
        parts.append((np.flatnonzero(single), ctx.take(c.idx[c.starts[single]])))
    if multi.any():
        rows = multi[c.g]
        maps = ctx.take(c.idx[rows])
        off = to_numpy(maps.offsets).astype(np.int64)
        keys = maps.keys.slice(off[0], off[-1] - off[0])
        items = maps.items.slice(off[0], off[-1] - off[0])
        eg = np.repeat(c.g[rows], np.diff(off))
        pos = np.arange(len(keys))
        t = pa.table({"g": pa.array(eg, pa.int64()), "k": keys, "p": pa.array(pos, pa.int64())})
        res = t.group_by(["g", "k"], use_threads=False).aggregate([("p", "min"), ("p", "max")])
        rg = to_numpy(res.column("g"))
        order = np.lexsort((to_numpy(res.column("p_min")), rg))
        take = pa.array(to_numpy(res.column("p_max"))[order], pa.int64())
        counts = np.bincount(rg, minlength=ctx.G)[multi]
        merged = pa.MapArray.from_arrays(pa.array(_offsets(counts), pa.int32()), keys.take(take),
                                         items.take(take), type=ctx.type)
        parts.append((np.flatnonzero(multi), merged))
    if slow.any():
        parts.append(_fold_groups(ctx, c, slow, _map_agg, _map_retract))
    return scatter(ctx.G, ctx.type, parts)


def _map_agg(acc: Any, v: Any) -> Any:
    if acc is None:
        return v
    out: dict[Any, tuple[Any, Any]] = {}
    for k, val in list(acc) + list(v):
        out[_freeze(k)] = (k, val)
    return list(out.values())


def _map_retract(acc: Any, v: Any) -> Any:
    if acc is None:
        return None
    gone = {_freeze(k) for k, _ in v}
    out: dict[Any, tuple[Any, Any]] = {}
    for k, val in acc:
        if _freeze(k) not in gone:
            out[_freeze(k)] = (k, val)
    return list(out.values())


def agg_nested_update(ctx: AggContext) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    keys = ctx.options.nested_keys
    row_type = ctx.type.value_type
    slow = c.present & _has_retract(ctx, c)
    single = c.present & ~slow & (c.counts == 1)
    multi = c.present & ~slow & (c.counts > 1)
    if keys and not all(_groupable(row_type.field(k).type) for k in keys):
        slow |= multi
        multi = np.zeros(ctx.G, dtype=bool)
    parts = []
    if single.any():  # agg(null, a) returns a itself
        parts.append((np.flatnonzero(single), ctx.take(c.idx[c.starts[single]])))
    if multi.any():
        rows = multi[c.g]
        flat, eg = _flatten_lists(ctx.take(c.idx[rows]), c.g[rows])
        if flat.null_count:  # merging drops null rows
            ok = np.asarray(flat.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            flat = flat.filter(pa.array(ok))
            eg = eg[ok]
        if keys:
            pos = np.arange(len(flat))
            cols: dict[str, Any] = {"g": pa.array(eg, pa.int64())}
            for i, k in enumerate(keys):
                cols[f"k{i}"] = pc.struct_field(flat, k)
            cols["p"] = pa.array(pos, pa.int64())
            res = pa.table(cols).group_by(["g"] + [f"k{i}" for i in range(len(keys))], use_threads=False) \
                .aggregate([("p", "min"), ("p", "max")])
            rg = to_numpy(res.column("g"))
            order = np.lexsort((to_numpy(res.column("p_min")), rg))
            flat = flat.take(pa.array(to_numpy(res.column("p_max"))[order], pa.int64()))
            eg = rg[order]
        counts = np.bincount(eg, minlength=ctx.G)[multi]
        parts.append((np.flatnonzero(multi), _list_array(_offsets(counts), flat, ctx.type)))
    if slow.any():
        parts.append(_fold_groups(ctx, c, slow, *_nested_fns(keys)))
    return scatter(ctx.G, ctx.type, parts)


def _nested_fns(keys: tuple[str, ...]) -> tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]:
    def key_of(r: dict[str, Any]) -> Any:
        return tuple(_freeze(r[k]) for k in keys)

    def agg(acc: Any, v: Any) -> Any:
        if acc is None:
            return v
        rows = [r for r in acc if r is not None] + [r for r in v if r is not None]
        if not keys:
            return rows
        out: dict[Any, Any] = {}
        for r in rows:
            out[key_of(r)] = r
        return list(out.values())

    def retract(acc: Any, v: Any) -> Any:
        if acc is None:
            return None
        if keys:
            out = {key_of(r): r for r in acc if r is not None}
            for r in v:
                if r is not None:
                    out.pop(key_of(r), None)
            return list(out.values())
        rows = [r for r in acc if r is not None]
        for r in v:
            if r is not None:
                rows = [x for x in rows if x != r]
        return rows
    return agg, retract
