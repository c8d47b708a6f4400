"""A table's tags through the catalog: named snapshots that expiration keeps, to read again later."""

from __future__ import annotations

from lsmlake.client.connection import Connection
from lsmlake.client.snapshots import SnapshotInfo


class Tags:
    """A table's tags (a part of `Client`); scan one with `new_scan(identifier, tag=name)`."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def create_tag(self, identifier: str, tag: str, snapshot_id: int | None = None) -> SnapshotInfo:
        """Tag snapshot `snapshot_id` (the newest by default); the snapshot tagged. AlreadyExistsError when the
        table has a tag of that name, NotFoundError when it has no such snapshot (or none yet)."""
        return SnapshotInfo.from_proto(self._conn.catalog_client.create_tag(identifier, tag, snapshot_id))

    def list_tags(self, identifier: str) -> list[str]:
        """The names of the table's tags, sorted."""
        return self._conn.catalog_client.list_tags(identifier)

    def tag(self, identifier: str, tag: str) -> SnapshotInfo:
        """The snapshot tag `tag` names; NotFoundError when there is no such tag."""
        return SnapshotInfo.from_proto(self._conn.catalog_client.get_tag(identifier, tag))

    def delete_tag(self, identifier: str, tag: str) -> None:
        """Delete the tag; its snapshot then expires as any other. NotFoundError when there is no such tag."""
        self._conn.catalog_client.delete_tag(identifier, tag)
