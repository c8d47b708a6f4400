"""Snapshot expiration drops the Iceberg snapshots older than Paimon's earliest before deleting data files."""

from __future__ import annotations

import json

import pyarrow as pa
from pyiceberg.table import StaticTable

from lsmlake.catalog.expire import expire_snapshots
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.iceberg import current_metadata_location, iceberg_metadata_dir, publish_iceberg_now
from lsmlake.table.compact import compact_table
from tests.support.iceberg_readers import duckdb_read, pyiceberg_read, rows


def test_expiration_drops_old_iceberg_snapshots_and_their_files(tmp_path) -> None:
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", primary_keys=["k"],
                         options={"bucket": "1", "deletion-vectors.enabled": "true"})
    for i in range(5):
        t.write_arrow(pa.table({"k": pa.array([i, 0], pa.int32()), "v": [f"v{i}", f"z{i}"]}))
        compact_table(t, full=i == 1)
        publish_iceberg_now(t)
    directory = iceberg_metadata_dir(t)
    before = {f.path for f in t.io.list(directory)}
    latest = t.latest_snapshot()
    assert latest is not None
    result = expire_snapshots(t, retain_min=1, retain_max=1)
    assert result.expired_snapshots
    location = current_metadata_location(t)
    assert location is not None
    meta = json.loads(open(location).read())  # noqa: SIM115 - a local file
    assert [s["snapshot-id"] for s in meta["snapshots"]] == [latest.id]
    after = {f.path for f in t.io.list(directory)}
    assert after < before
    # every file the remaining metadata names exists, and both readers read the table
    assert rows(pyiceberg_read(location), "k") == rows(t.to_arrow(), "k")
    assert rows(duckdb_read(location), "k") == rows(t.to_arrow(), "k")
    # what is left in the folder is what the remaining snapshot names (and the metadata itself)
    table = StaticTable.from_metadata(location)
    snap = table.current_snapshot()
    assert snap is not None
    named = {snap.manifest_list}
    for m in snap.manifests(table.io):
        named.add(m.manifest_path)
        named |= {e.data_file.file_path for e in m.fetch_manifest_entry(table.io) if e.data_file.content != 0}
    assert {p for p in after if not p.endswith(("metadata.json", "version-hint.text"))} == named
    assert any(p.endswith(".parquet") for p in before - after)  # a delete file only dropped snapshots named went


def test_expiration_of_the_snapshot_the_iceberg_metadata_is_at_publishes_the_latest_first(tmp_path) -> None:
    """Iceberg metadata behind Paimon (a crash before its publication, or a table synced once without the option)
    must not keep naming files the expiration deletes: its current snapshot is one of those expired, so the latest
    is published before anything is deleted."""
    cat = FileSystemCatalog(str(tmp_path / "wh"))
    cat.create_database("db")
    t = cat.create_table("db.t", "k INT NOT NULL, v STRING", primary_keys=["k"],
                         options={"bucket": "1", "deletion-vectors.enabled": "true"})
    t.write_arrow(pa.table({"k": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}))
    compact_table(t, full=True)
    published = publish_iceberg_now(t)  # the metadata stays at this snapshot from here on
    assert published is not None
    for i in range(3):
        t.write_arrow(pa.table({"k": pa.array([1, 3 + i], pa.int32()), "v": [f"a{i}", f"n{i}"]}))
        compact_table(t, full=True)  # the earlier compacted file is replaced, so expiring deletes it
    result = expire_snapshots(t, retain_min=1, retain_max=1)
    assert published.snapshot_id in result.expired_snapshots
    location = current_metadata_location(t)
    assert location is not None
    assert rows(pyiceberg_read(location), "k") == rows(t.to_arrow(), "k")
    assert rows(duckdb_read(location), "k") == rows(t.to_arrow(), "k")
