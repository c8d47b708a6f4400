"""Reading a table's changelog: the rows each snapshot's changelog files hold, in commit order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lsmlake.format.data_file_read import read_data_file
from lsmlake.format.data_file_writer import bucket_dir
from lsmlake.format.row_kind import SHORT_NAMES
from lsmlake.format.schema import VALUE_KIND
from lsmlake.table.file_store import FileStore


def read_changelog(table: FileStore, from_snapshot: int = 1, to_snapshot: int | None = None) -> pa.Table:
    """The changelog rows committed by snapshots `from_snapshot`..`to_snapshot`, in commit order.

    Columns: `snapshot_id`, `row_kind` (+I, -U, +U, -D), then the table's columns.
    """
    schema = table.schema
    last = to_snapshot if to_snapshot is not None else (table.snapshots.latest_id() or 0)
    first = max(from_snapshot, table.snapshots.earliest_id() or 1)
    parts = []
    for sid in range(first, last + 1):
        snap = table.snapshots.snapshot(sid)
        if not snap.changelog_manifest_list:
            continue
        for m in table.manifests.read_list(snap.changelog_manifest_list):
            for e in table.manifests.read_manifest(m.file_name):
                values = table.partition_values(e.partition)
                directory = bucket_dir(table.path, schema.partition_dir(values), e.bucket)
                rows = read_data_file(table.io, e.file.path_in(directory), schema, schema.field_names,
                                      [VALUE_KIND], file_schema=table.history.file_schema(e.file.schema_id, schema))
                names = pa.array(np.array(SHORT_NAMES)[rows.column(VALUE_KIND).to_numpy()])
                rows = rows.drop_columns([VALUE_KIND])
                rows = rows.add_column(0, "row_kind", names).add_column(
                    0, "snapshot_id", pa.array(np.full(rows.num_rows, sid, np.int64)))
                parts.append(rows)
    if not parts:
        fields = [pa.field("snapshot_id", pa.int64()), pa.field("row_kind", pa.string())]
        return pa.schema(fields + [f.with_nullable(True) for f in schema.arrow_schema]).empty_table()
    return pa.concat_tables(parts)
