"""`lsmlake.mergetree.merge.aggregators` against a plain-Python, row-by-row model of Paimon's Java aggregators.

Each model below restates one Java `Field*Agg` class (agg / retract on a nullable accumulator); the
property tests feed random keys with nulls and (where the function supports it) retractions to both
and compare. Where Java's result order is unspecified (HashMap/HashSet) the model uses the order
lsmlake documents: first appearance.
"""

from __future__ import annotations

import decimal
import math
import struct
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap, BitMap64

from lsmlake.errors import InvalidInputError
from lsmlake.format.types import parse_type, to_arrow_type
from lsmlake.mergetree.merge.aggregators import (
    FUNCTIONS,
    FieldAggOptions,
    aggregate,
    rbm32_deserialize,
    rbm32_serialize,
    rbm64_deserialize,
    rbm64_serialize,
    supports_retract,
    validate,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
decimal.getcontext().prec = 120

RETRACTABLE = {"sum", "product", "count", "last_value", "last_non_null_value", "collect", "merge_map",
               "nested_update"}


class JavaError(Exception):
    """What the Java aggregator would throw (overflow, division by zero); lsmlake raises InvalidInputError."""


# ---------------------------------------------------------------------------------------------
# Running both sides
# ---------------------------------------------------------------------------------------------

Row = tuple[int, Any]


def run(function: str, type_sql: str, groups: list[list[Row]], **opts: Any) -> list[Any]:
    ft = parse_type(type_sql)
    flat = [v for grp in groups for _, v in grp]
    kinds = np.array([k for grp in groups for k, _ in grp], dtype=np.int8)
    sizes = [len(g) for g in groups]
    starts = np.cumsum([0] + sizes[:-1]).astype(np.int64) if groups else np.zeros(0, np.int64)
    values = pa.array(flat, type=to_arrow_type(ft))
    out = aggregate(function, values, kinds, starts, ft, FieldAggOptions("f", **opts))
    assert out.type == values.type and len(out) == len(groups)
    return out.to_pylist()


def model(make: Callable[[], Any], rows: list[Row], ignore_retract: bool = False) -> Any:
    m = make()
    acc = None
    for kind, v in rows:
        if kind in (1, 3):
            if ignore_retract:
                continue
            acc = m.retract(acc, v)
        else:
            acc = m.agg(acc, v)
    return acc


def check(function: str, type_sql: str, groups: list[list[Row]], make: Callable[[], Any],
          same: Callable[[Any, Any], bool] | None = None, **opts: Any) -> None:
    try:
        expected = [model(make, g, opts.get("ignore_retract", False)) for g in groups]
    except JavaError:
        with pytest.raises(InvalidInputError):
            run(function, type_sql, groups, **opts)
        return
    got = run(function, type_sql, groups, **opts)
    eq = same or (lambda a, b: a == b)
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert eq(a, b), f"group {i}: got {a!r}, model {b!r}; rows {groups[i]!r}"


def groups_of(values: st.SearchStrategy[Any], kinds: list[int] | None = None, max_rows: int = 6,
              max_groups: int = 6) -> st.SearchStrategy[list[list[Row]]]:
    row = st.tuples(st.sampled_from(kinds or [0, 2]), values)
    return st.lists(st.lists(row, min_size=1, max_size=max_rows), max_size=max_groups)


ALL_KINDS = [0, 1, 2, 3]


def kinds_for(function: str) -> list[int]:
    return ALL_KINDS if function in RETRACTABLE else [0, 2]


# ---------------------------------------------------------------------------------------------
# Models of the Java aggregators
# ---------------------------------------------------------------------------------------------

INT_RANGES = {"TINYINT": 8, "SMALLINT": 16, "INT": 32, "BIGINT": 64}


def int_check(type_sql: str) -> Callable[[int], int]:
    bits = INT_RANGES[type_sql]

    def f(v: int) -> int:
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            raise JavaError("overflow")
        return v
    return f


def decimal_check(precision: int, scale: int) -> Callable[[Decimal], Decimal]:
    def f(v: Decimal) -> Decimal:
        q = v.quantize(Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP)
        if abs(q) >= Decimal(10) ** (precision - scale):
            raise JavaError("decimal overflow")  # Java: null; lsmlake: an error
        return q
    return f


def float_arith(type_sql: str) -> Callable[[Any], Any]:
    return np.float32 if type_sql == "FLOAT" else np.float64


class SumModel:
    def __init__(self, fix: Callable[[Any], Any]) -> None:
        self.fix = fix

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return v if acc is None else acc
        return self.fix(acc + v)

    def retract(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return self.fix(-v) if acc is None and v is not None else acc
        return self.fix(acc - v)


class ProductModel:
    def __init__(self, kind: str, fix: Callable[[Any], Any]) -> None:
        self.kind = kind
        self.fix = fix

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return v if acc is None else acc
        if self.kind == "float":
            with np.errstate(all="ignore"):
                return self.fix(self.fix(acc) * self.fix(v))
        return self.fix(acc * v)

    def retract(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return acc
        if self.kind == "int":
            if v == 0:
                raise JavaError("/ by zero")
            q = abs(acc) // abs(v)
            return self.fix(q if (acc < 0) == (v < 0) else -q)
        if self.kind == "decimal":
            if v == 0:
                raise JavaError("/ by zero")
            exact = Fraction(acc) / Fraction(v)
            den = exact.denominator
            for p in (2, 5):
                while den % p == 0:
                    den //= p
            if den != 1:
                raise JavaError("non-terminating decimal expansion")
            return self.fix(Decimal(exact.numerator) / Decimal(exact.denominator))
        with np.errstate(all="ignore"):
            return self.fix(self.fix(acc) / self.fix(v))


class CountModel:  # FieldCountAgg
    def __init__(self, fix: Callable[[int], int]) -> None:
        self.fix = fix

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return (0 if v is None else 1) if acc is None else acc
        return self.fix(acc + 1)

    def retract(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return (0 if v is None else -1) if acc is None else acc
        return self.fix(acc - 1)


class MinMaxModel:
    def __init__(self, is_max: bool, key: Callable[[Any], Any]) -> None:
        self.is_max = is_max
        self.key = key

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return v if acc is None else acc
        if self.is_max:
            return v if self.key(acc) < self.key(v) else acc
        return acc if self.key(acc) < self.key(v) else v


class LastValueModel:
    def agg(self, acc: Any, v: Any) -> Any:
        return v

    def retract(self, acc: Any, v: Any) -> Any:
        return None


class LastNonNullModel:
    def agg(self, acc: Any, v: Any) -> Any:
        return acc if v is None else v

    def retract(self, acc: Any, v: Any) -> Any:
        return None if v is not None else acc


class FirstValueModel:
    def __init__(self, non_null: bool) -> None:
        self.non_null = non_null
        self.initialized = False

    def agg(self, acc: Any, v: Any) -> Any:
        if not self.initialized and (v is not None or not self.non_null):
            self.initialized = True
            return v
        return acc


class BoolModel:
    def __init__(self, is_and: bool) -> None:
        self.is_and = is_and

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return v if acc is None else acc
        return (acc and v) if self.is_and else (acc or v)


class ListaggModel:  # the current FieldListaggAgg
    def __init__(self, delimiter: str, distinct: bool) -> None:
        self.d = delimiter
        self.distinct = distinct

    def split(self, s: str) -> list[str]:
        return s.split(self.d) if self.d else [s]

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return v if acc is None else acc
        if v == "":
            return acc
        if acc == "":
            return v
        if not self.distinct:
            return acc + self.d + v
        seen = set(self.split(acc))
        out = [acc]
        for tok in self.split(v):
            if tok == "" or tok in seen:
                continue
            seen.add(tok)
            out.append(tok)
        return self.d.join(out)


def freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple((k, freeze(x)) for k, x in v.items())
    if isinstance(v, list | tuple):
        return tuple(freeze(x) for x in v)
    return v


class CollectModel:
    def __init__(self, distinct: bool) -> None:
        self.distinct = distinct

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None and v is None:
            return None
        if (acc is None or v is None) and not self.distinct:
            return v if acc is None else acc
        items = (acc or []) + (v or [])
        if not self.distinct:
            return items
        out, seen = [], set()
        for e in items:
            if freeze(e) not in seen:
                seen.add(freeze(e))
                out.append(e)
        return out

    def retract(self, acc: Any, v: Any) -> Any:
        if acc is None:
            return None
        if v is None:
            return acc
        pending = list(v)
        out = []
        for e in acc:
            if e in pending:
                pending.remove(e)
            else:
                out.append(e)
        return out


class MergeMapModel:
    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return v if acc is None else acc
        d: dict[Any, Any] = {}
        for k, x in acc + v:
            d[k] = x
        return list(d.items())

    def retract(self, acc: Any, v: Any) -> Any:
        if acc is None:
            return None
        if v is None:
            return acc
        gone = {k for k, _ in v}
        d: dict[Any, Any] = {}
        for k, x in acc:
            if k not in gone:
                d[k] = x
        return list(d.items())


class NestedUpdateModel:
    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys

    def key(self, r: dict[str, Any]) -> Any:
        return tuple(r[k] for k in self.keys)

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None:
            return v
        if v is None:
            return acc
        rows = [r for r in acc + v if r is not None]
        if not self.keys:
            return rows
        d: dict[Any, Any] = {}
        for r in rows:
            d[self.key(r)] = r
        return list(d.values())

    def retract(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return acc
        if self.keys:
            d = {self.key(r): r for r in acc if r is not None}
            for r in v:
                if r is not None:
                    d.pop(self.key(r), None)
            return list(d.values())
        rows = [r for r in acc if r is not None]
        for r in v:
            if r is not None:
                rows = [x for x in rows if x != r]
        return rows


class RbmModel:  # results compared as sets of members
    def __init__(self, bits: int) -> None:
        self.load = rbm32_deserialize if bits == 32 else rbm64_deserialize

    def agg(self, acc: Any, v: Any) -> Any:
        if acc is None or v is None:
            return v if acc is None else acc
        return set(self.load(acc) if isinstance(acc, bytes) else acc) | set(self.load(v))


# ---------------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------------

def float_same(rel: float, abs_: float) -> Callable[[Any, Any], bool]:
    def eq(a: Any, b: Any) -> bool:
        if a is None or b is None:
            return a is None and b is None
        a, b = float(a), float(b)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)
    return eq


def bits_same(a: Any, b: Any) -> bool:
    """Exact float identity (NaN == NaN, -0.0 != 0.0)."""
    if a is None or b is None:
        return a is None and b is None
    return struct.pack("<d", float(a)) == struct.pack("<d", float(b)) or (math.isnan(a) and math.isnan(b))


# ---------------------------------------------------------------------------------------------
# sum
# ---------------------------------------------------------------------------------------------

INT_VALUES = {
    "TINYINT": st.integers(-128, 127),
    "SMALLINT": st.integers(-(1 << 15), (1 << 15) - 1),
    "INT": st.integers(-(1 << 31), (1 << 31) - 1),
    "BIGINT": st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-1000, 1000),
                        st.sampled_from([-(1 << 63), (1 << 63) - 1, 1 << 62, -(1 << 62)])),
}


@SETTINGS
@given(st.sampled_from(sorted(INT_VALUES)), st.data())
def test_sum_integers(type_sql: str, data: st.DataObject) -> None:
    groups = data.draw(groups_of(st.none() | INT_VALUES[type_sql], ALL_KINDS))
    check("sum", type_sql, groups, lambda: SumModel(int_check(type_sql)))


FINITE = {"DOUBLE": st.floats(-1e6, 1e6, allow_nan=False), "FLOAT": st.floats(-1e4, 1e4, width=32)}


@SETTINGS
@given(st.sampled_from(["DOUBLE", "FLOAT"]), st.data())
def test_sum_floats(type_sql: str, data: st.DataObject) -> None:
    groups = data.draw(groups_of(st.none() | FINITE[type_sql], ALL_KINDS))
    cast = float_arith(type_sql)
    groups = [[(k, None if v is None else float(cast(v))) for k, v in g] for g in groups]
    same = float_same(1e-4, 0.05) if type_sql == "FLOAT" else float_same(1e-9, 1e-6)
    check("sum", type_sql, groups, lambda: SumModel(cast), same)


DEC = st.decimals(min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99"), places=2,
                  allow_nan=False, allow_infinity=False)


@SETTINGS
@given(groups_of(st.none() | DEC, ALL_KINDS))
def test_sum_decimal(groups: list[list[Row]]) -> None:
    check("sum", "DECIMAL(10, 2)", groups, lambda: SumModel(decimal_check(10, 2)))


def test_sum_decimal_keeps_precision() -> None:
    big = Decimal("1234567890123456789012345678.0123456789")  # 38 digits, scale 10
    tiny = Decimal("0.0000000001")
    groups = [[(0, big), (0, tiny), (0, tiny), (1, Decimal("-0.0000000003"))], [(0, -big), (0, -tiny)]]
    assert run("sum", "DECIMAL(38, 10)", groups) == [big + Decimal("0.0000000005"), -big - tiny]
    with pytest.raises(InvalidInputError, match="overflow"):
        run("sum", "DECIMAL(38, 10)", [[(0, Decimal("9999999999999999999999999999.9999999999")), (0, tiny)]])


def test_sum_overflow_is_checked_at_every_step() -> None:
    # the total fits, but Java's addExact fails on the way
    with pytest.raises(InvalidInputError, match="overflow"):
        run("sum", "TINYINT", [[(0, 100), (0, 100), (1, 100)]])
    with pytest.raises(InvalidInputError, match="overflow"):
        run("sum", "BIGINT", [[(0, (1 << 63) - 1), (0, 1), (0, -5)]])
    assert run("sum", "BIGINT", [[(1, -(1 << 63) + 1)], [(0, -(1 << 63))]]) == [(1 << 63) - 1, -(1 << 63)]
    with pytest.raises(InvalidInputError):  # negating Long.MIN_VALUE
        run("sum", "BIGINT", [[(1, -(1 << 63))]])


# ---------------------------------------------------------------------------------------------
# product
# ---------------------------------------------------------------------------------------------

@SETTINGS
@given(st.sampled_from(["TINYINT", "INT", "BIGINT"]), st.data())
def test_product_integers(type_sql: str, data: st.DataObject) -> None:
    bits = INT_RANGES[type_sql]
    small = st.integers(-6, 6)
    edge = st.sampled_from([0, 1, -1, 2, -2, (1 << (bits // 2)), -(1 << (bits // 2)), (1 << (bits - 1)) - 1,
                            -(1 << (bits - 1)), 3, 1 << (bits - 2)])
    kinds = data.draw(st.sampled_from([[0, 2], ALL_KINDS]))
    groups = data.draw(groups_of(st.none() | small | edge, kinds))
    check("product", type_sql, groups, lambda: ProductModel("int", int_check(type_sql)))


@SETTINGS
@given(st.sampled_from(["DOUBLE", "FLOAT"]), st.data())
def test_product_floats(type_sql: str, data: st.DataObject) -> None:
    cast = float_arith(type_sql)
    vals = st.one_of(st.none(), st.floats(-8, 8, width=32), st.sampled_from([0.0, -0.0, 0.5]))
    groups = data.draw(groups_of(vals, data.draw(st.sampled_from([[0, 2], ALL_KINDS]))))
    groups = [[(k, None if v is None else float(cast(v))) for k, v in g] for g in groups]
    check("product", type_sql, groups, lambda: ProductModel("float", cast), float_same(1e-5, 1e-30))


@SETTINGS
@given(groups_of(st.none() | st.sampled_from([Decimal(x) for x in
                                              ("1.25", "-2.5", "0.1", "3", "0", "4.00", "1.03", "-0.07")]),
                 ALL_KINDS))
def test_product_decimal(groups: list[list[Row]]) -> None:
    check("product", "DECIMAL(8, 2)", groups, lambda: ProductModel("decimal", decimal_check(8, 2)))


def test_product_retraction_truncates_like_java() -> None:
    groups = [[(0, 7), (1, 2), (0, 2)], [(0, -7), (3, 2)], [(1, 5), (0, 3)]]
    assert run("product", "INT", groups) == [6, -3, 3]
    with pytest.raises(InvalidInputError, match="zero"):
        run("product", "INT", [[(0, 7), (1, 0)]])
    with pytest.raises(InvalidInputError, match="overflow"):
        run("product", "BIGINT", [[(0, 1 << 40), (0, 1 << 40), (0, 0)]])  # overflows before the zero
    assert run("product", "BIGINT", [[(0, -(1 << 31)), (0, 1 << 32)]]) == [-(1 << 63)]


# ---------------------------------------------------------------------------------------------
# count, min, max, first/last, bool
# ---------------------------------------------------------------------------------------------

@SETTINGS
@given(st.sampled_from(["TINYINT", "INT", "BIGINT"]), st.data())
def test_count(type_sql: str, data: st.DataObject) -> None:
    groups = data.draw(groups_of(st.none() | st.integers(-5, 5), ALL_KINDS, max_rows=8))
    check("count", type_sql, groups, lambda: CountModel(int_check(type_sql)))


def test_count_of_only_nulls_is_zero_and_overflow_raises() -> None:
    assert run("count", "INT", [[(0, None)], [(0, 3), (3, 3), (3, 3)]]) == [0, -1]
    with pytest.raises(InvalidInputError):
        run("count", "TINYINT", [[(0, 1)] * 128])


MINMAX_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "INT": st.integers(-50, 50),
    "BIGINT": st.integers(-(1 << 63), (1 << 63) - 1),
    "DOUBLE": st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0]),
    "STRING": st.text(alphabet="abé€", max_size=3),
    "DECIMAL(10, 2)": DEC,
    "DATE": st.dates(),
}


def minmax_key(type_sql: str) -> Callable[[Any], Any]:
    if type_sql == "DOUBLE":
        return lambda v: (2, 0.0, 0) if math.isnan(v) else (1, v, math.copysign(1, v))
    if type_sql == "STRING":
        return lambda v: v.encode()
    return lambda v: v


@SETTINGS
@given(st.sampled_from(["min", "max"]), st.sampled_from(sorted(MINMAX_VALUES)), st.booleans(), st.data())
def test_min_max(function: str, type_sql: str, ignore: bool, data: st.DataObject) -> None:
    groups = data.draw(groups_of(st.none() | MINMAX_VALUES[type_sql], ALL_KINDS if ignore else [0, 2]))
    same = bits_same if type_sql == "DOUBLE" else None
    check(function, type_sql, groups, lambda: MinMaxModel(function == "max", minmax_key(type_sql)), same,
          ignore_retract=ignore)


def test_float_min_max_follow_java_compare() -> None:
    rows = [[(0, 0.0), (0, -0.0), (0, float("nan")), (0, 1.0)]]
    assert bits_same(run("min", "DOUBLE", rows)[0], -0.0)
    assert math.isnan(run("max", "DOUBLE", rows)[0])
    assert bits_same(run("max", "FLOAT", [[(0, -0.0), (0, -1.0)]])[0], -0.0)


LAST_FIRST = [
    ("last_value", LastValueModel),
    ("last_non_null_value", LastNonNullModel),
    ("first_value", lambda: FirstValueModel(False)),
    ("first_non_null_value", lambda: FirstValueModel(True)),
]


@SETTINGS
@given(st.sampled_from(LAST_FIRST), st.sampled_from(["INT", "STRING", "ARRAY<INT>", "ROW<a INT, b STRING>"]),
       st.booleans(), st.data())
def test_first_last(fn: tuple[str, Any], type_sql: str, ignore: bool, data: st.DataObject) -> None:
    function, make = fn
    row = st.fixed_dictionaries({"a": st.none() | st.integers(0, 3),
                                 "b": st.none() | st.text("q", max_size=1)})
    values = {"INT": st.integers(-9, 9), "STRING": st.text("xy", max_size=2),
              "ARRAY<INT>": st.lists(st.none() | st.integers(0, 3), max_size=2),
              "ROW<a INT, b STRING>": row}[type_sql]
    kinds = ALL_KINDS if (ignore or function in RETRACTABLE) else [0, 2]
    groups = data.draw(groups_of(st.none() | values, kinds))
    check(function, type_sql, groups, make, ignore_retract=ignore)


@SETTINGS
@given(st.sampled_from(["bool_and", "bool_or"]), st.booleans(),
       groups_of(st.none() | st.booleans(), ALL_KINDS))
def test_bool(function: str, ignore: bool, groups: list[list[Row]]) -> None:
    if not ignore:
        groups = [[(0 if k in (1, 3) else k, v) for k, v in g] for g in groups]
    check(function, "BOOLEAN", groups, lambda: BoolModel(function == "bool_and"), ignore_retract=ignore)


# ---------------------------------------------------------------------------------------------
# listagg
# ---------------------------------------------------------------------------------------------

@SETTINGS
@given(st.sampled_from([",", "--", "|"]), st.booleans(), st.data())
def test_listagg(delimiter: str, distinct: bool, data: st.DataObject) -> None:
    # values are tokens joined by the delimiter, as listagg writes them
    value = st.lists(st.text("ab", max_size=2), max_size=3).map(delimiter.join)
    groups = data.draw(groups_of(st.none() | value | st.just(""), max_rows=7))
    check("listagg", "STRING", groups, lambda: ListaggModel(delimiter, distinct), delimiter=delimiter,
          distinct=distinct)


def test_listagg_default_delimiter_and_empty_strings() -> None:
    assert FieldAggOptions("f").delimiter == ","
    groups: list[list[Row]] = [[(0, "a"), (0, ""), (0, None), (0, "b")], [(0, ""), (0, None)], [(0, None)]]
    assert run("listagg", "STRING", groups) == ["a,b", "", None]
    assert run("listagg", "STRING", [[(0, "a,b,a"), (0, "b,c,,c")]], distinct=True) == ["a,b,a,c"]


# ---------------------------------------------------------------------------------------------
# collect / merge_map / nested_update
# ---------------------------------------------------------------------------------------------

@SETTINGS
@given(st.booleans(), groups_of(st.none() | st.lists(st.none() | st.integers(0, 4), max_size=4), ALL_KINDS))
def test_collect(distinct: bool, groups: list[list[Row]]) -> None:
    check("collect", "ARRAY<INT>", groups, lambda: CollectModel(distinct), distinct=distinct)


@SETTINGS
@given(st.booleans(), st.data())
def test_collect_nested_elements(distinct: bool, data: st.DataObject) -> None:
    elem = st.fixed_dictionaries({"a": st.none() | st.integers(0, 2)})
    kinds = data.draw(st.sampled_from([[0, 2], ALL_KINDS]))
    groups = data.draw(groups_of(st.none() | st.lists(st.none() | elem, max_size=3), kinds))
    check("collect", "ARRAY<ROW<a INT>>", groups, lambda: CollectModel(distinct), distinct=distinct)


def map_value(keys: st.SearchStrategy[Any]) -> st.SearchStrategy[list[tuple[Any, Any]]]:
    return st.dictionaries(keys, st.none() | st.integers(0, 9), max_size=3).map(lambda d: list(d.items()))


@SETTINGS
@given(st.data())
def test_merge_map(data: st.DataObject) -> None:
    kinds = data.draw(st.sampled_from([[0, 2], ALL_KINDS]))
    groups = data.draw(groups_of(st.none() | map_value(st.sampled_from("abcd")), kinds))
    check("merge_map", "MAP<STRING, INT>", groups, MergeMapModel)


def test_merge_map_later_values_win_and_retraction_removes_keys() -> None:
    groups: list[list[Row]] = [[(0, [("a", 1), ("b", 2)]), (0, [("b", 3), ("c", None)])],
                               [(0, [("a", 1), ("b", 2)]), (1, [("b", 99)]), (0, [("d", 4)])],
                               [(3, [("a", 1)]), (0, [("a", 2)])]]
    assert run("merge_map", "MAP<STRING, INT>", groups) == [
        [("a", 1), ("b", 3), ("c", None)], [("a", 1), ("d", 4)], [("a", 2)]]


NESTED = "ARRAY<ROW<k INT, v STRING>>"


@SETTINGS
@given(st.sampled_from([(), ("k",), ("k", "v")]), st.data())
def test_nested_update(keys: tuple[str, ...], data: st.DataObject) -> None:
    row = st.fixed_dictionaries({"k": st.none() | st.integers(0, 3),
                                 "v": st.none() | st.text("xy", max_size=1)})
    kinds = data.draw(st.sampled_from([[0, 2], ALL_KINDS]))
    groups = data.draw(groups_of(st.none() | st.lists(st.none() | row, max_size=3), kinds))
    check("nested_update", NESTED, groups, lambda: NestedUpdateModel(keys), nested_keys=keys)


def test_nested_update_replaces_by_key() -> None:
    a = [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]
    groups = [[(0, a), (0, [{"k": 1, "v": "c"}])], [(0, a), (1, [{"k": 2, "v": "zzz"}])], [(0, a), (0, a)]]
    assert run("nested_update", NESTED, groups, nested_keys=("k",)) == [
        [{"k": 1, "v": "c"}, {"k": 2, "v": "b"}], [{"k": 1, "v": "a"}], a]
    assert run("nested_update", NESTED, groups[2:]) == [a + a]
    with pytest.raises(InvalidInputError, match="nested-key"):
        run("nested_update", NESTED, groups, nested_keys=("nope",))


# ---------------------------------------------------------------------------------------------
# rbm32 / rbm64
# ---------------------------------------------------------------------------------------------

def bitmap_values(bits: int) -> st.SearchStrategy[set[int]]:
    top = (1 << bits) - 1
    base = st.integers(0, top - 70000)
    spread = st.lists(st.integers(0, top), max_size=20)
    dense = st.tuples(base, st.integers(0, 70000), st.integers(1, 3)).map(
        lambda t: list(range(t[0], t[0] + t[1], t[2])))
    high_keys = st.lists(st.integers(0, 400), max_size=60).map(lambda ks: [k << 16 | 7 for k in ks])
    parts = st.lists(st.one_of(spread, dense, high_keys), max_size=3)
    return parts.map(lambda ps: {x for part in ps for x in part})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bitmap_values(64))
def test_rbm64_round_trip(values: set[int]) -> None:
    bm = BitMap64(sorted(values))
    data = rbm64_serialize(bm)
    assert set(rbm64_deserialize(data)) == values
    assert rbm64_serialize(rbm64_deserialize(data)) == data


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bitmap_values(32))
def test_rbm32_round_trip(values: set[int]) -> None:
    data = rbm32_serialize(BitMap(sorted(values)))
    assert set(rbm32_deserialize(data)) == values
    optimized = BitMap(sorted(values))
    optimized.run_optimize()
    assert data == optimized.serialize()  # the portable format, after runOptimize


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([32, 64]), st.data())
def test_rbm_union(bits: int, data: st.DataObject) -> None:
    ser: Callable[[Any], bytes] = rbm32_serialize if bits == 32 else rbm64_serialize
    bm: Callable[[Any], Any] = BitMap if bits == 32 else BitMap64
    sets = st.none() | bitmap_values(bits)
    row = st.tuples(st.sampled_from([0, 2]), sets)
    groups_sets = data.draw(st.lists(st.lists(row, min_size=1, max_size=4), max_size=4))
    groups = [[(k, None if s is None else ser(bm(sorted(s)))) for k, s in g] for g in groups_sets]
    got = run(f"rbm{bits}", "BYTES", groups)
    for out, rows, srows in zip(got, groups, groups_sets, strict=True):
        present = [s for _, s in srows if s is not None]
        if not present:
            assert out is None
        elif len(present) == 1:
            assert out == next(b for _, b in rows if b is not None)  # Java returns the input itself
        else:
            assert set((rbm32_deserialize if bits == 32 else rbm64_deserialize)(out)) == set().union(*present)
            if bits == 64:  # rbm64 output is canonical; rbm32 keeps pyroaring's container choices
                assert out == ser(bm(sorted(set().union(*present))))


def test_rbm64_matches_java_layout() -> None:
    # {1, 2, 3, 5 * 65536 + 9} as Roaring64Bitmap.serialize writes it (derived from the Java source):
    expected = (
        b"\x01" + struct.pack("<q", 2)  # not empty, two 48-bit keys
        + bytes([0]) + struct.pack("<h", 2) + bytes([5]) + bytes(5)  # Node4, 2 children, prefix 00*5
        + bytes([0, 0, 5, 0])  # child key bytes 0x00, 0x05, int written byte-reversed
        + bytes([4, 0, 0, 0]) + bytes(6) + struct.pack("<q", 0)  # leaf: key 0 -> container 0
        + bytes([4, 0, 0, 0]) + bytes([0, 0, 0, 0, 0, 5]) + struct.pack("<q", 1)  # key 5 -> container 1
        + struct.pack("<i", 1) + b"\xfe" + struct.pack("<i", 2)  # one container array of length 2
        + b"\x01" + bytes([2]) + struct.pack("<i", 3) + struct.pack("<3H", 1, 2, 3)  # array container
        + b"\x01" + bytes([2]) + struct.pack("<i", 1) + struct.pack("<H", 9)
        + struct.pack("<qii", 2, 0, 1)
    )
    assert rbm64_serialize(BitMap64([1, 2, 3, 5 * 65536 + 9])) == expected
    assert rbm64_serialize(BitMap64()) == b"\x00"
    run_bm = BitMap64(range(10, 5000))  # one run beats an array
    data = rbm64_serialize(run_bm)
    header = 1 + 8 + (4 + 6 + 8) + 4 + 1 + 4  # tag, key count, the leaf, container array header
    assert data[header:header + 2 + 4 + 2] == b"\x01\x00" + struct.pack("<iH", 4990, 1)  # run, 1 run
    assert set(rbm64_deserialize(rbm64_serialize(run_bm))) == set(range(10, 5000))


def test_rbm64_reads_non_canonical_java_trees() -> None:
    # a Node16 root, leaves pointing at containers out of order, a leaf carrying a stale prefix,
    # a container array with empty slots, and a run container
    body16 = bytes(reversed([0, 7, 0, 0, 0, 0, 0, 0])) + bytes(8)
    data = (
        b"\x01" + struct.pack("<q", 2)
        + bytes([1]) + struct.pack("<h", 2) + bytes([5]) + bytes(5) + body16
        + bytes([4, 0, 0, 2, 9, 9]) + bytes(6) + struct.pack("<q", 3)  # key 0 -> slot 3
        + bytes([4, 0, 0, 0]) + bytes([0, 0, 0, 0, 0, 7]) + struct.pack("<q", 0)  # key 7 -> slot 0
        + struct.pack("<i", 1) + b"\xfe" + struct.pack("<i", 4)
        + b"\x01" + bytes([0]) + struct.pack("<i", 5) + struct.pack("<H", 2) + struct.pack("<4H", 0, 2, 10, 1)
        + b"\x00\x00"
        + b"\x01" + bytes([2]) + struct.pack("<i", 2) + struct.pack("<2H", 4, 65535)
        + struct.pack("<qii", 2, 0, 3)
    )
    expected = {4, 65535} | {7 << 16 | x for x in (0, 1, 2, 10, 11)}
    assert set(rbm64_deserialize(data)) == expected
    with pytest.raises(InvalidInputError):
        rbm64_deserialize(data[:-3])


def test_rbm_bad_bytes_raise() -> None:
    good = rbm64_serialize(BitMap64([1]))
    with pytest.raises(InvalidInputError, match="rbm64"):
        run("rbm64", "BYTES", [[(0, good), (0, b"\x07junk")]])
    with pytest.raises(InvalidInputError, match="rbm32"):
        run("rbm32", "BYTES", [[(0, rbm32_serialize(BitMap([1]))), (0, b"junk")]])


# ---------------------------------------------------------------------------------------------
# Retraction, validation, shapes
# ---------------------------------------------------------------------------------------------

def test_supports_retract() -> None:
    assert {f for f in FUNCTIONS if supports_retract(f)} == RETRACTABLE
    with pytest.raises(InvalidInputError):
        supports_retract("median")


SAMPLE = {
    "min": ("INT", 1), "max": ("INT", 1), "first_value": ("INT", 1), "first_non_null_value": ("INT", 1),
    "listagg": ("STRING", "a"), "bool_and": ("BOOLEAN", True), "bool_or": ("BOOLEAN", True),
    "rbm32": ("BYTES", rbm32_serialize(BitMap([1]))), "rbm64": ("BYTES", rbm64_serialize(BitMap64([1]))),
}


@pytest.mark.parametrize("function", sorted(set(FUNCTIONS) - RETRACTABLE))
def test_unsupported_retraction_raises_unless_ignored(function: str) -> None:
    type_sql, v = SAMPLE[function]
    with pytest.raises(InvalidInputError, match=f"'{function}'.*'f'.*ignore-retract"):
        run(function, type_sql, [[(0, v), (1, v)]])
    # ignored retractions never happened
    assert run(function, type_sql, [[(0, v), (1, v), (3, v)], [(3, v)]], ignore_retract=True) == \
        run(function, type_sql, [[(0, v)]]) + [None]


def test_ignore_retract_on_retracting_functions() -> None:
    assert run("sum", "INT", [[(0, 5), (1, 3), (0, 1)]], ignore_retract=True) == [6]
    assert run("last_value", "INT", [[(0, 5), (3, 5)]], ignore_retract=True) == [5]
    assert run("collect", "ARRAY<INT>", [[(0, [1]), (1, [1])]], ignore_retract=True) == [[1]]


BAD_TYPES = [
    ("sum", "STRING"), ("product", "BOOLEAN"), ("count", "DOUBLE"), ("count", "DECIMAL(5, 0)"),
    ("min", "BOOLEAN"), ("max", "ARRAY<INT>"), ("listagg", "INT"), ("listagg", "CHAR(3)"),
    ("bool_and", "INT"), ("bool_or", "STRING"), ("collect", "INT"), ("collect", "MAP<INT, INT>"),
    ("merge_map", "ARRAY<INT>"), ("nested_update", "ARRAY<INT>"), ("nested_update", "ROW<a INT>"),
    ("rbm32", "STRING"), ("rbm64", "BINARY(8)"), ("rbm64", "BIGINT"),
]


@pytest.mark.parametrize(("function", "type_sql"), BAD_TYPES)
def test_type_validation(function: str, type_sql: str) -> None:
    with pytest.raises(InvalidInputError, match=function):
        validate(function, parse_type(type_sql), "f")
    with pytest.raises(InvalidInputError):
        run(function, type_sql, [])


def test_validate_accepts() -> None:
    for function, type_sql in [("sum", "DECIMAL(38, 4)"), ("product", "TINYINT"), ("count", "BIGINT"),
                               ("min", "TIMESTAMP(6) WITH LOCAL TIME ZONE"), ("max", "CHAR(2)"),
                               ("last_value", "MAP<INT, ARRAY<STRING>>"), ("listagg", "VARCHAR(9)"),
                               ("rbm32", "VARBINARY(100)"), ("nested_update", "ARRAY<ROW<a INT>>")]:
        validate(function, parse_type(type_sql))
    with pytest.raises(InvalidInputError, match="unknown"):
        validate("median", parse_type("INT"))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_empty_input_gives_empty_output(function: str) -> None:
    type_sql = {"count": "INT", "listagg": "STRING", "bool_and": "BOOLEAN", "bool_or": "BOOLEAN",
                "collect": "ARRAY<INT>", "merge_map": "MAP<INT, INT>", "nested_update": NESTED,
                "rbm32": "BYTES", "rbm64": "BYTES"}.get(function, "BIGINT")
    ft = parse_type(type_sql)
    empty = pa.array([], to_arrow_type(ft))
    out = aggregate(function, empty, np.zeros(0, np.int8), np.zeros(0, np.int64), ft, FieldAggOptions("f"))
    assert len(out) == 0 and out.type == to_arrow_type(ft)


def test_empty_groups_give_null_and_bad_shapes_raise() -> None:
    ft = parse_type("INT")
    values = pa.array([1, 2, 3], pa.int32())
    out = aggregate("sum", values, np.zeros(3, np.int8), np.array([0, 0, 2, 3]), ft, FieldAggOptions("f"))
    assert out.to_pylist() == [None, 3, 3, None]
    for kinds, starts in [(np.zeros(2, np.int8), [0]), (np.array([0, 5, 0], np.int8), [0]),
                          (np.zeros(3, np.int8), [1]), (np.zeros(3, np.int8), [0, 2, 1]),
                          (np.zeros(3, np.int8), [])]:
        with pytest.raises(InvalidInputError):
            aggregate("sum", values, kinds, np.array(starts, np.int64), ft, FieldAggOptions("f"))


def test_many_keys_at_once() -> None:
    rng = np.random.default_rng(7)
    n, G = 50_000, 5_000
    starts = np.r_[0, np.sort(rng.choice(np.arange(1, n), G - 1, replace=False))]
    ends = np.r_[starts[1:], n]
    vals = rng.integers(-1000, 1000, n)
    kinds = np.where(rng.random(n) < 0.1, 1, 0).astype(np.int8)
    out = aggregate("sum", pa.array(vals), kinds, starts, parse_type("BIGINT"), FieldAggOptions("f"))
    signed = np.where(kinds == 1, -vals, vals)
    assert out.to_pylist() == [int(signed[s:e].sum()) for s, e in zip(starts, ends, strict=True)]
