"""Paimon's field aggregate functions, vectorised over many primary keys at once.

The `aggregation` merge engine (and per-field aggregation inside `partial-update`) folds all rows of
one key, in sequence order, field by field. `aggregate` does that fold for one column and many keys:
rows sorted by (key, sequence), `starts` marking the first row of each key, one result per key.

Semantics follow Paimon's Java `FieldAggregator` classes (paimon-core `mergetree/compact/aggregate`)
and the aggregation docs; pypaimon 2.1 was read for the defaults it shares. The accumulator starts
as null, +I/+U rows go through `agg`, -U/-D rows through `retract`:

- sum / product: nulls are skipped; integer overflow is an error (Java's `addExact`/`multiplyExact`);
  retraction subtracts (from a null accumulator: the negated value) / divides (Java integer division,
  truncating; a null accumulator stays null). DECIMAL keeps its exact value (products and quotients
  are rounded HALF_UP to the column scale after every step, as `Decimal.fromBigDecimal` does). A
  DECIMAL that outgrows its precision is an error here (Java's `DecimalUtils.add` keeps an
  out-of-precision value up to precision 18 and turns it into null above); so are an integer
  division by zero and a non-terminating DECIMAL quotient (Java throws ArithmeticException).
- count (Paimon's old `FieldCountAgg`; the current docs replace it with sum): counts non-null values,
  retraction counts down. Its first row sets 0 or 1, so a key whose values are all null gets 0.
- min / max: nulls skipped; FLOAT/DOUBLE ordered like Java's `Double.compare` (-0.0 < 0.0, NaN last).
- last_value: the last row's value, null included; a retraction sets null.
- last_non_null_value: the last non-null value; a retraction carrying a non-null value sets null.
- first_value (first row, null included), first_non_null_value, bool_and, bool_or, rbm32, rbm64: no
  retraction.
- listagg: non-null values joined by `fields.<f>.list-agg-delimiter` (Paimon's default ","); empty
  strings are skipped unless nothing else is there. With `fields.<f>.distinct` each later value is
  split on the whole delimiter and only tokens not seen yet (and not empty) are appended; the first
  value is kept whole. No retraction.
- collect: concatenation of the arrays (null elements kept); `distinct` keeps each element once.
  Retraction removes, for every retracted element, one equal element (the first) from the
  accumulator; a null accumulator stays null.
- merge_map: union of the maps, later values win; retraction removes the retracted map's keys.
- nested_update (ARRAY<ROW>): with `nested-key` rows with the same key are replaced by the newer row,
  without it rows are appended; null rows are dropped once two arrays meet. Retraction removes the
  rows with a retracted key (without keys: every row equal to a retracted row).
- rbm32 / rbm64 (serialized roaring bitmaps): union. A key with one bitmap keeps its bytes as they
  are (Java returns the input object); a union is written after run-optimisation, as Paimon does.
- Retraction of a null value changes nothing, except for `count`/`last_value` as above. Java throws
  a NullPointerException for a null array/map retracted by collect/merge_map; pypaimon (and this
  module) ignore it.
- A function that cannot retract raises `InvalidInputError` on -U/-D rows unless
  `fields.<f>.ignore-retract` is set, which skips them (Java's `FieldIgnoreRetractAgg`).

Order of unordered results: Java builds merge_map and keyed nested_update results in a `HashMap`
and distinct collect of atomic elements in a `HashSet`, whose iteration order is unspecified; here
the order is that of first appearance (the latest value for a repeated key).

Vectorisation: every function works on whole columns with numpy/Arrow kernels (segmented reductions,
prefix sums, group-bys), with these exceptions, all loops being over *groups or positions*, never
over all rows:
- rbm32/rbm64 loop over the keys that have two or more bitmaps (each union is a pyroaring call).
- collect/merge_map/nested_update fold in Python, key by key, only the keys that carry retraction
  rows (the multiset/keyed removals are sequential), and all keys when distinct elements, map keys
  or nested-key fields are nested types that Arrow cannot group by.
- product keys that carry retraction rows, and every DECIMAL product, are folded position by
  position: one vectorised step per position within a key across all such keys (Java's truncating
  division and per-step rounding make the fold non-associative). The loop runs as many times as the
  longest such key has rows.
- FLOAT/DOUBLE sums use a pairwise segmented sum, so they may differ from Java's left fold in the
  last bits.

rbm64 byte format. Paimon's `RoaringBitmap64` wraps RoaringBitmap-Java's `Roaring64Bitmap` and
serializes it with `Roaring64Bitmap.serialize(DataOutput)` after `runOptimize()`: the library's own
ART layout, not the portable 64-bit format of the Roaring spec that pyroaring's `BitMap64.serialize`
writes (pypaimon leaves rbm64 out for that reason). Read from RoaringBitmap-Java's `HighLowContainer`,
`Art`, `Node4/16/48/256`, `LeafNode` and `art.Containers`, all little-endian:
  tag u8 (0 = empty, nothing follows; 1 = not empty), key count i64, then the ART nodes in pre-order
  (each: type u8 [0 Node4, 1 Node16, 2 Node48, 3 Node256, 4 leaf], child count i16, prefix length
  u8, prefix bytes; Node4/Node16 bodies hold the child key bytes in 4/16 bytes, each 8-byte (4 for
  Node4) word byte-reversed; Node48 a 256-byte key -> child slot table (0xFF empty), byte-reversed per
  8 bytes; Node256 a 256-bit little-endian mask; a leaf the 6-byte big-endian high 48 bits of its
  values and an i64 container index), then the containers: number of container arrays i32, and per
  array a trim mark u8 (0xFE), its length i32 and per slot 0 (empty) or 1, container type u8
  (0 run, 1 bitmap, 2 array), cardinality i32 and the body (run: count u16 and (start, length-1) u16
  pairs; bitmap: 1024 u64 words; array: sorted u16 values); then the container count i64 and the
  last first/second-level indices i32, i32. `rbm64_serialize` writes what Java writes for a bitmap
  built by adding its values in ascending order (the path-compressed trie, containers in key order,
  the array grown as `Containers.grow` grows it, a container's kind picked as `runOptimize` picks
  it; checked against the Java source, not against a JVM); `rbm64_deserialize` reads any tree Java
  writes. A union computed by Java keeps its accumulator's container order and kinds, so its bytes
  can differ from ours for the same set; either side reads the other's. rbm32 uses the portable
  RoaringBitmap format (`RoaringBitmap.serialize`, identical to pyroaring's `BitMap.serialize`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.errors import InvalidInputError
from lsmlake.format.row_kind import is_retract
from lsmlake.format.types import (
    BIGINT,
    BOOLEAN,
    CHAR,
    DATE,
    DECIMAL,
    DOUBLE,
    FLOAT,
    INT,
    SMALLINT,
    TIME,
    TIMESTAMP,
    TIMESTAMP_LTZ,
    TINYINT,
    VARBINARY,
    VARCHAR,
    AnyType,
    ArrayType,
    DataType,
    MapType,
    RowType,
)

if TYPE_CHECKING:
    from pyroaring import BitMap, BitMap64

FUNCTIONS = (
    "sum", "product", "count", "min", "max", "last_value", "last_non_null_value", "first_value",
    "first_non_null_value", "listagg", "bool_and", "bool_or", "collect", "merge_map", "nested_update",
    "rbm32", "rbm64",
)
_RETRACTABLE = frozenset({"sum", "product", "count", "last_value", "last_non_null_value", "collect",
                          "merge_map", "nested_update"})

_INT_BITS = {TINYINT: 8, SMALLINT: 16, INT: 32, BIGINT: 64}
_NUMERIC = (TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL)
_ORDERED = (CHAR, VARCHAR, DECIMAL, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DATE, TIME, TIMESTAMP,
            TIMESTAMP_LTZ)


@dataclass(frozen=True)
class FieldAggOptions:
    """Per-field options of an aggregate function (`fields.<field_name>.*` table options)."""

    field_name: str
    ignore_retract: bool = False  # fields.<f>.ignore-retract
    delimiter: str = ","  # fields.<f>.list-agg-delimiter
    distinct: bool = False  # fields.<f>.distinct (collect, listagg)
    nested_keys: tuple[str, ...] = ()  # fields.<f>.nested-key (nested_update)


def supports_retract(function: str) -> bool:
    """Whether the function undoes -U/-D rows (others need `ignore-retract`)."""
    if function not in FUNCTIONS:
        raise InvalidInputError(f"unknown aggregate function {function!r}; known: {', '.join(FUNCTIONS)}")
    return function in _RETRACTABLE


def _atomic(t: AnyType, kinds: tuple[str, ...]) -> bool:
    return isinstance(t, DataType) and t.kind in kinds


_TYPE_RULES: dict[str, tuple[Callable[[AnyType], bool], str]] = {
    "sum": (lambda t: _atomic(t, _NUMERIC), "a numeric type"),
    "product": (lambda t: _atomic(t, _NUMERIC), "a numeric type"),
    "count": (lambda t: _atomic(t, (TINYINT, SMALLINT, INT, BIGINT)), "an integer type"),
    "min": (lambda t: _atomic(t, _ORDERED), "a numeric, character or date/time type"),
    "max": (lambda t: _atomic(t, _ORDERED), "a numeric, character or date/time type"),
    "last_value": (lambda t: True, "any type"),
    "last_non_null_value": (lambda t: True, "any type"),
    "first_value": (lambda t: True, "any type"),
    "first_non_null_value": (lambda t: True, "any type"),
    "listagg": (lambda t: _atomic(t, (VARCHAR,)), "VARCHAR/STRING"),
    "bool_and": (lambda t: _atomic(t, (BOOLEAN,)), "BOOLEAN"),
    "bool_or": (lambda t: _atomic(t, (BOOLEAN,)), "BOOLEAN"),
    "collect": (lambda t: isinstance(t, ArrayType), "ARRAY"),
    "merge_map": (lambda t: isinstance(t, MapType), "MAP"),
    "nested_update": (lambda t: isinstance(t, ArrayType) and isinstance(t.element, RowType), "ARRAY<ROW>"),
    "rbm32": (lambda t: _atomic(t, (VARBINARY,)), "VARBINARY/BYTES"),
    "rbm64": (lambda t: _atomic(t, (VARBINARY,)), "VARBINARY/BYTES"),
}


def validate(function: str, field_type: AnyType, field: str | FieldAggOptions | None = None) -> None:
    """Raise `InvalidInputError` unless `function` is known and applies to `field_type`.

    `field` (a field name or the field's options) only improves the message; with options, the
    nested keys of nested_update are checked against the row type too.
    """
    name = field.field_name if isinstance(field, FieldAggOptions) else field
    where = f" of field {name!r}" if name else ""
    if function not in FUNCTIONS:
        raise InvalidInputError(f"unknown aggregate function {function!r}{where}; "
                                f"known: {', '.join(FUNCTIONS)}")
    ok, needs = _TYPE_RULES[function]
    if not ok(field_type):
        raise InvalidInputError(f"aggregate function {function!r}{where} needs {needs}, "
                                f"not {field_type.sql()}")
    if function == "nested_update" and isinstance(field, FieldAggOptions) and field.nested_keys:
        assert isinstance(field_type, ArrayType) and isinstance(field_type.element, RowType)
        names = [f.name for f in field_type.element.fields]
        missing = [k for k in field.nested_keys if k not in names]
        if missing:
            raise InvalidInputError(f"nested-key {missing} of field {name!r} is not a field of "
                                    f"{field_type.element.sql()}")


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------

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
    if not options.ignore_retract and function not in _RETRACTABLE and retract.any():
        raise InvalidInputError(
            f"aggregate function {function!r} of field {options.field_name!r} does not support retraction "
            f"(-U/-D rows); set 'fields.{options.field_name}.ignore-retract' = 'true' to skip them")
    ctx = _Ctx(function, values, retract, starts_np, field_type, options)
    out = _IMPLS[function](ctx)
    assert len(out) == ctx.G
    return out


# ---------------------------------------------------------------------------------------------
# Grouping helpers
# ---------------------------------------------------------------------------------------------

@dataclass
class _Compact:
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


class _Ctx:
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

    def compact(self, mask: np.ndarray) -> _Compact:
        idx = np.flatnonzero(mask)
        g = self.gid[idx]
        counts = np.bincount(g, minlength=self.G).astype(np.int64)
        starts = np.zeros(self.G, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        return _Compact(idx, g, counts, starts)

    def take(self, rows: np.ndarray) -> pa.Array:
        return self.values.take(pa.array(rows, pa.int64()))

    def error(self, what: str) -> InvalidInputError:
        return InvalidInputError(f"aggregate function {self.function!r} of field "
                                 f"{self.options.field_name!r}: {what}")


def _scatter(G: int, typ: pa.DataType, parts: list[tuple[np.ndarray, pa.Array]]) -> pa.Array:
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


def _np(arr: pa.Array) -> np.ndarray:
    """Numpy values of an array without nulls."""
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def _first_of_run(g: np.ndarray) -> np.ndarray:
    return np.r_[True, g[1:] != g[:-1]] if len(g) else np.zeros(0, dtype=bool)


def _last_of_run(g: np.ndarray) -> np.ndarray:
    return np.r_[g[1:] != g[:-1], True] if len(g) else np.zeros(0, dtype=bool)


def _segment_base(C: np.ndarray, c: _Compact) -> np.ndarray:
    """For prefix sums C over compacted rows: the value before each group starts (0 at the front)."""
    base = np.zeros(len(c.counts), dtype=C.dtype)
    inner = c.present & (c.starts > 0)
    base[inner] = C[c.starts[inner] - 1]
    return base


# ---------------------------------------------------------------------------------------------
# first / last
# ---------------------------------------------------------------------------------------------

def _pick(ctx: _Ctx, mask: np.ndarray, last: bool) -> tuple[np.ndarray, np.ndarray]:
    """(groups, row) of the first/last row of each group within mask."""
    pos = np.flatnonzero(mask)
    g = ctx.gid[pos]
    sel = _last_of_run(g) if last else _first_of_run(g)
    return g[sel], pos[sel]


def _first_value(ctx: _Ctx) -> pa.Array:
    groups, rows = _pick(ctx, ctx.use, last=False)
    return _scatter(ctx.G, ctx.type, [(groups, ctx.take(rows))])


def _first_non_null_value(ctx: _Ctx) -> pa.Array:
    groups, rows = _pick(ctx, ctx.use & ctx.valid, last=False)
    return _scatter(ctx.G, ctx.type, [(groups, ctx.take(rows))])


def _last_value(ctx: _Ctx) -> pa.Array:
    # agg returns the input (null included), retract returns null
    groups, rows = _pick(ctx, ctx.use, last=True)
    keep = ~ctx.retract[rows]
    return _scatter(ctx.G, ctx.type, [(groups[keep], ctx.take(rows[keep]))])


def _last_non_null_value(ctx: _Ctx) -> pa.Array:
    # a null input changes nothing either way; a non-null retraction sets null
    groups, rows = _pick(ctx, ctx.use & ctx.valid, last=True)
    keep = ~ctx.retract[rows]
    return _scatter(ctx.G, ctx.type, [(groups[keep], ctx.take(rows[keep]))])


# ---------------------------------------------------------------------------------------------
# sum / count
# ---------------------------------------------------------------------------------------------

def _int_range(bits: int) -> tuple[int, int]:
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _checked_prefix_sums(ctx: _Ctx, c: _Compact, x: np.ndarray, neg: np.ndarray, bits: int) -> np.ndarray:
    """Totals per present group of the int64 values x (negated where neg); every running total must
    fit `bits` bits."""
    lo, hi = _int_range(bits)
    if bits < 64:
        C = np.cumsum(np.where(neg, -x, x), dtype=np.int64)  # |C| <= n * 2**32: exact
        partial = C - _segment_base(C, c)[c.g]
        if ((partial < lo) | (partial > hi)).any():
            raise ctx.error(f"the running value overflows {ctx.field_type.sql()}")
        return partial[c.last_rows()]
    # 64 bits: split into high and low 32-bit halves (before negating: -MIN wraps), whose prefix
    # sums are exact
    h = x >> 32
    low = x & 0xFFFFFFFF
    h = np.where(neg, -h, h)
    low = np.where(neg, -low, low)
    H = np.cumsum(h)
    L = np.cumsum(low)
    Hp = H - _segment_base(H, c)[c.g]
    Lp = L - _segment_base(L, c)[c.g]
    Hn = Hp + (Lp >> 32)
    Ln = Lp & 0xFFFFFFFF
    if ((Hn < -(1 << 31)) | (Hn > (1 << 31) - 1)).any():
        raise ctx.error(f"the running value overflows {ctx.field_type.sql()}")
    last = c.last_rows()
    return (Hn[last] << 32) | Ln[last]


def _sum(ctx: _Ctx) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    groups = np.flatnonzero(c.present)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    sub = ctx.take(c.idx)
    neg = ctx.retract[c.idx]
    assert isinstance(ctx.field_type, DataType)
    kind = ctx.field_type.kind
    if kind in (FLOAT, DOUBLE):
        x = _np(sub)
        x = np.where(neg, -x, x)
        totals = np.add.reduceat(x, c.first_rows())
        return _scatter(ctx.G, ctx.type, [(groups, pa.array(totals, type=ctx.type))])
    if kind == DECIMAL:
        xo = _decimal_to_ints(sub)
        xo = np.where(neg, -xo, xo)
        C = np.cumsum(xo)
        partial = C - _segment_base(C, c)[c.g]
        if (np.abs(partial) >= 10 ** ctx.field_type.precision).any():
            raise ctx.error(f"the running sum overflows {ctx.field_type.sql()}")
        return _scatter(ctx.G, ctx.type, [(groups, _ints_to_decimal(partial[c.last_rows()], ctx.type))])
    x64 = _np(sub).astype(np.int64)
    totals = _checked_prefix_sums(ctx, c, x64, neg, _INT_BITS[kind])
    return _scatter(ctx.G, ctx.type, [(groups, pa.array(totals, type=ctx.type))])


def _count(ctx: _Ctx) -> pa.Array:
    # FieldCountAgg: agg(null, v) = 0 or 1, retract(null, v) = 0 or -1, then +-1 per non-null value
    c = ctx.compact(ctx.use)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    ones = ctx.valid[c.idx].astype(np.int64)
    assert isinstance(ctx.field_type, DataType)
    totals = _checked_prefix_sums(ctx, c, ones, ctx.retract[c.idx], _INT_BITS[ctx.field_type.kind])
    return _scatter(ctx.G, ctx.type, [(np.flatnonzero(c.present), pa.array(totals, type=ctx.type))])


# ---------------------------------------------------------------------------------------------
# DECIMAL <-> Python ints (object arrays: exact arithmetic, vectorised by numpy)
# ---------------------------------------------------------------------------------------------

def _decimal_to_ints(arr: pa.Array) -> np.ndarray:
    """Unscaled values of a decimal128 array without nulls, as an object array of ints."""
    words = np.frombuffer(arr.buffers()[1], dtype="<u8", count=2 * (arr.offset + len(arr)))[2 * arr.offset:]
    lo = words[0::2].astype(object)
    hi = words[1::2].view("<i8").astype(object)
    out: np.ndarray = hi * (1 << 64) + lo
    return out


def _ints_to_decimal(ints: np.ndarray, typ: pa.DataType) -> pa.Array:
    n = len(ints)
    lo = (ints & ((1 << 64) - 1)).astype(np.uint64)
    hi = (ints >> 64).astype(np.int64)
    words = np.empty(2 * n, dtype="<u8")
    words[0::2] = lo
    words[1::2] = hi.view("<u8")
    return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(words.tobytes())])


def _obj_sign(x: np.ndarray) -> np.ndarray:
    return np.where(np.asarray(x < 0, dtype=bool), -1, 1).astype(object)


# ---------------------------------------------------------------------------------------------
# product
# ---------------------------------------------------------------------------------------------

def _product(ctx: _Ctx) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    assert isinstance(ctx.field_type, DataType)
    kind = ctx.field_type.kind
    sub = ctx.take(c.idx)
    x: np.ndarray = _decimal_to_ints(sub) if kind == DECIMAL else _np(sub)
    if kind in _INT_BITS:
        x = x.astype(np.int64)
    has_retract = np.bincount(c.g, weights=ctx.retract[c.idx], minlength=ctx.G) > 0
    stepped = c.present & (has_retract | (kind == DECIMAL))
    fast = c.present & ~stepped
    parts: list[tuple[np.ndarray, pa.Array]] = []
    if fast.any():
        rows = fast[c.g]
        fc = _Compact(np.flatnonzero(rows), c.g[rows], np.where(fast, c.counts, 0), np.zeros(ctx.G, np.int64))
        np.cumsum(fc.counts[:-1], out=fc.starts[1:])
        xf = x[rows]
        if kind in (FLOAT, DOUBLE):
            totals = np.multiply.reduceat(xf, fc.first_rows())
        else:
            totals = _int_product(ctx, fc, xf, _INT_BITS[kind])
        parts.append((np.flatnonzero(fast), pa.array(totals, type=ctx.type)))
    if stepped.any():
        groups, acc, has = _product_stepped(ctx, c, np.flatnonzero(stepped), x, kind)
        vals = _ints_to_decimal(acc[has], ctx.type) if kind == DECIMAL else pa.array(acc[has], type=ctx.type)
        parts.append((groups[has], vals))
    return _scatter(ctx.G, ctx.type, parts)


def _int_product(ctx: _Ctx, c: _Compact, x: np.ndarray, bits: int) -> np.ndarray:
    """Products of int64 values per present group, raising if any running product overflows.

    Non-zero integers have |x| >= 1, so the running product only grows in magnitude until the first
    zero: it overflows somewhere iff the product of the values before the first zero does, except when
    that product is the most negative value (see below).
    """
    G = len(c.counts)
    pos = np.arange(len(x))
    zero = x == 0
    first_zero = np.full(G, np.iinfo(np.int64).max, dtype=np.int64)
    zg = c.g[zero]
    zp = pos[zero]
    f = _first_of_run(zg)
    first_zero[zg[f]] = zp[f]
    before = pos < first_zero[c.g]
    sx = x[before]
    sg = c.g[before]
    seg_counts = np.bincount(sg, minlength=G)
    has_seg = seg_counts > 0
    log_mag = np.bincount(sg, weights=np.log2(np.abs(sx.astype(np.float64))), minlength=G)
    negative = (np.bincount(sg, weights=(sx < 0), minlength=G).astype(np.int64) % 2) == 1
    seg_starts = np.zeros(G, dtype=np.int64)
    np.cumsum(seg_counts[:-1], out=seg_starts[1:])
    wrapped = np.zeros(G, dtype=np.int64)  # the product mod 2**64
    if has_seg.any():
        wrapped[has_seg] = np.multiply.reduceat(sx, seg_starts[has_seg])
    lim = bits - 1
    over = has_seg & (log_mag > lim + 1)
    band = has_seg & (log_mag >= lim - 1) & ~over
    if bits < 64:  # in the band |product| < 2**33: wrapped is exact
        lo, hi = _int_range(bits)
        over |= band & ((wrapped < lo) | (wrapped > hi))
    else:  # wrapped equals the product iff it has its sign and magnitude
        wrapped_f = wrapped.astype(np.float64)
        with np.errstate(divide="ignore"):
            lr = np.log2(np.abs(wrapped_f))
        bad = (wrapped == 0) | ((wrapped_f < 0) != negative) | (np.abs(lr - log_mag) > 1e-6)
        over |= band & bad
    # A product that ends at the most negative value can have passed its positive twin on the way (2 * 64 =
    # 128 overflows TINYINT before * -1 brings it back to -128): such rare groups are replayed step by step.
    lo, hi = _int_range(bits)
    for g in np.flatnonzero(has_seg & ~over & (wrapped == lo)):
        running = 1
        for v in sx[sg == g].tolist():
            running *= v
            if not lo <= running <= hi:
                over[g] = True
                break
    if over.any():
        raise ctx.error(f"the running product overflows {ctx.field_type.sql()}")
    p = c.present
    return np.where(first_zero[p] < np.iinfo(np.int64).max, 0, wrapped[p])


def _product_stepped(ctx: _Ctx, c: _Compact, groups: np.ndarray, x: np.ndarray,
                     kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold the given groups position by position (all groups advance one row per step)."""
    lens = c.counts[groups]
    order = np.argsort(-lens, kind="stable")
    grp = groups[order]
    lens = lens[order]
    acc = np.zeros(len(grp), dtype=x.dtype)
    has = np.zeros(len(grp), dtype=bool)
    mul, div = _product_ops(ctx, kind)
    neg_lens = -lens
    for k in range(int(lens[0]) if len(lens) else 0):
        na = int(np.searchsorted(neg_lens, -k, side="left"))  # groups with more than k rows
        rows = c.starts[grp[:na]] + k
        xv = x[rows]
        rv = ctx.retract[c.idx[rows]]
        a = acc[:na].copy()
        h = has[:na]
        init = ~rv & ~h
        m = ~rv & h
        d = rv & h  # a retraction on a null accumulator keeps it null
        a[init] = xv[init]
        if m.any():
            a[m] = mul(acc[:na][m], xv[m])
        if d.any():
            a[d] = div(acc[:na][d], xv[d])
        acc[:na] = a
        has[:na] = h | init
    return grp, acc, has


def _product_ops(ctx: _Ctx, kind: str) -> tuple[Callable[[np.ndarray, np.ndarray], np.ndarray],
                                                   Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    what = ctx.field_type.sql()

    if kind in (FLOAT, DOUBLE):
        def fmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            with np.errstate(all="ignore"):
                return a * b

        def fdiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            with np.errstate(all="ignore"):
                return a / b
        return fmul, fdiv

    if kind == DECIMAL:
        assert isinstance(ctx.field_type, DataType)
        scale = ctx.field_type.scale
        bound = 10 ** ctx.field_type.precision
        ten_s = 10 ** scale

        def dmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            p = a * b  # scale 2s, rounded HALF_UP to scale s
            q = _obj_sign(p) * ((np.abs(p) * 2 + ten_s) // (2 * ten_s))
            if (np.abs(q) >= bound).any():
                raise ctx.error(f"the running product overflows {what}")
            return q

        def ddiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            if np.asarray(b == 0, dtype=bool).any():
                raise ctx.error("a retraction divides by zero")
            num = np.abs(a)
            den = np.abs(b)
            rest = den // np.gcd(num, den)  # BigDecimal.divide: the quotient must terminate
            for prime in (2, 5):
                while True:
                    m = np.asarray(rest % prime == 0, dtype=bool)
                    if not m.any():
                        break
                    rest[m] = rest[m] // prime
            if np.asarray(rest != 1, dtype=bool).any():
                raise ctx.error("a retraction gives a non-terminating decimal quotient")
            q = _obj_sign(a) * _obj_sign(b) * ((num * ten_s * 2 + den) // (2 * den))
            if (np.abs(q) >= bound).any():
                raise ctx.error(f"the running product overflows {what}")
            return q
        return dmul, ddiv

    bits = _INT_BITS[kind]
    lo, hi = _int_range(bits)

    def imul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        p = a * b  # wraps for 64 bits
        if bits < 64:
            bad = (p < lo) | (p > hi)
        else:
            f = a.astype(np.float64) * b.astype(np.float64)
            big = np.abs(f) >= 2.0 ** 62
            pf = p.astype(np.float64)
            bad = big & ((p == 0) | ((pf < 0) != (f < 0)) | (np.abs(pf - f) > 1e-6 * np.abs(f)))
        if bad.any():
            raise ctx.error(f"the running product overflows {what}")
        return p

    def idiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if (b == 0).any():
            raise ctx.error("a retraction divides by zero")
        if ((a == lo) & (b == -1)).any():
            raise ctx.error(f"the running product overflows {what}")
        q = a // b  # floor; Java truncates towards zero
        q = q + (((a - q * b) != 0) & ((a < 0) != (b < 0)))
        return q
    return imul, idiv


# ---------------------------------------------------------------------------------------------
# min / max / bool
# ---------------------------------------------------------------------------------------------

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


def _min_max(ctx: _Ctx, is_max: bool) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    groups = np.flatnonzero(c.present)
    sub = ctx.take(c.idx)
    assert isinstance(ctx.field_type, DataType)
    if ctx.field_type.kind in (FLOAT, DOUBLE):
        keys, width = _float_keys(_np(sub))
        red = np.maximum if is_max else np.minimum
        best = red.reduceat(keys, c.first_rows())
        return _scatter(ctx.G, ctx.type, [(groups, pa.array(_float_from_keys(best, width), type=ctx.type))])
    table = pa.table({"g": pa.array(c.g, pa.int64()), "v": sub})
    order = _np(pc.sort_indices(table, sort_keys=[("g", "ascending"), ("v", "ascending")]))
    sorted_g = c.g[order]
    pick = order[_last_of_run(sorted_g) if is_max else _first_of_run(sorted_g)]
    return _scatter(ctx.G, ctx.type, [(groups, sub.take(pa.array(pick, pa.int64())))])


def _bool(ctx: _Ctx, is_and: bool) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    trues = np.bincount(c.g, weights=_np(ctx.take(c.idx)).astype(np.float64), minlength=ctx.G)
    p = c.present
    out = trues[p] == c.counts[p] if is_and else trues[p] > 0
    return _scatter(ctx.G, ctx.type, [(np.flatnonzero(p), pa.array(out, pa.bool_()))])


# ---------------------------------------------------------------------------------------------
# listagg
# ---------------------------------------------------------------------------------------------

def _list_array(offsets: np.ndarray, flat: pa.Array, typ: pa.DataType) -> pa.Array:
    if pa.types.is_large_list(typ):
        return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), flat, type=typ)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat, type=typ)


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _listagg(ctx: _Ctx) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    d = ctx.options.delimiter
    strs = ctx.take(c.idx)
    nonempty = _np(pc.binary_length(strs)) > 0
    ne_rows = np.flatnonzero(nonempty)
    ne_g = c.g[ne_rows]
    ne_strs = strs.take(pa.array(ne_rows, pa.int64()))
    if not ctx.options.distinct:
        elem_g, elems = ne_g, ne_strs
    else:
        head = _first_of_run(ne_g)
        if d:
            tokens = pc.split_pattern(ne_strs, d)
            flat = pc.list_flatten(tokens)
            parent = np.repeat(np.arange(len(ne_strs)), _np(pc.list_value_length(tokens)).astype(np.int64))
        else:
            flat, parent = ne_strs, np.arange(len(ne_strs))
        tg = ne_g[parent]
        pos = np.arange(len(flat))
        first = _first_positions(tg, flat, pos)
        keep = np.zeros(len(flat), dtype=bool)
        keep[first] = True
        keep &= ~head[parent] & (_np(pc.binary_length(flat)) > 0)
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
    return _scatter(ctx.G, ctx.type, [(np.flatnonzero(p), joined)])


def _first_positions(g: np.ndarray, col: pa.Array, pos: np.ndarray) -> np.ndarray:
    """Positions (ascending) of the first occurrence of each distinct (group, value)."""
    if len(pos) == 0:
        return pos
    t = pa.table({"g": pa.array(g, pa.int64()), "e": col, "p": pa.array(pos, pa.int64())})
    agg = t.group_by(["g", "e"], use_threads=False).aggregate([("p", "min")])
    return np.sort(_np(agg.column("p_min")))


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


def _fold_groups(ctx: _Ctx, c: _Compact, groups_mask: np.ndarray, agg: Callable[[Any, Any], Any],
                 retract: Callable[[Any, Any], Any]) -> tuple[np.ndarray, pa.Array]:
    """Fold the non-null rows of the selected groups in Python, one group at a time."""
    rows = groups_mask[c.g]
    idx = c.idx[rows]
    g = c.g[rows]
    py = ctx.take(idx).to_pylist()
    retr = ctx.retract[idx]
    bounds = np.append(np.flatnonzero(_first_of_run(g)), len(g))
    results = []
    for b in range(len(bounds) - 1):  # one iteration per group (see the module docstring)
        acc = None
        for j in range(int(bounds[b]), int(bounds[b + 1])):
            acc = retract(acc, py[j]) if retr[j] else agg(acc, py[j])
        results.append(acc)
    return g[bounds[:-1]], pa.array(results, type=ctx.type)


def _has_retract(ctx: _Ctx, c: _Compact) -> np.ndarray:
    return np.bincount(c.g, weights=ctx.retract[c.idx], minlength=ctx.G) > 0


def _flatten_lists(arrs: pa.Array, g: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    flat = pc.list_flatten(arrs)
    lens = _np(pc.list_value_length(arrs)).astype(np.int64)
    return flat, np.repeat(g, lens)


def _collect(ctx: _Ctx) -> pa.Array:
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
    return _scatter(ctx.G, ctx.type, parts)


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


def _merge_map(ctx: _Ctx) -> pa.Array:
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
        off = _np(maps.offsets).astype(np.int64)
        keys = maps.keys.slice(off[0], off[-1] - off[0])
        items = maps.items.slice(off[0], off[-1] - off[0])
        eg = np.repeat(c.g[rows], np.diff(off))
        pos = np.arange(len(keys))
        t = pa.table({"g": pa.array(eg, pa.int64()), "k": keys, "p": pa.array(pos, pa.int64())})
        res = t.group_by(["g", "k"], use_threads=False).aggregate([("p", "min"), ("p", "max")])
        rg = _np(res.column("g"))
        order = np.lexsort((_np(res.column("p_min")), rg))
        take = pa.array(_np(res.column("p_max"))[order], pa.int64())
        counts = np.bincount(rg, minlength=ctx.G)[multi]
        merged = pa.MapArray.from_arrays(pa.array(_offsets(counts), pa.int32()), keys.take(take),
                                         items.take(take), type=ctx.type)
        parts.append((np.flatnonzero(multi), merged))
    if slow.any():
        parts.append(_fold_groups(ctx, c, slow, _map_agg, _map_retract))
    return _scatter(ctx.G, ctx.type, parts)


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


def _nested_update(ctx: _Ctx) -> pa.Array:
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
            rg = _np(res.column("g"))
            order = np.lexsort((_np(res.column("p_min")), rg))
            flat = flat.take(pa.array(_np(res.column("p_max"))[order], pa.int64()))
            eg = rg[order]
        counts = np.bincount(eg, minlength=ctx.G)[multi]
        parts.append((np.flatnonzero(multi), _list_array(_offsets(counts), flat, ctx.type)))
    if slow.any():
        parts.append(_fold_groups(ctx, c, slow, *_nested_fns(keys)))
    return _scatter(ctx.G, ctx.type, parts)


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


# ---------------------------------------------------------------------------------------------
# rbm32 / rbm64
# ---------------------------------------------------------------------------------------------

def _rbm(ctx: _Ctx, bits: int) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    single = c.counts == 1
    multi = c.counts > 1
    parts = []
    if single.any():  # agg(null, b) returns b itself
        parts.append((np.flatnonzero(single), ctx.take(c.idx[c.starts[single]])))
    if multi.any():
        rows = multi[c.g]
        blobs = ctx.take(c.idx[rows]).to_pylist()
        g = c.g[rows]
        bounds = np.append(np.flatnonzero(_first_of_run(g)), len(g))
        out = []
        for b in range(len(bounds) - 1):  # one pyroaring union per key (see the module docstring)
            group = blobs[int(bounds[b]):int(bounds[b + 1])]
            try:
                if bits == 32:
                    out.append(rbm32_serialize(_union32([rbm32_deserialize(x) for x in group])))
                else:
                    out.append(rbm64_serialize(_union64([rbm64_deserialize(x) for x in group])))
            except (ValueError, InvalidInputError) as e:
                raise ctx.error(f"a value is not a serialized {bits}-bit roaring bitmap: {e}") from e
        parts.append((np.flatnonzero(multi), pa.array(out, type=ctx.type)))
    return _scatter(ctx.G, ctx.type, parts)


def _union32(bms: list[BitMap]) -> BitMap:
    from pyroaring import BitMap

    return BitMap.union(*bms) if len(bms) > 1 else BitMap(bms[0])


def _union64(bms: list[BitMap64]) -> BitMap64:
    from pyroaring import BitMap64

    return BitMap64.union(*bms) if len(bms) > 1 else BitMap64(bms[0])


def rbm32_serialize(bitmap: BitMap) -> bytes:
    """Paimon's `RoaringBitmap32.serialize`: run-optimise, then the portable RoaringBitmap format."""
    from pyroaring import BitMap

    bm = BitMap(bitmap)
    bm.run_optimize()
    return bytes(bm.serialize())


def rbm32_deserialize(data: bytes) -> BitMap:
    from pyroaring import BitMap

    try:
        return BitMap.deserialize(bytes(data))
    except Exception as e:  # pyroaring raises ValueError/OverflowError on bad bytes
        raise InvalidInputError(f"not a serialized 32-bit roaring bitmap: {e}") from e


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(bytes(data))
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise InvalidInputError("truncated 64-bit roaring bitmap")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]


_NODE4, _NODE16, _NODE48, _NODE256, _LEAF = range(5)
_NODE_BODY = {_NODE4: 4, _NODE16: 16, _NODE48: 256, _NODE256: 32}


def _read_node(r: _Reader, leaves: list[tuple[int, int]], depth: int) -> None:
    ntype = r.unpack("<B")
    count = r.unpack("<h")
    prefix_len = r.unpack("<b")
    if prefix_len > 0:
        r.take(prefix_len)
    if ntype == _LEAF:
        key = int.from_bytes(r.take(6), "big")
        leaves.append((key, r.unpack("<q")))
        return
    if ntype not in _NODE_BODY or not 0 < count <= 256 or depth > 6:
        raise InvalidInputError(f"bad ART node (type {ntype}, {count} children) in a 64-bit roaring bitmap")
    r.take(_NODE_BODY[ntype])  # the child keys: the leaves carry their whole keys
    for _ in range(count):
        _read_node(r, leaves, depth + 1)


def _read_container(r: _Reader, ctype: int, card: int) -> np.ndarray:
    if ctype == 0:  # run: count, then (start, length - 1) pairs
        nruns = r.unpack("<H")
        pairs = np.frombuffer(r.take(4 * nruns), dtype="<u2").astype(np.int64)
        starts, lens = pairs[0::2], pairs[1::2] + 1
        total = int(lens.sum())
        within = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
        return (np.repeat(starts, lens) + within).astype(np.uint64)
    if ctype == 1:  # bitmap: 1024 little-endian words
        bitsarr = np.unpackbits(np.frombuffer(r.take(8192), dtype=np.uint8), bitorder="little")
        return np.flatnonzero(bitsarr).astype(np.uint64)
    if ctype == 2:  # array: sorted values
        if card < 0:
            raise InvalidInputError("bad container cardinality in a 64-bit roaring bitmap")
        return np.frombuffer(r.take(2 * card), dtype="<u2").astype(np.uint64)
    raise InvalidInputError(f"bad container type {ctype} in a 64-bit roaring bitmap")


def rbm64_deserialize(data: bytes) -> BitMap64:
    """Read Java's `Roaring64Bitmap.serialize` bytes (the format Paimon's rbm64 stores)."""
    from pyroaring import BitMap64

    r = _Reader(data)
    tag = r.unpack("<B")
    if tag == 0:
        return BitMap64()
    if tag != 1:
        raise InvalidInputError(f"bad 64-bit roaring bitmap tag {tag}")
    key_count = r.unpack("<q")
    leaves: list[tuple[int, int]] = []
    _read_node(r, leaves, 0)
    if len(leaves) != key_count:
        raise InvalidInputError(f"64-bit roaring bitmap: {len(leaves)} leaves but {key_count} keys")
    containers: dict[int, np.ndarray] = {}
    for first in range(r.unpack("<i")):
        r.take(1)  # trim mark
        for second in range(r.unpack("<i")):
            mark = r.unpack("<B")
            if mark == 0:
                continue
            if mark != 1:
                raise InvalidInputError(f"bad container mark {mark} in a 64-bit roaring bitmap")
            ctype = r.unpack("<B")
            card = r.unpack("<i")
            containers[(first << 32) | second] = _read_container(r, ctype, card)
    r.unpack("<q")
    r.unpack("<i")
    r.unpack("<i")
    parts = []
    for key, idx in leaves:
        if idx not in containers:
            raise InvalidInputError(f"64-bit roaring bitmap: leaf points to missing container {idx}")
        parts.append((np.uint64(key) << np.uint64(16)) | containers[idx])
    if not parts:
        return BitMap64()
    return BitMap64(np.concatenate(parts))


def _java_capacity(n: int) -> int:
    """Length of Java's `Containers` array after n additions (`Containers.grow`)."""
    cap = 1
    for k in range(2, n + 1):
        if k > cap:
            cap = max(cap + (cap >> 1), k)
    return cap


def _write_container(lows: np.ndarray) -> bytes:
    card = len(lows)
    breaks = np.flatnonzero(np.diff(lows.astype(np.int64)) != 1)
    nruns = len(breaks) + 1
    other = 2 * card if card <= 4096 else 8192
    if 2 + 4 * nruns < other:  # runOptimize: a run container only when strictly smaller
        starts = lows[np.r_[0, breaks + 1]]
        ends = lows[np.r_[breaks, card - 1]]
        pairs = np.empty(2 * nruns, dtype="<u2")
        pairs[0::2] = starts
        pairs[1::2] = ends - starts
        return struct.pack("<Bi", 0, card) + struct.pack("<H", nruns) + pairs.tobytes()
    if card <= 4096:
        return struct.pack("<Bi", 2, card) + lows.astype("<u2").tobytes()
    bitsarr = np.zeros(65536, dtype=bool)
    bitsarr[lows] = True
    return struct.pack("<Bi", 1, card) + np.packbits(bitsarr, bitorder="little").tobytes()


def _write_art(out: bytearray, keys: list[bytes], lo: int, hi: int, depth: int) -> None:
    if hi - lo == 1:
        out += bytes([_LEAF, 0, 0, 0]) + keys[lo] + struct.pack("<q", lo)
        return
    first, last = keys[lo], keys[hi - 1]
    p = 0
    while first[depth + p] == last[depth + p]:
        p += 1
    split = depth + p
    child_bytes: list[int] = []
    ranges: list[tuple[int, int]] = []
    i = lo
    while i < hi:
        b = keys[i][split]
        j = i + 1
        while j < hi and keys[j][split] == b:
            j += 1
        child_bytes.append(b)
        ranges.append((i, j))
        i = j
    count = len(child_bytes)
    ntype = _NODE4 if count <= 4 else _NODE16 if count <= 16 else _NODE48 if count <= 48 else _NODE256
    out += struct.pack("<BhB", ntype, count, p) + first[depth:split]
    if ntype in (_NODE4, _NODE16):
        width = 4 if ntype == _NODE4 else 16
        slots = child_bytes + [0] * (width - count)
        for w in range(0, width, min(width, 8)):
            out += bytes(reversed(slots[w:w + min(width, 8)]))
    elif ntype == _NODE48:
        table = [0xFF] * 256
        for rank, b in enumerate(child_bytes):
            table[b] = rank
        for w in range(0, 256, 8):
            out += bytes(reversed(table[w:w + 8]))
    else:
        mask = np.zeros(256, dtype=bool)
        mask[child_bytes] = True
        out += np.packbits(mask, bitorder="little").tobytes()
    for a, b in ranges:
        _write_art(out, keys, a, b, split + 1)


def rbm64_serialize(bitmap: BitMap64) -> bytes:
    """Write a bitmap as Java's `Roaring64Bitmap.serialize` does after `runOptimize()`."""
    vals = np.frombuffer(bitmap.to_array(), dtype=np.uint64)
    if len(vals) == 0:
        return b"\x00"
    highs = vals >> np.uint64(16)
    lows = (vals & np.uint64(0xFFFF)).astype(np.uint16)
    uniq, first = np.unique(highs, return_index=True)
    bounds = np.append(first, len(vals))
    keys = [int(h).to_bytes(6, "big") for h in uniq]
    n = len(keys)
    out = bytearray(struct.pack("<Bq", 1, n))
    _write_art(out, keys, 0, n, 0)
    cap = _java_capacity(n)
    out += struct.pack("<iBi", 1, 0xFE, cap)
    for i in range(n):
        out += b"\x01" + _write_container(lows[bounds[i]:bounds[i + 1]])
    out += b"\x00" * (cap - n)
    out += struct.pack("<qii", n, 0, n - 1)
    return bytes(out)


_IMPLS: dict[str, Callable[[_Ctx], pa.Array]] = {
    "sum": _sum,
    "product": _product,
    "count": _count,
    "min": lambda ctx: _min_max(ctx, is_max=False),
    "max": lambda ctx: _min_max(ctx, is_max=True),
    "last_value": _last_value,
    "last_non_null_value": _last_non_null_value,
    "first_value": _first_value,
    "first_non_null_value": _first_non_null_value,
    "listagg": _listagg,
    "bool_and": lambda ctx: _bool(ctx, is_and=True),
    "bool_or": lambda ctx: _bool(ctx, is_and=False),
    "collect": _collect,
    "merge_map": _merge_map,
    "nested_update": _nested_update,
    "rbm32": lambda ctx: _rbm(ctx, 32),
    "rbm64": lambda ctx: _rbm(ctx, 64),
}

__all__ = ["FUNCTIONS", "FieldAggOptions", "aggregate", "rbm32_deserialize", "rbm32_serialize",
           "rbm64_deserialize", "rbm64_serialize", "supports_retract", "validate"]

