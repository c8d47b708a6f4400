"""Reading a 5,000,000-row primary-key table with 8 buckets through Spark local[2]: `spark.read.format("lsmlake")`
against the anchor, `spark.read.parquet` of the same live data files (no merge, no deletion vectors: what Spark's
own vectorised reader does with them), in the same session. lsmlake's single-process reader is printed beside.

The table is written by lsmlake in two overlapping batches (4,500,000 keys, then 1,000,000 rows: 500,000
updates and 500,000 new keys, so 5,000,000 live rows),
then fully compacted (COMPACTED=1, the default: raw reads, the steady state) or left with level-0 files
(COMPACTED=0: every bucket is merged on read). Spark runs are forced with the `noop` sink (every row of every
column reaches the JVM's row pipeline); each is warmed up once (Python workers started, files cached), then
the two reads are timed alternately REPEATS times and the medians compared (the 2 cores are shared with other
work: one run is noise). Sizes: ROWS_TOTAL, BUCKETS, COMPACTED, REPEATS environment variables.
"""

from __future__ import annotations

import os
import statistics
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
REPEATS = int(os.environ.get("REPEATS", "5"))


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
    files = [f"{bucket_dir(table.path, table.schema.partition_dir(s.partition_values), s.bucket)}/{f.file_name}"
             for s in splits for f in s.files]
    plain = spark.read.parquet(*files).select(*common.SCHEMA.names)
    plain_rows = plain.count()
    if COMPACTED:
        assert plain_rows == expected_rows, plain_rows

    def run(df) -> None:  # type: ignore[no-untyped-def]
        df.write.format("noop").mode("overwrite").save()

    run(lake)  # warm-up
    run(plain)
    lake_secs: list[float] = []
    pq_secs: list[float] = []
    for _ in range(REPEATS):
        lake_secs.append(common.timed(lambda: run(lake))[0])
        pq_secs.append(common.timed(lambda: run(plain))[0])
    print("lsmlake runs (s):", " ".join(f"{t:.2f}" for t in lake_secs), "| parquet runs (s):",
          " ".join(f"{t:.2f}" for t in pq_secs))
    via_spark = common.report(f"spark local[2] format lsmlake ({lake.rdd.getNumPartitions()} partitions), median",
                              statistics.median(lake_secs), expected_rows)
    anchor = common.report(f"spark local[2] read.parquet of the same files ({plain.rdd.getNumPartitions()} "
                           "partitions), median", statistics.median(pq_secs), plain_rows)
    print(f"spark lsmlake / lsmlake single-process reader: {via_spark / single:.2f}x")
    spark.stop()
    common.result("spark_read_5m_8_buckets", via_spark, "spark.read.parquet of the same files", anchor, ">= 0.5")


if __name__ == "__main__":
    main()
