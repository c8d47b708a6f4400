"""Whether a service answers the gRPC health check as SERVING: the poll every process-level test waits on."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def serving(channel: grpc.Channel, timeout_s: float = 1.0) -> bool:
    """True when the service behind `channel` says SERVING; False while it is down, starting or not serving."""
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
    except grpc.RpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING
