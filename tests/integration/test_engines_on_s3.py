"""The Client and the Spark data source on an S3 warehouse served by the catalog and writer services.

The services run as separate processes on the local S3 server: the catalog with the warehouse as a credential-free
URI and its settings in the standard AWS environment, the writer with everything in the URI's query string (which
its settings must keep whole). This process has no S3 setting in its environment: the Client and Spark get theirs
only as options, and reach the files at the location the catalog reports.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from lsmlake.client.client import Client
from lsmlake.errors import InvalidInputError
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from tests.support.writer_procs import Service

COLUMNS = "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL"


@dataclass(frozen=True)
class Cluster:
    server: S3Server
    prefix: str
    catalog: str
    writer: str

    def options(self) -> dict[str, str]:
        """The S3 settings under Paimon's keys: all that this process is given."""
        return {"s3.endpoint": self.server.endpoint, "s3.access-key": ACCESS_KEY, "s3.secret-key": SECRET_KEY,
                "s3.region": REGION, "s3.path.style.access": "true"}


def _aws_vars() -> list[str]:
    return sorted(k for k in os.environ if k.startswith("AWS_") and k != "AWS_CA_BUNDLE")


@pytest.fixture(scope="module")
def cluster(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp: Path = tmp_path_factory.mktemp("engines-s3")
    prefix = f"wh-{uuid.uuid4().hex[:12]}"
    catalog = Service("catalog_svc", ["--warehouse", f"s3://{s3_server.bucket}/{prefix}",
                                      "--metastore", f"sqlite:///{tmp}/meta.sqlite"], tmp, env=s3_server.env())
    writer: Service | None = None
    try:
        writer = Service("writer_svc", ["--warehouse", s3_server.warehouse(prefix),
                                        "--catalog", f"127.0.0.1:{catalog.port}", "--commit-interval", "0.2"], tmp)
        yield Cluster(s3_server, prefix, f"127.0.0.1:{catalog.port}", f"127.0.0.1:{writer.port}")
    finally:
        if writer is not None:
            writer.stop()
        catalog.stop()


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.select(["id", "v", "dt"]).to_pylist())


def test_client_scans_at_the_location_the_catalog_reports(cluster: Cluster) -> None:
    assert _aws_vars() == []
    with Client(cluster.catalog, writer=cluster.writer, storage=cluster.options()) as lake:
        lake.create_database("shop")
        info = lake.create_table("shop.orders", COLUMNS, primary_keys=["dt", "id"], partition_keys=["dt"],
                                 options={"bucket": "2"})
        assert info.location == f"s3://{cluster.server.bucket}/{cluster.prefix}/shop.db/orders"
        rows = [{"id": i, "v": f"v{i}", "dt": "d1" if i % 2 else "d2"} for i in range(50)]
        lake.write("shop.orders", rows)
        expected = sorted((r["id"], r["v"], r["dt"]) for r in rows)
        assert _rows(lake.scan("shop.orders")) == expected
        assert _rows(lake.scan("shop.orders", where={"dt": "d1"})) == [r for r in expected if r[2] == "d1"]

    # the same table through a warehouse URI whose query string carries the settings, and pypaimon's keys
    with Client(cluster.catalog, warehouse=cluster.server.warehouse(cluster.prefix)) as lake:
        assert _rows(lake.scan("shop.orders")) == expected
    pypaimon_keys = {"fs.s3.endpoint": cluster.server.endpoint, "fs.s3.accessKeyId": ACCESS_KEY,
                     "fs.s3.accessKeySecret": SECRET_KEY, "fs.s3.region": REGION}
    with Client(cluster.catalog, storage=pypaimon_keys) as lake:
        assert _rows(lake.scan("shop.orders")) == expected
        assert SECRET_KEY not in repr(lake.storage)


def test_client_refuses_an_unknown_storage_option(cluster: Cluster) -> None:
    with pytest.raises(InvalidInputError, match=r"unknown storage option\(s\) \['s3.secret'\]"):
        Client(cluster.catalog, storage={"s3.endpoint": cluster.server.endpoint, "s3.secret": SECRET_KEY})


def test_spark_reads_and_writes_through_the_catalog_with_settings_only_as_options(cluster: Cluster) -> None:
    from tests.lsmlake.spark.conftest import start_session

    assert _aws_vars() == []
    with Client(cluster.catalog, writer=cluster.writer, storage=cluster.options()) as lake:
        lake.create_database("db")
        lake.create_table("db.events", COLUMNS, partition_keys=["dt"], options={"bucket": "-1"})
        first = [{"id": i, "v": f"w{i}", "dt": "d1"} for i in range(20)]
        lake.write("db.events", first)

        spark = start_session()
        try:
            # the executors' environment has no S3 setting either: what they read with came in the TableRef
            seen = spark.sparkContext.parallelize(range(2), 2).mapPartitions(
                lambda _: [k for k in __import__("os").environ if k.startswith("AWS_") and k != "AWS_CA_BUNDLE"]
            ).collect()
            assert seen == []

            def reader():  # a fresh reader each time: options accumulate
                r = spark.read.format("lsmlake").option("catalog", cluster.catalog)
                for k, v in cluster.options().items():
                    r = r.option(k, v)
                return r

            expected = sorted((r["id"], r["v"], r["dt"]) for r in first)
            assert _rows(reader().load("db.events").toArrow()) == expected

            more = pa.table({"id": pa.array(range(100, 130), pa.int64()), "v": [f"s{i}" for i in range(30)],
                             "dt": ["d2"] * 30})
            w = spark.createDataFrame(more).write.format("lsmlake").option("catalog", cluster.catalog)
            for k, v in cluster.options().items():
                w = w.option(k, v)
            w.mode("append").save("db.events")
            expected += sorted((r["id"], r["v"], r["dt"]) for r in more.to_pylist())
            assert _rows(lake.scan("db.events")) == sorted(expected)
            assert _rows(reader().load("db.events").toArrow()) == sorted(expected)
            assert [s.commit_kind for s in lake.snapshots("db.events")] == ["APPEND", "APPEND"]
        finally:
            spark.stop()
