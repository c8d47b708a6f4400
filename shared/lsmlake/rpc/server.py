"""What the three services share about being a gRPC server: the server with health checking, reflection,
TLS and token checking, limits on open streams and calls (`rpc_limits`), the SERVING switch, and running
until a signal."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Mapping
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from lsmlake.errors import InvalidInputError
from lsmlake.rpc.errors import UndecodableRequests
from lsmlake.rpc.health import HealthServicer
from lsmlake.rpc.limits import RpcLimits
from lsmlake.rpc.security import ServerSecurity
from lsmlake.runtime.log_limit import flush_all

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


def int_or_none(text: str | None) -> int | None:
    """An optional integer setting from the environment."""
    return None if text in (None, "") else int(text)


def run_until_signal(server: Any, name: str, host: str) -> int:
    """Start a service (`start()` returns its port; `stop()` shuts it down gracefully), print where it listens,
    run until SIGTERM or SIGINT, then stop it; the exit code. A failed start stops what did start."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        port = server.start()
    except BaseException:
        server.stop()
        raise
    print(f"{name} listening on {host}:{port}", flush=True)
    if getattr(server, "metrics_port", None) is not None:
        print(f"{name} metrics on http://{host}:{server.metrics_port}/metrics", flush=True)
    while not stop.wait(1.0):  # bounded waits keep the main thread responsive to signals
        pass
    logging.getLogger(__name__).info("%s shutting down", name)
    server.stop()
    flush_all()  # the counts of log lines held back (refused calls) are not lost
    return 0


def add_security_arguments(p: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """The flags of a service's TLS, tokens (`ServerSecurity`) and plaintext health port."""
    ServerSecurity.add_arguments(p, env)
    p.add_argument("--health-port", type=int, default=int_or_none(env.get("LSMLAKE_HEALTH_PORT")),
                   help="also answer health checks in plaintext on this port, for probes that cannot speak TLS "
                        "(env LSMLAKE_HEALTH_PORT; 0 picks one); off when not set")


def add_limit_arguments(p: argparse.ArgumentParser, env: Mapping[str, str], workers: int) -> None:
    """The flags of a server's worker threads and its limits on open streams and calls (`RpcLimits`);
    `workers` is the service's default thread count."""
    RpcLimits.add_arguments(p, env, workers)


def limits_from_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> tuple[int, RpcLimits]:
    """The worker count and `RpcLimits` of parsed flags; limits that cannot work are a usage error."""
    return RpcLimits.from_args(p, a)


def security_from_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> ServerSecurity:
    """The `ServerSecurity` of parsed flags, every file read once; a bad setting is a usage error."""
    try:
        security = ServerSecurity.from_args(a)
        security.check()
    except InvalidInputError as e:
        p.error(str(e))
    if a.health_port is not None and not 0 <= a.health_port <= 65535:
        p.error(f"--health-port {a.health_port} is not a port number")
    return security
