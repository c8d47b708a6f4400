"""Partition summaries: bounds round-trip Iceberg's single-value serialization, and a summary never excludes a
partition its manifest holds."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import hypothesis.strategies as st
from hypothesis import given

from lsmlake.format.types import parse_type
from lsmlake.iceberg import partition_summary as ps

COLUMNS = [
    (parse_type("INT"), st.integers(-(2**31), 2**31 - 1)),
    (parse_type("BIGINT"), st.integers(-(2**63), 2**63 - 1)),
    (parse_type("STRING"), st.text(max_size=5)),
    (parse_type("DATE"), st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    (parse_type("DECIMAL(10, 2)"), st.decimals(Decimal("-99999999.99"), Decimal("99999999.99"), places=2,
                                                allow_nan=False)),
    (parse_type("DOUBLE"), st.floats(allow_nan=True, width=64)),
    (parse_type("TIMESTAMP(6)"), st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1))),
]


@given(st.data())
def test_a_summary_holds_every_partition_of_its_manifest(data) -> None:
    ty, values = data.draw(st.sampled_from(COLUMNS))
    held = data.draw(st.lists(st.none() | values, min_size=1, max_size=6))
    other = data.draw(st.none() | values)
    summary = ps.summaries([ty], [(v,) for v in held])
    for v in held:
        assert ps.may_hold([ty], summary, (v,))
    present = [v for v in held if v is not None and not (isinstance(v, float) and v != v)]
    for v in present:
        assert ps.decode(ty, ps.encode(ty, v)) == (ps._key(ty, v))
    if other is not None and not (isinstance(other, float) and other != other) and present:
        keys = [ps._key(ty, v) for v in present]
        inside = min(keys) <= ps._key(ty, other) <= max(keys)
        assert ps.may_hold([ty], summary, (other,)) == inside
    if other is None:
        assert ps.may_hold([ty], summary, (None,)) == (None in held)


def test_decimal_bounds_are_big_endian_twos_complement() -> None:
    ty = parse_type("DECIMAL(10, 2)")
    assert ps.encode(ty, Decimal("1.50")) == b"\x00\x96"  # the sign needs the second byte
    assert ps.encode(ty, Decimal("-2.25")) == b"\xff\x1f"
