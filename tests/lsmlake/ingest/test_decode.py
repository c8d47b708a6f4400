"""Decoding Kafka ingestion messages: plain JSON and Debezium events -> Arrow rows, rejections, dead letters."""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmlake.format.row_kind import DELETE, INSERT, ROW_KIND_COLUMN, UPDATE_AFTER, UPDATE_BEFORE
from lsmlake.format.schema import TableSchema, new_table_schema
from lsmlake.format.types import parse_schema_fields
from lsmlake.ingest import dead_letter_value, decode_messages, needs_retractions

EPOCH = dt.datetime(1970, 1, 1)


def table(columns: str, keys: tuple[str, ...] = ("id",), **options: str) -> TableSchema:
    opts = {"bucket": "1", **options} if keys else dict(options)
    return new_table_schema(parse_schema_fields(columns), primary_keys=list(keys), options=opts)


ALL_TYPES = table("id BIGINT, i8 TINYINT, i16 SMALLINT, i32 INT, f FLOAT, d DOUBLE, ok BOOLEAN, s STRING, "
                  "day DATE, ts TIMESTAMP(3), tsu TIMESTAMP(6), ltz TIMESTAMP(6) WITH LOCAL TIME ZONE, "
                  "amt DECIMAL(10, 2), t TIME, b BYTES")


def enc(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def rows(result: Any) -> list[dict[str, Any]]:
    return result.batch.drop_columns([ROW_KIND_COLUMN]).to_pylist()


def kinds(result: Any) -> list[int]:
    return result.batch.column(ROW_KIND_COLUMN).to_pylist()


def decode_both_ways(schema: TableSchema, values: list[bytes | None], fmt: str = "json",
                     retract: bool = False, table: str | None = None) -> Any:
    """Decode through the batch reader and through the per-message path (a trailing line break keeps
    a message out of the batch reader); both must agree."""
    fast = decode_messages(schema, values, fmt, retract, table=table)  # type: ignore[arg-type]
    slow = decode_messages(schema, [None if v is None else v + b"\n" for v in values], fmt, retract,  # type: ignore
                           table=table)
    assert fast.batch.equals(slow.batch), (fast.batch.to_pylist(), slow.batch.to_pylist())
    assert fast.source_index.tolist() == slow.source_index.tolist()
    assert [i for i, _ in fast.rejected] == [i for i, _ in slow.rejected]
    return fast


# -- plain JSON: every type ----------------------------------------------------------------------

@pytest.mark.parametrize(("column", "given_", "expected"), [
    ("i8", -128, -128), ("i16", "32767", 32767), ("i32", -5, -5), ("id", "9223372036854775807", 2**63 - 1),
    ("f", 1.5, 1.5), ("f", "2.5", 2.5), ("d", 0.1, 0.1), ("d", 7, 7.0), ("d", "-1e3", -1000.0),
    ("ok", True, True), ("ok", 0, False), ("s", "héllo", "héllo"),
    ("day", "2024-02-29", dt.date(2024, 2, 29)), ("day", 19782, dt.date(2024, 2, 29)),
    ("day", -1, dt.date(1969, 12, 31)),
    ("ts", "2024-01-02T03:04:05.123", dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),
    ("ts", "2024-01-02 03:04:05.1239", dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),  # finer digits truncated
    ("ts", "2024-01-02", dt.datetime(2024, 1, 2)),
    ("ts", 1704164645123, dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),  # epoch millis
    ("tsu", "2024-01-02T03:04:05.123456+02:00", dt.datetime(2024, 1, 2, 1, 4, 5, 123456)),
    ("tsu", "1900-01-01T00:00:00Z", dt.datetime(1900, 1, 1)),
    ("ltz", "2024-01-02T03:04:05-0130", dt.datetime(2024, 1, 2, 4, 34, 5, tzinfo=dt.UTC)),
    ("ltz", "2024-01-02T03:04:05", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)),
    ("amt", 12.34, Decimal("12.34")), ("amt", "-0.5", Decimal("-0.50")), ("amt", 7, Decimal("7.00")),
    ("amt", "12.300", Decimal("12.30")),
    ("t", 3_600_500, dt.time(1, 0, 0, 500000)), ("t", "12:30:00.5", dt.time(12, 30, 0, 500000)),
    ("b", base64.b64encode(b"\x00\xff").decode(), b"\x00\xff"),
])
def test_plain_json_types(column: str, given_: Any, expected: Any) -> None:
    values = [enc({"id": i, column: given_}) for i in range(1, 4)] if column != "id" else [enc({"id": given_})]
    r = decode_both_ways(ALL_TYPES, values)
    assert r.rejected == []
    assert [row[column] for row in rows(r)] == [expected] * len(values)
    assert kinds(r) == [INSERT] * len(values)


def test_plain_json_batch_schema_and_row_kinds() -> None:
    values = [enc({"id": 1}), enc({"id": 2, "_row_kind": "-U"}), enc({"id": 2, "_row_kind": "+U"}),
              enc({"id": 3, "_row_kind": "-D"}), enc({"id": 4, "_row_kind": None}), enc({"id": 5, "_row_kind": 3})]
    r = decode_both_ways(ALL_TYPES, values)
    assert kinds(r) == [INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE, INSERT, DELETE]
    assert r.batch.schema.field(ROW_KIND_COLUMN).type == pa.int8()
    assert r.batch.drop_columns([ROW_KIND_COLUMN]).schema.equals(ALL_TYPES.arrow_schema)
    assert r.source_index.tolist() == list(range(6))


def test_rowkind_field_option_gives_the_kind() -> None:
    schema = table("id BIGINT, op STRING, v INT", **{"rowkind.field": "op"})
    r = decode_both_ways(schema, [enc({"id": 1, "op": "-D"}), enc({"id": 2, "op": "+I", "_row_kind": "-U"}),
                                  enc({"id": 3})])
    assert kinds(r) == [DELETE, UPDATE_BEFORE, INSERT]


def test_unknown_field_is_rejected_naming_it_and_the_columns() -> None:
    r = decode_both_ways(ALL_TYPES, [enc({"id": 1, "new_column": [1, {"x": 2}], "s": "a"})])
    assert r.rejected == [(0, 'field "new_column" is not a column of the table '
                              "(columns: id, i8, i16, i32, f, d, ok, s, day, ts, ... (15 in all))")]
    assert r.batch.num_rows == 0
    small = table("id BIGINT, amount DOUBLE")
    r = decode_messages(small, [enc({"id": 1, "colour": "red", "size": None})], "json", False, table="shop.orders")
    assert r.rejected == [(0, 'fields "colour", "size" are not columns of shop.orders (columns: id, amount)')]


def test_nested_types_and_pretty_printed_messages() -> None:
    schema = table("id BIGINT, tags ARRAY<STRING>, attrs MAP<STRING, INT>, pos ROW<x DOUBLE, day DATE>")
    doc = {"id": 1, "tags": ["a", None], "attrs": {"k": 2}, "pos": {"x": 1.5, "day": "2024-01-01"}}
    r = decode_both_ways(schema, [json.dumps(doc, indent=2).encode(), enc({**doc, "id": 2})])
    assert rows(r)[0] == {"id": 1, "tags": ["a", None], "attrs": [("k", 2)],
                          "pos": {"x": 1.5, "day": dt.date(2024, 1, 1)}}
    assert r.source_index.tolist() == [0, 1]


def test_an_unknown_field_of_a_nested_row_rejects_its_row() -> None:
    schema = table("id BIGINT, pos ROW<x DOUBLE, day DATE>, pts ARRAY<ROW<x INT>>")
    r = decode_both_ways(schema, [enc({"id": 1, "pos": {"x": 1.5, "z": 2}}), enc({"id": 2, "pos": {"x": 2.0}}),
                                  enc({"id": 3, "pts": [{"x": 1}, {"x": 2, "y": 3, "w": 4}]})])
    assert [i for i, _ in r.rejected] == [0, 2]
    assert '"z" is not a field of ROW<' in r.rejected[0][1] and r.rejected[0][1].startswith('field "pos"')
    assert '"w", "y" are not fields of ROW<' in r.rejected[1][1]
    assert rows(r) == [{"id": 2, "pos": {"x": 2.0, "day": None}, "pts": None}]


# -- malformed messages ------------------------------------------------------------------------------

BAD = [
    (b"\x00\x01garbage", "invalid JSON at position 0"),
    (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
    (b'{"id": 1,', "invalid JSON at position"),
    (b"[1, 2]", "expected a JSON object, got array"),
    (b"42", "expected a JSON object, got number"),
    (b"", "invalid JSON at position 0"),
    (b'{"id": "abc"}', 'field "id": expected BIGINT got "abc"'),
    (b'{"id": 1.5}', 'field "id": expected BIGINT got 1.5'),
    (b'{"id": 1, "i8": 300}', 'field "i8": 300 is out of range for TINYINT'),
    (b'{"id": 1, "s": 5}', 'field "s": expected STRING got 5'),
    (b'{"id": 1, "ok": "yes"}', 'field "ok": expected BOOLEAN got "yes"'),
    (b'{"id": 1, "day": "2024-02-30"}', 'field "day": expected DATE got "2024-02-30"'),
    (b'{"id": 1, "ts": "yesterday"}', 'field "ts": expected TIMESTAMP(3) got "yesterday"'),
    (b'{"id": 1, "amt": 1.234}', 'field "amt": 1.234 has more than 2 decimal places for DECIMAL(10, 2)'),
    (b'{"id": 1, "amt": 123456789}', 'field "amt": 123456789 does not fit DECIMAL(10, 2)'),
    (b'{"id": 1, "t": 86400000}', 'field "t": 86400000 is not a time of day'),
    (b'{"id": 1, "b": "not base64!"}', 'field "b": expected BYTES as base64 text'),
    (b'{"id": null}', 'NULL in primary key "id"'),
    (b'{"s": "x"}', 'missing key column "id"'),
    (b'{"id": 1, "_row_kind": "+X"}', 'field "_row_kind": unknown row kind "+X"'),
    (b'{"id": 1}{"id": 2}', "invalid JSON at position 9: Extra data"),
    (b'{"id": 1, "colour": "red"}', 'field "colour" is not a column of the table (columns: id, i8, '),
    (b'{"id": 1, "colour": null}', 'field "colour" is not a column of the table'),
    (b'{"id": 1, "ID": 2}', 'field "ID" is not a column of the table'),  # names are case-sensitive
    (b'{"id": 1, "col\\u006fur": null}', 'field "colour" is not a column of the table'),  # an escaped key
]


@pytest.mark.parametrize(("message", "reason"), BAD)
def test_malformed_message_is_rejected_and_the_good_ones_decode(message: bytes, reason: str) -> None:
    good = [enc({"id": i, "i8": 1, "s": "x", "amt": "1.5"}) for i in range(40)]
    values: list[bytes | None] = [*good[:20], message, *good[20:]]
    r = decode_both_ways(ALL_TYPES, values)
    assert [i for i, _ in r.rejected] == [20]
    assert r.rejected[0][1].startswith(reason), r.rejected[0][1]
    assert [row["id"] for row in rows(r)] == list(range(40))
    assert r.source_index.tolist() == [*range(20), *range(21, 41)]


# -- fields the table does not have -------------------------------------------------------------------

KNOWN = table("id BIGINT, amount DOUBLE, note STRING, op STRING", **{"rowkind.field": "op"})
KNOWN_REASON = 'field "colour" is not a column of the table (columns: id, amount, note, op)'


@pytest.mark.parametrize("n", [5, 40, 300])  # below MIN_CHUNK, just above it, a batch the reader takes whole
@pytest.mark.parametrize("value", ["red", None, 7, [1, {"x": 2}], {"nested": True}])
def test_unknown_field_in_one_row_of_many_rejects_exactly_that_row(n: int, value: Any) -> None:
    for at in sorted({0, n // 2, n - 1}):
        values: list[bytes | None] = [enc({"id": i, "amount": i / 2, "note": f"n{i}"}) for i in range(n)]
        values[at] = enc({"id": at, "amount": 1.0, "colour": value})
        r = decode_both_ways(KNOWN, values)
        assert r.rejected == [(at, KNOWN_REASON)]
        assert [row["id"] for row in rows(r)] == [i for i in range(n) if i != at]
        assert r.source_index.tolist() == [i for i in range(n) if i != at]


def test_every_row_with_an_unknown_field_is_rejected() -> None:
    """A writer whose schema is older than its producers': every row is refused, none is written with NULLs."""
    values: list[bytes | None] = [enc({"id": i, "amount": 1.0, "colour": "red"}) for i in range(2000)]
    values[1000:1000] = [enc({"id": -1, "note": "colour"}), enc({"id": -2, "note": '"colour"'})]  # the name as text
    r = decode_both_ways(KNOWN, values, table="shop.orders")
    assert [i for i, _ in r.rejected] == [i for i in range(2002) if i not in (1000, 1001)]
    assert {reason for _, reason in r.rejected} == {KNOWN_REASON.replace("the table", "shop.orders")}
    assert [row["id"] for row in rows(r)] == [-1, -2]


def test_row_kind_fields_are_not_unknown() -> None:
    values = [enc({"id": i, "_row_kind": "+U" if i % 2 else None, "op": "-D" if i % 3 == 0 else "+I"})
              for i in range(100)]
    r = decode_both_ways(KNOWN, values)
    assert r.rejected == []
    assert kinds(r) == [UPDATE_AFTER if i % 2 else DELETE if i % 3 == 0 else INSERT for i in range(100)]


def test_many_unknown_fields_are_named_up_to_five() -> None:
    r = decode_both_ways(KNOWN, [enc({"id": 1, **{f"x{j}": j for j in range(7)}})])
    assert r.rejected == [(0, 'fields "x0", "x1", "x2", "x3", "x4" and 2 more are not columns of the table '
                              "(columns: id, amount, note, op)")]


OTHER_NAMES = st.sampled_from(["colour", "size", "ID", "Amount", "x y", "é", "", "_row_kind2"]) | \
    st.text(max_size=8).filter(lambda k: k not in ("id", "amount", "note", "op", ROW_KIND_COLUMN))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 150), st.data())
def test_property_exactly_the_rows_with_unknown_fields_are_rejected(n: int, data: Any) -> None:
    bad = data.draw(st.sets(st.integers(0, n - 1)))
    values: list[bytes | None] = []
    names: dict[int, str] = {}
    for i in range(n):
        doc: dict[str, Any] = {"id": i, "amount": i / 4, "note": data.draw(st.sampled_from([f"n{i}", "colour", None]))}
        if data.draw(st.booleans()):
            doc[ROW_KIND_COLUMN] = data.draw(st.sampled_from(["+I", "+U", None]))
        if data.draw(st.booleans()):
            doc["op"] = "+I"
        if i in bad:
            names[i] = data.draw(OTHER_NAMES)
            doc[names[i]] = data.draw(st.none() | st.integers(-5, 5) | st.text(max_size=4) | st.just({"x": [1]}))
        # json.dumps escapes non-ASCII keys (`"\u00e9"`): those take the reader's slow way to their row
        values.append(json.dumps(doc, ensure_ascii=data.draw(st.booleans())).encode())
    r = decode_both_ways(KNOWN, values)
    assert [i for i, _ in r.rejected] == sorted(bad)
    for i, reason in r.rejected:
        assert reason.startswith(f"field {json.dumps(names[i], ensure_ascii=False)} is not a column of the table")
    assert [row["id"] for row in rows(r)] == [i for i in range(n) if i not in bad]


def test_append_only_table_rejects_retractions() -> None:
    schema = table("id BIGINT, s STRING", keys=())
    r = decode_both_ways(schema, [enc({"id": 1}), enc({"id": 2, "_row_kind": "-D"})])
    assert r.rejected == [(1, "an append-only table takes only inserts (+I), got -D")]


def test_tombstones_are_counted_not_rejected() -> None:
    r = decode_both_ways(ALL_TYPES, [None, enc({"id": 1}), None])
    assert r.tombstones == 2 and r.rejected == [] and r.source_index.tolist() == [1]


def test_unknown_format_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown ingestion format"):
        decode_messages(ALL_TYPES, [], "avro", False)  # type: ignore[arg-type]


def test_empty_input() -> None:
    r = decode_messages(ALL_TYPES, [], "json", False)
    assert r.batch.num_rows == 0 and r.source_index.tolist() == [] and r.tombstones == 0


# -- Debezium ------------------------------------------------------------------------------------------

DBZ = table("id INT, name STRING, day DATE, ts TIMESTAMP(3), tsu TIMESTAMP(6), tsn TIMESTAMP(9), "
            "ltz TIMESTAMP(6) WITH LOCAL TIME ZONE, amt DECIMAL(10, 2), var DECIMAL(12, 4), t TIME(6)")

DBZ_FIELDS = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "name"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "day"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "field": "ts"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "field": "tsu"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp", "field": "tsn"},
    {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "field": "ltz"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "amt"},
    {"type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal", "field": "var",
     "fields": [{"type": "int32", "field": "scale"}, {"type": "bytes", "field": "value"}]},
    {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "t"},
]


def unscaled(d: Decimal, scale: int) -> str:
    n = int(d.scaleb(scale))
    return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()


def image(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"n{i}", "day": 19723, "ts": 1704164645123, "tsu": 1704164645123456,
            "tsn": 1704164645123456789, "ltz": "2024-01-02T03:04:05.123456Z", "amt": unscaled(Decimal("-12.34"), 2),
            "var": {"scale": 3, "value": unscaled(Decimal("1.5"), 3)}, "t": 45_296_789_000}


EXPECTED_IMAGE = {"name": "n{i}", "day": dt.date(2024, 1, 1), "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 123000),
                  "tsu": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
                  "ltz": dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC),
                  "amt": Decimal("-12.34"), "var": Decimal("1.5000"), "t": dt.time(12, 34, 56, 789000)}


def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, with_schema: bool) -> bytes:
    payload = {"before": before, "after": after, "source": {"db": "shop"}, "op": op, "ts_ms": 1}
    if not with_schema:
        return enc(payload)
    schema = {"type": "struct", "name": "shop.orders.Envelope", "fields": [
        {"type": "struct", "optional": True, "field": "before", "fields": DBZ_FIELDS},
        {"type": "struct", "optional": True, "field": "after", "fields": DBZ_FIELDS},
        {"type": "string", "optional": False, "field": "op"}]}
    return enc({"schema": schema, "payload": payload})


@pytest.mark.parametrize("with_schema", [True, False])
def test_debezium_types(with_schema: bool) -> None:
    r = decode_messages(DBZ, [event("c", None, image(7), with_schema)], "debezium", False)
    assert r.rejected == []
    (row,) = rows(r)
    assert row["id"] == 7 and row["tsn"] == pd_ns(1704164645123456789)
    for k, v in EXPECTED_IMAGE.items():
        assert row[k] == (v.format(i=7) if isinstance(v, str) else v), k


def pd_ns(n: int) -> Any:
    return pa.scalar(n, pa.timestamp("ns")).as_py()


@pytest.mark.parametrize("with_schema", [True, False])
def test_debezium_ops_and_row_kinds(with_schema: bool) -> None:
    values: list[bytes | None] = [
        event("r", None, image(1), with_schema), event("c", None, image(2), with_schema),
        event("u", image(2), image(3), with_schema), event("d", image(3), None, with_schema), None,
    ]
    r = decode_messages(DBZ, values, "debezium", True)
    assert kinds(r) == [INSERT, INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE]
    assert [row["id"] for row in rows(r)] == [1, 2, 2, 3, 3]
    assert r.source_index.tolist() == [0, 1, 2, 2, 3]
    assert r.tombstones == 1 and r.rejected == []
    r = decode_messages(DBZ, values, "debezium", False)
    assert kinds(r) == [INSERT, INSERT, UPDATE_AFTER, DELETE]
    assert r.source_index.tolist() == [0, 1, 2, 3]


def test_debezium_plain_values_and_string_decimals() -> None:
    schema = table("id BIGINT, amt DECIMAL(10, 2), day DATE, ts TIMESTAMP(3)")
    after = {"id": 1, "amt": "12.50", "day": "2024-01-01", "ts": "2024-01-02T03:04:05.123Z"}
    str_schema = {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [
        {"field": "amt", "type": "string"}]}]}
    r = decode_messages(schema, [enc({"schema": str_schema, "payload": {"op": "c", "after": after}}),
                                 enc({"op": "c", "after": {**after, "amt": 3.25}})], "debezium", False)
    assert r.rejected == []
    assert [row["amt"] for row in rows(r)] == [Decimal("12.50"), Decimal("3.25")]
    assert rows(r)[0]["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 123000)


DBZ_COLUMNS = "id, name, day, ts, tsu, tsn, ltz, amt, var, t"


@pytest.mark.parametrize("with_schema", [True, False])
def test_debezium_envelope_fields_are_not_checked(with_schema: bool) -> None:
    """`source`, `ts_ms`, `transaction` (and `schema`) belong to the envelope, not to the row."""
    payload = {"before": None, "after": image(1), "op": "c", "ts_ms": 1, "ts_us": 1000, "ts_ns": 1000000,
               "source": {"connector": "postgresql", "db": "shop", "table": "orders", "lsn": 42},
               "transaction": {"id": "571:53195832", "total_order": 1, "data_collection_order": 1}}
    message = enc({"schema": {"type": "struct", "fields": []}, "payload": payload}) if with_schema else enc(payload)
    r = decode_messages(DBZ, [message], "debezium", True)
    assert r.rejected == [] and [row["id"] for row in rows(r)] == [1]


@pytest.mark.parametrize("retract", [True, False])
@pytest.mark.parametrize(("op", "before", "after", "where"), [
    ("c", None, {**image(1), "colour": "red"}, "after"),
    ("r", None, {**image(1), "colour": None}, "after"),
    ("u", image(1), {**image(1), "colour": "red"}, "after"),
    ("u", {**image(1), "colour": "red"}, image(1), "before"),  # checked even when no -U is made of it
    ("d", {**image(1), "colour": "red"}, None, "before"),
])
def test_debezium_unknown_field_in_an_image_rejects_the_event(op: str, before: Any, after: Any, where: str,
                                                              retract: bool) -> None:
    good = event("c", None, image(2), False)
    for with_schema in (True, False):
        r = decode_messages(DBZ, [good, event(op, before, after, with_schema), good], "debezium", retract,
                            table="shop.orders")
        assert r.rejected == [(1, f'"{where}": field "colour" is not a column of shop.orders '
                                  f"(columns: {DBZ_COLUMNS})")]
        assert r.source_index.tolist() == [0, 2]


@pytest.mark.parametrize(("message", "reason"), [
    (enc({"op": "z", "after": {"id": 1}}), 'unknown op "z"; Debezium ops are c, r, u and d'),
    (enc({"op": "t"}), 'op "t" (truncate) is not supported'),
    (enc({"after": {"id": 1}}), 'not a Debezium change event: no "op" field'),
    (enc({"op": "c", "after": None}), 'op "c" has no "after" image'),
    (enc({"op": "d", "before": None}), 'op "d" has no "before" image'),
    (enc({"op": "u", "before": None, "after": {"id": 1}}), 'update has no "before" image'),
    (enc({"op": "c", "after": [1]}), '"after" must be a JSON object or null, got array'),
    (enc({"payload": 5, "schema": None}), '"payload" must be a JSON object, got number'),
    (enc({"op": "c", "after": {"id": None}}), 'NULL in primary key "id"'),
    (enc({"op": "c", "after": {"name": "x"}}), 'missing key column "id"'),
    (enc({"op": "c", "after": {"id": 1, "day": "x"}}), 'field "day": expected DATE got "x"'),
    (b"\x89PNG", "not UTF-8 text"),
])
def test_debezium_malformed(message: bytes, reason: str) -> None:
    good = event("c", None, image(1), False)
    r = decode_messages(DBZ, [good, message, good], "debezium", True)
    assert [i for i, _ in r.rejected] == [1]
    assert r.rejected[0][1].startswith(reason), r.rejected[0][1]
    assert r.source_index.tolist() == [0, 2]


# -- retractions per merge engine, dead letters ---------------------------------------------------------

@pytest.mark.parametrize(("options", "expected"), [
    ({}, False),
    ({"merge-engine": "first-row"}, False),
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"}, True),
    ({"merge-engine": "aggregation", "fields.v.aggregate-function": "max"}, False),  # max cannot retract
    ({"merge-engine": "partial-update"}, False),  # a -U has no meaning without delete options
    ({"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"}, True),
])
def test_needs_retractions(options: dict[str, str], expected: bool) -> None:
    assert needs_retractions(table("id BIGINT, v BIGINT", **options)) is expected
    assert needs_retractions(table("id BIGINT, v BIGINT", keys=())) is False


def test_dead_letter_value() -> None:
    text = json.loads(dead_letter_value(b'{"id": "x"}', "bad id", "lake.ingest.db.t", 3, 42))
    assert text == {"topic": "lake.ingest.db.t", "partition": 3, "offset": 42, "reason": "bad id",
                    "original": '{"id": "x"}', "encoding": "utf-8"}
    raw = json.loads(dead_letter_value(b"\xff\x00", "not UTF-8", "t", 0, 1))
    assert raw["encoding"] == "base64" and base64.b64decode(raw["original"]) == b"\xff\x00"
    assert json.loads(dead_letter_value(None, "r", "t", 0, 1))["original"] is None


# -- properties ------------------------------------------------------------------------------------------

TYPES = {
    "TINYINT": st.integers(-128, 127), "INT": st.integers(-(2**31), 2**31 - 1),
    "BIGINT": st.integers(-(2**63), 2**63 - 1), "BOOLEAN": st.booleans(),
    "DOUBLE": st.floats(allow_nan=False, allow_infinity=False),
    "FLOAT": st.floats(width=32, allow_nan=False, allow_infinity=False),
    "STRING": st.text(max_size=8),
    "DATE": st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)),
    "TIMESTAMP(3)": st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)).map(
        lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    "TIMESTAMP(6)": st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)),
    "DECIMAL(9, 3)": st.decimals(min_value=-999999, max_value=999999, places=3, allow_nan=False),
}


def _epoch(d: dt.datetime, unit: int) -> int:
    delta = d - EPOCH
    return (delta.days * 86_400 + delta.seconds) * unit + delta.microseconds * unit // 1_000_000


def plain_value(t: str, v: Any, draw: Any) -> Any:
    """A JSON form `lake write` and plain producers use for a model value."""
    if t == "DATE":
        return draw(st.sampled_from([v.isoformat(), (v - EPOCH.date()).days]))
    if t.startswith("TIMESTAMP"):
        forms = [v.isoformat(), v.isoformat(sep=" ") + "Z"]
        return draw(st.sampled_from(forms + ([_epoch(v, 1000)] if t == "TIMESTAMP(3)" else [])))
    if t.startswith("DECIMAL"):
        return draw(st.sampled_from([str(v), float(v) if len(v.as_tuple().digits) < 15 else str(v)]))
    if t in ("BIGINT", "INT"):
        return draw(st.sampled_from([v, str(v)]))
    return v


def debezium_value(t: str, v: Any) -> tuple[Any, dict[str, Any]]:
    """The value as Debezium's JsonConverter writes it, and its field schema."""
    if t == "DATE":
        return (v - EPOCH.date()).days, {"type": "int32", "name": "io.debezium.time.Date"}
    if t == "TIMESTAMP(3)":
        return _epoch(v, 1000), {"type": "int64", "name": "io.debezium.time.Timestamp"}
    if t == "TIMESTAMP(6)":
        return _epoch(v, 1_000_000), {"type": "int64", "name": "io.debezium.time.MicroTimestamp"}
    if t.startswith("DECIMAL"):
        return unscaled(v, 3), {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                                "parameters": {"scale": "3"}}
    return v, {"type": {"BOOLEAN": "boolean", "STRING": "string"}.get(t, "int64")}


def model(t: str, v: Any) -> Any:
    if v is None:
        return None
    if t == "FLOAT":
        return float(np.float32(v))
    if t.startswith("DECIMAL"):
        return v.quantize(Decimal("0.001"))
    return v


@st.composite
def tables_and_rows(draw: Any) -> tuple[TableSchema, list[str], list[dict[str, Any]]]:
    types = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=5))
    columns = ["id BIGINT"] + [f"c{i} {t}" for i, t in enumerate(types)]
    schema = table(", ".join(columns))
    n = draw(st.integers(1, 40))
    rows_ = []
    for i in range(n):
        row: dict[str, Any] = {"id": i}
        for j, t in enumerate(types):
            row[f"c{j}"] = draw(st.none() | TYPES[t])
        rows_.append(row)
    return schema, ["BIGINT", *types], rows_


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), tables_and_rows())
def test_property_rows_round_trip_as_json_and_debezium(data: Any, generated: Any) -> None:
    schema, types, model_rows = generated
    names = schema.field_names
    expected = [{n: model(t, row[n]) for n, t in zip(names, types, strict=True)} for row in model_rows]

    plain = [enc({n: None if row[n] is None else plain_value(t, row[n], data.draw)
                  for n, t in zip(names, types, strict=True)}) for row in model_rows]
    r = decode_both_ways(schema, plain)
    assert r.rejected == [] and rows(r) == expected

    for with_schema in (True, False):
        events = []
        for row in model_rows:
            after, fields = {}, []
            for n, t in zip(names, types, strict=True):
                v, field_schema = debezium_value(t, row[n]) if row[n] is not None else (None, {"type": "string"})
                after[n] = v
                fields.append({**field_schema, "field": n})
            events.append(event("c", None, after, False) if not with_schema else enc(
                {"schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": fields}]},
                 "payload": {"op": "c", "before": None, "after": after}}))
        r = decode_messages(schema, events, "debezium", False)
        assert r.rejected == [] and rows(r) == expected, with_schema


GARBAGE = st.sampled_from([
    b"", b"{", b"}", b"[]", b"null", b"\xff\xfe\xfa", b'{"id": null}', b'{"v": 1}', b'{"id": "x1"}',
    b'{"id": 1.5}', b'{"id": 1, "small": 1000}', b'{"id": 1, "v": "nope"}', b'{"id": 1, "_row_kind": "?"}',
    b'{"id": 1}{"id": 2}', b'{"id": 1, "day": "2024-13-01"}',
    b'{"id": 1, "colour": 1}', b'{"id": 1, "v": 1, "zz": null}',  # fields the table does not have
]) | st.binary(max_size=12).map(lambda b: b"\x01" + b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(-(2**40), 2**40), min_size=0, max_size=300),
       st.lists(st.tuples(st.integers(0, 300), GARBAGE | st.none()), max_size=60))
def test_property_garbage_interleaved_yields_exactly_the_good_rows(ids: list[int], junk: list[Any]) -> None:
    schema = table("id BIGINT, v BIGINT, small TINYINT, day DATE")
    values: list[bytes | None] = [enc({"id": i, "v": i % 7, "small": i % 100, "day": "2024-01-01"}) for i in ids]
    good_at = list(range(len(values)))
    for pos, bad in sorted(junk, key=lambda x: x[0], reverse=True):
        pos = min(pos, len(values))
        values.insert(pos, bad)
        good_at = [g + 1 if g >= pos else g for g in good_at]
    r = decode_both_ways(schema, values)
    assert [row["id"] for row in rows(r)] == ids
    assert r.source_index.tolist() == good_at
    bad_at = [i for i, v in enumerate(values) if v is not None and i not in set(good_at)]
    assert [i for i, _ in r.rejected] == bad_at
    assert all(reason for _, reason in r.rejected)
    assert r.tombstones == sum(v is None for v in values)
