"""Commands about the LSM shape of a table: `lake compact`, `lake levels` (the sorted runs of every bucket)
and `lake timeline` (the compaction plans of the catalog service)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import IO, Any

from lsmlake.catalog.health import read_healths
from lsmlake.cli.errors import CliError, UsageError
from lsmlake.cli.local_backend import partition_filter
from lsmlake.cli.output import JsonValues
from lsmlake.cli.records import cell, human_size, out, plural, print_records
from lsmlake.cli.warehouse import cluster_of, open_backend, open_catalog
from lsmlake.format import options as opts
from lsmlake.mergetree.levels import Levels, writers_stall
from lsmlake.metastore import PLAN_STATES, now_ms, open_store
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2
from lsmlake.table.compact import restore_levels
from lsmlake.table.dynamic_bucket import HASH_INDEX, is_dynamic
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import every_bucket

LEVEL_KEYS = ("partition", "bucket", "level", "run", "file", "size", "rows", "min_key", "max_key", "min_seq",
              "max_seq")
TIMELINE_KEYS = ("plan_id", "state", "buckets", "files", "output_level", "owner", "attempts", "age", "running",
                 "snapshot", "reason")

BucketLevels = tuple[str, int, Levels]  # (partition, bucket, levels)


def cmd_compact(args: argparse.Namespace) -> int:
    if args.partition:  # a partition that does not exist is an error, not "nothing to compact"
        partition_filter(open_catalog(args).get_table(args.table), args.partition)
    outcome = open_backend(args).compact(args.table, args.full, args.partition, args.timeout)
    for line in outcome.report(args.table):
        out(line)
    return 0


# -- levels --------------------------------------------------------------------------------------

def bucket_levels(table: FileStoreTable, snapshot_id: int | None = None) -> list[BucketLevels]:
    """The levels of every bucket of a snapshot (default: the latest), by partition and bucket.

    The partition is `key=value/...` with the values as `lake scan` prints them (a DATE as
    2024-01-31, null as the partition default name): the form `lake compact --partition` takes.
    """
    snapshot = table.require_snapshot(snapshot_id) if snapshot_id is not None else table.latest_snapshot()
    if snapshot is None:
        return []
    name = _partition_names(table)
    buckets = []
    # a postpone table's rows waiting for placement show as bucket -2, all on level 0
    for split in every_bucket(table, snapshot):
        buckets.append((name(split.partition_values), split.bucket, restore_levels(table, split)))
    buckets.sort(key=lambda b: (b[0], b[1]))
    return buckets


def _partition_names(table: FileStoreTable) -> Callable[[Sequence[Any]], str]:
    """`key=value/...` of partition values, as `lake scan` prints the values (see `bucket_levels`)."""
    schema = table.schema
    keys = list(schema.partition_keys)
    as_json = JsonValues(schema.types_of(keys))
    default_name = schema.table_options.get(opts.PARTITION_DEFAULT_NAME)

    def name(values: Sequence[Any]) -> str:
        shown = [default_name if v is None else cell(v) for v in as_json(list(values))]
        return "/".join(f"{k}={v}" for k, v in zip(keys, shown, strict=True))
    return name


def index_keys(table: FileStoreTable, snapshot_id: int | None = None) -> dict[tuple[str, int], int]:
    """The keys each bucket of a dynamic-bucket table holds in its HASH index, by (partition, bucket)."""
    snapshot = table.require_snapshot(snapshot_id) if snapshot_id is not None else table.latest_snapshot()
    if snapshot is None or not is_dynamic(table.schema):
        return {}
    name = _partition_names(table)
    return {(name(table.partition_values(e.partition)), e.bucket): e.row_count
            for e in table.indexes.read(snapshot.index_manifest) if e.index_type == HASH_INDEX}


def _bucket_records(table: FileStoreTable, bucket: BucketLevels) -> list[dict[str, Any]]:
    """One record per file of a bucket, run by run, newest run first (level-0 files one by one, then
    levels 1, 2, ...), the files of a run in key order."""
    partition, number, levels = bucket
    keyed = table.schema.is_primary_key_table
    as_json = JsonValues(table.schema.types_of(table.schema.trimmed_primary_keys))
    records = []
    for run, r in enumerate(levels.level_sorted_runs(), start=1):
        for f in r.run.files:
            lo, hi = levels.keys.range(f) if keyed else ((), ())
            records.append({"partition": partition, "bucket": number, "level": r.level, "run": run,
                            "file": f.file_name, "size": f.file_size, "rows": f.row_count,
                            "min_key": as_json(lo), "max_key": as_json(hi),
                            "min_seq": f.min_sequence_number, "max_seq": f.max_sequence_number})
    return records


def level_records(table: FileStoreTable, buckets: Sequence[BucketLevels]) -> list[dict[str, Any]]:
    return [r for b in buckets for r in _bucket_records(table, b)]


def _key_text(key: Sequence[Any]) -> str:
    cells = [cell(v) for v in key]
    return cells[0] if len(cells) == 1 else "(" + ", ".join(cells) + ")"


def print_levels(table: FileStoreTable, buckets: Sequence[BucketLevels], stream: IO[str],
                 keys: Mapping[tuple[str, int], int] | None = None) -> None:
    """The text picture of `lake levels`: per bucket a header, then a line per file, aligned throughout;
    `keys` adds the keys a dynamic bucket holds (`index_keys`)."""
    if not buckets:
        stream.write("no data files\n")
        return
    keyed = table.schema.is_primary_key_table
    stop_trigger = table.options.stop_trigger()
    blocks: list[tuple[list[str], list[list[str]]]] = []
    for bucket in buckets:
        partition, number, levels = bucket
        runs = levels.number_of_sorted_runs()
        where = f"{partition} bucket {number}" if partition else f"bucket {number}"
        counted = plural(runs, "sorted run") if keyed else plural(len(levels.all_files()), "file")
        header = [f"{where}: {counted}, highest level {levels.non_empty_highest_level()} "
                  f"(max {levels.max_level}), {human_size(levels.total_size())}"
                  + (f", {plural(keys[(partition, number)], 'key')} in its HASH index"
                     if keys and (partition, number) in keys else "")]
        if keyed and writers_stall(runs, stop_trigger):
            header.append(f"  STALL: {runs} sorted runs > stop trigger {stop_trigger}; "
                          "writers wait for compaction (run `lake compact`)")
        # cells: level, run, file, size, rows, [keys,] seq
        rows: list[list[str]] = []
        last_level = last_run = None
        for r in _bucket_records(table, bucket):
            cells = [f"L{r['level']}" if r["level"] != last_level else "",
                     f"run {r['run']}:" if r["run"] != last_run else "",
                     r["file"], human_size(r["size"]), plural(r["rows"], "row")]
            if keyed:
                cells.append(f"keys [{_key_text(r['min_key'])} .. {_key_text(r['max_key'])}]")
            cells.append(f"seq {r['min_seq']}-{r['max_seq']}")
            rows.append(cells)
            last_level, last_run = r["level"], r["run"]
        blocks.append((header, rows))
    all_rows = [r for _, rows in blocks for r in rows]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(all_rows[0]) if all_rows else 0)]
    for header, rows in blocks:
        for h in header:
            stream.write(h + "\n")
        for row in rows:
            cells = [c.rjust(w) if i in (3, 4) else c.ljust(w)  # size and rows to the right
                     for i, (c, w) in enumerate(zip(row, widths, strict=True))]
            stream.write(f"  {cells[0]}  {cells[1]} {'  '.join(cells[2:])}".rstrip() + "\n")


def cmd_rescale(args: argparse.Namespace) -> int:
    snapshot, partitions = open_backend(args).rescale(args.table, args.buckets, args.partition)
    if snapshot is None:
        out(f"nothing to rescale in {args.table} (no partition has buckets yet)")
    else:
        out(f"rescaled {args.table} in snapshot {snapshot}: {plural(partitions, 'partition')} now "
            f"{'has' if partitions == 1 else 'have'} {plural(args.buckets, 'bucket')}")
    return 0


def cmd_levels(args: argparse.Namespace) -> int:
    table = open_catalog(args).get_table(args.table)
    buckets = bucket_levels(table, args.snapshot)
    if args.format != "table":
        print_records(level_records(table, buckets), LEVEL_KEYS, args.format)
    else:
        print_levels(table, buckets, sys.stdout, index_keys(table, args.snapshot))
    return 0


# -- timeline ------------------------------------------------------------------------------------

def _age(ms: float) -> str:
    s = max(0, int(ms // 1000))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def timeline_records(store: Any, table_id: str, states: Sequence[str] | None, now: int) -> list[dict[str, Any]]:
    """One record per compaction plan of a table, oldest first."""
    records = []
    for p in store.plans.list_plans(table_id, states):
        units = catalog_pb2.CompactionPlan.FromString(p.detail).units if p.detail else []
        records.append({"plan_id": p.plan_id, "state": p.state, "buckets": len(units) or 1,
                        "files": len(p.input_files), "output_level": p.output_level, "owner": p.owner,
                        "attempts": p.attempts, "age": _age(now - p.created_ms),
                        "running": _age(now - p.started_ms) if p.state == "INFLIGHT" and p.started_ms else None,
                        "snapshot": p.snapshot_id, "reason": p.reason})
    return records


HEALTH_KEYS = ("table", "score", "severity", "stalled", "lag_s", "due", "runs", "triggers", "small_files",
               "level0_files", "requested", "inflight", "oldest_plan_s", "reasons", "error")
# right-aligned in a table
_HEALTH_NUMERIC = ("score", "lag_s", "due", "runs", "small_files", "level0_files", "requested", "inflight",
                   "oldest_plan_s")


def cmd_health(args: argparse.Namespace) -> int:
    """The tables ranked by health (`lsmlake.catalog.health`), plans from the catalog's store when it has one."""
    catalog = open_catalog(args)
    if args.table:
        catalog.get_table(args.table)  # an unknown table named is refused (one dropped while listing is left out)
        tids = [args.table]
    else:
        tids = catalog.table_ids(args.database)
    url = _metastore_url(args, catalog, required=False)
    with (open_store(url) if url is not None else nullcontext()) as store:
        healths = read_healths(catalog, store, tids, now_ms())
    # an append table has no sorted runs and no stop trigger: its measure is small files against
    # compaction.min.file-num .. max.file-num
    records: list[dict[str, Any]] = [
        {"table": h.table, "score": h.score, "severity": h.severity, "stalled": "STALLED" if h.stalled else "",
         "lag_s": round(h.lag_ms / 1000, 1), "due": h.due_buckets, "runs": h.max_sorted_runs if h.primary_key else "",
         "triggers": (f"runs {h.compaction_trigger}..{h.stop_trigger}" if h.primary_key
                      else f"files {h.min_file_num}..{h.max_file_num}"),
         "small_files": h.max_small_files, "level0_files": h.level0_files, "requested": h.pending_plans,
         "inflight": h.inflight_plans, "oldest_plan_s": round(h.oldest_plan_age_ms / 1000, 1),
         "reasons": "; ".join(str(r) for r in h.reasons if r.cause != "error"), "error": h.error or ""}
        for h in healths]
    if args.format != "table":  # for programs: a boolean, lists, and no error or runs as null
        for h, r in zip(healths, records, strict=True):
            r["stalled"], r["error"] = bool(r["stalled"]), r["error"] or None
            r["runs"] = r["runs"] if h.primary_key else None
            r["reasons"] = [str(x) for x in h.reasons if x.cause != "error"]
    print_records(records, HEALTH_KEYS, args.format, _HEALTH_NUMERIC)
    return 0


def _metastore_url(args: argparse.Namespace, catalog: Any, required: bool = True) -> str | None:
    """--metastore, $LSMLAKE_METASTORE, else the one of the cluster `lake up` runs on the warehouse, else the
    warehouse's SQLite file (None when it has none and not required)."""
    url = args.metastore or os.environ.get("LSMLAKE_METASTORE")
    if url:
        return str(url)
    state = cluster_of(args)
    if state is not None and state.metastore:
        return state.metastore
    if not catalog.io.local:
        if not required:
            return None
        raise UsageError("a remote warehouse has no default metadata store: pass --metastore URL")
    url = f"sqlite:///{os.path.abspath(os.path.join(catalog.root, '_lsmlake_catalog.sqlite'))}"
    if not os.path.exists(url.removeprefix("sqlite:///")):
        if not required:
            return None
        raise CliError(f"no catalog metadata store in the warehouse ({url}): is the catalog service "
                       "running on it? pass --metastore URL")
    return url


def cmd_timeline(args: argparse.Namespace) -> int:
    catalog = open_catalog(args)
    catalog.get_table(args.table)  # a clear error for an unknown table
    url = _metastore_url(args, catalog)
    assert url is not None
    bad = [s for s in args.state or () if s not in PLAN_STATES]
    if bad:
        raise UsageError(f"unknown state(s) {bad}: use {', '.join(PLAN_STATES)}")
    with open_store(url) as store:
        records = timeline_records(store, args.table, args.state, now_ms())
    print_records(records, TIMELINE_KEYS, args.format, ("plan_id", "buckets", "files", "output_level", "attempts",
                                                       "snapshot"))
    return 0
