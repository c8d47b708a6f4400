"""Rows a postpone-bucket table (bucket = -2) holds but does not show: written to `bucket-postpone`, they are read
only once a compaction places them in buckets (`lsmlake.table.postpone`). `lake write` and `lake scan` say how
many wait, and what places them."""

from __future__ import annotations

from lsmlake.format.snapshot import Snapshot
from lsmlake.table.file_store_table import FileStoreTable
from lsmlake.table.postpone import is_postpone, pending


def waiting_rows(table: FileStoreTable, snapshot: Snapshot | None = None) -> int:
    """Rows of the snapshot (the latest by default) waiting in `bucket-postpone`; 0 for other tables."""
    if not is_postpone(table.schema):
        return 0
    return sum(f.row_count for files in pending(table, snapshot).values() for f in files)


def waiting_text(identifier: str, rows: int, compactor: bool = False) -> str:
    """What to tell about `rows` rows waiting; `compactor`: a cluster's compactor service will place them."""
    from lsmlake.cli.records import plural

    how = ("the cluster's compactor service places them (or `lake compact` now)" if compactor else
           f"run `lake compact {identifier}` to place them (a cluster's compactor service does it by itself)")
    return (f"{plural(rows, 'row')} of {identifier} wait in bucket-postpone for placement in buckets and are not "
            f"read until then (bucket = -2); {how}")
