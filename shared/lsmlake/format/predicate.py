"""Filter predicates: a tree of AND and OR over `column op value` terms, one language for every layer.

The same predicate prunes partitions (on partition values), prunes files (on min/max statistics) and filters
rows after the merge (as an Arrow expression), so a filtered read is exact. Pruning asks only "may a passing
row be here?": an AND may match where every child may, an OR where any child may, and a term on a column
that cannot be told (not a partition column, no statistics) may always match. The text form (see
`predicate_text`) and the term form build the same tree; `str(predicate)` is the canonical text.

Comparisons follow SQL: a comparison with NULL is false (`!=` does not match NULL), only IS NULL finds nulls.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate_parser import KEYWORDS, Group, Syntax, cast_literal, parse_syntax

# What a file's or manifest's statistics say of one column: (min, max, null count, row count), None when unknown.
ColumnStats = tuple[Any, Any, "int | None", int]
StatsLookup = Callable[[str], "ColumnStats | None"]

OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null")
_ALIASES = {"==": "=", "eq": "=", "<>": "!=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
            "is null": "is_null", "is not null": "is_not_null", "isnull": "is_null", "notnull": "is_not_null"}
_UNARY = ("is_null", "is_not_null")
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def is_nan(v: Any) -> bool:
    """Whether `v` is a floating-point NaN, which compares false with everything (statistics with it rule nothing
    out)."""
    return isinstance(v, float) and v != v


def canonical_op(op: str) -> str:
    """The operator's name in `OPS`, from it or an alias (`==`, `<>`, `IS NULL`, `eq` ...)."""
    key = " ".join(str(op).lower().replace("_", " ").split())
    name = _ALIASES.get(key, key.replace(" ", "_"))
    if name not in OPS:
        raise InvalidInputError(f"unknown filter operator {op!r}; use one of {OPS} (or ==, <>)")
    return name


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()  # a value left out, told apart from None (a comparison with NULL)


@dataclass(frozen=True)
class Term:
    """One comparison of a column with a literal (IN takes a collection of literals, IS [NOT] NULL none)."""

    column: str
    op: str
    value: Any = _MISSING

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise InvalidInputError(f"a filter term needs a column name, got {self.column!r}")
        op = canonical_op(self.op)
        object.__setattr__(self, "op", op)
        if self.value is _MISSING and op not in _UNARY:
            raise InvalidInputError(f"filter term {self.column!r} {op}: the value is missing; give (column, op, value)")
        if op in _UNARY:
            object.__setattr__(self, "value", None)
        elif op == "in":
            if isinstance(self.value, (str, bytes)) or not isinstance(self.value, Iterable):
                raise InvalidInputError(f"IN on {self.column!r} needs a list of values, got {self.value!r}")
            values = tuple(self.value)
            if any(v is None for v in values):
                raise InvalidInputError(f"IN on {self.column!r} cannot hold NULL (it never matches); "
                                        "use IS NULL")
            object.__setattr__(self, "value", values)
        elif self.value is None:
            raise InvalidInputError(f"{self.column!r} {op} NULL is never true; use IS NULL or IS NOT NULL")

    def test(self, v: Any) -> bool:
        """Whether a single (partition) value passes (True when the values do not compare)."""
        if self.op == "is_null":
            return v is None
        if self.op == "is_not_null":
            return v is not None
        if v is None:
            return False
        try:
            if self.op == "in":
                return v in self.value
            return bool({"=": v == self.value, "!=": v != self.value, "<": v < self.value, "<=": v <= self.value,
                         ">": v > self.value, ">=": v >= self.value}[self.op])
        except TypeError:
            return True

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
        return True  # != : a file of one value equal to the literal is rare enough not to tell

    def expression(self) -> pc.Expression:
        f = pc.field(self.column)
        if self.op == "is_null":
            return f.is_null()
        if self.op == "is_not_null":
            return f.is_valid()
        if self.op == "in":
            # an empty value set has no type, which Arrow refuses to compare: match nothing, typed by the column
            if not self.value:
                return f.is_null() & f.is_valid()
            nanos = next((v for v in self.value if _has_nanos(v)), None)
            return f.isin(pa.array(self.value, _nano_type(nanos)) if nanos is not None else list(self.value))
        v = pa.scalar(self.value, _nano_type(self.value)) if _has_nanos(self.value) else self.value
        return {"=": f == v, "!=": f != v, "<": f < v, "<=": f <= v, ">": f > v, ">=": f >= v}[self.op]

    def bind(self, schema: pa.Schema) -> Term:
        """This term with its column checked against `schema` and its literals cast to the column's type."""
        if self.column not in schema.names:
            raise InvalidInputError(f"filter column {self.column!r} is not a column (columns: {schema.names})")
        if self.op in _UNARY:
            return self
        typ = schema.field(self.column).type
        if self.op == "in":
            return Term(self.column, "in", tuple(cast_literal(v, typ, self.column) for v in self.value))
        return Term(self.column, self.op, cast_literal(self.value, typ, self.column))

    def to_text(self) -> str:
        name = quote_identifier(self.column)
        if self.op == "is_null":
            return f"{name} IS NULL"
        if self.op == "is_not_null":
            return f"{name} IS NOT NULL"
        if self.op == "in":
            return f"{name} IN ({', '.join(map(literal_text, self.value))})"
        return f"{name} {self.op} {literal_text(self.value)}"

    def __str__(self) -> str:
        return self.to_text()

    def __and__(self, other: Spec) -> Predicate:
        return Predicate((self,)) & other

    def __or__(self, other: Spec) -> Predicate:
        return Predicate((self,)) | other


Node = Union[Term, "Predicate"]


@dataclass(frozen=True)
class Predicate:
    """AND (the default) or OR of terms and nested predicates; an empty AND accepts everything.

    Built normalised, so equal filters compare equal: nested nodes of the same kind are flattened, a one-child OR is
    its child, an OR with an always-true branch is always true, and an AND whose only child is an OR is that OR.
    """

    children: tuple[Node, ...] = ()
    any: bool = False  # OR of the children instead of AND

    def __post_init__(self) -> None:
        children: list[Node] = []
        always = False
        for c in self.children:
            if not isinstance(c, (Term, Predicate)):
                raise InvalidInputError(f"a filter holds terms and predicates, not {c!r}")
            if isinstance(c, Predicate):
                if c.accepts_all:
                    always = always or self.any  # an OR with an always-true branch is always true
                    continue
                if c.any == self.any or len(c.children) == 1:
                    children.extend(c.children)
                    continue
            children.append(c)
        if always:
            children = []
            object.__setattr__(self, "any", False)
        elif self.any and not children:
            raise InvalidInputError("an OR needs at least one branch")
        elif len(children) == 1 and isinstance(children[0], Predicate):
            object.__setattr__(self, "any", children[0].any)
            children = list(children[0].children)
        elif self.any and len(children) == 1:
            object.__setattr__(self, "any", False)
        object.__setattr__(self, "children", tuple(children))

    @staticmethod
    def of(spec: Spec, schema: Any = None) -> Predicate:
        """Build from a Predicate or Term, the text form (needs `schema`), a `{column: value}` equality mapping
        (None: IS NULL), or a list of `(column, op[, value])` tuples, Terms, Predicates or texts (their AND).

        With `schema` (an Arrow schema, or anything with an `arrow_schema`) every column is checked and every
        literal cast to its column's type; InvalidInputError names what does not fit.
        """
        if spec is None:  # nothing to check: a table with columns Arrow cannot hold (BLOB) still plans
            return Predicate()
        arrow = getattr(schema, "arrow_schema", schema)
        if arrow is not None and not isinstance(arrow, pa.Schema):
            raise InvalidInputError(f"a filter's schema must be an Arrow or table schema, not {type(schema)}")
        pred = _build(spec, arrow)
        return pred.bind(arrow) if arrow is not None else pred

    @staticmethod
    def parse(text: str, schema: pa.Schema) -> Predicate:
        """The predicate of a filter text (see `predicate_text`), its literals typed by their columns in `schema`."""
        tree = parse_syntax(text, schema)
        return Predicate() if tree is None else Predicate((_from_syntax(tree),))

    def __and__(self, other: Spec) -> Predicate:
        return Predicate((self, other if isinstance(other, (Term, Predicate)) else Predicate.of(other)))

    def __or__(self, other: Spec) -> Predicate:
        return Predicate((self, other if isinstance(other, (Term, Predicate)) else Predicate.of(other)), any=True)

    def __rand__(self, other: Spec) -> Predicate:  # ("id", ">", 1) & predicate
        return Predicate((_node(other), self))

    def __ror__(self, other: Spec) -> Predicate:
        return Predicate((_node(other), self), any=True)

    @property
    def accepts_all(self) -> bool:
        """Whether this is the empty AND, which filters nothing."""
        return not self.children and not self.any

    @property
    def terms(self) -> tuple[Term, ...]:
        """The single terms every passing row satisfies (not those under an OR): a weaker filter, exact only when
        the predicate is a plain conjunction (`is_conjunction`)."""
        return () if self.any else tuple(t for t in self.children if isinstance(t, Term))

    @property
    def is_conjunction(self) -> bool:
        """Whether this is an AND of single terms (no OR anywhere)."""
        return not self.any and all(isinstance(t, Term) for t in self.children)

    def leaves(self) -> Iterable[Term]:
        for c in self.children:
            yield from (c,) if isinstance(c, Term) else c.leaves()

    def columns(self) -> set[str]:
        return {t.column for t in self.leaves()}

    def only(self, columns: Iterable[str]) -> Predicate:
        """The weakest consequence over `columns` alone: a term on another column becomes true, so an OR stays only
        when every branch keeps something."""
        keep = set(columns)
        out = _only(self, keep)
        return out if out is not None else Predicate()

    def test(self, values: Mapping[str, Any]) -> bool:
        """Whether a row with these values may pass (a term on a column not in `values` may)."""
        results = (c.test(values) if isinstance(c, Predicate) else (c.column not in values or c.test(values[c.column]))
                   for c in self.children)
        return any(results) if self.any else all(results)

    def may_match(self, stats: StatsLookup) -> bool:
        """Whether a file or manifest whose per-column statistics `stats` gives may hold a passing row."""
        def child(c: Node) -> bool:
            if isinstance(c, Predicate):
                return c.may_match(stats)
            s = stats(c.column)
            return s is None or c.may_match(*s)
        return any(map(child, self.children)) if self.any else all(map(child, self.children))

    def expression(self) -> pc.Expression | None:
        """The Arrow filter (None when it accepts everything); a null comparison filters out, as in SQL."""
        expr: pc.Expression | None = None
        for c in self.children:
            e = c.expression()
            assert e is not None  # only the empty AND has none, and it is never a child
            expr = e if expr is None else (expr | e if self.any else expr & e)
        return expr

    def bind(self, schema: pa.Schema) -> Predicate:
        """This predicate with every column checked against `schema` and every literal cast to its column's type."""
        return Predicate(tuple(c.bind(schema) for c in self.children), self.any)

    def to_text(self) -> str:
        """The canonical text form, which parses back to an equal predicate ("" accepts everything)."""
        join = " OR " if self.any else " AND "
        return join.join(c.to_text() if isinstance(c, Term) else f"({c.to_text()})" for c in self.children)

    def __str__(self) -> str:
        return self.to_text()


def And(*children: Spec) -> Predicate:  # noqa: N802 - reads like the operator it builds
    """Every child passes."""
    return Predicate(tuple(_node(c) for c in children))


def Or(*children: Spec) -> Predicate:  # noqa: N802 - reads like the operator it builds
    """Some child passes."""
    return Predicate(tuple(_node(c) for c in children), any=True)


Spec = Predicate | Term | str | Mapping[str, Any] | Sequence[Any] | None


def _node(spec: Spec) -> Node:
    if isinstance(spec, (Term, Predicate)):
        return spec
    if isinstance(spec, tuple) and _is_term_tuple(spec):
        return Term(*spec)
    return Predicate.of(spec)


def _is_term_tuple(t: tuple[Any, ...]) -> bool:
    if not 2 <= len(t) <= 3 or not isinstance(t[0], str) or not isinstance(t[1], str):
        return False
    try:
        canonical_op(t[1])
    except InvalidInputError:
        return False
    return True


def _build(spec: Spec, schema: pa.Schema | None) -> Predicate:
    if spec is None:
        return Predicate()
    if isinstance(spec, Predicate):
        return spec
    if isinstance(spec, Term):
        return Predicate((spec,))
    if isinstance(spec, str):
        if schema is None:
            raise InvalidInputError("a filter in text form needs the table's schema to type its literals")
        return Predicate.parse(spec, schema)
    if isinstance(spec, Mapping):
        return Predicate(tuple(Term(str(k), "is_null") if v is None else Term(str(k), "=", v)
                               for k, v in spec.items()))
    if isinstance(spec, tuple) and _is_term_tuple(spec):
        return Predicate((Term(*spec),))
    if isinstance(spec, (bytes, bytearray)) or not isinstance(spec, Sequence):
        raise InvalidInputError(f"a filter is a Predicate, a text, a mapping or a list of terms, not {spec!r}")
    children: list[Node] = []
    for item in spec:
        if isinstance(item, (Term, Predicate)):
            children.append(item)
        elif isinstance(item, tuple) and item and isinstance(item[0], str):
            children.append(Term(*item))
        elif isinstance(item, (str, Mapping, Sequence)):
            children.append(_build(item, schema))  # a nested list is an AND too
        else:
            raise InvalidInputError(f"a filter term is (column, op, value), a Term or a Predicate, not {item!r}")
    return Predicate(tuple(children))


def _from_syntax(tree: Syntax) -> Node:
    if isinstance(tree, Group):
        return Predicate(tuple(map(_from_syntax, tree.children)), tree.any)
    return Term(*tree)


def _only(p: Predicate, keep: set[str]) -> Predicate | None:
    """`p` weakened to the columns in `keep`; None when nothing is left (always true)."""
    children: list[Node] = []
    for c in p.children:
        sub = (c if c.column in keep else None) if isinstance(c, Term) else _only(c, keep)
        if sub is None:
            if p.any:
                return None  # one branch may pass anything: so may the OR
            continue
        children.append(sub)
    return Predicate(tuple(children), p.any) if children else None


def _has_nanos(v: Any) -> bool:
    """Whether `v` is a timestamp with nanoseconds (a pandas.Timestamp, as Arrow gives them), which Arrow would
    read as microseconds, dropping them, unless told the type."""
    return bool(getattr(v, "nanosecond", 0))


def _nano_type(v: Any) -> pa.DataType:
    return pa.timestamp("ns", tz=None if v.tzinfo is None else "UTC")


def quote_identifier(name: str) -> str:
    """A column name as the text form writes it: bare when it can be, else in double quotes."""
    if _BARE.match(name) and name.upper() not in KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def literal_text(v: Any) -> str:
    """A literal as the text form writes it; it parses back to `v` when typed by its column."""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else f"'{v}'"
    if isinstance(v, (bytes, bytearray)):
        return f"X'{bytes(v).hex().upper()}'"  # any bytes, UTF-8 or not
    text = v.isoformat(sep=" ") if hasattr(v, "isoformat") and hasattr(v, "hour") and hasattr(v, "day") else str(v)
    return "'" + text.replace("'", "''") + "'"
