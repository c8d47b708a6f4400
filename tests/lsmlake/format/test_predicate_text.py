"""The `filter` option's parser and the packing of splits into Spark partitions (no Spark needed)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from lsmlake.errors import InvalidInputError
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.predicate import Term
from lsmlake.format.predicate_text import parse_filter
from lsmlake.rpc.convert import term_to_proto
from lsmlake.spark.access import parse_timestamp
from lsmlake.spark.batch_read import pack
from lsmlake.table.scan import Split

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("d", pa.date32()), ("p", pa.decimal128(10, 2)),
                    ("b", pa.bool_())])


def test_terms_are_typed_by_their_column() -> None:
    p = parse_filter("id >= 5 AND s = 'it''s' AND d < 2024-02-01 AND p IN (1.5, 2) AND b = true AND s IS NOT NULL "
                     "and id <> 7 AND s is null", SCHEMA)
    assert p.terms == (Term("id", ">=", 5), Term("s", "=", "it's"), Term("d", "<", dt.date(2024, 2, 1)),
                       Term("p", "in", [Decimal("1.50"), Decimal("2.00")]), Term("b", "=", True),
                       Term("s", "is_not_null"), Term("id", "!=", 7), Term("s", "is_null"))


@pytest.mark.parametrize("text,message", [
    ("nope = 1", "not a column"), ("id = x", "not a valid int64"), ("id ~ 1", "unknown operator"),
    ("s = 'open", "cannot read"),
    ("id = 1 id = 2", "expected AND, OR or the end"), ("id = 1 AND", "ends with AND"),
    ("id = 1 OR", "ends with OR"), ("(id = 1", "not closed"), ("id = 1)", "expected AND, OR"),
    ("id = NULL", "IS \\[NOT\\] NULL"), ("id IN (1, 2", "ends too early"), ("= 1", "expected a column"),
    ("id IS 5", "IS NULL or IS NOT NULL"), ("id IN 1", "parenthesised"), ("id >=", "ends too early"),
    ('s = "a"', r"""'s': "a" names a column; write text in single quotes \('a'\)"""),
    ('id IN (1, "x")', r"""'id': "x" names a column; write text in single quotes \('x'\)"""),
])
def test_bad_filters_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_filter(text, SCHEMA)


def test_only_literals_with_an_exact_text_form_go_to_the_catalog() -> None:
    listed, dated = term_to_proto(Term("id", "in", [1, 2])), term_to_proto(Term("d", "=", dt.date(2024, 1, 2)))
    assert listed is not None and listed.values == ["1", "2"]
    assert dated is not None and dated.value == "2024-01-02"
    assert term_to_proto(Term("p", "=", Decimal("1.5"))) is None  # still filters rows after the read
    assert term_to_proto(Term("s", "is_null")) is not None


def test_timestamps_in_millis_or_iso() -> None:
    assert parse_timestamp("1700000000000") == 1700000000000
    assert parse_timestamp("2024-01-01T00:00:00") == 1704067200000
    assert parse_timestamp("2024-01-01T01:00:00+01:00") == 1704067200000


def _split(bucket: int, size: int) -> Split:
    f = DataFileMeta.__new__(DataFileMeta)
    object.__setattr__(f, "file_size", size)
    return Split(b"", (), bucket, 8, (f,), 1)


def test_small_splits_share_a_partition_large_ones_stay_alone() -> None:
    splits = [_split(0, 10), _split(1, 10), _split(2, 100), _split(3, 5), _split(4, 5), _split(5, 200)]
    groups = pack(splits, 30)
    assert [[s.bucket for s in g] for g in groups] == [[0, 1], [2], [3, 4], [5]]
    assert pack([], 30) == []
