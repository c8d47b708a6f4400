"""Batch writes: executors write level-0 files per (partition, bucket); the driver commits them once.

1. `LakeDataSource.writer` (driver side) resolves the table and freezes its schema in a `TableRef`;
2. each Spark task gathers its Arrow batches up to `write.buffer-size`, writes them with lsmlake's
   `TableWrite` (rows routed by Paimon's bucket hash, folded by the merge engine, sorted by key) and
   returns the commit messages; a task that fails deletes its own files first;
3. `commit` (driver side) makes one snapshot through the catalog (or the warehouse): APPEND, or for
   `mode("overwrite")` an OVERWRITE of the partitions the rows touch (the whole table when it has no
   partition keys). A failed job (`abort`) or a commit that definitely failed deletes every file the
   tasks wrote: nothing becomes visible and nothing written stays behind. Only when the commit's
   outcome is unknown do the files stay, since a snapshot may reference them.

Sequence numbers: a bucket's rows get numbers above the bucket's current maximum, offset by
`task partition id * SEQUENCE_STRIDE`, so that tasks that wrote the same bucket (a DataFrame not
shuffled by bucket, see `lsmlake.spark.by_bucket`) never produce the same number for two rows: a key
written twice in one job keeps one definite winner. The driver refuses to commit if two tasks' ranges
in a bucket still overlap.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from lsmlake.errors import CommitStateUnknownError, InvalidInputError
from lsmlake.spark.access import TableRef
from lsmlake.spark.read_options import ReadOptions
from lsmlake.table import features
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.sequence_numbers import RestoredSequences
from lsmlake.table.write import CommitMessage

_log = logging.getLogger(__name__)

SEQUENCE_STRIDE = 1 << 28  # sequence numbers reserved per task and bucket in one write job


@dataclass
class TaskFiles(WriterCommitMessage):
    """What one write task produced: its commit messages and the paths of every file it wrote."""

    partition_id: int
    messages: list[CommitMessage] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


def task_write(table: FileStoreTable, batches: Iterator[pa.RecordBatch], partition_id: int,
               buffer_bytes: int) -> TaskFiles:
    """Write one task's rows as level-0 files (deleted again if anything fails)."""
    restore = table.max_sequence_restorer()
    offset = partition_id * SEQUENCE_STRIDE if table.schema.is_primary_key_table else 0
    write = table.new_write(RestoredSequences(lambda p, b: restore(p, b) + offset))
    pending: list[pa.RecordBatch] = []
    size = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            pending.append(batch)
            size += batch.nbytes
            if size >= buffer_bytes:
                write.write(pa.Table.from_batches(pending))
                pending, size = [], 0
        if pending:
            write.write(pa.Table.from_batches(pending))
        paths = list(write._written)
        return TaskFiles(partition_id, write.prepare_commit(), paths)
    except BaseException:
        write.abort()
        raise


def check_sequence_ranges(files: Sequence[TaskFiles]) -> None:
    """Refuse a job whose tasks gave overlapping sequence numbers to one bucket (a key would have two winners)."""
    ranges: dict[tuple[bytes, int], list[tuple[int, int, int]]] = {}
    for t in files:
        for m in t.messages:
            if m.new_files:
                lo = min(f.min_sequence_number for f in m.new_files)
                hi = max(f.max_sequence_number for f in m.new_files)
                ranges.setdefault((m.partition, m.bucket), []).append((lo, hi, t.partition_id))
    for (_, bucket), rs in ranges.items():
        rs.sort()
        for (_lo1, hi1, p1), (lo2, _hi2, p2) in zip(rs, rs[1:], strict=False):
            if lo2 <= hi1:
                raise InvalidInputError(
                    f"tasks {p1} and {p2} wrote overlapping sequence numbers into bucket {bucket} (more than "
                    f"{SEQUENCE_STRIDE} rows of one bucket in one task): shuffle by bucket first "
                    "(lsmlake.spark.by_bucket) or write in smaller jobs")


def delete_files(ref: TableRef, files: Sequence[TaskFiles | None]) -> None:
    """Best effort: delete what the tasks wrote (orphan cleanup finds anything left)."""
    paths = [p for t in files if t is not None for p in t.paths]
    if not paths:
        return
    io = ref.open().io
    for p in paths:
        io.delete_quietly(p)


class LakeBatchWriter(DataSourceArrowWriter):
    """Writes on the executors (`write`), commits or cleans up on the driver (`commit`, `abort`)."""

    def __init__(self, options: ReadOptions, ref: TableRef, overwrite: bool) -> None:
        self.options = options
        self.ref = ref
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskFiles:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        pid = ctx.partitionId() if ctx is not None else 0
        table = self.ref.open()
        features.check(table.schema, self.ref.identifier, for_write=True)
        return task_write(table, iterator, pid, self.options.write_buffer_bytes)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [m for m in messages if isinstance(m, TaskFiles)]
        all_messages = [cm for t in files for cm in t.messages]
        access = self.options.access()
        try:
            if access.table.schema.is_primary_key_table:  # append rows have no winner to decide
                check_sequence_ranges(files)
            if access.table.schema.id != self.ref.schema_id:
                raise InvalidInputError(f"table {self.ref.identifier} was altered during the write "
                                        f"(schema {self.ref.schema_id} -> {access.table.schema.id}); write again")
            truncates = self.overwrite and not access.table.schema.partition_keys
            if not all_messages and not truncates:
                access.close()
                return
            result = access.commit(all_messages, self.overwrite)
        except CommitStateUnknownError:
            access.close()
            raise  # the snapshot may reference the files: they must stay
        except BaseException:
            access.close()
            delete_files(self.ref, files)
            raise
        _log.info("spark write to %s committed snapshot %d", self.ref.identifier, result.snapshot_id)
        try:
            access.after_write()
        finally:
            access.close()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        delete_files(self.ref, [m for m in messages if isinstance(m, TaskFiles)])
