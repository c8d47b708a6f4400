"""The catalog publishes Iceberg metadata for the tables that ask for it (`metadata.iceberg.storage`).

Paimon's snapshot is the commit; the Iceberg metadata describing it is published once the commit is recorded, and
a failure to publish never fails the commit. A crash (or a storage error) between the two leaves the Iceberg
metadata behind the Paimon snapshots: the next commit of the table, or the catalog's background pass
(`catch_up`), publishes what is missing. A publication holds the table's commit lock (shared by catalog
replicas): the snapshot expiration, which drops Iceberg snapshots before it deletes files, runs under it too, so
a publication never brings back a snapshot whose files are being deleted; and commits that waited for it find
the metadata already current.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from lsmlake.iceberg import (
    IcebergPublication,
    current_metadata_location,
    iceberg_enabled,
    iceberg_metadata_dir,
    publish_iceberg,
    publish_iceberg_now,
)
from lsmlake.table.file_store_table import FileStoreTable

_log = logging.getLogger(__name__)


class IcebergPublisher:
    """Publishes the Iceberg metadata of a catalog's tables after their commits, on demand and in catch-up passes."""

    def __init__(self, get_table: Callable[[str], FileStoreTable],
                 lock: Callable[[str], AbstractContextManager[object]] | None = None) -> None:
        """`lock`: the table's commit lock (none for a catalog without a metadata store: its writers serialise)."""
        self._get_table = get_table
        self._lock = lock or (lambda _: nullcontext())

    def after_commit(self, table: FileStoreTable) -> IcebergPublication | None:
        """Publish the table's new snapshots when its options ask for it (`table` as its commit read it: a table
        without the option costs no read); a failure is logged, never raised (the commit stands: the next commit
        or the background pass publishes)."""
        tid = table.identifier
        try:
            if not iceberg_enabled(table.options.raw):
                return None
            with self._lock(tid):
                return publish_iceberg(table)  # it reads the table's latest snapshot and schema itself
        except Exception:
            _log.exception("the Iceberg metadata of %s could not be published; the next commit or the catalog's "
                           "background pass publishes it", tid)
            return None

    def catch_up(self, tid: str) -> IcebergPublication | None:
        """Publish what a table's Iceberg metadata misses (a crash between the two publications); errors raise."""
        table = self._get_table(tid)
        if not iceberg_enabled(table.options.raw):
            return None
        with self._lock(tid):
            return publish_iceberg(table)

    def sync(self, tid: str) -> IcebergPublication | None:
        """Publish the latest snapshot's Iceberg metadata whether or not the table has the option (`lake iceberg
        sync`); None for a table without snapshots."""
        with self._lock(tid):
            return publish_iceberg_now(self._get_table(tid))

    def location(self, tid: str) -> str | None:
        """The table's current Iceberg metadata file, None when none was published."""
        return current_metadata_location(self._get_table(tid))


def drop_iceberg_metadata(table: FileStoreTable) -> None:
    """Delete a table's Iceberg metadata folder (a dropped or renamed table: its metadata names its old paths)."""
    folder = iceberg_metadata_dir(table)
    if not folder.startswith(f"{table.path}/"):  # an Iceberg warehouse's table folder: it holds only the metadata
        folder = folder.rsplit("/", 1)[0]
    if table.io.exists(folder):
        table.io.fs.delete_dir(folder)


__all__ = ["IcebergPublisher", "drop_iceberg_metadata"]
