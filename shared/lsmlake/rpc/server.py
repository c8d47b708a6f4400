"""What the three services share about being a gRPC server: the server with health checking, reflection,
TLS and token checking, limits on open streams and calls (`limits`), and the SERVING switch. The process
around it (flags, start and stop order, running until a signal) is `service_main`'s."""

from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from lsmlake.errors import InvalidInputError
from lsmlake.rpc.errors import UndecodableRequests
from lsmlake.rpc.health_service import HealthServicer
from lsmlake.rpc.limits import RpcLimits
from lsmlake.rpc.security import ServerSecurity

HEALTH_WORKERS = 2  # threads of the plaintext health server


def new_server(service_name: str, health_servicer: HealthServicer | health.HealthServicer, host: str, port: int,
               workers: int,
               max_message_bytes: int = 64 << 20,
               security: ServerSecurity | None = None,
               limits: RpcLimits | None = None) -> tuple[grpc.Server, int]:
    """A gRPC server bound to host:port (0 picks a free port) with health (NOT_SERVING until `set_serving`) and
    reflection, serving TLS and checking tokens as `security` says, with `workers` threads and the `limits` on
    open streams and calls (defaults derived from `workers`; InvalidInputError when they cannot work); the
    service itself is added by the caller. The server and its port.

    `health_servicer` should be lsmlake's `HealthServicer`: grpcio's deadlocks when a Watch stream closes
    while a status is being set (see `health_service`)."""
    security = security or ServerSecurity()
    limits = limits or RpcLimits()
    opts = [("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes)]
    # order matters: the token check outermost, then undecodable bytes, then the stream limits (they need the
    # principal the token check found)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=opts,
                         interceptors=[*security.interceptors(), UndecodableRequests(),
                                       limits.interceptor(workers, security.auth_tokens is not None)],
                         **limits.server_options(workers))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    set_serving(health_servicer, service_name, False)
    reflection.enable_server_reflection((service_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    credentials = security.credentials()
    address = f"{host}:{port}"
    bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    if bound == 0:
        raise InvalidInputError(f"cannot listen on {host}:{port}")
    return server, bound


def new_health_server(health_servicer: HealthServicer | health.HealthServicer, host: str, port: int,
                      limits: RpcLimits | None = None) -> tuple[grpc.Server, int]:
    """A plaintext server answering only health checks, for probes that cannot speak TLS (the kubelet's gRPC
    probes) when the service itself serves TLS. Its Watch streams are capped by `limits.max_watch_streams`, the
    other limits are those of its own small pool. Started here; the server and its port."""
    own = RpcLimits(max_watch_streams=(limits or RpcLimits()).max_watch_streams)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=HEALTH_WORKERS),
                         interceptors=[UndecodableRequests(), own.interceptor(HEALTH_WORKERS)],
                         **own.server_options(HEALTH_WORKERS))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise InvalidInputError(f"cannot listen on {host}:{port} (health port)")
    server.start()
    return server, bound


def set_serving(health_servicer: HealthServicer | health.HealthServicer, service_name: str, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", service_name):
        health_servicer.set(name, status)
