"""Dynamic-bucket primary-key tables (`bucket = -1`) that pypaimon 2.1.0 writes, compacted by lsmlake.

pypaimon assigns keys to buckets through the HASH index it keeps in the index manifest; a compaction rewrites
files within their bucket and must leave that index as it is, so that pypaimon keeps every existing key in
its bucket afterwards. A deletion-vector table reads empty in pypaimon until compacted (its writes are level
0); after lsmlake's compaction pypaimon and lsmlake read exactly the model's rows, and again after pypaimon
wrote more. (lsmlake writing such tables: test_dynamic_bucket_writes.py.)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.format.snapshot import COMPACT
from lsmlake.table.compact import compact_table
from tests.support.pypaimon_io import read, write

pypaimon = pytest.importorskip("pypaimon", reason="pypaimon (the test extra) is not installed")

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _write(cat: Any, rows: list[dict[str, Any]]) -> None:
    write(cat.get_table("db.t"), pa.Table.from_pylist(rows, schema=SCHEMA))


def _pypaimon_rows(cat: Any) -> dict[int, str]:
    return {r["id"]: r["v"] for r in read(cat.get_table("db.t")).to_pylist()}


def _hash_index(wh: str) -> dict[int, tuple[str, int]]:
    """bucket -> (index file, keys) of the latest snapshot's HASH index."""
    table = FileSystemCatalog(wh).get_table("db.t")
    snap = table.snapshots.latest()
    assert snap is not None
    return {e.bucket: (e.file_name, e.row_count) for e in table.indexes.read(snap.index_manifest)
            if e.index_type == "HASH"}


def _bucket_of_each_key(wh: str) -> dict[int, int]:
    table = FileSystemCatalog(wh).get_table("db.t")
    out = {}
    for split in table.plan():
        rows = table.new_read(["id"]).read([split]).column("id").to_pylist()
        out.update((k, split.bucket) for k in rows)
    return out


def test_lsmlake_compacts_a_dynamic_bucket_table_pypaimon_writes(tmp_path: Any) -> None:
    wh = str(tmp_path)
    cat = pypaimon.CatalogFactory.create({"warehouse": wh})
    cat.create_database("db", True)
    cat.create_table("db.t", pypaimon.Schema.from_pyarrow_schema(SCHEMA, primary_keys=["id"], options={
        "bucket": "-1", "file.format": "parquet", "dynamic-bucket.target-row-num": "5",
        "deletion-vectors.enabled": "true"}), False)
    model: dict[int, str] = {}
    for r in range(3):
        rows = [{"id": i, "v": f"r{r}"} for i in range(r * 4, r * 4 + 8)]  # half of each round updates
        _write(cat, rows)
        model.update((x["id"], x["v"]) for x in rows)
    assert _pypaimon_rows(cat) == {}  # level 0 only: invisible to a deletion-vector read
    index = _hash_index(wh)
    assert len(index) == 4 and sum(n for _, n in index.values()) == len(model)  # 16 keys, 5 per bucket
    compact_table(FileSystemCatalog(wh).get_table("db.t"))
    assert _pypaimon_rows(cat) == model
    assert {r["id"]: r["v"] for r in FileSystemCatalog(wh).get_table("db.t").to_arrow().to_pylist()} == model
    assert _hash_index(wh) == index  # the compaction left the key index as it was
    placed = _bucket_of_each_key(wh)
    assert {s.total_buckets for s in FileSystemCatalog(wh).get_table("db.t").plan()} == {-1}
    # pypaimon writes on: an update stays in its key's bucket, a new key goes where the index has room
    _write(cat, [{"id": 0, "v": "late"}, {"id": 100, "v": "new"}])
    model.update({0: "late", 100: "new"})
    compact_table(FileSystemCatalog(wh).get_table("db.t"))
    assert _pypaimon_rows(cat) == model
    after = _bucket_of_each_key(wh)
    assert all(after[k] == b for k, b in placed.items())
    kinds = [s.commit_kind for s in FileSystemCatalog(wh).get_table("db.t").snapshots.snapshots()]
    assert kinds.count(COMPACT) == 2
