"""The lsmlake format through the catalog service: planned by PlanScan, committed by Commit (a real gRPC server)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.client.client import Client
from lsmlake.spark import by_bucket
from tests.support.local_server import local_server
from tests.support.spark_tables import pypaimon_read, rows, spark_rows


def test_read_write_overwrite_and_time_travel_through_the_catalog(spark, tmp_path) -> None:
    wh = str(tmp_path)
    with local_server(wh) as srv:  # after the Spark session (fixture): the JVM is forked before gRPC starts
        target = f"127.0.0.1:{srv.server.port}"
        with Client(target) as client:
            client.create_database("db")
            client.create_table("db.t", "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL", primary_keys=["dt", "id"],
                                partition_keys=["dt"], options={"bucket": "2"})
            first = pa.table({"id": pa.array(range(40), pa.int64()), "v": [f"a{i}" for i in range(40)],
                              "dt": ["p1" if i % 2 else "p2" for i in range(40)]})
            df = spark.createDataFrame(first)
            (by_bucket(df, "db.t", catalog=target).write.format("lsmlake").option("catalog", target)
             .mode("append").save("db.t"))
            assert [s.commit_kind for s in client.snapshots("db.t")] == ["APPEND"]

            def read():  # a fresh reader each time: DataFrameReader options accumulate
                return spark.read.format("lsmlake").option("catalog", target)

            assert spark_rows(read().load("db.t")) == rows(first)
            assert rows(pypaimon_read(wh, "db.t"), first.column_names) == rows(first)

            new = pa.table({"id": pa.array([100, 101], pa.int64()), "v": ["n0", "n1"], "dt": ["p2", "p2"]})
            spark.createDataFrame(new).write.format("lsmlake").option("catalog", target).mode("overwrite").save("db.t")
            assert [s.commit_kind for s in client.snapshots("db.t")] == ["APPEND", "OVERWRITE"]
            expected = pa.concat_tables([first.filter(pc.field("dt") == "p1"), new])
            assert spark_rows(read().load("db.t")) == rows(expected)
            assert rows(client.scan("db.t")) == rows(expected)
            assert rows(pypaimon_read(wh, "db.t"), expected.column_names) == rows(expected)

            # time travel by snapshot and by time (SnapshotAtTime), and pruning by PlanScan
            assert spark_rows(read().option("snapshot", "1").load("db.t")) == rows(first)
            t1 = client.snapshots("db.t")[0].time_millis
            assert spark_rows(read().option("timestamp", str(t1)).load("db.t")) == rows(first)
            filtered = read().option("filter", "dt = 'p1' AND id < 10").load("db.t")
            assert spark_rows(filtered) == rows(first.filter((pc.field("dt") == "p1") & (pc.field("id") < 10)))
    assert FileSystemCatalog(wh).get_table("db.t").latest_snapshot().id == 2
