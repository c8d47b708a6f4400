"""Scan planning: the live files of a snapshot, grouped into splits per (partition, bucket), pruned."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lsmlake.errors import LakeError
from lsmlake.format.binary_row import deserialize_row
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.data_file_meta import DataFileMeta, SimpleStats
from lsmlake.format.index_manifest import DELETION_VECTORS, IndexEntry, IndexManifestStore
from lsmlake.format.manifest import ManifestEntry, ManifestStore
from lsmlake.format.manifest_prune import PartitionFilter
from lsmlake.format.predicate import ColumnStats, Predicate
from lsmlake.format.schema import TableSchema
from lsmlake.format.snapshot import Snapshot
from lsmlake.mergetree.merge.factory import dv_enabled, skips_level0


@dataclass(frozen=True)
class Split:
    """The files of one (partition, bucket) that a reader merges together."""

    partition: bytes
    partition_values: tuple[Any, ...]
    bucket: int
    total_buckets: int
    files: tuple[DataFileMeta, ...]
    snapshot_id: int
    raw_convertible: bool = field(default=False)
    dv_index: IndexEntry | None = None  # the bucket's deletion-vector index file, if any

    @property
    def row_count(self) -> int:
        return sum(f.row_count for f in self.files)


def live_entries(manifests: ManifestStore, snapshot: Snapshot) -> list[ManifestEntry]:
    """The ADD entries alive in a snapshot: base list, then delta list, replayed in order."""
    return list(manifests.live(snapshot.base_manifest_list, snapshot.delta_manifest_list).values())


def is_raw_convertible(schema: TableSchema, files: Sequence[DataFileMeta]) -> bool:
    """Whether a split reads correctly without merging: no level-0 file, no retract row, one sorted run."""
    if not schema.is_primary_key_table or dv_enabled(schema):
        return True  # with deletion vectors every older version of a key is marked deleted
    if any(f.level == 0 or (f.delete_row_count or 0) > 0 for f in files):
        return False
    # first-row tables keep every key on one level: compaction is always full (see compaction)
    return len(files) == 1 or len({f.level for f in files}) == 1 or skips_level0(schema)


class TableScan:
    """Plans the splits of one snapshot of a table."""

    def __init__(self, schema: TableSchema, manifests: ManifestStore, snapshot: Snapshot | None,
                 predicate: Predicate | None = None, all_levels: bool = False,
                 index_store: IndexManifestStore | None = None) -> None:
        """`all_levels`: plan level-0 files even where batch reads skip them (compaction needs them)."""
        self.index_store = index_store
        self.all_levels = all_levels
        self.schema = schema
        self.manifests = manifests
        self.snapshot = snapshot
        self.predicate = predicate or Predicate()
        self._key_ids_match: dict[int, bool] = {}

    def plan(self) -> list[Split]:
        if self.snapshot is None:
            return []
        schema = self.schema
        part_types = schema.types_of(schema.partition_keys)
        part_pred = self.predicate.only(schema.partition_keys)
        key_cols = schema.trimmed_primary_keys
        key_types = schema.types_of(key_cols)
        key_pred = self.predicate.only(key_cols)
        # Value statistics prune only where every row stands alone: an append table has no older version of a row
        # that a pruned file would have hidden.
        value_pred = self.predicate if not schema.is_primary_key_table else Predicate()
        part_values: dict[bytes, tuple[Any, ...] | None] = {}
        groups: dict[tuple[bytes, int], list[ManifestEntry]] = {}
        skip_level0 = skips_level0(schema) and not self.all_levels
        history = schema.history
        # only the manifests whose partition statistics can hold a partition the filter passes are opened
        wanted = PartitionFilter(part_pred, schema.partition_keys, part_types) if not part_pred.accepts_all else None
        snap = self.snapshot
        for e in self.manifests.live(snap.base_manifest_list, snap.delta_manifest_list, wanted).values():
            if e.bucket == POSTPONE_BUCKET:
                continue  # postponed rows are invisible until a compaction places them in buckets, as in Paimon
            if skip_level0 and e.file.level == 0:
                continue  # invisible to batch reads until compaction moves it up, as in Paimon
            if e.file.schema_id != schema.id and history is not None:
                history.note(e.file.file_name, e.file.schema_id)  # for readers that only see the path
            if e.partition not in part_values:
                values = tuple(deserialize_row(e.partition, part_types))
                ok = part_pred.test(dict(zip(schema.partition_keys, values, strict=True)))
                part_values[e.partition] = values if ok else None
            if part_values[e.partition] is None:
                continue
            if (not key_pred.accepts_all and self._same_key_columns(e.file.schema_id)
                    and not self._file_may_match(e.file, key_cols, key_types, key_pred)):
                continue
            if not value_pred.accepts_all and not values_may_match(schema, e.file, value_pred):
                continue
            groups.setdefault((e.partition, e.bucket), []).append(e)
        dvs = {(e.partition, e.bucket): e for e in self.index_store.read(self.snapshot.index_manifest)
               if e.index_type == DELETION_VECTORS} if self.index_store is not None and dv_enabled(schema) else {}
        splits = []
        for (partition, bucket), entries in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            files = tuple(sorted((e.file for e in entries), key=lambda f: (f.level, f.min_sequence_number)))
            kept = part_values[partition]
            assert kept is not None
            splits.append(Split(partition, kept, bucket, entries[0].total_buckets, files, self.snapshot.id,
                                is_raw_convertible(schema, files), dvs.get((partition, bucket))))
        return splits

    def _same_key_columns(self, schema_id: int) -> bool:
        """Whether a file's key statistics describe the current key columns (same field ids, same order).

        Statistics are positional over the key columns of the schema the file was written with; when
        that cannot be confirmed the file is not pruned.
        """
        schema = self.schema
        if schema_id == schema.id:
            return True
        if schema.history is None:
            return False
        if schema_id not in self._key_ids_match:
            try:
                old = schema.history.schema(schema_id)
                self._key_ids_match[schema_id] = (
                    [old.field(k).id for k in old.trimmed_primary_keys]
                    == [schema.field(k).id for k in schema.trimmed_primary_keys])
            except LakeError:
                self._key_ids_match[schema_id] = False
        return self._key_ids_match[schema_id]

    @staticmethod
    def _file_may_match(f: DataFileMeta, key_cols: Sequence[str], key_types: Sequence[Any], pred: Predicate) -> bool:
        return stats_may_match(f.key_stats, key_cols, key_types, f.row_count, pred)


def stats_may_match(stats: SimpleStats, columns: Sequence[str], types: Sequence[Any], row_count: int,
                    pred: Predicate) -> bool:
    """Whether a file with these statistics of `columns` may hold a row passing `pred` (True when they do not
    read: absent, or of another layout)."""
    try:
        mins = deserialize_row(stats.min_values, types)
        maxs = deserialize_row(stats.max_values, types)
    except Exception:
        return True  # unreadable or absent statistics never prune
    nulls = stats.null_counts or ()
    at = {c: i for i, c in enumerate(columns)}

    def column(name: str) -> ColumnStats | None:
        i = at.get(name)
        if i is None:
            return None
        return mins[i], maxs[i], nulls[i] if i < len(nulls) else None, row_count

    return pred.may_match(column)


def values_may_match(schema: TableSchema, f: DataFileMeta, pred: Predicate) -> bool:
    """Whether a data file's value statistics admit a row matching `pred` (True when unsure: statistics of another
    schema, absent, or unreadable)."""
    if f.schema_id != schema.id or f.value_stats is None:
        return True
    columns = list(f.value_stats_cols) if f.value_stats_cols is not None else schema.field_names
    try:
        types = schema.types_of(columns)
    except LakeError:
        return True
    return stats_may_match(f.value_stats, columns, types, f.row_count, pred)
