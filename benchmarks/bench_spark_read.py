"""Reading a 5,000,000-row primary-key table with 8 buckets through Spark local[2] (the `lsmlake` format),
against lsmlake's single-process reader (the anchor) and against Spark reading the same live data files
as plain Parquet (`spark.read.parquet`, no merge, no deletion vectors: an upper bound).

The table is written by lsmlake in two overlapping batches (4,500,000 keys, then 1,000,000 rows: 500,000
updates and 500,000 new keys, so 5,000,000 live rows),
then fully compacted (COMPACTED=1, the default: raw reads, the steady state) or left with level-0 files
(COMPACTED=0: every bucket is merged on read). Spark runs are forced with the `noop` sink (all columns
materialised in the JVM); each is warmed up once (Python workers started, files cached) and then timed.

The machine has 2 cores shared with other work; the single-process reader also decodes on 2 threads.
Sizes: ROWS_TOTAL, BUCKETS, COMPACTED environment variables.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

from lsmlake.catalog.filesystem import FileSystemCatalog  # noqa: E402
from lsmlake.format.data_file_writer import bucket_dir  # noqa: E402
from lsmlake.table.compact import compact_table  # noqa: E402

ROWS_TOTAL = int(os.environ.get("ROWS_TOTAL", "5000000"))
BUCKETS = int(os.environ.get("BUCKETS", "8"))
COMPACTED = os.environ.get("COMPACTED", "1") == "1"


def data(n: int, first_id: int, seed: int, version: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(first_id, first_id + n, dtype=np.int64)
    s = pc.binary_join_element_wise("val-", pc.utf8_lpad(pa.array(ids).cast(pa.string()), 12, "0"), "")
    return pa.table({"id": ids, "dt": pa.array(["2026-11-21"] * n), "v": np.full(n, version, np.int64), "s": s,
                     "d": rng.random(n)}, schema=common.SCHEMA)


def spark_session():  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    import lsmlake.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for attempt in range(3):
        try:
            spark = (SparkSession.builder.master("local[2]").appName("bench-spark-read")
                     .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                     .config("spark.pyspark.python", sys.executable).config("spark.driver.memory", "2g")
                     .config("spark.python.worker.reuse", "true").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            lsmlake.spark.register(spark)
            return spark
        except Exception:  # noqa: BLE001 - a JVM launch fails now and then on this box
            if attempt == 2:
                raise
            time.sleep(3)


def main() -> None:
    root = tempfile.mkdtemp(prefix="bench-spark-read-")
    spark = spark_session()  # before anything else: Spark forks its JVM from this process
    cat = FileSystemCatalog(root)
    cat.create_database("db")
    table = cat.create_table("db.t", common.LAKE_SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                             options={"bucket": str(BUCKETS), "write-only": "true"})
    updates = ROWS_TOTAL // 5
    base = ROWS_TOTAL - updates // 2  # the updates' second half are new keys: ROWS_TOTAL live rows
    secs, _ = common.timed(lambda: table.write_arrow(data(base, 0, 1, 0)))
    table.write_arrow(data(updates, base - updates // 2, 2, 1))  # half updates, half new keys
    if COMPACTED:
        compact_table(table, full=True)
    expected_rows = base + updates - updates // 2
    splits = table.new_scan().plan()
    print(f"table: {expected_rows} rows, {len(splits)} splits, "
          f"{'compacted (raw reads)' if COMPACTED else 'level-0 files (merge-on-read)'}; "
          f"first write took {secs:.1f} s")

    table.to_arrow()  # warm the page cache for every reader alike
    single_secs, got = common.timed(table.to_arrow)
    assert got.num_rows == expected_rows, got.num_rows
    single = common.report("lsmlake single-process reader", single_secs, expected_rows)

    lake = spark.read.format("lsmlake").option("warehouse", root).load("db.t")
    assert lake.count() == expected_rows
    lake.write.format("noop").mode("overwrite").save()  # warm-up
    spark_secs, _ = common.timed(lambda: lake.write.format("noop").mode("overwrite").save())
    via_spark = common.report(f"spark local[2] format lsmlake ({lake.rdd.getNumPartitions()} partitions)",
                              spark_secs, expected_rows)

    files = [f"{bucket_dir(table.path, table.schema.partition_dir(s.partition_values), s.bucket)}/{f.file_name}"
             for s in splits for f in s.files]
    plain = spark.read.parquet(*files).select(*common.SCHEMA.names)
    plain_rows = plain.count()
    plain.write.format("noop").mode("overwrite").save()  # warm-up
    pq_secs, _ = common.timed(lambda: plain.write.format("noop").mode("overwrite").save())
    upper = common.report(f"spark local[2] read.parquet of the live files ({plain_rows} rows)", pq_secs, plain_rows)
    print(f"spark lsmlake / single-process reader: {via_spark / single:.2f}x; "
          f"spark lsmlake / spark parquet (upper bound): {via_spark / upper:.2f}x")
    spark.stop()
    common.result("spark_read_5m_8_buckets", via_spark, "lsmlake single-process reader", single,
                  "report: Spark's JVM row pipeline bounds this (spark read.parquet of the same files, printed "
                  "above, is the upper bound); aim >= 0.5x of that bound")


if __name__ == "__main__":
    main()
