"""The catalog service process: settings, the gRPC server with health checking, and graceful shutdown."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from ..catalog import FileSystemCatalog
from ..errors import InvalidInputError
from ..metastore import MetaStore, open_store
from ..proto_gen.lsmlake.v1 import catalog_pb2, catalog_pb2_grpc
from .relay import OutboxRelay
from .servicer import CatalogService

_log = logging.getLogger(__name__)

SERVICE_NAME = catalog_pb2.DESCRIPTOR.services_by_name["CatalogService"].full_name
HOST = "127.0.0.1"
METASTORE_FILE = "_lsmlake_catalog.sqlite"


@dataclass(frozen=True)
class Settings:
    """Settings of one catalog service process, read once from flags and environment."""

    warehouse: str
    metastore: str
    port: int = 0  # 0: pick a free port
    kafka: str | None = None
    grace_s: float = 10.0
    workers: int = 16
    max_message_bytes: int = 64 * 1024 * 1024

    @staticmethod
    def from_args(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> Settings:
        """Flags win over `LSMLAKE_WAREHOUSE`, `LSMLAKE_METASTORE`, `LSMLAKE_CATALOG_PORT`, `LSMLAKE_KAFKA`."""
        env = dict(os.environ if env is None else env)
        p = argparse.ArgumentParser(prog="catalog-svc", description="lsmlake catalog service (gRPC)")
        p.add_argument("--warehouse", default=env.get("LSMLAKE_WAREHOUSE"),
                       help="warehouse folder or pyarrow.fs URI")
        p.add_argument("--metastore", default=env.get("LSMLAKE_METASTORE"),
                       help=f"sqlite:///path or postgresql://...; default: {METASTORE_FILE} in a local warehouse")
        p.add_argument("--port", type=int, default=int(env.get("LSMLAKE_CATALOG_PORT", "0")),
                       help="port on 127.0.0.1; 0 picks a free one (printed)")
        p.add_argument("--kafka", default=env.get("LSMLAKE_KAFKA") or None, help="Kafka bootstrap host:port")
        p.add_argument("--grace", type=float, default=10.0, help="seconds for in-flight RPCs at shutdown")
        a = p.parse_args(argv)
        if not a.warehouse:
            p.error("--warehouse (or LSMLAKE_WAREHOUSE) is required")
        if not 0 <= a.port <= 65535:
            p.error(f"--port {a.port} is not a port number")
        metastore = a.metastore
        if not metastore:
            if "://" in a.warehouse and not a.warehouse.startswith("file://"):
                p.error("--metastore is required for a remote warehouse")
            local = a.warehouse.removeprefix("file://")
            metastore = f"sqlite:///{os.path.abspath(os.path.join(local, METASTORE_FILE))}"
        return Settings(warehouse=a.warehouse, metastore=metastore, port=a.port, kafka=a.kafka, grace_s=a.grace)


class CatalogServer:
    """The running service: store, warehouse, relay, gRPC server and health, started and stopped in order."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.health = health.HealthServicer()
        self.port = 0
        self._store: MetaStore | None = None
        self._relay: OutboxRelay | None = None
        self._server: grpc.Server | None = None

    def start(self) -> int:
        """Start serving; health turns SERVING only once the store and the warehouse are open. The port."""
        s = self.settings
        opts = [("grpc.max_receive_message_length", s.max_message_bytes),
                ("grpc.max_send_message_length", s.max_message_bytes)]
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=s.workers), options=opts)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.port = server.add_insecure_port(f"{HOST}:{s.port}")
        if self.port == 0:
            raise InvalidInputError(f"cannot listen on {HOST}:{s.port}")
        self._server = server
        self._store = open_store(s.metastore)
        catalog = FileSystemCatalog(s.warehouse)
        catalog.io.mkdirs(catalog.root)
        self._relay = OutboxRelay(self._store, s.kafka)
        catalog_pb2_grpc.add_CatalogServiceServicer_to_server(
            CatalogService(catalog, self._store, on_commit=self._relay.wake), server)
        server.start()
        self._relay.start()
        for name in ("", SERVICE_NAME):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        return self.port

    def stop(self) -> None:
        """Graceful shutdown.

        1. health NOT_SERVING, so load balancers stop sending requests;
        2. stop intake and give in-flight RPCs (commits) `grace_s` to finish;
        3. stop the relay (its current publish ends within its timeout);
        4. close the metadata store.
        """
        self.health.enter_graceful_shutdown()
        if self._server is not None:
            self._server.stop(self.settings.grace_s).wait(self.settings.grace_s + 5)
        if self._relay is not None:
            self._relay.stop()
        if self._store is not None:
            self._store.close()


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT, then shut down gracefully; the exit code."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = CatalogServer(settings)
    try:
        port = server.start()
    except BaseException:
        server.stop()
        raise
    print(f"catalog_svc listening on {HOST}:{port}", flush=True)
    while not stop.wait(1.0):  # bounded waits keep the main thread responsive to signals
        pass
    _log.info("shutting down")
    server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `catalog-svc` and `python -m lsmlake.catalog_svc`."""
    logging.basicConfig(level=os.environ.get("LSMLAKE_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
    return serve(Settings.from_args(argv))
