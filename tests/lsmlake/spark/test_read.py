"""Batch reads through Spark equal lsmlake's reader and pypaimon on the table matrix (local[2])."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError
from lsmlake.spark.batch_read import LakeBatchReader
from lsmlake.spark.read_options import ReadOptions
from lsmlake.spark.source import LakeDataSource
from tests.support.spark_tables import IDENTS, MATRIX, pypaimon_read, rows, spark_rows


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    wh = str(tmp_path_factory.mktemp("wh"))
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    for build in MATRIX.values():
        build(cat)
    return wh


def _read(spark, wh: str, ident: str, **options: str):
    r = spark.read.format("lsmlake").option("warehouse", wh)
    for k, v in options.items():
        r = r.option(k.replace("__", "-").replace("_", "."), v)
    return r.load(ident)


@pytest.mark.parametrize("name", list(MATRIX))
def test_read_equals_lsmlake_and_pypaimon(spark, warehouse, name) -> None:
    ident = IDENTS[name]
    table = FileSystemCatalog(warehouse).get_table(ident)
    expected = table.to_arrow()
    assert expected.num_rows > 0
    got = spark_rows(_read(spark, warehouse, ident), expected.column_names)
    assert got == rows(expected), f"{name}: spark differs from lsmlake's reader"
    assert got == rows(pypaimon_read(warehouse, ident), expected.column_names), f"{name}: spark differs from pypaimon"


def test_merge_on_read_splits_need_merging(warehouse) -> None:
    """The matrix really exercises the merge: the merge-on-read table has splits that are not raw-convertible."""
    table = FileSystemCatalog(warehouse).get_table("db.mor")
    splits = table.new_scan().plan()
    assert any(not s.raw_convertible for s in splits)
    dv = FileSystemCatalog(warehouse).get_table("db.dv")
    assert any(s.dv_index is not None for s in dv.new_scan().plan())


def test_one_spark_partition_per_split(spark, warehouse) -> None:
    table = FileSystemCatalog(warehouse).get_table("db.mor")
    splits = table.new_scan().plan()
    assert len(splits) > 3
    df = _read(spark, warehouse, "db.mor", split_target__size="1")
    assert df.rdd.getNumPartitions() == len(splits)
    packed = _read(spark, warehouse, "db.mor")  # small buckets share partitions
    assert packed.rdd.getNumPartitions() == 1
    assert spark_rows(df) == spark_rows(packed)


def test_time_travel_by_snapshot_and_timestamp(spark, warehouse) -> None:
    table = FileSystemCatalog(warehouse).get_table("db.mor")
    first = table.to_arrow(snapshot_id=1)
    assert first.num_rows != table.to_arrow().num_rows
    assert spark_rows(_read(spark, warehouse, "db.mor", snapshot="1")) == rows(first)
    assert spark_rows(_read(spark, warehouse, "db.mor", snapshot="1")) == rows(pypaimon_read(warehouse, "db.mor", 1),
                                                                                first.column_names)
    s2 = table.snapshots.snapshot(2)
    iso = dt.datetime.fromtimestamp(s2.time_millis / 1000, dt.UTC).replace(tzinfo=None).isoformat()
    assert spark_rows(_read(spark, warehouse, "db.mor", timestamp=str(s2.time_millis))) == rows(table.to_arrow(2))
    assert spark_rows(_read(spark, warehouse, "db.mor", timestamp=iso)) == rows(table.to_arrow(2))


def test_filter_prunes_and_filters_exactly(spark, warehouse) -> None:
    table = FileSystemCatalog(warehouse).get_table("db.mor")
    full = table.to_arrow().to_pylist()
    text = "dt IN ('p1', 'p3') AND id >= 5 AND v IS NOT NULL AND price < 17.5"
    want = [r for r in full if r["dt"] in ("p1", "p3") and r["id"] >= 5 and r["v"] is not None
            and float(r["price"]) < 17.5]
    assert want
    got = _read(spark, warehouse, "db.mor", filter=text).toArrow()
    assert rows(got) == rows(table.to_arrow().filter(
        __import__("pyarrow").compute.field("id").isin([r["id"] for r in want])))
    # planning skipped partition p2 entirely
    opts = ReadOptions.parse({"path": "db.mor", "warehouse": warehouse, "filter": text, "split.target-size": "1"})
    schema = LakeDataSource({"path": "db.mor", "warehouse": warehouse}).schema()
    from lsmlake.spark.arrow_types import arrow_target

    parts = LakeBatchReader(opts, arrow_target(schema)).partitions()
    planned = {s.partition_values for p in parts for s in p.splits}
    assert planned == {("p1",), ("p3",)}


def test_column_pruning_by_option_and_by_schema(spark, warehouse) -> None:
    table = FileSystemCatalog(warehouse).get_table("db.dv")
    expected = rows(table.to_arrow(projection=["v", "id"]))
    by_option = _read(spark, warehouse, "db.dv", columns="v,id")
    assert by_option.columns == ["v", "id"]
    assert spark_rows(by_option) == expected
    by_schema = spark.read.format("lsmlake").option("warehouse", warehouse).schema("v string, id bigint").load("db.dv")
    assert spark_rows(by_schema) == expected


def test_row_kind_column_in_batch_reads(spark, warehouse) -> None:
    df = _read(spark, warehouse, "db.compacted", **{"row-kind": "true"})
    assert df.columns[-1] == "_row_kind"
    assert {r["_row_kind"] for r in df.select("_row_kind").collect()} == {"+I"}


@pytest.mark.parametrize("options,message", [
    ({}, "needs option('catalog'"),
    ({"warehouse": "W", "snapshot": "x"}, "'snapshot'"),
    ({"warehouse": "W", "snapshot": "1", "timestamp": "5"}, "exclude each other"),
    ({"warehouse": "W", "bogus": "1"}, "unknown lsmlake option"),
    ({"warehouse": "W", "timestamp": "yesterday"}, "'timestamp'"),
])
def test_bad_options_are_refused(options, message) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        ReadOptions.parse({"path": "db.t", **options})


def test_bad_filter_and_missing_snapshot_fail_clearly(spark, warehouse) -> None:
    with pytest.raises(Exception, match="not a column"):
        _read(spark, warehouse, "db.mor", filter="nope = 1").collect()
    with pytest.raises(Exception, match="snapshot 99 does not exist"):
        _read(spark, warehouse, "db.mor", snapshot="99").collect()
    with pytest.raises(Exception, match="does not exist"):
        _read(spark, warehouse, "db.missing").collect()


def test_spark_parquet_reader_reads_files_with_uncompressed_and_zstd_columns(spark, tmp_path) -> None:
    """Paimon's Java engines read data files through the Java Parquet library; Spark's own Parquet
    reader (the same library) reads a data file whose random columns were written uncompressed
    beside zstd ones, value for value."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lsmlake.format.data_file_writer import bucket_dir

    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db", True)
    t = cat.create_table("db.codecs", "id BIGINT NOT NULL, noise DOUBLE, h BIGINT, s STRING",
                         primary_keys=["id"], options={"bucket": "1"})
    n = 20_000
    rng = np.random.default_rng(3)
    t.write_arrow(pa.table({"id": np.arange(n), "noise": rng.random(n), "h": rng.integers(-2**63, 2**63 - 1, n),
                            "s": [f"x{i % 97}" for i in range(n)]}).cast(t.schema.arrow_schema))
    (split,) = t.plan()
    path = f"{bucket_dir(t.path, '', 0)}/{split.files[0].file_name}"
    meta = pq.ParquetFile(path).metadata.row_group(0)
    codecs = {meta.column(i).path_in_schema: meta.column(i).compression for i in range(meta.num_columns)}
    assert codecs["noise"] == codecs["h"] == "UNCOMPRESSED" and codecs["s"] == codecs["id"] == "ZSTD"
    got = [r.asDict() for r in spark.read.parquet(path).select("id", "noise", "h", "s").orderBy("id").collect()]
    assert got == t.to_arrow().sort_by("id").to_pylist()
