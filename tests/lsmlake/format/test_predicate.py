"""The predicate tree: its forms, its normal form, its weakenings, and the text round trip."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate import And, Or, Predicate, Term
from lsmlake.format.predicate_text import parse_filter

SCHEMA = pa.schema([("dt", pa.string()), ("id", pa.int64()), ("x", pa.float64()), ("d", pa.date32()),
                    ("p", pa.decimal128(10, 2)), ("b", pa.bool_()), ("order", pa.int32()), ("a b", pa.string()),
                    ("Or", pa.int64()), ("t", pa.time32("ms")), ("t6", pa.time64("us")), ("ts", pa.timestamp("ms")),
                    ("tsz", pa.timestamp("us", tz="UTC")), ("bin", pa.binary())])


def test_text_and_term_forms_build_the_same_tree() -> None:
    text = Predicate.of("dt = 'd1' AND (id < 3 OR id IS NULL)", SCHEMA)
    terms = Predicate.of([("dt", "==", "d1"), Or(("id", "<", 3), ("id", "is null"))])
    objects = Term("dt", "=", "d1") & (Term("id", "<", 3) | Term("id", "is_null"))
    assert text == terms == objects == And({"dt": "d1"}, Or([("id", "<", 3)], Term("id", "IS NULL")))
    assert text.to_text() == "dt = 'd1' AND (id < 3 OR id IS NULL)"
    assert text.terms == (Term("dt", "=", "d1"),)  # what every passing row satisfies
    assert not text.is_conjunction and Predicate.of({"dt": "d1", "id": 2}).is_conjunction


def test_and_binds_tighter_than_or_and_keywords_ignore_case() -> None:
    p = parse_filter("id = 1 and dt = 'a' Or id = 2", SCHEMA)
    assert p == Or(And(("id", "=", 1), ("dt", "=", "a")), ("id", "=", 2))
    assert parse_filter("id = 1 AND (dt = 'a' OR id = 2)", SCHEMA) == And(("id", "=", 1),
                                                                            Or(("dt", "=", "a"), ("id", "=", 2)))


def test_normal_form_flattens_and_drops_what_says_nothing() -> None:
    a, b, c = Term("id", "=", 1), Term("id", "=", 2), Term("id", "=", 3)
    assert And(And(a, b), c) == And(a, b, c) == Predicate((a, b, c))
    assert Or(Or(a, b), c) == Or(a, Or(b, c))
    assert Or(a) == And(a) == Predicate.of(a) == Predicate.of([a])
    assert Or(a, Predicate()) == Predicate()  # an always-true branch
    assert And(a, Predicate()) == And(a)
    assert Predicate((Or(a, b),)) == Or(a, b)
    assert Predicate.of(None).accepts_all and Predicate.of("  ", SCHEMA).accepts_all
    with pytest.raises(InvalidInputError, match="at least one branch"):
        Or()


def test_aliases_and_value_checks() -> None:
    assert Term("id", "==", 1) == Term("id", "eq", 1) == Term("id", "=", 1)
    assert Term("id", "<>", 1).op == "!=" and Term("id", "IS NOT NULL").op == "is_not_null"
    assert Term("id", "IN", [1, 2]).value == (1, 2)
    for bad, message in [(("id", "~", 1), "unknown filter operator"), (("id", "=", None), "use IS NULL"),
                         (("id", "in", [1, None]), "cannot hold NULL"), (("id", "in", 5), "list of values")]:
        with pytest.raises(InvalidInputError, match=message):
            Term(*bad)
    assert Predicate.of({"dt": None}) == Predicate.of([("dt", "is_null")])


def test_a_term_without_its_value_says_so() -> None:
    for op in ("=", ">=", "in"):
        with pytest.raises(InvalidInputError, match=f"'id' {op}: the value is missing"):
            Term("id", op)
        with pytest.raises(InvalidInputError, match=f"'id' {op}: the value is missing"):
            Predicate.of([("id", op)])
    with pytest.raises(InvalidInputError, match="'id' >= NULL is never true; use IS NULL or IS NOT NULL"):
        Term("id", ">=", None)  # a value given as None is a comparison with NULL
    assert Term("id", "is_null") == Term("id", "is_null", None)


def test_a_schema_checks_columns_and_types_literals() -> None:
    p = Predicate.of([("dt", "=", 1), ("id", ">=", "2"), ("d", "<", "2024-02-01"), ("p", "in", [1.5, "2"]),
                      ("x", "<", 1)], SCHEMA)
    assert p.children == (Term("dt", "=", "1"), Term("id", ">=", 2), Term("d", "<", dt.date(2024, 2, 1)),
                          Term("p", "in", (Decimal("1.50"), Decimal("2.00"))), Term("x", "<", 1.0))
    with pytest.raises(InvalidInputError, match=r"'nope' is not a column \(columns: \['dt', 'id'"):
        Predicate.of(Or(("id", "=", 1), ("nope", "=", 2)), SCHEMA)
    with pytest.raises(InvalidInputError, match="'id': 'x' is not a valid int64"):
        Predicate.of([("id", "=", "x")], SCHEMA)
    with pytest.raises(InvalidInputError, match="needs the table's schema"):
        Predicate.of("id = 1")


def test_only_keeps_an_or_only_when_every_branch_projects() -> None:
    p = Predicate.of("dt = 'a' AND (dt = 'b' OR id = 1) AND (dt = 'c' OR dt = 'd')", SCHEMA)
    assert p.only(["dt"]) == Predicate.of("dt = 'a' AND (dt = 'c' OR dt = 'd')", SCHEMA)
    assert p.only(["id"]).accepts_all
    assert Predicate.of("(dt = 'a' AND id = 1) OR dt = 'b'", SCHEMA).only(["dt"]) == Or(("dt", "=", "a"),
                                                                                        ("dt", "=", "b"))


def test_partition_tests_and_statistics_follow_the_tree() -> None:
    p = Predicate.of("dt = 'a' OR id > 5", SCHEMA)
    assert p.test({"dt": "b"})  # id is not known: it may pass
    assert not p.test({"dt": "b", "id": 5}) and p.test({"dt": "b", "id": 6})
    stats: dict[str, Any] = {"dt": ("b", "c", 0, 10), "id": (0, 5, 0, 10)}
    assert not p.may_match(stats.get)
    assert p.may_match({"dt": ("a", "c", 0, 10), "id": (0, 5, 0, 10)}.get)
    assert p.may_match({"dt": ("b", "c", 0, 10)}.get)  # no statistics of id: may match
    assert not Predicate.of("dt = 'a' AND id > 5", SCHEMA).may_match({"dt": ("a", "a", 0, 1), "id": (0, 5, 0, 1)}.get)


def test_sql_null_semantics_in_rows_and_values() -> None:
    table = pa.table({"id": pa.array([1, None, 3], pa.int64()), "dt": ["a", "b", None]})
    for text, rows in [("id != 1", [3]), ("id = 1 OR dt = 'b'", [1, None]), ("id IS NULL OR id > 2", [None, 3]),
                       ("dt != 'a' AND id != 1", []), ("id IN (1, 3)", [1, 3])]:
        p = Predicate.of(text, SCHEMA)
        expr = p.expression()
        assert expr is not None
        assert table.filter(expr).column("id").to_pylist() == rows, text
        assert [r["id"] for r in table.to_pylist() if p.test(r)] == rows, text


def test_temporal_literals_are_read_from_text() -> None:
    p = Predicate.of("t < '01:02:03.004' AND ts >= '2024-01-02 03:04:05.123' AND tsz = '2024-01-02T03:04:05Z'", SCHEMA)
    assert p.children == (Term("t", "<", dt.time(1, 2, 3, 4000)),
                          Term("ts", ">=", dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),
                          Term("tsz", "=", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)))
    assert Predicate.of(p.to_text(), SCHEMA) == p
    with pytest.raises(InvalidInputError, match="'ts': '2024-01-02 03:04:05.123456' is not a valid timestamp"):
        Predicate.of("ts = '2024-01-02 03:04:05.123456'", SCHEMA)  # finer than the column: it cannot be equal


def test_identifiers_and_literals_that_need_quoting() -> None:
    p = Predicate.of([("a b", "=", "it's"), ("order", ">", 1), ("Or", "=", 2)], SCHEMA)
    assert p.to_text() == "\"a b\" = 'it''s' AND order > 1 AND \"Or\" = 2"
    assert parse_filter(p.to_text(), SCHEMA) == p


# -- the text round trip ------------------------------------------------------------------------------------------

_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "dt": st.text(max_size=5), "id": st.integers(-2**63, 2**63 - 1),
    "x": st.floats(allow_nan=False, width=64), "d": st.dates(), "p": st.decimals("-1e6", "1e6", places=2),
    "b": st.booleans(), "order": st.integers(-2**31, 2**31 - 1), "a b": st.text(max_size=3),
    "Or": st.integers(-5, 5),
    "t": st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)), "t6": st.times(),
    "ts": st.datetimes(dt.datetime(1900, 1, 1)).map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
    "tsz": st.datetimes(dt.datetime(1900, 1, 1), timezones=st.just(dt.UTC)), "bin": st.binary(max_size=3),
}


@st.composite
def terms(draw: st.DrawFn) -> Term:
    column = draw(st.sampled_from(sorted(_VALUES)))
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null"]))
    if op in ("is_null", "is_not_null"):
        return Term(column, op)
    if op == "in":
        return Term(column, op, draw(st.lists(_VALUES[column], max_size=3)))
    return Term(column, op, draw(_VALUES[column]))


predicates = st.recursive(terms(), lambda inner: st.builds(
    lambda kids, any_: Predicate(tuple(kids), any=any_), st.lists(inner, min_size=1, max_size=3), st.booleans()),
    max_leaves=8).map(lambda n: n if isinstance(n, Predicate) else Predicate((n,)))


@settings(max_examples=200, deadline=None)
@given(predicates)
def test_the_text_form_parses_back_to_an_equal_predicate(p: Predicate) -> None:
    assert parse_filter(p.to_text(), SCHEMA) == p
    assert Predicate.of(str(p), SCHEMA) == p


def test_an_empty_in_list_matches_no_row_of_any_type() -> None:
    table = pa.table({"dt": ["a", None], "id": pa.array([1, None], pa.int64())})
    for column in ("dt", "id"):
        expr = Predicate.of([(column, "in", [])]).expression()
        assert expr is not None and table.filter(expr).num_rows == 0
        assert not Term(column, "in", []).test("a") and not Term(column, "in", []).may_match(0, 9, 0, 2)


def test_nested_lists_are_ands() -> None:
    assert Predicate.of([[("id", "=", 1)], [[("id", ">", 0)], Term("dt", "=", "a")]]) == And(
        ("id", "=", 1), ("id", ">", 0), ("dt", "=", "a"))
    with pytest.raises(InvalidInputError, match="unknown filter operator"):
        Predicate.of([("id", "~", 1)])
