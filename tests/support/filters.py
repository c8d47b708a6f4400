"""Random filters and small tables for the filter property tests, with a plain-Python model of both.

A filter is drawn as a plain tree: `("and" | "or", [children])` or `("term", column, op, value)`. The model
evaluates it on Python rows with SQL's rules (a comparison with NULL is false, only IS NULL finds nulls); the same
tree is written in the text form (random keyword case, operator aliases, quoted identifiers, extra parentheses)
and in the term form (Terms, tuples, And/Or, `&`/`|`, op aliases, literals of another type), independently of the
library's own printer, so every layer can be checked against the model.
"""

from __future__ import annotations

import functools
import operator
import random
from collections.abc import Callable, Sequence
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa

from lsmlake.format.predicate import And, Or, Predicate, Term

Tree = tuple[Any, ...]
Row = dict[str, Any]

COLUMNS = ("dt", "id", "v", "s")
PK_DDL = "dt STRING NOT NULL, id INT NOT NULL, v BIGINT, s STRING"
APPEND_DDL = "dt STRING, id INT, v BIGINT, s STRING"
ARROW = pa.schema([("dt", pa.string()), ("id", pa.int32()), ("v", pa.int64()), ("s", pa.string())])
_LITERALS: dict[str, st.SearchStrategy[Any]] = {
    "dt": st.sampled_from(["d1", "d2", "d3", "d4"]), "id": st.integers(-2, 12), "v": st.integers(-4, 4),
    "s": st.sampled_from(["a", "b", "it's", "", "A"]),
}
_OPS = ("=", "!=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null")


@st.composite
def _term(draw: st.DrawFn) -> Tree:
    column = draw(st.sampled_from(COLUMNS))
    op = draw(st.sampled_from(_OPS))
    if op in ("is_null", "is_not_null"):
        return ("term", column, op, None)
    if op == "in":
        return ("term", column, op, tuple(draw(st.lists(_LITERALS[column], max_size=3))))
    return ("term", column, op, draw(_LITERALS[column]))


trees: st.SearchStrategy[Tree] = st.recursive(
    _term(), lambda inner: st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=1, max_size=3)),
    max_leaves=6)


def holds(tree: Tree, row: Row) -> bool:
    """The model: whether a row passes, by SQL's rules."""
    if tree[0] == "and":
        return all(holds(c, row) for c in tree[1])
    if tree[0] == "or":
        return any(holds(c, row) for c in tree[1])
    _, column, op, value = tree
    x = row[column]
    if op == "is_null":
        return x is None
    if op == "is_not_null":
        return x is not None
    if x is None:
        return False
    if op == "in":
        return x in value
    compare: dict[str, Callable[[Any, Any], bool]] = {
        "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
    return compare[op](x, value)


def to_text(tree: Tree, rnd: random.Random) -> str:
    """The tree in the text form, written as a person might."""
    def kw(word: str) -> str:
        return rnd.choice([word.upper(), word.lower(), word.capitalize()])

    def lit(v: Any) -> str:
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        return rnd.choice([str(v), f"'{v}'"])  # a quoted number is read by the column's type

    if tree[0] in ("and", "or"):
        text = f" {kw(tree[0])} ".join(f"({to_text(c, rnd)})" if c[0] in ("and", "or") or rnd.random() < 0.2
                                       else to_text(c, rnd) for c in tree[1])
        return text
    _, column, op, value = tree
    name = rnd.choice([column, f'"{column}"'])
    if op == "is_null":
        return f"{name} {kw('is')} {kw('null')}"
    if op == "is_not_null":
        return f"{name} {kw('is')} {kw('not')} {kw('null')}"
    if op == "in":
        return f"{name} {kw('in')} ({', '.join(map(lit, value))})"
    spelled = rnd.choice({"=": ["=", "=="], "!=": ["!=", "<>"]}.get(op, [op]))
    return f"{name} {spelled} {lit(value)}"


def to_terms(tree: Tree, rnd: random.Random) -> Any:
    """The tree in the term form: Terms, tuples, And/Or, `&` and `|`, lists for an AND, op aliases."""
    if tree[0] in ("and", "or"):
        kids = [to_terms(c, rnd) for c in tree[1]]
        style = rnd.randrange(3)
        if tree[0] == "and" and style == 0:
            return kids  # a list is an AND
        if style == 1 and all(isinstance(k, (Term, Predicate)) for k in kids):
            return functools.reduce(operator.and_ if tree[0] == "and" else operator.or_, kids)
        return (And if tree[0] == "and" else Or)(*kids)
    _, column, op, value = tree
    spelled = rnd.choice({"=": ["=", "==", "eq"], "!=": ["!=", "<>", "ne"], "is_null": ["is_null", "IS NULL"],
                          "is_not_null": ["is_not_null", "is not null"], "in": ["in", "IN"]}.get(op, [op]))
    if isinstance(value, int) and rnd.random() < 0.3:
        value = str(value)  # cast by the table's schema
    if op in ("is_null", "is_not_null"):
        return rnd.choice([Term(column, spelled), (column, spelled)])
    return rnd.choice([Term(column, spelled, value), (column, spelled, value)])


def spec(tree: Tree, rnd: random.Random) -> Any:
    """The filter in one of its forms, at random: text or terms."""
    return to_text(tree, rnd) if rnd.random() < 0.5 else Predicate.of(to_terms(tree, rnd))


# -- tables ---------------------------------------------------------------------------------------------------------

_pk_row = st.tuples(st.sampled_from(["d1", "d2", "d3"]), st.integers(0, 9), st.integers(-3, 3) | st.none(),
                    st.sampled_from(["a", "b", "it's", None]), st.sampled_from(["+I", "+I", "+U", "-D"]))
pk_batches = st.lists(st.lists(_pk_row, min_size=1, max_size=12), min_size=1, max_size=4)
_append_row = st.tuples(st.sampled_from(["d1", "d2", None]), st.integers(0, 9) | st.none(),
                        st.integers(-3, 3) | st.none(), st.sampled_from(["a", "b", "", None]))
# an append table's history: batches of rows, each maybe followed by a delete of the rows a filter matches
append_steps = st.lists(st.tuples(st.lists(_append_row, min_size=1, max_size=10), st.none() | trees),
                        min_size=1, max_size=3)


def pk_arrow(batch: Sequence[tuple[Any, ...]]) -> pa.Table:
    return pa.table({"dt": [r[0] for r in batch], "id": pa.array([r[1] for r in batch], pa.int32()),
                     "v": pa.array([r[2] for r in batch], pa.int64()), "s": [r[3] for r in batch],
                     "_row_kind": [r[4] for r in batch]})


def apply_pk(model: dict[tuple[str, int], Row], batch: Sequence[tuple[Any, ...]]) -> None:
    for dt, id_, v, s, kind in batch:
        if kind == "-D":
            model.pop((dt, id_), None)
        else:
            model[(dt, id_)] = {"dt": dt, "id": id_, "v": v, "s": s}


def append_arrow(batch: Sequence[tuple[Any, ...]]) -> pa.Table:
    return pa.table({"dt": [r[0] for r in batch], "id": pa.array([r[1] for r in batch], pa.int32()),
                     "v": pa.array([r[2] for r in batch], pa.int64()), "s": [r[3] for r in batch]})


def append_rows(batch: Sequence[tuple[Any, ...]]) -> list[Row]:
    return [dict(zip(COLUMNS, r, strict=True)) for r in batch]


def canonical(rows: Sequence[Row]) -> list[tuple[Any, ...]]:
    """Rows as a sorted list of tuples in column order (a multiset: an append table may repeat a row)."""
    return sorted((tuple(r[c] for c in COLUMNS) for r in rows), key=repr)
