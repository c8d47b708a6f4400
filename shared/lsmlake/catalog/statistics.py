"""Figures of a table's files: per partition of the latest snapshot, and per snapshot (cached, as a snapshot
never changes), as Paimon's REST catalog reports them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from lsmlake.format.options import PARTITION_DEFAULT_NAME
from lsmlake.format.partition import partition_value_string
from lsmlake.format.snapshot import Snapshot
from lsmlake.table.file_store_table import FileStoreTable

SNAPSHOT_STATS_CACHE = 256


@dataclass
class FileStats:
    """Rows, bytes and files, and the creation time (epoch ms) of the newest file."""

    record_count: int = 0
    file_size: int = 0
    file_count: int = 0
    last_file_creation_ms: int = 0


def partition_stats(table: FileStoreTable) -> dict[bytes, FileStats]:
    """The figures of each partition of the latest snapshot's live files (none without a snapshot)."""
    snap = table.snapshots.latest()
    parts: dict[bytes, FileStats] = {}
    if snap is not None:
        for e in table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values():
            p = parts.setdefault(e.partition, FileStats())
            p.record_count += e.file.row_count
            p.file_size += e.file.file_size
            p.file_count += 1
            p.last_file_creation_ms = max(p.last_file_creation_ms, e.file.creation_time_ms or 0)
    return parts


def partition_spec(table: FileStoreTable, partition: bytes) -> dict[str, str]:
    """The partition's values as text by key; a null or blank value shows as the table's default name."""
    values = table.partition_values(partition)
    types = table.schema.types_of(table.schema.partition_keys)
    default = table.options.get(PARTITION_DEFAULT_NAME)
    out = {}
    for name, v, t in zip(table.schema.partition_keys, values, types, strict=True):
        s = partition_value_string(v, t)
        out[name] = default if s is None or not s.strip() else s
    return out


class SnapshotStats:
    """The figures of whole snapshots, the last `SNAPSHOT_STATS_CACHE` kept (reading them walks the manifests)."""

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[str, str, int], FileStats] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, table: FileStoreTable, snap: Snapshot) -> FileStats:
        key = (table.path, table.table_uuid, snap.id)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        live = table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values()
        stats = FileStats(snap.total_record_count, sum(e.file.file_size for e in live), len(live),
                          max((e.file.creation_time_ms or 0 for e in live), default=0))
        with self._lock:
            self._cache[key] = stats
            while len(self._cache) > SNAPSHOT_STATS_CACHE:
                self._cache.popitem(last=False)
        return stats
