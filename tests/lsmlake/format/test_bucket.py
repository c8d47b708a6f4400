"""Bucket assignment: the fact sheet's examples, the golden warehouse's fixed-bucket tables, and
fresh tables that pypaimon itself bucketed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsmlake.errors import InvalidInputError
from lsmlake.format import types as T
from lsmlake.format.binary_row import encode_row
from lsmlake.format.binary_row_columns import encode_rows
from lsmlake.format.bucket import bucket_ids, hash_bytes, murmur3_rows
from lsmlake.format.type_json import type_from_json
from lsmlake.format.types import DataType
from tests.support.golden import GOLDEN_WAREHOUSE

GOLDEN = GOLDEN_WAREHOUSE / "db.db"
needs_golden = pytest.mark.skipif(not GOLDEN.is_dir(), reason="golden warehouse not available")

INT = DataType(T.INT)
BIGINT = DataType(T.BIGINT)
STRING = T.string_type()


# ---------------------------------------------------------------------------------------------
# Section 7 examples
# ---------------------------------------------------------------------------------------------

def test_bigint_examples() -> None:
    assert encode_row([0], [BIGINT]) == bytes(16)
    assert hash_bytes(bytes(16)) == -300363099
    assert hash_bytes(encode_row([1], [BIGINT])) == 1465514398
    # id 1 is in bucket-0 and id 0 in bucket-1 of the 2-bucket table db.t.
    assert bucket_ids([pa.array([0, 1], pa.int64())], [BIGINT], 2).tolist() == [1, 0]


def test_int_string_example() -> None:
    row = encode_row([5, "abc"], [INT, STRING])
    assert hash_bytes(row) == 761334957 == 0x2D610CAD
    cols = [pa.array([5], pa.int32()), pa.array(["abc"])]
    assert [int(bucket_ids(cols, [INT, STRING], n)[0]) for n in (2, 3, 4, 10)] == [1, 0, 1, 7]


def test_negative_hash_uses_truncating_modulo() -> None:
    # -300363099 % 3 is 0 in Python but -0 -> 0 in Java; -300363099 % 4 is 1 in Python, -3 in Java.
    assert bucket_ids([pa.array([0], pa.int64())], [BIGINT], 4).tolist() == [3]
    assert bucket_ids([pa.array([0], pa.int64())], [BIGINT], 7).tolist() == [abs(-300363099) % 7]


def test_invalid_arguments() -> None:
    with pytest.raises(InvalidInputError):
        bucket_ids([pa.array([1], pa.int64())], [BIGINT], 0)
    with pytest.raises(InvalidInputError):
        murmur3_rows(np.zeros(6, np.uint8), np.array([0, 6]))
    with pytest.raises(InvalidInputError):
        hash_bytes(b"abc")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40).map(lambda b: b + bytes(-len(b) % 4)), max_size=30))
def test_murmur3_rows_matches_scalar(rows: list[bytes]) -> None:
    flat = np.frombuffer(b"".join(rows), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    assert murmur3_rows(flat, offsets).tolist() == [hash_bytes(r) for r in rows]


def test_murmur3_rows_ignores_surrounding_bytes() -> None:
    rows = [encode_row([i, "x" * i], [INT, STRING]) for i in range(20)]
    data = b"\xff" * 8 + b"".join(rows) + b"\xff" * 8
    offsets = 8 + np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    assert murmur3_rows(np.frombuffer(data, np.uint8), offsets).tolist() == [hash_bytes(r) for r in rows]


# ---------------------------------------------------------------------------------------------
# Golden tables: every row sits in the bucket we compute
# ---------------------------------------------------------------------------------------------

def load_schema(table: Path) -> tuple[dict[str, T.AnyType], list[str], list[str], dict[str, str]]:
    d = json.loads((table / "schema" / "schema-0").read_text())
    types = {f["name"]: type_from_json(f["type"]) for f in d["fields"]}
    return types, d["partitionKeys"], d["primaryKeys"], d["options"]


def bucket_key(partition_keys: list[str], primary_keys: list[str], options: dict[str, str]) -> list[str]:
    """Option bucket-key if set, else the primary key minus the partition keys."""
    if options.get("bucket-key"):
        return [k.strip() for k in options["bucket-key"].split(",")]
    return [k for k in primary_keys if k not in partition_keys]


def added_files(table: Path) -> list[tuple[int, Path]]:
    """(manifest _BUCKET, data file path) of every ADD entry whose file still exists."""
    out = []
    for path in sorted((table / "manifest").glob("manifest-*")):
        if path.name.startswith("manifest-list-"):
            continue
        with path.open("rb") as f:
            for entry in fastavro.reader(f):
                assert isinstance(entry, dict)
                if entry["_KIND"] != 0:
                    continue
                name = entry["_FILE"]["_FILE_NAME"]
                found = [p for p in table.rglob(name) if p.parent.name == f"bucket-{entry['_BUCKET']}"]
                assert len(found) == 1, f"{name} not in bucket-{entry['_BUCKET']}"
                out.append((entry["_BUCKET"], found[0]))
    return out


def check_table_buckets(table: Path) -> int:
    """Assert every row of every data file is in the bucket we compute; return the row count."""
    types, partition_keys, primary_keys, options = load_schema(table)
    num_buckets = int(options["bucket"])
    key = bucket_key(partition_keys, primary_keys, options)
    rows = 0
    for bucket, path in added_files(table):
        data = pq.ParquetFile(path).read()
        ids = bucket_ids([data.column(k) for k in key], [types[k] for k in key], num_buckets)
        assert (ids == bucket).all(), f"{path}: {ids.tolist()} != {bucket}"
        rows += data.num_rows
    return rows


@needs_golden
@pytest.mark.parametrize("table", ["types_t", "nullpart_t", "rowkind_t", "overwrite_t", "changelog_t",
                                   "dv_pk_t", "append_bucket_t"])
def test_golden_buckets(table: str) -> None:
    assert check_table_buckets(GOLDEN / table) > 0


# ---------------------------------------------------------------------------------------------
# Fresh tables bucketed by pypaimon
# ---------------------------------------------------------------------------------------------

def _is_pypaimon_decimal_edge(unscaled: int) -> bool:
    """-2^(8k-1): pypaimon writes one byte more than Java, so its bucket may differ from Java's."""
    return unscaled < 0 and (-unscaled) & (-unscaled - 1) == 0 and (-unscaled).bit_length() % 8 == 0


def _pypaimon_tables(n: int) -> list[tuple[str, pa.Table, list[str], list[str]]]:
    rng = np.random.default_rng(7)
    parts = pa.array(["p1", "p2", "p3"] * (n // 3) + ["p1"] * (n % 3))
    ids = rng.integers(-(2 ** 63), 2 ** 63 - 1, n, dtype=np.int64)
    ids[:4] = [0, 1, -1, 2 ** 63 - 1]
    bigint = pa.table({"id": pa.array(ids), "dt": parts, "v": pa.array(np.arange(n))})
    words = ["", "a", "abcdefg", "abcdefgh", "héllo wörld", "a-much-longer-string", "x" * 100,
             "日本語テキスト"]
    strs = [words[i % len(words)] + str(i) * int(rng.integers(0, 4)) for i in range(n)]
    int_string = pa.table({"k1": pa.array(rng.integers(-(2 ** 31), 2 ** 31, n).astype(np.int32)),
                           "k2": pa.array(strs), "v": pa.array(np.arange(n))})
    unscaled = [int(u) for u in rng.integers(-(10 ** 17), 10 ** 17, n)]
    unscaled[:4] = [0, -1, 10 ** 17 - 1, -127]
    unscaled = [u for u in unscaled if not _is_pypaimon_decimal_edge(u)]
    m = len(unscaled)
    mixed = pa.table({
        "kd": pa.array([Decimal(u).scaleb(-2) for u in unscaled], pa.decimal128(20, 2)),
        "kc": pa.array([Decimal(int(u) % 10 ** 9).scaleb(-3) for u in unscaled], pa.decimal128(10, 3)),
        "kt": pa.array(rng.integers(-(2 ** 50), 2 ** 50, m), pa.timestamp("us")),
        "kt3": pa.array(rng.integers(-(2 ** 40), 2 ** 40, m), pa.timestamp("ms")),
        "kdate": pa.array(rng.integers(-100_000, 100_000, m).astype(np.int32)).view(pa.date32()),
        "kb": pa.array(rng.integers(0, 2, m).astype(bool)),
        "kti": pa.array(rng.integers(-128, 128, m).astype(np.int8)),
        "ksi": pa.array(rng.integers(-(2 ** 15), 2 ** 15, m).astype(np.int16)),
        "kf": pa.array(rng.normal(size=m).astype(np.float32)),
        "kdb": pa.array(rng.normal(size=m) * 1e6),
        "kbin": pa.array([rng.integers(0, 256, int(rng.integers(0, 20))).astype(np.uint8).tobytes()
                          for _ in range(m)]),
        "v": pa.array(np.arange(m)),
    })
    return [
        ("bigint", bigint, ["id", "dt"], ["dt"]),
        ("int_string", int_string, ["k1", "k2"], []),
        ("mixed", mixed, [c for c in mixed.column_names if c != "v"], []),
    ]


@pytest.mark.parametrize("case", range(3))
def test_pypaimon_written_buckets(tmp_path: Path, case: int) -> None:
    pypaimon = pytest.importorskip("pypaimon")
    name, data, primary_keys, partition_keys = _pypaimon_tables(3000)[case]
    # Primary-key columns must be NOT NULL in the schema.
    schema = pa.schema([pa.field(f.name, f.type, nullable=f.name not in primary_keys) for f in data.schema])
    data = data.cast(schema)
    catalog = pypaimon.CatalogFactory.create({"warehouse": str(tmp_path)})
    catalog.create_database("db", True)
    catalog.create_table(f"db.{name}", pypaimon.Schema.from_pyarrow_schema(
        schema, primary_keys=primary_keys, partition_keys=partition_keys, options={"bucket": "4"}), True)
    table = catalog.get_table(f"db.{name}")
    builder = table.new_batch_write_builder()
    write, commit = builder.new_write(), builder.new_commit()
    write.write_arrow(data)
    commit.commit(write.prepare_commit())
    write.close()
    commit.close()
    rows = check_table_buckets(tmp_path / "db.db" / name)
    assert rows == data.num_rows
    # Every bucket was used, so the check is not vacuous.
    used = {p.name for p in (tmp_path / "db.db" / name).rglob("bucket-*")}
    assert used == {f"bucket-{i}" for i in range(4)}


def test_bucket_ids_vectorised_equals_scalar() -> None:
    """bucket_ids over columns with nulls and mixed types equals hashing encode_row per row."""
    types = [INT, STRING, DataType(T.DECIMAL, precision=30, scale=4), DataType(T.TIMESTAMP_LTZ, precision=6)]
    cols = [pa.array([1, None, 3, -4], pa.int32()),
            pa.array(["short", "a-much-longer-string", None, ""]),
            pa.array([Decimal("1.5"), None, Decimal("-128"), Decimal("12345678901234567890.1234")],
                     pa.decimal128(30, 4)),
            pa.array([datetime(2024, 1, 1, tzinfo=UTC), None,
                      datetime(1960, 5, 6, 7, 8, 9, 10, tzinfo=UTC),
                      datetime(2262, 1, 1, tzinfo=UTC)], pa.timestamp("us", tz="UTC"))]
    rows: list[list[Any]] = [[c[i].as_py() for c in cols] for i in range(4)]
    for n in (1, 3, 16, 1000):
        expected = [abs(int(np.fmod(hash_bytes(encode_row(r, types)), n))) for r in rows]
        assert bucket_ids(cols, types, n).tolist() == expected
    flat, offsets = encode_rows(cols, types)
    assert murmur3_rows(flat, offsets).tolist() == [hash_bytes(encode_row(r, types)) for r in rows]
