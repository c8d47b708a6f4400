"""Every type lsmlake writes either reads back equal through pyiceberg and DuckDB, or is refused by name."""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.format.schema import new_table_schema
from lsmlake.format.types import parse_schema_fields
from lsmlake.iceberg import check_iceberg, publish_iceberg_now
from tests.support.iceberg_readers import duckdb_read, pyiceberg_read

_n = itertools.count()

# (column type, a value lsmlake writes) for every type Iceberg v2 readers read back equal
PUBLISHED = [
    ("BOOLEAN", True), ("TINYINT", -7), ("SMALLINT", 300), ("INT", 1 << 20), ("BIGINT", 1 << 40),
    ("FLOAT", 1.5), ("DOUBLE", 2.25), ("DECIMAL(9, 2)", Decimal("1234567.89")),
    ("DECIMAL(38, 10)", Decimal("1234567890123456789012345678.0123456789")), ("CHAR(3)", "abc"),
    ("VARCHAR(10)", "hello"), ("STRING", "world"), ("BINARY(2)", b"\x01\x02"), ("VARBINARY(5)", b"xyz"),
    ("BYTES", b"\x00\xff"), ("DATE", dt.date(2024, 2, 29)),
    ("TIMESTAMP(6)", dt.datetime(2024, 1, 2, 3, 4, 5, 123456)), ("TIMESTAMP(0)", dt.datetime(2024, 1, 2, 3, 4, 5)),
    ("TIMESTAMP(3)", dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),
    ("TIMESTAMP(3) WITH LOCAL TIME ZONE", dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=dt.UTC)),
    ("TIMESTAMP(6) WITH LOCAL TIME ZONE", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)),
    ("ARRAY<INT>", [1, None, 3]), ("MAP<STRING, BIGINT>", [("a", 1), ("b", None)]),
    ("ROW<x INT, y ARRAY<STRING>>", {"x": 1, "y": ["p", None]}),
]
REFUSED = ["TIME(3)", "TIMESTAMP(9)", "TIMESTAMP(7)", "TIMESTAMP(9) WITH LOCAL TIME ZONE", "ARRAY<TIME(3)>",
           "ROW<x TIME(0)>", "BLOB", "MAP<STRING, TIME(3)>"]


def _comparable(v):
    if isinstance(v, dict):
        return {k: _comparable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_comparable(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_comparable(x) for x in v)
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC)
    return v


@pytest.mark.parametrize(("type_text", "value"), PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_type_round_trip(tmp_path, type_text: str, value) -> None:
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    t = cat.create_table("db.t", f"k INT NOT NULL, c {type_text}", options={"bucket": "1", "bucket-key": "k"})
    arrow = t.schema.arrow_schema
    t.write_arrow(pa.table({"k": pa.array([1, 2], pa.int32()), "c": pa.array([value, None], arrow.field("c").type)}))
    check_iceberg(t.schema, {"metadata.iceberg.storage": "table-location"})
    pub = publish_iceberg_now(t)
    assert pub is not None
    expected = sorted(t.to_arrow().to_pylist(), key=lambda r: r["k"])
    assert expected[0]["c"] is not None
    for reader in (pyiceberg_read, duckdb_read):
        got = sorted(reader(pub.metadata_location).to_pylist(), key=lambda r: r["k"])
        if type_text.startswith("MAP") and reader is duckdb_read:
            got = [{**r, "c": list(r["c"].items()) if isinstance(r["c"], dict) else r["c"]} for r in got]
        assert _comparable(got) == _comparable(expected), reader.__name__


@pytest.mark.parametrize("type_text", REFUSED)
def test_types_without_an_equal_iceberg_type_are_refused(type_text: str) -> None:
    schema = new_table_schema(parse_schema_fields(f"k INT NOT NULL, t {type_text}"))
    with pytest.raises(InvalidInputError, match=r"column `t` .* cannot be published as Iceberg: "):
        check_iceberg(schema, {"metadata.iceberg.storage": "table-location"})


@pytest.mark.parametrize(("options", "message"), [
    ({"metadata.iceberg.storage": "hive-catalog"}, "own Iceberg REST catalog"),
    ({"metadata.iceberg.storage": "rest-catalog"}, "own Iceberg REST catalog"),
    ({"metadata.iceberg.storage": "nope"}, "disabled, table-location, hadoop-catalog"),
    ({"metadata.iceberg.format-version": "3"}, "position delete files"),
    ({"metadata.iceberg.storage-location": "x"}, "table-location, catalog-location"),
    ({"metadata.iceberg.previous-versions-max": "-1"}, "integer >= 0"),
    ({"metadata.iceberg.delete-after-commit.enabled": "maybe"}, "true or false"),
    ({"metadata.iceberg.manifest-compression": "lz4"}, "must be one of"),
])
def test_unsupported_options_are_refused(options: dict[str, str], message: str) -> None:
    schema = new_table_schema(parse_schema_fields("k INT NOT NULL"))
    with pytest.raises(InvalidInputError, match=message):
        check_iceberg(schema, {"metadata.iceberg.storage": "table-location", **options})


PARTITION_TYPES = [("TINYINT", [1, None]), ("BIGINT", [1 << 40, 2]), ("STRING", ["a", "b/c"]),
                   ("DATE", [dt.date(2024, 1, 1), None]), ("DECIMAL(10, 2)", [Decimal("1.50"), Decimal("-2.25")]),
                   ("BOOLEAN", [True, False]), ("TIMESTAMP(6)", [dt.datetime(2024, 1, 1, 1, 2, 3, 4), None])]


@pytest.mark.parametrize(("type_text", "values"), PARTITION_TYPES, ids=[p[0] for p in PARTITION_TYPES])
def test_partition_values_in_manifests(tmp_path, type_text: str, values: list) -> None:
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    t = cat.create_table("db.t", f"k INT NOT NULL, p {type_text}", partition_keys=["p"],
                         options={"bucket": "1", "bucket-key": "k"})
    p_type = t.schema.arrow_schema.field("p").type
    t.write_arrow(pa.table({"k": pa.array([1, 2], pa.int32()), "p": pa.array(values, p_type)}))
    pub = publish_iceberg_now(t)
    assert pub is not None
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(pub.metadata_location)
    partitions = sorted((tuple(f.partition) for f in (task.file for task in table.scan().plan_files())), key=repr)
    assert len(partitions) == 2
    expected = sorted(t.to_arrow().to_pylist(), key=lambda r: r["k"])
    for reader in (pyiceberg_read, duckdb_read):
        assert sorted(reader(pub.metadata_location).to_pylist(), key=lambda r: r["k"]) == expected, reader.__name__
    if isinstance(values[0], str):  # a filter on the partition column prunes by the manifests' partition values
        assert table.scan(row_filter=f"p == '{values[0]}'").to_arrow().num_rows == 1
