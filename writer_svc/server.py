"""The writer service process: settings, gRPC server, Kafka ingestion, health, metrics, graceful shutdown."""

from __future__ import annotations

import argparse
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from lsmlake.errors import InvalidInputError
from lsmlake.kafka.client import configure_security
from lsmlake.kafka.security import KafkaSecurity
from lsmlake.proto_gen.lsmlake.v1 import writer_pb2, writer_pb2_grpc
from lsmlake.rpc.health import HealthServicer
from lsmlake.rpc.limits import RpcLimits
from lsmlake.rpc.security import ChannelSecurity, ServerSecurity
from lsmlake.rpc.server import (
    add_limit_arguments,
    add_security_arguments,
    int_or_none,
    limits_from_args,
    new_health_server,
    new_server,
    run_until_signal,
    security_from_args,
    set_serving,
)
from lsmlake.runtime.observability import MetricsEndpoint, configure_logging
from writer_svc.catalog_client import CatalogClient
from writer_svc.kafka_ingest import IngestTopic, KafkaIngest, parse_ingest
from writer_svc.metrics import WriterMetrics
from writer_svc.servicer import WriterService
from writer_svc.stream_budget import DEFAULT_BUDGET_BYTES, DEFAULT_MAX_MESSAGES, positive_int
from writer_svc.tables import Tables

_log = logging.getLogger(__name__)

SERVICE_NAME = writer_pb2.DESCRIPTOR.services_by_name["WriterService"].full_name
HOST = "127.0.0.1"
WORKERS = 32


@dataclass(frozen=True)
class Settings:
    """Settings of one writer process, read once from flags and environment."""

    warehouse: str
    catalog: str  # host:port of the catalog service
    port: int = 0
    host: str = HOST
    kafka: str | None = None
    ingest: tuple[IngestTopic, ...] = field(default_factory=tuple)
    writer_id: str = field(default_factory=socket.gethostname)
    commit_interval_s: float = 1.0
    commit_rows: int = 1_000_000
    spill_dir: str | None = None
    grace_s: float = 30.0
    workers: int = WORKERS
    limits: RpcLimits = field(default_factory=RpcLimits)  # open streams and calls (docs/security.md)
    max_request_bytes: int = 256 << 20
    max_write_messages: int = DEFAULT_MAX_MESSAGES  # chunk messages per Write stream
    max_buffered_write_bytes: int = DEFAULT_BUDGET_BYTES  # bytes of all Write streams being read at once
    metrics_port: int | None = None
    max_poll_records: int = 20_000
    security: ServerSecurity = field(default_factory=ServerSecurity)
    health_port: int | None = None  # plaintext health checks for probes that cannot speak TLS
    catalog_security: ChannelSecurity = field(default_factory=ChannelSecurity)  # this writer's calls to the catalog
    kafka_security: KafkaSecurity = field(default_factory=KafkaSecurity)

    @staticmethod
    def from_args(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> Settings:
        """Flags win over `LSMLAKE_WAREHOUSE`, `LSMLAKE_CATALOG`, `LSMLAKE_WRITER_PORT`, `LSMLAKE_WRITER_HOST`,
        `LSMLAKE_KAFKA`, `LSMLAKE_INGEST` (comma-separated), `LSMLAKE_WRITER_ID`, `LSMLAKE_COMMIT_INTERVAL`,
        `LSMLAKE_SPILL_DIR`, `LSMLAKE_METRICS_PORT`, those of TLS, tokens and Kafka security and those of the
        worker threads and the limits on open streams and calls (`LSMLAKE_WORKERS`, ...; docs/security.md)."""
        env = dict(os.environ if env is None else env)
        p = argparse.ArgumentParser(prog="writer-svc", description="lsmlake writer service (gRPC and Kafka)")
        p.add_argument("--warehouse", default=env.get("LSMLAKE_WAREHOUSE"), help="warehouse folder or URI")
        p.add_argument("--catalog", default=env.get("LSMLAKE_CATALOG"), help="catalog service host:port")
        p.add_argument("--port", type=int, default=int(env.get("LSMLAKE_WRITER_PORT", "0")))
        p.add_argument("--host", default=env.get("LSMLAKE_WRITER_HOST", HOST))
        p.add_argument("--kafka", default=env.get("LSMLAKE_KAFKA") or None, help="Kafka bootstrap host:port")
        p.add_argument("--ingest", action="append", default=None,
                       help="db.table[:json|debezium] to consume from topic lake.ingest.<db>.<table>; repeatable")
        p.add_argument("--writer-id", default=env.get("LSMLAKE_WRITER_ID") or socket.gethostname())
        p.add_argument("--commit-interval", type=float, default=float(env.get("LSMLAKE_COMMIT_INTERVAL", "1.0")),
                       help="seconds between group commits of a table")
        p.add_argument("--commit-rows", type=int, default=1_000_000, help="commit as soon as this many rows wait")
        p.add_argument("--max-poll-records", type=int, default=20_000, help="Kafka records per poll")
        p.add_argument("--max-write-messages", type=positive_int, default=DEFAULT_MAX_MESSAGES,
                       help="chunk messages per Write stream")
        p.add_argument("--max-buffered-write-bytes", type=positive_int, default=DEFAULT_BUDGET_BYTES,
                       help="bytes of all Write streams buffered at once")
        p.add_argument("--spill-dir", default=env.get("LSMLAKE_SPILL_DIR") or None)
        p.add_argument("--grace", type=float, default=30.0, help="seconds for in-flight writes at shutdown")
        p.add_argument("--metrics-port", type=int, default=int_or_none(env.get("LSMLAKE_METRICS_PORT")))
        add_security_arguments(p, env)
        add_limit_arguments(p, env, WORKERS)
        ChannelSecurity.add_arguments(p, env, "catalog-", "LSMLAKE_CATALOG_", "the catalog")
        KafkaSecurity.add_arguments(p, env)
        a = p.parse_args(argv)
        security = security_from_args(p, a)
        workers, limits = limits_from_args(p, a)
        try:
            catalog_security = ChannelSecurity.from_args(a, "catalog-")
            kafka_security = KafkaSecurity.from_args(a)
        except InvalidInputError as e:
            p.error(str(e))
        if not a.warehouse or not a.catalog:
            p.error("--warehouse and --catalog are required")
        specs = a.ingest if a.ingest is not None else [s for s in env.get("LSMLAKE_INGEST", "").split(",") if s]
        try:
            ingest = tuple(parse_ingest(s) for s in specs)
        except InvalidInputError as e:
            p.error(str(e))
        if ingest and not a.kafka:
            p.error("--ingest needs --kafka")
        if a.commit_interval <= 0:
            p.error("--commit-interval must be positive")
        return Settings(warehouse=a.warehouse, catalog=a.catalog, port=a.port, host=a.host, kafka=a.kafka,
                        ingest=ingest, writer_id=a.writer_id, commit_interval_s=a.commit_interval,
                        commit_rows=a.commit_rows, spill_dir=a.spill_dir, grace_s=a.grace,
                        metrics_port=a.metrics_port, max_poll_records=a.max_poll_records, security=security,
                        health_port=a.health_port, catalog_security=catalog_security,
                        kafka_security=kafka_security, max_write_messages=a.max_write_messages,
                        max_buffered_write_bytes=a.max_buffered_write_bytes, workers=workers, limits=limits)



class WriterServer:
    """gRPC server, tables with their committers, Kafka ingestion; started and stopped in order."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.health = HealthServicer()  # lsmlake's: grpcio's can deadlock (health_service)
        self.metrics = WriterMetrics()
        self.port = 0
        self.metrics_port: int | None = None
        self._server: grpc.Server | None = None
        self._client: CatalogClient | None = None
        self._tables: Tables | None = None
        self._kafka: KafkaIngest | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None
        self._health_server: grpc.Server | None = None
        self.health_port: int | None = None

    def start(self) -> int:
        s = self.settings
        configure_security(s.kafka_security)
        server, self.port = new_server(SERVICE_NAME, self.health, s.host, s.port, s.workers, security=s.security,
                                       limits=s.limits)
        self._server = server
        if s.health_port is not None:
            self._health_server, self.health_port = new_health_server(self.health, s.host, s.health_port,
                                                                      s.limits)
        self._client = CatalogClient(s.catalog, security=s.catalog_security)
        self._tables = Tables(s.warehouse, self._client, self.metrics, s.writer_id, s.commit_interval_s,
                              s.commit_rows, s.spill_dir)
        writer_pb2_grpc.add_WriterServiceServicer_to_server(
            WriterService(self._tables, self.metrics, s.max_request_bytes, s.max_write_messages,
                          s.max_buffered_write_bytes), server)
        if s.metrics_port is not None:
            self._metrics_endpoint = MetricsEndpoint(self.metrics.registry, s.host, s.metrics_port)
            self.metrics_port = self._metrics_endpoint.start()
        server.start()
        if s.ingest:
            assert s.kafka is not None
            self._kafka = KafkaIngest(s.kafka, s.ingest, s.warehouse, self._client, self.metrics,
                                      f"{s.writer_id}-kafka", s.commit_interval_s, s.spill_dir,
                                      max_poll_records=s.max_poll_records).start()
        set_serving(self.health, SERVICE_NAME, True)
        return self.port

    def stop(self) -> None:
        """Graceful shutdown.

        1. health NOT_SERVING; stop taking new RPCs and give in-flight writes `grace_s` to be committed
           (the committers keep running meanwhile);
        2. Kafka ingestion commits what it holds, then its consumed offsets, and leaves the group;
        3. every table commits what it still holds; rows that cannot be committed are rejected, never dropped
           silently (their requests get an error);
        4. close the catalog channel and the metrics endpoint.
        """
        self.health.enter_graceful_shutdown()
        if self._server is not None:
            self._server.stop(self.settings.grace_s).wait(self.settings.grace_s + 5)
        if self._health_server is not None:
            self._health_server.stop(0)
        if self._kafka is not None:
            self._kafka.stop()
        if self._tables is not None:
            self._tables.close()
        if self._client is not None:
            self._client.close()
        if self._metrics_endpoint is not None:
            self._metrics_endpoint.stop()


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT, then shut down gracefully; the exit code."""
    return run_until_signal(WriterServer(settings), "writer_svc", settings.host)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `writer-svc` and `python -m writer_svc`."""
    configure_logging("writer_svc")
    return serve(Settings.from_args(argv))
