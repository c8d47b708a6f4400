"""pyiceberg and DuckDB read exactly the rows lsmlake reads from the published Iceberg metadata."""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import replace

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import AlreadyExistsError
from lsmlake.iceberg import (
    current_metadata_location,
    iceberg_metadata_dir,
    publish_iceberg,
    publish_iceberg_now,
)
from lsmlake.table.compact import compact_table
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.schema_change import AddColumn, RenameColumn
from tests.support.iceberg_readers import duckdb_read, pyiceberg_read, rows

_n = itertools.count()


def _catalog(tmp_path) -> FileSystemCatalog:
    cat = FileSystemCatalog(str(tmp_path / f"wh{next(_n)}"))
    cat.create_database("db")
    return cat


def _with_options(table: FileStoreTable, **options: str) -> FileStoreTable:
    """The table with Iceberg options in its loaded schema (the option registry does not know them yet)."""
    schema = replace(table.schema, options={**table.schema.options, **options})
    return FileStoreTable(table.io, table.path, table.identifier, schema)


def _same_everywhere(table: FileStoreTable, key: str) -> list[dict]:
    pub = publish_iceberg_now(table)
    assert pub is not None
    expected = rows(table.to_arrow(), key)
    assert rows(pyiceberg_read(pub.metadata_location), key) == expected
    assert rows(duckdb_read(pub.metadata_location), key) == expected
    return expected


def _kv(keys, values, kinds=None, **extra) -> pa.Table:
    d = {"k": pa.array(keys, pa.int32()), "v": pa.array(values, pa.string())}
    d.update(extra)
    if kinds is not None:
        d["_row_kind"] = kinds
    return pa.table(d)


def test_append_table(tmp_path) -> None:
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING, p INT", partition_keys=["p"],
                                        options={"bucket": "2", "bucket-key": "k"})
    t.write_arrow(_kv([1, 2, 3], ["a", "b", None], p=pa.array([1, 1, 2], pa.int32())))
    t.write_arrow(_kv([4], ["d"], p=pa.array([None], pa.int32())))
    assert len(_same_everywhere(t, "k")) == 4


def test_partitioned_primary_key_table_after_full_compaction(tmp_path) -> None:
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING, p STRING NOT NULL",
                                        partition_keys=["p"], primary_keys=["k", "p"], options={"bucket": "2"})
    t.write_arrow(_kv([1, 2, 3], ["a", "b", "c"], p=["x", "x", "y"]))
    t.write_arrow(_kv([1, 3], ["a2", "c2"], ["+U", "-D"], p=["x", "y"]))
    compact_table(t, full=True)
    assert _same_everywhere(t, "k") == [{"k": 1, "v": "a2", "p": "x"}, {"k": 2, "v": "b", "p": "x"}]
    t.write_arrow(_kv([2], ["b2"], p=["x"]))
    publish_iceberg_now(t)
    compact_table(t, full=True)  # rewrites the files of partition x: Iceberg's `replace`
    _same_everywhere(t, "k")
    meta = json.loads(open(current_metadata_location(t)).read())  # noqa: SIM115 - a local file
    assert meta["snapshots"][-1]["summary"]["operation"] == "replace"


def test_primary_key_table_publishes_only_the_top_level(tmp_path) -> None:
    """Before a full compaction no file is on the top level: Iceberg readers see nothing yet (Paimon's rule)."""
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING", primary_keys=["k"],
                                        options={"bucket": "1"})
    t.write_arrow(_kv([1], ["a"]))
    pub = publish_iceberg_now(t)
    assert pub is not None
    assert pyiceberg_read(pub.metadata_location).num_rows == 0
    compact_table(t, full=True)
    _same_everywhere(t, "k")


def test_deletion_vectors_as_position_deletes(tmp_path) -> None:
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING", primary_keys=["k"],
                                        options={"bucket": "2", "deletion-vectors.enabled": "true",
                                                 "num-sorted-run.compaction-trigger": "3"})
    t.write_arrow(_kv(list(range(20)), [str(i) for i in range(20)]))
    compact_table(t, full=True)
    _same_everywhere(t, "k")
    t.write_arrow(_kv([1, 2, 3], ["x", "y", None], ["+U", "-D", "+I"]))
    compact_table(t)  # a lookup compaction: level-0 rows move up, older versions are marked in the vectors
    t.write_arrow(_kv([5, 6], ["five", "six"], ["-D", "+U"]))
    compact_table(t)
    got = _same_everywhere(t, "k")
    assert {r["k"] for r in got} == set(range(20)) - {2, 5}
    directory = iceberg_metadata_dir(t)
    assert any(f.path.endswith(".parquet") and "-dv-" in f.path for f in t.io.list(directory))


def test_schema_evolution_by_name_mapping(tmp_path) -> None:
    cat = _catalog(tmp_path)
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", options={"bucket": "1", "bucket-key": "k"})
    t.write_arrow(_kv([1, 2], ["a", "b"]))
    publish_iceberg_now(t)
    t = cat.alter_table("db.t", [AddColumn("w", "BIGINT"), RenameColumn("v", "name")])
    t.write_arrow(pa.table({"k": pa.array([3], pa.int32()), "name": ["c"], "w": pa.array([30], pa.int64())}))
    got = _same_everywhere(t, "k")
    assert got[0] == {"k": 1, "name": "a", "w": None}
    meta = json.loads(open(current_metadata_location(t)).read())  # noqa: SIM115 - a local file
    mapping = json.loads(meta["properties"]["schema.name-mapping.default"])
    assert {"field-id": 1, "names": ["v", "name"]} in mapping


def test_time_travel_reads_an_earlier_snapshot(tmp_path) -> None:
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING", primary_keys=["k"],
                                        options={"bucket": "1", "deletion-vectors.enabled": "true"})
    published = {}
    for i in range(3):
        t.write_arrow(_kv([i, 0], [f"v{i}", f"zero{i}"]))
        compact_table(t)
        pub = publish_iceberg_now(t)
        assert pub is not None
        published[pub.snapshot_id] = rows(t.to_arrow(), "k")
    location = current_metadata_location(t)
    assert location is not None
    for sid, expected in published.items():
        assert rows(pyiceberg_read(location, sid), "k") == expected
        assert rows(duckdb_read(location, sid), "k") == expected


def test_publication_is_idempotent_and_two_publishers_agree(tmp_path) -> None:
    cat = _catalog(tmp_path)
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", options={"bucket": "1", "bucket-key": "k"})
    t = _with_options(t, **{"metadata.iceberg.storage": "table-location"})
    assert publish_iceberg(t) is None  # no snapshot yet
    t.write_arrow(_kv([1], ["a"]))
    results = []
    barrier = threading.Barrier(2)

    def publish() -> None:
        table = _with_options(cat.get_table("db.t"), **{"metadata.iceberg.storage": "table-location"})
        barrier.wait()
        results.append(publish_iceberg(table))

    threads = [threading.Thread(target=publish) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(r.published for r in results if r is not None) == [0, 1]
    again = publish_iceberg(t)
    assert again is not None and again.published == 0 and again.snapshot_id == 1
    assert rows(pyiceberg_read(again.metadata_location), "k") == [{"k": 1, "v": "a"}]
    # the loser's manifests are gone: every Avro file in the folder is named by the metadata
    meta = json.loads(open(again.metadata_location).read())  # noqa: SIM115 - a local file
    avro = [f.path for f in t.io.list(iceberg_metadata_dir(t)) if f.path.endswith(".avro")]
    assert len([p for p in avro if "/snap-" in p]) == len(meta["snapshots"])


def test_option_off_publishes_nothing_and_hadoop_catalog_layout(tmp_path) -> None:
    cat = _catalog(tmp_path)
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", options={"bucket": "1", "bucket-key": "k"})
    t.write_arrow(_kv([1], ["a"]))
    assert publish_iceberg(t) is None and current_metadata_location(t) is None
    h = _with_options(t, **{"metadata.iceberg.storage": "hadoop-catalog"})
    assert iceberg_metadata_dir(h) == f"{cat.root}/iceberg/db/t/metadata"
    pub = publish_iceberg(h)
    assert pub is not None and pub.metadata_location == f"{cat.root}/iceberg/db/t/metadata/v1.metadata.json"
    assert open(f"{cat.root}/iceberg/db/t/metadata/version-hint.text").read() == "1"  # noqa: SIM115
    assert rows(duckdb_read(pub.metadata_location), "k") == [{"k": 1, "v": "a"}]


@pytest.mark.parametrize(("keep", "delete"), [(0, True), (2, True), (4, False)])
def test_old_metadata_files_are_deleted_beyond_previous_versions_max(tmp_path, keep: int, delete: bool) -> None:
    """`keep` is also what is left when nothing is deleted: every version (1..4)."""
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING", options={"bucket": "1", "bucket-key": "k"})
    t = _with_options(t, **{"metadata.iceberg.storage": "table-location",
                            "metadata.iceberg.previous-versions-max": "0" if not delete else str(keep),
                            "metadata.iceberg.delete-after-commit.enabled": str(delete).lower()})
    for i in range(4):
        t.write_arrow(_kv([i], ["a"]))
        publish_iceberg(t)
    names = sorted(f.path.rsplit("/", 1)[1] for f in t.io.list(iceberg_metadata_dir(t))
                   if f.path.endswith(".metadata.json"))
    assert names == [f"v{i}.metadata.json" for i in range(max(1, 4 - keep), 5)]
    assert rows(pyiceberg_read(current_metadata_location(t)), "k") == rows(t.to_arrow(), "k")


def _manifest_paths(location: str) -> list[str]:
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(location)
    snap = table.current_snapshot()
    assert snap is not None
    return [m.manifest_path for m in snap.manifests(table.io)]


def test_a_commit_publishes_one_manifest_and_keeps_the_others(tmp_path) -> None:
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING", options={"bucket": "1", "bucket-key": "k"})
    t = _with_options(t, **{"metadata.iceberg.storage": "table-location",
                            "metadata.iceberg.compaction.max.file-num": "4"})
    lists = []
    for i in range(3):
        t.write_arrow(_kv([i], ["a"]))
        pub = publish_iceberg(t)
        assert pub is not None
        lists.append(_manifest_paths(pub.metadata_location))
    assert [len(m) for m in lists] == [1, 2, 3]
    assert lists[1][:1] == lists[0] and lists[2][:2] == lists[1]
    t.write_arrow(_kv([9], ["z"]))
    pub = publish_iceberg(t)
    assert pub is not None
    assert len(_manifest_paths(pub.metadata_location)) == 1  # past the maximum: merged into one
    assert rows(pyiceberg_read(pub.metadata_location), "k") == rows(t.to_arrow(), "k")
    t.overwrite_arrow(_kv([5], ["o"]))
    pub = publish_iceberg(t)
    assert pub is not None
    assert rows(duckdb_read(pub.metadata_location), "k") == [{"k": 5, "v": "o"}]
    meta = json.loads(open(pub.metadata_location).read())  # noqa: SIM115 - a local file
    assert meta["snapshots"][-1]["summary"]["operation"] == "overwrite"


def test_append_table_deletes_by_vector(tmp_path) -> None:
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING", options={
        "bucket": "1", "bucket-key": "k", "deletion-vectors.enabled": "true"})
    t.write_arrow(_kv(list(range(10)), [str(i) for i in range(10)]))
    publish_iceberg_now(t)
    t.delete_where("k < 3")
    publish_iceberg_now(t)  # from the delta: the vector's position delete file
    t.delete_where("k = 7")
    got = _same_everywhere(t, "k")
    assert [r["k"] for r in got] == [3, 4, 5, 6, 8, 9]


def test_metadata_of_a_dropped_table_is_not_published_over(tmp_path) -> None:
    cat = _catalog(tmp_path)
    options = {"bucket": "1", "bucket-key": "k"}
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", options=options)
    t.write_arrow(_kv([1], ["a"]))
    assert publish_iceberg(_with_options(t, **{"metadata.iceberg.storage": "hadoop-catalog"})) is not None
    cat.drop_table("db.t")  # the catalog-location folder stays
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING, w INT", options=options)
    t.write_arrow(_kv([2], ["b"], w=pa.array([1], pa.int32())))
    h = _with_options(t, **{"metadata.iceberg.storage": "hadoop-catalog"})
    before = current_metadata_location(h)
    with pytest.raises(AlreadyExistsError, match="belongs to another table"):
        publish_iceberg(h)
    assert current_metadata_location(h) == before


def test_a_change_in_one_partition_keeps_the_manifests_of_the_others(tmp_path) -> None:
    t = _catalog(tmp_path).create_table("db.t", "k INT NOT NULL, v STRING, p INT", partition_keys=["p"],
                                        options={"bucket": "1", "bucket-key": "k"})
    t = _with_options(t, **{"metadata.iceberg.storage": "table-location"})
    for i, p in enumerate([1, 2, 2, 1]):
        t.write_arrow(_kv([i], ["a"], p=pa.array([p], pa.int32())))
        before = publish_iceberg(t)
    assert before is not None
    old = _manifest_paths(before.metadata_location)
    t.overwrite_arrow(_kv([9], ["o"], p=pa.array([1], pa.int32())), partition={"p": 1})
    pub = publish_iceberg(t)
    assert pub is not None
    new = _manifest_paths(pub.metadata_location)
    assert new[:2] == old[1:3] and old[0] not in new and old[3] not in new  # p=2's manifests kept as they were
    assert rows(pyiceberg_read(pub.metadata_location), "k") == rows(t.to_arrow(), "k")
    assert rows(duckdb_read(pub.metadata_location), "k") == rows(t.to_arrow(), "k")
    from pyiceberg.expressions import EqualTo
    from pyiceberg.table import StaticTable

    scan = StaticTable.from_metadata(pub.metadata_location).scan(row_filter=EqualTo("p", 2))
    assert sorted(r["k"] for r in scan.to_arrow().to_pylist()) == [1, 2]


_PUBLISHER = """
import sys
from dataclasses import replace
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.iceberg import publish_iceberg
from lsmlake.table.file_store_table import FileStoreTable
t = FileSystemCatalog(sys.argv[1]).get_table("db.t")
t = FileStoreTable(t.io, t.path, t.identifier,
                   replace(t.schema, options={**t.schema.options, "metadata.iceberg.storage": "table-location"}))
print(publish_iceberg(t).published)
"""


def test_two_processes_publish_at_once(tmp_path) -> None:
    import os
    import subprocess
    import sys

    cat = _catalog(tmp_path)
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", primary_keys=["k"],
                         options={"bucket": "2", "deletion-vectors.enabled": "true"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for i in range(2):
        t.write_arrow(_kv(list(range(i, i + 20)), [f"v{i}"] * 20))
        compact_table(t)
        procs = [subprocess.Popen([sys.executable, "-c", _PUBLISHER, cat.warehouse], stdout=subprocess.PIPE,
                                  env=env) for _ in range(2)]
        outs = [p.communicate()[0].decode().split() for p in procs]
        assert all(p.returncode == 0 for p in procs)
        assert sorted(o[-1] for o in outs) == ["0", "1"]  # one wrote the metadata, the other found it
        location = current_metadata_location(t)
        assert location is not None
        assert rows(pyiceberg_read(location), "k") == rows(t.to_arrow(), "k")
        assert rows(duckdb_read(location), "k") == rows(t.to_arrow(), "k")
