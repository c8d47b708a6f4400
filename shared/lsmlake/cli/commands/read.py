"""Commands that read a table and its history: `lake scan`, `changelog`, `snapshots`, `files`, and `expire`,
which ends the history older snapshots keep."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import pyarrow as pa

from lsmlake.cli.arguments import names
from lsmlake.cli.errors import CliError, UsageError
from lsmlake.cli.filters import where_predicate
from lsmlake.cli.output import output_file, write_rows
from lsmlake.cli.placement import waiting_rows, waiting_text
from lsmlake.cli.progress import Progress, Summary, limited, with_progress
from lsmlake.cli.records import out, print_records
from lsmlake.cli.warehouse import find_services, open_backend, open_catalog
from lsmlake.format import options as opts
from lsmlake.format.partition import partition_path
from lsmlake.table.changelog import read_changelog
from lsmlake.table.file_store_table import FileStoreTable

SNAPSHOT_KEYS = ("id", "schema_id", "commit_kind", "time_millis", "total_record_count",
                 "delta_record_count", "commit_user", "commit_identifier")
FILE_KEYS = ("partition", "bucket", "file", "level", "rows", "min_seq", "max_seq", "size", "schema_id",
             "delete_rows", "dv_deleted")


def cmd_scan(args: argparse.Namespace) -> int:
    if args.format == "parquet" and not args.output:
        raise UsageError("--format parquet needs --output FILE")
    table = open_catalog(args).get_table(args.table)
    schema = table.schema
    projection = None
    if args.columns is not None:
        projection = names(args.columns)
        if not projection:
            raise UsageError("--columns needs at least one column name")
        dup = sorted({c for c in projection if projection.count(c) > 1})
        if dup:
            raise UsageError(f"--columns lists {dup} more than once")
        for c in projection:
            schema.field(c)  # names an unknown column
    columns = projection if projection is not None else schema.field_names
    out_schema = pa.schema([schema.arrow_schema.field(n) for n in columns])
    predicate = where_predicate(table, args.where, args.partition)
    snapshot = table.require_snapshot(args.snapshot) if args.snapshot is not None else table.latest_snapshot()
    table, splits = open_backend(args).plan_scan(table, snapshot.id if snapshot else None, predicate) \
        if snapshot is not None else (table, [])
    # a filter leaves an unknown share of the planned rows: then the line counts rows without a total
    total = None if predicate is not None else sum(sp.row_count for sp in splits)
    if total is not None and args.limit is not None:
        total = min(total, args.limit)
    progress = Progress(f"scanning {args.table}", total)
    tables = with_progress(limited(table.new_read(projection, predicate).read_batches(splits), args.limit),
                           progress)
    if args.output:
        with output_file(args.output, binary=args.format == "parquet") as f:
            rows = write_rows(tables, out_schema, args.format, f)
        summary = Summary(rows, os.path.getsize(args.output), 1, progress.seconds)
        out(f"wrote {summary.text()} to {args.output} from {args.table}"
            + (f" snapshot {snapshot.id}" if snapshot is not None else ""))
    else:
        write_rows(tables, out_schema, args.format, sys.stdout)
    waiting = waiting_rows(table, snapshot)
    if waiting:
        services = find_services(args)
        compactor = services is not None and services.compactor is not None
        sys.stderr.write(f"note: {waiting_text(args.table, waiting, compactor)}\n")
    return 0


def cmd_changelog(args: argparse.Namespace) -> int:
    table = open_catalog(args).get_table(args.table)
    if table.options.get(opts.CHANGELOG_PRODUCER) == opts.ChangelogProducer.NONE:
        raise CliError(f"table {args.table} has no changelog producer (changelog-producer = none), so its snapshots "
                       "record no changelog; give it one with `lake table alter "
                       f"{args.table} --set changelog-producer=input` (or lookup, full-compaction)")
    rows = read_changelog(table, args.from_snapshot, args.to_snapshot)
    write_rows(iter([rows]), rows.schema, args.format, sys.stdout)
    return 0


def snapshot_records(table: FileStoreTable) -> list[dict[str, Any]]:
    return [{k: getattr(s, k) for k in SNAPSHOT_KEYS} for s in table.snapshots.snapshots()]


def cmd_snapshots(args: argparse.Namespace) -> int:
    table = open_catalog(args).get_table(args.table)
    numeric = ("id", "schema_id", "time_millis", "total_record_count", "delta_record_count",
               "commit_identifier")
    print_records(snapshot_records(table), SNAPSHOT_KEYS, args.format, numeric, times=("time_millis",))
    return 0


def file_records(table: FileStoreTable, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """The live data files of a snapshot (default: the latest), sorted by partition, bucket, level."""
    snapshot = table.require_snapshot(snapshot_id) if snapshot_id is not None else table.latest_snapshot()
    if snapshot is None:
        return []
    schema = table.schema
    keys = list(schema.partition_keys)
    types = schema.types_of(keys)
    default_name = schema.table_options.get(opts.PARTITION_DEFAULT_NAME)
    paths: dict[bytes, str] = {}
    deleted: dict[tuple[bytes, int, str], int] = {}
    for ie in table.indexes.read(snapshot.index_manifest):
        for r in ie.dv_ranges or ():
            deleted[(ie.partition, ie.bucket, r.file_name)] = r.cardinality or 0
    records = []
    for e in table.manifests.live(snapshot.base_manifest_list, snapshot.delta_manifest_list).values():
        if e.partition not in paths:
            values = table.partition_values(e.partition)
            paths[e.partition] = partition_path(values, keys, types, default_name) if keys else ""
        f = e.file
        records.append({"partition": paths[e.partition], "bucket": e.bucket, "file": f.file_name,
                        "level": f.level, "rows": f.row_count, "min_seq": f.min_sequence_number,
                        "max_seq": f.max_sequence_number, "size": f.file_size,
                        "schema_id": f.schema_id, "delete_rows": f.delete_row_count,
                        "dv_deleted": deleted.get((e.partition, e.bucket, f.file_name), 0)})
    records.sort(key=lambda r: (r["partition"], r["bucket"], r["level"], r["min_seq"], r["file"]))
    return records


def cmd_files(args: argparse.Namespace) -> int:
    table = open_catalog(args).get_table(args.table)
    numeric = ("bucket", "level", "rows", "min_seq", "max_seq", "size", "schema_id", "delete_rows", "dv_deleted")
    print_records(file_records(table, args.snapshot), FILE_KEYS, args.format, numeric)
    return 0


def cmd_iceberg_sync(args: argparse.Namespace) -> int:
    snapshot_id, location, published = open_backend(args).sync_iceberg(args.table)
    if not snapshot_id:
        out(f"{args.table} has no snapshot yet: no Iceberg metadata to publish")
        return 0
    what = f"published {published} snapshot(s)" if published else "already current"
    out(f"Iceberg metadata of {args.table} at snapshot {snapshot_id} ({what}): {location}")
    return 0


def cmd_expire(args: argparse.Namespace) -> int:
    expired = open_backend(args).expire(args.table, args.retain_min, args.retain_max, args.older_than_ms)
    out(f"expired {len(expired)} snapshot(s) of {args.table}" + (f": {expired}" if expired else ""))
    return 0
