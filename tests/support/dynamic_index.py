"""The invariant of a dynamic-bucket table's key index, checked against the rows themselves (test helper)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.table.dynamic_bucket import HashFiles, key_hashes


def check_index(wh: str, name: str = "db.t") -> dict[tuple[Any, ...], int]:
    """Every row's primary key is in exactly one bucket of the table (for a cross-partition table: of one
    partition), the one its partition's HASH index names; no hash is in two buckets of a partition; returns the
    bucket of each key (its partition values first, then the other key values, for a key that holds them all)."""
    table = FileSystemCatalog(wh).get_table(name)
    snap = table.snapshots.latest()
    if snap is None:
        return {}
    entries = table.indexes.read(snap.index_manifest)
    files = HashFiles(table.indexes)
    pk = set(table.schema.primary_keys)
    columns = [k for k in table.schema.partition_keys if k in pk] + list(table.schema.trimmed_primary_keys)
    placed: dict[tuple[Any, ...], int] = {}
    for split in table.plan():
        rows = table.new_read().read([split])
        index = files.partition(entries, split.partition)
        looked_up = index.lookup(key_hashes(table.schema, rows))
        assert (looked_up == split.bucket).all(), f"rows of bucket {split.bucket} indexed in {set(looked_up.tolist())}"
        for r in rows.select(columns).to_pylist():
            key = tuple(r.values())
            assert key not in placed, f"key {key} in buckets {placed[key]} and {split.bucket}"
            placed[key] = split.bucket
    for p in {e.partition for e in entries}:
        hashes = list(files.partition(entries, p).hashes.values())
        joined = np.concatenate(hashes) if hashes else np.zeros(0, np.int32)
        assert len(np.unique(joined)) == len(joined), "a key hash is in two buckets of one partition"
    return placed
