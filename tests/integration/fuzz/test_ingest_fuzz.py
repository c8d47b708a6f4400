"""Garbage Kafka messages through the ingestion decoder, against a plain-Python model of what is accepted.

Each generated message carries what the model expects of it: the row (and row kind) it stands for, a
dead letter, or a tombstone (a null value, skipped). The property: every message is applied or
dead-lettered with a reason (never both, never dropped; tombstones are only counted), and the valid
messages of a mixed batch are applied, in order, with exactly the model's values.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lsmlake.format.row_kind import DELETE, INSERT, ROW_KIND_COLUMN, UPDATE_AFTER
from lsmlake.format.schema import new_table_schema
from lsmlake.format.types import parse_schema_fields
from lsmlake.ingest import decode_messages
from tests.support.fuzz.hostile import FUZZ

SCHEMA = new_table_schema(parse_schema_fields(
    "id BIGINT NOT NULL, name STRING, qty INT, price DECIMAL(10, 2), day DATE"), primary_keys=["id"],
    options={"bucket": "1"})
COLUMNS = ("id", "name", "qty", "price", "day")
APPLY, DEAD, TOMBSTONE = "apply", "dead-letter", "tombstone"


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()


@st.composite
def valid_rows(draw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the JSON object, the row the model expects) of a valid row."""
    doc: dict[str, Any] = {"id": draw(st.integers(-(2**63), 2**63 - 1))}
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row["id"] = doc["id"]
    if draw(st.booleans()):
        doc["name"] = row["name"] = draw(st.one_of(st.text(max_size=20), st.just("é" * 100_000)))
    if draw(st.booleans()):
        doc["qty"] = row["qty"] = draw(st.integers(-(2**31), 2**31 - 1))
    if draw(st.booleans()):
        cents = draw(st.integers(-(10**10) + 1, 10**10 - 1))
        row["price"] = Decimal(cents).scaleb(-2)
        doc["price"] = str(row["price"])
    if draw(st.booleans()):
        row["day"] = draw(st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31)))
        doc["day"] = row["day"].isoformat()
    return doc, row


def _bad_field(draw: Any, plain: bool = True) -> dict[str, Any]:
    """A row with one field the table cannot take. Only in plain JSON: a row kind (Debezium's op gives the
    kind) and "1e20" as a decimal (Debezium reads decimal text that is valid base64 as the unscaled bytes)."""
    doc = draw(valid_rows())[0]
    doc.pop(ROW_KIND_COLUMN, None)
    column, value = draw(st.sampled_from([
        ("id", "abc"), ("id", 1.5), ("id", 2**63), ("id", -(2**63) - 1), ("id", None), ("id", [1]), ("id", True),
        ("qty", 2**31), ("qty", "x"), ("qty", {"a": 1}), ("qty", 1e400),
        ("price", "12.345"), ("price", "abc"), ("price", 10**9),
        ("day", "2024-13-01"), ("day", "2024-02-30"), ("day", "yesterday"), ("day", 2**40),
        ("name", 5), ("name", ["a"]),
        *([(ROW_KIND_COLUMN, "+X"), (ROW_KIND_COLUMN, 9), ("price", "1e20")] if plain else []),
    ]))
    if column == "id" and value is None and draw(st.booleans()):
        del doc["id"]  # a missing key, not only a null one
    else:
        doc[column] = value
    return doc


@st.composite
def plain_messages(draw: Any) -> tuple[bytes | None, str, dict[str, Any] | None]:
    """(message value, what the model expects, the expected row when applied)."""
    which = draw(st.sampled_from(("valid", "valid", "valid", "bad_field", "utf8", "json", "shape", "tombstone",
                                  "deep")))
    if which == "valid":
        doc, row = draw(valid_rows())
        text = _dumps(doc)
        if draw(st.booleans()):  # pretty-printed: not a one-line object, decoded on its own
            text = json.dumps(doc, indent=2, ensure_ascii=False).encode()
        return text, APPLY, row
    if which == "bad_field":
        return _dumps(_bad_field(draw)), DEAD, None
    if which == "utf8":
        return draw(st.sampled_from((b"\xff", b"\xc3\x28", b"\xed\xa0\x80"))) + _dumps(draw(valid_rows())[0]), \
            DEAD, None
    if which == "json":
        good = _dumps(draw(valid_rows())[0])
        return draw(st.sampled_from((good[:-1], good + b"}", b"{" + good, good.replace(b":", b"=", 1), b"",
                                     b"{'id': 1}", b"{\"id\": 1,}"))), DEAD, None
    if which == "shape":
        return draw(st.sampled_from((b"[]", b"[{\"id\": 1}]", b"1", b"\"id\"", b"null", b"true",
                                     b'{"id": 1}{"id": 2}'))), DEAD, None
    if which == "deep":
        n = draw(st.sampled_from((50, 5_000, 100_000)))
        return b'{"id": 1, "name": ' + b"[" * n + b"]" * n + b"}", DEAD, None
    return None, TOMBSTONE, None


def _check(result: Any, expected: list[tuple[str, Any]], kinds: list[int]) -> None:
    applied = [i for i, (what, _) in enumerate(expected) if what == APPLY]
    dead = [i for i, (what, _) in enumerate(expected) if what == DEAD]
    rejected = [i for i, _ in result.rejected]
    assert sorted(set(result.source_index.tolist())) == applied, "applied messages differ from the model"
    assert rejected == dead, "dead-lettered messages differ from the model"
    assert not set(rejected) & set(result.source_index.tolist()), "a message both applied and dead-lettered"
    assert all(reason.strip() for _, reason in result.rejected)
    assert result.tombstones == sum(what == TOMBSTONE for what, _ in expected)
    got = result.batch.drop_columns([ROW_KIND_COLUMN]).to_pylist()
    assert got == [row for what, row in expected if what == APPLY]
    assert result.batch.column(ROW_KIND_COLUMN).to_pylist() == kinds


@FUZZ
@given(st.lists(plain_messages(), max_size=120))
def test_plain_json_garbage_against_the_model(messages: list[tuple[bytes | None, str, Any]]) -> None:
    result = decode_messages(SCHEMA, [m for m, _, _ in messages], "json", needs_retractions=False)
    expected = [(what, row) for _, what, row in messages]
    _check(result, expected, [INSERT] * sum(what == APPLY for what, _ in expected))


@st.composite
def debezium_messages(draw: Any) -> tuple[bytes | None, str, dict[str, Any] | None, int | None]:
    """(message value, what the model expects, the expected row, its row kind)."""
    doc, row = draw(valid_rows())
    doc.pop("unknown_field", None)
    doc.pop(ROW_KIND_COLUMN, None)
    which = draw(st.sampled_from(("c", "r", "u", "d", "no_op", "odd_op", "no_image", "bad_image", "bad_field",
                                  "payload", "tombstone", "garbage")))
    wrap = (lambda env: {"schema": {"type": "struct", "fields": []}, "payload": env}) if draw(st.booleans()) \
        else (lambda env: env)
    if which in ("c", "r"):
        return _dumps(wrap({"op": which, "before": None, "after": doc})), APPLY, row, INSERT
    if which == "u":
        return _dumps(wrap({"op": "u", "before": None, "after": doc})), APPLY, row, UPDATE_AFTER
    if which == "d":
        return _dumps(wrap({"op": "d", "before": doc, "after": None})), APPLY, row, DELETE
    if which == "no_op":
        return _dumps(wrap({"before": None, "after": doc})), DEAD, None, None
    if which == "odd_op":
        op = draw(st.sampled_from(("z", "t", "C", "", 1, ["c"], {"c": 1})))
        return _dumps(wrap({"op": op, "after": doc})), DEAD, None, None
    if which == "no_image":
        op = draw(st.sampled_from(("c", "r", "u", "d")))
        return _dumps(wrap({"op": op, "before": None, "after": None})), DEAD, None, None
    if which == "bad_image":
        return _dumps(wrap({"op": "c", "after": draw(st.sampled_from(([1], "row", 5, True)))})), DEAD, None, None
    if which == "bad_field":
        bad = _bad_field(draw, plain=False)
        return _dumps(wrap({"op": "c", "after": bad})), DEAD, None, None
    if which == "payload":
        return _dumps({"schema": {}, "payload": draw(st.sampled_from(([], "x", 1)))}), DEAD, None, None
    if which == "garbage":
        return draw(st.sampled_from((b"\xff\xfe", b"{", b"[]", b"null"))), DEAD, None, None
    return None, TOMBSTONE, None, None


@FUZZ
@given(st.lists(debezium_messages(), max_size=80))
def test_debezium_garbage_against_the_model(messages: list[tuple[bytes | None, str, Any, Any]]) -> None:
    result = decode_messages(SCHEMA, [m for m, _, _, _ in messages], "debezium", needs_retractions=False)
    _check(result, [(what, row) for _, what, row, _ in messages],
           [kind for _, what, _, kind in messages if what == APPLY])
