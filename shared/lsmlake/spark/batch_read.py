"""Batch reads: the driver plans splits (one per partition and bucket), executors read them with lsmlake's reader.

The splits are spread over about as many Spark partitions as the session has cores, balanced by bytes of
files, none above `split.target-size` bytes unless one split alone is: every Python partition costs a
fixed ~0.15 s of PySpark work (measured here: 8 one-row partitions take 1.6 s, one takes 0.4 s), as
much as reading some 16 MiB of files through Spark, so a read of 8 buckets on 2 cores runs as 2
partitions, not 8. A split that needs no merge (a compacted bucket, or any bucket with deletion vectors)
is cut by files when it alone is larger than a partition, so one big bucket still spreads over the cores.
An executor opens the table from its location and reads each split as `FileStoreTable.to_arrow` would:
merge-on-read where the split needs it (the table's merge engine), raw reads with deletion vectors
elsewhere, the `filter` terms applied after the merge. Rows travel to the JVM as Arrow batches (PySpark
4.0 passes a `pyarrow.RecordBatch` through unconverted; the JVM then turns its rows into Spark rows).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from lsmlake.errors import InvalidInputError
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.predicate import Predicate
from lsmlake.runtime.thread_pools import SharedPool
from lsmlake.spark.access import TableRef
from lsmlake.spark.arrow_types import conform
from lsmlake.spark.read_options import ReadOptions
from lsmlake.table import features
from lsmlake.table.read import TableRead
from lsmlake.table.scan import Split

BATCH_ROWS = 65_536  # rows per Arrow batch sent to the JVM
# a partition is not made smaller than this to spread a read over more cores: its fixed cost would outweigh it
MIN_PARTITION_BYTES = 16 << 20
# a split that needs no merge is cut (into runs of files of a partition's share, but not of less than this)
# only when it is larger: small buckets stay whole, with one read of their deletion-vector index each
MIN_CUT_BYTES = 32 << 20

# reads one split ahead of the batches being sent; its tasks wait on the decode pool, never on this one
_READ_AHEAD = SharedPool("lsmlake-spark-read-ahead", 2)


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


def plan_partitions(splits: Sequence[Split], max_bytes: int, parallelism: int) -> list[list[Split]]:
    """The splits spread over Spark partitions: about `parallelism` of them (fewer when a partition would hold
    less than MIN_PARTITION_BYTES), each at most `max_bytes` of files unless a single split is larger.
    Balanced by bytes, largest first onto the least loaded partition; each partition's splits in plan order,
    partitions in the order of their first split."""
    total = sum(split_size(s) for s in splits)
    per_partition = min(max_bytes, max(MIN_PARTITION_BYTES, math.ceil(total / max(parallelism, 1))))
    pieces = [p for s in splits for p in cut(s, max(per_partition, MIN_CUT_BYTES))]
    if not pieces:
        return []
    sizes = [split_size(p) for p in pieces]
    count = min(len(pieces), max(1, math.ceil(total / max(per_partition, 1))))
    loads = [(0, i) for i in range(count)]  # (bytes, partition): a heap, least loaded first
    members: list[list[int]] = [[] for _ in range(count)]
    for i in sorted(range(len(pieces)), key=lambda i: (-sizes[i], i)):
        load, part = heapq.heappop(loads)
        members[part].append(i)
        heapq.heappush(loads, (load + sizes[i], part))
    groups = sorted(sorted(m) for m in members if m)
    return [[pieces[i] for i in g] for g in groups]


def cut(split: Split, chunk_bytes: int) -> list[Split]:
    """A split that needs no merge as runs of consecutive files of at most `chunk_bytes` (or one file), each a
    split of its own, read alone; a split that is merged on read, or is small, as it is."""
    if not split.raw_convertible or len(split.files) < 2 or split_size(split) <= chunk_bytes:
        return [split]
    return [replace(split, files=tuple(run)) for run in _runs(split.files, chunk_bytes)]


def _runs(files: Sequence[DataFileMeta], chunk_bytes: int) -> list[list[DataFileMeta]]:
    runs: list[list[DataFileMeta]] = []
    size = 0
    for f in files:
        if runs and size + f.file_size <= chunk_bytes:
            runs[-1].append(f)
            size += f.file_size
        else:
            runs.append([f])
            size = f.file_size
    return runs


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
    if not splits:
        return
    table = task.ref.open()
    reader = TableRead(table.io, table.path, table.schema, list(task.projection), task.predicate)
    # the next split is read while the JVM takes this one's batches: else the worker's decoding and the
    # JVM's conversion to rows take turns, each idle while the other works
    ahead = _READ_AHEAD.get()
    pending = ahead.submit(reader.read_split, splits[0])
    try:
        for i in range(len(splits)):
            rows = pending.result()
            if i + 1 < len(splits):
                pending = ahead.submit(reader.read_split, splits[i + 1])
            if rows.num_rows:
                yield from conform(rows, task.target).to_batches(max_chunksize=BATCH_ROWS)
    finally:
        pending.cancel()  # a consumer that stops early (a LIMIT) leaves no read running for nothing


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
        groups = plan_partitions(splits, o.split_target_bytes, o.parallelism)
        # Spark needs at least one partition; an empty one reads nothing
        return [SplitsPartition(task, g) for g in groups] or [SplitsPartition(task, [])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitsPartition)
        yield from read_splits(partition.task, partition.splits)
