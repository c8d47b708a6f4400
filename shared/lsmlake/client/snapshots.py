"""A table's snapshots through the catalog: list them, find one by time, expire old ones."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from lsmlake.client.connection import Connection
from lsmlake.client.tables import table_ident
from lsmlake.proto_gen.lsmlake.v1 import catalog_pb2, common_pb2
from lsmlake.rpc.convert import KIND_FROM_PROTO


@dataclass(frozen=True, repr=False)
class SnapshotInfo:
    """One snapshot of a table, without its file lists."""

    id: int
    schema_id: int
    commit_kind: str  # APPEND, COMPACT, OVERWRITE, ANALYZE
    commit_user: str
    commit_identifier: int
    time_millis: int
    total_record_count: int
    delta_record_count: int
    properties: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def from_proto(p: common_pb2.Snapshot) -> SnapshotInfo:
        return SnapshotInfo(p.id, p.schema_id, KIND_FROM_PROTO.get(p.commit_kind, "UNKNOWN"), p.commit_user,
                            p.commit_identifier, p.time_millis, p.total_record_count, p.delta_record_count,
                            dict(p.properties))

    def __repr__(self) -> str:
        when = dt.datetime.fromtimestamp(self.time_millis / 1000, dt.UTC).isoformat(timespec="milliseconds")
        return (f"SnapshotInfo(id={self.id}, {self.commit_kind}, {when.replace('+00:00', 'Z')}, "
                f"total_record_count={self.total_record_count}, delta_record_count={self.delta_record_count})")


@dataclass(frozen=True, repr=False)
class ExpireResult:
    """What an expiration removed."""

    expired_snapshot_ids: tuple[int, ...]
    deleted_data_files: int
    deleted_metadata_files: int

    def __repr__(self) -> str:
        ids = self.expired_snapshot_ids
        which = f"{ids[0]}..{ids[-1]}" if len(ids) > 2 else ", ".join(map(str, ids))
        return (f"ExpireResult({len(ids)} snapshots expired [{which}], deleted_data_files={self.deleted_data_files}, "
                f"deleted_metadata_files={self.deleted_metadata_files})")


class Snapshots:
    """A table's snapshots (a part of `Client`)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def snapshots(self, identifier: str) -> list[SnapshotInfo]:
        """The kept snapshots, oldest first."""
        req = catalog_pb2.ListSnapshotsRequest(table=table_ident(identifier))
        reply = self._conn.call(self._conn.catalog.ListSnapshots, req, changes_state=False)
        return [SnapshotInfo.from_proto(s) for s in reply.snapshots]

    def latest_snapshot(self, identifier: str) -> SnapshotInfo | None:
        """The newest snapshot; None while the table has none."""
        req = catalog_pb2.LatestSnapshotRequest(table=table_ident(identifier))
        reply = self._conn.call(self._conn.catalog.LatestSnapshot, req, changes_state=False)
        return SnapshotInfo.from_proto(reply.snapshot) if reply.HasField("snapshot") else None

    def snapshot_at(self, identifier: str, time_millis: int) -> SnapshotInfo | None:
        """The newest snapshot committed at or before `time_millis` (ms since the epoch), for time travel;
        None when the table has none that old."""
        req = catalog_pb2.SnapshotAtTimeRequest(table=table_ident(identifier), time_millis=time_millis)
        reply = self._conn.call(self._conn.catalog.SnapshotAtTime, req, changes_state=False)
        return SnapshotInfo.from_proto(reply.snapshot) if reply.HasField("snapshot") else None

    def expire(self, identifier: str, *, retain_min: int | None = None, retain_max: int | None = None,
               older_than_ms: int | None = None, max_deletes: int | None = None) -> ExpireResult:
        """Expire old snapshots and the files only they reference; unset limits use the table's `snapshot.*` options.
        `older_than_ms` keeps snapshots younger than that (within the two retain limits)."""
        req = catalog_pb2.ExpireSnapshotsRequest(table=table_ident(identifier))
        for name, value in (("retain_min", retain_min), ("retain_max", retain_max),
                            ("time_retained_ms", older_than_ms), ("max_deletes", max_deletes)):
            if value is not None:
                setattr(req, name, value)
        reply = self._conn.call(self._conn.catalog.ExpireSnapshots, req, changes_state=True)
        return ExpireResult(tuple(reply.expired_snapshot_ids), reply.deleted_data_files, reply.deleted_metadata_files)
