"""What the three service processes do the same way, around what each of them runs.

- the common settings (`ServiceSettings`) and their flags: where to listen, TLS and tokens, the plaintext
  health port, worker threads and limits on open streams and calls, metrics, the shutdown grace, Kafka
  security, and with `catalog_client` the TLS and token of the service's calls to the catalog;
- `ServiceProcess`: the gRPC server with health checking, the plaintext health port and the metrics
  endpoint, started and stopped in one order, with hooks where each service adds its parts;
- `run_until_signal`: serve until SIGTERM or SIGINT, then shut down gracefully.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import grpc
from prometheus_client import CollectorRegistry

from lsmlake.errors import InvalidInputError
from lsmlake.kafka.client import configure_security
from lsmlake.kafka.security import KafkaSecurity
from lsmlake.rpc.health_service import HealthServicer
from lsmlake.rpc.limits import RpcLimits
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from lsmlake.rpc.server import new_health_server, new_server, set_serving
from lsmlake.runtime.log_limit import flush_all
from lsmlake.runtime.observability import MetricsEndpoint

HOST = "127.0.0.1"
CATALOG_FLAGS = "catalog-"  # the prefix of the flags of a service's calls to the catalog


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    """The settings every service process has; a service's `Settings` adds its own (and its defaults)."""

    port: int = 0  # 0: pick a free port
    host: str = HOST
    grace_s: float = 30.0  # for in-flight calls at shutdown
    workers: int = 8
    limits: RpcLimits = field(default_factory=RpcLimits)  # open streams and calls (docs/security.md)
    max_message_bytes: int = 64 << 20
    metrics_port: int | None = None  # None: no metrics endpoint; 0: a free port
    security: ServerSecurity = field(default_factory=ServerSecurity)
    health_port: int | None = None  # plaintext health checks for probes that cannot speak TLS
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)


def int_or_none(text: str | None) -> int | None:
    """An optional integer setting from the environment."""
    return None if text in (None, "") else int(text)


def add_service_arguments(p: argparse.ArgumentParser, env: Mapping[str, str], *, port_env: str, host_env: str,
                          workers: int, grace_s: float, grace_help: str, catalog_client: bool = False) -> None:
    """The flags of `ServiceSettings`: `--port` (env `port_env`), `--host` (env `host_env`), `--grace`,
    `--metrics-port` (env LSMLAKE_METRICS_PORT), those of TLS and tokens, of the plaintext health port, of
    the worker threads (default `workers`) and limits and of Kafka security; with `catalog_client`, those
    of the service's calls to the catalog (`--catalog-tls-ca`, ..., env `LSMLAKE_CATALOG_*`)."""
    p.add_argument("--port", type=int, default=int(env.get(port_env, "0")),
                   help=f"port to listen on (env {port_env}); 0 picks a free one (printed)")
    p.add_argument("--host", default=env.get(host_env, HOST),
                   help=f"address to listen on (env {host_env}; 0.0.0.0 in a container)")
    p.add_argument("--grace", type=float, default=grace_s, help=grace_help)
    p.add_argument("--metrics-port", type=int, default=int_or_none(env.get("LSMLAKE_METRICS_PORT")),
                   help="serve Prometheus metrics on this port (env LSMLAKE_METRICS_PORT; 0 picks one); off when "
                        "not set")
    ServerSecurity.add_arguments(p, env)
    p.add_argument("--health-port", type=int, default=int_or_none(env.get("LSMLAKE_HEALTH_PORT")),
                   help="also answer health checks in plaintext on this port, for probes that cannot speak TLS "
                        "(env LSMLAKE_HEALTH_PORT; 0 picks one); off when not set")
    RpcLimits.add_arguments(p, env, workers)
    if catalog_client:
        ChannelSecurity.add_arguments(p, env, CATALOG_FLAGS, "LSMLAKE_CATALOG_", "the catalog")
    KafkaSecurity.add_arguments(p, env)


def service_settings(p: argparse.ArgumentParser, a: argparse.Namespace,
                     catalog_client: bool = False) -> dict[str, Any]:
    """The `ServiceSettings` of parsed flags (and `catalog_security` with `catalog_client`), as keyword
    arguments of a service's `Settings`; every file is read once, and a bad setting is a usage error."""
    try:
        security = ServerSecurity.from_args(a)
        security.check()
    except InvalidInputError as e:
        p.error(str(e))
    if a.health_port is not None and not 0 <= a.health_port <= 65535:
        p.error(f"--health-port {a.health_port} is not a port number")
    workers, limits = RpcLimits.from_args(p, a)
    out: dict[str, Any] = {}
    try:
        if catalog_client:
            out["catalog_security"] = ChannelSecurity.from_args(a, CATALOG_FLAGS)
        kafka_security = KafkaSecurity.from_args(a)
    except InvalidInputError as e:
        p.error(str(e))
    out.update(port=a.port, host=a.host, grace_s=a.grace, workers=workers, limits=limits,
               metrics_port=a.metrics_port, security=security, health_port=a.health_port,
               kafka_security=kafka_security)
    return out


S = TypeVar("S", bound=ServiceSettings)


class ServiceProcess(Generic[S]):
    """One service process: its gRPC server (health, reflection, TLS, tokens, limits), plaintext health
    port and metrics endpoint, started and stopped in one order around the service's own parts.

    `start()`: Kafka security; `_prepare()`; the server (NOT_SERVING) and the health port; `_open(server)`,
    which adds the service; the metrics endpoint; the server starts; `_run()`; SERVING.
    `stop()`: NOT_SERVING, so load balancers stop sending calls; `_refuse()`; in-flight calls get `grace_s`;
    the health port closes; `_stop_parts()`; the metrics endpoint closes; `_close()`.
    """

    service_name: ClassVar[str]  # the gRPC service's full name, whose health is reported

    def __init__(self, settings: S, registry: CollectorRegistry) -> None:
        self.settings = settings
        self.health = HealthServicer()  # lsmlake's: grpcio's can deadlock (lsmlake.rpc.health_service)
        self.registry = registry
        self.port = 0
        self.metrics_port: int | None = None
        self.health_port: int | None = None
        self._server: grpc.Server | None = None
        self._health_server: grpc.Server | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None

    def start(self) -> int:
        """Start serving; health turns SERVING only once every part of the service runs. The port."""
        s = self.settings
        configure_security(s.kafka_security)
        self._prepare()
        server, self.port = new_server(self.service_name, self.health, s.host, s.port, s.workers,
                                       s.max_message_bytes, s.security, s.limits)
        self._server = server
        if s.health_port is not None:
            self._health_server, self.health_port = new_health_server(self.health, s.host, s.health_port, s.limits)
        self._open(server)
        if s.metrics_port is not None:
            self._metrics_endpoint = MetricsEndpoint(self.registry, s.host, s.metrics_port)
            self.metrics_port = self._metrics_endpoint.start()
        server.start()
        self._run()
        set_serving(self.health, self.service_name, True)
        return self.port

    def stop(self) -> None:
        """Graceful shutdown, in the order of the class's docstring; what did not start is skipped."""
        self.health.enter_graceful_shutdown()
        self._refuse()
        if self._server is not None:
            self._server.stop(self.settings.grace_s).wait(self.settings.grace_s + 5)
        if self._health_server is not None:
            self._health_server.stop(0)
        self._stop_parts()
        if self._metrics_endpoint is not None:
            self._metrics_endpoint.stop()
        self._close()

    def _prepare(self) -> None:
        """Before the server exists (what is best started before gRPC has threads of its own)."""

    def _open(self, server: grpc.Server) -> None:
        """Open what the service needs and add its servicer to `server` (not started yet)."""
        raise NotImplementedError

    def _run(self) -> None:
        """Start the service's background work once the server takes calls."""

    def _refuse(self) -> None:
        """Before in-flight calls get their grace: what should end them early (streams that never end)."""

    def _stop_parts(self) -> None:
        """Stop the service's background work and clients, once no call is in flight."""

    def _close(self) -> None:
        """After the metrics endpoint closed: what the metrics read."""


def run_until_signal(server: ServiceProcess[Any], name: str, host: str) -> int:
    """Start a service, print where it listens, run until SIGTERM or SIGINT, then stop it; the exit code.
    A failed start stops what did start."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        port = server.start()
    except BaseException:
        server.stop()
        raise
    print(f"{name} listening on {host}:{port}", flush=True)
    if server.metrics_port is not None:
        print(f"{name} metrics on http://{host}:{server.metrics_port}/metrics", flush=True)
    while not stop.wait(1.0):  # bounded waits keep the main thread responsive to signals
        pass
    logging.getLogger(__name__).info("%s shutting down", name)
    server.stop()
    flush_all()  # the counts of log lines held back (refused calls) are not lost
    return 0
