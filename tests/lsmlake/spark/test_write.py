"""Batch writes from Spark: read back identically by pypaimon; overwrite; failed jobs change nothing."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.spark import by_bucket
from tests.support.spark_tables import COLUMNS, batch, pypaimon_read, rows, spark_rows

BUCKETS = 4


def _files(path: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".parquet")}


def _save(spark, df, wh: str, ident: str, mode: str = "append", **options: str) -> None:
    w = df.write.format("lsmlake").option("warehouse", wh).mode(mode)
    for k, v in options.items():
        w = w.option(k, v)
    w.save(ident)


@pytest.fixture()
def warehouse(tmp_path):
    cat = FileSystemCatalog(str(tmp_path))
    cat.create_database("db")
    cat.create_table("db.pk", COLUMNS, partition_keys=["dt"], primary_keys=["dt", "id"],
                     options={"bucket": str(BUCKETS)})
    cat.create_table("db.log", COLUMNS, partition_keys=["dt"], options={"bucket": "-1"})
    return str(tmp_path)


def test_append_and_updates_read_back_identically_with_pypaimon(spark, warehouse) -> None:
    cat = FileSystemCatalog(warehouse)
    first = batch(list(range(200)), "a", ["p1" if i % 3 else "p2" for i in range(200)])
    df = spark.createDataFrame(first).repartition(3)  # rows of every bucket spread over several tasks
    _save(spark, by_bucket(df, "db.pk", warehouse=warehouse), warehouse, "db.pk")
    table = cat.get_table("db.pk")
    snap = table.latest_snapshot()
    assert snap.id == 1 and snap.commit_kind == "APPEND"
    assert rows(table.to_arrow()) == rows(first.drop_columns([]))
    assert rows(pypaimon_read(warehouse, "db.pk"), first.column_names) == rows(first)
    # shuffled by bucket: each (partition, bucket) was written by one task, as one level-0 file
    per_bucket = Counter((s.partition, s.bucket) for s in table.plan() for _ in s.files)
    assert per_bucket and set(per_bucket.values()) == {1}
    assert len(per_bucket) == 2 * BUCKETS

    upd_ids = list(range(0, 200, 5))
    changes = batch(upd_ids, "u", ["p1" if i % 3 else "p2" for i in upd_ids],
                    ["-D" if i % 2 else "+U" for i in upd_ids])
    _save(spark, by_bucket(spark.createDataFrame(changes), "db.pk", warehouse=warehouse), warehouse, "db.pk")
    deleted = {i for i in upd_ids if i % 2}
    updated = {i for i in upd_ids if not i % 2}
    keep = first.filter(pc.invert(pc.field("id").isin(sorted(deleted | updated))))
    upserted = changes.filter(pc.field("id").isin(sorted(updated))).drop_columns(["_row_kind"])
    expected = pa.concat_tables([keep, upserted])
    table = cat.get_table("db.pk")
    assert rows(table.to_arrow()) == rows(expected)
    assert rows(pypaimon_read(warehouse, "db.pk"), expected.column_names) == rows(expected)
    assert spark_rows(spark.read.format("lsmlake").option("warehouse", warehouse).load("db.pk")) == rows(expected)


def test_unshuffled_writes_keep_one_winner_per_key(spark, warehouse) -> None:
    """Without by_bucket several tasks write one bucket; sequence ranges per task keep winners definite."""
    data = batch(list(range(100)), "a", "p1")
    _save(spark, spark.createDataFrame(data).repartition(3), warehouse, "db.pk")
    table = FileSystemCatalog(warehouse).get_table("db.pk")
    files = [f for s in table.plan() for f in s.files]
    assert len(files) > BUCKETS  # really several tasks per bucket
    assert rows(table.to_arrow()) == rows(data)
    assert rows(pypaimon_read(warehouse, "db.pk"), data.column_names) == rows(data)


def test_overwrite_replaces_the_touched_partitions(spark, warehouse) -> None:
    cat = FileSystemCatalog(warehouse)
    base = batch(list(range(60)), "a", ["p1" if i % 2 else "p2" for i in range(60)])
    _save(spark, spark.createDataFrame(base), warehouse, "db.log")
    new = batch(list(range(1000, 1010)), "n", "p2")
    _save(spark, spark.createDataFrame(new), warehouse, "db.log", mode="overwrite")
    table = cat.get_table("db.log")
    assert table.latest_snapshot().commit_kind == "OVERWRITE"
    expected = pa.concat_tables([base.filter(pc.field("dt") == "p1"), new])
    assert rows(table.to_arrow()) == rows(expected)
    assert rows(pypaimon_read(warehouse, "db.log"), expected.column_names) == rows(expected)


def test_a_failing_task_leaves_no_change_and_no_file(spark, warehouse) -> None:
    cat = FileSystemCatalog(warehouse)
    _save(spark, spark.createDataFrame(batch(list(range(10)), "a", "p1")), warehouse, "db.pk")
    before_files = _files(warehouse)
    before_rows = rows(cat.get_table("db.pk").to_arrow())
    good = batch(list(range(100, 400)), "g", "p1")
    bad = pa.table({"id": pa.array([None], pa.int64()), "dt": ["p1"]})  # a null primary key
    bad = bad.cast(pa.schema([good.schema.field(c) for c in bad.column_names]))
    df = spark.createDataFrame(pa.concat_tables([good, bad], promote_options="default")).coalesce(1)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        with pytest.raises(Exception, match="null"):
            # a tiny buffer: the task writes files for the first batches before it meets the bad row
            _save(spark, df, warehouse, "db.pk", **{"write.buffer-size": "1"})
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    table = cat.get_table("db.pk")
    assert table.latest_snapshot().id == 1
    assert rows(table.to_arrow()) == before_rows
    assert _files(warehouse) == before_files


def test_a_failed_commit_deletes_every_written_file(spark, warehouse) -> None:
    """The table is altered while the job runs: the driver refuses to commit and deletes the tasks' files."""
    cat = FileSystemCatalog(warehouse)
    before_files = _files(warehouse)

    def alter_then_pass(batches):
        from lsmlake.catalog.filesystem import FileSystemCatalog as Cat
        from lsmlake.errors import CommitConflictError
        from lsmlake.table.schema_change import SetOption

        try:
            Cat(warehouse).alter_table("db.pk", [SetOption("snapshot.num-retained.max", "50")])
        except CommitConflictError:
            pass
        yield from batches

    src = spark.createDataFrame(batch(list(range(50)), "a", "p1"))
    df = src.mapInArrow(alter_then_pass, src.schema)
    with pytest.raises(Exception, match="altered during the write"):
        _save(spark, df, warehouse, "db.pk")
    table = cat.get_table("db.pk")
    assert table.latest_snapshot() is None
    assert _files(warehouse) == before_files


def test_relative_warehouse_means_the_folder_of_register(spark, warehouse, monkeypatch) -> None:
    """Spark's Python workers run in the JVM's folder: a relative `warehouse` must still mean the user's."""
    import lsmlake.spark

    parent, name = os.path.split(warehouse)
    monkeypatch.chdir(parent)
    assert os.path.realpath(os.getcwd()) != os.path.realpath(spark.sparkContext._jvm.System.getProperty("user.dir"))
    lsmlake.spark.register(spark)  # binds `name` to this folder
    try:
        data = batch([1, 2, 3], "r", ["p1", "p1", "p2"])
        spark.createDataFrame(data).write.format("lsmlake").option("warehouse", name).mode("append").save("db.pk")
        assert rows(FileSystemCatalog(warehouse).get_table("db.pk").to_arrow()) == rows(data)
        assert spark_rows(spark.read.format("lsmlake").option("warehouse", name).load("db.pk")) == rows(data)
    finally:
        monkeypatch.undo()
        lsmlake.spark.register(spark)  # back to the tests' own folder


def test_a_postpone_table_written_by_spark_is_read_once_its_rows_are_placed(spark, warehouse) -> None:
    """Spark's tasks write a postpone table's rows to bucket-postpone; a compaction places them (one COMPACT)."""
    from lsmlake.table.compact import compact_table
    from lsmlake.table.postpone import pending

    cat = FileSystemCatalog(warehouse)
    cat.create_table("db.later", COLUMNS, partition_keys=["dt"], primary_keys=["dt", "id"],
                     options={"bucket": "-2", "postpone.default-bucket-num": "3"})
    first = batch(list(range(150)), "a", ["p1" if i % 3 else "p2" for i in range(150)])
    _save(spark, spark.createDataFrame(first).repartition(3), warehouse, "db.later")
    assert cat.get_table("db.later").to_arrow().num_rows == 0  # postponed: invisible
    assert sum(len(fs) for fs in pending(cat.get_table("db.later")).values()) >= 3  # several tasks' files
    upd_ids = list(range(0, 150, 4))
    changes = batch(upd_ids, "u", ["p1" if i % 3 else "p2" for i in upd_ids],
                    ["-D" if i % 8 else "+U" for i in upd_ids])
    _save(spark, spark.createDataFrame(changes).repartition(2), warehouse, "db.later")
    compact_table(cat.get_table("db.later"))
    deleted = {i for i in upd_ids if i % 8}
    updated = {i for i in upd_ids if not i % 8}
    keep = first.filter(pc.invert(pc.field("id").isin(sorted(deleted | updated))))
    upserted = changes.filter(pc.field("id").isin(sorted(updated))).drop_columns(["_row_kind"])
    expected = pa.concat_tables([keep, upserted])
    table = cat.get_table("db.later")
    assert rows(table.to_arrow()) == rows(expected)
    assert rows(pypaimon_read(warehouse, "db.later"), expected.column_names) == rows(expected)
    assert {s.total_buckets for s in table.plan()} == {3} and not pending(table)


@pytest.mark.parametrize("cross", [False, True])
def test_a_dynamic_bucket_table_written_by_spark_tasks_keeps_one_key_index(spark, warehouse, cross: bool) -> None:
    """Spark's tasks assign new keys through the table's HASH index as they write (several tasks race for the
    same new keys); with `cross` the primary key leaves out `dt` and keys move between partitions."""
    from tests.support.dynamic_index import check_index

    cat = FileSystemCatalog(warehouse)
    cat.create_table("db.dyn", COLUMNS, partition_keys=["dt"], primary_keys=["id"] if cross else ["dt", "id"],
                     options={"bucket": "-1", "dynamic-bucket.target-row-num": "40"})
    first = batch(list(range(150)), "a", ["p1" if i % 3 else "p2" for i in range(150)])
    _save(spark, spark.createDataFrame(first).repartition(3), warehouse, "db.dyn")
    moved = list(range(0, 150, 5))  # these keys are written again: to p3 when keys move, else where they are
    second = batch(moved, "b", ["p3" if cross else ("p1" if i % 3 else "p2") for i in moved])
    _save(spark, spark.createDataFrame(second).repartition(1), warehouse, "db.dyn")
    keep = first.filter(pc.invert(pc.field("id").isin(moved)))
    expected = pa.concat_tables([keep, second])
    assert rows(cat.get_table("db.dyn").to_arrow()) == rows(expected)
    assert rows(pypaimon_read(warehouse, "db.dyn"), expected.column_names) == rows(expected)
    placed = check_index(warehouse, "db.dyn")
    assert len(placed) == 150
    assert {s.total_buckets for s in cat.get_table("db.dyn").plan()} == {-1}
