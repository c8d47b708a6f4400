"""The lsmlake format on an S3 warehouse (the local moto server): a warehouse URI with a query string, and
settings given only as data-source options, which the executors get from the driver through `TableRef`."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.spark.access import TableRef, WarehouseAccess, table_location
from lsmlake.spark.read_options import ReadOptions
from tests.support.s3_server import ACCESS_KEY, REGION, SECRET_KEY, S3Server
from tests.support.spark_tables import COLUMNS, batch, merge_on_read, rows, spark_rows

#: variables that give no store, endpoint or credential: which CAs to trust, and no instance-metadata lookup (a
#: test server's setting, which the session's Spark JVM keeps from whichever test started it)
_NOT_SETTINGS = ("AWS_CA_BUNDLE", "AWS_EC2_METADATA_DISABLED")


def _aws_vars(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    return sorted(k for k in environ if k.startswith("AWS_") and k not in _NOT_SETTINGS
                  or k == "LSMLAKE_S3_PATH_STYLE")


def _executor_aws_vars(spark) -> list[str]:
    """The AWS_* variables the Python workers of the session see (they inherit the JVM's environment)."""
    found = spark.sparkContext.parallelize(range(2), 2).mapPartitions(
        lambda _: [sorted(k for k in __import__("os").environ if k.startswith("AWS_") and k not in _NOT_SETTINGS)]
    ).collect()
    return sorted({k for part in found for k in part})


def _options(server: S3Server) -> dict[str, str]:
    return {"s3.endpoint": server.endpoint, "s3.access-key": ACCESS_KEY, "s3.secret-key": SECRET_KEY,
            "s3.region": REGION, "s3.path.style.access": "true"}


def _pypaimon_options(server: S3Server) -> dict[str, str]:
    return {"fs.s3.endpoint": server.endpoint, "fs.s3.accessKeyId": ACCESS_KEY,
            "fs.s3.accessKeySecret": SECRET_KEY, "fs.s3.region": REGION, "fs.s3.path-style-access": "true"}


def test_table_location_is_the_table_folder_without_the_uris_credentials_or_query() -> None:
    """Old code appended the table to the whole URI (`...?endpoint_override=h:9000/db.db/t`), and then kept the
    URI's user info (the secret key) in the location, which shows in repr(TableRef) and in messages. The settings
    in the URI reach the executors in `TableRef.storage`."""
    wh = "s3://k:TOPSECRET@lake/wh?endpoint_override=127.0.0.1:9000&region=r&session_token=TOKEN"
    assert table_location(wh, "db.t", "lake/wh/db.db/t") == "s3://lake/wh/db.db/t"
    assert table_location("s3a://lake/wh/", "db.t", "lake/wh/db.db/t") == "s3a://lake/wh/db.db/t"
    assert table_location("/data/wh", "db.t", "/data/wh/db.db/t") == "/data/wh/db.db/t"


def test_a_warehouse_uri_with_credentials_keeps_them_out_of_the_ref_and_its_executors_still_read(
        s3_server: S3Server) -> None:
    import pickle

    assert _aws_vars(os.environ) == []  # whatever reaches the store came from the URI
    wh = s3_server.warehouse()
    assert SECRET_KEY in wh
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = merge_on_read(cat)
    access = WarehouseAccess(wh, "db.mor")
    ref = access.ref()
    assert ref.location == f"s3://{t.path}"
    assert SECRET_KEY not in repr(ref) and ACCESS_KEY not in ref.location
    assert rows(pickle.loads(pickle.dumps(ref)).open().to_arrow()) == rows(t.to_arrow())
    with pytest.raises(NotFoundError) as missing:  # a message about the table shows no secret either
        TableRef("db.mor", ref.location, 99, ref.storage).open()
    assert "schema 99 not found" in str(missing.value) and SECRET_KEY not in str(missing.value)


def test_unknown_storage_options_are_refused_by_the_warehouse_path_and_by_bucket(spark, s3_server: S3Server) -> None:
    """Old code ignored a misspelt key here (the Client and the data source's options refuse it): the table was
    opened with other settings than the job meant."""
    from lsmlake.spark.shuffle import by_bucket

    wh = s3_server.warehouse()
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    cat.create_table("db.k", "id BIGINT NOT NULL", primary_keys=["id"], options={"bucket": "2"})
    typo = {**_options(s3_server), "s3.acess-key": ACCESS_KEY}
    with pytest.raises(InvalidInputError, match=r"unknown storage option\(s\) \['s3.acess-key'\]"):
        WarehouseAccess(wh, "db.k", typo)
    df = spark.createDataFrame(pa.table({"id": pa.array([1, 2], pa.int64())}).to_pandas())
    with pytest.raises(InvalidInputError, match=r"unknown storage option\(s\) \['s3.acess-key'\]"):
        by_bucket(df, "db.k", warehouse=wh, storage=typo)
    assert by_bucket(df, "db.k", warehouse=wh, storage=_options(s3_server)).count() == 2


def test_storage_options_are_accepted_under_both_key_sets_and_kept_out_of_repr() -> None:
    # Spark hands options over lower-cased: pypaimon's camel-case keys must still be found
    raw = {"path": "db.t", "warehouse": "s3://lake/wh", "fs.s3.accesskeyid": "AK", "fs.s3.accesskeysecret": "SK",
           "s3.endpoint": "http://127.0.0.1:1"}
    parsed = ReadOptions.parse(raw)
    assert dict(parsed.storage) == {"fs.s3.accessKeyId": "AK", "fs.s3.accessKeySecret": "SK",
                                    "s3.endpoint": "http://127.0.0.1:1"}
    assert "SK" not in repr(parsed)
    with pytest.raises(InvalidInputError, match=r"s3\.path\.style\.access = 'sometimes'"):
        ReadOptions.parse({**raw, "s3.path.style.access": "sometimes"})
    with pytest.raises(InvalidInputError, match=r"unknown lsmlake option\(s\) \['s3.endpiont'\]"):
        ReadOptions.parse({**raw, "s3.endpiont": "http://x"})


def test_read_and_write_with_a_warehouse_uri_that_has_a_query_string(spark, s3_server: S3Server) -> None:
    wh = s3_server.warehouse()  # credentials and endpoint in the URI, as pyarrow writes it
    assert "?" in wh
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = merge_on_read(cat)
    expected = t.to_arrow()

    df = spark.read.format("lsmlake").option("warehouse", wh).load("db.mor")
    assert spark_rows(df) == rows(expected)

    cat.create_table("db.log", COLUMNS, partition_keys=["dt"], options={"bucket": "-1"})
    written = batch(list(range(30)), "w", ["p1" if i % 3 else "p2" for i in range(30)])
    spark.createDataFrame(written).write.format("lsmlake").option("warehouse", wh).mode("append").save("db.log")
    assert rows(cat.get_table("db.log").to_arrow()) == rows(written)
    assert spark_rows(spark.read.format("lsmlake").option("warehouse", wh).load("db.log")) == rows(written)


def test_executors_get_the_settings_given_only_as_options(spark, s3_server: S3Server) -> None:
    """Neither the driver nor the executors have any S3 setting in their environment: the options reach the
    driver's catalog, and the executors open the table with the settings the driver put in its TableRef."""
    assert _aws_vars(os.environ) == []
    assert _executor_aws_vars(spark) == []
    with_query = s3_server.warehouse()
    prefix = with_query.split("@", 1)[1].split("?", 1)[0]  # bucket/prefix
    plain = f"s3://{prefix}"
    cat = FileSystemCatalog(with_query)  # the test's own view, settings in the URI
    cat.create_database("db")
    t = merge_on_read(cat)
    cat.create_table("db.log", COLUMNS, partition_keys=["dt"], options={"bucket": "-1"})

    def read(options: dict[str, str], table: str) -> pa.Table:
        r = spark.read.format("lsmlake").option("warehouse", plain)
        for k, v in options.items():
            r = r.option(k, v)
        return r.load(table).toArrow()

    assert rows(read(_options(s3_server), "db.mor")) == rows(t.to_arrow())

    written = batch(list(range(40)), "x", ["p1" if i % 2 else "p3" for i in range(40)])
    w = spark.createDataFrame(written).write.format("lsmlake").option("warehouse", plain).mode("append")
    for k, v in _pypaimon_options(s3_server).items():
        w = w.option(k, v)
    w.save("db.log")
    assert rows(cat.get_table("db.log").to_arrow()) == rows(written)
    assert rows(read(_pypaimon_options(s3_server), "db.log")) == rows(written)


def test_an_executor_opens_a_table_ref_with_the_drivers_settings(s3_server: S3Server) -> None:
    """What an executor does, without Spark: a TableRef carrying settings opens the table in a process whose
    environment has none (the settings pickle, and their repr hides the secret)."""
    import pickle

    from lsmlake.fs import StorageSettings

    with_query = s3_server.warehouse()
    cat = FileSystemCatalog(with_query)
    cat.create_database("db")
    t = merge_on_read(cat)
    location = f"s3://{t.path}"
    settings = StorageSettings.from_options(_options(s3_server))
    ref = pickle.loads(pickle.dumps(TableRef("db.mor", location, t.schema.id, settings)))
    assert SECRET_KEY not in repr(ref)
    assert rows(ref.open().to_arrow()) == rows(t.to_arrow())


def test_a_stream_reads_every_change_with_settings_only_as_options(spark, s3_server: S3Server, tmp_path) -> None:
    import pyarrow.parquet as pq

    assert _aws_vars(os.environ) == []
    with_query = s3_server.warehouse()
    plain = "s3://" + with_query.split("@", 1)[1].split("?", 1)[0]
    cat = FileSystemCatalog(with_query)
    cat.create_database("db")
    t = cat.create_table("db.s", "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL", partition_keys=["dt"],
                         primary_keys=["dt", "id"], options={"bucket": "2"})
    t.write_arrow(pa.table({"id": pa.array(range(20), pa.int64()), "v": [f"a{i}" for i in range(20)],
                            "dt": ["p1"] * 20}))
    t.write_arrow(pa.table({"id": pa.array([3, 4], pa.int64()), "v": ["b3", None], "dt": ["p1", "p1"],
                            "_row_kind": ["+U", "-D"]}))
    reader = (spark.readStream.format("lsmlake").option("warehouse", plain).option("row-kind", "true")
              .option("snapshot", "0"))
    for k, v in _options(s3_server).items():
        reader = reader.option(k, v)
    sink = str(tmp_path / "sink")
    q = (reader.load("db.s").select("id", "v", "dt", "_row_kind").writeStream.format("parquet").option("path", sink)
         .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(300), "the streaming query did not finish"
    finally:
        q.stop()
    assert q.exception() is None
    seen = sorted(((r["id"], r["v"], r["_row_kind"]) for r in pq.read_table(sink).to_pylist()), key=repr)
    expected = sorted([(i, f"a{i}", "+I") for i in range(20)] + [(3, "b3", "+U"), (4, None, "-D")], key=repr)
    assert seen == expected
