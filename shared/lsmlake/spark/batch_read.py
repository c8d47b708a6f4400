"""Batch reads: the driver plans splits (one per partition and bucket), executors read them with lsmlake's reader.

Each Spark partition holds one split, or several small ones packed up to `split.target-size` bytes of
files. An executor opens the table from its location and reads each split as `FileStoreTable.to_arrow`
would: merge-on-read where the split needs it (the table's merge engine), raw reads with deletion
vectors elsewhere, the `filter` terms applied after the merge. Rows travel to the JVM as Arrow batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from lsmlake.errors import InvalidInputError
from lsmlake.format.predicate import Predicate
from lsmlake.spark.access import TableRef
from lsmlake.spark.arrow_types import conform
from lsmlake.spark.read_options import ReadOptions
from lsmlake.table import features
from lsmlake.table.read import TableRead
from lsmlake.table.scan import Split

BATCH_ROWS = 65_536  # rows per Arrow batch sent to the JVM


@dataclass(frozen=True)
class ReadTask:
    """What every partition of one read shares: the table, the columns, the filter, the Arrow shape Spark wants."""

    ref: TableRef
    projection: tuple[str, ...]
    predicate: Predicate
    target: pa.Schema


class SplitsPartition(InputPartition):
    """One Spark partition: a split, or several small ones, of one snapshot."""

    def __init__(self, task: ReadTask, splits: Sequence[Split]) -> None:
        super().__init__(None)
        self.task = task
        self.splits = tuple(splits)

    def __repr__(self) -> str:
        return f"SplitsPartition({[(s.partition, s.bucket) for s in self.splits]})"


def split_size(split: Split) -> int:
    return sum(f.file_size for f in split.files)


def pack(splits: Sequence[Split], target_bytes: int) -> list[list[Split]]:
    """Splits in plan order, consecutive small ones grouped while the group stays within `target_bytes`."""
    groups: list[list[Split]] = []
    size = 0
    for s in splits:
        n = split_size(s)
        if groups and size + n <= target_bytes:
            groups[-1].append(s)
            size += n
        else:
            groups.append([s])
            size = n
    return groups


def read_splits(task: ReadTask, splits: Sequence[Split]) -> Iterator[pa.RecordBatch]:
    """The rows of the splits, merged and filtered, as batches shaped like `task.target` (runs on executors)."""
    table = task.ref.open()
    reader = TableRead(table.io, table.path, table.schema, list(task.projection), task.predicate)
    for split in splits:
        rows = reader.read_split(split)
        if rows.num_rows:
            yield from conform(rows, task.target).to_batches(max_chunksize=BATCH_ROWS)


class LakeBatchReader(DataSourceReader):
    """Plans on the driver (`partitions`), reads on the executors (`read`)."""

    def __init__(self, options: ReadOptions, target: pa.Schema) -> None:
        self.options = options
        self.target = target

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        access = o.access()
        try:
            table = access.table
            features.check(table.schema, o.identifier, for_write=False)
            missing = [n for n in self.target.names if n not in table.schema.field_names]
            if missing:
                raise InvalidInputError(f"column(s) {missing} are not columns of table {o.identifier}")
            predicate = o.predicate(table.schema.arrow_schema)
            snapshot_id = o.snapshot_id(access)
            splits = access.plan(snapshot_id, predicate)
            task = ReadTask(access.ref(), tuple(self.target.names), predicate, self.target)
        finally:
            access.close()
        groups = pack(splits, o.split_target_bytes)
        # Spark needs at least one partition; an empty one reads nothing
        return [SplitsPartition(task, g) for g in groups] or [SplitsPartition(task, [])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        yield from read_splits(partition.task, partition.splits)
