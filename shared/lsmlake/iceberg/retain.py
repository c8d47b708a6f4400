"""Dropping the Iceberg snapshots older than Paimon's earliest, before Paimon deletes their files.

1. the current metadata is written again without the dropped snapshots (same file: it describes the same current
   snapshot; the expiration holds the table's commit lock, so no publication races it);
2. then the manifest lists of the dropped snapshots, the manifests only they named and the position delete files
   only those manifests named are deleted. Data files are Paimon's: its expiration deletes them after this returns.
"""

from __future__ import annotations

import json

from lsmlake.iceberg import manifests as mf
from lsmlake.iceberg.metadata import snapshots_of
from lsmlake.iceberg.publish import iceberg_metadata_dir, load_current, read_entries, read_list, storage_path
from lsmlake.table.file_store_table import FileStoreTable


def retain_iceberg(table: FileStoreTable, earliest_snapshot_id: int) -> None:
    """Drop the Iceberg snapshots older than `earliest_snapshot_id` and the files only they named."""
    directory = iceberg_metadata_dir(table)
    loaded = load_current(table, directory)
    if loaded is None:
        return
    version, body = loaded
    snaps = snapshots_of(body)
    dropped = [s for s in snaps if s.snapshot_id < earliest_snapshot_id and s.snapshot_id != body[
        "current-snapshot-id"]]
    if not dropped:
        return
    kept = [s for s in snaps if s not in dropped]
    kept_ids = {s.snapshot_id for s in kept}
    body["snapshots"] = [d for d in body["snapshots"] if d["snapshot-id"] in kept_ids]
    body["snapshot-log"] = [d for d in body["snapshot-log"] if d["snapshot-id"] in kept_ids]
    if kept and kept[0].parent_id is not None:
        for d in body["snapshots"]:
            if d["snapshot-id"] == kept[0].snapshot_id:
                d.pop("parent-snapshot-id", None)

    def manifests_of(snaps_: list[mf.ManifestMeta]) -> set[str]:
        return {m.path for m in snaps_}

    lists = {s.snapshot_id: read_list(table, s.manifest_list) for s in snaps}
    live_manifests = set().union(*(manifests_of(lists[s.snapshot_id]) for s in kept))
    gone_manifests = set().union(*(manifests_of(lists[s.snapshot_id]) for s in dropped)) - live_manifests
    live_deletes = {f.path for s in kept for m in lists[s.snapshot_id] if m.content == mf.DELETES
                    for f in read_entries(table, m.path)}
    gone_deletes = {f.path for s in dropped for m in lists[s.snapshot_id]
                    if m.content == mf.DELETES and m.path in gone_manifests
                    for f in read_entries(table, m.path)} - live_deletes
    table.io.overwrite_atomic(f"{directory}/v{version}.metadata.json", json.dumps(body, separators=(",", ":")).encode())
    for path in [*(s.manifest_list for s in dropped), *gone_manifests, *gone_deletes]:
        table.io.delete_quietly(storage_path(table, path))
