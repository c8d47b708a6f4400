"""What a Spark task of a bucket compaction is given: the planned unit and the files of its bucket.

Executors never read manifests: the driver scans them once per table, snapshot and partition
(`with_bucket_files`) and each task carries the metadata of its bucket's files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.mergetree.compact.unit import CompactUnit
from lsmlake.proto_gen.lsmlake.v1 import common_pb2
from lsmlake.rpc.convert import file_from_proto, file_to_proto, index_from_proto, index_to_proto
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.scan import Split, is_raw_convertible


@dataclass(frozen=True)
class BucketTask:
    """One bucket's planned compaction unit, as plain values a Spark task can unpickle.

    `bucket_files` is the split the unit runs on, so that the executor reads no manifest: every file of
    the bucket at `snapshot_id` on every level (a primary-key bucket's other files decide whether
    retractions may be dropped, and hold the older values that lookups and deletion vectors are computed
    against), as serialized `DataFileMeta` messages, with the bucket's deletion-vector index file
    (`dv_index`, a serialized `IndexFile`) and `total_buckets`. None until known: a task made from a plan
    gets them from `with_bucket_files`, which `SparkCompactor.run` calls on the driver; `()`: the bucket had
    no files. The postpone bucket needs none: placing its rows reads the snapshot itself.
    """

    table_id: str
    snapshot_id: int
    partition: bytes
    bucket: int
    unit_files: tuple[str, ...]
    output_level: int
    full: bool
    file_prefix: str
    bucket_files: tuple[bytes, ...] | None = field(default=None, repr=False)
    total_buckets: int = 0
    dv_index: bytes | None = field(default=None, repr=False)

    @staticmethod
    def of(table_id: str, split: Split, unit: CompactUnit, full: bool, file_prefix: str) -> BucketTask:
        """The task of a unit `plan_bucket` returned for `split` (`full` as asked of the planner)."""
        return BucketTask(table_id, split.snapshot_id, split.partition, split.bucket,
                          tuple(f.file_name for f in unit.files), unit.output_level, full or unit.file_rewrite,
                          file_prefix).carrying(split)

    def carrying(self, split: Split | None) -> BucketTask:
        """This task with the files of its bucket as `split` has them (None: the bucket has no files)."""
        if split is None:
            return replace(self, bucket_files=(), total_buckets=0, dv_index=None)
        dv = split.dv_index
        return replace(self, bucket_files=tuple(file_to_proto(f).SerializeToString() for f in split.files),
                       total_buckets=split.total_buckets,
                       dv_index=None if dv is None else index_to_proto(dv).SerializeToString())

    def split(self, table: FileStoreTable) -> Split:
        """The bucket's split, from the files the task carries; NotFoundError when the bucket had none."""
        if self.bucket_files is None:
            raise InvalidInputError(f"the task of bucket {self.bucket} of {self.table_id} carries no files of its "
                                    "bucket: give it them with `with_bucket_files` on the driver")
        if not self.bucket_files:
            raise NotFoundError(f"bucket {self.bucket} of {table.identifier} has no files at snapshot "
                                f"{self.snapshot_id}")
        files = tuple(file_from_proto(common_pb2.DataFileMeta.FromString(b)) for b in self.bucket_files)
        dv = None if self.dv_index is None else index_from_proto(common_pb2.IndexFile.FromString(self.dv_index),
                                                                 self.partition, self.bucket)
        # as a scan would: the latest schema, and the schema of each older file for the readers that only
        # see its path (otherwise they would look it up in the latest snapshot's manifests)
        table.refresh_schema()
        schema = table.schema
        if schema.history is not None:
            for f in files:
                if f.schema_id != schema.id:
                    schema.history.note(f.file_name, f.schema_id)
        return Split(self.partition, tuple(table.partition_values(self.partition)), self.bucket,
                     self.total_buckets, files, self.snapshot_id, is_raw_convertible(schema, files), dv)


def with_bucket_files(warehouse: str, tasks: Sequence[BucketTask]) -> list[BucketTask]:
    """The tasks, each carrying the files of its bucket (see `BucketTask`); those that do already are kept.

    For the driver: one scan of the manifests per table, snapshot and partition instead of one per bucket
    in the executors. Raises what opening a table or scanning raises.
    """
    tables: dict[str, FileStoreTable] = {}
    scanned: dict[tuple[str, int, bytes], dict[int, Split]] = {}
    out = []
    for task in tasks:
        if task.bucket_files is not None or task.bucket == POSTPONE_BUCKET:
            out.append(task)
            continue
        key = (task.table_id, task.snapshot_id, task.partition)
        if key not in scanned:
            if task.table_id not in tables:
                tables[task.table_id] = FileSystemCatalog(warehouse).get_table(task.table_id)
            scanned[key] = _bucket_splits(tables[task.table_id], task.snapshot_id, task.partition)
        out.append(task.carrying(scanned[key].get(task.bucket)))
    return out


def _bucket_splits(table: FileStoreTable, snapshot_id: int, partition: bytes) -> dict[int, Split]:
    values = table.partition_values(partition)
    keys = table.schema.partition_keys
    # a partition equality prunes manifests; a null partition value cannot be matched by equality
    pred = dict(zip(keys, values, strict=True)) if keys and None not in values else None
    return {s.bucket: s for s in table.new_scan(pred, snapshot_id, all_levels=True).plan() if s.partition == partition}
