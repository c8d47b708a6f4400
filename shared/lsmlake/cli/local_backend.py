"""The backend over the library: changes go straight into the warehouse folder (no cluster runs on it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lsmlake.catalog.expire import expire_snapshots
from lsmlake.catalog.filesystem import FileSystemCatalog
from lsmlake.cli.backend import NewTable
from lsmlake.cli.errors import CliError, UsageError
from lsmlake.cli.output import JsonValues
from lsmlake.cli.progress import Progress, Summary, Waiting, duration, with_progress
from lsmlake.cli.records import cell, human_size, plural
from lsmlake.errors import CommitStateUnknownError, NotFoundError
from lsmlake.format import options as opts
from lsmlake.format.manifest import ADD
from lsmlake.format.predicate import Predicate
from lsmlake.format.snapshot import OVERWRITE
from lsmlake.ingest.csv_rows import text_value
from lsmlake.ingest.values import BadValue
from lsmlake.table.compact import TableCompactResult, compact_table
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import delete_new_files, every_bucket, is_postpone, rescale
from lsmlake.table.scan import Split
from lsmlake.table.schema_change import SchemaChange
from lsmlake.table.write import CommitMessage


@dataclass(frozen=True)
class LocalWrite:
    snapshot_id: int | None
    files: int
    size: int
    seconds: float

    def report(self, identifier: str, rows: int, files: str) -> str:
        if self.snapshot_id is None:
            return f"wrote 0 rows from {files} to {identifier}: nothing to commit"
        return (f"wrote {plural(rows, 'row')} from {files} to {identifier} in snapshot {self.snapshot_id}: "
                f"{plural(self.files, 'data file')}, {human_size(self.size)}, {duration(self.seconds)}")


def added_files(table: FileStoreTable, snapshot_id: int) -> tuple[int, int]:
    """How many data files a snapshot added, and their bytes (from its delta manifests)."""
    snap = table.snapshots.snapshot(snapshot_id)
    added = [e.file for m in table.manifests.read_list(snap.delta_manifest_list)
             for e in table.manifests.read_manifest(m.file_name) if e.kind == ADD]
    return len(added), sum(f.file_size for f in added)


@dataclass(frozen=True)
class LocalCompaction:
    result: TableCompactResult
    seconds: float

    def report(self, identifier: str) -> list[str]:
        r = self.result
        if r.snapshot_id is None:
            return [f"nothing to compact in {identifier} ({duration(self.seconds)})"]
        before, after = plural(r.files_before, "file"), plural(r.files_after, "file")
        new = [f for m in r.messages for f in m.new_files]
        written = Summary(sum(f.row_count for f in new), sum(f.file_size for f in new), len(new), self.seconds)
        return [f"compacted {identifier} in snapshot {r.snapshot_id}: {before} -> {after} "
                f"in {plural(len(r.messages), 'bucket')}; wrote {written.text()}"]


class LocalBackend:
    """Changes through `FileSystemCatalog` and the table API of the library."""

    def __init__(self, open_catalog: Callable[[], FileSystemCatalog]) -> None:
        self._open_catalog = open_catalog
        self._catalog: FileSystemCatalog | None = None

    @property
    def catalog(self) -> FileSystemCatalog:
        if self._catalog is None:
            self._catalog = self._open_catalog()
        return self._catalog

    def create_table(self, table: NewTable, if_not_exists: bool) -> None:
        self.catalog.create_table(table.identifier, table.fields, table.partition_keys, table.primary_keys,
                                  table.options, table.comment, ignore_if_exists=if_not_exists)

    def alter_table(self, identifier: str, changes: Sequence[SchemaChange]) -> int:
        return self.catalog.alter_table(identifier, changes).schema.id

    def drop_table(self, identifier: str, if_exists: bool) -> bool:
        try:
            self.catalog.drop_table(identifier)
        except NotFoundError:
            if not if_exists:
                raise
            return False
        return True

    def write(self, table: FileStoreTable, batches: list[pa.Table], request_id: str | None,
              progress: Progress) -> LocalWrite:
        if request_id:
            raise UsageError("--request-id needs a cluster: run `lake up`, or pass --catalog-service")
        # one write per input: files are written as each one goes in, so the bar moves input by input
        result = table.write_arrow(with_progress(batches, progress))
        if result is None:
            return LocalWrite(None, 0, 0, progress.seconds)
        return LocalWrite(result.snapshot_id, *added_files(table, result.snapshot_id), progress.seconds)

    def plan_scan(self, table: FileStoreTable, snapshot_id: int | None,
                  predicate: Predicate | None) -> tuple[FileStoreTable, list[Split]]:
        return table, table.new_scan(predicate, snapshot_id).plan()

    def compact(self, identifier: str, full: bool, partition: Sequence[tuple[str, str]],
                timeout_s: float | None = None) -> LocalCompaction:
        """`timeout_s` is for a compactor service's answer: here the command runs until the work is done."""
        table = self.catalog.get_table(identifier)
        selected = partition_filter(table, partition)
        # the library reports no progress inside a compaction: the line shows the time it has taken
        with Waiting(f"compacting {identifier}") as waiting:
            result = compact_table(table, full=full, partition=selected)
        return LocalCompaction(result, waiting.seconds)

    def rescale(self, identifier: str, buckets: int, partition: Sequence[tuple[str, str]]) -> tuple[int | None, int]:
        table = self.catalog.get_table(identifier)
        messages = rescale_messages(table, buckets, partition)
        if not messages:
            return None, 0
        try:
            result = table.new_commit().commit(messages, kind=OVERWRITE)
        except CommitStateUnknownError:
            raise
        except BaseException:
            delete_new_files(table, messages)
            raise
        return result.snapshot_id, len({m.partition for m in messages})

    def expire(self, identifier: str, retain_min: int | None, retain_max: int | None,
               older_than_ms: int | None) -> list[int]:
        result = expire_snapshots(self.catalog.get_table(identifier), retain_min=retain_min, retain_max=retain_max,
                                  time_retained_ms=older_than_ms)
        return list(result.expired_snapshots)

    def sync_iceberg(self, identifier: str) -> tuple[int, str, int]:
        from lsmlake.catalog.iceberg_publisher import IcebergPublisher

        done = IcebergPublisher(self.catalog.get_table).sync(identifier)
        return (0, "", 0) if done is None else (done.snapshot_id, done.metadata_location, done.published)


def partition_filter(table: FileStoreTable, pairs: Sequence[tuple[str, str]]
                     ) -> dict[str, Any] | list[tuple[Any, ...]] | None:
    """`--partition KEY=VALUE` pairs -> a {column: value} mapping (None: no filter).

    Each value is parsed with its column's type, as a CSV cell is. The table's partition default name
    stands for null (then `(column, op[, value])` terms).
    """
    if not pairs:
        return None
    schema = table.schema
    keys = list(schema.partition_keys)
    if not keys:
        raise CliError(f"table {table.identifier} is not partitioned: --partition cannot be used")
    default_name = schema.table_options.get(opts.PARTITION_DEFAULT_NAME)
    values: dict[str, Any] = {}
    for key, text in pairs:
        if key not in keys:
            raise CliError(f"--partition {key}={text}: {key!r} is not a partition column of "
                           f"{table.identifier} (partition keys: {', '.join(keys)})")
        if key in values:
            raise UsageError(f"--partition {key}=... is given more than once")
        if text == default_name:
            values[key] = None
            continue
        t = schema.field(key).type
        try:
            values[key] = text_value(text, t)
        except BadValue as e:
            raise CliError(f"--partition {key}={text}: not a {t.sql()} value ({e})") from None
    selected: dict[str, Any] | list[tuple[Any, ...]] = values
    if any(v is None for v in values.values()):
        selected = [(k, "is_null") if v is None else (k, "=", v) for k, v in values.items()]
    _require_partition(table, selected, pairs)
    return selected


def _require_partition(table: FileStoreTable, selected: dict[str, Any] | list[tuple[Any, ...]],
                       pairs: Sequence[tuple[str, str]]) -> None:
    """CliError when no partition of the latest snapshot matches (rows waiting for placement count): a mistyped
    value is not "nothing to do"."""
    schema = table.schema
    keys = list(schema.partition_keys)
    pred = Predicate.of(selected)
    partitions = [table.partition_values(p) for p in
                  {s.partition for s in every_bucket(table, table.snapshots.latest())}]
    if any(pred.test(dict(zip(keys, values, strict=True))) for values in partitions):
        return
    default_name = schema.table_options.get(opts.PARTITION_DEFAULT_NAME)
    as_json = JsonValues(schema.types_of(keys))
    names = sorted("/".join(f"{k}={default_name if v is None else cell(v)}"
                            for k, v in zip(keys, as_json(values), strict=True)) for values in partitions)
    known = f"its partitions: {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}" if names \
        else "it has no data"
    asked = " ".join(f"--partition {k}={v}" for k, v in pairs)
    raise CliError(f"{asked}: table {table.identifier} has no such partition ({known})")


def rescale_messages(table: FileStoreTable, buckets: int, pairs: Sequence[tuple[str, str]]) -> list[CommitMessage]:
    """The OVERWRITE messages of `lake rescale` (see `lsmlake.table.postpone.rescale`), files written."""
    if not is_postpone(table.schema):
        raise CliError(f"table {table.identifier} has bucket = {table.schema.num_buckets}: rescale is for "
                       "postpone-bucket tables (bucket = -2), whose partitions each have their own count")
    selected = partition_filter(table, pairs)
    partitions = None if selected is None else sorted(
        {s.partition for s in table.new_scan(Predicate.of(selected), all_levels=True).plan()})
    if partitions == []:
        return []
    return rescale(table, buckets, partitions)
