"""Following a table's snapshots as they are committed, for WatchSnapshots streams.

The stream's mechanics (when to look again, when to stop) over the catalog operations' snapshot reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from lsmlake.catalog.operations import CatalogOperations
from lsmlake.errors import NotFoundError
from lsmlake.format.snapshot import Snapshot


def follow_snapshots(operations: CatalogOperations, tid: str, after: int | None, go_on: Callable[[], bool],
                     wait: Callable[[], None]) -> Iterator[Snapshot]:
    """Each kept snapshot after `after` (None: the latest now), then each new one, while `go_on()` holds.

    `wait` returns when a commit may have happened: at once after a commit through this replica, after a
    poll interval otherwise (commits through other replicas or outside writers are found by looking).
    NotFoundError once the table is dropped.
    """
    table = operations.get_table(tid)
    if after is None:
        after = table.snapshots.latest_id() or 0
    while go_on():
        if not operations.table_exists(tid):
            raise NotFoundError(f"table {tid} was dropped")
        latest = table.snapshots.latest_id() or 0
        if latest > after:
            earliest = table.snapshots.earliest_id() or 1
            for sid in range(max(after + 1, earliest), latest + 1):
                try:
                    snap = table.snapshots.snapshot(sid)
                except NotFoundError:  # expired meanwhile
                    continue
                yield snap
            after = latest
            continue
        wait()
