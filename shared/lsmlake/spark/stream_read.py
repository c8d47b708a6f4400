"""Streaming reads: each new snapshot's changes, with offsets = snapshot ids.

An offset `{"snapshot": N}` means "every change up to snapshot N has been delivered", so a query
restarted from its checkpoint resumes with snapshot N + 1 and sees each change exactly once. A
micro-batch `(start, end]` holds, snapshot by snapshot:
- where the table has a changelog producer (`changelog-producer` other than `none`), the changelog
  files each snapshot committed (writes and compactions alike);
- otherwise the data files APPEND snapshots added (the delta files: each write's rows, already folded
  per key); COMPACT snapshots change no row and OVERWRITE snapshots are skipped, as Paimon's streaming
  reads do by default.
Rows carry their change kind in `_row_kind` (`+I`, `-U`, `+U`, `-D`).

Without `option("snapshot", N)` a query starts at offset 0 and its first batch is the full content of
the newest snapshot (all `+I`), then the changes after it; with `snapshot` it starts after snapshot N
(0: every change since the table was created, while no snapshot has expired).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_read import read_data_file
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.manifest import ADD
from lsmlake.format.predicate import Predicate
from lsmlake.format.row_kind import SHORT_NAMES
from lsmlake.format.schema import VALUE_KIND
from lsmlake.format.snapshot import APPEND
from lsmlake.spark.access import TableAccess, TableRef
from lsmlake.spark.arrow_types import conform
from lsmlake.spark.batch_read import BATCH_ROWS, ReadTask, plan_partitions, read_splits
from lsmlake.spark.read_options import ReadOptions
from lsmlake.table import features
from lsmlake.table.file_store_table import FileStoreTable

ROW_KIND = "_row_kind"


@dataclass(frozen=True)
class ChangeFiles:
    """The change files one snapshot added to one (partition, bucket)."""

    snapshot_id: int
    partition_values: tuple[Any, ...]
    bucket: int
    files: tuple[DataFileMeta, ...]


class ChangesPartition(InputPartition):
    """A Spark partition of a micro-batch: change files, or (first batch) splits of a full snapshot."""

    def __init__(self, task: ReadTask, changes: Sequence[ChangeFiles] = (), full: Sequence[Any] = ()) -> None:
        super().__init__(None)
        self.task = task
        self.changes = tuple(changes)
        self.full = tuple(full)


def snapshot_changes(table: FileStoreTable, snapshot_id: int) -> list[ChangeFiles]:
    """The change files of one snapshot, by (partition, bucket), following the rules in the module doc."""
    snap = table.snapshots.snapshot(snapshot_id)
    producer = table.schema.table_options.get(opts.CHANGELOG_PRODUCER)
    if producer != "none":
        lists = [snap.changelog_manifest_list] if snap.changelog_manifest_list else []
    else:
        lists = [snap.delta_manifest_list] if snap.commit_kind == APPEND else []
    groups: dict[tuple[bytes, int], list[DataFileMeta]] = {}
    for name in lists:
        for m in table.manifests.read_list(name):
            for e in table.manifests.read_manifest(m.file_name):
                if e.kind == ADD:
                    groups.setdefault((e.partition, e.bucket), []).append(e.file)
    return [ChangeFiles(snapshot_id, tuple(table.partition_values(p)), b,
                        tuple(sorted(fs, key=lambda f: f.min_sequence_number)))
            for (p, b), fs in sorted(groups.items(), key=lambda kv: kv[0])]


def read_changes(task: ReadTask, changes: Sequence[ChangeFiles]) -> Iterator[pa.RecordBatch]:
    """The rows of change files with their `_row_kind`, shaped like `task.target` (runs on executors)."""
    table = task.ref.open()
    schema = table.schema
    columns = [c for c in task.projection if c != ROW_KIND]
    pk = schema.is_primary_key_table
    kinds = np.array(SHORT_NAMES)
    for c in changes:
        directory = bucket_dir(table.path, schema.partition_dir(c.partition_values), c.bucket)
        for f in c.files:
            rows = read_data_file(table.io, f.path_in(directory), schema, columns, [VALUE_KIND] if pk else [],
                                  file_schema=table.history.file_schema(f.schema_id, schema))
            if pk:
                names = pa.array(kinds[rows.column(VALUE_KIND).to_numpy()])
                rows = rows.drop_columns([VALUE_KIND])
            else:
                names = pa.array(np.full(rows.num_rows, "+I"))
            rows = rows.append_column(ROW_KIND, names)
            if rows.num_rows:
                yield from conform(rows, task.target).to_batches(max_chunksize=BATCH_ROWS)


def _with_insert_kind(batches: Iterator[pa.RecordBatch], target: pa.Schema) -> Iterator[pa.RecordBatch]:
    for b in batches:
        t = pa.Table.from_batches([b]).append_column(ROW_KIND, pa.array(np.full(b.num_rows, "+I")))
        yield from conform(t, target).to_batches(max_chunksize=BATCH_ROWS)


class LakeStreamReader(DataSourceStreamReader):
    """Offsets are snapshot ids; the driver lists each batch's change files, executors read them."""

    def __init__(self, options: ReadOptions, target: pa.Schema) -> None:
        if options.filter.strip():
            raise InvalidInputError("option 'filter' is for batch reads; filter the stream in Spark")
        if options.timestamp_ms is not None:
            raise InvalidInputError("option 'timestamp' is for batch reads; start a stream with 'snapshot'")
        self.options = options
        self.target = target
        self._access: TableAccess | None = None

    def _table_access(self) -> TableAccess:
        if self._access is None:
            self._access = self.options.access()
            features.check(self._access.table.schema, self.options.identifier, for_write=False)
        return self._access

    def initialOffset(self) -> dict[str, int]:
        return {"snapshot": self.options.snapshot if self.options.snapshot is not None else 0}

    def latestOffset(self) -> dict[str, int]:
        return {"snapshot": self._table_access().latest_snapshot_id() or 0}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        first, last = int(start["snapshot"]), int(end["snapshot"])
        access = self._table_access()
        table = access.table
        # the table's files as the newest schema describes them (a batch never spans an alter by this reader)
        table.refresh_schema()
        task = ReadTask(TableRef(access.identifier, access.location, table.schema.id, access.storage),
                        tuple(self.target.names), Predicate(), self.target)
        if first == 0 and self.options.snapshot is None and last > 0:
            groups = plan_partitions(access.plan(last, Predicate()), self.options.split_target_bytes,
                                     self.options.parallelism)
            return [ChangesPartition(task, full=g) for g in groups]
        earliest = table.snapshots.earliest_id() or 1
        if first + 1 < earliest and last > first:
            raise NotFoundError(f"table {access.identifier}: snapshots {first + 1}..{earliest - 1} expired before "
                                "this stream read them; restart the query from a newer snapshot")
        changes = [c for sid in range(first + 1, last + 1) for c in snapshot_changes(table, sid)]
        return [ChangesPartition(task, changes=[c]) for c in changes]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangesPartition)
        task = partition.task
        if partition.full:
            # batch split reads know no `_row_kind`: read without it, then add it
            inner = ReadTask(task.ref, tuple(n for n in task.projection if n != ROW_KIND), Predicate(),
                             pa.schema([f for f in task.target if f.name != ROW_KIND]))
            yield from _with_insert_kind(read_splits(inner, partition.full), task.target)
        else:
            yield from read_changes(task, partition.changes)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: change files stay until their snapshots expire."""

    def stop(self) -> None:
        if self._access is not None:
            self._access.close()
            self._access = None
