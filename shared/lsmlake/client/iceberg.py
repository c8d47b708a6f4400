"""A table's Iceberg metadata through the catalog: publish it for the latest snapshot (docs/iceberg.md)."""

from __future__ import annotations

from dataclasses import dataclass

from lsmlake.client.connection import Connection
from lsmlake.client.tables import table_ident
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2


@dataclass(frozen=True)
class IcebergSync:
    """Where a table's Iceberg metadata is after a sync: the snapshot it describes (0: the table has none), its
    metadata JSON file (for pyiceberg's `StaticTable.from_metadata` or DuckDB's `iceberg_scan`), and how many
    snapshots the call published (0: it was current)."""

    snapshot_id: int
    metadata_location: str
    published: int


class Iceberg:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def sync_iceberg(self, identifier: str) -> IcebergSync:
        """Publish the Iceberg metadata of the table's latest snapshot, also for a table without the
        `metadata.iceberg.storage` option (which publishes with every commit); admin role."""
        req = catalog_pb2.SyncIcebergRequest(table=table_ident(identifier))
        reply = self._conn.call(self._conn.catalog.SyncIceberg, req, changes_state=True)
        return IcebergSync(reply.snapshot_id, reply.metadata_location, reply.published)
