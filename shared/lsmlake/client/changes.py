"""Incremental reads: what the commits between two snapshots changed, row by row with its row kind.

As Paimon's `incremental-between` (scan mode `auto`): a table with a changelog producer gives its changelog
(`lsmlake.table.changelog`: the full changes, `-U` before `+U`, as a streaming reader sees them); any other
table gives its delta, the rows its APPEND commits wrote, as written (an upsert's `+I` or `+U`, a delete's `-D`;
compactions and overwrites are not changes of this kind and give nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lsmlake.errors import InvalidInputError, NotFoundError
from lsmlake.format.data_file_read import read_data_file
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.manifest import ADD
from lsmlake.format.predicate import Predicate
from lsmlake.format.row_kind import SHORT_NAMES
from lsmlake.format.schema import VALUE_KIND
from lsmlake.table.changelog import read_changelog
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.read import filter_rows

CHANGE_COLUMNS = ("snapshot_id", "row_kind")


def has_changelog(table: FileStoreTable) -> bool:
    return table.schema.options.get("changelog-producer", "none").lower() != "none"


def check_range(table: FileStoreTable, start: int, end: int | None) -> int:
    """The end snapshot (the newest when None); InvalidInputError or NotFoundError for a range whose changes cannot
    all be read."""
    for name, value in (("start_snapshot", start), ("end_snapshot", end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InvalidInputError(f"{name} must be a snapshot id >= 0, not {value!r}")
    latest = table.snapshots.latest_id() or 0
    last = latest if end is None else end
    if last > latest:
        raise NotFoundError(f"table {table.identifier} has no snapshot {last} (the newest is {latest})")
    if start > last:
        raise InvalidInputError(f"start_snapshot {start} is after end_snapshot {last}")
    earliest = table.snapshots.earliest_id()
    if earliest is not None and start + 1 < earliest and start < last:
        raise NotFoundError(f"the changes after snapshot {start} of {table.identifier} are gone: its snapshots "
                            f"before {earliest} expired (read from start_snapshot {earliest - 1} or later)")
    return last


def _delta(table: FileStoreTable, first: int, last: int) -> list[pa.Table]:
    schema = table.schema
    system = [VALUE_KIND] if schema.is_primary_key_table else []
    parts = []
    for sid in range(first, last + 1):
        snap = table.snapshots.snapshot(sid)
        if snap.commit_kind != "APPEND":
            continue
        for m in table.manifests.read_list(snap.delta_manifest_list):
            for e in table.manifests.read_manifest(m.file_name):
                if e.kind != ADD:
                    continue
                directory = bucket_dir(table.path, schema.partition_dir(table.partition_values(e.partition)),
                                       e.bucket)
                rows = read_data_file(table.io, e.file.path_in(directory), schema, schema.field_names, system,
                                      file_schema=table.history.file_schema(e.file.schema_id, schema))
                if system:
                    kinds = pa.array(np.array(SHORT_NAMES)[rows.column(VALUE_KIND).to_numpy()])
                    rows = rows.drop_columns([VALUE_KIND])
                else:
                    kinds = pa.array(np.full(rows.num_rows, SHORT_NAMES[0]))
                rows = rows.add_column(0, "row_kind", kinds).add_column(
                    0, "snapshot_id", pa.array(np.full(rows.num_rows, sid, np.int64)))
                parts.append(rows)
    return parts


def read_changes(table: FileStoreTable, start: int, end: int | None, predicate: Predicate,
                 columns: Sequence[str] | None) -> pa.Table:
    """The changes of snapshots `start`+1 .. `end` (see the module), in commit order: `snapshot_id`, `row_kind`,
    then `columns` (default: all), only rows for which `predicate` holds."""
    last = check_range(table, start, end)
    names = list(columns) if columns is not None else table.schema.field_names
    unknown = [c for c in names if c not in table.schema.field_names]
    if unknown:
        raise InvalidInputError(f"columns {unknown} are not columns of {table.identifier}")
    fields = [pa.field(n, pa.int64() if n == "snapshot_id" else pa.string()) for n in CHANGE_COLUMNS]
    out_schema = pa.schema(fields + [table.schema.arrow_schema.field(n).with_nullable(True) for n in names])
    if start >= last:
        return out_schema.empty_table()
    if has_changelog(table):
        rows = read_changelog(table, start + 1, last)
    else:
        parts = _delta(table, start + 1, last)
        rows = pa.concat_tables(parts) if parts else None
    if rows is None or rows.num_rows == 0:
        return out_schema.empty_table()
    rows = filter_rows(rows, predicate)  # not an Acero filter: see filter_rows
    return rows.select([*CHANGE_COLUMNS, *names]).cast(out_schema)
