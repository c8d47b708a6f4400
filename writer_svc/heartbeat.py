"""The writer's heartbeat to the catalog (`StatusService`): who it is, where it listens, its commit user."""

from __future__ import annotations

from lsmlake.proto_gen.lsmlake.v1 import status_pb2
from lsmlake.rpc.catalog_client import CatalogClient
from lsmlake.rpc.heartbeat import HeartbeatSender, interval_from_env


def writer_report(writer_id: str, address: str, commit_user: str) -> status_pb2.HeartbeatRequest:
    return status_pb2.HeartbeatRequest(kind=status_pb2.SERVICE_KIND_WRITER, instance_id=writer_id, address=address,
                                       detail=f"commit user {commit_user}")


def writer_heartbeat(client: CatalogClient, writer_id: str, address: str, commit_user: str,
                     interval_s: float | None = None) -> HeartbeatSender:
    """A sender (not started) of this writer's heartbeats."""
    return HeartbeatSender(client, lambda: writer_report(writer_id, address, commit_user),
                           interval_from_env() if interval_s is None else interval_s)
