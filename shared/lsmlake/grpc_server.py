"""What the three services share about being a gRPC server: the server with health checking and
reflection, the SERVING switch, and running until a signal."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from .errors import InvalidInputError


def new_server(service_name: str, health_servicer: health.HealthServicer, host: str, port: int, workers: int,
               max_message_bytes: int = 64 << 20) -> tuple[grpc.Server, int]:
    """A gRPC server bound to host:port (0 picks a free port) with health (NOT_SERVING until `set_serving`) and
    reflection; the service itself is added by the caller. The server and its port."""
    opts = [("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=opts)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    set_serving(health_servicer, service_name, False)
    reflection.enable_server_reflection((service_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise InvalidInputError(f"cannot listen on {host}:{port}")
    return server, bound


def set_serving(health_servicer: health.HealthServicer, service_name: str, serving: bool) -> None:
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
    return 0
