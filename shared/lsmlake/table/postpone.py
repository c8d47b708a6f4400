"""Postpone-bucket primary-key tables (`bucket = -2`): writers write, a compaction places the rows in buckets.

Paimon's layout, checked against pypaimon 2.1.0's output (docs/bucket-modes.md):
- a writer needs no bucket count: its files go to `<partition>/bucket-postpone/` with bucket -2 and total
  buckets -2 in the manifest, level 0; their rows are in arrival order (Paimon's writers neither sort nor
  merge them; lsmlake's write them sorted and merged, which the placement below reads the same way), and
  their sequence numbers and min/max keys mean nothing;
- readers never see them (pypaimon, Java batch scans and lsmlake's scan skip bucket < 0);
- a compaction takes a partition's postpone files in the order they were written (creation time, then
  name), routes each row to `bucket = |murmur3(bucket key)| % N` like any fixed-bucket table, numbers the rows
  above each bucket's largest sequence number, merges them with the table's merge engine into level-0 files
  of the real buckets (total buckets N), and commits one COMPACT snapshot that deletes the postpone files
  and adds those: readers see all of a partition's postponed rows at once, or none;
- N is per partition and recorded only as the total buckets of its real-bucket files: the count the
  partition has, else `postpone.default-bucket-num`, else one bucket per `postpone.target-row-num-per-bucket`
  rows, else per `postpone.target-size-per-bucket` bytes (1 GiB by default) of postpone files;
- a partition's count changes only by `rescale`: one OVERWRITE commit rewriting its rows into the new buckets
  (as Paimon's rescale does; a commit mixing two counts in a partition is not a Paimon table any more).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace

import pyarrow as pa

from lsmlake.errors import CorruptMetadataError, InvalidInputError
from lsmlake.format import options as opts
from lsmlake.format.bucket import POSTPONE_BUCKET
from lsmlake.format.data_file_meta import DataFileMeta
from lsmlake.format.data_file_read import read_data_file
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.index_manifest import DELETION_VECTORS, IndexEntry
from lsmlake.format.manifest import ManifestEntry
from lsmlake.format.predicate import Predicate
from lsmlake.format.row_kind import ROW_KIND_COLUMN
from lsmlake.format.schema import TableSchema
from lsmlake.format.snapshot import Snapshot
from lsmlake.mergetree.compact.rewriter import DATA_PREFIX
from lsmlake.table.file_store import FileStore
from lsmlake.table.scan import Split
from lsmlake.table.sequence_numbers import RestoredSequences
from lsmlake.table.write import CommitMessage, TableWrite


def is_postpone(schema: TableSchema) -> bool:
    return schema.is_primary_key_table and schema.num_buckets == POSTPONE_BUCKET


def bucket_count(o: opts.TableOptions, known: int | None, rows: int, size: int) -> int:
    """The bucket count of a partition whose postpone files hold `rows` rows in `size` bytes (see the module)."""
    if known is not None:
        return known
    for option in (opts.POSTPONE_DEFAULT_BUCKET_NUM, opts.POSTPONE_TARGET_ROW_NUM_PER_BUCKET,
                   opts.POSTPONE_TARGET_SIZE_PER_BUCKET):
        value = o.get(option)
        if value is not None and value <= 0:
            raise InvalidInputError(f"option {option.key!r} must be positive, got {value}")
    default = o.get(opts.POSTPONE_DEFAULT_BUCKET_NUM)
    if default is not None:
        return default
    per_bucket = o.get(opts.POSTPONE_TARGET_ROW_NUM_PER_BUCKET)
    if per_bucket is not None:
        return max(1, math.ceil(rows / per_bucket))
    return max(1, math.ceil(size / o.require(opts.POSTPONE_TARGET_SIZE_PER_BUCKET)))


def known_counts(table: FileStore, entries: Sequence[ManifestEntry]) -> dict[bytes, int]:
    """The bucket count of each partition that has real buckets (CorruptMetadataError when one has two)."""
    out: dict[bytes, int] = {}
    for e in entries:
        if e.bucket >= 0 and e.total_buckets > 0:
            seen = out.setdefault(e.partition, e.total_buckets)
            if seen != e.total_buckets:
                raise CorruptMetadataError(f"table {table.identifier}: a partition has files of {seen} and of "
                                           f"{e.total_buckets} buckets")
    return out


def pending(table: FileStore, snapshot: Snapshot | None = None) -> dict[bytes, list[DataFileMeta]]:
    """The postpone files of each partition at `snapshot` (the latest by default), in the order they were written."""
    return postponed(table, snapshot)[0]


def postponed(table: FileStore, snapshot: Snapshot | None = None
              ) -> tuple[dict[bytes, list[DataFileMeta]], dict[bytes, int]]:
    """`pending` and `known_counts` at `snapshot` (the latest by default), from one read of its manifests."""
    snap = snapshot if snapshot is not None else table.snapshots.latest()
    if snap is None:
        return {}, {}
    entries = list(table.manifests.live(snap.base_manifest_list, snap.delta_manifest_list).values())
    by_partition: dict[bytes, list[DataFileMeta]] = defaultdict(list)
    for e in entries:
        if e.bucket == POSTPONE_BUCKET:
            by_partition[e.partition].append(e.file)
    waiting = {p: sorted(fs, key=lambda f: (f.creation_time_ms or 0, f.file_name)) for p, fs in by_partition.items()}
    return waiting, known_counts(table, entries)


def place(table: FileStore, snapshot: Snapshot | None = None,
          partitions: Predicate | None = None) -> list[CommitMessage]:
    """Route every postpone row of `snapshot` (the latest by default; of the partitions whose values pass
    `partitions`, when given) to its bucket: the messages of one COMPACT commit (new level-0 files in the real
    buckets, the postpone files deleted); nothing is committed."""
    snap = snapshot if snapshot is not None else table.snapshots.latest()
    if snap is None:
        return []
    waiting, known = postponed(table, snap)
    keys = table.schema.partition_keys
    restore = table.max_sequence_restorer()  # reads the manifests once for every partition
    messages: list[CommitMessage] = []
    for partition, files in sorted(waiting.items()):
        if partitions is not None and not partitions.test(dict(zip(keys, table.partition_values(partition),
                                                                   strict=True))):
            continue
        messages.extend(place_partition(table, partition, files, known.get(partition), restore=restore))
    return messages


def place_partition(table: FileStore, partition: bytes, files: Sequence[DataFileMeta], known: int | None,
                    file_prefix: str = DATA_PREFIX,
                    restore: Callable[[bytes, int], int] | None = None) -> list[CommitMessage]:
    """Route the rows of a partition's postpone `files` (in the order given: the order they were written) to
    the partition's `known` bucket count (or the one the options give): its messages, nothing committed.

    The rows are read into memory together (the merge engine folds them per bucket); the new files' names
    start with `file_prefix`; `restore` gives a bucket's largest sequence number (read from the latest snapshot
    when not given).
    """
    schema = table.schema
    others = [f.file_name for f in files if not f.file_name.endswith(".parquet")]
    if others:  # pypaimon writes Avro when the table names no file.format, Java always does
        raise InvalidInputError(f"postpone file(s) {', '.join(others[:3])} of {table.identifier} are not Parquet: "
                                "lsmlake reads Parquet only; write postpone tables with file.format = parquet")
    folder = bucket_dir(table.path, schema.partition_dir(table.partition_values(partition)), POSTPONE_BUCKET)
    rows = pa.concat_tables([_rows(table, f"{folder}/{f.file_name}") for f in files])
    n = bucket_count(table.options, known, rows.num_rows, sum(f.file_size for f in files))
    # the changelog of an `input` producer was written with the postponed rows, not again when they move
    view = replace(schema, options={**schema.options, opts.BUCKET.key: str(n), opts.CHANGELOG_PRODUCER.key: "none"})
    writer = TableWrite(table.io, table.path, view, RestoredSequences(restore or table.max_sequence_restorer()),
                        file_prefix)
    try:
        writer.write(rows)
        placed = writer.prepare_commit()
    except BaseException:
        writer.abort()
        raise
    return [*placed, CommitMessage(partition, POSTPONE_BUCKET, POSTPONE_BUCKET, deleted_files=list(files))]


def _rows(table: FileStore, path: str) -> pa.Table:
    """A postpone file's rows in file order, with their row kinds as the input column writers take."""
    data = read_data_file(table.io, path, table.schema, list(table.schema.field_names), ["_VALUE_KIND"])
    kinds = data.column("_VALUE_KIND").cast(pa.int8())
    return data.drop_columns(["_VALUE_KIND"]).append_column(ROW_KIND_COLUMN, kinds)


def postpone_splits(table: FileStore, snapshot: Snapshot | None = None) -> list[Split]:
    """One split per partition with postponed rows (bucket -2, its files in the order they were written): the
    compactor's work next to the real buckets' splits of a scan (which leaves these out)."""
    snap = snapshot if snapshot is not None else table.snapshots.latest()
    if snap is None or not is_postpone(table.schema):
        return []
    return [Split(p, tuple(table.partition_values(p)), POSTPONE_BUCKET, POSTPONE_BUCKET, tuple(files), snap.id)
            for p, files in sorted(pending(table, snap).items())]


def every_bucket(table: FileStore, snapshot: Snapshot | None) -> list[Split]:
    """Every bucket of the table at `snapshot` with its files on all levels, and each partition's postponed rows
    (bucket -2): what compaction, health and the pictures of a table look at. None: no snapshot, no buckets."""
    if snapshot is None:
        return []
    return table.new_scan(None, snapshot, all_levels=True).plan() + postpone_splits(table, snapshot)


def rescale(table: FileStore, buckets: int, partitions: Sequence[bytes] | None = None) -> list[CommitMessage]:
    """The messages of one OVERWRITE commit giving `partitions` (every partition with real buckets when None)
    `buckets` buckets: their merged rows rewritten at level 0 of the new buckets, their old files deleted.
    Postponed rows are left to be placed later, with the new count; nothing is committed.

    Readers see the partition with its old buckets or its new ones, never a mix (one snapshot).
    """
    if buckets <= 0:
        raise InvalidInputError(f"a partition needs at least one bucket, got {buckets}")
    snap = table.snapshots.latest()
    if snap is None:
        return []
    wanted = None if partitions is None else set(partitions)
    splits = [s for s in table.new_scan(None, snap, all_levels=True).plan()
              if s.bucket >= 0 and (wanted is None or s.partition in wanted)]
    schema = table.schema
    view = replace(schema, options={**schema.options, opts.BUCKET.key: str(buckets),
                                    opts.CHANGELOG_PRODUCER.key: "none"})
    messages: list[CommitMessage] = []
    top = table.options.num_levels() - 1
    # the deletion vectors of the old buckets go with their files: a commit that deletes a bucket's files while its
    # vectors stay is one planned against an index it did not read, and is refused
    vectors: dict[tuple[bytes, int], list[IndexEntry]] = defaultdict(list)
    for e in table.indexes.read(snap.index_manifest) if snap.index_manifest else ():
        if e.index_type == DELETION_VECTORS:
            vectors[(e.partition, e.bucket)].append(e)
    for partition in sorted({s.partition for s in splits}):
        mine = [s for s in splits if s.partition == partition]
        rows = table.new_read(None, None).read(mine)  # merged: one row per key, deletes applied
        writer = TableWrite(table.io, table.path, view, RestoredSequences(lambda _p, _b: -1))
        try:
            writer.write(rows)
            written = writer.prepare_commit()
        except BaseException:
            writer.abort()
            raise
        # one write of merged rows is one sorted run per bucket: it goes to the top level, as a full compaction's
        # output would (level 0 would hide it from deletion-vector readers until the next compaction)
        for m in written:
            m.new_files = [replace(f, level=top) for f in m.new_files]
        messages.extend(written)
        messages.extend(CommitMessage(partition, s.bucket, s.total_buckets, deleted_files=list(s.files),
                                      deleted_index_files=vectors.pop((partition, s.bucket), []))
                        for s in mine)
    return messages


def delete_new_files(table: FileStore, messages: Sequence[CommitMessage]) -> None:
    """Delete the files `rescale`'s messages add (their commit definitely failed)."""
    for m in messages:
        directory = bucket_dir(table.path, table.schema.partition_dir(table.partition_values(m.partition)), m.bucket)
        for f in m.new_files:
            table.io.delete_quietly(f"{directory}/{f.file_name}")
