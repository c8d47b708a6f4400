"""Streaming reads: every change of 5 commits exactly once, across a stop and a restart from the checkpoint."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.compact import compact_table
from tests.support.spark_tables import batch, rows

COLUMNS = ["id", "v", "dt", "_row_kind"]
QUERY_TIMEOUT_S = 300


def _commits() -> list[pa.Table]:
    """Five writes of inserts, updates and deletes (keys unique within a write)."""
    return [
        batch(list(range(0, 30)), "a", "p1"),
        batch(list(range(30, 50)), "b", "p2"),
        batch([1, 2, 3, 31], "c", ["p1", "p1", "p1", "p2"], ["+U", "+U", "-D", "-D"]),
        batch(list(range(50, 60)), "d", "p1"),
        batch([4, 50, 32], "e", ["p1", "p1", "p2"], ["-D", "+U", "+U"]),
    ]


def _as_changes(t: pa.Table) -> pa.Table:
    if "_row_kind" not in t.column_names:
        t = t.append_column("_row_kind", pa.array(["+I"] * t.num_rows))
    return pa.Table.from_arrays(t.select(COLUMNS).columns, names=COLUMNS)  # nullable fields: concatenable


def _run_once(spark, warehouse: str, ident: str, sink: str, checkpoint: str, **options: str) -> None:
    reader = spark.readStream.format("lsmlake").option("warehouse", warehouse).option("row-kind", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    q = (reader.load(ident).select(*COLUMNS).writeStream.format("parquet").option("path", sink)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        assert q.awaitTermination(QUERY_TIMEOUT_S), "the streaming query did not finish"
    finally:
        q.stop()
    assert q.exception() is None


@pytest.mark.parametrize("producer", ["none", "input"])
def test_every_change_exactly_once_across_a_restart(spark, tmp_path, producer) -> None:
    wh = str(tmp_path / "wh")
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.s", "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL", partition_keys=["dt"],
                         primary_keys=["dt", "id"], options={"bucket": "2", "changelog-producer": producer})
    commits = _commits()
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    for c in commits[:2]:
        t.write_arrow(c.select([n for n in c.column_names if n in ("id", "v", "dt", "_row_kind")]))
    _run_once(spark, wh, "db.s", sink, checkpoint, snapshot="0")
    seen_first = pq.read_table(sink)
    assert rows(seen_first.select(COLUMNS)) == rows(pa.concat_tables([_as_changes(c) for c in commits[:2]]))

    t.write_arrow(commits[2].select(["id", "v", "dt", "_row_kind"]))
    compact_table(t, full=True)  # a COMPACT snapshot between writes changes no row
    for c in commits[3:]:
        t.write_arrow(c.select([n for n in c.column_names if n in ("id", "v", "dt", "_row_kind")]))
    assert t.latest_snapshot().id == 6
    _run_once(spark, wh, "db.s", sink, checkpoint, snapshot="0")  # resumes after snapshot 2
    seen = pq.read_table(sink).select(COLUMNS)
    assert rows(seen) == rows(pa.concat_tables([_as_changes(c) for c in commits]))


def test_a_stream_without_a_start_begins_with_the_full_snapshot(spark, tmp_path) -> None:
    wh = str(tmp_path / "wh")
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    t = cat.create_table("db.s", "id BIGINT NOT NULL, v STRING, dt STRING NOT NULL", partition_keys=["dt"],
                         primary_keys=["dt", "id"], options={"bucket": "2"})
    commits = _commits()
    for c in commits[:3]:
        t.write_arrow(c.select([n for n in c.column_names if n in ("id", "v", "dt", "_row_kind")]))
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    _run_once(spark, wh, "db.s", sink, checkpoint)
    assert rows(pq.read_table(sink).select(COLUMNS)) == rows(_as_changes(t.to_arrow().select(["id", "v", "dt"])))
    t.write_arrow(commits[3].select(["id", "v", "dt"]))
    _run_once(spark, wh, "db.s", sink, checkpoint)
    want = pa.concat_tables([_as_changes(t.to_arrow(3).select(["id", "v", "dt"])), _as_changes(commits[3])])
    assert rows(pq.read_table(sink).select(COLUMNS)) == rows(want)


def test_a_primary_key_stream_needs_row_kinds(spark, tmp_path) -> None:
    wh = str(tmp_path / "wh")
    cat = FileSystemCatalog(wh)
    cat.create_database("db")
    cat.create_table("db.s", "id BIGINT NOT NULL, v STRING", primary_keys=["id"], options={"bucket": "1"})
    with pytest.raises(Exception, match="row-kind"):
        spark.readStream.format("lsmlake").option("warehouse", wh).load("db.s").writeStream.format("memory") \
            .queryName("refused").start().awaitTermination(QUERY_TIMEOUT_S)
