"""sum, count and product: exact integer and DECIMAL arithmetic with Java's overflow errors, and
FLOAT/DOUBLE arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lsmlake.format.types import BIGINT, DECIMAL, DOUBLE, FLOAT, INT, SMALLINT, TINYINT, DataType
from lsmlake.mergetree.merge.aggregators.groups import (
    AggContext,
    Compact,
    first_of_run,
    scatter,
    segment_base,
    to_numpy,
)

_INT_BITS = {TINYINT: 8, SMALLINT: 16, INT: 32, BIGINT: 64}

def _int_range(bits: int) -> tuple[int, int]:
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _checked_prefix_sums(ctx: AggContext, c: Compact, x: np.ndarray, neg: np.ndarray, bits: int) -> np.ndarray:
    """Totals per present group of the int64 values x (negated where neg); every running total must
    fit `bits` bits."""
    lo, hi = _int_range(bits)
    if bits < 64:
        C = np.cumsum(np.where(neg, -x, x), dtype=np.int64)  # |C| <= n * 2**32: exact
        partial = C - segment_base(C, c)[c.g]
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
    Hp = H - segment_base(H, c)[c.g]
    Lp = L - segment_base(L, c)[c.g]
    Hn = Hp + (Lp >> 32)
    Ln = Lp & 0xFFFFFFFF
    if ((Hn < -(1 << 31)) | (Hn > (1 << 31) - 1)).any():
        raise ctx.error(f"the running value overflows {ctx.field_type.sql()}")
    last = c.last_rows()
    return (Hn[last] << 32) | Ln[last]


def agg_sum(ctx: AggContext) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    groups = np.flatnonzero(c.present)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    sub = ctx.take(c.idx)
    neg = ctx.retract[c.idx]
    assert isinstance(ctx.field_type, DataType)
    kind = ctx.field_type.kind
    if kind in (FLOAT, DOUBLE):
        x = to_numpy(sub)
        x = np.where(neg, -x, x)
        totals = np.add.reduceat(x, c.first_rows())
        return scatter(ctx.G, ctx.type, [(groups, pa.array(totals, type=ctx.type))])
    if kind == DECIMAL:
        xo = _decimal_to_ints(sub)
        xo = np.where(neg, -xo, xo)
        C = np.cumsum(xo)
        partial = C - segment_base(C, c)[c.g]
        if (np.abs(partial) >= 10 ** ctx.field_type.precision).any():
            raise ctx.error(f"the running sum overflows {ctx.field_type.sql()}")
        return scatter(ctx.G, ctx.type, [(groups, _ints_to_decimal(partial[c.last_rows()], ctx.type))])
    x64 = to_numpy(sub).astype(np.int64)
    totals = _checked_prefix_sums(ctx, c, x64, neg, _INT_BITS[kind])
    return scatter(ctx.G, ctx.type, [(groups, pa.array(totals, type=ctx.type))])


def agg_count(ctx: AggContext) -> pa.Array:
    # FieldCountAgg: agg(null, v) = 0 or 1, retract(null, v) = 0 or -1, then +-1 per non-null value
    c = ctx.compact(ctx.use)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    ones = ctx.valid[c.idx].astype(np.int64)
    assert isinstance(ctx.field_type, DataType)
    totals = _checked_prefix_sums(ctx, c, ones, ctx.retract[c.idx], _INT_BITS[ctx.field_type.kind])
    return scatter(ctx.G, ctx.type, [(np.flatnonzero(c.present), pa.array(totals, type=ctx.type))])


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

def agg_product(ctx: AggContext) -> pa.Array:
    c = ctx.compact(ctx.use & ctx.valid)
    if len(c.idx) == 0:
        return pa.nulls(ctx.G, ctx.type)
    assert isinstance(ctx.field_type, DataType)
    kind = ctx.field_type.kind
    sub = ctx.take(c.idx)
    x: np.ndarray = _decimal_to_ints(sub) if kind == DECIMAL else to_numpy(sub)
    if kind in _INT_BITS:
        x = x.astype(np.int64)
    has_retract = np.bincount(c.g, weights=ctx.retract[c.idx], minlength=ctx.G) > 0
    stepped = c.present & (has_retract | (kind == DECIMAL))
    fast = c.present & ~stepped
    parts: list[tuple[np.ndarray, pa.Array]] = []
    if fast.any():
        rows = fast[c.g]
        fc = Compact(np.flatnonzero(rows), c.g[rows], np.where(fast, c.counts, 0), np.zeros(ctx.G, np.int64))
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
    return scatter(ctx.G, ctx.type, parts)


def _int_product(ctx: AggContext, c: Compact, x: np.ndarray, bits: int) -> np.ndarray:
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
    f = first_of_run(zg)
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


def _product_stepped(ctx: AggContext, c: Compact, groups: np.ndarray, x: np.ndarray,
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


def _product_ops(ctx: AggContext, kind: str) -> tuple[Callable[[np.ndarray, np.ndarray], np.ndarray],
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
