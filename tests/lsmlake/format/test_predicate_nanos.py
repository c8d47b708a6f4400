"""Nanosecond literals: a TIMESTAMP(9) filter keeps all nine fraction digits through parsing, the Arrow filter, the
file statistics and the text form, and a literal finer than its column is refused rather than cut."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate import Predicate, Term
from lsmlake.format.types import parse_type, to_arrow_type
from lsmlake.table.file_store_table import FileStoreTable

ONE_NS = "1970-01-01 00:00:00.000000001"


@pytest.fixture
def table(tmp_path: Path) -> FileStoreTable:
    catalog = FileSystemCatalog(str(tmp_path))
    catalog.create_database("db")
    catalog.create_table("db.t", "id INT, ts TIMESTAMP(9), tz TIMESTAMP_LTZ(9)")
    for id_, nanos in ((1, 0), (2, 1)):  # one file each, so the statistics tell them apart
        t = catalog.get_table("db.t")
        t.write_arrow(pa.table({"id": pa.array([id_], pa.int32()), "ts": pa.array([nanos], pa.timestamp("ns")),
                                "tz": pa.array([nanos], pa.timestamp("ns", tz="UTC"))}))
    return catalog.get_table("db.t")


@pytest.mark.parametrize(("where", "ids"), [
    (f"ts = '{ONE_NS}'", [2]),
    (f"ts != '{ONE_NS}'", [1]),
    (f"ts < '{ONE_NS}'", [1]),
    (f"ts >= '{ONE_NS}'", [2]),
    ("ts > '1970-01-01 00:00:00.000000000'", [2]),
    (f"ts IN ('{ONE_NS}', '1970-01-01 00:00:00.000000002')", [2]),
    ("ts = '1970-01-01T00:00:00.000000001'", [2]),
    ("ts = '1970-01-01 00:00:00.0000000010'", [2]),  # a tenth digit that is zero says nothing finer
    (f"tz = '{ONE_NS}+00:00'", [2]),
    ("tz = '1970-01-01 01:00:00.000000001+01:00'", [2]),
])
def test_a_nanosecond_literal_selects_its_row(table: FileStoreTable, where: str, ids: list[int]) -> None:
    got = table.to_arrow(predicate=where).column("id").to_pylist()
    assert sorted(got) == ids
    # the canonical text keeps the nanoseconds and reads back to the same predicate
    p = Predicate.parse(where, table.schema.arrow_schema)
    assert Predicate.parse(p.to_text(), table.schema.arrow_schema) == p
    assert sorted(table.to_arrow(predicate=p.to_text()).column("id").to_pylist()) == ids


def test_file_statistics_keep_the_nanosecond_file(table: FileStoreTable) -> None:
    p = Predicate.parse(f"ts = '{ONE_NS}'", table.schema.arrow_schema)
    zero, one = (pa.scalar(n, pa.timestamp("ns")).as_py() for n in (0, 1))
    assert p.may_match(lambda c: (one, one, 0, 1)) and not p.may_match(lambda c: (zero, zero, 0, 1))


@pytest.mark.parametrize(("column_type", "literal"), [
    ("TIMESTAMP(9)", "1970-01-01 00:00:00.0000000005"),
    ("TIMESTAMP(6)", "1970-01-01 00:00:00.0000001"),
    ("TIMESTAMP(3)", "1970-01-01 00:00:00.0001"),
    ("TIMESTAMP_LTZ(9)", "1970-01-01 00:00:00.0000000005+00:00"),
    ("TIME(9)", "00:00:00.0000001"),  # lsmlake keeps TIME in milliseconds, as Paimon's Arrow mapping does
    ("TIME", "00:00:00.0001"),
])
def test_a_literal_finer_than_its_column_is_refused(column_type: str, literal: str) -> None:
    schema = pa.schema([("c", to_arrow_type(parse_type(column_type)))])
    with pytest.raises(InvalidInputError, match=re.escape(f"'c': '{literal}' is not a valid")) as e:
        Predicate.parse(f"c >= '{literal}'", schema)
    assert str(e.value).endswith("it is finer than the column holds")


@pytest.mark.parametrize(("column_type", "literal", "value"), [
    ("TIMESTAMP(6)", "2024-01-02 03:04:05.123456000", dt.datetime(2024, 1, 2, 3, 4, 5, 123456)),
    ("TIMESTAMP(3)", "2024-01-02 03:04:05.1230000", dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),
    ("TIME(9)", "01:02:03.004000000", dt.time(1, 2, 3, 4000)),
])
def test_trailing_zero_digits_are_exact_at_any_precision(column_type: str, literal: str, value: object) -> None:
    schema = pa.schema([("c", to_arrow_type(parse_type(column_type)))])
    assert Predicate.parse(f"c = '{literal}'", schema).terms[0].value == value


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**62), 2**62), st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), st.booleans())
def test_any_nanosecond_instant_compares_like_its_integer(nanos: int, op: str, zoned: bool) -> None:
    # the model: nanoseconds since the epoch as plain integers, compared by Python
    typ = pa.timestamp("ns", tz="UTC" if zoned else None)
    schema = pa.schema([("c", typ)])
    term = Term("c", op, pa.scalar(nanos, typ).as_py())
    p = Predicate.parse(term.to_text(), schema)
    assert p == Predicate((term,))
    column = [nanos - 1, nanos, nanos + 1]
    expr = p.expression()
    assert expr is not None
    got = pa.table({"c": pa.array(column, typ)}).filter(expr).column("c").cast(pa.int64()).to_pylist()
    compare = {"=": int.__eq__, "!=": int.__ne__, "<": int.__lt__, "<=": int.__le__, ">": int.__gt__,
               ">=": int.__ge__}[op]
    assert got == [v for v in column if compare(v, nanos)]
