"""Filter predicates: a conjunction of `column op value` terms.

The same predicate prunes partitions (on partition values), prunes files (on min/max statistics)
and filters rows after the merge (as an Arrow expression), so a filtered read is exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from lsmlake.errors import InvalidInputError

OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null")


def is_nan(v: Any) -> bool:
    """Whether `v` is a floating-point NaN, which compares false with everything (statistics with it rule nothing
    out)."""
    return isinstance(v, float) and v != v


@dataclass(frozen=True)
class Term:
    """One comparison of a column with a literal."""

    column: str
    op: str
    value: Any = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise InvalidInputError(f"unknown filter operator {self.op!r}; use one of {OPS}")

    def test(self, v: Any) -> bool:
        """Whether a single (partition) value passes."""
        if self.op == "is_null":
            return v is None
        if self.op == "is_not_null":
            return v is not None
        if v is None:
            return False
        if self.op == "in":
            return v in self.value
        return bool({"=": v == self.value, "!=": v != self.value, "<": v < self.value, "<=": v <= self.value,
                     ">": v > self.value, ">=": v >= self.value}[self.op])

    def may_match(self, lo: Any, hi: Any, null_count: int | None, row_count: int) -> bool:
        """Whether a file whose values lie in [lo, hi] may hold a passing row (True when unsure)."""
        if self.op == "is_null":
            return null_count is None or null_count > 0
        if self.op == "is_not_null":
            return null_count is None or null_count < row_count
        if lo is None or hi is None:
            return null_count is None or null_count < row_count or lo is not None
        if is_nan(lo) or is_nan(hi) or any(map(is_nan, self.value if self.op == "in" else (self.value,))):
            return True  # unordered: no comparison says a row cannot pass
        try:
            if self.op == "=":
                return bool(lo <= self.value <= hi)
            if self.op == "in":
                return any(lo <= x <= hi for x in self.value)
            if self.op == "<":
                return bool(lo < self.value)
            if self.op == "<=":
                return bool(lo <= self.value)
            if self.op == ">":
                return bool(hi > self.value)
            if self.op == ">=":
                return bool(hi >= self.value)
        except TypeError:
            return True
        return True

    def expression(self) -> pc.Expression:
        f = pc.field(self.column)
        if self.op == "is_null":
            return f.is_null()
        if self.op == "is_not_null":
            return f.is_valid()
        if self.op == "in":
            return f.isin(list(self.value))
        return {"=": f == self.value, "!=": f != self.value, "<": f < self.value, "<=": f <= self.value,
                ">": f > self.value, ">=": f >= self.value}[self.op]


@dataclass(frozen=True)
class Predicate:
    """A conjunction of terms (an empty one accepts everything)."""

    terms: tuple[Term, ...] = ()

    @staticmethod
    def of(spec: Predicate | Mapping[str, Any] | Sequence[Term | tuple[Any, ...]] | None) -> Predicate:
        """Build from a Predicate, a `{column: value}` equality mapping, or `(column, op, value)` tuples."""
        if spec is None:
            return Predicate()
        if isinstance(spec, Predicate):
            return spec
        if isinstance(spec, Mapping):
            return Predicate(tuple(Term(k, "=", v) for k, v in spec.items()))
        terms = []
        for t in spec:
            terms.append(t if isinstance(t, Term) else Term(*t))
        return Predicate(tuple(terms))

    def __and__(self, other: Predicate) -> Predicate:
        return Predicate(self.terms + other.terms)

    def columns(self) -> set[str]:
        return {t.column for t in self.terms}

    def only(self, columns: Sequence[str]) -> Predicate:
        return Predicate(tuple(t for t in self.terms if t.column in columns))

    def test(self, values: Mapping[str, Any]) -> bool:
        return all(t.test(values[t.column]) for t in self.terms if t.column in values)

    def expression(self) -> pc.Expression | None:
        expr = None
        for t in self.terms:
            e = t.expression()
            expr = e if expr is None else (expr & e)
        return expr
