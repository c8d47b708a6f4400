"""Writing and reading a pypaimon table object (a filesystem or REST catalog's) with pypaimon itself: one batch
write and commit, and every row of the latest snapshot."""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def write(table: Any, data: pa.Table, overwrite: bool = False, properties: dict[str, str] | None = None) -> None:
    """One batch write and commit by pypaimon, with `properties` among the snapshot's properties; with `overwrite`
    an OVERWRITE of what `data` writes to (its partitions, or all of an unpartitioned table)."""
    wb = table.new_batch_write_builder()
    if overwrite:
        wb = wb.overwrite()
    w, c = wb.new_write(), wb.new_commit()
    try:
        w.write_arrow(data)
        c.commit(w.prepare_commit(), snapshot_properties=properties)
    finally:
        w.close()
        c.close()


def read(table: Any) -> pa.Table:
    """Every row of the table's latest snapshot, as pypaimon reads it (in no particular order)."""
    rb = table.new_read_builder()
    return rb.new_read().to_arrow(rb.new_scan().plan().splits())
