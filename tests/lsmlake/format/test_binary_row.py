"""BinaryRow codec: the fact sheet's worked examples, round trips, the vectorised encoder and real
rows from the pypaimon-written golden warehouse."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lsmlake.errors import CorruptMetadataError, InvalidInputError
from lsmlake.format import types as T
from lsmlake.format.binary_row import EMPTY_ROW, decode_row, deserialize_row, encode_row, serialize_row
from lsmlake.format.binary_row_columns import encode_rows
from lsmlake.format.binary_row_layout import null_bits_width
from lsmlake.format.type_json import field_from_json
from lsmlake.format.types import DataType
from tests.support.golden import GOLDEN_WAREHOUSE

GOLDEN = GOLDEN_WAREHOUSE / "db.db"
needs_golden = pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden warehouse not available")

INT = DataType(T.INT)
BIGINT = DataType(T.BIGINT)
STRING = T.string_type()
BYTES = T.bytes_type()


def dec(p: int, s: int) -> DataType:
    return DataType(T.DECIMAL, precision=p, scale=s)


def ts(p: int, ltz: bool = False) -> DataType:
    return DataType(T.TIMESTAMP_LTZ if ltz else T.TIMESTAMP, precision=p)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# ---------------------------------------------------------------------------------------------
# Section 5.2 worked examples, byte-exact
# ---------------------------------------------------------------------------------------------

NINE_TYPES = [INT, BIGINT, STRING, DataType(T.DATE), ts(3), dec(10, 2), DataType(T.DOUBLE),
              DataType(T.BOOLEAN), BYTES]
NINE_VALUES = [7, 2 ** 40, "a b/c", date(2024, 2, 29), datetime(2024, 1, 2, 3, 4, 5, 678000),
               Decimal("12.34"), 1.5, True, b"\x01\x02"]

EXAMPLES: list[tuple[list[Any], list[DataType], str]] = [
    ([5, "abc"], [INT, STRING], "00000002 0000000000000000 0500000000000000 6162630000000083"),
    ([42, "hello paimon"], [INT, STRING],
     "00000002 0000000000000000 2a00000000000000 0c00000018000000 68656c6c6f207061696d6f6e 00000000"),
    ([None, "x"], [INT, STRING], "00000002 0001000000000000 0000000000000000 7800000000000081"),
    ([1, "short"], [INT, STRING], "00000002 0000000000000000 0100000000000000 73686f7274000085"),
    ([2, "a-much-longer-string"], [INT, STRING],
     "00000002 0000000000000000 0200000000000000 1400000018000000"
     "612d6d7563682d6c6f6e6765722d737472696e67 00000000"),
    (["2026-11-21"], [STRING],
     "00000001 0000000000000000 0a00000010000000 323032362d31312d3231 000000000000"),
    (NINE_VALUES, NINE_TYPES,
     "00000009 0000000000000000 0700000000000000 0000000000010000 6120622f63000085 464d000000000000"
     "2edb20c88c010000 d204000000000000 000000000000f83f 0100000000000000 0102000000000082"),
    # Java's null rule for a non-compact decimal: 16 reserved bytes, slot (offset 16 << 32) | 0,
    # i.e. LE bytes 00000000 10000000 (AbstractBinaryWriter.setOffsetAndSize; the fact sheet's
    # example prints the two halves swapped).
    ([None], [dec(38, 10)], "00000001 0001000000000000 0000000010000000" + "00" * 16),
    ([], [], "00000000 0000000000000000"),
]


@pytest.mark.parametrize("values,types,expected", EXAMPLES)
def test_worked_examples(values: list[Any], types: list[DataType], expected: str) -> None:
    assert serialize_row(values, types) == h(expected)
    assert deserialize_row(h(expected), types) == values


def test_empty_row_is_12_bytes() -> None:
    assert h("00000000 0000000000000000") == EMPTY_ROW
    assert deserialize_row(EMPTY_ROW, []) == []


# The real min-values row of a one-row nullpart_t file (15 fields, W=8, var part from 128).
NULLPART_STATS_TYPES = [STRING, INT, INT, STRING, dec(10, 2), dec(38, 10), ts(3), ts(6), DataType(T.DATE),
                        DataType(T.DOUBLE), DataType(T.BOOLEAN), BYTES, DataType(T.FLOAT),
                        DataType(T.TINYINT), DataType(T.SMALLINT)]
NULLPART_STATS_VALUES = [None, None, 1, "short", Decimal("1.23"), Decimal("123456789.0123456789"),
                         datetime(2024, 1, 1, 0, 0, 0, 123000), datetime(2024, 1, 1, 0, 0, 0, 123456),
                         date(2024, 1, 1), 1.0, True, b"\x00\xff", 1.5, 1, 300]


def test_non_compact_example() -> None:
    data = encode_row(NULLPART_STATS_VALUES, NULLPART_STATS_TYPES)
    assert null_bits_width(15) == 8
    slot = 8 + 8 * 5
    assert data[slot:slot + 8] == h("0800000080000000")  # DECIMAL(38,10): 8 bytes at 128
    assert data[128:144] == h("112210f47de98115") + bytes(8)
    slot = 8 + 8 * 7
    assert data[slot:slot + 8] == h("40f5060090000000")  # TIMESTAMP(6): nano 456000 at 144
    assert data[144:152] == h("7bf451c28c010000")  # 1704067200123 ms


def test_null_forms_of_java_and_pypaimon_both_decode() -> None:
    java = h("00000001 0001000000000000 0000000010000000") + bytes(16)
    pypaimon = h("00000001 0001000000000000 0000000000000000")
    for data in (java, pypaimon):
        assert deserialize_row(data, [dec(38, 10)]) == [None]
    assert serialize_row([None], [ts(6)]) == h("00000001 0001000000000000 0000000010000000") + bytes(8)
    assert deserialize_row(pypaimon, [ts(9)]) == [None]


def test_decimal_minimal_bytes_and_pypaimon_length() -> None:
    t = [dec(20, 0)]
    java = serialize_row([Decimal(-128)], t)
    assert java[12:20] == h("0100000010000000")  # 1 byte at offset 16
    assert java[20:21] == h("80")
    # pypaimon writes ff80 for the same value: it must decode the same.
    pypaimon = h("00000001 0000000000000000 0200000010000000 ff80") + bytes(14)
    assert deserialize_row(pypaimon, t) == [Decimal(-128)]
    assert serialize_row([Decimal(0)], t)[20:21] == b"\x00"
    assert serialize_row([Decimal(255)], t)[12:22] == h("0200000010000000 00ff")


def test_decimal_rounds_half_up_and_rejects_overflow() -> None:
    assert deserialize_row(serialize_row([Decimal("1.005")], [dec(10, 2)]), [dec(10, 2)]) == [Decimal("1.01")]
    with pytest.raises(InvalidInputError):
        encode_row([Decimal("1000")], [dec(3, 0)])


def test_invalid_inputs() -> None:
    with pytest.raises(InvalidInputError):
        encode_row([[1]], [T.ArrayType(INT)])
    with pytest.raises(InvalidInputError):
        encode_row([1, 2], [INT])
    with pytest.raises(InvalidInputError):
        encode_row(["x"], [INT])
    with pytest.raises(InvalidInputError):
        encode_rows([pa.array([[1]])], [T.ArrayType(INT)])
    with pytest.raises(CorruptMetadataError):
        deserialize_row(h("00000002 0000000000000000"), [INT, INT])
    with pytest.raises(CorruptMetadataError):
        deserialize_row(h("00000001 0000000000000000 0c00000010000000"), [STRING])  # var part missing


def test_wide_row_uses_two_header_words() -> None:
    types = [INT] * 60
    values: list[Any] = list(range(60))
    values[57] = None
    data = encode_row(values, types)
    assert null_bits_width(60) == 16
    assert len(data) == 16 + 8 * 60
    assert data[(57 + 8) // 8] == 1 << ((57 + 8) % 8)
    assert decode_row(data, types) == values
    flat, offsets = encode_rows([pa.array([v], pa.int32()) for v in values], types)
    assert flat.tobytes() == data and offsets.tolist() == [0, len(data)]


# ---------------------------------------------------------------------------------------------
# Random rows: round trip and vectorised == scalar
# ---------------------------------------------------------------------------------------------

_MIN_MS = -62135596800000  # 0001-01-01T00:00
_MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999
_DATE_RANGE = (-719162, 2932896)


@st.composite
def atomic_types(draw: st.DrawFn) -> DataType:
    kind = draw(st.sampled_from(T.ATOMIC_KINDS))
    nullable = draw(st.booleans())
    if kind == T.DECIMAL:
        p = draw(st.one_of(st.integers(1, 18), st.integers(19, 38)))
        return DataType(kind, nullable, precision=p, scale=draw(st.integers(0, p)))
    if kind in (T.TIMESTAMP, T.TIMESTAMP_LTZ):
        return DataType(kind, nullable, precision=draw(st.integers(0, 9)))
    if kind == T.TIME:
        return DataType(kind, nullable, precision=draw(st.integers(0, 3)))
    if kind in T.STRING_KINDS + T.BINARY_KINDS:
        return DataType(kind, nullable, length=T.MAX_LENGTH)
    return DataType(kind, nullable)


def raw_values(t: DataType) -> st.SearchStrategy[Any]:
    """Values pa.array(..., type=to_arrow_type(t)) accepts; temporal types as raw integers."""
    k = t.kind
    ints = {T.TINYINT: 8, T.SMALLINT: 16, T.INT: 32, T.BIGINT: 64}
    if k in ints:
        b = ints[k]
        return st.integers(-(2 ** (b - 1)), 2 ** (b - 1) - 1)
    if k == T.BOOLEAN:
        return st.booleans()
    if k == T.FLOAT:
        return st.floats(width=32, allow_nan=False)
    if k == T.DOUBLE:
        return st.floats(allow_nan=False)
    if k == T.DECIMAL:
        bound = 10 ** t.precision - 1
        edges = [u for u in (0, -1, 1, -128, 127, -32768, -(2 ** 63), bound, -bound) if abs(u) <= bound]
        unscaled = st.one_of(st.integers(-bound, bound), st.sampled_from(edges))
        return unscaled  # built into a decimal128 array by decimal_array
    if k in T.STRING_KINDS:
        return st.text(max_size=30)
    if k in T.BINARY_KINDS:
        return st.binary(max_size=30)
    if k == T.DATE:
        return st.integers(*_DATE_RANGE)
    if k == T.TIME:
        return st.integers(0, 86_399_999)
    unit = T.to_arrow_type(t).unit
    if unit == "ms":
        return st.integers(_MIN_MS, _MAX_MS)
    if unit == "us":
        return st.integers(_MIN_MS * 1000, _MAX_MS * 1000 + 999)
    return st.integers(-(2 ** 63) + 1, 2 ** 63 - 1)


def decimal_array(unscaled: list[int | None], t: DataType) -> pa.Array:
    """A decimal128 array from unscaled integers (pa.array infers odd precisions from Decimals like 0E-3)."""
    data = b"".join((u or 0).to_bytes(16, "little", signed=True) for u in unscaled)
    validity = pa.array([u is not None for u in unscaled], pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(T.to_arrow_type(t), len(unscaled), [validity, pa.py_buffer(data)])


@st.composite
def columns(draw: st.DrawFn, max_rows: int = 12) -> tuple[list[DataType], list[pa.Array], int]:
    types = draw(st.lists(atomic_types(), min_size=0, max_size=8))
    n = draw(st.integers(0 if types else 1, max_rows))
    arrays = []
    for t in types:
        value = raw_values(t)
        if t.nullable:
            value = st.one_of(st.none(), value)
        raw = draw(st.lists(value, min_size=n, max_size=n))
        if t.kind in (T.DATE, T.TIME):
            storage = pa.array(raw, pa.int32())
            arrays.append(storage.view(T.to_arrow_type(t)))
        elif t.kind == T.DECIMAL:
            arrays.append(decimal_array(raw, t))
        else:
            arrays.append(pa.array(raw, type=T.to_arrow_type(t)))
    return types, arrays, n


def rows_of(arrays: list[pa.Array], n: int) -> list[list[Any]]:
    return [[a[i].as_py() for a in arrays] for i in range(n)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(columns(max_rows=3))
def test_round_trip(data: tuple[list[DataType], list[pa.Array], int]) -> None:
    types, arrays, n = data
    for row in rows_of(arrays, n):
        encoded = serialize_row(row, types)
        decoded = deserialize_row(encoded, types)
        assert decoded == row
        assert [type(v) for v in decoded] == [type(v) for v in row]
        assert serialize_row(decoded, types) == encoded


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(columns())
def test_encode_rows_matches_encode_row(data: tuple[list[DataType], list[pa.Array], int]) -> None:
    types, arrays, n = data
    flat, offsets = encode_rows(arrays, types, num_rows=n)
    assert offsets.dtype.name == "int64" and flat.dtype.name == "uint8" and len(offsets) == n + 1
    expected = [encode_row(row, types) for row in (rows_of(arrays, n) if arrays else [[]] * n)]
    assert [flat[offsets[i]:offsets[i + 1]].tobytes() for i in range(n)] == expected
    assert offsets[-1] == len(flat) == sum(map(len, expected))


def test_encode_rows_sliced_and_chunked() -> None:
    ints = pa.array([1, None, 3, 4, 5, 6], pa.int32())
    strs = pa.array(["a", "long string here", None, "", "1234567", "12345678"])
    decs = pa.array([Decimal("1.5"), None, Decimal("-2.25"), Decimal(0), Decimal("9" * 18), None],
                    pa.decimal128(38, 2))
    types = [INT, STRING, dec(38, 2)]
    rows = rows_of([ints, strs, decs], 6)
    chunked = [pa.chunked_array([a[:2], a[2:]]) for a in (ints, strs, decs)]
    sliced = [a.slice(2) for a in (ints, strs, decs)]
    for cols, expect in ((chunked, rows), (sliced, rows[2:])):
        flat, offsets = encode_rows(cols, types)
        got = [flat[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(expect))]
        assert got == [encode_row(r, types) for r in expect]


def test_encode_rows_other_arrow_layouts() -> None:
    """Columns not in lsmlake's own Arrow mapping still encode by value (units, large strings)."""
    micros = pa.array([1704067200123456, -1, None], pa.timestamp("us"))
    as_ns = micros.cast(pa.timestamp("ns"))
    large = pa.array(["x", "a-much-longer-string", None], pa.large_string())
    t = [ts(9), ts(3), STRING]
    flat1, off1 = encode_rows([micros, micros, large], t)
    flat2, off2 = encode_rows([as_ns, as_ns, large.cast(pa.string())], t)
    assert flat1.tobytes() == flat2.tobytes() and off1.tolist() == off2.tolist()
    row = deserialize_row(serialize_row([micros[1].as_py(), micros[1].as_py(), "x"], t), t)
    assert row[1] == datetime(1969, 12, 31, 23, 59, 59, 999000)  # floor to the millisecond


def test_timezones_and_nanoseconds() -> None:
    aware = datetime(2024, 1, 1, 8, 0, 0, 123456, tzinfo=timezone(timedelta(hours=8)))
    utc = datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    assert encode_row([aware], [ts(6, ltz=True)]) == encode_row([utc], [ts(6, ltz=True)])
    assert deserialize_row(serialize_row([aware], [ts(6, ltz=True)]), [ts(6, ltz=True)]) == [utc]
    nanos = pa.scalar(1704067200123456789, pa.timestamp("ns")).as_py()  # a pandas.Timestamp
    data = serialize_row([nanos], [ts(9)])
    assert data[12:20] == (456789).to_bytes(4, "little") + (16).to_bytes(4, "little")  # nano | offset
    assert deserialize_row(data, [ts(9)]) == [nanos]
    assert deserialize_row(serialize_row([time(1, 2, 3, 4000)], [DataType(T.TIME)]),
                           [DataType(T.TIME)]) == [time(1, 2, 3, 4000)]


# ---------------------------------------------------------------------------------------------
# Real rows from the golden warehouse
# ---------------------------------------------------------------------------------------------

def load_schema(table: str) -> tuple[list[T.DataField], list[str], list[str], dict[str, str]]:
    d = json.loads((GOLDEN / table / "schema" / "schema-0").read_text())
    fields = [field_from_json(f) for f in d["fields"]]
    return fields, d["partitionKeys"], d["primaryKeys"], d["options"]


def manifest_entries(table: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((GOLDEN / table / "manifest").glob("manifest-*")):
        if path.name.startswith("manifest-list-"):
            continue
        with path.open("rb") as f:
            out.extend(r for r in fastavro.reader(f) if isinstance(r, dict))
    return out


def _pypaimon_would_differ(values: list[Any], types: list[T.AnyType]) -> bool:
    """Rows where pypaimon's bytes are not Java's: null non-compact fields, decimals -2^(8k-1)."""
    for v, t in zip(values, types, strict=True):
        assert isinstance(t, DataType)
        noncompact = (t.kind == T.DECIMAL and t.precision > 18) or (
            t.kind in (T.TIMESTAMP, T.TIMESTAMP_LTZ) and t.precision > 3)
        if v is None and noncompact:
            return True
        if v is not None and t.kind == T.DECIMAL and t.precision > 18:
            u = int(v.scaleb(t.scale))
            if u < 0 and (-u) & (-u - 1) == 0 and (-u).bit_length() % 8 == 0:
                return True
    return False


GOLDEN_TABLES = ["types_t", "nullpart_t", "append_t", "append_bucket_t", "rowkind_t", "changelog_t",
                 "dv_pk_t", "overwrite_t", "dv_append_t", "dyn_t", "alltypes_t"]


@needs_golden
@pytest.mark.parametrize("table", GOLDEN_TABLES)
def test_golden_manifest_rows(table: str) -> None:
    fields, partition_keys, primary_keys, _ = load_schema(table)
    by_name = {f.name: f.type for f in fields}
    part_types = [by_name[k] for k in partition_keys]
    key_types = [by_name[k] for k in primary_keys if k not in partition_keys]
    checked = 0
    for entry in manifest_entries(table):
        meta = entry["_FILE"]
        stats_cols = meta["_VALUE_STATS_COLS"]
        value_types = [by_name[c] for c in stats_cols] if stats_cols is not None else [f.type for f in fields]
        rows = [(entry["_PARTITION"], part_types), (meta["_MIN_KEY"], key_types),
                (meta["_MAX_KEY"], key_types)]
        if meta["_KEY_STATS"]["_MIN_VALUES"] != EMPTY_ROW:
            rows += [(meta["_KEY_STATS"]["_MIN_VALUES"], key_types),
                     (meta["_KEY_STATS"]["_MAX_VALUES"], key_types)]
        if meta["_VALUE_STATS"]["_MIN_VALUES"] != EMPTY_ROW:
            rows += [(meta["_VALUE_STATS"]["_MIN_VALUES"], value_types),
                     (meta["_VALUE_STATS"]["_MAX_VALUES"], value_types)]
        for raw, types in rows:
            values = deserialize_row(raw, types)
            reencoded = serialize_row(values, types)
            if _pypaimon_would_differ(values, types):
                assert deserialize_row(reencoded, types) == values
            else:
                assert reencoded == raw
            checked += 1
    assert checked > 0


@needs_golden
def test_golden_decoded_values() -> None:
    (entry,) = manifest_entries("types_t")
    assert deserialize_row(entry["_PARTITION"], NINE_TYPES) == NINE_VALUES
    assert deserialize_row(entry["_FILE"]["_MIN_KEY"], [BIGINT]) == [1]
    # nullpart_t: the one-row files' value stats are the row itself.
    fields, _, _, _ = load_schema("nullpart_t")
    types = [f.type for f in fields]
    assert [t.with_nullable(True) for t in types] == NULLPART_STATS_TYPES
    seen_pypaimon_null_form = False
    for entry in manifest_entries("nullpart_t"):
        meta = entry["_FILE"]
        (path,) = (GOLDEN / "nullpart_t").glob(f"*/*/bucket-{entry['_BUCKET']}/{meta['_FILE_NAME']}")
        row = pq.ParquetFile(path).read().select([f.name for f in fields]).to_pylist()[0]
        expected = [row[f.name] for f in fields]
        for stats in (meta["_VALUE_STATS"]["_MIN_VALUES"], meta["_VALUE_STATS"]["_MAX_VALUES"]):
            assert deserialize_row(stats, types) == expected
            if expected[5] is None:  # null DECIMAL(38,10) and TIMESTAMP(6): pypaimon reserves nothing
                assert len(serialize_row(expected, types)) == len(stats) + 24
                seen_pypaimon_null_form = True
        if meta["_FILE_NAME"].startswith("data-cc7d0819"):
            assert meta["_VALUE_STATS"]["_MIN_VALUES"] == serialize_row(NULLPART_STATS_VALUES, types)
    assert seen_pypaimon_null_form


@needs_golden
def test_golden_alltypes_data_encodes_per_row() -> None:
    """encode_rows over real pypaimon-written columns of every atomic type equals encode_row per row."""
    fields, _, _, _ = load_schema("alltypes_t")
    atomic = [f for f in fields if isinstance(f.type, DataType)]
    (path,) = (GOLDEN / "alltypes_t" / "bucket-0").glob("*.parquet")
    table = pq.ParquetFile(path).read()
    arrays = [table.column(f.name) for f in atomic]
    types = [f.type for f in atomic]
    flat, offsets = encode_rows(arrays, types)
    for i in range(table.num_rows):
        row = [a[i].as_py() for a in arrays]
        data = encode_row(row, types)
        assert flat[offsets[i]:offsets[i + 1]].tobytes() == data
        assert decode_row(data, types) == row
